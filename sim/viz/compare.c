/* compare: the event of another run of the same model and steps (DDP beside FSDP, the viewer's key
 * d and its memory bars' DDP marks) that is "the same moment" as an event of this one, rank by
 * rank. */
#include "sim/viz/compare.h"

int compare_is_compute(const TraceEvent *e) {
    return e->kind == EV_FORWARD || e->kind == EV_BACKWARD || e->kind == EV_RECOMPUTE ||
           e->kind == EV_OPTIMIZER;
}

int compare_is_shared(const TraceEvent *e) {
    if (compare_is_compute(e)) return 1;
    return (e->kind == EV_ALLOC || e->kind == EV_FREE) &&
           (e->category == MEM_ACTIVATIONS || e->category == MEM_AC_INPUT);
}

int compare_rank_point(const Trace *a, size_t index, const Trace *b, int rank, size_t *end,
                       Err *err) {
    if (index >= a->n)
        return err_set(err, ERR_USAGE, "event %zu is past the trace's %zu events", index, a->n);
    if (rank < 0 || rank >= a->nranks || rank >= b->nranks)
        return err_set(err, ERR_USAGE, "rank %d is not in both traces (%d and %d ranks)", rank,
                       a->nranks, b->nranks);
    /* a: how many shared events the rank has run, and whether its last event is one of them */
    size_t shared = 0;
    int on_shared = 0;
    for (size_t i = 0; i <= index; i++) {
        const TraceEvent *e = &a->ev[i];
        if (e->rank != rank) continue;
        on_shared = compare_is_shared(e);
        shared += (size_t)on_shared;
    }
    /* b: up to and including its shared-th shared event, or up to before the one after it */
    size_t want = on_shared ? shared : shared + 1, seen = 0, at = 0;
    for (size_t j = 0; j < b->n; j++) {
        const TraceEvent *e = &b->ev[j];
        if (e->rank != rank) continue;
        if (compare_is_shared(e) && ++seen == want) {
            at = on_shared ? j + 1 : at;
            *end = at;
            return 0;
        }
        at = j + 1;
    }
    *end = at; /* b has fewer: all of its events of the rank */
    return 0;
}

int compare_match(const Trace *a, size_t index, const Trace *b, size_t *out, Err *err) {
    if (index >= a->n)
        return err_set(err, ERR_USAGE, "event %zu is past the trace's %zu events", index, a->n);
    if (!b->n) return err_set(err, ERR_USAGE, "the trace to compare with has no events");
    int rank = a->ev[index].rank;
    size_t end = 0;
    int rc = compare_rank_point(a, index, b, rank, &end, err);
    if (rc) return rc;
    if (end) {
        *out = end - 1; /* the rank's last event run: the point computes it is at */
        return 0;
    }
    for (size_t j = 0; j < b->n; j++)
        if (b->ev[j].rank == rank) {
            *out = j;
            return 0;
        }
    return err_set(err, ERR_USAGE, "the trace to compare with has no events of rank %d", rank);
}
