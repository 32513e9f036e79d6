/* Lesson 05: the forward schedule. What does one GPU do, in order, to run forward?
 * The reference solution: ./fsdp lessons check 05 --file lessons/solutions/05-forward-schedule.c */
#include "exercise.h"

#include <stdlib.h>

/* The entries of forward: module_unit[m] is the unit of module m (modules in forward order).
 * Writes each entry's unit to entry_unit (room for nmodules) and returns how many. */
int unit_entries(const int *module_unit, int nmodules, int *entry_unit) {
    int n = 0;
    for (int m = 0; m < nmodules; m++)
        if (m == 0 || module_unit[m] != module_unit[m - 1]) entry_unit[n++] = module_unit[m];
    return n;
}

/* Where a unit's parameters are on this GPU. */
enum { SHARDED, GATHERING, GATHERED };

static int emit(Step *out, int n, int max, StepOp op, int unit) {
    if (n < max) out[n] = (Step){op, unit};
    return n + 1;
}

/* One GPU's forward, step by step: writes the steps to out (room for max) and returns how
 * many it wrote. */
int forward_steps(const ForwardSetup *s, Step *out, int max) {
    int *state = calloc((size_t)s->nunits + 1, sizeof *state); /* every unit starts sharded */
    if (!state) return 0;
    int n = 0;
    for (int i = 0; i < s->nentries; i++) {
        int u = s->entry_unit[i];
        /* not prefetched by an earlier entry: gather it now */
        if (state[u] == SHARDED) {
            n = emit(out, n, max, STEP_GATHER, u);
            state[u] = GATHERING;
        }
        /* start the next entries' gathers before computing, so they run during this one */
        for (int j = i + 1; j <= i + s->prefetch && j < s->nentries; j++) {
            int next = s->entry_unit[j];
            if (state[next] != SHARDED) continue;
            n = emit(out, n, max, STEP_GATHER, next);
            state[next] = GATHERING;
        }
        if (state[u] == GATHERING) {
            n = emit(out, n, max, STEP_WAIT_GATHER, u);
            state[u] = GATHERED;
        }
        n = emit(out, n, max, STEP_FORWARD, u);
        /* the root stays gathered: backward starts with it */
        if (s->reshard_after_forward && !s->is_root[u]) {
            n = emit(out, n, max, STEP_FREE, u);
            state[u] = SHARDED;
        }
    }
    free(state);
    return n < max ? n : max;
}
