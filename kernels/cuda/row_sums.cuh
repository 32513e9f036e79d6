// row_sums: LayerNorm's row layout and the sums (and a row's maximum) over a row's warp or block
// that leave the same bits in every thread, for the row kernels of vit_ops.cu (LayerNorm, the
// loss), eager_loss.cu and fused.cu (residual + LayerNorm). Internal to kernels/cuda.
#pragma once

#include <cuda_runtime.h>

#include "kernels/cuda/cuda_common.cuh"

// A row is one warp's up to LN_WARP_MAX_C columns (<= 32 values a lane), LN_THREADS / 32 rows a
// block; a longer row is a whole block's of LN_THREADS.
constexpr unsigned LN_THREADS = 256;
constexpr size_t LN_WARP_MAX_C = 1024;

// A butterfly over the warp: every lane ends with the same sum.
template <typename T> static __device__ __forceinline__ T warp_sum(T v) {
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
    return v;
}

// The largest of a row's n values, read by one warp, with the CPU's strict scan from z[0]
// (cpu_math.h's row_max): a NaN there stays the maximum, a NaN elsewhere is passed over. Every
// lane ends with it.
template <class T>
static __device__ __forceinline__ float warp_row_max(const T *z, size_t n, unsigned lane) {
    float mx = load(z, 0);
    for (size_t j = lane; j < n; j += 32) {
        const float zj = load(z, j);
        mx = zj > mx ? zj : mx;
    }
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) {
        const float other = __shfl_xor_sync(0xffffffffu, mx, o);
        mx = other > mx ? other : mx;
    }
    return mx;
}

// The sum of v over a row's group of WARPS warps: the warp's butterfly, then with WARPS > 1
// (the group is the whole block: every thread must call it, it synchronises) the warps' sums
// added in warp order through red[WARPS].
template <int WARPS> static __device__ __forceinline__ float group_sum(float v, float *red) {
    v = warp_sum(v);
    if constexpr (WARPS > 1) {
        const unsigned lane = threadIdx.x & 31u, warp = threadIdx.x >> 5;
        if (lane == 0) red[warp] = v;
        __syncthreads();
        float s = red[0];
#pragma unroll
        for (int k = 1; k < WARPS; k++) s += red[k];
        __syncthreads(); // red is reused by the next call
        v = s;
    } else {
        (void)red;
    }
    return v;
}

// group_sum of a and of b at once, with one pair of synchronisations.
template <int WARPS>
static __device__ __forceinline__ float2 group_sum2(float a, float b, float2 *red) {
    a = warp_sum(a);
    b = warp_sum(b);
    if constexpr (WARPS > 1) {
        const unsigned lane = threadIdx.x & 31u, warp = threadIdx.x >> 5;
        if (lane == 0) red[warp] = make_float2(a, b);
        __syncthreads();
        float2 s = red[0];
#pragma unroll
        for (int k = 1; k < WARPS; k++) {
            s.x += red[k].x;
            s.y += red[k].y;
        }
        __syncthreads(); // red is reused by the next call
        a = s.x;
        b = s.y;
    } else {
        (void)red;
    }
    return make_float2(a, b);
}
