/* lblock: the Llama-shaped block (models/lblock.h): its parameters, the activations it keeps,
 * forward and backward. Activation checkpointing and releasing are tblock's, which handle
 * every field of BlockActs. */
#include "models/lblock.h"

#include <stdio.h>

/* ---------------------------------------------------------------- the description */

void lblock_describe(ParamMaker *pm, const char *module, const char *prefix, int64_t H, int64_t KV,
                     int64_t F, float std, float proj_std) {
    static const char *const suffix[LBLOCK_PARAMS] = {
        "input_layernorm.weight",  "self_attn.q_proj.weight", "self_attn.k_proj.weight",
        "self_attn.v_proj.weight", "self_attn.o_proj.weight", "post_attention_layernorm.weight",
        "mlp.gate_proj.weight",    "mlp.up_proj.weight",      "mlp.down_proj.weight"};
    const int64_t shapes[LBLOCK_PARAMS][2] = {{H}, {H, H}, {KV, H}, {KV, H}, {H, H},
                                              {H}, {F, H}, {F, H},  {H, F}};
    char name[96];
    param_maker_begin(pm, module, 1);
    for (int i = 0; i < LBLOCK_PARAMS; i++) {
        int norm = i == LBLOCK_ATTN_NORM_W || i == LBLOCK_MLP_NORM_W;
        int proj = i == LBLOCK_O_W || i == LBLOCK_DOWN_W;
        snprintf(name, sizeof name, "%s%s", prefix, suffix[i]);
        param_maker_add(pm, name, norm ? 1 : 2, shapes[i], norm ? INIT_ONE : INIT_NORMAL, 0,
                        norm   ? 0
                        : proj ? proj_std
                               : std);
    }
}

size_t lblock_param_count(size_t H, size_t KV, size_t F) {
    return 2 * H + 2 * H * H + 2 * KV * H + 3 * F * H;
}

/* ---------------------------------------------------------------- work estimates */

static size_t kv_width(const TBlock *t) {
    return t->kv_heads * (t->H / t->heads);
}

/* --elementwise eager: the bytes a row (token) of a Llama block's memory-bound ops moves and the
 * kernels they launch, as eager PyTorch runs torchtitan's model (torchtitan/models/llama/model.py
 * and models/norms.py at 9dec370, the commit of its H100 benchmark); E bytes an element of the
 * compute dtype, 4 of an fp32 temporary, each kernel reading its inputs and writing its output:
 * - each RMSNorm, (x.float() * rsqrt(pow(2).mean(-1) + eps)).type_as(x) * weight, over H:
 *   x.float() E + 4, pow 4 + 4, mean 4, the product 4 + 4, type_as 4 + E, the weight's E + E;
 *   8 kernels (+ eps and rsqrt over one value a row among them);
 * - RoPE on q (H) and k (KV): x.float() E + 4, the complex product 4 + 4, type_as 4 + E; 3
 *   kernels each;
 * - repeat_kv (kv_heads < heads): k and v copied to every query head, E over KV read and E over
 *   H written, each; 2 kernels;
 * - the two residual adds, 3E over H each; SwiGLU's silu (2E) and product (3E) over F.
 * SDPA reads q, k and v where they are and writes its output in the layout the transpose back
 * finds contiguous: no copy. Backward is charged twice the forward, as the fused ops are. */
typedef struct EagerOps {
    double bytes_per_row;
    int kernels;
} EagerOps;

static EagerOps eager_ops(const TBlock *t) {
    const double E = (double)dtype_size(t->dtype), H = (double)t->H, F = (double)t->F,
                 KV = (double)kv_width(t);
    const int repeats = t->kv_heads < t->heads;
    return (EagerOps){.bytes_per_row = 2 * (28 + 4 * E) * H + (16 + 2 * E) * (H + KV) +
                                       (repeats ? 2 * E * (KV + H) : 0) + 2 * 3 * E * H + 5 * E * F,
                      .kernels = 2 * 8 + 2 * 3 + (repeats ? 2 : 0) + 2 + 2};
}

/* Kernels: lblock's forward op calls (15) and its backward's (24, a Linear's backward two
 * GEMMs); eager, the 7 GEMMs (14 backward) and attention beside eager_ops' kernels (twice those
 * backward). */
static void lblock_work(const TBlock *t, Work *w, WorkKind kind) {
    double M = (double)(t->B * t->T), H = (double)t->H, F = (double)t->F;
    double KV = (double)kv_width(t), T = (double)t->T, B = (double)t->B;
    double probs = 2 * B * (double)t->heads * T * T, E = (double)dtype_size(t->dtype);
    const EagerOps eager = eager_ops(t);
    double elementwise =
        t->eager_elementwise ? M * eager.bytes_per_row : E * M * (10 * H + 2 * KV + 4 * F);
    double bytes = elementwise + (t->flash ? 0 : E * probs);
    double passes = kind == WORK_BACKWARD ? 2.0 : 1.0;
    work_begin(w, kind);
    work_linear(w, kind, M, H, H);  /* q */
    work_linear(w, kind, M, H, KV); /* k */
    work_linear(w, kind, M, H, KV); /* v */
    work_linear(w, kind, M, H, H);  /* o */
    work_linear(w, kind, M, H, F);  /* gate */
    work_linear(w, kind, M, H, F);  /* up */
    work_linear(w, kind, M, F, H);  /* down */
    w->attention_flops = tblock_attention_flops(t, kind);
    w->flops += w->attention_flops;
    w->bytes = bytes * passes;
    if (t->eager_elementwise)
        w->kernels = kind == WORK_BACKWARD ? 14 + 1 + 2 * eager.kernels : 7 + 1 + eager.kernels;
    else
        w->kernels = kind == WORK_BACKWARD ? 24 : 15;
}

/* ---------------------------------------------------------------- forward */

/* What the forward keeps, and its output, in the order the computation makes them. */
static int take_acts(const TBlock *t, BlockActs *a, void **out, Err *err) {
    Device *d = t->dev;
    size_t M = t->B * t->T, H = t->H, F = t->F, KV = kv_width(t);
    a->ln1 = act_take(d, t->dtype, M * H), a->ln1_rstd = act_take(d, DTYPE_FP32, M);
    a->q = act_take(d, t->dtype, M * H), a->k = act_take(d, t->dtype, M * KV),
    a->v = act_take(d, t->dtype, M * KV);
    void **scores = tblock_take_scores(t, a);
    a->attn = act_take(d, t->dtype, M * H), a->mid = act_take(d, t->dtype, M * H);
    a->ln2 = act_take(d, t->dtype, M * H), a->ln2_rstd = act_take(d, DTYPE_FP32, M);
    a->gate = act_take(d, t->dtype, M * F), a->up = act_take(d, t->dtype, M * F),
    a->swiglu = act_take(d, t->dtype, M * F);
    *out = act_take(d, t->dtype, M * H);
    return act_check_taken((void *[]){a->ln1, a->ln1_rstd, a->q, a->k, a->v, *scores, a->attn,
                                      a->mid, a->ln2, a->ln2_rstd, a->gate, a->up, a->swiglu, *out},
                           14, M, err);
}

static void attention_forward(const TBlock *t, BlockActs *a) {
    const Kernels *k = t->k;
    size_t H = t->H, KV = kv_width(t), D = H / t->heads;
    k->rope_forward(t->dtype, a->q, t->B, t->T, t->heads, D, TBLOCK_ROPE_THETA);
    k->rope_forward(t->dtype, a->k, t->B, t->T, t->kv_heads, D, TBLOCK_ROPE_THETA);
    AttnShape s = tblock_attn_shape(t, H, KV);
    if (t->flash)
        k->flash_attention_forward(t->dtype, a->attn, a->lse, a->q, a->k, a->v, &s);
    else
        k->gqa_attention_forward(t->dtype, a->attn, a->probs, a->q, a->k, a->v, &s);
}

static void compute_forward(const TBlock *t, BlockActs *a, void *const *p, const void *x,
                            void *out) {
    const Kernels *k = t->k;
    size_t M = t->B * t->T, H = t->H, F = t->F, KV = kv_width(t);
    k->rmsnorm_forward(t->dtype, a->ln1, a->ln1_rstd, x, p[LBLOCK_ATTN_NORM_W], M, H, t->ln_eps);
    k->linear_forward(t->dtype, a->q, a->ln1, p[LBLOCK_Q_W], NULL, M, H, H);
    k->linear_forward(t->dtype, a->k, a->ln1, p[LBLOCK_K_W], NULL, M, H, KV);
    k->linear_forward(t->dtype, a->v, a->ln1, p[LBLOCK_V_W], NULL, M, H, KV);
    attention_forward(t, a);
    k->linear_forward(t->dtype, a->mid, a->attn, p[LBLOCK_O_W], NULL, M, H, H);
    k->add(t->dtype, a->mid, a->mid, x, M * H);
    k->rmsnorm_forward(t->dtype, a->ln2, a->ln2_rstd, a->mid, p[LBLOCK_MLP_NORM_W], M, H,
                       t->ln_eps);
    k->linear_forward(t->dtype, a->gate, a->ln2, p[LBLOCK_GATE_W], NULL, M, H, F);
    k->linear_forward(t->dtype, a->up, a->ln2, p[LBLOCK_UP_W], NULL, M, H, F);
    k->swiglu_forward(t->dtype, a->swiglu, a->gate, a->up, M * F);
    k->linear_forward(t->dtype, out, a->swiglu, p[LBLOCK_DOWN_W], NULL, M, F, H);
    k->add(t->dtype, out, out, a->mid,
           M * H); /* a plain add, as GPT's block ends (tblock.c says why) */
}

static int lblock_forward(const TBlock *t, BlockActs *a, void *const *p, const void *x, void **out,
                          Work *w, Err *err) {
    int rc = take_acts(t, a, out, err);
    lblock_work(t, w, WORK_FORWARD);
    if (rc || t->B * t->T == 0) return rc;
    compute_forward(t, a, p, x, *out);
    return 0;
}

/* ---------------------------------------------------------------- backward */

/* The temporaries of a backward, taken together and released together. */
typedef struct LTemps {
    void *df1, *df2; /* [M, F]: d(swiglu) then d(gate); d(up) */
    void *dh, *dh2;  /* [M, H]: gradients of a norm's output, summed from several GEMMs */
    void *dq, *dk, *dv;
    void *work; /* flash: one pair's probabilities (fp32) */
} LTemps;

static int take_temps(const TBlock *t, LTemps *m, Err *err) {
    Device *d = t->dev;
    size_t M = t->B * t->T, H = t->H, F = t->F, KV = kv_width(t);
    m->df1 = act_take(d, t->dtype, M * F), m->df2 = act_take(d, t->dtype, M * F);
    m->dh = act_take(d, t->dtype, M * H), m->dh2 = act_take(d, t->dtype, M * H);
    m->dq = act_take(d, t->dtype, M * H), m->dk = act_take(d, t->dtype, M * KV),
    m->dv = act_take(d, t->dtype, M * KV);
    m->work = tblock_take_flash_work(t);
    void *taken[] = {m->df1, m->df2, m->dh, m->dh2, m->dq, m->dk, m->dv, m->work};
    /* the work tile: flash's only, on a table whose backward uses one */
    return act_check_taken(taken, tblock_needs_flash_work(t) ? 8 : 7, M, err);
}

static void release_temps(const TBlock *t, LTemps *m) {
    void **all[] = {&m->df1, &m->df2, &m->dh, &m->dh2, &m->dq, &m->dk, &m->dv, &m->work};
    for (size_t i = 0; i < sizeof all / sizeof *all; i++) act_release(t->dev, all[i]);
}

/* MLP branch: out = mid + down(silu(gate(n2)) * up(n2)), n2 = RMSNorm(mid); dy becomes
 * dL/d(mid). */
static void mlp_backward(const TBlock *t, const BlockActs *a, void *const *p, float *const *g,
                         void *dy, LTemps *m) {
    const Kernels *k = t->k;
    size_t M = t->B * t->T, H = t->H, F = t->F;
    k->linear_backward(t->dtype, m->df1, g[LBLOCK_DOWN_W], NULL, dy, a->swiglu, p[LBLOCK_DOWN_W], M,
                       F, H);
    k->swiglu_backward(t->dtype, m->df1, m->df2, m->df1, a->gate, a->up, M * F);
    k->linear_backward(t->dtype, m->dh, g[LBLOCK_GATE_W], NULL, m->df1, a->ln2, p[LBLOCK_GATE_W], M,
                       H, F);
    k->linear_backward(t->dtype, m->dh2, g[LBLOCK_UP_W], NULL, m->df2, a->ln2, p[LBLOCK_UP_W], M, H,
                       F);
    k->add(t->dtype, m->dh, m->dh, m->dh2, M * H);
    k->rmsnorm_backward(t->dtype, dy, g[LBLOCK_MLP_NORM_W], m->dh, a->mid, a->ln2_rstd,
                        p[LBLOCK_MLP_NORM_W], M, H);
}

/* Attention branch: mid = x + o_proj(attention(rope(q), rope(k), v)) over n1 = RMSNorm(x);
 * dy becomes dL/dx. RoPE's backward turns dq and dk back. */
static void attention_branch_backward(const TBlock *t, const BlockActs *a, void *const *p,
                                      float *const *g, const void *x, void *dy, LTemps *m) {
    const Kernels *k = t->k;
    size_t M = t->B * t->T, H = t->H, KV = kv_width(t), D = H / t->heads;
    k->linear_backward(t->dtype, m->dh, g[LBLOCK_O_W], NULL, dy, a->attn, p[LBLOCK_O_W], M, H, H);
    AttnShape s = tblock_attn_shape(t, H, KV);
    if (t->flash)
        k->flash_attention_backward(t->dtype, m->dq, m->dk, m->dv, m->dh, a->q, a->k, a->v, a->attn,
                                    a->lse, m->work, &s);
    else
        k->gqa_attention_backward(t->dtype, m->dq, m->dk, m->dv, m->dh, a->q, a->k, a->v, a->probs,
                                  &s);
    k->rope_backward(t->dtype, m->dq, t->B, t->T, t->heads, D, TBLOCK_ROPE_THETA);
    k->rope_backward(t->dtype, m->dk, t->B, t->T, t->kv_heads, D, TBLOCK_ROPE_THETA);
    k->linear_backward(t->dtype, m->dh, g[LBLOCK_Q_W], NULL, m->dq, a->ln1, p[LBLOCK_Q_W], M, H, H);
    k->linear_backward(t->dtype, m->dh2, g[LBLOCK_K_W], NULL, m->dk, a->ln1, p[LBLOCK_K_W], M, H,
                       KV);
    k->add(t->dtype, m->dh, m->dh, m->dh2, M * H);
    k->linear_backward(t->dtype, m->dh2, g[LBLOCK_V_W], NULL, m->dv, a->ln1, p[LBLOCK_V_W], M, H,
                       KV);
    k->add(t->dtype, m->dh, m->dh, m->dh2, M * H);
    k->rmsnorm_backward(t->dtype, dy, g[LBLOCK_ATTN_NORM_W], m->dh, x, a->ln1_rstd,
                        p[LBLOCK_ATTN_NORM_W], M, H);
}

static int lblock_backward(const TBlock *t, BlockActs *a, void *const *p, float *const *g,
                           void **input, void *dy, Work *w, Err *err) {
    LTemps m = {0};
    int rc = take_temps(t, &m, err);
    lblock_work(t, w, WORK_BACKWARD);
    if (!rc && t->B * t->T > 0) {
        mlp_backward(t, a, p, g, dy, &m);
        attention_branch_backward(t, a, p, g, *input, dy, &m);
    }
    release_temps(t, &m);
    tblock_release(t, a);
    act_release(t->dev, input);
    return rc;
}

/* ---------------------------------------------------------------- selective checkpointing */

/* AC_OPS keeps, beside the input, the outputs of the block's 1st, 3rd and 5th GEMMs (q, v,
 * gate) and attention's (its output and statistics), as torchtitan's op policy saves every
 * other matmul's and SDPA's; the 7th's (down), which torchtitan saves too, no backward reads:
 * the forward adds it into the block's output in place (AC_TORCHTITAN holds its bytes). q is
 * kept after RoPE, which it rotates in place: the same bytes, one rotation less to redo. The
 * rest, norms, the k, o and up GEMMs, RoPE on k, the residual add and SwiGLU, is recomputed
 * before backward, by the forward's kernels on the forward's inputs: the same bits. */
static void release_recomputed(const TBlock *t, BlockActs *a) {
    void **all[] = {&a->ln1, &a->ln1_rstd, &a->k,  &a->mid,
                    &a->ln2, &a->ln2_rstd, &a->up, &a->swiglu};
    for (size_t i = 0; i < sizeof all / sizeof *all; i++) act_release(t->dev, all[i]);
}

/* Three GEMMs, and the traffic of the two norms (x, mid read, their outputs written), RoPE on k,
 * the add (three tensors) and SwiGLU (three): eight kernels. Eager (torchtitan's policy saves no
 * elementwise op's output), every memory-bound op of the forward again, eager_ops' bytes. */
static void recompute_ops_work(const TBlock *t, Work *w) {
    double M = (double)(t->B * t->T), H = (double)t->H, F = (double)t->F, KV = (double)kv_width(t);
    work_begin(w, WORK_FORWARD);
    work_linear(w, WORK_FORWARD, M, H, KV); /* k */
    work_linear(w, WORK_FORWARD, M, H, H);  /* o */
    work_linear(w, WORK_FORWARD, M, H, F);  /* up */
    w->bytes = (double)dtype_size(t->dtype) * M * (7 * H + 2 * KV + 3 * F);
    w->kernels = 8;
    if (t->eager_elementwise) {
        const EagerOps eager = eager_ops(t);
        w->bytes = M * eager.bytes_per_row;
        w->kernels = 3 + eager.kernels;
    }
}

static int recompute_ops(const TBlock *t, BlockActs *a, void *const *p, const void *x, Work *w,
                         Err *err) {
    Device *d = t->dev;
    const Kernels *k = t->k;
    size_t M = t->B * t->T, H = t->H, F = t->F, KV = kv_width(t), D = H / t->heads;
    a->ln1 = act_take(d, t->dtype, M * H), a->ln1_rstd = act_take(d, DTYPE_FP32, M);
    a->k = act_take(d, t->dtype, M * KV), a->mid = act_take(d, t->dtype, M * H);
    a->ln2 = act_take(d, t->dtype, M * H), a->ln2_rstd = act_take(d, DTYPE_FP32, M);
    a->up = act_take(d, t->dtype, M * F), a->swiglu = act_take(d, t->dtype, M * F);
    recompute_ops_work(t, w);
    int rc = act_check_taken(
        (void *[]){a->ln1, a->ln1_rstd, a->k, a->mid, a->ln2, a->ln2_rstd, a->up, a->swiglu}, 8, M,
        err);
    if (rc || M == 0) return rc;
    k->rmsnorm_forward(t->dtype, a->ln1, a->ln1_rstd, x, p[LBLOCK_ATTN_NORM_W], M, H, t->ln_eps);
    k->linear_forward(t->dtype, a->k, a->ln1, p[LBLOCK_K_W], NULL, M, H, KV);
    k->rope_forward(t->dtype, a->k, t->B, t->T, t->kv_heads, D, TBLOCK_ROPE_THETA);
    k->linear_forward(t->dtype, a->mid, a->attn, p[LBLOCK_O_W], NULL, M, H, H);
    k->add(t->dtype, a->mid, a->mid, x, M * H);
    k->rmsnorm_forward(t->dtype, a->ln2, a->ln2_rstd, a->mid, p[LBLOCK_MLP_NORM_W], M, H,
                       t->ln_eps);
    k->linear_forward(t->dtype, a->up, a->ln2, p[LBLOCK_UP_W], NULL, M, H, F);
    k->swiglu_forward(t->dtype, a->swiglu, a->gate, a->up, M * F);
    return 0;
}

const BlockKind llama_block = {.work = lblock_work,
                               .forward = lblock_forward,
                               .backward = lblock_backward,
                               .release_recomputed = release_recomputed,
                               .recompute_ops = recompute_ops,
                               .grouped_kv = 1,
                               .gemms = 7};
