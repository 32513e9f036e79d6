/* fsdp plan for the transformer family at today's frontier: the Llama-shaped model's and flash
 * attention's plans equal real runs byte for byte, one layer's activations are the formula of
 * docs/plan.md (Korthikanti et al. 2022's count for what our layers keep), and the command's
 * Llama presets and flags. */
#include <criterion/criterion.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "models/lblock.h"
#include "models/transformer.h"
#include "models/vit.h"
#include "sim/planner.h"
#include "tests/util.h"

static void plan_run(const ModelDesc *m, FsdpConfig cfg, int ranks, PlannerResult *out) {
    Plan p;
    Err err = {0};
    cr_assert_eq(fsdp_plan_create(&p, m, &cfg, ranks, &err), 0, "%s", err.msg);
    PlannerJob job = {.model = m, .plan = &p, .cfg = cfg, .profile = profile_default(), .steps = 2};
    cr_assert_eq(planner_run(&job, out, &err), 0, "%s", err.msg);
    plan_free(&p);
}

static void create(ModelDesc *m, const TransformerConfig *c) {
    Err err = {0};
    cr_assert_eq(transformer_model_create(m, c, &err), 0, "%s", err.msg);
}

/* A real run of the model on a text against its plan, per rank and category; the checkpointed
 * case's blocks keep what `ac` keeps. */
static void expect_plan_equals_run_ac(const TransformerConfig *c, AcPolicy ac, const char *what) {
    ModelDesc m;
    create(&m, c);
    Dataset text;
    text_test_data(&text, c->seq);
    ConfigCase cases[] = {{"zero3", vit_config(STRAT_ZERO3, 2), 4},
                          {"zero2", vit_config(STRAT_ZERO2, 2), 3},
                          {"ddp", vit_config(STRAT_DDP, 2), 2},
                          {"zero3 ac bf16", vit_config(STRAT_ZERO3, 2), 3},
                          {"hsdp offload", vit_config(STRAT_HSDP, 2), 4}};
    cases[3].cfg.ac_every = 1;
    cases[3].cfg.ac_policy = ac;
    cases[3].cfg.param_dtype = DTYPE_BF16;
    cases[4].cfg.replicas = 2;
    cases[4].cfg.offload = OFFLOAD_CPU;
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        VitRun real;
        model_train(&real, &m, &text, cases[i].cfg, cases[i].ranks, 2, 0);
        cr_expect(real.last_loss > 0, "%s %s computed a loss", what, cases[i].name);
        PlannerResult planned;
        plan_run(&m, cases[i].cfg, cases[i].ranks, &planned);
        expect_planned_memory(real.memory, &planned, cases[i].ranks,
                              fmt_text("%s %s", what, cases[i].name));
        planner_result_free(&planned);
        vit_run_free(&real);
    }
    model_desc_free(&m);
}

static void expect_plan_equals_run(const TransformerConfig *c, const char *what) {
    expect_plan_equals_run_ac(c, AC_BLOCK, what);
}

Test(llama_plan, the_llama_plan_equals_a_real_run_eager_and_flash) {
    TransformerConfig c = lm_small_config();
    c.arch = TRANSFORMER_LLAMA, c.kv_heads = 2, c.mlp = 48;
    c.attention = ATTENTION_FLASH;
    expect_plan_equals_run(&c, "llama flash");
    c.attention = ATTENTION_EAGER;
    expect_plan_equals_run(&c, "llama eager");
    c.attention = ATTENTION_FLASH, c.loss = LOSS_EAGER;
    expect_plan_equals_run(&c, "llama flash, eager loss");
    c.loss = LOSS_FUSED;
    expect_plan_equals_run_ac(&c, AC_OPS, "llama flash, checkpointed by operator");
    c.attention = ATTENTION_EAGER;
    expect_plan_equals_run_ac(&c, AC_OPS, "llama eager, checkpointed by operator");
    expect_plan_equals_run_ac(&c, AC_TORCHTITAN, "llama eager, by torchtitan's rule");
}

Test(llama_plan, the_gpt_plan_with_flash_equals_a_real_run) {
    TransformerConfig c = lm_small_config();
    c.attention = ATTENTION_FLASH;
    expect_plan_equals_run(&c, "gpt flash");
    expect_plan_equals_run_ac(&c, AC_OPS, "gpt flash, checkpointed by operator");
}

/* The ViT's blocks take flash attention too (not causal): its plan equals a real run, and it
 * trains as eager does. */
Test(llama_plan, the_vit_with_flash_equals_its_plan_and_trains_as_eager) {
    VitConfig c;
    vit_preset_with("vit-tiny", 2, 0, 0, 0, &c);
    ModelDesc eager, flash;
    Err err = {0};
    cr_assert_eq(vit_model_create(&eager, &c, &err), 0, "%s", err.msg);
    c.flash = 1;
    cr_assert_eq(vit_model_create(&flash, &c, &err), 0, "%s", err.msg);
    FsdpConfig cfg = vit_config(STRAT_ZERO3, 4);
    VitRun a, b;
    vit_train(&a, &eager, cfg, 2, 3, 0);
    vit_train(&b, &flash, cfg, 2, 3, 0);
    double d = rel_l2(b.params, a.params, eager.total_numel);
    cr_expect_leq(d, 1e-5, "flash is %.3g from eager", d);
    PlannerResult planned;
    plan_run(&flash, cfg, 2, &planned);
    expect_planned_memory(b.memory, &planned, 2, "vit flash");
    planner_result_free(&planned);
    vit_run_free(&a);
    vit_run_free(&b);
    model_desc_free(&eager);
    model_desc_free(&flash);
}

/* ---- one layer's activations ---- */

/* Activation bytes at the GPU's peak of a one-GPU plan (batch b). The shapes below are ones
 * whose peak comes in backward at batch 2 and 3, with every layer's activations held (activations
 * outweigh parameters there), so the peak's activations grow by exactly one layer's with a layer.
 */
static double peak_kept(const TransformerConfig *c, int batch, DType dtype, AcPolicy ac) {
    ModelDesc m;
    create(&m, c);
    FsdpConfig cfg = vit_config(STRAT_ZERO3, batch);
    cfg.param_dtype = dtype;
    if (ac != AC_BLOCK) cfg.ac_every = 1, cfg.ac_policy = ac;
    PlannerResult r;
    plan_run(&m, cfg, 1, &r);
    const size_t *at = planner_top_memory(&r)->on_gpu.at_peak;
    double bytes = (double)at[MEM_ACTIVATIONS] + (double)at[MEM_AC_INPUT];
    planner_result_free(&r);
    model_desc_free(&m);
    return bytes;
}

static double peak_activations(const TransformerConfig *c, int batch, DType dtype) {
    return peak_kept(c, batch, dtype, AC_BLOCK);
}

/* One layer's bytes: a plan of L + 1 layers less one of L. */
static double layer_activations(TransformerConfig c, int batch, DType dtype) {
    double less = peak_activations(&c, batch, dtype);
    c.layers++;
    return peak_activations(&c, batch, dtype) - less;
}

/* The same with every block checkpointed by operator (its input and what the policy keeps). */
static double layer_kept_by(AcPolicy ac, TransformerConfig c, int batch, DType dtype) {
    double less = peak_kept(&c, batch, dtype, ac);
    c.layers++;
    return peak_kept(&c, batch, dtype, ac) - less;
}

/* docs/plan.md's formulas: s b tokens, h hidden, a heads, F the MLP's width, k the K,V
 * projections' width; the tensors at e bytes an element (the compute dtype: --param-dtype), the
 * norms' statistics and flash's lse at 4 (fp32), eager's probabilities at e. */
static double formula(const TransformerConfig *c, int batch, DType dtype) {
    double sb = (double)c->seq * batch, h = c->hidden, a = c->heads, s = c->seq, F = c->mlp;
    double e = (double)dtype_size(dtype);
    double scores = c->attention == ATTENTION_FLASH ? 4 * a : e * a * s; /* per token */
    if (c->arch == TRANSFORMER_GPT) return sb * (e * (8 * h + 2 * F) + 4 * 4 + scores);
    double k = (double)c->kv_heads * (c->hidden / c->heads);
    return sb * (e * (6 * h + 2 * k + 3 * F) + 4 * 2 + scores);
}

/* A Llama of 2 layers, hidden 64 and 8 heads at sequence 96, vocabulary 300: MLP width mlp,
 * kv K,V heads. */
static TransformerConfig llama_shape(int mlp, int kv) {
    return (TransformerConfig){.layers = 2,
                               .hidden = 64,
                               .heads = 8,
                               .mlp = mlp,
                               .seq = 96,
                               .vocab = 300,
                               .arch = TRANSFORMER_LLAMA,
                               .kv_heads = kv};
}

Test(llama_plan, one_layers_activations_are_the_formula) {
    TransformerConfig shapes[] = {
        {.layers = 2, .hidden = 64, .heads = 4, .mlp = 256, .seq = 128, .vocab = 1000},
        {.layers = 3, .hidden = 96, .heads = 6, .mlp = 384, .seq = 40, .vocab = 500},
        llama_shape(160, 2),
        llama_shape(192, 1),
    };
    const DType dtypes[] = {DTYPE_FP32, DTYPE_BF16};
    for (size_t i = 0; i < sizeof shapes / sizeof *shapes; i++)
        for (int att = 0; att < 2; att++)
            for (int d = 0; d < 2; d++)
                for (int batch = 2; batch <= 3; batch++) {
                    TransformerConfig c = shapes[i];
                    c.attention = (AttentionKind)att;
                    double got = layer_activations(c, batch, dtypes[d]),
                           want = formula(&c, batch, dtypes[d]);
                    cr_expect_eq(
                        got, want, "shape %zu %s %s batch %d: %.0f bytes a layer, not %.0f", i,
                        attention_name(c.attention), dtype_name(dtypes[d]), batch, got, want);
                }
}

/* A layer checkpointed by operator keeps its input and attention's output and scores, and
 * Llama's q, v and gate, e (3h + k + F) bytes a token and the scores, where the whole layer
 * holds e (6h + 2k + 3F) and both norms' statistics; GPT's qkv and fc1, e (5h + F) where the
 * whole holds e (8h + 2F). At batch 8, where activations outweigh the parameters and the peak
 * holds every layer's. */
Test(llama_plan, a_layer_checkpointed_by_operator_keeps_the_formula) {
    const DType dtypes[] = {DTYPE_FP32, DTYPE_BF16};
    for (int shape = 0; shape < 3; shape++)
        for (int att = 0; att < 2; att++)
            for (int d = 0; d < 2; d++) {
                TransformerConfig c = llama_shape(shape ? 192 : 160, shape ? 1 : 2);
                if (shape == 2) c.arch = TRANSFORMER_GPT, c.kv_heads = 0, c.mlp = 256;
                c.attention = (AttentionKind)att;
                double sb = (double)c.seq * 8, h = c.hidden, e = (double)dtype_size(dtypes[d]);
                double k = (double)c.kv_heads * (c.hidden / c.heads);
                double scores = att == ATTENTION_FLASH ? 4.0 * c.heads : e * c.heads * c.seq;
                double kept = shape == 2 ? 5 * h + c.mlp : 3 * h + k + c.mlp;
                double want = sb * (e * kept + scores);
                double got = layer_kept_by(AC_OPS, c, 8, dtypes[d]);
                cr_expect_eq(got, want, "shape %d %s %s: %.0f bytes a layer, not %.0f", shape,
                             attention_name(c.attention), dtype_name(dtypes[d]), got, want);
            }
}

/* torchtitan's rule keeps the odd GEMMs' outputs: of Llama's seven the last's too, e h bytes a
 * token more than AC_OPS keeps; of GPT's four the same two as AC_OPS. */
Test(llama_plan, torchtitans_rule_keeps_llamas_last_gemm_too) {
    const DType dtypes[] = {DTYPE_FP32, DTYPE_BF16};
    for (int gpt = 0; gpt < 2; gpt++)
        for (int d = 0; d < 2; d++) {
            TransformerConfig c = llama_shape(160, 2);
            c.attention = ATTENTION_FLASH;
            if (gpt) c.arch = TRANSFORMER_GPT, c.kv_heads = 0, c.mlp = 256;
            double e = (double)dtype_size(dtypes[d]);
            double want = gpt ? 0 : (double)c.seq * 8 * c.hidden * e;
            double got = layer_kept_by(AC_TORCHTITAN, c, 8, dtypes[d]) -
                         layer_kept_by(AC_OPS, c, 8, dtypes[d]);
            cr_expect_eq(got, want, "%s %s: %.0f bytes a layer beyond ops', not %.0f",
                         gpt ? "gpt" : "llama", dtype_name(dtypes[d]), got, want);
        }
}

/* The done-when figure: llama3-70b at sequence 8192 in bf16, flash: 8192 * (2 * (6 * 8192 + 2 *
 * 1024 + 3 * 28672) + 4 * 2 + 4 * 64) = 2,250,309,632 bytes a layer and sequence, half the fp32
 * job's but for the fp32 statistics; eager keeps 64 heads' 8192 x 8192 probabilities in bf16 in
 * place of lse. At 2 sequences a GPU (at 1, a layer's bf16 parameters and gradients outweigh its
 * activations and the peak is elsewhere). */
Test(llama_plan, llama3_70b_layers_are_the_formula) {
    TransformerConfig c;
    transformer_llama_preset("llama3-70b", &c);
    c.layers = 1;
    c.attention = ATTENTION_FLASH;
    cr_expect_eq(formula(&c, 1, DTYPE_BF16), 2250309632.0);
    cr_expect_eq(layer_activations(c, 2, DTYPE_BF16), 2 * 2250309632.0);
    c.attention = ATTENTION_EAGER;
    cr_expect_eq(layer_activations(c, 2, DTYPE_BF16),
                 2 * (2250309632.0 + 2.0 * 64 * 8192.0 * 8192 - 4.0 * 64 * 8192));
}

/* ---- the command ---- */

Test(llama_plan, the_header_shows_the_llama_shape) {
    char *out = fsdp_ok("plan --model llama3-70b --gpus 64 --seq 8192 --param-dtype bf16 "
                        "--activation-checkpointing");
    cr_expect(strstr(out, "fsdp plan: llama3-70b, 70,553,706,496 parameters"), "%s", out);
    cr_expect(strstr(out, "shape: 80 layers, hidden 8192, 64 heads and 8 KV heads, SwiGLU MLP "
                          "28672, sequence 8192, vocabulary 128,256, flash attention"),
              "%s", out);
    free(out);
    out = fsdp_ok("plan --model llama --layers 2 --hidden 256 --heads 8 --kv-heads 2 --mlp 512 "
                  "--seq 128 --vocab 1000 --attention eager");
    cr_expect(strstr(out, "shape: 2 layers, hidden 256, 8 heads and 2 KV heads, SwiGLU MLP 512, "
                          "sequence 128, vocabulary 1,000, eager attention"),
              "%s", out);
    free(out);
    out = fsdp_ok("plan --model llama3-8b --gpus 8 --param-dtype bf16 "
                  "--activation-checkpointing --loss eager");
    cr_expect(strstr(out, "vocabulary 128,256, flash attention, eager loss (fp32 "
                          "log-probabilities)\n"),
              "%s", out);
    free(out);
}

/* Where the logits dominate (one small block, Llama 3's vocabulary, n = 4096 x 128,256 logits):
 * the eager loss's peak is at the loss, 10n bytes above the end of forward (three fp32 tensors,
 * the bf16 logits dropped), the fused pass's in the head's backward, 2n above it (the logits'
 * gradient) and two bf16 [4096, 256] more (the head's input gradient and the stream's): the
 * activations at the peaks differ by 8n less those. */
Test(llama_plan, the_eager_loss_holds_eight_bytes_a_logit_more) {
    const char *job = "plan --model llama --layers 1 --hidden 256 --heads 4 --kv-heads 2 --mlp 512 "
                      "--seq 4096 --vocab 128256 --batch-size 1 --param-dtype bf16 --gpus 1 --json";
    char *fused = fsdp_ok("%s", job), *eager = fsdp_ok("%s --loss eager", job);
    const char *f = strstr(fused, "\"at_peak\":"), *e = strstr(eager, "\"at_peak\":");
    cr_assert(f && e);
    const double n = 4096.0 * 128256, stream = 4096.0 * 256 * 2;
    cr_expect_eq(json_number(e, "activations") - json_number(f, "activations"), 8 * n - 2 * stream);
    free(fused), free(eager);
}

/* torchtitan's table 2 job (8B, 8 GPUs, seq 32,768, batch 1, full checkpointing) with its eager
 * loss fits the 96 GB of the H100s it ran on (h100-gt), not an H100 SXM's 80 GB; fused, it fits
 * both. */
Test(llama_plan, the_eager_loss_at_a_long_sequence_fits_only_torchtitans_96_gb) {
    const char *job = "plan --model llama3-8b --gpus 8 --seq 32768 --batch-size 1 "
                      "--param-dtype bf16 --activation-checkpointing --json";
    char *ok[3] = {fsdp_ok("%s --profile h100-gt --loss eager", job),
                   fsdp_ok("%s --profile h100-gt", job), fsdp_ok("%s", job)};
    for (int i = 0; i < 3; i++) {
        cr_expect(strstr(ok[i], "\"fits\":true"), "%s", ok[i]);
        free(ok[i]);
    }
    int code;
    char *out = fsdp_run(&code, "2>&1", "%s --loss eager", job);
    cr_expect_eq(code, 2, "%s", out);
    cr_expect(strstr(out, "does not fit on 8 GPUs of 80.00 GB"), "%s", out);
    free(out);
}

/* Where nothing fits, the plan names the eager loss among the activations and plans the lever
 * that drops it (--loss fused), and, for a job checkpointed by operator, --ac-policy block. */
Test(llama_plan, nothing_fits_names_the_eager_loss_and_op_checkpointing_as_levers) {
    const char *job = "plan --model llama3-8b --gpus 8 --seq 32768 --batch-size 1 "
                      "--param-dtype bf16 --activation-checkpointing";
    int code;
    char *out = fsdp_run(&code, "2>&1", "%s --loss eager", job);
    cr_expect_eq(code, 2, "%s", out);
    cr_expect(strstr(out, "and the eager loss's three fp32 [32768, 128,256] at the loss\n"), "%s",
              out);
    const char *lever = strstr(out, "\n  --loss fused ");
    cr_expect(lever && strstr(lever, ": fits in 80.00 GB\n") &&
                  strstr(lever, ": fits in 80.00 GB\n") < strchr(lever + 1, '\n') + 1,
              "%s", out);
    free(out);
    out = fsdp_run(&code, "2>&1", "%s --ac-policy ops", job);
    cr_expect_eq(code, 2, "%s", out);
    lever = strstr(out, "\n  --ac-policy block ");
    cr_expect(lever && strstr(lever, ": fits in 80.00 GB\n") &&
                  strstr(lever, ": fits in 80.00 GB\n") < strchr(lever + 1, '\n') + 1,
              "%s", out);
    free(out);
}

/* ---- --elementwise eager: eager PyTorch's kernels, charged, not computed ---- */

/* One Llama block of 4 sequences of 96 tokens, hidden 64, 8 heads (kv of them K,V), MLP 160,
 * flash attention: its work in pass `kind` with the elementwise ops charged fused or eager. */
static Work llama_block_work(int kv, DType dtype, int eager, WorkKind kind) {
    TBlock t = {.B = 4,
                .T = 96,
                .H = 64,
                .F = 160,
                .heads = 8,
                .kv_heads = (size_t)kv,
                .causal = 1,
                .flash = 1,
                .kind = &llama_block,
                .dtype = dtype,
                .eager_elementwise = eager};
    Work w = {0};
    llama_block.work(&t, &w, kind);
    return w;
}

/* Eager, a row's memory-bound ops move, in bf16: each RMSNorm 36 bytes an element of H (x.float()
 * 6, pow 8, mean 4, the product 8, type_as 6, the weight 4), RoPE 20 an element of q and k (2 + 4,
 * 8, 4 + 2), repeat_kv's copies of k and v 4 (KV read and H written, 2 each), the adds 6 each and
 * SwiGLU 10 an element of F: 108 H + 24 KV + 10 F (104 H + 20 KV + 10 F without the copies,
 * when every head has its K,V); in fp32 144 H + 32 KV + 20 F. Kernels: 16 for
 * the norms, 6 RoPE, 2 copies, 2 adds, 2 SwiGLU, beside 7 GEMMs and attention: 36 (34 without the
 * copies); backward twice the bytes and the elementwise kernels, 14
 * GEMMs and attention's. The GEMMs and attention are the fused form's. */
Test(llama_plan, eager_elementwise_charges_torchtitans_unfused_kernels) {
    const double M = 4 * 96, H = 64, F = 160;
    const struct {
        int kv;
        DType dtype;
        double per_row;
        int kernels;
    } cases[] = {{2, DTYPE_BF16, 108 * H + 24 * 16 + 10 * F, 36},
                 {8, DTYPE_BF16, 104 * H + 20 * 64 + 10 * F, 36 - 2},
                 {2, DTYPE_FP32, 144 * H + 32 * 16 + 20 * F, 36}};
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        const int kv = cases[i].kv;
        const DType dt = cases[i].dtype;
        Work fwd = llama_block_work(kv, dt, 1, WORK_FORWARD);
        Work bwd = llama_block_work(kv, dt, 1, WORK_BACKWARD);
        cr_expect_eq(fwd.bytes, M * cases[i].per_row, "case %zu: %.0f bytes", i, fwd.bytes);
        cr_expect_eq(fwd.kernels, cases[i].kernels, "case %zu", i);
        cr_expect_eq(bwd.bytes, 2 * fwd.bytes, "case %zu", i);
        cr_expect_eq(bwd.kernels, 15 + 2 * (cases[i].kernels - 8), "case %zu", i);
        for (int e = 0; e < 2; e++) {
            const WorkKind kind = e ? WORK_BACKWARD : WORK_FORWARD;
            Work fused = llama_block_work(kv, dt, 0, kind), eager = e ? bwd : fwd;
            cr_expect_eq(eager.flops, fused.flops, "case %zu: the same GEMMs and attention", i);
            cr_expect_eq(eager.ngemms, fused.ngemms);
            cr_expect_gt(eager.bytes, 2 * fused.bytes, "case %zu: eager moves far more", i);
        }
    }
}

/* What is computed and kept is the same: two steps of a small Llama on 2 simulated ranks end on
 * the same parameters, bit for bit, and each rank's memory is the same to the byte. */
Test(llama_plan, eager_elementwise_computes_and_keeps_what_fused_does) {
    VitRun runs[2];
    Dataset text;
    TransformerConfig c = llama_shape(128, 2);
    text_test_data(&text, c.seq);
    for (int eager = 0; eager < 2; eager++) {
        c.elementwise = eager ? ELEMENTWISE_EAGER : ELEMENTWISE_FUSED;
        ModelDesc m;
        create(&m, &c);
        model_train(&runs[eager], &m, &text, vit_config(STRAT_ZERO3, 2), 2, 2, 0);
        model_desc_free(&m);
    }
    const size_t n = transformer_param_count(&c);
    cr_expect_eq(memcmp(runs[0].params, runs[1].params, n * sizeof(float)), 0);
    cr_expect_eq(runs[0].last_loss, runs[1].last_loss);
    for (int r = 0; r < 2; r++)
        cr_expect_eq(memcmp(&runs[0].memory[r], &runs[1].memory[r], sizeof runs[0].memory[r]), 0,
                     "rank %d's memory", r);
    vit_run_free(&runs[0]), vit_run_free(&runs[1]);
}

/* torchtitan's table 1 job planned both ways: the same bytes, a longer step, and longer still
 * under torchtitan's op checkpointing, which recomputes every elementwise op before backward. */
Test(llama_plan, eager_elementwise_lengthens_the_step_and_its_recompute) {
    const char *job = "plan --model llama3-8b --profile h100-gt --gpus 8 --batch-size 2 "
                      "--param-dtype bf16 --reduce-dtype fp32 --json";
    char *fused = fsdp_ok("%s", job), *eager = fsdp_ok("%s --elementwise eager", job);
    char *fused_ac = fsdp_ok("%s --activation-checkpointing --ac-policy torchtitan", job);
    char *eager_ac =
        fsdp_ok("%s --activation-checkpointing --ac-policy torchtitan --elementwise eager", job);
    cr_expect_eq(json_number(eager, "gpu_total"), json_number(fused, "gpu_total"));
    cr_expect_eq(json_number(eager_ac, "gpu_total"), json_number(fused_ac, "gpu_total"));
    const double added = json_number(eager, "step_time_s") - json_number(fused, "step_time_s");
    const double added_ac =
        json_number(eager_ac, "step_time_s") - json_number(fused_ac, "step_time_s");
    cr_expect_gt(added, 0);
    cr_expect_gt(added_ac, added, "the recompute's eager ops: %g against %g s", added_ac, added);
    free(fused), free(eager), free(fused_ac), free(eager_ac);
    char *out = fsdp_ok("plan --model llama3-8b --gpus 8 --param-dtype bf16 --elementwise eager");
    cr_expect(strstr(out, "flash attention, eager PyTorch's elementwise kernels\n"), "%s", out);
    free(out);
}

Test(llama_plan, bad_requests_are_one_line_and_exit_2) {
    static const UsageCase cases[] = {
        {"plan --model llama3-8b --kv-heads 5", "--kv-heads must divide --heads (got 5 and 32)"},
        {"plan --model llama3-8b --seq 0", "--seq"},
        {"plan --model transformer --attention garbage", "--attention must be eager or flash"},
        {"plan --model transformer --kv-heads 4", "--kv-heads applies to Llama-shaped models"},
        {"plan --model vit-tiny --kv-heads 4", "--kv-heads applies to Llama-shaped models"},
        {"plan --model toy --attention flash",
         "--attention applies to the transformers and the ViT"},
        {"plan --model llama3-1b", "--model must be"},
        {"plan --model llama --params 7e9", "--params sizes a generic transformer"},
        {"train --model llama --kv-heads 3", "--kv-heads must divide --heads (got 3 and 4)"},
        {"train --model llama --seq 0", "--seq"},
        {"train --model transformer --attention garbage", "--attention must be eager or flash"},
        {"train --model transformer --kv-heads 2", "--kv-heads applies to --model llama"},
        {"train --attention flash", "--attention applies to the transformer, llama and the ViT"},
        {"plan --model llama3-8b --loss late", "--loss must be fused or eager (got 'late')"},
        {"plan --model vit-tiny --loss eager", "--loss applies to the transformers"},
        {"train --model llama --loss late", "--loss must be fused or eager (got 'late')"},
        {"train --model vit-tiny --loss eager", "--loss applies to the transformer and llama"},
        {"plan --model llama3-8b --ac-policy some", "--ac-policy must be block, ops or torchtitan"},
        {"plan --model llama3-8b --ac-policy ops", "--ac-policy ops says what a checkpointed"},
        {"train --model llama --ac-policy some", "--ac-policy must be block, ops or torchtitan"},
        {"train --model llama --ac-policy ops", "--ac-policy ops says what a checkpointed"},
        {"plan --model llama3-8b --ac-policy torchtitan",
         "--ac-policy torchtitan says what a checkpointed"},
        {"plan --model llama3-8b --elementwise some",
         "--elementwise must be fused or eager (got 'some')"},
        {"plan --model transformer --elementwise eager",
         "--elementwise applies to Llama-shaped models"},
        {"plan --model gpt2-small --elementwise eager",
         "--elementwise applies to Llama-shaped models"},
        {"train --model llama --elementwise some",
         "--elementwise must be fused or eager (got 'some')"},
        {"train --model transformer --elementwise eager",
         "--elementwise applies to --model llama and llama-125m"},
    };
    expect_usage_errors(cases, sizeof cases / sizeof *cases);
}
