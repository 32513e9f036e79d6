/* attention_cpu: attention on the CPU (semantics in ../kernels.h): eager (its probabilities kept,
 * causal or not), grouped-query and flash (only each row's log-sum-exp kept) over strided q, k, v,
 * forward and backward, split over the bound pool by (sample, head) pairs, each pair computed as
 * the serial code computes it. How the CPU kernels vectorise and split: vit_cpu.c's opening
 * comment. */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/cpu/cpu_fp32.h"
#include "kernels/cpu/cpu_math.h"
#include "kernels/cpu/cpu_ops.h"
#include "kernels/cpu/pool.h"
#include "kernels/kernels.h"

/* Smallest work per task worth a dispatch: multiply-adds of q k^T and P v per (sample, head)
 * (backward counts 2.5 times that); splitting in two ran 1.4x faster from 2 samples (measured as
 * vit_cpu.c's other minimums are). */
#define ATTENTION_MIN_MACS ((size_t)1 << 16)

/* The two small matrix products attention is made of, over rows of D floats that sit `stride`
 * floats apart (q, k, v rows of one head inside qkv; dout rows).
 *
 * row_dots: out[j] = a . b_j for j < n. Four b rows at a time share each load of a, each row with
 * its own CHUNK partial sums (a GCC vector of CHUNK floats: written as arrays, GCC vectorised
 * across the four rows instead, with a gather per load), added as dot() adds them: the same sums,
 * bit for bit, as one dot() per row. At vit-tiny's shapes (T = 17, D = 64, batch 64) attention
 * forward took 8% and backward 11% less CPU time on the development VM than with one dot() per
 * row. (Blocking combine's rows the same way, two at a time, made backward slower: left as is.) */
typedef float ChunkVec __attribute__((vector_size(CHUNK * sizeof(float))));

/* Vectors travel through memory, not as arguments or results: a 32-byte vector passed by value
 * is passed differently with and without AVX (GCC's -Wpsabi), and the baseline clone has none. */
static inline float chunk_vec_total(const ChunkVec *v) {
    float acc[CHUNK];
    memcpy(acc, v, sizeof acc);
    return chunk_total(acc);
}

VECTOR_CLONES
static void row_dots(float *restrict out, const float *restrict a, const float *restrict b,
                     size_t bstride, size_t n, size_t D) {
    size_t j = 0;
    for (; j + 4 <= n; j += 4) {
        const float *b0 = b + j * bstride, *b1 = b0 + bstride, *b2 = b1 + bstride;
        const float *b3 = b2 + bstride;
        ChunkVec acc0 = {0}, acc1 = {0}, acc2 = {0}, acc3 = {0};
        size_t i = 0;
        for (; i + CHUNK <= D; i += CHUNK) {
            ChunkVec x, y0, y1, y2, y3;
            memcpy(&x, a + i, sizeof x);
            memcpy(&y0, b0 + i, sizeof y0), memcpy(&y1, b1 + i, sizeof y1);
            memcpy(&y2, b2 + i, sizeof y2), memcpy(&y3, b3 + i, sizeof y3);
            acc0 += x * y0, acc1 += x * y1, acc2 += x * y2, acc3 += x * y3;
        }
        float s0 = chunk_vec_total(&acc0), s1 = chunk_vec_total(&acc1);
        float s2 = chunk_vec_total(&acc2), s3 = chunk_vec_total(&acc3);
        for (; i < D; i++) {
            s0 += a[i] * b0[i];
            s1 += a[i] * b1[i];
            s2 += a[i] * b2[i];
            s3 += a[i] * b3[i];
        }
        out[j] = s0, out[j + 1] = s1, out[j + 2] = s2, out[j + 3] = s3;
    }
    for (; j < n; j++) out[j] = dot(a, b + j * bstride, D);
}

/* combine: y_i = sum_j c[i * ci + j * cj] x_j for i < ny, j < nx (ci, cj pick c or its
 * transpose); y_i is overwritten, or with `add` added to (a K,V head's gradient summed over
 * the query heads that share it). Blocks of `vecs` (up to 8) vectors of CHUNK columns are summed
 * over j in registers, each element's products added in j's order: the bits of the plain loop.
 * GCC's vector types, because at -O2 it left the plain loop over a float[32] scalar, a ninth of
 * the GEMM's rate (13% of vit-tiny's step in attention's products, perf, 2026-11-26). A head of
 * 64 columns is one block of 8, one pass over j: a multiply and an add per vector and j keep
 * both vector ports busy. It was four 16-float vectors, which AVX-512 holds in four registers
 * but GCC's AVX2 clone kept on the stack, in 16-byte halves: 29% of a bf16 vit-tiny step on an
 * AVX2 EPYC (perf), the whole step 0.7x with 8-float vectors (bench/RESULTS.md, 2026-12-02). */
enum { COMBINE_MAX_VECS = 8 }; /* combine_block's widest: 64 columns */

static inline __attribute__((always_inline)) void
combine_block(float *restrict yd, const float *restrict crow, size_t cj, const float *restrict xd,
              size_t xstride, size_t nx, int vecs, int add) {
    ChunkVec acc[COMBINE_MAX_VECS] = {{0}};
    for (size_t j = 0; j < nx; j++) {
        const ChunkVec cij = (ChunkVec){0} + crow[j * cj];
        const float *xj = xd + j * xstride;
        UNROLL
        for (int v = 0; v < vecs; v++) {
            ChunkVec xv;
            memcpy(&xv, xj + v * CHUNK, sizeof xv);
            acc[v] += cij * xv;
        }
    }
    UNROLL
    for (int v = 0; v < vecs; v++) {
        ChunkVec out = {0};
        if (add) memcpy(&out, yd + v * CHUNK, sizeof out);
        out += acc[v];
        memcpy(yd + v * CHUNK, &out, sizeof out);
    }
}

VECTOR_CLONES
static void combine_into(float *restrict y, size_t ystride, const float *restrict c, size_t ci,
                         size_t cj, const float *restrict x, size_t xstride, size_t ny, size_t nx,
                         size_t D, int add) {
    enum { WIDE = COMBINE_MAX_VECS * CHUNK, VECS = 4, LANES = VECS * CHUNK };
    for (size_t i = 0; i < ny; i++) {
        float *yi = y + i * ystride;
        const float *crow = c + i * ci;
        size_t d = 0;
        for (; d + WIDE <= D; d += WIDE)
            combine_block(yi + d, crow, cj, x + d, xstride, nx, COMBINE_MAX_VECS, add);
        for (; d + LANES <= D; d += LANES)
            combine_block(yi + d, crow, cj, x + d, xstride, nx, VECS, add);
        for (; d + CHUNK <= D; d += CHUNK)
            combine_block(yi + d, crow, cj, x + d, xstride, nx, 1, add);
        for (; d < D; d++) {
            float acc = 0.0f;
            for (size_t j = 0; j < nx; j++) acc += crow[j * cj] * x[j * xstride + d];
            yi[d] = (add ? yi[d] : 0.0f) + acc;
        }
    }
}

static void combine(float *restrict y, size_t ystride, const float *restrict c, size_t ci,
                    size_t cj, const float *restrict x, size_t xstride, size_t ny, size_t nx,
                    size_t D) {
    combine_into(y, ystride, c, ci, cj, x, xstride, ny, nx, D, 0);
}

/* p[s] = softmax(scale * p)[s] in place, scale > 0 (max subtracted); returns the row's
 * log-sum-exp of scale * p, all flash attention keeps of it. */
VECTOR_CLONES
static float softmax_row(float *p, size_t n, float scale) {
    float m[CHUNK], mx = p[0];
    size_t s = 0;
    if (n >= CHUNK) { /* branch-free running maxima, vectorised */
        UNROLL
        for (int k = 0; k < CHUNK; k++) m[k] = p[k];
        for (s = CHUNK; s + CHUNK <= n; s += CHUNK) {
            UNROLL
            for (int k = 0; k < CHUNK; k++) m[k] = p[s + k] > m[k] ? p[s + k] : m[k];
        }
        for (int k = 0; k < CHUNK; k++) mx = m[k] > mx ? m[k] : mx;
    }
    for (; s < n; s++) mx = p[s] > mx ? p[s] : mx;
    float acc[CHUNK] = {0};
    s = 0;
    for (; s + CHUNK <= n; s += CHUNK) {
        UNROLL
        for (int k = 0; k < CHUNK; k++) {
            const float e = exp_approx_nan((p[s + k] - mx) * scale);
            p[s + k] = e;
            acc[k] += e;
        }
    }
    float sum = chunk_total(acc);
    for (; s < n; s++) {
        p[s] = exp_approx_nan((p[s] - mx) * scale);
        sum += p[s];
    }
    const float inv = 1.0f / sum;
    s = 0;
    for (; s + CHUNK <= n; s += CHUNK) {
        UNROLL
        for (int k = 0; k < CHUNK; k++) p[s + k] *= inv;
    }
    for (; s < n; s++) p[s] *= inv;
    return mx * scale + logf(sum);
}

typedef struct AttentionArgs {
    float *out, *probs, *dqkv;
    const float *qkv, *dout, *cprobs;
    size_t B, T, C, heads;
    int causal;
} AttentionArgs;

/* For each sample b and head h (q, k, v: that head's D columns, rows C3 = 3C apart):
 * P = softmax(q k^T / sqrt(D)) row by row, out = P v. T is small (17 for vit-tiny), so these
 * are register-blocked loops, not GEMM calls per head. Causal: row t scores and normalises only
 * keys 0..t and the rest of the row is 0, which P v then skips at no cost in correctness. Here
 * for the (sample, head) pairs [p0, p1), pair = b * heads + h; a pool splits the pairs. */
VECTOR_CLONES
static void attention_forward_pairs(float *restrict out, float *restrict probs,
                                    const float *restrict qkv, size_t T, size_t C, size_t heads,
                                    int causal, size_t p0, size_t p1) {
    const size_t D = C / heads, C3 = 3 * C;
    const float scale = (float)(1.0 / sqrt((double)D));
    for (size_t pair = p0; pair < p1; pair++) {
        const size_t b = pair / heads, h = pair % heads;
        const float *q = qkv + b * T * C3 + h * D, *k = q + C, *v = q + 2 * C;
        float *P = probs + (b * heads + h) * T * T;
        for (size_t t = 0; t < T; t++) {
            float *p = P + t * T;
            const size_t keys = causal ? t + 1 : T;
            row_dots(p, q + t * C3, k, C3, keys, D);
            softmax_row(p, keys, scale);
            for (size_t s = keys; s < T; s++) p[s] = 0.0f;
        }
        combine(out + b * T * C + h * D, C, P, T, 1, v, C3, T, T, D);
    }
}

static void attention_forward_task(const void *ctx, size_t p0, size_t p1) {
    const AttentionArgs *a = ctx;
    attention_forward_pairs(a->out, a->probs, a->qkv, a->T, a->C, a->heads, a->causal, p0, p1);
}

/* multiply-adds of a (sample, head) pair: q k^T, P v (and in backward three more of the size) */
static size_t attention_pair_macs(size_t T, size_t C, size_t heads) {
    return 2 * T * T * (C / heads);
}

static void attention_forward(float *out, float *probs, const float *qkv, size_t B, size_t T,
                              size_t C, size_t heads, int causal) {
    if (heads == 0 || C == 0 || T == 0) return;
    AttentionArgs a = {.out = out,
                       .probs = probs,
                       .qkv = qkv,
                       .B = B,
                       .T = T,
                       .C = C,
                       .heads = heads,
                       .causal = causal};
    cpu_parallel_range(B * heads, 1, B * heads * attention_pair_macs(T, C, heads),
                       ATTENTION_MIN_MACS, attention_forward_task, &a);
}

void f32_attention_forward(float *out, float *probs, const float *qkv, size_t B, size_t T, size_t C,
                           size_t heads) {
    attention_forward(out, probs, qkv, B, T, C, heads, 0);
}

void f32_causal_attention_forward(float *out, float *probs, const float *qkv, size_t B, size_t T,
                                  size_t C, size_t heads) {
    attention_forward(out, probs, qkv, B, T, C, heads, 1);
}

/* A task's T x T tile of fp32 scratch (backward's dS, flash forward's probabilities): host memory
 * of the task's own, so any T a model asks for fits (a stack tile capped T at 256). Out of host
 * memory an op has no caller to tell: one line and abort, as a GPU would fault. */
static float *tile_take(size_t T) {
    float *t = malloc((T ? T * T : 1) * sizeof(float));
    if (!t) {
        fprintf(stderr, "kernels_cpu: no host memory for a %zu x %zu attention tile\n", T, T);
        abort();
    }
    return t;
}

/* For each sample and head, with a T x T tile (each task its own):
 * dP = dout v^T; dS = P * (dP - rowsum(dP * P)) / sqrt(D) (the tile, in place);
 * dv = P^T dout; dq = dS k; dk = dS^T q. Every column of dqkv is written exactly once. */
VECTOR_CLONES
static void attention_backward_pairs(float *restrict dqkv, const float *restrict dout,
                                     const float *restrict qkv, const float *restrict probs,
                                     size_t T, size_t C, size_t heads, size_t p0, size_t p1) {
    const size_t D = C / heads, C3 = 3 * C;
    const float scale = (float)(1.0 / sqrt((double)D));
    float *dS = tile_take(T);
    for (size_t pair = p0; pair < p1; pair++) {
        const size_t b = pair / heads, h = pair % heads;
        const float *q = qkv + b * T * C3 + h * D, *k = q + C, *v = q + 2 * C;
        const float *go = dout + b * T * C + h * D;
        float *dq = dqkv + b * T * C3 + h * D, *dk = dq + C, *dv = dq + 2 * C;
        const float *P = probs + (b * heads + h) * T * T;
        for (size_t t = 0; t < T; t++) {
            float *ds = dS + t * T;
            const float *p = P + t * T;
            row_dots(ds, go + t * C, v, C3, T, D);
            const float row = dot(ds, p, T);
            for (size_t s = 0; s < T; s++) ds[s] = p[s] * (ds[s] - row) * scale;
        }
        combine(dv, C3, P, 1, T, go, C, T, T, D);
        combine(dq, C3, dS, T, 1, k, C3, T, T, D);
        combine(dk, C3, dS, 1, T, q, C3, T, T, D);
    }
    free(dS);
}

static void attention_backward_task(const void *ctx, size_t p0, size_t p1) {
    const AttentionArgs *a = ctx;
    attention_backward_pairs(a->dqkv, a->dout, a->qkv, a->cprobs, a->T, a->C, a->heads, p0, p1);
}

void f32_attention_backward(float *dqkv, const float *dout, const float *qkv, const float *probs,
                            size_t B, size_t T, size_t C, size_t heads) {
    if (heads == 0 || C == 0 || T == 0) return;
    AttentionArgs a = {.dqkv = dqkv,
                       .dout = dout,
                       .qkv = qkv,
                       .cprobs = probs,
                       .B = B,
                       .T = T,
                       .C = C,
                       .heads = heads};
    /* five products per pair where forward has two */
    cpu_parallel_range(B * heads, 1, B * heads * attention_pair_macs(T, C, heads) * 5 / 2,
                       ATTENTION_MIN_MACS, attention_backward_task, &a);
}

/* ---- attention over grouped, strided operands: gqa_attention_* (eager, the probabilities
 * kept) and flash_attention_* (only each row's log-sum-exp kept) ----
 *
 * The same loops as above with q, k, v where an AttnShape says. Query head h of sample b is
 * pair b * heads + h and reads K,V head h / group. Backward walks the pairs K,V head by K,V head
 * (item b * kv_heads + g, its group's query heads in order): the first head's share of dk and dv
 * overwrites, the others add, so a pool never has two tasks writing one K,V head. */

typedef struct GqaArgs {
    float *out, *probs, *lse, *dq, *dk, *dv, *work;
    const float *q, *k, *v, *dout, *cout, *cprobs, *clse;
    const AttnShape *s;
} GqaArgs;

/* One pair's probabilities P[T, T] from scratch: the scaled scores' softmax, and each row's
 * log-sum-exp into lse (if not NULL); a causal row's masked keys get 0. */
static void pair_probs(float *P, float *lse, const float *q, const float *k, const AttnShape *s) {
    const size_t T = s->T, D = s->head_dim;
    const float scale = (float)(1.0 / sqrt((double)D));
    for (size_t t = 0; t < T; t++) {
        float *p = P + t * T;
        const size_t keys = s->causal ? t + 1 : T;
        row_dots(p, q + t * s->q_stride, k, s->kv_stride, keys, D);
        const float l = softmax_row(p, keys, scale);
        if (lse) lse[t] = l;
        for (size_t j = keys; j < T; j++) p[j] = 0.0f;
    }
}

/* Pairs [p0, p1): out = P v, P into probs (eager) or into `tile` (flash, which keeps lse). */
static void gqa_forward_pairs(const GqaArgs *a, float *tile, size_t p0, size_t p1) {
    const AttnShape *s = a->s;
    const size_t T = s->T, D = s->head_dim, C = s->heads * D, group = s->heads / s->kv_heads;
    for (size_t pair = p0; pair < p1; pair++) {
        const size_t b = pair / s->heads, h = pair % s->heads, g = h / group;
        const float *q = a->q + b * T * s->q_stride + h * D;
        const float *k = a->k + b * T * s->kv_stride + g * D,
                    *v = a->v + b * T * s->kv_stride + g * D;
        float *P = a->probs ? a->probs + pair * T * T : tile;
        pair_probs(P, a->lse ? a->lse + pair * T : NULL, q, k, s);
        combine(a->out + b * T * C + h * D, C, P, T, 1, v, s->kv_stride, T, T, D);
    }
}

static void gqa_forward_task(const void *ctx, size_t p0, size_t p1) {
    const GqaArgs *a = ctx;
    if (a->probs) {
        gqa_forward_pairs(a, NULL, p0, p1);
        return;
    }
    float *tile = tile_take(a->s->T); /* this task's, as backward's dS */
    gqa_forward_pairs(a, tile, p0, p1);
    free(tile);
}

static int attn_shape_empty(const AttnShape *s) {
    return s->B == 0 || s->T == 0 || s->heads == 0 || s->kv_heads == 0 || s->head_dim == 0;
}

static void gqa_forward(GqaArgs *a) {
    const AttnShape *s = a->s;
    if (attn_shape_empty(s)) return;
    const size_t macs = 2 * s->T * s->T * s->head_dim;
    cpu_parallel_range(s->B * s->heads, 1, s->B * s->heads * macs, ATTENTION_MIN_MACS,
                       gqa_forward_task, a);
}

void f32_gqa_attention_forward(float *out, float *probs, const float *q, const float *k,
                               const float *v, const AttnShape *s) {
    GqaArgs a = {.out = out, .probs = probs, .q = q, .k = k, .v = v, .s = s};
    gqa_forward(&a);
}

void f32_flash_attention_forward(float *out, float *lse, const float *q, const float *k,
                                 const float *v, const AttnShape *s) {
    GqaArgs a = {.out = out, .lse = lse, .q = q, .k = k, .v = v, .s = s};
    gqa_forward(&a);
}

/* Flash's probabilities again, exactly as its forward made them: scores, then
 * exp(scale * score - lse) (the max and the sum are in lse). */
static void pair_probs_again(float *P, const float *lse, const float *q, const float *k,
                             const AttnShape *s) {
    const size_t T = s->T, D = s->head_dim;
    const float scale = (float)(1.0 / sqrt((double)D));
    for (size_t t = 0; t < T; t++) {
        float *p = P + t * T;
        const size_t keys = s->causal ? t + 1 : T;
        row_dots(p, q + t * s->q_stride, k, s->kv_stride, keys, D);
        for (size_t j = 0; j < keys; j++) p[j] = exp_approx_nan(p[j] * scale - lse[t]);
        for (size_t j = keys; j < T; j++) p[j] = 0.0f;
    }
}

/* K,V heads [i0, i1) (item = b * kv_heads + g), each with its group's query heads: dP = dout
 * v^T; dS = P * (dP - rowsum) / sqrt(D), rowsum = sum(dP * P), which is dout . out (flash
 * uses that: it keeps out, not P); dv (+)= P^T dout; dq = dS k; dk (+)= dS^T q. */
static void gqa_backward_items(const GqaArgs *a, float *dS, size_t i0, size_t i1) {
    const AttnShape *s = a->s;
    const size_t T = s->T, D = s->head_dim, C = s->heads * D, group = s->heads / s->kv_heads;
    const float scale = (float)(1.0 / sqrt((double)D));
    for (size_t item = i0; item < i1; item++) {
        const size_t b = item / s->kv_heads, g = item % s->kv_heads;
        const size_t kv = b * T * s->kv_stride + g * D;
        for (size_t j = 0; j < group; j++) {
            const size_t h = g * group + j, pair = b * s->heads + h;
            const float *q = a->q + b * T * s->q_stride + h * D;
            const float *go = a->dout + b * T * C + h * D;
            const float *P = a->cprobs ? a->cprobs + pair * T * T : a->work;
            if (!a->cprobs) pair_probs_again(a->work, a->clse + pair * T, q, a->k + kv, s);
            for (size_t t = 0; t < T; t++) {
                float *ds = dS + t * T;
                const float *p = P + t * T;
                row_dots(ds, go + t * C, a->v + kv, s->kv_stride, T, D);
                const float row = a->cprobs
                                      ? dot(ds, p, T)
                                      : dot(go + t * C, a->cout + b * T * C + h * D + t * C, D);
                for (size_t u = 0; u < T; u++) ds[u] = p[u] * (ds[u] - row) * scale;
            }
            float *dq = a->dq + b * T * s->q_stride + h * D;
            combine_into(a->dv + kv, s->kv_stride, P, 1, T, go, C, T, T, D, j > 0);
            combine(dq, s->q_stride, dS, T, 1, a->k + kv, s->kv_stride, T, T, D);
            combine_into(a->dk + kv, s->kv_stride, dS, 1, T, q, s->q_stride, T, T, D, j > 0);
        }
    }
}

static void gqa_backward_task(const void *ctx, size_t i0, size_t i1) {
    const GqaArgs *a = ctx;
    float *dS = tile_take(a->s->T);
    gqa_backward_items(a, dS, i0, i1);
    free(dS);
}

void f32_gqa_attention_backward(float *dq, float *dk, float *dv, const float *dout, const float *q,
                                const float *k, const float *v, const float *probs,
                                const AttnShape *s) {
    if (attn_shape_empty(s)) return;
    GqaArgs a = {.dq = dq,
                 .dk = dk,
                 .dv = dv,
                 .dout = dout,
                 .q = q,
                 .k = k,
                 .v = v,
                 .cprobs = probs,
                 .s = s};
    const size_t macs = 5 * s->T * s->T * s->head_dim;
    cpu_parallel_range(s->B * s->kv_heads, 1, s->B * s->heads * macs, ATTENTION_MIN_MACS,
                       gqa_backward_task, &a);
}

/* Serial: the one work tile holds one pair's probabilities at a time. */
void f32_flash_attention_backward(float *dq, float *dk, float *dv, const float *dout,
                                  const float *q, const float *k, const float *v, const float *out,
                                  const float *lse, float *work, const AttnShape *s) {
    if (attn_shape_empty(s)) return;
    GqaArgs a = {.dq = dq,
                 .dk = dk,
                 .dv = dv,
                 .work = work,
                 .dout = dout,
                 .q = q,
                 .k = k,
                 .v = v,
                 .cout = out,
                 .clse = lse,
                 .s = s};
    gqa_backward_task(&a, 0, s->B * s->kv_heads); /* every (sample, K,V head) in one task */
}
