/* fused: kernels_cuda's fused ops, each doing in one pass what the unfused ops do in two with
 * their formulas: bias + exact GELU and its backward with the bias gradient, and a residual add
 * with the LayerNorm that reads it (semantics in ../kernels.h; reference ../cpu/vit_cpu.c). */
#include <math.h>
#include <stdint.h>

#include "kernels/cuda/column_sums.cuh"
#include "kernels/cuda/cuda_common.cuh"
#include "kernels/cuda/cuda_ops.h"
#include "kernels/cuda/gelu.cuh"
#include "kernels/cuda/row_sums.cuh"

// How each runs:
//
// - bias_gelu_forward: a grid-stride loop over the elements (the column index stepped along,
//   not divided out per element); GELU as gelu_forward's (gelu.cuh). It reads pre and writes
//   out only: backward redoes the bias add.
// - bias_gelu_backward: bias_grad's column sums (column_sums.cuh), up to BG_MAX_GROUPS groups of
//   rows, each thread writing dpre = dout * GELU'(pre + b) for its elements (the same formula
//   as gelu_backward; its column's b[j] read once) and summing them in double: db is
//   bit-identical run to run (no atomics).
// - residual_layernorm_forward: layernorm_forward's kernel (vit_ops.cu: a warp per row up to
//   LN_WARP_MAX_C columns, else a block per row; two-pass statistics) whose first pass also
//   forms and stores sum = x + y; the later passes read back what the same thread stored.
//
// Kernels are templates over the compute dtype's element type T (cuda_common.cuh). In bf16 and
// fp16 the residual sum is rounded to T as it is stored and the LayerNorm reads that rounded sum
// (its statistics too), as the two unfused ops would; db sums the fp32 dpre before its rounding.
//
// Every op launches on the calling thread's stream and never allocates.

namespace {

constexpr unsigned THREADS = 256; // bias + GELU forward
constexpr size_t BG_MAX_GROUPS = 128, BG_MIN_GROUP_ROWS = 32;
constexpr size_t PARTIAL_DOUBLES = CUDA_SCRATCH_BYTES / sizeof(double);

// ---- bias + GELU

// n = M N elements; element i is in column i % N, which each thread steps along with i.
template <class T>
__global__ void bias_gelu_forward_kernel(T *__restrict__ out, const T *__restrict__ pre,
                                         const T *__restrict__ b, size_t n, size_t N) {
    const size_t stride = (size_t)gridDim.x * blockDim.x, step = stride % N;
    size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x, j = i % N;
    for (; i < n; i += stride) {
        store(out, i, gelu(load(pre, i) + load(b, j)));
        j += step;
        if (j >= N) j -= N;
    }
}

// Block (COLUMN_TILE, COLUMN_LANES): tiles of 32 adjacent columns of group blockIdx.y's rows,
// lane y taking every COLUMN_LANES-th row (column_sums.cuh). dpre may be dout (each element is
// read, then written, by one thread).
template <class T>
__global__ void bias_gelu_backward_kernel(T *dpre, float *__restrict__ db,
                                          double *__restrict__ partials, const T *dout,
                                          const T *__restrict__ pre, const T *__restrict__ b,
                                          size_t rows, size_t cols, size_t group_rows) {
    column_sums_block(db, partials, rows, cols, group_rows, [&](size_t j, size_t i, size_t end) {
        const float bj = load(b, j);
        double s = 0.0;
        for (; i < end; i += COLUMN_LANES) {
            const size_t e = i * cols + j;
            const float v = load(dout, e) * gelu_grad(load(pre, e) + bj);
            store(dpre, e, v);
            s += v;
        }
        return s;
    });
}

// ---- residual + LayerNorm (row_sums.cuh)

// One row per group of WARPS warps (WARPS == 1: LN_THREADS / 32 rows a block; WARPS * 32 ==
// LN_THREADS: one row a block, so the row loop is uniform over the block). sum may be x or y:
// a thread reads x[j] and y[j] before it writes sum[j], and later reads only the sum[j] it
// wrote itself.
template <int WARPS, class T>
__global__ void __launch_bounds__(LN_THREADS)
    residual_layernorm_kernel(T *sum, T *__restrict__ out, float *__restrict__ mean,
                              float *__restrict__ rstd, const T *x, const T *y,
                              const T *__restrict__ w, const T *__restrict__ b, size_t M, size_t C,
                              float eps) {
    static_assert(WARPS == 1 || WARPS * 32 == LN_THREADS, "a row is a warp or the block");
    constexpr unsigned GROUP = 32u * WARPS, ROWS = LN_THREADS / GROUP;
    __shared__ float red[WARPS];
    const unsigned t = threadIdx.x % GROUP;
    const float inv_c = 1.0f / (float)C;
    for (size_t row = (size_t)blockIdx.x * ROWS + threadIdx.x / GROUP; row < M;
         row += (size_t)gridDim.x * ROWS) {
        const T *xr = x + row * C, *yr = y + row * C;
        T *s_row = sum + row * C;
        float s = 0.0f;
#pragma unroll 4
        for (size_t j = t; j < C; j += GROUP) {
            const float v = round_to<T>(load(xr, j) + load(yr, j)); // the sum as stored
            store(s_row, j, v);
            s += v;
        }
        const float mu = group_sum<WARPS>(s, red) * inv_c;
        float q = 0.0f;
#pragma unroll 4
        for (size_t j = t; j < C; j += GROUP) {
            const float d = load(s_row, j) - mu;
            q += d * d;
        }
        const float rs = 1.0f / sqrtf(group_sum<WARPS>(q, red) * inv_c + eps);
        if (t == 0) {
            mean[row] = mu;
            rstd[row] = rs;
        }
        T *o = out + row * C;
#pragma unroll 4
        for (size_t j = t; j < C; j += GROUP)
            store(o, j, (load(s_row, j) - mu) * rs * load(w, j) + load(b, j));
    }
}

} // namespace

// ---------------------------------------------------------------- the ops

extern "C" void cuda_bias_gelu_forward(DType t, void *out, const void *pre, const void *b, size_t M,
                                       size_t N) {
    const size_t n = M * N;
    if (n == 0) return;
    if (cuda_dispatch(t, "bias_gelu_forward", [&](auto e) {
            using T = typename decltype(e)::type;
            bias_gelu_forward_kernel<<<cuda_blocks(n, THREADS), THREADS, 0, cuda_ctx()->stream>>>(
                (T *)out, (const T *)pre, (const T *)b, n, N);
        }))
        return;
    CUDA_LAUNCHED("bias_gelu_forward");
}

// Row groups of at least BG_MIN_GROUP_ROWS rows, their partials in the scratch.
extern "C" void cuda_bias_gelu_backward(DType t, void *dpre, float *db, const void *dout,
                                        const void *pre, const void *b, size_t M, size_t N) {
    if (M == 0 || N == 0) return;
    CudaContext *c = cuda_ctx();
    const ColumnSumGrid g =
        column_sum_grid(M, N, BG_MAX_GROUPS, BG_MIN_GROUP_ROWS, PARTIAL_DOUBLES);
    double *partials = g.groups > 1 ? (double *)c->scratch : nullptr;
    if (cuda_dispatch(t, "bias_gelu_backward", [&](auto e) {
            using T = typename decltype(e)::type;
            bias_gelu_backward_kernel<<<g.grid, g.block, 0, c->stream>>>(
                (T *)dpre, db, partials, (const T *)dout, (const T *)pre, (const T *)b, M, N,
                g.group_rows);
        }))
        return;
    if (CUDA_LAUNCHED("bias_gelu_backward") || !partials) return;
    column_sums_finish(db, partials, N, g.groups, c->stream);
    CUDA_LAUNCHED("bias_gelu_backward");
}

extern "C" void cuda_residual_layernorm_forward(DType t, void *sum, void *out, float *mean,
                                                float *rstd, const void *x, const void *y,
                                                const void *w, const void *b, size_t M, size_t C,
                                                float eps) {
    if (C == 0 || M == 0) return;
    CudaContext *ctx = cuda_ctx();
    if (cuda_dispatch(t, "residual_layernorm_forward", [&](auto e) {
            using T = typename decltype(e)::type;
            if (C <= LN_WARP_MAX_C)
                residual_layernorm_kernel<1>
                    <<<cuda_blocks(M, LN_THREADS / 32), LN_THREADS, 0, ctx->stream>>>(
                        (T *)sum, (T *)out, mean, rstd, (const T *)x, (const T *)y, (const T *)w,
                        (const T *)b, M, C, eps);
            else
                residual_layernorm_kernel<LN_THREADS / 32>
                    <<<cuda_blocks(M, 1), LN_THREADS, 0, ctx->stream>>>(
                        (T *)sum, (T *)out, mean, rstd, (const T *)x, (const T *)y, (const T *)w,
                        (const T *)b, M, C, eps);
        }))
        return;
    CUDA_LAUNCHED("residual_layernorm_forward");
}
