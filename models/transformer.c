#include "models/transformer.h"

#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "models/tblock.h"

/* Parameters of the embedding and the head, in GPT-2's state-dict order (a block's are
 * tblock's TBLOCK_*, in the same order as GPT-2's). */
enum { E_WTE, E_WPE, EMBED_PARAMS };
enum { H_LN_W, H_LN_B, H_LM_HEAD_W, HEAD_PARAMS };

#define TF_LN_EPS 1e-5f /* GPT-2's LayerNorm eps */
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
    double block = T * (7 * H + 2 * F + 4) + (double)c->heads * T * T;
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

int transformer_config_check(const TransformerConfig *c, Err *err) {
    int rc = check_fields(c, err);
    if (rc) return rc;
    if (c->hidden % c->heads != 0)
        return err_set(err, ERR_USAGE, "--hidden must be a multiple of --heads (got %d and %d)",
                       c->hidden, c->heads);
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

size_t transformer_param_count(const TransformerConfig *c) {
    size_t H = (size_t)c->hidden, V = (size_t)c->vocab, S = (size_t)c->seq;
    size_t embed = V * H + S * H, head = 2 * H + V * H; /* the LM head is not tied to wte */
    return embed + (size_t)c->layers * tblock_param_count(H, (size_t)c->mlp) + head;
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

static void add_embed(ParamMaker *pm, const TransformerConfig *c) {
    int64_t H = c->hidden, V = c->vocab, S = c->seq;
    param_maker_begin(pm, "embed", 0);
    param_maker_add(pm, "wte.weight", 2, (int64_t[]){V, H}, INIT_NORMAL, 0, GPT2_STD);
    param_maker_add(pm, "wpe.weight", 2, (int64_t[]){S, H}, INIT_NORMAL, 0, GPT2_STD);
}

static void add_block(ParamMaker *pm, const TransformerConfig *c, int layer) {
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

static void add_head(ParamMaker *pm, const TransformerConfig *c) {
    int64_t H = c->hidden, V = c->vocab;
    param_maker_begin(pm, "head", 0);
    param_maker_add(pm, "ln_f.weight", 1, (int64_t[]){H}, INIT_ONE, 0, 0);
    param_maker_add(pm, "ln_f.bias", 1, (int64_t[]){H}, INIT_ZERO, 0, 0);
    param_maker_add(pm, "lm_head.weight", 2, (int64_t[]){V, H}, INIT_NORMAL, 0, GPT2_STD);
}

/* ---------------------------------------------------------------- per-rank state */

/* This model only ever runs on an accounting-only device (run_create refuses any other):
 * buffers are charged but hold nothing, and the kernels are kernels_none. So it takes and
 * releases every buffer a real GPT-2 step would, when a real one would, and charges the work,
 * but computes nothing outside the shared block: the kernel table has no embedding lookup
 * and no LM loss (and none is added for a model that never has text to read). The block
 * calls its kernels as the ViT's does; here they do nothing. Attention is the plain kind
 * that keeps its probabilities [B, heads, T, T] (no flash attention), as the ViT's. */
struct ModelRun {
    const TransformerConfig *c;
    Device *dev;
    const Kernels *k;
    size_t B, T, H, V;
    int32_t *tokens, *targets; /* [B, T]: the input ids and the next ids the loss predicts */
    float **x;                 /* x[m]: input of module m, [B, T, H] (x[0] unused: the ids) */
    BlockActs *blocks;
    float *ln_f, *ln_f_mean, *ln_f_rstd; /* the final LayerNorm: [B, T, H], [B, T], [B, T] */
    float *logits, *dlogits;             /* [B, T, vocab], fp32 */
    float *grad; /* dL/d(residual stream) flowing backward, updated in place */
};

static float *take(ModelRun *r, size_t n) {
    return act_take(r->dev, n);
}

static void release(ModelRun *r, float **p) {
    act_release(r->dev, p);
}

static int32_t *take_ids(ModelRun *r, size_t n) {
    return n ? r->dev->ops->alloc(r->dev, n * sizeof(int32_t), MEM_ACTIVATIONS, -1) : NULL;
}

static void release_ids(ModelRun *r, int32_t **p) {
    if (*p) r->dev->ops->free(r->dev, *p, -1);
    *p = NULL;
}

/* The shared block's view of this run's current batch. */
static TBlock block_of(const ModelRun *r) {
    return (TBlock){.dev = r->dev,
                    .k = r->k,
                    .B = r->B,
                    .T = r->T,
                    .H = r->H,
                    .F = (size_t)r->c->mlp,
                    .heads = (size_t)r->c->heads,
                    .ln_eps = TF_LN_EPS};
}

static void release_head(ModelRun *r) {
    float **head[] = {&r->ln_f,   &r->ln_f_mean, &r->ln_f_rstd,
                      &r->logits, &r->dlogits,   &r->x[r->c->layers + 1]};
    for (size_t i = 0; i < sizeof head / sizeof *head; i++) release(r, head[i]);
}

static void tf_discard(ModelRun *r) {
    TBlock t = block_of(r);
    release_ids(r, &r->tokens);
    release_ids(r, &r->targets);
    release_head(r);
    for (int m = 0; m < r->c->layers + 2; m++) release(r, &r->x[m]);
    for (int l = 0; l < r->c->layers; l++) tblock_release(&t, &r->blocks[l]);
    release(r, &r->grad);
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

static int tf_run_create(const ModelDesc *m, Device *dev, const Kernels *k, size_t max_batch,
                         ModelRun **out, Err *err) {
    const TransformerConfig *c = m->config;
    if (!dev->accounting_only)
        return err_set(err, ERR_USAGE,
                       "the transformer model runs only in accounting-only runs (fsdp plan): "
                       "there is no text data set here");
    int rc = batch_fits(c, max_batch, err);
    if (rc) return rc;
    ModelRun *r = calloc(1, sizeof *r);
    if (r) {
        r->x = calloc((size_t)c->layers + 2, sizeof *r->x);
        r->blocks = calloc((size_t)c->layers, sizeof *r->blocks);
    }
    if (!r || !r->x || !r->blocks) {
        if (r) free(r->x);
        free(r);
        return err_set(err, ERR_NOMEM, "out of memory creating the transformer's state");
    }
    r->c = c;
    r->dev = dev;
    r->k = k;
    r->T = (size_t)c->seq;
    r->H = (size_t)c->hidden;
    r->V = (size_t)c->vocab;
    *out = r;
    return 0;
}

static void tf_run_destroy(ModelRun *r) {
    if (!r) return;
    tf_discard(r);
    free(r->x);
    free(r->blocks);
    free(r);
}

/* B sequences of seq tokens and their targets. A real run would copy them from a text data
 * set; the device holds nothing, so only their bytes are charged (the data set's n is all
 * that is used: the sampler draws indices from it). */
static int tf_set_batch(ModelRun *r, const Dataset *ds, const long *idx, size_t n, Err *err) {
    (void)ds, (void)idx;
    int rc = batch_fits(r->c, n, err);
    if (rc) return rc;
    tf_discard(r);
    r->B = n;
    r->tokens = take_ids(r, n * r->T);
    r->targets = take_ids(r, n * r->T);
    if (n && (!r->tokens || !r->targets))
        return err_set(err, ERR_NOMEM, "out of memory for a batch of %zu sequences", n);
    return 0;
}

/* ---------------------------------------------------------------- work estimates */

/* What the embedding, the head and the loss charge the clock: flops, and `floats` read and
 * written at 4 bytes each; backward counts twice (as the ViT's small_work). The blocks
 * charge tblock_work. */
static void small_work(Work *w, WorkKind kind, double flops, double floats) {
    double passes = kind == WORK_BACKWARD ? 2.0 : 1.0;
    w->kind = kind;
    w->flops = flops * passes;
    w->bytes = 4.0 * floats * passes;
}

/* x = wte[tokens] + wpe: one add an element; a row of each table read, x written. */
static void embed_work(const ModelRun *r, Work *w, WorkKind kind) {
    double n = (double)(r->B * r->T * r->H);
    small_work(w, kind, n, 3 * n);
}

/* logits = ln_f(x) . lm_head^T: the GEMM's flops; x, ln_f's output, the logits and the
 * weight. */
static void head_work(const ModelRun *r, Work *w, WorkKind kind) {
    double M = (double)(r->B * r->T), H = (double)r->H, V = (double)r->V;
    small_work(w, kind, 2.0 * M * H * V, M * (2 * H + V) + V * H);
}

/* ---------------------------------------------------------------- forward */

/* The token and position embeddings' sum, x[1]; the ids stay for the embedding's backward
 * (wte's gradient is a scatter-add over them). Computes nothing: see ModelRun. */
static int embed_forward(ModelRun *r, Work *w, Err *err) {
    size_t n = r->B * r->T * r->H;
    r->x[1] = take(r, n);
    embed_work(r, w, WORK_FORWARD);
    return act_check_taken((float *[]){r->x[1]}, 1, n, err);
}

static int block_forward(ModelRun *r, int layer, float *const *p, Work *w, Err *err) {
    TBlock t = block_of(r);
    return tblock_forward(&t, &r->blocks[layer], p, r->x[layer + 1], &r->x[layer + 2], w, err);
}

/* ln_f over every token, then the LM head: what backward needs of it is kept. Computes
 * nothing: see ModelRun. */
static int head_forward(ModelRun *r, Work *w, Err *err) {
    size_t M = r->B * r->T;
    r->ln_f = take(r, M * r->H), r->ln_f_mean = take(r, M), r->ln_f_rstd = take(r, M);
    r->logits = take(r, M * r->V);
    head_work(r, w, WORK_FORWARD);
    return act_check_taken((float *[]){r->ln_f, r->ln_f_mean, r->ln_f_rstd, r->logits}, 4, M, err);
}

static int tf_forward(ModelRun *r, int module, float *const *params, Work *w, Err *err) {
    if (module == 0) return embed_forward(r, w, err);
    if (module <= r->c->layers) return block_forward(r, module - 1, params, w, err);
    return head_forward(r, w, err);
}

/* Cross-entropy over every token's logits against its target: the gradient of the logits is
 * what it leaves (as the ViT's). Nothing holds values, so the loss reported is 0. */
static float tf_loss(ModelRun *r, float grad_scale, Work *w) {
    (void)grad_scale;
    size_t n = r->B * r->T * r->V;
    release(r, &r->dlogits);
    r->dlogits = take(r, n);
    w->kind = WORK_FORWARD;
    w->flops = 8.0 * (double)n;
    w->bytes = 8.0 * (double)n;
    return 0.0f;
}

/* ---------------------------------------------------------------- backward */

/* The LM head's backward gives dL/d(ln_f's output), dln; ln_f's backward adds its share into
 * the residual stream's gradient, which starts here. Computes nothing: see ModelRun. */
static int head_backward(ModelRun *r, Work *w, Err *err) {
    size_t M = r->B * r->T;
    float *dln = take(r, M * r->H);
    r->grad = take(r, M * r->H);
    int rc = act_check_taken((float *[]){dln, r->grad}, 2, M, err);
    release(r, &dln);
    release_head(r);
    head_work(r, w, WORK_BACKWARD);
    return rc;
}

static int block_backward(ModelRun *r, int layer, float *const *p, float *const *g, Work *w,
                          Err *err) {
    TBlock t = block_of(r);
    return tblock_backward(&t, &r->blocks[layer], p, g, &r->x[layer + 1], r->grad, w, err);
}

/* wte's gradient is a scatter-add of the stream's gradient over the ids, wpe's its sum over
 * the batch: no buffer of their own. Computes nothing: see ModelRun. */
static int embed_backward(ModelRun *r, Work *w) {
    embed_work(r, w, WORK_BACKWARD);
    tf_discard(r); /* the batch is done: nothing it saved is needed any more */
    return 0;
}

static int tf_backward(ModelRun *r, int module, float *const *params, float *const *grads, Work *w,
                       Err *err) {
    if (module == 0) return embed_backward(r, w);
    if (module <= r->c->layers) return block_backward(r, module - 1, params, grads, w, err);
    return head_backward(r, w, err);
}

/* ---------------------------------------------------------------- activation checkpointing */

static int tf_checkpoint(ModelRun *r, int module, Err *err) {
    TBlock t = block_of(r);
    return tblock_stack_checkpoint(&t, r->blocks, r->x, r->c->layers, module, err);
}

static int tf_recompute(ModelRun *r, int module, float *const *params, Work *w, Err *err) {
    TBlock t = block_of(r);
    return tblock_stack_recompute(&t, r->blocks, r->x, r->c->layers, module, params, w, err);
}

/* ---------------------------------------------------------------- unit boundaries */

/* The embedding's input is token ids, which mixed precision leaves alone (FSDP2 casts only
 * floating-point inputs), and has no gradient. */
static float *tf_boundary(ModelRun *r, int m, BoundaryKind which, size_t *n) {
    size_t hidden = r->B * r->T * r->H, logits = r->B * r->T * r->V;
    int head = r->c->layers + 1;
    *n = m == head && (which == BOUNDARY_OUTPUT || which == BOUNDARY_OUTPUT_GRAD) ? logits : hidden;
    switch (which) {
    case BOUNDARY_INPUT:
        return m == 0 ? NULL : r->x[m];
    case BOUNDARY_OUTPUT:
        return m == head ? r->logits : r->x[m + 1];
    case BOUNDARY_OUTPUT_GRAD:
        return m == head ? r->dlogits : r->grad;
    case BOUNDARY_INPUT_GRAD:
        return m == 0 ? NULL : r->grad;
    }
    return NULL;
}

static const ModelOps transformer_ops = {
    .run_create = tf_run_create,
    .run_destroy = tf_run_destroy,
    .set_batch = tf_set_batch,
    .forward = tf_forward,
    .loss = tf_loss,
    .backward = tf_backward,
    .correct = NULL, /* a language model does not classify */
    .discard = tf_discard,
    .checkpoint = tf_checkpoint,
    .recompute = tf_recompute,
    .boundary = tf_boundary,
};

int transformer_model_create(ModelDesc *m, const TransformerConfig *c, Err *err) {
    memset(m, 0, sizeof *m); /* a description a failure leaves is safe to free */
    int rc = transformer_config_check(c, err);
    if (rc) return rc;
    rc = model_desc_alloc(m, "transformer", EMBED_PARAMS + c->layers * TBLOCK_PARAMS + HEAD_PARAMS,
                          c->layers + 2, c, sizeof *c, err);
    if (rc) return rc;
    ParamMaker pm = {.m = m};
    add_embed(&pm, c);
    for (int l = 0; l < c->layers; l++) add_block(&pm, c, l);
    add_head(&pm, c);
    m->ops = &transformer_ops;
    return 0;
}
