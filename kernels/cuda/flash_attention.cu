// flash_attention: flash attention on the GPU (semantics in ../kernels.h), tiled so that no
// kernel holds more than a 64 x 64 tile of scores: any sequence length T, head_dim D up to 256.
// FlashAttention-2's forward, and a backward without atomics (the same bits run to run).
#include <limits.h>
#include <math.h>

#include <type_traits>

#include "kernels/cuda/cuda_common.cuh"
#include "kernels/cuda/cuda_ops.h"

// Layout. Every kernel is a block of 256 threads over a tile of 64 rows (query rows, or in dk/dv
// keys), 4 threads a row: thread (r, c) = (threadIdx.x / 4, threadIdx.x % 4), so a row's 4
// threads are neighbouring lanes of one warp and reduce a row with two xor shuffles. Against a
// tile of 64 columns (keys, or in dk/dv queries) thread (r, c) owns columns c, c + 4, ..., c + 60
// (16 scores in registers), and of a head's D columns d = 32 k + c + 4 u (u < 8): D / 4 fp32
// accumulators of its row (out, dq, or dk and dv) in registers, sized by DMAX, the head_dim
// class the kernel is instantiated for (64, 128 or 256).
//
// Operands reach shared memory 32 head columns at a time (chunks of [64][33] floats, widened from
// E as they are staged, rows past T and columns past D staged as 0, so they add nothing and a
// 0 weight never meets a NaN): a score tile accumulates over the chunks, then a [64][65] tile of
// weights (P or dS) times the next operand's chunks adds into the accumulators. Odd strides put
// a column's 8 rows of a warp in 8 banks. Shared memory is the same at any D: 2 chunks and one
// weight tile, (2 * 64 * 33 + 64 * 65) * 4 = 33,536 bytes (dk/dv 512 more for its rows' lse and
// D_i), within the 48 KiB every device gives without an opt-in, so the kernels use static
// shared memory. Staging q (and k, dout) again for each tile rather than keeping it resident is
// the price of that at D 256.
//
// Forward: one block per (sample b, query head h, tile of 64 query rows); the K,V tiles of the
// head's group from key 0, and when causal only up to the tile holding the diagonal (tiles are
// as many rows as keys, so that is the query tile's own index; its keys past each row are
// masked). Online softmax in fp32 over the raw scores: the running maximum m and sum l, each key
// weighing exp((score - m) scale), earlier weights and out rescaled by exp((m_old - m) scale)
// when m grows; out = acc / l rounded to E once, lse = m scale + log l, the CPU's definitions
// (kernels/cpu/attention_cpu.c: softmax_row). Causal query tiles run longest first.
//
// Backward (samples as many at a time as the context's cuBLASLt workspace holds their D_i):
// 1. D_i = dout_i . out_i in fp32, a warp a row, into the workspace;
// 2. dq: one block per (b, h, query tile), over the same key tiles as forward: P = exp(score
//    scale - lse) recomputed, dP = dout v^T, dS = P (dP - D_i) scale, dq += dS k in registers;
// 3. dk, dv: one block per (b, K,V head g, tile of 64 keys), over the group's query heads in
//    order and, per head, the query tiles (causal: from the key tile's own, the first that
//    sees its keys): P^T and dS^T the same way, dv += P^T dout, dk += dS^T q in registers.
// Each of dq, dk and dv is written once, by one thread, rounded to E once: no atomics, no fp32
// accumulators in memory, and every sum in a fixed order.
//
// CUDA cores in fp32, for correctness first. The next step is tensor cores (WMMA or mma.sync on
// bf16/fp16 operands, fp32 accumulators) for the four tile products, with q resident in shared
// memory where the device's opt-in allows it.

namespace {

constexpr int FA_THREADS = 256;
constexpr int TILE = 64;                     // rows of a tile, and columns of a score tile
constexpr int ROW_THREADS = 4;               // threads of a row
constexpr int ROW_COLS = TILE / ROW_THREADS; // score columns a thread owns
constexpr int CHUNK = 32;                    // head columns staged at a time
constexpr int CHUNK_LD = CHUNK + 1;
constexpr int CHUNK_COLS = CHUNK / ROW_THREADS; // accumulator columns of a chunk a thread owns
constexpr int TILE_LD = TILE + 1;
constexpr int FLASH_MAX_HEAD_DIM = 256;
static_assert(TILE * ROW_THREADS == FA_THREADS, "a row is ROW_THREADS threads");
static_assert(TILE * (2 * CHUNK_LD + TILE_LD) * sizeof(float) + 2 * TILE * sizeof(float) <=
                  48 * 1024,
              "static shared memory: no opt-in");

struct FlashShape {
    size_t B, heads, kv_heads, qs, kvs;
    int T, D, causal;
};

// The two other threads' values of a row joined in: every lane of the row gets the same bits
// (each add and max is commutative, and the butterfly pairs the same operands on every lane).
__device__ __forceinline__ float row_max(float v) {
    v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, 1));
    return fmaxf(v, __shfl_xor_sync(0xffffffffu, v, 2));
}

__device__ __forceinline__ float row_sum(float v) {
    v += __shfl_xor_sync(0xffffffffu, v, 1);
    return v + __shfl_xor_sync(0xffffffffu, v, 2);
}

// dst[r][c] = src[r * stride + d0 + c] widened, for r < TILE, c < CHUNK; 0 where r >= rows or
// d0 + c >= D. Consecutive threads read consecutive columns of a row.
template <class E>
__device__ __forceinline__ void stage_chunk(float *dst, const E *src, size_t stride, int rows,
                                            int d0, int D) {
    for (int i = threadIdx.x; i < TILE * CHUNK; i += FA_THREADS) {
        const int r = i / CHUNK, c = i % CHUNK;
        dst[r * CHUNK_LD + c] =
            r < rows && d0 + c < D ? load(src, (size_t)r * stride + (size_t)(d0 + c)) : 0.0f;
    }
}

// acc[i] += chunk a's row r . chunk b's row c + 4 i: a chunk's share of the thread's 16 scores.
__device__ __forceinline__ void chunk_dots(float (&acc)[ROW_COLS], const float *a, const float *b,
                                           int r, int c) {
#pragma unroll 4
    for (int d = 0; d < CHUNK; d++) {
        const float x = a[r * CHUNK_LD + d];
#pragma unroll
        for (int i = 0; i < ROW_COLS; i++) acc[i] += x * b[(c + ROW_THREADS * i) * CHUNK_LD + d];
    }
}

// acc[u] += sum over j < TILE of w[r][j] x[j][c + 4 u]: row r of a weight tile times a chunk, into
// the thread's CHUNK_COLS accumulators of that chunk (acc points at them).
__device__ __forceinline__ void chunk_combine(float *acc, const float *w, const float *x, int r,
                                              int c) {
#pragma unroll 4
    for (int j = 0; j < TILE; j++) {
        const float p = w[r * TILE_LD + j];
#pragma unroll
        for (int u = 0; u < CHUNK_COLS; u++) acc[u] += p * x[j * CHUNK_LD + c + ROW_THREADS * u];
    }
}

// scores[i] = the tile's score of the thread's row r and column c + 4 i: a's rows (64 of them
// from a0, `a_rows` real) against b's (from b0, `b_rows` real), over the D columns.
template <class E, int DMAX>
__device__ __forceinline__ void tile_scores(float (&scores)[ROW_COLS], float *as, float *bs,
                                            const E *a0, size_t a_stride, int a_rows, const E *b0,
                                            size_t b_stride, int b_rows, int D, int r, int c) {
#pragma unroll
    for (int i = 0; i < ROW_COLS; i++) scores[i] = 0.0f;
#pragma unroll
    for (int k = 0; k < DMAX / CHUNK; k++) {
        if (k * CHUNK < D) {
            __syncthreads(); // the chunks' last readers are done
            stage_chunk(as, a0, a_stride, a_rows, k * CHUNK, D);
            stage_chunk(bs, b0, b_stride, b_rows, k * CHUNK, D);
            __syncthreads();
            chunk_dots(scores, as, bs, r, c);
        }
    }
}

// acc (DMAX / 4 accumulators: chunk k's at acc[k * CHUNK_COLS]) += row r of the weight tile w
// (written by the block before this call) times x's rows (from x0, `rows` real).
template <class E, int DMAX>
__device__ __forceinline__ void tile_combine(float (&acc)[DMAX / ROW_THREADS], const float *w,
                                             float *xs, const E *x0, size_t stride, int rows, int D,
                                             int r, int c) {
#pragma unroll
    for (int k = 0; k < DMAX / CHUNK; k++) {
        if (k * CHUNK < D) {
            __syncthreads(); // w is written; xs's last readers are done
            stage_chunk(xs, x0, stride, rows, k * CHUNK, D);
            __syncthreads();
            chunk_combine(acc + k * CHUNK_COLS, w, xs, r, c);
        }
    }
}

// The thread's accumulators of row `row` (times `mul`) into dst's D columns, each rounded once.
template <class E, int DMAX>
__device__ __forceinline__ void store_row(E *row, const float (&acc)[DMAX / ROW_THREADS], float mul,
                                          int D, int c) {
#pragma unroll
    for (int k = 0; k < DMAX / CHUNK; k++)
#pragma unroll
        for (int u = 0; u < CHUNK_COLS; u++) {
            const int d = k * CHUNK + c + ROW_THREADS * u;
            if (d < D) store(row, (size_t)d, acc[k * CHUNK_COLS + u] * mul);
        }
}

// Whether query t sees key j (both within T).
__device__ __forceinline__ bool sees(int t, int j, int T, int causal) {
    return t < T && j < T && (!causal || j <= t);
}

// Grid: B * heads * query tiles, a pair's tiles together (they share its K,V head in L2), each
// pair's last tile first (causal: the longest).
template <class E, int DMAX>
__global__ void __launch_bounds__(FA_THREADS)
    flash_forward_kernel(E *out, float *lse, const E *q, const E *k, const E *v, FlashShape s,
                         float scale) {
    __shared__ float qs[TILE * CHUNK_LD], xs[TILE * CHUNK_LD], ps[TILE * TILE_LD];
    const int T = s.T, D = s.D, tiles = (T + TILE - 1) / TILE;
    const size_t pair = blockIdx.x / tiles;
    const int tile = tiles - 1 - (int)(blockIdx.x % tiles);
    const size_t b = pair / s.heads, h = pair % s.heads, g = h / (s.heads / s.kv_heads);
    const int q0 = tile * TILE, rows = min(TILE, T - q0);
    const int r = threadIdx.x / ROW_THREADS, c = threadIdx.x % ROW_THREADS, t = q0 + r;
    const E *qt = q + ((size_t)b * T + q0) * s.qs + h * D;
    const E *kb = k + (size_t)b * T * s.kvs + g * D, *vb = v + (size_t)b * T * s.kvs + g * D;
    // causal: the tiles up to the diagonal's (key tile index = query tile index)
    const int key_end = s.causal ? q0 + rows : T;
    float acc[DMAX / ROW_THREADS];
#pragma unroll
    for (int i = 0; i < DMAX / ROW_THREADS; i++) acc[i] = 0.0f;
    float m = -INFINITY, l = 0.0f;
    for (int k0 = 0; k0 < key_end; k0 += TILE) {
        const int keys = min(TILE, T - k0);
        float p[ROW_COLS];
        tile_scores<E, DMAX>(p, qs, xs, qt, s.qs, rows, kb + (size_t)k0 * s.kvs, s.kvs, keys, D, r,
                             c);
        float mx = -INFINITY;
#pragma unroll
        for (int i = 0; i < ROW_COLS; i++) {
            if (!sees(t, k0 + c + ROW_THREADS * i, T, s.causal)) p[i] = -INFINITY;
            mx = fmaxf(mx, p[i]);
        }
        const float m_new = fmaxf(m, row_max(mx));
        // a row within T sees a key of every tile it visits (key k0 <= its own index), so its
        // m_new is finite; a row past T sees none (weights 0, l 0, never stored), and the guard
        // keeps exp(-inf - -inf), a NaN, out of it
        const float base = m_new == -INFINITY ? 0.0f : m_new;
        const float alpha = expf((m - base) * scale); // 0 on the first tile (m = -inf)
        float sum = 0.0f;
#pragma unroll
        for (int i = 0; i < ROW_COLS; i++) {
            p[i] = expf((p[i] - base) * scale);
            sum += p[i];
        }
        l = l * alpha + row_sum(sum);
        m = m_new;
#pragma unroll
        for (int i = 0; i < DMAX / ROW_THREADS; i++) acc[i] *= alpha;
            // ps's last readers (the previous tile's combine) passed tile_scores's barriers
#pragma unroll
        for (int i = 0; i < ROW_COLS; i++) ps[r * TILE_LD + c + ROW_THREADS * i] = p[i];
        tile_combine<E, DMAX>(acc, ps, xs, vb + (size_t)k0 * s.kvs, s.kvs, keys, D, r, c);
    }
    if (t < T) {
        const size_t C = s.heads * (size_t)D;
        store_row<E, DMAX>(out + ((size_t)b * T + t) * C + h * D, acc, 1.0f / l, D, c);
        if (c == 0) lse[pair * T + t] = m * scale + logf(l);
    }
}

// Di[(pair - pair0) T + t] = dout . out of row t of pair `pair` (pair0 = b0 * heads): a warp a
// row, `rows` rows from pair0's first.
template <class E>
__global__ void flash_row_dots_kernel(float *Di, const E *dout, const E *out, size_t rows,
                                      size_t pair0, FlashShape s) {
    const int lane = threadIdx.x % 32;
    const size_t warps = (size_t)gridDim.x * (blockDim.x / 32);
    const size_t C = s.heads * (size_t)s.D;
    for (size_t e = (size_t)blockIdx.x * (blockDim.x / 32) + threadIdx.x / 32; e < rows;
         e += warps) {
        const size_t pair = pair0 + e / s.T, t = e % s.T;
        const size_t b = pair / s.heads, h = pair % s.heads;
        const size_t at = (b * s.T + t) * C + h * s.D;
        float dot = 0.0f;
        for (int d = lane; d < s.D; d += 32) dot += load(dout, at + d) * load(out, at + d);
        for (int o = 16; o > 0; o >>= 1) dot += __shfl_xor_sync(0xffffffffu, dot, o);
        if (lane == 0) Di[e] = dot;
    }
}

// dq. Grid: nb * heads * query tiles of samples b0.. (Di holds their rows from pair b0 * heads).
template <class E, int DMAX>
__global__ void __launch_bounds__(FA_THREADS)
    flash_dq_kernel(E *dq, const E *dout, const E *q, const E *k, const E *v, const float *lse,
                    const float *Di, size_t b0, FlashShape s, float scale) {
    __shared__ float as[TILE * CHUNK_LD], xs[TILE * CHUNK_LD], ws[TILE * TILE_LD];
    const int T = s.T, D = s.D, tiles = (T + TILE - 1) / TILE;
    const size_t local = blockIdx.x / tiles, pair = b0 * s.heads + local;
    const int tile = tiles - 1 - (int)(blockIdx.x % tiles);
    const size_t b = pair / s.heads, h = pair % s.heads, g = h / (s.heads / s.kv_heads);
    const size_t C = s.heads * (size_t)D;
    const int q0 = tile * TILE, rows = min(TILE, T - q0);
    const int r = threadIdx.x / ROW_THREADS, c = threadIdx.x % ROW_THREADS, t = q0 + r;
    const E *qt = q + ((size_t)b * T + q0) * s.qs + h * D;
    const E *got = dout + ((size_t)b * T + q0) * C + h * D;
    const E *kb = k + (size_t)b * T * s.kvs + g * D, *vb = v + (size_t)b * T * s.kvs + g * D;
    const float row_lse = t < T ? lse[pair * T + t] : 0.0f;
    const float row_d = t < T ? Di[local * T + t] : 0.0f;
    const int key_end = s.causal ? q0 + rows : T;
    float acc[DMAX / ROW_THREADS];
#pragma unroll
    for (int i = 0; i < DMAX / ROW_THREADS; i++) acc[i] = 0.0f;
    for (int k0 = 0; k0 < key_end; k0 += TILE) {
        const int keys = min(TILE, T - k0);
        float sc[ROW_COLS], dp[ROW_COLS];
        tile_scores<E, DMAX>(sc, as, xs, qt, s.qs, rows, kb + (size_t)k0 * s.kvs, s.kvs, keys, D, r,
                             c);
        tile_scores<E, DMAX>(dp, as, xs, got, C, rows, vb + (size_t)k0 * s.kvs, s.kvs, keys, D, r,
                             c);
#pragma unroll
        for (int i = 0; i < ROW_COLS; i++) {
            const float p = sees(t, k0 + c + ROW_THREADS * i, T, s.causal)
                                ? expf(sc[i] * scale - row_lse)
                                : 0.0f;
            // ws's last readers (the previous tile's combine) passed tile_scores's barriers
            ws[r * TILE_LD + c + ROW_THREADS * i] = p * (dp[i] - row_d) * scale;
        }
        tile_combine<E, DMAX>(acc, ws, xs, kb + (size_t)k0 * s.kvs, s.kvs, keys, D, r, c);
    }
    if (t < T) store_row<E, DMAX>(dq + ((size_t)b * T + t) * s.qs + h * D, acc, 1.0f, D, c);
}

// dk and dv. Grid: nb * kv_heads * key tiles of samples b0.., a K,V head's tiles together in
// order (causal: the first sees the most queries).
template <class E, int DMAX>
__global__ void __launch_bounds__(FA_THREADS)
    flash_dkdv_kernel(E *dk, E *dv, const E *dout, const E *q, const E *k, const E *v,
                      const float *lse, const float *Di, size_t b0, FlashShape s, float scale) {
    __shared__ float as[TILE * CHUNK_LD], xs[TILE * CHUNK_LD], ws[TILE * TILE_LD];
    __shared__ float q_lse[TILE], q_d[TILE]; // the query tile's rows' lse and D_i
    const int T = s.T, D = s.D, tiles = (T + TILE - 1) / TILE;
    const size_t item = blockIdx.x / tiles, b = b0 + item / s.kv_heads, g = item % s.kv_heads;
    const size_t group = s.heads / s.kv_heads, C = s.heads * (size_t)D;
    const int k0 = (int)(blockIdx.x % tiles) * TILE, keys = min(TILE, T - k0);
    const int r = threadIdx.x / ROW_THREADS, c = threadIdx.x % ROW_THREADS, j = k0 + r;
    const E *kt = k + ((size_t)b * T + k0) * s.kvs + g * D;
    const E *vt = v + ((size_t)b * T + k0) * s.kvs + g * D;
    // causal: query tiles from the key tile's own (tiles are as many rows as keys)
    const int q_first = s.causal ? k0 : 0;
    float dk_acc[DMAX / ROW_THREADS], dv_acc[DMAX / ROW_THREADS];
#pragma unroll
    for (int i = 0; i < DMAX / ROW_THREADS; i++) dk_acc[i] = dv_acc[i] = 0.0f;
    for (size_t hh = 0; hh < group; hh++) {
        const size_t h = g * group + hh, pair = b * s.heads + h, local = pair - b0 * s.heads;
        for (int q0 = q_first; q0 < T; q0 += TILE) {
            const int rows = min(TILE, T - q0);
            const E *qt = q + ((size_t)b * T + q0) * s.qs + h * D;
            const E *got = dout + ((size_t)b * T + q0) * C + h * D;
            __syncthreads(); // the previous tile's readers of q_lse and q_d are done
            if (threadIdx.x < TILE) {
                const int i = threadIdx.x;
                q_lse[i] = i < rows ? lse[pair * T + q0 + i] : 0.0f;
                q_d[i] = i < rows ? Di[local * T + q0 + i] : 0.0f;
            }
            // S^T and dP^T: rows are this block's keys, columns the tile's queries
            float sc[ROW_COLS], dp[ROW_COLS];
            tile_scores<E, DMAX>(sc, as, xs, kt, s.kvs, keys, qt, s.qs, rows, D, r, c);
            tile_scores<E, DMAX>(dp, as, xs, vt, s.kvs, keys, got, C, rows, D, r, c);
#pragma unroll
            for (int i = 0; i < ROW_COLS; i++) {
                const int qi = c + ROW_THREADS * i;
                const float p =
                    sees(q0 + qi, j, T, s.causal) ? expf(sc[i] * scale - q_lse[qi]) : 0.0f;
                sc[i] = p;
                dp[i] = p * (dp[i] - q_d[qi]) * scale; // dS^T
                ws[r * TILE_LD + qi] = p;
            }
            tile_combine<E, DMAX>(dv_acc, ws, xs, got, C, rows, D, r, c); // dv += P^T dout
            __syncthreads();                                              // P^T's readers are done
#pragma unroll
            for (int i = 0; i < ROW_COLS; i++) ws[r * TILE_LD + c + ROW_THREADS * i] = dp[i];
            tile_combine<E, DMAX>(dk_acc, ws, xs, qt, s.qs, rows, D, r, c); // dk += dS^T q
        }
    }
    if (j < T) {
        const size_t at = ((size_t)b * T + j) * s.kvs + g * D;
        store_row<E, DMAX>(dk + at, dk_acc, 1.0f, D, c);
        store_row<E, DMAX>(dv + at, dv_acc, 1.0f, D, c);
    }
}

// Runs f(std::integral_constant<int, DMAX>{}) with the smallest instantiated DMAX >= D.
template <class F> void with_head_dim(int D, F &&f) {
    if (D <= 64)
        f(std::integral_constant<int, 64>{});
    else if (D <= 128)
        f(std::integral_constant<int, 128>{});
    else
        f(std::integral_constant<int, FLASH_MAX_HEAD_DIM>{});
}

int flash_empty(const AttnShape *s) {
    return s->B == 0 || s->T == 0 || s->heads == 0 || s->kv_heads == 0 || s->head_dim == 0;
}

// The shapes the kernels take (D up to FLASH_MAX_HEAD_DIM, heads a multiple of kv_heads, T and
// the grids within int); an invalid-value error under `where` otherwise.
int flash_shape_ok(const AttnShape *s, const char *where) {
    const size_t tiles = (s->T + TILE - 1) / TILE;
    if (s->head_dim > FLASH_MAX_HEAD_DIM || s->heads % s->kv_heads != 0 ||
        s->T > (size_t)INT_MAX - TILE || s->B * s->heads > INT_MAX / tiles) {
        cuda_note(cudaErrorInvalidValue, where);
        return 0;
    }
    return 1;
}

FlashShape flash_shape(const AttnShape *s) {
    return FlashShape{s->B,         s->heads,  s->kv_heads,      s->q_stride,
                      s->kv_stride, (int)s->T, (int)s->head_dim, s->causal};
}

float flash_scale(const AttnShape *s) {
    return (float)(1.0 / sqrt((double)s->head_dim)); // the CPU's
}

} // namespace

extern "C" void cuda_flash_attention_forward(DType t, void *out, float *lse, const void *q,
                                             const void *k, const void *v, const AttnShape *s) {
    const char *where = "flash_attention_forward";
    if (flash_empty(s) || !flash_shape_ok(s, where)) return;
    const FlashShape fs = flash_shape(s);
    const unsigned blocks = (unsigned)(s->B * s->heads * ((s->T + TILE - 1) / TILE));
    if (cuda_dispatch(t, where, [&](auto e) {
            using E = typename decltype(e)::type;
            with_head_dim(fs.D, [&](auto dmax) {
                flash_forward_kernel<E, decltype(dmax)::value>
                    <<<blocks, FA_THREADS, 0, cuda_ctx()->stream>>>((E *)out, lse, (const E *)q,
                                                                    (const E *)k, (const E *)v, fs,
                                                                    flash_scale(s));
            });
        }))
        return;
    CUDA_LAUNCHED(where);
}

// D_i goes into the context's cuBLASLt workspace (heads T floats a sample; between GEMMs the
// stream's to use), so samples go as many at a time as it holds; `work` stays unused.
extern "C" void cuda_flash_attention_backward(DType t, void *dq, void *dk, void *dv,
                                              const void *dout, const void *q, const void *k,
                                              const void *v, const void *out, const float *lse,
                                              float *work, const AttnShape *s) {
    (void)work; // every block recomputes its probabilities on chip from lse
    const char *where = "flash_attention_backward";
    if (flash_empty(s) || !flash_shape_ok(s, where)) return;
    const size_t sample = s->heads * s->T; // D_i floats of a sample
    const size_t per_chunk = CUDA_WORKSPACE_FLOATS / sample;
    if (per_chunk == 0) {
        cuda_note(cudaErrorInvalidValue, where);
        return;
    }
    CudaContext *ctx = cuda_ctx();
    cudaStream_t stream = ctx->stream;
    float *Di = (float *)ctx->workspace;
    const FlashShape fs = flash_shape(s);
    const float scale = flash_scale(s);
    const size_t tiles = (s->T + TILE - 1) / TILE;
    cuda_dispatch(t, where, [&](auto e) {
        using E = typename decltype(e)::type;
        with_head_dim(fs.D, [&](auto dmax) {
            constexpr int DMAX = decltype(dmax)::value;
            for (size_t b0 = 0; b0 < s->B; b0 += per_chunk) {
                const size_t nb = s->B - b0 < per_chunk ? s->B - b0 : per_chunk;
                const size_t rows = nb * sample;
                flash_row_dots_kernel<<<cuda_blocks(rows, FA_THREADS / 32), FA_THREADS, 0,
                                        stream>>>(Di, (const E *)dout, (const E *)out, rows,
                                                  b0 * s->heads, fs);
                flash_dq_kernel<E, DMAX>
                    <<<(unsigned)(nb * s->heads * tiles), FA_THREADS, 0, stream>>>(
                        (E *)dq, (const E *)dout, (const E *)q, (const E *)k, (const E *)v, lse, Di,
                        b0, fs, scale);
                flash_dkdv_kernel<E, DMAX>
                    <<<(unsigned)(nb * s->kv_heads * tiles), FA_THREADS, 0, stream>>>(
                        (E *)dk, (E *)dv, (const E *)dout, (const E *)q, (const E *)k, (const E *)v,
                        lse, Di, b0, fs, scale);
                if (CUDA_LAUNCHED(where)) return;
            }
        });
    });
}
