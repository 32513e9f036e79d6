/* kernels_none: the op table of accounting-only runs: every op does nothing, so the schedule runs
 * on devices that hold no data (how the simulator sizes models bigger than memory). */
#include "sim/kernels_none.h"

/* Each op's signature, with nothing done; the parameters are left unnamed on purpose. */

static void cast(void *d, DType dt, const void *s, DType st, size_t n) {
    (void)d, (void)dt, (void)s, (void)st, (void)n;
}
static void zero(float *x, size_t n) {
    (void)x, (void)n;
}
static void copy_bytes(void *d, const void *s, size_t n) {
    (void)d, (void)s, (void)n;
}
static void zero_bytes(void *d, size_t n) {
    (void)d, (void)n;
}
static void scale(float *x, float s, size_t n) {
    (void)x, (void)s, (void)n;
}
static void accumulate(float *y, const float *x, size_t n) {
    (void)y, (void)x, (void)n;
}
static double sum_squares(const float *x, size_t n) {
    (void)x, (void)n;
    return 0.0;
}
static int all_finite(const float *x, size_t n) {
    (void)x, (void)n;
    return 1;
}
static void adam_step(float *p, const float *g, float *m, float *v, size_t n, const AdamHyper *h,
                      long step) {
    (void)p, (void)g, (void)m, (void)v, (void)n, (void)h, (void)step;
}
static void toy_forward(const float w[3], const float *x, float *y, size_t n) {
    (void)w, (void)x, (void)y, (void)n;
}
static void toy_backward(const float w[3], const float *x, const float *dy, float *dx, float dw[3],
                         size_t n) {
    (void)w, (void)x, (void)dy, (void)dx, (void)dw, (void)n;
}
static float mse_loss(const float *y, const float *t, float *dy, size_t n) {
    (void)y, (void)t, (void)dy, (void)n;
    return 0.0f;
}
static void linear_forward(float *o, const float *i, const float *w, const float *b, size_t M,
                           size_t K, size_t N) {
    (void)o, (void)i, (void)w, (void)b, (void)M, (void)K, (void)N;
}
static void linear_backward(float *di, float *dw, float *db, const float *dout, const float *in,
                            const float *w, size_t M, size_t K, size_t N) {
    (void)di, (void)dw, (void)db, (void)dout, (void)in, (void)w, (void)M, (void)K, (void)N;
}
static void bias_grad(float *db, const float *d, size_t rows, size_t cols, size_t stride) {
    (void)db, (void)d, (void)rows, (void)cols, (void)stride;
}
static void layernorm_forward(float *o, float *mean, float *rstd, const float *in, const float *w,
                              const float *b, size_t M, size_t C, float eps) {
    (void)o, (void)mean, (void)rstd, (void)in, (void)w, (void)b, (void)M, (void)C, (void)eps;
}
static void layernorm_backward(float *di, float *dw, float *db, const float *dout, const float *in,
                               const float *mean, const float *rstd, const float *w, size_t M,
                               size_t C) {
    (void)di, (void)dw, (void)db, (void)dout, (void)in, (void)mean, (void)rstd, (void)w, (void)M,
        (void)C;
}
static void gelu_forward(float *o, const float *i, size_t n) {
    (void)o, (void)i, (void)n;
}
static void gelu_backward(float *di, const float *i, const float *d, size_t n) {
    (void)di, (void)i, (void)d, (void)n;
}
static void attention_forward(float *o, float *p, const float *qkv, size_t B, size_t T, size_t C,
                              size_t heads) {
    (void)o, (void)p, (void)qkv, (void)B, (void)T, (void)C, (void)heads;
}
static void attention_backward(float *dqkv, const float *dout, const float *qkv, const float *p,
                               size_t B, size_t T, size_t C, size_t heads) {
    (void)dqkv, (void)dout, (void)qkv, (void)p, (void)B, (void)T, (void)C, (void)heads;
}
static void patchify(float *p, const float *img, size_t B, size_t S, size_t P) {
    (void)p, (void)img, (void)B, (void)S, (void)P;
}
static void embed_forward(float *x, const float *po, const float *cls, const float *pos, size_t B,
                          size_t T, size_t C) {
    (void)x, (void)po, (void)cls, (void)pos, (void)B, (void)T, (void)C;
}
static void embed_backward(float *dcls, float *dpos, float *dpo, const float *dx, size_t B,
                           size_t T, size_t C) {
    (void)dcls, (void)dpos, (void)dpo, (void)dx, (void)B, (void)T, (void)C;
}
static void class_token_select(float *o, const float *x, size_t B, size_t T, size_t C) {
    (void)o, (void)x, (void)B, (void)T, (void)C;
}
static void class_token_select_backward(float *dx, const float *d, size_t B, size_t T, size_t C) {
    (void)dx, (void)d, (void)B, (void)T, (void)C;
}
static float cross_entropy(float *dl, const float *l, const int32_t *lab, size_t B, size_t K,
                           float s) {
    (void)dl, (void)l, (void)lab, (void)B, (void)K, (void)s;
    return 0.0f;
}
static size_t count_correct(const float *l, const int32_t *lab, size_t B, size_t K) {
    (void)l, (void)lab, (void)B, (void)K;
    return 0;
}
static void add(float *o, const float *a, const float *b, size_t n) {
    (void)o, (void)a, (void)b, (void)n;
}
static void causal_attention_forward(float *o, float *p, const float *qkv, size_t B, size_t T,
                                     size_t C, size_t heads) {
    (void)o, (void)p, (void)qkv, (void)B, (void)T, (void)C, (void)heads;
}
static void token_embed_forward(float *x, const int32_t *tok, const float *wte, const float *wpe,
                                size_t B, size_t T, size_t C, size_t V) {
    (void)x, (void)tok, (void)wte, (void)wpe, (void)B, (void)T, (void)C, (void)V;
}
static void token_embed_backward(float *dwte, float *dwpe, const int32_t *tok, const float *dx,
                                 size_t B, size_t T, size_t C, size_t V) {
    (void)dwte, (void)dwpe, (void)tok, (void)dx, (void)B, (void)T, (void)C, (void)V;
}
static void bias_gelu_forward(float *o, const float *pre, const float *b, size_t M, size_t N) {
    (void)o, (void)pre, (void)b, (void)M, (void)N;
}
static void bias_gelu_backward(float *dpre, float *db, const float *dout, const float *pre,
                               const float *b, size_t M, size_t N) {
    (void)dpre, (void)db, (void)dout, (void)pre, (void)b, (void)M, (void)N;
}
static void residual_layernorm_forward(float *sum, float *o, float *mean, float *rstd,
                                       const float *x, const float *y, const float *w,
                                       const float *b, size_t M, size_t C, float eps) {
    (void)sum, (void)o, (void)mean, (void)rstd, (void)x, (void)y, (void)w, (void)b, (void)M,
        (void)C, (void)eps;
}

static void rmsnorm_forward(float *o, float *rstd, const float *in, const float *w, size_t M,
                            size_t C, float eps) {
    (void)o, (void)rstd, (void)in, (void)w, (void)M, (void)C, (void)eps;
}
static void rmsnorm_backward(float *di, float *dw, const float *dout, const float *in,
                             const float *rstd, const float *w, size_t M, size_t C) {
    (void)di, (void)dw, (void)dout, (void)in, (void)rstd, (void)w, (void)M, (void)C;
}
static void swiglu_forward(float *o, const float *gate, const float *up, size_t n) {
    (void)o, (void)gate, (void)up, (void)n;
}
static void swiglu_backward(float *dg, float *du, const float *dout, const float *gate,
                            const float *up, size_t n) {
    (void)dg, (void)du, (void)dout, (void)gate, (void)up, (void)n;
}
static void rope_forward(float *x, size_t B, size_t T, size_t heads, size_t D, float theta) {
    (void)x, (void)B, (void)T, (void)heads, (void)D, (void)theta;
}
static void rope_backward(float *dx, size_t B, size_t T, size_t heads, size_t D, float theta) {
    (void)dx, (void)B, (void)T, (void)heads, (void)D, (void)theta;
}
static void gqa_attention_forward(float *o, float *probs, const float *q, const float *k,
                                  const float *v, const AttnShape *s) {
    (void)o, (void)probs, (void)q, (void)k, (void)v, (void)s;
}
static void gqa_attention_backward(float *dq, float *dk, float *dv, const float *dout,
                                   const float *q, const float *k, const float *v,
                                   const float *probs, const AttnShape *s) {
    (void)dq, (void)dk, (void)dv, (void)dout, (void)q, (void)k, (void)v, (void)probs, (void)s;
}
static void flash_attention_forward(float *o, float *lse, const float *q, const float *k,
                                    const float *v, const AttnShape *s) {
    (void)o, (void)lse, (void)q, (void)k, (void)v, (void)s;
}
static void flash_attention_backward(float *dq, float *dk, float *dv, const float *dout,
                                     const float *q, const float *k, const float *v, const float *o,
                                     const float *lse, float *work, const AttnShape *s) {
    (void)dq, (void)dk, (void)dv, (void)dout, (void)q, (void)k, (void)v, (void)o, (void)lse,
        (void)work, (void)s;
}

#define SAME_NAME(op) .op = op,
const Kernels kernels_none = {.name = "none (accounting only)", KERNEL_OPS(SAME_NAME)};
