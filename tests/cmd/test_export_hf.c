/* train --save-hf and ckpt consolidate --hf: the Hugging Face folder of a Llama and of a GPT-2
 * (config.json's sizes, RoPE base and eps; every tensor's name and shape as LlamaForCausalLM and
 * GPT2LMHeadModel's state dicts have them; the values --save-full writes, a Conv1D weight
 * transposed), the same from a checkpoint, and bad input. The names and shapes below are written
 * from those classes' state dicts (transformers' modeling_llama.py and modeling_gpt2.py). */
#include <cjson/cJSON.h>
#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "io/safetensors.h"
#include "tests/util.h"

/* 1 layer, hidden 32, 4 heads (2 K,V heads for the Llama), MLP 48, 16 tokens. */
#define SHAPE "--layers 1 --hidden 32 --heads 4 --mlp 48 --seq 16"

typedef struct Want {
    const char *hf, *ours; /* the Hugging Face name, ours */
    int64_t rows, cols;    /* the Hugging Face shape (cols 0: 1-d) */
    int transposed;
} Want;

static const Want llama[] = {
    {"model.embed_tokens.weight", "model.embed_tokens.weight", 256, 32, 0},
    {"model.layers.0.input_layernorm.weight", "model.layers.0.input_layernorm.weight", 32, 0, 0},
    {"model.layers.0.self_attn.q_proj.weight", "model.layers.0.self_attn.q_proj.weight", 32, 32, 0},
    {"model.layers.0.self_attn.k_proj.weight", "model.layers.0.self_attn.k_proj.weight", 16, 32, 0},
    {"model.layers.0.self_attn.v_proj.weight", "model.layers.0.self_attn.v_proj.weight", 16, 32, 0},
    {"model.layers.0.self_attn.o_proj.weight", "model.layers.0.self_attn.o_proj.weight", 32, 32, 0},
    {"model.layers.0.post_attention_layernorm.weight",
     "model.layers.0.post_attention_layernorm.weight", 32, 0, 0},
    {"model.layers.0.mlp.gate_proj.weight", "model.layers.0.mlp.gate_proj.weight", 48, 32, 0},
    {"model.layers.0.mlp.up_proj.weight", "model.layers.0.mlp.up_proj.weight", 48, 32, 0},
    {"model.layers.0.mlp.down_proj.weight", "model.layers.0.mlp.down_proj.weight", 32, 48, 0},
    {"model.norm.weight", "model.norm.weight", 32, 0, 0},
    {"lm_head.weight", "lm_head.weight", 256, 32, 0},
};

static const Want gpt2[] = {
    {"transformer.wte.weight", "wte.weight", 256, 32, 0},
    {"transformer.wpe.weight", "wpe.weight", 16, 32, 0},
    {"transformer.h.0.ln_1.weight", "h.0.ln_1.weight", 32, 0, 0},
    {"transformer.h.0.ln_1.bias", "h.0.ln_1.bias", 32, 0, 0},
    {"transformer.h.0.attn.c_attn.weight", "h.0.attn.c_attn.weight", 32, 96, 1},
    {"transformer.h.0.attn.c_attn.bias", "h.0.attn.c_attn.bias", 96, 0, 0},
    {"transformer.h.0.attn.c_proj.weight", "h.0.attn.c_proj.weight", 32, 32, 1},
    {"transformer.h.0.attn.c_proj.bias", "h.0.attn.c_proj.bias", 32, 0, 0},
    {"transformer.h.0.ln_2.weight", "h.0.ln_2.weight", 32, 0, 0},
    {"transformer.h.0.ln_2.bias", "h.0.ln_2.bias", 32, 0, 0},
    {"transformer.h.0.mlp.c_fc.weight", "h.0.mlp.c_fc.weight", 32, 48, 1},
    {"transformer.h.0.mlp.c_fc.bias", "h.0.mlp.c_fc.bias", 48, 0, 0},
    {"transformer.h.0.mlp.c_proj.weight", "h.0.mlp.c_proj.weight", 48, 32, 1},
    {"transformer.h.0.mlp.c_proj.bias", "h.0.mlp.c_proj.bias", 32, 0, 0},
    {"transformer.ln_f.weight", "ln_f.weight", 32, 0, 0},
    {"transformer.ln_f.bias", "ln_f.bias", 32, 0, 0},
    {"lm_head.weight", "lm_head.weight", 256, 32, 0},
};

/* hf's tensors are exactly `want`, shaped so, holding full's values (transposed where said). */
static void expect_tensors(const char *hf_dir, const char *full_path, const Want *want, int n) {
    char path[600];
    snprintf(path, sizeof path, "%s/model.safetensors", hf_dir);
    SafeTensors hf, full;
    Err err = {0};
    cr_assert_eq(st_read(&hf, path, &err), 0, "%s", err.msg);
    cr_assert_eq(st_read(&full, full_path, &err), 0, "%s", err.msg);
    cr_expect_eq(hf.n, n, "%d tensors, not %d", hf.n, n);
    cr_expect_str_eq(st_metadata(&hf, "format"), "pt");
    for (int i = 0; i < n; i++) {
        const StTensor *t = st_find(&hf, want[i].hf), *o = st_find(&full, want[i].ours);
        cr_assert(t && o, "%s (ours %s) missing", want[i].hf, want[i].ours);
        cr_expect_str_eq(t->dtype, "F32");
        cr_expect_eq(t->ndim, want[i].cols ? 2 : 1, "%s", want[i].hf);
        cr_expect_eq(t->shape[0], want[i].rows, "%s", want[i].hf);
        if (want[i].cols) cr_expect_eq(t->shape[1], want[i].cols, "%s", want[i].hf);
        cr_assert_eq(t->numel, o->numel);
        const float *a = st_data(&hf, t), *b = st_data(&full, o);
        size_t rows = (size_t)want[i].rows, cols = want[i].cols ? (size_t)want[i].cols : 1;
        size_t bad = 0;
        for (size_t r = 0; r < rows; r++)
            for (size_t c = 0; c < cols; c++) {
                /* ours is [cols, rows] where Hugging Face's is transposed */
                float mine = want[i].transposed ? b[c * rows + r] : b[r * cols + c];
                bad += a[r * cols + c] != mine;
            }
        cr_expect_eq(bad, 0, "%s: %zu values differ from --save-full's", want[i].hf, bad);
    }
    st_free(&hf);
    st_free(&full);
}

static cJSON *read_config(const char *hf_dir) {
    char path[600];
    snprintf(path, sizeof path, "%s/config.json", hf_dir);
    char *text = read_text_file(path, NULL);
    cr_assert(text, "%s", path);
    cJSON *c = cJSON_Parse(text);
    free(text);
    cr_assert(c, "%s is not JSON", path);
    return c;
}

static double number(const cJSON *c, const char *key) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(c, key);
    cr_assert(cJSON_IsNumber(v), "config.json: %s missing or not a number", key);
    return v->valuedouble;
}

static const char *text(const cJSON *c, const char *key) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(c, key);
    cr_assert(cJSON_IsString(v), "config.json: %s missing or not a string", key);
    return v->valuestring;
}

static int is_false(const cJSON *c, const char *key) {
    return cJSON_IsFalse(cJSON_GetObjectItemCaseSensitive(c, key));
}

typedef struct KeyNumber {
    const char *key;
    double value;
} KeyNumber;

/* Each key's number is the value wanted (within 1e-12: eps is 1e-05 in the file). */
static void expect_numbers(const cJSON *c, const KeyNumber *want, int n) {
    for (int i = 0; i < n; i++)
        cr_expect_float_eq(number(c, want[i].key), want[i].value, 1e-12, "config.json: %s",
                           want[i].key);
}

static const char *architecture(const cJSON *c) {
    const cJSON *a = cJSON_GetObjectItemCaseSensitive(c, "architectures");
    cr_assert(cJSON_IsArray(a) && cJSON_GetArraySize(a) == 1);
    return cJSON_GetArrayItem(a, 0)->valuestring;
}

/* Trains `flags` a few steps into a fresh folder with --save-full and --save-hf, holds the folder's
 * tensors to `want`, and returns its config.json (dir, for remove_test_dir, into dir). */
static cJSON *export_and_check(char *dir, const char *tag, const char *flags, const Want *want,
                               int n) {
    fresh_test_dir(dir, 256, "export_hf", tag);
    free(
        fsdp_ok("train %s --batch-size 2 --steps 2 --save-full %s/full.safetensors --save-hf %s/hf",
                flags, dir, dir));
    char hf[300], full[300];
    snprintf(hf, sizeof hf, "%s/hf", dir);
    snprintf(full, sizeof full, "%s/full.safetensors", dir);
    expect_tensors(hf, full, want, n);
    return read_config(hf);
}

Test(export_hf, a_llama_is_llama_for_causal_lm) {
    char dir[256];
    cJSON *c = export_and_check(dir, "llama", "--model llama " SHAPE " --kv-heads 2 --ranks 2",
                                llama, sizeof llama / sizeof *llama);
    cr_expect_str_eq(architecture(c), "LlamaForCausalLM");
    cr_expect_str_eq(text(c, "model_type"), "llama");
    const KeyNumber sizes[] = {
        {"vocab_size", 256},
        {"hidden_size", 32},
        {"intermediate_size", 48},
        {"num_hidden_layers", 1},
        {"num_attention_heads", 4},
        {"num_key_value_heads", 2},
        {"head_dim", 8},
        {"max_position_embeddings", 16},
        {"rope_theta", 500000.0},
        {"rms_norm_eps", 1e-5},
    };
    expect_numbers(c, sizes, sizeof sizes / sizeof *sizes);
    cr_expect_str_eq(text(c, "hidden_act"), "silu");
    cr_expect(is_false(c, "tie_word_embeddings") && is_false(c, "attention_bias") &&
              is_false(c, "mlp_bias"));
    const cJSON *rope = cJSON_GetObjectItemCaseSensitive(c, "rope_parameters");
    cr_expect_eq(number(rope, "rope_theta"), 500000.0);
    cr_expect_str_eq(text(rope, "rope_type"), "default");
    cJSON_Delete(c);
    remove_test_dir(dir);
}

Test(export_hf, a_gpt_is_gpt2_lm_head_model_with_conv1d_weights_transposed) {
    char dir[256];
    cJSON *c = export_and_check(dir, "gpt2", "--model transformer " SHAPE " --ranks 3", gpt2,
                                sizeof gpt2 / sizeof *gpt2);
    cr_expect_str_eq(architecture(c), "GPT2LMHeadModel");
    cr_expect_str_eq(text(c, "model_type"), "gpt2");
    const KeyNumber sizes[] = {
        {"vocab_size", 256},
        {"n_embd", 32},
        {"n_inner", 48},
        {"n_layer", 1},
        {"n_head", 4},
        {"n_positions", 16},
        {"layer_norm_epsilon", 1e-5},
    };
    expect_numbers(c, sizes, sizeof sizes / sizeof *sizes);
    cr_expect_str_eq(text(c, "activation_function"), "gelu"); /* exact erf GELU, as here */
    cr_expect(is_false(c, "tie_word_embeddings"));
    cJSON_Delete(c);
    remove_test_dir(dir);
}

/* A checkpoint's --hf folder holds what the run's --save-hf wrote (another tensor order). */
Test(export_hf, a_checkpoint_consolidates_to_the_same_folder) {
    char dir[256];
    fresh_test_dir(dir, sizeof dir, "export_hf", "ckpt");
    free(fsdp_ok("train --model llama " SHAPE " --kv-heads 2 --ranks 2 --batch-size 2 --steps 2 "
                 "--checkpoint-dir %s/ck --checkpoint-every 2 --save-full %s/full.safetensors",
                 dir, dir));
    char *said = fsdp_ok("ckpt consolidate %s/ck --hf %s/hf", dir, dir);
    cr_expect(strstr(said, "config.json and model.safetensors (LlamaForCausalLM, 12 tensors)"),
              "%s", said);
    free(said);
    char hf[300], full[300];
    snprintf(hf, sizeof hf, "%s/hf", dir);
    snprintf(full, sizeof full, "%s/full.safetensors", dir);
    expect_tensors(hf, full, llama, sizeof llama / sizeof *llama);
    remove_test_dir(dir);
}

/* Each bad request is one line, exit 2, and an existing folder's files are as they were. */
Test(export_hf, bad_input_is_one_line_and_exit_2) {
    char dir[256];
    fresh_test_dir(dir, sizeof dir, "export_hf", "bad");
    free(fsdp_ok("train --ranks 2 --steps 2 --checkpoint-dir %s/toy --checkpoint-every 2", dir));
    char cmd[900];
    snprintf(cmd, sizeof cmd,
             "printf kept > %s/afile && mkdir %s/keep && printf mine > %s/keep/config.json", dir,
             dir, dir);
    int status = -1;
    free(shell_output(cmd, &status));
    cr_assert_eq(status, 0, "%s", cmd);
    UsageCase cases[] = {
        {fmt_text("train --model vit-tiny --save-hf %s/x", dir),
         "--save-hf writes a language model (transformer, llama) for Hugging Face; vit-tiny has no "
         "such form"},
        {fmt_text("train --model llama --save-hf %s/afile", dir), "is a file; give a folder"},
        {fmt_text("ckpt consolidate %s/toy --hf %s/keep", dir, dir),
         "toy has no Hugging Face form"},
        {fmt_text("ckpt consolidate %s/toy --hf %s/keep -o %s/x", dir, dir, dir),
         "ckpt consolidate writes -o FILE or --hf DIR, not both"},
    };
    expect_usage_errors(cases, sizeof cases / sizeof *cases);
    char path[400];
    snprintf(path, sizeof path, "%s/keep/config.json", dir);
    char *kept = read_text_file(path, NULL);
    cr_expect_str_eq(kept, "mine");
    free(kept);
    remove_test_dir(dir);
}
