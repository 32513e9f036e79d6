/* dtype_cpu: the CPU table's entries for the ops that take a compute dtype. fp32 runs the fp32
 * kernels (cpu_fp32.h) on the tensors as they are; bf16 and fp16 widen every operand of the
 * compute dtype into fp32 scratch, run the same fp32 kernel, and round each output once as they
 * store it: what a GPU kernel does that loads low precision into fp32 registers, computes and
 * stores. So the CPU rounds where the CUDA kernels round, and the simulator is their reference. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/cpu/amx_bf16.h"
#include "kernels/cpu/cpu_fp32.h"
#include "kernels/cpu/cpu_ops.h"
#include "kernels/cpu/scratch.h"

/* ---------------------------------------------------------------- widening */

/* The fp32 scratch of one low-precision call: what it widened, freed when the call is done. Host
 * memory of the CPU's own, never device memory: the simulator accounts a tensor in the dtype the
 * job holds it in, as a GPU holds it. */
enum { WIDE_MAX = 12 };
typedef struct Wide {
    float *held[WIDE_MAX];
    int n;
} Wide;

/* n floats of the thread's scratch (scratch.h; a pointer even for none), contents undefined:
 * every op writes all of an output it is given (tests/kernels/test_dtype_kernels.c fills them
 * with a sentinel first), and an operand is widened over. */
static float *wide_alloc(Wide *w, size_t n) {
    if (w->n == WIDE_MAX) {
        fprintf(stderr, "kernels_cpu: more than %d operands to widen\n", WIDE_MAX);
        abort();
    }
    float *p = scratch_get(n * sizeof(float));
    w->held[w->n++] = p;
    return p;
}

/* src's n elements of t, in fp32 (NULL stays NULL): an operand, or an output added into. */
static float *wide_in(Wide *w, DType t, const void *src, size_t n) {
    if (!src) return NULL;
    float *p = wide_alloc(w, n);
    cpu_cast(p, DTYPE_FP32, src, t, n);
    return p;
}

/* fp32 room for an output of n elements (NULL stays NULL: an output not asked for). */
static float *wide_out(Wide *w, const void *dst, size_t n) {
    return dst ? wide_alloc(w, n) : NULL;
}

/* dst's n elements of t from src, rounded once (dst NULL: an output not asked for). */
static void narrow(DType t, void *dst, const float *src, size_t n) {
    if (dst && n) cpu_cast(dst, t, src, DTYPE_FP32, n);
}

/* The same for `rows` rows of `width` elements, `stride` apart: only the columns the op wrote
 * (attention's dq, dk and dv share the rows of one packed gradient). */
static void narrow_rows(DType t, void *dst, const float *src, size_t rows, size_t width,
                        size_t stride) {
    for (size_t r = 0; r < rows; r++)
        narrow(t, dtype_at(dst, t, r * stride), src + r * stride, width);
}

static void wide_free(Wide *w) {
    for (int i = w->n - 1; i >= 0; i--) scratch_put(w->held[i]);
    w->n = 0;
}

/* Elements from the first of `rows` rows `stride` apart to the end of the last's `width`. */
static size_t span(size_t rows, size_t stride, size_t width) {
    return rows ? (rows - 1) * stride + width : 0;
}

#define IS_FP32(t) ((t) == DTYPE_FP32)

/* ---------------------------------------------------------------- the toy */

void cpu_toy_forward(DType t, const void *w, const void *x, void *y, size_t n) {
    if (IS_FP32(t)) {
        f32_toy_forward(w, x, y, n);
        return;
    }
    Wide s = {0};
    float *wy = wide_out(&s, y, n);
    f32_toy_forward(wide_in(&s, t, w, 3), wide_in(&s, t, x, n), wy, n);
    narrow(t, y, wy, n);
    wide_free(&s);
}

void cpu_toy_backward(DType t, const void *w, const void *x, const void *dy, void *dx, float dw[3],
                      size_t n) {
    if (IS_FP32(t)) {
        f32_toy_backward(w, x, dy, dx, dw, n);
        return;
    }
    Wide s = {0};
    float *wdx = wide_out(&s, dx, n);
    f32_toy_backward(wide_in(&s, t, w, 3), wide_in(&s, t, x, n), wide_in(&s, t, dy, n), wdx, dw, n);
    narrow(t, dx, wdx, n);
    wide_free(&s);
}

float cpu_mse_loss(DType t, const void *y, const float *target, void *dy, size_t n) {
    if (IS_FP32(t)) return f32_mse_loss(y, target, dy, n);
    Wide s = {0};
    float *wdy = wide_out(&s, dy, n);
    float loss = f32_mse_loss(wide_in(&s, t, y, n), target, wdy, n);
    narrow(t, dy, wdy, n);
    wide_free(&s);
    return loss;
}

/* ---------------------------------------------------------------- linear, norms, GELU */

/* A bf16 product of M x N x K goes to the AMX tiles where the CPU has them and it is large
 * enough to repay packing its operands into tiles: on a Sapphire Rapids core the tiles ran
 * at 0.1x to 0.9x the speed of widening and sgemm below about 2^16 multiply-adds, and 4.9x
 * faster at vit-tiny's 1088 x 128 x 128, 3.0x at 2048^3 (bench/RESULTS.md). */
#define AMX_MIN_MACS ((size_t)1 << 18)

static int on_amx(DType t, size_t M, size_t N, size_t K) {
    return t == DTYPE_BF16 && M * N * K >= AMX_MIN_MACS && amx_bf16_available();
}

/* A row-major bf16 [rows, cols] matrix as the tiles read it, or its transpose. */
static AmxMatrix rows_of(const void *p, size_t cols) {
    return (AmxMatrix){p, cols, 1};
}
static AmxMatrix transposed(const void *p, size_t cols) {
    return (AmxMatrix){p, 1, cols};
}

/* out = in w^T (+ b): the bias widened into every row first, the product added to it, as the
 * fp32 kernel starts its sgemm from the bias. */
static void amx_linear_forward(void *out, const void *in, const void *w, const void *b, size_t M,
                               size_t K, size_t N) {
    Wide s = {0};
    float *wout = wide_alloc(&s, M * N);
    if (b) {
        const float *wb = wide_in(&s, DTYPE_BF16, b, N);
        for (size_t i = 0; i < M; i++) memcpy(wout + i * N, wb, N * sizeof(float));
    }
    AmxMatrix x = rows_of(in, K), wt = transposed(w, K);
    amx_bf16_gemm(wout, N, &x, &wt, M, N, K, b != NULL);
    narrow(DTYPE_BF16, out, wout, M * N);
    wide_free(&s);
}

/* din = dout w and dw += dout^T in (K x M x N each), db += dout's column sums. */
static void amx_linear_backward(void *din, float *dw, float *db, const void *dout, const void *in,
                                const void *w, size_t M, size_t K, size_t N) {
    if (din) {
        Wide s = {0};
        float *wdin = wide_alloc(&s, M * K);
        AmxMatrix dy = rows_of(dout, N), wn = rows_of(w, K);
        amx_bf16_gemm(wdin, K, &dy, &wn, M, K, N, 0);
        narrow(DTYPE_BF16, din, wdin, M * K);
        wide_free(&s);
    }
    AmxMatrix dyt = transposed(dout, N), x = rows_of(in, K);
    amx_bf16_gemm(dw, K, &dyt, &x, N, K, M, 1);
    if (db) cpu_bias_grad(DTYPE_BF16, db, dout, M, N, N);
}

void cpu_linear_forward(DType t, void *out, const void *in, const void *w, const void *b, size_t M,
                        size_t K, size_t N) {
    if (IS_FP32(t)) {
        f32_linear_forward(out, in, w, b, M, K, N);
        return;
    }
    if (on_amx(t, M, N, K)) {
        amx_linear_forward(out, in, w, b, M, K, N);
        return;
    }
    Wide s = {0};
    float *wout = wide_out(&s, out, M * N);
    f32_linear_forward(wout, wide_in(&s, t, in, M * K), wide_in(&s, t, w, N * K),
                       wide_in(&s, t, b, N), M, K, N);
    narrow(t, out, wout, M * N);
    wide_free(&s);
}

void cpu_linear_backward(DType t, void *din, float *dw, float *db, const void *dout, const void *in,
                         const void *w, size_t M, size_t K, size_t N) {
    if (IS_FP32(t)) {
        f32_linear_backward(din, dw, db, dout, in, w, M, K, N);
        return;
    }
    if (on_amx(t, M, N, K)) {
        amx_linear_backward(din, dw, db, dout, in, w, M, K, N);
        return;
    }
    Wide s = {0};
    float *wdin = wide_out(&s, din, M * K);
    f32_linear_backward(wdin, dw, db, wide_in(&s, t, dout, M * N), wide_in(&s, t, in, M * K),
                        wide_in(&s, t, w, N * K), M, K, N);
    narrow(t, din, wdin, M * K);
    wide_free(&s);
}

void cpu_bias_grad(DType t, float *db, const void *dout, size_t rows, size_t cols, size_t stride) {
    if (IS_FP32(t)) {
        f32_bias_grad(db, dout, rows, cols, stride);
        return;
    }
    Wide s = {0};
    f32_bias_grad(db, wide_in(&s, t, dout, span(rows, stride, cols)), rows, cols, stride);
    wide_free(&s);
}

void cpu_layernorm_forward(DType t, void *out, float *mean, float *rstd, const void *in,
                           const void *w, const void *b, size_t M, size_t C, float eps) {
    if (IS_FP32(t)) {
        f32_layernorm_forward(out, mean, rstd, in, w, b, M, C, eps);
        return;
    }
    Wide s = {0};
    float *wout = wide_out(&s, out, M * C);
    f32_layernorm_forward(wout, mean, rstd, wide_in(&s, t, in, M * C), wide_in(&s, t, w, C),
                          wide_in(&s, t, b, C), M, C, eps);
    narrow(t, out, wout, M * C);
    wide_free(&s);
}

void cpu_layernorm_backward(DType t, void *din, float *dw, float *db, const void *dout,
                            const void *in, const float *mean, const float *rstd, const void *w,
                            size_t M, size_t C) {
    if (IS_FP32(t)) {
        f32_layernorm_backward(din, dw, db, dout, in, mean, rstd, w, M, C);
        return;
    }
    Wide s = {0};
    float *wdin = wide_in(&s, t, din, M * C); /* added into */
    f32_layernorm_backward(wdin, dw, db, wide_in(&s, t, dout, M * C), wide_in(&s, t, in, M * C),
                           mean, rstd, wide_in(&s, t, w, C), M, C);
    narrow(t, din, wdin, M * C);
    wide_free(&s);
}

void cpu_gelu_forward(DType t, void *out, const void *in, size_t n) {
    if (IS_FP32(t)) {
        f32_gelu_forward(out, in, n);
        return;
    }
    Wide s = {0};
    float *wout = wide_out(&s, out, n);
    f32_gelu_forward(wout, wide_in(&s, t, in, n), n);
    narrow(t, out, wout, n);
    wide_free(&s);
}

void cpu_gelu_backward(DType t, void *din, const void *in, const void *dout, size_t n) {
    if (IS_FP32(t)) {
        f32_gelu_backward(din, in, dout, n);
        return;
    }
    Wide s = {0};
    float *wdin = wide_out(&s, din, n);
    f32_gelu_backward(wdin, wide_in(&s, t, in, n), wide_in(&s, t, dout, n), n);
    narrow(t, din, wdin, n);
    wide_free(&s);
}

/* ---------------------------------------------------------------- the ViT's own */

void cpu_patchify(DType t, void *patches, const void *images, size_t B, size_t S, size_t P) {
    if (IS_FP32(t)) {
        f32_patchify(patches, images, B, S, P);
        return;
    }
    const size_t G = P ? S / P : 0, n = B * G * G * P * P;
    Wide s = {0};
    float *wp = wide_out(&s, patches, n);
    f32_patchify(wp, wide_in(&s, t, images, B * S * S), B, S, P);
    narrow(t, patches, wp, n);
    wide_free(&s);
}

void cpu_embed_forward(DType t, void *x, const void *patch_out, const void *cls, const void *pos,
                       size_t B, size_t T, size_t C) {
    if (IS_FP32(t)) {
        f32_embed_forward(x, patch_out, cls, pos, B, T, C);
        return;
    }
    const size_t patches = T ? B * (T - 1) * C : 0;
    Wide s = {0};
    float *wx = wide_out(&s, x, B * T * C);
    f32_embed_forward(wx, wide_in(&s, t, patch_out, patches), wide_in(&s, t, cls, C),
                      wide_in(&s, t, pos, T * C), B, T, C);
    narrow(t, x, wx, B * T * C);
    wide_free(&s);
}

void cpu_embed_backward(DType t, float *dcls, float *dpos, void *dpatch_out, const void *dx,
                        size_t B, size_t T, size_t C) {
    if (IS_FP32(t)) {
        f32_embed_backward(dcls, dpos, dpatch_out, dx, B, T, C);
        return;
    }
    const size_t patches = T ? B * (T - 1) * C : 0;
    Wide s = {0};
    float *wd = wide_out(&s, dpatch_out, patches);
    f32_embed_backward(dcls, dpos, wd, wide_in(&s, t, dx, B * T * C), B, T, C);
    narrow(t, dpatch_out, wd, patches);
    wide_free(&s);
}

void cpu_class_token_select(DType t, void *out, const void *x, size_t B, size_t T, size_t C) {
    if (IS_FP32(t)) {
        f32_class_token_select(out, x, B, T, C);
        return;
    }
    Wide s = {0};
    float *wout = wide_out(&s, out, B * C);
    f32_class_token_select(wout, wide_in(&s, t, x, B * T * C), B, T, C);
    narrow(t, out, wout, B * C);
    wide_free(&s);
}

void cpu_class_token_select_backward(DType t, void *dx, const void *dout, size_t B, size_t T,
                                     size_t C) {
    if (IS_FP32(t)) {
        f32_class_token_select_backward(dx, dout, B, T, C);
        return;
    }
    Wide s = {0};
    float *wdx = wide_in(&s, t, dx, B * T * C); /* added into */
    f32_class_token_select_backward(wdx, wide_in(&s, t, dout, B * C), B, T, C);
    narrow(t, dx, wdx, B * T * C);
    wide_free(&s);
}

float cpu_cross_entropy(DType t, void *dlogits, const void *logits, const int32_t *labels, size_t B,
                        size_t classes, float grad_scale) {
    if (IS_FP32(t)) return f32_cross_entropy(dlogits, logits, labels, B, classes, grad_scale);
    Wide s = {0};
    float *wd = wide_out(&s, dlogits, B * classes);
    float loss =
        f32_cross_entropy(wd, wide_in(&s, t, logits, B * classes), labels, B, classes, grad_scale);
    narrow(t, dlogits, wd, B * classes);
    wide_free(&s);
    return loss;
}

size_t cpu_count_correct(DType t, const void *logits, const int32_t *labels, size_t B,
                         size_t classes) {
    if (IS_FP32(t)) return f32_count_correct(logits, labels, B, classes);
    Wide s = {0};
    size_t n = f32_count_correct(wide_in(&s, t, logits, B * classes), labels, B, classes);
    wide_free(&s);
    return n;
}

void cpu_add(DType t, void *out, const void *a, const void *b, size_t n) {
    if (IS_FP32(t)) {
        f32_add(out, a, b, n);
        return;
    }
    Wide s = {0};
    float *wout = wide_out(&s, out, n);
    f32_add(wout, wide_in(&s, t, a, n), wide_in(&s, t, b, n), n);
    narrow(t, out, wout, n);
    wide_free(&s);
}

/* ---------------------------------------------------------------- attention over packed qkv */

/* The columns of a C-wide row the heads use: all of C when heads divides it (kernels.h's
 * contract); outside it, the kernels touch only heads * (C / heads), and so does the rounding. */
static size_t heads_width(size_t C, size_t heads) {
    return heads ? heads * (C / heads) : 0;
}

typedef void (*PackedAttentionFn)(float *out, float *probs, const float *qkv, size_t B, size_t T,
                                  size_t C, size_t heads);

static void packed_attention_forward(PackedAttentionFn fn, DType t, void *out, void *probs,
                                     const void *qkv, size_t B, size_t T, size_t C, size_t heads) {
    const size_t nout = B * T * C, nprobs = B * heads * T * T;
    Wide s = {0};
    float *wout = wide_out(&s, out, nout), *wprobs = wide_out(&s, probs, nprobs);
    fn(wout, wprobs, wide_in(&s, t, qkv, 3 * nout), B, T, C, heads);
    narrow_rows(t, out, wout, B * T, heads_width(C, heads), C);
    narrow(t, probs, wprobs, nprobs);
    wide_free(&s);
}

void cpu_attention_forward(DType t, void *out, void *probs, const void *qkv, size_t B, size_t T,
                           size_t C, size_t heads) {
    if (IS_FP32(t)) {
        f32_attention_forward(out, probs, qkv, B, T, C, heads);
        return;
    }
    packed_attention_forward(f32_attention_forward, t, out, probs, qkv, B, T, C, heads);
}

void cpu_causal_attention_forward(DType t, void *out, void *probs, const void *qkv, size_t B,
                                  size_t T, size_t C, size_t heads) {
    if (IS_FP32(t)) {
        f32_causal_attention_forward(out, probs, qkv, B, T, C, heads);
        return;
    }
    packed_attention_forward(f32_causal_attention_forward, t, out, probs, qkv, B, T, C, heads);
}

void cpu_attention_backward(DType t, void *dqkv, const void *dout, const void *qkv,
                            const void *probs, size_t B, size_t T, size_t C, size_t heads) {
    if (IS_FP32(t)) {
        f32_attention_backward(dqkv, dout, qkv, probs, B, T, C, heads);
        return;
    }
    const size_t n = B * T * C;
    Wide s = {0};
    float *wd = wide_out(&s, dqkv, 3 * n);
    f32_attention_backward(wd, wide_in(&s, t, dout, n), wide_in(&s, t, qkv, 3 * n),
                           wide_in(&s, t, probs, B * heads * T * T), B, T, C, heads);
    for (size_t part = 0; part < 3; part++) /* q's, k's and v's columns */
        narrow_rows(t, dtype_at(dqkv, t, part * C), wd + part * C, B * T, heads_width(C, heads),
                    3 * C);
    wide_free(&s);
}

/* ---------------------------------------------------------------- the language models' own */

void cpu_token_embed_forward(DType t, void *x, const int32_t *tokens, const void *wte,
                             const void *wpe, size_t B, size_t T, size_t C, size_t V) {
    if (IS_FP32(t)) {
        f32_token_embed_forward(x, tokens, wte, wpe, B, T, C, V);
        return;
    }
    Wide s = {0};
    float *wx = wide_out(&s, x, B * T * C);
    f32_token_embed_forward(wx, tokens, wide_in(&s, t, wte, V * C), wide_in(&s, t, wpe, T * C), B,
                            T, C, V);
    narrow(t, x, wx, B * T * C);
    wide_free(&s);
}

void cpu_token_embed_backward(DType t, float *dwte, float *dwpe, const int32_t *tokens,
                              const void *dx, size_t B, size_t T, size_t C, size_t V) {
    if (IS_FP32(t)) {
        f32_token_embed_backward(dwte, dwpe, tokens, dx, B, T, C, V);
        return;
    }
    Wide s = {0};
    f32_token_embed_backward(dwte, dwpe, tokens, wide_in(&s, t, dx, B * T * C), B, T, C, V);
    wide_free(&s);
}

/* ---------------------------------------------------------------- fused ops */

void cpu_bias_gelu_forward(DType t, void *out, const void *pre, const void *b, size_t M, size_t N) {
    if (IS_FP32(t)) {
        f32_bias_gelu_forward(out, pre, b, M, N);
        return;
    }
    Wide s = {0};
    float *wout = wide_out(&s, out, M * N);
    f32_bias_gelu_forward(wout, wide_in(&s, t, pre, M * N), wide_in(&s, t, b, N), M, N);
    narrow(t, out, wout, M * N);
    wide_free(&s);
}

void cpu_bias_gelu_backward(DType t, void *dpre, float *db, const void *dout, const void *pre,
                            const void *b, size_t M, size_t N) {
    if (IS_FP32(t)) {
        f32_bias_gelu_backward(dpre, db, dout, pre, b, M, N);
        return;
    }
    Wide s = {0};
    float *wd = wide_out(&s, dpre, M * N);
    f32_bias_gelu_backward(wd, db, wide_in(&s, t, dout, M * N), wide_in(&s, t, pre, M * N),
                           wide_in(&s, t, b, N), M, N);
    narrow(t, dpre, wd, M * N);
    wide_free(&s);
}

void cpu_residual_layernorm_forward(DType t, void *sum, void *out, float *mean, float *rstd,
                                    const void *x, const void *y, const void *w, const void *b,
                                    size_t M, size_t C, float eps) {
    if (IS_FP32(t)) {
        f32_residual_layernorm_forward(sum, out, mean, rstd, x, y, w, b, M, C, eps);
        return;
    }
    /* the sum is rounded as it is stored, and LayerNorm reads the stored sum, as two ops would */
    const size_t n = M * C;
    Wide s = {0};
    float *wsum = wide_alloc(&s, n);
    f32_add(wsum, wide_in(&s, t, x, n), wide_in(&s, t, y, n), n);
    narrow(t, sum, wsum, n);
    cpu_cast(wsum, DTYPE_FP32, sum, t, n);
    float *wout = wide_out(&s, out, n);
    f32_layernorm_forward(wout, mean, rstd, wsum, wide_in(&s, t, w, C), wide_in(&s, t, b, C), M, C,
                          eps);
    narrow(t, out, wout, n);
    wide_free(&s);
}

/* ---------------------------------------------------------------- Llama's ops */

void cpu_rmsnorm_forward(DType t, void *out, float *rstd, const void *in, const void *w, size_t M,
                         size_t C, float eps) {
    if (IS_FP32(t)) {
        f32_rmsnorm_forward(out, rstd, in, w, M, C, eps);
        return;
    }
    Wide s = {0};
    float *wout = wide_out(&s, out, M * C);
    f32_rmsnorm_forward(wout, rstd, wide_in(&s, t, in, M * C), wide_in(&s, t, w, C), M, C, eps);
    narrow(t, out, wout, M * C);
    wide_free(&s);
}

void cpu_rmsnorm_backward(DType t, void *din, float *dw, const void *dout, const void *in,
                          const float *rstd, const void *w, size_t M, size_t C) {
    if (IS_FP32(t)) {
        f32_rmsnorm_backward(din, dw, dout, in, rstd, w, M, C);
        return;
    }
    Wide s = {0};
    float *wdin = wide_in(&s, t, din, M * C); /* added into */
    f32_rmsnorm_backward(wdin, dw, wide_in(&s, t, dout, M * C), wide_in(&s, t, in, M * C), rstd,
                         wide_in(&s, t, w, C), M, C);
    narrow(t, din, wdin, M * C);
    wide_free(&s);
}

void cpu_swiglu_forward(DType t, void *out, const void *gate, const void *up, size_t n) {
    if (IS_FP32(t)) {
        f32_swiglu_forward(out, gate, up, n);
        return;
    }
    Wide s = {0};
    float *wout = wide_out(&s, out, n);
    f32_swiglu_forward(wout, wide_in(&s, t, gate, n), wide_in(&s, t, up, n), n);
    narrow(t, out, wout, n);
    wide_free(&s);
}

void cpu_swiglu_backward(DType t, void *dgate, void *dup, const void *dout, const void *gate,
                         const void *up, size_t n) {
    if (IS_FP32(t)) {
        f32_swiglu_backward(dgate, dup, dout, gate, up, n);
        return;
    }
    Wide s = {0};
    float *wdg = wide_out(&s, dgate, n), *wdu = wide_out(&s, dup, n);
    f32_swiglu_backward(wdg, wdu, wide_in(&s, t, dout, n), wide_in(&s, t, gate, n),
                        wide_in(&s, t, up, n), n);
    narrow(t, dgate, wdg, n);
    narrow(t, dup, wdu, n);
    wide_free(&s);
}

void cpu_rope_forward(DType t, void *x, size_t B, size_t T, size_t heads, size_t D, float theta) {
    if (IS_FP32(t)) {
        f32_rope_forward(x, B, T, heads, D, theta);
        return;
    }
    const size_t n = B * T * heads * D;
    Wide s = {0};
    float *wx = wide_in(&s, t, x, n); /* in place */
    f32_rope_forward(wx, B, T, heads, D, theta);
    narrow(t, x, wx, n);
    wide_free(&s);
}

void cpu_rope_backward(DType t, void *dx, size_t B, size_t T, size_t heads, size_t D, float theta) {
    if (IS_FP32(t)) {
        f32_rope_backward(dx, B, T, heads, D, theta);
        return;
    }
    const size_t n = B * T * heads * D;
    Wide s = {0};
    float *wdx = wide_in(&s, t, dx, n); /* in place */
    f32_rope_backward(wdx, B, T, heads, D, theta);
    narrow(t, dx, wdx, n);
    wide_free(&s);
}

/* ---------------------------------------------------------------- attention over strided q, k, v
 */

/* The elements of q and of k (or v) an AttnShape reaches, from the first row's start. */
static size_t q_span(const AttnShape *a) {
    return span(a->B * a->T, a->q_stride, a->heads * a->head_dim);
}
static size_t kv_span(const AttnShape *a) {
    return span(a->B * a->T, a->kv_stride, a->kv_heads * a->head_dim);
}

/* Backward's dq, dk and dv, narrowed only in the columns the op wrote. */
static void narrow_qkv_grads(DType t, const AttnShape *a, void *dq, void *dk, void *dv,
                             const float *wdq, const float *wdk, const float *wdv) {
    const size_t rows = a->B * a->T, D = a->head_dim;
    narrow_rows(t, dq, wdq, rows, a->heads * D, a->q_stride);
    narrow_rows(t, dk, wdk, rows, a->kv_heads * D, a->kv_stride);
    narrow_rows(t, dv, wdv, rows, a->kv_heads * D, a->kv_stride);
}

void cpu_gqa_attention_forward(DType t, void *out, void *probs, const void *q, const void *k,
                               const void *v, const AttnShape *a) {
    if (IS_FP32(t)) {
        f32_gqa_attention_forward(out, probs, q, k, v, a);
        return;
    }
    const size_t nout = a->B * a->T * a->heads * a->head_dim, np = a->B * a->heads * a->T * a->T;
    Wide s = {0};
    float *wout = wide_out(&s, out, nout), *wp = wide_out(&s, probs, np);
    f32_gqa_attention_forward(wout, wp, wide_in(&s, t, q, q_span(a)), wide_in(&s, t, k, kv_span(a)),
                              wide_in(&s, t, v, kv_span(a)), a);
    narrow(t, out, wout, nout);
    narrow(t, probs, wp, np);
    wide_free(&s);
}

void cpu_gqa_attention_backward(DType t, void *dq, void *dk, void *dv, const void *dout,
                                const void *q, const void *k, const void *v, const void *probs,
                                const AttnShape *a) {
    if (IS_FP32(t)) {
        f32_gqa_attention_backward(dq, dk, dv, dout, q, k, v, probs, a);
        return;
    }
    const size_t nout = a->B * a->T * a->heads * a->head_dim, np = a->B * a->heads * a->T * a->T;
    Wide s = {0};
    float *wdq = wide_out(&s, dq, q_span(a)), *wdk = wide_out(&s, dk, kv_span(a)),
          *wdv = wide_out(&s, dv, kv_span(a));
    f32_gqa_attention_backward(wdq, wdk, wdv, wide_in(&s, t, dout, nout),
                               wide_in(&s, t, q, q_span(a)), wide_in(&s, t, k, kv_span(a)),
                               wide_in(&s, t, v, kv_span(a)), wide_in(&s, t, probs, np), a);
    narrow_qkv_grads(t, a, dq, dk, dv, wdq, wdk, wdv);
    wide_free(&s);
}

void cpu_flash_attention_forward(DType t, void *out, float *lse, const void *q, const void *k,
                                 const void *v, const AttnShape *a) {
    if (IS_FP32(t)) {
        f32_flash_attention_forward(out, lse, q, k, v, a);
        return;
    }
    const size_t nout = a->B * a->T * a->heads * a->head_dim;
    Wide s = {0};
    float *wout = wide_out(&s, out, nout);
    f32_flash_attention_forward(wout, lse, wide_in(&s, t, q, q_span(a)),
                                wide_in(&s, t, k, kv_span(a)), wide_in(&s, t, v, kv_span(a)), a);
    narrow(t, out, wout, nout);
    wide_free(&s);
}

void cpu_flash_attention_backward(DType t, void *dq, void *dk, void *dv, const void *dout,
                                  const void *q, const void *k, const void *v, const void *out,
                                  const float *lse, float *work, const AttnShape *a) {
    if (IS_FP32(t)) {
        f32_flash_attention_backward(dq, dk, dv, dout, q, k, v, out, lse, work, a);
        return;
    }
    const size_t nout = a->B * a->T * a->heads * a->head_dim;
    Wide s = {0};
    float *wdq = wide_out(&s, dq, q_span(a)), *wdk = wide_out(&s, dk, kv_span(a)),
          *wdv = wide_out(&s, dv, kv_span(a));
    f32_flash_attention_backward(wdq, wdk, wdv, wide_in(&s, t, dout, nout),
                                 wide_in(&s, t, q, q_span(a)), wide_in(&s, t, k, kv_span(a)),
                                 wide_in(&s, t, v, kv_span(a)), wide_in(&s, t, out, nout), lse,
                                 work, a);
    narrow_qkv_grads(t, a, dq, dk, dv, wdq, wdk, wdv);
    wide_free(&s);
}
