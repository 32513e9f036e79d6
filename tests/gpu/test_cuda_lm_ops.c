/* The language model's ops on the GPU against kernels_cpu on the same inputs: causal attention
 * (resident and tiled kernels) and its backward through attention_backward, and the token
 * embedding and its scatter-add, bit for bit (each sum in the CPU's order). */
#include <criterion/criterion.h>
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/cuda/kernels_cuda.h"
#include "kernels/kernels.h"
#include "tests/gpu/gpu_util.h"

#define REL 1e-5 /* invariant 6, fp32 */

static const Kernels *CPU = &kernels_cpu;
static const Kernels *GPU = &kernels_cuda;

TestSuite(cuda_lm_ops, .init = gpu_or_skip, .fini = gpu_done);

/* Forward (out and probs, zero above the diagonal) and backward (dqkv from the CPU's causal
 * probs) of one shape on both backends. */
static void check_causal(size_t B, size_t T, size_t C, size_t heads, unsigned seed) {
    const size_t n_qkv = B * T * 3 * C, n_out = B * T * C, n_probs = B * heads * T * T;
    float *qkv = host_random(n_qkv, -2.0f, 2.0f, seed);
    float *dout = host_random(n_out, -1.0f, 1.0f, seed + 1);
    float *out_c = host_floats(n_out), *probs_c = host_floats(n_probs);
    float *dqkv_c = host_floats(n_qkv);
    CPU->causal_attention_forward(DTYPE_FP32, out_c, probs_c, qkv, B, T, C, heads);
    CPU->attention_backward(DTYPE_FP32, dqkv_c, dout, qkv, probs_c, B, T, C, heads);
    float *d_qkv = gpu_floats(qkv, n_qkv), *d_dout = gpu_floats(dout, n_out);
    float *d_probs_c = gpu_floats(probs_c, n_probs);
    float *d_out = gpu_poisoned_floats(n_out), *d_probs = gpu_poisoned_floats(n_probs);
    float *d_dqkv = gpu_poisoned_floats(n_qkv);
    GPU->causal_attention_forward(DTYPE_FP32, d_out, d_probs, d_qkv, B, T, C, heads);
    GPU->attention_backward(DTYPE_FP32, d_dqkv, d_dout, d_qkv, d_probs_c, B, T, C, heads);
    gpu_check();
    const char *shape = fmt_text("B %zu, T %zu, C %zu, heads %zu", B, T, C, heads);
    gpu_expect_close_dev(d_out, out_c, n_out, REL, fmt_text("causal out (%s)", shape));
    gpu_expect_close_dev(d_probs, probs_c, n_probs, REL, fmt_text("causal probs (%s)", shape));
    gpu_expect_close_dev(d_dqkv, dqkv_c, n_qkv, REL, fmt_text("causal dqkv (%s)", shape));
    float *probs_g = gpu_fetch(d_probs, n_probs);
    size_t above = 0;
    for (size_t p = 0; p < B * heads; p++)
        for (size_t t = 0; t < T; t++)
            for (size_t s = t + 1; s < T; s++) above += probs_g[(p * T + t) * T + s] != 0.0f;
    cr_expect_eq(above, 0, "%zu probabilities above the diagonal are not 0 (%s)", above, shape);
    float *dev[] = {d_qkv, d_dout, d_probs_c, d_out, d_probs, d_dqkv};
    for (size_t i = 0; i < sizeof dev / sizeof *dev; i++) gpu_free(dev[i]);
    free_floats((float *[]){qkv, dout, out_c, probs_c, dqkv_c, probs_g}, 6);
}

/* The transformer's default shape (T 64, hidden 128, 4 heads), one token, odd widths, and
 * the tiled kernels: T 256, T not a multiple of the 16-row tile, a head wider than shared
 * memory holds whole. */
Test(cuda_lm_ops, causal_attention) {
    check_causal(16, 64, 128, 4, 100);
    check_causal(3, 1, 12, 3, 110);
    check_causal(5, 33, 15, 3, 120);
    check_causal(2, KERNELS_MAX_TOKENS, 64, 2, 130);
    check_causal(2, 37, 3000, 2, 140);
}

typedef struct {
    size_t B, T, C, V;
} EmbedShape;

/* the default shape at batch 16, a vocabulary of GPT-2's width on few tokens, odd small ones */
static const EmbedShape EMBED_SHAPES[] = {
    {16, 64, 128, 256}, {2, 256, 33, 256}, {3, 5, 7, 5}, {1, 1, 1, 256}, {4, 9, 768, 1000}};

static int32_t *ids_of(size_t n, size_t V, unsigned seed) {
    float *u = host_random(n, 0.0f, 1.0f, seed);
    int32_t *ids = malloc(n * sizeof *ids);
    cr_assert_not_null(ids);
    for (size_t i = 0; i < n; i++) ids[i] = (int32_t)((size_t)(u[i] * (float)V) % V);
    if (n > 2) ids[n - 1] = ids[0]; /* a repeated token: two gradients into one row */
    free(u);
    return ids;
}

Test(cuda_lm_ops, token_embedding) {
    for (size_t s = 0; s < sizeof EMBED_SHAPES / sizeof *EMBED_SHAPES; s++) {
        const size_t B = EMBED_SHAPES[s].B, T = EMBED_SHAPES[s].T, C = EMBED_SHAPES[s].C,
                     V = EMBED_SHAPES[s].V, n = B * T;
        const unsigned seed = 200 + 10 * (unsigned)s;
        int32_t *ids = ids_of(n, V, seed);
        if (s == 2) ids[1] = -1, ids[2] = (int32_t)V; /* out of range: NaN rows, no gradient */
        float *wte = host_random(V * C, -1, 1, seed + 1),
              *wpe = host_random(T * C, -1, 1, seed + 2);
        float *dx = host_random(n * C, -1, 1, seed + 3);
        float *dwte0 = host_random(V * C, -1, 1, seed + 4),
              *dwpe0 = host_random(T * C, -1, 1, seed + 5);
        float *x = host_floats(n * C), *dwte = host_copy(dwte0, V * C),
              *dwpe = host_copy(dwpe0, T * C);
        CPU->token_embed_forward(DTYPE_FP32, x, ids, wte, wpe, B, T, C, V);
        CPU->token_embed_backward(DTYPE_FP32, dwte, dwpe, ids, dx, B, T, C, V);
        int32_t *d_ids = gpu_alloc(n * sizeof *d_ids);
        gpu_put(d_ids, ids, n * sizeof *ids);
        float *d_wte = gpu_floats(wte, V * C), *d_wpe = gpu_floats(wpe, T * C);
        float *d_dx = gpu_floats(dx, n * C), *d_x = gpu_poisoned_floats(n * C);
        float *d_dwte = gpu_floats(dwte0, V * C), *d_dwpe = gpu_floats(dwpe0, T * C);
        GPU->token_embed_forward(DTYPE_FP32, d_x, d_ids, d_wte, d_wpe, B, T, C, V);
        GPU->token_embed_backward(DTYPE_FP32, d_dwte, d_dwpe, d_ids, d_dx, B, T, C, V);
        gpu_check();
        const char *shape = fmt_text("B %zu, T %zu, C %zu, V %zu", B, T, C, V);
        float *x_g = gpu_fetch(d_x, n * C);
        size_t bad = 0; /* the CPU's bits, and NaN where it has NaN (of any payload) */
        for (size_t i = 0; i < n * C; i++)
            bad += isnan(x[i]) ? !isnan(x_g[i]) : memcmp(&x_g[i], &x[i], sizeof(float)) != 0;
        cr_expect_eq(bad, 0, "token_embed_forward x (%s): %zu values differ", shape, bad);
        gpu_expect_same_dev(d_dwte, dwte, V * C, fmt_text("dwte (%s)", shape));
        gpu_expect_same_dev(d_dwpe, dwpe, T * C, fmt_text("dwpe (%s)", shape));
        gpu_free(d_ids);
        float *dev[] = {d_wte, d_wpe, d_dx, d_x, d_dwte, d_dwpe};
        for (size_t i = 0; i < sizeof dev / sizeof *dev; i++) gpu_free(dev[i]);
        free_floats((float *[]){wte, wpe, dx, dwte0, dwpe0, x, dwte, dwpe, x_g}, 9);
        free(ids);
    }
}
