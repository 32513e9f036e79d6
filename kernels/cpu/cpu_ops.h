/* The internal header of the CPU op table: the functions kernels_cpu.c puts into the
 * `kernels_cpu` table (semantics are documented once, in ../kernels.h), and the knob that sets
 * how many threads OpenBLAS uses. Only kernels/cpu and its tests include it. */
#ifndef FSDP_CPU_OPS_H
#define FSDP_CPU_OPS_H

#include <stddef.h>
#include <stdint.h>

/* OpenBLAS threads for every later GEMM in this process (the simulator gives each rank thread
 * one BLAS thread); n < 1 is taken as 1. */
void kernels_cpu_set_threads(int n);

void cpu_linear_forward(float *out, const float *in, const float *w, const float *b, size_t M,
                        size_t K, size_t N);
void cpu_bias_grad(float *db, const float *dout, size_t rows, size_t cols, size_t stride);
void cpu_linear_backward(float *din, float *dw, float *db, const float *dout, const float *in,
                         const float *w, size_t M, size_t K, size_t N);

void cpu_layernorm_forward(float *out, float *mean, float *rstd, const float *in, const float *w,
                           const float *b, size_t M, size_t C, float eps);
void cpu_layernorm_backward(float *din, float *dw, float *db, const float *dout, const float *in,
                            const float *mean, const float *rstd, const float *w, size_t M,
                            size_t C);

void cpu_gelu_forward(float *out, const float *in, size_t n);
void cpu_gelu_backward(float *din, const float *in, const float *dout, size_t n);

void cpu_attention_forward(float *out, float *probs, const float *qkv, size_t B, size_t T, size_t C,
                           size_t heads);
void cpu_attention_backward(float *dqkv, const float *dout, const float *qkv, const float *probs,
                            size_t B, size_t T, size_t C, size_t heads);

void cpu_patchify(float *patches, const float *images, size_t B, size_t S, size_t P);
void cpu_embed_forward(float *x, const float *patch_out, const float *cls, const float *pos,
                       size_t B, size_t T, size_t C);
void cpu_embed_backward(float *dcls, float *dpos, float *dpatch_out, const float *dx, size_t B,
                        size_t T, size_t C);
void cpu_class_token_select(float *out, const float *x, size_t B, size_t T, size_t C);
void cpu_class_token_select_backward(float *dx, const float *dout, size_t B, size_t T, size_t C);

float cpu_cross_entropy(float *dlogits, const float *logits, const int32_t *labels, size_t B,
                        size_t classes, float grad_scale);
size_t cpu_count_correct(const float *logits, const int32_t *labels, size_t B, size_t classes);
void cpu_add(float *out, const float *a, const float *b, size_t n);

#endif
