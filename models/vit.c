#include "models/vit.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "models/tblock.h"

/* Parameters of each module, in torchvision's state-dict order. */
enum { E_CLS, E_CONV_W, E_CONV_B, E_POS, EMBED_PARAMS };
/* an encoder block's are tblock's TBLOCK_*, in the same order */
enum { H_LN_W, H_LN_B, H_HEAD_W, H_HEAD_B, HEAD_PARAMS };

#define VIT_LN_EPS 1e-6f

/* ---------------------------------------------------------------- configuration */

int vit_preset(const char *name, VitConfig *out) {
    VitConfig base = {.image = 28, .patch = 7, .classes = 10};
    if (!strcmp(name, "vit-tiny")) {
        base.layers = 10, base.heads = 2, base.hidden = 128, base.mlp = 128;
    } else if (!strcmp(name, "vit-workshop")) {
        base.layers = 12, base.heads = 8, base.hidden = 3840, base.mlp = 768;
    } else {
        return -1;
    }
    *out = base;
    return 0;
}

int vit_preset_with(const char *name, int layers, int heads, int hidden, int mlp, VitConfig *out) {
    if (vit_preset(name, out)) return -1;
    if (layers > 0) out->layers = layers;
    if (heads > 0) out->heads = heads;
    if (hidden > 0) out->hidden = hidden;
    if (mlp > 0) out->mlp = mlp;
    return 0;
}

int vit_config_check(const VitConfig *c, Err *err) {
    if (c->layers < 1 || c->layers > 1000)
        return err_set(err, ERR_USAGE, "--layers must be from 1 to 1000 (got %d)", c->layers);
    if (c->hidden < 1 || c->hidden > 65536)
        return err_set(err, ERR_USAGE, "--hidden must be from 1 to 65536 (got %d)", c->hidden);
    if (c->mlp < 1 || c->mlp > 262144)
        return err_set(err, ERR_USAGE, "--mlp must be from 1 to 262144 (got %d)", c->mlp);
    if (c->heads < 1 || c->hidden % c->heads != 0)
        return err_set(err, ERR_USAGE, "--heads must divide --hidden %d (got %d)", c->hidden,
                       c->heads);
    if (c->patch < 1 || c->image % c->patch != 0)
        return err_set(err, ERR_USAGE, "the patch size %d must divide the image size %d", c->patch,
                       c->image);
    if (vit_tokens(c) > KERNELS_MAX_TOKENS)
        return err_set(err, ERR_USAGE, "%d tokens is more than the %d attention supports",
                       vit_tokens(c), KERNELS_MAX_TOKENS);
    return 0;
}

int vit_tokens(const VitConfig *c) {
    int side = c->image / c->patch;
    return side * side + 1;
}

static size_t embed_params(const VitConfig *c) {
    size_t H = (size_t)c->hidden, pp = (size_t)c->patch * c->patch;
    return H + H * pp + H + (size_t)vit_tokens(c) * H;
}

static size_t block_params(const VitConfig *c) {
    return tblock_param_count((size_t)c->hidden, (size_t)c->mlp);
}

static size_t head_params(const VitConfig *c) {
    size_t H = (size_t)c->hidden, K = (size_t)c->classes;
    return 2 * H + K * H + K;
}

size_t vit_param_count(const VitConfig *c) {
    return embed_params(c) + (size_t)c->layers * block_params(c) + head_params(c);
}

/* ---------------------------------------------------------------- the description */

/* torchvision's VisionTransformer initialization: conv_proj's weight truncated normal with
 * std sqrt(1/fan_in) and a zero bias; MultiheadAttention's in_proj and the MLP's Linears
 * xavier uniform, U(-sqrt(6/(fan_in+fan_out)), ...), with zero (attention) or N(0, 1e-6)
 * (MLP) biases; out_proj keeps Linear's default U(-1/sqrt(fan_in), 1/sqrt(fan_in)) (kaiming
 * uniform with a = sqrt(5)) with a zero bias; the class token and the head start at zero,
 * the position embedding N(0, 0.02), LayerNorms at weight 1, bias 0. */
static float default_bound(double fan_in) {
    return (float)(1.0 / sqrt(fan_in));
}

static float xavier_bound(double fan_in, double fan_out) {
    return (float)sqrt(6.0 / (fan_in + fan_out));
}

static void add_embed(ParamMaker *pm, const VitConfig *c) {
    int64_t H = c->hidden, P = c->patch, T = vit_tokens(c);
    float conv_std = (float)sqrt(1.0 / (double)(P * P)); /* fan_in: 1 channel x P x P */
    param_maker_begin(pm, "embed", 0);
    param_maker_add(pm, "class_token", 3, (int64_t[]){1, 1, H}, INIT_ZERO, 0, 0);
    param_maker_add(pm, "conv_proj.weight", 4, (int64_t[]){H, 1, P, P}, INIT_TRUNC_NORMAL, 0,
                    conv_std);
    param_maker_add(pm, "conv_proj.bias", 1, (int64_t[]){H}, INIT_ZERO, 0, 0);
    param_maker_add(pm, "encoder.pos_embedding", 3, (int64_t[]){1, T, H}, INIT_NORMAL, 0, 0.02f);
}

static void add_block(ParamMaker *pm, const VitConfig *c, int layer) {
    static const char *const suffix[TBLOCK_PARAMS] = {
        "ln_1.weight",
        "ln_1.bias",
        "self_attention.in_proj_weight",
        "self_attention.in_proj_bias",
        "self_attention.out_proj.weight",
        "self_attention.out_proj.bias",
        "ln_2.weight",
        "ln_2.bias",
        "mlp.0.weight",
        "mlp.0.bias",
        "mlp.3.weight",
        "mlp.3.bias",
    };
    int64_t H = c->hidden, M = c->mlp;
    float qkv = xavier_bound((double)H, (double)(3 * H)), out = default_bound((double)H);
    float fc1 = xavier_bound((double)H, (double)M), fc2 = xavier_bound((double)M, (double)H);
    const ParamInit init[TBLOCK_PARAMS] = {
        {INIT_ONE, 0, 0},        {INIT_ZERO, 0, 0},         {INIT_UNIFORM, -qkv, qkv},
        {INIT_ZERO, 0, 0},       {INIT_UNIFORM, -out, out}, {INIT_ZERO, 0, 0},
        {INIT_ONE, 0, 0},        {INIT_ZERO, 0, 0},         {INIT_UNIFORM, -fc1, fc1},
        {INIT_NORMAL, 0, 1e-6f}, {INIT_UNIFORM, -fc2, fc2}, {INIT_NORMAL, 0, 1e-6f},
    };
    char module[64], prefix[64];
    snprintf(module, sizeof module, "encoder_layer_%d", layer);
    snprintf(prefix, sizeof prefix, "encoder.layers.encoder_layer_%d.", layer);
    tblock_describe(pm, module, prefix, suffix, init, H, M);
}

static void add_head(ParamMaker *pm, const VitConfig *c) {
    int64_t H = c->hidden, K = c->classes;
    param_maker_begin(pm, "head", 0);
    param_maker_add(pm, "encoder.ln.weight", 1, (int64_t[]){H}, INIT_ONE, 0, 0);
    param_maker_add(pm, "encoder.ln.bias", 1, (int64_t[]){H}, INIT_ZERO, 0, 0);
    param_maker_add(pm, "heads.head.weight", 2, (int64_t[]){K, H}, INIT_ZERO, 0, 0);
    param_maker_add(pm, "heads.head.bias", 1, (int64_t[]){K}, INIT_ZERO, 0, 0);
}

/* ---------------------------------------------------------------- per-rank state */

struct ModelRun {
    const VitConfig *c;
    Device *dev;
    const Kernels *k;
    size_t B, T, H;
    float *images;   /* the batch, normalised [B, image*image] */
    int32_t *labels; /* [B] */
    float *patches;  /* the embedding's GEMM input [B*(T-1), P*P] */
    float **x;       /* x[m]: input of module m, [B, T, H] (x[0] unused: the images) */
    BlockActs *blocks;
    float *cls, *head_ln, *head_mean, *head_rstd; /* the head's LayerNorm on class tokens */
    float *logits, *dlogits;                      /* [B, classes] */
    float *grad; /* dL/d(residual stream) flowing backward, updated in place */
};

static float *take(ModelRun *r, size_t n) {
    return act_take(r->dev, n);
}

static void release(ModelRun *r, float **p) {
    act_release(r->dev, p);
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
                    .ln_eps = VIT_LN_EPS};
}

static void release_block(ModelRun *r, BlockActs *a) {
    TBlock t = block_of(r);
    tblock_release(&t, a);
}

static void release_labels(ModelRun *r) {
    if (r->labels) r->dev->ops->free(r->dev, r->labels, -1);
    r->labels = NULL;
}

static void vit_discard(ModelRun *r) {
    release(r, &r->images);
    release_labels(r);
    release(r, &r->patches);
    for (int m = 0; m < r->c->layers + 2; m++) release(r, &r->x[m]);
    for (int l = 0; l < r->c->layers; l++) release_block(r, &r->blocks[l]);
    float **head[] = {&r->cls,    &r->head_ln, &r->head_mean, &r->head_rstd,
                      &r->logits, &r->dlogits, &r->grad};
    for (size_t i = 0; i < sizeof head / sizeof *head; i++) release(r, head[i]);
}

static int vit_run_create(const ModelDesc *m, Device *dev, const Kernels *k, size_t max_batch,
                          ModelRun **out, Err *err) {
    (void)max_batch;
    ModelRun *r = calloc(1, sizeof *r);
    const VitConfig *c = m->config;
    if (r) {
        r->x = calloc((size_t)c->layers + 2, sizeof *r->x);
        r->blocks = calloc((size_t)c->layers, sizeof *r->blocks);
    }
    if (!r || !r->x || !r->blocks) {
        if (r) free(r->x);
        free(r);
        return err_set(err, ERR_NOMEM, "out of memory creating the ViT's state");
    }
    r->c = c;
    r->dev = dev;
    r->k = k;
    r->T = (size_t)vit_tokens(c);
    r->H = (size_t)c->hidden;
    *out = r;
    return 0;
}

static void vit_run_destroy(ModelRun *r) {
    if (!r) return;
    vit_discard(r);
    free(r->x);
    free(r->blocks);
    free(r);
}

/* Normalises the batch on the host as the workshop does, ToTensor (p / 255) then
 * Normalize(0.5, 0.5), and copies it and its labels to the device. */
static int stage_batch(ModelRun *r, const Dataset *ds, const long *idx, size_t n, size_t pixels,
                       Err *err) {
    float *images = malloc(n * pixels * sizeof *images);
    int32_t *labels = malloc(n * sizeof *labels);
    if (!images || !labels) {
        free(images);
        free(labels);
        return err_set(err, ERR_NOMEM, "out of memory staging a batch of %zu images", n);
    }
    for (size_t i = 0; i < n; i++) {
        const uint8_t *src = ds->pixels + (size_t)idx[i] * pixels;
        float *dst = images + i * pixels;
        for (size_t j = 0; j < pixels; j++) dst[j] = ((float)src[j] / 255.0f - 0.5f) / 0.5f;
        labels[i] = ds->labels[idx[i]];
    }
    r->dev->ops->copy(r->dev, r->images, images, n * pixels * sizeof *images);
    r->dev->ops->copy(r->dev, r->labels, labels, n * sizeof *labels);
    free(images);
    free(labels);
    return 0;
}

static int vit_set_batch(ModelRun *r, const Dataset *ds, const long *idx, size_t n, Err *err) {
    const VitConfig *c = r->c;
    size_t pixels = (size_t)c->image * (size_t)c->image;
    if (!ds->pixels || ds->in_elems != pixels)
        return err_set(err, ERR_USAGE,
                       "the ViT needs %dx%d images; this data set has %zu values "
                       "a sample",
                       c->image, c->image, ds->in_elems);
    vit_discard(r);
    r->B = n;
    r->images = take(r, n * pixels);
    r->labels = n ? r->dev->ops->alloc(r->dev, n * sizeof(int32_t), MEM_ACTIVATIONS, -1) : NULL;
    if (n && (!r->images || !r->labels))
        return err_set(err, ERR_NOMEM, "out of memory for a batch of %zu images", n);
    /* an accounting-only device stores nothing: the buffers are charged, nothing is staged */
    return n && !r->dev->accounting_only ? stage_batch(r, ds, idx, n, pixels, err) : 0;
}

/* ---------------------------------------------------------------- work estimates */

/* What the embedding and the head charge the clock (the blocks: tblock_work). */
static void small_work(const ModelRun *r, Work *w, WorkKind kind, double flops) {
    double passes = kind == WORK_BACKWARD ? 2.0 : 1.0;
    w->kind = kind;
    w->flops = flops * passes;
    w->bytes = 4.0 * (double)(r->B * r->T * r->H) * 3 * passes;
}

/* ---------------------------------------------------------------- forward */

static int embed_forward(ModelRun *r, float *const *p, Work *w, Err *err) {
    const Kernels *k = r->k;
    size_t P = (size_t)r->c->patch, np = r->T - 1, M = r->B * np;
    r->patches = take(r, M * P * P);
    float *pout = take(r, M * r->H);
    r->x[1] = take(r, r->B * r->T * r->H);
    int rc = act_check_taken((float *[]){r->patches, pout, r->x[1]}, 3, M, err);
    if (!rc && M) {
        k->patchify(r->patches, r->images, r->B, (size_t)r->c->image, P);
        k->linear_forward(pout, r->patches, p[E_CONV_W], p[E_CONV_B], M, P * P, r->H);
        k->embed_forward(r->x[1], pout, p[E_CLS], p[E_POS], r->B, r->T, r->H);
    }
    release(r, &pout);
    release(r, &r->images); /* the patches are all backward needs */
    small_work(r, w, WORK_FORWARD, 2.0 * (double)(M * P * P * r->H));
    return rc;
}

static int block_forward(ModelRun *r, int layer, float *const *p, Work *w, Err *err) {
    TBlock t = block_of(r);
    return tblock_forward(&t, &r->blocks[layer], p, r->x[layer + 1], &r->x[layer + 2], w, err);
}

static int head_forward(ModelRun *r, float *const *p, Work *w, Err *err) {
    const Kernels *k = r->k;
    size_t B = r->B, H = r->H, K = (size_t)r->c->classes;
    r->cls = take(r, B * H), r->head_ln = take(r, B * H);
    r->head_mean = take(r, B), r->head_rstd = take(r, B), r->logits = take(r, B * K);
    int rc = act_check_taken((float *[]){r->cls, r->head_ln, r->head_mean, r->head_rstd, r->logits},
                             5, B, err);
    small_work(r, w, WORK_FORWARD, 2.0 * (double)(B * H * K));
    if (rc || !B) return rc;
    /* torchvision normalises every token and then keeps the class token's row; only that row
     * reaches the loss, so normalising it alone is the same function and the same gradient */
    k->class_token_select(r->cls, r->x[r->c->layers + 1], B, r->T, H);
    k->layernorm_forward(r->head_ln, r->head_mean, r->head_rstd, r->cls, p[H_LN_W], p[H_LN_B], B, H,
                         VIT_LN_EPS);
    k->linear_forward(r->logits, r->head_ln, p[H_HEAD_W], p[H_HEAD_B], B, H, K);
    return 0;
}

static int vit_forward(ModelRun *r, int module, float *const *params, Work *w, Err *err) {
    if (module == 0) return embed_forward(r, params, w, err);
    if (module <= r->c->layers) return block_forward(r, module - 1, params, w, err);
    return head_forward(r, params, w, err);
}

static float vit_loss(ModelRun *r, float grad_scale, Work *w) {
    size_t K = (size_t)r->c->classes;
    release(r, &r->dlogits);
    r->dlogits = take(r, r->B * K);
    w->kind = WORK_FORWARD;
    w->flops = 8.0 * (double)(r->B * K);
    w->bytes = 8.0 * (double)(r->B * K);
    if (!r->B || !r->dlogits) return 0.0f;
    return r->k->cross_entropy(r->dlogits, r->logits, r->labels, r->B, K, grad_scale);
}

static size_t vit_correct(ModelRun *r) {
    if (!r->B || !r->logits) return 0;
    return r->k->count_correct(r->logits, r->labels, r->B, (size_t)r->c->classes);
}

/* ---------------------------------------------------------------- backward */

static int head_backward(ModelRun *r, float *const *p, float *const *g, Work *w, Err *err) {
    const Kernels *k = r->k;
    size_t B = r->B, H = r->H, K = (size_t)r->c->classes;
    float *dln = take(r, B * H), *dcls = take(r, B * H);
    r->grad = take(r, B * r->T * H);
    int rc = act_check_taken((float *[]){dln, dcls, r->grad}, 3, B, err);
    if (!rc && B) {
        k->linear_backward(dln, g[H_HEAD_W], g[H_HEAD_B], r->dlogits, r->head_ln, p[H_HEAD_W], B, H,
                           K);
        k->zero(dcls, B * H);
        k->layernorm_backward(dcls, g[H_LN_W], g[H_LN_B], dln, r->cls, r->head_mean, r->head_rstd,
                              p[H_LN_W], B, H);
        k->zero(r->grad, B * r->T * H);
        k->class_token_select_backward(r->grad, dcls, B, r->T, H);
    }
    release(r, &dln);
    release(r, &dcls);
    float **done[] = {&r->cls,    &r->head_ln, &r->head_mean,          &r->head_rstd,
                      &r->logits, &r->dlogits, &r->x[r->c->layers + 1]};
    for (size_t i = 0; i < sizeof done / sizeof *done; i++) release(r, done[i]);
    small_work(r, w, WORK_BACKWARD, 2.0 * (double)(B * H * K));
    return rc;
}

/* The residual stream's gradient r->grad arrives as dL/d(output) and leaves, updated in place,
 * as dL/d(input). */
static int block_backward(ModelRun *r, int layer, float *const *p, float *const *g, Work *w,
                          Err *err) {
    TBlock t = block_of(r);
    return tblock_backward(&t, &r->blocks[layer], p, g, &r->x[layer + 1], r->grad, w, err);
}

static int embed_backward(ModelRun *r, float *const *p, float *const *g, Work *w, Err *err) {
    const Kernels *k = r->k;
    size_t P = (size_t)r->c->patch, M = r->B * (r->T - 1);
    float *dpout = take(r, M * r->H);
    int rc = act_check_taken((float *[]){dpout}, 1, M, err);
    if (!rc && M) {
        k->embed_backward(g[E_CLS], g[E_POS], dpout, r->grad, r->B, r->T, r->H);
        k->linear_backward(NULL, g[E_CONV_W], g[E_CONV_B], dpout, r->patches, p[E_CONV_W], M, P * P,
                           r->H);
    }
    release(r, &dpout);
    vit_discard(r); /* the batch is done: nothing it saved is needed any more */
    small_work(r, w, WORK_BACKWARD, 2.0 * (double)(M * P * P * r->H));
    return rc;
}

static int vit_backward(ModelRun *r, int module, float *const *params, float *const *grads, Work *w,
                        Err *err) {
    if (module == 0) return embed_backward(r, params, grads, w, err);
    if (module <= r->c->layers) return block_backward(r, module - 1, params, grads, w, err);
    return head_backward(r, params, grads, w, err);
}

/* ---------------------------------------------------------------- activation checkpointing */

/* A block keeps only its input x[layer + 1] (tblock_checkpoint). */
static int vit_checkpoint(ModelRun *r, int module, Err *err) {
    TBlock t = block_of(r);
    return tblock_stack_checkpoint(&t, r->blocks, r->x, r->c->layers, module, err);
}

static int vit_recompute(ModelRun *r, int module, float *const *params, Work *w, Err *err) {
    TBlock t = block_of(r);
    return tblock_stack_recompute(&t, r->blocks, r->x, r->c->layers, module, params, w, err);
}

/* ---------------------------------------------------------------- unit boundaries */

static float *vit_boundary(ModelRun *r, int m, BoundaryKind which, size_t *n) {
    size_t hidden = r->B * r->T * r->H, logits = r->B * (size_t)r->c->classes;
    int head = r->c->layers + 1;
    *n = hidden;
    switch (which) {
    case BOUNDARY_INPUT:
        if (m == 0) *n = r->B * (size_t)r->c->image * (size_t)r->c->image;
        return m == 0 ? r->images : r->x[m];
    case BOUNDARY_OUTPUT:
        if (m == head) *n = logits;
        return m == head ? r->logits : r->x[m + 1];
    case BOUNDARY_OUTPUT_GRAD:
        if (m == head) *n = logits;
        return m == head ? r->dlogits : r->grad;
    case BOUNDARY_INPUT_GRAD:
        return m == 0 ? NULL : r->grad;
    }
    return NULL;
}

static const ModelOps vit_ops = {
    .run_create = vit_run_create,
    .run_destroy = vit_run_destroy,
    .set_batch = vit_set_batch,
    .forward = vit_forward,
    .loss = vit_loss,
    .backward = vit_backward,
    .correct = vit_correct,
    .discard = vit_discard,
    .checkpoint = vit_checkpoint,
    .recompute = vit_recompute,
    .boundary = vit_boundary,
};

int vit_model_create(ModelDesc *m, const VitConfig *c, Err *err) {
    memset(m, 0, sizeof *m); /* a description a failure leaves is safe to free */
    int rc = vit_config_check(c, err);
    if (rc) return rc;
    rc = model_desc_alloc(m, "vit", EMBED_PARAMS + c->layers * TBLOCK_PARAMS + HEAD_PARAMS,
                          c->layers + 2, c, sizeof *c, err);
    if (rc) return rc;
    ParamMaker pm = {.m = m};
    add_embed(&pm, c);
    for (int l = 0; l < c->layers; l++) add_block(&pm, c, l);
    add_head(&pm, c);
    m->ops = &vit_ops;
    return 0;
}
