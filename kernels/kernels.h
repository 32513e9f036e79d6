/* kernels: the math behind one op table. kernels/cpu implements it in C (GEMM through
 * OpenBLAS), kernels/cuda on the GPU with the same signatures and semantics, so the engine
 * in core/ never knows where its numbers are computed. Ops never allocate. */
#ifndef FSDP_KERNELS_H
#define FSDP_KERNELS_H

#include <stddef.h>

#include "dtype.h"

typedef struct AdamHyper {
    float lr, beta1, beta2, eps, weight_decay;
    int decoupled; /* 1: AdamW (decay applied to the parameter), 0: Adam (L2 added to grad) */
} AdamHyper;

typedef struct Kernels {
    const char *name;

    /* Element-type conversion with round-to-nearest-even; src and dst may not overlap. */
    void (*cast)(void *dst, DType dst_type, const void *src, DType src_type, size_t n);
    /* x[i] *= s */
    void (*scale)(float *x, float s, size_t n);
    /* y[i] += x[i] */
    void (*accumulate)(float *y, const float *x, size_t n);
    /* sum of x[i]^2 in double, for the global gradient norm */
    double (*sum_squares)(const float *x, size_t n);
    /* 1 if every x[i] is finite */
    int (*all_finite)(const float *x, size_t n);
    /* One Adam/AdamW update of n elements, PyTorch's formulas; step counts from 1 (bias
     * correction; a step below 1 is taken as 1). */
    void (*adam_step)(float *param, const float *grad, float *m, float *v, size_t n,
                      const AdamHyper *h, long step);

    /* Toy layer: y = w0 * tanh(w1 * x + w2), elementwise over a batch of n scalars; y may be
     * x (in place). */
    void (*toy_forward)(const float w[3], const float *x, float *y, size_t n);
    /* Given dL/dy, writes dL/dx (if dx; it may alias x or dy) and adds dL/dw into dw[3],
     * summing the batch in double and rounding once. */
    void (*toy_backward)(const float w[3], const float *x, const float *dy, float *dx, float dw[3],
                         size_t n);
    /* Mean squared error over n: returns loss; dy[i] = 2 (y[i]-t[i]) / n (dy may be NULL:
     * loss only). n == 0 gives 0 and touches nothing. */
    float (*mse_loss)(const float *y, const float *target, float *dy, size_t n);
} Kernels;

extern const Kernels kernels_cpu;

#endif
