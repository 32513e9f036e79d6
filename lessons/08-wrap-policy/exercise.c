/* Lesson 08: wrap granularity. How many units, how many collectives per step, how much
 * memory at the peak? */
#include "exercise.h"

/* Read lessons/08-wrap-policy/README.md, fill in the three TODOs, then run
 *   ./fsdp lessons check 08
 * Helpers you add should be `static`. */

/* Groups the modules into FSDP units under the policy: writes each module's unit to
 * module_unit (units numbered 0, 1, ... in the order forward first uses them) and the root
 * unit's number to *root_unit (-1: the policy leaves no root), and returns how many units
 * there are. */
int wrap_units(const ModuleSize *modules, int nmodules, Policy policy, int *module_unit,
               int *root_unit) {
    (void)modules, (void)nmodules, (void)policy, (void)module_unit; /* TODO: delete this line */
    *root_unit = -1;                                                /* TODO */
    return 0;                                                       /* TODO */
}

/* All-gathers plus reduce-scatters one GPU runs in one zero3 training step (resharding after
 * forward) of a model of nunits units, one of which is the root when has_root is 1. */
int collectives_per_step(int nunits, int has_root) {
    (void)nunits, (void)has_root; /* TODO: delete this line when you use them */
    return -1;                    /* TODO */
}

/* The most bytes of unsharded fp32 parameters one GPU holds at once in that step (prefetch 1),
 * for the modules grouped as wrap_units grouped them; a unit being prefetched counts only once
 * the GPU has waited for its all-gather (till then it is a comm buffer), as in lesson 07. */
size_t peak_gathered_bytes(const ModuleSize *modules, int nmodules, const int *module_unit,
                           int nunits, int root_unit) {
    (void)modules, (void)nmodules, (void)module_unit; /* TODO: delete these two lines */
    (void)nunits, (void)root_unit;
    return 0; /* TODO */
}
