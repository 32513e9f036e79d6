/* The GPT-2-style transformer: its parameter count, names and shapes, shapes chosen by size, bad
 * configurations refused, its activation bytes at the peak; as a byte-level language model, its
 * gradients against finite differences, no look-ahead, and FSDP at any world size equal to one
 * rank (invariant 1). */
#include <criterion/criterion.h>
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "jobs/train.h"
#include "kernels/cpu/cpu_ops.h"
#include "models/transformer.h"
#include "sim/cluster.h"
#include "sim/device_sim.h"
#include "sim/kernels_none.h"
#include "tests/util.h"

/* The parameter count against the formula and GPT-2 small's true figure; shapes chosen by size
 * (--params); bad configurations refused in one line; an accounting-only training step on the
 * simulated cluster whose activation bytes at the peak equal the sum of the buffers a real step
 * holds there; a computed run's gradients, causality and world-size independence. */

/* 2 layers of width 64 (4 heads, mlp 256), 32 tokens, a vocabulary of 2000 */
static TransformerConfig small_config(void) {
    return (TransformerConfig){
        .layers = 2, .hidden = 64, .heads = 4, .mlp = 256, .seq = 32, .vocab = 2000};
}

static void small_model(ModelDesc *m, const TransformerConfig *c) {
    Err err = {0};
    cr_assert_eq(transformer_model_create(m, c, &err), 0, "%s", err.msg);
}

static const ParamSpec *find_param(const ModelDesc *m, const char *name) {
    for (int i = 0; i < m->nparams; i++)
        if (!strcmp(m->params[i].name, name)) return &m->params[i];
    cr_assert_fail("no parameter %s", name);
    return NULL;
}

static void expect_shape(const ModelDesc *m, const char *name, int64_t d0, int64_t d1) {
    const ParamSpec *p = find_param(m, name);
    cr_expect_eq(p->ndim, d1 ? 2 : 1, "%s", name);
    cr_expect_eq(p->shape[0], d0, "%s", name);
    if (d1) cr_expect_eq(p->shape[1], d1, "%s", name);
}

/* ---------------------------------------------------------------- parameters */

/* GPT-2 small: 124,439,808 parameters with its head tied to wte, plus wte's 50257 x 768 =
 * 38,597,376 for the untied head here. */
Test(transformer, gpt2_small_has_its_true_parameter_count) {
    TransformerConfig c = {
        .layers = 12, .hidden = 768, .heads = 12, .mlp = 3072, .seq = 1024, .vocab = 50257};
    cr_expect_eq(transformer_param_count(&c), 124439808 + 38597376);
    cr_expect_eq(transformer_param_count(&c), 163037184);
    ModelDesc m;
    small_model(&m, &c);
    cr_expect_eq(m.total_numel, 163037184);
    cr_expect_str_eq(m.name, "transformer");
    cr_expect_eq(m.nmodules, 14);
    cr_expect_eq(m.nparams, 2 + 12 * 12 + 3);
    expect_shape(&m, "wte.weight", 50257, 768);
    expect_shape(&m, "wpe.weight", 1024, 768);
    expect_shape(&m, "h.0.ln_1.weight", 768, 0);
    expect_shape(&m, "h.0.attn.c_attn.weight", 3 * 768, 768);
    expect_shape(&m, "h.0.attn.c_attn.bias", 3 * 768, 0);
    expect_shape(&m, "h.5.attn.c_proj.weight", 768, 768);
    expect_shape(&m, "h.11.mlp.c_fc.weight", 3072, 768);
    expect_shape(&m, "h.11.mlp.c_fc.bias", 3072, 0);
    expect_shape(&m, "h.11.mlp.c_proj.weight", 768, 3072);
    expect_shape(&m, "h.11.mlp.c_proj.bias", 768, 0);
    expect_shape(&m, "ln_f.bias", 768, 0);
    expect_shape(&m, "lm_head.weight", 50257, 768);
    cr_expect_str_eq(m.params[m.nparams - 1].name, "lm_head.weight");
    model_desc_free(&m);
}

/* The formula against the description, module by module, for shapes of every kind. */
Test(transformer, the_count_formula_matches_the_description) {
    TransformerConfig cases[] = {
        {.layers = 1, .hidden = 8, .heads = 2, .mlp = 5, .seq = 3, .vocab = 7},
        {.layers = 2, .hidden = 64, .heads = 4, .mlp = 256, .seq = 32, .vocab = 2000},
        {.layers = 7, .hidden = 96, .heads = 12, .mlp = 100, .seq = 100, .vocab = 1234},
    };
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        const TransformerConfig *c = &cases[i];
        ModelDesc m;
        small_model(&m, c);
        size_t H = (size_t)c->hidden, F = (size_t)c->mlp, V = (size_t)c->vocab;
        size_t block = 4 * H + 3 * H * H + 3 * H + H * H + H + F * H + F + H * F + H;
        size_t want = V * H + (size_t)c->seq * H + (size_t)c->layers * block + 2 * H + V * H;
        cr_expect_eq(transformer_param_count(c), want, "case %zu", i);
        cr_expect_eq(m.total_numel, want, "case %zu", i);
        cr_expect_eq(m.nmodules, c->layers + 2);
        cr_expect_str_eq(m.modules[0].name, "embed");
        cr_expect_eq(m.modules[0].is_block, 0);
        cr_expect_eq(m.modules[0].nparams, 2);
        for (int l = 0; l < c->layers; l++) {
            char name[32];
            snprintf(name, sizeof name, "h.%d", l);
            cr_expect_str_eq(m.modules[1 + l].name, name);
            cr_expect_eq(m.modules[1 + l].is_block, 1);
            cr_expect_eq(m.modules[1 + l].nparams, 12);
        }
        cr_expect_str_eq(m.modules[c->layers + 1].name, "head");
        cr_expect_eq(m.modules[c->layers + 1].is_block, 0);
        size_t sum = 0;
        for (int p = 0; p < m.nparams; p++) {
            const ParamSpec *s = &m.params[p];
            cr_expect_eq(s->row_elems * (size_t)s->shape[0], s->numel, "%s", s->name);
            sum += s->numel;
        }
        cr_expect_eq(sum, want);
        model_desc_free(&m);
    }
}

/* GPT-2's initialization: LayerNorms at 1 and 0, biases 0, weights N(0, 0.02), the two
 * projections into the residual stream N(0, 0.02 / sqrt(2 layers)). */
Test(transformer, initialises_as_gpt2) {
    TransformerConfig c = small_config();
    ModelDesc m;
    small_model(&m, &c);
    cr_expect_eq(param_init_value(find_param(&m, "h.1.ln_2.weight"), 1, 5), 1.0f);
    cr_expect_eq(param_init_value(find_param(&m, "h.1.mlp.c_fc.bias"), 1, 5), 0.0f);
    cr_expect_eq(param_init_value(find_param(&m, "ln_f.bias"), 1, 5), 0.0f);
    const ParamSpec *wte = find_param(&m, "wte.weight"),
                    *proj = find_param(&m, "h.0.attn.c_proj.weight");
    cr_expect_eq(wte->init, INIT_NORMAL);
    cr_expect_float_eq(wte->init_b, 0.02f, 1e-9f);
    cr_expect_eq(proj->init, INIT_NORMAL);
    cr_expect_float_eq(proj->init_b, 0.02f / 2.0f, 1e-7f); /* sqrt(2 x 2 layers) = 2 */
    double sum = 0, sq = 0;
    for (size_t i = 0; i < wte->numel; i++) {
        double v = param_init_value(wte, 7, i);
        sum += v;
        sq += v * v;
    }
    double mean = sum / (double)wte->numel, sd = sqrt(sq / (double)wte->numel - mean * mean);
    cr_expect_lt(fabs(mean), 0.001, "mean %g", mean);
    cr_expect_lt(fabs(sd - 0.02), 0.001, "std %g", sd);
    model_desc_free(&m);
}

/* ---------------------------------------------------------------- shapes by size */

Test(transformer, a_shape_for_any_size_within_a_tenth_of_a_percent) {
    Err err = {0};
    enum { STEPS = 400 }; /* 1e8 to 1e12, 100 a decade */
    for (int i = 0; i <= STEPS; i++) {
        double want = 1e8 * pow(10.0, 4.0 * i / STEPS);
        TransformerConfig c;
        cr_assert_eq(transformer_config_for_params(want, &c, &err), 0, "%g: %s", want, err.msg);
        double got = (double)transformer_param_count(&c);
        cr_expect_leq(fabs(got - want) / want, 1e-3, "%g: %.0f parameters", want, got);
        cr_expect_geq(c.vocab, 1000, "%g", want);
        cr_expect_eq(c.mlp, 4 * c.hidden, "%g", want);
        cr_expect_eq(c.seq, 2048, "%g", want);
        cr_expect_eq(transformer_config_check(&c, &err), 0, "%g: %s", want, err.msg);
    }
    TransformerConfig c;
    cr_assert_eq(transformer_config_for_params(7e9, &c, &err), 0, "%s", err.msg);
    cr_expect_eq(c.hidden, 4096);
    cr_expect_eq(c.layers, 32);
    cr_expect_eq(c.heads, 32);
    cr_assert_eq(transformer_config_for_params(125e6, &c, &err), 0, "%s", err.msg);
    cr_expect(c.layers == 12 && c.hidden == 768 && c.heads == 12, "%d x %d", c.layers, c.hidden);
    cr_assert_eq(transformer_config_for_params(175e9, &c, &err), 0, "%s", err.msg);
    cr_expect(c.layers == 96 && c.hidden == 12288 && c.heads == 96, "%d x %d", c.layers, c.hidden);
    cr_assert_eq(transformer_config_for_params(1e13, &c, &err), 0, "%s", err.msg);
    cr_expect_leq(fabs((double)transformer_param_count(&c) - 1e13) / 1e13, 1e-3);
}

static void expect_one_line(const Err *err, const char *want) {
    cr_expect_eq(err->code, ERR_USAGE, "%s", err->msg);
    cr_expect_null(strchr(err->msg, '\n'), "%s", err->msg);
    cr_expect_str_eq(err->msg, want);
}

Test(transformer, a_size_out_of_range_is_one_line) {
    struct {
        double params;
        const char *want;
    } cases[] = {
        {0, "--params must be above 0 and at most 1e13 (got 0)"},
        {-7e9, "--params must be above 0 and at most 1e13 (got -7e+09)"},
        {NAN, "--params must be above 0 and at most 1e13 (got nan)"},
        {2e13, "--params must be above 0 and at most 1e13 (got 2e+13)"},
        {1e6, "--params 1e+06 is below the smallest shape made here (1 layer of hidden 768 and a "
              "vocabulary of 1000: 10198272 parameters)"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        TransformerConfig c;
        Err err = {0};
        cr_expect_eq(transformer_config_for_params(cases[i].params, &c, &err), ERR_USAGE);
        expect_one_line(&err, cases[i].want);
    }
}

Test(transformer, bad_configs_are_one_line) {
    TransformerConfig base = {
        .layers = 32, .hidden = 4096, .heads = 32, .mlp = 16384, .seq = 2048, .vocab = 50257};
    struct {
        TransformerConfig c;
        const char *want;
    } cases[] = {
        {base, "--hidden must be a multiple of --heads (got 4096 and 30)"},
        {base, "--layers must be from 1 to 100000 (got 0)"},
        {base, "--hidden must be from 1 to 131072 (got -1)"},
        {base, "--mlp must be from 1 to 1048576 (got 2000000)"},
        {base, "--seq must be from 1 to 1048576 (got 0)"},
        {base, "--vocab must be from 1 to 16777216 (got 0)"},
        {base, "--heads must be from 1 to 131072 (got 0)"},
        {base, "one sequence of --seq 1048576 tokens through --layers 32 would hold 4.51e+15 "
               "bytes of activations; at most 2^44 are modelled"},
    };
    cases[0].c.heads = 30;
    cases[1].c.layers = 0;
    cases[2].c.hidden = -1;
    cases[3].c.mlp = 2000000;
    cases[4].c.seq = 0;
    cases[5].c.vocab = 0;
    cases[6].c.heads = 0;
    cases[7].c.seq = 1 << 20;
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        Err err = {0};
        cr_expect_eq(transformer_config_check(&cases[i].c, &err), ERR_USAGE, "case %zu", i);
        expect_one_line(&err, cases[i].want);
        ModelDesc m;
        cr_expect_eq(transformer_model_create(&m, &cases[i].c, &err), ERR_USAGE, "case %zu", i);
        cr_expect_null(m.params);
    }
    Err err = {0};
    cr_expect_eq(transformer_config_check(&base, &err), 0, "%s", err.msg);
}

/* ---------------------------------------------------------------- accounting-only runs */

/* The small transformer and a simulated device (the default profile, its clock at 0) to run
 * it on. */
static void model_and_device(ModelDesc *m, const TransformerConfig *c, SimDevice *dev,
                             SimClock *clock) {
    small_model(m, c);
    *clock = (SimClock){0};
    device_sim_init(dev, 0, clock, NULL, profile_default());
}

static void small_model_and_device(ModelDesc *m, SimDevice *dev, SimClock *clock) {
    TransformerConfig c = small_config();
    model_and_device(m, &c, dev, clock);
}

/* What a computed run needs beyond a plan's shape: a sequence its kernels' attention takes (a
 * table that caps it, as the GPU's does), and every byte must have a row of the embedding. */
Test(transformer, a_computed_run_refuses_what_it_cannot_compute) {
    ModelDesc m;
    SimDevice dev;
    SimClock clock;
    TransformerConfig cases[2] = {small_config(), small_config()};
    cases[0].seq = 257;
    cases[1].vocab = 255;
    Kernels capped = kernels_cpu;
    capped.max_tokens = 256;
    const char *want[2] = {"--seq 257 is more than the 256 tokens the cpu kernels' eager attention "
                           "takes",
                           "a vocabulary of 255 cannot hold a byte's 256 values: a computed run "
                           "reads bytes"};
    for (int i = 0; i < 2; i++) {
        small_model(&m, &cases[i]);
        clock = (SimClock){0};
        device_sim_init(&dev, 0, &clock, NULL, profile_default());
        ModelRun *run = NULL;
        Err err = {0};
        cr_expect_eq(m.ops->run_create(&m, &dev.base, &capped, DTYPE_FP32, 2, &run, &err),
                     ERR_USAGE);
        expect_one_line(&err, want[i]);
        cr_expect_null(run);
        cr_expect_eq(dev.base.memory.total, 0);
        device_sim_release(&dev);
        model_desc_free(&m);
    }
}

/* run_create's answer for the small transformer at `seq` with `attention` on table k: 0 (the run
 * made and destroyed) or the error, whose line is left in err. */
static int create_at(const Kernels *k, int seq, AttentionKind attention, Err *err) {
    TransformerConfig c = small_config();
    c.seq = seq;
    c.attention = attention;
    ModelDesc m;
    small_model(&m, &c);
    SimDevice dev;
    SimClock clock = {0};
    device_sim_init(&dev, 0, &clock, NULL, profile_default());
    ModelRun *run = NULL;
    const int rc = m.ops->run_create(&m, &dev.base, k, DTYPE_FP32, 2, &run, err);
    if (rc == 0) m.ops->run_destroy(run);
    cr_expect_eq(rc == 0, run != NULL);
    device_sim_release(&dev);
    model_desc_free(&m);
    return rc;
}

/* The sequence limit is the one of the config's attention: a table's eager kernels may keep T x T
 * probabilities on chip (the GPU's: max_tokens KERNELS_MAX_TOKENS) while its flash kernels take
 * any T (max_flash_tokens 0), or have a limit of their own (kernels_cuda's until its tiled flash
 * kernels have passed tests/gpu on a GPU). The CPU's take any length of either kind. */
Test(transformer, the_sequence_limit_is_the_attention_kinds_own) {
    cr_expect_eq(kernels_cpu.max_tokens, 0);
    cr_expect_eq(kernels_cpu.max_flash_tokens, 0);
    Err err = {0};
    cr_expect_eq(create_at(&kernels_cpu, 512, ATTENTION_EAGER, &err), 0, "%s", err.msg);
    cr_expect_eq(create_at(&kernels_cpu, 512, ATTENTION_FLASH, &err), 0, "%s", err.msg);

    Kernels gpu_like = kernels_cpu; /* a GPU's limits on kernels this test can run */
    gpu_like.max_tokens = KERNELS_MAX_TOKENS;
    gpu_like.max_flash_tokens = 0;
    err = (Err){0};
    cr_expect_eq(create_at(&gpu_like, 512, ATTENTION_EAGER, &err), ERR_USAGE);
    expect_one_line(&err, "--seq 512 is more than the 256 tokens the cpu kernels' eager attention "
                          "takes");
    err = (Err){0};
    cr_expect_eq(create_at(&gpu_like, 512, ATTENTION_FLASH, &err), 0, "%s", err.msg);
    cr_expect_eq(create_at(&gpu_like, KERNELS_MAX_TOKENS, ATTENTION_EAGER, &err), 0, "%s", err.msg);

    gpu_like.max_flash_tokens = KERNELS_MAX_TOKENS; /* kernels_cuda's, for now */
    err = (Err){0};
    cr_expect_eq(create_at(&gpu_like, 512, ATTENTION_FLASH, &err), ERR_USAGE);
    expect_one_line(&err, "--seq 512 is more than the 256 tokens the cpu kernels' flash attention "
                          "takes");
    /* a flash limit alone leaves eager's as it is */
    gpu_like.max_tokens = 0;
    err = (Err){0};
    cr_expect_eq(create_at(&gpu_like, 512, ATTENTION_EAGER, &err), 0, "%s", err.msg);
}

/* One zero3 training step of the small transformer on 4 simulated ranks of 2 sequences each,
 * checkpointing every `ac_every` blocks (0: none); each rank's memory. The data set is only a
 * count: the sampler draws the global batch from it. */
static int small_step(int accounting_only, int ac_every, RankMemory memory[4], Err *err) {
    TransformerConfig c = small_config();
    ModelDesc m;
    small_model(&m, &c);
    FsdpConfig cfg;
    fsdp_config_defaults(&cfg);
    cfg.batch_size = 2;
    cfg.ac_every = ac_every;
    Plan plan;
    cr_assert_eq(plan_create(&plan, &m, cfg.wrap, cfg.strategy, 4, 1, err), 0, "%s", err->msg);
    Dataset data = {.n = 4L * cfg.batch_size};
    TrainJob job = {
        .model = &m, .data = &data, .plan = &plan, .cfg = &cfg, .steps = 1, .memory = memory};
    ClusterOptions opt = {.ranks = 4,
                          .replicas = 1,
                          .profile = profile_default(),
                          .accounting_only = accounting_only};
    ClusterResult res;
    int rc = cluster_run(&opt, train_rank, &job, &res, err);
    cluster_result_free(&res);
    plan_free(&plan);
    model_desc_free(&m);
    return rc;
}

/* A data set that is only a count (what a plan gives it) has no bytes to compute on. */
Test(transformer, a_computed_run_without_a_text_is_refused_in_one_line) {
    RankMemory memory[4];
    Err err = {0};
    cr_expect_eq(small_step(0, 0, memory, &err), ERR_USAGE);
    expect_one_line(&err, "the transformer reads sequences of 32 bytes of a text; this data set "
                          "has no text");
}

/* Activation bytes a rank holds at the start of the head's backward, once it has taken its
 * two buffers: every buffer the step has taken and not yet released. Written out buffer by
 * buffer (fp32 and int32 are 4 bytes); R = B x T rows of the residual stream. */
static size_t head_backward_bytes(const TransformerConfig *c, size_t B) {
    size_t T = (size_t)c->seq, H = (size_t)c->hidden, F = (size_t)c->mlp, V = (size_t)c->vocab;
    size_t L = (size_t)c->layers, heads = (size_t)c->heads, R = B * T;
    size_t ids = R + R;                /* set_batch: tokens, targets [B, T] int32 */
    size_t stream = (L + 1) * R * H;   /* x[1] (embed's output) .. x[L+1] (last block's) */
    size_t block = R * H               /* ln_1 output */
                   + R + R             /* its mean, rstd */
                   + R * 3 * H         /* qkv */
                   + B * heads * T * T /* attention probabilities */
                   + R * H             /* attention output */
                   + R * H             /* mid: the stream after attention */
                   + R * H + R + R     /* ln_2 output, mean, rstd */
                   + R * F + R * F;    /* fc1 (before bias), GELU output */
    size_t head = R * H + R + R        /* ln_f output, mean, rstd */
                  + R * V              /* logits */
                  + R * V;             /* dlogits (the loss) */
    size_t backward = R * H + R * H;   /* head backward: dL/d(ln_f out), the stream's gradient */
    return 4 * (ids + stream + L * block + head + backward);
}

/* zero3 at 4 ranks, 2 sequences each, unit per block plus the root (embed + head). Rank 0's
 * total peaks during the head's backward: the root unit is gathered with its gradients, the
 * first block's parameters are prefetched, and every activation of the step is held, with
 * the logits and their gradient (2 x 64 x 2000 floats, 1 MB) larger than anything a block's
 * backward adds after they are freed (its unit's gradients and temporaries, about 0.6 MB). */
Test(transformer, an_accounting_only_step_holds_exactly_a_real_steps_activations) {
    TransformerConfig c = small_config();
    RankMemory memory[4];
    Err err = {0};
    cr_assert_eq(small_step(1, 0, memory, &err), 0, "%s", err.msg);
    /* R = 64 rows: 512 (ids) + 3 x 16,384 (stream) + 2 x 279,552 (blocks: 64 x 964 floats and
     * 8,192 of probabilities each) + 16,896 + 1,024,000 (head, logits and dlogits) + 32,768 */
    size_t want = head_backward_bytes(&c, 2);
    cr_expect_eq(want, 512 + 3 * 16384 + 2 * 279552 + 16896 + 1024000 + 32768);
    cr_expect_eq(want, 1682432);
    cr_expect_eq(memory[0].at_peak[MEM_ACTIVATIONS], want, "rank 0 held %zu bytes at its peak",
                 memory[0].at_peak[MEM_ACTIVATIONS]);
    for (int r = 0; r < 4; r++) {
        cr_expect_eq(memory[r].rest[MEM_ACTIVATIONS], 0, "rank %d released them all", r);
        cr_expect_gt(memory[r].at_peak[MEM_PARAM_UNSHARDED], 0, "rank %d", r);
    }
    /* checkpointing every block keeps their inputs instead and holds less at the peak */
    RankMemory ckpt[4];
    cr_assert_eq(small_step(1, 1, ckpt, &err), 0, "%s", err.msg);
    cr_expect_lt(ckpt[0].at_peak[MEM_ACTIVATIONS] + ckpt[0].at_peak[MEM_AC_INPUT],
                 memory[0].at_peak[MEM_ACTIVATIONS]);
    cr_expect_eq(ckpt[0].rest[MEM_ACTIVATIONS] + ckpt[0].rest[MEM_AC_INPUT], 0);
}

/* The model alone on an accounting-only device: forward, loss and backward take only
 * activations, so the device's peak is the head's backward again; everything is released by
 * the end, and each module reports its work (the LM head's GEMM 2 x B x T x H x vocab flops,
 * twice that on backward; a block's its GEMMs and attention). */
Test(transformer, the_model_alone_charges_its_buffers_and_work) {
    TransformerConfig c = small_config();
    ModelDesc m;
    SimDevice dev;
    SimClock clock;
    small_model_and_device(&m, &dev, &clock);
    device_sim_accounting_only(&dev);
    ModelRun *run = NULL;
    Err err = {0};
    cr_assert_eq(m.ops->run_create(&m, &dev.base, &kernels_none, DTYPE_FP32, 2, &run, &err), 0,
                 "%s", err.msg);
    Dataset data = {.n = 2};
    long idx[2] = {0, 1};
    cr_assert_eq(m.ops->set_batch(run, &data, idx, 2, &err), 0, "%s", err.msg);
    float *none[16] = {0}; /* parameters and gradients: never read */
    Work w[4];
    for (int mod = 0; mod < m.nmodules; mod++)
        cr_assert_eq(m.ops->forward(run, mod, (void *const *)none, &w[mod], &err), 0, "%s",
                     err.msg);
    cr_expect_eq(w[0].flops, 2.0 * 32 * 64); /* wte[ids] + wpe */
    cr_expect_eq(w[1].flops, 2.0 * 64 * 64 * (4 * 64 + 2 * 256) + 4.0 * 2 * 32 * 32 * 64);
    cr_expect_eq(w[3].flops, 2.0 * 2 * 32 * 64 * 2000);
    Work loss;
    cr_expect_eq(m.ops->loss(run, 1.0f, &loss), 0.0f);
    cr_expect_eq(loss.flops, 8.0 * 2 * 32 * 2000);
    for (int mod = m.nmodules - 1; mod >= 0; mod--)
        cr_assert_eq(m.ops->backward(run, mod, (void *const *)none, none, &w[mod], &err), 0, "%s",
                     err.msg);
    cr_expect_eq(w[3].flops, 2 * 2.0 * 2 * 32 * 64 * 2000);
    cr_expect_eq(w[2].kind, WORK_BACKWARD);
    cr_expect_eq(dev.base.memory.peak, head_backward_bytes(&c, 2));
    cr_expect_eq(dev.base.memory.total, 0, "every activation was released");
    m.ops->run_destroy(run);
    device_sim_release(&dev);
    model_desc_free(&m);
}

/* A run of config c's model under table k on an accounting-only device, with a batch of two
 * sequences set (the data set is only a count: the sampler draws from it). */
static ModelRun *accounting_run(ModelDesc *m, const TransformerConfig *c, const Kernels *k,
                                DType dtype, SimDevice *dev, SimClock *clock) {
    model_and_device(m, c, dev, clock);
    device_sim_accounting_only(dev);
    ModelRun *run = NULL;
    Err err = {0};
    cr_assert_eq(m->ops->run_create(m, &dev->base, k, dtype, 2, &run, &err), 0, "%s", err.msg);
    Dataset data = {.n = 2};
    long idx[2] = {0, 1};
    cr_assert_eq(m->ops->set_batch(run, &data, idx, 2, &err), 0, "%s", err.msg);
    return run;
}

/* The peak a flash block's backward adds over what it starts with, on an accounting-only device
 * under table k: the whole forward and the loss, the head's backward, then the last block's. */
static size_t flash_block_backward_peak(TransformerArch arch, const Kernels *k) {
    TransformerConfig c = small_config();
    c.arch = arch, c.attention = ATTENTION_FLASH;
    if (arch == TRANSFORMER_LLAMA) c.kv_heads = 2;
    ModelDesc m;
    SimDevice dev;
    SimClock clock;
    ModelRun *run = accounting_run(&m, &c, k, DTYPE_BF16, &dev, &clock);
    Err err = {0};
    float *none[16] = {0};
    Work w;
    for (int mod = 0; mod < m.nmodules; mod++)
        cr_assert_eq(m.ops->forward(run, mod, (void *const *)none, &w, &err), 0, "%s", err.msg);
    m.ops->loss(run, 1.0f, &w);
    const int head = m.nmodules - 1, last_block = head - 1;
    cr_assert_eq(m.ops->backward(run, head, (void *const *)none, none, &w, &err), 0, "%s", err.msg);
    const size_t before = dev.base.memory.total;
    dev.base.memory.peak = before; /* the block's own peak from here */
    cr_assert_eq(m.ops->backward(run, last_block, (void *const *)none, none, &w, &err), 0, "%s",
                 err.msg);
    const size_t added = dev.base.memory.peak - before;
    m.ops->run_destroy(run);
    device_sim_release(&dev);
    model_desc_free(&m);
    return added;
}

/* Flash attention's backward takes a T x T fp32 work tile only under a table whose backward
 * recomputes the probabilities into it (the CPU's; kernels_none stands for it here). A GPU's
 * keeps them on chip (flash_uses_work 0): its blocks, GPT's and Llama's, take T^2 x 4 bytes
 * less at their backward's peak, and nothing else changes. */
Test(transformer, flash_backward_takes_a_work_tile_only_where_the_table_uses_one) {
    Kernels on_chip = kernels_none;
    on_chip.flash_uses_work = 0;
    const size_t T = (size_t)small_config().seq;
    const TransformerArch archs[] = {TRANSFORMER_GPT, TRANSFORMER_LLAMA};
    for (size_t i = 0; i < 2; i++) {
        const size_t with_tile = flash_block_backward_peak(archs[i], &kernels_none);
        const size_t without = flash_block_backward_peak(archs[i], &on_chip);
        cr_expect_gt(without, 0);
        cr_expect_eq(with_tile - without, T * T * 4, "arch %d: %zu against %zu bytes",
                     (int)archs[i], with_tile, without);
    }
}

/* --loss eager on an accounting-only device in bf16, n = B x T x vocab logits: the loss drops
 * the logits (2n bytes) and holds at its fullest the log-probabilities, the NLL's gradient and
 * log-softmax's (4n each), then leaves the logits' gradient (2n): 10n above the end of forward
 * where the fused pass holds 2n more, and five kernels over 48 bytes a logit. */
Test(transformer, the_eager_loss_holds_three_fp32_tensors_of_the_logits_at_its_fullest) {
    const size_t n = 2 * 32 * 2000;
    for (int eager = 0; eager < 2; eager++) {
        TransformerConfig c = small_config();
        c.loss = eager ? LOSS_EAGER : LOSS_FUSED;
        ModelDesc m;
        SimDevice dev;
        SimClock clock;
        ModelRun *run = accounting_run(&m, &c, &kernels_none, DTYPE_BF16, &dev, &clock);
        Err err = {0};
        float *none[16] = {0};
        Work w;
        for (int mod = 0; mod < m.nmodules; mod++)
            cr_assert_eq(m.ops->forward(run, mod, (void *const *)none, &w, &err), 0, "%s", err.msg);
        const size_t end_of_forward = dev.base.memory.total;
        cr_expect_lt(dev.base.memory.peak, end_of_forward + 2 * n);
        Work loss;
        m.ops->loss(run, 1.0f, &loss);
        cr_expect_eq(dev.base.memory.peak, end_of_forward + (eager ? 10 : 2) * n, "%s loss",
                     eager ? "eager" : "fused");
        cr_expect_eq(dev.base.memory.total, end_of_forward + (eager ? 0 : 2) * n);
        if (eager) {
            cr_expect_eq(loss.kernels, 5);
            cr_expect_eq(loss.bytes, 48.0 * n);
        }
        for (int mod = m.nmodules - 1; mod >= 0; mod--)
            cr_assert_eq(m.ops->backward(run, mod, (void *const *)none, none, &w, &err), 0, "%s",
                         err.msg);
        cr_expect_eq(dev.base.memory.total, 0, "every activation was released");
        m.ops->run_destroy(run);
        device_sim_release(&dev);
        model_desc_free(&m);
    }
}

/* ---------------------------------------------------------------- computed runs */

/* The tiny language model the gradient tests run alone on a simulated device that holds data:
 * its parameters (GPT-2's initialization), their gradients and a batch of two sequences of the
 * test text. */
typedef struct Lm {
    ModelDesc m;
    SimDevice dev;
    SimClock clock;
    ModelRun *run;
    Dataset data;
    float *params, *grads;
    float *p[64], *g[64]; /* each parameter's and its gradient's first element */
    long idx[2];
} Lm;

static void lm_open_with(Lm *l, LossKind loss) {
    memset(l, 0, sizeof *l);
    TransformerConfig c = {
        .layers = 2, .hidden = 8, .heads = 2, .mlp = 12, .seq = 6, .vocab = 256, .loss = loss};
    small_model(&l->m, &c);
    device_sim_init(&l->dev, 0, &l->clock, NULL, profile_default());
    Err err = {0};
    cr_assert_eq(
        l->m.ops->run_create(&l->m, &l->dev.base, &kernels_cpu, DTYPE_FP32, 2, &l->run, &err), 0,
        "%s", err.msg);
    text_test_data(&l->data, c.seq);
    l->idx[0] = 3, l->idx[1] = 17;
    l->params = host_floats(l->m.total_numel);
    l->grads = host_zeros(l->m.total_numel);
    cr_assert_leq(l->m.nparams, 64);
    size_t at = 0;
    for (int i = 0; i < l->m.nparams; i++) {
        const ParamSpec *ps = &l->m.params[i];
        param_init_fill(ps, 1234, 0, ps->numel, l->params + at);
        l->p[i] = l->params + at, l->g[i] = l->grads + at;
        at += ps->numel;
    }
    /* LayerNorms away from 1 and 0, biases away from 0: every term of the backward counts */
    for (size_t i = 0; i < l->m.total_numel; i++)
        if (l->params[i] == 1.0f || l->params[i] == 0.0f) l->params[i] += 0.1f * sinf((float)i);
}

static void lm_open(Lm *l) {
    lm_open_with(l, LOSS_FUSED);
}

static void lm_close(Lm *l) {
    l->m.ops->run_destroy(l->run);
    device_sim_release(&l->dev);
    free_floats((float *[]){l->params, l->grads}, 2);
    model_desc_free(&l->m);
}

/* Forward over every module on the current parameters; the loss. */
static float lm_forward(Lm *l) {
    Err err = {0};
    Work w;
    cr_assert_eq(l->m.ops->set_batch(l->run, &l->data, l->idx, 2, &err), 0, "%s", err.msg);
    for (int mod = 0; mod < l->m.nmodules; mod++)
        cr_assert_eq(l->m.ops->forward(l->run, mod,
                                       (void *const *)&l->p[l->m.modules[mod].first_param], &w,
                                       &err),
                     0, "%s", err.msg);
    return l->m.ops->loss(l->run, 1.0f, &w);
}

static void lm_backward(Lm *l) {
    Err err = {0};
    Work w;
    for (int mod = l->m.nmodules - 1; mod >= 0; mod--) {
        int first = l->m.modules[mod].first_param;
        cr_assert_eq(
            l->m.ops->backward(l->run, mod, (void *const *)&l->p[first], &l->g[first], &w, &err), 0,
            "%s", err.msg);
    }
}

/* The loss is the mean over both sequences' 6 positions of -log softmax(logits)[next byte],
 * the byte after the position's own in the text: computed here in double from the logits. */
static void expect_next_byte_loss(Lm *l, float loss) {
    size_t n;
    const float *z = l->m.ops->boundary(l->run, l->m.nmodules - 1, BOUNDARY_OUTPUT, &n);
    cr_assert_eq(n, 2 * 6 * 256);
    double sum = 0;
    for (int i = 0; i < 2; i++)
        for (int t = 0; t < 6; t++) {
            const float *row = z + (i * 6 + t) * 256;
            int next = l->data.text[l->idx[i] * 6 + t + 1];
            double mx = row[0], e = 0;
            for (int v = 1; v < 256; v++) mx = row[v] > mx ? row[v] : mx;
            for (int v = 0; v < 256; v++) e += exp(row[v] - mx);
            sum += mx + log(e) - row[next];
        }
    cr_expect(fabs(loss - sum / 12) < 1e-5, "loss %.7g, next-byte cross-entropy %.7g", loss,
              sum / 12);
}

/* Every parameter's gradient (every element of the small tensors, every 7th of wte and lm_head)
 * against central differences of the loss: the embedding's scatter-add, the causal blocks, ln_f,
 * the LM head and the next-token loss wired together. The loss is a float near ln 256, so
 * the differences carry about 2e-5 of rounding. */
Test(transformer, every_gradient_matches_finite_differences) {
    Lm l;
    lm_open(&l);
    float loss = lm_forward(&l);
    cr_expect(fabsf(loss - logf(256.0f)) < 0.05f, "a fresh model is near uniform: %g", loss);
    expect_next_byte_loss(&l, loss);
    lm_backward(&l);
    int bad = 0, checked = 0;
    for (int i = 0; i < l.m.nparams; i++) {
        const ParamSpec *ps = &l.m.params[i];
        size_t stride = ps->numel > 1000 ? 7 : 1;
        for (size_t j = 0; j < ps->numel; j += stride, checked++) {
            const float h = 1e-2f, saved = l.p[i][j];
            l.p[i][j] = saved + h;
            double up = lm_forward(&l);
            l.p[i][j] = saved - h;
            double down = lm_forward(&l);
            l.p[i][j] = saved;
            double fd = (up - down) / ((double)(saved + h) - (double)(saved - h)), g = l.g[i][j];
            if (!(fabs(fd - g) <= 2e-2 * fabs(g) + 1e-4) && bad++ < 8)
                cr_log_error("%s[%zu]: backward %.6g, finite difference %.6g", ps->name, j, g, fd);
        }
    }
    cr_expect_eq(bad, 0, "%d of %d gradients differ from finite differences", bad, checked);
    lm_close(&l);
}

/* The logits at positions 0..3 are the same bits whatever bytes follow them: each position
 * predicts the next byte from those before it only. */
/* --loss eager computes what the fused pass does: the same loss and every gradient, to fp32's
 * rounding (its log-softmax and exponentials round differently). */
Test(transformer, the_eager_loss_gives_the_fused_loss_and_gradients) {
    Lm fused, eager;
    lm_open(&fused);
    lm_open_with(&eager, LOSS_EAGER);
    const float want = lm_forward(&fused), got = lm_forward(&eager);
    cr_expect(fabsf(got - want) <= 1e-6f * want, "eager loss %.9g, fused %.9g", got, want);
    lm_backward(&fused);
    lm_backward(&eager);
    float largest = 0;
    for (size_t i = 0; i < fused.m.total_numel; i++)
        largest = fmaxf(largest, fabsf(fused.grads[i]));
    cr_assert_gt(largest, 0.0f);
    size_t off = 0;
    for (size_t i = 0; i < fused.m.total_numel; i++)
        off += fabsf(eager.grads[i] - fused.grads[i]) > 1e-5f * largest;
    cr_expect_eq(off, 0, "%zu of %zu gradients differ by more than 1e-5 of the largest", off,
                 fused.m.total_numel);
    lm_close(&fused);
    lm_close(&eager);
}

Test(transformer, a_position_sees_only_the_bytes_before_it) {
    Lm l;
    lm_open(&l);
    lm_forward(&l);
    size_t n;
    int head = l.m.nmodules - 1;
    float *logits = l.m.ops->boundary(l.run, head, BOUNDARY_OUTPUT, &n);
    cr_assert_eq(n, 2 * 6 * 256);
    float *before = host_copy(logits, n);
    static const uint8_t other[] = "xyzxyzxyzxyzxyzxyzxyzxyzxyzxyzxyzxyzxyz";
    uint8_t text[128];
    memcpy(text, l.data.text, sizeof text);
    memcpy(text + 3 * 6 + 4, other, 3); /* bytes 4, 5 and the target of sequence 3 */
    l.data.text = text;
    lm_forward(&l);
    logits = l.m.ops->boundary(l.run, head, BOUNDARY_OUTPUT, &n);
    assert_same_floats(logits, before, 4 * 256, "positions 0..3 of sequence 3");
    cr_expect(memcmp(logits + 4 * 256, before + 4 * 256, 2 * 256 * sizeof(float)) != 0,
              "positions 4 and 5 saw the change");
    assert_same_floats(logits + 6 * 256, before + 6 * 256, 6 * 256, "sequence 17");
    free(before);
    l.m.ops->discard(l.run);
    lm_close(&l);
}

/* Invariant 1 for the language model: each strategy at its world size trains to the parameters
 * of one rank on the global batch (8 sequences a step, 20 steps, relative L2 <= 1e-5), and the
 * loss went down from about ln 256. */
Test(transformer, every_strategy_equals_one_rank_on_the_global_batch, .timeout = 120) {
    TransformerConfig c = lm_small_config();
    ModelDesc m;
    small_model(&m, &c);
    Dataset text;
    text_test_data(&text, c.seq);
    enum { STEPS = 20, GLOBAL = 8 };
    static const WorldCase cases[] = {
        {STRAT_ZERO3, 4, 1}, {STRAT_ZERO2, 2, 1}, {STRAT_DDP, 2, 1}, {STRAT_HSDP, 4, 2}};
    FsdpConfig one;
    fsdp_config_defaults(&one);
    one.lr = 3e-3f;
    one.batch_size = GLOBAL;
    VitRun ref;
    model_train(&ref, &m, &text, one, 1, STEPS, 0);
    cr_expect(fabsf(ref.first_loss - logf(256.0f)) < 0.05f, "first loss %g", ref.first_loss);
    cr_expect_lt(ref.last_loss, ref.first_loss - 1.0f, "it learned: %g -> %g", ref.first_loss,
                 ref.last_loss);
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        FsdpConfig many = one;
        many.batch_size = GLOBAL / cases[i].ranks;
        many.strategy = cases[i].strategy;
        many.replicas = cases[i].replicas;
        VitRun run;
        model_train(&run, &m, &text, many, cases[i].ranks, STEPS, 0);
        double d = rel_l2(run.params, ref.params, m.total_numel);
        cr_expect_leq(d, 1e-5, "%s at %d ranks: relative L2 %.3g from one rank",
                      strategy_name(cases[i].strategy), cases[i].ranks, d);
        cr_expect_gt(d, 0.0, "%s: rounded differently, as a sum over ranks does",
                     strategy_name(cases[i].strategy));
        vit_run_free(&run);
    }
    vit_run_free(&ref);
    model_desc_free(&m);
}

/* The language-model presets are the shapes docs/language-models.md states, with the parameter
 * counts it gives (over bytes: vocabulary 256), and no other name is one. */
Test(transformer, the_presets_are_the_documented_shapes) {
    TransformerConfig g, l;
    cr_assert_eq(transformer_lm_preset("gpt2-small", &g), 0);
    cr_assert_eq(transformer_lm_preset("llama-125m", &l), 0);
    cr_expect(g.layers == 12 && g.hidden == 768 && g.heads == 12 && g.mlp == 3072 &&
              g.seq == 1024 && g.vocab == 256 && g.arch == TRANSFORMER_GPT &&
              g.attention == ATTENTION_FLASH);
    cr_expect(l.layers == 12 && l.hidden == 1024 && l.heads == 16 && l.kv_heads == 4 &&
              l.mlp == 2560 && l.seq == 1024 && l.vocab == 256 && l.arch == TRANSFORMER_LLAMA &&
              l.attention == ATTENTION_FLASH);
    cr_expect_eq(transformer_param_count(&g), 86235648);
    cr_expect_eq(transformer_param_count(&l), 126379008);
    TransformerConfig none;
    cr_expect_eq(transformer_lm_preset("gpt2", &none), -1);
    cr_expect_eq(transformer_lm_preset("llama", &none), -1);
}
