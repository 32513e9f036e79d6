/* The Llama-shaped block's CPU ops and attention over grouped, strided operands: RMSNorm, SwiGLU
 * and RoPE forward against hand-computed values and their backwards against finite differences;
 * grouped-query attention against the packed multi-head op with K,V repeated, its backward
 * against finite differences and, at wide heads, against its formulas in double; flash attention
 * against eager (outputs, lse by formula, every gradient). */
#include <criterion/criterion.h>
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/cpu/cpu_ops.h"
#include "kernels/kernels.h"
#include "tests/util.h"

static const Kernels *K = &kernels_cpu;

static const FdTolerance fd = {1e-2f, 2e-3, 2e-4};

/* ---------------- RMSNorm ---------------- */

Test(llama_kernels, rmsnorm_forward_is_x_over_its_root_mean_square_times_w) {
    const float in[4] = {1, 2, 3, 4}, w[4] = {1, 0.5f, 2, 1};
    float out[4], rstd[1];
    K->rmsnorm_forward(DTYPE_FP32, out, rstd, in, w, 1, 4, 0.0f);
    const double r = 1.0 / sqrt(30.0 / 4.0); /* mean of squares 7.5 */
    cr_expect_float_eq(rstd[0], (float)r, 1e-6f);
    for (int c = 0; c < 4; c++)
        cr_expect_float_eq(out[c], (float)(in[c] * r * w[c]), 1e-6f, "out[%d]", c);
}

typedef struct {
    size_t M, C;
    float *in, *w, *r, *out, *rstd;
} Rms;

static double rms_loss(void *ctx) {
    Rms *c = ctx;
    K->rmsnorm_forward(DTYPE_FP32, c->out, c->rstd, c->in, c->w, c->M, c->C, 1e-5f);
    return dot_out_r(c->out, c->r, c->M * c->C);
}

Test(llama_kernels, rmsnorm_backward_matches_finite_differences) {
    Rms c = {.M = 3, .C = 8};
    c.in = host_uniform(24, -2, 2, 11), c.w = host_uniform(8, 0.5f, 1.5f, 12);
    c.r = host_uniform(24, -1, 1, 13), c.out = host_floats(24), c.rstd = host_floats(3);
    float *din = host_zeros(24), *dw = host_zeros(8);
    rms_loss(&c);
    K->rmsnorm_backward(DTYPE_FP32, din, dw, c.r, c.in, c.rstd, c.w, c.M, c.C);
    expect_finite_differences("din", rms_loss, &c, c.in, din, 24, fd);
    expect_finite_differences("dw", rms_loss, &c, c.w, dw, 8, fd);
    free_floats((float *[]){c.in, c.w, c.r, c.out, c.rstd, din, dw}, 7);
}

/* ---------------- SwiGLU ---------------- */

Test(llama_kernels, swiglu_forward_is_silu_of_gate_times_up) {
    const float gate[3] = {0.0f, 1.0f, -2.0f}, up[3] = {5.0f, 2.0f, 3.0f};
    float out[3];
    K->swiglu_forward(DTYPE_FP32, out, gate, up, 3);
    cr_expect_float_eq(out[0], 0.0f, 0.0f);
    cr_expect_float_eq(out[1], (float)(2.0 / (1.0 + exp(-1.0))), 1e-6f); /* 1.4621172 */
    cr_expect_float_eq(out[2], (float)(3.0 * -2.0 / (1.0 + exp(2.0))), 1e-6f);
}

typedef struct {
    size_t n;
    float *gate, *up, *r, *out;
} Swi;

static double swi_loss(void *ctx) {
    Swi *c = ctx;
    K->swiglu_forward(DTYPE_FP32, c->out, c->gate, c->up, c->n);
    return dot_out_r(c->out, c->r, c->n);
}

Test(llama_kernels, swiglu_backward_matches_finite_differences_in_place_too) {
    Swi c = {.n = 40};
    c.gate = host_uniform(40, -3, 3, 21), c.up = host_uniform(40, -2, 2, 22);
    c.r = host_uniform(40, -1, 1, 23), c.out = host_floats(40);
    float *dgate = host_floats(40), *dup = host_floats(40), *inplace = host_copy(c.r, 40);
    K->swiglu_backward(DTYPE_FP32, dgate, dup, c.r, c.gate, c.up, 40);
    expect_finite_differences("dgate", swi_loss, &c, c.gate, dgate, 40, fd);
    expect_finite_differences("dup", swi_loss, &c, c.up, dup, 40, fd);
    float *dup2 = host_floats(40);
    K->swiglu_backward(DTYPE_FP32, inplace, dup2, inplace, c.gate, c.up,
                       40); /* dgate may be dout */
    assert_same_floats(inplace, dgate, 40, "dgate written over dout");
    free_floats((float *[]){c.gate, c.up, c.r, c.out, dgate, dup, inplace, dup2}, 8);
}

/* ---------------- RoPE ---------------- */

Test(llama_kernels, rope_turns_each_pair_by_position_times_its_frequency) {
    /* B 1, T 2, 1 head of D 4: pairs (0, 2) at frequency 1 and (1, 3) at theta^-1/2 */
    float x[8] = {1, 1, 0, 0, 1, 1, 0, 0};
    const float theta = 100.0f;
    K->rope_forward(DTYPE_FP32, x, 1, 2, 1, 4, theta);
    const float want0[4] = {1, 1, 0, 0}; /* position 0: no turn */
    for (int i = 0; i < 4; i++) cr_expect_float_eq(x[i], want0[i], 0.0f, "t0[%d]", i);
    const double a0 = 1.0, a1 = 1.0 / 10.0; /* 1 x 100^0 and 1 x 100^(-2/4) */
    cr_expect_float_eq(x[4], (float)cos(a0), 1e-6f);
    cr_expect_float_eq(x[6], (float)sin(a0), 1e-6f);
    cr_expect_float_eq(x[5], (float)cos(a1), 1e-6f);
    cr_expect_float_eq(x[7], (float)sin(a1), 1e-6f);
}

typedef struct {
    float *x, *work, *r;
    size_t n;
} Rope;

static double rope_loss(void *ctx) {
    Rope *c = ctx;
    memcpy(c->work, c->x, c->n * sizeof(float));
    K->rope_forward(DTYPE_FP32, c->work, 2, 5, 3, 6, 500000.0f);
    return dot_out_r(c->work, c->r, c->n);
}

Test(llama_kernels, rope_backward_matches_finite_differences_and_undoes_the_forward) {
    Rope c = {.n = 2 * 5 * 3 * 6};
    c.x = host_uniform(c.n, -1, 1, 31), c.work = host_floats(c.n),
    c.r = host_uniform(c.n, -1, 1, 32);
    float *dx = host_copy(c.r, c.n);
    K->rope_backward(DTYPE_FP32, dx, 2, 5, 3, 6, 500000.0f);
    expect_finite_differences("dx", rope_loss, &c, c.x, dx, c.n, fd);
    float *y = host_copy(c.x, c.n);
    K->rope_forward(DTYPE_FP32, y, 2, 5, 3, 6, 500000.0f);
    K->rope_backward(DTYPE_FP32, y, 2, 5, 3, 6, 500000.0f);
    assert_close_floats(y, c.x, c.n, 1e-6, "backward of forward");
    free_floats((float *[]){c.x, c.work, c.r, dx, y}, 5);
}

/* ---------------- grouped-query attention ---------------- */

/* B 2, T 5, 4 query heads of D 4 sharing 2 K,V heads, causal; q, k, v separate and dense. */
typedef struct {
    AttnShape s;
    size_t nq, nkv;
    float *q, *k, *v, *r, *out, *probs, *lse;
} Gqa;

static void gqa_init(Gqa *c, int causal, uint32_t seed) {
    c->s = (AttnShape){.B = 2,
                       .T = 5,
                       .heads = 4,
                       .kv_heads = 2,
                       .head_dim = 4,
                       .q_stride = 16,
                       .kv_stride = 8,
                       .causal = causal};
    c->nq = 2 * 5 * 16, c->nkv = 2 * 5 * 8;
    c->q = host_uniform(c->nq, -1.5f, 1.5f, seed),
    c->k = host_uniform(c->nkv, -1.5f, 1.5f, seed + 1);
    c->v = host_uniform(c->nkv, -1, 1, seed + 2), c->r = host_uniform(c->nq, -1, 1, seed + 3);
    c->out = host_nans(c->nq), c->probs = host_nans(2 * 4 * 25), c->lse = host_nans(2 * 4 * 5);
}

static void gqa_free(Gqa *c) {
    free_floats((float *[]){c->q, c->k, c->v, c->r, c->out, c->probs, c->lse}, 7);
}

static double gqa_loss(void *ctx) {
    Gqa *c = ctx;
    K->gqa_attention_forward(DTYPE_FP32, c->out, c->probs, c->q, c->k, c->v, &c->s);
    return dot_out_r(c->out, c->r, c->nq);
}

/* With K,V repeated for each head of their group and packed as qkv, the multi-head op computes
 * the same thing. */
Test(llama_kernels, gqa_equals_multi_head_attention_with_kv_repeated) {
    Gqa c;
    gqa_init(&c, 1, 41);
    gqa_loss(&c);
    const size_t C = 16, rows = 10;
    float *qkv = host_floats(rows * 3 * C), *out = host_floats(rows * C),
          *probs = host_floats(2 * 4 * 25);
    for (size_t i = 0; i < rows; i++)
        for (size_t h = 0; h < 4; h++)
            for (size_t d = 0; d < 4; d++) {
                qkv[i * 3 * C + h * 4 + d] = c.q[i * 16 + h * 4 + d];
                qkv[i * 3 * C + C + h * 4 + d] = c.k[i * 8 + (h / 2) * 4 + d];
                qkv[i * 3 * C + 2 * C + h * 4 + d] = c.v[i * 8 + (h / 2) * 4 + d];
            }
    K->causal_attention_forward(DTYPE_FP32, out, probs, qkv, 2, 5, C, 4);
    assert_close_floats(c.out, out, rows * C, 1e-6, "out");
    assert_close_floats(c.probs, probs, 2 * 4 * 25, 1e-6, "probs");
    free_floats((float *[]){qkv, out, probs}, 3);
    gqa_free(&c);
}

Test(llama_kernels, gqa_backward_matches_finite_differences) {
    for (int causal = 0; causal <= 1; causal++) {
        Gqa c;
        gqa_init(&c, causal, 51 + (uint32_t)causal);
        gqa_loss(&c);
        float *dq = host_nans(c.nq), *dk = host_nans(c.nkv), *dv = host_nans(c.nkv);
        K->gqa_attention_backward(DTYPE_FP32, dq, dk, dv, c.r, c.q, c.k, c.v, c.probs, &c.s);
        expect_finite_differences("dq", gqa_loss, &c, c.q, dq, c.nq, fd);
        expect_finite_differences("dk", gqa_loss, &c, c.k, dk, c.nkv, fd);
        expect_finite_differences("dv", gqa_loss, &c, c.v, dv, c.nkv, fd);
        free_floats((float *[]){dq, dk, dv}, 3);
        gqa_free(&c);
    }
}

/* Heads of D 107: every block width of attention's products (64, 32 and 8 columns, and 3 one at
 * a time), and K,V gradients summed over a group of 2 query heads, against the backward's
 * formulas in double from the forward's own probabilities. Each element within 1e-5 + 1e-4 of
 * its size: a wrong block or a wrong sum over the group is off by the size of a gradient. */
enum { WB = 1, WT = 6, WH = 4, WKV = 2, WD = 107 };

static void wide_gqa_reference(double *dq, double *dk, double *dv, const float *dout,
                               const float *q, const float *k, const float *v, const float *P) {
    const size_t qs = WH * WD, ks = WKV * WD, group = WH / WKV;
    memset(dk, 0, sizeof(double) * WT * ks), memset(dv, 0, sizeof(double) * WT * ks);
    for (size_t h = 0; h < WH; h++) {
        const size_t g = h / group;
        const float *p = P + h * WT * WT;
        double dS[WT][WT];
        for (size_t t = 0; t < WT; t++) {
            double dP[WT], row = 0.0;
            for (size_t u = 0; u < WT; u++) {
                dP[u] = 0.0;
                for (size_t d = 0; d < WD; d++)
                    dP[u] += (double)dout[t * qs + h * WD + d] * v[u * ks + g * WD + d];
                row += dP[u] * p[t * WT + u];
            }
            for (size_t u = 0; u < WT; u++)
                dS[t][u] = p[t * WT + u] * (dP[u] - row) / sqrt((double)WD);
        }
        for (size_t t = 0; t < WT; t++)
            for (size_t d = 0; d < WD; d++) {
                double acc = 0.0;
                for (size_t u = 0; u < WT; u++) acc += dS[t][u] * k[u * ks + g * WD + d];
                dq[t * qs + h * WD + d] = acc;
            }
        for (size_t u = 0; u < WT; u++)
            for (size_t d = 0; d < WD; d++)
                for (size_t t = 0; t < WT; t++) {
                    dv[u * ks + g * WD + d] += p[t * WT + u] * (double)dout[t * qs + h * WD + d];
                    dk[u * ks + g * WD + d] += dS[t][u] * q[t * qs + h * WD + d];
                }
    }
}

static void expect_close_elements(const char *what, const float *got, const double *want,
                                  size_t n) {
    for (size_t i = 0; i < n; i++)
        cr_expect(fabs(got[i] - want[i]) <= 1e-5 + 1e-4 * fabs(want[i]), "%s[%zu]: %g vs %g", what,
                  i, (double)got[i], want[i]);
}

Test(llama_kernels, gqa_backward_at_wide_heads_matches_the_formulas) {
    for (int causal = 0; causal <= 1; causal++) {
        const AttnShape s = {.B = WB,
                             .T = WT,
                             .heads = WH,
                             .kv_heads = WKV,
                             .head_dim = WD,
                             .q_stride = WH * WD,
                             .kv_stride = WKV * WD,
                             .causal = causal};
        const size_t nq = WT * WH * WD, nkv = WT * WKV * WD;
        float *q = host_uniform(nq, -1.5f, 1.5f, 91), *k = host_uniform(nkv, -1.5f, 1.5f, 92);
        float *v = host_uniform(nkv, -1, 1, 93), *dout = host_uniform(nq, -1, 1, 94);
        float *out = host_nans(nq), *probs = host_nans(WH * WT * WT);
        float *dq = host_nans(nq), *dk = host_nans(nkv), *dv = host_nans(nkv);
        K->gqa_attention_forward(DTYPE_FP32, out, probs, q, k, v, &s);
        K->gqa_attention_backward(DTYPE_FP32, dq, dk, dv, dout, q, k, v, probs, &s);
        double *rq = malloc(nq * sizeof(double)), *rk = malloc(nkv * sizeof(double)),
               *rv = malloc(nkv * sizeof(double));
        cr_assert(rq && rk && rv);
        wide_gqa_reference(rq, rk, rv, dout, q, k, v, probs);
        expect_close_elements("dq", dq, rq, nq);
        expect_close_elements("dk", dk, rk, nkv);
        expect_close_elements("dv", dv, rv, nkv);
        free(rq), free(rk), free(rv);
        free_floats((float *[]){q, k, v, dout, out, probs, dq, dk, dv}, 9);
    }
}

/* ---------------- flash attention ---------------- */

/* Flash keeps lse = log sum_s exp(q.k_s / sqrt(D)), gives eager's out, and its backward from
 * lse and out gives eager's gradients from the probabilities, within fp32 rounding. */
Test(llama_kernels, flash_equals_eager_forward_and_backward) {
    for (int causal = 0; causal <= 1; causal++) {
        Gqa c;
        gqa_init(&c, causal, 61 + (uint32_t)causal);
        gqa_loss(&c); /* eager: out, probs */
        float *out = host_nans(c.nq);
        K->flash_attention_forward(DTYPE_FP32, out, c.lse, c.q, c.k, c.v, &c.s);
        assert_close_floats(out, c.out, c.nq, 1e-6, "flash out");
        for (size_t b = 0; b < 2; b++)
            for (size_t h = 0; h < 4; h++)
                for (size_t t = 0; t < 5; t++) {
                    double sum = 0.0;
                    for (size_t u = 0; u < (causal ? t + 1 : 5); u++) {
                        double dot = 0.0;
                        for (size_t d = 0; d < 4; d++)
                            dot += (double)c.q[(b * 5 + t) * 16 + h * 4 + d] *
                                   c.k[(b * 5 + u) * 8 + (h / 2) * 4 + d];
                        sum += exp(dot / 2.0); /* sqrt(D) = 2 */
                    }
                    cr_expect(fabs(c.lse[(b * 4 + h) * 5 + t] - log(sum)) < 1e-5, "lse");
                }
        float *dq = host_nans(c.nq), *dk = host_nans(c.nkv), *dv = host_nans(c.nkv);
        float *fq = host_nans(c.nq), *fk = host_nans(c.nkv), *fv = host_nans(c.nkv);
        float *work = host_nans(25);
        K->gqa_attention_backward(DTYPE_FP32, dq, dk, dv, c.r, c.q, c.k, c.v, c.probs, &c.s);
        K->flash_attention_backward(DTYPE_FP32, fq, fk, fv, c.r, c.q, c.k, c.v, out, c.lse, work,
                                    &c.s);
        assert_close_floats(fq, dq, c.nq, 1e-5, "flash dq");
        assert_close_floats(fk, dk, c.nkv, 1e-5, "flash dk");
        assert_close_floats(fv, dv, c.nkv, 1e-5, "flash dv");
        free_floats((float *[]){out, dq, dk, dv, fq, fk, fv, work}, 8);
        gqa_free(&c);
    }
}

/* GPT's packed qkv through the strided ops: flash there equals the packed eager op. */
Test(llama_kernels, flash_on_packed_qkv_equals_the_packed_eager_ops) {
    const size_t B = 2, T = 6, C = 12, heads = 3;
    float *qkv = host_uniform(B * T * 3 * C, -1.5f, 1.5f, 71),
          *r = host_uniform(B * T * C, -1, 1, 72);
    float *out = host_nans(B * T * C), *probs = host_nans(B * heads * T * T);
    float *fout = host_nans(B * T * C), *lse = host_nans(B * heads * T), *work = host_nans(T * T);
    float *dqkv = host_nans(B * T * 3 * C), *fqkv = host_nans(B * T * 3 * C);
    K->causal_attention_forward(DTYPE_FP32, out, probs, qkv, B, T, C, heads);
    K->attention_backward(DTYPE_FP32, dqkv, r, qkv, probs, B, T, C, heads);
    AttnShape s = {B, T, heads, heads, C / heads, 3 * C, 3 * C, 1};
    K->flash_attention_forward(DTYPE_FP32, fout, lse, qkv, qkv + C, qkv + 2 * C, &s);
    K->flash_attention_backward(DTYPE_FP32, fqkv, fqkv + C, fqkv + 2 * C, r, qkv, qkv + C,
                                qkv + 2 * C, fout, lse, work, &s);
    assert_close_floats(fout, out, B * T * C, 1e-6, "out");
    assert_close_floats(fqkv, dqkv, B * T * 3 * C, 1e-5, "dqkv");
    free_floats((float *[]){qkv, r, out, probs, fout, lse, work, dqkv, fqkv}, 9);
}
