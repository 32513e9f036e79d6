/* Lesson 08: wrap granularity. How many units, how many collectives per step, how much
 * memory at the peak?
 * The reference solution: ./fsdp lessons check 08 --file lessons/solutions/08-wrap-policy.c */
#include "exercise.h"

#include <stdlib.h>

/* The module's unit when it goes to the root: the root gets the next number the first time. */
static int root_of(int *root_unit, int *nunits) {
    if (*root_unit < 0) *root_unit = (*nunits)++;
    return *root_unit;
}

/* Groups the modules into FSDP units under the policy: writes each module's unit to
 * module_unit (units numbered 0, 1, ... in the order forward first uses them) and the root
 * unit's number to *root_unit (-1: the policy leaves no root), and returns how many units
 * there are. */
int wrap_units(const ModuleSize *modules, int nmodules, Policy policy, int *module_unit,
               int *root_unit) {
    int n = 0, blocks_in_unit = 0;
    size_t filled = 0; /* size:N: parameters in the unit being filled */
    *root_unit = -1;
    for (int m = 0; m < nmodules; m++) {
        int wraps_blocks = policy.kind == POLICY_LAYER || policy.kind == POLICY_BLOCK;
        if (policy.kind == POLICY_NONE || (wraps_blocks && !modules[m].is_block)) {
            module_unit[m] = root_of(root_unit, &n); /* what is left over is the root's */
        } else if (policy.kind == POLICY_LAYER) {
            module_unit[m] = n++;
        } else if (policy.kind == POLICY_BLOCK) {
            /* runs of consecutive blocks, K to a unit */
            int continues_run = m > 0 && modules[m - 1].is_block && blocks_in_unit > 0;
            if (!continues_run || blocks_in_unit == policy.arg) {
                n++;
                blocks_in_unit = 0;
            }
            module_unit[m] = n - 1;
            blocks_in_unit++;
        } else { /* size:N: consecutive modules, every one wrapped, until a unit reaches N */
            if (m == 0 || filled >= (size_t)policy.arg) {
                n++;
                filled = 0;
            }
            module_unit[m] = n - 1;
            filled += modules[m].numel;
        }
    }
    return n;
}

/* All-gathers plus reduce-scatters one GPU runs in one zero3 training step (resharding after
 * forward) of a model of nunits units, one of which is the root when has_root is 1. */
int collectives_per_step(int nunits, int has_root) {
    int gathers = nunits + (nunits - has_root); /* forward, and backward but the kept root */
    int reduces = nunits;                       /* one reduce-scatter per unit */
    return gathers + reduces;
}

/* The most bytes of unsharded fp32 parameters one GPU holds at once in that step (prefetch 1),
 * for the modules grouped as wrap_units grouped them; a unit being prefetched counts only once
 * the GPU has waited for its all-gather (till then it is a comm buffer), as in lesson 07. */
size_t peak_gathered_bytes(const ModuleSize *modules, int nmodules, const int *module_unit,
                           int nunits, int root_unit) {
    size_t *bytes = calloc((size_t)nunits + 1, sizeof *bytes);
    if (!bytes) return 0;
    for (int m = 0; m < nmodules; m++) bytes[module_unit[m]] += modules[m].numel * sizeof(float);
    /* the root stays whole all step; the others are whole one at a time (lesson 07) */
    size_t largest = 0;
    for (int u = 0; u < nunits; u++)
        if (u != root_unit && bytes[u] > largest) largest = bytes[u];
    size_t peak = largest + (root_unit >= 0 ? bytes[root_unit] : 0);
    free(bytes);
    return peak;
}
