/* The language model's CPU ops: causal attention against a naive masked softmax in double and its
 * backward (attention_backward on causal probabilities) against finite differences; the token
 * embedding by hand, with an id out of range, and its backward's scatter-add. */
#include <criterion/criterion.h>
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/cpu/cpu_ops.h"
#include "kernels/kernels.h"
#include "tests/util.h"

static const Kernels *K = &kernels_cpu;

/* Central differences of loss() against grad, as tests/kernels/test_vit_kernels.c checks the
 * ViT's backwards: L = sum(out * R) for a fixed random R, steps of 1e-2 as stored. */
static const FdTolerance fd = {1e-2f, 1e-3, 1e-4};

/* ---------------- causal attention ---------------- */

typedef struct {
    size_t B, T, C, H;
    float *qkv, *r, *out, *probs;
} Attn;

static void attn_init(Attn *c, size_t B, size_t T, size_t C, size_t H, uint32_t seed) {
    *c = (Attn){.B = B, .T = T, .C = C, .H = H};
    c->qkv = host_uniform(B * T * 3 * C, -1.5f, 1.5f, seed);
    c->r = host_uniform(B * T * C, -1, 1, seed + 1);
    c->out = host_nans(B * T * C);
    c->probs = host_nans(B * H * T * T);
}

static void attn_free(Attn *c) {
    free_floats((float *[]){c->qkv, c->r, c->out, c->probs}, 4);
}

static double causal_loss(void *p) {
    Attn *c = p;
    K->causal_attention_forward(DTYPE_FP32, c->out, c->probs, c->qkv, c->B, c->T, c->C, c->H);
    return dot_out_r(c->out, c->r, c->B * c->T * c->C);
}

/* probs and out against a double loop over keys 0..t only; what lies above the diagonal is
 * exactly 0 (it was NaN before), every row sums to 1, and the first token attends to itself
 * alone, so its output is its own v. */
static void causal_forward_check(Attn *c) {
    const size_t B = c->B, T = c->T, C = c->C, H = c->H, D = C / H, C3 = 3 * C;
    K->causal_attention_forward(DTYPE_FP32, c->out, c->probs, c->qkv, B, T, C, H);
    double w[64];
    cr_assert(T <= 64);
    for (size_t b = 0; b < B; b++)
        for (size_t h = 0; h < H; h++)
            for (size_t t = 0; t < T; t++) {
                const float *q = c->qkv + (b * T + t) * C3 + h * D;
                const float *prow = c->probs + ((b * H + h) * T + t) * T;
                double mx = -INFINITY, sum = 0, psum = 0;
                for (size_t s = 0; s <= t; s++) {
                    const float *k = c->qkv + (b * T + s) * C3 + C + h * D;
                    double z = 0;
                    for (size_t d = 0; d < D; d++) z += (double)q[d] * k[d];
                    w[s] = z / sqrt((double)D);
                    if (w[s] > mx) mx = w[s];
                }
                for (size_t s = 0; s <= t; s++) sum += (w[s] = exp(w[s] - mx));
                for (size_t s = 0; s < T; s++) {
                    double want = s <= t ? w[s] / sum : 0.0;
                    if (s > t)
                        cr_expect(prow[s] == 0.0f,
                                  "b%zu h%zu: probs[%zu][%zu] = %g above the "
                                  "diagonal",
                                  b, h, t, s, prow[s]);
                    else
                        cr_expect(fabs(prow[s] - want) <= 1e-6,
                                  "probs b%zu h%zu [%zu][%zu]: %g "
                                  "vs %g",
                                  b, h, t, s, prow[s], want);
                    psum += prow[s];
                }
                cr_expect(fabs(psum - 1.0) <= 1e-6, "row %zu sums to %g", t, psum);
                for (size_t d = 0; d < D; d++) {
                    double o = 0;
                    for (size_t s = 0; s <= t; s++)
                        o += w[s] / sum * c->qkv[(b * T + s) * C3 + 2 * C + h * D + d];
                    const float got = c->out[(b * T + t) * C + h * D + d];
                    cr_expect(fabs(got - o) <= 1e-5, "out b%zu h%zu t%zu d%zu: %g vs %g", b, h, t,
                              d, got, o);
                }
            }
    for (size_t d = 0; d < D; d++)
        cr_expect_eq(c->out[d], c->qkv[2 * C + d], "token 0 sees only itself");
}

/* head dim 12 with 5 tokens, and head dim 45 with 19 tokens (rows longer than a chunk) */
Test(lm_kernels, causal_attention_forward_matches_a_masked_softmax) {
    Attn c;
    attn_init(&c, 2, 5, 24, 2, 11);
    causal_forward_check(&c);
    attn_free(&c);
    attn_init(&c, 1, 19, 90, 2, 13);
    causal_forward_check(&c);
    attn_free(&c);
}

/* A later token changes nothing before it: the outputs of tokens 0..t are the same bits
 * whatever tokens t+1.. hold. */
Test(lm_kernels, causal_attention_does_not_look_ahead) {
    enum { T = 7, C = 8, H = 2 };
    Attn c;
    attn_init(&c, 1, T, C, H, 21);
    K->causal_attention_forward(DTYPE_FP32, c.out, c.probs, c.qkv, 1, T, C, H);
    float *before = host_copy(c.out, T * C);
    for (size_t i = 4 * 3 * C; i < T * 3 * C; i++) c.qkv[i] += 0.5f; /* tokens 4.. */
    K->causal_attention_forward(DTYPE_FP32, c.out, c.probs, c.qkv, 1, T, C, H);
    assert_same_floats(c.out, before, 4 * C, "tokens 0..3");
    cr_expect(c.out[4 * C] != before[4 * C], "token 4 did change");
    free(before);
    attn_free(&c);
}

Test(lm_kernels, causal_attention_backward_finite_differences) {
    const size_t shapes[2][4] = {{2, 5, 24, 2}, {1, 9, 90, 2}};
    for (int i = 0; i < 2; i++) {
        Attn c;
        attn_init(&c, shapes[i][0], shapes[i][1], shapes[i][2], shapes[i][3], 31 + 2 * i);
        const size_t n = c.B * c.T * 3 * c.C;
        causal_loss(&c);            /* the causal probabilities */
        float *dqkv = host_nans(n); /* overwritten entirely */
        K->attention_backward(DTYPE_FP32, dqkv, c.r, c.qkv, c.probs, c.B, c.T, c.C, c.H);
        expect_finite_differences(i ? "causal dqkv (D 45, T 9)" : "causal dqkv (D 12, T 5)",
                                  causal_loss, &c, c.qkv, dqkv, n, fd);
        free(dqkv);
        attn_free(&c);
    }
}

/* With a pool the pairs are split over it: the serial op's bits. */
Test(lm_kernels, causal_attention_with_a_pool_is_the_serial_result) {
    enum { B = 4, T = 33, C = 64, H = 4 };
    Attn c;
    attn_init(&c, B, T, C, H, 41);
    K->causal_attention_forward(DTYPE_FP32, c.out, c.probs, c.qkv, B, T, C, H);
    float *out = host_copy(c.out, B * T * C), *probs = host_copy(c.probs, B * H * T * T);
    CpuPool *pool = bind_pool(2);
    K->causal_attention_forward(DTYPE_FP32, c.out, c.probs, c.qkv, B, T, C, H);
    unbind_pool(pool);
    assert_same_floats(c.out, out, B * T * C, "out");
    assert_same_floats(c.probs, probs, B * H * T * T, "probs");
    free_floats((float *[]){out, probs}, 2);
    attn_free(&c);
}

/* ---------------- the token embedding ---------------- */

enum { EB = 2, ET = 3, EC = 4, EV = 5 };

Test(lm_kernels, token_embed_forward_by_hand) {
    float *wte = host_uniform(EV * EC, -1, 1, 51), *wpe = host_uniform(ET * EC, -1, 1, 52);
    float *x = host_nans(EB * ET * EC);
    const int32_t ids[EB * ET] = {4, 0, 4, 2, 3, 1};
    K->token_embed_forward(DTYPE_FP32, x, ids, wte, wpe, EB, ET, EC, EV);
    for (int b = 0; b < EB; b++)
        for (int t = 0; t < ET; t++)
            for (int c = 0; c < EC; c++)
                cr_expect_eq(x[(b * ET + t) * EC + c],
                             wte[ids[b * ET + t] * EC + c] + wpe[t * EC + c], "x[%d][%d][%d]", b, t,
                             c);
    /* an id outside [0, V): its row is NaN, the others as before */
    const int32_t bad[EB * ET] = {4, -1, 4, 2, EV, 1};
    K->token_embed_forward(DTYPE_FP32, x, bad, wte, wpe, EB, ET, EC, EV);
    for (int c = 0; c < EC; c++) {
        cr_expect(isnan(x[1 * EC + c]) && isnan(x[(ET + 1) * EC + c]), "rows of -1 and V");
        cr_expect_eq(x[c], wte[4 * EC + c] + wpe[c]);
    }
    free_floats((float *[]){wte, wpe, x}, 3);
}

typedef struct {
    float *wte, *wpe, *x, *r;
    const int32_t *ids;
} Embed;

static double embed_loss(void *p) {
    Embed *e = p;
    K->token_embed_forward(DTYPE_FP32, e->x, e->ids, e->wte, e->wpe, EB, ET, EC, EV);
    return dot_out_r(e->x, e->r, EB * ET * EC);
}

/* dwte[v] += the gradients of every position holding v (token 4 three times), dwpe[t] += the
 * batch's at t, both added to what was there; an id out of range adds to dwpe only. Finite
 * differences of the forward agree. */
Test(lm_kernels, token_embed_backward_scatters_and_adds) {
    const int32_t ids[EB * ET] = {4, 0, 4, 2, 4, 1};
    Embed e = {.wte = host_uniform(EV * EC, -1, 1, 61),
               .wpe = host_uniform(ET * EC, -1, 1, 62),
               .x = host_nans(EB * ET * EC),
               .r = host_uniform(EB * ET * EC, -1, 1, 63),
               .ids = ids};
    float *dwte = host_uniform(EV * EC, -1, 1, 64), *dwpe = host_uniform(ET * EC, -1, 1, 65);
    float *wte0 = host_copy(dwte, EV * EC), *wpe0 = host_copy(dwpe, ET * EC);
    K->token_embed_backward(DTYPE_FP32, dwte, dwpe, ids, e.r, EB, ET, EC, EV);
    const float *g = e.r;
    for (int c = 0; c < EC; c++) {
        /* in (b, t) order: positions 0, 2 and 4 of the flattened batch */
        cr_expect_eq(dwte[4 * EC + c],
                     ((wte0[4 * EC + c] + g[0 * EC + c]) + g[2 * EC + c]) + g[4 * EC + c]);
        cr_expect_eq(dwte[0 * EC + c], wte0[0 * EC + c] + g[1 * EC + c]);
        cr_expect_eq(dwte[3 * EC + c], wte0[3 * EC + c], "no token 3: its row is untouched");
        for (int t = 0; t < ET; t++)
            cr_expect_eq(dwpe[t * EC + c],
                         (wpe0[t * EC + c] + g[t * EC + c]) + g[(ET + t) * EC + c]);
    }
    /* against finite differences, from zeros */
    memset(dwte, 0, EV * EC * sizeof(float));
    memset(dwpe, 0, ET * EC * sizeof(float));
    K->token_embed_backward(DTYPE_FP32, dwte, dwpe, ids, e.r, EB, ET, EC, EV);
    expect_finite_differences("dwte", embed_loss, &e, e.wte, dwte, EV * EC, fd);
    expect_finite_differences("dwpe", embed_loss, &e, e.wpe, dwpe, ET * EC, fd);
    /* out of range: dwpe still takes the position's gradient, dwte nothing */
    const int32_t bad[EB * ET] = {EV, 0, 4, 2, 4, 1};
    memset(dwte, 0, EV * EC * sizeof(float));
    memset(dwpe, 0, ET * EC * sizeof(float));
    K->token_embed_backward(DTYPE_FP32, dwte, dwpe, bad, e.r, EB, ET, EC, EV);
    for (int c = 0; c < EC; c++) {
        cr_expect_eq(dwte[4 * EC + c], g[2 * EC + c] + g[4 * EC + c]);
        cr_expect_eq(dwpe[c], g[c] + g[ET * EC + c]);
    }
    free_floats((float *[]){e.wte, e.wpe, e.x, e.r, dwte, dwpe, wte0, wpe0}, 8);
}
