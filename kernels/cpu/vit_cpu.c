/* The Vision Transformer's ops on the CPU (semantics in ../kernels.h). GEMMs go through
 * OpenBLAS; everything else is written for GCC at -O2, whose "very cheap" vectoriser only takes
 * loops whose trip count is a known multiple of the vector width: inner loops run over fixed
 * chunks of CHUNK elements (then a scalar tail) and are fully unrolled (UNROLL) so partial sums
 * stay in registers. Reductions keep CHUNK interleaved partial sums added in a fixed order, so
 * results never depend on the thread count. exp and erf are inline approximations (no libm call
 * per element), erf being the one PyTorch's vectorised CPU GELU uses. Ops never allocate;
 * attention backward keeps a T x T tile on the stack (T <= KERNELS_MAX_TOKENS, which the ViT
 * config checks). */
#include <cblas.h>
#include <math.h>
#include <stdint.h>
#include <string.h>

#include "../kernels.h"
#include "cpu_ops.h"

/* Declared by OpenBLAS's cblas.h but not by the netlib one the alternatives may point at. */
extern void openblas_set_num_threads(int);

#define CHUNK 8
/* Fully unrolls a fixed-length inner loop: GCC then keeps its accumulators in vector registers
 * (vectorised but not unrolled, they live on the stack, a load and a store per step). */
#define UNROLL _Pragma("GCC unroll 64")

static const float INV_SQRT2 = 0.70710678118654752440f;
static const float INV_SQRT_2PI = 0.39894228040143267794f;

void kernels_cpu_set_threads(int n) {
    openblas_set_num_threads(n < 1 ? 1 : n);
}

/* ---- small helpers: fixed CHUNK-wide bodies so they vectorise at -O2 ---- */

/* Sum of the CHUNK partial sums, pairwise, always in the same order. */
static inline float chunk_total(const float acc[CHUNK]) {
    return ((acc[0] + acc[4]) + (acc[1] + acc[5])) + ((acc[2] + acc[6]) + (acc[3] + acc[7]));
}

static inline float dot(const float *restrict a, const float *restrict b, size_t n) {
    float acc[CHUNK] = {0};
    size_t i = 0;
    for (; i + CHUNK <= n; i += CHUNK) {
        UNROLL
        for (int k = 0; k < CHUNK; k++) acc[k] += a[i + k] * b[i + k];
    }
    float s = chunk_total(acc);
    for (; i < n; i++) s += a[i] * b[i];
    return s;
}

/* sum of a[i] * b[i] * (x[i] - mu) */
static inline float dot_centered(const float *restrict a, const float *restrict b,
                                 const float *restrict x, float mu, size_t n) {
    float acc[CHUNK] = {0};
    size_t i = 0;
    for (; i + CHUNK <= n; i += CHUNK) {
        UNROLL
        for (int k = 0; k < CHUNK; k++) acc[k] += a[i + k] * b[i + k] * (x[i + k] - mu);
    }
    float s = chunk_total(acc);
    for (; i < n; i++) s += a[i] * b[i] * (x[i] - mu);
    return s;
}

static inline float row_sum(const float *x, size_t n) {
    float acc[CHUNK] = {0};
    size_t i = 0;
    for (; i + CHUNK <= n; i += CHUNK) {
        UNROLL
        for (int k = 0; k < CHUNK; k++) acc[k] += x[i + k];
    }
    float s = chunk_total(acc);
    for (; i < n; i++) s += x[i];
    return s;
}

/* sum of (x[i] - mu)^2 */
static inline float row_sq_dev(const float *x, float mu, size_t n) {
    float acc[CHUNK] = {0};
    size_t i = 0;
    for (; i + CHUNK <= n; i += CHUNK) {
        UNROLL
        for (int k = 0; k < CHUNK; k++) {
            float d = x[i + k] - mu;
            acc[k] += d * d;
        }
    }
    float s = chunk_total(acc);
    for (; i < n; i++) s += (x[i] - mu) * (x[i] - mu);
    return s;
}

/* dst[j] += sum over `rows` rows (src + i * stride) of src[j], j < cols: each column is summed
 * over the rows first (strips of STRIP columns held in registers) and added to dst once. */
static void colsum_add(float *restrict dst, const float *restrict src, size_t rows, size_t cols,
                       size_t stride) {
    enum { STRIP = 32 };
    for (size_t j0 = 0; j0 < cols; j0 += STRIP) {
        float acc[STRIP] = {0};
        size_t width = cols - j0 < STRIP ? cols - j0 : STRIP;
        const float *col = src + j0;
        if (width == STRIP) {
            for (size_t i = 0; i < rows; i++) {
                UNROLL
                for (int k = 0; k < STRIP; k++) acc[k] += col[i * stride + k];
            }
        } else {
            for (size_t i = 0; i < rows; i++)
                for (size_t k = 0; k < width; k++) acc[k] += col[i * stride + k];
        }
        for (size_t k = 0; k < width; k++) dst[j0 + k] += acc[k];
    }
}

void cpu_bias_grad(float *db, const float *dout, size_t rows, size_t cols, size_t stride) {
    colsum_add(db, dout, rows, cols, stride);
}

/* ---- Linear ---- */

void cpu_linear_forward(float *out, const float *in, const float *w, const float *b, size_t M,
                        size_t K, size_t N) {
    if (M == 0 || N == 0) return;
    if (b)
        for (size_t i = 0; i < M; i++) memcpy(out + i * N, b, N * sizeof(float));
    if (K == 0) { /* an empty product: lda = 0 is not a valid GEMM */
        if (!b) memset(out, 0, M * N * sizeof(float));
        return;
    }
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, (int)M, (int)N, (int)K, 1.0f, in, (int)K,
                w, (int)K, b ? 1.0f : 0.0f, out, (int)N);
}

void cpu_linear_backward(float *din, float *dw, float *db, const float *dout, const float *in,
                         const float *w, size_t M, size_t K, size_t N) {
    if (M == 0) return; /* no rows: every gradient is += 0 and din is empty */
    if (din && K > 0) {
        if (N == 0)
            memset(din, 0, M * K * sizeof(float));
        else
            cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, (int)M, (int)K, (int)N, 1.0f,
                        dout, (int)N, w, (int)K, 0.0f, din, (int)K);
    }
    if (N == 0) return;
    if (K > 0)
        cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, (int)N, (int)K, (int)M, 1.0f, dout,
                    (int)N, in, (int)K, 1.0f, dw, (int)K);
    if (db) colsum_add(db, dout, M, N, N);
}

/* ---- LayerNorm ---- */

void cpu_layernorm_forward(float *restrict out, float *restrict mean, float *restrict rstd,
                           const float *restrict in, const float *restrict w,
                           const float *restrict b, size_t M, size_t C, float eps) {
    if (C == 0) return;
    const float inv_c = 1.0f / (float)C;
    for (size_t i = 0; i < M; i++) {
        const float *x = in + i * C;
        float *y = out + i * C;
        /* two passes over a row that sits in L1: no cancellation from sum of squares */
        const float mu = row_sum(x, C) * inv_c;
        const float rs = 1.0f / sqrtf(row_sq_dev(x, mu, C) * inv_c + eps);
        mean[i] = mu;
        rstd[i] = rs;
        size_t j = 0;
        for (; j + CHUNK <= C; j += CHUNK) {
            UNROLL
            for (int k = 0; k < CHUNK; k++) y[j + k] = (x[j + k] - mu) * rs * w[j + k] + b[j + k];
        }
        for (; j < C; j++) y[j] = (x[j] - mu) * rs * w[j] + b[j];
    }
}

/* dxhat = dout * w; din += rstd * (dxhat - mean(dxhat) - xhat * mean(dxhat * xhat));
 * dw += dout * xhat; db += dout. */
void cpu_layernorm_backward(float *restrict din, float *restrict dw, float *restrict db,
                            const float *restrict dout, const float *restrict in,
                            const float *restrict mean, const float *restrict rstd,
                            const float *restrict w, size_t M, size_t C) {
    if (C == 0) return;
    const float inv_c = 1.0f / (float)C;
    for (size_t i = 0; i < M; i++) {
        const float *x = in + i * C, *g = dout + i * C;
        float *dx = din + i * C;
        const float mu = mean[i], rs = rstd[i];
        /* the row's two sums first, each its own loop of loads so GCC keeps the partial sums
         * in registers; then one elementwise pass for din, dw and db */
        const float s1 = dot(g, w, C), s2 = dot_centered(g, w, x, mu, C) * rs;
        const float m1 = s1 * inv_c, m2 = s2 * inv_c;
        size_t j = 0;
        for (; j + CHUNK <= C; j += CHUNK)
            for (int k = 0; k < CHUNK; k++) {
                const float xh = (x[j + k] - mu) * rs;
                dx[j + k] += rs * (g[j + k] * w[j + k] - m1 - xh * m2);
                dw[j + k] += g[j + k] * xh;
                db[j + k] += g[j + k];
            }
        for (; j < C; j++) {
            const float xh = (x[j] - mu) * rs;
            dx[j] += rs * (g[j] * w[j] - m1 - xh * m2);
            dw[j] += g[j] * xh;
            db[j] += g[j];
        }
    }
}

/* ---- exp and erf without calls, so loops over them vectorise ---- */

/* e^x for x <= 0 (every caller: softmax terms after the max, erf's tail, GELU's density), in
 * float: Cephes expf (range reduction by ln 2 in two parts, degree-6 polynomial), about 1 ulp.
 * Below -87.3 the result is e^-87.3 = 1.2e-38 instead of a denormal or 0, which no caller can
 * tell apart. No call and no float comparison, so loops over it vectorise: the clamp is an
 * unsigned min on the bit patterns (a larger negative float has a larger pattern), because
 * GCC turns a float clamp into a branch and folds the clamped path. NaN stays NaN or clamps. */
static inline float exp_approx(float x) {
    uint32_t bits;
    memcpy(&bits, &x, sizeof bits);
    const uint32_t lowest = 0xc2ae999au; /* -87.3f */
    bits = bits < lowest ? bits : lowest;
    float xc;
    memcpy(&xc, &bits, sizeof xc);
    const float round_magic = 12582912.0f; /* 1.5 * 2^23: adding it rounds to an integer */
    const float n = (xc * 1.44269504088896341f + round_magic) - round_magic;
    float r = xc - n * 0.693359375f;
    r = r + n * 2.12194440e-4f;
    float p = 1.9875691500e-4f;
    p = p * r + 1.3981999507e-3f;
    p = p * r + 8.3334519073e-3f;
    p = p * r + 4.1665795894e-2f;
    p = p * r + 1.6666665459e-1f;
    p = p * r + 5.0000001201e-1f;
    const float y = p * r * r + r + 1.0f;
    const int32_t pow2_bits = ((int32_t)n + 127) * (1 << 23);
    float two_n;
    memcpy(&two_n, &pow2_bits, sizeof two_n);
    return y * two_n;
}

/* erf(x) = sign(x) (1 - t P(t) e^{-x^2}), t = 1 / (1 + p|x|): Abramowitz & Stegun 7.1.26,
 * absolute error below 1.5e-7 -- the formula PyTorch's own vectorised CPU GELU uses. The
 * absolute error is what matters in GELU, where erf is added to 1. */
static inline float erf_approx(float x) {
    const float ax = fabsf(x);
    const float t = 1.0f / (1.0f + 0.3275911f * ax);
    const float poly =
        ((((1.061405429f * t - 1.453152027f) * t + 1.421413741f) * t - 0.284496736f) * t +
         0.254829592f) *
        t;
    const float e = 1.0f - poly * exp_approx(-ax * ax);
    return x < 0.0f ? -e : e;
}

/* ---- GELU (exact, erf) ---- */

/* Every element of a chunk is read before any is written, so out may be in. */
void cpu_gelu_forward(float *out, const float *in, size_t n) {
    size_t i = 0;
    for (; i + CHUNK <= n; i += CHUNK) {
        float y[CHUNK];
        UNROLL
        for (int k = 0; k < CHUNK; k++) {
            const float x = in[i + k];
            y[k] = 0.5f * x * (1.0f + erf_approx(x * INV_SQRT2));
        }
        UNROLL
        for (int k = 0; k < CHUNK; k++) out[i + k] = y[k];
    }
    for (; i < n; i++) out[i] = 0.5f * in[i] * (1.0f + erf_approx(in[i] * INV_SQRT2));
}

/* GELU'(x) = Phi(x) + x phi(x) */
static inline float gelu_grad(float x) {
    const float cdf = 0.5f * (1.0f + erf_approx(x * INV_SQRT2));
    const float pdf = exp_approx(-0.5f * x * x) * INV_SQRT_2PI;
    return cdf + x * pdf;
}

/* din may be dout (chunks are read before they are written). */
void cpu_gelu_backward(float *din, const float *in, const float *dout, size_t n) {
    size_t i = 0;
    for (; i + CHUNK <= n; i += CHUNK) {
        float g[CHUNK];
        UNROLL
        for (int k = 0; k < CHUNK; k++) g[k] = dout[i + k] * gelu_grad(in[i + k]);
        UNROLL
        for (int k = 0; k < CHUNK; k++) din[i + k] = g[k];
    }
    for (; i < n; i++) din[i] = dout[i] * gelu_grad(in[i]);
}

/* ---- attention ---- */

/* The two small matrix products attention is made of, over rows of D floats that sit `stride`
 * floats apart (q, k, v rows of one head inside qkv; dout rows).
 *
 * row_dots: out[j] = a . b_j for j < n. (One row at a time: GCC keeps a dot's partial sums in
 * two vector registers; blocking four b rows made it gather across rows instead.) */
static void row_dots(float *restrict out, const float *restrict a, const float *restrict b,
                     size_t bstride, size_t n, size_t D) {
    for (size_t j = 0; j < n; j++) out[j] = dot(a, b + j * bstride, D);
}

/* combine: y_i = sum_j c[i * ci + j * cj] x_j for i < ny, j < nx (ci, cj pick c or its
 * transpose); y_i is overwritten. Blocks of LANES columns are summed over j in registers. */
static void combine(float *restrict y, size_t ystride, const float *restrict c, size_t ci,
                    size_t cj, const float *restrict x, size_t xstride, size_t ny, size_t nx,
                    size_t D) {
    enum { LANES = 32 };
    for (size_t i = 0; i < ny; i++) {
        float *yi = y + i * ystride;
        const float *crow = c + i * ci;
        size_t d = 0;
        for (; d + LANES <= D; d += LANES) {
            float acc[LANES] = {0};
            for (size_t j = 0; j < nx; j++) {
                const float cij = crow[j * cj], *xj = x + j * xstride + d;
                UNROLL
                for (int k = 0; k < LANES; k++) acc[k] += cij * xj[k];
            }
            UNROLL
            for (int k = 0; k < LANES; k++) yi[d + k] = acc[k];
        }
        for (; d + CHUNK <= D; d += CHUNK) {
            float acc[CHUNK] = {0};
            for (size_t j = 0; j < nx; j++) {
                const float cij = crow[j * cj], *xj = x + j * xstride + d;
                UNROLL
                for (int k = 0; k < CHUNK; k++) acc[k] += cij * xj[k];
            }
            UNROLL
            for (int k = 0; k < CHUNK; k++) yi[d + k] = acc[k];
        }
        for (; d < D; d++) {
            float acc = 0.0f;
            for (size_t j = 0; j < nx; j++) acc += crow[j * cj] * x[j * xstride + d];
            yi[d] = acc;
        }
    }
}

/* p[s] = softmax(scale * p)[s] in place, scale > 0 (max subtracted). */
static void softmax_row(float *p, size_t n, float scale) {
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
            const float e = exp_approx((p[s + k] - mx) * scale);
            p[s + k] = e;
            acc[k] += e;
        }
    }
    float sum = chunk_total(acc);
    for (; s < n; s++) {
        p[s] = exp_approx((p[s] - mx) * scale);
        sum += p[s];
    }
    const float inv = 1.0f / sum;
    s = 0;
    for (; s + CHUNK <= n; s += CHUNK) {
        UNROLL
        for (int k = 0; k < CHUNK; k++) p[s + k] *= inv;
    }
    for (; s < n; s++) p[s] *= inv;
}

/* For each sample b and head h (q, k, v: that head's D columns, rows C3 = 3C apart):
 * P = softmax(q k^T / sqrt(D)) row by row, out = P v. T is small (17 for vit-tiny), so these
 * are register-blocked loops, not GEMM calls per head. */
void cpu_attention_forward(float *restrict out, float *restrict probs, const float *restrict qkv,
                           size_t B, size_t T, size_t C, size_t heads) {
    if (heads == 0 || C == 0 || T == 0) return;
    const size_t D = C / heads, C3 = 3 * C;
    const float scale = (float)(1.0 / sqrt((double)D));
    for (size_t b = 0; b < B; b++)
        for (size_t h = 0; h < heads; h++) {
            const float *q = qkv + b * T * C3 + h * D, *k = q + C, *v = q + 2 * C;
            float *P = probs + (b * heads + h) * T * T;
            for (size_t t = 0; t < T; t++) {
                float *p = P + t * T;
                row_dots(p, q + t * C3, k, C3, T, D);
                softmax_row(p, T, scale);
            }
            combine(out + b * T * C + h * D, C, P, T, 1, v, C3, T, T, D);
        }
}

/* For each sample and head, with a T x T tile on the stack:
 * dP = dout v^T; dS = P * (dP - rowsum(dP * P)) / sqrt(D) (the tile, in place);
 * dv = P^T dout; dq = dS k; dk = dS^T q. Every column of dqkv is written exactly once. */
void cpu_attention_backward(float *restrict dqkv, const float *restrict dout,
                            const float *restrict qkv, const float *restrict probs, size_t B,
                            size_t T, size_t C, size_t heads) {
    if (heads == 0 || C == 0 || T == 0) return;
    const size_t D = C / heads, C3 = 3 * C;
    const float scale = (float)(1.0 / sqrt((double)D));
    float dS[KERNELS_MAX_TOKENS * KERNELS_MAX_TOKENS];
    for (size_t b = 0; b < B; b++)
        for (size_t h = 0; h < heads; h++) {
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
}

/* ---- patches, tokens, class token ---- */

void cpu_patchify(float *restrict patches, const float *restrict images, size_t B, size_t S,
                  size_t P) {
    if (P == 0) return;
    const size_t G = S / P; /* patches per side */
    for (size_t b = 0; b < B; b++) {
        const float *img = images + b * S * S;
        for (size_t py = 0; py < G; py++)
            for (size_t px = 0; px < G; px++) {
                float *dst = patches + ((b * G + py) * G + px) * P * P;
                for (size_t ky = 0; ky < P; ky++) {
                    const float *src = img + (py * P + ky) * S + px * P;
                    for (size_t kx = 0; kx < P; kx++) dst[ky * P + kx] = src[kx];
                }
            }
    }
}

/* out[i] = a[i] + b[i]; every element of a chunk is read before any is written, so out may be
 * a or b. */
void cpu_add(float *out, const float *a, const float *b, size_t n) {
    size_t i = 0;
    for (; i + CHUNK <= n; i += CHUNK) {
        float t[CHUNK];
        UNROLL
        for (int k = 0; k < CHUNK; k++) t[k] = a[i + k] + b[i + k];
        UNROLL
        for (int k = 0; k < CHUNK; k++) out[i + k] = t[k];
    }
    for (; i < n; i++) out[i] = a[i] + b[i];
}

void cpu_embed_forward(float *restrict x, const float *restrict patch_out,
                       const float *restrict cls, const float *restrict pos, size_t B, size_t T,
                       size_t C) {
    if (T == 0) return;
    for (size_t b = 0; b < B; b++) {
        float *xb = x + b * T * C;
        cpu_add(xb, cls, pos, C);
        /* rows 1..T-1 of the sample and of pos are contiguous: one add */
        cpu_add(xb + C, patch_out + b * (T - 1) * C, pos + C, (T - 1) * C);
    }
}

void cpu_embed_backward(float *restrict dcls, float *restrict dpos, float *restrict dpatch_out,
                        const float *restrict dx, size_t B, size_t T, size_t C) {
    if (T == 0 || C == 0) return;
    colsum_add(dcls, dx, B, C, T * C);
    colsum_add(dpos, dx, B, T * C, T * C);
    if (T > 1)
        for (size_t b = 0; b < B; b++)
            memcpy(dpatch_out + b * (T - 1) * C, dx + (b * T + 1) * C, (T - 1) * C * sizeof(float));
}

void cpu_class_token_select(float *restrict out, const float *restrict x, size_t B, size_t T,
                            size_t C) {
    if (C == 0) return;
    for (size_t b = 0; b < B; b++) memcpy(out + b * C, x + b * T * C, C * sizeof(float));
}

void cpu_class_token_select_backward(float *restrict dx, const float *restrict dout, size_t B,
                                     size_t T, size_t C) {
    for (size_t b = 0; b < B; b++) cpu_add(dx + b * T * C, dx + b * T * C, dout + b * C, C);
}

/* ---- loss and accuracy ---- */

float cpu_cross_entropy(float *restrict dlogits, const float *restrict logits,
                        const int32_t *restrict labels, size_t B, size_t classes,
                        float grad_scale) {
    if (B == 0 || classes == 0) return 0.0f;
    const float g = grad_scale / (float)B;
    double total = 0.0;
    for (size_t i = 0; i < B; i++) {
        const float *z = logits + i * classes;
        const size_t y = labels[i] < 0 ? classes : (size_t)labels[i];
        float mx = z[0];
        for (size_t j = 1; j < classes; j++)
            if (z[j] > mx) mx = z[j];
        double sum = 0.0;
        if (dlogits) {
            float *d = dlogits + i * classes;
            for (size_t j = 0; j < classes; j++) {
                d[j] = expf(z[j] - mx); /* the exponentials, normalised below */
                sum += d[j];
            }
            const float inv = (float)(1.0 / sum);
            for (size_t j = 0; j < classes; j++) d[j] = (d[j] * inv - (j == y ? 1.0f : 0.0f)) * g;
        } else {
            for (size_t j = 0; j < classes; j++) sum += expf(z[j] - mx);
        }
        /* a label outside [0, classes) makes the loss NaN (callers check finiteness) rather
         * than reading past the row */
        total += y < classes ? (double)mx + log(sum) - (double)z[y] : NAN;
    }
    return (float)(total / (double)B);
}

size_t cpu_count_correct(const float *logits, const int32_t *labels, size_t B, size_t classes) {
    if (classes == 0) return 0;
    size_t correct = 0;
    for (size_t i = 0; i < B; i++) {
        const float *z = logits + i * classes;
        size_t best = 0;
        for (size_t j = 1; j < classes; j++)
            if (z[j] > z[best]) best = j; /* strict: the first maximum wins ties */
        correct += (labels[i] >= 0 && (size_t)labels[i] == best);
    }
    return correct;
}
