/* Lesson 08's functions: exercise.c defines them, check.c calls them. Do not edit. */
#ifndef LESSON_08_EXERCISE_H
#define LESSON_08_EXERCISE_H

#include <stddef.h>

/* A wrap policy, as `--wrap` spells it: "layer", "block:K" (arg K), "size:N" (arg N),
 * "none". */
typedef enum { POLICY_LAYER, POLICY_BLOCK, POLICY_SIZE, POLICY_NONE } PolicyKind;

typedef struct Policy {
    PolicyKind kind;
    long arg; /* block:K: K blocks per unit; size:N: N parameters; else unused */
} Policy;

/* One module of the model, in forward order: its parameter count and whether it is a block
 * (the ViT's encoder layers, each of the toy's layers) or something else (the ViT's patch
 * embedding and head). */
typedef struct ModuleSize {
    size_t numel;
    int is_block;
} ModuleSize;

/* Groups the modules into FSDP units under the policy: writes each module's unit to
 * module_unit (units numbered 0, 1, ... in the order forward first uses them) and the root
 * unit's number to *root_unit (-1: the policy leaves no root), and returns how many units
 * there are. */
int wrap_units(const ModuleSize *modules, int nmodules, Policy policy, int *module_unit,
               int *root_unit);

/* All-gathers plus reduce-scatters one GPU runs in one zero3 training step (resharding after
 * forward) of a model of nunits units, one of which is the root when has_root is 1. */
int collectives_per_step(int nunits, int has_root);

/* The most bytes of unsharded fp32 parameters one GPU holds at once in that step (prefetch 1),
 * for the modules grouped as wrap_units grouped them; a unit being prefetched counts only once
 * the GPU has waited for its all-gather (till then it is a comm buffer), as in lesson 07. */
size_t peak_gathered_bytes(const ModuleSize *modules, int nmodules, const int *module_unit,
                           int nunits, int root_unit);

#endif
