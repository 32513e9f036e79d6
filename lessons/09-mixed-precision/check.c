/* Lesson 09's check: the learner's bf16 conversions, collective bytes and fp32 sum against the
 * engine's conversions, traced collectives and simulated all-reduce. */
#include <math.h>
#include <stdlib.h>

#include "exercise.h"
#include "jobs/train.h"
#include "kernels/dtype.h"
#include "lessons/tool/check.h"
#include "models/vit.h"
#include "sim/cluster.h"
#include "sim/planner.h"

/* The conversions against the engine's (kernels/dtype.c: fp32_to_bf16, bf16_to_fp32) on every bf16
 * pattern, random floats, ties, subnormals, inf and NaN; the learner's bytes of a unit's all-gather
 * and reduce-scatter against the bytes the engine's collectives record in a traced run of a 2-layer
 * vit-tiny at several world sizes and --param-dtype/--reduce-dtype; the learner's fp32 sum against
 * the simulated cluster's all-reduce (sim/comm_sim.c adds the ranks' values in rank order in fp32),
 * and both sums against a reference built on the engine's dtype_round. */

/* xorshift32: the same "random" floats on every run */
static uint32_t next_random(uint32_t *state) {
    uint32_t x = *state;
    x ^= x << 13;
    x ^= x >> 17;
    x ^= x << 5;
    return *state = x;
}

/* ---------------------------------------------------------------- bf16 */

static const char *bf16_text(uint16_t h) {
    float x = bf16_to_fp32(h);
    return lesson_fmt("0x%04x (%s)", h, isnan(x) ? "NaN" : lesson_fmt("%.9g", (double)x));
}

/* Loops over thousands of inputs name the batch before it (so a crash names it) and the one
 * input that differs only when it does: a line per call would be megabytes of output. */
static void expect_widen(uint16_t h, int announce) {
    if (announce) lesson_try("bf16_widen(0x%04x)", h);
    float want = bf16_to_fp32(h), got = bf16_widen(h);
    if (fp32_bits(want) == fp32_bits(got)) return;
    lesson_try("bf16_widen(0x%04x)", h);
    lesson_fail(1, lesson_fmt("0x%08x (%.9g)", fp32_bits(want), (double)want),
                lesson_fmt("0x%08x (%.9g)", fp32_bits(got), (double)got));
}

/* Each test says when it ran to its end (check.h): the runner passes nothing less. */
LESSON_CHECK_SUITE(lesson09);

Test(lesson09, t1_widen_every_pattern) {
    expect_widen(0x3f80, 1); /* 1 */
    expect_widen(0xc040, 1); /* -3 */
    lesson_try("bf16_widen on each of the 65536 bf16 patterns");
    for (uint32_t h = 0; h <= 0xffff; h++) expect_widen((uint16_t)h, 0);
}

/* Known wrong roundings of x, recognised bit for bit: truncation, ties away from zero, a NaN
 * whose rounding carried into the exponent. NULL for any other. */
static const char *round_why(uint32_t x_bits, uint16_t got) {
    float x = fp32_from_bits(x_bits);
    if (isnan(x) && !isnan(bf16_to_fp32(got)))
        return "Rounding a NaN carried its payload into the exponent: keep a NaN a NaN (keep its "
               "sign and exponent, and set a mantissa bit) before any rounding.";
    if (!isnan(x) && got == (uint16_t)(x_bits >> 16))
        return "That is truncation (the high 16 bits): bf16 rounds to nearest, as the engine's "
               "fp32_to_bf16 does, so drop the low half only after adding half a step.";
    if (!isnan(x) && (x_bits & 0xffffu) == 0x8000u && got == (uint16_t)((x_bits + 0x8000u) >> 16))
        return "A tie rounded away from zero: bf16 rounds a tie to the neighbour whose last bit "
               "is 0 (ties to even), so half of the ties round down.";
    return NULL;
}

/* x rounded by the learner and by the engine: the same bits, and for a NaN any NaN. */
static void expect_round_quietly(int hint, uint32_t x_bits, int announce) {
    float x = fp32_from_bits(x_bits);
    const char *input = lesson_fmt("bf16_round(%.9g, bits 0x%08x)", (double)x, x_bits);
    if (announce) lesson_try("%s", input);
    uint16_t want = fp32_to_bf16(x), got = bf16_round(x);
    if (isnan(x) ? isnan(bf16_to_fp32(got)) : want == got) return;
    lesson_try("%s", input);
    lesson_fail_why(hint, isnan(x) ? "a NaN" : bf16_text(want), bf16_text(got),
                    round_why(x_bits, got));
}

static void expect_round(int hint, uint32_t x_bits) {
    expect_round_quietly(hint, x_bits, 1);
}

Test(lesson09, t2_round_to_nearest) {
    expect_round(2, 0x3f800000); /* 1: exact */
    expect_round(2, 0x40490fdb); /* pi: 3.140625 in bf16 */
    expect_round(2, 0x3dcccccd); /* 0.1 rounds up */
    expect_round(2, 0xbf7fffff); /* just under -1: rounds to -1 */
    uint32_t state = 0x9e3779b9u;
    lesson_try("bf16_round on 100000 random finite floats");
    for (int i = 0; i < 100000; i++) {
        uint32_t u = next_random(&state);
        uint32_t exponent = (u >> 23) & 0xffu;
        /* ordinary finite values: no ties, subnormals, inf or NaN yet */
        if (exponent == 0 || exponent == 0xff || (u & 0xffffu) == 0x8000u) continue;
        expect_round_quietly(2, u, 0);
    }
}

Test(lesson09, t3_ties_go_to_even) {
    expect_round(2, 0x3f808000); /* 1 + 2^-8: halfway between 1 and 1 + 2^-7: stays 1 */
    expect_round(2, 0x3f818000); /* halfway between 0x3f81 and 0x3f82: up to the even one */
    expect_round(2, 0xbf808000); /* negative: the same, mirrored */
    expect_round(2, 0x3fff8000); /* halfway between 0x3fff and 2: the carry makes it 2 */
    expect_round(2, 0x3f808001); /* just past halfway: up */
    expect_round(2, 0x3f817fff); /* just short of halfway: down */
}

Test(lesson09, t4_zero_subnormal_inf_nan) {
    static const uint32_t cases[] = {
        0x00000000, 0x80000000,                         /* +0 and -0 */
        0x00000001, 0x00008000, 0x00018000, 0x80400000, /* subnormals: the same rule */
        0x007fffff,                                     /* the largest rounds up to normal */
        0x7f800000, 0xff800000,                         /* +inf and -inf */
        0x7f7f7fff,                                     /* stays the largest finite bf16 */
        0x7f7fffff, 0xff7fffff,                         /* FLT_MAX: too large, becomes inf */
        0x7fc00000, 0xffc00000,                         /* quiet NaNs */
        0x7f800001, /* a NaN whose payload is all in the low half */
        0x7fffffff, /* a NaN whose rounding would carry into the sign */
        0xff80ffff, /* a negative NaN that rounding would turn into -inf */
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) expect_round(3, cases[i]);
}

/* ---------------------------------------------------------------- bytes on the wire */

/* One traced, accounting-only training step of m on `ranks` simulated GPUs. */
static void traced_step(const ModelDesc *m, const FsdpConfig *cfg, int ranks, Plan *plan,
                        Trace *trace) {
    Err err = {0};
    cr_assert_eq(fsdp_plan_create(plan, m, cfg, ranks, &err), 0, "%s", err.msg);
    Dataset data;
    cr_assert_eq(planner_blank_dataset(&data, m, (long)ranks * cfg->batch_size, &err), 0, "%s",
                 err.msg);
    TrainJob job = {
        .model = m, .data = &data, .plan = plan, .cfg = cfg, .steps = 1, .no_sampler = 1};
    ClusterOptions opt = {
        .ranks = ranks, .profile = profile_default(), .trace = 1, .accounting_only = 1};
    ClusterResult res;
    cr_assert_eq(cluster_run(&opt, train_rank, &job, &res, &err), 0, "%s", err.msg);
    *trace = res.trace;
    dataset_free(&data);
}

static void vit_2_layers(ModelDesc *m) {
    VitConfig c;
    Err err = {0};
    cr_assert_eq(vit_preset("vit-tiny", &c), 0);
    c.layers = 2;
    cr_assert_eq(vit_model_create(m, &c, &err), 0, "%s", err.msg);
}

/* Every all-gather and reduce-scatter rank 0 records against the learner's bytes for its
 * unit, in the dtype it travels in. */
static void expect_unit_bytes(const ModelDesc *m, const Plan *p, const Trace *t, DType param,
                              DType reduce) {
    TensorShape shapes[64];
    for (size_t i = 0; i < t->n; i++) {
        const TraceEvent *e = &t->ev[i];
        if (e->rank != 0 || (e->kind != EV_ALL_GATHER && e->kind != EV_REDUCE_SCATTER)) continue;
        const Unit *u = &p->units[e->unit];
        cr_assert_leq(u->nparams, 64);
        for (int k = 0; k < u->nparams; k++) {
            const ParamSpec *ps = &m->params[u->params[k].param];
            shapes[k] = (TensorShape){(size_t)ps->shape[0], ps->row_elems};
        }
        int gather = e->kind == EV_ALL_GATHER;
        DType t_wire = gather ? param : reduce;
        lesson_try("unit_collective_bytes(%s's %d tensors, world=%d, dtype_bytes=%zu): the %s "
                   "with --param-dtype %s --reduce-dtype %s",
                   u->name, u->nparams, p->world, dtype_size(t_wire),
                   gather ? "all-gather" : "reduce-scatter", dtype_name(param), dtype_name(reduce));
        size_t got = unit_collective_bytes(shapes, u->nparams, p->world, dtype_size(t_wire));
        size_t want = (size_t)e->bytes, unpadded = u->numel * dtype_size(t_wire);
        const char *why = NULL;
        if (got == want / (size_t)p->world)
            why = "That is one GPU's block: the collective's buffer holds every GPU's block, "
                  "world of them.";
        else if (got == unpadded && unpadded != want)
            why = "You left out the padding: each tensor travels as world blocks of "
                  "ceil(d0/world) rows, the short ones padded.";
        else if (dtype_size(t_wire) == 2 && got == 2 * want)
            why = "You counted 4 bytes an element: in bf16 (param_dtype or reduce_dtype) the "
                  "collective moves 2.";
        expect_size_why(4, "bytes", want, got, why);
    }
}

static void expect_run_bytes(int ranks, DType param, DType reduce) {
    ModelDesc m;
    vit_2_layers(&m);
    FsdpConfig cfg;
    fsdp_config_defaults(&cfg);
    cfg.batch_size = 2;
    cfg.param_dtype = param;
    cfg.reduce_dtype = reduce;
    Plan p;
    Trace t;
    traced_step(&m, &cfg, ranks, &p, &t);
    expect_unit_bytes(&m, &p, &t, param, reduce);
    trace_free(&t);
    plan_free(&p);
    model_desc_free(&m);
}

Test(lesson09, t5_bytes_on_the_wire) {
    expect_run_bytes(2, DTYPE_FP32, DTYPE_FP32);
    expect_run_bytes(2, DTYPE_BF16, DTYPE_FP32); /* FSDP2's usual policy */
    expect_run_bytes(3, DTYPE_BF16, DTYPE_FP32); /* 3 does not divide the head's 10 rows */
    expect_run_bytes(4, DTYPE_BF16, DTYPE_BF16);
    expect_run_bytes(4, DTYPE_FP32, DTYPE_BF16);
}

/* ---------------------------------------------------------------- why reduce in fp32 */

#define RANKS 8
#define COLUMNS 64

/* rank q's gradients, and what the engine's all-reduce gave each rank */
typedef struct ReduceCase {
    float grads[RANKS][COLUMNS];
    float reduced[RANKS][COLUMNS];
} ReduceCase;

static int all_reduce_rank(const RankEnv *env, void *arg, Err *err) {
    ReduceCase *c = arg;
    int r = env->world_comm->rank;
    return comm_all_reduce(env->world_comm, c->grads[r], c->reduced[r], COLUMNS, DTYPE_FP32,
                           REDUCE_SUM, -1, err);
}

static void expect_sum_why(int hint, float want, float got, const char *why) {
    if (fp32_bits(want) != fp32_bits(got))
        lesson_fail_why(
            hint, lesson_fmt("sum=%.9g", (double)want),
            lesson_fmt("sum=%.9g%s", (double)got, isnan(got) ? " (never computed)" : ""), why);
}

static void expect_sum(int hint, float want, float got) {
    expect_sum_why(hint, want, got, NULL);
}

/* Gradient-like values of many magnitudes and both signs, so the order of additions shows. */
static float random_gradient(uint32_t *state) {
    float unit = (float)(next_random(state) >> 8) / 16777216.0f - 0.5f; /* [-0.5, 0.5) */
    return ldexpf(unit, -(int)(next_random(state) % 16u));
}

Test(lesson09, t6_sum_in_rank_order_like_the_engine) {
    static ReduceCase c;
    uint32_t state = 12345;
    for (int q = 0; q < RANKS; q++)
        for (int j = 0; j < COLUMNS; j++) c.grads[q][j] = random_gradient(&state);
    ClusterOptions opt = {.ranks = RANKS, .profile = profile_default()};
    ClusterResult res;
    Err err = {0};
    cr_assert_eq(cluster_run(&opt, all_reduce_rank, &c, &res, &err), 0, "%s", err.msg);
    cluster_result_free(&res);
    for (int j = 0; j < COLUMNS; j++) {
        float column[RANKS];
        for (int q = 0; q < RANKS; q++) column[q] = c.grads[q][j];
        lesson_try("sum_fp32(the %d ranks' gradient %d: %.9g, %.9g, ...), the engine's all-reduce",
                   RANKS, j, (double)column[0], (double)column[1]);
        expect_sum(5, c.reduced[0][j], sum_fp32(column, RANKS));
    }
}

/* The sum kept in type t, built on the engine's rounding: every addend and every partial sum
 * rounded to t. For fp32 dtype_round is the identity: a plain sum. */
static float reference_sum(DType t, const float *g, size_t n) {
    float sum = 0.0f;
    for (size_t i = 0; i < n; i++) sum = dtype_round(t, sum + dtype_round(t, g[i]));
    return sum;
}

static void expect_sums(const char *what, const float *g, size_t n) {
    float fp32 = reference_sum(DTYPE_FP32, g, n);
    lesson_try("sum_fp32(%s)", what);
    expect_sum(5, fp32, sum_fp32(g, n));
    float bf16 = reference_sum(DTYPE_BF16, g, n), got = sum_bf16(g, n);
    lesson_try("sum_bf16(%s), whose sum in fp32 is %.9g", what, (double)fp32);
    expect_sum_why(5, bf16, got,
                   fp32_bits(got) == fp32_bits(fp32)
                       ? "That is the sum kept in fp32: round every gradient and every partial sum "
                         "to bf16 (dtype_round) to see what a bf16 accumulator loses."
                       : NULL);
}

Test(lesson09, t7_many_small_gradients) {
    enum { N = 4096 };
    static float g[N];
    for (size_t i = 0; i < N; i++) g[i] = 0.001f;
    /* in bf16 the sum stops growing at 0.5, where 0.001 is less than half a step */
    expect_sums("4096 gradients of 0.001", g, N);
    uint32_t state = 777;
    for (size_t i = 0; i < N; i++) g[i] = 0.01f + random_gradient(&state) * 0.01f;
    expect_sums("4096 random gradients near 0.01", g, N);
    for (size_t i = 0; i < N; i++) g[i] = random_gradient(&state);
    expect_sums("4096 random gradients of both signs", g, N);
    float few[] = {1.0f, 0.001f, 0.001f, 0.001f, 0.001f};
    expect_sums("1 and four gradients of 0.001", few, 5);
}
