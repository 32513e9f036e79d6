/* compare: the event of another run of the same model and steps (DDP beside FSDP, the viewer's key
 * d and its memory bars' DDP marks) that is "the same moment" as an event of this one, rank by
 * rank. */
#include "sim/viz/compare.h"

#include <stdlib.h>

int compare_is_compute(const TraceEvent *e) {
    return e->kind == EV_FORWARD || e->kind == EV_BACKWARD || e->kind == EV_RECOMPUTE ||
           e->kind == EV_OPTIMIZER;
}

int compare_is_shared(const TraceEvent *e) {
    if (compare_is_compute(e)) return 1;
    return (e->kind == EV_ALLOC || e->kind == EV_FREE) &&
           (e->category == MEM_ACTIVATIONS || e->category == MEM_AC_INPUT);
}

/* A rank, as compare_points walks a and then b. */
typedef struct Walk {
    size_t want;   /* a: shared events run (b runs up to the want-th), or one more (to before it) */
    int on_shared; /* a: the rank's last event is a shared one */
    size_t seen;   /* b: shared events so far */
    size_t at;     /* b: just past the rank's last event so far */
    int done;      /* b: ends[rank] is set */
} Walk;

int compare_points(const Trace *a, size_t index, const Trace *b, size_t *ends, Err *err) {
    if (index >= a->n)
        return err_set(err, ERR_USAGE, "event %zu is past the trace's %zu events", index, a->n);
    if (a->nranks != b->nranks)
        return err_set(err, ERR_USAGE, "the traces have %d and %d ranks", a->nranks, b->nranks);
    int n = a->nranks;
    Walk *w = calloc(n > 0 ? (size_t)n : 1, sizeof *w);
    if (!w) return err_set(err, ERR_NOMEM, "out of memory for %d ranks", n);
    for (size_t i = 0; i <= index; i++) {
        const TraceEvent *e = &a->ev[i];
        if (e->rank < 0 || e->rank >= n) continue;
        w[e->rank].on_shared = compare_is_shared(e);
        w[e->rank].want += (size_t)w[e->rank].on_shared;
    }
    for (int r = 0; r < n; r++) w[r].want += !w[r].on_shared;
    for (size_t j = 0; j < b->n; j++) {
        const TraceEvent *e = &b->ev[j];
        if (e->rank < 0 || e->rank >= n || w[e->rank].done) continue;
        Walk *x = &w[e->rank];
        if (compare_is_shared(e) && ++x->seen == x->want) {
            ends[e->rank] = x->on_shared ? j + 1 : x->at;
            x->done = 1;
        }
        x->at = j + 1;
    }
    for (int r = 0; r < n; r++)
        if (!w[r].done) ends[r] = w[r].at; /* b has fewer: all of the rank's events */
    free(w);
    return 0;
}

int compare_rank_point(const Trace *a, size_t index, const Trace *b, int rank, size_t *end,
                       Err *err) {
    if (index >= a->n)
        return err_set(err, ERR_USAGE, "event %zu is past the trace's %zu events", index, a->n);
    if (rank < 0 || rank >= a->nranks || rank >= b->nranks)
        return err_set(err, ERR_USAGE, "rank %d is not in both traces (%d and %d ranks)", rank,
                       a->nranks, b->nranks);
    size_t *ends = calloc((size_t)a->nranks, sizeof *ends);
    if (!ends) return err_set(err, ERR_NOMEM, "out of memory for %d ranks", a->nranks);
    int rc = compare_points(a, index, b, ends, err);
    if (!rc) *end = ends[rank];
    free(ends);
    return rc;
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
