/* llama_ops: the Llama-shaped block's ops on the GPU (RMSNorm, SwiGLU, RoPE) and eager attention
 * over grouped, strided operands (semantics in ../kernels.h; flash attention is
 * flash_attention.cu's). Simple kernels that mirror the CPU code: one thread block per row, or a
 * thread per element; RMSNorm's dw is bias_grad's column sums. */
#include <limits.h>
#include <math.h>

#include <type_traits>

#include "kernels/cuda/column_sums.cuh"
#include "kernels/cuda/cuda_common.cuh"
#include "kernels/cuda/cuda_ops.h"

// Eager attention: one block per (sample, query head, query row) keeps that row's T scores in
// shared memory (T <= KERNELS_MAX_TOKENS). Backward adds each row's share of dk and dv with
// atomicAdd (a K,V head's gradient sums over rows and over its group's query heads): within fp32
// rounding of the CPU's order, not the same bits run to run.
//
// Dtypes: every kernel is a template over E, the compute dtype's element type (cuda_common.cuh;
// E, since T is the sequence length), and computes in fp32. Eager attention stores probs in E
// (out is computed from the fp32 row before that rounding, as the CPU's) and its backward reads
// them back in E. A bf16 or fp16 dk or dv cannot take atomic adds (each would round), so
// backward then adds into fp32 accumulators in the context's cuBLASLt workspace, as many samples
// at a time as it holds, and rounds them into dk and dv once.

namespace {

constexpr unsigned ROW_THREADS = 256;
constexpr unsigned EW_THREADS = 256;

// Sum over the block (blockDim.x == ROW_THREADS); every thread gets the total.
__device__ float block_sum(float v, float *shared) {
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
    __syncthreads();
    if (lane == 0) shared[warp] = v;
    __syncthreads();
    float total = 0.0f;
    for (int w = 0; w < (int)(blockDim.x / 32); w++) total += shared[w];
    return total;
}

__device__ float block_max(float v, float *shared) {
    for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
    __syncthreads();
    if (lane == 0) shared[warp] = v;
    __syncthreads();
    float m = shared[0];
    for (int w = 1; w < (int)(blockDim.x / 32); w++) m = fmaxf(m, shared[w]);
    return m;
}

template <class E>
__global__ void rmsnorm_forward_kernel(E *out, float *rstd, const E *in, const E *w, size_t C,
                                       float eps) {
    __shared__ float red[32];
    const size_t row = blockIdx.x;
    const E *x = in + row * C;
    float sq = 0.0f;
    for (size_t c = threadIdx.x; c < C; c += blockDim.x) sq += load(x, c) * load(x, c);
    const float r = rsqrtf(block_sum(sq, red) / (float)C + eps);
    if (threadIdx.x == 0) rstd[row] = r;
    for (size_t c = threadIdx.x; c < C; c += blockDim.x)
        store(out, row * C + c, load(x, c) * r * load(w, c));
}

// din += ...: the stored value widened, the sum rounded once.
template <class E>
__global__ void rmsnorm_din_kernel(E *din, const E *dout, const E *in, const float *rstd,
                                   const E *w, size_t C) {
    __shared__ float red[32];
    const size_t row = blockIdx.x;
    const E *x = in + row * C, *dy = dout + row * C;
    const float r = rstd[row];
    float dot = 0.0f;
    for (size_t c = threadIdx.x; c < C; c += blockDim.x)
        dot += load(w, c) * load(dy, c) * load(x, c);
    const float k = block_sum(dot, red) / (float)C * r * r;
    for (size_t c = threadIdx.x; c < C; c += blockDim.x)
        store(din, row * C + c,
              load(din, row * C + c) + r * (load(w, c) * load(dy, c) - load(x, c) * k));
}

// dw: bias_grad's column sums (column_sums.cuh) of dout * in * rstd over the rows, in double, in
// up to DW_MAX_GROUPS groups of at least DW_MIN_GROUP_ROWS rows whose partials go through the
// context's scratch: coalesced, the GPU filled even at a few columns, and bit-identical run to
// run (no atomics).
constexpr size_t DW_MAX_GROUPS = 128, DW_MIN_GROUP_ROWS = 32;

template <class E>
__global__ void rmsnorm_dw_kernel(float *dw, double *partials, const E *dout, const E *in,
                                  const float *rstd, size_t M, size_t C, size_t group_rows) {
    column_sums_block(dw, partials, M, C, group_rows, [&](size_t j, size_t i, size_t end) {
        double s = 0.0;
        for (; i < end; i += COLUMN_LANES)
            s += (double)(load(dout, i * C + j) * load(in, i * C + j) * rstd[i]);
        return s;
    });
}

__device__ float sigmoidf(float x) {
    return 1.0f / (1.0f + expf(-x));
}

template <class E>
__global__ void swiglu_forward_kernel(E *out, const E *gate, const E *up, size_t n) {
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n;
         i += (size_t)gridDim.x * blockDim.x)
        store(out, i, load(gate, i) * sigmoidf(load(gate, i)) * load(up, i));
}

// dgate may be dout: each element is read before it is written.
template <class E>
__global__ void swiglu_backward_kernel(E *dgate, E *dup, const E *dout, const E *gate, const E *up,
                                       size_t n) {
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n;
         i += (size_t)gridDim.x * blockDim.x) {
        const float g = load(gate, i), s = sigmoidf(g), dy = load(dout, i);
        store(dup, i, dy * g * s);
        store(dgate, i, dy * load(up, i) * s * (1.0f + g * (1.0f - s)));
    }
}

// a thread per (row, head, pair i < D/2)
template <class E>
__global__ void rope_kernel(E *x, size_t rows, size_t T, size_t heads, size_t D, float theta,
                            double sign) {
    const size_t half = D / 2, n = rows * heads * half;
    for (size_t e = (size_t)blockIdx.x * blockDim.x + threadIdx.x; e < n;
         e += (size_t)gridDim.x * blockDim.x) {
        const size_t i = e % half, h = (e / half) % heads, row = e / (half * heads);
        const double angle = (double)(row % T) * pow((double)theta, -2.0 * (double)i / (double)D);
        const float c = (float)cos(angle), sn = (float)(sign * sin(angle));
        E *p = x + row * heads * D + h * D;
        const float a = load(p, i), b = load(p, i + half);
        store(p, i, a * c - b * sn);
        store(p, i + half, b * c + a * sn);
    }
}

struct Shape {
    size_t B, T, heads, kv_heads, D, qs, kvs;
    int causal;
};

__host__ Shape shape_of(const AttnShape *s) {
    return Shape{s->B,        s->T,        s->heads,     s->kv_heads,
                 s->head_dim, s->q_stride, s->kv_stride, s->causal};
}

// Block (row t of pair b * heads + h): scores into p[T] (shared), softmax, out row, probs row.
template <class E>
__global__ void attention_forward_kernel(E *out, E *probs, const E *q, const E *k, const E *v,
                                         Shape s) {
    __shared__ float p[KERNELS_MAX_TOKENS];
    __shared__ float red[32];
    const size_t t = blockIdx.x % s.T, pair = blockIdx.x / s.T;
    const size_t b = pair / s.heads, h = pair % s.heads, g = h / (s.heads / s.kv_heads);
    const float scale = rsqrtf((float)s.D);
    const E *qt = q + (b * s.T + t) * s.qs + h * s.D;
    const size_t keys = s.causal ? t + 1 : s.T;
    float mx = -INFINITY;
    for (size_t j = threadIdx.x; j < keys; j += blockDim.x) {
        const E *kj = k + (b * s.T + j) * s.kvs + g * s.D;
        float acc = 0.0f;
        for (size_t d = 0; d < s.D; d++) acc += load(qt, d) * load(kj, d);
        p[j] = acc;
        mx = fmaxf(mx, acc);
    }
    mx = block_max(mx, red);
    float sum = 0.0f;
    for (size_t j = threadIdx.x; j < keys; j += blockDim.x) {
        p[j] = expf((p[j] - mx) * scale);
        sum += p[j];
    }
    sum = block_sum(sum, red);
    const float inv = 1.0f / sum;
    for (size_t j = threadIdx.x; j < s.T; j += blockDim.x) {
        p[j] = j < keys ? p[j] * inv : 0.0f;
        store(probs, pair * s.T * s.T + t * s.T + j, p[j]);
    }
    __syncthreads();
    const size_t C = s.heads * s.D;
    for (size_t d = threadIdx.x; d < s.D; d += blockDim.x) {
        float acc = 0.0f;
        for (size_t j = 0; j < keys; j++)
            acc += p[j] * load(v, (b * s.T + j) * s.kvs + g * s.D + d);
        store(out, (b * s.T + t) * C + h * s.D + d, acc);
    }
}

// zeroes the K,V heads' columns of every row (dk and dv are added into)
__global__ void zero_rows_kernel(float *x, size_t rows, size_t cols, size_t stride) {
    for (size_t e = (size_t)blockIdx.x * blockDim.x + threadIdx.x; e < rows * cols;
         e += (size_t)gridDim.x * blockDim.x)
        x[(e / cols) * stride + e % cols] = 0.0f;
}

// Where backward adds dk and dv: fp32 arrays whose row r of sample b (its K,V heads' columns)
// starts at ((b - b0) T + r) stride. fp32 adds straight into dk and dv (b0 0, stride kv_stride);
// bf16 and fp16 into the workspace's accumulators of samples b0.. (stride kv_heads D).
struct KvAcc {
    float *dk, *dv;
    size_t b0, stride;
};

// Block (row t of pair pair0 + blockIdx.x / T): P row (saved), dP = dout v^T, dS, dq's row, and
// this row's share of dk and dv (atomics into acc).
template <class E>
__global__ void attention_backward_kernel(E *dq, KvAcc acc, size_t pair0, const E *dout, const E *q,
                                          const E *k, const E *v, const E *probs, Shape s) {
    __shared__ float p[KERNELS_MAX_TOKENS], ds[KERNELS_MAX_TOKENS];
    __shared__ float red[32];
    const size_t t = blockIdx.x % s.T, pair = pair0 + blockIdx.x / s.T;
    const size_t b = pair / s.heads, h = pair % s.heads, g = h / (s.heads / s.kv_heads);
    const size_t C = s.heads * s.D;
    const float scale = rsqrtf((float)s.D);
    const E *qt = q + (b * s.T + t) * s.qs + h * s.D, *go = dout + (b * s.T + t) * C + h * s.D;
    const size_t keys = s.causal ? t + 1 : s.T;
    float rowsum = 0.0f;
    for (size_t j = threadIdx.x; j < keys; j += blockDim.x) {
        const E *vj = v + (b * s.T + j) * s.kvs + g * s.D;
        const float pj = load(probs, pair * s.T * s.T + t * s.T + j);
        float dp = 0.0f;
        for (size_t d = 0; d < s.D; d++) dp += load(go, d) * load(vj, d);
        p[j] = pj;
        ds[j] = dp;
        rowsum += pj * dp;
    }
    rowsum = block_sum(rowsum, red);
    for (size_t j = threadIdx.x; j < keys; j += blockDim.x) ds[j] = p[j] * (ds[j] - rowsum) * scale;
    __syncthreads();
    for (size_t d = threadIdx.x; d < s.D; d += blockDim.x) {
        float a = 0.0f;
        for (size_t j = 0; j < keys; j++) {
            const size_t kv = (b * s.T + j) * s.kvs + g * s.D + d;
            const size_t ka = ((b - acc.b0) * s.T + j) * acc.stride + g * s.D + d;
            a += ds[j] * load(k, kv);
            atomicAdd(&acc.dk[ka], ds[j] * load(qt, d));
            atomicAdd(&acc.dv[ka], p[j] * load(go, d));
        }
        store(dq, (b * s.T + t) * s.qs + h * s.D + d, a);
    }
}

// dk's and dv's rows of samples b0.. (their K,V heads' `cols` columns, `stride` apart) from the
// dense fp32 accumulators, each rounded once.
template <class E>
__global__ void kv_round_kernel(E *dk, E *dv, const float *acc_k, const float *acc_v, size_t rows,
                                size_t cols, size_t stride) {
    for (size_t e = (size_t)blockIdx.x * blockDim.x + threadIdx.x; e < rows * cols;
         e += (size_t)gridDim.x * blockDim.x) {
        const size_t at = (e / cols) * stride + e % cols;
        store(dk, at, acc_k[e]);
        store(dv, at, acc_v[e]);
    }
}

} // namespace

extern "C" void cuda_rmsnorm_forward(DType t, void *out, float *rstd, const void *in, const void *w,
                                     size_t M, size_t C, float eps) {
    if (M == 0 || C == 0) return;
    if (cuda_dispatch(t, "rmsnorm_forward", [&](auto e) {
            using E = typename decltype(e)::type;
            rmsnorm_forward_kernel<<<(unsigned)M, ROW_THREADS, 0, cuda_ctx()->stream>>>(
                (E *)out, rstd, (const E *)in, (const E *)w, C, eps);
        }))
        return;
    CUDA_LAUNCHED("rmsnorm_forward");
}

extern "C" void cuda_rmsnorm_backward(DType t, void *din, float *dw, const void *dout,
                                      const void *in, const float *rstd, const void *w, size_t M,
                                      size_t C) {
    if (M == 0 || C == 0) return;
    CudaContext *c = cuda_ctx();
    const ColumnSumGrid g = column_sum_grid(M, C, DW_MAX_GROUPS, DW_MIN_GROUP_ROWS,
                                            CUDA_SCRATCH_BYTES / sizeof(double));
    double *partials = g.groups > 1 ? (double *)c->scratch : nullptr;
    if (cuda_dispatch(t, "rmsnorm_backward", [&](auto e) {
            using E = typename decltype(e)::type;
            rmsnorm_din_kernel<<<(unsigned)M, ROW_THREADS, 0, c->stream>>>(
                (E *)din, (const E *)dout, (const E *)in, rstd, (const E *)w, C);
            rmsnorm_dw_kernel<<<g.grid, g.block, 0, c->stream>>>(
                dw, partials, (const E *)dout, (const E *)in, rstd, M, C, g.group_rows);
        }))
        return;
    if (CUDA_LAUNCHED("rmsnorm_backward") || !partials) return;
    column_sums_finish(dw, partials, C, g.groups, c->stream);
    CUDA_LAUNCHED("rmsnorm_backward");
}

extern "C" void cuda_swiglu_forward(DType t, void *out, const void *gate, const void *up,
                                    size_t n) {
    if (n == 0) return;
    if (cuda_dispatch(t, "swiglu_forward", [&](auto e) {
            using E = typename decltype(e)::type;
            swiglu_forward_kernel<<<cuda_blocks(n, EW_THREADS), EW_THREADS, 0,
                                    cuda_ctx()->stream>>>((E *)out, (const E *)gate, (const E *)up,
                                                          n);
        }))
        return;
    CUDA_LAUNCHED("swiglu_forward");
}

extern "C" void cuda_swiglu_backward(DType t, void *dgate, void *dup, const void *dout,
                                     const void *gate, const void *up, size_t n) {
    if (n == 0) return;
    if (cuda_dispatch(t, "swiglu_backward", [&](auto e) {
            using E = typename decltype(e)::type;
            swiglu_backward_kernel<<<cuda_blocks(n, EW_THREADS), EW_THREADS, 0,
                                     cuda_ctx()->stream>>>((E *)dgate, (E *)dup, (const E *)dout,
                                                           (const E *)gate, (const E *)up, n);
        }))
        return;
    CUDA_LAUNCHED("swiglu_backward");
}

static void rope(DType t, void *x, size_t B, size_t T, size_t heads, size_t D, float theta,
                 double sign, const char *where) {
    const size_t n = B * T * heads * (D / 2);
    if (n == 0) return;
    if (cuda_dispatch(t, where, [&](auto e) {
            using E = typename decltype(e)::type;
            rope_kernel<<<cuda_blocks(n, EW_THREADS), EW_THREADS, 0, cuda_ctx()->stream>>>(
                (E *)x, B * T, T, heads, D, theta, sign);
        }))
        return;
    CUDA_LAUNCHED(where);
}

extern "C" void cuda_rope_forward(DType t, void *x, size_t B, size_t T, size_t heads, size_t D,
                                  float theta) {
    rope(t, x, B, T, heads, D, theta, 1.0, "rope_forward");
}

extern "C" void cuda_rope_backward(DType t, void *dx, size_t B, size_t T, size_t heads, size_t D,
                                   float theta) {
    rope(t, dx, B, T, heads, D, theta, -1.0, "rope_backward");
}

static int attn_empty(const AttnShape *s) {
    return s->B == 0 || s->T == 0 || s->heads == 0 || s->kv_heads == 0 || s->head_dim == 0;
}

// The shapes these kernels take, as attention.cu's attention_shape_ok has them: a row of
// probabilities in shared memory (T <= KERNELS_MAX_TOKENS), whole groups of query heads per kv
// head, and a grid of one block per row. Records an invalid-value error otherwise.
static int gqa_shape_ok(const AttnShape *s, const char *where) {
    if (s->T > KERNELS_MAX_TOKENS || s->heads % s->kv_heads != 0 ||
        s->B * s->heads > (size_t)INT_MAX / KERNELS_MAX_TOKENS) {
        cuda_note(cudaErrorInvalidValue, where);
        return 0;
    }
    return 1;
}

template <class E>
static void attention_forward(E *out, E *probs, const E *q, const E *k, const E *v,
                              const AttnShape *s, const char *where) {
    const unsigned rows = (unsigned)(s->B * s->heads * s->T);
    attention_forward_kernel<<<rows, ROW_THREADS, 0, cuda_ctx()->stream>>>(out, probs, q, k, v,
                                                                           shape_of(s));
    CUDA_LAUNCHED(where);
}

// fp32: dk and dv zeroed, then every row's share added straight into them. bf16 and fp16: the
// same into fp32 accumulators in the workspace, a chunk of samples at a time (2 T kv_heads D
// floats a sample; T <= KERNELS_MAX_TOKENS keeps a sample within the 32 MiB up to kv_heads D of
// 16384), each chunk's rounded into dk and dv once its rows are done.
template <class E>
static void attention_backward(E *dq, E *dk, E *dv, const E *dout, const E *q, const E *k,
                               const E *v, const E *probs, const AttnShape *s, const char *where) {
    CudaContext *ctx = cuda_ctx();
    cudaStream_t stream = ctx->stream;
    const size_t rows = s->B * s->T, cols = s->kv_heads * s->head_dim;
    if constexpr (std::is_same_v<E, float>) {
        zero_rows_kernel<<<cuda_blocks(rows * cols, EW_THREADS), EW_THREADS, 0, stream>>>(
            dk, rows, cols, s->kv_stride);
        zero_rows_kernel<<<cuda_blocks(rows * cols, EW_THREADS), EW_THREADS, 0, stream>>>(
            dv, rows, cols, s->kv_stride);
        attention_backward_kernel<<<(unsigned)(s->B * s->heads * s->T), ROW_THREADS, 0, stream>>>(
            dq, KvAcc{dk, dv, 0, s->kv_stride}, 0, dout, q, k, v, probs, shape_of(s));
        CUDA_LAUNCHED(where);
    } else {
        const size_t sample = s->T * cols; // floats of one sample's dk (and of its dv)
        const size_t per_chunk = CUDA_WORKSPACE_FLOATS / (2 * sample);
        if (per_chunk == 0) {
            cuda_note(cudaErrorInvalidValue, where);
            return;
        }
        float *acc_k = (float *)ctx->workspace;
        for (size_t b0 = 0; b0 < s->B; b0 += per_chunk) {
            const size_t nb = s->B - b0 < per_chunk ? s->B - b0 : per_chunk;
            float *acc_v = acc_k + nb * sample;
            if (cuda_note(cudaMemsetAsync(acc_k, 0, 2 * nb * sample * sizeof(float), stream),
                          where))
                return;
            attention_backward_kernel<<<(unsigned)(nb * s->heads * s->T), ROW_THREADS, 0, stream>>>(
                dq, KvAcc{acc_k, acc_v, b0, cols}, b0 * s->heads, dout, q, k, v, probs,
                shape_of(s));
            if (CUDA_LAUNCHED(where)) return;
            const size_t at = b0 * s->T * s->kv_stride;
            kv_round_kernel<<<cuda_blocks(nb * sample, EW_THREADS), EW_THREADS, 0, stream>>>(
                dk + at, dv + at, acc_k, acc_v, nb * s->T, cols, s->kv_stride);
            if (CUDA_LAUNCHED(where)) return;
        }
    }
}

extern "C" void cuda_gqa_attention_forward(DType t, void *out, void *probs, const void *q,
                                           const void *k, const void *v, const AttnShape *s) {
    if (attn_empty(s) || !gqa_shape_ok(s, "gqa_attention_forward")) return;
    cuda_dispatch(t, "gqa_attention_forward", [&](auto e) {
        using E = typename decltype(e)::type;
        attention_forward((E *)out, (E *)probs, (const E *)q, (const E *)k, (const E *)v, s,
                          "gqa_attention_forward");
    });
}

extern "C" void cuda_gqa_attention_backward(DType t, void *dq, void *dk, void *dv, const void *dout,
                                            const void *q, const void *k, const void *v,
                                            const void *probs, const AttnShape *s) {
    if (attn_empty(s) || !gqa_shape_ok(s, "gqa_attention_backward")) return;
    cuda_dispatch(t, "gqa_attention_backward", [&](auto e) {
        using E = typename decltype(e)::type;
        attention_backward((E *)dq, (E *)dk, (E *)dv, (const E *)dout, (const E *)q, (const E *)k,
                           (const E *)v, (const E *)probs, s, "gqa_attention_backward");
    });
}
