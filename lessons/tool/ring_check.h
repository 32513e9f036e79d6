/* ring_check: what the checks of lessons 03 and 04 share (their check.c files include it; a
 * learner's exercise never does): buffers of exactly their size, the engine's collectives run
 * on simulated ranks, and the learner's ring run with its traffic against the cost model. */
#ifndef LESSONS_RING_CHECK_H
#define LESSONS_RING_CHECK_H

#include <math.h>
#include <stdlib.h>

#include "lessons/tool/check.h"
#include "lessons/tool/ring.h"
#include "sim/cluster.h"
#include "sim/cost.h"

/* n floats, allocated at exactly that size, so that under SANITIZE=1 a write past the end is
 * reported where it happens. */
static inline float *ring_check_floats(size_t n) {
    float *p = malloc((n ? n : 1) * sizeof *p);
    cr_assert(p);
    return p;
}

/* Each rank's input and the two results, the engine's and the learner's, every one allocated
 * at exactly its size (the inputs zeroed); ring_buffers_free frees them. */
typedef struct RingBuffers {
    int n;
    float *in[RING_MAX_RANKS], *engine[RING_MAX_RANKS], *learner[RING_MAX_RANKS];
} RingBuffers;

static inline void ring_buffers_init(RingBuffers *b, int n, size_t in_count, size_t out_count) {
    cr_assert_leq(n, RING_MAX_RANKS);
    memset(b, 0, sizeof *b);
    b->n = n;
    for (int r = 0; r < n; r++) {
        b->in[r] = ring_check_floats(in_count);
        memset(b->in[r], 0, in_count * sizeof(float));
        b->engine[r] = ring_check_floats(out_count);
        b->learner[r] = ring_check_floats(out_count);
    }
}

static inline void ring_buffers_free(RingBuffers *b) {
    for (int r = 0; r < b->n; r++) {
        free(b->in[r]);
        free(b->engine[r]);
        free(b->learner[r]);
    }
}

/* The engine's side: fn(arg) on `ranks` simulated ranks (sim/comm_sim.c through cluster_run). */
static inline void ring_check_engine(int ranks, RankMain fn, void *arg) {
    ClusterOptions opt = {.ranks = ranks, .profile = profile_default()};
    ClusterResult res;
    Err err = {0};
    cr_assert_eq(cluster_run(&opt, fn, arg, &res, &err), 0, "%s", err.msg);
    cluster_result_free(&res);
}

/* The learner's side: fn(ring, r, arg) for each of the n ranks of a ring; a misuse of the ring
 * (a deadlock explains wrong values) fails first, with `hint`. */
static inline void ring_check_learner(int n, RingRankFn fn, void *arg, int hint,
                                      RingReport *report) {
    cr_assert_eq(ring_run(n, fn, arg, report), 0, "%s", report->problem);
    expect_no_problem(hint, report->problem);
}

/* Every rank sent what the cost model says one ring collective of `kind` on a buffer of
 * `buffer_bytes` sends. */
static inline void ring_check_traffic(const RingReport *report, int n, CollKind kind,
                                      double buffer_bytes, int hint) {
    size_t want = (size_t)llround(cost_sent_bytes(kind, buffer_bytes, n));
    for (int r = 0; r < n; r++)
        expect_size(hint, lesson_fmt("bytes rank %d sent", r), want, report->sent_bytes[r]);
}

#endif
