/* The simulated collectives against plain loops, a diverged program reported instead of hanging,
 * and the modelled time of a ring collective. */
#include <criterion/criterion.h>
#include <math.h>
#include <string.h>

#include "sim/cluster.h"
#include "sim/cost.h"
#include "tests/util.h"

/* The collectives: all-gather and reduce-scatter of uneven per-rank contents, all-reduce in place,
 * broadcast, reductions in low precision rounded once, overlapping requests. */

#define MAXR 8
#define COUNT 5

/* What every rank writes into the shared result for the test to check after the run. */
typedef struct CommCase {
    int which;
    float out[MAXR][MAXR * COUNT];
    DevEvent done[MAXR];
} CommCase;

/* Rank r's contribution: distinct per rank and element, with the last rank's block
 * short (zeros), like a padded uneven shard. */
static float contribution(int r, int size, size_t i) {
    if (r == size - 1 && i % COUNT >= 3) return 0.0f;
    return (float)(r + 1) * 100.0f + (float)i * 0.25f;
}

static int gather_and_scatter(const RankEnv *env, void *arg, Err *err) {
    CommCase *cc = arg;
    Comm *c = env->world_comm;
    int n = c->size, r = c->rank;
    float send[MAXR * COUNT], recv[MAXR * COUNT];
    for (size_t i = 0; i < COUNT; i++) send[i] = contribution(r, n, i);
    int rc = comm_all_gather(c, send, recv, COUNT, DTYPE_FP32, 0, err);
    if (rc) return rc;
    memcpy(cc->out[r], recv, sizeof(float) * (size_t)n * COUNT);
    /* reduce-scatter: rank r sends n blocks; block q is what rank q ends up with */
    for (size_t i = 0; i < (size_t)n * COUNT; i++) send[i] = contribution(r, n, i);
    if ((rc = comm_reduce_scatter(c, send, recv, COUNT, DTYPE_FP32, REDUCE_SUM, 0, err))) return rc;
    memcpy(cc->out[r] + n * COUNT - COUNT, recv, sizeof(float) * COUNT); /* overwrite last block */
    return 0;
}

Test(comm, all_gather_and_reduce_scatter_match_a_loop) {
    for (int n = 1; n <= 5; n++) {
        CommCase cc = {0};
        run_on_ranks_ok(n, gather_and_scatter, &cc);
        for (int r = 0; r < n; r++) {
            /* blocks 0..n-2 from the gather: rank q's block is q's contribution */
            for (int q = 0; q < n - 1; q++)
                for (size_t i = 0; i < COUNT; i++)
                    cr_expect_eq(cc.out[r][q * COUNT + i], contribution(q, n, i),
                                 "n %d rank %d gathered block %d elem %zu", n, r, q, i);
            /* last block: the reduce-scatter's sum, over ranks in order, of block r */
            for (size_t i = 0; i < COUNT; i++) {
                float want = 0.0f;
                for (int q = 0; q < n; q++) want += contribution(q, n, (size_t)r * COUNT + i);
                cr_expect_eq(cc.out[r][(n - 1) * COUNT + i], want, "n %d rank %d reduced %zu", n, r,
                             i);
            }
        }
    }
}

static int in_place_and_broadcast(const RankEnv *env, void *arg, Err *err) {
    CommCase *cc = arg;
    Comm *c = env->world_comm;
    int r = c->rank;
    float buf[COUNT];
    for (int i = 0; i < COUNT; i++) buf[i] = (float)(r * 10 + i);
    int rc = comm_all_reduce(c, buf, buf, COUNT, DTYPE_FP32, REDUCE_AVG, -1, err);
    if (rc) return rc;
    memcpy(cc->out[r], buf, sizeof buf);
    float b[COUNT];
    for (int i = 0; i < COUNT; i++) b[i] = r == 2 ? 7.5f + (float)i : -1.0f;
    if ((rc = comm_broadcast(c, b, COUNT, DTYPE_FP32, 2, -1, err))) return rc;
    memcpy(cc->out[r] + COUNT, b, sizeof b);
    float m = (float)(r == 1 ? 42 : r);
    if ((rc = comm_all_reduce(c, &m, &m, 1, DTYPE_FP32, REDUCE_MAX, -1, err))) return rc;
    cc->out[r][2 * COUNT] = m;
    return comm_barrier(c, err);
}

Test(comm, all_reduce_in_place_broadcast_and_max) {
    CommCase cc = {0};
    run_on_ranks_ok(4, in_place_and_broadcast, &cc);
    for (int r = 0; r < 4; r++) {
        for (int i = 0; i < COUNT; i++) {
            cr_expect_eq(cc.out[r][i], (0.0f + 10 + 20 + 30) / 4 + (float)i, "avg r%d i%d", r, i);
            cr_expect_eq(cc.out[r][COUNT + i], 7.5f + (float)i, "broadcast r%d i%d", r, i);
        }
        cr_expect_eq(cc.out[r][2 * COUNT], 42.0f);
    }
}

/* bf16 sums are taken in fp32 and rounded once. Ranks send 1, 2^-8 and 2^-8: in fp32 the
 * sum is 1 + 2^-7, exactly a bf16 value; rounding to bf16 after each add would give 1
 * (1 + 2^-8 is a tie that rounds to even, twice). */
static int low_precision_sum(const RankEnv *env, void *arg, Err *err) {
    CommCase *cc = arg;
    uint16_t v = fp32_to_bf16(env->rank == 0 ? 1.0f : 0.00390625f);
    uint16_t send[3] = {v, v, v}, out[1];
    int rc = comm_reduce_scatter(env->world_comm, send, out, 1, DTYPE_BF16, REDUCE_SUM, -1, err);
    cc->out[env->rank][0] = bf16_to_fp32(out[0]);
    return rc;
}

Test(comm, low_precision_reductions_round_once) {
    CommCase cc = {0};
    run_on_ranks_ok(3, low_precision_sum, &cc);
    for (int r = 0; r < 3; r++) cr_expect_eq(cc.out[r][0], 1.0078125f, "rank %d", r);
}

/* Two requests in flight at once, waited in order; the second's modelled start follows the
 * first's end because the comm stream is in order. */
static int overlapping_requests(const RankEnv *env, void *arg, Err *err) {
    CommCase *cc = arg;
    Comm *c = env->world_comm;
    static float big[2][MAXR][1 << 16];
    float send[2][1 << 14];
    for (int k = 0; k < 2; k++)
        for (int i = 0; i < (1 << 14); i++) send[k][i] = (float)(k * 1000 + c->rank + i);
    CommRequest req[2];
    for (int k = 0; k < 2; k++) {
        req[k] = (CommRequest){.kind = COLL_ALL_GATHER,
                               .send = send[k],
                               .recv = big[k][c->rank],
                               .count = 1 << 14,
                               .dtype = DTYPE_FP32,
                               .unit = k};
        int rc = c->ops->start(c, &req[k], err);
        if (rc) return rc;
    }
    for (int k = 0; k < 2; k++) {
        int rc = c->ops->wait(c, &req[k], err);
        if (rc) return rc;
        cc->out[c->rank][2 * k] = (float)req[k].start_time;
        cc->out[c->rank][2 * k + 1] = (float)req[k].end_time;
        cc->out[c->rank][4 + k] = big[k][c->rank][(1 << 14) * 3 + 5]; /* rank 3's element 5 */
    }
    return 0;
}

Test(comm, overlapping_requests_complete_in_order) {
    CommCase cc = {0};
    run_on_ranks_ok(4, overlapping_requests, &cc);
    double bytes = 4.0 * (1 << 14) * sizeof(float);
    double t = cost_collective(profile_default(), COLL_ALL_GATHER, bytes, 4, 1);
    for (int r = 0; r < 4; r++) {
        cr_expect_float_eq(cc.out[r][0], 0.0f, 1e-12);
        cr_expect_float_eq(cc.out[r][1], (float)t, 1e-9);
        cr_expect_float_eq(cc.out[r][2], (float)t, 1e-9, "the second starts when the first ends");
        cr_expect_float_eq(cc.out[r][3], (float)(2 * t), 1e-9);
        cr_expect_eq(cc.out[r][4], (float)(3 + 5));
        cr_expect_eq(cc.out[r][5], (float)(1000 + 3 + 5));
    }
}

static int diverging(const RankEnv *env, void *arg, Err *err) {
    (void)arg;
    float x[4] = {0};
    if (env->rank == 1)
        return comm_all_reduce(env->world_comm, x, x, 4, DTYPE_FP32, REDUCE_SUM, -1, err);
    return comm_all_gather(env->world_comm, x, x + 1, 1, DTYPE_FP32, -1, err);
}

Test(comm, diverged_programs_fail_instead_of_hanging) {
    Err err = {0};
    int rc = run_on_ranks(3, diverging, NULL, &err);
    cr_expect_neq(rc, 0);
    cr_expect(strstr(err.msg, "diverged") != NULL, "%s", err.msg);
}

static int one_rank_fails(const RankEnv *env, void *arg, Err *err) {
    (void)arg;
    if (env->rank == 2) return err_set(err, ERR_IO, "rank 2 could not read its data");
    return comm_barrier(env->world_comm, err);
}

Test(comm, a_failing_rank_stops_the_others) {
    Err err = {0};
    int rc = run_on_ranks(4, one_rank_fails, NULL, &err);
    cr_expect_eq(rc, ERR_IO);
    cr_expect_str_eq(err.msg, "rank 2 could not read its data", "the root cause is reported");
}

/* Inputs above the staging threshold are read in place (no copy) and the ranks meet twice;
 * an in-place all-reduce of that size is copied. Same answers as the loops either way. */
#define BIG 40000 /* floats: 160 KB a rank */

static float big_value(int r, size_t i) {
    return (float)((r * 7919 + (int)(i % 1009)) % 1000) * 0.5f - 100.0f;
}

typedef struct BigCase {
    int bad[MAXR]; /* elements that differ from the loop, per rank */
} BigCase;

static int big_collectives(const RankEnv *env, void *arg, Err *err) {
    BigCase *bc = arg;
    Comm *c = env->world_comm;
    int n = c->size, r = c->rank, rc;
    float *send = malloc(sizeof(float) * BIG * (size_t)n),
          *recv = malloc(sizeof(float) * BIG * (size_t)n);
    for (size_t i = 0; i < (size_t)BIG * (size_t)n; i++) send[i] = big_value(r, i);
    if ((rc = comm_all_gather(c, send, recv, BIG, DTYPE_FP32, 0, err))) return rc;
    for (int q = 0; q < n; q++)
        for (size_t i = 0; i < BIG; i++) bc->bad[r] += recv[(size_t)q * BIG + i] != big_value(q, i);
    if ((rc = comm_reduce_scatter(c, send, recv, BIG, DTYPE_FP32, REDUCE_SUM, 0, err))) return rc;
    for (size_t i = 0; i < BIG; i++) {
        float want = 0.0f;
        for (int q = 0; q < n; q++) want += big_value(q, (size_t)r * BIG + i);
        bc->bad[r] += recv[i] != want;
    }
    /* in place: every rank's buffer is also every other rank's input */
    if ((rc = comm_all_reduce(c, send, send, BIG, DTYPE_FP32, REDUCE_SUM, 0, err))) return rc;
    for (size_t i = 0; i < BIG; i++) {
        float want = 0.0f;
        for (int q = 0; q < n; q++) want += big_value(q, i);
        bc->bad[r] += send[i] != want;
    }
    free(send);
    free(recv);
    return 0;
}

Test(comm, large_inputs_are_read_in_place) {
    BigCase bc = {0};
    run_on_ranks_ok(3, big_collectives, &bc);
    for (int r = 0; r < 3; r++)
        cr_expect_eq(bc.bad[r], 0, "rank %d: %d wrong elements", r, bc.bad[r]);
}
