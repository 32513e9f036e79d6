/* elementwise: kernels_cuda's elementwise ops (cast, fills, copies, batched copies, scale,
 * accumulate, add, Adam, the toy layer, MSE, GELU) and reductions (sum of squares, all_finite, the
 * toy's dw, bias_grad); semantics in ../kernels.h. The ops that take a compute dtype run their
 * kernels over its element type T (cuda_common.cuh); Adam, scale, accumulate and the reductions of
 * float tensors are fp32 only, as their signatures say. */
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <math.h>
#include <stdint.h>
#include <string.h>

#include "kernels/cuda/column_sums.cuh"
#include "kernels/cuda/cuda_common.cuh"
#include "kernels/cuda/cuda_ops.h"
#include "kernels/cuda/gelu.cuh"

// Every op launches on the calling thread's stream (cuda_ctx()->stream) and never allocates:
// elementwise kernels are grid-stride loops over size_t indices (counts may pass 2^31);
// reductions run a fixed number of blocks that leave their partial sums, in double, in the
// context's scratch, then one block adds the partials in block order. The grid depends only on
// n, so every reduction is deterministic run to run. Ops that return a value copy it from the
// scratch's front into the pinned host mirror and wait for the stream. If a CUDA call fails
// they return a value that is safe for the engine to act on and leave the error in the
// sticky status (kernels_cuda_status): sum_squares 0.0 (nothing to clip), all_finite 0 (the
// step is skipped as if an inf had been found), mse_loss NaN (a loss that cannot be mistaken
// for a computed one).
//
// Rounding: casts are bit-exact with kernels/dtype.c (the hardware's round-to-nearest-even
// conversions for numbers, dtype.c's own bits for NaN, which the hardware would canonicalise;
// CUDA's host emulation of those conversions agrees with dtype.c on every non-NaN fp32).
// Adam and the toy layer spell their float arithmetic with __f*_rn intrinsics so nvcc does not
// fuse multiply-adds the CPU code (C11, no FMA contraction) rounds twice: Adam should then give
// the CPU's bits, the toy layer differ only by tanhf's last bits. GELU uses CUDA's erff and expf
// (PyTorch's CUDA formulas); the CPU's approximations are within 1.5e-7 absolute of erf.

namespace {

constexpr unsigned THREADS = 256;        // elementwise and reduction blocks
constexpr unsigned REDUCE_BLOCKS = 1024; // at most this many partial sums per reduction
// The scratch's front holds what is copied back to the host; partial sums follow it.
constexpr size_t RESULT_BYTES = 64;
constexpr size_t PARTIAL_DOUBLES = (CUDA_SCRATCH_BYTES - RESULT_BYTES) / sizeof(double);
static_assert(REDUCE_BLOCKS * 3 <= PARTIAL_DOUBLES, "the toy's 3 sums per block fit the scratch");

// bias_grad (column_sums.cuh): up to BIAS_MAX_GROUPS blocks down the rows, each over at least
// BIAS_MIN_GROUP_ROWS rows, leave per-column partials.
constexpr size_t BIAS_MAX_GROUPS = 64, BIAS_MIN_GROUP_ROWS = 64;

__device__ __forceinline__ size_t first_index() {
    return (size_t)blockIdx.x * blockDim.x + threadIdx.x;
}

__device__ __forceinline__ size_t grid_stride() {
    return (size_t)gridDim.x * blockDim.x;
}

// Blocks for a reduction over n elements: a function of n alone, at most REDUCE_BLOCKS.
unsigned reduce_blocks(size_t n) {
    return cuda_blocks(n, THREADS, REDUCE_BLOCKS);
}

double *result_area(const CudaContext *c) {
    return (double *)c->scratch;
}

double *partial_area(const CudaContext *c) {
    return (double *)((char *)c->scratch + RESULT_BYTES);
}

// Copies `bytes` from the scratch's front into the pinned host mirror and waits; 0 on success.
int fetch_result(const CudaContext *c, size_t bytes, const char *where) {
    if (cuda_note(cudaMemcpyAsync(c->host, c->scratch, bytes, cudaMemcpyDeviceToHost, c->stream),
                  where))
        return -1;
    return cuda_note(cudaStreamSynchronize(c->stream), where) ? -1 : 0;
}

// ---- block sums: K doubles per thread; the block's totals land in thread 0's v. Every thread
// of the block must call it (it synchronises), blockDim.x a multiple of 32, at most 1024.

template <int K> __device__ __forceinline__ void warp_sum(double (&v)[K]) {
    for (int off = 16; off > 0; off >>= 1)
        for (int k = 0; k < K; k++) v[k] += __shfl_down_sync(0xffffffffu, v[k], off);
}

template <int K> __device__ void block_sum(double (&v)[K]) {
    __shared__ double warp_totals[K][32];
    const unsigned lane = threadIdx.x & 31u, warp = threadIdx.x >> 5;
    warp_sum<K>(v);
    if (lane == 0)
        for (int k = 0; k < K; k++) warp_totals[k][warp] = v[k];
    __syncthreads();
    if (warp == 0) {
        const unsigned warps = blockDim.x >> 5;
        for (int k = 0; k < K; k++) v[k] = lane < warps ? warp_totals[k][lane] : 0.0;
        warp_sum<K>(v);
    }
}

// The sum of `blocks` partials of K values each (partials[b * K + k]), in thread 0's v.
template <int K>
__device__ void sum_partials(double (&v)[K], const double *partials, unsigned blocks) {
    for (int k = 0; k < K; k++) v[k] = 0.0;
    for (unsigned b = threadIdx.x; b < blocks; b += blockDim.x)
        for (int k = 0; k < K; k++) v[k] += partials[(size_t)b * K + k];
    block_sum<K>(v);
}

// One block: out[k] = the sum of the partials.
template <int K> __global__ void finish_sum(double *out, const double *partials, unsigned blocks) {
    double v[K];
    sum_partials<K>(v, partials, blocks);
    if (threadIdx.x == 0)
        for (int k = 0; k < K; k++) out[k] = v[k];
}

// ---- cast: bit-exact with kernels/dtype.c

__device__ __forceinline__ bool fp32_bits_nan(uint32_t u) {
    return (u & 0x7fffffffu) > 0x7f800000u;
}

// Numbers through the hardware's RNE conversion (overflow to inf, subnormals kept); a NaN
// keeps its sign and top payload bits with the quiet bit set, as dtype.c's does (the hardware
// would give one canonical NaN).
__device__ __forceinline__ uint16_t fp32_to_bf16_bits(float x) {
    const uint32_t u = __float_as_uint(x);
    if (fp32_bits_nan(u)) return (uint16_t)((u >> 16) | 0x0040u);
    return __bfloat16_as_ushort(__float2bfloat16_rn(x));
}

// A NaN becomes dtype.c's quiet NaN of the same sign, sign | 0x7e00.
__device__ __forceinline__ uint16_t fp32_to_fp16_bits(float x) {
    const uint32_t u = __float_as_uint(x);
    if (fp32_bits_nan(u)) return (uint16_t)(((u >> 16) & 0x8000u) | 0x7e00u);
    return __half_as_ushort(__float2half_rn(x));
}

// Widening is exact; bf16 is fp32's top half.
__device__ __forceinline__ float bf16_bits_to_fp32(uint16_t h) {
    return __uint_as_float((uint32_t)h << 16);
}

// inf and NaN built from the bits, so a NaN's payload moves up unchanged as in dtype.c.
__device__ __forceinline__ float fp16_bits_to_fp32(uint16_t h) {
    if ((h & 0x7c00u) == 0x7c00u)
        return __uint_as_float(((uint32_t)(h & 0x8000u) << 16) | 0x7f800000u |
                               ((uint32_t)(h & 0x3ffu) << 13));
    return __half2float(__ushort_as_half(h));
}

template <DType T> __device__ __forceinline__ float load_elem(const void *src, size_t i) {
    if constexpr (T == DTYPE_BF16)
        return bf16_bits_to_fp32(((const uint16_t *)src)[i]);
    else if constexpr (T == DTYPE_FP16)
        return fp16_bits_to_fp32(((const uint16_t *)src)[i]);
    else
        return ((const float *)src)[i];
}

template <DType T> __device__ __forceinline__ void store_elem(void *dst, size_t i, float x) {
    if constexpr (T == DTYPE_BF16)
        ((uint16_t *)dst)[i] = fp32_to_bf16_bits(x);
    else if constexpr (T == DTYPE_FP16)
        ((uint16_t *)dst)[i] = fp32_to_fp16_bits(x);
    else
        ((float *)dst)[i] = x;
}

// Every pair goes through fp32 (exact), so each element is rounded once, like the CPU's.
template <DType D, DType S> __global__ void cast_kernel(void *dst, const void *src, size_t n) {
    for (size_t i = first_index(); i < n; i += grid_stride())
        store_elem<D>(dst, i, load_elem<S>(src, i));
}

template <DType D> void launch_cast(void *dst, const void *src, DType src_type, size_t n) {
    const unsigned blocks = cuda_blocks(n, THREADS);
    cudaStream_t s = cuda_ctx()->stream;
    switch (src_type) {
    case DTYPE_BF16:
        cast_kernel<D, DTYPE_BF16><<<blocks, THREADS, 0, s>>>(dst, src, n);
        break;
    case DTYPE_FP16:
        cast_kernel<D, DTYPE_FP16><<<blocks, THREADS, 0, s>>>(dst, src, n);
        break;
    default:
        cast_kernel<D, DTYPE_FP32><<<blocks, THREADS, 0, s>>>(dst, src, n);
        break;
    }
}

// ---- copy_spans: up to SPANS_PER_LAUNCH spans a launch, passed by value (2 KiB of the
// kernel's 4 KiB of parameters); blockIdx.y is the span, x strides over its elements.

constexpr unsigned SPANS_PER_LAUNCH = 64;

struct SpanBatch {
    CopySpan span[SPANS_PER_LAUNCH];
};

// Same type: the element's bits (NaN payloads exact, as cast's copy); else through fp32, once.
template <DType D, DType S>
__device__ __forceinline__ void copy_elem(void *dst, size_t to, const void *src, size_t from) {
    if constexpr (D == S && D == DTYPE_FP32)
        ((uint32_t *)dst)[to] = ((const uint32_t *)src)[from];
    else if constexpr (D == S)
        ((uint16_t *)dst)[to] = ((const uint16_t *)src)[from];
    else
        store_elem<D>(dst, to, load_elem<S>(src, from));
}

template <DType D> __device__ __forceinline__ void zero_elem(void *dst, size_t i) {
    if constexpr (D == DTYPE_FP32)
        ((uint32_t *)dst)[i] = 0u;
    else
        ((uint16_t *)dst)[i] = 0u;
}

template <DType D, DType S>
__global__ void copy_spans_kernel(void *dst, const void *src, const SpanBatch b) {
    const CopySpan c = b.span[blockIdx.y];
    const size_t stride = (size_t)gridDim.x * blockDim.x;
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < c.n + c.pad; i += stride) {
        if (i < c.n)
            copy_elem<D, S>(dst, c.dst_at + i, src, c.src_at + i);
        else
            zero_elem<D>(dst, c.dst_at + i);
    }
}

template <DType D>
void launch_copy_spans(void *dst, const void *src, DType src_type, const SpanBatch &b, dim3 grid) {
    cudaStream_t s = cuda_ctx()->stream;
    switch (src_type) {
    case DTYPE_BF16:
        copy_spans_kernel<D, DTYPE_BF16><<<grid, THREADS, 0, s>>>(dst, src, b);
        break;
    case DTYPE_FP16:
        copy_spans_kernel<D, DTYPE_FP16><<<grid, THREADS, 0, s>>>(dst, src, b);
        break;
    default:
        copy_spans_kernel<D, DTYPE_FP32><<<grid, THREADS, 0, s>>>(dst, src, b);
        break;
    }
}

// What the CPU's load/store do with a type: bf16 and fp16 are themselves, anything else fp32.
DType stored_type(DType t) {
    return t == DTYPE_BF16 || t == DTYPE_FP16 ? t : DTYPE_FP32;
}

// dtype_size's values (dtype.h has no C linkage guard, so it is not called from C++).
size_t elem_bytes(DType t) {
    switch (t) {
    case DTYPE_FP32:
        return 4;
    case DTYPE_BF16:
    case DTYPE_FP16:
        return 2;
    default:
        return 0;
    }
}

// ---- elementwise float ops

__global__ void scale_kernel(float *x, float s, size_t n) {
    for (size_t i = first_index(); i < n; i += grid_stride()) x[i] *= s;
}

__global__ void accumulate_kernel(float *y, const float *x, size_t n) {
    for (size_t i = first_index(); i < n; i += grid_stride()) y[i] += x[i];
}

// out may be a or b: each element is read before it is written.
template <class T> __global__ void add_kernel(T *out, const T *a, const T *b, size_t n) {
    for (size_t i = first_index(); i < n; i += grid_stride())
        store(out, i, load(a, i) + load(b, i));
}

// ---- reductions that return a value

__global__ void sum_squares_partial(double *partials, const float *x, size_t n) {
    double v[1] = {0.0};
    for (size_t i = first_index(); i < n; i += grid_stride()) {
        const double d = x[i];
        v[0] += d * d; // exact: a float's square fits a double
    }
    block_sum<1>(v);
    if (threadIdx.x == 0) partials[blockIdx.x] = v[0];
}

// Sets *flag (zeroed before) when some x[i] is inf or NaN (exponent bits all ones).
__global__ void find_nonfinite(unsigned *flag, const float *x, size_t n) {
    int bad = 0;
    for (size_t i = first_index(); i < n; i += grid_stride())
        bad |= (__float_as_uint(x[i]) & 0x7f800000u) == 0x7f800000u;
    if (__syncthreads_or(bad) && threadIdx.x == 0) *flag = 1u;
}

// Per element in double like the CPU: dy[i] = (float)(scale * d), partial sums of d^2. In bf16
// and fp16 that float is then rounded to T, as the CPU narrows its fp32 dy.
template <class T>
__global__ void mse_partial(double *partials, T *dy, const T *y, const float *target, size_t n,
                            double scale) {
    double v[1] = {0.0};
    for (size_t i = first_index(); i < n; i += grid_stride()) {
        const double d = (double)load(y, i) - (double)target[i];
        v[0] += d * d;
        if (dy) store(dy, i, (float)(scale * d));
    }
    block_sum<1>(v);
    if (threadIdx.x == 0) partials[blockIdx.x] = v[0];
}

// ---- Adam

// The per-call constants, computed on the host exactly as cpu_adam_step computes them.
struct AdamConsts {
    float b1, b2, one_minus_b1, one_minus_b2, eps, wd, step_size, bc2_sqrt, decay;
    int coupled_decay, param_decay;
};

// cpu_adam_step's element update with its rounding steps (no fused multiply-adds).
__global__ void adam_kernel(float *param, const float *grad, float *m, float *v, size_t n,
                            AdamConsts a) {
    for (size_t i = first_index(); i < n; i += grid_stride()) {
        float p = param[i], g = grad[i];
        if (a.coupled_decay) g = __fadd_rn(g, __fmul_rn(a.wd, p)); // Adam: L2 into the moments
        if (a.param_decay) p = __fmul_rn(p, a.decay);              // AdamW: decay the parameter
        const float mi = __fadd_rn(__fmul_rn(a.b1, m[i]), __fmul_rn(a.one_minus_b1, g));
        const float vi =
            __fadd_rn(__fmul_rn(a.b2, v[i]), __fmul_rn(__fmul_rn(a.one_minus_b2, g), g));
        m[i] = mi;
        v[i] = vi;
        const float denom = __fadd_rn(__fdiv_rn(__fsqrt_rn(vi), a.bc2_sqrt), a.eps);
        param[i] = __fsub_rn(p, __fdiv_rn(__fmul_rn(a.step_size, mi), denom));
    }
}

// ---- the toy layer (w and dw in device memory)

__device__ __forceinline__ float toy_tanh(float w1, float w2, float x) {
    return tanhf(__fadd_rn(__fmul_rn(w1, x), w2));
}

// y may be x: each element is read before it is written.
template <class T> __global__ void toy_forward_kernel(const T *w, const T *x, T *y, size_t n) {
    const float w0 = load(w, 0), w1 = load(w, 1), w2 = load(w, 2);
    for (size_t i = first_index(); i < n; i += grid_stride())
        store(y, i, __fmul_rn(w0, toy_tanh(w1, w2, load(x, i))));
}

// dx (nullable) may alias x or dy; partials[b * 3 + k]: block b's sums of dL/dw_k, in double.
template <class T>
__global__ void toy_backward_partial(double *partials, const T *w, const T *x, const T *dy, T *dx,
                                     size_t n) {
    const float w0 = load(w, 0), w1 = load(w, 1), w2 = load(w, 2);
    double v[3] = {0.0, 0.0, 0.0};
    for (size_t i = first_index(); i < n; i += grid_stride()) {
        const float xi = load(x, i), dyi = load(dy, i), t = toy_tanh(w1, w2, xi);
        const float dz = __fmul_rn(__fmul_rn(dyi, w0), __fsub_rn(1.0f, __fmul_rn(t, t)));
        v[0] += (double)dyi * (double)t;
        v[1] += (double)dz * (double)xi;
        v[2] += (double)dz;
        if (dx) store(dx, i, __fmul_rn(dz, w1));
    }
    block_sum<3>(v);
    if (threadIdx.x == 0)
        for (int k = 0; k < 3; k++) partials[(size_t)blockIdx.x * 3 + k] = v[k];
}

// One block: dw[k] += the batch's sum, added in double and rounded once.
__global__ void toy_backward_finish(float *dw, const double *partials, unsigned blocks) {
    double v[3];
    sum_partials<3>(v, partials, blocks);
    if (threadIdx.x == 0)
        for (int k = 0; k < 3; k++) dw[k] = (float)((double)dw[k] + v[k]);
}

// ---- GELU (exact, erf): PyTorch's CUDA formulas

// out may be in.
template <class T> __global__ void gelu_forward_kernel(T *out, const T *in, size_t n) {
    for (size_t i = first_index(); i < n; i += grid_stride()) store(out, i, gelu(load(in, i)));
}

// din = dout * (Phi(x) + x phi(x)); din may be dout.
template <class T>
__global__ void gelu_backward_kernel(T *din, const T *in, const T *dout, size_t n) {
    for (size_t i = first_index(); i < n; i += grid_stride()) {
        const float slope = gelu_grad(load(in, i));
        store(din, i, load(dout, i) * slope);
    }
}

// ---- bias_grad: column sums over rows (column_sums.cuh)
//
// Block (COLUMN_TILE, COLUMN_LANES) takes tiles of 32 adjacent columns (coalesced rows) and the
// rows of its group blockIdx.y, lane y summing every COLUMN_LANES-th row in double.
template <class T>
__global__ void bias_grad_partial(float *db, double *partials, const T *dout, size_t rows,
                                  size_t cols, size_t stride, size_t group_rows) {
    column_sums_block(db, partials, rows, cols, group_rows, [&](size_t j, size_t i, size_t end) {
        double s = 0.0;
        for (; i < end; i += COLUMN_LANES) s += load(dout, i * stride + j);
        return s;
    });
}

__global__ void column_sums_finish_kernel(float *__restrict__ db,
                                          const double *__restrict__ partials, size_t cols,
                                          unsigned groups) {
    for (size_t j = first_index(); j < cols; j += grid_stride()) {
        double s = 0.0;
        for (unsigned g = 0; g < groups; g++) s += partials[(size_t)g * cols + j];
        db[j] = (float)((double)db[j] + s);
    }
}

} // namespace

// ---------------------------------------------------------------- the ops

extern "C" void cuda_cast(void *dst, DType dst_type, const void *src, DType src_type, size_t n) {
    if (n == 0) return;
    CudaContext *c = cuda_ctx();
    // Same type is a copy (NaN payloads stay bit-exact), as on the CPU; two types the CPU
    // would both store as fp32 are a copy of floats.
    if (dst_type == src_type || stored_type(dst_type) == stored_type(src_type)) {
        const size_t bytes =
            n * (dst_type == src_type ? elem_bytes(dst_type) : elem_bytes(DTYPE_FP32));
        if (bytes)
            cuda_note(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToDevice, c->stream),
                      "cast");
        return;
    }
    switch (stored_type(dst_type)) {
    case DTYPE_BF16:
        launch_cast<DTYPE_BF16>(dst, src, stored_type(src_type), n);
        break;
    case DTYPE_FP16:
        launch_cast<DTYPE_FP16>(dst, src, stored_type(src_type), n);
        break;
    default:
        launch_cast<DTYPE_FP32>(dst, src, stored_type(src_type), n);
        break;
    }
    CUDA_LAUNCHED("cast");
}

extern "C" void cuda_zero(float *x, size_t n) {
    if (n == 0) return;
    cuda_note(cudaMemsetAsync(x, 0, n * sizeof *x, cuda_ctx()->stream), "zero");
}

extern "C" void cuda_copy_bytes(void *dst, const void *src, size_t bytes) {
    if (bytes == 0) return;
    cuda_note(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToDevice, cuda_ctx()->stream),
              "copy_bytes");
}

extern "C" void cuda_zero_bytes(void *dst, size_t bytes) {
    if (bytes == 0) return;
    cuda_note(cudaMemsetAsync(dst, 0, bytes, cuda_ctx()->stream), "zero_bytes");
}

// One launch per SPANS_PER_LAUNCH spans; the grid's x covers the batch's longest span. Two
// types the CPU would both store as fp32 copy as fp32, as cast does.
extern "C" void cuda_copy_spans(void *dst, DType dst_type, const void *src, DType src_type,
                                const CopySpan *spans, size_t nspans) {
    const DType d = stored_type(dst_type), s = stored_type(src_type);
    for (size_t first = 0; first < nspans; first += SPANS_PER_LAUNCH) {
        SpanBatch b;
        memset(&b, 0, sizeof b);
        const size_t count =
            nspans - first < SPANS_PER_LAUNCH ? nspans - first : (size_t)SPANS_PER_LAUNCH;
        size_t longest = 0;
        for (size_t i = 0; i < count; i++) {
            b.span[i] = spans[first + i];
            if (b.span[i].n + b.span[i].pad > longest) longest = b.span[i].n + b.span[i].pad;
        }
        if (longest == 0) continue;
        const dim3 grid(cuda_blocks(longest, THREADS, 65535u), (unsigned)count);
        switch (d) {
        case DTYPE_BF16:
            launch_copy_spans<DTYPE_BF16>(dst, src, s, b, grid);
            break;
        case DTYPE_FP16:
            launch_copy_spans<DTYPE_FP16>(dst, src, s, b, grid);
            break;
        default:
            launch_copy_spans<DTYPE_FP32>(dst, src, s, b, grid);
            break;
        }
        CUDA_LAUNCHED("copy_spans");
    }
}

extern "C" void cuda_scale(float *x, float s, size_t n) {
    if (n == 0) return;
    scale_kernel<<<cuda_blocks(n, THREADS), THREADS, 0, cuda_ctx()->stream>>>(x, s, n);
    CUDA_LAUNCHED("scale");
}

extern "C" void cuda_accumulate(float *y, const float *x, size_t n) {
    if (n == 0) return;
    accumulate_kernel<<<cuda_blocks(n, THREADS), THREADS, 0, cuda_ctx()->stream>>>(y, x, n);
    CUDA_LAUNCHED("accumulate");
}

extern "C" void cuda_add(DType t, void *out, const void *a, const void *b, size_t n) {
    if (n == 0) return;
    if (cuda_dispatch(t, "add", [&](auto e) {
            using T = typename decltype(e)::type;
            add_kernel<<<cuda_blocks(n, THREADS), THREADS, 0, cuda_ctx()->stream>>>(
                (T *)out, (const T *)a, (const T *)b, n);
        }))
        return;
    CUDA_LAUNCHED("add");
}

// On a CUDA error: 0.0 (see the top of the file).
extern "C" double cuda_sum_squares(const float *x, size_t n) {
    if (n == 0) return 0.0;
    CudaContext *c = cuda_ctx();
    const unsigned blocks = reduce_blocks(n);
    sum_squares_partial<<<blocks, THREADS, 0, c->stream>>>(partial_area(c), x, n);
    if (CUDA_LAUNCHED("sum_squares")) return 0.0;
    finish_sum<1><<<1, THREADS, 0, c->stream>>>(result_area(c), partial_area(c), blocks);
    if (CUDA_LAUNCHED("sum_squares") || fetch_result(c, sizeof(double), "sum_squares")) return 0.0;
    double sum;
    memcpy(&sum, c->host, sizeof sum);
    return sum;
}

// On a CUDA error: 0, "not all finite" (see the top of the file).
extern "C" int cuda_all_finite(const float *x, size_t n) {
    if (n == 0) return 1;
    CudaContext *c = cuda_ctx();
    unsigned *flag = (unsigned *)c->scratch;
    if (cuda_note(cudaMemsetAsync(flag, 0, sizeof *flag, c->stream), "all_finite")) return 0;
    find_nonfinite<<<cuda_blocks(n, THREADS), THREADS, 0, c->stream>>>(flag, x, n);
    if (CUDA_LAUNCHED("all_finite") || fetch_result(c, sizeof *flag, "all_finite")) return 0;
    unsigned found;
    memcpy(&found, c->host, sizeof found);
    return found == 0;
}

extern "C" void cuda_adam_step(float *param, const float *grad, float *m, float *v, size_t n,
                               const AdamHyper *h, long step) {
    if (n == 0) return;
    if (step < 1) step = 1; // step 0 would divide by a zero bias correction
    const float b1 = h->beta1, b2 = h->beta2, wd = h->weight_decay;
    const double bc1 = 1.0 - pow((double)b1, (double)step);
    const double bc2 = 1.0 - pow((double)b2, (double)step);
    AdamConsts a;
    a.b1 = b1;
    a.b2 = b2;
    a.one_minus_b1 = 1.0f - b1;
    a.one_minus_b2 = 1.0f - b2;
    a.eps = h->eps;
    a.wd = wd;
    a.step_size = (float)((double)h->lr / bc1);
    a.bc2_sqrt = (float)sqrt(bc2);
    a.decay = (float)(1.0 - (double)h->lr * (double)wd);
    a.coupled_decay = !h->decoupled && wd != 0.0f;
    a.param_decay = h->decoupled && wd != 0.0f;
    const unsigned blocks = cuda_blocks(n, THREADS);
    adam_kernel<<<blocks, THREADS, 0, cuda_ctx()->stream>>>(param, grad, m, v, n, a);
    CUDA_LAUNCHED("adam_step");
}

extern "C" void cuda_toy_forward(DType t, const void *w, const void *x, void *y, size_t n) {
    if (n == 0) return;
    if (cuda_dispatch(t, "toy_forward", [&](auto e) {
            using T = typename decltype(e)::type;
            toy_forward_kernel<<<cuda_blocks(n, THREADS), THREADS, 0, cuda_ctx()->stream>>>(
                (const T *)w, (const T *)x, (T *)y, n);
        }))
        return;
    CUDA_LAUNCHED("toy_forward");
}

// Stays asynchronous: the batch sums go through the scratch straight into dw.
extern "C" void cuda_toy_backward(DType t, const void *w, const void *x, const void *dy, void *dx,
                                  float dw[3], size_t n) {
    if (n == 0) return; // dw += 0
    CudaContext *c = cuda_ctx();
    const unsigned blocks = reduce_blocks(n);
    if (cuda_dispatch(t, "toy_backward", [&](auto e) {
            using T = typename decltype(e)::type;
            toy_backward_partial<<<blocks, THREADS, 0, c->stream>>>(
                partial_area(c), (const T *)w, (const T *)x, (const T *)dy, (T *)dx, n);
        }))
        return;
    if (CUDA_LAUNCHED("toy_backward")) return;
    toy_backward_finish<<<1, THREADS, 0, c->stream>>>(dw, partial_area(c), blocks);
    CUDA_LAUNCHED("toy_backward");
}

// On a CUDA error: NaN (see the top of the file); likewise for a DType that is no compute dtype.
extern "C" float cuda_mse_loss(DType t, const void *y, const float *target, void *dy, size_t n) {
    if (n == 0) return 0.0f;
    CudaContext *c = cuda_ctx();
    const unsigned blocks = reduce_blocks(n);
    if (cuda_dispatch(t, "mse_loss", [&](auto e) {
            using T = typename decltype(e)::type;
            mse_partial<<<blocks, THREADS, 0, c->stream>>>(partial_area(c), (T *)dy, (const T *)y,
                                                           target, n, 2.0 / (double)n);
        }))
        return NAN;
    if (CUDA_LAUNCHED("mse_loss")) return NAN;
    finish_sum<1><<<1, THREADS, 0, c->stream>>>(result_area(c), partial_area(c), blocks);
    if (CUDA_LAUNCHED("mse_loss") || fetch_result(c, sizeof(double), "mse_loss")) return NAN;
    double sum;
    memcpy(&sum, c->host, sizeof sum);
    return (float)(sum / (double)n);
}

extern "C" void cuda_gelu_forward(DType t, void *out, const void *in, size_t n) {
    if (n == 0) return;
    if (cuda_dispatch(t, "gelu_forward", [&](auto e) {
            using T = typename decltype(e)::type;
            gelu_forward_kernel<<<cuda_blocks(n, THREADS), THREADS, 0, cuda_ctx()->stream>>>(
                (T *)out, (const T *)in, n);
        }))
        return;
    CUDA_LAUNCHED("gelu_forward");
}

extern "C" void cuda_gelu_backward(DType t, void *din, const void *in, const void *dout, size_t n) {
    if (n == 0) return;
    const unsigned blocks = cuda_blocks(n, THREADS);
    if (cuda_dispatch(t, "gelu_backward", [&](auto e) {
            using T = typename decltype(e)::type;
            gelu_backward_kernel<<<blocks, THREADS, 0, cuda_ctx()->stream>>>(
                (T *)din, (const T *)in, (const T *)dout, n);
        }))
        return;
    CUDA_LAUNCHED("gelu_backward");
}

void column_sums_finish(float *db, const double *partials, size_t cols, unsigned groups,
                        cudaStream_t stream) {
    column_sums_finish_kernel<<<cuda_blocks(cols, THREADS), THREADS, 0, stream>>>(db, partials,
                                                                                  cols, groups);
}

// Row groups of at least BIAS_MIN_GROUP_ROWS rows, their partials after the scratch's result.
extern "C" void cuda_bias_grad(DType t, float *db, const void *dout, size_t rows, size_t cols,
                               size_t stride) {
    if (rows == 0 || cols == 0) return;
    CudaContext *c = cuda_ctx();
    const ColumnSumGrid g =
        column_sum_grid(rows, cols, BIAS_MAX_GROUPS, BIAS_MIN_GROUP_ROWS, PARTIAL_DOUBLES);
    double *partials = g.groups > 1 ? partial_area(c) : nullptr;
    if (cuda_dispatch(t, "bias_grad", [&](auto e) {
            using T = typename decltype(e)::type;
            bias_grad_partial<<<g.grid, g.block, 0, c->stream>>>(db, partials, (const T *)dout,
                                                                 rows, cols, stride, g.group_rows);
        }))
        return;
    if (CUDA_LAUNCHED("bias_grad") || !partials) return;
    column_sums_finish(db, partials, cols, g.groups, c->stream);
    CUDA_LAUNCHED("bias_grad");
}
