/* Lesson 04's check: the learner's ring reduce-scatter and all-reduce, run on the lesson's ring,
 * against the engine's collectives on a simulated cluster, and each rank's traffic against the
 * cost model. */
#include "exercise.h"
#include "lessons/tool/ring_check.h"

/* The engine's collectives run on sim/comm_sim.c through cluster_run; the cost model is
 * sim/cost.c's. The engine sums in rank order, a ring in ring order; in floating point those can
 * differ in the last bit, so the inputs are whole numbers, whose sums are exact in any order, and
 * the results must match bit for bit. */

typedef struct Case {
    CollKind kind;              /* COLL_REDUCE_SCATTER or COLL_ALL_REDUCE */
    size_t count;               /* reduce-scatter: per block; all-reduce: the buffer */
    size_t in_count, out_count; /* floats per rank in and out */
    RingBuffers bufs;
} Case;

static void case_init(Case *c, CollKind kind, int n, size_t count) {
    c->kind = kind;
    c->count = count;
    c->in_count = kind == COLL_REDUCE_SCATTER ? (size_t)n * count : count;
    c->out_count = count;
    ring_buffers_init(&c->bufs, n, c->in_count, c->out_count);
}

static int engine_rank(const RankEnv *env, void *arg, Err *err) {
    Case *c = arg;
    Comm *comm = env->world_comm;
    int r = comm->rank;
    if (c->kind == COLL_REDUCE_SCATTER)
        return comm_reduce_scatter(comm, c->bufs.in[r], c->bufs.engine[r], c->count, DTYPE_FP32,
                                   REDUCE_SUM, -1, err);
    memcpy(c->bufs.engine[r], c->bufs.in[r], c->count * sizeof(float));
    return comm_all_reduce(comm, c->bufs.engine[r], c->bufs.engine[r], c->count, DTYPE_FP32,
                           REDUCE_SUM, -1, err);
}

static void learner_rank(Ring *ring, int rank, void *arg) {
    Case *c = arg;
    if (c->kind == COLL_REDUCE_SCATTER) {
        ring_reduce_scatter(ring, rank, c->bufs.in[rank], c->bufs.learner[rank], c->count);
    } else {
        memcpy(c->bufs.learner[rank], c->bufs.in[rank], c->count * sizeof(float));
        ring_all_reduce(ring, rank, c->bufs.learner[rank], c->count);
    }
}

/* Whole numbers, different on every rank and element, some negative. */
static void fill_inputs(Case *c) {
    for (int r = 0; r < c->bufs.n; r++)
        for (size_t i = 0; i < c->in_count; i++)
            c->bufs.in[r][i] = (float)((r + 1) * 1000 + (int)i * ((r % 2) ? -3 : 7));
}

/* Whether every rank's result is the engine's divided by N (to the float's last bits): an
 * average, where the collective sums. */
static int averaged(const Case *c) {
    for (int r = 0; r < c->bufs.n; r++)
        for (size_t i = 0; i < c->out_count; i++) {
            float mean = c->bufs.engine[r][i] / (float)c->bufs.n, got = c->bufs.learner[r][i];
            if (!(fabsf(got - mean) <= 1e-6f * fabsf(mean))) return 0;
        }
    return c->bufs.n > 1;
}

/* Whether every rank's reduce-scatter result is only its own contribution to its block. */
static int own_part_only(const Case *c) {
    if (c->kind != COLL_REDUCE_SCATTER || c->bufs.n < 2) return 0;
    for (int r = 0; r < c->bufs.n; r++)
        if (memcmp(c->bufs.learner[r], c->bufs.in[r] + (size_t)r * c->count,
                   c->count * sizeof(float)))
            return 0;
    return 1;
}

/* Runs both sides and compares: ring problems, every rank's result, every rank's traffic. */
static void compare(Case *c, double cost_bytes, int hint, int traffic_hint) {
    ring_check_engine(c->bufs.n, engine_rank, c);
    for (int r = 0; r < c->bufs.n; r++)
        for (size_t i = 0; i < c->out_count; i++) c->bufs.learner[r][i] = NAN;
    RingReport report;
    ring_check_learner(c->bufs.n, learner_rank, c, hint, &report);
    const char *name = c->kind == COLL_REDUCE_SCATTER ? "mine" : "buf";
    const char *why = NULL;
    if (averaged(c))
        why = "You divided by N: this collective sums (the check runs the engine's with "
              "REDUCE_SUM). A training step averages by dividing the sum by the world size once; "
              "the ring's steps only add.";
    else if (own_part_only(c))
        why = "That is only your own contribution: each step adds your piece of the block that "
              "arrives to the running sum, so after N-1 steps your block holds every rank's.";
    for (int r = 0; r < c->bufs.n && why; r++)
        for (size_t i = 0; i < c->out_count; i++)
            if (memcmp(&c->bufs.engine[r][i], &c->bufs.learner[r][i], sizeof(float)))
                lesson_fail_why(
                    hint,
                    lesson_fmt("rank %d's %s[%zu]=%.9g", r, name, i, (double)c->bufs.engine[r][i]),
                    lesson_fmt("%.9g", (double)c->bufs.learner[r][i]), why);
    for (int r = 0; r < c->bufs.n; r++)
        expect_floats(hint, lesson_fmt("rank %d's %s", r, name), c->bufs.engine[r],
                      c->bufs.learner[r], c->out_count);
    ring_check_traffic(&report, c->bufs.n, c->kind, cost_bytes, traffic_hint);
}

static void expect_reduce_scatter(int n, size_t count, int hint) {
    Case c;
    case_init(&c, COLL_REDUCE_SCATTER, n, count);
    fill_inputs(&c);
    lesson_try("ring_reduce_scatter(N=%d, count=%zu)", n, count);
    compare(&c, (double)n * (double)count * 4, hint, 3);
    ring_buffers_free(&c.bufs);
}

/* The engine's all-reduce takes any count; the ring pads to N blocks of ceil(count/N), and
 * what each rank sends is the cost model's all-reduce of that padded buffer. */
static void expect_all_reduce(int n, size_t count, int hint) {
    Case c;
    case_init(&c, COLL_ALL_REDUCE, n, count);
    fill_inputs(&c);
    size_t chunk = (count + (size_t)n - 1) / (size_t)n;
    lesson_try("ring_all_reduce(N=%d, count=%zu)", n, count);
    compare(&c, (double)n * (double)chunk * 4, hint, 5);
    ring_buffers_free(&c.bufs);
}

/* Each test says when it ran to its end (check.h): the runner passes nothing less. */
LESSON_CHECK_SUITE(lesson04);

Test(lesson04, t1_reduce_scatter_two_ranks) {
    expect_reduce_scatter(2, 3, 1);
}

Test(lesson04, t2_reduce_scatter_more_ranks) {
    expect_reduce_scatter(3, 1, 2); /* the toy's gradients of one layer at 3 GPUs */
    expect_reduce_scatter(3, 4, 2);
    expect_reduce_scatter(4, 2, 2);
    expect_reduce_scatter(8, 5, 2);
    expect_reduce_scatter(1, 3, 2); /* one rank: its own contribution is the sum */
}

Test(lesson04, t3_all_reduce) {
    expect_all_reduce(3, 6, 4);
    expect_all_reduce(4, 10, 4); /* 10 does not divide by 4: blocks of 3, the last padded */
    expect_all_reduce(3, 2, 4);  /* fewer elements than ranks: one block is all padding */
    expect_all_reduce(8, 64, 4);
    expect_all_reduce(1, 5, 4);
}

Test(lesson04, t4_all_reduce_sent_bytes_formula) {
    static const int ns[] = {1, 2, 3, 4, 8, 1024};
    static const size_t counts[] = {1, 10, 1000, 7000000000};
    for (size_t i = 0; i < sizeof ns / sizeof ns[0]; i++)
        for (size_t j = 0; j < sizeof counts / sizeof counts[0]; j++) {
            int n = ns[i];
            size_t count = counts[j], chunk = (count + (size_t)n - 1) / (size_t)n;
            lesson_try("ring_all_reduce_sent_bytes(count=%zu, n=%d)", count, n);
            double padded = (double)chunk * n * 4;
            size_t want = (size_t)llround(cost_sent_bytes(COLL_ALL_REDUCE, padded, n));
            size_t got = ring_all_reduce_sent_bytes(count, n), half = (size_t)(n - 1) * chunk * 4;
            const char *why = NULL;
            if (n > 1 && got == half)
                why = "That is one half, a reduce-scatter's: an all-reduce is a reduce-scatter "
                      "and then an all-gather, each sending N-1 blocks.";
            else if (n > 1 && got == want / 4)
                why = "That is floats, not bytes: 4 bytes a float.";
            else if (n > 1 && count % (size_t)n &&
                     got * (size_t)n == 2 * (size_t)(n - 1) * count * 4)
                why = "You left out the padding: the ring moves blocks of ceil(count/N) floats, "
                      "the last one padded.";
            expect_size_why(5, "bytes", want, got, why);
        }
}
