/* The Llama-shaped transformer: Llama 3's published parameter counts from their shapes, one
 * rank against four on the global batch (invariant 1), flash attention training as eager does,
 * and bad shapes refused in one line. */
#include <criterion/criterion.h>
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "models/transformer.h"
#include "tests/util.h"

Test(llama, llama3_presets_have_their_published_parameter_counts) {
    static const struct {
        const char *name;
        size_t params;
        const char *published; /* billions, as the model cards round them */
        int decimals;
    } want[] = {{"llama3-8b", 8030261248ull, "8.03", 2},
                {"llama3-70b", 70553706496ull, "70.6", 1},
                {"llama3-405b", 405853388800ull, "405.9", 1}};
    for (size_t i = 0; i < sizeof want / sizeof *want; i++) {
        TransformerConfig c;
        cr_assert_eq(transformer_llama_preset(want[i].name, &c), 0, "%s", want[i].name);
        cr_expect_eq(c.arch, TRANSFORMER_LLAMA);
        cr_expect_eq(c.kv_heads, 8);
        cr_expect_eq(c.seq, 8192);
        size_t n = transformer_param_count(&c);
        cr_expect_eq(n, want[i].params, "%s: %zu parameters", want[i].name, n);
        char rounded[16];
        snprintf(rounded, sizeof rounded, "%.*f", want[i].decimals, (double)n / 1e9);
        cr_expect_str_eq(rounded, want[i].published, "%s", want[i].name);
        ModelDesc m;
        Err err = {0};
        c.layers = 1; /* the description's count agrees with the formula (one layer: quick) */
        cr_assert_eq(transformer_model_create(&m, &c, &err), 0, "%s", err.msg);
        cr_expect_eq(m.total_numel, transformer_param_count(&c));
        model_desc_free(&m);
    }
    TransformerConfig c;
    cr_expect_eq(transformer_llama_preset("llama3-1b", &c), -1);
}

/* 2 layers of width 32, 4 heads sharing 2 K,V heads, SwiGLU 48, sequences of 16 bytes. */
static TransformerConfig llama_small(AttentionKind attention) {
    TransformerConfig c = lm_small_config();
    c.arch = TRANSFORMER_LLAMA;
    c.kv_heads = 2;
    c.mlp = 48;
    c.attention = attention;
    return c;
}

static void create(ModelDesc *m, const TransformerConfig *c) {
    Err err = {0};
    cr_assert_eq(transformer_model_create(m, c, &err), 0, "%s", err.msg);
}

enum { STEPS = 20, GLOBAL = 8 };

static void train_global(VitRun *run, const ModelDesc *m, const Dataset *text, Strategy s,
                         int ranks) {
    FsdpConfig cfg;
    fsdp_config_defaults(&cfg);
    cfg.lr = 3e-3f;
    cfg.strategy = s;
    cfg.batch_size = GLOBAL / ranks;
    model_train(run, m, text, cfg, ranks, STEPS, 0);
}

Test(llama, four_ranks_equal_one_rank_on_the_global_batch) {
    TransformerConfig c = llama_small(ATTENTION_FLASH);
    ModelDesc m;
    create(&m, &c);
    Dataset text;
    text_test_data(&text, c.seq);
    VitRun one, four;
    train_global(&one, &m, &text, STRAT_ZERO3, 1);
    cr_expect(fabsf(one.first_loss - logf(256.0f)) < 0.05f, "first loss %g", one.first_loss);
    cr_expect_lt(one.last_loss, one.first_loss - 1.0f, "it learned: %g -> %g", one.first_loss,
                 one.last_loss);
    train_global(&four, &m, &text, STRAT_ZERO3, 4);
    double d = rel_l2(four.params, one.params, m.total_numel);
    cr_expect_leq(d, 1e-5, "zero3 at 4 ranks: relative L2 %.3g from one rank", d);
    cr_expect_gt(d, 0.0, "rounded differently, as a sum over ranks does");
    vit_run_free(&one);
    vit_run_free(&four);
    model_desc_free(&m);
}

/* The small GPT (llama 0) or Llama with eager attention (me) and with flash (mf), at sequence
 * `seq` (0: the small one's), and the test text cut into sequences of it. */
static void eager_and_flash(int llama, int seq, ModelDesc *me, ModelDesc *mf, Dataset *text) {
    TransformerConfig eager = llama ? llama_small(ATTENTION_EAGER) : lm_small_config();
    if (seq) eager.seq = seq;
    TransformerConfig flash = eager;
    flash.attention = ATTENTION_FLASH;
    create(me, &eager);
    create(mf, &flash);
    text_test_data(text, eager.seq);
}

/* Flash recomputes the probabilities eager keeps: after 20 steps the parameters agree to fp32
 * rounding, for GPT's block and Llama's. */
Test(llama, flash_trains_as_eager_does) {
    for (int llama = 0; llama <= 1; llama++) {
        ModelDesc me, mf;
        Dataset text;
        eager_and_flash(llama, 0, &me, &mf, &text);
        VitRun a, b;
        train_global(&a, &me, &text, STRAT_ZERO3, 2);
        train_global(&b, &mf, &text, STRAT_ZERO3, 2);
        double d = rel_l2(b.params, a.params, me.total_numel);
        cr_expect_leq(d, 1e-5, "%s: flash is %.3g from eager", llama ? "llama" : "gpt", d);
        cr_expect_lt(b.last_loss, b.first_loss - 1.0f, "flash learned");
        vit_run_free(&a);
        vit_run_free(&b);
        model_desc_free(&me);
        model_desc_free(&mf);
    }
}

/* Rank 0's most bytes held in forward over the trace: the end of forward, every block's saved
 * activations or what checkpointing kept of them. */
static unsigned long long forward_high_water(const Trace *t) {
    unsigned long long most = 0;
    for (size_t i = 0; i < t->n; i++)
        if (t->ev[i].rank == 0 && t->ev[i].phase == PHASE_FORWARD && t->ev[i].mem_total > most)
            most = t->ev[i].mem_total;
    return most;
}

/* Checkpointing by operator recomputes what it dropped with the forward's kernels on the
 * forward's inputs: 20 steps train to the same bits as no checkpointing and as checkpointing
 * whole blocks, GPT's blocks and Llama's, eager or flash, every block or every 2nd (in bf16);
 * and it keeps, beside each checkpointed block's input, some GEMMs' outputs and attention's, so
 * forward ends holding more than with whole blocks and less than with none. */
Test(llama, checkpointing_by_operator_trains_to_the_same_bits) {
    for (int llama = 0; llama <= 1; llama++)
        for (int flash = 0; flash <= 1; flash++)
            for (int every = 1; every <= 2; every++) {
                TransformerConfig c = llama ? llama_small(flash ? ATTENTION_FLASH : ATTENTION_EAGER)
                                            : lm_small_config();
                if (!llama) c.attention = flash ? ATTENTION_FLASH : ATTENTION_EAGER;
                c.layers = 3;
                ModelDesc m;
                create(&m, &c);
                Dataset text;
                text_test_data(&text, c.seq);
                FsdpConfig cfg;
                fsdp_config_defaults(&cfg);
                cfg.lr = 3e-3f, cfg.batch_size = 4;
                cfg.param_dtype = every == 2 ? DTYPE_BF16 : DTYPE_FP32;
                FsdpConfig block = cfg, ops = cfg, titan = cfg;
                block.ac_every = ops.ac_every = titan.ac_every = every;
                ops.ac_policy = AC_OPS, titan.ac_policy = AC_TORCHTITAN;
                VitRun none, whole, byop, bytitan;
                model_train(&none, &m, &text, cfg, 2, STEPS, 1);
                model_train(&whole, &m, &text, block, 2, STEPS, 1);
                model_train(&byop, &m, &text, ops, 2, STEPS, 1);
                model_train(&bytitan, &m, &text, titan, 2, STEPS, 1);
                const char *what = fmt_text("%s %s, every %d", llama ? "llama" : "gpt",
                                            flash ? "flash" : "eager", every);
                cr_expect(memcmp(byop.params, none.params, m.total_numel * sizeof(float)) == 0,
                          "%s: parameters differ from no checkpointing", what);
                cr_expect(memcmp(byop.params, whole.params, m.total_numel * sizeof(float)) == 0,
                          "%s: parameters differ from whole blocks'", what);
                unsigned long long held[3] = {forward_high_water(&whole.trace),
                                              forward_high_water(&byop.trace),
                                              forward_high_water(&none.trace)};
                cr_expect(held[0] < held[1] && held[1] < held[2], "%s: %llu, %llu, %llu", what,
                          held[0], held[1], held[2]);
                /* torchtitan's rule: the same bits, and Llama's 7th GEMM's room held beside */
                cr_expect(memcmp(bytitan.params, byop.params, m.total_numel * sizeof(float)) == 0,
                          "%s: torchtitan's rule trains other parameters than ops'", what);
                unsigned long long titan_held = forward_high_water(&bytitan.trace);
                if (llama)
                    cr_expect(titan_held > held[1], "%s: torchtitan's rule holds %llu, ops' %llu",
                              what, titan_held, held[1]);
                else
                    cr_expect_eq(titan_held, held[1], "%s: GPT's four GEMMs keep the same", what);
                vit_run_free(&none), vit_run_free(&whole), vit_run_free(&byop);
                vit_run_free(&bytitan);
                model_desc_free(&m);
            }
}

Test(llama, bad_shapes_are_one_line) {
    static const struct {
        int heads, kv_heads, hidden;
        TransformerArch arch;
        const char *mention;
    } cases[] = {{4, 3, 32, TRANSFORMER_LLAMA, "--kv-heads must divide --heads (got 3 and 4)"},
                 {4, 0, 32, TRANSFORMER_LLAMA, "--kv-heads must divide --heads (got 0 and 4)"},
                 {4, 8, 32, TRANSFORMER_LLAMA, "--kv-heads must divide --heads (got 8 and 4)"},
                 {4, 2, 12, TRANSFORMER_LLAMA, "--hidden / --heads must be even"},
                 {4, 2, 32, TRANSFORMER_GPT, "--kv-heads applies to Llama-shaped models"}};
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        TransformerConfig c = llama_small(ATTENTION_FLASH);
        c.heads = cases[i].heads, c.kv_heads = cases[i].kv_heads, c.hidden = cases[i].hidden;
        c.arch = cases[i].arch;
        Err err = {0};
        ModelDesc m;
        cr_expect_eq(transformer_model_create(&m, &c, &err), ERR_USAGE, "case %zu", i);
        cr_expect(strstr(err.msg, cases[i].mention) && !strchr(err.msg, '\n'), "got: %s", err.msg);
    }
}

/* Past the GPU kernels' 256 tokens the CPU's attention still computes (its tiles are the task's
 * own host memory): at 300 tokens flash agrees with eager and 2 ranks train as 1, for GPT's block
 * and Llama's (3 steps on the text's 2 sequences of 300 bytes). */
Test(llama, attention_past_256_tokens_on_the_cpu) {
    for (int llama = 0; llama <= 1; llama++) {
        ModelDesc me, mf;
        Dataset text;
        eager_and_flash(llama, 300, &me, &mf, &text);
        cr_assert_geq(text.n, 2);
        FsdpConfig one;
        fsdp_config_defaults(&one);
        one.lr = 3e-3f;
        one.batch_size = 2;
        FsdpConfig two = one;
        two.batch_size = 1;
        VitRun a, b, c;
        model_train(&a, &me, &text, one, 1, 3, 0);
        model_train(&b, &mf, &text, one, 1, 3, 0);
        model_train(&c, &mf, &text, two, 2, 3, 0);
        double d = rel_l2(b.params, a.params, me.total_numel);
        cr_expect_leq(d, 1e-5, "%s: flash is %.3g from eager at 300 tokens",
                      llama ? "llama" : "gpt", d);
        d = rel_l2(c.params, b.params, mf.total_numel);
        cr_expect_leq(d, 1e-5, "%s: 2 ranks are %.3g from 1 at 300 tokens", llama ? "llama" : "gpt",
                      d);
        cr_expect(b.last_loss < b.first_loss, "it learned: %.4f -> %.4f", (double)b.first_loss,
                  (double)b.last_loss);
        VitRun *all[] = {&a, &b, &c};
        for (int i = 0; i < 3; i++) vit_run_free(all[i]);
        model_desc_free(&me);
        model_desc_free(&mf);
    }
}
