/* cpu_math: the CPU kernels' shared inner loops, private to kernels/cpu: fixed CHUNK-wide sums
 * that GCC vectorises at -O2 and that add their partial sums in one fixed order (so a result
 * depends only on its inputs), and the inline exp and erf the softmax and GELU use (vit_cpu.c's
 * opening comment says why each is written so). */
#ifndef FSDP_CPU_MATH_H
#define FSDP_CPU_MATH_H

#include <math.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#define CHUNK 8
/* Fully unrolls a fixed-length inner loop: GCC then keeps its accumulators in vector registers
 * (vectorised but not unrolled, they live on the stack, a load and a store per step). */
#define UNROLL _Pragma("GCC unroll 64")

/* ---- small helpers: fixed CHUNK-wide bodies so they vectorise at -O2 ---- */

/* The largest of z[0..n) by a strict scan from z[0] (n >= 1): a NaN there stays the maximum, a
 * NaN elsewhere is passed over. The losses' rows (vit_cpu.c, loss_cpu.c) and the GPU's. */
static inline float row_max(const float *z, size_t n) {
    float mx = z[0];
    for (size_t j = 1; j < n; j++)
        if (z[j] > mx) mx = z[j];
    return mx;
}

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

/* e^x for x <= 0 (every caller: softmax terms after the max, erf's tail, GELU's density), in
 * float: Cephes expf (range reduction by ln 2 in two parts, degree-6 polynomial), about 1 ulp.
 * Below -87.3 the result is e^-87.3 = 1.2e-38 instead of a denormal or 0, which no caller can
 * tell apart. No call and no float comparison, so loops over it vectorise: the clamp is an
 * unsigned min on the bit patterns (a larger negative float has a larger pattern), because
 * GCC turns a float clamp into a branch and folds the clamped path. A run that diverged brings
 * what no caller means to (a nan, inf - inf), and those must not be undefined behaviour: 2^n is
 * built from the integer the rounding leaves in t's low bits, in uint32 arithmetic, not by
 * converting n to int32 (a nan or a huge n is undefined there, and n + 127 overflowed). So a
 * positive nan or +inf gives nan, a negative nan (what inf - inf makes on x86) clamps like
 * -inf, and x > 88.7, which no caller passes, gives a wrong number, never undefined behaviour. */
static inline float exp_approx(float x) {
    uint32_t bits;
    memcpy(&bits, &x, sizeof bits);
    const uint32_t lowest = 0xc2ae999au; /* -87.3f */
    bits = bits < lowest ? bits : lowest;
    float xc;
    memcpy(&xc, &bits, sizeof xc);
    const float round_magic = 12582912.0f; /* 1.5 * 2^23: adding it rounds to an integer */
    const float t = xc * 1.44269504088896341f + round_magic;
    const float n = t - round_magic; /* t's bits are 0x4b400000 + n, n in [-126, 127] */
    float r = xc - n * 0.693359375f;
    r = r + n * 2.12194440e-4f;
    float p = 1.9875691500e-4f;
    p = p * r + 1.3981999507e-3f;
    p = p * r + 8.3334519073e-3f;
    p = p * r + 4.1665795894e-2f;
    p = p * r + 1.6666665459e-1f;
    p = p * r + 5.0000001201e-1f;
    const float y = p * r * r + r + 1.0f;
    uint32_t t_bits;
    memcpy(&t_bits, &t, sizeof t_bits);
    const uint32_t pow2_bits = (t_bits - 0x4b400000u + 127u) << 23;
    float two_n;
    memcpy(&two_n, &pow2_bits, sizeof two_n);
    return y * two_n;
}

/* exp_approx, but a nan of either sign comes back as itself (selected by a mask, not a branch):
 * for softmax, where the term of a row whose maximum is inf is inf - inf, a negative nan, and must
 * make the row nan rather than weigh e^-87.3 like every other term (a uniform row, out of
 * nothing). GELU needs no such care: its other factors carry a nan through. */
static inline float exp_approx_nan(float x) {
    const float e = exp_approx(x);
    uint32_t in, out;
    memcpy(&in, &x, sizeof in);
    memcpy(&out, &e, sizeof out);
    const uint32_t is_nan = 0u - (uint32_t)((in & 0x7fffffffu) > 0x7f800000u);
    out = (out & ~is_nan) | (in & is_nan);
    float result;
    memcpy(&result, &out, sizeof result);
    return result;
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

#endif
