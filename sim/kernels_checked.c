/* kernels_checked: every op of the table reports the bytes it reads and writes to the calling
 * thread's callback (the stream checker), then runs the same op of the thread's inner table. */
#include "sim/kernels_checked.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

/* Each op's ranges follow kernels.h and the code of kernels_cpu, including its edge cases: an op
 * reports nothing where kernels_cpu returns early on an empty shape, and "+= 0" on an empty batch
 * (toy_backward's dw, bias_grad's db, embed_backward's dcls and dpos) is still a read and a
 * write, as kernels_cpu makes them. Two shapes outside kernels.h's contract are reported as the
 * code runs them: attention with C not a multiple of heads touches only the heads * (C / heads)
 * leading columns of q, k, v and out (rows of them, strided); patchify with S % P != 0 is
 * reported reading all of images, a superset of the rows and columns its patches cover. */

/* Thread-local because the ops' signatures carry no context to put a checker in (kernels_cpu
 * binds its pool the same way): each simulated rank is a thread with its own checker, so ranks
 * never share a binding. */
static _Thread_local struct {
    const Kernels *inner;
    KernelAccessFn fn;
    void *ctx;
} bound;

void kernels_checked_bind(const Kernels *inner, KernelAccessFn fn, void *ctx) {
    if (inner && !fn) {
        fprintf(stderr, "kernels_checked_bind: a table bound without a callback\n");
        abort();
    }
    bound.inner = inner;
    bound.fn = inner ? fn : NULL;
    bound.ctx = inner ? ctx : NULL;
}

/* layernorm_backward's 11 accesses are the most any op makes */
enum { MAX_ACCESSES = 12 };

typedef struct Accesses {
    KernelAccess a[MAX_ACCESSES];
    int n;
} Accesses;

/* The bytes of n elements: of an fp32 tensor (kernels.h's `float *`), and of a tensor of the
 * compute dtype t (its `void *`: 2 bytes an element in bf16 and fp16). A stride counts elements
 * of its tensor, so it scales the same way. */
static size_t floats(size_t n) {
    return n * sizeof(float);
}

static size_t elems(DType t, size_t n) {
    return n * dtype_size(t);
}

/* count blocks of `bytes`, `stride` apart; blocks that meet or overlap become one range */
static void blocks(Accesses *l, const void *p, size_t bytes, size_t count, size_t stride,
                   int write) {
    if (!p || bytes == 0 || count == 0) return;
    if (count == 1 || stride <= bytes) {
        bytes += (count - 1) * stride;
        count = 1;
        stride = 0;
    }
    if (l->n == MAX_ACCESSES) { /* only a wrapper below could get here */
        fprintf(stderr, "kernels_checked: more than %d accesses in one op\n", MAX_ACCESSES);
        abort();
    }
    l->a[l->n++] =
        (KernelAccess){.p = p, .bytes = bytes, .count = count, .stride = stride, .write = write};
}

static void reads(Accesses *l, const void *p, size_t bytes) {
    blocks(l, p, bytes, 1, 0, 0);
}

static void writes(Accesses *l, const void *p, size_t bytes) {
    blocks(l, p, bytes, 1, 0, 1);
}

/* "+=" and in-place arguments: read, then written */
static void updates(Accesses *l, const void *p, size_t bytes) {
    reads(l, p, bytes);
    writes(l, p, bytes);
}

/* Hands op's n accesses to the thread's callback and returns the table that runs it. */
static const Kernels *report_array(const char *op, const KernelAccess *a, int n) {
    if (!bound.inner) {
        fprintf(stderr,
                "kernels_checked: %s called on a thread with no table bound "
                "(kernels_checked_bind)\n",
                op);
        abort();
    }
    bound.fn(bound.ctx, op, a, n);
    return bound.inner;
}

static const Kernels *report(const char *op, const Accesses *l) {
    return report_array(op, l->a, l->n);
}

/* ---- the elementwise ops, Adam, the toy; each wrapper is named as its entry (__func__ is the
 * op's name) ---- */

static void cast(void *dst, DType dst_type, const void *src, DType src_type, size_t n) {
    Accesses l = {0};
    writes(&l, dst, n * dtype_size(dst_type));
    reads(&l, src, n * dtype_size(src_type));
    report(__func__, &l)->cast(dst, dst_type, src, src_type, n);
}

static void zero(float *x, size_t n) {
    Accesses l = {0};
    writes(&l, x, floats(n));
    report(__func__, &l)->zero(x, n);
}

static void copy_bytes(void *dst, const void *src, size_t bytes) {
    Accesses l = {0};
    writes(&l, dst, bytes);
    reads(&l, src, bytes);
    report(__func__, &l)->copy_bytes(dst, src, bytes);
}

static void zero_bytes(void *dst, size_t bytes) {
    Accesses l = {0};
    writes(&l, dst, bytes);
    report(__func__, &l)->zero_bytes(dst, bytes);
}

/* Two accesses a span, more than Accesses holds: reported from an array of their own. A span
 * with no elements and no padding touches nothing. */
static void copy_spans(void *dst, DType dst_type, const void *src, DType src_type,
                       const CopySpan *spans, size_t nspans) {
    const size_t ds = dtype_size(dst_type), ss = dtype_size(src_type);
    KernelAccess *a = malloc((2 * nspans + 1) * sizeof *a);
    if (!a) {
        fprintf(stderr, "kernels_checked: out of memory checking copy_spans\n");
        abort();
    }
    int n = 0;
    for (size_t i = 0; i < nspans; i++) {
        const CopySpan *c = &spans[i];
        if (c->n + c->pad)
            a[n++] = (KernelAccess){.p = (char *)dst + c->dst_at * ds,
                                    .bytes = (c->n + c->pad) * ds,
                                    .count = 1,
                                    .write = 1};
        if (c->n)
            a[n++] = (KernelAccess){
                .p = (const char *)src + c->src_at * ss, .bytes = c->n * ss, .count = 1};
    }
    const Kernels *inner = report_array(__func__, a, n);
    free(a);
    inner->copy_spans(dst, dst_type, src, src_type, spans, nspans);
}

static void scale(float *x, float s, size_t n) {
    Accesses l = {0};
    updates(&l, x, floats(n));
    report(__func__, &l)->scale(x, s, n);
}

static void accumulate(float *y, const float *x, size_t n) {
    Accesses l = {0};
    updates(&l, y, floats(n));
    reads(&l, x, floats(n));
    report(__func__, &l)->accumulate(y, x, n);
}

static double sum_squares(const float *x, size_t n) {
    Accesses l = {0};
    reads(&l, x, floats(n));
    return report(__func__, &l)->sum_squares(x, n);
}

/* all of x, though kernels_cpu stops at the first non-finite value: which one is not known
 * before the op runs (and the GPU's reads them all) */
static int all_finite(const float *x, size_t n) {
    Accesses l = {0};
    reads(&l, x, floats(n));
    return report(__func__, &l)->all_finite(x, n);
}

/* h is host memory: its scalars reach a GPU as the kernel's arguments */
static void adam_step(float *param, const float *grad, float *m, float *v, size_t n,
                      const AdamHyper *h, long step) {
    Accesses l = {0};
    updates(&l, param, floats(n));
    reads(&l, grad, floats(n));
    updates(&l, m, floats(n));
    updates(&l, v, floats(n));
    report(__func__, &l)->adam_step(param, grad, m, v, n, h, step);
}

/* w is read even for n == 0: kernels_cpu loads it first */
static void toy_forward(DType t, const void *w, const void *x, void *y, size_t n) {
    Accesses l = {0};
    reads(&l, w, elems(t, 3));
    reads(&l, x, elems(t, n));
    writes(&l, y, elems(t, n));
    report(__func__, &l)->toy_forward(t, w, x, y, n);
}

static void toy_backward(DType t, const void *w, const void *x, const void *dy, void *dx,
                         float dw[3], size_t n) {
    Accesses l = {0};
    reads(&l, w, elems(t, 3));
    reads(&l, x, elems(t, n));
    reads(&l, dy, elems(t, n));
    writes(&l, dx, elems(t, n));
    updates(&l, dw, floats(3));
    report(__func__, &l)->toy_backward(t, w, x, dy, dx, dw, n);
}

static float mse_loss(DType t, const void *y, const float *target, void *dy, size_t n) {
    Accesses l = {0};
    reads(&l, y, elems(t, n));
    reads(&l, target, floats(n));
    writes(&l, dy, elems(t, n));
    return report(__func__, &l)->mse_loss(t, y, target, dy, n);
}

/* ---- the ViT's ops ---- */

static void linear_forward(DType t, void *out, const void *in, const void *w, const void *b,
                           size_t M, size_t K, size_t N) {
    Accesses l = {0};
    if (M > 0 && N > 0) { /* with K == 0, out is b (or zeros): in and w are empty */
        writes(&l, out, elems(t, M * N));
        reads(&l, in, elems(t, M * K));
        reads(&l, w, elems(t, N * K));
        reads(&l, b, elems(t, N));
    }
    report(__func__, &l)->linear_forward(t, out, in, w, b, M, K, N);
}

/* din = dout w needs w; dw needs in (and nothing when N == 0); dout is read by din's product
 * (K > 0), dw's (K > 0) or db's column sums. */
static void linear_backward(DType t, void *din, float *dw, float *db, const void *dout,
                            const void *in, const void *w, size_t M, size_t K, size_t N) {
    Accesses l = {0};
    if (M > 0) {
        writes(&l, din, elems(t, M * K));
        updates(&l, dw, floats(N * K));
        updates(&l, db, floats(N));
        if (K > 0 || db) reads(&l, dout, elems(t, M * N));
        if (N > 0) reads(&l, in, elems(t, M * K));
        if (din) reads(&l, w, elems(t, N * K));
    }
    report(__func__, &l)->linear_backward(t, din, dw, db, dout, in, w, M, K, N);
}

/* db is "+= 0" with no rows; dout's rows are `cols` of every `stride` elements */
static void bias_grad(DType t, float *db, const void *dout, size_t rows, size_t cols,
                      size_t stride) {
    Accesses l = {0};
    updates(&l, db, floats(cols));
    blocks(&l, dout, elems(t, cols), rows, elems(t, stride), 0);
    report(__func__, &l)->bias_grad(t, db, dout, rows, cols, stride);
}

static void layernorm_forward(DType t, void *out, float *mean, float *rstd, const void *in,
                              const void *w, const void *b, size_t M, size_t C, float eps) {
    Accesses l = {0};
    if (M > 0 && C > 0) {
        writes(&l, out, elems(t, M * C));
        writes(&l, mean, floats(M));
        writes(&l, rstd, floats(M));
        reads(&l, in, elems(t, M * C));
        reads(&l, w, elems(t, C));
        reads(&l, b, elems(t, C));
    }
    report(__func__, &l)->layernorm_forward(t, out, mean, rstd, in, w, b, M, C, eps);
}

static void layernorm_backward(DType t, void *din, float *dw, float *db, const void *dout,
                               const void *in, const float *mean, const float *rstd, const void *w,
                               size_t M, size_t C) {
    Accesses l = {0};
    if (M > 0 && C > 0) {
        updates(&l, din, elems(t, M * C));
        updates(&l, dw, floats(C));
        updates(&l, db, floats(C));
        reads(&l, dout, elems(t, M * C));
        reads(&l, in, elems(t, M * C));
        reads(&l, mean, floats(M));
        reads(&l, rstd, floats(M));
        reads(&l, w, elems(t, C));
    }
    report(__func__, &l)->layernorm_backward(t, din, dw, db, dout, in, mean, rstd, w, M, C);
}

static void gelu_forward(DType t, void *out, const void *in, size_t n) {
    Accesses l = {0};
    writes(&l, out, elems(t, n));
    reads(&l, in, elems(t, n));
    report(__func__, &l)->gelu_forward(t, out, in, n);
}

static void gelu_backward(DType t, void *din, const void *in, const void *dout, size_t n) {
    Accesses l = {0};
    writes(&l, din, elems(t, n));
    reads(&l, in, elems(t, n));
    reads(&l, dout, elems(t, n));
    report(__func__, &l)->gelu_backward(t, din, in, dout, n);
}

/* qkv-shaped [rows, 3C] (qkv, dqkv): all of it, or with C not a multiple of heads, the `used`
 * leading columns of each of q, k and v. */
static void qkv_rows(Accesses *l, DType t, const void *qkv, size_t rows, size_t C, size_t used,
                     int write) {
    if (used == C) {
        blocks(l, qkv, elems(t, rows * 3 * C), 1, 0, write);
        return;
    }
    for (size_t part = 0; part < 3; part++)
        blocks(l, (const char *)qkv + elems(t, part * C), elems(t, used), rows, elems(t, 3 * C),
               write);
}

/* An attention forward's accesses, causal or not (the mask changes none of them). */
static void attention_forward_accesses(Accesses *l, DType t, void *out, void *probs,
                                       const void *qkv, size_t B, size_t T, size_t C,
                                       size_t heads) {
    if (B == 0 || T == 0 || C == 0 || heads == 0) return;
    const size_t used = heads * (C / heads);
    blocks(l, out, elems(t, used), B * T, elems(t, C), 1);
    writes(l, probs, elems(t, B * heads * T * T));
    qkv_rows(l, t, qkv, B * T, C, used, 0);
}

static void attention_forward(DType t, void *out, void *probs, const void *qkv, size_t B, size_t T,
                              size_t C, size_t heads) {
    Accesses l = {0};
    attention_forward_accesses(&l, t, out, probs, qkv, B, T, C, heads);
    report(__func__, &l)->attention_forward(t, out, probs, qkv, B, T, C, heads);
}

static void attention_backward(DType t, void *dqkv, const void *dout, const void *qkv,
                               const void *probs, size_t B, size_t T, size_t C, size_t heads) {
    Accesses l = {0};
    if (B > 0 && T > 0 && C > 0 && heads > 0) {
        const size_t used = heads * (C / heads);
        qkv_rows(&l, t, dqkv, B * T, C, used, 1);
        blocks(&l, dout, elems(t, used), B * T, elems(t, C), 0);
        qkv_rows(&l, t, qkv, B * T, C, used, 0);
        reads(&l, probs, elems(t, B * heads * T * T));
    }
    report(__func__, &l)->attention_backward(t, dqkv, dout, qkv, probs, B, T, C, heads);
}

static void patchify(DType t, void *patches, const void *images, size_t B, size_t S, size_t P) {
    Accesses l = {0};
    const size_t G = P > 0 ? S / P : 0; /* patches per side */
    if (G > 0) {
        writes(&l, patches, elems(t, B * G * G * P * P));
        reads(&l, images, elems(t, B * S * S));
    }
    report(__func__, &l)->patchify(t, patches, images, B, S, P);
}

static void embed_forward(DType t, void *x, const void *patch_out, const void *cls, const void *pos,
                          size_t B, size_t T, size_t C) {
    Accesses l = {0};
    if (B > 0 && T > 0) {
        writes(&l, x, elems(t, B * T * C));
        reads(&l, patch_out, elems(t, B * (T - 1) * C));
        reads(&l, cls, elems(t, C));
        reads(&l, pos, elems(t, T * C));
    }
    report(__func__, &l)->embed_forward(t, x, patch_out, cls, pos, B, T, C);
}

/* dcls and dpos are "+= 0" with no samples */
static void embed_backward(DType t, float *dcls, float *dpos, void *dpatch_out, const void *dx,
                           size_t B, size_t T, size_t C) {
    Accesses l = {0};
    if (T > 0) {
        updates(&l, dcls, floats(C));
        updates(&l, dpos, floats(T * C));
        writes(&l, dpatch_out, elems(t, B * (T - 1) * C));
        reads(&l, dx, elems(t, B * T * C));
    }
    report(__func__, &l)->embed_backward(t, dcls, dpos, dpatch_out, dx, B, T, C);
}

/* row 0 of each sample: C elements of every T * C */
static void class_token_select(DType t, void *out, const void *x, size_t B, size_t T, size_t C) {
    Accesses l = {0};
    writes(&l, out, elems(t, B * C));
    blocks(&l, x, elems(t, C), B, elems(t, T * C), 0);
    report(__func__, &l)->class_token_select(t, out, x, B, T, C);
}

static void class_token_select_backward(DType t, void *dx, const void *dout, size_t B, size_t T,
                                        size_t C) {
    Accesses l = {0};
    blocks(&l, dx, elems(t, C), B, elems(t, T * C), 0);
    blocks(&l, dx, elems(t, C), B, elems(t, T * C), 1);
    reads(&l, dout, elems(t, B * C));
    report(__func__, &l)->class_token_select_backward(t, dx, dout, B, T, C);
}

static float cross_entropy(DType t, void *dlogits, const void *logits, const int32_t *labels,
                           size_t B, size_t classes, float grad_scale) {
    Accesses l = {0};
    if (B > 0 && classes > 0) {
        writes(&l, dlogits, elems(t, B * classes));
        reads(&l, logits, elems(t, B * classes));
        reads(&l, labels, B * sizeof *labels);
    }
    return report(__func__, &l)->cross_entropy(t, dlogits, logits, labels, B, classes, grad_scale);
}

static size_t count_correct(DType t, const void *logits, const int32_t *labels, size_t B,
                            size_t classes) {
    Accesses l = {0};
    if (classes > 0) {
        reads(&l, logits, elems(t, B * classes));
        reads(&l, labels, B * sizeof *labels);
    }
    return report(__func__, &l)->count_correct(t, logits, labels, B, classes);
}

static void add(DType t, void *out, const void *a, const void *b, size_t n) {
    Accesses l = {0};
    writes(&l, out, elems(t, n));
    reads(&l, a, elems(t, n));
    reads(&l, b, elems(t, n));
    report(__func__, &l)->add(t, out, a, b, n);
}

/* ---- the language model's ops ---- */

static void causal_attention_forward(DType t, void *out, void *probs, const void *qkv, size_t B,
                                     size_t T, size_t C, size_t heads) {
    Accesses l = {0};
    attention_forward_accesses(&l, t, out, probs, qkv, B, T, C, heads);
    report(__func__, &l)->causal_attention_forward(t, out, probs, qkv, B, T, C, heads);
}

/* all of wte: which rows the ids pick is not known before the op runs */
static void token_embed_forward(DType t, void *x, const int32_t *tokens, const void *wte,
                                const void *wpe, size_t B, size_t T, size_t C, size_t V) {
    Accesses l = {0};
    if (B > 0 && T > 0 && C > 0) {
        writes(&l, x, elems(t, B * T * C));
        reads(&l, tokens, B * T * sizeof *tokens);
        reads(&l, wte, elems(t, V * C));
        reads(&l, wpe, elems(t, T * C));
    }
    report(__func__, &l)->token_embed_forward(t, x, tokens, wte, wpe, B, T, C, V);
}

/* all of dwte, as the forward's wte */
static void token_embed_backward(DType t, float *dwte, float *dwpe, const int32_t *tokens,
                                 const void *dx, size_t B, size_t T, size_t C, size_t V) {
    Accesses l = {0};
    if (B > 0 && T > 0 && C > 0) {
        updates(&l, dwte, floats(V * C));
        updates(&l, dwpe, floats(T * C));
        reads(&l, tokens, B * T * sizeof *tokens);
        reads(&l, dx, elems(t, B * T * C));
    }
    report(__func__, &l)->token_embed_backward(t, dwte, dwpe, tokens, dx, B, T, C, V);
}

/* ---- the fused ops ---- */

static void bias_gelu_forward(DType t, void *out, const void *pre, const void *b, size_t M,
                              size_t N) {
    Accesses l = {0};
    if (M > 0 && N > 0) {
        writes(&l, out, elems(t, M * N));
        reads(&l, pre, elems(t, M * N));
        reads(&l, b, elems(t, N));
    }
    report(__func__, &l)->bias_gelu_forward(t, out, pre, b, M, N);
}

static void bias_gelu_backward(DType t, void *dpre, float *db, const void *dout, const void *pre,
                               const void *b, size_t M, size_t N) {
    Accesses l = {0};
    if (M > 0 && N > 0) {
        writes(&l, dpre, elems(t, M * N));
        updates(&l, db, floats(N));
        reads(&l, dout, elems(t, M * N));
        reads(&l, pre, elems(t, M * N));
        reads(&l, b, elems(t, N));
    }
    report(__func__, &l)->bias_gelu_backward(t, dpre, db, dout, pre, b, M, N);
}

/* LayerNorm's reads of sum are of the op's own writes: only x and y are read */
static void residual_layernorm_forward(DType t, void *sum, void *out, float *mean, float *rstd,
                                       const void *x, const void *y, const void *w, const void *b,
                                       size_t M, size_t C, float eps) {
    Accesses l = {0};
    if (M > 0 && C > 0) {
        writes(&l, sum, elems(t, M * C));
        writes(&l, out, elems(t, M * C));
        writes(&l, mean, floats(M));
        writes(&l, rstd, floats(M));
        reads(&l, x, elems(t, M * C));
        reads(&l, y, elems(t, M * C));
        reads(&l, w, elems(t, C));
        reads(&l, b, elems(t, C));
    }
    report(__func__, &l)
        ->residual_layernorm_forward(t, sum, out, mean, rstd, x, y, w, b, M, C, eps);
}

/* ---- the Llama-shaped block's ops and attention over strided operands ---- */

static void rmsnorm_forward(DType t, void *out, float *rstd, const void *in, const void *w,
                            size_t M, size_t C, float eps) {
    Accesses l = {0};
    if (M > 0 && C > 0) {
        writes(&l, out, elems(t, M * C));
        writes(&l, rstd, floats(M));
        reads(&l, in, elems(t, M * C));
        reads(&l, w, elems(t, C));
    }
    report(__func__, &l)->rmsnorm_forward(t, out, rstd, in, w, M, C, eps);
}

static void rmsnorm_backward(DType t, void *din, float *dw, const void *dout, const void *in,
                             const float *rstd, const void *w, size_t M, size_t C) {
    Accesses l = {0};
    if (M > 0 && C > 0) {
        updates(&l, din, elems(t, M * C));
        updates(&l, dw, floats(C));
        reads(&l, dout, elems(t, M * C));
        reads(&l, in, elems(t, M * C));
        reads(&l, rstd, floats(M));
        reads(&l, w, elems(t, C));
    }
    report(__func__, &l)->rmsnorm_backward(t, din, dw, dout, in, rstd, w, M, C);
}

static void swiglu_forward(DType t, void *out, const void *gate, const void *up, size_t n) {
    Accesses l = {0};
    writes(&l, out, elems(t, n));
    reads(&l, gate, elems(t, n));
    reads(&l, up, elems(t, n));
    report(__func__, &l)->swiglu_forward(t, out, gate, up, n);
}

static void swiglu_backward(DType t, void *dgate, void *dup, const void *dout, const void *gate,
                            const void *up, size_t n) {
    Accesses l = {0};
    reads(&l, dout, elems(t, n));
    writes(&l, dgate, elems(t, n));
    writes(&l, dup, elems(t, n));
    reads(&l, gate, elems(t, n));
    reads(&l, up, elems(t, n));
    report(__func__, &l)->swiglu_backward(t, dgate, dup, dout, gate, up, n);
}

static void rope_forward(DType t, void *x, size_t B, size_t T, size_t heads, size_t D,
                         float theta) {
    Accesses l = {0};
    if (D >= 2) updates(&l, x, elems(t, B * T * heads * D));
    report(__func__, &l)->rope_forward(t, x, B, T, heads, D, theta);
}

static void rope_backward(DType t, void *dx, size_t B, size_t T, size_t heads, size_t D,
                          float theta) {
    Accesses l = {0};
    if (D >= 2) updates(&l, dx, elems(t, B * T * heads * D));
    report(__func__, &l)->rope_backward(t, dx, B, T, heads, D, theta);
}

static int attn_empty(const AttnShape *s) {
    return s->B == 0 || s->T == 0 || s->heads == 0 || s->kv_heads == 0 || s->head_dim == 0;
}

/* q's rows (or dq's), and k's or v's: the heads' columns of each row, rows a stride apart (the
 * strides count elements of t). A K,V head shared by a group is added into by the op itself:
 * reported as written. */
static void q_rows(Accesses *l, DType t, const void *q, const AttnShape *s, int write) {
    blocks(l, q, elems(t, s->heads * s->head_dim), s->B * s->T, elems(t, s->q_stride), write);
}

static void kv_rows(Accesses *l, DType t, const void *kv, const AttnShape *s, int write) {
    blocks(l, kv, elems(t, s->kv_heads * s->head_dim), s->B * s->T, elems(t, s->kv_stride), write);
}

static void dense_rows(Accesses *l, DType t, const void *x, const AttnShape *s, int write) {
    blocks(l, x, elems(t, s->B * s->T * s->heads * s->head_dim), 1, 0, write);
}

/* What every attention op reads: q's rows, and k's and v's of the KV heads. */
static void qkv_reads(Accesses *l, DType t, const void *q, const void *k, const void *v,
                      const AttnShape *s) {
    q_rows(l, t, q, s, 0);
    kv_rows(l, t, k, s, 0);
    kv_rows(l, t, v, s, 0);
}

/* What every attention backward writes: dq's rows, and dk's and dv's. */
static void dqkv_writes(Accesses *l, DType t, void *dq, void *dk, void *dv, const AttnShape *s) {
    q_rows(l, t, dq, s, 1);
    kv_rows(l, t, dk, s, 1);
    kv_rows(l, t, dv, s, 1);
}

static void gqa_attention_forward(DType t, void *out, void *probs, const void *q, const void *k,
                                  const void *v, const AttnShape *s) {
    Accesses l = {0};
    if (!attn_empty(s)) {
        dense_rows(&l, t, out, s, 1);
        writes(&l, probs, elems(t, s->B * s->heads * s->T * s->T));
        qkv_reads(&l, t, q, k, v, s);
    }
    report(__func__, &l)->gqa_attention_forward(t, out, probs, q, k, v, s);
}

static void gqa_attention_backward(DType t, void *dq, void *dk, void *dv, const void *dout,
                                   const void *q, const void *k, const void *v, const void *probs,
                                   const AttnShape *s) {
    Accesses l = {0};
    if (!attn_empty(s)) {
        dqkv_writes(&l, t, dq, dk, dv, s);
        dense_rows(&l, t, dout, s, 0);
        qkv_reads(&l, t, q, k, v, s);
        reads(&l, probs, elems(t, s->B * s->heads * s->T * s->T));
    }
    report(__func__, &l)->gqa_attention_backward(t, dq, dk, dv, dout, q, k, v, probs, s);
}

static void flash_attention_forward(DType t, void *out, float *lse, const void *q, const void *k,
                                    const void *v, const AttnShape *s) {
    Accesses l = {0};
    if (!attn_empty(s)) {
        dense_rows(&l, t, out, s, 1);
        writes(&l, lse, floats(s->B * s->heads * s->T));
        qkv_reads(&l, t, q, k, v, s);
    }
    report(__func__, &l)->flash_attention_forward(t, out, lse, q, k, v, s);
}

static void flash_attention_backward(DType t, void *dq, void *dk, void *dv, const void *dout,
                                     const void *q, const void *k, const void *v, const void *out,
                                     const float *lse, float *work, const AttnShape *s) {
    Accesses l = {0};
    if (!attn_empty(s)) {
        dqkv_writes(&l, t, dq, dk, dv, s);
        dense_rows(&l, t, dout, s, 0);
        qkv_reads(&l, t, q, k, v, s);
        dense_rows(&l, t, out, s, 0);
        reads(&l, lse, floats(s->B * s->heads * s->T));
        writes(&l, work, floats(s->T * s->T));
    }
    report(__func__, &l)->flash_attention_backward(t, dq, dk, dv, dout, q, k, v, out, lse, work, s);
}

static void log_softmax(float *logp, const float *x, size_t rows, size_t classes) {
    Accesses l = {0};
    writes(&l, logp, floats(rows * classes));
    reads(&l, x, floats(rows * classes));
    report(__func__, &l)->log_softmax(logp, x, rows, classes);
}

static float nll_loss(float *dlogp, const float *logp, const int32_t *labels, size_t rows,
                      size_t classes, float grad_scale) {
    Accesses l = {0};
    if (rows > 0 && classes > 0) {
        writes(&l, dlogp, floats(rows * classes));
        reads(&l, logp, floats(rows * classes));
        reads(&l, labels, rows * sizeof *labels);
    }
    return report(__func__, &l)->nll_loss(dlogp, logp, labels, rows, classes, grad_scale);
}

static void log_softmax_backward(float *dx, const float *dlogp, const float *logp, size_t rows,
                                 size_t classes) {
    Accesses l = {0};
    writes(&l, dx, floats(rows * classes));
    reads(&l, dlogp, floats(rows * classes));
    reads(&l, logp, floats(rows * classes));
    report(__func__, &l)->log_softmax_backward(dx, dlogp, logp, rows, classes);
}

/* Every dtype and no limits: t and T pass through to the bound table (kernels_cpu or
 * kernels_none, neither of which limits T), whose own .dtypes say what it computes in. */
#define SAME_NAME(op) .op = op,
const Kernels kernels_checked = {.name = "checked",
                                 .dtypes = KERNEL_ALL_DTYPES,
                                 .max_tokens = 0,
                                 .max_flash_tokens = 0,
                                 .flash_uses_work = 1,
                                 KERNEL_OPS(SAME_NAME)};
