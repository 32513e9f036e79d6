/* Lesson 03's check: the learner's ring all-gather, run on the lesson's ring (one thread per
 * rank), against the engine's all-gather on a simulated cluster with the same inputs. */
#include "engine/plan.h"
#include "exercise.h"
#include "lessons/tool/ring_check.h"

/* The engine's all-gather runs on sim/comm_sim.c, through cluster_run: the learner's must give
 * the same floats bit for bit on every rank, and each rank must send what the cost model says a
 * ring all-gather sends (sim/cost.c). */

typedef struct GatherCase {
    size_t count;
    RingBuffers bufs; /* in: count floats, engine and learner: n * count floats */
} GatherCase;

static void case_init(GatherCase *g, int n, size_t count) {
    g->count = count;
    ring_buffers_init(&g->bufs, n, count, (size_t)n * count);
}

static int engine_rank(const RankEnv *env, void *arg, Err *err) {
    GatherCase *g = arg;
    int r = env->world_comm->rank;
    return comm_all_gather(env->world_comm, g->bufs.in[r], g->bufs.engine[r], g->count, DTYPE_FP32,
                           -1, err);
}

static void learner_rank(Ring *ring, int rank, void *arg) {
    GatherCase *g = arg;
    ring_all_gather(ring, rank, g->bufs.in[rank], g->bufs.learner[rank], g->count);
}

/* Distinct, exactly representable values: rank r's element i is (r+1)*100 + i. */
static void fill_inputs(GatherCase *g) {
    for (int r = 0; r < g->bufs.n; r++)
        for (size_t i = 0; i < g->count; i++) g->bufs.in[r][i] = (float)((r + 1) * 100) + (float)i;
}

/* The rank whose input block `got` (count floats) is, bit for bit; -1 if none. The inputs are
 * all different, so a block that arrived in the wrong slot is known by its values. */
static int block_owner(const GatherCase *g, const float *got) {
    for (int q = 0; q < g->bufs.n; q++)
        if (g->count && !memcmp(got, g->bufs.in[q], g->count * sizeof(float))) return q;
    return -1;
}

/* A block in the wrong place is hint 2's rule, whichever test finds it: it fails there, saying
 * whose block landed where. */
static void expect_blocks_in_place(const GatherCase *g) {
    for (int r = 0; r < g->bufs.n; r++)
        for (int j = 0; j < g->bufs.n; j++) {
            const float *got = g->bufs.learner[r] + (size_t)j * g->count;
            const float *want = g->bufs.engine[r] + (size_t)j * g->count;
            int q = block_owner(g, got);
            if (q < 0 || q == j || !memcmp(got, want, g->count * sizeof(float))) continue;
            lesson_fail_why(2,
                            lesson_fmt("rank %d's all[%zu]=%.9g (rank %d's block)", r,
                                       (size_t)j * g->count, (double)want[0], j),
                            lesson_fmt("all[%zu]=%.9g (rank %d's block)", (size_t)j * g->count,
                                       (double)got[0], q),
                            lesson_fmt("Rank %d's block landed in slot %d on rank %d: rank q's "
                                       "block belongs at all + q * count, and in step s rank r "
                                       "receives rank (r - s - 1 + N) %% N's block.",
                                       q, j, r));
        }
}

/* Runs both sides on g's inputs and compares: the ring's problems first (a deadlock explains
 * wrong values), then blocks in the wrong slot, then every rank's gathered floats, then what
 * each rank sent. */
static void compare(GatherCase *g, int hint) {
    ring_check_engine(g->bufs.n, engine_rank, g);
    for (int r = 0; r < g->bufs.n; r++)
        for (size_t i = 0; i < (size_t)g->bufs.n * g->count; i++) g->bufs.learner[r][i] = NAN;
    lesson_try("ring_all_gather(N=%d, count=%zu)", g->bufs.n, g->count);
    RingReport report;
    ring_check_learner(g->bufs.n, learner_rank, g, 1, &report);
    size_t total = (size_t)g->bufs.n * g->count;
    expect_blocks_in_place(g);
    for (int r = 0; r < g->bufs.n; r++)
        expect_floats(hint, lesson_fmt("rank %d's all", r), g->bufs.engine[r], g->bufs.learner[r],
                      total);
    ring_check_traffic(&report, g->bufs.n, COLL_ALL_GATHER, (double)total * 4, 4);
}

static void expect_gather(int n, size_t count, int hint) {
    GatherCase g;
    case_init(&g, n, count);
    fill_inputs(&g);
    compare(&g, hint);
    ring_buffers_free(&g.bufs);
}

/* Each test says when it ran to its end (check.h): the runner passes nothing less. */
LESSON_CHECK_SUITE(lesson03);

Test(lesson03, t1_two_ranks) {
    expect_gather(2, 3, 1);
}

Test(lesson03, t2_three_and_four_ranks) {
    expect_gather(3, 1, 2); /* the toy's La at 3 GPUs: one scalar each */
    expect_gather(3, 2, 2);
    expect_gather(4, 5, 2);
}

Test(lesson03, t3_one_and_eight_ranks) {
    expect_gather(1, 4, 3); /* nothing to send: the gathered copy is the rank's own block */
    expect_gather(8, 2, 3);
    expect_gather(8, 16, 3);
}

/* A 10-element tensor on 4 GPUs: torch.chunk gives 3, 3, 3 and 1 rows (engine/plan.c's
 * shard_rows); each rank pads its shard to 3 so the collective moves equal blocks, and the
 * first 10 gathered floats are the tensor again. */
Test(lesson03, t4_uneven_tensor_padded) {
    GatherCase g;
    case_init(&g, 4, 3);
    float tensor[10];
    for (int i = 0; i < 10; i++) tensor[i] = (float)(i + 1);
    for (int r = 0; r < g.bufs.n; r++) {
        size_t begin, rows;
        shard_rows(10, g.bufs.n, r, &begin, &rows);
        memcpy(g.bufs.in[r], tensor + begin, rows * sizeof(float)); /* the rest stays 0: padding */
    }
    compare(&g, 3);
    for (int r = 0; r < g.bufs.n; r++)
        expect_floats(3, lesson_fmt("rank %d's all", r), tensor, g.bufs.learner[r], 10);
    ring_buffers_free(&g.bufs);
}

Test(lesson03, t5_sent_bytes_formula) {
    static const int ns[] = {1, 2, 3, 4, 8, 64, 1024};
    static const size_t counts[] = {1, 3, 1000, 218750000};
    for (size_t i = 0; i < sizeof ns / sizeof ns[0]; i++)
        for (size_t j = 0; j < sizeof counts / sizeof counts[0]; j++) {
            int n = ns[i];
            size_t count = counts[j];
            lesson_try("ring_all_gather_sent_bytes(count=%zu, n=%d)", count, n);
            double buffer = (double)count * n * 4; /* the gathered buffer, as cost.c takes it */
            size_t want = (size_t)llround(cost_sent_bytes(COLL_ALL_GATHER, buffer, n));
            size_t got = ring_all_gather_sent_bytes(count, n), block = count * 4;
            const char *why = NULL;
            if (got == (size_t)n * block)
                why = "That is the whole gathered buffer: a rank has its own block already and "
                      "sends N-1 blocks, (N-1)/N of the buffer.";
            else if (n > 2 && got == block)
                why = "That is one block: a rank sends one block in each of the N-1 steps.";
            else if (got == want / 4)
                why = "That is floats, not bytes: 4 bytes a float.";
            expect_size_why(4, "bytes", want, got, why);
        }
}
