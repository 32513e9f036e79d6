/* Every op that takes a compute dtype, in bf16 and fp16, on the GPU against kernels_cpu in the same
 * dtype on the same values. Inputs are drawn in fp32 from a seeded generator and rounded to t once
 * (dtype_narrow); both backends read those very elements, so they differ only by the order of
 * their fp32 arithmetic and by the last bit of the outputs that order moves across a rounding
 * boundary (kernels.h: each output rounded once, where the op stores it).
 *
 * Bounds: outputs in t within a relative L2 of 1e-2 (bf16, 8 bits of mantissa) or 2e-3 (fp16, 11),
 * with gpu_expect_close's per-element bound of 8 times that; fp32 outputs (dw, db, statistics,
 * lse, losses) within 1e-3 (products summed in another order, on tensor cores for the GEMMs);
 * count_correct the same count. Overwritten outputs start as NaN on the GPU (0xFF bytes: NaN in
 * bf16 and fp16 too), so a kernel that forgets an element fails; "+=" outputs start from the same
 * random values on both sides. Backward ops read the CPU's forward outputs on both sides (probs,
 * out, lse, mean, rstd), so each op is held to its own rounding only.
 *
 * The table offers fp32 only (kernels/cuda/table.cu) until this file has passed on a GPU; then
 * it offers KERNEL_ALL_DTYPES. The fp32 forms are the other test_cuda_*.c files'. */
#include <criterion/criterion.h>
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/cuda/kernels_cuda.h"
#include "kernels/dtype.h"
#include "kernels/kernels.h"
#include "tests/gpu/gpu_util.h"

#define REL_F32 1e-3 /* fp32 outputs of a bf16 or fp16 op */

static const Kernels *CPU = &kernels_cpu;
static const Kernels *GPU = &kernels_cuda;

TestSuite(cuda_dtypes, .init = gpu_or_skip, .fini = gpu_done);

/* The compute dtypes under test and the bound of their outputs. */
typedef struct Dt {
    DType t;
    double rel;
} Dt;
static const Dt DTS[] = {{DTYPE_BF16, 1e-2}, {DTYPE_FP16, 2e-3}};
#define NDTS (sizeof DTS / sizeof DTS[0])

/* ---- buffers: what one case allocated, freed together ---- */

enum { POOL_MAX = 48 };
typedef struct Pool {
    void *host[POOL_MAX], *dev[POOL_MAX];
    int nh, nd;
} Pool;

static void *keep_host(Pool *p, void *h) {
    cr_assert_not_null(h, "out of host memory");
    cr_assert_lt(p->nh, POOL_MAX);
    p->host[p->nh++] = h;
    return h;
}

static void *keep_dev(Pool *p, void *d) {
    cr_assert_lt(p->nd, POOL_MAX);
    p->dev[p->nd++] = d;
    return d;
}

static void pool_free(Pool *p) {
    for (int i = 0; i < p->nh; i++) free(p->host[i]);
    for (int i = 0; i < p->nd; i++) gpu_free(p->dev[i]);
    p->nh = p->nd = 0;
}

/* n elements of t drawn uniform in [lo, hi) in fp32 (seeded) and rounded to t: a host array. */
static void *h_rand(Pool *p, DType t, size_t n, float lo, float hi, unsigned seed) {
    float *f = host_random(n, lo, hi, seed);
    void *h = keep_host(p, malloc((n ? n : 1) * dtype_size(t)));
    dtype_narrow(h, t, f, n);
    free(f);
    return h;
}

/* Host room for n elements of t (zeros), for the CPU's outputs. */
static void *h_zeros(Pool *p, DType t, size_t n) {
    return keep_host(p, calloc(n ? n : 1, dtype_size(t)));
}

static void *h_dup(Pool *p, const void *src, size_t bytes) {
    void *h = keep_host(p, malloc(bytes ? bytes : 1));
    if (bytes) memcpy(h, src, bytes);
    return h;
}

/* fp32 host values, seeded. */
static float *h_f32(Pool *p, size_t n, float lo, float hi, unsigned seed) {
    return keep_host(p, host_random(n, lo, hi, seed));
}

/* A device copy of `bytes` host bytes. */
static void *d_put(Pool *p, const void *h, size_t bytes) {
    void *d = keep_dev(p, gpu_alloc(bytes ? bytes : 1));
    if (bytes) gpu_put(d, h, bytes);
    return d;
}

/* `bytes` of device memory, all bits set: NaN in fp32, bf16 and fp16. */
static void *d_poison(Pool *p, size_t bytes) {
    void *d = keep_dev(p, gpu_alloc(bytes ? bytes : 1));
    gpu_poison(d, bytes ? bytes : 1);
    return d;
}

/* n elements of t in device memory `d`, widened into host floats (free them). */
static float *fetch_widened(const Dt *dt, const void *d, size_t n) {
    const size_t bytes = n * dtype_size(dt->t);
    void *got = malloc(bytes ? bytes : 1);
    cr_assert_not_null(got);
    if (bytes) gpu_get(got, d, bytes);
    float *g = host_floats(n);
    dtype_widen(g, got, dt->t, n);
    free(got);
    return g;
}

/* n elements of t in device memory `d` against the CPU's `want` (host), both widened. */
static void expect_t(const Dt *dt, const void *d, const void *want, size_t n, const char *what) {
    float *g = fetch_widened(dt, d, n), *w = host_floats(n);
    dtype_widen(w, want, dt->t, n);
    gpu_expect_close(g, w, n, dt->rel, fmt_text("%s %s", dtype_name(dt->t), what));
    free(g), free(w);
}

/* GELU's n outputs of t (device `d`) against the CPU's `want` at inputs x (fp32, host): each
 * within rel of want, plus GELU_ERF_ABS of |x| / 2 for the two erfs, plus t's smallest step for
 * the two near-equal fp32 values rounding apart among subnormals (fp16's negative tail: at x
 * -4.19 the CPU and glibc's erf put fp16's GELU two steps apart, relative 2.004e-3). */
static void expect_gelu_t(const Dt *dt, const void *d, const void *want, const float *x, size_t n,
                          const char *what) {
    float *g = fetch_widened(dt, d, n), *w = host_floats(n);
    dtype_widen(w, want, dt->t, n);
    gpu_expect_gelu_close(g, w, x, n, dt->rel, dt->t == DTYPE_FP16 ? 0x1p-24 : 0x1p-133,
                          fmt_text("%s %s", dtype_name(dt->t), what));
    free(g), free(w);
}

/* x of GELU: a's n values of t, widened, plus b's (of N, per row) when there is a bias. */
static float *gelu_inputs(Pool *p, DType t, const void *a, const void *b, size_t n, size_t N) {
    float *x = keep_host(p, host_floats(n));
    for (size_t i = 0; i < n; i++) x[i] = dtype_load(a, t, i) + (b ? dtype_load(b, t, i % N) : 0);
    return x;
}

static void expect_f32(const Dt *dt, const float *d, const float *want, size_t n,
                       const char *what) {
    gpu_expect_close_dev(d, want, n, REL_F32, fmt_text("%s %s", dtype_name(dt->t), what));
}

static void expect_scalar(const Dt *dt, double got, double want, const char *what) {
    cr_expect(fabs(got - want) <= REL_F32 * fabs(want), "%s %s: %.9g, want %.9g", dtype_name(dt->t),
              what, got, want);
}

#define BYTES(dt, n) ((n)*dtype_size((dt)->t))

/* ---- the toy and MSE ---- */

Test(cuda_dtypes, toy_and_mse) {
    const size_t sizes[] = {1, 1000, 4097};
    for (size_t k = 0; k < NDTS; k++)
        for (size_t s = 0; s < 3; s++) {
            const Dt *dt = &DTS[k];
            const DType t = dt->t;
            const size_t n = sizes[s];
            const unsigned seed = 10 + 10 * (unsigned)s;
            Pool p = {0};
            void *w = h_rand(&p, t, 3, 0.5f, 1.5f, seed), *x = h_rand(&p, t, n, -2, 2, seed + 1);
            void *dy = h_rand(&p, t, n, -1, 1, seed + 2);
            float *dw0 = h_f32(&p, 3, -1, 1, seed + 3), *target = h_f32(&p, n, -1, 1, seed + 4);
            void *y = h_zeros(&p, t, n), *dx = h_zeros(&p, t, n), *mdy = h_zeros(&p, t, n);
            float *dw = h_dup(&p, dw0, 3 * sizeof(float));
            CPU->toy_forward(t, w, x, y, n);
            CPU->toy_backward(t, w, x, dy, dx, dw, n);
            const float loss = CPU->mse_loss(t, x, target, mdy, n);

            void *d_w = d_put(&p, w, BYTES(dt, 3)), *d_x = d_put(&p, x, BYTES(dt, n));
            void *d_dy = d_put(&p, dy, BYTES(dt, n)), *d_y = d_poison(&p, BYTES(dt, n));
            void *d_dx = d_poison(&p, BYTES(dt, n)), *d_mdy = d_poison(&p, BYTES(dt, n));
            float *d_dw = d_put(&p, dw0, 3 * sizeof(float));
            float *d_target = d_put(&p, target, n * sizeof(float));
            GPU->toy_forward(t, d_w, d_x, d_y, n);
            GPU->toy_backward(t, d_w, d_x, d_dy, d_dx, d_dw, n);
            const float d_loss = GPU->mse_loss(t, d_x, d_target, d_mdy, n);
            gpu_check();
            const char *c = fmt_text("(n %zu)", n);
            expect_t(dt, d_y, y, n, fmt_text("toy y %s", c));
            expect_t(dt, d_dx, dx, n, fmt_text("toy dx %s", c));
            expect_f32(dt, d_dw, dw, 3, fmt_text("toy dw %s", c));
            expect_scalar(dt, d_loss, loss, fmt_text("mse loss %s", c));
            expect_t(dt, d_mdy, mdy, n, fmt_text("mse dy %s", c));
            pool_free(&p);
        }
}

/* ---- elementwise: add, GELU, SwiGLU, bias + GELU, bias_grad ---- */

Test(cuda_dtypes, elementwise) {
    const size_t sizes[] = {1, 7, 4097, ((size_t)1 << 20) + 3};
    for (size_t k = 0; k < NDTS; k++)
        for (size_t s = 0; s < 4; s++) {
            const Dt *dt = &DTS[k];
            const DType t = dt->t;
            const size_t n = sizes[s];
            const unsigned seed = 100 + 10 * (unsigned)s;
            Pool p = {0};
            void *a = h_rand(&p, t, n, -4, 4, seed), *b = h_rand(&p, t, n, -2, 2, seed + 1);
            void *g = h_rand(&p, t, n, -1, 1, seed + 2);
            void *sum = h_zeros(&p, t, n), *gf = h_zeros(&p, t, n), *gb = h_zeros(&p, t, n);
            void *sf = h_zeros(&p, t, n), *sdg = h_zeros(&p, t, n), *sdu = h_zeros(&p, t, n);
            CPU->add(t, sum, a, b, n);
            CPU->gelu_forward(t, gf, a, n);
            CPU->gelu_backward(t, gb, a, g, n);
            CPU->swiglu_forward(t, sf, a, b, n);
            CPU->swiglu_backward(t, sdg, sdu, g, a, b, n);

            void *d_a = d_put(&p, a, BYTES(dt, n)), *d_b = d_put(&p, b, BYTES(dt, n));
            void *d_g = d_put(&p, g, BYTES(dt, n)), *d_g2 = d_put(&p, g, BYTES(dt, n));
            void *d_sum = d_poison(&p, BYTES(dt, n)), *d_gf = d_poison(&p, BYTES(dt, n));
            void *d_gb = d_poison(&p, BYTES(dt, n)), *d_sf = d_poison(&p, BYTES(dt, n));
            void *d_sdu = d_poison(&p, BYTES(dt, n));
            GPU->add(t, d_sum, d_a, d_b, n);
            GPU->gelu_forward(t, d_gf, d_a, n);
            GPU->gelu_backward(t, d_gb, d_a, d_g, n);
            GPU->swiglu_forward(t, d_sf, d_a, d_b, n);
            GPU->swiglu_backward(t, d_g2, d_sdu, d_g2, d_a, d_b, n); /* dgate over dout */
            gpu_check();
            const char *c = fmt_text("(n %zu)", n);
            expect_t(dt, d_sum, sum, n, fmt_text("add %s", c));
            expect_gelu_t(dt, d_gf, gf, gelu_inputs(&p, t, a, NULL, n, 1), n,
                          fmt_text("gelu forward %s", c));
            expect_t(dt, d_gb, gb, n, fmt_text("gelu backward %s", c));
            expect_t(dt, d_sf, sf, n, fmt_text("swiglu out %s", c));
            expect_t(dt, d_g2, sdg, n, fmt_text("swiglu dgate %s", c));
            expect_t(dt, d_sdu, sdu, n, fmt_text("swiglu dup %s", c));
            pool_free(&p);
        }
}

/* bias + GELU and its backward, bias_grad over a strided part of a wider output */
Test(cuda_dtypes, bias_gelu_and_bias_grad) {
    const size_t shapes[][2] = {{64 * 17, 128}, {1, 1}, {33, 17}, {5, 9000}, {5000, 3}};
    for (size_t k = 0; k < NDTS; k++)
        for (size_t s = 0; s < 5; s++) {
            const Dt *dt = &DTS[k];
            const DType t = dt->t;
            const size_t M = shapes[s][0], N = shapes[s][1], n = M * N;
            const unsigned seed = 200 + 10 * (unsigned)s;
            Pool p = {0};
            void *pre = h_rand(&p, t, n, -5, 5, seed), *b = h_rand(&p, t, N, -1, 1, seed + 1);
            void *dout = h_rand(&p, t, n, -1, 1, seed + 2);
            float *db0 = h_f32(&p, N, -2, 2, seed + 3);
            void *out = h_zeros(&p, t, n), *dpre = h_zeros(&p, t, n);
            float *db = h_dup(&p, db0, N * sizeof(float)), *bg = h_dup(&p, db0, N * sizeof(float));
            CPU->bias_gelu_forward(t, out, pre, b, M, N);
            CPU->bias_gelu_backward(t, dpre, db, dout, pre, b, M, N);
            /* bias_grad over the first N - N/2 columns of rows N apart */
            const size_t cols = N - N / 2;
            CPU->bias_grad(t, bg, dout, M, cols, N);

            void *d_pre = d_put(&p, pre, BYTES(dt, n)), *d_b = d_put(&p, b, BYTES(dt, N));
            void *d_dout = d_put(&p, dout, BYTES(dt, n)), *d_out = d_poison(&p, BYTES(dt, n));
            void *d_dpre = d_poison(&p, BYTES(dt, n));
            float *d_db = d_put(&p, db0, N * sizeof(float)), *d_bg = d_put(&p, db0, N * 4);
            GPU->bias_gelu_forward(t, d_out, d_pre, d_b, M, N);
            GPU->bias_gelu_backward(t, d_dpre, d_db, d_dout, d_pre, d_b, M, N);
            GPU->bias_grad(t, d_bg, d_dout, M, cols, N);
            gpu_check();
            const char *c = fmt_text("(%zu x %zu)", M, N);
            expect_gelu_t(dt, d_out, out, gelu_inputs(&p, t, pre, b, n, N), n,
                          fmt_text("bias_gelu out %s", c));
            expect_t(dt, d_dpre, dpre, n, fmt_text("bias_gelu dpre %s", c));
            expect_f32(dt, d_db, db, N, fmt_text("bias_gelu db %s", c));
            expect_f32(dt, d_bg, bg, N, fmt_text("bias_grad %s", c));
            pool_free(&p);
        }
}

/* ---- linear (cuBLASLt): A and B in t, out and din in t, dw in fp32 ---- */

/* LIN_BIAS_OFFSET: `offset` moves the bias alone, the other operands stay 256-byte aligned. */
enum { LIN_BIAS = 1, LIN_DIN = 2, LIN_DB = 4, LIN_ALL = 7, LIN_BIAS_OFFSET = 8 };

/* Forward and backward of one Linear; every device pointer starts `offset` elements into its
 * allocation (offset 1: 2-byte alignment, what a packed bf16 buffer can hand out). */
static void check_linear(const Dt *dt, size_t M, size_t K, size_t N, int flags, unsigned seed,
                         size_t offset) {
    const DType t = dt->t;
    /* the matrices' offset in elements, and the bias's and the matrices' in bytes */
    const size_t off = (flags & LIN_BIAS_OFFSET) ? 0 : offset;
    const size_t e = dtype_size(t), ob = offset * e, o = off * e;
    Pool p = {0};
    void *in = h_rand(&p, t, M * K, -1, 1, seed), *w = h_rand(&p, t, N * K, -1, 1, seed + 1);
    void *b = (flags & LIN_BIAS) ? h_rand(&p, t, N, -1, 1, seed + 2) : NULL;
    void *dout = h_rand(&p, t, M * N, -1, 1, seed + 3);
    float *dw0 = h_f32(&p, N * K, -4, 4, seed + 4), *db0 = h_f32(&p, N, -4, 4, seed + 5);
    void *out = h_zeros(&p, t, M * N), *din = h_zeros(&p, t, M * K);
    float *dw = h_dup(&p, dw0, N * K * 4), *db = h_dup(&p, db0, N * 4);
    CPU->linear_forward(t, out, in, w, b, M, K, N);
    CPU->linear_backward(t, (flags & LIN_DIN) ? din : NULL, dw, (flags & LIN_DB) ? db : NULL, dout,
                         in, w, M, K, N);

    char *a_in = d_poison(&p, o + M * K * e), *a_w = d_poison(&p, o + N * K * e);
    char *a_b = d_poison(&p, ob + N * e), *a_dout = d_poison(&p, o + M * N * e);
    char *a_out = d_poison(&p, o + M * N * e), *a_din = d_poison(&p, o + M * K * e);
    float *a_dw = d_poison(&p, (off + N * K) * 4), *a_db = d_poison(&p, (off + N) * 4);
    void *d_in = a_in + o, *d_w = a_w + o, *d_b = a_b + ob, *d_dout = a_dout + o;
    void *d_out = a_out + o, *d_din = a_din + o;
    float *d_dw = a_dw + off, *d_db = a_db + off;
    gpu_put(d_in, in, M * K * e); /* 0 bytes copy nothing */
    gpu_put(d_w, w, N * K * e);
    if (b) gpu_put(d_b, b, N * e);
    gpu_put(d_dout, dout, M * N * e);
    gpu_put(d_dw, dw0, N * K * 4);
    gpu_put(d_db, db0, N * 4);
    GPU->linear_forward(t, d_out, d_in, d_w, b ? d_b : NULL, M, K, N);
    GPU->linear_backward(t, (flags & LIN_DIN) ? d_din : NULL, d_dw, (flags & LIN_DB) ? d_db : NULL,
                         d_dout, d_in, d_w, M, K, N);
    gpu_check();
    const char *c = fmt_text("(M %zu K %zu N %zu flags %d offset %zu)", M, K, N, flags, offset);
    expect_t(dt, d_out, out, M * N, fmt_text("linear out %s", c));
    if (flags & LIN_DIN) expect_t(dt, d_din, din, M * K, fmt_text("linear din %s", c));
    expect_f32(dt, d_dw, dw, N * K, fmt_text("linear dw %s", c));
    if (flags & LIN_DB) expect_f32(dt, d_db, db, N, fmt_text("linear db %s", c));
    pool_free(&p);
}

Test(cuda_dtypes, linear) {
    for (size_t k = 0; k < NDTS; k++) {
        const Dt *dt = &DTS[k];
        check_linear(dt, 64 * 17, 128, 384, LIN_ALL, 300, 0);          /* vit-tiny's in_proj */
        check_linear(dt, 64 * 17, 128, 128, LIN_DIN | LIN_DB, 310, 0); /* no bias */
        check_linear(dt, 64 * 16, 49, 128, LIN_BIAS | LIN_DB, 320, 0); /* patches: K odd */
        check_linear(dt, 68, 3840, 768, LIN_ALL, 330, 0);              /* vit-workshop's mlp */
        check_linear(dt, 1, 1, 1, LIN_ALL, 340, 0);
        check_linear(dt, 7, 33, 5, LIN_ALL, 350, 0);
        check_linear(dt, 33, 17, 65, LIN_BIAS, 360, 0); /* no din, no db */
        check_linear(dt, 5, 0, 4, LIN_ALL, 370, 0);     /* K == 0: out is the bias */
        check_linear(dt, 5, 0, 4, LIN_DIN | LIN_DB, 380, 0);
        check_linear(dt, 5, 3, 0, LIN_ALL, 390, 0); /* N == 0: din is zero */
        for (size_t off = 1; off <= 3; off++) {
            check_linear(dt, 64 * 17, 128, 384, LIN_ALL, 400 + (unsigned)off, off);
            check_linear(dt, 33, 17, 65, LIN_ALL, 410 + (unsigned)off, off);
            /* a flat bf16 unit puts a bias at any even address, its matrices aligned or not */
            check_linear(dt, 64 * 17, 128, 384, LIN_ALL | LIN_BIAS_OFFSET, 420 + (unsigned)off,
                         off);
        }
    }
}

/* Few output tiles and a deep K are where cuBLASLt splits K: each output must still be its fp32
 * sum rounded once, as the CPU's is, so the two differ by at most one unit in the last place
 * (their fp32 sums differ only by the order of the adds). Slices added in bf16 or fp16 would
 * round each partial sum again: several units at these sums (about 40). */
Test(cuda_dtypes, linear_rounds_each_sum_once) {
    for (size_t k = 0; k < NDTS; k++) {
        const DType t = DTS[k].t;
        const size_t M = 8, K = 16384, N = 64, e = dtype_size(t);
        Pool p = {0};
        void *in = h_rand(&p, t, M * K, -1, 1, 500), *w = h_rand(&p, t, N * K, -1, 1, 501);
        void *out = h_zeros(&p, t, M * N), *got = h_zeros(&p, t, M * N);
        CPU->linear_forward(t, out, in, w, NULL, M, K, N);
        void *d_in = d_put(&p, in, M * K * e), *d_w = d_put(&p, w, N * K * e);
        void *d_out = d_poison(&p, M * N * e);
        GPU->linear_forward(t, d_out, d_in, d_w, NULL, M, K, N);
        gpu_check();
        gpu_get(got, d_out, M * N * e);
        const uint16_t *g = got, *c = out;
        for (size_t i = 0; i < M * N; i++) {
            const float gf = dtype_load(got, t, i), cf = dtype_load(out, t, i);
            const uint16_t up = (uint16_t)(c[i] + 1); /* the next value away from zero */
            const float ulp = fabsf(dtype_load(&up, t, 0) - cf);
            /* 1e-4: far above two fp32 orders' difference (about 3e-6 here), which near a zero
             * sum is more than an ulp of it */
            cr_expect(fabsf(gf - cf) <= ulp + 1e-4f, "%s [%zu]: 0x%04x against the CPU's 0x%04x",
                      dtype_name(t), i, g[i], c[i]);
        }
        pool_free(&p);
    }
}

/* ---- LayerNorm, residual + LayerNorm, RMSNorm ---- */

Test(cuda_dtypes, norms) {
    /* rows of a warp's and of a block's (C > 1024), one row, one column */
    const size_t shapes[][2] = {{64 * 17, 128}, {68, 3840}, {1, 7}, {5, 1}, {33, 1000}};
    const float eps = 1e-5f;
    for (size_t k = 0; k < NDTS; k++)
        for (size_t s = 0; s < 5; s++) {
            const Dt *dt = &DTS[k];
            const DType t = dt->t;
            const size_t M = shapes[s][0], C = shapes[s][1], n = M * C;
            const unsigned seed = 500 + 10 * (unsigned)s;
            Pool p = {0};
            void *x = h_rand(&p, t, n, -2, 2, seed), *y = h_rand(&p, t, n, -2, 2, seed + 1);
            void *w = h_rand(&p, t, C, 0.5f, 1.5f, seed + 2);
            void *b = h_rand(&p, t, C, -0.5f, 0.5f, seed + 3);
            void *dout = h_rand(&p, t, n, -1, 1, seed + 4);
            void *din0 = h_rand(&p, t, n, -1, 1, seed + 5); /* "+=" */
            float *dw0 = h_f32(&p, C, -1, 1, seed + 6), *db0 = h_f32(&p, C, -1, 1, seed + 7);
            void *out = h_zeros(&p, t, n), *sum = h_zeros(&p, t, n), *rout = h_zeros(&p, t, n);
            float *mean = h_f32(&p, M, 0, 1, 1), *rstd = h_f32(&p, M, 0, 1, 2);
            float *rmean = h_f32(&p, M, 0, 1, 3), *rrstd = h_f32(&p, M, 0, 1, 4);
            void *din = h_dup(&p, din0, BYTES(dt, n));
            float *dw = h_dup(&p, dw0, C * 4), *db = h_dup(&p, db0, C * 4);
            void *rms = h_zeros(&p, t, n), *rdin = h_dup(&p, din0, BYTES(dt, n));
            float *rr = h_f32(&p, M, 0, 1, 5), *rdw = h_dup(&p, dw0, C * 4);
            CPU->layernorm_forward(t, out, mean, rstd, x, w, b, M, C, eps);
            CPU->layernorm_backward(t, din, dw, db, dout, x, mean, rstd, w, M, C);
            CPU->residual_layernorm_forward(t, sum, rout, rmean, rrstd, x, y, w, b, M, C, eps);
            CPU->rmsnorm_forward(t, rms, rr, x, w, M, C, eps);
            CPU->rmsnorm_backward(t, rdin, rdw, dout, x, rr, w, M, C);

            void *d_x = d_put(&p, x, BYTES(dt, n)), *d_y = d_put(&p, y, BYTES(dt, n));
            void *d_w = d_put(&p, w, BYTES(dt, C)), *d_b = d_put(&p, b, BYTES(dt, C));
            void *d_dout = d_put(&p, dout, BYTES(dt, n)), *d_out = d_poison(&p, BYTES(dt, n));
            float *d_mean = d_poison(&p, M * 4), *d_rstd = d_poison(&p, M * 4);
            float *d_mean_c = d_put(&p, mean, M * 4), *d_rstd_c = d_put(&p, rstd, M * 4);
            void *d_din = d_put(&p, din0, BYTES(dt, n));
            float *d_dw = d_put(&p, dw0, C * 4), *d_db = d_put(&p, db0, C * 4);
            void *d_sum = d_poison(&p, BYTES(dt, n)), *d_rout = d_poison(&p, BYTES(dt, n));
            float *d_rmean = d_poison(&p, M * 4), *d_rrstd = d_poison(&p, M * 4);
            void *d_rms = d_poison(&p, BYTES(dt, n)), *d_rdin = d_put(&p, din0, BYTES(dt, n));
            float *d_rr = d_poison(&p, M * 4), *d_rr_c = d_put(&p, rr, M * 4);
            float *d_rdw = d_put(&p, dw0, C * 4);
            GPU->layernorm_forward(t, d_out, d_mean, d_rstd, d_x, d_w, d_b, M, C, eps);
            GPU->layernorm_backward(t, d_din, d_dw, d_db, d_dout, d_x, d_mean_c, d_rstd_c, d_w, M,
                                    C);
            GPU->residual_layernorm_forward(t, d_sum, d_rout, d_rmean, d_rrstd, d_x, d_y, d_w, d_b,
                                            M, C, eps);
            GPU->rmsnorm_forward(t, d_rms, d_rr, d_x, d_w, M, C, eps);
            GPU->rmsnorm_backward(t, d_rdin, d_rdw, d_dout, d_x, d_rr_c, d_w, M, C);
            gpu_check();
            const char *c = fmt_text("(%zu x %zu)", M, C);
            expect_t(dt, d_out, out, n, fmt_text("layernorm out %s", c));
            expect_f32(dt, d_mean, mean, M, fmt_text("layernorm mean %s", c));
            expect_f32(dt, d_rstd, rstd, M, fmt_text("layernorm rstd %s", c));
            expect_t(dt, d_din, din, n, fmt_text("layernorm din %s", c));
            expect_f32(dt, d_dw, dw, C, fmt_text("layernorm dw %s", c));
            expect_f32(dt, d_db, db, C, fmt_text("layernorm db %s", c));
            /* the sum is rounded once, so both sides store the same elements */
            expect_t(dt, d_sum, sum, n, fmt_text("residual sum %s", c));
            expect_t(dt, d_rout, rout, n, fmt_text("residual layernorm out %s", c));
            expect_f32(dt, d_rmean, rmean, M, fmt_text("residual layernorm mean %s", c));
            expect_f32(dt, d_rrstd, rrstd, M, fmt_text("residual layernorm rstd %s", c));
            expect_t(dt, d_rms, rms, n, fmt_text("rmsnorm out %s", c));
            expect_f32(dt, d_rr, rr, M, fmt_text("rmsnorm rstd %s", c));
            expect_t(dt, d_rdin, rdin, n, fmt_text("rmsnorm din %s", c));
            expect_f32(dt, d_rdw, rdw, C, fmt_text("rmsnorm dw %s", c));
            pool_free(&p);
        }
}

/* ---- the ViT's patches, tokens and head ---- */

Test(cuda_dtypes, vit_ops) {
    for (size_t k = 0; k < NDTS; k++) {
        const Dt *dt = &DTS[k];
        const DType t = dt->t;
        const size_t B = 8, S = 28, P = 7, G = S / P, T = 1 + G * G, C = 64, classes = 10;
        const size_t np = B * G * G * P * P, nx = B * T * C, npo = B * (T - 1) * C;
        Pool p = {0};
        void *img = h_rand(&p, t, B * S * S, -1, 1, 600), *po = h_rand(&p, t, npo, -1, 1, 601);
        void *cls = h_rand(&p, t, C, -1, 1, 602), *pos = h_rand(&p, t, T * C, -1, 1, 603);
        void *dx = h_rand(&p, t, nx, -1, 1, 604), *dsel = h_rand(&p, t, B * C, -1, 1, 605);
        float *dcls0 = h_f32(&p, C, -1, 1, 606), *dpos0 = h_f32(&p, T * C, -1, 1, 607);
        void *patches = h_zeros(&p, t, np), *x = h_zeros(&p, t, nx), *dpo = h_zeros(&p, t, npo);
        void *sel = h_zeros(&p, t, B * C), *dxs = h_dup(&p, dx, BYTES(dt, nx)); /* "+=" */
        float *dcls = h_dup(&p, dcls0, C * 4), *dpos = h_dup(&p, dpos0, T * C * 4);
        CPU->patchify(t, patches, img, B, S, P);
        CPU->embed_forward(t, x, po, cls, pos, B, T, C);
        CPU->embed_backward(t, dcls, dpos, dpo, dx, B, T, C);
        CPU->class_token_select(t, sel, x, B, T, C);
        CPU->class_token_select_backward(t, dxs, dsel, B, T, C);

        void *d_img = d_put(&p, img, BYTES(dt, B * S * S)), *d_po = d_put(&p, po, BYTES(dt, npo));
        void *d_cls = d_put(&p, cls, BYTES(dt, C)), *d_pos = d_put(&p, pos, BYTES(dt, T * C));
        void *d_dx = d_put(&p, dx, BYTES(dt, nx)), *d_dsel = d_put(&p, dsel, BYTES(dt, B * C));
        void *d_x_c = d_put(&p, x, BYTES(dt, nx)); /* the CPU's tokens, for the selection */
        float *d_dcls = d_put(&p, dcls0, C * 4), *d_dpos = d_put(&p, dpos0, T * C * 4);
        void *d_patches = d_poison(&p, BYTES(dt, np)), *d_x = d_poison(&p, BYTES(dt, nx));
        void *d_dpo = d_poison(&p, BYTES(dt, npo)), *d_sel = d_poison(&p, BYTES(dt, B * C));
        void *d_dxs = d_put(&p, dx, BYTES(dt, nx));
        GPU->patchify(t, d_patches, d_img, B, S, P);
        GPU->embed_forward(t, d_x, d_po, d_cls, d_pos, B, T, C);
        GPU->embed_backward(t, d_dcls, d_dpos, d_dpo, d_dx, B, T, C);
        GPU->class_token_select(t, d_sel, d_x_c, B, T, C);
        GPU->class_token_select_backward(t, d_dxs, d_dsel, B, T, C);
        gpu_check();
        expect_t(dt, d_patches, patches, np, "patchify");
        expect_t(dt, d_x, x, nx, "embed_forward");
        expect_f32(dt, d_dcls, dcls, C, "embed_backward dcls");
        expect_f32(dt, d_dpos, dpos, T * C, "embed_backward dpos");
        expect_t(dt, d_dpo, dpo, npo, "embed_backward dpatch_out");
        expect_t(dt, d_sel, sel, B * C, "class_token_select");
        expect_t(dt, d_dxs, dxs, nx, "class_token_select_backward");

        /* the loss and the accuracy, labels of every class, on rows of 10 and of 1000 */
        const size_t rows[] = {64, 33}, widths[] = {classes, 1000};
        for (size_t r = 0; r < 2; r++) {
            const size_t Bl = rows[r], V = widths[r];
            int32_t *labels = keep_host(&p, malloc(Bl * sizeof(int32_t)));
            for (size_t i = 0; i < Bl; i++) labels[i] = (int32_t)((i * 7) % V);
            void *logits = h_rand(&p, t, Bl * V, -4, 4, 610 + (unsigned)r);
            void *dl = h_zeros(&p, t, Bl * V);
            const float loss = CPU->cross_entropy(t, dl, logits, labels, Bl, V, 0.5f);
            const size_t right = CPU->count_correct(t, logits, labels, Bl, V);
            void *d_logits = d_put(&p, logits, BYTES(dt, Bl * V));
            void *d_dl = d_poison(&p, BYTES(dt, Bl * V));
            int32_t *d_labels = d_put(&p, labels, Bl * sizeof(int32_t));
            const float d_loss = GPU->cross_entropy(t, d_dl, d_logits, d_labels, Bl, V, 0.5f);
            const size_t d_right = GPU->count_correct(t, d_logits, d_labels, Bl, V);
            gpu_check();
            const char *c = fmt_text("(%zu x %zu)", Bl, V);
            expect_scalar(dt, d_loss, loss, fmt_text("cross_entropy loss %s", c));
            expect_t(dt, d_dl, dl, Bl * V, fmt_text("cross_entropy dlogits %s", c));
            cr_expect_eq(d_right, right, "%s count_correct %s: %zu, want %zu", dtype_name(t), c,
                         d_right, right);
        }
        pool_free(&p);
    }
}

/* ---- the language model's embeddings and RoPE ---- */

Test(cuda_dtypes, token_embedding_and_rope) {
    for (size_t k = 0; k < NDTS; k++) {
        const Dt *dt = &DTS[k];
        const DType t = dt->t;
        const size_t B = 4, T = 64, C = 96, V = 256, n = B * T;
        Pool p = {0};
        int32_t *ids = keep_host(&p, malloc(n * sizeof(int32_t)));
        for (size_t i = 0; i < n; i++) ids[i] = (int32_t)((i * 37) % V);
        void *wte = h_rand(&p, t, V * C, -1, 1, 700), *wpe = h_rand(&p, t, T * C, -1, 1, 701);
        void *dx = h_rand(&p, t, n * C, -1, 1, 702);
        float *dwte0 = h_f32(&p, V * C, -1, 1, 703), *dwpe0 = h_f32(&p, T * C, -1, 1, 704);
        void *x = h_zeros(&p, t, n * C), *x0 = h_zeros(&p, t, n * C);
        float *dwte = h_dup(&p, dwte0, V * C * 4), *dwpe = h_dup(&p, dwpe0, T * C * 4);
        CPU->token_embed_forward(t, x, ids, wte, wpe, B, T, C, V);
        CPU->token_embed_forward(t, x0, ids, wte, NULL, B, T, C, V);
        CPU->token_embed_backward(t, dwte, dwpe, ids, dx, B, T, C, V);
        int32_t *d_ids = d_put(&p, ids, n * sizeof(int32_t));
        void *d_wte = d_put(&p, wte, BYTES(dt, V * C)), *d_wpe = d_put(&p, wpe, BYTES(dt, T * C));
        void *d_dx = d_put(&p, dx, BYTES(dt, n * C));
        void *d_x = d_poison(&p, BYTES(dt, n * C)), *d_x0 = d_poison(&p, BYTES(dt, n * C));
        float *d_dwte = d_put(&p, dwte0, V * C * 4), *d_dwpe = d_put(&p, dwpe0, T * C * 4);
        GPU->token_embed_forward(t, d_x, d_ids, d_wte, d_wpe, B, T, C, V);
        GPU->token_embed_forward(t, d_x0, d_ids, d_wte, NULL, B, T, C, V);
        GPU->token_embed_backward(t, d_dwte, d_dwpe, d_ids, d_dx, B, T, C, V);
        gpu_check();
        expect_t(dt, d_x, x, n * C, "token_embed_forward");
        expect_t(dt, d_x0, x0, n * C, "token_embed_forward without positions");
        expect_f32(dt, d_dwte, dwte, V * C, "token_embed_backward dwte");
        expect_f32(dt, d_dwpe, dwpe, T * C, "token_embed_backward dwpe");

        /* RoPE in place over 4 heads of 32, at Llama 3's theta */
        const size_t heads = 4, D = 32, m = B * T * heads * D;
        void *r = h_rand(&p, t, m, -1, 1, 710);
        void *fwd = h_dup(&p, r, BYTES(dt, m)), *bwd = h_dup(&p, r, BYTES(dt, m));
        CPU->rope_forward(t, fwd, B, T, heads, D, 500000.0f);
        CPU->rope_backward(t, bwd, B, T, heads, D, 500000.0f);
        void *d_f = d_put(&p, r, BYTES(dt, m)), *d_b = d_put(&p, r, BYTES(dt, m));
        GPU->rope_forward(t, d_f, B, T, heads, D, 500000.0f);
        GPU->rope_backward(t, d_b, B, T, heads, D, 500000.0f);
        gpu_check();
        expect_t(dt, d_f, fwd, m, "rope forward");
        expect_t(dt, d_b, bwd, m, "rope backward");
        pool_free(&p);
    }
}

/* ---- attention over packed qkv (the ViT's, and the LM's causal one) ---- */

/* Forward (out, probs), then backward from the CPU's probs. */
static void check_packed_attention(const Dt *dt, size_t B, size_t T, size_t C, size_t heads,
                                   int causal, unsigned seed) {
    const DType t = dt->t;
    const size_t n_qkv = B * T * 3 * C, n_out = B * T * C, n_probs = B * heads * T * T;
    Pool p = {0};
    void *qkv = h_rand(&p, t, n_qkv, -2, 2, seed), *dout = h_rand(&p, t, n_out, -1, 1, seed + 1);
    void *out = h_zeros(&p, t, n_out), *probs = h_zeros(&p, t, n_probs);
    void *dqkv = h_zeros(&p, t, n_qkv);
    if (causal)
        CPU->causal_attention_forward(t, out, probs, qkv, B, T, C, heads);
    else
        CPU->attention_forward(t, out, probs, qkv, B, T, C, heads);
    CPU->attention_backward(t, dqkv, dout, qkv, probs, B, T, C, heads);
    void *d_qkv = d_put(&p, qkv, BYTES(dt, n_qkv)), *d_dout = d_put(&p, dout, BYTES(dt, n_out));
    void *d_probs_c = d_put(&p, probs, BYTES(dt, n_probs));
    void *d_out = d_poison(&p, BYTES(dt, n_out)), *d_probs = d_poison(&p, BYTES(dt, n_probs));
    void *d_dqkv = d_poison(&p, BYTES(dt, n_qkv));
    if (causal)
        GPU->causal_attention_forward(t, d_out, d_probs, d_qkv, B, T, C, heads);
    else
        GPU->attention_forward(t, d_out, d_probs, d_qkv, B, T, C, heads);
    GPU->attention_backward(t, d_dqkv, d_dout, d_qkv, d_probs_c, B, T, C, heads);
    gpu_check();
    const char *c = fmt_text("(B %zu T %zu C %zu heads %zu causal %d)", B, T, C, heads, causal);
    expect_t(dt, d_out, out, n_out, fmt_text("attention out %s", c));
    expect_t(dt, d_probs, probs, n_probs, fmt_text("attention probs %s", c));
    expect_t(dt, d_dqkv, dqkv, n_qkv, fmt_text("attention dqkv %s", c));
    pool_free(&p);
}

Test(cuda_dtypes, packed_attention) {
    for (size_t k = 0; k < NDTS; k++) {
        const Dt *dt = &DTS[k];
        check_packed_attention(dt, 16, 17, 128, 2, 0, 800); /* vit-tiny: resident */
        check_packed_attention(dt, 2, 17, 3840, 8, 0, 810); /* vit-workshop: D 480 */
        check_packed_attention(dt, 5, 33, 15, 3, 1, 820);   /* D 5, causal */
        check_packed_attention(dt, 1, 1, 4, 1, 0, 830);     /* one token */
        check_packed_attention(dt, 2, 256, 64, 2, 1, 840);  /* the LM's: tiled */
        check_packed_attention(dt, 2, 37, 3000, 2, 0, 850); /* tiled, odd T and D */
        check_packed_attention(dt, 1, 200, 2 * 1201, 2, 1, 860);
    }
}

/* The tiled backward's fp32 accumulators of dk and dv live in the cuBLASLt workspace, 2 T D
 * floats a (sample, head) pair, as many pairs a launch as 32 MiB holds: T 32 and D 4096 make that
 * 32 pairs, so 9 samples of 4 heads take two launches. */
Test(cuda_dtypes, packed_attention_backward_in_two_launches) {
    for (size_t k = 0; k < NDTS; k++) check_packed_attention(&DTS[k], 9, 32, 16384, 4, 0, 870);
}

/* ---- attention over strided q, k, v: eager (grouped-query) and flash ---- */

/* Which attention check_strided_attention runs: eager keeps T x T probabilities (T <=
 * KERNELS_MAX_TOKENS on the GPU, and the CPU's grow as T^2), so long sequences check flash alone;
 * flash takes head_dim up to 256, so the widest heads check eager alone. */
enum { EAGER = 1, FLASH = 2 };

/* q, k and v are qkv's elements from 0, k_off and v_off at the shape's strides. Backward ops read
 * the CPU's probs, out and lse. */
static void check_strided_attention(const Dt *dt, const AttnShape *s, size_t k_off, size_t v_off,
                                    size_t n_qkv, unsigned seed, int kinds) {
    const DType t = dt->t;
    const size_t n_out = s->B * s->T * s->heads * s->head_dim;
    const size_t n_probs = s->B * s->heads * s->T * s->T, n_lse = s->B * s->heads * s->T;
    Pool p = {0};
    void *qkv = h_rand(&p, t, n_qkv, -2, 2, seed), *dout = h_rand(&p, t, n_out, -1, 1, seed + 1);
    void *q = qkv, *k = dtype_at(qkv, t, k_off), *v = dtype_at(qkv, t, v_off);
    void *d_qkv = d_put(&p, qkv, BYTES(dt, n_qkv)), *d_dout = d_put(&p, dout, BYTES(dt, n_out));
    void *dq = d_qkv, *dk = dtype_at(d_qkv, t, k_off), *dv = dtype_at(d_qkv, t, v_off);
    const char *c = fmt_text("(B %zu T %zu heads %zu/%zu D %zu causal %d)", s->B, s->T, s->heads,
                             s->kv_heads, s->head_dim, s->causal);
    /* q, k and v cover the buffer (no gaps in these layouts), so every element is an output */
    if (kinds & EAGER) {
        void *out = h_zeros(&p, t, n_out), *probs = h_zeros(&p, t, n_probs);
        void *dqkv = h_zeros(&p, t, n_qkv);
        CPU->gqa_attention_forward(t, out, probs, q, k, v, s);
        CPU->gqa_attention_backward(t, dqkv, dtype_at(dqkv, t, k_off), dtype_at(dqkv, t, v_off),
                                    dout, q, k, v, probs, s);
        void *d_probs_c = d_put(&p, probs, BYTES(dt, n_probs));
        void *d_out = d_poison(&p, BYTES(dt, n_out)), *d_probs = d_poison(&p, BYTES(dt, n_probs));
        void *d_dqkv = d_poison(&p, BYTES(dt, n_qkv));
        GPU->gqa_attention_forward(t, d_out, d_probs, dq, dk, dv, s);
        GPU->gqa_attention_backward(t, d_dqkv, dtype_at(d_dqkv, t, k_off),
                                    dtype_at(d_dqkv, t, v_off), d_dout, dq, dk, dv, d_probs_c, s);
        gpu_check();
        expect_t(dt, d_out, out, n_out, fmt_text("eager out %s", c));
        expect_t(dt, d_probs, probs, n_probs, fmt_text("eager probs %s", c));
        expect_t(dt, d_dqkv, dqkv, n_qkv, fmt_text("eager grads %s", c));
    }
    if (kinds & FLASH) {
        void *fout = h_zeros(&p, t, n_out), *fqkv = h_zeros(&p, t, n_qkv);
        float *lse = h_f32(&p, n_lse, 0, 1, 1), *work = h_f32(&p, s->T * s->T, 0, 1, 2);
        CPU->flash_attention_forward(t, fout, lse, q, k, v, s);
        CPU->flash_attention_backward(t, fqkv, dtype_at(fqkv, t, k_off), dtype_at(fqkv, t, v_off),
                                      dout, q, k, v, fout, lse, work, s);
        void *d_fout_c = d_put(&p, fout, BYTES(dt, n_out));
        float *d_lse_c = d_put(&p, lse, n_lse * 4), *d_work = d_poison(&p, s->T * s->T * 4);
        void *d_fout = d_poison(&p, BYTES(dt, n_out));
        float *d_lse = d_poison(&p, n_lse * 4);
        void *d_fqkv = d_poison(&p, BYTES(dt, n_qkv));
        GPU->flash_attention_forward(t, d_fout, d_lse, dq, dk, dv, s);
        GPU->flash_attention_backward(t, d_fqkv, dtype_at(d_fqkv, t, k_off),
                                      dtype_at(d_fqkv, t, v_off), d_dout, dq, dk, dv, d_fout_c,
                                      d_lse_c, d_work, s);
        gpu_check();
        expect_t(dt, d_fout, fout, n_out, fmt_text("flash out %s", c));
        expect_f32(dt, d_lse, lse, n_lse, fmt_text("flash lse %s", c));
        expect_t(dt, d_fqkv, fqkv, n_qkv, fmt_text("flash grads %s", c));
    }
    pool_free(&p);
}

/* Llama's separate q [rows, heads D] and k, v [rows, kv_heads D] laid end to end. */
static void check_separate(const Dt *dt, size_t B, size_t T, size_t heads, size_t kv, size_t D,
                           int causal, unsigned seed, int kinds) {
    AttnShape s = {B, T, heads, kv, D, heads * D, kv * D, causal};
    const size_t rows = B * T, nq = rows * heads * D, nkv = rows * kv * D;
    check_strided_attention(dt, &s, nq, nq + nkv, nq + 2 * nkv, seed, kinds);
}

Test(cuda_dtypes, grouped_query_and_flash_attention) {
    for (size_t k = 0; k < NDTS; k++) {
        const Dt *dt = &DTS[k];
        const int both = EAGER | FLASH;
        check_separate(dt, 16, 64, 4, 2, 32, 1, 900, both); /* train --model llama's default */
        check_separate(dt, 2, 1, 8, 1, 16, 1, 910, both);   /* one token */
        check_separate(dt, 3, 33, 6, 3, 10, 0, 920, both);  /* not causal, odd T */
        check_separate(dt, 1, KERNELS_MAX_TOKENS, 8, 8, 64, 1, 930, both);
        /* heads of 80 and 200 columns: a short 32-column chunk after full ones, in the 128- and
         * the 256-column kernels */
        check_separate(dt, 2, 70, 4, 2, 80, 1, 932, both);
        check_separate(dt, 2, 45, 2, 1, 200, 0, 934, both);
        /* GPT's packed qkv: q, k, v a row's thirds */
        const size_t B = 4, T = 40, C = 96, heads = 3;
        AttnShape s = {B, T, heads, heads, C / heads, 3 * C, 3 * C, 1};
        check_strided_attention(dt, &s, C, 2 * C, B * T * 3 * C, 940, both);
    }
}

/* Flash attention past eager's KERNELS_MAX_TOKENS, in bf16 and fp16: causal GQA at T 1,000 (64-row
 * tiles, the last one short) and D 128, and multi-query at T 4,096. The bounds are the file's: both
 * sides round the same fp32 values once, so a longer row moves only the last bit of a few more
 * outputs. */
Test(cuda_dtypes, flash_attention_at_long_sequences) {
    for (size_t k = 0; k < NDTS; k++) {
        check_separate(&DTS[k], 1, 1000, 16, 4, 64, 1, 960, FLASH);
        check_separate(&DTS[k], 1, 1000, 8, 2, 128, 1, 970, FLASH);
        check_separate(&DTS[k], 1, 4096, 8, 1, 64, 1, 980, FLASH); /* --seq 4096, 8 heads a kv */
    }
}

/* bf16 and fp16 eager backward adds dk and dv in fp32 accumulators in the cuBLASLt workspace, 2 T
 * kv_heads D floats a sample, as many samples at a time as 32 MiB holds: T 8 and D 65536 make
 * that 8, so 9 samples take two rounds. Eager alone: flash takes D up to 256 (and keeps dk and dv
 * on chip). */
Test(cuda_dtypes, attention_backward_in_two_rounds) {
    for (size_t k = 0; k < NDTS; k++) check_separate(&DTS[k], 9, 8, 2, 1, 65536, 1, 950, EAGER);
}
