// fused: kernels_cuda's fused ops (semantics in ../kernels.h; the CPU versions in
// ../cpu/vit_cpu.c are the reference they match): bias + exact GELU after the MLP's first GEMM
// and its backward with the bias gradient, and a residual add with the LayerNorm that reads it.
// Each does in one pass what the unfused ops do in two, with their formulas:
//
// - bias_gelu_forward: a grid-stride loop over the elements (the column index stepped along,
//   not divided out per element); GELU with CUDA's erff as gelu_forward (elementwise.cu). It
//   reads pre and writes out only: backward redoes the bias add.
// - bias_gelu_backward: bias_grad's layout (elementwise.cu): blocks of BG_TILE adjacent columns
//   x BG_LANES row lanes, up to BG_MAX_GROUPS groups of rows, each thread writing
//   dpre = dout * GELU'(pre + b) for its elements (the same formula as gelu_backward; its
//   column's b[j] read once) and summing them in double. The lanes' sums are added in lane order,
//   the groups' (through the context's scratch) in group order by a second kernel: the grid depends
//   only on the shape, so db is bit-identical run to run (no atomics).
// - residual_layernorm_forward: layernorm_forward's kernel (vit_ops.cu: a warp per row up to
//   LN_WARP_MAX_C columns, else a block per row; two-pass statistics) whose first pass also
//   forms and stores sum = x + y; the later passes read back what the same thread stored.
//
// Every op launches on the calling thread's stream and never allocates.
#include <math.h>
#include <stdint.h>

#include "kernels/cuda/cuda_common.cuh"
#include "kernels/cuda/cuda_ops.h"

namespace {

constexpr unsigned THREADS = 256; // bias + GELU forward, the bias gradient's finishing kernel
constexpr unsigned BG_TILE = 32, BG_LANES = 8;
constexpr size_t BG_MAX_GROUPS = 128, BG_MIN_GROUP_ROWS = 32;
constexpr size_t PARTIAL_DOUBLES = CUDA_SCRATCH_BYTES / sizeof(double);
constexpr unsigned LN_THREADS = 256;   // 8 rows, or 1 row, per block
constexpr size_t LN_WARP_MAX_C = 1024; // up to here a row is one warp's

constexpr float INV_SQRT2 = 0.70710678118654752440f;
constexpr float INV_SQRT_2PI = 0.39894228040143267794f;

// gelu_forward_kernel's and gelu_backward_kernel's formulas (elementwise.cu)
__device__ __forceinline__ float gelu(float x) {
    return 0.5f * x * (1.0f + erff(x * INV_SQRT2));
}

__device__ __forceinline__ float gelu_grad(float x) {
    const float cdf = 0.5f * (1.0f + erff(x * INV_SQRT2));
    const float pdf = expf(-0.5f * x * x) * INV_SQRT_2PI;
    return cdf + x * pdf;
}

// ---- bias + GELU

// n = M N elements; element i is in column i % N, which each thread steps along with i.
__global__ void bias_gelu_forward_kernel(float *__restrict__ out, const float *__restrict__ pre,
                                         const float *__restrict__ b, size_t n, size_t N) {
    const size_t stride = (size_t)gridDim.x * blockDim.x, step = stride % N;
    size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x, j = i % N;
    for (; i < n; i += stride) {
        out[i] = gelu(pre[i] + b[j]);
        j += step;
        if (j >= N) j -= N;
    }
}

// Block (BG_TILE, BG_LANES): tiles of 32 adjacent columns of group blockIdx.y's rows, lane y
// taking every BG_LANES-th row. With partials, the group's column sums go to
// partials[group * cols + j] and bias_gelu_db_finish adds the groups in order; without (one
// group), the block adds its sums into db itself. dpre may be dout (each element is read, then
// written, by one thread).
__global__ void bias_gelu_backward_kernel(float *dpre, float *__restrict__ db,
                                          double *__restrict__ partials, const float *dout,
                                          const float *__restrict__ pre,
                                          const float *__restrict__ b, size_t rows, size_t cols,
                                          size_t group_rows) {
    __shared__ double lane_sums[BG_LANES][BG_TILE + 1];
    const size_t r0 = (size_t)blockIdx.y * group_rows;
    const size_t r1 = r0 + group_rows < rows ? r0 + group_rows : rows;
    for (size_t tile = blockIdx.x; tile * BG_TILE < cols; tile += gridDim.x) {
        const size_t j = tile * BG_TILE + threadIdx.x;
        double s = 0.0;
        if (j < cols) {
            const float bj = b[j];
            for (size_t i = r0 + threadIdx.y; i < r1; i += BG_LANES) {
                const size_t e = i * cols + j;
                const float v = dout[e] * gelu_grad(pre[e] + bj);
                dpre[e] = v;
                s += v;
            }
        }
        lane_sums[threadIdx.y][threadIdx.x] = s;
        __syncthreads();
        if (threadIdx.y == 0 && j < cols) {
            double total = 0.0;
            for (unsigned l = 0; l < BG_LANES; l++) total += lane_sums[l][threadIdx.x];
            if (partials)
                partials[(size_t)blockIdx.y * cols + j] = total;
            else
                db[j] = (float)((double)db[j] + total);
        }
        __syncthreads(); // lane_sums is reused by the next tile
    }
}

__global__ void bias_gelu_db_finish(float *__restrict__ db, const double *__restrict__ partials,
                                    size_t cols, unsigned groups) {
    for (size_t j = (size_t)blockIdx.x * blockDim.x + threadIdx.x; j < cols;
         j += (size_t)gridDim.x * blockDim.x) {
        double s = 0.0;
        for (unsigned g = 0; g < groups; g++) s += partials[(size_t)g * cols + j];
        db[j] = (float)((double)db[j] + s);
    }
}

// ---- residual + LayerNorm

__device__ __forceinline__ float warp_sum(float v) {
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
    return v;
}

// The sum of v over a row's group of WARPS warps, the same bits in every thread (vit_ops.cu's
// group_sum2 for one value). With WARPS > 1 the group is the block: every thread calls it.
template <int WARPS> __device__ __forceinline__ float group_sum(float v, float *red) {
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

// One row per group of WARPS warps (WARPS == 1: LN_THREADS / 32 rows a block; WARPS * 32 ==
// LN_THREADS: one row a block, so the row loop is uniform over the block). sum may be x or y:
// a thread reads x[j] and y[j] before it writes sum[j], and later reads only the sum[j] it
// wrote itself.
template <int WARPS>
__global__ void __launch_bounds__(LN_THREADS)
    residual_layernorm_kernel(float *sum, float *__restrict__ out, float *__restrict__ mean,
                              float *__restrict__ rstd, const float *x, const float *y,
                              const float *__restrict__ w, const float *__restrict__ b, size_t M,
                              size_t C, float eps) {
    static_assert(WARPS == 1 || WARPS * 32 == LN_THREADS, "a row is a warp or the block");
    constexpr unsigned GROUP = 32u * WARPS, ROWS = LN_THREADS / GROUP;
    __shared__ float red[WARPS];
    const unsigned t = threadIdx.x % GROUP;
    const float inv_c = 1.0f / (float)C;
    for (size_t row = (size_t)blockIdx.x * ROWS + threadIdx.x / GROUP; row < M;
         row += (size_t)gridDim.x * ROWS) {
        const float *xr = x + row * C, *yr = y + row * C;
        float *s_row = sum + row * C;
        float s = 0.0f;
#pragma unroll 4
        for (size_t j = t; j < C; j += GROUP) {
            const float v = xr[j] + yr[j];
            s_row[j] = v;
            s += v;
        }
        const float mu = group_sum<WARPS>(s, red) * inv_c;
        float q = 0.0f;
#pragma unroll 4
        for (size_t j = t; j < C; j += GROUP) {
            const float d = s_row[j] - mu;
            q += d * d;
        }
        const float rs = 1.0f / sqrtf(group_sum<WARPS>(q, red) * inv_c + eps);
        if (t == 0) {
            mean[row] = mu;
            rstd[row] = rs;
        }
        float *o = out + row * C;
#pragma unroll 4
        for (size_t j = t; j < C; j += GROUP) o[j] = (s_row[j] - mu) * rs * w[j] + b[j];
    }
}

} // namespace

// ---------------------------------------------------------------- the ops

extern "C" void cuda_bias_gelu_forward(float *out, const float *pre, const float *b, size_t M,
                                       size_t N) {
    const size_t n = M * N;
    if (n == 0) return;
    bias_gelu_forward_kernel<<<cuda_blocks(n, THREADS), THREADS, 0, cuda_ctx()->stream>>>(out, pre,
                                                                                          b, n, N);
    CUDA_LAUNCHED("bias_gelu_forward");
}

// Row groups as bias_grad's: enough blocks to fill the GPU when there are few column tiles,
// each group at least BG_MIN_GROUP_ROWS rows, their partials within the scratch; one group (no
// partials) when two groups' would not fit.
extern "C" void cuda_bias_gelu_backward(float *dpre, float *db, const float *dout, const float *pre,
                                        const float *b, size_t M, size_t N) {
    if (M == 0 || N == 0) return;
    CudaContext *c = cuda_ctx();
    const size_t tiles = (N + BG_TILE - 1) / BG_TILE;
    const unsigned grid_x = (unsigned)(tiles < 65535 ? tiles : 65535);
    size_t groups = (M + BG_MIN_GROUP_ROWS - 1) / BG_MIN_GROUP_ROWS;
    if (groups > BG_MAX_GROUPS) groups = BG_MAX_GROUPS;
    if (groups > PARTIAL_DOUBLES / N) groups = PARTIAL_DOUBLES / N;
    if (groups < 1) groups = 1;
    const size_t group_rows = (M + groups - 1) / groups;
    double *partials = groups > 1 ? (double *)c->scratch : nullptr;
    const dim3 block(BG_TILE, BG_LANES), grid(grid_x, (unsigned)groups);
    bias_gelu_backward_kernel<<<grid, block, 0, c->stream>>>(dpre, db, partials, dout, pre, b, M, N,
                                                             group_rows);
    if (CUDA_LAUNCHED("bias_gelu_backward") || !partials) return;
    bias_gelu_db_finish<<<cuda_blocks(N, THREADS), THREADS, 0, c->stream>>>(db, partials, N,
                                                                            (unsigned)groups);
    CUDA_LAUNCHED("bias_gelu_backward");
}

extern "C" void cuda_residual_layernorm_forward(float *sum, float *out, float *mean, float *rstd,
                                                const float *x, const float *y, const float *w,
                                                const float *b, size_t M, size_t C, float eps) {
    if (C == 0 || M == 0) return;
    CudaContext *ctx = cuda_ctx();
    if (C <= LN_WARP_MAX_C)
        residual_layernorm_kernel<1>
            <<<cuda_blocks(M, LN_THREADS / 32), LN_THREADS, 0, ctx->stream>>>(
                sum, out, mean, rstd, x, y, w, b, M, C, eps);
    else
        residual_layernorm_kernel<LN_THREADS / 32>
            <<<cuda_blocks(M, 1), LN_THREADS, 0, ctx->stream>>>(sum, out, mean, rstd, x, y, w, b, M,
                                                                C, eps);
    CUDA_LAUNCHED("residual_layernorm_forward");
}
