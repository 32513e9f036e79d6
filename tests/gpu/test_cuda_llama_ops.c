/* The Llama-shaped block's ops and attention over grouped, strided operands on the GPU against
 * kernels_cpu on the same inputs (invariant 6, fp32 within 1e-5): RMSNorm, SwiGLU, RoPE, eager
 * grouped-query attention, flash attention (Llama's separate q, k, v and GPT's packed qkv; also at
 * the sequence lengths language models train at, past eager's KERNELS_MAX_TOKENS), and the token
 * embedding without a position table. */
#include <criterion/criterion.h>
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/cuda/kernels_cuda.h"
#include "kernels/kernels.h"
#include "tests/gpu/gpu_util.h"

#define REL 1e-5

static const Kernels *CPU = &kernels_cpu;
static const Kernels *GPU = &kernels_cuda;

TestSuite(cuda_llama_ops, .init = gpu_or_skip, .fini = gpu_done);

/* Rows of the transformer's default width, one row, and an odd width. */
Test(cuda_llama_ops, rmsnorm) {
    const size_t shapes[][2] = {{1024, 128}, {1, 7}, {33, 1000}};
    for (size_t i = 0; i < 3; i++) {
        const size_t M = shapes[i][0], C = shapes[i][1], n = M * C;
        float *in = host_random(n, -2, 2, 10), *w = host_random(C, 0.5f, 1.5f, 11);
        float *dout = host_random(n, -1, 1, 12), *din0 = host_random(n, -1, 1, 13);
        float *dw0 = host_random(C, -1, 1, 14);
        float *out = host_floats(n), *rstd = host_floats(M);
        float *din = host_copy(din0, n), *dw = host_copy(dw0, C);
        CPU->rmsnorm_forward(DTYPE_FP32, out, rstd, in, w, M, C, 1e-5f);
        CPU->rmsnorm_backward(DTYPE_FP32, din, dw, dout, in, rstd, w, M, C);
        float *d_in = gpu_floats(in, n), *d_w = gpu_floats(w, C), *d_dout = gpu_floats(dout, n);
        float *d_out = gpu_poisoned_floats(n), *d_rstd = gpu_poisoned_floats(M);
        float *d_din = gpu_floats(din0, n), *d_dw = gpu_floats(dw0, C);
        GPU->rmsnorm_forward(DTYPE_FP32, d_out, d_rstd, d_in, d_w, M, C, 1e-5f);
        GPU->rmsnorm_backward(DTYPE_FP32, d_din, d_dw, d_dout, d_in, d_rstd, d_w, M, C);
        gpu_check();
        gpu_expect_close_dev(d_out, out, n, REL, fmt_text("rmsnorm out (%zu x %zu)", M, C));
        gpu_expect_close_dev(d_rstd, rstd, M, REL, "rmsnorm rstd");
        gpu_expect_close_dev(d_din, din, n, REL, "rmsnorm din");
        gpu_expect_close_dev(d_dw, dw, C, REL, "rmsnorm dw");
        float *dev[] = {d_in, d_w, d_dout, d_out, d_rstd, d_din, d_dw};
        for (size_t k = 0; k < 7; k++) gpu_free(dev[k]);
        free_floats((float *[]){in, w, dout, din0, dw0, out, rstd, din, dw}, 9);
    }
}

Test(cuda_llama_ops, swiglu_and_rope) {
    const size_t n = 16 * 64 * 384;
    float *gate = host_random(n, -4, 4, 20), *up = host_random(n, -2, 2, 21);
    float *dout = host_random(n, -1, 1, 22);
    float *out = host_floats(n), *dgate = host_floats(n), *dup = host_floats(n);
    CPU->swiglu_forward(DTYPE_FP32, out, gate, up, n);
    CPU->swiglu_backward(DTYPE_FP32, dgate, dup, dout, gate, up, n);
    float *d_gate = gpu_floats(gate, n), *d_up = gpu_floats(up, n), *d_dout = gpu_floats(dout, n);
    float *d_out = gpu_poisoned_floats(n), *d_dup = gpu_poisoned_floats(n);
    GPU->swiglu_forward(DTYPE_FP32, d_out, d_gate, d_up, n);
    GPU->swiglu_backward(DTYPE_FP32, d_dout, d_dup, d_dout, d_gate, d_up,
                         n); /* dgate written over dout */
    gpu_check();
    gpu_expect_close_dev(d_out, out, n, REL, "swiglu out");
    gpu_expect_close_dev(d_dout, dgate, n, REL, "swiglu dgate");
    gpu_expect_close_dev(d_dup, dup, n, REL, "swiglu dup");
    /* RoPE over q of 4 heads of 32 and k of 2, at theta 500000 */
    const size_t B = 3, T = 64, heads = 4, D = 32, m = B * T * heads * D;
    float *x = host_random(m, -1, 1, 23), *fwd = host_copy(x, m), *bwd = host_copy(x, m);
    CPU->rope_forward(DTYPE_FP32, fwd, B, T, heads, D, 500000.0f);
    CPU->rope_backward(DTYPE_FP32, bwd, B, T, heads, D, 500000.0f);
    float *d_f = gpu_floats(x, m), *d_b = gpu_floats(x, m);
    GPU->rope_forward(DTYPE_FP32, d_f, B, T, heads, D, 500000.0f);
    GPU->rope_backward(DTYPE_FP32, d_b, B, T, heads, D, 500000.0f);
    gpu_check();
    gpu_expect_close_dev(d_f, fwd, m, REL, "rope forward");
    gpu_expect_close_dev(d_b, bwd, m, REL, "rope backward");
    float *dev[] = {d_gate, d_up, d_dout, d_out, d_dup, d_f, d_b};
    for (size_t k = 0; k < 7; k++) gpu_free(dev[k]);
    free_floats((float *[]){gate, up, dout, out, dgate, dup, x, fwd, bwd}, 9);
}

/* Which attention check_attention runs: eager keeps T x T probabilities (T <= KERNELS_MAX_TOKENS
 * on the GPU, and the CPU's grow as T^2), so long sequences check flash alone. */
enum { EAGER = 1, FLASH = 2 };

/* One attention shape, eager and/or flash (`kinds`), on both backends; q, k, v are `qkv`'s columns
 * at the shape's strides (separate buffers' or GPT's packed one's). */
static void check_attention(const AttnShape *s, size_t k_off, size_t v_off, size_t n_qkv,
                            unsigned seed, int kinds) {
    const size_t n_out = s->B * s->T * s->heads * s->head_dim;
    const size_t n_probs = kinds & EAGER ? s->B * s->heads * s->T * s->T : 1;
    const size_t n_lse = s->B * s->heads * s->T, n_work = kinds & FLASH ? s->T * s->T : 1;
    float *qkv = host_random(n_qkv, -2, 2, seed), *dout = host_random(n_out, -1, 1, seed + 1);
    float *out = host_floats(n_out), *probs = host_floats(n_probs), *lse = host_floats(n_lse);
    float *fout = host_floats(n_out), *work = host_floats(n_work);
    float *dqkv = host_zeros(n_qkv), *fqkv = host_zeros(n_qkv);
    float *d_qkv = gpu_floats(qkv, n_qkv), *d_dout = gpu_floats(dout, n_out);
    float *d_out = gpu_poisoned_floats(n_out), *d_probs = gpu_poisoned_floats(n_probs);
    float *d_fout = gpu_poisoned_floats(n_out), *d_lse = gpu_poisoned_floats(n_lse);
    float *d_dqkv = gpu_floats(dqkv, n_qkv); /* gaps: 0 */
    /* flash overwrites dq, dk and dv, which cover qkv in every layout here: a missed one is NaN */
    float *d_fqkv = gpu_poisoned_floats(n_qkv);
    float *d_work = gpu_poisoned_floats(n_work);
    const char *shape = fmt_text("B %zu T %zu heads %zu/%zu D %zu causal %d", s->B, s->T, s->heads,
                                 s->kv_heads, s->head_dim, s->causal);
    if (kinds & EAGER) {
        CPU->gqa_attention_forward(DTYPE_FP32, out, probs, qkv, qkv + k_off, qkv + v_off, s);
        CPU->gqa_attention_backward(DTYPE_FP32, dqkv, dqkv + k_off, dqkv + v_off, dout, qkv,
                                    qkv + k_off, qkv + v_off, probs, s);
        GPU->gqa_attention_forward(DTYPE_FP32, d_out, d_probs, d_qkv, d_qkv + k_off, d_qkv + v_off,
                                   s);
        GPU->gqa_attention_backward(DTYPE_FP32, d_dqkv, d_dqkv + k_off, d_dqkv + v_off, d_dout,
                                    d_qkv, d_qkv + k_off, d_qkv + v_off, d_probs, s);
        gpu_check();
        gpu_expect_close_dev(d_out, out, n_out, REL, fmt_text("eager out (%s)", shape));
        gpu_expect_close_dev(d_probs, probs, n_probs, REL, fmt_text("probs (%s)", shape));
        gpu_expect_close_dev(d_dqkv, dqkv, n_qkv, REL, fmt_text("eager grads (%s)", shape));
    }
    if (kinds & FLASH) {
        CPU->flash_attention_forward(DTYPE_FP32, fout, lse, qkv, qkv + k_off, qkv + v_off, s);
        CPU->flash_attention_backward(DTYPE_FP32, fqkv, fqkv + k_off, fqkv + v_off, dout, qkv,
                                      qkv + k_off, qkv + v_off, fout, lse, work, s);
        GPU->flash_attention_forward(DTYPE_FP32, d_fout, d_lse, d_qkv, d_qkv + k_off, d_qkv + v_off,
                                     s);
        GPU->flash_attention_backward(DTYPE_FP32, d_fqkv, d_fqkv + k_off, d_fqkv + v_off, d_dout,
                                      d_qkv, d_qkv + k_off, d_qkv + v_off, d_fout, d_lse, d_work,
                                      s);
        gpu_check();
        gpu_expect_close_dev(d_fout, fout, n_out, REL, fmt_text("flash out (%s)", shape));
        gpu_expect_close_dev(d_lse, lse, n_lse, REL, fmt_text("lse (%s)", shape));
        gpu_expect_close_dev(d_fqkv, fqkv, n_qkv, REL, fmt_text("flash grads (%s)", shape));
    }
    float *dev[] = {d_qkv, d_dout, d_out, d_probs, d_fout, d_lse, d_dqkv, d_fqkv, d_work};
    for (size_t k = 0; k < 9; k++) gpu_free(dev[k]);
    free_floats((float *[]){qkv, dout, out, probs, lse, fout, work, dqkv, fqkv}, 9);
}

/* Llama's separate q [rows, heads D] and k, v [rows, kv_heads D] laid end to end. */
static void check_separate(size_t B, size_t T, size_t heads, size_t kv, size_t D, int causal,
                           unsigned seed, int kinds) {
    AttnShape s = {B, T, heads, kv, D, heads * D, kv * D, causal};
    const size_t rows = B * T, nq = rows * heads * D, nkv = rows * kv * D;
    check_attention(&s, nq, nq + nkv, nq + 2 * nkv, seed, kinds);
}

Test(cuda_llama_ops, grouped_query_and_flash_attention) {
    check_separate(16, 64, 4, 2, 32, 1, 100, EAGER | FLASH); /* train --model llama's default */
    check_separate(2, 1, 8, 1, 16, 1, 110, EAGER | FLASH);   /* one token */
    check_separate(3, 33, 6, 3, 10, 0, 120, EAGER | FLASH);  /* not causal, odd T */
    check_separate(1, KERNELS_MAX_TOKENS, 8, 8, 64, 1, 130, EAGER | FLASH);
    /* heads of 80 and 200 columns: a short 32-column chunk after full ones */
    check_separate(2, 70, 4, 2, 80, 1, 132, EAGER | FLASH);
    check_separate(2, 45, 2, 1, 200, 0, 134, EAGER | FLASH);
    /* GPT's packed qkv: q, k, v a row's thirds */
    const size_t B = 4, T = 40, C = 96, heads = 3;
    AttnShape s = {B, T, heads, heads, C / heads, 3 * C, 3 * C, 1};
    check_attention(&s, C, 2 * C, B * T * 3 * C, 140, EAGER | FLASH);
}

/* Flash attention at language models' sequence lengths, where eager's T x T probabilities do not
 * fit on chip (flash_attention.cu: 64-row tiles, so T 1,000 ends in a short tile and a causal
 * query tile stops at the diagonal's key tile). Still fp32 within REL = 1e-5: a row now sums up
 * to 2,048 terms in another order than the CPU's (tiles of 64 with an online softmax, against one
 * pass), and the error of such sums grows like the square root of their length. The kernels' code
 * run on a CPU under an emulation of CUDA's threads was within 0.6e-6 to 1.2e-6 (relative L2) at
 * these shapes, elements within 3.6e-6 of the largest (8e-5 allowed): a tenth of the bound. */
Test(cuda_llama_ops, flash_attention_at_long_sequences) {
    check_separate(1, 1024, 16, 4, 64, 1, 150, FLASH); /* causal GQA, T a multiple of the tile */
    check_separate(2, 1000, 16, 4, 64, 1, 160, FLASH); /* T not a multiple of it */
    check_separate(2, 1000, 4, 2, 64, 0, 170, FLASH);  /* not causal */
    check_separate(1, 1000, 8, 2, 128, 1, 180, FLASH); /* D 128 */
    check_separate(1, 300, 2, 1, 256, 1, 190, FLASH);  /* D 256, the most the kernels take */
    /* backward keeps dout . out per row in the 32 MiB workspace, heads T floats a sample, as many
     * samples a round as fit: 65,536 heads of 65 rows take a round each, so 2 samples two */
    check_separate(2, 65, 65536, 16384, 4, 1, 195, FLASH);
    /* GPT's packed qkv at T 2,048: kv_heads = heads, D 64, rows 3C apart */
    const size_t B = 1, T = 2048, C = 256, heads = 4;
    AttnShape s = {B, T, heads, heads, C / heads, 3 * C, 3 * C, 1};
    check_attention(&s, C, 2 * C, B * T * 3 * C, 200, FLASH);
}

/* A head_dim above the 256 the flash kernels size their registers for is refused with an error
 * naming the op, not run out of bounds. */
Test(cuda_llama_ops, flash_attention_refuses_head_dim_above_256) {
    const size_t T = 4, D = 257, n = T * D;
    AttnShape s = {1, T, 1, 1, D, D, D, 1};
    float *d_x = gpu_alloc(n * sizeof(float)), *d_lse = gpu_alloc(T * sizeof(float));
    GPU->flash_attention_forward(DTYPE_FP32, d_x, d_lse, d_x, d_x, d_x, &s);
    Err err = {0};
    cr_expect_neq(kernels_cuda_status(&err), 0, "flash_attention_forward took D = %zu", D);
    cr_expect(strstr(err.msg, "flash_attention_forward") != NULL, "the error names the op: %s",
              err.msg);
    GPU->flash_attention_backward(DTYPE_FP32, d_x, d_x, d_x, d_x, d_x, d_x, d_x, d_x, d_lse, NULL,
                                  &s);
    cr_expect_neq(kernels_cuda_status(&err), 0, "flash_attention_backward took D = %zu", D);
    cr_expect(strstr(err.msg, "flash_attention_backward") != NULL, "the error names the op: %s",
              err.msg);
    gpu_free(d_x), gpu_free(d_lse);
}

Test(cuda_llama_ops, token_embedding_without_positions) {
    const size_t B = 4, T = 9, C = 33, V = 256, n = B * T;
    int32_t *ids = malloc(n * sizeof *ids);
    for (size_t i = 0; i < n; i++) ids[i] = (int32_t)((i * 37) % V);
    float *wte = host_random(V * C, -1, 1, 200), *dx = host_random(n * C, -1, 1, 201);
    float *x = host_floats(n * C), *dwte = host_zeros(V * C);
    CPU->token_embed_forward(DTYPE_FP32, x, ids, wte, NULL, B, T, C, V);
    CPU->token_embed_backward(DTYPE_FP32, dwte, NULL, ids, dx, B, T, C, V);
    int32_t *d_ids = gpu_alloc(n * sizeof *ids);
    gpu_put(d_ids, ids, n * sizeof *ids);
    float *d_wte = gpu_floats(wte, V * C), *d_dx = gpu_floats(dx, n * C);
    float *zeros = host_zeros(V * C);
    float *d_x = gpu_poisoned_floats(n * C), *d_dwte = gpu_floats(zeros, V * C);
    GPU->token_embed_forward(DTYPE_FP32, d_x, d_ids, d_wte, NULL, B, T, C, V);
    GPU->token_embed_backward(DTYPE_FP32, d_dwte, NULL, d_ids, d_dx, B, T, C, V);
    gpu_check();
    gpu_expect_same_dev(d_x, x, n * C, "x = wte[ids]");
    gpu_expect_same_dev(d_dwte, dwte, V * C, "dwte");
    float *dev[] = {d_wte, d_dx, d_x, d_dwte};
    for (size_t k = 0; k < 4; k++) gpu_free(dev[k]);
    gpu_free(d_ids);
    free(ids);
    free_floats((float *[]){wte, dx, x, dwte, zeros}, 5);
}
