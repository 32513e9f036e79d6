/* Lesson 05's functions: exercise.c defines them, check.c calls them. Do not edit. */
#ifndef LESSON_05_EXERCISE_H
#define LESSON_05_EXERCISE_H

/* What one GPU's code does in forward, one step at a time. */
typedef enum {
    STEP_GATHER,      /* starts the all-gather of a unit's shards; it runs on the comm stream */
    STEP_WAIT_GATHER, /* waits until that all-gather is done: the unit is whole on this GPU */
    STEP_FORWARD,     /* runs the unit's forward (all the unit's modules of one entry) */
    STEP_FREE,        /* frees the unit's gathered parameters: only its shard is left */
} StepOp;

typedef struct Step {
    StepOp op;
    int unit;
} Step;

/* Forward enters units in module order. A unit is usually entered once, but one whose
 * modules are not next to each other is entered once per run of them: the ViT's root unit
 * (patch embedding first, classification head last) is entered twice. */
typedef struct ForwardSetup {
    int nentries;
    const int *entry_unit; /* [nentries]: the unit of each entry, in forward order */
    int nunits;
    const int *is_root;        /* [nunits]: 1 for the root unit */
    int reshard_after_forward; /* free each unit's gathered parameters after its forward */
    int prefetch;              /* entries ahead whose all-gather is started early */
} ForwardSetup;

/* The entries of forward: module_unit[m] is the unit of module m (modules in forward order).
 * Writes each entry's unit to entry_unit (room for nmodules) and returns how many. */
int unit_entries(const int *module_unit, int nmodules, int *entry_unit);

/* One GPU's forward, step by step: writes the steps to out (room for max) and returns how
 * many it wrote. */
int forward_steps(const ForwardSetup *s, Step *out, int max);

#endif
