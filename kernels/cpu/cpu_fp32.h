/* The CPU's fp32 kernels, one per op that takes a compute dtype: what kernels/cpu/dtype_cpu.c
 * runs for fp32 directly and for bf16 and fp16 on operands it widened (semantics in
 * ../kernels.h; every tensor here is fp32). */
#ifndef FSDP_CPU_FP32_H
#define FSDP_CPU_FP32_H

#include <stddef.h>
#include <stdint.h>

#include "kernels/kernels.h"

void f32_toy_forward(const float w[3], const float *x, float *y, size_t n);
void f32_toy_backward(const float w[3], const float *x, const float *dy, float *dx, float dw[3],
                      size_t n);
float f32_mse_loss(const float *y, const float *target, float *dy, size_t n);
void f32_linear_forward(float *out, const float *in, const float *w, const float *b, size_t M,
                        size_t K, size_t N);
void f32_linear_backward(float *din, float *dw, float *db, const float *dout, const float *in,
                         const float *w, size_t M, size_t K, size_t N);
void f32_bias_grad(float *db, const float *dout, size_t rows, size_t cols, size_t stride);
void f32_layernorm_forward(float *out, float *mean, float *rstd, const float *in, const float *w,
                           const float *b, size_t M, size_t C, float eps);
void f32_layernorm_backward(float *din, float *dw, float *db, const float *dout, const float *in,
                            const float *mean, const float *rstd, const float *w, size_t M,
                            size_t C);
void f32_gelu_forward(float *out, const float *in, size_t n);
void f32_gelu_backward(float *din, const float *in, const float *dout, size_t n);
void f32_attention_forward(float *out, float *probs, const float *qkv, size_t B, size_t T, size_t C,
                           size_t heads);
void f32_attention_backward(float *dqkv, const float *dout, const float *qkv, const float *probs,
                            size_t B, size_t T, size_t C, size_t heads);
void f32_patchify(float *patches, const float *images, size_t B, size_t S, size_t P);
void f32_embed_forward(float *x, const float *patch_out, const float *cls, const float *pos,
                       size_t B, size_t T, size_t C);
void f32_embed_backward(float *dcls, float *dpos, float *dpatch_out, const float *dx, size_t B,
                        size_t T, size_t C);
void f32_class_token_select(float *out, const float *x, size_t B, size_t T, size_t C);
void f32_class_token_select_backward(float *dx, const float *dout, size_t B, size_t T, size_t C);
float f32_cross_entropy(float *dlogits, const float *logits, const int32_t *labels, size_t B,
                        size_t classes, float grad_scale);
size_t f32_count_correct(const float *logits, const int32_t *labels, size_t B, size_t classes);
void f32_add(float *out, const float *a, const float *b, size_t n);
void f32_causal_attention_forward(float *out, float *probs, const float *qkv, size_t B, size_t T,
                                  size_t C, size_t heads);
void f32_token_embed_forward(float *x, const int32_t *tokens, const float *wte, const float *wpe,
                             size_t B, size_t T, size_t C, size_t V);
void f32_token_embed_backward(float *dwte, float *dwpe, const int32_t *tokens, const float *dx,
                              size_t B, size_t T, size_t C, size_t V);
void f32_bias_gelu_forward(float *out, const float *pre, const float *b, size_t M, size_t N);
void f32_bias_gelu_backward(float *dpre, float *db, const float *dout, const float *pre,
                            const float *b, size_t M, size_t N);
void f32_residual_layernorm_forward(float *sum, float *out, float *mean, float *rstd,
                                    const float *x, const float *y, const float *w, const float *b,
                                    size_t M, size_t C, float eps);
void f32_rmsnorm_forward(float *out, float *rstd, const float *in, const float *w, size_t M,
                         size_t C, float eps);
void f32_rmsnorm_backward(float *din, float *dw, const float *dout, const float *in,
                          const float *rstd, const float *w, size_t M, size_t C);
void f32_swiglu_forward(float *out, const float *gate, const float *up, size_t n);
void f32_swiglu_backward(float *dgate, float *dup, const float *dout, const float *gate,
                         const float *up, size_t n);
void f32_rope_forward(float *x, size_t B, size_t T, size_t heads, size_t D, float theta);
void f32_rope_backward(float *dx, size_t B, size_t T, size_t heads, size_t D, float theta);
void f32_gqa_attention_forward(float *out, float *probs, const float *q, const float *k,
                               const float *v, const AttnShape *s);
void f32_gqa_attention_backward(float *dq, float *dk, float *dv, const float *dout, const float *q,
                                const float *k, const float *v, const float *probs,
                                const AttnShape *s);
void f32_flash_attention_forward(float *out, float *lse, const float *q, const float *k,
                                 const float *v, const AttnShape *s);
void f32_flash_attention_backward(float *dq, float *dk, float *dv, const float *dout,
                                  const float *q, const float *k, const float *v, const float *out,
                                  const float *lse, float *work, const AttnShape *s);

#endif
