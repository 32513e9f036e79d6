/* The GPU's linear (cuBLASLt) and attention kernels against the CPU's (kernels_cpu) on fresh random
 * inputs: vit-tiny's and vit-workshop's real shapes and odd small ones. */
#include <criterion/criterion.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/cuda/kernels_cuda.h"
#include "kernels/kernels.h"
#include "tests/gpu/gpu_util.h"

/* Outputs that kernels.h says are overwritten start as NaN (gpu_poison), so a kernel that skips one
 * fails; "+=" outputs (dw, db) start from random non-zero values, so one that overwrites them
 * fails. fp32 within 1e-5 relative L2 with TF32 off, 1e-2 with TF32 on. Without a GPU every test is
 * skipped with the reason. */

static const Kernels *CPU = &kernels_cpu;
static const Kernels *GPU = &kernels_cuda;

/* Every test runs on the GPU bound to its thread, or is skipped where there is none. */
TestSuite(cuda_linear, .init = gpu_or_skip, .fini = gpu_done);
TestSuite(cuda_attention, .init = gpu_or_skip, .fini = gpu_done);

#define FP32_TOL 1e-5
#define TF32_TOL 1e-2

/* vit-tiny (models/vit.c): hidden 128, 2 heads, mlp 128; 28x28 images in 7x7 patches: T = 17 */
#define TINY_H 128
#define TINY_MLP 128
#define TINY_HEADS 2
/* vit-workshop: hidden 3840, 8 heads, mlp 768 */
#define WS_H 3840
#define WS_MLP 768
#define WS_HEADS 8
#define TOKENS 17
#define PATCHES 16
#define PATCH_PIXELS 49
#define CLASSES 10

/* ---------------- linear ---------------- */

enum {
    LIN_BIAS = 1, /* forward with b (else b == NULL) */
    LIN_DIN = 2,  /* backward with din (else din == NULL) */
    LIN_DB = 4,   /* backward with db (else db == NULL) */
    LIN_TF32 = 8, /* kernels_cuda_allow_tf32(1) and the looser bound */
    LIN_ALL = LIN_BIAS | LIN_DIN | LIN_DB,
};

/* Forward and backward of one Linear on both backends. `offset` floats are skipped at the
 * start of every device buffer, so the pointers are only as aligned as the offset makes them
 * (the engine hands out pointers into packed buffers). */
static void check_linear_at(size_t M, size_t K, size_t N, int flags, unsigned seed, size_t offset) {
    const int bias = flags & LIN_BIAS, want_din = flags & LIN_DIN, want_db = flags & LIN_DB;
    const double tol = (flags & LIN_TF32) ? TF32_TOL : FP32_TOL;
    kernels_cuda_allow_tf32((flags & LIN_TF32) != 0);

    float *in = host_random(M * K, -1.0f, 1.0f, seed);
    float *w = host_random(N * K, -1.0f, 1.0f, seed + 1);
    float *b = bias ? host_random(N, -1.0f, 1.0f, seed + 2) : NULL;
    float *dout = host_random(M * N, -1.0f, 1.0f, seed + 3);
    /* the "+=" gradients start well away from zero: overwriting them cannot pass */
    float *dw0 = host_random(N * K, -4.0f, 4.0f, seed + 4);
    float *db0 = host_random(N, -4.0f, 4.0f, seed + 5);

    float *out_c = host_floats(M * N), *din_c = host_floats(M * K);
    float *dw_c = host_copy(dw0, N * K), *db_c = host_copy(db0, N);
    CPU->linear_forward(DTYPE_FP32, out_c, in, w, b, M, K, N);
    CPU->linear_backward(DTYPE_FP32, want_din ? din_c : NULL, dw_c, want_db ? db_c : NULL, dout, in,
                         w, M, K, N);

    /* device buffers: each starts `offset` floats into its allocation */
    float *a_in = gpu_alloc((offset + M * K) * sizeof(float));
    float *a_w = gpu_alloc((offset + N * K) * sizeof(float));
    float *a_b = gpu_alloc((offset + N) * sizeof(float));
    float *a_dout = gpu_alloc((offset + M * N) * sizeof(float));
    float *a_out = gpu_alloc((offset + M * N) * sizeof(float));
    float *a_din = gpu_alloc((offset + M * K) * sizeof(float));
    float *a_dw = gpu_alloc((offset + N * K) * sizeof(float));
    float *a_db = gpu_alloc((offset + N) * sizeof(float));
    float *d_in = a_in + offset, *d_w = a_w + offset, *d_b = a_b + offset;
    float *d_dout = a_dout + offset, *d_out = a_out + offset, *d_din = a_din + offset;
    float *d_dw = a_dw + offset, *d_db = a_db + offset;
    gpu_put(d_in, in, M * K * sizeof(float));
    gpu_put(d_w, w, N * K * sizeof(float));
    if (b) gpu_put(d_b, b, N * sizeof(float));
    gpu_put(d_dout, dout, M * N * sizeof(float));
    gpu_put(d_dw, dw0, N * K * sizeof(float));
    gpu_put(d_db, db0, N * sizeof(float));
    gpu_poison(d_out, M * N * sizeof(float));
    gpu_poison(d_din, M * K * sizeof(float));

    GPU->linear_forward(DTYPE_FP32, d_out, d_in, d_w, bias ? d_b : NULL, M, K, N);
    GPU->linear_backward(DTYPE_FP32, want_din ? d_din : NULL, d_dw, want_db ? d_db : NULL, d_dout,
                         d_in, d_w, M, K, N);
    gpu_check();

    float *out_g = gpu_fetch(d_out, M * N), *dw_g = gpu_fetch(d_dw, N * K),
          *db_g = gpu_fetch(d_db, N);
    gpu_expect_close(out_g, out_c, M * N, tol, "linear out");
    gpu_expect_close(dw_g, dw_c, N * K, tol, "linear dw");
    if (want_db)
        gpu_expect_close(db_g, db_c, N, tol, "linear db");
    else /* db == NULL: the buffer we did not pass is as it was */
        cr_expect(memcmp(db_g, db0, N * sizeof(float)) == 0, "linear db changed without db");
    if (want_din) {
        float *din_g = gpu_fetch(d_din, M * K);
        gpu_expect_close(din_g, din_c, M * K, tol, "linear din");
        free(din_g);
    }

    kernels_cuda_allow_tf32(0);
    float *dev[] = {a_in, a_w, a_b, a_dout, a_out, a_din, a_dw, a_db};
    for (size_t i = 0; i < sizeof dev / sizeof *dev; i++) gpu_free(dev[i]);
    float *host[] = {in, w, b, dout, dw0, db0, out_c, din_c, dw_c, db_c, out_g, dw_g, db_g};
    for (size_t i = 0; i < sizeof host / sizeof *host; i++) free(host[i]);
}

static void check_linear(size_t M, size_t K, size_t N, int flags, unsigned seed) {
    check_linear_at(M, K, N, flags, seed, 0);
}

Test(cuda_linear, vit_tiny_shapes) {
    const size_t M = 64 * TOKENS;
    check_linear(M, TINY_H, 3 * TINY_H, LIN_ALL, 10); /* attention in_proj (qkv) */
    check_linear(M, TINY_H, TINY_H, LIN_ALL, 20);     /* attention out_proj */
    check_linear(M, TINY_H, TINY_MLP, LIN_ALL, 30);   /* mlp.0 */
    check_linear(M, TINY_MLP, TINY_H, LIN_ALL, 40);   /* mlp.3 */
    check_linear(64, TINY_H, CLASSES, LIN_ALL, 50);   /* the head */
    check_linear(64 * PATCHES, PATCH_PIXELS, TINY_H,  /* patch embedding: no din */
                 LIN_BIAS | LIN_DB, 60);
}

Test(cuda_linear, vit_workshop_shapes) {
    const size_t M = 4 * TOKENS;
    check_linear(M, WS_H, WS_H, LIN_ALL, 110);              /* out_proj */
    check_linear(M, WS_H, WS_MLP, LIN_ALL, 120);            /* mlp.0 */
    check_linear(M, WS_MLP, WS_H, LIN_ALL, 130);            /* mlp.3 */
    check_linear(2 * TOKENS, WS_H, 3 * WS_H, LIN_ALL, 140); /* in_proj, 11520 outputs */
    check_linear(4 * PATCHES, PATCH_PIXELS, WS_H, LIN_BIAS | LIN_DB, 150);
}

Test(cuda_linear, odd_small_shapes) {
    check_linear(1, 3, 5, LIN_ALL, 200);
    check_linear(1, 1, 1, LIN_ALL, 210);
    check_linear(7, 1, 3, LIN_ALL, 220);
    check_linear(3, 5, 1, LIN_ALL, 230);
    check_linear(33, 17, 65, LIN_ALL, 240);
    check_linear(1000, 3, 2, LIN_ALL, 250);
}

/* b == NULL, din == NULL, db == NULL, each alone and all together */
Test(cuda_linear, null_paths) {
    const size_t M = 64 * TOKENS;
    check_linear(M, TINY_H, TINY_H, LIN_DIN | LIN_DB, 300);   /* b == NULL */
    check_linear(M, TINY_H, TINY_H, LIN_BIAS | LIN_DB, 310);  /* din == NULL */
    check_linear(M, TINY_H, TINY_H, LIN_BIAS | LIN_DIN, 320); /* db == NULL */
    check_linear(M, TINY_H, TINY_H, 0, 330);
    check_linear(1, 3, 5, 0, 340);
}

/* Pointers 4, 8 and 12 bytes past a 256-byte boundary: cuBLASLt must not pick an algorithm
 * that assumes more alignment than they have. */
Test(cuda_linear, unaligned_pointers) {
    for (size_t offset = 1; offset <= 3; offset++) {
        check_linear_at(64 * TOKENS, TINY_H, 3 * TINY_H, LIN_ALL, 400 + (unsigned)offset, offset);
        check_linear_at(33, 17, 65, LIN_ALL, 410 + (unsigned)offset, offset);
    }
}

Test(cuda_linear, tf32) {
    check_linear(64 * TOKENS, TINY_H, 3 * TINY_H, LIN_ALL | LIN_TF32, 500);
    check_linear(4 * TOKENS, WS_H, WS_MLP, LIN_ALL | LIN_TF32, 510);
    check_linear(1, 3, 5, LIN_ALL | LIN_TF32, 520);
    /* and back to fp32 on the same shapes: plans made for TF32 are not reused */
    check_linear(64 * TOKENS, TINY_H, 3 * TINY_H, LIN_ALL, 530);
    check_linear(4 * TOKENS, WS_H, WS_MLP, LIN_ALL, 540);
}

/* More distinct shapes than the per-thread plan table holds, then the first again. */
Test(cuda_linear, many_shapes) {
    for (size_t n = 1; n <= 80; n++) check_linear(9, 6, n, LIN_ALL, 600 + (unsigned)n);
    check_linear(9, 6, 1, LIN_ALL, 700);
}

/* K == 0: out is the bias (or zero), dw and db get nothing from an empty product but db still
 * sums dout; N == 0: din is zero. */
Test(cuda_linear, empty_dimensions) {
    check_linear(5, 0, 4, LIN_ALL, 800);
    check_linear(5, 0, 4, LIN_DIN | LIN_DB, 810);
    check_linear(5, 3, 0, LIN_ALL, 820);
}

/* Same inputs, same bits: the backward's sums (cuBLASLt's dw, the db reduction) run in a
 * fixed order. */
Test(cuda_linear, deterministic) {
    const size_t M = 64 * TOKENS, K = TINY_H, N = 3 * TINY_H;
    float *in = host_random(M * K, -1.0f, 1.0f, 900), *w = host_random(N * K, -1.0f, 1.0f, 901);
    float *dout = host_random(M * N, -1.0f, 1.0f, 902);
    float *d_in = gpu_floats(in, M * K), *d_w = gpu_floats(w, N * K);
    float *d_dout = gpu_floats(dout, M * N);
    float *d_din = gpu_alloc(M * K * sizeof(float)), *d_dw = gpu_alloc(N * K * sizeof(float));
    float *d_db = gpu_alloc(N * sizeof(float));
    float *first[3] = {NULL, NULL, NULL};
    for (int run = 0; run < 2; run++) {
        gpu_poison(d_din, M * K * sizeof(float));
        gpu_put(d_dw, w, N * K * sizeof(float)); /* any fixed start */
        gpu_put(d_db, dout, N * sizeof(float));
        GPU->linear_backward(DTYPE_FP32, d_din, d_dw, d_db, d_dout, d_in, d_w, M, K, N);
        gpu_check();
        float *got[3] = {gpu_fetch(d_din, M * K), gpu_fetch(d_dw, N * K), gpu_fetch(d_db, N)};
        if (run == 0) {
            memcpy(first, got, sizeof got);
        } else {
            cr_expect(memcmp(got[0], first[0], M * K * sizeof(float)) == 0, "din differs");
            cr_expect(memcmp(got[1], first[1], N * K * sizeof(float)) == 0, "dw differs");
            cr_expect(memcmp(got[2], first[2], N * sizeof(float)) == 0, "db differs");
            for (int i = 0; i < 3; i++) free(got[i]);
        }
    }
    for (int i = 0; i < 3; i++) free(first[i]);
    gpu_free(d_in), gpu_free(d_w), gpu_free(d_dout), gpu_free(d_din), gpu_free(d_dw);
    gpu_free(d_db);
    free(in), free(w), free(dout);
}

/* ---------------- attention ---------------- */

/* Forward (out and probs) and backward (dqkv, from the CPU's probs) of one shape on both
 * backends, then both GPU ops again on fresh poison: the same bits. */
static void check_attention(size_t B, size_t T, size_t C, size_t heads, unsigned seed) {
    const size_t n_qkv = B * T * 3 * C, n_out = B * T * C, n_probs = B * heads * T * T;
    float *qkv = host_random(n_qkv, -2.0f, 2.0f, seed);
    float *dout = host_random(n_out, -1.0f, 1.0f, seed + 1);
    float *out_c = host_floats(n_out), *probs_c = host_floats(n_probs);
    float *dqkv_c = host_floats(n_qkv);
    CPU->attention_forward(DTYPE_FP32, out_c, probs_c, qkv, B, T, C, heads);
    CPU->attention_backward(DTYPE_FP32, dqkv_c, dout, qkv, probs_c, B, T, C, heads);

    float *d_qkv = gpu_floats(qkv, n_qkv), *d_dout = gpu_floats(dout, n_out);
    float *d_probs_c = gpu_floats(probs_c, n_probs);
    float *d_out = gpu_poisoned_floats(n_out), *d_probs = gpu_poisoned_floats(n_probs);
    float *d_dqkv = gpu_poisoned_floats(n_qkv);
    GPU->attention_forward(DTYPE_FP32, d_out, d_probs, d_qkv, B, T, C, heads);
    GPU->attention_backward(DTYPE_FP32, d_dqkv, d_dout, d_qkv, d_probs_c, B, T, C, heads);
    gpu_check();
    float *out_g = gpu_fetch(d_out, n_out), *probs_g = gpu_fetch(d_probs, n_probs);
    float *dqkv_g = gpu_fetch(d_dqkv, n_qkv);
    gpu_expect_close(out_g, out_c, n_out, FP32_TOL, "attention out");
    gpu_expect_close(probs_g, probs_c, n_probs, FP32_TOL, "attention probs");
    gpu_expect_close(dqkv_g, dqkv_c, n_qkv, FP32_TOL, "attention dqkv");

    gpu_poison(d_out, n_out * sizeof(float));
    gpu_poison(d_probs, n_probs * sizeof(float));
    gpu_poison(d_dqkv, n_qkv * sizeof(float));
    GPU->attention_forward(DTYPE_FP32, d_out, d_probs, d_qkv, B, T, C, heads);
    GPU->attention_backward(DTYPE_FP32, d_dqkv, d_dout, d_qkv, d_probs_c, B, T, C, heads);
    gpu_check();
    float *out_2 = gpu_fetch(d_out, n_out), *probs_2 = gpu_fetch(d_probs, n_probs);
    float *dqkv_2 = gpu_fetch(d_dqkv, n_qkv);
    cr_expect(memcmp(out_2, out_g, n_out * sizeof(float)) == 0, "attention out not repeatable");
    cr_expect(memcmp(probs_2, probs_g, n_probs * sizeof(float)) == 0,
              "attention probs not repeatable");
    cr_expect(memcmp(dqkv_2, dqkv_g, n_qkv * sizeof(float)) == 0, "attention dqkv not repeatable");

    float *dev[] = {d_qkv, d_dout, d_probs_c, d_out, d_probs, d_dqkv};
    for (size_t i = 0; i < sizeof dev / sizeof *dev; i++) gpu_free(dev[i]);
    float *host[] = {qkv,     dout,   out_c, probs_c, dqkv_c, out_g,
                     probs_g, dqkv_g, out_2, probs_2, dqkv_2};
    for (size_t i = 0; i < sizeof host / sizeof *host; i++) free(host[i]);
}

Test(cuda_attention, vit_tiny) {
    check_attention(64, TOKENS, TINY_H, TINY_HEADS, 1000); /* D = 64 */
    check_attention(64, TOKENS, 192, 3, 1010);             /* D = 64, three heads */
}

/* D = 480: 65 KiB of shared memory per block, above the 48 KiB default */
Test(cuda_attention, vit_workshop) {
    check_attention(4, TOKENS, WS_H, WS_HEADS, 1100);
}

Test(cuda_attention, odd_small_shapes) {
    check_attention(1, 1, 4, 1, 1200); /* one token: probs are 1 */
    check_attention(3, 1, 12, 3, 1210);
    check_attention(5, 33, 15, 3, 1220); /* D = 5 */
    check_attention(2, 2, 2, 2, 1230);   /* D = 1 */
    check_attention(1, 17, 7, 1, 1240);
}

/* Shapes past what one block can hold in shared memory take the tiled kernels: T = 256 (P
 * alone is 256 KiB), and a wide head with T not a multiple of the 16-row tile and D not a
 * multiple of the 16- and 8-column chunks. */
Test(cuda_attention, tiled_shapes) {
    check_attention(2, KERNELS_MAX_TOKENS, 64, 2, 1300);
    check_attention(1, KERNELS_MAX_TOKENS, 3, 1, 1310);
    check_attention(2, 37, 3000, 2, 1320);
    check_attention(1, 200, 2 * 1201, 2, 1330);
}

/* T above KERNELS_MAX_TOKENS is refused with an error, not run out of bounds. */
Test(cuda_attention, too_many_tokens) {
    const size_t T = KERNELS_MAX_TOKENS + 1, C = 8;
    float *d_qkv = gpu_alloc(T * 3 * C * sizeof(float)), *d_out = gpu_alloc(T * C * sizeof(float));
    float *d_probs = gpu_alloc(T * T * sizeof(float));
    GPU->attention_forward(DTYPE_FP32, d_out, d_probs, d_qkv, 1, T, C, 1);
    Err err = {0};
    cr_expect_neq(kernels_cuda_status(&err), 0, "attention_forward took T = %zu", T);
    cr_expect(strstr(err.msg, "attention_forward") != NULL, "the error names the op: %s", err.msg);
    GPU->attention_backward(DTYPE_FP32, d_qkv, d_out, d_qkv, d_probs, 1, T, C, 1);
    cr_expect_neq(kernels_cuda_status(&err), 0, "attention_backward took T = %zu", T);
    gpu_free(d_qkv), gpu_free(d_out), gpu_free(d_probs);
}
