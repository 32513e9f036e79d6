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
static void copy_spans(void *d, DType dt, const void *s, DType st, const CopySpan *c, size_t n) {
    (void)d, (void)dt, (void)s, (void)st, (void)c, (void)n;
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
static void toy_forward(DType t, const void *w, const void *x, void *y, size_t n) {
    (void)t, (void)w, (void)x, (void)y, (void)n;
}
static void toy_backward(DType t, const void *w, const void *x, const void *dy, void *dx,
                         float dw[3], size_t n) {
    (void)t, (void)w, (void)x, (void)dy, (void)dx, (void)dw, (void)n;
}
static float mse_loss(DType t, const void *y, const float *target, void *dy, size_t n) {
    (void)t, (void)y, (void)target, (void)dy, (void)n;
    return 0.0f;
}
static void linear_forward(DType t, void *o, const void *i, const void *w, const void *b, size_t M,
                           size_t K, size_t N) {
    (void)t, (void)o, (void)i, (void)w, (void)b, (void)M, (void)K, (void)N;
}
static void linear_backward(DType t, void *di, float *dw, float *db, const void *dout,
                            const void *in, const void *w, size_t M, size_t K, size_t N) {
    (void)t, (void)di, (void)dw, (void)db, (void)dout, (void)in, (void)w, (void)M, (void)K, (void)N;
}
static void bias_grad(DType t, float *db, const void *d, size_t rows, size_t cols, size_t stride) {
    (void)t, (void)db, (void)d, (void)rows, (void)cols, (void)stride;
}
static void layernorm_forward(DType t, void *o, float *mean, float *rstd, const void *in,
                              const void *w, const void *b, size_t M, size_t C, float eps) {
    (void)t, (void)o, (void)mean, (void)rstd, (void)in, (void)w, (void)b, (void)M, (void)C,
        (void)eps;
}
static void layernorm_backward(DType t, void *di, float *dw, float *db, const void *dout,
                               const void *in, const float *mean, const float *rstd, const void *w,
                               size_t M, size_t C) {
    (void)t, (void)di, (void)dw, (void)db, (void)dout, (void)in, (void)mean, (void)rstd, (void)w,
        (void)M, (void)C;
}
static void gelu_forward(DType t, void *o, const void *i, size_t n) {
    (void)t, (void)o, (void)i, (void)n;
}
static void gelu_backward(DType t, void *di, const void *i, const void *d, size_t n) {
    (void)t, (void)di, (void)i, (void)d, (void)n;
}
static void attention_forward(DType t, void *o, void *p, const void *qkv, size_t B, size_t T,
                              size_t C, size_t heads) {
    (void)t, (void)o, (void)p, (void)qkv, (void)B, (void)T, (void)C, (void)heads;
}
static void attention_backward(DType t, void *dqkv, const void *dout, const void *qkv,
                               const void *p, size_t B, size_t T, size_t C, size_t heads) {
    (void)t, (void)dqkv, (void)dout, (void)qkv, (void)p, (void)B, (void)T, (void)C, (void)heads;
}
static void patchify(DType t, void *p, const void *img, size_t B, size_t S, size_t P) {
    (void)t, (void)p, (void)img, (void)B, (void)S, (void)P;
}
static void embed_forward(DType t, void *x, const void *po, const void *cls, const void *pos,
                          size_t B, size_t T, size_t C) {
    (void)t, (void)x, (void)po, (void)cls, (void)pos, (void)B, (void)T, (void)C;
}
static void embed_backward(DType t, float *dcls, float *dpos, void *dpo, const void *dx, size_t B,
                           size_t T, size_t C) {
    (void)t, (void)dcls, (void)dpos, (void)dpo, (void)dx, (void)B, (void)T, (void)C;
}
static void class_token_select(DType t, void *o, const void *x, size_t B, size_t T, size_t C) {
    (void)t, (void)o, (void)x, (void)B, (void)T, (void)C;
}
static void class_token_select_backward(DType t, void *dx, const void *d, size_t B, size_t T,
                                        size_t C) {
    (void)t, (void)dx, (void)d, (void)B, (void)T, (void)C;
}
static float cross_entropy(DType t, void *dl, const void *l, const int32_t *lab, size_t B, size_t K,
                           float s) {
    (void)t, (void)dl, (void)l, (void)lab, (void)B, (void)K, (void)s;
    return 0.0f;
}
static size_t count_correct(DType t, const void *l, const int32_t *lab, size_t B, size_t K) {
    (void)t, (void)l, (void)lab, (void)B, (void)K;
    return 0;
}
static void add(DType t, void *o, const void *a, const void *b, size_t n) {
    (void)t, (void)o, (void)a, (void)b, (void)n;
}
static void causal_attention_forward(DType t, void *o, void *p, const void *qkv, size_t B, size_t T,
                                     size_t C, size_t heads) {
    (void)t, (void)o, (void)p, (void)qkv, (void)B, (void)T, (void)C, (void)heads;
}
static void token_embed_forward(DType t, void *x, const int32_t *tok, const void *wte,
                                const void *wpe, size_t B, size_t T, size_t C, size_t V) {
    (void)t, (void)x, (void)tok, (void)wte, (void)wpe, (void)B, (void)T, (void)C, (void)V;
}
static void token_embed_backward(DType t, float *dwte, float *dwpe, const int32_t *tok,
                                 const void *dx, size_t B, size_t T, size_t C, size_t V) {
    (void)t, (void)dwte, (void)dwpe, (void)tok, (void)dx, (void)B, (void)T, (void)C, (void)V;
}
static void bias_gelu_forward(DType t, void *o, const void *pre, const void *b, size_t M,
                              size_t N) {
    (void)t, (void)o, (void)pre, (void)b, (void)M, (void)N;
}
static void bias_gelu_backward(DType t, void *dpre, float *db, const void *dout, const void *pre,
                               const void *b, size_t M, size_t N) {
    (void)t, (void)dpre, (void)db, (void)dout, (void)pre, (void)b, (void)M, (void)N;
}
static void residual_layernorm_forward(DType t, void *sum, void *o, float *mean, float *rstd,
                                       const void *x, const void *y, const void *w, const void *b,
                                       size_t M, size_t C, float eps) {
    (void)t, (void)sum, (void)o, (void)mean, (void)rstd, (void)x, (void)y, (void)w, (void)b,
        (void)M, (void)C, (void)eps;
}

static void rmsnorm_forward(DType t, void *o, float *rstd, const void *in, const void *w, size_t M,
                            size_t C, float eps) {
    (void)t, (void)o, (void)rstd, (void)in, (void)w, (void)M, (void)C, (void)eps;
}
static void rmsnorm_backward(DType t, void *di, float *dw, const void *dout, const void *in,
                             const float *rstd, const void *w, size_t M, size_t C) {
    (void)t, (void)di, (void)dw, (void)dout, (void)in, (void)rstd, (void)w, (void)M, (void)C;
}
static void swiglu_forward(DType t, void *o, const void *gate, const void *up, size_t n) {
    (void)t, (void)o, (void)gate, (void)up, (void)n;
}
static void swiglu_backward(DType t, void *dg, void *du, const void *dout, const void *gate,
                            const void *up, size_t n) {
    (void)t, (void)dg, (void)du, (void)dout, (void)gate, (void)up, (void)n;
}
static void rope_forward(DType t, void *x, size_t B, size_t T, size_t heads, size_t D,
                         float theta) {
    (void)t, (void)x, (void)B, (void)T, (void)heads, (void)D, (void)theta;
}
static void rope_backward(DType t, void *dx, size_t B, size_t T, size_t heads, size_t D,
                          float theta) {
    (void)t, (void)dx, (void)B, (void)T, (void)heads, (void)D, (void)theta;
}
static void gqa_attention_forward(DType t, void *o, void *probs, const void *q, const void *k,
                                  const void *v, const AttnShape *s) {
    (void)t, (void)o, (void)probs, (void)q, (void)k, (void)v, (void)s;
}
static void gqa_attention_backward(DType t, void *dq, void *dk, void *dv, const void *dout,
                                   const void *q, const void *k, const void *v, const void *probs,
                                   const AttnShape *s) {
    (void)t, (void)dq, (void)dk, (void)dv, (void)dout, (void)q, (void)k, (void)v, (void)probs,
        (void)s;
}
static void flash_attention_forward(DType t, void *o, float *lse, const void *q, const void *k,
                                    const void *v, const AttnShape *s) {
    (void)t, (void)o, (void)lse, (void)q, (void)k, (void)v, (void)s;
}
static void flash_attention_backward(DType t, void *dq, void *dk, void *dv, const void *dout,
                                     const void *q, const void *k, const void *v, const void *o,
                                     const float *lse, float *work, const AttnShape *s) {
    (void)t, (void)dq, (void)dk, (void)dv, (void)dout, (void)q, (void)k, (void)v, (void)o,
        (void)lse, (void)work, (void)s;
}

static void log_softmax(float *lp, const float *x, size_t rows, size_t K) {
    (void)lp, (void)x, (void)rows, (void)K;
}
static float nll_loss(float *d, const float *lp, const int32_t *lab, size_t rows, size_t K,
                      float s) {
    (void)d, (void)lp, (void)lab, (void)rows, (void)K, (void)s;
    return 0.0f;
}
static void log_softmax_backward(float *dx, const float *d, const float *lp, size_t rows,
                                 size_t K) {
    (void)dx, (void)d, (void)lp, (void)rows, (void)K;
}

#define SAME_NAME(op) .op = op,
/* No limits: nothing is computed, and an accounting-only run takes any sequence. */
const Kernels kernels_none = {.name = "none (accounting only)",
                              .dtypes = KERNEL_ALL_DTYPES,
                              .max_tokens = 0,
                              .max_flash_tokens = 0,
                              .flash_uses_work = 1,
                              KERNEL_OPS(SAME_NAME)};
