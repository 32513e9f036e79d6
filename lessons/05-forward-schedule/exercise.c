/* Lesson 05: the forward schedule. What does one GPU do, in order, to run forward? */
#include "exercise.h"

/* Read lessons/05-forward-schedule/README.md, fill in the two TODOs, then run
 *   ./fsdp lessons check 05
 * Helpers you add should be `static`. */

/* The entries of forward: module_unit[m] is the unit of module m (modules in forward order).
 * Writes each entry's unit to entry_unit (room for nmodules) and returns how many. */
int unit_entries(const int *module_unit, int nmodules, int *entry_unit) {
    (void)module_unit, (void)nmodules, (void)entry_unit; /* TODO: delete this line */
    return 0;                                            /* TODO */
}

/* One GPU's forward, step by step: writes the steps to out (room for max) and returns how
 * many it wrote. */
int forward_steps(const ForwardSetup *s, Step *out, int max) {
    (void)s, (void)out, (void)max; /* TODO: delete this line when you use them */
    return 0;                      /* TODO */
}
