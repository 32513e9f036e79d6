/* dtype_kernels: every op of kernels_cpu that takes a compute dtype, in bf16 and fp16, against its
 * own fp32 form: the rounding points bit for bit, the distance from fp32 on unrounded inputs, and
 * what a strided op does not own left alone (DESIGN's invariant 6). */
#include <criterion/criterion.h>
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/kernels.h"
#include "tests/util.h"

static const Kernels *K = &kernels_cpu;

/* How far an op in t may be from fp32 on the unrounded inputs, relative L2 over each output.
 * Rounding an input or an output costs half an ulp, 2^-9 (2e-3) in bf16 and 2^-12 (2.4e-4) in
 * fp16; the bounds leave 5 to 8 times that for what an op's arithmetic amplifies (the
 * cancellations of norms' and attention's backward). */
static const double TOL_BF16 = 1e-2, TOL_FP16 = 2e-3;

/* What an output holds before an op that overwrites it: exact in bf16 and fp16, far from any
 * result, and not zero (a narrowing that writes a whole span writes zeros where it owns none). */
static const float SENTINEL = -1536.0f;

enum { MAX_BUFS = 8, MAX_REGIONS = 3 };

/* A tensor of an op: an array of the compute dtype t, of fp32 whatever t is, or of int32. */
typedef enum { ACT, F32, I32 } Kind;
/* READ: an input. WRITE: overwritten. UPDATE: read and written ("+=", or in place). SCRATCH: the
 * caller's room (flash backward's work), no result. */
typedef enum { READ, WRITE, UPDATE, SCRATCH } Role;

typedef struct Buf {
    const char *name;
    Kind kind;
    Role role;
    size_t n; /* elements */
} Buf;

/* The part of buffer `buf` an op writes when it writes only part: `rows` rows of `width`
 * elements, `stride` apart, from element `off`. */
typedef struct Region {
    int buf;
    size_t off, rows, width, stride;
} Region;

/* Runs the op at compute dtype t on buffers p (arrays of t where the op takes t); returns its
 * result (a loss, a count; 0: none). */
typedef double (*CallFn)(const Kernels *k, DType t, void *const *p);

typedef struct Case {
    const char *op, *variant;
    Buf buf[MAX_BUFS];
    int nbuf;
    CallFn call;
    /* Where the op in t rounds between its steps (residual_layernorm_forward's sum): the fp32
     * computation it must match, given fp32 buffers and t. NULL: call at fp32. */
    CallFn ref;
    /* Inputs that follow from others (statistics, probabilities, labels), computed from the
     * unrounded draws before t rounds them. */
    void (*prepare)(float *const *h);
    Region written[MAX_REGIONS]; /* outputs written in part; any other is written whole */
    int nwritten;
    float range; /* inputs drawn uniform in [-range, range] (0: 1) */
    int returns; /* the result is the op's (loss, count), not 0 */
} Case;

#define A_IN(name, n)                                                                              \
    { name, ACT, READ, (n) }
#define A_OUT(name, n)                                                                             \
    { name, ACT, WRITE, (n) }
#define A_ADD(name, n)                                                                             \
    { name, ACT, UPDATE, (n) }
#define F_IN(name, n)                                                                              \
    { name, F32, READ, (n) }
#define F_OUT(name, n)                                                                             \
    { name, F32, WRITE, (n) }
#define F_ADD(name, n)                                                                             \
    { name, F32, UPDATE, (n) }
#define IDS(name, n)                                                                               \
    { name, I32, READ, (n) }
#define WORK(name, n)                                                                              \
    { name, F32, SCRATCH, (n) }
#define BUFS(...) .buf = {__VA_ARGS__}, .nbuf = (int)(sizeof((Buf[]){__VA_ARGS__}) / sizeof(Buf))
#define WRITTEN(...)                                                                               \
    .written = {__VA_ARGS__}, .nwritten = (int)(sizeof((Region[]){__VA_ARGS__}) / sizeof(Region))

/* ---- shapes: small, every dimension of an op distinct ---- */

enum { NE = 23 };                                    /* elementwise ops, the toy */
enum { LM = 6, LK = 8, LN = 7 };                     /* linear: rows, in, out */
enum { GR = 6, GC = 5, GS = 9, GO = 3 };             /* bias_grad: rows, cols, stride, column */
enum { NM = 6, NC = 9 };                             /* norms: rows, width */
enum { AB = 2, AT = 5, AC = 8, AH = 2, AC_ODD = 7 }; /* attention; 7 columns: 2 heads use 6 */
enum { PB = 2, PS = 6, PP = 3 };                     /* patchify: batch, side, patch */
enum { EB = 2, ET = 5, EC = 6 };                     /* embed: batch, tokens, width */
enum { CB = 2, CT = 4, CC = 7 };                     /* class token: batch, tokens, width */
enum { XB = 6, XK = 9 };                             /* cross-entropy: rows, classes */
enum { TB = 2, TT = 4, TC = 6, TV = 7 };             /* token embedding, V the vocabulary */
enum { BM = 6, BN = 9 };                             /* bias + GELU: rows, columns */
enum { RB = 2, RT = 4, RH = 2, RDIM = 6 };           /* RoPE: batch, tokens, heads, head dim */
/* GQA and flash: q, k and v packed in rows of QROW as a fused projection leaves them, with
 * QPAD columns no head owns, so backward's dq, dk and dv are strided with gaps between. */
enum { QB = 2, QT = 4, QH = 2, QKVH = 1, QD = 4, QPAD = 3 };
enum { QROW = (QH + 2 * QKVH) * QD + QPAD, QK_AT = QH * QD, QV_AT = (QH + QKVH) * QD };

enum { L_OUT = LM * LN, L_IN = LM * LK, L_W = LN * LK, G_DOUT = GR * GS, N_X = NM * NC };
enum { A_X = AB * AT * AC, A_QKV = 3 * A_X, A_PROBS = AB * AH * AT * AT, A_ROWS = AB * AT };
enum { A_X_ODD = AB * AT * AC_ODD, A_QKV_ODD = 3 * A_X_ODD, A_USED_ODD = AH * (AC_ODD / AH) };
enum { P_N = PB * PS * PS, E_X = EB * ET * EC, E_PATCHES = EB * (ET - 1) * EC, E_POS = ET * EC };
enum { C_X = CB * CT * CC, C_OUT = CB * CC, X_LOGITS = XB * XK, B_X = BM * BN };
enum { T_X = TB * TT * TC, T_IDS = TB * TT, T_WTE = TV * TC, T_WPE = TT * TC };
enum { R_X = RB * RT * RH * RDIM, Q_ROWS = QB * QT, Q_PACKED = Q_ROWS * QROW };
enum { Q_OUT = Q_ROWS * QH * QD, Q_PROBS = QB * QH * QT * QT, Q_LSE = QB * QH * QT };

static const float EPS = 1e-5f, THETA = 10000.0f;
static const AttnShape gqa = {QB, QT, QH, QKVH, QD, QROW, QROW, 1};

/* ---- the calls, one per case ---- */

static double call_toy_forward(const Kernels *k, DType t, void *const *p) {
    k->toy_forward(t, p[0], p[1], p[2], NE);
    return 0;
}
static double call_toy_backward(const Kernels *k, DType t, void *const *p) {
    k->toy_backward(t, p[0], p[1], p[2], p[3], p[4], NE);
    return 0;
}
static double call_mse_loss(const Kernels *k, DType t, void *const *p) {
    return k->mse_loss(t, p[0], p[1], p[2], NE);
}
static double call_linear_forward(const Kernels *k, DType t, void *const *p) {
    k->linear_forward(t, p[0], p[1], p[2], p[3], LM, LK, LN);
    return 0;
}
static double call_linear_backward(const Kernels *k, DType t, void *const *p) {
    k->linear_backward(t, p[0], p[1], p[2], p[3], p[4], p[5], LM, LK, LN);
    return 0;
}
static double call_bias_grad(const Kernels *k, DType t, void *const *p) {
    k->bias_grad(t, p[0], dtype_at(p[1], t, GO), GR, GC, GS);
    return 0;
}
static double call_layernorm_forward(const Kernels *k, DType t, void *const *p) {
    k->layernorm_forward(t, p[0], p[1], p[2], p[3], p[4], p[5], NM, NC, EPS);
    return 0;
}
static double call_layernorm_backward(const Kernels *k, DType t, void *const *p) {
    k->layernorm_backward(t, p[0], p[1], p[2], p[3], p[4], p[5], p[6], p[7], NM, NC);
    return 0;
}
static double call_gelu_forward(const Kernels *k, DType t, void *const *p) {
    k->gelu_forward(t, p[0], p[1], NE);
    return 0;
}
static double call_gelu_backward(const Kernels *k, DType t, void *const *p) {
    k->gelu_backward(t, p[0], p[1], p[2], NE);
    return 0;
}
static double call_attention_forward(const Kernels *k, DType t, void *const *p) {
    k->attention_forward(t, p[0], p[1], p[2], AB, AT, AC, AH);
    return 0;
}
static double call_attention_forward_odd(const Kernels *k, DType t, void *const *p) {
    k->attention_forward(t, p[0], p[1], p[2], AB, AT, AC_ODD, AH);
    return 0;
}
static double call_attention_backward(const Kernels *k, DType t, void *const *p) {
    k->attention_backward(t, p[0], p[1], p[2], p[3], AB, AT, AC, AH);
    return 0;
}
static double call_attention_backward_odd(const Kernels *k, DType t, void *const *p) {
    k->attention_backward(t, p[0], p[1], p[2], p[3], AB, AT, AC_ODD, AH);
    return 0;
}
static double call_patchify(const Kernels *k, DType t, void *const *p) {
    k->patchify(t, p[0], p[1], PB, PS, PP);
    return 0;
}
static double call_embed_forward(const Kernels *k, DType t, void *const *p) {
    k->embed_forward(t, p[0], p[1], p[2], p[3], EB, ET, EC);
    return 0;
}
static double call_embed_backward(const Kernels *k, DType t, void *const *p) {
    k->embed_backward(t, p[0], p[1], p[2], p[3], EB, ET, EC);
    return 0;
}
static double call_class_token_select(const Kernels *k, DType t, void *const *p) {
    k->class_token_select(t, p[0], p[1], CB, CT, CC);
    return 0;
}
static double call_class_token_select_backward(const Kernels *k, DType t, void *const *p) {
    k->class_token_select_backward(t, p[0], p[1], CB, CT, CC);
    return 0;
}
static double call_cross_entropy(const Kernels *k, DType t, void *const *p) {
    return k->cross_entropy(t, p[0], p[1], p[2], XB, XK, 0.5f);
}
static double call_count_correct(const Kernels *k, DType t, void *const *p) {
    return (double)k->count_correct(t, p[0], p[1], XB, XK);
}
static double call_add(const Kernels *k, DType t, void *const *p) {
    k->add(t, p[0], p[1], p[2], NE);
    return 0;
}
static double call_causal_attention_forward(const Kernels *k, DType t, void *const *p) {
    k->causal_attention_forward(t, p[0], p[1], p[2], AB, AT, AC, AH);
    return 0;
}
static double call_token_embed_forward(const Kernels *k, DType t, void *const *p) {
    k->token_embed_forward(t, p[0], p[1], p[2], p[3], TB, TT, TC, TV);
    return 0;
}
static double call_token_embed_backward(const Kernels *k, DType t, void *const *p) {
    k->token_embed_backward(t, p[0], p[1], p[2], p[3], TB, TT, TC, TV);
    return 0;
}
static double call_bias_gelu_forward(const Kernels *k, DType t, void *const *p) {
    k->bias_gelu_forward(t, p[0], p[1], p[2], BM, BN);
    return 0;
}
static double call_bias_gelu_backward(const Kernels *k, DType t, void *const *p) {
    k->bias_gelu_backward(t, p[0], p[1], p[2], p[3], p[4], BM, BN);
    return 0;
}
static double call_residual_layernorm_forward(const Kernels *k, DType t, void *const *p) {
    k->residual_layernorm_forward(t, p[0], p[1], p[2], p[3], p[4], p[5], p[6], p[7], NM, NC, EPS);
    return 0;
}
/* kernels.h's exception: in t the sum is rounded as it is stored and LayerNorm reads the stored
 * sum, as add then layernorm_forward would */
static double ref_residual_layernorm_forward(const Kernels *k, DType t, void *const *p) {
    float *sum = p[0];
    k->add(DTYPE_FP32, sum, p[4], p[5], N_X);
    for (size_t i = 0; i < N_X; i++) sum[i] = dtype_round(t, sum[i]);
    k->layernorm_forward(DTYPE_FP32, p[1], p[2], p[3], sum, p[6], p[7], NM, NC, EPS);
    return 0;
}
static double call_rmsnorm_forward(const Kernels *k, DType t, void *const *p) {
    k->rmsnorm_forward(t, p[0], p[1], p[2], p[3], NM, NC, EPS);
    return 0;
}
static double call_rmsnorm_backward(const Kernels *k, DType t, void *const *p) {
    k->rmsnorm_backward(t, p[0], p[1], p[2], p[3], p[4], p[5], NM, NC);
    return 0;
}
static double call_swiglu_forward(const Kernels *k, DType t, void *const *p) {
    k->swiglu_forward(t, p[0], p[1], p[2], NE);
    return 0;
}
static double call_swiglu_backward(const Kernels *k, DType t, void *const *p) {
    k->swiglu_backward(t, p[0], p[1], p[2], p[3], p[4], NE);
    return 0;
}
static double call_rope_forward(const Kernels *k, DType t, void *const *p) {
    k->rope_forward(t, p[0], RB, RT, RH, RDIM, THETA);
    return 0;
}
static double call_rope_backward(const Kernels *k, DType t, void *const *p) {
    k->rope_backward(t, p[0], RB, RT, RH, RDIM, THETA);
    return 0;
}
/* q, k and v (and dq, dk, dv) are columns of one packed buffer */
static double call_gqa_attention_forward(const Kernels *k, DType t, void *const *p) {
    k->gqa_attention_forward(t, p[0], p[1], p[2], dtype_at(p[2], t, QK_AT),
                             dtype_at(p[2], t, QV_AT), &gqa);
    return 0;
}
static double call_gqa_attention_backward(const Kernels *k, DType t, void *const *p) {
    k->gqa_attention_backward(t, p[0], dtype_at(p[0], t, QK_AT), dtype_at(p[0], t, QV_AT), p[1],
                              p[2], dtype_at(p[2], t, QK_AT), dtype_at(p[2], t, QV_AT), p[3], &gqa);
    return 0;
}
static double call_flash_attention_forward(const Kernels *k, DType t, void *const *p) {
    k->flash_attention_forward(t, p[0], p[1], p[2], dtype_at(p[2], t, QK_AT),
                               dtype_at(p[2], t, QV_AT), &gqa);
    return 0;
}
static double call_flash_attention_backward(const Kernels *k, DType t, void *const *p) {
    k->flash_attention_backward(t, p[0], dtype_at(p[0], t, QK_AT), dtype_at(p[0], t, QV_AT), p[1],
                                p[2], dtype_at(p[2], t, QK_AT), dtype_at(p[2], t, QV_AT), p[3],
                                p[4], p[5], &gqa);
    return 0;
}

/* ---- inputs that follow from others, in fp32 from the unrounded draws ---- */

/* mean and rstd of `in` (h[4]) */
static void prepare_layernorm_backward(float *const *h) {
    float *out = host_floats(N_X), *b = host_zeros(NC);
    K->layernorm_forward(DTYPE_FP32, out, h[5], h[6], h[4], h[7], b, NM, NC, EPS);
    free_floats((float *[]){out, b}, 2);
}
static void prepare_rmsnorm_backward(float *const *h) {
    float *out = host_floats(N_X);
    K->rmsnorm_forward(DTYPE_FP32, out, h[4], h[3], h[5], NM, NC, EPS);
    free(out);
}
/* probs of qkv (h[2]) */
static void prepare_attention_backward(float *const *h) {
    float *out = host_floats(A_X);
    K->attention_forward(DTYPE_FP32, out, h[3], h[2], AB, AT, AC, AH);
    free(out);
}
static void prepare_attention_backward_odd(float *const *h) {
    float *out = host_floats(A_X_ODD);
    K->attention_forward(DTYPE_FP32, out, h[3], h[2], AB, AT, AC_ODD, AH);
    free(out);
}
static void prepare_gqa_attention_backward(float *const *h) {
    float *out = host_floats(Q_OUT);
    call_gqa_attention_forward(K, DTYPE_FP32, (void *[]){out, h[3], h[2]});
    free(out);
}
/* out and lse of qkv */
static void prepare_flash_attention_backward(float *const *h) {
    call_flash_attention_forward(K, DTYPE_FP32, (void *[]){h[3], h[4], h[2]});
}
/* labels in [0, XK) */
static void prepare_cross_entropy(float *const *h) {
    int32_t *labels = (int32_t *)h[2];
    for (int i = 0; i < XB; i++) labels[i] = (i * 4 + 1) % XK;
}
/* every other row labelled with its largest logit, so that some rows count and some do not */
static void prepare_count_correct(float *const *h) {
    const float *logits = h[0];
    int32_t *labels = (int32_t *)h[1];
    for (int i = 0; i < XB; i++) {
        int best = 0;
        for (int j = 1; j < XK; j++)
            if (logits[i * XK + j] > logits[i * XK + best]) best = j;
        labels[i] = i % 2 ? (best + 1) % XK : best;
    }
}
/* token ids in [0, TV), the last repeating the first (its row of dwte takes two gradients) */
static void fill_tokens(int32_t *ids) {
    for (int i = 0; i < T_IDS; i++) ids[i] = (i * 5 + 2) % TV;
    ids[T_IDS - 1] = ids[0];
}
static void prepare_token_embed_forward(float *const *h) {
    fill_tokens((int32_t *)h[1]);
}
static void prepare_token_embed_backward(float *const *h) {
    fill_tokens((int32_t *)h[2]);
}

/* ---- the cases: every op that takes a compute dtype ---- */

/* dq, dk and dv's columns of the packed gradient buffer 0 */
#define QKV_GRADS                                                                                  \
    WRITTEN({0, 0, Q_ROWS, QH * QD, QROW}, {0, QK_AT, Q_ROWS, QKVH * QD, QROW},                    \
            {0, QV_AT, Q_ROWS, QKVH * QD, QROW})

static const Case cases[] = {
    {.op = "toy_forward",
     BUFS(A_IN("w", 3), A_IN("x", NE), A_OUT("y", NE)),
     .call = call_toy_forward,
     .range = 1.5f},
    {.op = "toy_backward",
     BUFS(A_IN("w", 3), A_IN("x", NE), A_IN("dy", NE), A_OUT("dx", NE), F_ADD("dw", 3)),
     .call = call_toy_backward,
     .range = 1.5f},
    {.op = "mse_loss",
     BUFS(A_IN("y", NE), F_IN("target", NE), A_OUT("dy", NE)),
     .call = call_mse_loss,
     .returns = 1},
    {.op = "linear_forward",
     BUFS(A_OUT("out", L_OUT), A_IN("in", L_IN), A_IN("w", L_W), A_IN("b", LN)),
     .call = call_linear_forward},
    {.op = "linear_backward",
     BUFS(A_OUT("din", L_IN), F_ADD("dw", L_W), F_ADD("db", LN), A_IN("dout", L_OUT),
          A_IN("in", L_IN), A_IN("w", L_W)),
     .call = call_linear_backward},
    {.op = "bias_grad", BUFS(F_ADD("db", GC), A_IN("dout", G_DOUT)), .call = call_bias_grad},
    {.op = "layernorm_forward",
     BUFS(A_OUT("out", N_X), F_OUT("mean", NM), F_OUT("rstd", NM), A_IN("in", N_X), A_IN("w", NC),
          A_IN("b", NC)),
     .call = call_layernorm_forward},
    {.op = "layernorm_backward",
     BUFS(A_ADD("din", N_X), F_ADD("dw", NC), F_ADD("db", NC), A_IN("dout", N_X), A_IN("in", N_X),
          F_IN("mean", NM), F_IN("rstd", NM), A_IN("w", NC)),
     .call = call_layernorm_backward,
     .prepare = prepare_layernorm_backward},
    {.op = "gelu_forward",
     BUFS(A_OUT("out", NE), A_IN("in", NE)),
     .call = call_gelu_forward,
     .range = 3},
    {.op = "gelu_backward",
     BUFS(A_OUT("din", NE), A_IN("in", NE), A_IN("dout", NE)),
     .call = call_gelu_backward,
     .range = 3},
    {.op = "attention_forward",
     BUFS(A_OUT("out", A_X), A_OUT("probs", A_PROBS), A_IN("qkv", A_QKV)),
     .call = call_attention_forward},
    /* 7 columns over 2 heads: D = 3, the 7th column of out is no head's */
    {.op = "attention_forward",
     .variant = "C not a multiple of heads",
     BUFS(A_OUT("out", A_X_ODD), A_OUT("probs", A_PROBS), A_IN("qkv", A_QKV_ODD)),
     .call = call_attention_forward_odd,
     WRITTEN({0, 0, A_ROWS, A_USED_ODD, AC_ODD})},
    {.op = "attention_backward",
     BUFS(A_OUT("dqkv", A_QKV), A_IN("dout", A_X), A_IN("qkv", A_QKV), A_IN("probs", A_PROBS)),
     .call = call_attention_backward,
     .prepare = prepare_attention_backward},
    {.op = "attention_backward",
     .variant = "C not a multiple of heads",
     BUFS(A_OUT("dqkv", A_QKV_ODD), A_IN("dout", A_X_ODD), A_IN("qkv", A_QKV_ODD),
          A_IN("probs", A_PROBS)),
     .call = call_attention_backward_odd,
     .prepare = prepare_attention_backward_odd,
     WRITTEN({0, 0, A_ROWS, A_USED_ODD, 3 * AC_ODD}, {0, AC_ODD, A_ROWS, A_USED_ODD, 3 * AC_ODD},
             {0, 2 * AC_ODD, A_ROWS, A_USED_ODD, 3 * AC_ODD})},
    {.op = "patchify", BUFS(A_OUT("patches", P_N), A_IN("images", P_N)), .call = call_patchify},
    {.op = "embed_forward",
     BUFS(A_OUT("x", E_X), A_IN("patch_out", E_PATCHES), A_IN("cls", EC), A_IN("pos", E_POS)),
     .call = call_embed_forward},
    {.op = "embed_backward",
     BUFS(F_ADD("dcls", EC), F_ADD("dpos", E_POS), A_OUT("dpatch_out", E_PATCHES), A_IN("dx", E_X)),
     .call = call_embed_backward},
    {.op = "class_token_select",
     BUFS(A_OUT("out", C_OUT), A_IN("x", C_X)),
     .call = call_class_token_select},
    /* dx += dout on row 0 of each sample only */
    {.op = "class_token_select_backward",
     BUFS(A_ADD("dx", C_X), A_IN("dout", C_OUT)),
     .call = call_class_token_select_backward,
     WRITTEN({0, 0, CB, CC, CT *CC})},
    {.op = "cross_entropy",
     BUFS(A_OUT("dlogits", X_LOGITS), A_IN("logits", X_LOGITS), IDS("labels", XB)),
     .call = call_cross_entropy,
     .prepare = prepare_cross_entropy,
     .range = 3,
     .returns = 1},
    {.op = "count_correct",
     BUFS(A_IN("logits", X_LOGITS), IDS("labels", XB)),
     .call = call_count_correct,
     .prepare = prepare_count_correct,
     .range = 3,
     .returns = 1},
    {.op = "add", BUFS(A_OUT("out", NE), A_IN("a", NE), A_IN("b", NE)), .call = call_add},
    {.op = "causal_attention_forward",
     BUFS(A_OUT("out", A_X), A_OUT("probs", A_PROBS), A_IN("qkv", A_QKV)),
     .call = call_causal_attention_forward},
    {.op = "token_embed_forward",
     BUFS(A_OUT("x", T_X), IDS("tokens", T_IDS), A_IN("wte", T_WTE), A_IN("wpe", T_WPE)),
     .call = call_token_embed_forward,
     .prepare = prepare_token_embed_forward},
    {.op = "token_embed_backward",
     BUFS(F_ADD("dwte", T_WTE), F_ADD("dwpe", T_WPE), IDS("tokens", T_IDS), A_IN("dx", T_X)),
     .call = call_token_embed_backward,
     .prepare = prepare_token_embed_backward},
    {.op = "bias_gelu_forward",
     BUFS(A_OUT("out", B_X), A_IN("pre", B_X), A_IN("b", BN)),
     .call = call_bias_gelu_forward,
     .range = 2},
    {.op = "bias_gelu_backward",
     BUFS(A_OUT("dpre", B_X), F_ADD("db", BN), A_IN("dout", B_X), A_IN("pre", B_X), A_IN("b", BN)),
     .call = call_bias_gelu_backward,
     .range = 2},
    {.op = "residual_layernorm_forward",
     BUFS(A_OUT("sum", N_X), A_OUT("out", N_X), F_OUT("mean", NM), F_OUT("rstd", NM),
          A_IN("x", N_X), A_IN("y", N_X), A_IN("w", NC), A_IN("b", NC)),
     .call = call_residual_layernorm_forward,
     .ref = ref_residual_layernorm_forward},
    {.op = "rmsnorm_forward",
     BUFS(A_OUT("out", N_X), F_OUT("rstd", NM), A_IN("in", N_X), A_IN("w", NC)),
     .call = call_rmsnorm_forward},
    {.op = "rmsnorm_backward",
     BUFS(A_ADD("din", N_X), F_ADD("dw", NC), A_IN("dout", N_X), A_IN("in", N_X), F_IN("rstd", NM),
          A_IN("w", NC)),
     .call = call_rmsnorm_backward,
     .prepare = prepare_rmsnorm_backward},
    {.op = "swiglu_forward",
     BUFS(A_OUT("out", NE), A_IN("gate", NE), A_IN("up", NE)),
     .call = call_swiglu_forward,
     .range = 3},
    {.op = "swiglu_backward",
     BUFS(A_OUT("dgate", NE), A_OUT("dup", NE), A_IN("dout", NE), A_IN("gate", NE), A_IN("up", NE)),
     .call = call_swiglu_backward,
     .range = 3},
    {.op = "rope_forward", BUFS(A_ADD("x", R_X)), .call = call_rope_forward},
    {.op = "rope_backward", BUFS(A_ADD("dx", R_X)), .call = call_rope_backward},
    {.op = "gqa_attention_forward",
     BUFS(A_OUT("out", Q_OUT), A_OUT("probs", Q_PROBS), A_IN("qkv", Q_PACKED)),
     .call = call_gqa_attention_forward},
    {.op = "gqa_attention_backward",
     BUFS(A_OUT("dqkv", Q_PACKED), A_IN("dout", Q_OUT), A_IN("qkv", Q_PACKED),
          A_IN("probs", Q_PROBS)),
     .call = call_gqa_attention_backward,
     .prepare = prepare_gqa_attention_backward,
     QKV_GRADS},
    {.op = "flash_attention_forward",
     BUFS(A_OUT("out", Q_OUT), F_OUT("lse", Q_LSE), A_IN("qkv", Q_PACKED)),
     .call = call_flash_attention_forward},
    {.op = "flash_attention_backward",
     BUFS(A_OUT("dqkv", Q_PACKED), A_IN("dout", Q_OUT), A_IN("qkv", Q_PACKED), A_IN("out", Q_OUT),
          F_IN("lse", Q_LSE), WORK("work", QT *QT)),
     .call = call_flash_attention_backward,
     .prepare = prepare_flash_attention_backward,
     QKV_GRADS},
};

enum { NCASES = sizeof cases / sizeof cases[0] };

/* ---- running a case ---- */

static const char *case_name(const Case *c, DType t) {
    return c->variant ? fmt_text("%s (%s) in %s", c->op, c->variant, dtype_name(t))
                      : fmt_text("%s in %s", c->op, dtype_name(t));
}

static int is_output(const Buf *b) {
    return b->role == WRITE || b->role == UPDATE;
}

/* Whether the op writes element i of buffer b: inside one of its regions, or anywhere when it
 * has none. */
static int is_written(const Case *c, int b, size_t i) {
    int partial = 0;
    for (int r = 0; r < c->nwritten; r++) {
        const Region *w = &c->written[r];
        if (w->buf != b) continue;
        partial = 1;
        if (i >= w->off && (i - w->off) / w->stride < w->rows &&
            (i - w->off) % w->stride < w->width)
            return 1;
    }
    return !partial;
}

/* The fp32 values every run starts from: inputs drawn (seeded by the case and the buffer), then
 * those that follow from them; outputs overwritten and scratch at SENTINEL; ids zero until
 * prepare sets them. */
static void draw(const Case *c, float **h) {
    const float range = c->range > 0 ? c->range : 1.0f;
    for (int b = 0; b < c->nbuf; b++) {
        const Buf *buf = &c->buf[b];
        h[b] = host_zeros(buf->n);
        if (buf->role == WRITE || buf->role == SCRATCH)
            for (size_t i = 0; i < buf->n; i++) h[b][i] = SENTINEL;
        else if (buf->kind != I32)
            fill_uniform(h[b], buf->n, -range, range, 7919u * (uint32_t)(c - cases) + 17u * b + 1u);
    }
    if (c->prepare) c->prepare(h);
}

/* h with every tensor of t rounded to t: what both runs of the rounding check read */
static void round_to(const Case *c, DType t, float *const *h, float **r) {
    for (int b = 0; b < c->nbuf; b++) {
        r[b] = host_copy(h[b], c->buf[b].n);
        if (c->buf[b].kind == ACT)
            for (size_t i = 0; i < c->buf[b].n; i++) r[b][i] = dtype_round(t, r[b][i]);
    }
}

/* The case's buffers stored for an op in t (arrays of t for ACT, fp32 or int32 bits otherwise),
 * holding v's values (exactly: v is already rounded to t where it is of t). */
static void store(const Case *c, DType t, float *const *v, void **p) {
    for (int b = 0; b < c->nbuf; b++) {
        const Buf *buf = &c->buf[b];
        const size_t n = buf->n ? buf->n : 1;
        if (buf->kind == ACT) {
            p[b] = malloc(n * dtype_size(t));
            cr_assert_not_null(p[b]);
            dtype_narrow(p[b], t, v[b], buf->n);
        } else {
            p[b] = host_copy(v[b], buf->n);
        }
    }
}

/* Element i of buffer b as stored for t, in fp32. */
static float load(const Case *c, DType t, void *const *p, int b, size_t i) {
    return c->buf[b].kind == ACT ? dtype_load(p[b], t, i) : ((const float *)p[b])[i];
}

static void free_bufs(const Case *c, void **p) {
    for (int b = 0; b < c->nbuf; b++) free(p[b]);
}

/* One case at t, run three ways: `low` the op in t on the inputs rounded to t; `ref` fp32 on the
 * same rounded values (the case's ref where the op rounds in between); `exact` the op in fp32 on
 * the unrounded draws. `rounded` is what low and ref started from. */
typedef struct Runs {
    float *drawn[MAX_BUFS], *rounded[MAX_BUFS];
    void *low[MAX_BUFS], *ref[MAX_BUFS], *exact[MAX_BUFS];
    double low_ret, ref_ret, exact_ret;
} Runs;

static void run_case(const Case *c, DType t, Runs *s) {
    draw(c, s->drawn);
    round_to(c, t, s->drawn, s->rounded);
    store(c, t, s->rounded, s->low);
    s->low_ret = c->call(K, t, s->low);
    store(c, DTYPE_FP32, s->rounded, s->ref);
    s->ref_ret = c->ref ? c->ref(K, t, s->ref) : c->call(K, DTYPE_FP32, s->ref);
    store(c, DTYPE_FP32, s->drawn, s->exact);
    s->exact_ret = c->call(K, DTYPE_FP32, s->exact);
}

static void free_runs(const Case *c, Runs *s) {
    free_floats(s->drawn, (size_t)c->nbuf);
    free_floats(s->rounded, (size_t)c->nbuf);
    free_bufs(c, s->low);
    free_bufs(c, s->ref);
    free_bufs(c, s->exact);
}

/* ---- the checks ---- */

/* Every output of t is the fp32 result rounded to t once, every fp32 output and the result are
 * fp32's, bit for bit. */
static void expect_rounded_once(const Case *c, DType t) {
    Runs s;
    run_case(c, t, &s);
    const char *what = case_name(c, t);
    for (int b = 0; b < c->nbuf; b++) {
        const Buf *buf = &c->buf[b];
        if (!is_output(buf)) continue;
        size_t wrong = 0, first = 0;
        float got = 0, want = 0;
        for (size_t i = 0; i < buf->n; i++) {
            const float g = load(c, t, s.low, b, i), r = load(c, DTYPE_FP32, s.ref, b, i);
            const float w = buf->kind == ACT ? dtype_round(t, r) : r;
            if (fp32_bits(g) != fp32_bits(w) && wrong++ == 0) first = i, got = g, want = w;
        }
        cr_expect(wrong == 0,
                  "%s: %zu of %zu elements of %s (%s) are not fp32's %s; first %s[%zu] = %.9g, "
                  "want %.9g",
                  what, wrong, buf->n, buf->name, buf->kind == ACT ? dtype_name(t) : "fp32",
                  buf->kind == ACT ? "rounded once" : "bit for bit", buf->name, first, got, want);
    }
    cr_expect(memcmp(&s.low_ret, &s.ref_ret, sizeof s.low_ret) == 0,
              "%s: returns %.9g, fp32 on the same values %.9g", what, s.low_ret, s.ref_ret);
    free_runs(c, &s);
}

/* Every output of the op in t is within tol of fp32 on the unrounded inputs (relative L2 over
 * the elements the op writes), and so is its result. */
static void expect_within(const Case *c, DType t, double tol) {
    Runs s;
    run_case(c, t, &s);
    const char *what = case_name(c, t);
    for (int b = 0; b < c->nbuf; b++) {
        const Buf *buf = &c->buf[b];
        if (!is_output(buf)) continue;
        double diff = 0, norm = 0;
        int finite = 1;
        for (size_t i = 0; i < buf->n; i++) {
            if (!is_written(c, b, i)) continue;
            const double g = load(c, t, s.low, b, i), w = load(c, DTYPE_FP32, s.exact, b, i);
            finite = finite && isfinite(g);
            diff += (g - w) * (g - w), norm += w * w;
        }
        const double rel = norm > 0 ? sqrt(diff / norm) : sqrt(diff);
        cr_expect(finite && rel <= tol, "%s: %s is %.3g from fp32 (relative L2), bound %g%s", what,
                  buf->name, rel, tol, finite ? "" : ", and not finite");
    }
    if (c->returns) {
        const double rel = fabs(s.low_ret - s.exact_ret) / fmax(fabs(s.exact_ret), 1e-30);
        cr_expect(isfinite(s.low_ret) && rel <= tol,
                  "%s: returns %.9g, fp32 %.9g (%.3g relative), bound %g", what, s.low_ret,
                  s.exact_ret, rel, tol);
    }
    free_runs(c, &s);
}

/* Every element of an output the op in t does not write holds what it held before. */
static void expect_unowned_untouched(const Case *c, DType t) {
    Runs s;
    run_case(c, t, &s);
    const char *what = case_name(c, t);
    for (int b = 0; b < c->nbuf; b++) {
        const Buf *buf = &c->buf[b];
        if (!is_output(buf)) continue;
        size_t changed = 0, unowned = 0, first = 0;
        for (size_t i = 0; i < buf->n; i++) {
            if (is_written(c, b, i)) continue;
            unowned++;
            const float g = load(c, t, s.low, b, i);
            if (fp32_bits(g) != fp32_bits(s.rounded[b][i]) && changed++ == 0) first = i;
        }
        cr_expect(changed == 0,
                  "%s: %zu of the %zu elements of %s the op does not own changed; "
                  "first %s[%zu] = %.9g, was %.9g",
                  what, changed, unowned, buf->name, buf->name, first, load(c, t, s.low, b, first),
                  s.rounded[b][first]);
    }
    free_runs(c, &s);
}

/* ---- the tests ---- */

#define OP_NAME(op) #op,
static const char *const all_ops[] = {KERNEL_OPS(OP_NAME)};
/* the table's ops that take no compute dtype (fp32 parameters, gradients and bytes) */
static const char *const fp32_only_ops[] = {
    "cast",        "zero",       "copy_bytes",          "zero_bytes", "copy_spans",
    "scale",       "accumulate", "sum_squares",         "all_finite", "adam_step",
    "log_softmax", "nll_loss",   "log_softmax_backward"};

Test(dtype_kernels, a_case_for_every_op_that_takes_a_compute_dtype) {
    size_t covered = 0;
    for (size_t o = 0; o < sizeof all_ops / sizeof all_ops[0]; o++) {
        int fp32_only = 0, has_case = 0;
        for (size_t j = 0; j < sizeof fp32_only_ops / sizeof fp32_only_ops[0]; j++)
            fp32_only |= strcmp(all_ops[o], fp32_only_ops[j]) == 0;
        for (int i = 0; i < NCASES; i++) has_case |= strcmp(all_ops[o], cases[i].op) == 0;
        cr_expect(fp32_only || has_case, "no case for %s", all_ops[o]);
        covered += has_case;
    }
    cr_expect_eq(covered, 36);
}

Test(dtype_kernels, bf16_rounds_each_output_once_where_it_is_stored) {
    for (int i = 0; i < NCASES; i++) expect_rounded_once(&cases[i], DTYPE_BF16);
}

Test(dtype_kernels, fp16_rounds_each_output_once_where_it_is_stored) {
    for (int i = 0; i < NCASES; i++) expect_rounded_once(&cases[i], DTYPE_FP16);
}

Test(dtype_kernels, bf16_is_within_1e_2_of_fp32) {
    for (int i = 0; i < NCASES; i++) expect_within(&cases[i], DTYPE_BF16, TOL_BF16);
}

Test(dtype_kernels, fp16_is_within_2e_3_of_fp32) {
    for (int i = 0; i < NCASES; i++) expect_within(&cases[i], DTYPE_FP16, TOL_FP16);
}

Test(dtype_kernels, bf16_leaves_what_a_strided_op_does_not_own) {
    for (int i = 0; i < NCASES; i++) expect_unowned_untouched(&cases[i], DTYPE_BF16);
}

Test(dtype_kernels, fp16_leaves_what_a_strided_op_does_not_own) {
    for (int i = 0; i < NCASES; i++) expect_unowned_untouched(&cases[i], DTYPE_FP16);
}
