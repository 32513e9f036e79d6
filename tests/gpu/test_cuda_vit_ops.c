/* The ViT's LayerNorm, patch, token, class-token, loss and accuracy ops on the GPU
 * (kernels/cuda/vit_ops.cu) against kernels_cpu on the same random inputs. */
#include <criterion/criterion.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/cuda/kernels_cuda.h"
#include "kernels/kernels.h"
#include "tests/gpu/gpu_util.h"

/* The shapes are those the ViT runs (vit-tiny: batch 64, T = 17 tokens, hidden 128, 10 classes;
 * vit-workshop: hidden 3840, batch up to 128) and odd small ones. Overwritten outputs are poisoned
 * with NaN first (an element a kernel forgets fails); "+=" outputs start from the same random
 * non-zero values on both sides (a kernel that overwrites, or adds twice, fails). fp32 results
 * agree within 1e-5 relative L2 (invariant 6), copies and single adds bit for bit, counts exactly.
 */

#define REL 1e-5
#define LN_EPS 1e-6f /* the ViT's (models/vit.c) */

static const Kernels *CPU = &kernels_cpu;
static const Kernels *GPU = &kernels_cuda;

/* Every test runs on the GPU bound to its thread, or is skipped where there is none. */
TestSuite(cuda_vit_ops, .init = gpu_or_skip, .fini = gpu_done);

/* ---- host helpers ---- */

static int32_t *gpu_labels(const int32_t *host, size_t n) {
    int32_t *d = gpu_alloc((n ? n : 1) * sizeof *d);
    if (n) gpu_put(d, host, n * sizeof *d);
    return d;
}

/* labels uniform in [0, classes) */
static int32_t *host_labels(size_t n, size_t classes, unsigned seed) {
    float *u = host_random(n, 0.0f, 1.0f, seed);
    int32_t *l = malloc((n ? n : 1) * sizeof *l);
    cr_assert_not_null(l);
    for (size_t i = 0; i < n; i++) {
        size_t y = (size_t)(u[i] * (float)classes);
        l[i] = (int32_t)(y < classes ? y : classes - 1);
    }
    free(u);
    return l;
}

/* ---- LayerNorm ---- */

typedef struct {
    size_t M, C;
} RowShape;

/* vit-tiny's blocks (64 x 17 tokens, hidden 128) and head (64 rows); vit-workshop's at batch
 * 128 and its head; then odd ones: one column, a warp's worth and one past the warp-per-row
 * limit (1024), rows that do not fill a block, one row. */
static const RowShape LN_SHAPES[] = {
    {64 * 17, 128}, {64, 128},   {128 * 17, 3840}, {128, 3840}, {7, 33},   {5, 1},
    {9, 1024},      {100, 1025}, {3, 4097},        {1, 3},      {130, 17}, {2176, 200},
};
#define N_LN_SHAPES (sizeof LN_SHAPES / sizeof LN_SHAPES[0])

/* LayerNorm's host side: the input (a mean away from zero, 0.5, and a spread of about 1.4),
 * weight and bias from the seeds given, and the CPU forward's output, mean and rstd. */
typedef struct LayerNormCase {
    float *in, *w, *b, *out, *mean, *rstd;
} LayerNormCase;

static void layernorm_case(LayerNormCase *c, size_t M, size_t C, unsigned seed_in, unsigned seed_w,
                           unsigned seed_b) {
    c->in = host_random(M * C, -2.0f, 3.0f, seed_in);
    c->w = host_random(C, 0.5f, 1.5f, seed_w);
    c->b = host_random(C, -0.5f, 0.5f, seed_b);
    c->out = host_floats(M * C), c->mean = host_floats(M), c->rstd = host_floats(M);
    CPU->layernorm_forward(DTYPE_FP32, c->out, c->mean, c->rstd, c->in, c->w, c->b, M, C, LN_EPS);
}

static void layernorm_case_free(LayerNormCase *c) {
    free(c->in), free(c->w), free(c->b), free(c->out), free(c->mean), free(c->rstd);
}

Test(cuda_vit_ops, layernorm_forward) {
    for (size_t s = 0; s < N_LN_SHAPES; s++) {
        const size_t M = LN_SHAPES[s].M, C = LN_SHAPES[s].C;
        const unsigned seed = 100 + 10 * (unsigned)s;
        LayerNormCase x;
        layernorm_case(&x, M, C, seed, seed + 1, seed + 2);

        float *d_in = gpu_floats(x.in, M * C), *d_w = gpu_floats(x.w, C), *d_b = gpu_floats(x.b, C);
        float *d_out = gpu_poisoned_floats(M * C), *d_mean = gpu_poisoned_floats(M),
              *d_rstd = gpu_poisoned_floats(M);
        GPU->layernorm_forward(DTYPE_FP32, d_out, d_mean, d_rstd, d_in, d_w, d_b, M, C, LN_EPS);
        gpu_check();
        gpu_expect_close_dev(d_out, x.out, M * C, REL,
                             fmt_text("layernorm out (M %zu, C %zu)", M, C));
        gpu_expect_close_dev(d_mean, x.mean, M, REL,
                             fmt_text("layernorm mean (M %zu, C %zu)", M, C));
        gpu_expect_close_dev(d_rstd, x.rstd, M, REL,
                             fmt_text("layernorm rstd (M %zu, C %zu)", M, C));

        gpu_free(d_in), gpu_free(d_w), gpu_free(d_b);
        gpu_free(d_out), gpu_free(d_mean), gpu_free(d_rstd);
        layernorm_case_free(&x);
    }
}

/* The statistics are the CPU forward's, as in training. */
Test(cuda_vit_ops, layernorm_backward_accumulates) {
    for (size_t s = 0; s < N_LN_SHAPES; s++) {
        const size_t M = LN_SHAPES[s].M, C = LN_SHAPES[s].C;
        const unsigned seed = 300 + 10 * (unsigned)s;
        LayerNormCase x;
        layernorm_case(&x, M, C, seed, seed + 1, seed + 2);
        float *dout = host_random(M * C, -1.0f, 1.0f, seed + 3);
        /* the "+=" outputs start non-zero, the same on both sides */
        float *din0 = host_random(M * C, -1.0f, 1.0f, seed + 4);
        float *dw0 = host_random(C, -1.0f, 1.0f, seed + 5);
        float *db0 = host_random(C, -1.0f, 1.0f, seed + 6);
        float *din = host_copy(din0, M * C), *dw = host_copy(dw0, C), *db = host_copy(db0, C);
        CPU->layernorm_backward(DTYPE_FP32, din, dw, db, dout, x.in, x.mean, x.rstd, x.w, M, C);

        float *d_in = gpu_floats(x.in, M * C), *d_w = gpu_floats(x.w, C);
        float *d_dout = gpu_floats(dout, M * C), *d_mean = gpu_floats(x.mean, M),
              *d_rstd = gpu_floats(x.rstd, M);
        float *d_din = gpu_floats(din0, M * C), *d_dw = gpu_floats(dw0, C),
              *d_db = gpu_floats(db0, C);
        GPU->layernorm_backward(DTYPE_FP32, d_din, d_dw, d_db, d_dout, d_in, d_mean, d_rstd, d_w, M,
                                C);
        gpu_check();
        gpu_expect_close_dev(d_din, din, M * C, REL,
                             fmt_text("layernorm din (M %zu, C %zu)", M, C));
        gpu_expect_close_dev(d_dw, dw, C, REL, fmt_text("layernorm dw (M %zu, C %zu)", M, C));
        gpu_expect_close_dev(d_db, db, C, REL, fmt_text("layernorm db (M %zu, C %zu)", M, C));

        gpu_free(d_in), gpu_free(d_w), gpu_free(d_dout), gpu_free(d_mean), gpu_free(d_rstd);
        gpu_free(d_din), gpu_free(d_dw), gpu_free(d_db);
        layernorm_case_free(&x);
        free(dout), free(din0), free(dw0), free(db0), free(din), free(dw), free(db);
    }
}

/* dw and db sum over rows in chunks (through the context's scratch at these shapes): the same
 * inputs give the same bits on a second run. */
Test(cuda_vit_ops, layernorm_backward_is_deterministic) {
    const RowShape shapes[] = {{64 * 17, 128}, {128 * 17, 3840}};
    for (size_t s = 0; s < 2; s++) {
        const size_t M = shapes[s].M, C = shapes[s].C;
        LayerNormCase x;
        layernorm_case(&x, M, C, 700 + (unsigned)s, 710 + (unsigned)s, 720 + (unsigned)s);
        float *dout = host_random(M * C, -1.0f, 1.0f, 730 + (unsigned)s);
        float *zero = host_zeros(M * C);
        float *d_in = gpu_floats(x.in, M * C), *d_w = gpu_floats(x.w, C);
        float *d_dout = gpu_floats(dout, M * C), *d_mean = gpu_floats(x.mean, M),
              *d_rstd = gpu_floats(x.rstd, M);
        float *d_din = gpu_floats(zero, M * C), *d_dw = gpu_floats(zero, C),
              *d_db = gpu_floats(zero, C);
        float *first[3] = {NULL, NULL, NULL};
        for (int run = 0; run < 2; run++) {
            gpu_put(d_din, zero, M * C * sizeof(float));
            gpu_put(d_dw, zero, C * sizeof(float));
            gpu_put(d_db, zero, C * sizeof(float));
            GPU->layernorm_backward(DTYPE_FP32, d_din, d_dw, d_db, d_dout, d_in, d_mean, d_rstd,
                                    d_w, M, C);
            gpu_check();
            if (run == 0) {
                first[0] = gpu_fetch(d_din, M * C);
                first[1] = gpu_fetch(d_dw, C);
                first[2] = gpu_fetch(d_db, C);
            } else {
                gpu_expect_same_dev(d_din, first[0], M * C, "layernorm din, second run");
                gpu_expect_same_dev(d_dw, first[1], C, "layernorm dw, second run");
                gpu_expect_same_dev(d_db, first[2], C, "layernorm db, second run");
            }
        }
        for (int i = 0; i < 3; i++) free(first[i]);
        gpu_free(d_in), gpu_free(d_w), gpu_free(d_dout), gpu_free(d_mean), gpu_free(d_rstd);
        gpu_free(d_din), gpu_free(d_dw), gpu_free(d_db);
        layernorm_case_free(&x);
        free(dout), free(zero);
    }
}

/* ---- patches ---- */

Test(cuda_vit_ops, patchify) {
    /* vit-tiny's 28 x 28 images in 7 x 7 patches at batch 64 and 128, and other patch sizes
     * that divide 28 (one patch, one pixel), and a small odd image */
    const size_t shapes[][3] = {{64, 28, 7}, {128, 28, 7}, {3, 28, 4}, {2, 28, 14},
                                {5, 28, 28}, {2, 28, 1},   {3, 15, 5}, {1, 6, 3}};
    for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; s++) {
        const size_t B = shapes[s][0], S = shapes[s][1], P = shapes[s][2];
        const size_t n = B * S * S; /* S % P == 0: as many patch elements as pixels */
        float *images = host_random(n, -1.0f, 2.0f, 900 + (unsigned)s);
        float *patches = host_floats(n);
        CPU->patchify(DTYPE_FP32, patches, images, B, S, P);
        float *d_images = gpu_floats(images, n), *d_patches = gpu_poisoned_floats(n);
        GPU->patchify(DTYPE_FP32, d_patches, d_images, B, S, P);
        gpu_check();
        gpu_expect_same_dev(d_patches, patches, n,
                            fmt_text("patchify (B %zu, S %zu, P %zu)", B, S, P));
        gpu_free(d_images), gpu_free(d_patches);
        free(images), free(patches);
    }
}

/* ---- tokens ---- */

typedef struct {
    size_t B, T, C;
} TokenShape;

/* vit-tiny at batch 64, vit-workshop at batch 128, 4 x 4 patches (T = 50), and odd ones,
 * including a class token alone (T = 1) */
static const TokenShape TOKEN_SHAPES[] = {{64, 17, 128}, {128, 17, 3840}, {16, 50, 128},
                                          {3, 5, 7},     {1, 2, 1},       {5, 1, 33}};
#define N_TOKEN_SHAPES (sizeof TOKEN_SHAPES / sizeof TOKEN_SHAPES[0])

Test(cuda_vit_ops, embed_forward) {
    for (size_t s = 0; s < N_TOKEN_SHAPES; s++) {
        const size_t B = TOKEN_SHAPES[s].B, T = TOKEN_SHAPES[s].T, C = TOKEN_SHAPES[s].C;
        const unsigned seed = 1100 + 10 * (unsigned)s;
        float *patch_out = host_random(B * (T - 1) * C, -1.0f, 1.0f, seed);
        float *cls = host_random(C, -1.0f, 1.0f, seed + 1);
        float *pos = host_random(T * C, -1.0f, 1.0f, seed + 2);
        float *x = host_floats(B * T * C);
        CPU->embed_forward(DTYPE_FP32, x, patch_out, cls, pos, B, T, C);
        float *d_patch_out = gpu_floats(patch_out, B * (T - 1) * C);
        float *d_cls = gpu_floats(cls, C), *d_pos = gpu_floats(pos, T * C);
        float *d_x = gpu_poisoned_floats(B * T * C);
        GPU->embed_forward(DTYPE_FP32, d_x, d_patch_out, d_cls, d_pos, B, T, C);
        gpu_check();
        gpu_expect_same_dev(d_x, x, B * T * C, fmt_text("embed x (B %zu, T %zu, C %zu)", B, T, C));
        gpu_free(d_patch_out), gpu_free(d_cls), gpu_free(d_pos), gpu_free(d_x);
        free(patch_out), free(cls), free(pos), free(x);
    }
}

Test(cuda_vit_ops, embed_backward) {
    for (size_t s = 0; s < N_TOKEN_SHAPES; s++) {
        const size_t B = TOKEN_SHAPES[s].B, T = TOKEN_SHAPES[s].T, C = TOKEN_SHAPES[s].C;
        const unsigned seed = 1300 + 10 * (unsigned)s;
        float *dx = host_random(B * T * C, -1.0f, 1.0f, seed);
        float *dcls0 = host_random(C, -1.0f, 1.0f, seed + 1);
        float *dpos0 = host_random(T * C, -1.0f, 1.0f, seed + 2);
        float *dcls = host_copy(dcls0, C), *dpos = host_copy(dpos0, T * C);
        float *dpatch = host_floats(B * (T - 1) * C);
        CPU->embed_backward(DTYPE_FP32, dcls, dpos, dpatch, dx, B, T, C);
        float *d_dx = gpu_floats(dx, B * T * C);
        float *d_dcls = gpu_floats(dcls0, C), *d_dpos = gpu_floats(dpos0, T * C);
        float *d_dpatch = gpu_poisoned_floats(B * (T - 1) * C);
        GPU->embed_backward(DTYPE_FP32, d_dcls, d_dpos, d_dpatch, d_dx, B, T, C);
        gpu_check();
        gpu_expect_close_dev(d_dcls, dcls, C, REL,
                             fmt_text("embed dcls (B %zu, T %zu, C %zu)", B, T, C));
        gpu_expect_close_dev(d_dpos, dpos, T * C, REL,
                             fmt_text("embed dpos (B %zu, T %zu, C %zu)", B, T, C));
        gpu_expect_same_dev(d_dpatch, dpatch, B * (T - 1) * C,
                            fmt_text("embed dpatch_out (B %zu, T %zu, C %zu)", B, T, C));
        gpu_free(d_dx), gpu_free(d_dcls), gpu_free(d_dpos), gpu_free(d_dpatch);
        free(dx), free(dcls0), free(dpos0), free(dcls), free(dpos), free(dpatch);
    }
}

/* ---- the class token ---- */

Test(cuda_vit_ops, class_token_select) {
    for (size_t s = 0; s < N_TOKEN_SHAPES; s++) {
        const size_t B = TOKEN_SHAPES[s].B, T = TOKEN_SHAPES[s].T, C = TOKEN_SHAPES[s].C;
        float *x = host_random(B * T * C, -1.0f, 1.0f, 1500 + (unsigned)s);
        float *out = host_floats(B * C);
        CPU->class_token_select(DTYPE_FP32, out, x, B, T, C);
        float *d_x = gpu_floats(x, B * T * C), *d_out = gpu_poisoned_floats(B * C);
        GPU->class_token_select(DTYPE_FP32, d_out, d_x, B, T, C);
        gpu_check();
        gpu_expect_same_dev(d_out, out, B * C,
                            fmt_text("class token (B %zu, T %zu, C %zu)", B, T, C));
        gpu_free(d_x), gpu_free(d_out);
        free(x), free(out);
    }
}

/* dx starts random everywhere: row 0 of each sample must come out as start + dout, every
 * other row exactly as it started. */
Test(cuda_vit_ops, class_token_select_backward) {
    for (size_t s = 0; s < N_TOKEN_SHAPES; s++) {
        const size_t B = TOKEN_SHAPES[s].B, T = TOKEN_SHAPES[s].T, C = TOKEN_SHAPES[s].C;
        float *dx0 = host_random(B * T * C, -1.0f, 1.0f, 1700 + (unsigned)s);
        float *dout = host_random(B * C, -1.0f, 1.0f, 1750 + (unsigned)s);
        float *dx = host_copy(dx0, B * T * C);
        CPU->class_token_select_backward(DTYPE_FP32, dx, dout, B, T, C);
        float *d_dx = gpu_floats(dx0, B * T * C), *d_dout = gpu_floats(dout, B * C);
        GPU->class_token_select_backward(DTYPE_FP32, d_dx, d_dout, B, T, C);
        gpu_check();
        gpu_expect_same_dev(d_dx, dx, B * T * C,
                            fmt_text("class token dx (B %zu, T %zu, C %zu)", B, T, C));
        gpu_free(d_dx), gpu_free(d_dout);
        free(dx0), free(dout), free(dx);
    }
}

/* ---- loss ---- */

typedef struct {
    size_t B, classes;
    float grad_scale;
} LossShape;

/* FashionMNIST's 10 classes at the ViT's batches (and a loss scale), one row, one class, a
 * row wider than a warp, many classes, and more rows than the kernel's grid holds at once */
static const LossShape LOSS_SHAPES[] = {{64, 10, 1.0f},  {128, 10, 0.5f}, {1, 10, 1024.0f},
                                        {7, 1, 1.0f},    {37, 33, 1.0f},  {5, 1000, 2.0f},
                                        {8195, 10, 1.0f}};
#define N_LOSS_SHAPES (sizeof LOSS_SHAPES / sizeof LOSS_SHAPES[0])

/* Relative to the loss, or to 1e-3 where the loss is about 0 (one class: exactly 0). */
static void expect_loss_close(float got, float want, const char *what) {
    cr_expect(isfinite(got) &&
                  fabs((double)got - (double)want) <= REL * fmax(fabs((double)want), 1e-3),
              "%s: loss %.9g, want %.9g", what, (double)got, (double)want);
}

Test(cuda_vit_ops, cross_entropy) {
    for (size_t s = 0; s < N_LOSS_SHAPES; s++) {
        const size_t B = LOSS_SHAPES[s].B, K = LOSS_SHAPES[s].classes;
        const float scale = LOSS_SHAPES[s].grad_scale;
        const unsigned seed = 1900 + 10 * (unsigned)s;
        float *logits = host_random(B * K, -5.0f, 5.0f, seed);
        int32_t *labels = host_labels(B, K, seed + 1);
        float *dlogits = host_floats(B * K);
        const float want = CPU->cross_entropy(DTYPE_FP32, dlogits, logits, labels, B, K, scale);
        cr_assert(isfinite(want) && want >= 0.0f, "a cross entropy is never negative");

        float *d_logits = gpu_floats(logits, B * K), *d_dlogits = gpu_poisoned_floats(B * K);
        int32_t *d_labels = gpu_labels(labels, B);
        char what[80];
        snprintf(what, sizeof what, "cross entropy (B %zu, classes %zu, scale %g)", B, K,
                 (double)scale);
        const float got =
            GPU->cross_entropy(DTYPE_FP32, d_dlogits, d_logits, d_labels, B, K, scale);
        gpu_check();
        expect_loss_close(got, want, what);
        gpu_expect_close_dev(d_dlogits, dlogits, B * K, REL, what);

        /* the loss alone (dlogits NULL) is the same number, and the same bits run to run */
        const float again = GPU->cross_entropy(DTYPE_FP32, NULL, d_logits, d_labels, B, K, scale);
        gpu_check();
        cr_expect(memcmp(&again, &got, sizeof got) == 0, "%s without dlogits: %.9g, then %.9g",
                  what, (double)got, (double)again);

        gpu_free(d_logits), gpu_free(d_dlogits), gpu_free(d_labels);
        free(logits), free(labels), free(dlogits);
    }
}

/* A label outside [0, classes) makes the loss NaN (so the caller's finiteness check sees it)
 * and that row's dlogits the softmax alone, as on the CPU; the other rows are unaffected. */
Test(cuda_vit_ops, cross_entropy_bad_label) {
    enum { B = 6, K = 10 };
    float *logits = host_random(B * K, -3.0f, 3.0f, 2100);
    int32_t labels[B] = {1, -1, 9, 10, 0, 5};
    float dlogits[B * K];
    const float want = CPU->cross_entropy(DTYPE_FP32, dlogits, logits, labels, B, K, 1.0f);
    cr_assert(isnan(want));
    float *d_logits = gpu_floats(logits, B * K), *d_dlogits = gpu_poisoned_floats(B * K);
    int32_t *d_labels = gpu_labels(labels, B);
    const float got = GPU->cross_entropy(DTYPE_FP32, d_dlogits, d_logits, d_labels, B, K, 1.0f);
    gpu_check();
    cr_expect(isnan(got), "loss with a bad label: %g, want NaN", (double)got);
    gpu_expect_close_dev(d_dlogits, dlogits, B * K, REL, "cross entropy dlogits with bad labels");
    gpu_free(d_logits), gpu_free(d_dlogits), gpu_free(d_labels);
    free(logits);
}

/* --loss eager's three ops against the CPU's on the loss's shapes: log-softmax, the NLL and its
 * dense gradient, log-softmax's backward; their end is the fused pass's gradient. */
Test(cuda_vit_ops, the_eager_loss) {
    for (size_t s = 0; s < N_LOSS_SHAPES; s++) {
        const size_t B = LOSS_SHAPES[s].B, K = LOSS_SHAPES[s].classes, n = B * K;
        const float scale = LOSS_SHAPES[s].grad_scale;
        const unsigned seed = 2300 + 10 * (unsigned)s;
        float *x = host_random(n, -5.0f, 5.0f, seed);
        int32_t *labels = host_labels(B, K, seed + 1);
        float *logp = host_floats(n), *dlogp = host_floats(n), *dx = host_floats(n);
        CPU->log_softmax(logp, x, B, K);
        const float want = CPU->nll_loss(dlogp, logp, labels, B, K, scale);
        CPU->log_softmax_backward(dx, dlogp, logp, B, K);

        float *d_x = gpu_floats(x, n), *d_logp = gpu_poisoned_floats(n);
        float *d_dlogp = gpu_poisoned_floats(n), *d_dx = gpu_poisoned_floats(n);
        int32_t *d_labels = gpu_labels(labels, B);
        char what[80];
        snprintf(what, sizeof what, "the eager loss (B %zu, classes %zu, scale %g)", B, K,
                 (double)scale);
        GPU->log_softmax(d_logp, d_x, B, K);
        const float got = GPU->nll_loss(d_dlogp, d_logp, d_labels, B, K, scale);
        GPU->log_softmax_backward(d_dx, d_dlogp, d_logp, B, K);
        gpu_check();
        gpu_expect_close_dev(d_logp, logp, n, REL, what);
        expect_loss_close(got, want, what);
        gpu_expect_close_dev(d_dlogp, dlogp, n, REL, what);
        gpu_expect_close_dev(d_dx, dx, n, REL, what);

        gpu_free(d_x), gpu_free(d_logp), gpu_free(d_dlogp), gpu_free(d_dx), gpu_free(d_labels);
        free(x), free(labels), free(logp), free(dlogp), free(dx);
    }
}

/* ---- accuracy ---- */

/* The count with the last maximum winning ties: what a wrong kernel would give. */
static size_t count_last_max(const float *logits, const int32_t *labels, size_t B, size_t K) {
    size_t n = 0;
    for (size_t i = 0; i < B; i++) {
        size_t best = 0;
        for (size_t j = 1; j < K; j++)
            if (logits[i * K + j] >= logits[i * K + best]) best = j;
        n += labels[i] >= 0 && (size_t)labels[i] == best;
    }
    return n;
}

/* Random logits with planted ties: in every third row the maximum appears twice (at a < b),
 * the label on a (correct: the first maximum wins) or on b (wrong); some rows are all equal,
 * all -inf, or hold NaN (z[0] NaN: index 0 is the CPU's answer; NaN elsewhere: passed over);
 * some labels are negative (never correct); a sixth of the labels are their row's argmax, so
 * the count is far from 0. */
static void plant_rows(float *z, int32_t *labels, size_t B, size_t K, unsigned seed) {
    gpu_random(z, B * K, -1.0f, 1.0f, seed);
    float *u = host_random(B * 3, 0.0f, 1.0f, seed + 1);
    for (size_t i = 0; i < B; i++) {
        float *row = z + i * K;
        const size_t a = (size_t)(u[3 * i] * (float)K) % K;
        const size_t b =
            K > 1 ? (a + 1 + (size_t)(u[3 * i + 1] * (float)(K - 1)) % (K - 1)) % K : a;
        const size_t lo = a < b ? a : b, hi = a < b ? b : a;
        size_t best = 0;
        for (size_t j = 1; j < K; j++)
            if (row[j] > row[best]) best = j;
        labels[i] = (int32_t)((size_t)(u[3 * i + 2] * (float)K) % K);
        switch (i % 12) {
        case 0:
        case 3:
        case 6: /* a tie for the maximum, labelled on the first */
            row[lo] = row[hi] = 2.0f;
            labels[i] = (int32_t)lo;
            break;
        case 9: /* a tie, labelled on the second */
            row[lo] = row[hi] = 2.0f;
            labels[i] = (int32_t)hi;
            break;
        case 1:
        case 4: /* the argmax */
            labels[i] = (int32_t)best;
            break;
        case 2: /* all equal */
            for (size_t j = 0; j < K; j++) row[j] = 0.25f;
            labels[i] = (int32_t)(i % 24 == 2 ? 0 : K - 1);
            break;
        case 5: /* all -inf */
            for (size_t j = 0; j < K; j++) row[j] = -INFINITY;
            labels[i] = (int32_t)(i % 24 == 5 ? 0 : K - 1);
            break;
        case 7: /* NaN first */
            row[0] = NAN;
            labels[i] = 0;
            break;
        case 8:          /* NaN elsewhere, label on the argmax of the rest */
            if (K > 1) { /* hi >= 1 */
                row[hi] = NAN;
                best = 0;
                for (size_t j = 0; j < K; j++)
                    if (j != hi && row[j] > row[best]) best = j;
            }
            labels[i] = (int32_t)best;
            break;
        case 10: /* a negative label */
            labels[i] = -1 - (int32_t)(i % 3);
            break;
        default:
            break;
        }
    }
    free(u);
}

Test(cuda_vit_ops, count_correct_first_max_wins) {
    const size_t shapes[][2] = {{64, 10}, {128, 10},  {1, 10},   {24, 1},
                                {37, 33}, {13, 1000}, {8195, 10}};
    for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; s++) {
        const size_t B = shapes[s][0], K = shapes[s][1];
        float *logits = host_floats(B * K);
        int32_t *labels = malloc(B * sizeof *labels);
        cr_assert_not_null(labels);
        plant_rows(logits, labels, B, K, 2300 + 10 * (unsigned)s);
        const size_t want = CPU->count_correct(DTYPE_FP32, logits, labels, B, K);
        if (B >= 12 && K > 1) /* the ties matter: last-max-wins would count differently */
            cr_assert_neq(want, count_last_max(logits, labels, B, K),
                          "test setup: ties planted in %zu x %zu do not matter", B, K);
        float *d_logits = gpu_floats(logits, B * K);
        int32_t *d_labels = gpu_labels(labels, B);
        const size_t got = GPU->count_correct(DTYPE_FP32, d_logits, d_labels, B, K);
        gpu_check();
        cr_expect_eq(got, want, "count_correct (B %zu, classes %zu): %zu, want %zu", B, K, got,
                     want);
        gpu_free(d_logits), gpu_free(d_labels);
        free(logits), free(labels);
    }
}

/* Values by hand: ties, a NaN first, -inf rows, a negative label. */
Test(cuda_vit_ops, count_correct_by_hand) {
    enum { B = 6, K = 4 };
    const float z[B * K] = {
        1,         3,         3,         0,         /* tie at 1 and 2: 1 wins */
        1,         3,         3,         0,         /* labelled 2: wrong */
        NAN,       5,         6,         7,         /* NaN first: 0 */
        -INFINITY, -INFINITY, -INFINITY, -INFINITY, /* all -inf: 0 */
        0,         1,         NAN,       2,         /* NaN passed over: 3 */
        9,         1,         1,         1,         /* label -1: never */
    };
    const int32_t labels[B] = {1, 2, 0, 0, 3, -1};
    cr_assert_eq(CPU->count_correct(DTYPE_FP32, z, labels, B, K), 4);
    float *d_z = gpu_floats(z, B * K);
    int32_t *d_labels = gpu_labels(labels, B);
    const size_t got = GPU->count_correct(DTYPE_FP32, d_z, d_labels, B, K);
    gpu_check();
    cr_expect_eq(got, 4, "count_correct by hand: %zu, want 4", got);
    gpu_free(d_z), gpu_free(d_labels);
}
