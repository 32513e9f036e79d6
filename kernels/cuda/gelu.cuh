// gelu: the exact (erf) GELU and its derivative, PyTorch's CUDA formulas with CUDA's erff and
// expf, in one place for every kernel that applies them (elementwise.cu's GELU ops, fused.cu's
// bias + GELU), so the fused and unfused ops compute the same bits. Internal to kernels/cuda.
#pragma once

#include <math.h>

constexpr float GELU_INV_SQRT2 = 0.70710678118654752440f;
constexpr float GELU_INV_SQRT_2PI = 0.39894228040143267794f;

// x Phi(x)
static __device__ __forceinline__ float gelu(float x) {
    return 0.5f * x * (1.0f + erff(x * GELU_INV_SQRT2));
}

// Phi(x) + x phi(x)
static __device__ __forceinline__ float gelu_grad(float x) {
    const float cdf = 0.5f * (1.0f + erff(x * GELU_INV_SQRT2));
    const float pdf = expf(-0.5f * x * x) * GELU_INV_SQRT_2PI;
    return cdf + x * pdf;
}
