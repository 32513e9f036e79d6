/* llama_ops: the Llama-shaped block's ops on the GPU (RMSNorm, SwiGLU, RoPE) and attention over
 * grouped, strided operands, eager and flash (semantics in ../kernels.h). Simple kernels that
 * mirror the CPU code: one thread block per row, or a thread per element. */
#include <math.h>

#include "kernels/cuda/cuda_common.cuh"
#include "kernels/cuda/cuda_ops.h"

// Attention: one block per (sample, query head, query row) keeps that row's T scores in shared
// memory (T <= KERNELS_MAX_TOKENS). Backward adds each row's share of dk and dv with atomicAdd
// (a K,V head's gradient sums over rows and over its group's query heads): within fp32 rounding
// of the CPU's order, not the same bits run to run. Flash's backward recomputes its row from
// lse, so it needs none of the caller's work tile.

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

__global__ void rmsnorm_forward_kernel(float *out, float *rstd, const float *in, const float *w,
                                       size_t C, float eps) {
    __shared__ float red[32];
    const size_t row = blockIdx.x;
    const float *x = in + row * C;
    float sq = 0.0f;
    for (size_t c = threadIdx.x; c < C; c += blockDim.x) sq += x[c] * x[c];
    const float r = rsqrtf(block_sum(sq, red) / (float)C + eps);
    if (threadIdx.x == 0) rstd[row] = r;
    for (size_t c = threadIdx.x; c < C; c += blockDim.x) out[row * C + c] = x[c] * r * w[c];
}

__global__ void rmsnorm_din_kernel(float *din, const float *dout, const float *in,
                                   const float *rstd, const float *w, size_t C) {
    __shared__ float red[32];
    const size_t row = blockIdx.x;
    const float *x = in + row * C, *dy = dout + row * C;
    const float r = rstd[row];
    float dot = 0.0f;
    for (size_t c = threadIdx.x; c < C; c += blockDim.x) dot += w[c] * dy[c] * x[c];
    const float k = block_sum(dot, red) / (float)C * r * r;
    for (size_t c = threadIdx.x; c < C; c += blockDim.x)
        din[row * C + c] += r * (w[c] * dy[c] - x[c] * k);
}

// dw: a thread per column sums its rows in order.
__global__ void rmsnorm_dw_kernel(float *dw, const float *dout, const float *in, const float *rstd,
                                  size_t M, size_t C) {
    for (size_t c = (size_t)blockIdx.x * blockDim.x + threadIdx.x; c < C;
         c += (size_t)gridDim.x * blockDim.x) {
        float acc = dw[c];
        for (size_t i = 0; i < M; i++) acc += dout[i * C + c] * in[i * C + c] * rstd[i];
        dw[c] = acc;
    }
}

__device__ float sigmoidf(float x) {
    return 1.0f / (1.0f + expf(-x));
}

__global__ void swiglu_forward_kernel(float *out, const float *gate, const float *up, size_t n) {
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n;
         i += (size_t)gridDim.x * blockDim.x)
        out[i] = gate[i] * sigmoidf(gate[i]) * up[i];
}

__global__ void swiglu_backward_kernel(float *dgate, float *dup, const float *dout,
                                       const float *gate, const float *up, size_t n) {
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n;
         i += (size_t)gridDim.x * blockDim.x) {
        const float g = gate[i], s = sigmoidf(g), dy = dout[i];
        dup[i] = dy * g * s;
        dgate[i] = dy * up[i] * s * (1.0f + g * (1.0f - s));
    }
}

// a thread per (row, head, pair i < D/2)
__global__ void rope_kernel(float *x, size_t rows, size_t T, size_t heads, size_t D, float theta,
                            double sign) {
    const size_t half = D / 2, n = rows * heads * half;
    for (size_t e = (size_t)blockIdx.x * blockDim.x + threadIdx.x; e < n;
         e += (size_t)gridDim.x * blockDim.x) {
        const size_t i = e % half, h = (e / half) % heads, row = e / (half * heads);
        const double angle = (double)(row % T) * pow((double)theta, -2.0 * (double)i / (double)D);
        const float c = (float)cos(angle), sn = (float)(sign * sin(angle));
        float *p = x + row * heads * D + h * D;
        const float a = p[i], b = p[i + half];
        p[i] = a * c - b * sn;
        p[i + half] = b * c + a * sn;
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

// Block (row t of pair b * heads + h): scores into p[T] (shared), softmax, out row; probs row
// and lse as asked (either may be NULL).
__global__ void attention_forward_kernel(float *out, float *probs, float *lse, const float *q,
                                         const float *k, const float *v, Shape s) {
    __shared__ float p[KERNELS_MAX_TOKENS];
    __shared__ float red[32];
    const size_t t = blockIdx.x % s.T, pair = blockIdx.x / s.T;
    const size_t b = pair / s.heads, h = pair % s.heads, g = h / (s.heads / s.kv_heads);
    const float scale = rsqrtf((float)s.D);
    const float *qt = q + (b * s.T + t) * s.qs + h * s.D;
    const size_t keys = s.causal ? t + 1 : s.T;
    float mx = -INFINITY;
    for (size_t j = threadIdx.x; j < keys; j += blockDim.x) {
        const float *kj = k + (b * s.T + j) * s.kvs + g * s.D;
        float acc = 0.0f;
        for (size_t d = 0; d < s.D; d++) acc += qt[d] * kj[d];
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
        if (probs) probs[pair * s.T * s.T + t * s.T + j] = p[j];
    }
    if (lse && threadIdx.x == 0) lse[pair * s.T + t] = mx * scale + logf(sum);
    __syncthreads();
    const size_t C = s.heads * s.D;
    for (size_t d = threadIdx.x; d < s.D; d += blockDim.x) {
        float acc = 0.0f;
        for (size_t j = 0; j < keys; j++) acc += p[j] * v[(b * s.T + j) * s.kvs + g * s.D + d];
        out[(b * s.T + t) * C + h * s.D + d] = acc;
    }
}

// zeroes the K,V heads' columns of every row (dk and dv are added into)
__global__ void zero_rows_kernel(float *x, size_t rows, size_t cols, size_t stride) {
    for (size_t e = (size_t)blockIdx.x * blockDim.x + threadIdx.x; e < rows * cols;
         e += (size_t)gridDim.x * blockDim.x)
        x[(e / cols) * stride + e % cols] = 0.0f;
}

// Block (row t of a pair): P row (saved, or exp(score - lse)), dP = dout v^T, dS, dq's row,
// and this row's share of dk and dv.
__global__ void attention_backward_kernel(float *dq, float *dk, float *dv, const float *dout,
                                          const float *q, const float *k, const float *v,
                                          const float *probs, const float *out, const float *lse,
                                          Shape s) {
    __shared__ float p[KERNELS_MAX_TOKENS], ds[KERNELS_MAX_TOKENS];
    __shared__ float red[32];
    const size_t t = blockIdx.x % s.T, pair = blockIdx.x / s.T;
    const size_t b = pair / s.heads, h = pair % s.heads, g = h / (s.heads / s.kv_heads);
    const size_t C = s.heads * s.D;
    const float scale = rsqrtf((float)s.D);
    const float *qt = q + (b * s.T + t) * s.qs + h * s.D, *go = dout + (b * s.T + t) * C + h * s.D;
    const size_t keys = s.causal ? t + 1 : s.T;
    float rowsum = 0.0f;
    for (size_t j = threadIdx.x; j < keys; j += blockDim.x) {
        const float *kj = k + (b * s.T + j) * s.kvs + g * s.D;
        const float *vj = v + (b * s.T + j) * s.kvs + g * s.D;
        float pj;
        if (probs) {
            pj = probs[pair * s.T * s.T + t * s.T + j];
        } else {
            float acc = 0.0f;
            for (size_t d = 0; d < s.D; d++) acc += qt[d] * kj[d];
            pj = expf(acc * scale - lse[pair * s.T + t]);
        }
        float dp = 0.0f;
        for (size_t d = 0; d < s.D; d++) dp += go[d] * vj[d];
        p[j] = pj;
        ds[j] = dp;
        rowsum += pj * dp;
    }
    if (!probs) { // flash keeps out: the row's sum is dout . out
        rowsum = 0.0f;
        const float *ot = out + (b * s.T + t) * C + h * s.D;
        for (size_t d = threadIdx.x; d < s.D; d += blockDim.x) rowsum += go[d] * ot[d];
    }
    rowsum = block_sum(rowsum, red);
    for (size_t j = threadIdx.x; j < keys; j += blockDim.x) ds[j] = p[j] * (ds[j] - rowsum) * scale;
    __syncthreads();
    for (size_t d = threadIdx.x; d < s.D; d += blockDim.x) {
        float acc = 0.0f;
        for (size_t j = 0; j < keys; j++) {
            const size_t kv = (b * s.T + j) * s.kvs + g * s.D + d;
            acc += ds[j] * k[kv];
            atomicAdd(&dk[kv], ds[j] * qt[d]);
            atomicAdd(&dv[kv], p[j] * go[d]);
        }
        dq[(b * s.T + t) * s.qs + h * s.D + d] = acc;
    }
}

} // namespace

extern "C" void cuda_rmsnorm_forward(DType t, void *out, float *rstd, const void *in, const void *w,
                                     size_t M, size_t C, float eps) {
    if (cuda_fp32_only(t, "rmsnorm_forward") || M == 0 || C == 0) return;
    rmsnorm_forward_kernel<<<(unsigned)M, ROW_THREADS, 0, cuda_ctx()->stream>>>(
        (float *)out, rstd, (const float *)in, (const float *)w, C, eps);
    CUDA_LAUNCHED("rmsnorm_forward");
}

extern "C" void cuda_rmsnorm_backward(DType t, void *din_, float *dw, const void *dout_,
                                      const void *in_, const float *rstd, const void *w_, size_t M,
                                      size_t C) {
    if (cuda_fp32_only(t, "rmsnorm_backward") || M == 0 || C == 0) return;
    float *din = (float *)din_;
    const float *dout = (const float *)dout_, *in = (const float *)in_, *w = (const float *)w_;
    cudaStream_t stream = cuda_ctx()->stream;
    rmsnorm_din_kernel<<<(unsigned)M, ROW_THREADS, 0, stream>>>(din, dout, in, rstd, w, C);
    rmsnorm_dw_kernel<<<cuda_blocks(C, EW_THREADS), EW_THREADS, 0, stream>>>(dw, dout, in, rstd, M,
                                                                             C);
    CUDA_LAUNCHED("rmsnorm_backward");
}

extern "C" void cuda_swiglu_forward(DType t, void *out, const void *gate, const void *up,
                                    size_t n) {
    if (cuda_fp32_only(t, "swiglu_forward") || n == 0) return;
    swiglu_forward_kernel<<<cuda_blocks(n, EW_THREADS), EW_THREADS, 0, cuda_ctx()->stream>>>(
        (float *)out, (const float *)gate, (const float *)up, n);
    CUDA_LAUNCHED("swiglu_forward");
}

extern "C" void cuda_swiglu_backward(DType t, void *dgate, void *dup, const void *dout,
                                     const void *gate, const void *up, size_t n) {
    if (cuda_fp32_only(t, "swiglu_backward") || n == 0) return;
    swiglu_backward_kernel<<<cuda_blocks(n, EW_THREADS), EW_THREADS, 0, cuda_ctx()->stream>>>(
        (float *)dgate, (float *)dup, (const float *)dout, (const float *)gate, (const float *)up,
        n);
    CUDA_LAUNCHED("swiglu_backward");
}

static void rope(float *x, size_t B, size_t T, size_t heads, size_t D, float theta, double sign,
                 const char *where) {
    const size_t n = B * T * heads * (D / 2);
    if (n == 0) return;
    rope_kernel<<<cuda_blocks(n, EW_THREADS), EW_THREADS, 0, cuda_ctx()->stream>>>(
        x, B * T, T, heads, D, theta, sign);
    CUDA_LAUNCHED(where);
}

extern "C" void cuda_rope_forward(DType t, void *x, size_t B, size_t T, size_t heads, size_t D,
                                  float theta) {
    if (cuda_fp32_only(t, "rope_forward")) return;
    rope((float *)x, B, T, heads, D, theta, 1.0, "rope_forward");
}

extern "C" void cuda_rope_backward(DType t, void *dx, size_t B, size_t T, size_t heads, size_t D,
                                   float theta) {
    if (cuda_fp32_only(t, "rope_backward")) return;
    rope((float *)dx, B, T, heads, D, theta, -1.0, "rope_backward");
}

static int attn_empty(const AttnShape *s) {
    return s->B == 0 || s->T == 0 || s->heads == 0 || s->kv_heads == 0 || s->head_dim == 0;
}

static void attention_forward(float *out, float *probs, float *lse, const float *q, const float *k,
                              const float *v, const AttnShape *s, const char *where) {
    if (attn_empty(s)) return;
    const unsigned rows = (unsigned)(s->B * s->heads * s->T);
    attention_forward_kernel<<<rows, ROW_THREADS, 0, cuda_ctx()->stream>>>(out, probs, lse, q, k, v,
                                                                           shape_of(s));
    CUDA_LAUNCHED(where);
}

static void attention_backward(float *dq, float *dk, float *dv, const float *dout, const float *q,
                               const float *k, const float *v, const float *probs, const float *out,
                               const float *lse, const AttnShape *s, const char *where) {
    if (attn_empty(s)) return;
    cudaStream_t stream = cuda_ctx()->stream;
    const size_t rows = s->B * s->T, cols = s->kv_heads * s->head_dim;
    zero_rows_kernel<<<cuda_blocks(rows * cols, EW_THREADS), EW_THREADS, 0, stream>>>(
        dk, rows, cols, s->kv_stride);
    zero_rows_kernel<<<cuda_blocks(rows * cols, EW_THREADS), EW_THREADS, 0, stream>>>(
        dv, rows, cols, s->kv_stride);
    attention_backward_kernel<<<(unsigned)(s->B * s->heads * s->T), ROW_THREADS, 0, stream>>>(
        dq, dk, dv, dout, q, k, v, probs, out, lse, shape_of(s));
    CUDA_LAUNCHED(where);
}

extern "C" void cuda_gqa_attention_forward(DType t, void *out, void *probs, const void *q,
                                           const void *k, const void *v, const AttnShape *s) {
    if (cuda_fp32_only(t, "gqa_attention_forward")) return;
    attention_forward((float *)out, (float *)probs, NULL, (const float *)q, (const float *)k,
                      (const float *)v, s, "gqa_attention_forward");
}

extern "C" void cuda_gqa_attention_backward(DType t, void *dq, void *dk, void *dv, const void *dout,
                                            const void *q, const void *k, const void *v,
                                            const void *probs, const AttnShape *s) {
    if (cuda_fp32_only(t, "gqa_attention_backward")) return;
    attention_backward((float *)dq, (float *)dk, (float *)dv, (const float *)dout, (const float *)q,
                       (const float *)k, (const float *)v, (const float *)probs, NULL, NULL, s,
                       "gqa_attention_backward");
}

extern "C" void cuda_flash_attention_forward(DType t, void *out, float *lse, const void *q,
                                             const void *k, const void *v, const AttnShape *s) {
    if (cuda_fp32_only(t, "flash_attention_forward")) return;
    attention_forward((float *)out, NULL, lse, (const float *)q, (const float *)k, (const float *)v,
                      s, "flash_attention_forward");
}

extern "C" void cuda_flash_attention_backward(DType t, void *dq, void *dk, void *dv,
                                              const void *dout, const void *q, const void *k,
                                              const void *v, const void *out, const float *lse,
                                              float *work, const AttnShape *s) {
    (void)work; // each block recomputes its own row from lse
    if (cuda_fp32_only(t, "flash_attention_backward")) return;
    attention_backward((float *)dq, (float *)dk, (float *)dv, (const float *)dout, (const float *)q,
                       (const float *)k, (const float *)v, NULL, (const float *)out, lse, s,
                       "flash_attention_backward");
}
