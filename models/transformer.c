/* transformer: the GPT-2-style decoder (models/transformer.h): its configuration and shapes by
 * size, its description and its two ends, token + position embedding and the LM head with its
 * next-token loss. */
#include "models/transformer.h"

#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "models/lblock.h"
#include "models/tstack.h"

/* Parameters of the embedding and the head, in GPT-2's state-dict order (a block's are
 * tblock's TBLOCK_*, in the same order as GPT-2's). Llama's embedding has only the token
 * table, and its head the final RMSNorm's weight and lm_head: LLAMA_*. */
enum { E_WTE, E_WPE, EMBED_PARAMS };
enum { H_LN_W, H_LN_B, H_LM_HEAD_W, HEAD_PARAMS };
enum { LLAMA_EMBED_PARAMS = 1 };
enum { LLAMA_H_NORM_W, LLAMA_H_LM_HEAD_W, LLAMA_HEAD_PARAMS };

#define TF_MIN_VOCAB 1000
#define TF_MAX_PARAMS 1e13 /* what --params accepts */

/* ---------------------------------------------------------------- configuration */

/* Field bounds: with them and the two totals checked below, a parameter count fits easily
 * in 64 bits and so does the byte count of any batch set_batch accepts. */
typedef struct FieldBound {
    const char *flag;
    int value, max;
} FieldBound;

/* Bytes of activations one sequence can hold at once (at the head's backward: every block's
 * saved values, the residual stream between modules, the head's, the logits and their
 * gradient, the token ids); in double, so no shape can wrap it. */
static double sequence_bytes(const TransformerConfig *c) {
    double L = c->layers, H = c->hidden, F = c->mlp, T = c->seq, V = c->vocab;
    double scores = (double)c->heads * (c->attention == ATTENTION_FLASH ? T : T * T);
    double mlp_wide = c->arch == TRANSFORMER_LLAMA ? 3 : 2; /* SwiGLU keeps gate, up, product */
    double block = T * (7 * H + mlp_wide * F + 4) + scores;
    return 4 * (2 * T + (L + 1) * T * H + L * block + T * (3 * H + 2) + 2 * T * V);
}

static int check_fields(const TransformerConfig *c, Err *err) {
    const FieldBound bounds[] = {
        {"--layers", c->layers, 100000}, {"--hidden", c->hidden, 1 << 17},
        {"--heads", c->heads, 1 << 17},  {"--mlp", c->mlp, 1 << 20},
        {"--seq", c->seq, 1 << 20},      {"--vocab", c->vocab, 1 << 24},
    };
    for (size_t i = 0; i < sizeof bounds / sizeof *bounds; i++)
        if (bounds[i].value < 1 || bounds[i].value > bounds[i].max)
            return err_set(err, ERR_USAGE, "%s must be from 1 to %d (got %d)", bounds[i].flag,
                           bounds[i].max, bounds[i].value);
    return 0;
}

/* Llama's K,V heads divide its heads and RoPE turns pairs of a head's columns; GPT has no
 * K,V heads of its own to set. */
static int check_kv_heads(const TransformerConfig *c, Err *err) {
    if (c->arch != TRANSFORMER_LLAMA) {
        if (c->kv_heads)
            return err_set(err, ERR_USAGE,
                           "--kv-heads applies to Llama-shaped models; GPT's attention has one K,V "
                           "head per head (got --kv-heads %d)",
                           c->kv_heads);
        return 0;
    }
    if (c->kv_heads < 1 || c->kv_heads > c->heads || c->heads % c->kv_heads != 0)
        return err_set(err, ERR_USAGE, "--kv-heads must divide --heads (got %d and %d)",
                       c->kv_heads, c->heads);
    if ((c->hidden / c->heads) % 2 != 0)
        return err_set(err, ERR_USAGE,
                       "RoPE turns pairs of a head's columns: --hidden / --heads must be even (got "
                       "%d / %d = %d)",
                       c->hidden, c->heads, c->hidden / c->heads);
    return 0;
}

int transformer_config_check(const TransformerConfig *c, Err *err) {
    int rc = check_fields(c, err);
    if (rc) return rc;
    if (c->hidden % c->heads != 0)
        return err_set(err, ERR_USAGE, "--hidden must be a multiple of --heads (got %d and %d)",
                       c->hidden, c->heads);
    if ((rc = check_kv_heads(c, err))) return rc;
    if (c->attention != ATTENTION_EAGER && c->attention != ATTENTION_FLASH)
        return err_set(err, ERR_INTERNAL, "unknown attention kind %d", (int)c->attention);
    if (c->elementwise == ELEMENTWISE_EAGER && c->arch != TRANSFORMER_LLAMA)
        return err_set(err, ERR_USAGE,
                       "--elementwise eager charges torchtitan's Llama block's unfused kernels; "
                       "a GPT-shaped model has no such form (use --model llama or llama3-*)");
    size_t params = transformer_param_count(c);
    if ((double)params > 0x1p50)
        return err_set(err, ERR_USAGE,
                       "--layers %d, --hidden %d, --mlp %d, --vocab %d make %zu parameters; at "
                       "most 2^50 are modelled",
                       c->layers, c->hidden, c->mlp, c->vocab, params);
    if (sequence_bytes(c) > 0x1p44)
        return err_set(err, ERR_USAGE,
                       "one sequence of --seq %d tokens through --layers %d would hold %.3g bytes "
                       "of activations; at most 2^44 are modelled",
                       c->seq, c->layers, sequence_bytes(c));
    return 0;
}

/* Width of Llama's K and V projections. */
static size_t kv_width(const TransformerConfig *c) {
    return (size_t)c->kv_heads * (size_t)(c->hidden / c->heads);
}

size_t transformer_param_count(const TransformerConfig *c) {
    size_t H = (size_t)c->hidden, V = (size_t)c->vocab, S = (size_t)c->seq, F = (size_t)c->mlp;
    if (c->arch == TRANSFORMER_LLAMA) /* no position table; the head's norm has no bias */
        return V * H + (size_t)c->layers * lblock_param_count(H, kv_width(c), F) + H + V * H;
    size_t embed = V * H + S * H, head = 2 * H + V * H; /* the LM head is not tied to wte */
    return embed + (size_t)c->layers * tblock_param_count(H, F) + head;
}

const char *attention_name(AttentionKind a) {
    return a == ATTENTION_FLASH ? "flash" : "eager";
}

int attention_from_name(const char *name) {
    if (!strcmp(name, "eager")) return ATTENTION_EAGER;
    if (!strcmp(name, "flash")) return ATTENTION_FLASH;
    return -1;
}

const char *loss_name(LossKind l) {
    return l == LOSS_EAGER ? "eager" : "fused";
}

int loss_from_name(const char *name) {
    if (!strcmp(name, "fused")) return LOSS_FUSED;
    if (!strcmp(name, "eager")) return LOSS_EAGER;
    return -1;
}

const char *elementwise_name(ElementwiseKind e) {
    return e == ELEMENTWISE_EAGER ? "eager" : "fused";
}

int elementwise_from_name(const char *name) {
    if (!strcmp(name, "fused")) return ELEMENTWISE_FUSED;
    if (!strcmp(name, "eager")) return ELEMENTWISE_EAGER;
    return -1;
}

/* ---------------------------------------------------------------- Llama 3's shapes */

typedef struct LlamaPreset {
    const char *name;
    int layers, hidden, heads, kv_heads, mlp, vocab;
} LlamaPreset;

/* Meta's model cards and config.json (8.03B, 70.6B, 405.9B parameters). */
static const LlamaPreset llama_presets[] = {
    {"llama3-8b", 32, 4096, 32, 8, 14336, 128256},
    {"llama3-70b", 80, 8192, 64, 8, 28672, 128256},
    {"llama3-405b", 126, 16384, 128, 8, 53248, 128256},
};

int transformer_llama_preset(const char *name, TransformerConfig *out) {
    for (size_t i = 0; i < sizeof llama_presets / sizeof *llama_presets; i++) {
        const LlamaPreset *p = &llama_presets[i];
        if (strcmp(name, p->name) != 0) continue;
        *out = (TransformerConfig){.layers = p->layers,
                                   .hidden = p->hidden,
                                   .heads = p->heads,
                                   .mlp = p->mlp,
                                   .seq = 8192,
                                   .vocab = p->vocab,
                                   .arch = TRANSFORMER_LLAMA,
                                   .kv_heads = p->kv_heads};
        return 0;
    }
    return -1;
}

const char *transformer_llama_preset_names(void) {
    return "llama3-8b, llama3-70b, llama3-405b";
}

/* ---------------------------------------------------------------- the language models' presets */

typedef struct LmPreset {
    const char *name;
    TransformerConfig shape;
} LmPreset;

static const LmPreset lm_presets[] = {
    {"gpt2-small",
     {.layers = 12,
      .hidden = 768,
      .heads = 12,
      .mlp = 3072,
      .seq = 1024,
      .vocab = TRANSFORMER_BYTE_VOCAB,
      .arch = TRANSFORMER_GPT,
      .attention = ATTENTION_FLASH}},
    {"llama-125m",
     {.layers = 12,
      .hidden = 1024,
      .heads = 16,
      .mlp = 2560,
      .seq = 1024,
      .vocab = TRANSFORMER_BYTE_VOCAB,
      .arch = TRANSFORMER_LLAMA,
      .kv_heads = 4,
      .attention = ATTENTION_FLASH}},
};

int transformer_lm_preset(const char *name, TransformerConfig *out) {
    for (size_t i = 0; i < sizeof lm_presets / sizeof *lm_presets; i++)
        if (!strcmp(name, lm_presets[i].name)) {
            *out = lm_presets[i].shape;
            return 0;
        }
    return -1;
}

const char *transformer_lm_preset_names(void) {
    return "gpt2-small, llama-125m";
}

/* ---------------------------------------------------------------- shapes by size */

/* Published shapes, each at the size it was published at, so a request of exactly that size
 * gets the row's own depth: GPT-3 Small (GPT-2 small's shape), Medium, XL and 2.7B, LLaMA
 * 7B, 13B, 33B (the "30B" class) and 65B (the width and depth of the 70B class), GPT-3 175B,
 * Megatron-Turing NLG 530B and Megatron's 1T. The 70B class sits at 65e9 because that is
 * where 80 layers of width 8192 land in this layout (a 4 x hidden MLP and full multi-head
 * attention) with a vocabulary of a real model's size; a request for 7e10 gets 86 of them. */
typedef struct ShapeRow {
    double params;
    int layers, hidden, heads;
} ShapeRow;

static const ShapeRow shape_rows[] = {
    {125e6, 12, 768, 12},     {350e6, 24, 1024, 16},       {1.3e9, 24, 2048, 16},
    {2.7e9, 32, 2560, 32},    {7e9, 32, 4096, 32},         {13e9, 40, 5120, 40},
    {32.5e9, 60, 6656, 52},   {65e9, 80, 8192, 64},        {175e9, 96, 12288, 96},
    {530e9, 105, 20480, 128}, {1.008e12, 128, 25600, 160},
};

/* The row whose size is nearest to `params` on a log scale. */
static const ShapeRow *nearest_row(double params) {
    const ShapeRow *best = &shape_rows[0];
    for (size_t i = 1; i < sizeof shape_rows / sizeof *shape_rows; i++)
        if (fabs(log(params / shape_rows[i].params)) < fabs(log(params / best->params)))
            best = &shape_rows[i];
    return best;
}

/* The vocabulary that brings shape c closest to `params`: each token adds 2 x hidden
 * parameters (its row of wte and of the untied lm_head). */
static double vocab_for(double params, const TransformerConfig *c) {
    TransformerConfig no_vocab = *c;
    no_vocab.vocab = 0;
    double rest = params - (double)transformer_param_count(&no_vocab);
    return floor(rest / (2.0 * c->hidden) + 0.5);
}

/* The depth that leaves the row's own vocabulary (what it has at its own size) for the
 * rest: the row's depth at the row's size, and in between, the depth grows with the request
 * while the vocabulary stays about a real model's. */
static int depth_for(double params, const ShapeRow *row, const TransformerConfig *shape) {
    TransformerConfig c = *shape;
    c.layers = row->layers;
    double row_vocab = vocab_for(row->params, &c);
    c.layers = 0;
    c.vocab = (int)row_vocab;
    double block = (double)tblock_param_count((size_t)c.hidden, (size_t)c.mlp);
    double layers = floor((params - (double)transformer_param_count(&c)) / block + 0.5);
    return layers < 1 ? 1 : (int)layers;
}

int transformer_config_for_params(double params, TransformerConfig *out, Err *err) {
    if (!(params > 0) || params > TF_MAX_PARAMS)
        return err_set(err, ERR_USAGE, "--params must be above 0 and at most 1e13 (got %g)",
                       params);
    const ShapeRow *row = nearest_row(params);
    TransformerConfig c = {
        .hidden = row->hidden, .heads = row->heads, .mlp = 4 * row->hidden, .seq = 2048};
    c.layers = depth_for(params, row, &c);
    double vocab = vocab_for(params, &c);
    /* the vocabulary fills the rest; too little rest left means one layer too many */
    while (vocab < TF_MIN_VOCAB && c.layers > 1) {
        c.layers--;
        vocab = vocab_for(params, &c);
    }
    if (vocab < TF_MIN_VOCAB) {
        TransformerConfig least = c;
        least.vocab = TF_MIN_VOCAB;
        return err_set(err, ERR_USAGE,
                       "--params %g is below the smallest shape made here (1 layer of hidden %d "
                       "and a vocabulary of %d: %zu parameters)",
                       params, c.hidden, TF_MIN_VOCAB, transformer_param_count(&least));
    }
    c.vocab = vocab > INT_MAX ? INT_MAX : (int)vocab; /* the check names one too large */
    int rc = transformer_config_check(&c, err);
    if (!rc) *out = c;
    return rc;
}

/* ---------------------------------------------------------------- the description */

/* GPT-2's initialization: every weight N(0, 0.02) except the two projections into the
 * residual stream (attn.c_proj, mlp.c_proj), N(0, 0.02 / sqrt(2 x layers)) so the stream's
 * variance does not grow with depth; biases 0, LayerNorms weight 1, bias 0. The untied
 * lm_head starts like wte. */
#define GPT2_STD 0.02f

static void add_embed(ParamMaker *pm, const void *config) {
    const TransformerConfig *c = config;
    int64_t H = c->hidden, V = c->vocab, S = c->seq;
    param_maker_begin(pm, "embed", 0);
    param_maker_add(pm, "wte.weight", 2, (int64_t[]){V, H}, INIT_NORMAL, 0, GPT2_STD);
    param_maker_add(pm, "wpe.weight", 2, (int64_t[]){S, H}, INIT_NORMAL, 0, GPT2_STD);
}

static void add_block(ParamMaker *pm, const void *config, int layer) {
    const TransformerConfig *c = config;
    static const char *const suffix[TBLOCK_PARAMS] = {
        "ln_1.weight",        "ln_1.bias",        "attn.c_attn.weight", "attn.c_attn.bias",
        "attn.c_proj.weight", "attn.c_proj.bias", "ln_2.weight",        "ln_2.bias",
        "mlp.c_fc.weight",    "mlp.c_fc.bias",    "mlp.c_proj.weight",  "mlp.c_proj.bias",
    };
    float proj = GPT2_STD / sqrtf(2.0f * (float)c->layers);
    const ParamInit init[TBLOCK_PARAMS] = {
        {INIT_ONE, 0, 0},  {INIT_ZERO, 0, 0},      {INIT_NORMAL, 0, GPT2_STD},
        {INIT_ZERO, 0, 0}, {INIT_NORMAL, 0, proj}, {INIT_ZERO, 0, 0},
        {INIT_ONE, 0, 0},  {INIT_ZERO, 0, 0},      {INIT_NORMAL, 0, GPT2_STD},
        {INIT_ZERO, 0, 0}, {INIT_NORMAL, 0, proj}, {INIT_ZERO, 0, 0},
    };
    char module[64], prefix[64];
    snprintf(module, sizeof module, "h.%d", layer);
    snprintf(prefix, sizeof prefix, "h.%d.", layer);
    tblock_describe(pm, module, prefix, suffix, init, c->hidden, c->mlp);
}

static void add_head(ParamMaker *pm, const void *config) {
    const TransformerConfig *c = config;
    int64_t H = c->hidden, V = c->vocab;
    param_maker_begin(pm, "head", 0);
    param_maker_add(pm, "ln_f.weight", 1, (int64_t[]){H}, INIT_ONE, 0, 0);
    param_maker_add(pm, "ln_f.bias", 1, (int64_t[]){H}, INIT_ZERO, 0, 0);
    param_maker_add(pm, "lm_head.weight", 2, (int64_t[]){V, H}, INIT_NORMAL, 0, GPT2_STD);
}

/* Llama's: every weight N(0, 0.02), the projections into the residual stream (o_proj,
 * down_proj) scaled down with depth as GPT-2's, norms 1; Hugging Face's names. */
static void add_llama_embed(ParamMaker *pm, const void *config) {
    const TransformerConfig *c = config;
    param_maker_begin(pm, "embed", 0);
    param_maker_add(pm, "model.embed_tokens.weight", 2, (int64_t[]){c->vocab, c->hidden},
                    INIT_NORMAL, 0, GPT2_STD);
}

static void add_llama_block(ParamMaker *pm, const void *config, int layer) {
    const TransformerConfig *c = config;
    char module[64], prefix[64];
    snprintf(module, sizeof module, "layers.%d", layer);
    snprintf(prefix, sizeof prefix, "model.layers.%d.", layer);
    lblock_describe(pm, module, prefix, c->hidden, (int64_t)kv_width(c), c->mlp, GPT2_STD,
                    GPT2_STD / sqrtf(2.0f * (float)c->layers));
}

static void add_llama_head(ParamMaker *pm, const void *config) {
    const TransformerConfig *c = config;
    param_maker_begin(pm, "head", 0);
    param_maker_add(pm, "model.norm.weight", 1, (int64_t[]){c->hidden}, INIT_ONE, 0, 0);
    param_maker_add(pm, "lm_head.weight", 2, (int64_t[]){c->vocab, c->hidden}, INIT_NORMAL, 0,
                    GPT2_STD);
}

/* ---------------------------------------------------------------- per-rank state */

/* A run computes on a real device (a byte-level model of a text: `fsdp train --model
 * transformer`) and only charges on an accounting-only one (fsdp plan at any size, where the
 * kernels are kernels_none and the buffers hold nothing): the same buffers taken and released
 * in the same order either way, so a plan's bytes are a real run's. Attention is causal and of
 * the plain kind that keeps its probabilities [B, heads, T, T] (no flash attention), as the
 * ViT's. */

/* What the embedding and the head hold for the current batch (ModelRun.own); the logits
 * [B, T, vocab] are the stack's, in the compute dtype. */
typedef struct TfActs {
    int32_t *tokens, *targets;          /* [B, T]: the input ids and the next ids to predict */
    void *ln_f, *ln_f_mean, *ln_f_rstd; /* the final LayerNorm: [B, T, H], [B, T], [B, T] */
} TfActs;

static void release_input(ModelRun *r) {
    TfActs *a = r->own;
    run_release_ids(r, &a->tokens);
    run_release_ids(r, &a->targets);
}

static void release_head(ModelRun *r) {
    TfActs *a = r->own;
    void **done[] = {&a->ln_f, &a->ln_f_mean, &a->ln_f_rstd};
    for (size_t i = 0; i < sizeof done / sizeof *done; i++) run_release(r, done[i]);
}

/* n sequences must not hold more bytes than a 64-bit count can say. */
static int batch_fits(const TransformerConfig *c, size_t n, Err *err) {
    double bytes = (double)n * sequence_bytes(c);
    if (bytes > 0x1p62)
        return err_set(err, ERR_USAGE,
                       "a batch of %zu sequences of %d tokens would hold %.3g bytes of "
                       "activations, more than 64-bit byte counts allow",
                       n, c->seq, bytes);
    return 0;
}

/* Sequence idx[i] is the text's bytes [idx[i] * T, (idx[i] + 1) * T) and its targets the same
 * bytes one later; both go to the device as int32 ids. */
static int stage_batch(ModelRun *r, const Dataset *ds, const long *idx, size_t n, Err *err) {
    TfActs *a = r->own;
    size_t T = r->T, count = n * T;
    int32_t *ids = malloc(2 * count * sizeof *ids);
    if (!ids) return err_set(err, ERR_NOMEM, "out of memory staging a batch of %zu sequences", n);
    for (size_t i = 0; i < n; i++) {
        const uint8_t *src = ds->text + (size_t)idx[i] * T;
        for (size_t t = 0; t < T; t++) {
            ids[i * T + t] = src[t];
            ids[count + i * T + t] = src[t + 1];
        }
    }
    r->dev->ops->copy(r->dev, a->tokens, ids, count * sizeof *ids);
    r->dev->ops->copy(r->dev, a->targets, ids + count, count * sizeof *ids);
    free(ids);
    return 0;
}

/* B sequences of seq tokens and their targets, from a text data set (io/text.h). An
 * accounting-only device holds nothing: the buffers are charged and nothing is read (the data
 * set's n is all that is used: the sampler draws indices from it). */
static int tf_set_batch(ModelRun *r, const Dataset *ds, const long *idx, size_t n, Err *err) {
    const TransformerConfig *c = r->config;
    TfActs *a = r->own;
    int rc = batch_fits(c, n, err);
    if (rc) return rc;
    int real = !r->dev->accounting_only;
    if (real && (!ds->text || ds->in_elems != (size_t)c->seq))
        return err_set(err, ERR_USAGE,
                       "the transformer reads sequences of %d bytes of a text; this data set "
                       "has %s",
                       c->seq, ds->text ? "sequences of another length" : "no text");
    tstack_discard(r);
    r->B = n;
    a->tokens = run_take_ids(r, n * r->T);
    a->targets = run_take_ids(r, n * r->T);
    if (n && (!a->tokens || !a->targets))
        return err_set(err, ERR_NOMEM, "out of memory for a batch of %zu sequences", n);
    return n && real ? stage_batch(r, ds, idx, n, err) : 0;
}

/* ---------------------------------------------------------------- work estimates */

/* What the embedding and the head charge the clock: flops, and `elems` read and written in the
 * compute dtype; backward counts twice (as the ViT's small_work). The blocks charge
 * tblock_work, the loss the stack's. */
static void small_work(const ModelRun *r, Work *w, WorkKind kind, double flops, double elems) {
    double passes = kind == WORK_BACKWARD ? 2.0 : 1.0;
    w->flops += flops * passes;
    w->bytes = (double)dtype_size(r->dtype) * elems * passes;
    w->kernels = kind == WORK_BACKWARD ? 3 : 2;
}

/* x = wte[tokens] + wpe: one add an element; a row of each table read, x written. */
static void embed_work(const ModelRun *r, Work *w, WorkKind kind) {
    double n = (double)(r->B * r->T * r->H);
    work_begin(w, kind);
    small_work(r, w, kind, n, 3 * n);
}

/* logits = ln_f(x) . lm_head^T: the GEMM's flops; x, ln_f's output, the logits and the
 * weight. */
static void head_work(const ModelRun *r, Work *w, WorkKind kind) {
    const TransformerConfig *c = r->config;
    double M = (double)(r->B * r->T), H = (double)r->H, V = (double)c->vocab;
    work_begin(w, kind);
    work_linear(w, kind, M, H, V); /* the GEMM's flops, by its shape */
    small_work(r, w, kind, 0, M * (2 * H + V) + V * H);
}

/* ---------------------------------------------------------------- forward */

/* x[1] = wte[tokens] + wpe; the ids stay for the embedding's backward (wte's gradient is a
 * scatter-add over them). */
static int embed_forward(ModelRun *r, void *const *p, Work *w, Err *err) {
    const TransformerConfig *c = r->config;
    TfActs *a = r->own;
    size_t n = r->B * r->T * r->H;
    r->x[1] = run_take(r, n);
    embed_work(r, w, WORK_FORWARD);
    int rc = act_check_taken((void *[]){r->x[1]}, 1, n, err);
    const void *wpe = c->arch == TRANSFORMER_LLAMA ? NULL : p[E_WPE]; /* RoPE: no table */
    if (!rc && n)
        r->k->token_embed_forward(r->dtype, r->x[1], a->tokens, p[E_WTE], wpe, r->B, r->T, r->H,
                                  (size_t)c->vocab);
    return rc;
}

static int is_llama(const ModelRun *r) {
    return ((const TransformerConfig *)r->config)->arch == TRANSFORMER_LLAMA;
}

/* Where the head's lm_head weight is among its parameters. */
static int lm_head_index(const ModelRun *r) {
    return is_llama(r) ? LLAMA_H_LM_HEAD_W : H_LM_HEAD_W;
}

/* ln_f over every token (Llama's: an RMSNorm, no mean kept), then the LM head (no bias, as
 * GPT-2's and Llama's): what backward needs of it is kept. */
static int head_forward(ModelRun *r, void *const *p, Work *w, Err *err) {
    const TransformerConfig *c = r->config;
    TfActs *a = r->own;
    const Kernels *k = r->k;
    size_t M = r->B * r->T, H = r->H, V = (size_t)c->vocab;
    int llama = is_llama(r);
    a->ln_f = run_take(r, M * H), a->ln_f_mean = llama ? NULL : run_take_fp32(r, M);
    a->ln_f_rstd = run_take_fp32(r, M);
    r->logits = run_take(r, M * V);
    head_work(r, w, WORK_FORWARD);
    int rc = act_check_taken(
        (void *[]){a->ln_f, llama ? a->ln_f : a->ln_f_mean, a->ln_f_rstd, r->logits}, 4, M, err);
    if (rc || !M) return rc;
    const void *x = r->x[c->layers + 1];
    if (llama)
        k->rmsnorm_forward(r->dtype, a->ln_f, a->ln_f_rstd, x, p[LLAMA_H_NORM_W], M, H,
                           TRANSFORMER_NORM_EPS);
    else
        k->layernorm_forward(r->dtype, a->ln_f, a->ln_f_mean, a->ln_f_rstd, x, p[H_LN_W], p[H_LN_B],
                             M, H, TRANSFORMER_NORM_EPS);
    k->linear_forward(r->dtype, r->logits, a->ln_f, p[lm_head_index(r)], NULL, M, H, V);
    return 0;
}

/* --loss eager: the logits' fp32 copy, the log-probabilities forward keeps (the logits are
 * dropped, as torchtitan's `del pred` drops them), then backward's NLL gradient, dense, and
 * log-softmax's, cast to the compute dtype as the logits' gradient: three fp32 [B, T, vocab] at
 * once at its fullest, each step a tensor of its own as in PyTorch. NaN when one is not there. */
static float eager_loss(ModelRun *r, float grad_scale) {
    const TransformerConfig *c = r->config;
    const Kernels *k = r->k;
    const int32_t *targets = ((TfActs *)r->own)->targets;
    size_t rows = r->B * r->T, V = (size_t)c->vocab, n = rows * V;
    float *lf = run_take_fp32(r, n), *logp = NULL, *dlogp = NULL, *dlf = NULL;
    if (lf) k->cast(lf, DTYPE_FP32, r->logits, r->dtype, n);
    run_release(r, &r->logits);
    if (lf && (logp = run_take_fp32(r, n))) k->log_softmax(logp, lf, rows, V);
    run_release(r, (void **)&lf);
    float loss = NAN;
    if (logp && (dlogp = run_take_fp32(r, n)))
        loss = k->nll_loss(dlogp, logp, targets, rows, V, grad_scale);
    if (dlogp && (dlf = run_take_fp32(r, n))) k->log_softmax_backward(dlf, dlogp, logp, rows, V);
    run_release(r, (void **)&dlogp);
    run_release(r, (void **)&logp);
    if (dlf && (r->dlogits = run_take(r, n))) k->cast(r->dlogits, r->dtype, dlf, DTYPE_FP32, n);
    run_release(r, (void **)&dlf);
    return r->dlogits ? loss : NAN;
}

/* Next-token cross-entropy, the mean over every position of every sequence (so a rank's mean
 * over its B x T tokens, averaged over ranks, is the global batch's). */
static float tf_loss(ModelRun *r, float grad_scale) {
    const TransformerConfig *c = r->config;
    TfActs *a = r->own;
    if (c->loss == LOSS_EAGER) return eager_loss(r, grad_scale);
    return r->k->cross_entropy(r->dtype, r->dlogits, r->logits, a->targets, r->B * r->T,
                               (size_t)c->vocab, grad_scale);
}

/* ---------------------------------------------------------------- backward */

/* The LM head's backward gives dL/d(ln_f's output), dln; ln_f's backward adds its share into
 * the residual stream's gradient, which starts here. */
static int head_backward(ModelRun *r, void *const *p, float *const *g, Work *w, Err *err) {
    const TransformerConfig *c = r->config;
    TfActs *a = r->own;
    const Kernels *k = r->k;
    size_t M = r->B * r->T, H = r->H, V = (size_t)c->vocab;
    void *dln = run_take(r, M * H);
    r->grad = run_take(r, M * H);
    int rc = act_check_taken((void *[]){dln, r->grad}, 2, M, err);
    if (!rc && M) {
        int lm = lm_head_index(r);
        const void *x = r->x[c->layers + 1];
        k->linear_backward(r->dtype, dln, g[lm], NULL, r->dlogits, a->ln_f, p[lm], M, H, V);
        k->zero_bytes(r->grad, M * H * dtype_size(r->dtype));
        if (is_llama(r))
            k->rmsnorm_backward(r->dtype, r->grad, g[LLAMA_H_NORM_W], dln, x, a->ln_f_rstd,
                                p[LLAMA_H_NORM_W], M, H);
        else
            k->layernorm_backward(r->dtype, r->grad, g[H_LN_W], g[H_LN_B], dln, x, a->ln_f_mean,
                                  a->ln_f_rstd, p[H_LN_W], M, H);
    }
    run_release(r, &dln);
    tstack_release_head(r);
    head_work(r, w, WORK_BACKWARD);
    return rc;
}

/* wte's gradient is a scatter-add of the stream's gradient over the ids, wpe's its sum over
 * the batch: no buffer of their own. */
static int embed_backward(ModelRun *r, void *const *p, float *const *g, Work *w, Err *err) {
    (void)p, (void)err;
    const TransformerConfig *c = r->config;
    TfActs *a = r->own;
    if (r->B)
        r->k->token_embed_backward(r->dtype, g[E_WTE], is_llama(r) ? NULL : g[E_WPE], a->tokens,
                                   r->grad, r->B, r->T, r->H, (size_t)c->vocab);
    embed_work(r, w, WORK_BACKWARD);
    return 0;
}

/* ---------------------------------------------------------------- the model */

/* What both kinds compute their ends with: the embedding, the head and the loss ask the config
 * which kind they serve. The embedding's input is token ids, which mixed precision leaves alone
 * (FSDP2 casts only floating-point inputs), and has no gradient: no .input; and a language
 * model does not classify: no .correct. */
#define TRANSFORMER_ENDS_COMPUTE                                                                   \
    .own_size = sizeof(TfActs), .set_batch = tf_set_batch, .embed_forward = embed_forward,         \
    .head_forward = head_forward, .loss = tf_loss, .head_backward = head_backward,                 \
    .embed_backward = embed_backward, .release_input = release_input, .release_head = release_head

static const TStackEnds transformer_ends = {
    .name = "transformer",
    .label = "transformer",
    .embed_params = EMBED_PARAMS,
    .block_params = TBLOCK_PARAMS,
    .head_params = HEAD_PARAMS,
    .describe_embed = add_embed,
    .describe_block = add_block,
    .describe_head = add_head,
    TRANSFORMER_ENDS_COMPUTE,
};

/* The Llama-shaped one: its own description, the same computation. */
static const TStackEnds llama_ends = {
    .name = "llama",
    .label = "Llama-shaped transformer",
    .embed_params = LLAMA_EMBED_PARAMS,
    .block_params = LBLOCK_PARAMS,
    .head_params = LLAMA_HEAD_PARAMS,
    .describe_embed = add_llama_embed,
    .describe_block = add_llama_block,
    .describe_head = add_llama_head,
    TRANSFORMER_ENDS_COMPUTE,
};

static const TStackEnds *ends_of(const TransformerConfig *c) {
    return c->arch == TRANSFORMER_LLAMA ? &llama_ends : &transformer_ends;
}

static int tf_run_create(const ModelDesc *m, Device *dev, const Kernels *k, DType compute,
                         size_t max_batch, ModelRun **out, Err *err) {
    const TransformerConfig *c = m->config;
    /* what a computed run needs beyond a plan's shape: a sequence the kernels' attention of the
     * config's kind takes (the GPU's eager attention keeps a row in shared memory; flash has a
     * limit of its own), and every byte a row of the embedding */
    const size_t max_tokens = c->attention == ATTENTION_FLASH ? k->max_flash_tokens : k->max_tokens;
    if (!dev->accounting_only && max_tokens && (size_t)c->seq > max_tokens)
        return err_set(err, ERR_USAGE,
                       "--seq %d is more than the %zu tokens the %s kernels' %s attention takes",
                       c->seq, max_tokens, k->name, attention_name(c->attention));
    if (!dev->accounting_only && c->vocab < TRANSFORMER_BYTE_VOCAB)
        return err_set(err, ERR_USAGE,
                       "a vocabulary of %d cannot hold a byte's %d values: a computed run "
                       "reads bytes",
                       c->vocab, TRANSFORMER_BYTE_VOCAB);
    int rc = batch_fits(c, max_batch, err);
    if (rc) return rc;
    TStackShape shape = {.layers = c->layers,
                         .tokens = (size_t)c->seq,
                         .hidden = (size_t)c->hidden,
                         .mlp = (size_t)c->mlp,
                         .heads = (size_t)c->heads,
                         .ln_eps = TRANSFORMER_NORM_EPS,
                         .causal = 1,
                         .flash = c->attention == ATTENTION_FLASH,
                         .llama = c->arch == TRANSFORMER_LLAMA,
                         .kv_heads = (size_t)c->kv_heads,
                         .outputs = (size_t)c->seq * (size_t)c->vocab,
                         .eager_loss = c->loss == LOSS_EAGER,
                         .eager_elementwise = c->elementwise == ELEMENTWISE_EAGER};
    return tstack_run_create(ends_of(c), &shape, c, dev, k, compute, out, err);
}

static const ModelOps transformer_ops = TSTACK_MODEL_OPS(tf_run_create);

int transformer_model_create(ModelDesc *m, const TransformerConfig *c, Err *err) {
    memset(m, 0, sizeof *m); /* a description a failure leaves is safe to free */
    int rc = transformer_config_check(c, err);
    return rc ? rc
              : tstack_model_create(m, ends_of(c), &transformer_ops, c, sizeof *c, c->layers, err);
}
