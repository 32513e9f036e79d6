/* attention: multi-head self-attention's core on the GPU (semantics in kernels.h), plain and
 * causal, fused kernels for short sequences; resident kernels where a head fits shared memory,
 * tiled ones where it does not. */
#include <limits.h>
#include <math.h>

#include <type_traits>

#include "kernels/cuda/cuda_common.cuh"
#include "kernels/cuda/cuda_ops.h"

// Resident kernels (the ViT's shapes): one thread block per (sample, head) pair keeps that
// head's operands in shared memory, rows padded to an odd stride so threads reading one column
// of different rows hit different banks. Forward: q and k ([T, D] each) and the T x T scores;
// v then takes q's place. Backward: dout and v, P and dP; q and k then take their places.
// Shared memory is 4 (2 T Dp + T Tp) bytes forward and 4 (2 T Dp + 2 T Tp) backward
// (Dp = D | 1, Tp = T | 1): vit-tiny (T 17, D 64) 9.8 / 10.9 KiB, vit-workshop (T 17, D 480)
// 65 / 66 KiB, which needs the opt-in above 48 KiB (227 KiB on H100, 163 on A100, 99 on
// L4). Where a shape does not fit the device's opt-in limit (T = 256 never does: P alone is
// 256 KiB), tiled kernels take over, with at most 43 KiB of shared memory at any T <= 256
// and any D: forward one block per (pair, 16 query rows) streaming q, k and v through shared
// memory 16 columns at a time; backward one block per pair, walking the queries 16 rows at a
// time and streaming columns 8 at a time, adding each tile's share of dk and dv into dqkv
// (only that block writes those columns, each element always by the same thread).
//
// Everything on chip is fp32. Softmax subtracts the row's maximum and normalises like the CPU's
// (expf, then multiplication by 1 / sum). Every sum runs in a fixed order (warp reductions
// are xor butterflies, identical on every lane), so results are the same bits on every run.
//
// Dtypes: the kernels are templates over E, the compute dtype's element type (cuda_common.cuh;
// E, since T is the sequence length). qkv, dout and probs are widened as they are loaded into
// shared memory; out, probs and dqkv are rounded once as they are stored. out is computed from
// the fp32 probabilities, the stored probs are their rounding, and backward reads those (as the
// CPU's). The tiled backward adds each tile's share of dk and dv into what the earlier tiles
// left: in place in an fp32 dqkv, in fp32 accumulators in the context's cuBLASLt workspace for
// bf16 and fp16 (2 T D floats a pair, as many pairs a launch as it holds), rounded into dqkv
// once at the end.

namespace {

constexpr int ATTN_THREADS = 256;
constexpr int ATTN_WARPS = ATTN_THREADS / 32;

// Tiled kernels: query rows per tile and columns per streamed chunk.
constexpr int TILE_ROWS = 16;
constexpr int FWD_CHUNK = 16, FWD_CHUNK_LD = FWD_CHUNK + 1;
constexpr int BWD_CHUNK = 8, BWD_CHUNK_LD = BWD_CHUNK + 1;
// (query, key) pairs of a tile each thread keeps in registers
constexpr int TILE_PAIRS = TILE_ROWS * KERNELS_MAX_TOKENS / ATTN_THREADS;
// (key, column) pairs of a backward chunk each thread updates
constexpr int CHUNK_PAIRS = KERNELS_MAX_TOKENS * BWD_CHUNK / ATTN_THREADS;
static_assert(TILE_ROWS * FWD_CHUNK == ATTN_THREADS, "forward tile: one output per thread");
static_assert(TILE_ROWS * BWD_CHUNK <= ATTN_THREADS, "backward tile: one dq per thread");

// An odd row stride: column d of consecutive rows falls in different banks.
__host__ __device__ inline int odd_stride(int n) {
    return n | 1;
}

constexpr int TMAX_LD = KERNELS_MAX_TOKENS | 1;
constexpr size_t TILED_FWD_FLOATS =
    (size_t)TILE_ROWS * TMAX_LD + TILE_ROWS * FWD_CHUNK_LD + KERNELS_MAX_TOKENS * FWD_CHUNK_LD;
constexpr size_t TILED_BWD_FLOATS = 2 * (size_t)TILE_ROWS * TMAX_LD +
                                    KERNELS_MAX_TOKENS * BWD_CHUNK_LD +
                                    2 * TILE_ROWS * BWD_CHUNK_LD;
static_assert(TILED_FWD_FLOATS * sizeof(float) <= 48 * 1024, "tiled forward needs no opt-in");
static_assert(TILED_BWD_FLOATS * sizeof(float) <= 48 * 1024, "tiled backward needs no opt-in");

__device__ inline float warp_max(float v) {
    for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
    return v;
}

__device__ inline float warp_sum(float v) {
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
    return v;
}

// dst[t * ld + d] = src[t * stride + d] for t < rows, d < D (a head's columns of `rows` rows).
template <class E>
__device__ inline void load_rows(float *dst, int ld, const E *src, size_t stride, int rows, int D) {
    const int n = rows * D;
    for (int i = threadIdx.x; i < n; i += blockDim.x) {
        const int t = i / D, d = i - t * D;
        dst[t * ld + d] = load(src, (size_t)t * stride + d);
    }
}

// A chunk of columns [d0, d0 + width) of `rows` rows into dst[rows][ld], zero past D (so a
// chunk's sums may always run over `width` columns) and past `valid` rows.
template <class E>
__device__ inline void load_chunk(float *dst, int ld, int width, const E *src, size_t stride,
                                  int rows, int valid, int d0, int D) {
    const int n = rows * width;
    for (int i = threadIdx.x; i < n; i += blockDim.x) {
        const int t = i / width, dd = i - t * width, d = d0 + dd;
        dst[t * ld + dd] = (t < valid && d < D) ? load(src, (size_t)t * stride + d) : 0.0f;
    }
}

// In place over rows [0, rows) of S (row stride ld, T used columns): the softmax of
// scale * S, max subtracted; each row is also written to P[row * T ...] in global memory. One
// warp per row. Causal (row0 >= 0, the query index of row 0): row t normalises keys
// 0..row0 + t only and the rest of it is 0, which the products after it then add as nothing.
template <class E>
__device__ inline void softmax_rows(float *S, int ld, int rows, int T, float scale, E *P,
                                    int row0) {
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
    for (int t = warp; t < rows; t += ATTN_WARPS) {
        float *row = S + t * ld;
        const int keys = row0 < 0 ? T : min(T, row0 + t + 1);
        float mx = -INFINITY;
        for (int s = lane; s < keys; s += 32) mx = fmaxf(mx, row[s]);
        mx = warp_max(mx);
        float sum = 0.0f;
        for (int s = lane; s < keys; s += 32) {
            const float e = expf((row[s] - mx) * scale);
            row[s] = e;
            sum += e;
        }
        const float inv = 1.0f / warp_sum(sum);
        for (int s = lane; s < T; s += 32) {
            const float p = s < keys ? row[s] * inv : 0.0f;
            row[s] = p;
            store(P, (size_t)t * T + s, p);
        }
    }
}

// In place over rows [0, rows) of G = dP (row stride ld): dS = P * (dP - rowsum(dP * P)) * scale,
// P in shared memory with the same stride. One warp per row.
__device__ inline void softmax_grad_rows(float *G, const float *P, int ld, int rows, int T,
                                         float scale) {
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
    for (int t = warp; t < rows; t += ATTN_WARPS) {
        float *g = G + t * ld;
        const float *p = P + t * ld;
        float dot = 0.0f;
        for (int s = lane; s < T; s += 32) dot += g[s] * p[s];
        dot = warp_sum(dot);
        for (int s = lane; s < T; s += 32) g[s] = p[s] * (g[s] - dot) * scale;
    }
}

// The products below add their terms in index order, one thread per output, so every caller
// gets the bits its own loop would.

// sum over s < T of w[s] * x[s * ld]: a row of weights times a column (stride ld).
__device__ inline float weights_dot_column(const float *w, const float *x, int ld, int T) {
    float sum = 0.0f;
    for (int s = 0; s < T; s++) sum += w[s] * x[s * ld];
    return sum;
}

// S[t * ld + s] = A[t] . X[s] over D columns, for t, s < T (A X^T; rows of stride Dp).
__device__ inline void rows_dot_rows(float *S, int ld, const float *A, const float *X, int T, int D,
                                     int Dp) {
    for (int i = threadIdx.x; i < T * T; i += blockDim.x) {
        const int t = i / T, s = i - t * T;
        const float *a = A + t * Dp, *x = X + s * Dp;
        float acc = 0.0f;
        for (int d = 0; d < D; d++) acc += a[d] * x[d];
        S[t * ld + s] = acc;
    }
}

// out[t * stride + d] = sum over s < T of W[t * ld + s] * X[s * Dp + d], for t < T, d < D (W X).
template <class E>
__device__ inline void weights_times_rows(E *out, size_t stride, const float *W, int ld,
                                          const float *X, int T, int D, int Dp) {
    for (int i = threadIdx.x; i < T * D; i += blockDim.x) {
        const int t = i / D, d = i - t * D;
        store(out, (size_t)t * stride + d, weights_dot_column(W + t * ld, X + d, Dp, T));
    }
}

// out[s * stride + d] = sum over t < T of W[t * ld + s] * X[t * Dp + d], for s < T, d < D
// (W^T X).
template <class E>
__device__ inline void weights_t_times_rows(E *out, size_t stride, const float *W, int ld,
                                            const float *X, int T, int D, int Dp) {
    for (int i = threadIdx.x; i < T * D; i += blockDim.x) {
        const int s = i / D, d = i - s * D;
        float acc = 0.0f;
        for (int t = 0; t < T; t++) acc += W[t * ld + s] * X[t * Dp + d];
        store(out, (size_t)s * stride + d, acc);
    }
}

// The tiled kernels' A X^T: S[tt * ld + s] = A[tt] . X[s] over D columns for tt < nt query rows
// and s < T, A's rows from a (stride a_stride) and X's from x (stride x_stride), streamed
// through shared memory CHUNK columns at a time (ac: [TILE_ROWS][CHUNK + 1], xc: [T][CHUNK + 1]).
// Each thread keeps its TILE_PAIRS sums in registers across the chunks.
template <int CHUNK, class E>
__device__ inline void tile_rows_dot_rows(float *S, int ld, float *ac, float *xc, const E *a,
                                          size_t a_stride, const E *x, size_t x_stride, int nt,
                                          int T, int D) {
    constexpr int LD = CHUNK + 1;
    const int npairs = nt * T;
    float acc[TILE_PAIRS];
#pragma unroll
    for (int j = 0; j < TILE_PAIRS; j++) acc[j] = 0.0f;
    for (int d0 = 0; d0 < D; d0 += CHUNK) {
        __syncthreads();
        load_chunk(ac, LD, CHUNK, a, a_stride, TILE_ROWS, nt, d0, D);
        load_chunk(xc, LD, CHUNK, x, x_stride, T, T, d0, D);
        __syncthreads();
#pragma unroll
        for (int j = 0; j < TILE_PAIRS; j++) {
            const int i = threadIdx.x + j * ATTN_THREADS;
            if (i < npairs) {
                const int tt = i / T, s = i - tt * T;
                const float *ar = ac + tt * LD, *xr = xc + s * LD;
                float sum = acc[j];
#pragma unroll
                for (int dd = 0; dd < CHUNK; dd++) sum += ar[dd] * xr[dd];
                acc[j] = sum;
            }
        }
    }
#pragma unroll
    for (int j = 0; j < TILE_PAIRS; j++) {
        const int i = threadIdx.x + j * ATTN_THREADS;
        if (i < npairs) {
            const int tt = i / T, s = i - tt * T;
            S[tt * ld + s] = acc[j];
        }
    }
}

// ---- resident kernels: one block per (sample, head), grid B * heads ----

template <class E>
__global__ void __launch_bounds__(ATTN_THREADS)
    attention_forward_resident(E *out, E *probs, const E *qkv, int T, int C, int heads, float scale,
                               int causal) {
    extern __shared__ float smem[];
    const int D = C / heads, Dp = odd_stride(D), Tp = odd_stride(T);
    const int pair = blockIdx.x, b = pair / heads, h = pair % heads;
    const size_t C3 = 3 * (size_t)C;
    const E *q = qkv + (size_t)b * T * C3 + (size_t)h * D;
    float *qv = smem;        // q, then v: [T][Dp]
    float *ks = qv + T * Dp; // k: [T][Dp]
    float *S = ks + T * Dp;  // scores, then probabilities: [T][Tp]

    load_rows(qv, Dp, q, C3, T, D);
    load_rows(ks, Dp, q + C, C3, T, D);
    __syncthreads();
    rows_dot_rows(S, Tp, qv, ks, T, D, Dp);
    __syncthreads();
    load_rows(qv, Dp, q + 2 * (size_t)C, C3, T, D); // v, while the rows are normalised
    softmax_rows(S, Tp, T, T, scale, probs + (size_t)pair * T * T, causal ? 0 : -1);
    __syncthreads();
    weights_times_rows(out + (size_t)b * T * C + (size_t)h * D, (size_t)C, S, Tp, qv, T, D, Dp);
}

template <class E>
__global__ void __launch_bounds__(ATTN_THREADS)
    attention_backward_resident(E *dqkv, const E *dout, const E *qkv, const E *probs, int T, int C,
                                int heads, float scale) {
    extern __shared__ float smem[];
    const int D = C / heads, Dp = odd_stride(D), Tp = odd_stride(T);
    const int pair = blockIdx.x, b = pair / heads, h = pair % heads;
    const size_t C3 = 3 * (size_t)C;
    const E *q = qkv + (size_t)b * T * C3 + (size_t)h * D;
    const E *go = dout + (size_t)b * T * C + (size_t)h * D;
    const E *Pg = probs + (size_t)pair * T * T;
    E *dq = dqkv + (size_t)b * T * C3 + (size_t)h * D, *dk = dq + C, *dv = dq + 2 * (size_t)C;
    float *A = smem;        // dout, then q: [T][Dp]
    float *Bv = A + T * Dp; // v, then k: [T][Dp]
    float *P = Bv + T * Dp; // probabilities: [T][Tp]
    float *G = P + T * Tp;  // dP, then dS: [T][Tp]

    load_rows(A, Dp, go, C, T, D);
    load_rows(Bv, Dp, q + 2 * (size_t)C, C3, T, D);
    load_rows(P, Tp, Pg, T, T, T);
    __syncthreads();
    // dP = dout v^T, and dv = P^T dout (both read only dout, v and P)
    rows_dot_rows(G, Tp, A, Bv, T, D, Dp);
    weights_t_times_rows(dv, C3, P, Tp, A, T, D, Dp);
    __syncthreads();
    softmax_grad_rows(G, P, Tp, T, T, scale);
    load_rows(A, Dp, q, C3, T, D);
    load_rows(Bv, Dp, q + C, C3, T, D);
    __syncthreads();
    // dq = dS k, dk = dS^T q (dS has the 1/sqrt(D) in it)
    weights_times_rows(dq, C3, G, Tp, Bv, T, D, Dp);
    weights_t_times_rows(dk, C3, G, Tp, A, T, D, Dp);
}

// ---- tiled kernels: any T <= KERNELS_MAX_TOKENS and any D within 48 KiB ----

// One block per (pair, tile of TILE_ROWS query rows): grid B * heads * tiles.
template <class E>
__global__ void __launch_bounds__(ATTN_THREADS)
    attention_forward_tiled(E *out, E *probs, const E *qkv, int T, int C, int heads, float scale,
                            int causal) {
    extern __shared__ float smem[];
    const int D = C / heads, Tp = odd_stride(T), tiles = (T + TILE_ROWS - 1) / TILE_ROWS;
    const int pair = blockIdx.x / tiles, tile = blockIdx.x % tiles;
    const int b = pair / heads, h = pair % heads;
    const int t0 = tile * TILE_ROWS, nt = min(TILE_ROWS, T - t0);
    const size_t C3 = 3 * (size_t)C;
    const E *q = qkv + (size_t)b * T * C3 + (size_t)h * D;
    float *S = smem;                // the tile's scores, then probabilities: [TILE_ROWS][Tp]
    float *qc = S + TILE_ROWS * Tp; // q chunk: [TILE_ROWS][FWD_CHUNK_LD]
    float *xc = qc + TILE_ROWS * FWD_CHUNK_LD; // k or v chunk: [T][FWD_CHUNK_LD]

    // the tile's scores = q k^T
    tile_rows_dot_rows<FWD_CHUNK>(S, Tp, qc, xc, q + (size_t)t0 * C3, C3, q + C, C3, nt, T, D);
    __syncthreads();
    softmax_rows(S, Tp, nt, T, scale, probs + ((size_t)pair * T + t0) * T, causal ? t0 : -1);
    E *o = out + ((size_t)b * T + t0) * C + (size_t)h * D;
    const int tt = threadIdx.x / FWD_CHUNK, dd = threadIdx.x % FWD_CHUNK;
    for (int d0 = 0; d0 < D; d0 += FWD_CHUNK) {
        __syncthreads();
        load_chunk(xc, FWD_CHUNK_LD, FWD_CHUNK, q + 2 * (size_t)C, C3, T, T, d0, D);
        __syncthreads();
        if (tt < nt && d0 + dd < D)
            store(o, (size_t)tt * C + d0 + dd,
                  weights_dot_column(S + tt * Tp, xc + dd, FWD_CHUNK_LD, T));
    }
}

// One block per pair pair0 + blockIdx.x, walking the queries a tile at a time. dk and dv add up
// in place for fp32 (acc NULL); for bf16 and fp16 in acc's 2 T D floats of the block's pair
// (pair - pair0), then rounded into dqkv once.
template <class E>
__global__ void __launch_bounds__(ATTN_THREADS)
    attention_backward_tiled(E *dqkv, const E *dout, const E *qkv, const E *probs, int T, int C,
                             int heads, float scale, float *acc, int pair0) {
    extern __shared__ float smem[];
    const int D = C / heads, Tp = odd_stride(T);
    const int pair = pair0 + (int)blockIdx.x, b = pair / heads, h = pair % heads;
    const size_t C3 = 3 * (size_t)C;
    const E *q = qkv + (size_t)b * T * C3 + (size_t)h * D, *k = q + C, *v = q + 2 * (size_t)C;
    const E *go = dout + (size_t)b * T * C + (size_t)h * D;
    const E *Pg = probs + (size_t)pair * T * T;
    E *dq = dqkv + (size_t)b * T * C3 + (size_t)h * D, *dk = dq + C, *dv = dq + 2 * (size_t)C;
    constexpr bool in_place = std::is_same_v<E, float>;
    float *acc_k = in_place ? nullptr : acc + (size_t)blockIdx.x * 2 * T * D;
    float *acc_v = in_place ? nullptr : acc_k + (size_t)T * D;
    float *P = smem;                           // the tile's P rows: [TILE_ROWS][Tp]
    float *G = P + TILE_ROWS * Tp;             // the tile's dP, then dS: [TILE_ROWS][Tp]
    float *xc = G + TILE_ROWS * Tp;            // v or k chunk: [T][BWD_CHUNK_LD]
    float *ac = xc + T * BWD_CHUNK_LD;         // dout chunk of the tile: [TILE_ROWS][BWD_CHUNK_LD]
    float *bc = ac + TILE_ROWS * BWD_CHUNK_LD; // q chunk of the tile: [TILE_ROWS][BWD_CHUNK_LD]

    for (int t0 = 0; t0 < T; t0 += TILE_ROWS) {
        const int nt = min(TILE_ROWS, T - t0);
        __syncthreads(); // the previous tile is done with P and G
        load_rows(P, Tp, Pg + (size_t)t0 * T, T, nt, T);
        // dP rows of the tile = dout v^T
        tile_rows_dot_rows<BWD_CHUNK>(G, Tp, ac, xc, go + (size_t)t0 * C, (size_t)C, v, C3, nt, T,
                                      D);
        __syncthreads();
        softmax_grad_rows(G, P, Tp, nt, T, scale);
        // dq rows of the tile = dS k; dk += dS^T q and dv += P^T dout over the tile's rows
        for (int d0 = 0; d0 < D; d0 += BWD_CHUNK) {
            __syncthreads();
            load_chunk(xc, BWD_CHUNK_LD, BWD_CHUNK, k, C3, T, T, d0, D);
            load_chunk(bc, BWD_CHUNK_LD, BWD_CHUNK, q + (size_t)t0 * C3, C3, TILE_ROWS, nt, d0, D);
            load_chunk(ac, BWD_CHUNK_LD, BWD_CHUNK, go + (size_t)t0 * C, C, TILE_ROWS, nt, d0, D);
            __syncthreads();
            if (threadIdx.x < TILE_ROWS * BWD_CHUNK) {
                const int tt = threadIdx.x / BWD_CHUNK, dd = threadIdx.x % BWD_CHUNK;
                if (tt < nt && d0 + dd < D)
                    store(dq, (size_t)(t0 + tt) * C3 + d0 + dd,
                          weights_dot_column(G + tt * Tp, xc + dd, BWD_CHUNK_LD, T));
            }
#pragma unroll
            for (int j = 0; j < CHUNK_PAIRS; j++) {
                const int i = threadIdx.x + j * ATTN_THREADS;
                const int s = i / BWD_CHUNK, dd = i % BWD_CHUNK;
                if (s < T && d0 + dd < D) {
                    float sk = 0.0f, sv = 0.0f;
                    for (int tt = 0; tt < nt; tt++) {
                        sk += G[tt * Tp + s] * bc[tt * BWD_CHUNK_LD + dd];
                        sv += P[tt * Tp + s] * ac[tt * BWD_CHUNK_LD + dd];
                    }
                    // this thread owns (s, d0 + dd) in every tile: it reads back its own writes
                    float *pk, *pv;
                    if constexpr (in_place) {
                        pk = dk + (size_t)s * C3 + d0 + dd;
                        pv = dv + (size_t)s * C3 + d0 + dd;
                    } else {
                        pk = acc_k + (size_t)s * D + d0 + dd;
                        pv = acc_v + (size_t)s * D + d0 + dd;
                    }
                    if (t0 == 0) {
                        *pk = sk;
                        *pv = sv;
                    } else {
                        *pk += sk;
                        *pv += sv;
                    }
                }
            }
        }
    }
    if constexpr (!in_place) { // every (s, d) was written at t0 == 0, by some thread of the block
        __syncthreads();
        for (int i = threadIdx.x; i < T * D; i += blockDim.x) {
            const int s = i / D, d = i - s * D;
            store(dk, (size_t)s * C3 + d, acc_k[i]);
            store(dv, (size_t)s * C3 + d, acc_v[i]);
        }
    }
}

// Bytes of dynamic shared memory one block may have on the current device (the opt-in
// limit), with the resident kernels of E allowed that much; per thread and E, refreshed when the
// thread's device changes. 0 on error (recorded).
template <class E> size_t resident_smem_limit(const char *where) {
    thread_local int device = -1;
    thread_local size_t limit = 0;
    int dev = 0;
    if (cuda_note(cudaGetDevice(&dev), where)) return 0;
    if (dev == device) return limit;
    int optin = 0;
    if (cuda_note(cudaDeviceGetAttribute(&optin, cudaDevAttrMaxSharedMemoryPerBlockOptin, dev),
                  where))
        return 0;
    if (cuda_note(cudaFuncSetAttribute(attention_forward_resident<E>,
                                       cudaFuncAttributeMaxDynamicSharedMemorySize, optin),
                  where) ||
        cuda_note(cudaFuncSetAttribute(attention_backward_resident<E>,
                                       cudaFuncAttributeMaxDynamicSharedMemorySize, optin),
                  where))
        return 0;
    device = dev;
    limit = (size_t)optin;
    return limit;
}

// The shapes the kernels take: T <= KERNELS_MAX_TOKENS and indices within int. Records an
// invalid-value error otherwise.
int attention_shape_ok(size_t B, size_t T, size_t C, size_t heads, const char *where) {
    const size_t D = C / heads;
    if (T > KERNELS_MAX_TOKENS || C > (size_t)INT_MAX / 3 || heads > (size_t)INT_MAX ||
        T * D > (size_t)INT_MAX || B * heads > (size_t)INT_MAX / KERNELS_MAX_TOKENS) {
        cuda_note(cudaErrorInvalidValue, where);
        return 0;
    }
    return 1;
}

// The forward both entries share; causal: each query attends to the keys up to its own.
template <class E>
void attention_forward(E *out, E *probs, const E *qkv, size_t B, size_t T, size_t C, size_t heads,
                       int causal, const char *where) {
    if (B == 0 || T == 0 || C == 0 || heads == 0) return;
    if (!attention_shape_ok(B, T, C, heads, where)) return;
    const size_t D = C / heads;
    const float scale = (float)(1.0 / sqrt((double)D));
    const size_t Dp = (size_t)odd_stride((int)D), Tp = (size_t)odd_stride((int)T);
    const size_t resident = (2 * T * Dp + T * Tp) * sizeof(float);
    const size_t limit = resident_smem_limit<E>(where);
    if (limit == 0) return;
    cudaStream_t stream = cuda_ctx()->stream;
    if (resident <= limit) {
        attention_forward_resident<<<(unsigned)(B * heads), ATTN_THREADS, resident, stream>>>(
            out, probs, qkv, (int)T, (int)C, (int)heads, scale, causal);
    } else {
        const size_t tiles = (T + TILE_ROWS - 1) / TILE_ROWS;
        const size_t bytes =
            (TILE_ROWS * Tp + TILE_ROWS * FWD_CHUNK_LD + T * FWD_CHUNK_LD) * sizeof(float);
        attention_forward_tiled<<<(unsigned)(B * heads * tiles), ATTN_THREADS, bytes, stream>>>(
            out, probs, qkv, (int)T, (int)C, (int)heads, scale, causal);
    }
    CUDA_LAUNCHED(where);
}

// The backward of both: resident where a pair fits, else tiled (bf16 and fp16 in launches of as
// many pairs as the workspace holds accumulators for).
template <class E>
void attention_backward(E *dqkv, const E *dout, const E *qkv, const E *probs, size_t B, size_t T,
                        size_t C, size_t heads, const char *where) {
    if (!attention_shape_ok(B, T, C, heads, where)) return;
    const size_t D = C / heads;
    const float scale = (float)(1.0 / sqrt((double)D));
    const size_t Dp = (size_t)odd_stride((int)D), Tp = (size_t)odd_stride((int)T);
    const size_t resident = (2 * T * Dp + 2 * T * Tp) * sizeof(float);
    const size_t limit = resident_smem_limit<E>(where);
    if (limit == 0) return;
    CudaContext *ctx = cuda_ctx();
    cudaStream_t stream = ctx->stream;
    if (resident <= limit) {
        attention_backward_resident<<<(unsigned)(B * heads), ATTN_THREADS, resident, stream>>>(
            dqkv, dout, qkv, probs, (int)T, (int)C, (int)heads, scale);
        CUDA_LAUNCHED(where);
        return;
    }
    const size_t bytes =
        (2 * TILE_ROWS * Tp + T * BWD_CHUNK_LD + 2 * TILE_ROWS * BWD_CHUNK_LD) * sizeof(float);
    if constexpr (std::is_same_v<E, float>) {
        attention_backward_tiled<<<(unsigned)(B * heads), ATTN_THREADS, bytes, stream>>>(
            dqkv, dout, qkv, probs, (int)T, (int)C, (int)heads, scale, nullptr, 0);
        CUDA_LAUNCHED(where);
    } else {
        const size_t pairs = B * heads, per_launch = CUDA_WORKSPACE_FLOATS / (2 * T * D);
        if (per_launch == 0) { // D beyond 32 MiB / (8 T): no such head
            cuda_note(cudaErrorInvalidValue, where);
            return;
        }
        for (size_t p0 = 0; p0 < pairs; p0 += per_launch) {
            const size_t np = pairs - p0 < per_launch ? pairs - p0 : per_launch;
            attention_backward_tiled<<<(unsigned)np, ATTN_THREADS, bytes, stream>>>(
                dqkv, dout, qkv, probs, (int)T, (int)C, (int)heads, scale, (float *)ctx->workspace,
                (int)p0);
            if (CUDA_LAUNCHED(where)) return;
        }
    }
}

} // namespace

extern "C" void cuda_attention_forward(DType t, void *out, void *probs, const void *qkv, size_t B,
                                       size_t T, size_t C, size_t heads) {
    cuda_dispatch(t, "attention_forward", [&](auto e) {
        using E = typename decltype(e)::type;
        attention_forward((E *)out, (E *)probs, (const E *)qkv, B, T, C, heads, 0,
                          "attention_forward");
    });
}

extern "C" void cuda_causal_attention_forward(DType t, void *out, void *probs, const void *qkv,
                                              size_t B, size_t T, size_t C, size_t heads) {
    cuda_dispatch(t, "causal_attention_forward", [&](auto e) {
        using E = typename decltype(e)::type;
        attention_forward((E *)out, (E *)probs, (const E *)qkv, B, T, C, heads, 1,
                          "causal_attention_forward");
    });
}

extern "C" void cuda_attention_backward(DType t, void *dqkv, const void *dout, const void *qkv,
                                        const void *probs, size_t B, size_t T, size_t C,
                                        size_t heads) {
    if (B == 0 || T == 0 || C == 0 || heads == 0) return;
    cuda_dispatch(t, "attention_backward", [&](auto e) {
        using E = typename decltype(e)::type;
        attention_backward((E *)dqkv, (const E *)dout, (const E *)qkv, (const E *)probs, B, T, C,
                           heads, "attention_backward");
    });
}
