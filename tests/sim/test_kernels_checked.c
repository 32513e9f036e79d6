/* kernels_checked: every op, called through the checked table bound to kernels_cpu on small odd
 * shapes, reports exactly the documented tensors, writes and reads nothing else, and gives
 * kernels_cpu's results; at a 2-byte compute dtype, its byte counts; its names; its per-thread
 * binding; and the abort with nothing bound. */
#include <criterion/criterion.h>
#include <criterion/redirect.h>
#include <math.h>
#include <pthread.h>
#include <signal.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/kernels.h"
#include "sim/kernels_checked.h"
#include "sim/kernels_none.h"

/* Each case's buffers are allocated at exactly the bytes the op is documented to touch (the
 * whole tensor it takes rows from, for the strided ones), with GUARD bytes either side. The
 * shapes are small and their dimensions distinct, so a swapped or missing dimension changes a
 * size. Expected accesses are written out here, independently of kernels_checked.c. */
enum { GUARD = 64, MAX_BUFS = 10, MAX_WANT = 16 };

/* count blocks of `bytes` starting `off` bytes into buffer `buf`, `stride` bytes apart (count 1,
 * stride 0: one range) */
typedef struct Want {
    int buf;
    size_t off, bytes, count, stride;
    int write;
} Want;

/* runs the op at compute dtype t on the buffers p; returns its result (0: none) */
typedef double (*CallFn)(const Kernels *k, DType t, void *const *p);

typedef struct Case {
    const char *op, *what; /* the entry's name; the variant */
    size_t size[MAX_BUFS];
    int nbuf;
    Want want[MAX_WANT];
    int nwant;
    CallFn call;
    void (*init)(void *const *p); /* values an op needs beyond random floats (labels) */
    DType t;                      /* the compute dtype the call passes (unset: fp32) */
} Case;

#define F(n) ((size_t)(n) * sizeof(float))
#define H(n) ((size_t)(n) * sizeof(uint16_t)) /* bf16, fp16 */
#define RD(b, bytes)                                                                               \
    { (b), 0, (bytes), 1, 0, 0 }
#define WR(b, bytes)                                                                               \
    { (b), 0, (bytes), 1, 0, 1 }
#define RW(b, bytes) RD(b, bytes), WR(b, bytes)
#define BLOCKS(b, off, bytes, count, stride, write)                                                \
    { (b), (off), (bytes), (count), (stride), (write) }
#define SIZES(...)                                                                                 \
    .size = {__VA_ARGS__}, .nbuf = (int)(sizeof((size_t[]){__VA_ARGS__}) / sizeof(size_t))
#define WANTS(...)                                                                                 \
    .want = {__VA_ARGS__}, .nwant = (int)(sizeof((Want[]){__VA_ARGS__}) / sizeof(Want))

/* the shapes: small, and within an op every dimension distinct */
enum { NE = 13 };                        /* elementwise ops, Adam, the toy */
enum { LM = 5, LK = 7, LN = 3 };         /* linear: rows, in features, out features */
enum { GR = 5, GC = 3, GS = 7, GO = 4 }; /* bias_grad: rows, cols, stride, first column */
enum { NM = 5, NC = 9 };                 /* LayerNorm: rows, width */
enum { AB = 2, AT = 5, AC = 9, AH = 3 }; /* attention: batch, tokens, width, heads */
enum { AC_ODD = 7 };                     /* a width that is not a multiple of heads */
enum { PB = 5, PS = 6, PP = 3, PG = 2 }; /* patchify: batch, side, patch, per side */
enum { PS_ODD = 7 };                     /* a side that is not a multiple of the patch */
enum { EB = 2, ET = 5, EC = 3 };         /* embed: batch, tokens, width */
enum { CB = 3, CT = 5, CC = 7 };         /* class token: batch, tokens, width */
enum { XB = 5, XK = 7 };                 /* cross_entropy: rows, classes */
enum { BM = 5, BN = 11 };                /* bias + GELU: rows, columns */
enum { TB = 2, TT = 3, TC = 5, TV = 7 }; /* token embedding: batch, tokens, width, vocabulary */
enum { QB = 2, QT = 3, QH = 4, QKV = 2, QD = 2 }; /* GQA: batch, tokens, heads, K,V heads, D */
enum { Q_X = QB * QT * QH * QD, Q_KV = QB * QT * QKV * QD, Q_P = QB * QH * QT * QT };
enum { Q_LSE = QB * QH * QT, Q_WORK = QT * QT };
enum { RB = 2, RT = 3, RH = 2, RD_ = 4, R_X = RB * RT * RH * RD_ }; /* RoPE */

/* the sizes of their tensors, in elements */
enum { L_OUT = LM * LN, L_IN = LM * LK, L_W = LN * LK };
enum { G_DOUT = GR * GS, G_DENSE = GR * GC };
enum { N_X = NM * NC };
enum {
    A_X = AB * AT * AC,
    A_QKV = AB * AT * 3 * AC,
    A_PROBS = AB * AH * AT * AT,
    A_ROWS = AB * AT
};
enum { A_X_ODD = AB * AT * AC_ODD, A_QKV_ODD = AB * AT * 3 * AC_ODD, A_QKV_ROW_ODD = 3 * AC_ODD };
enum { A_USED_ODD = 6 }; /* of those 7 columns, 3 heads of D = 7 / 3 = 2 are used */
enum {
    P_IMAGES = PB * PS * PS,
    P_PATCHES = PB * PG * PG * PP * PP,
    P_IMAGES_ODD = PB * PS_ODD * PS_ODD
};
enum { E_X = EB * ET * EC, E_PATCHES = EB * (ET - 1) * EC, E_POS = ET * EC };
enum { C_X = CB * CT * CC, C_OUT = CB * CC, C_ROW = CT * CC };
enum { X_LOGITS = XB * XK };
enum { B_X = BM * BN };
enum { T_X = TB * TT * TC, T_WTE = TV * TC, T_WPE = TT * TC, T_IDS = TB * TT * sizeof(int32_t) };

/* ---- the calls, one per case, at its compute dtype t (ops that take none ignore it) ---- */

static double call_cast_fp32_bf16(const Kernels *k, DType t, void *const *p) {
    (void)t;
    k->cast(p[0], DTYPE_BF16, p[1], DTYPE_FP32, NE);
    return 0;
}
static double call_cast_fp16_fp32(const Kernels *k, DType t, void *const *p) {
    (void)t;
    k->cast(p[0], DTYPE_FP32, p[1], DTYPE_FP16, NE);
    return 0;
}
static double call_cast_same(const Kernels *k, DType t, void *const *p) {
    (void)t;
    k->cast(p[0], DTYPE_FP32, p[1], DTYPE_FP32, NE);
    return 0;
}
static double call_zero(const Kernels *k, DType t, void *const *p) {
    (void)t;
    k->zero(p[0], NE);
    return 0;
}
static double call_copy_bytes(const Kernels *k, DType t, void *const *p) {
    (void)t;
    k->copy_bytes(p[0], p[1], 37);
    return 0;
}
static double call_zero_bytes(const Kernels *k, DType t, void *const *p) {
    (void)t;
    k->zero_bytes(p[0], 37);
    return 0;
}
/* Three spans into 13 bf16 elements, out of order against src, with gaps at 5, 6 and 11 that
 * nothing writes; the last is padding only. */
static const CopySpan SPANS3[] = {
    {.dst_at = 0, .src_at = 4, .n = 3, .pad = 2},
    {.dst_at = 7, .src_at = 0, .n = 4, .pad = 0},
    {.dst_at = 12, .src_at = 9, .n = 0, .pad = 1},
};
static double call_copy_spans(const Kernels *k, DType t, void *const *p) {
    (void)t;
    k->copy_spans(p[0], DTYPE_BF16, p[1], DTYPE_FP32, SPANS3, 3);
    return 0;
}
static double call_copy_spans_none(const Kernels *k, DType t, void *const *p) {
    (void)t;
    k->copy_spans(p[0], DTYPE_FP32, p[1], DTYPE_FP32, SPANS3, 0);
    return 0;
}
static double call_scale(const Kernels *k, DType t, void *const *p) {
    (void)t;
    k->scale(p[0], 0.75f, NE);
    return 0;
}
static double call_accumulate(const Kernels *k, DType t, void *const *p) {
    (void)t;
    k->accumulate(p[0], p[1], NE);
    return 0;
}
static double call_sum_squares(const Kernels *k, DType t, void *const *p) {
    (void)t;
    return k->sum_squares(p[0], NE);
}
static double call_all_finite(const Kernels *k, DType t, void *const *p) {
    (void)t;
    return k->all_finite(p[0], NE);
}
static double call_adam_step(const Kernels *k, DType t, void *const *p) {
    (void)t;
    const AdamHyper h = {.lr = 1e-2f,
                         .beta1 = 0.9f,
                         .beta2 = 0.999f,
                         .eps = 1e-8f,
                         .weight_decay = 0.1f,
                         .decoupled = 1};
    k->adam_step(p[0], p[1], p[2], p[3], NE, &h, 3);
    return 0;
}
static double call_toy_forward(const Kernels *k, DType t, void *const *p) {
    k->toy_forward(t, p[0], p[1], p[2], NE);
    return 0;
}
static double call_toy_forward_in_place(const Kernels *k, DType t, void *const *p) {
    k->toy_forward(t, p[0], p[1], p[1], NE);
    return 0;
}
static double call_toy_backward(const Kernels *k, DType t, void *const *p) {
    k->toy_backward(t, p[0], p[1], p[2], p[3], p[4], NE);
    return 0;
}
static double call_toy_backward_no_dx(const Kernels *k, DType t, void *const *p) {
    k->toy_backward(t, p[0], p[1], p[2], NULL, p[3], NE);
    return 0;
}
static double call_toy_backward_dx_is_dy(const Kernels *k, DType t, void *const *p) {
    k->toy_backward(t, p[0], p[1], p[2], p[2], p[3], NE);
    return 0;
}
static double call_toy_backward_empty(const Kernels *k, DType t, void *const *p) {
    k->toy_backward(t, p[0], p[1], p[2], p[3], p[4], 0);
    return 0;
}
static double call_mse_loss(const Kernels *k, DType t, void *const *p) {
    return k->mse_loss(t, p[0], p[1], p[2], NE);
}
static double call_mse_loss_no_dy(const Kernels *k, DType t, void *const *p) {
    return k->mse_loss(t, p[0], p[1], NULL, NE);
}
static double call_mse_loss_empty(const Kernels *k, DType t, void *const *p) {
    return k->mse_loss(t, p[0], p[1], p[2], 0);
}
static double call_linear_forward(const Kernels *k, DType t, void *const *p) {
    k->linear_forward(t, p[0], p[1], p[2], p[3], LM, LK, LN);
    return 0;
}
static double call_linear_forward_no_bias(const Kernels *k, DType t, void *const *p) {
    k->linear_forward(t, p[0], p[1], p[2], NULL, LM, LK, LN);
    return 0;
}
static double call_linear_forward_k0(const Kernels *k, DType t, void *const *p) {
    k->linear_forward(t, p[0], p[1], p[2], p[3], LM, 0, LN);
    return 0;
}
static double call_linear_backward(const Kernels *k, DType t, void *const *p) {
    k->linear_backward(t, p[0], p[1], p[2], p[3], p[4], p[5], LM, LK, LN);
    return 0;
}
static double call_linear_backward_dw_only(const Kernels *k, DType t, void *const *p) {
    k->linear_backward(t, NULL, p[0], NULL, p[1], p[2], p[3], LM, LK, LN);
    return 0;
}
static double call_linear_backward_no_db(const Kernels *k, DType t, void *const *p) {
    k->linear_backward(t, p[0], p[1], NULL, p[2], p[3], p[4], LM, LK, LN);
    return 0;
}
static double call_linear_backward_n0(const Kernels *k, DType t, void *const *p) {
    k->linear_backward(t, p[0], p[1], p[2], p[3], p[4], p[5], LM, LK, 0);
    return 0;
}
static double call_linear_backward_k0(const Kernels *k, DType t, void *const *p) {
    k->linear_backward(t, p[0], p[1], p[2], p[3], p[4], p[5], LM, 0, LN);
    return 0;
}
static double call_linear_backward_k0_no_db(const Kernels *k, DType t, void *const *p) {
    k->linear_backward(t, p[0], p[1], NULL, p[2], p[3], p[4], LM, 0, LN);
    return 0;
}
static double call_bias_grad(const Kernels *k, DType t, void *const *p) {
    k->bias_grad(t, p[0], dtype_at(p[1], t, GO), GR, GC, GS);
    return 0;
}
static double call_bias_grad_dense(const Kernels *k, DType t, void *const *p) {
    k->bias_grad(t, p[0], p[1], GR, GC, GC);
    return 0;
}
static double call_bias_grad_no_rows(const Kernels *k, DType t, void *const *p) {
    k->bias_grad(t, p[0], p[1], 0, GC, GS);
    return 0;
}
static double call_layernorm_forward(const Kernels *k, DType t, void *const *p) {
    k->layernorm_forward(t, p[0], p[1], p[2], p[3], p[4], p[5], NM, NC, 1e-5f);
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
static double call_gelu_forward_in_place(const Kernels *k, DType t, void *const *p) {
    k->gelu_forward(t, p[0], p[0], NE);
    return 0;
}
static double call_gelu_backward(const Kernels *k, DType t, void *const *p) {
    k->gelu_backward(t, p[0], p[1], p[2], NE);
    return 0;
}
static double call_gelu_backward_din_is_dout(const Kernels *k, DType t, void *const *p) {
    k->gelu_backward(t, p[0], p[1], p[0], NE);
    return 0;
}
static double call_attention_forward(const Kernels *k, DType t, void *const *p) {
    k->attention_forward(t, p[0], p[1], p[2], AB, AT, AC, AH);
    return 0;
}
static double call_attention_backward(const Kernels *k, DType t, void *const *p) {
    k->attention_backward(t, p[0], p[1], p[2], p[3], AB, AT, AC, AH);
    return 0;
}
static double call_attention_forward_odd(const Kernels *k, DType t, void *const *p) {
    k->attention_forward(t, p[0], p[1], p[2], AB, AT, AC_ODD, AH);
    return 0;
}
static double call_attention_backward_odd(const Kernels *k, DType t, void *const *p) {
    k->attention_backward(t, p[0], p[1], p[2], p[3], AB, AT, AC_ODD, AH);
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
static double call_patchify(const Kernels *k, DType t, void *const *p) {
    k->patchify(t, p[0], p[1], PB, PS, PP);
    return 0;
}
static double call_patchify_odd(const Kernels *k, DType t, void *const *p) {
    k->patchify(t, p[0], p[1], PB, PS_ODD, PP);
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
static double call_embed_backward_no_samples(const Kernels *k, DType t, void *const *p) {
    k->embed_backward(t, p[0], p[1], p[2], p[3], 0, ET, EC);
    return 0;
}
static double call_class_token_select(const Kernels *k, DType t, void *const *p) {
    k->class_token_select(t, p[0], p[1], CB, CT, CC);
    return 0;
}
static double call_class_token_select_one_token(const Kernels *k, DType t, void *const *p) {
    k->class_token_select(t, p[0], p[1], CB, 1, CC);
    return 0;
}
static double call_class_token_select_backward(const Kernels *k, DType t, void *const *p) {
    k->class_token_select_backward(t, p[0], p[1], CB, CT, CC);
    return 0;
}
static double call_cross_entropy(const Kernels *k, DType t, void *const *p) {
    return k->cross_entropy(t, p[0], p[1], p[2], XB, XK, 0.5f);
}
static double call_cross_entropy_loss_only(const Kernels *k, DType t, void *const *p) {
    return k->cross_entropy(t, NULL, p[0], p[1], XB, XK, 0.5f);
}
static double call_log_softmax(const Kernels *k, DType t, void *const *p) {
    (void)t;
    k->log_softmax(p[0], p[1], XB, XK);
    return 0;
}
static double call_nll_loss(const Kernels *k, DType t, void *const *p) {
    (void)t;
    return k->nll_loss(p[0], p[1], p[2], XB, XK, 0.5f);
}
static double call_log_softmax_backward(const Kernels *k, DType t, void *const *p) {
    (void)t;
    k->log_softmax_backward(p[0], p[1], p[2], XB, XK);
    return 0;
}
static double call_count_correct(const Kernels *k, DType t, void *const *p) {
    return (double)k->count_correct(t, p[0], p[1], XB, XK);
}
static double call_add(const Kernels *k, DType t, void *const *p) {
    k->add(t, p[0], p[1], p[2], NE);
    return 0;
}
static double call_add_out_is_b(const Kernels *k, DType t, void *const *p) {
    k->add(t, p[0], p[1], p[0], NE);
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
static double call_bias_gelu_backward_in_place(const Kernels *k, DType t, void *const *p) {
    k->bias_gelu_backward(t, p[0], p[1], p[0], p[2], p[3], BM, BN);
    return 0;
}
static double call_residual_layernorm_forward(const Kernels *k, DType t, void *const *p) {
    k->residual_layernorm_forward(t, p[0], p[1], p[2], p[3], p[4], p[5], p[6], p[7], NM, NC, 1e-5f);
    return 0;
}
static double call_residual_layernorm_forward_sum_is_x(const Kernels *k, DType t, void *const *p) {
    k->residual_layernorm_forward(t, p[0], p[1], p[2], p[3], p[0], p[4], p[5], p[6], NM, NC, 1e-5f);
    return 0;
}
static double call_rmsnorm_forward(const Kernels *k, DType t, void *const *p) {
    k->rmsnorm_forward(t, p[0], p[1], p[2], p[3], NM, NC, 1e-5f);
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
    k->rope_forward(t, p[0], RB, RT, RH, RD_, 10000.0f);
    return 0;
}
static double call_rope_backward(const Kernels *k, DType t, void *const *p) {
    k->rope_backward(t, p[0], RB, RT, RH, RD_, 10000.0f);
    return 0;
}
static const AttnShape gqa_shape = {QB, QT, QH, QKV, QD, QH *QD, QKV *QD, 1};
static double call_gqa_attention_forward(const Kernels *k, DType t, void *const *p) {
    k->gqa_attention_forward(t, p[0], p[1], p[2], p[3], p[4], &gqa_shape);
    return 0;
}
static double call_gqa_attention_backward(const Kernels *k, DType t, void *const *p) {
    k->gqa_attention_backward(t, p[0], p[1], p[2], p[3], p[4], p[5], p[6], p[7], &gqa_shape);
    return 0;
}
static double call_flash_attention_forward(const Kernels *k, DType t, void *const *p) {
    k->flash_attention_forward(t, p[0], p[1], p[2], p[3], p[4], &gqa_shape);
    return 0;
}
static double call_flash_attention_backward(const Kernels *k, DType t, void *const *p) {
    k->flash_attention_backward(t, p[0], p[1], p[2], p[3], p[4], p[5], p[6], p[7], p[8], p[9],
                                &gqa_shape);
    return 0;
}

/* ---- values an op needs ---- */

/* Adam's second moments are never negative */
static void init_adam(void *const *p) {
    float *v = p[3];
    for (int i = 0; i < NE; i++) v[i] = fabsf(v[i]);
}

/* labels in [0, XK), in the buffer after the logits (`at`) */
static void init_labels_at(void *const *p, int at) {
    int32_t *labels = p[at];
    for (int i = 0; i < XB; i++) labels[i] = (int32_t)((i * 3 + 1) % XK);
}
static void init_labels_1(void *const *p) {
    init_labels_at(p, 1);
}
static void init_labels_2(void *const *p) {
    init_labels_at(p, 2);
}

/* token ids in [0, TV), one repeated (its row of dwte takes two gradients) */
static void init_tokens_at(void *const *p, int at) {
    int32_t *ids = p[at];
    for (int i = 0; i < TB * TT; i++) ids[i] = (int32_t)((i * 5 + 2) % TV);
    ids[TB * TT - 1] = ids[0];
}
static void init_tokens_1(void *const *p) {
    init_tokens_at(p, 1);
}
static void init_tokens_2(void *const *p) {
    init_tokens_at(p, 2);
}

/* ---- the cases: every entry of the table, with its nullable, aliased and empty variants ---- */

static const Case cases[] = {
    {"cast", "fp32 to bf16", SIZES(H(NE), F(NE)), WANTS(WR(0, H(NE)), RD(1, F(NE))),
     call_cast_fp32_bf16},
    {"cast", "fp16 to fp32", SIZES(F(NE), H(NE)), WANTS(WR(0, F(NE)), RD(1, H(NE))),
     call_cast_fp16_fp32},
    {"cast", "same type", SIZES(F(NE), F(NE)), WANTS(WR(0, F(NE)), RD(1, F(NE))), call_cast_same},
    {"zero", "", SIZES(F(NE)), WANTS(WR(0, F(NE))), call_zero},
    {"copy_bytes", "odd bytes", SIZES(37, 37), WANTS(WR(0, 37), RD(1, 37)), call_copy_bytes},
    {"zero_bytes", "odd bytes", SIZES(37), WANTS(WR(0, 37)), call_zero_bytes},
    {"copy_spans", "three spans, fp32 to bf16", SIZES(H(13), F(7)),
     WANTS(BLOCKS(0, H(0), H(5), 1, 0, 1), BLOCKS(1, F(4), F(3), 1, 0, 0),
           BLOCKS(0, H(7), H(4), 1, 0, 1), BLOCKS(1, F(0), F(4), 1, 0, 0),
           BLOCKS(0, H(12), H(1), 1, 0, 1)),
     call_copy_spans},
    {"copy_spans", "no spans", SIZES(F(1), F(1)), .nwant = 0, call_copy_spans_none},
    {"scale", "", SIZES(F(NE)), WANTS(RW(0, F(NE))), call_scale},
    {"accumulate", "", SIZES(F(NE), F(NE)), WANTS(RW(0, F(NE)), RD(1, F(NE))), call_accumulate},
    {"sum_squares", "", SIZES(F(NE)), WANTS(RD(0, F(NE))), call_sum_squares},
    {"all_finite", "", SIZES(F(NE)), WANTS(RD(0, F(NE))), call_all_finite},
    {"adam_step", "", SIZES(F(NE), F(NE), F(NE), F(NE)),
     WANTS(RW(0, F(NE)), RD(1, F(NE)), RW(2, F(NE)), RW(3, F(NE))), call_adam_step, init_adam},
    {"toy_forward", "", SIZES(F(3), F(NE), F(NE)), WANTS(RD(0, F(3)), RD(1, F(NE)), WR(2, F(NE))),
     call_toy_forward},
    {"toy_forward", "in place", SIZES(F(3), F(NE)), WANTS(RD(0, F(3)), RD(1, F(NE)), WR(1, F(NE))),
     call_toy_forward_in_place},
    {"toy_backward", "", SIZES(F(3), F(NE), F(NE), F(NE), F(3)),
     WANTS(RD(0, F(3)), RD(1, F(NE)), RD(2, F(NE)), WR(3, F(NE)), RW(4, F(3))), call_toy_backward},
    {"toy_backward", "dx NULL", SIZES(F(3), F(NE), F(NE), F(3)),
     WANTS(RD(0, F(3)), RD(1, F(NE)), RD(2, F(NE)), RW(3, F(3))), call_toy_backward_no_dx},
    {"toy_backward", "dx is dy", SIZES(F(3), F(NE), F(NE), F(3)),
     WANTS(RD(0, F(3)), RD(1, F(NE)), RD(2, F(NE)), WR(2, F(NE)), RW(3, F(3))),
     call_toy_backward_dx_is_dy},
    {"toy_backward", "n = 0: dw += 0", SIZES(F(3), 0, 0, 0, F(3)), WANTS(RD(0, F(3)), RW(4, F(3))),
     call_toy_backward_empty},
    {"mse_loss", "", SIZES(F(NE), F(NE), F(NE)), WANTS(RD(0, F(NE)), RD(1, F(NE)), WR(2, F(NE))),
     call_mse_loss},
    {"mse_loss", "dy NULL", SIZES(F(NE), F(NE)), WANTS(RD(0, F(NE)), RD(1, F(NE))),
     call_mse_loss_no_dy},
    {"mse_loss", "n = 0", SIZES(0, 0, 0), .nwant = 0, .call = call_mse_loss_empty},
    {"linear_forward", "", SIZES(F(L_OUT), F(L_IN), F(L_W), F(LN)),
     WANTS(WR(0, F(L_OUT)), RD(1, F(L_IN)), RD(2, F(L_W)), RD(3, F(LN))), call_linear_forward},
    {"linear_forward", "b NULL", SIZES(F(L_OUT), F(L_IN), F(L_W)),
     WANTS(WR(0, F(L_OUT)), RD(1, F(L_IN)), RD(2, F(L_W))), call_linear_forward_no_bias},
    {"linear_forward", "K = 0: out = b", SIZES(F(L_OUT), 0, 0, F(LN)),
     WANTS(WR(0, F(L_OUT)), RD(3, F(LN))), call_linear_forward_k0},
    {"linear_backward", "", SIZES(F(L_IN), F(L_W), F(LN), F(L_OUT), F(L_IN), F(L_W)),
     WANTS(WR(0, F(L_IN)), RW(1, F(L_W)), RW(2, F(LN)), RD(3, F(L_OUT)), RD(4, F(L_IN)),
           RD(5, F(L_W))),
     call_linear_backward},
    {"linear_backward", "din and db NULL: w unread", SIZES(F(L_W), F(L_OUT), F(L_IN), F(L_W)),
     WANTS(RW(0, F(L_W)), RD(1, F(L_OUT)), RD(2, F(L_IN))), call_linear_backward_dw_only},
    {"linear_backward", "db NULL", SIZES(F(L_IN), F(L_W), F(L_OUT), F(L_IN), F(L_W)),
     WANTS(WR(0, F(L_IN)), RW(1, F(L_W)), RD(2, F(L_OUT)), RD(3, F(L_IN)), RD(4, F(L_W))),
     call_linear_backward_no_db},
    {"linear_backward", "N = 0: din = 0", SIZES(F(L_IN), 0, 0, 0, F(L_IN), 0),
     WANTS(WR(0, F(L_IN))), call_linear_backward_n0},
    {"linear_backward", "K = 0: db only", SIZES(0, 0, F(LN), F(L_OUT), 0, 0),
     WANTS(RW(2, F(LN)), RD(3, F(L_OUT))), call_linear_backward_k0},
    {"linear_backward", "K = 0, db NULL: nothing", SIZES(0, 0, F(L_OUT), 0, 0), .nwant = 0,
     .call = call_linear_backward_k0_no_db},
    {"bias_grad", "strided columns", SIZES(F(GC), F(G_DOUT)),
     WANTS(RW(0, F(GC)), BLOCKS(1, F(GO), F(GC), GR, F(GS), 0)), call_bias_grad},
    {"bias_grad", "stride = cols: one range", SIZES(F(GC), F(G_DENSE)),
     WANTS(RW(0, F(GC)), RD(1, F(G_DENSE))), call_bias_grad_dense},
    {"bias_grad", "no rows: db += 0", SIZES(F(GC), 0), WANTS(RW(0, F(GC))), call_bias_grad_no_rows},
    {"layernorm_forward", "", SIZES(F(N_X), F(NM), F(NM), F(N_X), F(NC), F(NC)),
     WANTS(WR(0, F(N_X)), WR(1, F(NM)), WR(2, F(NM)), RD(3, F(N_X)), RD(4, F(NC)), RD(5, F(NC))),
     call_layernorm_forward},
    {"layernorm_backward", "", SIZES(F(N_X), F(NC), F(NC), F(N_X), F(N_X), F(NM), F(NM), F(NC)),
     WANTS(RW(0, F(N_X)), RW(1, F(NC)), RW(2, F(NC)), RD(3, F(N_X)), RD(4, F(N_X)), RD(5, F(NM)),
           RD(6, F(NM)), RD(7, F(NC))),
     call_layernorm_backward},
    {"gelu_forward", "", SIZES(F(NE), F(NE)), WANTS(WR(0, F(NE)), RD(1, F(NE))), call_gelu_forward},
    {"gelu_forward", "in place", SIZES(F(NE)), WANTS(WR(0, F(NE)), RD(0, F(NE))),
     call_gelu_forward_in_place},
    {"gelu_backward", "", SIZES(F(NE), F(NE), F(NE)),
     WANTS(WR(0, F(NE)), RD(1, F(NE)), RD(2, F(NE))), call_gelu_backward},
    {"gelu_backward", "din is dout", SIZES(F(NE), F(NE)),
     WANTS(WR(0, F(NE)), RD(1, F(NE)), RD(0, F(NE))), call_gelu_backward_din_is_dout},
    {"attention_forward", "", SIZES(F(A_X), F(A_PROBS), F(A_QKV)),
     WANTS(WR(0, F(A_X)), WR(1, F(A_PROBS)), RD(2, F(A_QKV))), call_attention_forward},
    {"attention_backward", "", SIZES(F(A_QKV), F(A_X), F(A_QKV), F(A_PROBS)),
     WANTS(WR(0, F(A_QKV)), RD(1, F(A_X)), RD(2, F(A_QKV)), RD(3, F(A_PROBS))),
     call_attention_backward},
    /* C = 7 over 3 heads: D = 2, so each of q, k, v and out has 6 of its 7 columns used */
    {"attention_forward", "C not a multiple of heads", SIZES(F(A_X_ODD), F(A_PROBS), F(A_QKV_ODD)),
     WANTS(BLOCKS(0, 0, F(A_USED_ODD), A_ROWS, F(AC_ODD), 1), WR(1, F(A_PROBS)),
           BLOCKS(2, 0, F(A_USED_ODD), A_ROWS, F(A_QKV_ROW_ODD), 0),
           BLOCKS(2, F(AC_ODD), F(A_USED_ODD), A_ROWS, F(A_QKV_ROW_ODD), 0),
           BLOCKS(2, F(2 * AC_ODD), F(A_USED_ODD), A_ROWS, F(A_QKV_ROW_ODD), 0)),
     call_attention_forward_odd},
    {"attention_backward", "C not a multiple of heads",
     SIZES(F(A_QKV_ODD), F(A_X_ODD), F(A_QKV_ODD), F(A_PROBS)),
     WANTS(BLOCKS(0, 0, F(A_USED_ODD), A_ROWS, F(A_QKV_ROW_ODD), 1),
           BLOCKS(0, F(AC_ODD), F(A_USED_ODD), A_ROWS, F(A_QKV_ROW_ODD), 1),
           BLOCKS(0, F(2 * AC_ODD), F(A_USED_ODD), A_ROWS, F(A_QKV_ROW_ODD), 1),
           BLOCKS(1, 0, F(A_USED_ODD), A_ROWS, F(AC_ODD), 0),
           BLOCKS(2, 0, F(A_USED_ODD), A_ROWS, F(A_QKV_ROW_ODD), 0),
           BLOCKS(2, F(AC_ODD), F(A_USED_ODD), A_ROWS, F(A_QKV_ROW_ODD), 0),
           BLOCKS(2, F(2 * AC_ODD), F(A_USED_ODD), A_ROWS, F(A_QKV_ROW_ODD), 0), RD(3, F(A_PROBS))),
     call_attention_backward_odd},
    {"causal_attention_forward", "", SIZES(F(A_X), F(A_PROBS), F(A_QKV)),
     WANTS(WR(0, F(A_X)), WR(1, F(A_PROBS)), RD(2, F(A_QKV))), call_causal_attention_forward},
    /* all of wte and dwte: which rows the ids pick is not known before the op runs */
    {"token_embed_forward", "", SIZES(F(T_X), T_IDS, F(T_WTE), F(T_WPE)),
     WANTS(WR(0, F(T_X)), RD(1, T_IDS), RD(2, F(T_WTE)), RD(3, F(T_WPE))), call_token_embed_forward,
     init_tokens_1},
    {"token_embed_backward", "", SIZES(F(T_WTE), F(T_WPE), T_IDS, F(T_X)),
     WANTS(RW(0, F(T_WTE)), RW(1, F(T_WPE)), RD(2, T_IDS), RD(3, F(T_X))),
     call_token_embed_backward, init_tokens_2},
    {"patchify", "", SIZES(F(P_PATCHES), F(P_IMAGES)),
     WANTS(WR(0, F(P_PATCHES)), RD(1, F(P_IMAGES))), call_patchify},
    /* S % P != 0 (outside kernels.h's contract): all of images is reported read, a superset */
    {"patchify", "S not a multiple of P", SIZES(F(P_PATCHES), F(P_IMAGES_ODD)),
     WANTS(WR(0, F(P_PATCHES)), RD(1, F(P_IMAGES_ODD))), call_patchify_odd},
    {"embed_forward", "", SIZES(F(E_X), F(E_PATCHES), F(EC), F(E_POS)),
     WANTS(WR(0, F(E_X)), RD(1, F(E_PATCHES)), RD(2, F(EC)), RD(3, F(E_POS))), call_embed_forward},
    {"embed_backward", "", SIZES(F(EC), F(E_POS), F(E_PATCHES), F(E_X)),
     WANTS(RW(0, F(EC)), RW(1, F(E_POS)), WR(2, F(E_PATCHES)), RD(3, F(E_X))), call_embed_backward},
    {"embed_backward", "no samples: dcls, dpos += 0", SIZES(F(EC), F(E_POS), 0, 0),
     WANTS(RW(0, F(EC)), RW(1, F(E_POS))), call_embed_backward_no_samples},
    {"class_token_select", "", SIZES(F(C_OUT), F(C_X)),
     WANTS(WR(0, F(C_OUT)), BLOCKS(1, 0, F(CC), CB, F(C_ROW), 0)), call_class_token_select},
    {"class_token_select", "one token: one range", SIZES(F(C_OUT), F(C_OUT)),
     WANTS(WR(0, F(C_OUT)), RD(1, F(C_OUT))), call_class_token_select_one_token},
    {"class_token_select_backward", "", SIZES(F(C_X), F(C_OUT)),
     WANTS(BLOCKS(0, 0, F(CC), CB, F(C_ROW), 0), BLOCKS(0, 0, F(CC), CB, F(C_ROW), 1),
           RD(1, F(C_OUT))),
     call_class_token_select_backward},
    {"cross_entropy", "", SIZES(F(X_LOGITS), F(X_LOGITS), XB * sizeof(int32_t)),
     WANTS(WR(0, F(X_LOGITS)), RD(1, F(X_LOGITS)), RD(2, XB * sizeof(int32_t))), call_cross_entropy,
     init_labels_2},
    {"cross_entropy", "dlogits NULL: loss only", SIZES(F(X_LOGITS), XB * sizeof(int32_t)),
     WANTS(RD(0, F(X_LOGITS)), RD(1, XB * sizeof(int32_t))), call_cross_entropy_loss_only,
     init_labels_1},
    {"log_softmax", "", SIZES(F(X_LOGITS), F(X_LOGITS)),
     WANTS(WR(0, F(X_LOGITS)), RD(1, F(X_LOGITS))), call_log_softmax},
    {"nll_loss", "", SIZES(F(X_LOGITS), F(X_LOGITS), XB * sizeof(int32_t)),
     WANTS(WR(0, F(X_LOGITS)), RD(1, F(X_LOGITS)), RD(2, XB * sizeof(int32_t))), call_nll_loss,
     init_labels_2},
    {"log_softmax_backward", "", SIZES(F(X_LOGITS), F(X_LOGITS), F(X_LOGITS)),
     WANTS(WR(0, F(X_LOGITS)), RD(1, F(X_LOGITS)), RD(2, F(X_LOGITS))), call_log_softmax_backward},
    {"count_correct", "", SIZES(F(X_LOGITS), XB * sizeof(int32_t)),
     WANTS(RD(0, F(X_LOGITS)), RD(1, XB * sizeof(int32_t))), call_count_correct, init_labels_1},
    {"add", "", SIZES(F(NE), F(NE), F(NE)), WANTS(WR(0, F(NE)), RD(1, F(NE)), RD(2, F(NE))),
     call_add},
    {"add", "out is b", SIZES(F(NE), F(NE)), WANTS(WR(0, F(NE)), RD(1, F(NE)), RD(0, F(NE))),
     call_add_out_is_b},
    {"bias_gelu_forward", "", SIZES(F(B_X), F(B_X), F(BN)),
     WANTS(WR(0, F(B_X)), RD(1, F(B_X)), RD(2, F(BN))), call_bias_gelu_forward},
    {"bias_gelu_backward", "", SIZES(F(B_X), F(BN), F(B_X), F(B_X), F(BN)),
     WANTS(WR(0, F(B_X)), RW(1, F(BN)), RD(2, F(B_X)), RD(3, F(B_X)), RD(4, F(BN))),
     call_bias_gelu_backward},
    {"bias_gelu_backward", "dpre is dout", SIZES(F(B_X), F(BN), F(B_X), F(BN)),
     WANTS(WR(0, F(B_X)), RW(1, F(BN)), RD(0, F(B_X)), RD(2, F(B_X)), RD(3, F(BN))),
     call_bias_gelu_backward_in_place},
    {"residual_layernorm_forward", "",
     SIZES(F(N_X), F(N_X), F(NM), F(NM), F(N_X), F(N_X), F(NC), F(NC)),
     WANTS(WR(0, F(N_X)), WR(1, F(N_X)), WR(2, F(NM)), WR(3, F(NM)), RD(4, F(N_X)), RD(5, F(N_X)),
           RD(6, F(NC)), RD(7, F(NC))),
     call_residual_layernorm_forward},
    {"residual_layernorm_forward", "sum is x",
     SIZES(F(N_X), F(N_X), F(NM), F(NM), F(N_X), F(NC), F(NC)),
     WANTS(WR(0, F(N_X)), WR(1, F(N_X)), WR(2, F(NM)), WR(3, F(NM)), RD(0, F(N_X)), RD(4, F(N_X)),
           RD(5, F(NC)), RD(6, F(NC))),
     call_residual_layernorm_forward_sum_is_x},
    {"rmsnorm_forward", "", SIZES(F(N_X), F(NM), F(N_X), F(NC)),
     WANTS(WR(0, F(N_X)), WR(1, F(NM)), RD(2, F(N_X)), RD(3, F(NC))), call_rmsnorm_forward},
    {"rmsnorm_backward", "", SIZES(F(N_X), F(NC), F(N_X), F(N_X), F(NM), F(NC)),
     WANTS(RW(0, F(N_X)), RW(1, F(NC)), RD(2, F(N_X)), RD(3, F(N_X)), RD(4, F(NM)), RD(5, F(NC))),
     call_rmsnorm_backward},
    {"swiglu_forward", "", SIZES(F(NE), F(NE), F(NE)),
     WANTS(WR(0, F(NE)), RD(1, F(NE)), RD(2, F(NE))), call_swiglu_forward},
    {"swiglu_backward", "", SIZES(F(NE), F(NE), F(NE), F(NE), F(NE)),
     WANTS(RD(2, F(NE)), WR(0, F(NE)), WR(1, F(NE)), RD(3, F(NE)), RD(4, F(NE))),
     call_swiglu_backward},
    {"rope_forward", "", SIZES(F(R_X)), WANTS(RW(0, F(R_X))), call_rope_forward},
    {"rope_backward", "", SIZES(F(R_X)), WANTS(RW(0, F(R_X))), call_rope_backward},
    {"gqa_attention_forward", "", SIZES(F(Q_X), F(Q_P), F(Q_X), F(Q_KV), F(Q_KV)),
     WANTS(WR(0, F(Q_X)), WR(1, F(Q_P)), RD(2, F(Q_X)), RD(3, F(Q_KV)), RD(4, F(Q_KV))),
     call_gqa_attention_forward},
    {"gqa_attention_backward", "",
     SIZES(F(Q_X), F(Q_KV), F(Q_KV), F(Q_X), F(Q_X), F(Q_KV), F(Q_KV), F(Q_P)),
     WANTS(WR(0, F(Q_X)), WR(1, F(Q_KV)), WR(2, F(Q_KV)), RD(3, F(Q_X)), RD(4, F(Q_X)),
           RD(5, F(Q_KV)), RD(6, F(Q_KV)), RD(7, F(Q_P))),
     call_gqa_attention_backward},
    {"flash_attention_forward", "", SIZES(F(Q_X), F(Q_LSE), F(Q_X), F(Q_KV), F(Q_KV)),
     WANTS(WR(0, F(Q_X)), WR(1, F(Q_LSE)), RD(2, F(Q_X)), RD(3, F(Q_KV)), RD(4, F(Q_KV))),
     call_flash_attention_forward},
    {"flash_attention_backward", "",
     SIZES(F(Q_X), F(Q_KV), F(Q_KV), F(Q_X), F(Q_X), F(Q_KV), F(Q_KV), F(Q_X), F(Q_LSE), F(Q_WORK)),
     WANTS(WR(0, F(Q_X)), WR(1, F(Q_KV)), WR(2, F(Q_KV)), RD(3, F(Q_X)), RD(4, F(Q_X)),
           RD(5, F(Q_KV)), RD(6, F(Q_KV)), RD(7, F(Q_X)), RD(8, F(Q_LSE)), WR(9, F(Q_WORK))),
     call_flash_attention_backward},
};

enum { NCASES = sizeof cases / sizeof cases[0] };

/* ---- running a case ---- */

typedef struct Recorder {
    int calls;
    const char *op;
    KernelAccess acc[MAX_WANT];
    int n;
} Recorder;

static void record(void *ctx, const char *op, const KernelAccess *acc, int n) {
    Recorder *r = ctx;
    r->calls++;
    r->op = op;
    r->n = n;
    cr_assert(n >= 0 && n <= MAX_WANT, "%s reported %d accesses", op, n);
    if (n > 0) memcpy(r->acc, acc, (size_t)n * sizeof *acc);
}

/* Every buffer with its guards: mem[i] holds GUARD, the buffer p[i], GUARD. */
typedef struct Arena {
    int n;
    size_t total[MAX_BUFS];
    unsigned char *mem[MAX_BUFS];
    void *p[MAX_BUFS];
} Arena;

typedef struct Snapshot {
    unsigned char *mem[MAX_BUFS];
} Snapshot;

/* Deterministic xorshift, so a failure repeats. */
static uint32_t rand_next(uint32_t *s) {
    *s ^= *s << 13;
    *s ^= *s >> 17;
    *s ^= *s << 5;
    return *s;
}

/* Guards and buffers alike get floats in [-1, 1) (byte pieces of one at an odd end). */
static void arena_create(Arena *a, const Case *c, uint32_t seed) {
    a->n = c->nbuf;
    for (int i = 0; i < a->n; i++) {
        a->total[i] = GUARD + c->size[i] + GUARD;
        a->mem[i] = malloc(a->total[i]);
        cr_assert(a->mem[i]);
        a->p[i] = a->mem[i] + GUARD;
        for (size_t j = 0; j < a->total[i]; j += sizeof(float)) {
            const float x = (float)(rand_next(&seed) >> 8) / (float)(1 << 23) - 1.0f;
            const size_t left = a->total[i] - j;
            memcpy(a->mem[i] + j, &x, left < sizeof x ? left : sizeof x);
        }
    }
    if (c->init) c->init(a->p);
}

static void arena_free(Arena *a) {
    for (int i = 0; i < a->n; i++) free(a->mem[i]);
}

static void snapshot_take(Snapshot *s, const Arena *a) {
    for (int i = 0; i < a->n; i++) {
        s->mem[i] = malloc(a->total[i]);
        cr_assert(s->mem[i]);
        memcpy(s->mem[i], a->mem[i], a->total[i]);
    }
}

static void snapshot_restore(const Snapshot *s, Arena *a) {
    for (int i = 0; i < a->n; i++) memcpy(a->mem[i], s->mem[i], a->total[i]);
}

static void snapshot_free(Snapshot *s, const Arena *a) {
    for (int i = 0; i < a->n; i++) free(s->mem[i]);
}

/* 1 if every buffer (guards included) holds what s holds */
static int arena_equals(const Arena *a, const Snapshot *s) {
    for (int i = 0; i < a->n; i++)
        if (memcmp(a->mem[i], s->mem[i], a->total[i]) != 0) return 0;
    return 1;
}

static int same_result(double x, double y) {
    return memcmp(&x, &y, sizeof x) == 0;
}

/* (1): the reported accesses are the wanted ones, in order, pointing into the case's buffers */
static int expect_reported(const Case *c, const Arena *a, const Recorder *r) {
    cr_expect_eq(r->calls, 1, "%s (%s): %d reports for one call", c->op, c->what, r->calls);
    cr_expect(r->op && strcmp(r->op, c->op) == 0, "%s (%s): reported as %s", c->op, c->what,
              r->op ? r->op : "(null)");
    cr_expect_eq(r->n, c->nwant, "%s (%s): %d accesses, want %d", c->op, c->what, r->n, c->nwant);
    if (r->calls != 1 || r->n != c->nwant) return 0;
    int ok = 1;
    for (int i = 0; i < c->nwant; i++) {
        const Want *w = &c->want[i];
        const KernelAccess *got = &r->acc[i];
        const void *p = (const unsigned char *)a->p[w->buf] + w->off;
        const int same = got->p == p && got->bytes == w->bytes && got->count == w->count &&
                         got->stride == w->stride && got->write == w->write;
        cr_expect(same,
                  "%s (%s): access %d is %s of %zu bytes x %zu stride %zu at %p, want %s of "
                  "buffer %d + %zu: %zu bytes x %zu stride %zu",
                  c->op, c->what, i, got->write ? "write" : "read", got->bytes, got->count,
                  got->stride, got->p, w->write ? "write" : "read", w->buf, w->off, w->bytes,
                  w->count, w->stride);
        ok &= same;
    }
    return ok;
}

/* mask[i][j]: byte j of mem[i] is in a wanted access of this kind (write or read) */
static void mark(unsigned char **mask, const Case *c, const Arena *a, int write) {
    for (int i = 0; i < a->n; i++) mask[i] = calloc(a->total[i], 1);
    for (int k = 0; k < c->nwant; k++) {
        const Want *w = &c->want[k];
        if (w->write != write) continue;
        const size_t end = w->off + (w->count - 1) * w->stride + w->bytes;
        cr_assert(end <= c->size[w->buf], "%s (%s): a wanted access leaves buffer %d", c->op,
                  c->what, w->buf);
        for (size_t b = 0; b < w->count; b++)
            memset(mask[w->buf] + GUARD + w->off + b * w->stride, 1, w->bytes);
    }
}

static void unmark(unsigned char **mask, const Arena *a) {
    for (int i = 0; i < a->n; i++) free(mask[i]);
}

/* Every byte outside the mask (every byte: mask NULL) holds what s holds; returns the first that
 * does not (buffer and offset from the buffer's start, negative in the leading guard) through
 * *buf and *at. */
static int outside_mask_equals(const Arena *a, unsigned char **mask, const Snapshot *s, int *buf,
                               long *at) {
    for (int i = 0; i < a->n; i++)
        for (size_t j = 0; j < a->total[i]; j++)
            if (!(mask && mask[i][j]) && a->mem[i][j] != s->mem[i][j]) {
                *buf = i;
                *at = (long)j - GUARD;
                return 0;
            }
    return 1;
}

/* Reads: every byte outside the read ranges (guards, gaps between rows, write-only outputs) set
 * to `pattern` first changes nothing the op writes or returns, and the bytes it does not write
 * keep the pattern. NaN (0xff) and 1.3e7 (0x4b) between them change any sum, product, max or
 * comparison that would read them. */
static void expect_reads_complete(const Case *c, Arena *a, const Snapshot *before,
                                  const Snapshot *after, double result, unsigned char pattern) {
    unsigned char *rmask[MAX_BUFS], *wmask[MAX_BUFS];
    mark(rmask, c, a, 0);
    mark(wmask, c, a, 1);
    snapshot_restore(before, a);
    for (int i = 0; i < a->n; i++)
        for (size_t j = 0; j < a->total[i]; j++)
            if (!rmask[i][j]) a->mem[i][j] = pattern;
    Snapshot want; /* the pattern where the op does not write, its first results where it does */
    snapshot_take(&want, a);
    for (int i = 0; i < a->n; i++)
        for (size_t j = 0; j < a->total[i]; j++)
            if (wmask[i][j]) want.mem[i][j] = after->mem[i][j];
    const double got = c->call(&kernels_cpu, c->t, a->p);
    cr_expect(same_result(got, result),
              "%s (%s): with 0x%02x outside its reads it returned %g, not %g", c->op, c->what,
              pattern, got, result);
    int buf = 0;
    long at = 0;
    if (!outside_mask_equals(a, NULL, &want, &buf, &at))
        cr_expect_fail("%s (%s): with 0x%02x outside its reads, byte %ld of buffer %d is %s", c->op,
                       c->what, pattern, at, buf,
                       wmask[buf][at + GUARD] ? "not what it wrote before (an unreported read, "
                                                "or a reported write it did not make)"
                                              : "written");
    snapshot_free(&want, a);
    unmark(rmask, a);
    unmark(wmask, a);
}

static void check_case(const Case *c, uint32_t seed) {
    Arena a;
    arena_create(&a, c, seed);
    Snapshot before, after;
    snapshot_take(&before, &a);
    Recorder r = {0};
    kernels_checked_bind(&kernels_cpu, record, &r);
    const double got = c->call(&kernels_checked, c->t, a.p);
    kernels_checked_bind(NULL, NULL, NULL);
    snapshot_take(&after, &a);

    /* (3) the wrapper changes nothing: kernels_cpu called directly gives the same bytes */
    snapshot_restore(&before, &a);
    const double want = c->call(&kernels_cpu, c->t, a.p);
    cr_expect(arena_equals(&a, &after), "%s (%s): checked and direct calls differ", c->op, c->what);
    cr_expect(same_result(got, want), "%s (%s): returned %g, directly %g", c->op, c->what, got,
              want);

    if (expect_reported(c, &a, &r)) {
        /* (2) nothing written outside the write ranges: guards and inputs as they were */
        unsigned char *wmask[MAX_BUFS];
        mark(wmask, c, &a, 1);
        snapshot_restore(&after, &a);
        int buf = 0;
        long at = 0;
        cr_expect(outside_mask_equals(&a, wmask, &before, &buf, &at),
                  "%s (%s): wrote byte %ld of buffer %d (of %zu), outside its write ranges", c->op,
                  c->what, at, buf, c->size[buf]);
        unmark(wmask, &a);
        expect_reads_complete(c, &a, &before, &after, got, 0xff);
        expect_reads_complete(c, &a, &before, &after, got, 0x4b);
    }
    snapshot_free(&before, &a);
    snapshot_free(&after, &a);
    arena_free(&a);
}

Test(kernels_checked, every_op_reports_exactly_what_it_touches) {
    for (int i = 0; i < NCASES; i++) check_case(&cases[i], 0x9e3779b9u + (uint32_t)i * 7919u);
}

/* ---- names ---- */

_Static_assert(sizeof(Kernels) - offsetof(Kernels, cast) == 49 * sizeof(void (*)(void)),
               "kernels.h changed: list the new op below and give it cases");

static const char *const op_names[49] = {
    "cast",
    "zero",
    "copy_bytes",
    "zero_bytes",
    "copy_spans",
    "scale",
    "accumulate",
    "sum_squares",
    "all_finite",
    "adam_step",
    "toy_forward",
    "toy_backward",
    "mse_loss",
    "linear_forward",
    "linear_backward",
    "bias_grad",
    "layernorm_forward",
    "layernorm_backward",
    "gelu_forward",
    "gelu_backward",
    "attention_forward",
    "attention_backward",
    "patchify",
    "embed_forward",
    "embed_backward",
    "class_token_select",
    "class_token_select_backward",
    "cross_entropy",
    "count_correct",
    "add",
    "causal_attention_forward",
    "token_embed_forward",
    "token_embed_backward",
    "bias_gelu_forward",
    "bias_gelu_backward",
    "residual_layernorm_forward",
    "rmsnorm_forward",
    "rmsnorm_backward",
    "swiglu_forward",
    "swiglu_backward",
    "rope_forward",
    "rope_backward",
    "gqa_attention_forward",
    "gqa_attention_backward",
    "flash_attention_forward",
    "flash_attention_backward",
    "log_softmax",
    "nll_loss",
    "log_softmax_backward",
};

/* Every entry has cases, and every case's call reported the entry's own name (so no wrapper is
 * wired to another entry, which would report that entry's name). */
Test(kernels_checked, every_entry_is_covered_and_reports_its_name) {
    cr_expect_str_eq(kernels_checked.name, "checked");
    for (int k = 0; k < 49; k++) {
        int found = 0;
        for (int i = 0; i < NCASES; i++) found += strcmp(cases[i].op, op_names[k]) == 0;
        cr_expect(found > 0, "no case calls %s", op_names[k]);
    }
    for (int i = 0; i < NCASES; i++) {
        Arena a;
        arena_create(&a, &cases[i], 1);
        Recorder r = {0};
        kernels_checked_bind(&kernels_cpu, record, &r);
        cases[i].call(&kernels_checked, cases[i].t, a.p);
        kernels_checked_bind(NULL, NULL, NULL);
        cr_expect_eq(r.calls, 1, "%s: %d reports", cases[i].op, r.calls);
        cr_expect(r.op && strcmp(r.op, cases[i].op) == 0, "%s (%s) reported as %s", cases[i].op,
                  cases[i].what, r.op ? r.op : "(null)");
        arena_free(&a);
    }
}

/* c through kernels_checked bound to kernels_none: the wanted accesses are reported and no byte
 * changes (the op runs in the bound table, which does nothing). */
static void check_case_through_none(const Case *c) {
    Arena a;
    arena_create(&a, c, 2);
    Snapshot before;
    snapshot_take(&before, &a);
    Recorder r = {0};
    kernels_checked_bind(&kernels_none, record, &r);
    c->call(&kernels_checked, c->t, a.p);
    kernels_checked_bind(NULL, NULL, NULL);
    expect_reported(c, &a, &r);
    cr_expect(arena_equals(&a, &before), "%s (%s): kernels_none changed a byte", c->op, c->what);
    snapshot_free(&before, &a);
    arena_free(&a);
}

/* Through kernels_none (accounting-only runs) every case reports the same accesses and no byte
 * changes: the op runs in the bound table, not in kernels_cpu. */
Test(kernels_checked, runs_the_bound_table) {
    for (int i = 0; i < NCASES; i++) check_case_through_none(&cases[i]);
}

/* ---- a 2-byte compute dtype ---- */

/* The same calls at bf16 (and one at fp16): a tensor kernels.h types `void *` is 2 bytes an
 * element, strides included (bias_grad's dout rows, attention's q, k, v inside qkv, the class
 * token's rows); a `float *` one (parameter gradients, LayerNorm's mean and rstd, flash
 * attention's lse and scratch, mse_loss's target) stays 4, and labels and token ids 4. E.g.
 * linear_forward at M 5, K 7, N 3: out 30 bytes, in 70, w 42, b 6. */
static const Case half_cases[] = {
    {"toy_backward", "bf16: dw fp32", SIZES(H(3), H(NE), H(NE), H(NE), F(3)),
     WANTS(RD(0, H(3)), RD(1, H(NE)), RD(2, H(NE)), WR(3, H(NE)), RW(4, F(3))), call_toy_backward,
     .t = DTYPE_BF16},
    {"mse_loss", "bf16: target fp32", SIZES(H(NE), F(NE), H(NE)),
     WANTS(RD(0, H(NE)), RD(1, F(NE)), WR(2, H(NE))), call_mse_loss, .t = DTYPE_BF16},
    {"linear_forward", "bf16", SIZES(H(L_OUT), H(L_IN), H(L_W), H(LN)),
     WANTS(WR(0, H(L_OUT)), RD(1, H(L_IN)), RD(2, H(L_W)), RD(3, H(LN))), call_linear_forward,
     .t = DTYPE_BF16},
    {"linear_forward", "fp16", SIZES(H(L_OUT), H(L_IN), H(L_W), H(LN)),
     WANTS(WR(0, H(L_OUT)), RD(1, H(L_IN)), RD(2, H(L_W)), RD(3, H(LN))), call_linear_forward,
     .t = DTYPE_FP16},
    {"linear_backward", "bf16: dw, db fp32",
     SIZES(H(L_IN), F(L_W), F(LN), H(L_OUT), H(L_IN), H(L_W)),
     WANTS(WR(0, H(L_IN)), RW(1, F(L_W)), RW(2, F(LN)), RD(3, H(L_OUT)), RD(4, H(L_IN)),
           RD(5, H(L_W))),
     call_linear_backward, .t = DTYPE_BF16},
    {"bias_grad", "bf16: strided columns, db fp32", SIZES(F(GC), H(G_DOUT)),
     WANTS(RW(0, F(GC)), BLOCKS(1, H(GO), H(GC), GR, H(GS), 0)), call_bias_grad, .t = DTYPE_BF16},
    {"layernorm_forward", "bf16: mean, rstd fp32",
     SIZES(H(N_X), F(NM), F(NM), H(N_X), H(NC), H(NC)),
     WANTS(WR(0, H(N_X)), WR(1, F(NM)), WR(2, F(NM)), RD(3, H(N_X)), RD(4, H(NC)), RD(5, H(NC))),
     call_layernorm_forward, .t = DTYPE_BF16},
    {"layernorm_backward", "bf16: dw, db, mean, rstd fp32",
     SIZES(H(N_X), F(NC), F(NC), H(N_X), H(N_X), F(NM), F(NM), H(NC)),
     WANTS(RW(0, H(N_X)), RW(1, F(NC)), RW(2, F(NC)), RD(3, H(N_X)), RD(4, H(N_X)), RD(5, F(NM)),
           RD(6, F(NM)), RD(7, H(NC))),
     call_layernorm_backward, .t = DTYPE_BF16},
    {"attention_forward", "bf16, C not a multiple of heads: strided",
     SIZES(H(A_X_ODD), H(A_PROBS), H(A_QKV_ODD)),
     WANTS(BLOCKS(0, 0, H(A_USED_ODD), A_ROWS, H(AC_ODD), 1), WR(1, H(A_PROBS)),
           BLOCKS(2, 0, H(A_USED_ODD), A_ROWS, H(A_QKV_ROW_ODD), 0),
           BLOCKS(2, H(AC_ODD), H(A_USED_ODD), A_ROWS, H(A_QKV_ROW_ODD), 0),
           BLOCKS(2, H(2 * AC_ODD), H(A_USED_ODD), A_ROWS, H(A_QKV_ROW_ODD), 0)),
     call_attention_forward_odd, .t = DTYPE_BF16},
    {"embed_backward", "bf16: dcls, dpos fp32", SIZES(F(EC), F(E_POS), H(E_PATCHES), H(E_X)),
     WANTS(RW(0, F(EC)), RW(1, F(E_POS)), WR(2, H(E_PATCHES)), RD(3, H(E_X))), call_embed_backward,
     .t = DTYPE_BF16},
    {"class_token_select", "bf16: strided rows", SIZES(H(C_OUT), H(C_X)),
     WANTS(WR(0, H(C_OUT)), BLOCKS(1, 0, H(CC), CB, H(C_ROW), 0)), call_class_token_select,
     .t = DTYPE_BF16},
    {"cross_entropy", "bf16: labels int32", SIZES(H(X_LOGITS), H(X_LOGITS), XB * sizeof(int32_t)),
     WANTS(WR(0, H(X_LOGITS)), RD(1, H(X_LOGITS)), RD(2, XB * sizeof(int32_t))), call_cross_entropy,
     init_labels_2, .t = DTYPE_BF16},
    {"token_embed_backward", "bf16: dwte, dwpe fp32", SIZES(F(T_WTE), F(T_WPE), T_IDS, H(T_X)),
     WANTS(RW(0, F(T_WTE)), RW(1, F(T_WPE)), RD(2, T_IDS), RD(3, H(T_X))),
     call_token_embed_backward, init_tokens_2, .t = DTYPE_BF16},
    {"gqa_attention_forward", "bf16: probs bf16", SIZES(H(Q_X), H(Q_P), H(Q_X), H(Q_KV), H(Q_KV)),
     WANTS(WR(0, H(Q_X)), WR(1, H(Q_P)), RD(2, H(Q_X)), RD(3, H(Q_KV)), RD(4, H(Q_KV))),
     call_gqa_attention_forward, .t = DTYPE_BF16},
    {"flash_attention_backward", "bf16: lse, work fp32",
     SIZES(H(Q_X), H(Q_KV), H(Q_KV), H(Q_X), H(Q_X), H(Q_KV), H(Q_KV), H(Q_X), F(Q_LSE), F(Q_WORK)),
     WANTS(WR(0, H(Q_X)), WR(1, H(Q_KV)), WR(2, H(Q_KV)), RD(3, H(Q_X)), RD(4, H(Q_X)),
           RD(5, H(Q_KV)), RD(6, H(Q_KV)), RD(7, H(Q_X)), RD(8, F(Q_LSE)), WR(9, F(Q_WORK))),
     call_flash_attention_backward, .t = DTYPE_BF16},
};

/* Exact byte ranges through kernels_none, which computes nothing (so in any dtype); and where
 * kernels_cpu computes in the case's dtype, the whole of check_case: nothing written or read
 * outside the ranges, and the same results as a direct call. */
Test(kernels_checked, half_dtypes_report_2_bytes_an_element_and_fp32_tensors_4) {
    cr_expect_eq(kernels_checked.dtypes, KERNEL_ALL_DTYPES, "checked passes every dtype through");
    cr_expect_eq(kernels_none.dtypes, KERNEL_ALL_DTYPES, "none takes every dtype");
    for (size_t i = 0; i < sizeof half_cases / sizeof half_cases[0]; i++) {
        const Case *c = &half_cases[i];
        check_case_through_none(c);
        if (kernels_computes_in(&kernels_cpu, c->t))
            check_case(c, 0x85ebca6bu + (uint32_t)i * 7919u);
    }
}

/* ---- the binding is the calling thread's ---- */

/* Calls seen, and accesses to anything but `own`. */
typedef struct Tally {
    const void *own;
    int calls, foreign;
} Tally;

static void tally(void *ctx, const char *op, const KernelAccess *acc, int n) {
    Tally *t = ctx;
    (void)op;
    t->calls++;
    for (int i = 0; i < n; i++) t->foreign += acc[i].p != t->own;
}

typedef struct Worker {
    float x[NE];
    Tally tally;
    int rounds;
} Worker;

static void *scale_rounds(void *arg) {
    Worker *w = arg;
    kernels_checked_bind(&kernels_cpu, tally, &w->tally);
    for (int i = 0; i < w->rounds; i++) kernels_checked.scale(w->x, 2.0f, NE);
    kernels_checked_bind(NULL, NULL, NULL);
    return NULL;
}

Test(kernels_checked, each_thread_reports_to_its_own_callback) {
    Worker w[3];
    pthread_t th[2];
    for (int i = 0; i < 3; i++) {
        memset(&w[i], 0, sizeof w[i]);
        for (int j = 0; j < NE; j++) w[i].x[j] = 1.0f;
        w[i].tally.own = w[i].x;
        w[i].rounds = 10 + 7 * i;
    }
    /* this thread's binding is in place while the others bind and call */
    kernels_checked_bind(&kernels_cpu, tally, &w[2].tally);
    for (int i = 0; i < 2; i++) cr_assert_eq(pthread_create(&th[i], NULL, scale_rounds, &w[i]), 0);
    for (int i = 0; i < w[2].rounds; i++) kernels_checked.scale(w[2].x, 2.0f, NE);
    for (int i = 0; i < 2; i++) pthread_join(th[i], NULL);
    kernels_checked_bind(NULL, NULL, NULL);
    for (int i = 0; i < 3; i++) {
        cr_expect_eq(w[i].tally.calls, w[i].rounds, "thread %d: %d calls reported, made %d", i,
                     w[i].tally.calls, w[i].rounds);
        cr_expect_eq(w[i].tally.foreign, 0, "thread %d saw another thread's accesses", i);
        cr_expect_eq(w[i].x[NE - 1], ldexpf(1.0f, w[i].rounds), "thread %d's ops ran", i);
    }
}

/* Nothing bound: a programming error, never a silent pass-through. */
Test(kernels_checked, a_call_with_nothing_bound_aborts, .signal = SIGABRT,
     .init = cr_redirect_stderr) {
    float x[4] = {0};
    kernels_checked.zero(x, 4);
}

Test(kernels_checked, a_call_after_unbinding_aborts, .signal = SIGABRT,
     .init = cr_redirect_stderr) {
    float x[4] = {0};
    Tally t = {.own = x};
    kernels_checked_bind(&kernels_cpu, tally, &t);
    kernels_checked.zero(x, 4);
    cr_assert_eq(t.calls, 1, "bound, the call is reported and returns");
    kernels_checked_bind(NULL, NULL, NULL);
    kernels_checked.zero(x, 4);
}

static void *zero_four(void *x) {
    kernels_checked.zero(x, 4);
    return NULL;
}

/* Another thread's binding does not cover a thread that bound nothing (a rank's pool worker). */
Test(kernels_checked, a_thread_without_its_own_binding_aborts, .signal = SIGABRT,
     .init = cr_redirect_stderr) {
    float x[4] = {0};
    Tally t = {.own = x};
    kernels_checked_bind(&kernels_cpu, tally, &t);
    pthread_t th;
    cr_assert_eq(pthread_create(&th, NULL, zero_four, x), 0);
    pthread_join(th, NULL);
}
