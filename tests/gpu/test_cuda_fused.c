/* The fused ops on the GPU (kernels/cuda/fused.cu) against kernels_cpu's on the same random inputs
 * and against the GPU's own unfused ops they replace, at the ViT's shapes and odd ones. */
#include <criterion/criterion.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/cuda/kernels_cuda.h"
#include "kernels/kernels.h"
#include "tests/gpu/gpu_util.h"

/* The ops: bias_gelu_forward, bias_gelu_backward and residual_layernorm_forward; the unfused ones
 * they replace: gelu_forward and gelu_backward at pre + bias, then bias_grad; add then
 * layernorm_forward. The shapes the ViT runs: vit-tiny, 64 x 17 rows, hidden and MLP 128;
 * vit-workshop at batch 128, MLP 768, hidden 3840. The odd ones: one element, one column, column
 * counts that end mid-warp or mid-tile, one past the warp-per-row LayerNorm limit, one row.
 * Overwritten outputs are poisoned with NaN first (an element a kernel forgets fails); "+=" outputs
 * start from the same random non-zero values on both sides (a kernel that overwrites, or adds
 * twice, fails). fp32 results agree with the CPU within 1e-5 relative L2 (invariant 6), with the
 * GPU's unfused ops within 1e-6; the residual sum (a single add) bit for bit; inputs the ops only
 * read are left as they were; the bias gradient is the same bits run to run. */

#define REL 1e-5         /* GPU against CPU (invariant 6) */
#define REL_UNFUSED 1e-6 /* GPU fused against GPU unfused */
#define LN_EPS 1e-6f     /* the ViT's (models/vit.c) */

static const Kernels *CPU = &kernels_cpu;
static const Kernels *GPU = &kernels_cuda;

/* Every test runs on the GPU bound to its thread, or is skipped where there is none. */
TestSuite(cuda_fused, .init = gpu_or_skip, .fini = gpu_done);

typedef struct {
    size_t M, N;
} Shape;

/* ---- bias + GELU ---- */

/* vit-tiny's MLP (64 x 17 rows of 128), vit-workshop's at batch 128 (768), then odd ones: one
 * element, one column, a column count that ends mid-tile, one row, rows wider than a tile
 * grid's worth of partials in the scratch (8192 doubles: one group), many rows of few columns
 * (more row groups than the cap) */
static const Shape BG_SHAPES[] = {{64 * 17, 128}, {128 * 17, 768}, {1, 1},    {7, 1},
                                  {33, 17},       {1, 1000},       {5, 9000}, {5000, 3}};
#define N_BG_SHAPES (sizeof BG_SHAPES / sizeof BG_SHAPES[0])

/* Each element within REL of the CPU's value plus GELU_ERF_ABS of |x| / 2 (gpu_util.h says why),
 * which is tighter than the L2 check wherever GELU is not near 0. */
static void expect_gelu_close(const float *d_out, const float *want, const float *x, size_t n,
                              const char *what) {
    float *got = gpu_fetch(d_out, n);
    gpu_expect_gelu_close(got, want, x, n, REL, 0.0, what);
    free(got);
}

Test(cuda_fused, bias_gelu_forward) {
    for (size_t s = 0; s < N_BG_SHAPES; s++) {
        const size_t M = BG_SHAPES[s].M, N = BG_SHAPES[s].N, n = M * N;
        const unsigned seed = 100 + 10 * (unsigned)s;
        /* the GEMM's output without bias, across GELU's bend and into its tails */
        float *pre = host_random(n, -5.0f, 5.0f, seed), *b = host_random(N, -1.0f, 1.0f, seed + 1);
        float *out = host_floats(n);
        CPU->bias_gelu_forward(DTYPE_FP32, out, pre, b, M, N);

        float *d_pre = gpu_floats(pre, n), *d_b = gpu_floats(b, N), *d_out = gpu_poisoned_floats(n);
        GPU->bias_gelu_forward(DTYPE_FP32, d_out, d_pre, d_b, M, N);
        gpu_check();
        float *biased = host_biased(pre, b, M, N);
        expect_gelu_close(d_out, out, biased, n,
                          fmt_text("bias_gelu_forward out (M %zu, N %zu)", M, N));
        gpu_expect_same_dev(d_pre, pre, n,
                            fmt_text("bias_gelu_forward leaves pre (M %zu, N %zu)", M, N));

        /* the GPU's unfused op on the pre-activation */
        float *d_biased = gpu_floats(biased, n), *d_want = gpu_poisoned_floats(n);
        GPU->gelu_forward(DTYPE_FP32, d_want, d_biased, n);
        gpu_check();
        gpu_expect_close_devs(d_out, d_want, n, REL_UNFUSED,
                              fmt_text("bias_gelu_forward vs gelu_forward (M %zu, N %zu)", M, N));

        gpu_free(d_pre), gpu_free(d_b), gpu_free(d_out), gpu_free(d_biased), gpu_free(d_want);
        free(pre), free(b), free(out), free(biased);
    }
}

Test(cuda_fused, bias_gelu_backward_accumulates_db) {
    for (size_t s = 0; s < N_BG_SHAPES; s++) {
        const size_t M = BG_SHAPES[s].M, N = BG_SHAPES[s].N, n = M * N;
        const unsigned seed = 300 + 10 * (unsigned)s;
        float *pre = host_random(n, -5.0f, 5.0f, seed), *b = host_random(N, -1.0f, 1.0f, seed + 3);
        float *dout = host_random(n, -1.0f, 1.0f, seed + 1);
        float *db0 = host_random(N, -1.0f, 1.0f, seed + 2); /* "+=": starts non-zero */
        float *dpre = host_floats(n), *db = host_copy(db0, N);
        CPU->bias_gelu_backward(DTYPE_FP32, dpre, db, dout, pre, b, M, N);

        float *d_pre = gpu_floats(pre, n), *d_b = gpu_floats(b, N), *d_dout = gpu_floats(dout, n);
        float *d_dpre = gpu_poisoned_floats(n), *d_db = gpu_floats(db0, N);
        GPU->bias_gelu_backward(DTYPE_FP32, d_dpre, d_db, d_dout, d_pre, d_b, M, N);
        gpu_check();
        gpu_expect_close_dev(d_dpre, dpre, n, REL,
                             fmt_text("bias_gelu_backward dpre (M %zu, N %zu)", M, N));
        gpu_expect_close_dev(d_db, db, N, REL,
                             fmt_text("bias_gelu_backward db (M %zu, N %zu)", M, N));
        gpu_expect_same_dev(d_b, b, N,
                            fmt_text("bias_gelu_backward leaves b (M %zu, N %zu)", M, N));

        /* run to run: the same bits (fixed grid, groups added in order) */
        float *first = gpu_fetch(d_db, N);
        float *d_db2 = gpu_floats(db0, N), *d_dpre2 = gpu_poisoned_floats(n);
        GPU->bias_gelu_backward(DTYPE_FP32, d_dpre2, d_db2, d_dout, d_pre, d_b, M, N);
        gpu_check();
        gpu_expect_same_dev(d_db2, first, N,
                            fmt_text("bias_gelu_backward db second run (M %zu, N %zu)", M, N));

        /* in place (dpre = dout), as models/vit.c calls it */
        float *d_inplace = gpu_floats(dout, n), *d_db3 = gpu_floats(db0, N);
        GPU->bias_gelu_backward(DTYPE_FP32, d_inplace, d_db3, d_inplace, d_pre, d_b, M, N);
        gpu_check();
        gpu_expect_close_dev(d_inplace, dpre, n, REL,
                             fmt_text("bias_gelu_backward dpre in place (M %zu, N %zu)", M, N));
        gpu_expect_same_dev(d_db3, first, N,
                            fmt_text("bias_gelu_backward db in place (M %zu, N %zu)", M, N));

        /* the GPU's unfused ops at the pre-activation: gelu_backward then bias_grad */
        float *biased = host_biased(pre, b, M, N);
        float *d_biased = gpu_floats(biased, n);
        float *d_want = gpu_poisoned_floats(n), *d_want_db = gpu_floats(db0, N);
        GPU->gelu_backward(DTYPE_FP32, d_want, d_biased, d_dout, n);
        GPU->bias_grad(DTYPE_FP32, d_want_db, d_want, M, N, N);
        gpu_check();
        gpu_expect_close_devs(d_dpre, d_want, n, REL_UNFUSED,
                              fmt_text("bias_gelu_backward vs gelu_backward (M %zu, N %zu)", M, N));
        gpu_expect_close_devs(d_db, d_want_db, N, REL_UNFUSED,
                              fmt_text("bias_gelu_backward db vs bias_grad (M %zu, N %zu)", M, N));

        gpu_free(d_pre), gpu_free(d_b), gpu_free(d_dout), gpu_free(d_dpre), gpu_free(d_db);
        gpu_free(d_db2), gpu_free(d_dpre2), gpu_free(d_inplace), gpu_free(d_db3);
        gpu_free(d_biased), gpu_free(d_want), gpu_free(d_want_db);
        free(pre), free(b), free(dout), free(db0), free(dpre), free(db), free(first), free(biased);
    }
}

/* An empty batch: nothing is written, db stays as it was. */
Test(cuda_fused, empty_shapes_touch_nothing) {
    const float db0[3] = {1.0f, 2.0f, 3.0f};
    float *d_db = gpu_floats(db0, 3);
    GPU->bias_gelu_backward(DTYPE_FP32, NULL, d_db, NULL, NULL, d_db, 0, 3);
    GPU->bias_gelu_forward(DTYPE_FP32, NULL, NULL, d_db, 0, 3);
    GPU->residual_layernorm_forward(DTYPE_FP32, NULL, NULL, NULL, NULL, NULL, NULL, d_db, d_db, 0,
                                    3, LN_EPS);
    gpu_check();
    gpu_expect_same_dev(d_db, db0, 3, "db after empty calls");
    gpu_free(d_db);
}

/* ---- residual + LayerNorm ---- */

/* vit-tiny's blocks (64 x 17 tokens, hidden 128), vit-workshop's at batch 128 (3840), then odd
 * ones: one column, a warp's worth and one past the warp-per-row limit (1024), rows that do not
 * fill a block, one row */
static const Shape LN_SHAPES[] = {{64 * 17, 128}, {128 * 17, 3840}, {7, 33},   {5, 1},
                                  {9, 1024},      {100, 1025},      {3, 4097}, {1, 3}};
#define N_LN_SHAPES (sizeof LN_SHAPES / sizeof LN_SHAPES[0])

Test(cuda_fused, residual_layernorm_forward) {
    for (size_t s = 0; s < N_LN_SHAPES; s++) {
        const size_t M = LN_SHAPES[s].M, C = LN_SHAPES[s].N, n = M * C;
        const unsigned seed = 500 + 10 * (unsigned)s;
        /* the stream (mean away from zero) and a branch's output */
        float *x = host_random(n, -2.0f, 3.0f, seed), *y = host_random(n, -1.0f, 1.0f, seed + 1);
        float *w = host_random(C, 0.5f, 1.5f, seed + 2), *b = host_random(C, -0.5f, 0.5f, seed + 3);
        float *sum = host_floats(n), *out = host_floats(n);
        float *mean = host_floats(M), *rstd = host_floats(M);
        CPU->residual_layernorm_forward(DTYPE_FP32, sum, out, mean, rstd, x, y, w, b, M, C, LN_EPS);

        float *d_w = gpu_floats(w, C), *d_b = gpu_floats(b, C), *d_y = gpu_floats(y, n);
        /* into a new buffer, then in place into x (models/vit.c: sum = the branch's output) */
        for (int in_place = 0; in_place < 2; in_place++) {
            float *d_x = gpu_floats(x, n), *d_new = gpu_poisoned_floats(n);
            float *d_sum = in_place ? d_x : d_new;
            float *d_out = gpu_poisoned_floats(n), *d_mean = gpu_poisoned_floats(M),
                  *d_rstd = gpu_poisoned_floats(M);
            GPU->residual_layernorm_forward(DTYPE_FP32, d_sum, d_out, d_mean, d_rstd, d_x, d_y, d_w,
                                            d_b, M, C, LN_EPS);
            gpu_check();
            const char *how = in_place ? "in place" : "new buffer";
            char what[96];
            /* one float add: the CPU's bits */
            gpu_expect_same_dev(d_sum, sum, n,
                                fmt_text("residual_layernorm sum %s (M %zu, C %zu)", how, M, C));
            gpu_expect_close_dev(d_out, out, n, REL,
                                 fmt_text("residual_layernorm out %s (M %zu, C %zu)", how, M, C));
            gpu_expect_close_dev(d_mean, mean, M, REL,
                                 fmt_text("residual_layernorm mean %s (M %zu, C %zu)", how, M, C));
            gpu_expect_close_dev(d_rstd, rstd, M, REL,
                                 fmt_text("residual_layernorm rstd %s (M %zu, C %zu)", how, M, C));

            if (!in_place) { /* the GPU's unfused ops: add, then layernorm_forward */
                float *d_s2 = gpu_poisoned_floats(n), *d_o2 = gpu_poisoned_floats(n);
                float *d_m2 = gpu_poisoned_floats(M), *d_r2 = gpu_poisoned_floats(M);
                GPU->add(DTYPE_FP32, d_s2, d_x, d_y, n);
                GPU->layernorm_forward(DTYPE_FP32, d_o2, d_m2, d_r2, d_s2, d_w, d_b, M, C, LN_EPS);
                gpu_check();
                snprintf(what, sizeof what, "residual_layernorm vs add + layernorm (M %zu, C %zu)",
                         M, C);
                gpu_expect_close_devs(d_out, d_o2, n, REL_UNFUSED, what);
                gpu_expect_close_devs(d_mean, d_m2, M, REL_UNFUSED, what);
                gpu_expect_close_devs(d_rstd, d_r2, M, REL_UNFUSED, what);
                gpu_free(d_s2), gpu_free(d_o2), gpu_free(d_m2), gpu_free(d_r2);
            }
            gpu_free(d_x), gpu_free(d_new), gpu_free(d_out), gpu_free(d_mean), gpu_free(d_rstd);
        }
        gpu_free(d_w), gpu_free(d_b), gpu_free(d_y);
        free(x), free(y), free(w), free(b), free(sum), free(out), free(mean), free(rstd);
    }
}
