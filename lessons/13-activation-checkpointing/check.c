/* Lesson 13's check: the learner's bytes a block keeps and FLOPs it recomputes against the
 * engine's: planned Llama models one block apart under each policy, and one block's recompute. */
#include "lessons/tool/check.h"
#include "exercise.h"
#include "models/transformer.h"
#include "sim/device_sim.h"
#include "sim/kernels_none.h"
#include "sim/planner.h"

/* The shapes: small Llamas (hidden 64, 8 heads) whose GPU peak, at batch 8 and from 3 blocks on,
 * comes where every block's kept tensors are held, so one block more adds what one block keeps. */
static TransformerConfig llama(int shape, int flash) {
    TransformerConfig c = {.layers = 3,
                           .hidden = 64,
                           .heads = 8,
                           .mlp = shape ? 192 : 160,
                           .seq = 96,
                           .vocab = 300,
                           .arch = TRANSFORMER_LLAMA,
                           .kv_heads = shape ? 1 : 2};
    c.attention = flash ? ATTENTION_FLASH : ATTENTION_EAGER;
    return c;
}

enum { BATCH = 8 };

static BlockShape shape_of(const TransformerConfig *c, DType dtype) {
    return (BlockShape){.batch = BATCH,
                        .seq = (size_t)c->seq,
                        .hidden = (size_t)c->hidden,
                        .kv = (size_t)c->kv_heads * (size_t)(c->hidden / c->heads),
                        .mlp = (size_t)c->mlp,
                        .heads = (size_t)c->heads,
                        .elem_bytes = dtype_size(dtype),
                        .flash = c->attention == ATTENTION_FLASH};
}

static const char *shape_text(const BlockShape *s) {
    return lesson_fmt("batch=%zu seq=%zu hidden=%zu kv=%zu mlp=%zu heads=%zu elem_bytes=%zu %s",
                      s->batch, s->seq, s->hidden, s->kv, s->mlp, s->heads, s->elem_bytes,
                      s->flash ? "flash" : "eager");
}

static const char *keep_name(Keep k) {
    return k == KEEP_EVERYTHING ? "KEEP_EVERYTHING"
           : k == KEEP_INPUT    ? "KEEP_INPUT"
                                : "KEEP_GEMM_OUTPUTS";
}

static void config_for(FsdpConfig *cfg, Keep keep, DType dtype) {
    fsdp_config_defaults(cfg);
    cfg->batch_size = BATCH;
    cfg->param_dtype = dtype;
    cfg->ac_every = keep == KEEP_EVERYTHING ? 0 : 1;
    cfg->ac_policy = keep == KEEP_GEMM_OUTPUTS ? AC_OPS : AC_BLOCK;
}

/* The activations and checkpointed inputs at one GPU's peak, planned on one GPU. */
static double peak_kept(const TransformerConfig *c, Keep keep, DType dtype) {
    ModelDesc m;
    Plan p;
    Err err = {0};
    cr_assert_eq(transformer_model_create(&m, c, &err), 0, "%s", err.msg);
    FsdpConfig cfg;
    config_for(&cfg, keep, dtype);
    cr_assert_eq(fsdp_plan_create(&p, &m, &cfg, 1, &err), 0, "%s", err.msg);
    PlannerJob job = {.model = &m, .plan = &p, .cfg = cfg, .profile = profile_default()};
    PlannerResult r;
    cr_assert_eq(planner_run(&job, &r, &err), 0, "%s", err.msg);
    const size_t *at = planner_top_memory(&r)->on_gpu.at_peak;
    double bytes = (double)at[MEM_ACTIVATIONS] + (double)at[MEM_AC_INPUT];
    planner_result_free(&r);
    plan_free(&p);
    model_desc_free(&m);
    return bytes;
}

static void expect_kept(int hint, Keep keep) {
    const DType dtypes[] = {DTYPE_FP32, DTYPE_BF16};
    for (int shape = 0; shape < 2; shape++)
        for (int flash = 1; flash >= 0; flash--)
            for (int d = 0; d < 2; d++) {
                TransformerConfig c = llama(shape, flash);
                BlockShape s = shape_of(&c, dtypes[d]);
                lesson_try("kept_bytes(%s, %s)", shape_text(&s), keep_name(keep));
                double less = peak_kept(&c, keep, dtypes[d]);
                c.layers++;
                size_t want = (size_t)(peak_kept(&c, keep, dtypes[d]) - less);
                size_t got = kept_bytes(&s, keep);
                size_t M = s.batch * s.seq, rows = s.batch * s.heads * s.seq;
                size_t scores = s.flash ? 4 * rows : rows * s.seq * s.elem_bytes;
                const char *why = NULL;
                if (keep == KEEP_EVERYTHING && got == want - 8 * M)
                    why = "The two norms keep their rstd in fp32, 4 bytes a token each, whatever "
                          "the compute dtype.";
                else if (got + scores == want)
                    why = "Attention's scores are kept too: flash's log-sum-exp (fp32) or eager's "
                          "probabilities.";
                else if (keep != KEEP_INPUT && got + M * s.elem_bytes * s.hidden == want)
                    why = "The block's input is kept as well: backward reads it again (the first "
                          "norm's backward, or the recompute).";
                else if (keep == KEEP_INPUT && got == want + scores)
                    why = "Keeping the input alone drops attention's scores too: the recompute "
                          "makes them again.";
                expect_size_why(hint, "bytes", want, got, why);
            }
}

/* One block's recompute, run through the model on an accounting-only device after its forward
 * and its checkpointing: the GEMMs' FLOPs it reports (attention's products apart). */
static double recomputed_gemm_flops(const TransformerConfig *c, Keep keep) {
    ModelDesc m;
    Err err = {0};
    cr_assert_eq(transformer_model_create(&m, c, &err), 0, "%s", err.msg);
    SimClock clock = {0};
    SimDevice dev;
    device_sim_init(&dev, 0, &clock, NULL, profile_default());
    device_sim_accounting_only(&dev);
    ModelRun *run = NULL;
    cr_assert_eq(m.ops->run_create(&m, &dev.base, &kernels_none, DTYPE_FP32, BATCH, &run, &err), 0,
                 "%s", err.msg);
    Dataset data = {.n = BATCH};
    long idx[BATCH] = {0};
    cr_assert_eq(m.ops->set_batch(run, &data, idx, BATCH, &err), 0, "%s", err.msg);
    void *none[16] = {0};
    Work w;
    for (int mod = 0; mod < m.nmodules; mod++)
        cr_assert_eq(m.ops->forward(run, mod, none, &w, &err), 0, "%s", err.msg);
    AcPolicy policy = keep == KEEP_GEMM_OUTPUTS ? AC_OPS : AC_BLOCK;
    cr_assert_eq(m.ops->checkpoint(run, 1, policy, &err), 0, "%s", err.msg);
    cr_assert_eq(m.ops->recompute(run, 1, policy, none, &w, &err), 0, "%s", err.msg);
    m.ops->run_destroy(run);
    device_sim_release(&dev);
    model_desc_free(&m);
    return w.flops - w.attention_flops;
}

static void expect_recomputed(int hint, Keep keep) {
    for (int shape = 0; shape < 2; shape++) {
        TransformerConfig c = llama(shape, 1);
        BlockShape s = shape_of(&c, DTYPE_FP32);
        lesson_try("recompute_gemm_flops(%s, %s)", shape_text(&s), keep_name(keep));
        double want = keep == KEEP_EVERYTHING ? 0 : recomputed_gemm_flops(&c, keep);
        double got = recompute_gemm_flops(&s, keep);
        if (got != want)
            lesson_fail(hint, lesson_fmt("flops=%.0f", want), lesson_fmt("flops=%.0f", got));
    }
}

/* Each test says when it ran to its end (check.h): the runner passes nothing less. */
LESSON_CHECK_SUITE(lesson13);

Test(lesson13, t1_everything) {
    expect_kept(1, KEEP_EVERYTHING);
}

Test(lesson13, t2_the_input) {
    expect_kept(2, KEEP_INPUT);
}

Test(lesson13, t3_the_gemm_outputs) {
    expect_kept(2, KEEP_GEMM_OUTPUTS);
}

Test(lesson13, t4_recomputed_flops) {
    expect_recomputed(3, KEEP_EVERYTHING);
    expect_recomputed(3, KEEP_INPUT);
    expect_recomputed(3, KEEP_GEMM_OUTPUTS);
}
