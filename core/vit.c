#include "vit.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Parameters of each module, in torchvision's state-dict order. */
enum { E_CLS, E_CONV_W, E_CONV_B, E_POS, EMBED_PARAMS };
enum {
    B_LN1_W,
    B_LN1_B,
    B_QKV_W,
    B_QKV_B,
    B_OUT_W,
    B_OUT_B,
    B_LN2_W,
    B_LN2_B,
    B_FC1_W,
    B_FC1_B,
    B_FC2_W,
    B_FC2_B,
    BLOCK_PARAMS
};
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
    size_t H = (size_t)c->hidden, M = (size_t)c->mlp;
    return 2 * H + 3 * H * H + 3 * H + H * H + H + 2 * H + M * H + M + H * M + H;
}

static size_t head_params(const VitConfig *c) {
    size_t H = (size_t)c->hidden, K = (size_t)c->classes;
    return 2 * H + K * H + K;
}

size_t vit_param_count(const VitConfig *c) {
    return embed_params(c) + (size_t)c->layers * block_params(c) + head_params(c);
}

/* ---------------------------------------------------------------- the description */

typedef struct ParamMaker {
    ModelDesc *m;
    int module;
} ParamMaker;

static ParamSpec *add_param(ParamMaker *pm, const char *name, int ndim, const int64_t *shape,
                            InitKind init, float a, float b) {
    ParamSpec *p = &pm->m->params[pm->m->nparams++];
    snprintf(p->name, sizeof p->name, "%s", name);
    p->ndim = ndim;
    p->numel = 1;
    for (int d = 0; d < ndim; d++) {
        p->shape[d] = shape[d];
        p->numel *= (size_t)shape[d];
    }
    p->row_elems = p->numel / (size_t)shape[0];
    p->module = pm->module;
    p->init = init;
    p->init_a = a;
    p->init_b = b;
    pm->m->modules[pm->module].nparams++;
    pm->m->total_numel += p->numel;
    return p;
}

static void begin_module(ParamMaker *pm, const char *name, int is_block) {
    ModuleSpec *mod = &pm->m->modules[pm->m->nmodules];
    pm->module = pm->m->nmodules++;
    snprintf(mod->name, sizeof mod->name, "%s", name);
    mod->first_param = pm->m->nparams;
    mod->is_block = is_block;
}

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
    begin_module(pm, "embed", 0);
    add_param(pm, "class_token", 3, (int64_t[]){1, 1, H}, INIT_ZERO, 0, 0);
    add_param(pm, "conv_proj.weight", 4, (int64_t[]){H, 1, P, P}, INIT_TRUNC_NORMAL, 0, conv_std);
    add_param(pm, "conv_proj.bias", 1, (int64_t[]){H}, INIT_ZERO, 0, 0);
    add_param(pm, "encoder.pos_embedding", 3, (int64_t[]){1, T, H}, INIT_NORMAL, 0, 0.02f);
}

static void add_block(ParamMaker *pm, const VitConfig *c, int layer) {
    int64_t H = c->hidden, M = c->mlp;
    char module[64], name[96];
    snprintf(module, sizeof module, "encoder_layer_%d", layer);
    begin_module(pm, module, 1);
#define PARAM(suffix, ndim, shape, init, a, b)                                                     \
    do {                                                                                           \
        snprintf(name, sizeof name, "encoder.layers.encoder_layer_%d.%s", layer, suffix);          \
        add_param(pm, name, ndim, shape, init, a, b);                                              \
    } while (0)
    float qkv = xavier_bound((double)H, (double)(3 * H)), out = default_bound((double)H);
    float fc1 = xavier_bound((double)H, (double)M), fc2 = xavier_bound((double)M, (double)H);
    PARAM("ln_1.weight", 1, ((int64_t[]){H}), INIT_ONE, 0, 0);
    PARAM("ln_1.bias", 1, ((int64_t[]){H}), INIT_ZERO, 0, 0);
    PARAM("self_attention.in_proj_weight", 2, ((int64_t[]){3 * H, H}), INIT_UNIFORM, -qkv, qkv);
    PARAM("self_attention.in_proj_bias", 1, ((int64_t[]){3 * H}), INIT_ZERO, 0, 0);
    PARAM("self_attention.out_proj.weight", 2, ((int64_t[]){H, H}), INIT_UNIFORM, -out, out);
    PARAM("self_attention.out_proj.bias", 1, ((int64_t[]){H}), INIT_ZERO, 0, 0);
    PARAM("ln_2.weight", 1, ((int64_t[]){H}), INIT_ONE, 0, 0);
    PARAM("ln_2.bias", 1, ((int64_t[]){H}), INIT_ZERO, 0, 0);
    PARAM("mlp.0.weight", 2, ((int64_t[]){M, H}), INIT_UNIFORM, -fc1, fc1);
    PARAM("mlp.0.bias", 1, ((int64_t[]){M}), INIT_NORMAL, 0, 1e-6f);
    PARAM("mlp.3.weight", 2, ((int64_t[]){H, M}), INIT_UNIFORM, -fc2, fc2);
    PARAM("mlp.3.bias", 1, ((int64_t[]){H}), INIT_NORMAL, 0, 1e-6f);
#undef PARAM
}

static void add_head(ParamMaker *pm, const VitConfig *c) {
    int64_t H = c->hidden, K = c->classes;
    begin_module(pm, "head", 0);
    add_param(pm, "encoder.ln.weight", 1, (int64_t[]){H}, INIT_ONE, 0, 0);
    add_param(pm, "encoder.ln.bias", 1, (int64_t[]){H}, INIT_ZERO, 0, 0);
    add_param(pm, "heads.head.weight", 2, (int64_t[]){K, H}, INIT_ZERO, 0, 0);
    add_param(pm, "heads.head.bias", 1, (int64_t[]){K}, INIT_ZERO, 0, 0);
}

/* ---------------------------------------------------------------- per-rank state */

typedef struct BlockActs {
    float *ln1, *ln1_mean, *ln1_rstd; /* LayerNorm 1 output and statistics */
    float *qkv;                       /* in_proj output [M, 3H] */
    float *probs;                     /* attention probabilities [B, heads, T, T] */
    float *attn;                      /* attention output before out_proj [M, H] */
    float *mid;                       /* residual stream after attention [M, H] */
    float *ln2, *ln2_mean, *ln2_rstd;
    float *fc1;  /* mlp.0's GEMM output without its bias [M, mlp] (GELU's input: fc1 + bias) */
    float *gelu; /* GELU output [M, mlp] */
} BlockActs;

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
    return n ? r->dev->ops->alloc(r->dev, n * sizeof(float), MEM_ACTIVATIONS, -1) : NULL;
}

static void release(ModelRun *r, float **p) {
    if (*p) r->dev->ops->free(r->dev, *p, -1);
    *p = NULL;
}

/* Each pointer was just taken for `n > 0` elements: any NULL is out of memory. */
static int check_taken(float *const *ptrs, int n, size_t elems, Err *err) {
    if (!elems) return 0;
    for (int i = 0; i < n; i++)
        if (!ptrs[i])
            return err_set(err, ERR_NOMEM, "out of memory for activations (%zu floats)", elems);
    return 0;
}

static void release_block(ModelRun *r, BlockActs *a) {
    float **all[] = {&a->ln1, &a->ln1_mean, &a->ln1_rstd, &a->qkv,      &a->probs, &a->attn,
                     &a->mid, &a->ln2,      &a->ln2_mean, &a->ln2_rstd, &a->fc1,   &a->gelu};
    for (size_t i = 0; i < sizeof all / sizeof *all; i++) release(r, all[i]);
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
    return n ? stage_batch(r, ds, idx, n, pixels, err) : 0;
}

/* ---------------------------------------------------------------- work estimates */

/* Roughly what the cost model charges: GEMM flops and activation traffic, 4 bytes a float. */
static void block_work(const ModelRun *r, Work *w, WorkKind kind) {
    double M = (double)(r->B * r->T), H = (double)r->H, F = (double)r->c->mlp;
    double T = (double)r->T, B = (double)r->B;
    double flops = 2 * M * H * (3 * H + H + 2 * F) + 4 * B * T * T * H;
    double bytes = 4 * (M * (12 * H + 3 * F) + 2 * B * r->c->heads * T * T);
    double passes = kind == WORK_BACKWARD ? 2.0 : 1.0;
    w->kind = kind;
    w->flops = flops * passes;
    w->bytes = bytes * passes;
}

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
    int rc = check_taken((float *[]){r->patches, pout, r->x[1]}, 3, M, err);
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
    const Kernels *k = r->k;
    BlockActs *a = &r->blocks[layer];
    size_t M = r->B * r->T, H = r->H, F = (size_t)r->c->mlp, heads = (size_t)r->c->heads;
    const float *x = r->x[layer + 1];
    float **out = &r->x[layer + 2];
    a->ln1 = take(r, M * H), a->ln1_mean = take(r, M), a->ln1_rstd = take(r, M);
    a->qkv = take(r, M * 3 * H), a->probs = take(r, r->B * heads * r->T * r->T);
    a->attn = take(r, M * H), a->mid = take(r, M * H);
    a->ln2 = take(r, M * H), a->ln2_mean = take(r, M), a->ln2_rstd = take(r, M);
    a->fc1 = take(r, M * F), a->gelu = take(r, M * F), *out = take(r, M * H);
    int rc =
        check_taken((float *[]){a->ln1, a->ln1_mean, a->ln1_rstd, a->qkv, a->probs, a->attn, a->mid,
                                a->ln2, a->ln2_mean, a->ln2_rstd, a->fc1, a->gelu, *out},
                    13, M, err);
    block_work(r, w, WORK_FORWARD);
    if (rc || !M) return rc;
    k->layernorm_forward(a->ln1, a->ln1_mean, a->ln1_rstd, x, p[B_LN1_W], p[B_LN1_B], M, H,
                         VIT_LN_EPS);
    k->linear_forward(a->qkv, a->ln1, p[B_QKV_W], p[B_QKV_B], M, H, 3 * H);
    k->attention_forward(a->attn, a->probs, a->qkv, r->B, r->T, H, heads);
    k->linear_forward(a->mid, a->attn, p[B_OUT_W], p[B_OUT_B], M, H, H);
    /* the residual (mid = mid + x) and ln_2 on it, in one pass */
    k->residual_layernorm_forward(a->mid, a->ln2, a->ln2_mean, a->ln2_rstd, a->mid, x, p[B_LN2_W],
                                  p[B_LN2_B], M, H, VIT_LN_EPS);
    /* mlp.0 without its bias, then bias + GELU in one pass (backward redoes fc1 + bias) */
    k->linear_forward(a->fc1, a->ln2, p[B_FC1_W], NULL, M, H, F);
    k->bias_gelu_forward(a->gelu, a->fc1, p[B_FC1_B], M, F);
    k->linear_forward(*out, a->gelu, p[B_FC2_W], p[B_FC2_B], M, F, H);
    /* The second residual stays a plain add: the LayerNorm that reads it, the next block's
     * ln_1, belongs to the next module, which FSDP gathers as its own unit (and activation
     * checkpointing recomputes from its input, this sum). Fusing across the boundary would
     * make this block's forward need the next block's ln_1 parameters. */
    k->add(*out, *out, a->mid, M * H);
    return 0;
}

static int head_forward(ModelRun *r, float *const *p, Work *w, Err *err) {
    const Kernels *k = r->k;
    size_t B = r->B, H = r->H, K = (size_t)r->c->classes;
    r->cls = take(r, B * H), r->head_ln = take(r, B * H);
    r->head_mean = take(r, B), r->head_rstd = take(r, B), r->logits = take(r, B * K);
    int rc = check_taken((float *[]){r->cls, r->head_ln, r->head_mean, r->head_rstd, r->logits}, 5,
                         B, err);
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
    int rc = check_taken((float *[]){dln, dcls, r->grad}, 3, B, err);
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
 * as dL/d(input): both residual connections pass it through unchanged, so each branch only
 * adds its own contribution. */
static int block_backward(ModelRun *r, int layer, float *const *p, float *const *g, Work *w,
                          Err *err) {
    const Kernels *k = r->k;
    BlockActs *a = &r->blocks[layer];
    size_t M = r->B * r->T, H = r->H, F = (size_t)r->c->mlp, heads = (size_t)r->c->heads;
    float *dy = r->grad, *x = r->x[layer + 1];
    float *dmlp = take(r, M * F), *dh = take(r, M * H), *dqkv = take(r, M * 3 * H);
    int rc = check_taken((float *[]){dmlp, dh, dqkv}, 3, M, err);
    block_work(r, w, WORK_BACKWARD);
    if (!rc && M) {
        /* MLP branch: out = mid + fc2(gelu(fc1(ln2(mid)))) */
        k->linear_backward(dmlp, g[B_FC2_W], g[B_FC2_B], dy, a->gelu, p[B_FC2_W], M, F, H);
        k->bias_gelu_backward(dmlp, g[B_FC1_B], dmlp, a->fc1, p[B_FC1_B], M, F); /* + mlp.0's db */
        k->linear_backward(dh, g[B_FC1_W], NULL, dmlp, a->ln2, p[B_FC1_W], M, H, F);
        /* the residual add passes dy through to both of its inputs; ln_2's share is added in */
        k->layernorm_backward(dy, g[B_LN2_W], g[B_LN2_B], dh, a->mid, a->ln2_mean, a->ln2_rstd,
                              p[B_LN2_W], M, H); /* dy is now dL/d(mid) */
        /* attention branch: mid = x + out_proj(attention(in_proj(ln1(x)))) */
        k->linear_backward(dh, g[B_OUT_W], g[B_OUT_B], dy, a->attn, p[B_OUT_W], M, H, H);
        k->attention_backward(dqkv, dh, a->qkv, a->probs, r->B, r->T, H, heads);
        /* The key bias's gradient is exactly zero: it adds q.b_k to every score of a query's
         * row, and softmax ignores a shift of the whole row. Summing dk would give rounding
         * noise that Adam turns into steps of +-lr, different at every world size; so only
         * the query and value biases get the column sums. */
        k->linear_backward(dh, g[B_QKV_W], NULL, dqkv, a->ln1, p[B_QKV_W], M, H, 3 * H);
        k->bias_grad(g[B_QKV_B], dqkv, M, H, 3 * H);
        k->bias_grad(g[B_QKV_B] + 2 * H, dqkv + 2 * H, M, H, 3 * H);
        k->layernorm_backward(dy, g[B_LN1_W], g[B_LN1_B], dh, x, a->ln1_mean, a->ln1_rstd,
                              p[B_LN1_W], M, H); /* dy is now dL/dx */
    }
    release(r, &dmlp);
    release(r, &dh);
    release(r, &dqkv);
    release_block(r, a);
    release(r, &r->x[layer + 1]);
    return rc;
}

static int embed_backward(ModelRun *r, float *const *p, float *const *g, Work *w, Err *err) {
    const Kernels *k = r->k;
    size_t P = (size_t)r->c->patch, M = r->B * (r->T - 1);
    float *dpout = take(r, M * r->H);
    int rc = check_taken((float *[]){dpout}, 1, M, err);
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

/* A block keeps only its input x[layer + 1]; it moves to its own category so the memory
 * panel shows what checkpointing keeps apart from what it frees. */
static int vit_checkpoint(ModelRun *r, int module, Err *err) {
    if (module < 1 || module > r->c->layers)
        return err_set(err, ERR_INTERNAL, "module %d is not an encoder block", module);
    release_block(r, &r->blocks[module - 1]);
    float **input = &r->x[module];
    size_t n = r->B * r->T * r->H;
    if (!*input || !n) return 0;
    float *kept = r->dev->ops->alloc(r->dev, n * sizeof(float), MEM_AC_INPUT, -1);
    if (!kept) return err_set(err, ERR_NOMEM, "out of memory for a checkpointed input");
    r->k->copy_bytes(kept, *input, n * sizeof(float));
    release(r, input);
    *input = kept;
    return 0;
}

/* The block's forward again; its output is the next block's input, whose backward is done
 * and freed it, so the copy made here is dropped at once. */
static int vit_recompute(ModelRun *r, int module, float *const *params, Work *w, Err *err) {
    if (module < 1 || module > r->c->layers)
        return err_set(err, ERR_INTERNAL, "module %d is not an encoder block", module);
    int rc = block_forward(r, module - 1, params, w, err);
    release(r, &r->x[module + 1]);
    w->kind = WORK_RECOMPUTE;
    return rc;
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
    memset(m, 0, sizeof *m);
    int rc = vit_config_check(c, err);
    if (rc) return rc;
    int nmodules = c->layers + 2;
    int nparams = EMBED_PARAMS + c->layers * BLOCK_PARAMS + HEAD_PARAMS;
    m->params = calloc((size_t)nparams, sizeof *m->params);
    m->modules = calloc((size_t)nmodules, sizeof *m->modules);
    m->config = malloc(sizeof *c);
    if (!m->params || !m->modules || !m->config) {
        model_desc_free(m);
        return err_set(err, ERR_NOMEM, "out of memory describing a ViT of %d layers", c->layers);
    }
    memcpy(m->config, c, sizeof *c);
    snprintf(m->name, sizeof m->name, "vit");
    ParamMaker pm = {.m = m};
    add_embed(&pm, c);
    for (int l = 0; l < c->layers; l++) add_block(&pm, c, l);
    add_head(&pm, c);
    m->ops = &vit_ops;
    return 0;
}
