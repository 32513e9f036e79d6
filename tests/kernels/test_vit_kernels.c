/* The Vision Transformer's CPU ops: forwards against naive double-precision loops and hand-worked
 * values, backwards against finite differences, and kernels.h's output contracts. */
#include <criterion/criterion.h>
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/cpu/cpu_ops.h"
#include "kernels/kernels.h"
#include "tests/util.h"

/* Every backward is checked against central finite differences of its forward with the scalar loss
 * L = sum(out * R) for a fixed random R (so dout = R); the "+=" and "overwritten" contracts of
 * kernels.h by gradient buffers that start non-zero or as garbage. */

extern int openblas_get_num_threads(void);

static const Kernels *K = &kernels_cpu;

static void fill_const(float *x, size_t n, float v) {
    for (size_t i = 0; i < n; i++) x[i] = v;
}

static const FdTolerance fd = {1e-2f, 1e-3, 1e-4};

/* grad = after - before, for "+=" outputs */
static void diff(float *grad, const float *after, const float *before, size_t n) {
    for (size_t i = 0; i < n; i++) grad[i] = after[i] - before[i];
}

#define EXPECT_NEAR(got, want, tol, ...)                                                           \
    cr_expect(fabs((double)(got) - (double)(want)) <= (tol), __VA_ARGS__)

/* ---------------- Linear ---------------- */

enum { LM = 7, LK = 6, LN = 5 };

typedef struct {
    float in[LM * LK], w[LN * LK], b[LN], r[LM * LN], out[LM * LN];
} LinearCtx;

static double linear_loss(void *p) {
    LinearCtx *c = p;
    K->linear_forward(DTYPE_FP32, c->out, c->in, c->w, c->b, LM, LK, LN);
    return dot_out_r(c->out, c->r, LM * LN);
}

static void linear_reference(double *out, const float *in, const float *w, const float *b, size_t M,
                             size_t Kd, size_t N) {
    for (size_t i = 0; i < M; i++)
        for (size_t j = 0; j < N; j++) {
            double s = b ? b[j] : 0.0;
            for (size_t k = 0; k < Kd; k++) s += (double)in[i * Kd + k] * (double)w[j * Kd + k];
            out[i * N + j] = s;
        }
}

Test(vit_kernels, linear_forward_matches_naive_with_and_without_bias) {
    LinearCtx c;
    fill_uniform(c.in, LM * LK, -1, 1, 1);
    fill_uniform(c.w, LN * LK, -1, 1, 2);
    fill_uniform(c.b, LN, -2, 2, 3);
    double ref[LM * LN];
    for (int with_bias = 0; with_bias < 2; with_bias++) {
        const float *b = with_bias ? c.b : NULL;
        fill_const(c.out, LM * LN, 1e6f); /* overwritten, not accumulated */
        K->linear_forward(DTYPE_FP32, c.out, c.in, c.w, b, LM, LK, LN);
        linear_reference(ref, c.in, c.w, b, LM, LK, LN);
        for (size_t i = 0; i < LM * LN; i++)
            EXPECT_NEAR(c.out[i], ref[i], 1e-5 * (1 + fabs(ref[i])), "bias %d out[%zu] %g vs %g",
                        with_bias, i, c.out[i], ref[i]);
    }
    /* out[0][0] by hand for a 1x2 . (2x2)^T + b */
    float in[2] = {1, 2}, w[4] = {3, 4, 5, 6}, b[2] = {0.5f, -1}, out[2];
    K->linear_forward(DTYPE_FP32, out, in, w, b, 1, 2, 2);
    cr_expect_float_eq(out[0], 11.5f, 1e-6);
    cr_expect_float_eq(out[1], 16.0f, 1e-6);
}

Test(vit_kernels, linear_empty_shapes) {
    float out[6], b[3] = {1, 2, 3}, in[2] = {0}, w[3] = {0};
    fill_const(out, 6, 7);
    K->linear_forward(DTYPE_FP32, out, in, w, b, 0, 1, 3); /* M = 0: nothing written */
    cr_expect_float_eq(out[0], 7.0f, 0);
    K->linear_forward(DTYPE_FP32, out, in, w, b, 2, 0, 3); /* K = 0: the bias */
    for (int i = 0; i < 6; i++) cr_expect_float_eq(out[i], b[i % 3], 0);
    K->linear_forward(DTYPE_FP32, out, in, w, NULL, 2, 0, 3); /* K = 0, no bias: zeros */
    for (int i = 0; i < 6; i++) cr_expect_float_eq(out[i], 0.0f, 0);
    float dw[3] = {1, 1, 1}, db[3] = {1, 1, 1};
    K->linear_backward(DTYPE_FP32, NULL, dw, db, out, in, w, 0, 1, 3); /* M = 0: grads += 0 */
    cr_expect(dw[0] == 1 && db[2] == 1);
}

Test(vit_kernels, linear_backward_finite_differences) {
    LinearCtx c;
    fill_uniform(c.in, LM * LK, -1, 1, 11);
    fill_uniform(c.w, LN * LK, -1, 1, 12);
    fill_uniform(c.b, LN, -1, 1, 13);
    fill_uniform(c.r, LM * LN, -1, 1, 14);
    float din[LM * LK], dw[LN * LK], db[LN], dw0[LN * LK], db0[LN];
    fill_const(din, LM * LK, 1e6f);
    fill_uniform(dw0, LN * LK, -0.5f, 0.5f, 15);
    fill_uniform(db0, LN, -0.5f, 0.5f, 16);
    memcpy(dw, dw0, sizeof dw);
    memcpy(db, db0, sizeof db);
    K->linear_backward(DTYPE_FP32, din, dw, db, c.r, c.in, c.w, LM, LK, LN);
    float gw[LN * LK], gb[LN];
    diff(gw, dw, dw0, LN * LK);
    diff(gb, db, db0, LN);
    expect_finite_differences("linear din", linear_loss, &c, c.in, din, LM * LK, fd);
    expect_finite_differences("linear dw", linear_loss, &c, c.w, gw, LN * LK, fd);
    expect_finite_differences("linear db", linear_loss, &c, c.b, gb, LN, fd);

    /* the nullable outputs: same dw without din and db */
    float dw2[LN * LK];
    memcpy(dw2, dw0, sizeof dw2);
    K->linear_backward(DTYPE_FP32, NULL, dw2, NULL, c.r, c.in, c.w, LM, LK, LN);
    for (size_t i = 0; i < LN * LK; i++) cr_expect_float_eq(dw2[i], dw[i], 1e-6);
}

/* db sums over rows in strips of 64 columns: 70 columns cover a full strip and a short one. */
Test(vit_kernels, linear_bias_grad_wide) {
    enum { M = 9, N = 70 };
    float dout[M * N], db[N];
    fill_uniform(dout, M * N, -1, 1, 21);
    fill_const(db, N, 0.25f);
    float in[M] = {0}, w[N] = {0}, dw[N] = {0};
    K->linear_backward(DTYPE_FP32, NULL, dw, db, dout, in, w, M, 1, N);
    for (size_t j = 0; j < N; j++) {
        double s = 0.25;
        for (size_t i = 0; i < M; i++) s += dout[i * N + j];
        EXPECT_NEAR(db[j], s, 1e-5, "db[%zu] %g vs %g", j, db[j], s);
    }
}

/* ---------------- LayerNorm ---------------- */

enum { NM = 6, NC = 12 }; /* 12 = one chunk of 8 + a tail of 4 */

typedef struct {
    float in[NM * NC], w[NC], b[NC], r[NM * NC], out[NM * NC], mean[NM], rstd[NM];
} LayerNormCtx;

static double layernorm_loss(void *p) {
    LayerNormCtx *c = p;
    K->layernorm_forward(DTYPE_FP32, c->out, c->mean, c->rstd, c->in, c->w, c->b, NM, NC, 1e-5f);
    return dot_out_r(c->out, c->r, NM * NC);
}

static void layernorm_setup(LayerNormCtx *c) {
    fill_uniform(c->in, NM * NC, -2, 2, 31);
    for (size_t i = 0; i < NC; i++) c->in[NC + i] += 10.0f; /* a row far from zero */
    fill_uniform(c->w, NC, 0.5f, 1.5f, 32);
    fill_uniform(c->b, NC, -1, 1, 33);
    fill_uniform(c->r, NM * NC, -1, 1, 34);
}

Test(vit_kernels, layernorm_forward_matches_naive) {
    LayerNormCtx c;
    layernorm_setup(&c);
    layernorm_loss(&c);
    const double eps = 1e-5;
    for (size_t i = 0; i < NM; i++) {
        const float *x = c.in + i * NC;
        double mu = 0, var = 0;
        for (size_t j = 0; j < NC; j++) mu += x[j];
        mu /= NC;
        for (size_t j = 0; j < NC; j++) var += (x[j] - mu) * (x[j] - mu);
        var /= NC; /* biased */
        const double rs = 1.0 / sqrt(var + eps);
        EXPECT_NEAR(c.mean[i], mu, 1e-5 * (1 + fabs(mu)), "mean[%zu]", i);
        EXPECT_NEAR(c.rstd[i], rs, 1e-5 * rs, "rstd[%zu] %g vs %g", i, c.rstd[i], rs);
        for (size_t j = 0; j < NC; j++) {
            const double y = (x[j] - mu) * rs * c.w[j] + c.b[j];
            EXPECT_NEAR(c.out[i * NC + j], y, 2e-5, "out[%zu][%zu] %g vs %g", i, j,
                        c.out[i * NC + j], y);
        }
    }
    /* by hand: [1, 3] has mean 2, variance 1, so with eps 0 the output is [-1, 1] */
    float x2[2] = {1, 3}, w2[2] = {2, 2}, b2[2] = {0.5f, 0.5f}, y2[2], m2, r2;
    K->layernorm_forward(DTYPE_FP32, y2, &m2, &r2, x2, w2, b2, 1, 2, 0.0f);
    cr_expect_float_eq(m2, 2.0f, 1e-6);
    cr_expect_float_eq(r2, 1.0f, 1e-6);
    cr_expect_float_eq(y2[0], -1.5f, 1e-6);
    cr_expect_float_eq(y2[1], 2.5f, 1e-6);
}

Test(vit_kernels, layernorm_backward_finite_differences) {
    LayerNormCtx c;
    layernorm_setup(&c);
    layernorm_loss(&c); /* saves mean and rstd */
    float din[NM * NC], din0[NM * NC], dw[NC], dw0[NC], db[NC], db0[NC];
    fill_uniform(din0, NM * NC, -0.5f, 0.5f, 35);
    fill_uniform(dw0, NC, -0.5f, 0.5f, 36);
    fill_uniform(db0, NC, -0.5f, 0.5f, 37);
    memcpy(din, din0, sizeof din);
    memcpy(dw, dw0, sizeof dw);
    memcpy(db, db0, sizeof db);
    K->layernorm_backward(DTYPE_FP32, din, dw, db, c.r, c.in, c.mean, c.rstd, c.w, NM, NC);
    float gin[NM * NC], gw[NC], gb[NC];
    diff(gin, din, din0, NM * NC);
    diff(gw, dw, dw0, NC);
    diff(gb, db, db0, NC);
    expect_finite_differences("layernorm din", layernorm_loss, &c, c.in, gin, NM * NC, fd);
    expect_finite_differences("layernorm dw", layernorm_loss, &c, c.w, gw, NC, fd);
    expect_finite_differences("layernorm db", layernorm_loss, &c, c.b, gb, NC, fd);
}

/* ---------------- GELU ---------------- */

Test(vit_kernels, gelu_known_values_in_place) {
    /* 11 values: a chunk of 8 and a tail of 3 */
    float x[11] = {1, -1, 0, 2, -3, 0.5f, 10, -10, -0.25f, 4, -100};
    const double want[11] = {0.8413447460685429,   -0.15865525393145707, 0.0,  1.9544997361036416,
                             -0.00404969409489031, 0.34573123063700656,  10.0, -7.6198530241605e-23,
                             -0.10032341857926907, 3.9998733150326675,   0.0};
    K->gelu_forward(DTYPE_FP32, x, x, 11);
    for (int i = 0; i < 11; i++)
        EXPECT_NEAR(x[i], want[i], 3e-7 * (1 + fabs(want[i])), "gelu[%d] %.9g vs %.9g", i, x[i],
                    want[i]);
}

enum { GN = 19 };

typedef struct {
    float in[GN], r[GN], out[GN];
} GeluCtx;

static double gelu_loss(void *p) {
    GeluCtx *c = p;
    K->gelu_forward(DTYPE_FP32, c->out, c->in, GN);
    return dot_out_r(c->out, c->r, GN);
}

Test(vit_kernels, gelu_backward_finite_differences) {
    GeluCtx c;
    fill_uniform(c.in, GN, -3, 3, 41);
    fill_uniform(c.r, GN, -1, 1, 42);
    float din[GN];
    K->gelu_backward(DTYPE_FP32, din, c.in, c.r, GN);
    expect_finite_differences("gelu din", gelu_loss, &c, c.in, din, GN, fd);
    /* din may be dout */
    float d2[GN];
    memcpy(d2, c.r, sizeof d2);
    K->gelu_backward(DTYPE_FP32, d2, c.in, d2, GN);
    for (int i = 0; i < GN; i++) cr_expect_float_eq(d2[i], din[i], 0);
    /* GELU'(0) = 1/2, GELU'(1) = Phi(1) + phi(1) */
    float x[2] = {0, 1}, one[2] = {1, 1}, d[2];
    K->gelu_backward(DTYPE_FP32, d, x, one, 2);
    cr_expect_float_eq(d[0], 0.5f, 1e-7);
    EXPECT_NEAR(d[1], 0.8413447460685429 + 0.24197072451914337, 1e-6, "gelu'(1) %.9g", d[1]);
}

/* ---------------- attention ---------------- */

/* Two shapes: head dim 12 (one chunk of 8 and a tail) with 5 tokens, and head dim 45 (a block
 * of 32, a chunk of 8 and a tail) with 9 tokens (softmax rows longer than a chunk). */
typedef struct {
    size_t B, T, C, H;
    float *qkv, *r, *out, *probs;
} AttnCtx;

static void attn_init(AttnCtx *c, size_t B, size_t T, size_t C, size_t H, uint32_t seed) {
    *c = (AttnCtx){.B = B, .T = T, .C = C, .H = H};
    c->qkv = malloc(B * T * 3 * C * sizeof(float));
    c->r = malloc(B * T * C * sizeof(float));
    c->out = malloc(B * T * C * sizeof(float));
    c->probs = malloc(B * H * T * T * sizeof(float));
    cr_assert(c->qkv && c->r && c->out && c->probs);
    fill_uniform(c->qkv, B * T * 3 * C, -1.5f, 1.5f, seed);
    fill_uniform(c->r, B * T * C, -1, 1, seed + 1);
}

static void attn_free(AttnCtx *c) {
    free(c->qkv);
    free(c->r);
    free(c->out);
    free(c->probs);
}

static double attention_loss(void *p) {
    AttnCtx *c = p;
    K->attention_forward(DTYPE_FP32, c->out, c->probs, c->qkv, c->B, c->T, c->C, c->H);
    return dot_out_r(c->out, c->r, c->B * c->T * c->C);
}

/* out and probs against double loops; every softmax row sums to 1 */
static void attention_forward_check(AttnCtx *c) {
    const size_t B = c->B, T = c->T, C = c->C, H = c->H, D = C / H, C3 = 3 * C;
    fill_const(c->out, B * T * C, 1e6f); /* overwritten */
    K->attention_forward(DTYPE_FP32, c->out, c->probs, c->qkv, B, T, C, H);
    double sc[64];
    cr_assert(T <= 64);
    for (size_t b = 0; b < B; b++)
        for (size_t h = 0; h < H; h++)
            for (size_t t = 0; t < T; t++) {
                double mx = -INFINITY, sum = 0, psum = 0;
                const float *q = c->qkv + (b * T + t) * C3 + h * D;
                for (size_t s = 0; s < T; s++) {
                    const float *k = c->qkv + (b * T + s) * C3 + C + h * D;
                    double z = 0;
                    for (size_t d = 0; d < D; d++) z += (double)q[d] * k[d];
                    sc[s] = z / sqrt((double)D);
                    if (sc[s] > mx) mx = sc[s];
                }
                for (size_t s = 0; s < T; s++) sum += (sc[s] = exp(sc[s] - mx));
                const float *prow = c->probs + ((b * H + h) * T + t) * T;
                for (size_t s = 0; s < T; s++) {
                    sc[s] /= sum;
                    psum += prow[s];
                    EXPECT_NEAR(prow[s], sc[s], 1e-6, "probs %zu %zu %zu %zu: %g vs %g", b, h, t, s,
                                prow[s], sc[s]);
                }
                EXPECT_NEAR(psum, 1.0, 1e-6, "softmax row sums to %g", psum);
                for (size_t d = 0; d < D; d++) {
                    double o = 0;
                    for (size_t s = 0; s < T; s++)
                        o += sc[s] * c->qkv[(b * T + s) * C3 + 2 * C + h * D + d];
                    const float got = c->out[(b * T + t) * C + h * D + d];
                    EXPECT_NEAR(got, o, 1e-5, "out b%zu h%zu t%zu d%zu: %g vs %g", b, h, t, d, got,
                                o);
                }
            }
}

Test(vit_kernels, attention_forward_matches_naive) {
    AttnCtx c;
    attn_init(&c, 2, 5, 24, 2, 51);
    attention_forward_check(&c);
    attn_free(&c);
    attn_init(&c, 1, 9, 90, 2, 53);
    attention_forward_check(&c);
    attn_free(&c);
}

/* Scores far apart: the small terms underflow, nothing becomes NaN, rows still sum to 1. */
Test(vit_kernels, attention_softmax_extreme_scores) {
    enum { T = 3, C = 4 };
    float qkv[T * 3 * C] = {0}, out[T * C], probs[T * T];
    for (int t = 0; t < T; t++) {
        for (int d = 0; d < C; d++) qkv[t * 3 * C + d] = 10.0f;                  /* q */
        for (int d = 0; d < C; d++) qkv[t * 3 * C + C + d] = 20.0f * (float)t;   /* k */
        for (int d = 0; d < C; d++) qkv[t * 3 * C + 2 * C + d] = (float)(t + 1); /* v */
    }
    /* scores q.k / 2 = 0, 400, 800: the last key takes everything */
    K->attention_forward(DTYPE_FP32, out, probs, qkv, 1, T, C, 1);
    for (int t = 0; t < T; t++) {
        cr_expect_float_eq(probs[t * T + 2], 1.0f, 1e-7, "row %d", t);
        cr_expect(probs[t * T + 0] >= 0.0f && probs[t * T + 0] < 1e-30f);
        cr_expect(probs[t * T + 1] >= 0.0f && probs[t * T + 1] < 1e-30f);
        for (int d = 0; d < C; d++) cr_expect_float_eq(out[t * C + d], 3.0f, 1e-6);
    }
}

/* What a run that diverged feeds them (nan of either sign, inf, inf - inf) gives nan where the
 * math has no number, and leaves the other rows and elements alone, with no undefined behaviour:
 * exp's range reduction once cast a nan to int32 and overflowed 2^n's exponent (the sanitizer
 * build runs this test), and clamped a negative nan to e^-87.3, which made a row whose maximum
 * was inf a uniform one. */
Test(vit_kernels, non_finite_inputs_give_nan_without_undefined_behaviour) {
    enum { B = 3, T = 3, C = 4 };
    float qkv[B * T * 3 * C], out[B * T * C], probs[B * T * T];
    for (int b = 0; b < B; b++)
        for (int t = 0; t < T; t++)
            for (int d = 0; d < C; d++) {
                float *row = qkv + (b * T + t) * 3 * C;
                row[d] = 0.5f;                       /* q */
                row[C + d] = 0.25f * (float)(t + 1); /* k */
                row[2 * C + d] = (float)(t + 1);     /* v */
            }
    qkv[(0 * T + 1) * 3 * C + C] = -INFINITY; /* sample 0: key 1 scores -inf: its weight is 0 */
    qkv[(1 * T + 0) * 3 * C] = NAN;           /* sample 1: query 0 is nan: its row is */
    qkv[(2 * T + 2) * 3 * C + C] = INFINITY;  /* sample 2: key 2 scores inf in every row */
    K->attention_forward(DTYPE_FP32, out, probs, qkv, B, T, C, 1);
    for (int b = 0; b < B; b++)
        for (int t = 0; t < T; t++) {
            const float *p = probs + (b * T + t) * T;
            int nan_row = (b == 1 && t == 0) || b == 2; /* inf - inf: the max's own term */
            double sum = 0;
            for (int s = 0; s < T; s++) {
                sum += p[s];
                if (nan_row)
                    cr_expect(isnan(p[s]), "sample %d row %d: probs[%d] %g, not nan", b, t, s,
                              p[s]);
                else
                    cr_expect(isfinite(p[s]), "sample %d row %d: probs[%d] %g", b, t, s, p[s]);
            }
            if (!nan_row) EXPECT_NEAR(sum, 1.0, 1e-6, "sample %d row %d sums to %g", b, t, sum);
            if (b == 0)
                cr_expect(p[1] >= 0.0f && p[1] < 1e-30f, "row %d: -inf's weight %g", t, p[1]);
        }
    /* GELU: nan of either sign stays nan, +inf stays +inf, finite neighbours are untouched */
    float x[5] = {NAN, -NAN, INFINITY, 1.0f, -2.0f}, y[5], dy[5] = {1, 1, 1, 1, 1}, dx[5];
    K->gelu_forward(DTYPE_FP32, y, x, 5);
    cr_expect(isnan(y[0]) && isnan(y[1]), "gelu(nan) %g %g", y[0], y[1]);
    cr_expect(isinf(y[2]) && y[2] > 0, "gelu(inf) %g", y[2]);
    EXPECT_NEAR(y[3], 0.8413447460685429, 3e-7, "gelu(1) %.9g", y[3]);
    EXPECT_NEAR(y[4], -0.04550026389635842, 3e-7, "gelu(-2) %.9g", y[4]);
    K->gelu_backward(DTYPE_FP32, dx, x, dy, 5);
    cr_expect(isnan(dx[0]) && isnan(dx[1]), "gelu'(nan) %g %g", dx[0], dx[1]);
    EXPECT_NEAR(dx[3], 1.0833154705876864, 3e-6, "gelu'(1) %.9g", dx[3]);
    EXPECT_NEAR(dx[4], -0.0852318481, 3e-6, "gelu'(-2) %.9g", dx[4]);
}

Test(vit_kernels, attention_backward_finite_differences) {
    const size_t shapes[2][4] = {{2, 5, 24, 2}, {1, 9, 90, 2}};
    for (int i = 0; i < 2; i++) {
        AttnCtx c;
        attn_init(&c, shapes[i][0], shapes[i][1], shapes[i][2], shapes[i][3], 61 + 2 * i);
        const size_t n = c.B * c.T * 3 * c.C;
        attention_loss(&c); /* probs */
        float *dqkv = malloc(n * sizeof(float));
        cr_assert(dqkv);
        fill_const(dqkv, n, 1e6f); /* overwritten entirely */
        K->attention_backward(DTYPE_FP32, dqkv, c.r, c.qkv, c.probs, c.B, c.T, c.C, c.H);
        expect_finite_differences(i ? "attention dqkv (D 45, T 9)" : "attention dqkv (D 12, T 5)",
                                  attention_loss, &c, c.qkv, dqkv, n, fd);
        free(dqkv);
        attn_free(&c);
    }
}

/* ---------------- patches, tokens, class token ---------------- */

Test(vit_kernels, patchify_by_hand) {
    enum { B = 2, S = 4, P = 2 };
    float img[B * S * S], patches[B * 4 * P * P];
    for (int i = 0; i < B * S * S; i++) img[i] = (float)i; /* img[b][y][x] = 16b + 4y + x */
    K->patchify(DTYPE_FP32, patches, img, B, S, P);
    /* patch 1 is (py 0, px 1); its element 2 is (ky 1, kx 0): image row 1, column 2 */
    cr_expect_float_eq(patches[1 * 4 + 2], 6.0f, 0);
    /* patch 2 is (py 1, px 0): elements rows 2..3, columns 0..1 */
    const float want2[4] = {8, 9, 12, 13};
    for (int e = 0; e < 4; e++) cr_expect_float_eq(patches[2 * 4 + e], want2[e], 0);
    /* sample 1, patch 3 (py 1, px 1), element 3 (ky 1, kx 1): 16 + 4*3 + 3 */
    cr_expect_float_eq(patches[(4 + 3) * 4 + 3], 31.0f, 0);
    cr_expect_float_eq(patches[0], 0.0f, 0);
    cr_expect_float_eq(patches[1], 1.0f, 0);
    cr_expect_float_eq(patches[2], 4.0f, 0);
    cr_expect_float_eq(patches[3], 5.0f, 0);
}

/* patches . W^T equals Conv2d(1, C, P, stride P) computed directly. */
Test(vit_kernels, patchify_gemm_is_the_convolution) {
    enum { B = 2, S = 6, P = 3, G = S / P, C = 4 };
    float img[B * S * S], w[C * P * P], patches[B * G * G * P * P], conv[B * G * G * C];
    fill_uniform(img, B * S * S, -1, 1, 71);
    fill_uniform(w, C * P * P, -1, 1, 72);
    K->patchify(DTYPE_FP32, patches, img, B, S, P);
    K->linear_forward(DTYPE_FP32, conv, patches, w, NULL, B * G * G, P * P, C);
    for (int b = 0; b < B; b++)
        for (int py = 0; py < G; py++)
            for (int px = 0; px < G; px++)
                for (int c = 0; c < C; c++) {
                    double s = 0;
                    for (int ky = 0; ky < P; ky++)
                        for (int kx = 0; kx < P; kx++)
                            s += (double)w[(c * P + ky) * P + kx] *
                                 img[(b * S + py * P + ky) * S + px * P + kx];
                    const float got = conv[((b * G + py) * G + px) * C + c];
                    EXPECT_NEAR(got, s, 1e-5, "conv b%d (%d,%d) c%d: %g vs %g", b, py, px, c, got,
                                s);
                }
}

Test(vit_kernels, embed_forward_and_backward) {
    enum { B = 2, T = 4, C = 3 };
    float patch[B * (T - 1) * C], cls[C], pos[T * C], x[B * T * C];
    fill_uniform(patch, B * (T - 1) * C, -1, 1, 81);
    fill_uniform(cls, C, -1, 1, 82);
    fill_uniform(pos, T * C, -1, 1, 83);
    K->embed_forward(DTYPE_FP32, x, patch, cls, pos, B, T, C);
    for (int b = 0; b < B; b++)
        for (int t = 0; t < T; t++)
            for (int c = 0; c < C; c++) {
                const float base = t == 0 ? cls[c] : patch[(b * (T - 1) + t - 1) * C + c];
                cr_expect_float_eq(x[(b * T + t) * C + c], base + pos[t * C + c], 0,
                                   "x[%d][%d][%d]", b, t, c);
            }

    float dx[B * T * C], dcls[C], dpos[T * C], dpatch[B * (T - 1) * C];
    fill_uniform(dx, B * T * C, -1, 1, 84);
    fill_const(dcls, C, 0.5f);
    fill_const(dpos, T * C, -0.25f);
    fill_const(dpatch, B * (T - 1) * C, 1e6f);
    K->embed_backward(DTYPE_FP32, dcls, dpos, dpatch, dx, B, T, C);
    for (int c = 0; c < C; c++)
        cr_expect_float_eq(dcls[c], 0.5f + dx[c] + dx[T * C + c], 1e-6, "dcls[%d]", c);
    for (int t = 0; t < T; t++)
        for (int c = 0; c < C; c++)
            cr_expect_float_eq(dpos[t * C + c], -0.25f + dx[t * C + c] + dx[(T + t) * C + c], 1e-6,
                               "dpos[%d][%d]", t, c);
    for (int b = 0; b < B; b++)
        for (int p = 0; p < T - 1; p++)
            for (int c = 0; c < C; c++)
                cr_expect_float_eq(dpatch[(b * (T - 1) + p) * C + c], dx[(b * T + 1 + p) * C + c],
                                   0, "dpatch[%d][%d][%d]", b, p, c);
}

Test(vit_kernels, class_token_select_and_backward) {
    enum { B = 3, T = 4, C = 10 };
    float x[B * T * C], out[B * C];
    for (int i = 0; i < B * T * C; i++) x[i] = (float)i;
    K->class_token_select(DTYPE_FP32, out, x, B, T, C);
    for (int b = 0; b < B; b++)
        for (int c = 0; c < C; c++)
            cr_expect_float_eq(out[b * C + c], (float)(b * T * C + c), 0, "out[%d][%d]", b, c);

    float dx[B * T * C], dout[B * C];
    fill_const(dx, B * T * C, 1.0f);
    for (int i = 0; i < B * C; i++) dout[i] = (float)(i + 1);
    K->class_token_select_backward(DTYPE_FP32, dx, dout, B, T, C);
    for (int b = 0; b < B; b++)
        for (int t = 0; t < T; t++)
            for (int c = 0; c < C; c++) {
                const float want = 1.0f + (t == 0 ? dout[b * C + c] : 0.0f);
                cr_expect_float_eq(dx[(b * T + t) * C + c], want, 0, "dx[%d][%d][%d]", b, t, c);
            }
}

Test(vit_kernels, add_in_place) {
    enum { N = 13 }; /* a chunk of 8 and a tail of 5 */
    float a[N], b[N], b0[N], out[N];
    fill_uniform(a, N, -1, 1, 91);
    fill_uniform(b, N, -1, 1, 92);
    memcpy(b0, b, sizeof b0);
    K->add(DTYPE_FP32, out, a, b, N);
    for (int i = 0; i < N; i++) cr_expect_float_eq(out[i], a[i] + b[i], 0);
    K->add(DTYPE_FP32, a, a, b, N); /* out == a */
    for (int i = 0; i < N; i++) cr_expect_float_eq(a[i], out[i], 0);
    K->add(DTYPE_FP32, b, out, b, N); /* out == b */
    for (int i = 0; i < N; i++) cr_expect_float_eq(b[i], out[i] + b0[i], 0);
}

/* ---------------- loss and accuracy ---------------- */

Test(vit_kernels, cross_entropy_by_hand) {
    const float logits[6] = {1, 2, 3, 0, 0, 0};
    const int32_t labels[2] = {2, 1};
    float d[6];
    /* row 0: logsumexp(1,2,3) - 3 = 0.4076...; row 1: log 3 */
    const float loss = K->cross_entropy(DTYPE_FP32, d, logits, labels, 2, 3, 3.0f);
    EXPECT_NEAR(loss, 0.753109126556245, 1e-6, "loss %.9g", loss);
    const double p0[3] = {0.09003057317038048, 0.2447284710547977, 0.665240955774822};
    const double g = 3.0 / 2.0; /* grad_scale / B */
    for (int j = 0; j < 3; j++) {
        EXPECT_NEAR(d[j], (p0[j] - (j == 2)) * g, 1e-6, "d[0][%d] %g", j, d[j]);
        EXPECT_NEAR(d[3 + j], (1.0 / 3.0 - (j == 1)) * g, 1e-6, "d[1][%d] %g", j, d[3 + j]);
    }
    /* loss only */
    cr_expect_float_eq(K->cross_entropy(DTYPE_FP32, NULL, logits, labels, 2, 3, 1.0f), loss, 0);
    /* large logits do not overflow (max subtraction) */
    const float big[3] = {1000, 1000, 1000};
    const int32_t zero = 0;
    EXPECT_NEAR(K->cross_entropy(DTYPE_FP32, NULL, big, &zero, 1, 3, 1.0f), log(3.0), 1e-6,
                "big logits");
    /* a label outside [0, classes) gives NaN instead of reading past the row */
    const int32_t bad = 3;
    cr_expect(isnan(K->cross_entropy(DTYPE_FP32, NULL, logits, &bad, 1, 3, 1.0f)));
}

enum { XB = 3, XK = 5 };

typedef struct {
    float logits[XB * XK];
    int32_t labels[XB];
} CrossEntropyCtx;

static double cross_entropy_loss(void *p) {
    CrossEntropyCtx *c = p;
    /* in double from float logits: the returned float would round away the differences */
    double total = 0;
    for (size_t i = 0; i < XB; i++) {
        const float *z = c->logits + i * XK;
        double s = 0;
        for (size_t j = 0; j < XK; j++) s += exp((double)z[j]);
        total += log(s) - z[c->labels[i]];
    }
    return 2.5 * total / XB;
}

Test(vit_kernels, cross_entropy_gradient_finite_differences) {
    CrossEntropyCtx c = {.labels = {4, 0, 2}};
    fill_uniform(c.logits, XB * XK, -2, 2, 101);
    float d[XB * XK];
    const float loss = K->cross_entropy(DTYPE_FP32, d, c.logits, c.labels, XB, XK, 2.5f);
    EXPECT_NEAR(loss, cross_entropy_loss(&c) / 2.5, 1e-6, "loss %g", loss);
    expect_finite_differences("cross_entropy dlogits", cross_entropy_loss, &c, c.logits, d, XB * XK,
                              fd);
}

/* The eager loss's three steps by hand on cross_entropy_by_hand's rows: log-softmax, the NLL
 * with its dense gradient, log-softmax's backward; end to end they give the fused pass's loss
 * and gradient. */
Test(vit_kernels, the_eager_loss_by_hand_is_the_fused_one) {
    const float logits[6] = {1, 2, 3, 0, 0, 0};
    const int32_t labels[2] = {2, 1};
    float logp[6], dlogp[6], dx[6], fused[6];
    K->log_softmax(logp, logits, 2, 3);
    const double lse0 = 3.40760596444438; /* log(e + e^2 + e^3) */
    for (int j = 0; j < 3; j++) {
        EXPECT_NEAR(logp[j], logits[j] - lse0, 1e-6, "logp[0][%d] %g", j, logp[j]);
        EXPECT_NEAR(logp[3 + j], -log(3.0), 1e-6, "logp[1][%d] %g", j, logp[3 + j]);
    }
    const float loss = K->nll_loss(dlogp, logp, labels, 2, 3, 3.0f);
    EXPECT_NEAR(loss, 0.753109126556245, 1e-6, "loss %.9g", loss);
    const float want_dlogp[6] = {0, 0, -1.5f, 0, -1.5f, 0}; /* -grad_scale / rows at the labels */
    for (int i = 0; i < 6; i++) cr_expect_float_eq(dlogp[i], want_dlogp[i], 0, "dlogp[%d]", i);
    K->log_softmax_backward(dx, dlogp, logp, 2, 3);
    const float fused_loss = K->cross_entropy(DTYPE_FP32, fused, logits, labels, 2, 3, 3.0f);
    EXPECT_NEAR(loss, fused_loss, 1e-6, "eager %.9g, fused %.9g", loss, fused_loss);
    for (int i = 0; i < 6; i++) EXPECT_NEAR(dx[i], fused[i], 1e-6, "dx[%d] %g", i, dx[i]);
    /* large logits do not overflow; a label outside the row is NaN and leaves its row 0 */
    const float big[3] = {1000, 1000, 1000};
    K->log_softmax(logp, big, 1, 3);
    for (int j = 0; j < 3; j++) EXPECT_NEAR(logp[j], -log(3.0), 1e-6, "big logp[%d]", j);
    const int32_t bad = 3;
    for (int j = 0; j < 3; j++) dlogp[j] = 7.0f;
    cr_expect(isnan(K->nll_loss(dlogp, logp, &bad, 1, 3, 1.0f)));
    for (int j = 0; j < 3; j++) cr_expect_float_eq(dlogp[j], 0.0f, 0, "bad row dlogp[%d]", j);
}

/* On random rows, the three steps' gradient is the fused pass's (and its finite differences). */
Test(vit_kernels, the_eager_loss_gradient_finite_differences) {
    CrossEntropyCtx c = {.labels = {4, 0, 2}};
    fill_uniform(c.logits, XB * XK, -2, 2, 101);
    float logp[XB * XK], dlogp[XB * XK], dx[XB * XK];
    K->log_softmax(logp, c.logits, XB, XK);
    const float loss = K->nll_loss(dlogp, logp, c.labels, XB, XK, 2.5f);
    EXPECT_NEAR(loss, cross_entropy_loss(&c) / 2.5, 1e-6, "loss %g", loss);
    K->log_softmax_backward(dx, dlogp, logp, XB, XK);
    expect_finite_differences("the eager loss's dx", cross_entropy_loss, &c, c.logits, dx, XB * XK,
                              fd);
}

Test(vit_kernels, count_correct_first_maximum_wins) {
    const float logits[12] = {1, 3,  3, /* tie: index 1 */ 2, 1, 0, 0, 0, 0, /* all tie: 0 */
                              5, -1, 5 /* tie: index 0 */};
    const int32_t labels[4] = {1, 0, 2, 2};
    /* rows 0 and 1 are right; rows 2 and 3 would be right if the last maximum won */
    cr_expect_eq(K->count_correct(DTYPE_FP32, logits, labels, 4, 3), 2);
    const int32_t all_first[4] = {1, 0, 0, 0};
    cr_expect_eq(K->count_correct(DTYPE_FP32, logits, all_first, 4, 3), 4);
    cr_expect_eq(K->count_correct(DTYPE_FP32, logits, labels, 0, 3), 0);
}

/* ---------------- BLAS threads ---------------- */

Test(vit_kernels, set_threads_reaches_openblas) {
    kernels_cpu_set_threads(1);
    cr_expect_eq(openblas_get_num_threads(), 1);
    kernels_cpu_set_threads(0); /* below 1 is taken as 1 */
    cr_expect_eq(openblas_get_num_threads(), 1);
    kernels_cpu_set_threads(2);
    cr_expect_eq(openblas_get_num_threads(), 2);
    /* GEMM results do not depend on it */
    enum { M = 64, Kd = 48, N = 40 };
    static float in[M * Kd], w[N * Kd], a[M * N], b[M * N];
    fill_uniform(in, M * Kd, -1, 1, 111);
    fill_uniform(w, N * Kd, -1, 1, 112);
    K->linear_forward(DTYPE_FP32, a, in, w, NULL, M, Kd, N);
    kernels_cpu_set_threads(1);
    K->linear_forward(DTYPE_FP32, b, in, w, NULL, M, Kd, N);
    for (int i = 0; i < M * N; i++) cr_expect_float_eq(a[i], b[i], 1e-5, "out[%d]", i);
}

Test(vit_kernels, bias_grad_sums_a_column_range) {
    /* 3 rows of a 5-wide output; sum columns 1..3 into db, which starts at 10, 20, 30 */
    float dout[15], db[3] = {10, 20, 30};
    for (int i = 0; i < 15; i++) dout[i] = (float)(i * i % 7) - 2.5f;
    kernels_cpu.bias_grad(DTYPE_FP32, db, dout + 1, 3, 3, 5);
    for (int j = 0; j < 3; j++) {
        float want = (float)(10 * (j + 1));
        for (int i = 0; i < 3; i++) want += dout[i * 5 + 1 + j];
        cr_expect_float_eq(db[j], want, 1e-6f, "column %d", j);
    }
}
