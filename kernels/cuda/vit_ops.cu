/* vit_ops: the ViT's ops that are not GEMMs, attention or elementwise math: LayerNorm, patches and
 * tokens, the class token, the loss, the accuracy count (the CPU's in ../cpu/vit_cpu.c). Kernels
 * are templates over the compute dtype's element type T (cuda_common.cuh): they load T, compute
 * in fp32 (or double, where the fp32 ops do), and round each T output once as they store it. */
#include <math.h>
#include <stdint.h>

#include "kernels/cuda/cuda_common.cuh"
#include "kernels/cuda/cuda_ops.h"
#include "kernels/cuda/row_sums.cuh"

// Every reduction has a fixed shape that depends only on the op's sizes, never on timing, so
// every result is bit-identical run to run on one GPU model (no floating-point atomics):
//
// - LayerNorm forward and din: one warp per row (C <= LN_WARP_MAX_C), else one block of
//   LN_THREADS per row. Each thread sums a strided share of the row, then a butterfly over the
//   warp (every lane ends with the same bits) and, for a block, the warps' sums added in warp
//   order. Forward is two-pass (mean, then the mean squared deviation: no cancellation).
// - LayerNorm dw and db: a column-parallel kernel. A block owns 32 columns and one of R
//   chunks of the rows; its LN_ROW_LANES row lanes each sum every LN_ROW_LANES-th row of the
//   chunk, and the lanes are added in order. With R == 1 the block adds its sums into dw and
//   db itself; otherwise the chunks' sums go to the context's scratch and a second kernel adds
//   them to dw and db in chunk order. R (from M and C alone) is as many chunks of at least
//   LN_MIN_CHUNK_ROWS rows as the scratch holds.
// - embed backward: a thread per (token, column) sums the batch in order: exactly the CPU's
//   sums (plain adds in the same order), and copies dpatch_out on the way.
// - cross entropy: a warp per row (max, sum of exponentials in double, the row's loss in
//   double); each warp adds its rows' losses in order, each block its warps' in order, into one
//   double per block in scratch; the host adds the blocks' in order and divides by B.
// - count correct: a warp per row finds the first maximum; the count is an integer, so blocks
//   add theirs to one counter in scratch with atomics (order cannot change an integer sum).

namespace {

constexpr unsigned ELEM_THREADS = 256; // elementwise and copy kernels
constexpr unsigned LN_ROW_LANES = 16;  // dw/db kernel: blocks of 32 columns x 16 row lanes
constexpr size_t LN_MIN_CHUNK_ROWS = 64;
constexpr unsigned LOSS_WARPS = 8; // cross entropy and count correct: 8 rows at a time a block
constexpr unsigned LOSS_MAX_BLOCKS = 1024;
constexpr size_t SCRATCH_FLOATS = CUDA_SCRATCH_BYTES / sizeof(float);
static_assert(LOSS_MAX_BLOCKS * sizeof(double) <= CUDA_SCRATCH_BYTES, "loss partials fit");

// ---- LayerNorm (row_sums.cuh) ----

// One row per group of WARPS warps: WARPS == 1, LN_THREADS / 32 rows a block; WARPS * 32 ==
// LN_THREADS, one row a block (so the row loop is uniform over the block and may synchronise).
template <int WARPS, class T>
__global__ void __launch_bounds__(LN_THREADS)
    layernorm_forward_kernel(T *__restrict__ out, float *__restrict__ mean,
                             float *__restrict__ rstd, const T *__restrict__ in,
                             const T *__restrict__ w, const T *__restrict__ b, size_t M, size_t C,
                             float eps) {
    static_assert(WARPS == 1 || WARPS * 32 == LN_THREADS, "a row is a warp or the block");
    constexpr unsigned GROUP = 32u * WARPS, ROWS = LN_THREADS / GROUP;
    __shared__ float2 red[WARPS];
    const unsigned t = threadIdx.x % GROUP;
    const float inv_c = 1.0f / (float)C;
    for (size_t row = (size_t)blockIdx.x * ROWS + threadIdx.x / GROUP; row < M;
         row += (size_t)gridDim.x * ROWS) {
        const T *x = in + row * C;
        float s = 0.0f;
#pragma unroll 4
        for (size_t j = t; j < C; j += GROUP) s += load(x, j);
        const float mu = group_sum2<WARPS>(s, 0.0f, red).x * inv_c;
        float q = 0.0f;
#pragma unroll 4
        for (size_t j = t; j < C; j += GROUP) {
            const float d = load(x, j) - mu;
            q += d * d;
        }
        const float rs = 1.0f / sqrtf(group_sum2<WARPS>(q, 0.0f, red).x * inv_c + eps);
        if (t == 0) {
            mean[row] = mu;
            rstd[row] = rs;
        }
        T *y = out + row * C;
#pragma unroll 4
        for (size_t j = t; j < C; j += GROUP)
            store(y, j, (load(x, j) - mu) * rs * load(w, j) + load(b, j));
    }
}

// din += rstd * (dout w - mean(dout w) - xhat mean(dout w xhat)), a row per group as above.
template <int WARPS, class T>
__global__ void __launch_bounds__(LN_THREADS)
    layernorm_backward_din_kernel(T *__restrict__ din, const T *__restrict__ dout,
                                  const T *__restrict__ in, const float *__restrict__ mean,
                                  const float *__restrict__ rstd, const T *__restrict__ w, size_t M,
                                  size_t C) {
    static_assert(WARPS == 1 || WARPS * 32 == LN_THREADS, "a row is a warp or the block");
    constexpr unsigned GROUP = 32u * WARPS, ROWS = LN_THREADS / GROUP;
    __shared__ float2 red[WARPS];
    const unsigned t = threadIdx.x % GROUP;
    const float inv_c = 1.0f / (float)C;
    for (size_t row = (size_t)blockIdx.x * ROWS + threadIdx.x / GROUP; row < M;
         row += (size_t)gridDim.x * ROWS) {
        const T *x = in + row * C, *g = dout + row * C;
        const float mu = mean[row], rs = rstd[row];
        float s1 = 0.0f, s2 = 0.0f;
        // dout w rounded once, the same value in the sums and in each element's term: left to
        // nvcc, g w - m1 becomes fmaf(g, w, -m1), the exact product less the rounded one, so a
        // row of one column (m1 = g w, true gradient 0) got that rounding times rstd (1000 at
        // eps 1e-6): the first GPU run's layernorm din (M 5, C 1), 3e-5 off the CPU's.
#pragma unroll 4
        for (size_t j = t; j < C; j += GROUP) {
            const float gw = __fmul_rn(load(g, j), load(w, j));
            s1 += gw;
            s2 += gw * (load(x, j) - mu);
        }
        const float2 s = group_sum2<WARPS>(s1, s2, red);
        const float m1 = s.x * inv_c, m2 = s.y * rs * inv_c;
        T *dx = din + row * C; // += : the stored value widened, the sum rounded once
#pragma unroll 4
        for (size_t j = t; j < C; j += GROUP) {
            const float xh = (load(x, j) - mu) * rs;
            store(dx, j, load(dx, j) + rs * (__fmul_rn(load(g, j), load(w, j)) - m1 - xh * m2));
        }
    }
}

// Rows [M r / R, M (r+1) / R) of chunk r = blockIdx.y.
__device__ __forceinline__ void chunk_rows(size_t M, size_t r, size_t R, size_t *r0, size_t *r1) {
    *r0 = M * r / R;
    *r1 = M * (r + 1) / R;
}

// dw[j] and db[j] over chunk blockIdx.y's rows, j = 32 blockIdx.x + threadIdx.x: added into
// dw and db when there is one chunk (partials NULL), else written to partials[(2 r) C + j]
// (dw's) and partials[(2 r + 1) C + j] (db's).
template <class T>
__global__ void __launch_bounds__(32 * LN_ROW_LANES)
    layernorm_param_grad_kernel(float *__restrict__ dw, float *__restrict__ db,
                                float *__restrict__ partials, const T *__restrict__ dout,
                                const T *__restrict__ in, const float *__restrict__ mean,
                                const float *__restrict__ rstd, size_t M, size_t C) {
    __shared__ float sw[LN_ROW_LANES][32], sb[LN_ROW_LANES][32];
    const unsigned tx = threadIdx.x, ty = threadIdx.y;
    const size_t j = (size_t)blockIdx.x * 32 + tx;
    size_t r0, r1;
    chunk_rows(M, blockIdx.y, gridDim.y, &r0, &r1);
    float aw = 0.0f, ab = 0.0f;
    if (j < C) {
#pragma unroll 4
        for (size_t i = r0 + ty; i < r1; i += LN_ROW_LANES) {
            const float g = load(dout, i * C + j);
            const float xh = (load(in, i * C + j) - mean[i]) * rstd[i];
            aw += g * xh;
            ab += g;
        }
    }
    sw[ty][tx] = aw;
    sb[ty][tx] = ab;
    __syncthreads();
    if (ty != 0 || j >= C) return;
    for (unsigned k = 1; k < LN_ROW_LANES; k++) {
        aw += sw[k][tx];
        ab += sb[k][tx];
    }
    if (!partials) {
        dw[j] += aw;
        db[j] += ab;
    } else {
        partials[2 * blockIdx.y * C + j] = aw;
        partials[(2 * blockIdx.y + 1) * C + j] = ab;
    }
}

// dw[j] += the R chunks' dw sums in chunk order, db likewise.
__global__ void layernorm_param_reduce_kernel(float *__restrict__ dw, float *__restrict__ db,
                                              const float *__restrict__ partials, size_t C,
                                              size_t R) {
    for (size_t j = (size_t)blockIdx.x * blockDim.x + threadIdx.x; j < C;
         j += (size_t)gridDim.x * blockDim.x) {
        float aw = 0.0f, ab = 0.0f;
        for (size_t r = 0; r < R; r++) {
            aw += partials[2 * r * C + j];
            ab += partials[(2 * r + 1) * C + j];
        }
        dw[j] += aw;
        db[j] += ab;
    }
}

// ---- patches, tokens, class token ----

// One thread per element of patches[B, G*G, P*P] (G = S / P), read from its image pixel.
template <class T>
__global__ void patchify_kernel(T *__restrict__ patches, const T *__restrict__ images, size_t total,
                                size_t S, size_t P, size_t G) {
    const size_t PP = P * P, GG = G * G;
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < total;
         i += (size_t)gridDim.x * blockDim.x) {
        const size_t e = i % PP, p = (i / PP) % GG, b = i / (PP * GG);
        const size_t ky = e / P, kx = e % P, py = p / G, px = p % G;
        patches[i] = images[b * S * S + (py * P + ky) * S + px * P + kx]; // a copy: exact
    }
}

// x[b, t, c] = (t == 0 ? cls[c] : patch_out[b, t - 1, c]) + pos[t, c]
template <class E>
__global__ void embed_forward_kernel(E *__restrict__ x, const E *__restrict__ patch_out,
                                     const E *__restrict__ cls, const E *__restrict__ pos,
                                     size_t total, size_t T, size_t C) {
    const size_t TC = T * C;
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < total;
         i += (size_t)gridDim.x * blockDim.x) {
        const size_t b = i / TC, col = i % TC; // col = t * C + c
        const float v = col < C ? load(cls, col) : load(patch_out, b * (TC - C) + col - C);
        store(x, i, v + load(pos, col));
    }
}

// A thread per column col = t * C + c of a sample: sums dx over the batch in sample order
// (from 0, then added once, as the CPU does), dpos[col] and (token 0) dcls[c] += the sum, and
// copies the column of tokens 1.. into dpatch_out.
template <class E>
__global__ void embed_backward_kernel(float *__restrict__ dcls, float *__restrict__ dpos,
                                      E *__restrict__ dpatch_out, const E *__restrict__ dx,
                                      size_t B, size_t T, size_t C) {
    const size_t TC = T * C;
    for (size_t col = (size_t)blockIdx.x * blockDim.x + threadIdx.x; col < TC;
         col += (size_t)gridDim.x * blockDim.x) {
        float acc = 0.0f;
        if (col < C) {
#pragma unroll 8
            for (size_t b = 0; b < B; b++) acc += load(dx, b * TC + col);
            dcls[col] += acc;
        } else {
#pragma unroll 8
            for (size_t b = 0; b < B; b++) {
                const float v = load(dx, b * TC + col);
                acc += v;
                store(dpatch_out, b * (TC - C) + col - C, v); // exact: v is an E
            }
        }
        dpos[col] += acc;
    }
}

// out[b, c] = x[b, 0, c]
template <class E>
__global__ void class_token_select_kernel(E *__restrict__ out, const E *__restrict__ x,
                                          size_t total, size_t T, size_t C) {
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < total;
         i += (size_t)gridDim.x * blockDim.x)
        out[i] = x[(i / C) * T * C + i % C];
}

// dx[b, 0, c] += dout[b, c]
template <class E>
__global__ void class_token_select_backward_kernel(E *__restrict__ dx, const E *__restrict__ dout,
                                                   size_t total, size_t T, size_t C) {
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < total;
         i += (size_t)gridDim.x * blockDim.x) {
        E *d = dx + (i / C) * T * C + i % C;
        store(d, 0, load(d, 0) + load(dout, i));
    }
}

// ---- loss and accuracy ----

// A warp per row; the block's loss total (its warps' totals in warp order, each the sum of its
// rows' losses in row order) goes to partials[blockIdx.x]. Labels outside [0, classes) make the
// loss NaN, and their row's dlogits the softmax alone (the CPU's behaviour).
template <class T>
__global__ void __launch_bounds__(LOSS_WARPS * 32)
    cross_entropy_kernel(T *__restrict__ dlogits, const T *__restrict__ logits,
                         const int32_t *__restrict__ labels, size_t B, size_t classes, float g,
                         double *__restrict__ partials) {
    __shared__ double warp_total[LOSS_WARPS];
    const unsigned lane = threadIdx.x & 31u, warp = threadIdx.x >> 5;
    double total = 0.0;
    for (size_t row = (size_t)blockIdx.x * LOSS_WARPS + warp; row < B;
         row += (size_t)gridDim.x * LOSS_WARPS) {
        const T *z = logits + row * classes;
        const float mx = warp_row_max(z, classes, lane);
        T *d = dlogits ? dlogits + row * classes : nullptr;
        double sum = 0.0;
        for (size_t j = lane; j < classes; j += 32) sum += (double)expf(load(z, j) - mx);
        sum = warp_sum(sum);
        const int32_t label = labels[row];
        const size_t y = label < 0 ? classes : (size_t)label;
        if (d) {
            // each exponential again (the same bits) rather than kept in dlogits: a bf16 or
            // fp16 dlogits would round it there, and the gradient is rounded once, here
            const float inv = (float)(1.0 / sum);
            for (size_t j = lane; j < classes; j += 32)
                store(d, j, (expf(load(z, j) - mx) * inv - (j == y ? 1.0f : 0.0f)) * g);
        }
        if (lane == 0)
            total += y < classes ? (double)mx + log(sum) - (double)load(z, y) : (double)NAN;
    }
    if (lane == 0) warp_total[warp] = total;
    __syncthreads();
    if (threadIdx.x == 0) {
        double s = warp_total[0];
        for (unsigned k = 1; k < LOSS_WARPS; k++) s += warp_total[k];
        partials[blockIdx.x] = s;
    }
}

// A warp per row: the first index of the row's largest value (the CPU's strict scan: a NaN
// z[0] stays the best, other NaNs never win), against the label; the block's count is added to
// *count.
template <class T>
__global__ void __launch_bounds__(LOSS_WARPS * 32)
    count_correct_kernel(unsigned long long *__restrict__ count, const T *__restrict__ logits,
                         const int32_t *__restrict__ labels, size_t B, size_t classes) {
    __shared__ unsigned warp_count[LOSS_WARPS];
    const unsigned lane = threadIdx.x & 31u, warp = threadIdx.x >> 5;
    unsigned correct = 0;
    for (size_t row = (size_t)blockIdx.x * LOSS_WARPS + warp; row < B;
         row += (size_t)gridDim.x * LOSS_WARPS) {
        const T *z = logits + row * classes;
        float bv = -INFINITY;
        unsigned long long bi = ~0ull;
        for (size_t j = lane; j < classes; j += 32) {
            const float v = load(z, j);
            if (v > bv || (v == bv && j < bi)) {
                bv = v;
                bi = j;
            }
        }
#pragma unroll
        for (int o = 16; o > 0; o >>= 1) {
            const float ov = __shfl_xor_sync(0xffffffffu, bv, o);
            const unsigned long long oi = __shfl_xor_sync(0xffffffffu, bi, o);
            if (ov > bv || (ov == bv && oi < bi)) {
                bv = ov;
                bi = oi;
            }
        }
        const unsigned long long best = isnan(load(z, 0)) ? 0ull : bi;
        const int32_t label = labels[row];
        if (lane == 0) correct += label >= 0 && (unsigned long long)label == best;
    }
    if (lane == 0) warp_count[warp] = correct;
    __syncthreads();
    if (threadIdx.x == 0) {
        unsigned long long s = 0;
        for (unsigned k = 0; k < LOSS_WARPS; k++) s += warp_count[k];
        if (s) atomicAdd(count, s);
    }
}

unsigned loss_blocks(size_t B) {
    return cuda_blocks(B, LOSS_WARPS, LOSS_MAX_BLOCKS);
}

} // namespace

// ---- the ops ----

void cuda_layernorm_forward(DType t, void *out, float *mean, float *rstd, const void *in,
                            const void *w, const void *b, size_t M, size_t C, float eps) {
    if (C == 0 || M == 0) return;
    CudaContext *ctx = cuda_ctx();
    if (cuda_dispatch(t, "layernorm_forward", [&](auto e) {
            using T = typename decltype(e)::type;
            if (C <= LN_WARP_MAX_C)
                layernorm_forward_kernel<1>
                    <<<cuda_blocks(M, LN_THREADS / 32), LN_THREADS, 0, ctx->stream>>>(
                        (T *)out, mean, rstd, (const T *)in, (const T *)w, (const T *)b, M, C, eps);
            else
                layernorm_forward_kernel<LN_THREADS / 32>
                    <<<cuda_blocks(M, 1), LN_THREADS, 0, ctx->stream>>>(
                        (T *)out, mean, rstd, (const T *)in, (const T *)w, (const T *)b, M, C, eps);
        }))
        return;
    CUDA_LAUNCHED("layernorm_forward");
}

void cuda_layernorm_backward(DType t, void *din, float *dw, float *db, const void *dout,
                             const void *in, const float *mean, const float *rstd, const void *w,
                             size_t M, size_t C) {
    if (C == 0 || M == 0) return;
    CudaContext *ctx = cuda_ctx();
    // chunks of rows: as many of at least LN_MIN_CHUNK_ROWS rows as the scratch holds sums for
    size_t R = (M + LN_MIN_CHUNK_ROWS - 1) / LN_MIN_CHUNK_ROWS;
    const size_t room = SCRATCH_FLOATS / (2 * C);
    if (R > room) R = room;
    if (R > 65535) R = 65535;
    if (R < 1) R = 1;
    const size_t col_blocks = (C + 31) / 32;
    float *partials = R > 1 ? (float *)ctx->scratch : nullptr;
    if (cuda_dispatch(t, "layernorm_backward", [&](auto e) {
            using T = typename decltype(e)::type;
            if (C <= LN_WARP_MAX_C)
                layernorm_backward_din_kernel<1>
                    <<<cuda_blocks(M, LN_THREADS / 32), LN_THREADS, 0, ctx->stream>>>(
                        (T *)din, (const T *)dout, (const T *)in, mean, rstd, (const T *)w, M, C);
            else
                layernorm_backward_din_kernel<LN_THREADS / 32>
                    <<<cuda_blocks(M, 1), LN_THREADS, 0, ctx->stream>>>(
                        (T *)din, (const T *)dout, (const T *)in, mean, rstd, (const T *)w, M, C);
        }))
        return;
    if (CUDA_LAUNCHED("layernorm_backward")) return;
    cuda_dispatch(t, "layernorm_backward", [&](auto e) {
        using T = typename decltype(e)::type;
        layernorm_param_grad_kernel<<<dim3((unsigned)col_blocks, (unsigned)R),
                                      dim3(32, LN_ROW_LANES), 0, ctx->stream>>>(
            dw, db, partials, (const T *)dout, (const T *)in, mean, rstd, M, C);
    });
    if (CUDA_LAUNCHED("layernorm_backward") || R == 1) return;
    layernorm_param_reduce_kernel<<<cuda_blocks(C, ELEM_THREADS), ELEM_THREADS, 0, ctx->stream>>>(
        dw, db, partials, C, R);
    CUDA_LAUNCHED("layernorm_backward");
}

void cuda_patchify(DType t, void *patches, const void *images, size_t B, size_t S, size_t P) {
    if (P == 0) return;
    const size_t G = S / P, total = B * G * G * P * P;
    if (total == 0) return;
    if (cuda_dispatch(t, "patchify", [&](auto e) {
            using T = typename decltype(e)::type;
            patchify_kernel<<<cuda_blocks(total, ELEM_THREADS), ELEM_THREADS, 0,
                              cuda_ctx()->stream>>>((T *)patches, (const T *)images, total, S, P,
                                                    G);
        }))
        return;
    CUDA_LAUNCHED("patchify");
}

// (E, not T, names the element type where T is the token count.)
void cuda_embed_forward(DType t, void *x, const void *patch_out, const void *cls, const void *pos,
                        size_t B, size_t T, size_t C) {
    const size_t total = B * T * C;
    if (total == 0) return;
    if (cuda_dispatch(t, "embed_forward", [&](auto e) {
            using E = typename decltype(e)::type;
            embed_forward_kernel<<<cuda_blocks(total, ELEM_THREADS), ELEM_THREADS, 0,
                                   cuda_ctx()->stream>>>(
                (E *)x, (const E *)patch_out, (const E *)cls, (const E *)pos, total, T, C);
        }))
        return;
    CUDA_LAUNCHED("embed_forward");
}

void cuda_embed_backward(DType t, float *dcls, float *dpos, void *dpatch_out, const void *dx,
                         size_t B, size_t T, size_t C) {
    if (T == 0 || C == 0) return;
    // with B == 0 this still adds the empty sums (0) to dcls and dpos, as the CPU does
    if (cuda_dispatch(t, "embed_backward", [&](auto e) {
            using E = typename decltype(e)::type;
            embed_backward_kernel<<<cuda_blocks(T * C, ELEM_THREADS), ELEM_THREADS, 0,
                                    cuda_ctx()->stream>>>(dcls, dpos, (E *)dpatch_out,
                                                          (const E *)dx, B, T, C);
        }))
        return;
    CUDA_LAUNCHED("embed_backward");
}

void cuda_class_token_select(DType t, void *out, const void *x, size_t B, size_t T, size_t C) {
    const size_t total = B * C;
    if (total == 0) return;
    if (cuda_dispatch(t, "class_token_select", [&](auto e) {
            using E = typename decltype(e)::type;
            class_token_select_kernel<<<cuda_blocks(total, ELEM_THREADS), ELEM_THREADS, 0,
                                        cuda_ctx()->stream>>>((E *)out, (const E *)x, total, T, C);
        }))
        return;
    CUDA_LAUNCHED("class_token_select");
}

void cuda_class_token_select_backward(DType t, void *dx, const void *dout, size_t B, size_t T,
                                      size_t C) {
    const size_t total = B * C;
    if (total == 0) return;
    if (cuda_dispatch(t, "class_token_select_backward", [&](auto e) {
            using E = typename decltype(e)::type;
            class_token_select_backward_kernel<<<cuda_blocks(total, ELEM_THREADS), ELEM_THREADS, 0,
                                                 cuda_ctx()->stream>>>((E *)dx, (const E *)dout,
                                                                       total, T, C);
        }))
        return;
    CUDA_LAUNCHED("class_token_select_backward");
}

// NaN for a DType that is no compute dtype, as for a CUDA error.
float cuda_cross_entropy(DType t, void *dlogits, const void *logits, const int32_t *labels,
                         size_t B, size_t classes, float grad_scale) {
    if (B == 0 || classes == 0) return 0.0f;
    CudaContext *ctx = cuda_ctx();
    const float g = grad_scale / (float)B; // as the CPU rounds it
    const unsigned blocks = loss_blocks(B);
    double *partials = (double *)ctx->scratch;
    if (cuda_dispatch(t, "cross_entropy", [&](auto e) {
            using T = typename decltype(e)::type;
            cross_entropy_kernel<<<blocks, LOSS_WARPS * 32, 0, ctx->stream>>>(
                (T *)dlogits, (const T *)logits, labels, B, classes, g, partials);
        }))
        return NAN;
    if (CUDA_LAUNCHED("cross_entropy")) return NAN;
    return cuda_mean_of_partials(blocks, B, "cross_entropy");
}

size_t cuda_count_correct(DType t, const void *logits, const int32_t *labels, size_t B,
                          size_t classes) {
    if (B == 0 || classes == 0) return 0;
    CudaContext *ctx = cuda_ctx();
    unsigned long long *count = (unsigned long long *)ctx->scratch;
    if (cuda_refused(t, "count_correct")) return 0;
    if (cuda_note(cudaMemsetAsync(count, 0, sizeof *count, ctx->stream), "count_correct")) return 0;
    cuda_dispatch(t, "count_correct", [&](auto e) {
        using T = typename decltype(e)::type;
        count_correct_kernel<<<loss_blocks(B), LOSS_WARPS * 32, 0, ctx->stream>>>(
            count, (const T *)logits, labels, B, classes);
    });
    if (CUDA_LAUNCHED("count_correct")) return 0;
    if (cuda_note(
            cudaMemcpyAsync(ctx->host, count, sizeof *count, cudaMemcpyDeviceToHost, ctx->stream),
            "count_correct") ||
        cuda_note(cudaStreamSynchronize(ctx->stream), "count_correct"))
        return 0;
    return (size_t) * (const unsigned long long *)ctx->host;
}
