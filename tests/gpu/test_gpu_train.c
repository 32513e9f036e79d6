/* The whole engine on the GPU: a vit-tiny training step (and the toy's) on one GPU against the
 * simulator at one rank, with fp32 and with bf16 parameters, the trace it records, and 50
 * steps that learn. Skipped where there is no GPU. */
#include <criterion/criterion.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "jobs/train.h"
#include "models/toy.h"
#include "models/transformer.h"
#include "models/vit.h"
#include "runtime/gpu_run.h"
#include "sim/cluster.h"
#include "tests/gpu/gpu_util.h"
#include "tests/util.h"

typedef struct Losses {
    float first, last;
    long steps;
} Losses;

static void record(void *user, const StepReport *r) {
    Losses *l = user;
    if (r->step == 1) l->first = r->stats.loss;
    l->last = r->stats.loss;
    l->steps = r->step;
}

/* Trains `steps` steps at one rank on the GPU (gpu 1) or the simulator; returns the final
 * parameters (caller frees) and the losses; with `grads`, also the last step's gradients as the
 * optimizer read them (caller frees). */
static float *train(const ModelDesc *m, const Dataset *data, FsdpConfig cfg, long steps, int gpu,
                    Losses *losses, Trace *trace, float **grads) {
    Plan plan;
    Err err = {0};
    cr_assert_eq(plan_create(&plan, m, cfg.wrap, cfg.strategy, 1, 1, &err), 0, "%s", err.msg);
    float *params = calloc(m->total_numel, sizeof(float));
    memset(losses, 0, sizeof *losses);
    TrainJob job = {.model = m,
                    .data = data,
                    .plan = &plan,
                    .cfg = &cfg,
                    .steps = steps,
                    .log_every = 1,
                    .on_step = record,
                    .user = losses,
                    .final_params = params};
    if (grads) { /* the engine's record of every step's values (TrainJob.step_grads) */
        job.step_params = host_zeros((size_t)(steps + 1) * m->total_numel);
        job.step_grads = host_zeros((size_t)steps * m->total_numel);
    }
    ClusterOptions opt = {.ranks = 1, .profile = profile_default(), .trace = trace != NULL};
    ClusterResult res;
    int rc = gpu ? gpu_run(&opt, train_rank, &job, &res, &err)
                 : cluster_run(&opt, train_rank, &job, &res, &err);
    cr_assert_eq(rc, 0, "%s: %s", gpu ? "gpu" : "sim", err.msg);
    if (trace)
        *trace = res.trace;
    else
        cluster_result_free(&res);
    plan_free(&plan);
    if (grads) {
        *grads = host_floats(m->total_numel);
        memcpy(*grads, job.step_grads + (size_t)(steps - 1) * m->total_numel,
               m->total_numel * sizeof(float));
        free(job.step_params);
        free(job.step_grads);
    }
    return params;
}

/* The workshop's batch and learning rate. */
static FsdpConfig workshop_config(DType param_dtype) {
    FsdpConfig c;
    fsdp_config_defaults(&c);
    c.batch_size = 64;
    c.lr = 1e-3f;
    c.param_dtype = param_dtype;
    return c;
}

/* One step from the same seeded start: the GPU's gradients and parameters match the simulator's.
 * The parameters alone make a fragile check: Adam's first update is lr * g / (|g| + eps), about
 * lr * sign(g), so a gradient within its rounding error of zero may take the other sign on the
 * GPU and move its parameter 2 * lr away, which relative L2 over the parameters (norm ~ their
 * scale, not lr) reads as a failure at 1e-5. So invariant 6's bound applies to the gradients
 * the optimizer read (the whole forward and backward), and the parameters are held to Adam's
 * worst case for a flipped sign (2 * lr) with at most one in a thousand beyond rounding
 * (gpu_expect_params_close), which still catches a wrong optimizer. */
static void expect_step_matches(DType param_dtype, double bound) {
    gpu_or_skip();
    ModelDesc m;
    vit_preset_create(&m, "vit-tiny");
    Losses gl, sl;
    FsdpConfig c = workshop_config(param_dtype);
    float *gg, *sg;
    float *g = train(&m, vit_test_split(), c, 1, 1, &gl, NULL, &gg);
    float *s = train(&m, vit_test_split(), c, 1, 0, &sl, NULL, &sg);
    gpu_expect_close(gg, sg, m.total_numel, bound, "gradients of the first step");
    gpu_expect_params_close(g, s, m.total_numel, bound, 2.0 * c.lr, "parameters after one step");
    cr_expect(fabsf(gl.first - sl.first) <= (float)bound * 10.0f * sl.first,
              "loss: gpu %.6f, sim %.6f", (double)gl.first, (double)sl.first);
    free(gg);
    free(sg);
    free(g);
    free(s);
    model_desc_free(&m);
    gpu_done();
}

Test(gpu_train, a_vit_tiny_step_matches_the_simulator_fp32) {
    expect_step_matches(DTYPE_FP32, 1e-5);
}

Test(gpu_train, a_vit_tiny_step_matches_the_simulator_bf16) {
    expect_step_matches(DTYPE_BF16, 1e-2);
}

Test(gpu_train, the_toy_matches_the_simulator_and_records_a_trace) {
    gpu_or_skip();
    ModelDesc m;
    Dataset d;
    Err err = {0};
    cr_assert_eq(toy_model_create(&m, &err), 0);
    cr_assert_eq(toy_dataset_create(&d, &err), 0);
    FsdpConfig c;
    fsdp_config_defaults(&c);
    c.batch_size = 16;
    c.lr = 0.05f;
    Losses gl, sl;
    Trace t;
    float *g = train(&m, &d, c, 5, 1, &gl, &t, NULL);
    float *s = train(&m, &d, c, 5, 0, &sl, NULL, NULL);
    gpu_expect_close(g, s, m.total_numel, 1e-5, "toy parameters after 5 steps");
    size_t forwards = 0, allocs = 0;
    for (size_t i = 0; i < t.n; i++) {
        forwards += t.ev[i].kind == EV_FORWARD && t.ev[i].unit >= 0; /* not the loss's */
        allocs += t.ev[i].kind == EV_ALLOC;
        cr_expect(t.ev[i].end >= t.ev[i].start && t.ev[i].start >= 0.0, "event %zu's times", i);
    }
    cr_expect_eq(forwards, 5 * 3, "a forward per unit per step");
    cr_expect_gt(allocs, 0);
    trace_free(&t);
    free(g);
    free(s);
    dataset_free(&d);
    model_desc_free(&m);
    gpu_done();
}

/* A language model's first step on the GPU against the simulator's, on a text, at batch 8 and
 * Adam 3e-3 (set in *c): gradients, parameters after the step and the loss, held as the ViT's
 * step is. */
static void expect_lm_step_matches(const ModelDesc *m, const Dataset *text, FsdpConfig *c,
                                   const char *what) {
    fsdp_config_defaults(c);
    c->batch_size = 8;
    c->lr = 3e-3f;
    Losses gl, sl;
    float *gg, *sg;
    float *g = train(m, text, *c, 1, 1, &gl, NULL, &gg);
    float *s = train(m, text, *c, 1, 0, &sl, NULL, &sg);
    gpu_expect_close(gg, sg, m->total_numel, 1e-5, fmt_text("%s: first step's gradients", what));
    gpu_expect_params_close(g, s, m->total_numel, 1e-5, 2.0 * c->lr,
                            fmt_text("%s: parameters after one step", what));
    cr_expect(fabsf(gl.first - sl.first) <= 1e-5f * sl.first, "%s loss: gpu %.6f, sim %.6f", what,
              (double)gl.first, (double)sl.first);
    free(gg), free(sg), free(g), free(s);
}

/* The transformer of tc and a text of its sequence length. */
static void lm_model_and_text(const TransformerConfig *tc, ModelDesc *m, Dataset *text) {
    Err err = {0};
    cr_assert_eq(transformer_model_create(m, tc, &err), 0, "%s", err.msg);
    text_test_data(text, tc->seq);
}

/* The transformer on a text: its first step on the GPU matches the simulator's (the causal
 * attention, the embedding's scatter-add, the LM head and its loss), and twenty steps learn. */
Test(gpu_train, a_transformer_step_matches_the_simulator_and_learns, .timeout = 120) {
    gpu_or_skip();
    TransformerConfig tc = lm_small_config();
    ModelDesc m;
    Dataset text;
    lm_model_and_text(&tc, &m, &text);
    FsdpConfig c;
    expect_lm_step_matches(&m, &text, &c, "transformer");
    Losses gl;
    float *g = train(&m, &text, c, 20, 1, &gl, NULL, NULL);
    cr_expect_lt(gl.last, gl.first - 1.0f, "loss %.4f -> %.4f in 20 steps", (double)gl.first,
                 (double)gl.last);
    free(g);
    model_desc_free(&m);
    gpu_done();
}

/* Flash attention (GPT's block and Llama's, whose RMSNorm, RoPE, grouped-query attention and
 * SwiGLU run on the GPU too): the first step on the GPU matches the simulator's. */
Test(gpu_train, flash_and_llama_steps_match_the_simulator) {
    gpu_or_skip();
    for (int llama = 0; llama <= 1; llama++) {
        TransformerConfig tc = lm_small_config();
        tc.attention = ATTENTION_FLASH;
        if (llama) tc.arch = TRANSFORMER_LLAMA, tc.kv_heads = 2, tc.mlp = 48;
        ModelDesc m;
        Dataset text;
        lm_model_and_text(&tc, &m, &text);
        FsdpConfig c;
        expect_lm_step_matches(&m, &text, &c, llama ? "llama" : "gpt with flash");
        model_desc_free(&m);
    }
    gpu_done();
}

Test(gpu_train, fifty_steps_learn, .timeout = 300) {
    gpu_or_skip();
    ModelDesc m;
    vit_preset_create(&m, "vit-tiny");
    Losses l;
    float *p = train(&m, vit_test_split(), workshop_config(DTYPE_BF16), 50, 1, &l, NULL, NULL);
    cr_expect_eq(l.steps, 50);
    cr_expect_lt(l.last, 0.7f * l.first, "loss %.4f -> %.4f in 50 steps", (double)l.first,
                 (double)l.last);
    free(p);
    model_desc_free(&m);
    gpu_done();
}
