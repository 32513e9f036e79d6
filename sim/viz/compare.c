/* compare: the event of another run of the same model and steps (DDP beside FSDP, the viewer's key
 * d and its memory bars' DDP marks) that is "the same moment" as an event of this one, rank by
 * rank. */
#include "sim/viz/compare.h"

#include <stdlib.h>
#include <string.h>

int compare_is_compute(const TraceEvent *e) {
    return e->kind == EV_FORWARD || e->kind == EV_BACKWARD || e->kind == EV_RECOMPUTE ||
           e->kind == EV_OPTIMIZER;
}

int compare_is_shared(const TraceEvent *e) {
    if (compare_is_compute(e)) return 1;
    return (e->kind == EV_ALLOC || e->kind == EV_FREE) &&
           (e->category == MEM_ACTIVATIONS || e->category == MEM_AC_INPUT);
}

static int walk_alloc(CompareWalk *w, size_t nshared) {
    size_t n = (size_t)w->nranks + 1;
    w->first = calloc(n, sizeof *w->first);
    w->shared = calloc(nshared + 1, sizeof *w->shared);
    w->before = calloc(nshared + 1, sizeof *w->before);
    w->tail = calloc(n, sizeof *w->tail);
    w->head = calloc(n, sizeof *w->head);
    w->count = calloc(n, sizeof *w->count);
    w->on_shared = calloc(n, sizeof *w->on_shared);
    return w->first && w->shared && w->before && w->tail && w->head && w->count && w->on_shared;
}

/* b's shared events rank by rank (a counting sort: how many each rank has, then where each is). */
int compare_walk_init(CompareWalk *w, const Trace *a, const Trace *b, Err *err) {
    *w = (CompareWalk){.a = a, .b = b, .nranks = a->nranks > 0 ? a->nranks : 0};
    int n = w->nranks;
    size_t nshared = 0;
    for (size_t j = 0; j < b->n; j++)
        nshared += b->ev[j].rank >= 0 && b->ev[j].rank < n && compare_is_shared(&b->ev[j]);
    if (!walk_alloc(w, nshared)) {
        compare_walk_free(w);
        return err_set(err, ERR_NOMEM, "out of memory for %d ranks", n);
    }
    for (size_t j = 0; j < b->n; j++) {
        const TraceEvent *e = &b->ev[j];
        if (e->rank >= 0 && e->rank < n && compare_is_shared(e)) w->first[e->rank + 1]++;
    }
    for (int r = 0; r < n; r++) {
        w->first[r + 1] += w->first[r];
        w->count[r] = w->first[r]; /* scratch: where the rank's next shared event goes */
        w->head[r] = b->n;
    }
    for (size_t j = 0; j < b->n; j++) {
        const TraceEvent *e = &b->ev[j];
        if (e->rank < 0 || e->rank >= n) continue;
        if (w->head[e->rank] == b->n) w->head[e->rank] = j;
        if (compare_is_shared(e)) {
            size_t k = w->count[e->rank]++;
            w->shared[k] = j;
            w->before[k] = w->tail[e->rank];
        }
        w->tail[e->rank] = j + 1;
    }
    memset(w->count, 0, (size_t)(n + 1) * sizeof *w->count);
    return 0;
}

void compare_walk_free(CompareWalk *w) {
    free(w->first);
    free(w->shared);
    free(w->before);
    free(w->tail);
    free(w->head);
    free(w->count);
    free(w->on_shared);
    memset(w, 0, sizeof *w);
}

/* a's counts up to and including event `index`, on from the previous call's when it is later. */
static void walk_a(CompareWalk *w, size_t index) {
    if (index + 1 < w->next) { /* counted past it: count again */
        memset(w->count, 0, (size_t)w->nranks * sizeof *w->count);
        memset(w->on_shared, 0, (size_t)w->nranks * sizeof *w->on_shared);
        w->next = 0;
    }
    for (; w->next <= index; w->next++) {
        const TraceEvent *e = &w->a->ev[w->next];
        if (e->rank < 0 || e->rank >= w->nranks) continue;
        w->on_shared[e->rank] = compare_is_shared(e);
        w->count[e->rank] += (size_t)w->on_shared[e->rank];
    }
}

/* Rank r's point in b (compare_rank_point's definition): up to and including its m-th shared
 * event when a's last is its m-th shared one, else up to just before its (m+1)-th; all of its
 * events when b has fewer. */
static size_t rank_end(const CompareWalk *w, int r) {
    size_t k = w->count[r] + (size_t)!w->on_shared[r] - 1; /* the shared event wanted, from 0 */
    if (w->first[r] + k >= w->first[r + 1]) return w->tail[r];
    size_t at = w->first[r] + k;
    return w->on_shared[r] ? w->shared[at] + 1 : w->before[at];
}

int compare_walk_points(CompareWalk *w, size_t index, size_t *ends, Err *err) {
    if (index >= w->a->n)
        return err_set(err, ERR_USAGE, "event %zu is past the trace's %zu events", index, w->a->n);
    if (w->a->nranks != w->b->nranks)
        return err_set(err, ERR_USAGE, "the traces have %d and %d ranks", w->a->nranks,
                       w->b->nranks);
    walk_a(w, index);
    for (int r = 0; r < w->nranks; r++) ends[r] = rank_end(w, r);
    return 0;
}

int compare_walk_match(CompareWalk *w, size_t index, size_t *out, Err *err) {
    const Trace *a = w->a, *b = w->b;
    if (index >= a->n)
        return err_set(err, ERR_USAGE, "event %zu is past the trace's %zu events", index, a->n);
    if (!b->n) return err_set(err, ERR_USAGE, "the trace to compare with has no events");
    int rank = a->ev[index].rank;
    if (rank < 0 || rank >= a->nranks || rank >= b->nranks)
        return err_set(err, ERR_USAGE, "rank %d is not in both traces (%d and %d ranks)", rank,
                       a->nranks, b->nranks);
    if (a->nranks != b->nranks)
        return err_set(err, ERR_USAGE, "the traces have %d and %d ranks", a->nranks, b->nranks);
    walk_a(w, index);
    size_t end = rank_end(w, rank);
    if (end) {
        *out = end - 1; /* the rank's last event run: the point computes it is at */
        return 0;
    }
    if (w->head[rank] < b->n) {
        *out = w->head[rank];
        return 0;
    }
    return err_set(err, ERR_USAGE, "the trace to compare with has no events of rank %d", rank);
}

int compare_points(const Trace *a, size_t index, const Trace *b, size_t *ends, Err *err) {
    CompareWalk w;
    int rc = compare_walk_init(&w, a, b, err);
    if (!rc) rc = compare_walk_points(&w, index, ends, err);
    compare_walk_free(&w);
    return rc;
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
    CompareWalk w;
    int rc = compare_walk_init(&w, a, b, err);
    if (!rc) rc = compare_walk_match(&w, index, out, err);
    compare_walk_free(&w);
    return rc;
}
