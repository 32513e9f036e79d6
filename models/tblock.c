/* tblock: the pre-LayerNorm transformer block (models/tblock.h), the activations it and the
 * models built from it take, and the describing of their parameters. */
#include "models/tblock.h"

#include <stdio.h>

/* ---------------------------------------------------------------- activations */

void *act_take(Device *dev, DType t, size_t n) {
    return n ? dev->ops->alloc(dev, n * dtype_size(t), MEM_ACTIVATIONS, -1) : NULL;
}

void act_release(Device *dev, void **p) {
    if (*p) dev->ops->free(dev, *p, -1);
    *p = NULL;
}

int act_check_taken(void *const *ptrs, int n, size_t elems, Err *err) {
    if (!elems) return 0;
    for (int i = 0; i < n; i++)
        if (!ptrs[i])
            return err_set(err, ERR_NOMEM, "out of memory for activations (%zu elements)", elems);
    return 0;
}

/* ---------------------------------------------------------------- the description */

void param_maker_begin(ParamMaker *pm, const char *name, int is_block) {
    ModuleSpec *mod = &pm->m->modules[pm->m->nmodules];
    pm->module = pm->m->nmodules++;
    snprintf(mod->name, sizeof mod->name, "%s", name);
    mod->first_param = pm->m->nparams;
    mod->is_block = is_block;
}

void param_maker_add(ParamMaker *pm, const char *name, int ndim, const int64_t *shape,
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
}

void tblock_describe(ParamMaker *pm, const char *module, const char *prefix,
                     const char *const suffix[TBLOCK_PARAMS], const ParamInit init[TBLOCK_PARAMS],
                     int64_t H, int64_t F) {
    /* the shapes the forward below reads its parameters in: Linear weights [out, in] */
    const int64_t shapes[TBLOCK_PARAMS][2] = {{H}, {H}, {3 * H, H}, {3 * H}, {H, H}, {H},
                                              {H}, {H}, {F, H},     {F},     {H, F}, {H}};
    const int ndim[TBLOCK_PARAMS] = {1, 1, 2, 1, 2, 1, 1, 1, 2, 1, 2, 1};
    char name[96];
    param_maker_begin(pm, module, 1);
    for (int i = 0; i < TBLOCK_PARAMS; i++) {
        snprintf(name, sizeof name, "%s%s", prefix, suffix[i]);
        param_maker_add(pm, name, ndim[i], shapes[i], init[i].kind, init[i].a, init[i].b);
    }
}

size_t tblock_param_count(size_t H, size_t F) {
    return 2 * H + 3 * H * H + 3 * H + H * H + H + 2 * H + F * H + F + H * F + H;
}

AttnShape tblock_attn_shape(const TBlock *t, size_t q_stride, size_t kv_stride) {
    return (AttnShape){.B = t->B,
                       .T = t->T,
                       .heads = t->heads,
                       .kv_heads = t->kind->grouped_kv ? t->kv_heads : t->heads,
                       .head_dim = t->H / t->heads,
                       .q_stride = q_stride,
                       .kv_stride = kv_stride,
                       .causal = t->causal};
}

/* ---------------------------------------------------------------- work estimates */

double tblock_attention_flops(const TBlock *t, WorkKind kind) {
    double T = (double)t->T, scores = 2 * (double)t->B * T * T * (double)t->H;
    double products = kind == WORK_BACKWARD ? (t->flash ? 5 : 4) * scores : 2 * scores;
    return t->flash && t->causal ? products / 2 : products;
}

/* Eager attention writes and reads its probabilities; flash keeps them on chip but computes
 * the scores once more in backward. Kernels: the op calls of gpt_forward (9) and gpt_backward
 * (18, a Linear's backward two GEMMs and its bias). */
static void gpt_work(const TBlock *t, Work *w, WorkKind kind) {
    double M = (double)(t->B * t->T), H = (double)t->H, F = (double)t->F;
    double T = (double)t->T, B = (double)t->B;
    double probs = 2 * B * (double)t->heads * T * T;
    double bytes = (double)dtype_size(t->dtype) * (M * (12 * H + 3 * F) + (t->flash ? 0 : probs));
    double passes = kind == WORK_BACKWARD ? 2.0 : 1.0;
    work_begin(w, kind);
    work_linear(w, kind, M, H, 3 * H); /* qkv */
    work_linear(w, kind, M, H, H);     /* the output projection */
    work_linear(w, kind, M, H, F);     /* fc1 */
    work_linear(w, kind, M, F, H);     /* fc2 */
    w->attention_flops = tblock_attention_flops(t, kind);
    w->flops += w->attention_flops;
    w->bytes = bytes * passes;
    w->kernels = kind == WORK_BACKWARD ? 18 : 9;
}

/* ---------------------------------------------------------------- forward */

void **tblock_take_scores(const TBlock *t, BlockActs *a) {
    size_t pairs = t->B * t->heads;
    if (t->flash) {
        a->lse = act_take(t->dev, DTYPE_FP32, pairs * t->T);
        return &a->lse;
    }
    a->probs = act_take(t->dev, t->dtype, pairs * t->T * t->T);
    return &a->probs;
}

int tblock_needs_flash_work(const TBlock *t) {
    return t->flash && t->k->flash_uses_work;
}

void *tblock_take_flash_work(const TBlock *t) {
    return tblock_needs_flash_work(t) ? act_take(t->dev, DTYPE_FP32, t->T * t->T) : NULL;
}

/* Every buffer the forward saves, and its output, in one order (the trace shows it). */
static int take_acts(const TBlock *t, BlockActs *a, void **out, Err *err) {
    Device *d = t->dev;
    size_t M = t->B * t->T, H = t->H, F = t->F;
    a->ln1 = act_take(d, t->dtype, M * H), a->ln1_mean = act_take(d, DTYPE_FP32, M),
    a->ln1_rstd = act_take(d, DTYPE_FP32, M);
    a->qkv = act_take(d, t->dtype, M * 3 * H);
    void **scores = tblock_take_scores(t, a);
    a->attn = act_take(d, t->dtype, M * H), a->mid = act_take(d, t->dtype, M * H);
    a->ln2 = act_take(d, t->dtype, M * H), a->ln2_mean = act_take(d, DTYPE_FP32, M),
    a->ln2_rstd = act_take(d, DTYPE_FP32, M);
    a->fc1 = act_take(d, t->dtype, M * F), a->gelu = act_take(d, t->dtype, M * F),
    *out = act_take(d, t->dtype, M * H);
    return act_check_taken((void *[]){a->ln1, a->ln1_mean, a->ln1_rstd, a->qkv, *scores, a->attn,
                                      a->mid, a->ln2, a->ln2_mean, a->ln2_rstd, a->fc1, a->gelu,
                                      *out},
                           13, M, err);
}

static void compute_forward(const TBlock *t, BlockActs *a, void *const *p, const void *x,
                            void *out) {
    const Kernels *k = t->k;
    size_t M = t->B * t->T, H = t->H, F = t->F;
    k->layernorm_forward(t->dtype, a->ln1, a->ln1_mean, a->ln1_rstd, x, p[TBLOCK_LN1_W],
                         p[TBLOCK_LN1_B], M, H, t->ln_eps);
    k->linear_forward(t->dtype, a->qkv, a->ln1, p[TBLOCK_QKV_W], p[TBLOCK_QKV_B], M, H, 3 * H);
    if (t->flash) {
        AttnShape s = tblock_attn_shape(t, 3 * H, 3 * H);
        k->flash_attention_forward(t->dtype, a->attn, a->lse, a->qkv, dtype_at(a->qkv, t->dtype, H),
                                   dtype_at(a->qkv, t->dtype, 2 * H), &s);
    } else {
        (t->causal ? k->causal_attention_forward : k->attention_forward)(
            t->dtype, a->attn, a->probs, a->qkv, t->B, t->T, H, t->heads);
    }
    k->linear_forward(t->dtype, a->mid, a->attn, p[TBLOCK_OUT_W], p[TBLOCK_OUT_B], M, H, H);
    /* the residual (mid = mid + x) and ln_2 on it, in one pass */
    k->residual_layernorm_forward(t->dtype, a->mid, a->ln2, a->ln2_mean, a->ln2_rstd, a->mid, x,
                                  p[TBLOCK_LN2_W], p[TBLOCK_LN2_B], M, H, t->ln_eps);
    /* fc1 without its bias, then bias + GELU in one pass (backward redoes fc1 + bias) */
    k->linear_forward(t->dtype, a->fc1, a->ln2, p[TBLOCK_FC1_W], NULL, M, H, F);
    k->bias_gelu_forward(t->dtype, a->gelu, a->fc1, p[TBLOCK_FC1_B], M, F);
    k->linear_forward(t->dtype, out, a->gelu, p[TBLOCK_FC2_W], p[TBLOCK_FC2_B], M, F, H);
    /* The second residual stays a plain add: the LayerNorm that reads it (the next block's
     * ln_1, or the model's final one) belongs to the next module, which FSDP gathers as its
     * own unit (and activation checkpointing recomputes from its input, this sum). Fusing
     * across the boundary would make this block's forward need the next module's parameters. */
    k->add(t->dtype, out, out, a->mid, M * H);
}

static int gpt_forward(const TBlock *t, BlockActs *a, void *const *p, const void *x, void **out,
                       Work *w, Err *err) {
    size_t M = t->B * t->T;
    int rc = take_acts(t, a, out, err);
    gpt_work(t, w, WORK_FORWARD);
    if (rc || !M) return rc;
    compute_forward(t, a, p, x, *out);
    return 0;
}

/* ---------------------------------------------------------------- backward */

/* Both residual connections pass the stream's gradient dy through unchanged, so each branch
 * only adds its own contribution into it. */

/* MLP branch: out = mid + fc2(gelu(fc1(ln2(mid)))); dy becomes dL/d(mid). */
static void mlp_backward(const TBlock *t, const BlockActs *a, void *const *p, float *const *g,
                         void *dy, void *dmlp, void *dh) {
    const Kernels *k = t->k;
    size_t M = t->B * t->T, H = t->H, F = t->F;
    k->linear_backward(t->dtype, dmlp, g[TBLOCK_FC2_W], g[TBLOCK_FC2_B], dy, a->gelu,
                       p[TBLOCK_FC2_W], M, F, H);
    k->bias_gelu_backward(t->dtype, dmlp, g[TBLOCK_FC1_B], dmlp, a->fc1, p[TBLOCK_FC1_B], M,
                          F); /* + fc1's db */
    k->linear_backward(t->dtype, dh, g[TBLOCK_FC1_W], NULL, dmlp, a->ln2, p[TBLOCK_FC1_W], M, H, F);
    /* the residual add passes dy through to both of its inputs; ln_2's share is added in */
    k->layernorm_backward(t->dtype, dy, g[TBLOCK_LN2_W], g[TBLOCK_LN2_B], dh, a->mid, a->ln2_mean,
                          a->ln2_rstd, p[TBLOCK_LN2_W], M, H);
}

/* Attention branch: mid = x + out_proj(attention(in_proj(ln1(x)))); dy becomes dL/dx. */
static void attention_branch_backward(const TBlock *t, const BlockActs *a, void *const *p,
                                      float *const *g, const void *x, void *dy, void *dh,
                                      void *dqkv, void *work) {
    const Kernels *k = t->k;
    size_t M = t->B * t->T, H = t->H;
    k->linear_backward(t->dtype, dh, g[TBLOCK_OUT_W], g[TBLOCK_OUT_B], dy, a->attn, p[TBLOCK_OUT_W],
                       M, H, H);
    if (t->flash) {
        AttnShape s = tblock_attn_shape(t, 3 * H, 3 * H);
        k->flash_attention_backward(t->dtype, dqkv, dtype_at(dqkv, t->dtype, H),
                                    dtype_at(dqkv, t->dtype, 2 * H), dh, a->qkv,
                                    dtype_at(a->qkv, t->dtype, H),
                                    dtype_at(a->qkv, t->dtype, 2 * H), a->attn, a->lse, work, &s);
    } else { /* causal too: the masked probabilities are 0 and pass nothing back (kernels.h) */
        k->attention_backward(t->dtype, dqkv, dh, a->qkv, a->probs, t->B, t->T, H, t->heads);
    }
    /* The key bias's gradient is exactly zero: it adds q.b_k to every score of a query's
     * row, and softmax ignores a shift of the whole row. Summing dk would give rounding
     * noise that Adam turns into steps of +-lr, different at every world size; so only
     * the query and value biases get the column sums. */
    k->linear_backward(t->dtype, dh, g[TBLOCK_QKV_W], NULL, dqkv, a->ln1, p[TBLOCK_QKV_W], M, H,
                       3 * H);
    k->bias_grad(t->dtype, g[TBLOCK_QKV_B], dqkv, M, H, 3 * H);
    k->bias_grad(t->dtype, g[TBLOCK_QKV_B] + 2 * H, dtype_at(dqkv, t->dtype, 2 * H), M, H, 3 * H);
    k->layernorm_backward(t->dtype, dy, g[TBLOCK_LN1_W], g[TBLOCK_LN1_B], dh, x, a->ln1_mean,
                          a->ln1_rstd, p[TBLOCK_LN1_W], M, H);
}

static int gpt_backward(const TBlock *t, BlockActs *a, void *const *p, float *const *g,
                        void **input, void *dy, Work *w, Err *err) {
    Device *d = t->dev;
    size_t M = t->B * t->T, H = t->H, F = t->F;
    void *dmlp = act_take(d, t->dtype, M * F), *dh = act_take(d, t->dtype, M * H),
         *dqkv = act_take(d, t->dtype, M * 3 * H);
    void *work = tblock_take_flash_work(t); /* flash's probabilities, one pair at a time */
    int rc = act_check_taken((void *[]){dmlp, dh, dqkv, work}, tblock_needs_flash_work(t) ? 4 : 3,
                             M, err);
    gpt_work(t, w, WORK_BACKWARD);
    if (!rc && M) {
        mlp_backward(t, a, p, g, dy, dmlp, dh);
        attention_branch_backward(t, a, p, g, *input, dy, dh, dqkv, work);
    }
    act_release(d, &dmlp);
    act_release(d, &dh);
    act_release(d, &dqkv);
    act_release(d, &work);
    tblock_release(t, a);
    act_release(d, input);
    return rc;
}

/* ---------------------------------------------------------------- selective checkpointing */

/* AC_OPS keeps, beside the input, the outputs of the block's 1st and 3rd GEMMs (qkv, and fc1
 * before its bias) and attention's (its output and scores), as torchtitan's op policy saves
 * every other matmul's and SDPA's; the 4th's (fc2) is in the next block's input. The rest, ln_1,
 * the output projection, the residual with ln_2 and bias + GELU, is recomputed before backward
 * by the forward's kernels on the forward's inputs: the same bits. */
static void gpt_release_recomputed(const TBlock *t, BlockActs *a) {
    void **all[] = {&a->ln1, &a->ln1_mean, &a->ln1_rstd, &a->mid,
                    &a->ln2, &a->ln2_mean, &a->ln2_rstd, &a->gelu};
    for (size_t i = 0; i < sizeof all / sizeof *all; i++) act_release(t->dev, all[i]);
}

/* One GEMM, and the traffic of ln_1 (x read, its output written), the residual with ln_2 (three
 * tensors and its output) and bias + GELU (two): four kernels. */
static void gpt_recompute_ops_work(const TBlock *t, Work *w) {
    double M = (double)(t->B * t->T), H = (double)t->H, F = (double)t->F;
    work_begin(w, WORK_FORWARD);
    work_linear(w, WORK_FORWARD, M, H, H); /* the output projection */
    w->bytes = (double)dtype_size(t->dtype) * M * (6 * H + 2 * F);
    w->kernels = 4;
}

static int gpt_recompute_ops(const TBlock *t, BlockActs *a, void *const *p, const void *x, Work *w,
                             Err *err) {
    Device *d = t->dev;
    const Kernels *k = t->k;
    size_t M = t->B * t->T, H = t->H, F = t->F;
    a->ln1 = act_take(d, t->dtype, M * H), a->ln1_mean = act_take(d, DTYPE_FP32, M),
    a->ln1_rstd = act_take(d, DTYPE_FP32, M);
    a->mid = act_take(d, t->dtype, M * H);
    a->ln2 = act_take(d, t->dtype, M * H), a->ln2_mean = act_take(d, DTYPE_FP32, M),
    a->ln2_rstd = act_take(d, DTYPE_FP32, M);
    a->gelu = act_take(d, t->dtype, M * F);
    gpt_recompute_ops_work(t, w);
    int rc = act_check_taken((void *[]){a->ln1, a->ln1_mean, a->ln1_rstd, a->mid, a->ln2,
                                        a->ln2_mean, a->ln2_rstd, a->gelu},
                             8, M, err);
    if (rc || !M) return rc;
    k->layernorm_forward(t->dtype, a->ln1, a->ln1_mean, a->ln1_rstd, x, p[TBLOCK_LN1_W],
                         p[TBLOCK_LN1_B], M, H, t->ln_eps);
    k->linear_forward(t->dtype, a->mid, a->attn, p[TBLOCK_OUT_W], p[TBLOCK_OUT_B], M, H, H);
    k->residual_layernorm_forward(t->dtype, a->mid, a->ln2, a->ln2_mean, a->ln2_rstd, a->mid, x,
                                  p[TBLOCK_LN2_W], p[TBLOCK_LN2_B], M, H, t->ln_eps);
    k->bias_gelu_forward(t->dtype, a->gelu, a->fc1, p[TBLOCK_FC1_B], M, F);
    return 0;
}

const BlockKind gpt_block = {.work = gpt_work,
                             .forward = gpt_forward,
                             .backward = gpt_backward,
                             .release_recomputed = gpt_release_recomputed,
                             .recompute_ops = gpt_recompute_ops,
                             .grouped_kv = 0,
                             .gemms = 4};

void tblock_work(const TBlock *t, Work *w, WorkKind kind) {
    t->kind->work(t, w, kind);
}

int tblock_forward(const TBlock *t, BlockActs *a, void *const *p, const void *x, void **out,
                   Work *w, Err *err) {
    return t->kind->forward(t, a, p, x, out, w, err);
}

int tblock_backward(const TBlock *t, BlockActs *a, void *const *p, float *const *g, void **input,
                    void *dy, Work *w, Err *err) {
    return t->kind->backward(t, a, p, g, input, dy, w, err);
}

void tblock_release(const TBlock *t, BlockActs *a) {
    void **all[] = {&a->ln1,  &a->ln1_mean, &a->ln1_rstd, &a->qkv,      &a->q,
                    &a->k,    &a->v,        &a->probs,    &a->lse,      &a->attn,
                    &a->mid,  &a->ln2,      &a->ln2_mean, &a->ln2_rstd, &a->fc1,
                    &a->gelu, &a->gate,     &a->up,       &a->swiglu,   &a->last_gemm};
    for (size_t i = 0; i < sizeof all / sizeof *all; i++) act_release(t->dev, all[i]);
}

/* ---------------------------------------------------------------- activation checkpointing */

/* torchtitan's policy saves the odd-numbered matmuls' outputs; of a block of an odd number, the
 * last's too, though its only reader is the residual add, whose backward reads neither input.
 * fsdp adds it into the block's output in place, so nothing of it is left to keep: the policy
 * takes the bytes torchtitan holds, to plan the same job, and leaves them unwritten. */
static int hold_last_gemm(const TBlock *t, BlockActs *a, Err *err) {
    size_t n = t->B * t->T * t->H;
    if (t->kind->gemms % 2 == 0 || !n) return 0;
    a->last_gemm = act_take(t->dev, t->dtype, n);
    return act_check_taken(&a->last_gemm, 1, n, err);
}

/* The kept input moves to its own category so the memory panel shows what checkpointing
 * keeps apart from what it frees. */
int tblock_checkpoint(const TBlock *t, BlockActs *a, AcPolicy policy, void **input, Err *err) {
    int rc = 0;
    if (policy == AC_BLOCK) {
        tblock_release(t, a);
    } else {
        t->kind->release_recomputed(t, a);
        if (policy == AC_TORCHTITAN) rc = hold_last_gemm(t, a, err);
    }
    size_t n = t->B * t->T * t->H;
    if (rc || !*input || !n) return rc;
    void *kept = t->dev->ops->alloc(t->dev, n * dtype_size(t->dtype), MEM_AC_INPUT, -1);
    if (!kept) return err_set(err, ERR_NOMEM, "out of memory for a checkpointed input");
    t->k->copy_bytes(kept, *input, n * dtype_size(t->dtype));
    act_release(t->dev, input);
    *input = kept;
    return 0;
}

int tblock_recompute(const TBlock *t, BlockActs *a, AcPolicy policy, void *const *p, const void *x,
                     void **out, Work *w, Err *err) {
    int rc;
    if (policy != AC_BLOCK) {
        rc = t->kind->recompute_ops(t, a, p, x, w, err);
    } else {
        rc = tblock_forward(t, a, p, x, out, w, err);
        act_release(t->dev, out);
    }
    w->kind = WORK_RECOMPUTE;
    return rc;
}
