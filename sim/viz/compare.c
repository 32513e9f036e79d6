/* compare: the event of another run of the same model and steps (DDP beside FSDP, the viewer's key
 * d) that is "the same moment" as an event of this one. */
#include "sim/viz/compare.h"

#include <stdint.h>
#include <stdlib.h>

int compare_is_compute(const TraceEvent *e) {
    return e->kind == EV_FORWARD || e->kind == EV_BACKWARD || e->kind == EV_OPTIMIZER;
}

static int rank_in(const TraceEvent *e, int nranks) {
    return e->rank >= 0 && e->rank < nranks;
}

int compare_match(const Trace *a, size_t index, const Trace *b, size_t *out, Err *err) {
    if (index >= a->n)
        return err_set(err, ERR_USAGE, "event %zu is past the trace's %zu events", index, a->n);
    if (!b->n) return err_set(err, ERR_USAGE, "the trace to compare with has no events");
    int nranks = a->nranks > b->nranks ? a->nranks : b->nranks;
    /* budget[q]: the computes rank q may still run in b (a's count, then spent walking b) */
    size_t *budget = calloc(nranks > 0 ? (size_t)nranks : 1, sizeof *budget);
    if (!budget) return err_set(err, ERR_NOMEM, "out of memory for %d ranks", nranks);
    for (size_t i = 0; i <= index; i++)
        if (compare_is_compute(&a->ev[i]) && rank_in(&a->ev[i], nranks)) budget[a->ev[i].rank]++;
    const TraceEvent *at = &a->ev[index];
    int same = compare_is_compute(at) && rank_in(at, nranks) ? at->rank : -1;
    size_t j = 0, same_compute = SIZE_MAX;
    for (; j < b->n; j++) {
        const TraceEvent *e = &b->ev[j];
        if (!compare_is_compute(e) || !rank_in(e, nranks)) continue;
        if (!budget[e->rank]) break; /* this compute would put b's rank past a's */
        if (--budget[e->rank] == 0 && e->rank == same) same_compute = j;
    }
    free(budget);
    /* a compute: the same compute of b, before what b does after it (its frees, DDP's
     * all-reduce); else j, the first event b may not reach (or b's end): the one before it,
     * or b's first event when b opens with a compute */
    *out = same_compute != SIZE_MAX ? same_compute : j ? j - 1 : 0;
    return 0;
}
