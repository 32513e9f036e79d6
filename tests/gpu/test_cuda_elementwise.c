/* The elementwise ops and reductions on the GPU (kernels/cuda/elementwise.cu) against kernels_cpu
 * on the same random inputs, at sizes 0, 1, odd ones and past a million elements. */
#include <criterion/criterion.h>
#include <float.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/cuda/kernels_cuda.h"
#include "kernels/dtype.h"
#include "kernels/kernels.h"
#include "tests/gpu/gpu_util.h"

/* Casts to and from bf16/fp16 must give dtype.c's bits exactly (every 16-bit pattern, a million
 * random fp32 patterns, NaNs, infs, subnormals, overflow and ties), copies and fills the same bytes
 * with the bytes past the end untouched; fp32 results agree within 1e-5 relative L2 (invariant 6),
 * sums of squares in double within 1e-9. Overwritten outputs are poisoned with NaN first (an
 * element a kernel forgets fails); "+=" outputs start from the same random non-zero values on both
 * sides (a kernel that overwrites, or adds twice, fails). */

#define REL 1e-5

static const Kernels *CPU = &kernels_cpu;
static const Kernels *GPU = &kernels_cuda;

/* Every test runs on the GPU bound to its thread, or is skipped where there is none. */
TestSuite(cuda_elementwise, .init = gpu_or_skip, .fini = gpu_done);

/* 0, 1, odd, one past a power of two, and over a million (past one block's and one grid
 * pass's worth of elements). */
static const size_t SIZES[] = {0, 1, 7, 1000, 4097, ((size_t)1 << 20) + 3};
#define NSIZES (sizeof SIZES / sizeof SIZES[0])

/* ---- host helpers ---- */

static void *host_alloc(size_t bytes) {
    void *h = malloc(bytes ? bytes : 1);
    cr_assert_not_null(h);
    return h;
}

/* `bytes` of device memory (at least 16), poisoned (0xFF: NaN as floats, bf16 and fp16) */
static void *gpu_poisoned(size_t bytes) {
    if (bytes < 16) bytes = 16;
    void *d = gpu_alloc(bytes);
    gpu_poison(d, bytes);
    return d;
}

/* A device copy of n host floats (a valid pointer for n == 0 too). */
static float *gpu_copy(const float *host, size_t n) {
    float *d = gpu_alloc((n ? n : 1) * sizeof *d);
    if (n) gpu_put(d, host, n * sizeof *d);
    return d;
}

/* A host copy of `bytes` of device memory (caller frees). */
static void *fetch(const void *d, size_t bytes) {
    void *h = host_alloc(bytes);
    if (bytes) gpu_get(h, d, bytes);
    return h;
}

static void expect_scalar_close(double got, double want, double rel, const char *what) {
    cr_expect(fabs(got - want) <= rel * fabs(want), "%s: %.17g, want %.17g (bound %.1g relative)",
              what, got, want, rel);
}

/* Byte-for-byte equality of n elements of `elem` bytes (casts, copies, fills). */
static void expect_bits(const void *got, const void *want, size_t n, size_t elem,
                        const char *what) {
    size_t bad = 0, first = 0;
    for (size_t i = 0; i < n; i++)
        if (memcmp((const char *)got + i * elem, (const char *)want + i * elem, elem) != 0 &&
            bad++ == 0)
            first = i;
    if (!bad) return;
    uint32_t g = 0, w = 0;
    memcpy(&g, (const char *)got + first * elem, elem < 4 ? elem : 4);
    memcpy(&w, (const char *)want + first * elem, elem < 4 ? elem : 4);
    cr_expect_fail("%s: %zu of %zu elements differ, first [%zu]: 0x%x, want 0x%x", what, bad, n,
                   first, g, w);
}

static void expect_bits_dev(const void *d, const void *want, size_t n, size_t elem,
                            const char *what) {
    void *got = fetch(d, n * elem);
    expect_bits(got, want, n, elem, what);
    free(got);
}

/* The device bytes are all 0xFF still (what gpu_poison left). */
static void expect_poisoned_dev(const void *d, size_t bytes, const char *what) {
    unsigned char *got = fetch(d, bytes);
    size_t bad = 0;
    for (size_t i = 0; i < bytes; i++) bad += got[i] != 0xFF;
    cr_expect_eq(bad, 0, "%s: %zu of %zu poisoned bytes were written", what, bad, bytes);
    free(got);
}

static float from_bits(uint32_t u) {
    float x;
    memcpy(&x, &u, sizeof x);
    return x;
}

/* ---- cast ---- */

/* fp32 bit patterns where conversions go wrong: zeros, subnormals, infs, NaNs of every kind,
 * overflow boundaries and exact ties of both half types. */
static const uint32_t CAST_SPECIALS[] = {
    0x00000000, 0x80000000,             /* +-0 */
    0x00000001, 0x807fffff, 0x00400000, /* fp32 subnormals */
    0x00008000, 0x00018000, 0x007fffff, /* bf16 subnormal ties (to 0x0000, 0x0002) and carry */
    0x7f800000, 0xff800000,             /* +-inf */
    0x7fc00000, 0xffc00000, 0x7f800001, /* quiet NaNs, a signalling NaN with a low payload */
    0x7fbfffff, 0xffffffff, 0x7fc0ffff, /* NaN payloads in kept and dropped bits */
    0xff812345, 0x7fe00000,             /* negative signalling NaN, another quiet payload */
    0x7f7fffff, 0xff7fffff,             /* +-FLT_MAX: bf16 rounds to inf */
    0x7f7f7fff, 0x7f7f8000,             /* just below / exactly halfway past bf16's max */
    0x3f808000, 0x3f818000,             /* bf16 ties: down to even, up to even */
    0x3f808001, 0x3f807fff,             /* one ulp either side of a tie */
    0x3f800000, 0xbf800000,             /* +-1 */
    0x477fe000, 0x477fefff, 0x477ff000, /* fp16: 65504 (max), just below and at the overflow tie */
    0xc77ff000, 0x47800000, 0x501502f9, /* -65520 (-inf), 65536, 1e10 */
    0x3f801000, 0x3f803000, 0x3f801001, /* fp16 ties: down, up, one ulp above */
    0x33800000, 0x33000000, 0x33400000, /* fp16: 2^-24 (smallest subnormal), 2^-25 (tie to 0), */
    0x33c00000, 0x34200000, 0x32800000, /*   1.5 and 2.5 * 2^-24 (ties to 2), 2^-26 (to 0), */
    0x38800000, 0x387fc000, 0x387fe000, /*   2^-14 (smallest normal), the largest subnormal, */
    0xb3800001, 0x3880f000, 0x00000400, /*   their tie; -2^-24 and a bit, a normal tie, 2^-139 */
};
#define NSPECIALS (sizeof CAST_SPECIALS / sizeof CAST_SPECIALS[0])

/* The specials, then random bit patterns (every exponent, NaNs and subnormals included), then
 * values in fp16's range and in its subnormal range: n floats in all. */
static float *cast_inputs(size_t n) {
    float *h = host_alloc(n * sizeof *h);
    size_t i = 0;
    for (; i < n && i < NSPECIALS; i++) h[i] = from_bits(CAST_SPECIALS[i]);
    uint32_t s = 0x2545F491u;
    for (; i < n && i < n / 2; i++) {
        s ^= s << 13;
        s ^= s >> 17;
        s ^= s << 5;
        h[i] = from_bits(s);
    }
    const size_t quarter = n - i < 2 ? n - i : (n - i) / 2;
    if (quarter) gpu_random(h + i, quarter, -70000.0f, 70000.0f, 11);
    i += quarter;
    if (i < n) gpu_random(h + i, n - i, -1e-4f, 1e-4f, 12);
    return h;
}

Test(cuda_elementwise, cast_fp32_to_bf16_and_fp16_bit_exact) {
    const size_t sizes[] = {1, 7, NSPECIALS, 4097, ((size_t)1 << 20) + 3};
    for (size_t si = 0; si < sizeof sizes / sizeof sizes[0]; si++) {
        const size_t n = sizes[si];
        float *h = cast_inputs(n);
        float *d_src = gpu_copy(h, n);
        uint16_t *want = host_alloc(n * sizeof *want);
        uint16_t *d_dst = gpu_poisoned(n * sizeof *d_dst);
        const DType types[] = {DTYPE_BF16, DTYPE_FP16};
        for (int t = 0; t < 2; t++) {
            gpu_poison(d_dst, n * sizeof *d_dst);
            GPU->cast(d_dst, types[t], d_src, DTYPE_FP32, n);
            gpu_check();
            CPU->cast(want, types[t], h, DTYPE_FP32, n);
            expect_bits_dev(d_dst, want, n, sizeof *want,
                            fmt_text("fp32 -> %s, n=%zu", dtype_name(types[t]), n));
        }
        gpu_free(d_dst), gpu_free(d_src);
        free(want), free(h);
    }
}

/* Every bf16 and every fp16 bit pattern to fp32 and to the other half type. */
Test(cuda_elementwise, cast_every_half_pattern_bit_exact) {
    const size_t n = 65536;
    uint16_t *h = host_alloc(n * sizeof *h);
    for (size_t i = 0; i < n; i++) h[i] = (uint16_t)i;
    uint16_t *d_src = gpu_alloc(n * sizeof *d_src);
    gpu_put(d_src, h, n * sizeof *h);
    void *d_dst = gpu_alloc(n * sizeof(float));
    void *want = host_alloc(n * sizeof(float));
    const DType halves[] = {DTYPE_BF16, DTYPE_FP16};
    const DType outs[] = {DTYPE_FP32, DTYPE_BF16, DTYPE_FP16};
    for (int s = 0; s < 2; s++)
        for (int o = 0; o < 3; o++) {
            if (outs[o] == halves[s]) continue;
            const size_t elem = dtype_size(outs[o]);
            gpu_poison(d_dst, n * sizeof(float));
            GPU->cast(d_dst, outs[o], d_src, halves[s], n);
            gpu_check();
            CPU->cast(want, outs[o], h, halves[s], n);
            expect_bits_dev(d_dst, want, n, elem,
                            fmt_text("every %s -> %s", dtype_name(halves[s]), dtype_name(outs[o])));
        }
    gpu_free(d_dst), gpu_free(d_src);
    free(want), free(h);
}

/* Same type: a copy, NaN payloads included; n == 0 writes nothing. */
Test(cuda_elementwise, cast_same_type_copies_and_empty_writes_nothing) {
    const size_t n = 4099;
    float *h = cast_inputs(n);
    float *d_src = gpu_copy(h, n);
    void *d_dst = gpu_poisoned(n * sizeof(float));
    const DType types[] = {DTYPE_FP32, DTYPE_BF16, DTYPE_FP16};
    for (int t = 0; t < 3; t++) {
        const size_t count = n * 4 / dtype_size(types[t]); /* the same bytes, as t */
        gpu_poison(d_dst, n * sizeof(float));
        GPU->cast(d_dst, types[t], d_src, types[t], count);
        gpu_check();
        expect_bits_dev(d_dst, h, n, sizeof(float),
                        fmt_text("%s -> %s", dtype_name(types[t]), dtype_name(types[t])));
    }
    gpu_poison(d_dst, n * sizeof(float));
    for (int s = 0; s < 3; s++)
        for (int t = 0; t < 3; t++) GPU->cast(d_dst, types[t], d_src, types[s], 0);
    GPU->cast(NULL, DTYPE_BF16, NULL, DTYPE_FP32, 0);
    gpu_check();
    expect_poisoned_dev(d_dst, n * sizeof(float), "cast of 0 elements");
    gpu_free(d_dst), gpu_free(d_src);
    free(h);
}

/* ---- zero, copy_bytes, zero_bytes ---- */

Test(cuda_elementwise, zero_and_byte_ops_write_exactly_their_bytes) {
    const size_t counts[] = {0, 1, 13, 4097 * 4 + 3, ((size_t)1 << 22) + 5};
    const size_t tail = 64; /* bytes past the end that must stay poisoned */
    for (size_t ci = 0; ci < sizeof counts / sizeof counts[0]; ci++) {
        const size_t bytes = counts[ci];
        unsigned char *h = host_alloc(bytes);
        for (size_t i = 0; i < bytes; i++) h[i] = (unsigned char)(i * 131u + 7u);
        void *d_src = gpu_alloc(bytes ? bytes : 1);
        if (bytes) gpu_put(d_src, h, bytes);
        unsigned char *d_dst = gpu_poisoned(bytes + tail);
        unsigned char *zeros = calloc(bytes ? bytes : 1, 1);
        cr_assert_not_null(zeros);
        char what[64];

        GPU->copy_bytes(d_dst, d_src, bytes);
        gpu_check();
        snprintf(what, sizeof what, "copy_bytes(%zu)", bytes);
        expect_bits_dev(d_dst, h, bytes, 1, what);
        expect_poisoned_dev(d_dst + bytes, tail, what);

        gpu_poison(d_dst, bytes + tail);
        GPU->zero_bytes(d_dst, bytes);
        gpu_check();
        snprintf(what, sizeof what, "zero_bytes(%zu)", bytes);
        expect_bits_dev(d_dst, zeros, bytes, 1, what);
        expect_poisoned_dev(d_dst + bytes, tail, what);

        const size_t n = bytes / sizeof(float); /* zero: whole floats */
        gpu_poison(d_dst, bytes + tail);
        GPU->zero((float *)d_dst, n);
        gpu_check();
        snprintf(what, sizeof what, "zero(%zu floats)", n);
        expect_bits_dev(d_dst, zeros, n, sizeof(float), what);
        expect_poisoned_dev(d_dst + n * sizeof(float), bytes - n * sizeof(float) + tail, what);

        free(zeros);
        gpu_free(d_dst), gpu_free(d_src);
        free(h);
    }
}

/* ---- copy_spans ---- */

/* 150 spans (past one launch's 64) into a destination with gaps between them: lengths 0 to 40
 * with pads of 0 to 5, a span of only padding, one of a million elements; in dst order
 * reversed against src, so a kernel that reads span i's src for span j fails. Returns the count
 * and each buffer's elements (dst's gaps included). */
static size_t copy_span_list(CopySpan *c, size_t *src_n, size_t *dst_n) {
    size_t n = 0, dst_at = 0, src_at = 0;
    for (; n < 150; n++) {
        size_t len = n == 77 ? ((size_t)1 << 20) + 3 : (n * 7) % 41, pad = n == 3 ? 9 : n % 6;
        c[n] = (CopySpan){.dst_at = 0, .src_at = src_at, .n = len, .pad = pad};
        src_at += len + n % 3; /* src gaps too */
    }
    for (size_t i = n; i-- > 0;) { /* dst in reverse order, a gap of 2 after each */
        c[i].dst_at = dst_at;
        dst_at += c[i].n + c[i].pad + 2;
    }
    *src_n = src_at;
    *dst_n = dst_at;
    return n;
}

/* Every pair of types against the CPU's copy_spans, bit for bit: the gaps stay poisoned. Taken
 * from the table with every form (kernels_cuda holds it NULL until this passes on a GPU). */
Test(cuda_elementwise, copy_spans_every_type_pair_bit_exact) {
    const Kernels *G = &kernels_cuda_unverified;
    cr_assert_not_null(G->copy_spans);
    CopySpan spans[150];
    size_t src_n, dst_n;
    const size_t nspans = copy_span_list(spans, &src_n, &dst_n);
    float *h = cast_inputs(src_n);
    const DType types[] = {DTYPE_FP32, DTYPE_BF16, DTYPE_FP16};
    for (int si = 0; si < 3; si++) {
        const DType st = types[si];
        void *src = host_alloc(src_n * dtype_size(st));
        CPU->cast(src, st, h, DTYPE_FP32, src_n);
        void *d_src = gpu_alloc(src_n * dtype_size(st));
        gpu_put(d_src, src, src_n * dtype_size(st));
        for (int di = 0; di < 3; di++) {
            const DType dt = types[di];
            const size_t bytes = dst_n * dtype_size(dt);
            unsigned char *want = host_alloc(bytes);
            memset(want, 0xFF, bytes);
            CPU->copy_spans(want, dt, src, st, spans, nspans);
            void *d_dst = gpu_poisoned(bytes);
            G->copy_spans(d_dst, dt, d_src, st, spans, nspans);
            gpu_check();
            expect_bits_dev(d_dst, want, dst_n, dtype_size(dt),
                            fmt_text("copy_spans %s -> %s", dtype_name(st), dtype_name(dt)));
            gpu_free(d_dst);
            free(want);
        }
        gpu_free(d_src);
        free(src);
    }
    void *d_dst = gpu_poisoned(64);
    G->copy_spans(d_dst, DTYPE_BF16, NULL, DTYPE_FP32, NULL, 0); /* no spans: nothing written */
    gpu_check();
    expect_poisoned_dev(d_dst, 64, "copy_spans of no spans");
    gpu_free(d_dst);
    free(h);
}

/* ---- scale, accumulate, add ---- */

Test(cuda_elementwise, scale_accumulate_add) {
    for (size_t si = 0; si < NSIZES; si++) {
        const size_t n = SIZES[si];
        const unsigned seed = 100 + (unsigned)si;
        float *a = host_random(n, -2.0f, 2.0f, seed);
        float *b = host_random(n, -3.0f, 1.0f, seed + 1000);
        float *d_a = gpu_copy(a, n), *d_b = gpu_copy(b, n);
        float *want = host_copy(a, n);

        /* scale in place */
        GPU->scale(d_a, -0.37f, n);
        gpu_check();
        CPU->scale(want, -0.37f, n);
        gpu_expect_close_dev(d_a, want, n, REL, fmt_text("scale n=%zu", n));

        /* accumulate into non-zero values */
        gpu_put(d_a, a, n * sizeof *a);
        memcpy(want, a, n * sizeof *a);
        GPU->accumulate(d_a, d_b, n);
        gpu_check();
        CPU->accumulate(want, b, n);
        gpu_expect_close_dev(d_a, want, n, REL, fmt_text("accumulate n=%zu", n));
        gpu_expect_close_dev(d_b, b, n, REL, "accumulate's x is unchanged");

        /* add into a poisoned output, then in place over a and over b */
        float *d_out = gpu_poisoned(n * sizeof *d_out);
        gpu_put(d_a, a, n * sizeof *a);
        GPU->add(DTYPE_FP32, d_out, d_a, d_b, n);
        gpu_check();
        CPU->add(DTYPE_FP32, want, a, b, n);
        gpu_expect_close_dev(d_out, want, n, REL, fmt_text("add n=%zu", n));
        GPU->add(DTYPE_FP32, d_a, d_a, d_b, n);
        gpu_check();
        gpu_expect_close_dev(d_a, want, n, REL, fmt_text("add out=a n=%zu", n));
        gpu_put(d_a, a, n * sizeof *a);
        GPU->add(DTYPE_FP32, d_b, d_a, d_b, n);
        gpu_check();
        gpu_expect_close_dev(d_b, want, n, REL, fmt_text("add out=b n=%zu", n));

        gpu_free(d_out), gpu_free(d_a), gpu_free(d_b);
        free(want), free(a), free(b);
    }
}

/* ---- sum_squares, all_finite ---- */

Test(cuda_elementwise, sum_squares_in_double) {
    for (size_t si = 0; si < NSIZES; si++) {
        const size_t n = SIZES[si];
        float *x = host_random(n, -3.0f, 3.0f, 200 + (unsigned)si);
        float *d_x = gpu_copy(x, n);
        const double got = GPU->sum_squares(d_x, n);
        gpu_check();
        /* both sums are of exact double squares; only their order differs */
        expect_scalar_close(got, CPU->sum_squares(x, n), 1e-9, fmt_text("sum_squares n=%zu", n));
        if (n == 0) cr_expect_eq(got, 0.0, "sum_squares of nothing");
        gpu_free(d_x);
        free(x);
    }
}

Test(cuda_elementwise, sum_squares_and_all_finite_see_inf_and_nan) {
    const size_t n = ((size_t)1 << 20) + 3;
    float *x = host_random(n, -1.0f, 1.0f, 300);
    x[17] = FLT_MAX; /* finite */
    float *d_x = gpu_copy(x, n);
    cr_expect_eq(GPU->all_finite(d_x, n), 1, "all finite (FLT_MAX included)");
    cr_expect_eq(GPU->all_finite(d_x, 0), 1, "no elements are all finite");
    expect_scalar_close(GPU->sum_squares(d_x, n), CPU->sum_squares(x, n), 1e-9, "with FLT_MAX");
    gpu_check();

    /* squares past fp32's range: summed in double, still finite */
    const float big[3] = {2e19f, -3e19f, 1.0f};
    float *d_big = gpu_floats(big, 3);
    expect_scalar_close(GPU->sum_squares(d_big, 3), CPU->sum_squares(big, 3), 1e-15, "2e19^2...");
    cr_expect(isfinite(GPU->sum_squares(d_big, 3)), "squares beyond FLT_MAX stay finite");
    gpu_check();
    gpu_free(d_big);

    const struct {
        size_t at;
        float value;
    } planted[] = {{0, -INFINITY}, {n - 1, INFINITY}, {n / 2, NAN}, {n - 2, -NAN}};
    for (size_t p = 0; p < sizeof planted / sizeof planted[0]; p++) {
        const size_t at = planted[p].at;
        const float v = planted[p].value;
        gpu_put(d_x + at, &v, sizeof v);
        cr_expect_eq(GPU->all_finite(d_x, n), 0, "%g at [%zu]", (double)v, at);
        cr_expect_eq(GPU->all_finite(d_x + at, 1), 0, "%g alone", (double)v);
        if (at > 0) cr_expect_eq(GPU->all_finite(d_x, at), 1, "the elements before [%zu]", at);
        const double s = GPU->sum_squares(d_x, n);
        if (isnan(v))
            cr_expect(isnan(s), "sum_squares with a NaN at [%zu] is %g", at, s);
        else
            cr_expect(isinf(s) && s > 0, "sum_squares with %g at [%zu] is %g", (double)v, at, s);
        gpu_check();
        gpu_put(d_x + at, &x[at], sizeof x[at]); /* restore */
    }
    /* an inf and a NaN together: NaN wins, as on the CPU */
    const float inf = INFINITY, nan = NAN;
    gpu_put(d_x + 5, &inf, sizeof inf);
    gpu_put(d_x + n - 5, &nan, sizeof nan);
    x[5] = inf;
    x[n - 5] = nan;
    const double s = GPU->sum_squares(d_x, n);
    cr_expect(isnan(s) && isnan(CPU->sum_squares(x, n)), "inf and NaN: %g", s);
    cr_expect_eq(GPU->all_finite(d_x, n), CPU->all_finite(x, n));
    gpu_check();
    gpu_free(d_x);
    free(x);
}

/* ---- Adam ---- */

static void adam_case(const AdamHyper *h, const long steps[3], const char *name) {
    for (size_t si = 0; si < NSIZES; si++) {
        const size_t n = SIZES[si];
        const unsigned seed = 400 + 10 * (unsigned)si;
        float *p = host_random(n, -1.0f, 1.0f, seed);
        float *m = host_alloc(n * sizeof *m), *v = host_alloc(n * sizeof *v);
        for (size_t i = 0; i < n; i++) m[i] = v[i] = 0.0f;
        float *d_p = gpu_copy(p, n), *d_m = gpu_copy(m, n), *d_v = gpu_copy(v, n);
        for (int k = 0; k < 3; k++) {
            float *g = host_random(n, -1.0f, 1.0f, seed + 1 + (unsigned)k);
            float *d_g = gpu_copy(g, n);
            GPU->adam_step(d_p, d_g, d_m, d_v, n, h, steps[k]);
            gpu_check();
            CPU->adam_step(p, g, m, v, n, h, steps[k]);
            gpu_expect_close_dev(d_p, p, n, REL,
                                 fmt_text("%s n=%zu step %ld: param", name, n, steps[k]));
            gpu_expect_close_dev(d_m, m, n, REL,
                                 fmt_text("%s n=%zu step %ld: m", name, n, steps[k]));
            gpu_expect_close_dev(d_v, v, n, REL,
                                 fmt_text("%s n=%zu step %ld: v", name, n, steps[k]));
            gpu_expect_close_dev(d_g, g, n, REL, "adam's grad is unchanged");
            gpu_free(d_g);
            free(g);
        }
        gpu_free(d_p), gpu_free(d_m), gpu_free(d_v);
        free(p), free(m), free(v);
    }
}

/* Weight decay 0.1 at lr 1e-2 moves AdamW's parameters by 1e-3 relative and Adam's moments by
 * far more, so a kernel that swapped or ignored `decoupled` fails at 1e-5. */
Test(cuda_elementwise, adam_three_steps) {
    const long steps[3] = {1, 2, 3};
    AdamHyper h = {.lr = 1e-2f,
                   .beta1 = 0.9f,
                   .beta2 = 0.999f,
                   .eps = 1e-8f,
                   .weight_decay = 0.1f,
                   .decoupled = 0};
    adam_case(&h, steps, "Adam wd=0.1");
    h.decoupled = 1;
    adam_case(&h, steps, "AdamW wd=0.1");
    h.weight_decay = 0.0f;
    adam_case(&h, steps, "AdamW wd=0");
}

/* A step below 1 is taken as 1 (else the bias correction divides by zero). */
Test(cuda_elementwise, adam_step_below_one_is_one) {
    const long steps[3] = {0, -5, 2};
    const AdamHyper h = {.lr = 3e-3f,
                         .beta1 = 0.8f,
                         .beta2 = 0.95f,
                         .eps = 1e-6f,
                         .weight_decay = 0.05f,
                         .decoupled = 1};
    adam_case(&h, steps, "AdamW steps 0,-5,2");
}

/* ---- the toy layer and MSE ---- */

static const float TOY_W[3] = {0.8f, 1.3f, 0.2f};

/* x and dy positive, so every term of dw's batch sums is: tanhf's last bits differ between
 * the CPU and the GPU, and a sum that cancelled could magnify that past the bound. */
static void toy_inputs(size_t n, unsigned seed, float **x, float **dy) {
    *x = host_random(n, 0.0f, 1.5f, seed);
    *dy = host_random(n, 0.05f, 1.0f, seed + 1);
}

Test(cuda_elementwise, toy_forward) {
    float *d_w = gpu_floats(TOY_W, 3);
    for (size_t si = 0; si < NSIZES; si++) {
        const size_t n = SIZES[si];
        float *x = host_random(n, -2.0f, 2.0f, 500 + (unsigned)si);
        float *want = host_alloc(n * sizeof *want);
        CPU->toy_forward(DTYPE_FP32, TOY_W, x, want, n);
        float *d_x = gpu_copy(x, n), *d_y = gpu_poisoned(n * sizeof *d_y);
        GPU->toy_forward(DTYPE_FP32, d_w, d_x, d_y, n);
        gpu_check();
        gpu_expect_close_dev(d_y, want, n, REL, fmt_text("toy_forward n=%zu", n));
        GPU->toy_forward(DTYPE_FP32, d_w, d_x, d_x, n); /* in place */
        gpu_check();
        gpu_expect_close_dev(d_x, want, n, REL, fmt_text("toy_forward in place n=%zu", n));
        gpu_free(d_x), gpu_free(d_y);
        free(want), free(x);
    }
    gpu_free(d_w);
}

/* dx into a poisoned buffer, over x, over dy, or not at all; dw accumulates from non-zero. */
Test(cuda_elementwise, toy_backward) {
    float *d_w = gpu_floats(TOY_W, 3);
    enum { DX_OWN, DX_NONE, DX_IS_X, DX_IS_DY };
    const char *modes[] = {"dx", "no dx", "dx=x", "dx=dy"};
    for (size_t si = 0; si < NSIZES; si++) {
        const size_t n = SIZES[si];
        for (int mode = DX_OWN; mode <= DX_IS_DY; mode++) {
            float *x, *dy;
            toy_inputs(n, 600 + 10 * (unsigned)si + (unsigned)mode, &x, &dy);
            float dw0[3], want_dw[3], got_dw[3];
            gpu_random(dw0, 3, -2.0f, 2.0f, 700 + (unsigned)si);
            memcpy(want_dw, dw0, sizeof dw0);
            float *want_dx = host_alloc(n * sizeof *want_dx);
            CPU->toy_backward(DTYPE_FP32, TOY_W, x, dy, mode == DX_NONE ? NULL : want_dx, want_dw,
                              n);

            float *d_x = gpu_copy(x, n), *d_dy = gpu_copy(dy, n), *d_dw = gpu_floats(dw0, 3);
            float *d_own = gpu_poisoned(n * sizeof *d_own);
            float *d_dx = mode == DX_OWN     ? d_own
                          : mode == DX_IS_X  ? d_x
                          : mode == DX_IS_DY ? d_dy
                                             : NULL;
            GPU->toy_backward(DTYPE_FP32, d_w, d_x, d_dy, d_dx, d_dw, n);
            gpu_check();
            gpu_get(got_dw, d_dw, sizeof got_dw);
            for (int k = 0; k < 3; k++) {
                gpu_expect_close(&got_dw[k], &want_dw[k], 1, REL,
                                 fmt_text("toy_backward n=%zu %s: dw[%d]", n, modes[mode], k));
                if (n == 0) cr_expect_eq(got_dw[k], dw0[k], "n=0 leaves dw[%d] alone", k);
            }
            if (d_dx)
                gpu_expect_close_dev(d_dx, want_dx, n, REL,
                                     fmt_text("toy_backward n=%zu %s: dx", n, modes[mode]));
            if (mode == DX_NONE) expect_poisoned_dev(d_own, n * sizeof *d_own, "no dx");

            gpu_free(d_own), gpu_free(d_x), gpu_free(d_dy), gpu_free(d_dw);
            free(want_dx), free(x), free(dy);
        }
    }
    gpu_free(d_w);
}

Test(cuda_elementwise, mse_loss) {
    for (size_t si = 0; si < NSIZES; si++) {
        const size_t n = SIZES[si];
        float *y = host_random(n, -1.0f, 2.0f, 800 + (unsigned)si);
        float *t = host_random(n, -1.5f, 1.5f, 900 + (unsigned)si);
        float *want_dy = host_alloc(n * sizeof *want_dy);
        const float want = CPU->mse_loss(DTYPE_FP32, y, t, want_dy, n);
        float *d_y = gpu_copy(y, n), *d_t = gpu_copy(t, n);
        float *d_dy = gpu_poisoned(n * sizeof *d_dy);

        const float got = GPU->mse_loss(DTYPE_FP32, d_y, d_t, d_dy, n);
        gpu_check();
        gpu_expect_close(&got, &want, 1, REL, fmt_text("mse_loss n=%zu: loss", n));
        if (n == 0) {
            cr_expect_eq(got, 0.0f, "mse_loss of nothing is 0");
            expect_poisoned_dev(d_dy, sizeof(float), "mse_loss n=0 leaves dy alone");
        }
        gpu_expect_close_dev(d_dy, want_dy, n, REL, fmt_text("mse_loss n=%zu: dy", n));

        const float loss_only = GPU->mse_loss(DTYPE_FP32, d_y, d_t, NULL, n);
        gpu_check();
        gpu_expect_close(&loss_only, &want, 1, REL, fmt_text("mse_loss n=%zu: loss without dy", n));

        gpu_free(d_y), gpu_free(d_t), gpu_free(d_dy);
        free(want_dy), free(y), free(t);
    }
}

/* ---- GELU ---- */

/* The CPU's erf is Abramowitz-Stegun's (absolute error below 1.5e-7) and CUDA's erff is within
 * 2 ulp: GELU's values over [-6, 6] agree far inside 1e-5 relative L2. */
Test(cuda_elementwise, gelu_forward_and_backward) {
    for (size_t si = 0; si < NSIZES; si++) {
        const size_t n = SIZES[si];
        float *x = host_random(n, -6.0f, 6.0f, 1000 + (unsigned)si);
        float *dout = host_random(n, -1.0f, 1.0f, 1100 + (unsigned)si);
        float *want = host_alloc(n * sizeof *want), *want_din = host_alloc(n * sizeof *want_din);
        CPU->gelu_forward(DTYPE_FP32, want, x, n);
        CPU->gelu_backward(DTYPE_FP32, want_din, x, dout, n);
        float *d_x = gpu_copy(x, n), *d_dout = gpu_copy(dout, n);
        float *d_out = gpu_poisoned(n * sizeof *d_out);

        GPU->gelu_forward(DTYPE_FP32, d_out, d_x, n);
        gpu_check();
        gpu_expect_close_dev(d_out, want, n, REL, fmt_text("gelu_forward n=%zu", n));

        gpu_poison(d_out, (n ? n : 1) * sizeof *d_out);
        GPU->gelu_backward(DTYPE_FP32, d_out, d_x, d_dout, n);
        gpu_check();
        gpu_expect_close_dev(d_out, want_din, n, REL, fmt_text("gelu_backward n=%zu", n));

        GPU->gelu_backward(DTYPE_FP32, d_dout, d_x, d_dout, n); /* din = dout */
        gpu_check();
        gpu_expect_close_dev(d_dout, want_din, n, REL, fmt_text("gelu_backward din=dout n=%zu", n));

        GPU->gelu_forward(DTYPE_FP32, d_x, d_x, n); /* out = in */
        gpu_check();
        gpu_expect_close_dev(d_x, want, n, REL, fmt_text("gelu_forward in place n=%zu", n));

        gpu_free(d_x), gpu_free(d_dout), gpu_free(d_out);
        free(want), free(want_din), free(x), free(dout);
    }
}

/* ---- bias_grad ---- */

/* Shapes: empty, single, odd with stride past cols, the ViT's (rows B*T, a slice of qkv), wide
 * rows that fill the scratch with few row groups, wider ones summed without partials, and
 * over a million elements. */
Test(cuda_elementwise, bias_grad_accumulates_column_sums) {
    const struct {
        size_t rows, cols, stride;
    } shapes[] = {
        {0, 5, 5},       {5, 0, 3},         {1, 1, 1},         {7, 5, 9},
        {64, 10, 10},    {4160, 192, 576},  {1088, 384, 1152}, {1000, 3000, 3000},
        {3, 9000, 9000}, {200, 5000, 5007}, {1, 1000, 1000},   {4096, 300, 301},
    };
    for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; s++) {
        const size_t rows = shapes[s].rows, cols = shapes[s].cols, stride = shapes[s].stride;
        const size_t elems = rows ? (rows - 1) * stride + cols : 0;
        float *dout = host_random(elems, -1.0f, 1.0f, 1200 + (unsigned)s);
        float *db0 = host_random(cols, -2.0f, 2.0f, 1300 + (unsigned)s);
        float *want = host_copy(db0, cols);
        CPU->bias_grad(DTYPE_FP32, want, dout, rows, cols, stride);
        float *d_dout = gpu_copy(dout, elems), *d_db = gpu_copy(db0, cols);
        GPU->bias_grad(DTYPE_FP32, d_db, d_dout, rows, cols, stride);
        gpu_check();
        gpu_expect_close_dev(
            d_db, want, cols, REL,
            fmt_text("bias_grad rows=%zu cols=%zu stride=%zu", rows, cols, stride));
        if (rows == 0) expect_bits_dev(d_db, db0, cols, sizeof(float), "no rows: db unchanged");
        gpu_free(d_dout), gpu_free(d_db);
        free(dout), free(db0), free(want);
    }
}

/* ---- the compute dtype ---- */

/* The table offers fp32 only until tests/gpu/test_cuda_dtypes.c has passed on a GPU, though every
 * op takes bf16 and fp16 (that file tests them). An op asked for a DType that is none of the three
 * launches nothing (its output keeps its poison), returns what a failed op returns and leaves an
 * error naming the op and the value, which kernels_cuda_status reports once. */
Test(cuda_elementwise, refuses_a_dtype_it_does_not_know) {
    cr_expect(kernels_computes_in(GPU, DTYPE_FP32));
    cr_expect(!kernels_computes_in(GPU, DTYPE_BF16) && !kernels_computes_in(GPU, DTYPE_FP16));
    enum { N = 8 };
    const DType bad = (DType)7;
    float *d_x = gpu_poisoned(N * sizeof(float)), *d_out = gpu_poisoned(N * sizeof(float));
    gpu_put(d_x, (const float[N]){1, 2, 3, 4, 5, 6, 7, 8}, sizeof(float[N]));
    GPU->gelu_forward(bad, d_out, d_x, N);
    expect_poisoned_dev(d_out, N * sizeof(float), "gelu_forward asked for DType 7");
    GPU->add(bad, d_out, d_x, d_x, N); /* a second refusal: the first error is kept */
    Err err = {0};
    cr_expect_neq(kernels_cuda_status(&err), 0, "gelu_forward took DType 7");
    cr_expect(strstr(err.msg, "cuda_gelu_forward: no compute dtype 7") != NULL,
              "the error names the op and the dtype: %s", err.msg);
    cr_expect_eq(kernels_cuda_status(&err), 0, "the error is reported once");
    cr_expect(isnan(GPU->mse_loss(bad, d_x, d_x, NULL, N)), "a refused loss is NaN");
    cr_expect_neq(kernels_cuda_status(&err), 0, "mse_loss took DType 7");
    cr_expect(strstr(err.msg, "cuda_mse_loss: no compute dtype 7") != NULL, "%s", err.msg);
    GPU->linear_forward(bad, d_out, d_x, d_x, NULL, 2, 2, 2);
    expect_poisoned_dev(d_out, N * sizeof(float), "linear_forward asked for DType 7");
    cr_expect_neq(kernels_cuda_status(&err), 0, "linear_forward took DType 7");
    gpu_free(d_x), gpu_free(d_out);
}
