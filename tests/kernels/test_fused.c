/* The fused CPU ops (bias_gelu_forward, bias_gelu_backward, residual_layernorm_forward) against the
 * compositions of existing ops they replace in models/vit.c. */
#include <criterion/criterion.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/cpu/cpu_ops.h"
#include "kernels/cpu/pool.h"
#include "kernels/kernels.h"
#include "tests/util.h"

/* On random inputs at vit-tiny's shapes and odd ones (one column, column counts that are no
 * multiple of the 8-wide chunks, one row, rows wider than the backward's 512-column blocks).
 * Serially every result is bit-identical to the composition (the same float operations in the same
 * order); with pools of 2 and 3 threads the outputs stay bit-identical to the serial ones except
 * the bias gradient, whose per-task sums agree within 1e-6 of the sum of their terms' magnitudes
 * and bit for bit run to run. Overwritten outputs start as NaN (an element a kernel forgets fails);
 * "+=" outputs start non-zero (a kernel that overwrites, or adds twice, fails). */

static const Kernels *K = &kernels_cpu;

#define LN_EPS 1e-6f /* the ViT's (models/vit.c) */

/* `what` at shape M x N, for a failure's message */
static const char *at_shape(const char *what, size_t M, size_t N) {
    static char text[160];
    snprintf(text, sizeof text, "%s (M %zu, N %zu)", what, M, N);
    return text;
}

/* Bit for bit. */
static void assert_same(const char *what, size_t M, size_t N, const float *got, const float *want,
                        size_t n) {
    assert_same_floats(got, want, n, at_shape(what, M, N));
}

/* Column sums taken in another order (per task, then the tasks' in order): each db[j] within
 * 1e-6 of the sum of its terms' magnitudes, |db0[j]| + sum over rows of |d[i, j]| (relative to
 * the result itself, cancellation in a sum of thousands of signed terms can pass 1e-6). */
static void assert_sums_close(const char *what, size_t M, size_t N, const float *got,
                              const float *want, const float *db0, const float *d) {
    for (size_t j = 0; j < N; j++) {
        double mag = fabs((double)db0[j]);
        for (size_t i = 0; i < M; i++) mag += fabs((double)d[i * N + j]);
        cr_assert(fabs((double)got[j] - (double)want[j]) <= 1e-6 * mag,
                  "%s (M %zu, N %zu): db[%zu] is %.9g, want %.9g (terms' magnitude %g)", what, M, N,
                  j, (double)got[j], (double)want[j], mag);
    }
}

typedef struct Shape {
    size_t M, N;
} Shape;

/* vit-tiny's MLP and residual stream at batch 64 (1088 x 128), vit-workshop's MLP rows (768),
 * then odd ones: one element, one column, columns that leave a chunk tail, one row, few rows of
 * many columns */
static const Shape SHAPES[] = {{1088, 128}, {34, 768}, {1, 1},  {7, 1},    {5, 13},
                               {33, 17},    {1, 100},  {9, 24}, {3, 1001}, {130, 40}};
#define N_SHAPES (sizeof SHAPES / sizeof SHAPES[0])

/* Every test starts serial; the pool tests bind their own pools. */
static void serial(void) {
    kernels_cpu_use_pool(NULL);
}

TestSuite(fused, .init = serial);

/* ---------------------------------------------------------------- bias + GELU */

Test(fused, bias_gelu_forward_is_bias_add_then_gelu_forward) {
    for (size_t s = 0; s < N_SHAPES; s++) {
        const size_t M = SHAPES[s].M, N = SHAPES[s].N, n = M * N;
        const uint32_t seed = 10 + 10 * (uint32_t)s;
        /* around GELU's bend and its tails (erf saturates past |x| ~ 4) */
        float *pre = host_uniform(n, -6.0f, 6.0f, seed),
              *b = host_uniform(N, -1.0f, 1.0f, seed + 1);
        float *pre0 = host_copy(pre, n);
        /* the composition: the bias added row by row, then gelu_forward */
        float *want_pre = host_biased(pre, b, M, N), *want_out = host_nans(n);
        K->gelu_forward(DTYPE_FP32, want_out, want_pre, n);

        float *out = host_nans(n);
        K->bias_gelu_forward(DTYPE_FP32, out, pre, b, M, N);
        assert_same("bias_gelu_forward out", M, N, out, want_out, n);
        assert_same("bias_gelu_forward leaves pre as it was", M, N, pre, pre0, n);
        float *bufs[] = {pre, b, pre0, want_pre, want_out, out};
        free_floats(bufs, sizeof bufs / sizeof *bufs);
    }
}

/* What models/vit.c replaced: linear_forward with the bias, then gelu_forward. Here the GEMM is
 * linear_forward without the bias, then the fused op. linear_forward adds its bias as the
 * GEMM's C (beta = 1); at these K (one OpenBLAS K block) that rounds as the separate add, but
 * the contract is 1e-6. */
Test(fused, bias_gelu_forward_after_gemm_is_linear_with_bias_then_gelu) {
    const size_t shapes[][3] = {{1088, 128, 128}, {50, 33, 7}, {3, 5, 130}}; /* M, K, N */
    for (size_t s = 0; s < 3; s++) {
        const size_t M = shapes[s][0], Kd = shapes[s][1], N = shapes[s][2];
        float *in = host_uniform(M * Kd, -1.0f, 1.0f, 100 + (uint32_t)s);
        float *w = host_uniform(N * Kd, -0.5f, 0.5f, 110 + (uint32_t)s);
        float *b = host_uniform(N, -1.0f, 1.0f, 120 + (uint32_t)s);
        float *want_pre = host_nans(M * N), *want_out = host_nans(M * N);
        K->linear_forward(DTYPE_FP32, want_pre, in, w, b, M, Kd, N);
        K->gelu_forward(DTYPE_FP32, want_out, want_pre, M * N);
        float *pre = host_nans(M * N), *out = host_nans(M * N);
        K->linear_forward(DTYPE_FP32, pre, in, w, NULL, M, Kd, N);
        K->bias_gelu_forward(DTYPE_FP32, out, pre, b, M, N);
        float *got_pre = host_biased(pre, b, M, N); /* what backward recomputes */
        assert_close_floats(got_pre, want_pre, M * N, 1e-6, at_shape("pre-activation", M, N));
        assert_close_floats(out, want_out, M * N, 1e-6, at_shape("GELU", M, N));
        float *bufs[] = {in, w, b, want_pre, want_out, pre, out, got_pre};
        free_floats(bufs, sizeof bufs / sizeof *bufs);
    }
}

/* gelu_backward at pre + b then bias_grad, and then linear_backward's db (the call it replaces
 * in models/vit.c): bit for bit, out of place and in place (dpre == dout). */
Test(fused, bias_gelu_backward_is_gelu_backward_then_bias_grad) {
    for (size_t s = 0; s < N_SHAPES; s++) {
        const size_t M = SHAPES[s].M, N = SHAPES[s].N, n = M * N;
        const uint32_t seed = 200 + 10 * (uint32_t)s;
        float *pre = host_uniform(n, -6.0f, 6.0f, seed),
              *dout = host_uniform(n, -1.0f, 1.0f, seed + 1);
        float *db0 = host_uniform(N, -1.0f, 1.0f, seed + 2),
              *b = host_uniform(N, -1.0f, 1.0f, seed + 6);

        float *x = host_biased(pre, b, M, N), *want_d = host_nans(n), *want_db = host_copy(db0, N);
        K->gelu_backward(DTYPE_FP32, want_d, x, dout, n);
        K->bias_grad(DTYPE_FP32, want_db, want_d, M, N, N);
        /* linear_backward's db (din NULL; dw is a throwaway) */
        const size_t Kd = 3;
        float *in = host_uniform(M * Kd, -1.0f, 1.0f, seed + 3),
              *w = host_uniform(N * Kd, -1, 1, seed + 4);
        float *dw = host_uniform(N * Kd, -1.0f, 1.0f, seed + 5), *lin_db = host_copy(db0, N);
        K->linear_backward(DTYPE_FP32, NULL, dw, lin_db, want_d, in, w, M, Kd, N);

        float *d = host_nans(n), *db = host_copy(db0, N);
        K->bias_gelu_backward(DTYPE_FP32, d, db, dout, pre, b, M, N);
        assert_same("bias_gelu_backward dpre", M, N, d, want_d, n);
        assert_same("bias_gelu_backward db vs bias_grad", M, N, db, want_db, N);
        assert_same("bias_gelu_backward db vs linear_backward", M, N, db, lin_db, N);

        float *d_in_place = host_copy(dout, n), *db2 = host_copy(db0, N);
        K->bias_gelu_backward(DTYPE_FP32, d_in_place, db2, d_in_place, pre, b, M, N);
        assert_same("bias_gelu_backward dpre in place", M, N, d_in_place, want_d, n);
        assert_same("bias_gelu_backward db in place", M, N, db2, want_db, N);
        float *bufs[] = {pre, dout, db0,    b, x,  want_d,     want_db, in,
                         w,   dw,   lin_db, d, db, d_in_place, db2};
        free_floats(bufs, sizeof bufs / sizeof *bufs);
    }
}

/* By hand: b is a column's (pre + b = 0 everywhere, where GELU' = 1/2), and db accumulates:
 * two calls add twice. */
Test(fused, bias_gelu_backward_by_hand_accumulates_db) {
    const size_t M = 4, N = 3;
    const float b[3] = {-0.5f, 0.25f, 1.0f};
    const float pre[12] = {0.5f, -0.25f, -1, 0.5f, -0.25f, -1, 0.5f, -0.25f, -1, 0.5f, -0.25f, -1};
    const float dout[12] = {1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12};
    float out[12], d[12], db[3] = {100, 200, 300};
    K->bias_gelu_forward(DTYPE_FP32, out, pre, b, M, N);
    for (int i = 0; i < 12; i++) cr_assert_float_eq(out[i], 0.0f, 0.0f, "GELU(0) is 0");
    K->bias_gelu_backward(DTYPE_FP32, d, db, dout, pre, b, M, N);
    for (int i = 0; i < 12; i++) cr_assert_float_eq(d[i], 0.5f * dout[i], 0.0f);
    /* column sums of dout / 2: 11, 13, 15 */
    cr_assert_float_eq(db[0], 111.0f, 0.0f);
    cr_assert_float_eq(db[1], 213.0f, 0.0f);
    cr_assert_float_eq(db[2], 315.0f, 0.0f);
    K->bias_gelu_backward(DTYPE_FP32, d, db, dout, pre, b, M, N);
    cr_assert_float_eq(db[0], 122.0f, 0.0f);
    cr_assert_float_eq(db[2], 330.0f, 0.0f);
    /* an empty batch adds nothing and writes nothing */
    K->bias_gelu_backward(DTYPE_FP32, NULL, db, NULL, NULL, b, 0, N);
    K->bias_gelu_forward(DTYPE_FP32, NULL, NULL, b, 0, N);
    cr_assert_float_eq(db[1], 226.0f, 0.0f);
}

/* ---------------------------------------------------------------- residual + LayerNorm */

Test(fused, residual_layernorm_is_add_then_layernorm_forward) {
    for (size_t s = 0; s < N_SHAPES; s++) {
        const size_t M = SHAPES[s].M, C = SHAPES[s].N, n = M * C;
        const uint32_t seed = 400 + 10 * (uint32_t)s;
        float *x = host_uniform(n, -2.0f, 3.0f, seed), *y = host_uniform(n, -1.0f, 1.0f, seed + 1);
        float *w = host_uniform(C, 0.5f, 1.5f, seed + 2),
              *b = host_uniform(C, -0.5f, 0.5f, seed + 3);
        float *want_sum = host_nans(n), *want_out = host_nans(n);
        float *want_mean = host_nans(M), *want_rstd = host_nans(M);
        K->add(DTYPE_FP32, want_sum, x, y, n);
        K->layernorm_forward(DTYPE_FP32, want_out, want_mean, want_rstd, want_sum, w, b, M, C,
                             LN_EPS);

        /* out of place, then in place into x (models/vit.c's call: sum = the attention branch's
         * output, x = the block's input) and into y */
        for (int into = 0; into < 3; into++) {
            float *xc = host_copy(x, n), *yc = host_copy(y, n), *fresh = host_nans(n);
            float *sum = into == 0 ? fresh : into == 1 ? xc : yc;
            float *out = host_nans(n), *mean = host_nans(M), *rstd = host_nans(M);
            K->residual_layernorm_forward(DTYPE_FP32, sum, out, mean, rstd, xc, yc, w, b, M, C,
                                          LN_EPS);
            static const char *const how[] = {"into a new buffer", "into x", "into y"};
            char what[96];
            snprintf(what, sizeof what, "residual_layernorm sum %s", how[into]);
            assert_same(what, M, C, sum, want_sum, n);
            snprintf(what, sizeof what, "residual_layernorm out %s", how[into]);
            assert_same(what, M, C, out, want_out, n);
            assert_same("residual_layernorm mean", M, C, mean, want_mean, M);
            assert_same("residual_layernorm rstd", M, C, rstd, want_rstd, M);
            float *bufs[] = {xc, yc, fresh, out, mean, rstd};
            free_floats(bufs, sizeof bufs / sizeof *bufs);
        }
        float *bufs[] = {x, y, w, b, want_sum, want_out, want_mean, want_rstd};
        free_floats(bufs, sizeof bufs / sizeof *bufs);
    }
}

/* ---------------------------------------------------------------- with a pool */

/* vit-tiny's, ragged row counts, few rows, and rows too wide for per-task partials in the
 * pool's scratch (65,536 floats a thread) */
static const Shape POOL_SHAPES[] = {{1088, 128}, {1001, 77}, {64, 771},
                                    {3001, 12},  {40, 900},  {3, 140001}};
#define N_POOL_SHAPES (sizeof POOL_SHAPES / sizeof POOL_SHAPES[0])

static void check_pool(int threads) {
    for (size_t s = 0; s < N_POOL_SHAPES; s++) {
        const size_t M = POOL_SHAPES[s].M, N = POOL_SHAPES[s].N, n = M * N;
        /* bias + GELU's backward splits by columns (exact sums) when the rows are too few for
         * a block of 24 per task or too wide for the per-task partials */
        const int by_columns = N > CPU_POOL_SCRATCH_PER_THREAD || M < 24 * (size_t)threads;
        const uint32_t seed = 600 + 10 * (uint32_t)s;
        float *pre0 = host_uniform(n, -6.0f, 6.0f, seed),
              *b = host_uniform(N, -1.0f, 1.0f, seed + 1);
        float *dout = host_uniform(n, -1.0f, 1.0f, seed + 2),
              *db0 = host_uniform(N, -1, 1, seed + 3);
        float *x = host_uniform(n, -2.0f, 3.0f, seed + 4),
              *w = host_uniform(N, 0.5f, 1.5f, seed + 5);

        /* [0]: serial; [1], [2]: a pool of `threads`, twice (run to run) */
        float *pre[3], *out[3], *d[3], *db[3], *sum[3], *ln[3], *mean[3], *rstd[3];
        for (int c = 0; c < 3; c++) {
            pre[c] = host_copy(pre0, n), out[c] = host_nans(n), d[c] = host_nans(n);
            db[c] = host_copy(db0, N), sum[c] = host_nans(n), ln[c] = host_nans(n);
            mean[c] = host_nans(M), rstd[c] = host_nans(M);
            CpuPool *p = c ? bind_pool(threads) : NULL;
            const unsigned long before = cpu_pool_runs(p);
            K->bias_gelu_forward(DTYPE_FP32, out[c], pre[c], b, M, N);
            K->bias_gelu_backward(DTYPE_FP32, d[c], db[c], dout, pre[c], b, M, N);
            K->residual_layernorm_forward(DTYPE_FP32, sum[c], ln[c], mean[c], rstd[c], x, dout, w,
                                          b, M, N, LN_EPS);
            if (p) {
                cr_assert_geq(cpu_pool_runs(p), before + 3, "pool of %d, M %zu, N %zu: not split",
                              threads, M, N);
                unbind_pool(p);
            }
        }
        for (int c = 1; c < 3; c++) {
            assert_same("bias_gelu_forward leaves pre, pooled", M, N, pre[c], pre0, n);
            assert_same("bias_gelu_forward out, pool vs serial", M, N, out[c], out[0], n);
            assert_same("bias_gelu_backward dpre, pool vs serial", M, N, d[c], d[0], n);
            if (by_columns)
                assert_same("bias_gelu_backward db (by columns), pool vs serial", M, N, db[c],
                            db[0], N);
            else
                assert_sums_close("bias_gelu_backward db, pool vs serial", M, N, db[c], db[0], db0,
                                  d[0]);
            assert_same("residual_layernorm sum, pool vs serial", M, N, sum[c], sum[0], n);
            assert_same("residual_layernorm out, pool vs serial", M, N, ln[c], ln[0], n);
            assert_same("residual_layernorm mean, pool vs serial", M, N, mean[c], mean[0], M);
            assert_same("residual_layernorm rstd, pool vs serial", M, N, rstd[c], rstd[0], M);
        }
        assert_same("bias_gelu_backward db run to run", M, N, db[2], db[1], N);

        /* and against the unfused ops on the same pool: gelu_backward then bias_grad */
        float *want_d = host_nans(n), *want_db = host_copy(db0, N),
              *biased_pre = host_biased(pre0, b, M, N);
        CpuPool *p = bind_pool(threads);
        K->gelu_backward(DTYPE_FP32, want_d, biased_pre, dout, n);
        K->bias_grad(DTYPE_FP32, want_db, want_d, M, N, N);
        unbind_pool(p);
        assert_same("bias_gelu_backward dpre vs gelu_backward, pooled", M, N, d[1], want_d, n);
        assert_sums_close("bias_gelu_backward db vs bias_grad, pooled", M, N, db[1], want_db, db0,
                          want_d);

        for (int c = 0; c < 3; c++) {
            float *bufs[] = {pre[c], out[c], d[c], db[c], sum[c], ln[c], mean[c], rstd[c]};
            free_floats(bufs, sizeof bufs / sizeof *bufs);
        }
        float *bufs[] = {pre0, b, dout, db0, x, w, want_d, want_db, biased_pre};
        free_floats(bufs, sizeof bufs / sizeof *bufs);
    }
}

Test(fused, pool_of_2_matches_serial) {
    check_pool(2);
}

Test(fused, pool_of_3_matches_serial) {
    check_pool(3);
}
