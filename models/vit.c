/* vit: torchvision's VisionTransformer (models/vit.h): its configuration, its description and
 * its two ends, the patch embedding with the class token and the classification head. */
#include "models/vit.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "models/tstack.h"

/* Parameters of the embedding and the head, in torchvision's state-dict order (an encoder
 * block's are tblock's TBLOCK_*, in the same order). */
enum { E_CLS, E_CONV_W, E_CONV_B, E_POS, EMBED_PARAMS };
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

static void add_embed(ParamMaker *pm, const void *config) {
    const VitConfig *c = config;
    int64_t H = c->hidden, P = c->patch, T = vit_tokens(c);
    float conv_std = (float)sqrt(1.0 / (double)(P * P)); /* fan_in: 1 channel x P x P */
    param_maker_begin(pm, "embed", 0);
    param_maker_add(pm, "class_token", 3, (int64_t[]){1, 1, H}, INIT_ZERO, 0, 0);
    param_maker_add(pm, "conv_proj.weight", 4, (int64_t[]){H, 1, P, P}, INIT_TRUNC_NORMAL, 0,
                    conv_std);
    param_maker_add(pm, "conv_proj.bias", 1, (int64_t[]){H}, INIT_ZERO, 0, 0);
    param_maker_add(pm, "encoder.pos_embedding", 3, (int64_t[]){1, T, H}, INIT_NORMAL, 0, 0.02f);
}

static void add_block(ParamMaker *pm, const void *config, int layer) {
    const VitConfig *c = config;
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

static void add_head(ParamMaker *pm, const void *config) {
    const VitConfig *c = config;
    int64_t H = c->hidden, K = c->classes;
    param_maker_begin(pm, "head", 0);
    param_maker_add(pm, "encoder.ln.weight", 1, (int64_t[]){H}, INIT_ONE, 0, 0);
    param_maker_add(pm, "encoder.ln.bias", 1, (int64_t[]){H}, INIT_ZERO, 0, 0);
    param_maker_add(pm, "heads.head.weight", 2, (int64_t[]){K, H}, INIT_ZERO, 0, 0);
    param_maker_add(pm, "heads.head.bias", 1, (int64_t[]){K}, INIT_ZERO, 0, 0);
}

/* ---------------------------------------------------------------- per-rank state */

/* What the ViT's embedding and head hold for the current batch (ModelRun.own); the blocks'
 * and the residual stream are the stack's. */
typedef struct VitActs {
    void *images;    /* the batch, normalised [B, image*image], in the compute dtype */
    int32_t *labels; /* [B] */
    void *patches;   /* the embedding's GEMM input [B*(T-1), P*P] */
    void *cls, *head_ln, *head_mean, *head_rstd; /* the head's LayerNorm on class tokens */
} VitActs;

static void release_input(ModelRun *r) {
    VitActs *v = r->own;
    run_release(r, &v->images);
    run_release_ids(r, &v->labels);
    run_release(r, &v->patches);
}

static void release_head(ModelRun *r) {
    VitActs *v = r->own;
    void **done[] = {&v->cls, &v->head_ln, &v->head_mean, &v->head_rstd};
    for (size_t i = 0; i < sizeof done / sizeof *done; i++) run_release(r, done[i]);
}

/* Normalises the batch on the host as the workshop does, ToTensor (p / 255) then
 * Normalize(0.5, 0.5), rounds it to the compute dtype (FSDP2 casts the root's inputs to
 * param_dtype) and copies it and its labels to the device. */
static int stage_batch(ModelRun *r, const Dataset *ds, const long *idx, size_t n, size_t pixels,
                       Err *err) {
    VitActs *v = r->own;
    const size_t esize = dtype_size(r->dtype);
    unsigned char *images = malloc(n * pixels * esize);
    int32_t *labels = malloc(n * sizeof *labels);
    if (!images || !labels) {
        free(images);
        free(labels);
        return err_set(err, ERR_NOMEM, "out of memory staging a batch of %zu images", n);
    }
    for (size_t i = 0; i < n; i++) {
        const uint8_t *src = ds->pixels + (size_t)idx[i] * pixels;
        for (size_t j = 0; j < pixels; j++)
            dtype_store(images, r->dtype, i * pixels + j, ((float)src[j] / 255.0f - 0.5f) / 0.5f);
        labels[i] = ds->labels[idx[i]];
    }
    r->dev->ops->copy(r->dev, v->images, images, n * pixels * esize);
    r->dev->ops->copy(r->dev, v->labels, labels, n * sizeof *labels);
    free(images);
    free(labels);
    return 0;
}

static int vit_set_batch(ModelRun *r, const Dataset *ds, const long *idx, size_t n, Err *err) {
    const VitConfig *c = r->config;
    VitActs *v = r->own;
    size_t pixels = (size_t)c->image * (size_t)c->image;
    if (!ds->pixels || ds->in_elems != pixels)
        return err_set(err, ERR_USAGE,
                       "the ViT needs %dx%d images; this data set has %zu values "
                       "a sample",
                       c->image, c->image, ds->in_elems);
    tstack_discard(r);
    r->B = n;
    v->images = run_take(r, n * pixels);
    v->labels = run_take_ids(r, n);
    if (n && (!v->images || !v->labels))
        return err_set(err, ERR_NOMEM, "out of memory for a batch of %zu images", n);
    /* an accounting-only device stores nothing: the buffers are charged, nothing is staged */
    return n && !r->dev->accounting_only ? stage_batch(r, ds, idx, n, pixels, err) : 0;
}

/* ---------------------------------------------------------------- work estimates */

/* What the embedding and the head charge the clock, each one Linear of `in` to `out` features
 * over m rows and a few memory-bound kernels (the blocks: tblock_work). */
static void small_work(const ModelRun *r, Work *w, WorkKind kind, double m, double in, double out) {
    double passes = kind == WORK_BACKWARD ? 2.0 : 1.0;
    work_begin(w, kind);
    work_linear(w, kind, m, in, out);
    w->bytes = (double)dtype_size(r->dtype) * (double)(r->B * r->T * r->H) * 3 * passes;
    w->kernels = kind == WORK_BACKWARD ? 4 : 3;
}

/* ---------------------------------------------------------------- forward */

static int embed_forward(ModelRun *r, void *const *p, Work *w, Err *err) {
    const VitConfig *c = r->config;
    VitActs *v = r->own;
    const Kernels *k = r->k;
    size_t P = (size_t)c->patch, np = r->T - 1, M = r->B * np;
    v->patches = run_take(r, M * P * P);
    void *pout = run_take(r, M * r->H);
    r->x[1] = run_take(r, r->B * r->T * r->H);
    int rc = act_check_taken((void *[]){v->patches, pout, r->x[1]}, 3, M, err);
    if (!rc && M) {
        k->patchify(r->dtype, v->patches, v->images, r->B, (size_t)c->image, P);
        k->linear_forward(r->dtype, pout, v->patches, p[E_CONV_W], p[E_CONV_B], M, P * P, r->H);
        k->embed_forward(r->dtype, r->x[1], pout, p[E_CLS], p[E_POS], r->B, r->T, r->H);
    }
    run_release(r, &pout);
    run_release(r, &v->images); /* the patches are all backward needs */
    small_work(r, w, WORK_FORWARD, (double)M, (double)(P * P), (double)r->H);
    return rc;
}

static int head_forward(ModelRun *r, void *const *p, Work *w, Err *err) {
    const VitConfig *c = r->config;
    VitActs *v = r->own;
    const Kernels *k = r->k;
    size_t B = r->B, H = r->H, K = (size_t)c->classes;
    v->cls = run_take(r, B * H), v->head_ln = run_take(r, B * H);
    v->head_mean = run_take_fp32(r, B), v->head_rstd = run_take_fp32(r, B),
    r->logits = run_take(r, B * K);
    int rc = act_check_taken((void *[]){v->cls, v->head_ln, v->head_mean, v->head_rstd, r->logits},
                             5, B, err);
    small_work(r, w, WORK_FORWARD, (double)B, (double)H, (double)K);
    if (rc || !B) return rc;
    /* torchvision normalises every token and then keeps the class token's row; only that row
     * reaches the loss, so normalising it alone is the same function and the same gradient */
    k->class_token_select(r->dtype, v->cls, r->x[c->layers + 1], B, r->T, H);
    k->layernorm_forward(r->dtype, v->head_ln, v->head_mean, v->head_rstd, v->cls, p[H_LN_W],
                         p[H_LN_B], B, H, VIT_LN_EPS);
    k->linear_forward(r->dtype, r->logits, v->head_ln, p[H_HEAD_W], p[H_HEAD_B], B, H, K);
    return 0;
}

static float vit_loss(ModelRun *r, float grad_scale) {
    const VitConfig *c = r->config;
    VitActs *v = r->own;
    return r->k->cross_entropy(r->dtype, r->dlogits, r->logits, v->labels, r->B, (size_t)c->classes,
                               grad_scale);
}

static size_t vit_correct(ModelRun *r) {
    const VitConfig *c = r->config;
    VitActs *v = r->own;
    if (!r->B || !r->logits) return 0;
    return r->k->count_correct(r->dtype, r->logits, v->labels, r->B, (size_t)c->classes);
}

/* ---------------------------------------------------------------- backward */

static int head_backward(ModelRun *r, void *const *p, float *const *g, Work *w, Err *err) {
    const VitConfig *c = r->config;
    VitActs *v = r->own;
    const Kernels *k = r->k;
    size_t B = r->B, H = r->H, K = (size_t)c->classes;
    void *dln = run_take(r, B * H), *dcls = run_take(r, B * H);
    r->grad = run_take(r, B * r->T * H);
    int rc = act_check_taken((void *[]){dln, dcls, r->grad}, 3, B, err);
    if (!rc && B) {
        k->linear_backward(r->dtype, dln, g[H_HEAD_W], g[H_HEAD_B], r->dlogits, v->head_ln,
                           p[H_HEAD_W], B, H, K);
        k->zero_bytes(dcls, B * H * dtype_size(r->dtype));
        k->layernorm_backward(r->dtype, dcls, g[H_LN_W], g[H_LN_B], dln, v->cls, v->head_mean,
                              v->head_rstd, p[H_LN_W], B, H);
        k->zero_bytes(r->grad, B * r->T * H * dtype_size(r->dtype));
        k->class_token_select_backward(r->dtype, r->grad, dcls, B, r->T, H);
    }
    run_release(r, &dln);
    run_release(r, &dcls);
    tstack_release_head(r);
    small_work(r, w, WORK_BACKWARD, (double)B, (double)H, (double)K);
    return rc;
}

static int embed_backward(ModelRun *r, void *const *p, float *const *g, Work *w, Err *err) {
    const VitConfig *c = r->config;
    VitActs *v = r->own;
    const Kernels *k = r->k;
    size_t P = (size_t)c->patch, M = r->B * (r->T - 1);
    void *dpout = run_take(r, M * r->H);
    int rc = act_check_taken((void *[]){dpout}, 1, M, err);
    if (!rc && M) {
        k->embed_backward(r->dtype, g[E_CLS], g[E_POS], dpout, r->grad, r->B, r->T, r->H);
        k->linear_backward(r->dtype, NULL, g[E_CONV_W], g[E_CONV_B], dpout, v->patches, p[E_CONV_W],
                           M, P * P, r->H);
    }
    run_release(r, &dpout);
    small_work(r, w, WORK_BACKWARD, (double)M, (double)(P * P), (double)r->H);
    return rc;
}

/* ---------------------------------------------------------------- the model */

static void *vit_input(ModelRun *r, size_t *n) {
    const VitConfig *c = r->config;
    *n = r->B * (size_t)c->image * (size_t)c->image;
    return ((VitActs *)r->own)->images;
}

static const TStackEnds vit_ends = {
    .name = "vit",
    .label = "ViT",
    .embed_params = EMBED_PARAMS,
    .block_params = TBLOCK_PARAMS,
    .head_params = HEAD_PARAMS,
    .own_size = sizeof(VitActs),
    .describe_embed = add_embed,
    .describe_block = add_block,
    .describe_head = add_head,
    .set_batch = vit_set_batch,
    .embed_forward = embed_forward,
    .head_forward = head_forward,
    .loss = vit_loss,
    .correct = vit_correct,
    .head_backward = head_backward,
    .embed_backward = embed_backward,
    .release_input = release_input,
    .release_head = release_head,
    .input = vit_input,
};

static int vit_run_create(const ModelDesc *m, Device *dev, const Kernels *k, DType compute,
                          size_t max_batch, ModelRun **out, Err *err) {
    (void)max_batch;
    const VitConfig *c = m->config;
    TStackShape shape = {.layers = c->layers,
                         .tokens = (size_t)vit_tokens(c),
                         .hidden = (size_t)c->hidden,
                         .mlp = (size_t)c->mlp,
                         .heads = (size_t)c->heads,
                         .ln_eps = VIT_LN_EPS,
                         .flash = c->flash,
                         .outputs = (size_t)c->classes};
    return tstack_run_create(&vit_ends, &shape, c, dev, k, compute, out, err);
}

static const ModelOps vit_ops = TSTACK_MODEL_OPS(vit_run_create);

int vit_model_create(ModelDesc *m, const VitConfig *c, Err *err) {
    memset(m, 0, sizeof *m); /* a description a failure leaves is safe to free */
    int rc = vit_config_check(c, err);
    return rc ? rc : tstack_model_create(m, &vit_ends, &vit_ops, c, sizeof *c, c->layers, err);
}
