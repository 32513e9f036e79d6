/* The CPU op table and dtype conversions: bf16/fp16 rounding against known bit patterns and
 * exhaustive ties, casts, Adam/AdamW against a double-precision reference, the toy layer's
 * gradients against finite differences, and the reductions. */
#include <criterion/criterion.h>
#include <float.h>
#include <math.h>
#include <stdint.h>
#include <string.h>

#include "kernels/dtype.h"
#include "kernels/kernels.h"
#include "tests/util.h"

static int bf16_is_nan(uint16_t h) {
    return (h & 0x7f80) == 0x7f80 && (h & 0x007f);
}

static int fp16_is_nan(uint16_t h) {
    return (h & 0x7c00) == 0x7c00 && (h & 0x03ff);
}

Test(dtype, names_sizes_and_parse) {
    const char *names[] = {"fp32", "bf16", "fp16"};
    size_t sizes[] = {4, 2, 2};
    for (int t = 0; t < DTYPE_COUNT; t++) {
        DType got = DTYPE_COUNT;
        cr_expect_str_eq(dtype_name((DType)t), names[t]);
        cr_expect_eq(dtype_size((DType)t), sizes[t]);
        cr_expect_eq(dtype_parse(names[t], &got), 0);
        cr_expect_eq(got, (DType)t);
    }
    DType t = DTYPE_FP32;
    cr_expect(dtype_parse("bfloat16", &t) == 0 && t == DTYPE_BF16, "PyTorch's spelling");
    cr_expect_eq(dtype_parse("fp8", &t), -1);
    cr_expect_eq(dtype_parse("", &t), -1);
    cr_expect_eq(dtype_parse("FP32x", &t), -1);
}

Test(dtype, bf16_known_patterns) {
    cr_expect_eq(fp32_to_bf16(1.0f), 0x3f80);
    cr_expect_eq(fp32_to_bf16(-2.0f), 0xc000);
    cr_expect_eq(fp32_to_bf16(0.0f), 0x0000);
    cr_expect_eq(fp32_to_bf16(-0.0f), 0x8000);
    /* exactly halfway: to the even neighbour, down and up */
    cr_expect_eq(fp32_to_bf16(fp32_from_bits(0x3f808000)), 0x3f80);
    cr_expect_eq(fp32_to_bf16(fp32_from_bits(0x3f818000)), 0x3f82);
    /* one ulp either side of halfway */
    cr_expect_eq(fp32_to_bf16(fp32_from_bits(0x3f808001)), 0x3f81);
    cr_expect_eq(fp32_to_bf16(fp32_from_bits(0x3f807fff)), 0x3f80);
    cr_expect_eq(fp32_to_bf16(INFINITY), 0x7f80);
    cr_expect_eq(fp32_to_bf16(-INFINITY), 0xff80);
    cr_expect_eq(fp32_to_bf16(FLT_MAX), 0x7f80, "FLT_MAX is past bf16's max plus half an ulp");
    cr_expect(bf16_is_nan(fp32_to_bf16(NAN)));
    /* a NaN whose payload sits only in the dropped bits must not turn into inf */
    uint16_t snan = fp32_to_bf16(fp32_from_bits(0x7f800001));
    cr_expect(bf16_is_nan(snan), "0x7f800001 -> 0x%04x", snan);
    cr_expect(bf16_is_nan(fp32_to_bf16(fp32_from_bits(0xffffffff))));
    cr_expect_eq(bf16_to_fp32(0x3f80), 1.0f);
    cr_expect_eq(bf16_to_fp32(0xc040), -3.0f);
    cr_expect(isnan(bf16_to_fp32(0x7fc0)));
}

Test(dtype, fp16_known_patterns) {
    struct {
        float x;
        uint16_t h;
    } cases[] = {
        {1.0f, 0x3c00},
        {-2.0f, 0xc000},
        {0.1f, 0x2e66},
        {65504.0f, 0x7bff},
        {65519.0f, 0x7bff},
        {65520.0f, 0x7c00}, /* halfway to 2^16 rounds to even: inf */
        {-65520.0f, 0xfc00},
        {1e10f, 0x7c00},
        {INFINITY, 0x7c00},
        {-INFINITY, 0xfc00},
        {0x1p-14f, 0x0400}, /* smallest normal */
        {0x1p-24f, 0x0001}, /* smallest subnormal */
        {0x1p-25f, 0x0000}, /* halfway to it: ties to even zero */
        {0x1.000002p-25f, 0x0001},
        {0x3p-25f, 0x0002},   /* 1.5 units: to even */
        {0x5p-25f, 0x0002},   /* 2.5 units: to even */
        {0x3ffp-24f, 0x03ff}, /* largest subnormal */
        {0x7ffp-25f, 0x0400}, /* halfway from it to the smallest normal: up to even */
        {-0x1p-24f, 0x8001},
        {-0.0f, 0x8000},
        {1e-30f, 0x0000},
        {fp32_from_bits(0x00000001), 0x0000}, /* fp32 subnormal */
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        uint16_t h = fp32_to_fp16(cases[i].x);
        cr_expect_eq(h, cases[i].h, "%a -> 0x%04x, want 0x%04x", cases[i].x, h, cases[i].h);
    }
    cr_expect(fp16_is_nan(fp32_to_fp16(NAN)));
    cr_expect(fp16_is_nan(fp32_to_fp16(fp32_from_bits(0x7f800001))));
    cr_expect(fp16_is_nan(fp32_to_fp16(fp32_from_bits(0xffc00000))));
    cr_expect_eq(fp16_to_fp32(0x3c00), 1.0f);
    cr_expect_eq(fp16_to_fp32(0x0001), 0x1p-24f);
    cr_expect_eq(fp16_to_fp32(0x83ff), -0x3ffp-24f);
    cr_expect_eq(fp16_to_fp32(0x7bff), 65504.0f);
    cr_expect(isinf(fp16_to_fp32(0xfc00)) && fp16_to_fp32(0xfc00) < 0);
    cr_expect(isnan(fp16_to_fp32(0x7e00)));
    cr_expect(signbit(fp16_to_fp32(0x8000)) && fp16_to_fp32(0x8000) == 0.0f);
}

Test(dtype, every_fp16_and_bf16_round_trips) {
    for (uint32_t i = 0; i < 65536; i++) {
        uint16_t h = (uint16_t)i;
        float f = fp16_to_fp32(h);
        if (fp16_is_nan(h)) {
            cr_assert(isnan(f), "fp16 0x%04x", h);
            cr_assert(fp16_is_nan(fp32_to_fp16(f)), "fp16 0x%04x", h);
        } else {
            cr_assert_eq(fp32_to_fp16(f), h, "fp16 0x%04x -> %a -> 0x%04x", h, f, fp32_to_fp16(f));
        }
        f = bf16_to_fp32(h);
        if (bf16_is_nan(h)) {
            cr_assert(isnan(f), "bf16 0x%04x", h);
            cr_assert(bf16_is_nan(fp32_to_bf16(f)), "bf16 0x%04x", h);
        } else {
            cr_assert_eq(fp32_to_bf16(f), h, "bf16 0x%04x -> %a -> 0x%04x", h, f, fp32_to_bf16(f));
        }
    }
}

/* Every midpoint between neighbouring positive values ties to the even one, and one fp32 ulp
 * either side goes to the nearer; negatives mirror it. */
Test(dtype, every_midpoint_ties_to_even) {
    for (uint32_t lo = 0; lo <= 0x7f7f; lo++) {
        uint32_t even = (lo & 1) ? lo + 1 : lo;
        uint32_t mid = (lo << 16) | 0x8000;
        for (uint32_t sign = 0; sign <= 0x8000; sign += 0x8000) {
            uint32_t s32 = sign << 16;
            cr_assert_eq(fp32_to_bf16(fp32_from_bits(s32 | mid)), sign | even, "bf16 mid 0x%08x",
                         mid);
            cr_assert_eq(fp32_to_bf16(fp32_from_bits(s32 | (mid - 1))), sign | lo);
            cr_assert_eq(fp32_to_bf16(fp32_from_bits(s32 | (mid + 1))), sign | (lo + 1));
        }
    }
    for (uint16_t lo = 0; lo <= 0x7bff; lo++) {
        float a = fp16_to_fp32(lo);
        float b = lo == 0x7bff ? 65536.0f : fp16_to_fp32((uint16_t)(lo + 1));
        float mid = (a + b) / 2; /* exact: one more bit than fp16 carries */
        uint16_t even = (lo & 1) ? (uint16_t)(lo + 1) : lo;
        for (int neg = 0; neg <= 1; neg++) {
            float s = neg ? -1.0f : 1.0f;
            uint16_t sign = neg ? 0x8000 : 0;
            cr_assert_eq(fp32_to_fp16(s * mid), sign | even, "fp16 mid %a", mid);
            cr_assert_eq(fp32_to_fp16(s * nextafterf(mid, 0.0f)), sign | lo, "below %a", mid);
            cr_assert_eq(fp32_to_fp16(s * nextafterf(mid, INFINITY)), sign | (lo + 1), "above %a",
                         mid);
        }
    }
}

/* Random fp32 inputs: no neighbour of the result is nearer, and a tie picks the even one. */
static void expect_nearest(float x, uint16_t h, float (*widen)(uint16_t), uint16_t inf) {
    uint16_t mag = h & 0x7fff;
    double ax = fabs((double)x), d = fabs(ax - (double)widen(mag));
    cr_assert_eq(h & 0x8000, signbit(x) ? 0x8000 : 0, "%a: sign", x);
    cr_assert(mag < inf, "%a overflowed to 0x%04x", x, h);
    if (mag > 0) {
        double dn = fabs(ax - (double)widen((uint16_t)(mag - 1)));
        cr_assert(d < dn || (d == dn && !(mag & 1)), "%a -> 0x%04x, below is nearer", x, h);
    }
    if (mag + 1 < inf) {
        double dn = fabs(ax - (double)widen((uint16_t)(mag + 1)));
        cr_assert(d < dn || (d == dn && !(mag & 1)), "%a -> 0x%04x, above is nearer", x, h);
    }
}

Test(dtype, random_values_round_to_nearest) {
    uint32_t s = 0x9e3779b9u;
    for (int i = 0; i < 200000; i++) {
        uint32_t u = xorshift32(&s);
        float x = fp32_from_bits(u);
        if (isfinite(x) && fabsf(x) < 0x1.fefp127f)
            expect_nearest(x, fp32_to_bf16(x), bf16_to_fp32, 0x7f80);
        /* exponents from far below fp16's subnormals up to just past its max */
        uint32_t e = 90 + xorshift32(&s) % 53;
        x = fp32_from_bits((u & 0x807fffffu) | (e << 23));
        if (fabsf(x) < 65520.0f)
            expect_nearest(x, fp32_to_fp16(x), fp16_to_fp32, 0x7c00);
        else
            cr_assert_eq(fp32_to_fp16(x) & 0x7fff, 0x7c00, "%a", x);
    }
}

/* dtype_widen and dtype_narrow go in vectorized blocks with a one-at-a-time remainder: each
 * element, at every position of a block and of the remainder, gets the scalar conversion's
 * bits, NaNs (every payload a quiet one), infinities, the largest floats and ties among them. */
Test(dtype, bulk_conversions_give_the_scalar_bits) {
    enum { MAX = 67 };
    const uint32_t special[] = {0x7f800000u, 0xff800000u, 0x7f800001u, 0xffc00000u, 0x7fbfffffu,
                                0x7f7fffffu, 0x7f7f8000u, 0x7f7e8000u, 0x00000001u, 0x80008000u,
                                0x3f808000u, 0x3f818000u, 0x00000000u, 0x80000000u};
    const size_t nspecial = sizeof special / sizeof special[0];
    uint32_t seed = 0x2545f491u;
    float f[MAX] = {0}, back[MAX] = {0};
    uint16_t h[MAX] = {0};
    for (size_t n = 0; n <= MAX; n++) {
        for (size_t i = 0; i < n; i++) {
            uint32_t r = xorshift32(&seed);
            f[i] = fp32_from_bits((r & 3) ? special[(r >> 2) % nspecial] : xorshift32(&seed));
        }
        dtype_narrow(h, DTYPE_BF16, f, n);
        dtype_widen(back, h, DTYPE_BF16, n);
        for (size_t i = 0; i < n; i++) {
            cr_assert_eq(h[i], fp32_to_bf16(f[i]), "n %zu, [%zu] 0x%08x", n, i, fp32_bits(f[i]));
            cr_assert_eq(fp32_bits(back[i]), fp32_bits(bf16_to_fp32(h[i])), "n %zu, [%zu]", n, i);
        }
    }
}

Test(dtype, round_is_round_trip) {
    float xs[] = {0.1f, -3.14159f, 1e-6f, 70000.0f, 1e-8f, 0x1.fffffep-1f};
    for (size_t i = 0; i < sizeof xs / sizeof xs[0]; i++) {
        float x = xs[i];
        cr_expect_eq(fp32_bits(dtype_round(DTYPE_FP32, x)), fp32_bits(x));
        cr_expect_eq(fp32_bits(dtype_round(DTYPE_BF16, x)),
                     fp32_bits(bf16_to_fp32(fp32_to_bf16(x))));
        cr_expect_eq(fp32_bits(dtype_round(DTYPE_FP16, x)),
                     fp32_bits(fp16_to_fp32(fp32_to_fp16(x))));
    }
    cr_expect_eq(dtype_round(DTYPE_FP16, 70000.0f), INFINITY);
    cr_expect_eq(dtype_round(DTYPE_BF16, 0x1.fffffep-1f), 1.0f);
}

/* A mix of ordinary, tiny, huge, tie and special values. */
#define NCAST 16
static void cast_inputs(float *x) {
    float v[NCAST] = {1.0f,  -2.5f, 0.1f,      65504.0f, 65520.0f, 1e-7f,     0x1p-25f, 3e38f,
                      -0.0f, NAN,   -INFINITY, 1e-40f,   0.3333f,  -123.456f, 0x3p-25f, 7.0f};
    memcpy(x, v, sizeof v);
    x[12] = fp32_from_bits(0x3f818000); /* a bf16 tie */
}

static uint16_t scalar_to(DType t, float x) {
    return t == DTYPE_BF16 ? fp32_to_bf16(x) : fp32_to_fp16(x);
}

static float scalar_from(DType t, uint16_t h) {
    return t == DTYPE_BF16 ? bf16_to_fp32(h) : fp16_to_fp32(h);
}

Test(kernels, cast_matches_scalar_conversions) {
    const Kernels *k = &kernels_cpu;
    cr_expect_str_eq(k->name, "cpu");
    float x[NCAST], back[NCAST];
    uint16_t half[NCAST], other[NCAST];
    cast_inputs(x);
    k->cast(back, DTYPE_FP32, x, DTYPE_FP32, NCAST);
    cr_expect_eq(memcmp(back, x, sizeof x), 0, "fp32 -> fp32 copies bits");
    DType lowp[] = {DTYPE_BF16, DTYPE_FP16};
    for (int a = 0; a < 2; a++) {
        DType t = lowp[a], u = lowp[1 - a];
        k->cast(half, t, x, DTYPE_FP32, NCAST);
        k->cast(back, DTYPE_FP32, half, t, NCAST);
        k->cast(other, u, half, t, NCAST);
        for (int i = 0; i < NCAST; i++) {
            cr_expect_eq(half[i], scalar_to(t, x[i]), "%s [%d]", dtype_name(t), i);
            cr_expect_eq(fp32_bits(back[i]), fp32_bits(scalar_from(t, half[i])), "[%d]", i);
            cr_expect_eq(other[i], scalar_to(u, scalar_from(t, half[i])), "%s -> %s [%d]",
                         dtype_name(t), dtype_name(u), i);
        }
        uint16_t same[NCAST];
        k->cast(same, t, half, t, NCAST);
        cr_expect_eq(memcmp(same, half, sizeof half), 0);
    }
    k->cast(NULL, DTYPE_FP16, NULL, DTYPE_FP32, 0);
    k->cast(NULL, DTYPE_FP32, NULL, DTYPE_FP32, 0);
}

/* One Adam/AdamW step in double, straight from the PyTorch documentation's pseudocode. */
static void adam_ref(double *p, double g, double *m, double *v, const AdamHyper *h, long step) {
    if (h->decoupled)
        *p *= 1.0 - (double)h->lr * h->weight_decay;
    else
        g += (double)h->weight_decay * *p;
    *m = h->beta1 * *m + (1.0 - h->beta1) * g;
    *v = h->beta2 * *v + (1.0 - h->beta2) * g * g;
    double bc1 = 1.0 - pow(h->beta1, (double)step), bc2 = 1.0 - pow(h->beta2, (double)step);
    *p -= h->lr * (*m / bc1) / (sqrt(*v / bc2) + h->eps);
}

#define NADAM 8
static const float adam_p0[NADAM] = {1.0f, -2.0f, 0.5f, 3.0f, -0.25f, 10.0f, 0.0f, -7.5f};

/* Gradients change size and sometimes sign between steps so that m/sqrt(v) is not just
 * sign(g) and L2 decay visibly changes the result. */
static float adam_grad(int i, long step) {
    return (0.3f * (float)(i - 3) + 0.05f) * (1.0f + 0.7f * (float)step) - 0.4f * (float)(step & 1);
}

/* Runs 3 steps of the kernel and of the reference; returns the largest relative error. */
static double adam_run(const AdamHyper *kh, const AdamHyper *rh) {
    float p[NADAM], m[NADAM] = {0}, v[NADAM] = {0}, g[NADAM];
    double rp[NADAM], rm[NADAM] = {0}, rv[NADAM] = {0}, worst = 0;
    for (int i = 0; i < NADAM; i++) rp[i] = p[i] = adam_p0[i];
    for (long step = 1; step <= 3; step++) {
        for (int i = 0; i < NADAM; i++) g[i] = adam_grad(i, step);
        kernels_cpu.adam_step(p, g, m, v, NADAM, kh, step);
        for (int i = 0; i < NADAM; i++) adam_ref(&rp[i], g[i], &rm[i], &rv[i], rh, step);
    }
    for (int i = 0; i < NADAM; i++) {
        double e = fabs(p[i] - rp[i]) / fmax(fabs(rp[i]), 1e-3);
        worst = fmax(worst, e);
        worst = fmax(worst, fabs(m[i] - rm[i]) / fmax(fabs(rm[i]), 1e-3) / 10);
        worst = fmax(worst, fabs(v[i] - rv[i]) / fmax(fabs(rv[i]), 1e-3) / 10);
    }
    return worst;
}

/* A batched copy: each span's elements rounded once to dst's type at its own offset, its padding
 * zero, and the gaps between spans untouched (0xFFFF); spans taken in any order of src. */
Test(kernels, copy_spans_casts_pads_and_leaves_gaps) {
    const float src[8] = {1.0f, -2.5f, 3.0f, 1.00390625f, 5.0f, 6.0f, 7.0f, 1e-3f};
    const CopySpan spans[] = {
        {.dst_at = 1, .src_at = 5, .n = 3, .pad = 2},  /* 6, 7, 1e-3, then 0, 0 */
        {.dst_at = 8, .src_at = 0, .n = 4, .pad = 0},  /* 1, -2.5, 3, 1.0039 */
        {.dst_at = 13, .src_at = 0, .n = 0, .pad = 1}, /* padding only */
    };
    uint16_t dst[15];
    memset(dst, 0xFF, sizeof dst);
    kernels_cpu.copy_spans(dst, DTYPE_BF16, src, DTYPE_FP32, spans, 3);
    const int from[15] = {-1, 5, 6, 7, -2, -2, -1, -1, 0, 1, 2, 3, -1, -2, -1};
    for (int i = 0; i < 15; i++) {
        uint16_t want = from[i] >= 0 ? fp32_to_bf16(src[from[i]]) : from[i] == -2 ? 0 : 0xFFFF;
        cr_expect_eq(dst[i], want, "dst[%d]: 0x%04x, want 0x%04x", i, dst[i], want);
    }
    cr_expect_eq(dst[11], 0x3f80, "1.00390625 ties to even in bf16: 0x%04x", dst[11]);
    float back[4];
    memset(back, 0xFF, sizeof back);
    const CopySpan widen = {.dst_at = 0, .src_at = 8, .n = 4, .pad = 0};
    kernels_cpu.copy_spans(back, DTYPE_FP32, dst, DTYPE_BF16, &widen, 1);
    cr_expect(back[0] == 1.0f && back[1] == -2.5f && back[2] == 3.0f && back[3] == 1.0f,
              "widened: %g %g %g %g", back[0], back[1], back[2], back[3]);
    kernels_cpu.copy_spans(back, DTYPE_FP32, src, DTYPE_FP32, spans, 0); /* no spans */
    cr_expect_eq(back[0], 1.0f);
}

Test(kernels, adam_and_adamw_match_double_reference) {
    for (int decoupled = 0; decoupled <= 1; decoupled++) {
        AdamHyper h = {.lr = 0.05f,
                       .beta1 = 0.9f,
                       .beta2 = 0.999f,
                       .eps = 1e-8f,
                       .weight_decay = 0.1f,
                       .decoupled = decoupled};
        double err = adam_run(&h, &h);
        cr_expect_leq(err, 1e-6, "%s: relative error %g", decoupled ? "AdamW" : "Adam", err);
        /* the check can tell the variants apart, and decay from none */
        AdamHyper other = h, plain = h;
        other.decoupled = !decoupled;
        plain.weight_decay = 0.0f;
        cr_expect_gt(adam_run(&h, &other), 1e-4);
        cr_expect_gt(adam_run(&h, &plain), 1e-4);
        cr_expect_leq(adam_run(&plain, &plain), 1e-6);
    }
}

/* The kernel updates eight elements at a time as vectors and the rest one by one: every element,
 * in the vector body or the tail, must get exactly the float arithmetic of this scalar form of
 * PyTorch's update (the kernel's per-call constants computed the same way). */
static void adam_scalar(float *p, float g, float *m, float *v, const AdamHyper *h, long step) {
    const float step_size = (float)((double)h->lr / (1.0 - pow((double)h->beta1, (double)step)));
    const float bc2_sqrt = (float)sqrt(1.0 - pow((double)h->beta2, (double)step));
    const float decay = (float)(1.0 - (double)h->lr * (double)h->weight_decay);
    float x = *p;
    if (!h->decoupled && h->weight_decay != 0.0f) g += h->weight_decay * x;
    if (h->decoupled && h->weight_decay != 0.0f) x *= decay;
    *m = h->beta1 * *m + (1.0f - h->beta1) * g;
    *v = h->beta2 * *v + (1.0f - h->beta2) * g * g;
    *p = x - step_size * *m / (sqrtf(*v) / bc2_sqrt + h->eps);
}

Test(kernels, adam_vector_body_and_tail_match_the_scalar_update_bit_for_bit) {
    enum { N = 37 }; /* four vectors of eight and a tail of five */
    for (int variant = 0; variant < 3; variant++) {
        AdamHyper h = {.lr = 0.05f,
                       .beta1 = 0.9f,
                       .beta2 = 0.999f,
                       .eps = 1e-8f,
                       .weight_decay = variant ? 0.1f : 0.0f,
                       .decoupled = variant == 2};
        float p[N], m[N] = {0}, v[N] = {0}, g[N], sp[N], sm[N] = {0}, sv[N] = {0};
        for (int i = 0; i < N; i++) sp[i] = p[i] = adam_p0[i % NADAM] * (1.0f + 0.01f * (float)i);
        for (long step = 1; step <= 3; step++) {
            for (int i = 0; i < N; i++) g[i] = adam_grad(i % 11, step);
            kernels_cpu.adam_step(p, g, m, v, N, &h, step);
            for (int i = 0; i < N; i++) adam_scalar(&sp[i], g[i], &sm[i], &sv[i], &h, step);
        }
        cr_expect_eq(memcmp(p, sp, sizeof p), 0, "variant %d: parameters differ", variant);
        cr_expect_eq(memcmp(m, sm, sizeof m), 0, "variant %d: first moments differ", variant);
        cr_expect_eq(memcmp(v, sv, sizeof v), 0, "variant %d: second moments differ", variant);
    }
}

static const float toy_w[3] = {1.3f, 0.8f, -0.2f};
#define NTOY 6
static const float toy_x[NTOY] = {-1.5f, -0.4f, 0.0f, 0.3f, 1.1f, 2.0f};
static const float toy_t[NTOY] = {0.5f, -0.7f, 0.2f, 0.9f, -0.3f, 1.2f};

static float toy_loss(const float w[3], const float *x) {
    float y[NTOY], dy[NTOY];
    kernels_cpu.toy_forward(DTYPE_FP32, w, x, y, NTOY);
    return kernels_cpu.mse_loss(DTYPE_FP32, y, toy_t, dy, NTOY);
}

/* 1e-3 relative, plus a floor for the float loss: its last bit (~3e-8 here) over 2h. */
static void expect_close(double got, double want, const char *what, int i) {
    double tol = 1e-3 * fabs(want) + 5e-5;
    cr_expect(fabs(got - want) <= tol, "%s[%d]: analytic %.7g, finite difference %.7g", what, i,
              got, want);
}

Test(kernels, toy_forward_values_and_in_place) {
    const float w[3] = {2.0f, 0.5f, -1.0f};
    float x[3] = {2.0f, 4.0f, -2.0f}, y[3];
    kernels_cpu.toy_forward(DTYPE_FP32, w, x, y, 3);
    cr_expect_float_eq(y[0], 0.0f, 1e-7);
    cr_expect_float_eq(y[1], 2.0f * tanhf(1.0f), 1e-6);
    cr_expect_float_eq(y[2], 2.0f * tanhf(-2.0f), 1e-6);
    kernels_cpu.toy_forward(DTYPE_FP32, w, x, x, 3); /* the data set builds targets in place */
    cr_expect_eq(memcmp(x, y, sizeof y), 0);
}

Test(kernels, toy_backward_matches_finite_differences) {
    const float h = 1e-3f;
    float y[NTOY], dy[NTOY], dx[NTOY];
    float dw[3] = {0.25f, -1.0f, 2.0f}; /* backward adds into dw */
    kernels_cpu.toy_forward(DTYPE_FP32, toy_w, toy_x, y, NTOY);
    kernels_cpu.mse_loss(DTYPE_FP32, y, toy_t, dy, NTOY);
    kernels_cpu.toy_backward(DTYPE_FP32, toy_w, toy_x, dy, dx, dw, NTOY);
    const float dw0[3] = {0.25f, -1.0f, 2.0f};
    for (int j = 0; j < 3; j++) {
        float wp[3], wm[3];
        memcpy(wp, toy_w, sizeof wp);
        memcpy(wm, toy_w, sizeof wm);
        wp[j] += h;
        wm[j] -= h;
        double fd = ((double)toy_loss(wp, toy_x) - toy_loss(wm, toy_x)) / (wp[j] - wm[j]);
        expect_close(dw[j] - dw0[j], fd, "dw", j);
    }
    for (int i = 0; i < NTOY; i++) {
        float xp[NTOY], xm[NTOY];
        memcpy(xp, toy_x, sizeof xp);
        memcpy(xm, toy_x, sizeof xm);
        xp[i] += h;
        xm[i] -= h;
        double fd = ((double)toy_loss(toy_w, xp) - toy_loss(toy_w, xm)) / (xp[i] - xm[i]);
        expect_close(dx[i], fd, "dx", i);
    }
    /* without dx the weight gradient is the same */
    float dw2[3] = {0.25f, -1.0f, 2.0f};
    kernels_cpu.toy_backward(DTYPE_FP32, toy_w, toy_x, dy, NULL, dw2, NTOY);
    cr_expect_eq(memcmp(dw, dw2, sizeof dw), 0);
}

Test(kernels, mse_loss_by_hand) {
    const float y[3] = {1.0f, 2.0f, 3.0f}, t[3] = {0.0f, 2.0f, 5.0f};
    float dy[3];
    float loss = kernels_cpu.mse_loss(DTYPE_FP32, y, t, dy, 3); /* diffs 1, 0, -2 */
    cr_expect_float_eq(loss, 5.0f / 3.0f, 1e-7);
    cr_expect_float_eq(dy[0], 2.0f / 3.0f, 1e-7);
    cr_expect_eq(dy[1], 0.0f);
    cr_expect_float_eq(dy[2], -4.0f / 3.0f, 1e-7);
    cr_expect_eq(kernels_cpu.mse_loss(DTYPE_FP32, NULL, NULL, NULL, 0), 0.0f);
}

Test(kernels, reductions_and_elementwise) {
    const Kernels *k = &kernels_cpu;
    const float a[4] = {1.0f, 2.0f, 3.0f, -4.0f};
    cr_expect_eq(k->sum_squares(a, 4), 30.0);
    /* 1e8 + 4 is exact in double; a float accumulator would stay at 1e8 */
    const float big[5] = {1e4f, 1.0f, 1.0f, 1.0f, 1.0f};
    cr_expect_eq(k->sum_squares(big, 5), 100000004.0);
    cr_expect_eq(k->sum_squares(NULL, 0), 0.0);

    float f[4] = {1.0f, FLT_MAX, -FLT_MIN, 0.0f};
    cr_expect_eq(k->all_finite(f, 4), 1);
    cr_expect_eq(k->all_finite(NULL, 0), 1);
    float specials[] = {NAN, INFINITY, -INFINITY};
    for (int i = 0; i < 3; i++) {
        float g[4] = {1.0f, 2.0f, 3.0f, 4.0f};
        g[3] = specials[i];
        cr_expect_eq(k->all_finite(g, 4), 0, "%f at the end", specials[i]);
    }

    float x[4] = {1.0f, -2.0f, 0.5f, 8.0f}, y[4] = {1.0f, 1.0f, 1.0f, 1.0f};
    k->scale(x, 0.5f, 4);
    cr_expect(x[0] == 0.5f && x[1] == -1.0f && x[2] == 0.25f && x[3] == 4.0f);
    k->accumulate(y, x, 4);
    cr_expect(y[0] == 1.5f && y[1] == 0.0f && y[2] == 1.25f && y[3] == 5.0f);
}
