/* cuda_ops: the functions kernels_cuda's table holds, one per op of kernels/kernels.h with the
 * same signature and meaning (documented there once). Internal to kernels/cuda. */
#ifndef FSDP_CUDA_OPS_H
#define FSDP_CUDA_OPS_H

#include <stddef.h>
#include <stdint.h>

#include "kernels/kernels.h"

#ifdef __cplusplus
extern "C" {
#endif

void cuda_cast(void *dst, DType dst_type, const void *src, DType src_type, size_t n);
void cuda_zero(float *x, size_t n);
void cuda_copy_bytes(void *dst, const void *src, size_t bytes);
void cuda_zero_bytes(void *dst, size_t bytes);
void cuda_scale(float *x, float s, size_t n);
void cuda_accumulate(float *y, const float *x, size_t n);
double cuda_sum_squares(const float *x, size_t n);
int cuda_all_finite(const float *x, size_t n);
void cuda_adam_step(float *param, const float *grad, float *m, float *v, size_t n,
                    const AdamHyper *h, long step);
void cuda_toy_forward(const float w[3], const float *x, float *y, size_t n);
void cuda_toy_backward(const float w[3], const float *x, const float *dy, float *dx, float dw[3],
                       size_t n);
float cuda_mse_loss(const float *y, const float *target, float *dy, size_t n);
void cuda_linear_forward(float *out, const float *in, const float *w, const float *b, size_t M,
                         size_t K, size_t N);
void cuda_linear_backward(float *din, float *dw, float *db, const float *dout, const float *in,
                          const float *w, size_t M, size_t K, size_t N);
void cuda_bias_grad(float *db, const float *dout, size_t rows, size_t cols, size_t stride);
void cuda_layernorm_forward(float *out, float *mean, float *rstd, const float *in, const float *w,
                            const float *b, size_t M, size_t C, float eps);
void cuda_layernorm_backward(float *din, float *dw, float *db, const float *dout, const float *in,
                             const float *mean, const float *rstd, const float *w, size_t M,
                             size_t C);
void cuda_gelu_forward(float *out, const float *in, size_t n);
void cuda_gelu_backward(float *din, const float *in, const float *dout, size_t n);
void cuda_attention_forward(float *out, float *probs, const float *qkv, size_t B, size_t T,
                            size_t C, size_t heads);
void cuda_attention_backward(float *dqkv, const float *dout, const float *qkv, const float *probs,
                             size_t B, size_t T, size_t C, size_t heads);
void cuda_patchify(float *patches, const float *images, size_t B, size_t S, size_t P);
void cuda_embed_forward(float *x, const float *patch_out, const float *cls, const float *pos,
                        size_t B, size_t T, size_t C);
void cuda_embed_backward(float *dcls, float *dpos, float *dpatch_out, const float *dx, size_t B,
                         size_t T, size_t C);
void cuda_class_token_select(float *out, const float *x, size_t B, size_t T, size_t C);
void cuda_class_token_select_backward(float *dx, const float *dout, size_t B, size_t T, size_t C);
float cuda_cross_entropy(float *dlogits, const float *logits, const int32_t *labels, size_t B,
                         size_t classes, float grad_scale);
size_t cuda_count_correct(const float *logits, const int32_t *labels, size_t B, size_t classes);
void cuda_add(float *out, const float *a, const float *b, size_t n);
void cuda_causal_attention_forward(float *out, float *probs, const float *qkv, size_t B, size_t T,
                                   size_t C, size_t heads);
void cuda_token_embed_forward(float *x, const int32_t *tokens, const float *wte, const float *wpe,
                              size_t B, size_t T, size_t C, size_t V);
void cuda_token_embed_backward(float *dwte, float *dwpe, const int32_t *tokens, const float *dx,
                               size_t B, size_t T, size_t C, size_t V);
void cuda_bias_gelu_forward(float *out, const float *pre, const float *b, size_t M, size_t N);
void cuda_bias_gelu_backward(float *dpre, float *db, const float *dout, const float *pre,
                             const float *b, size_t M, size_t N);
void cuda_residual_layernorm_forward(float *sum, float *out, float *mean, float *rstd,
                                     const float *x, const float *y, const float *w, const float *b,
                                     size_t M, size_t C, float eps);

void cuda_rmsnorm_forward(float *out, float *rstd, const float *in, const float *w, size_t M,
                          size_t C, float eps);
void cuda_rmsnorm_backward(float *din, float *dw, const float *dout, const float *in,
                           const float *rstd, const float *w, size_t M, size_t C);
void cuda_swiglu_forward(float *out, const float *gate, const float *up, size_t n);
void cuda_swiglu_backward(float *dgate, float *dup, const float *dout, const float *gate,
                          const float *up, size_t n);
void cuda_rope_forward(float *x, size_t B, size_t T, size_t heads, size_t D, float theta);
void cuda_rope_backward(float *dx, size_t B, size_t T, size_t heads, size_t D, float theta);
void cuda_gqa_attention_forward(float *out, float *probs, const float *q, const float *k,
                                const float *v, const AttnShape *s);
void cuda_gqa_attention_backward(float *dq, float *dk, float *dv, const float *dout, const float *q,
                                 const float *k, const float *v, const float *probs,
                                 const AttnShape *s);
void cuda_flash_attention_forward(float *out, float *lse, const float *q, const float *k,
                                  const float *v, const AttnShape *s);
void cuda_flash_attention_backward(float *dq, float *dk, float *dv, const float *dout,
                                   const float *q, const float *k, const float *v, const float *out,
                                   const float *lse, float *work, const AttnShape *s);

#ifdef __cplusplus
}
#endif

#endif
