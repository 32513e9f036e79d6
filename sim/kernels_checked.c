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

static size_t floats(size_t n) {
    return n * sizeof(float);
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

/* Hands op's accesses to the thread's callback and returns the table that runs it. */
static const Kernels *report(const char *op, const Accesses *l) {
    if (!bound.inner) {
        fprintf(stderr,
                "kernels_checked: %s called on a thread with no table bound "
                "(kernels_checked_bind)\n",
                op);
        abort();
    }
    bound.fn(bound.ctx, op, l->a, l->n);
    return bound.inner;
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
static void toy_forward(const float w[3], const float *x, float *y, size_t n) {
    Accesses l = {0};
    reads(&l, w, floats(3));
    reads(&l, x, floats(n));
    writes(&l, y, floats(n));
    report(__func__, &l)->toy_forward(w, x, y, n);
}

static void toy_backward(const float w[3], const float *x, const float *dy, float *dx, float dw[3],
                         size_t n) {
    Accesses l = {0};
    reads(&l, w, floats(3));
    reads(&l, x, floats(n));
    reads(&l, dy, floats(n));
    writes(&l, dx, floats(n));
    updates(&l, dw, floats(3));
    report(__func__, &l)->toy_backward(w, x, dy, dx, dw, n);
}

static float mse_loss(const float *y, const float *target, float *dy, size_t n) {
    Accesses l = {0};
    reads(&l, y, floats(n));
    reads(&l, target, floats(n));
    writes(&l, dy, floats(n));
    return report(__func__, &l)->mse_loss(y, target, dy, n);
}

/* ---- the ViT's ops ---- */

static void linear_forward(float *out, const float *in, const float *w, const float *b, size_t M,
                           size_t K, size_t N) {
    Accesses l = {0};
    if (M > 0 && N > 0) { /* with K == 0, out is b (or zeros): in and w are empty */
        writes(&l, out, floats(M * N));
        reads(&l, in, floats(M * K));
        reads(&l, w, floats(N * K));
        reads(&l, b, floats(N));
    }
    report(__func__, &l)->linear_forward(out, in, w, b, M, K, N);
}

/* din = dout w needs w; dw needs in (and nothing when N == 0); dout is read by din's product
 * (K > 0), dw's (K > 0) or db's column sums. */
static void linear_backward(float *din, float *dw, float *db, const float *dout, const float *in,
                            const float *w, size_t M, size_t K, size_t N) {
    Accesses l = {0};
    if (M > 0) {
        writes(&l, din, floats(M * K));
        updates(&l, dw, floats(N * K));
        updates(&l, db, floats(N));
        if (K > 0 || db) reads(&l, dout, floats(M * N));
        if (N > 0) reads(&l, in, floats(M * K));
        if (din) reads(&l, w, floats(N * K));
    }
    report(__func__, &l)->linear_backward(din, dw, db, dout, in, w, M, K, N);
}

/* db is "+= 0" with no rows; dout's rows are `cols` of every `stride` floats */
static void bias_grad(float *db, const float *dout, size_t rows, size_t cols, size_t stride) {
    Accesses l = {0};
    updates(&l, db, floats(cols));
    blocks(&l, dout, floats(cols), rows, floats(stride), 0);
    report(__func__, &l)->bias_grad(db, dout, rows, cols, stride);
}

static void layernorm_forward(float *out, float *mean, float *rstd, const float *in, const float *w,
                              const float *b, size_t M, size_t C, float eps) {
    Accesses l = {0};
    if (M > 0 && C > 0) {
        writes(&l, out, floats(M * C));
        writes(&l, mean, floats(M));
        writes(&l, rstd, floats(M));
        reads(&l, in, floats(M * C));
        reads(&l, w, floats(C));
        reads(&l, b, floats(C));
    }
    report(__func__, &l)->layernorm_forward(out, mean, rstd, in, w, b, M, C, eps);
}

static void layernorm_backward(float *din, float *dw, float *db, const float *dout, const float *in,
                               const float *mean, const float *rstd, const float *w, size_t M,
                               size_t C) {
    Accesses l = {0};
    if (M > 0 && C > 0) {
        updates(&l, din, floats(M * C));
        updates(&l, dw, floats(C));
        updates(&l, db, floats(C));
        reads(&l, dout, floats(M * C));
        reads(&l, in, floats(M * C));
        reads(&l, mean, floats(M));
        reads(&l, rstd, floats(M));
        reads(&l, w, floats(C));
    }
    report(__func__, &l)->layernorm_backward(din, dw, db, dout, in, mean, rstd, w, M, C);
}

static void gelu_forward(float *out, const float *in, size_t n) {
    Accesses l = {0};
    writes(&l, out, floats(n));
    reads(&l, in, floats(n));
    report(__func__, &l)->gelu_forward(out, in, n);
}

static void gelu_backward(float *din, const float *in, const float *dout, size_t n) {
    Accesses l = {0};
    writes(&l, din, floats(n));
    reads(&l, in, floats(n));
    reads(&l, dout, floats(n));
    report(__func__, &l)->gelu_backward(din, in, dout, n);
}

/* qkv-shaped [rows, 3C] (qkv, dqkv): all of it, or with C not a multiple of heads, the `used`
 * leading columns of each of q, k and v. */
static void qkv_rows(Accesses *l, const float *qkv, size_t rows, size_t C, size_t used, int write) {
    if (used == C) {
        blocks(l, qkv, floats(rows * 3 * C), 1, 0, write);
        return;
    }
    for (size_t part = 0; part < 3; part++)
        blocks(l, qkv + part * C, floats(used), rows, floats(3 * C), write);
}

/* An attention forward's accesses, causal or not (the mask changes none of them). */
static void attention_forward_accesses(Accesses *l, float *out, float *probs, const float *qkv,
                                       size_t B, size_t T, size_t C, size_t heads) {
    if (B == 0 || T == 0 || C == 0 || heads == 0) return;
    const size_t used = heads * (C / heads);
    blocks(l, out, floats(used), B * T, floats(C), 1);
    writes(l, probs, floats(B * heads * T * T));
    qkv_rows(l, qkv, B * T, C, used, 0);
}

static void attention_forward(float *out, float *probs, const float *qkv, size_t B, size_t T,
                              size_t C, size_t heads) {
    Accesses l = {0};
    attention_forward_accesses(&l, out, probs, qkv, B, T, C, heads);
    report(__func__, &l)->attention_forward(out, probs, qkv, B, T, C, heads);
}

static void attention_backward(float *dqkv, const float *dout, const float *qkv, const float *probs,
                               size_t B, size_t T, size_t C, size_t heads) {
    Accesses l = {0};
    if (B > 0 && T > 0 && C > 0 && heads > 0) {
        const size_t used = heads * (C / heads);
        qkv_rows(&l, dqkv, B * T, C, used, 1);
        blocks(&l, dout, floats(used), B * T, floats(C), 0);
        qkv_rows(&l, qkv, B * T, C, used, 0);
        reads(&l, probs, floats(B * heads * T * T));
    }
    report(__func__, &l)->attention_backward(dqkv, dout, qkv, probs, B, T, C, heads);
}

static void patchify(float *patches, const float *images, size_t B, size_t S, size_t P) {
    Accesses l = {0};
    const size_t G = P > 0 ? S / P : 0; /* patches per side */
    if (G > 0) {
        writes(&l, patches, floats(B * G * G * P * P));
        reads(&l, images, floats(B * S * S));
    }
    report(__func__, &l)->patchify(patches, images, B, S, P);
}

static void embed_forward(float *x, const float *patch_out, const float *cls, const float *pos,
                          size_t B, size_t T, size_t C) {
    Accesses l = {0};
    if (B > 0 && T > 0) {
        writes(&l, x, floats(B * T * C));
        reads(&l, patch_out, floats(B * (T - 1) * C));
        reads(&l, cls, floats(C));
        reads(&l, pos, floats(T * C));
    }
    report(__func__, &l)->embed_forward(x, patch_out, cls, pos, B, T, C);
}

/* dcls and dpos are "+= 0" with no samples */
static void embed_backward(float *dcls, float *dpos, float *dpatch_out, const float *dx, size_t B,
                           size_t T, size_t C) {
    Accesses l = {0};
    if (T > 0) {
        updates(&l, dcls, floats(C));
        updates(&l, dpos, floats(T * C));
        writes(&l, dpatch_out, floats(B * (T - 1) * C));
        reads(&l, dx, floats(B * T * C));
    }
    report(__func__, &l)->embed_backward(dcls, dpos, dpatch_out, dx, B, T, C);
}

/* row 0 of each sample: C floats of every T * C */
static void class_token_select(float *out, const float *x, size_t B, size_t T, size_t C) {
    Accesses l = {0};
    writes(&l, out, floats(B * C));
    blocks(&l, x, floats(C), B, floats(T * C), 0);
    report(__func__, &l)->class_token_select(out, x, B, T, C);
}

static void class_token_select_backward(float *dx, const float *dout, size_t B, size_t T,
                                        size_t C) {
    Accesses l = {0};
    blocks(&l, dx, floats(C), B, floats(T * C), 0);
    blocks(&l, dx, floats(C), B, floats(T * C), 1);
    reads(&l, dout, floats(B * C));
    report(__func__, &l)->class_token_select_backward(dx, dout, B, T, C);
}

static float cross_entropy(float *dlogits, const float *logits, const int32_t *labels, size_t B,
                           size_t classes, float grad_scale) {
    Accesses l = {0};
    if (B > 0 && classes > 0) {
        writes(&l, dlogits, floats(B * classes));
        reads(&l, logits, floats(B * classes));
        reads(&l, labels, B * sizeof *labels);
    }
    return report(__func__, &l)->cross_entropy(dlogits, logits, labels, B, classes, grad_scale);
}

static size_t count_correct(const float *logits, const int32_t *labels, size_t B, size_t classes) {
    Accesses l = {0};
    if (classes > 0) {
        reads(&l, logits, floats(B * classes));
        reads(&l, labels, B * sizeof *labels);
    }
    return report(__func__, &l)->count_correct(logits, labels, B, classes);
}

static void add(float *out, const float *a, const float *b, size_t n) {
    Accesses l = {0};
    writes(&l, out, floats(n));
    reads(&l, a, floats(n));
    reads(&l, b, floats(n));
    report(__func__, &l)->add(out, a, b, n);
}

/* ---- the language model's ops ---- */

static void causal_attention_forward(float *out, float *probs, const float *qkv, size_t B, size_t T,
                                     size_t C, size_t heads) {
    Accesses l = {0};
    attention_forward_accesses(&l, out, probs, qkv, B, T, C, heads);
    report(__func__, &l)->causal_attention_forward(out, probs, qkv, B, T, C, heads);
}

/* all of wte: which rows the ids pick is not known before the op runs */
static void token_embed_forward(float *x, const int32_t *tokens, const float *wte, const float *wpe,
                                size_t B, size_t T, size_t C, size_t V) {
    Accesses l = {0};
    if (B > 0 && T > 0 && C > 0) {
        writes(&l, x, floats(B * T * C));
        reads(&l, tokens, B * T * sizeof *tokens);
        reads(&l, wte, floats(V * C));
        reads(&l, wpe, floats(T * C));
    }
    report(__func__, &l)->token_embed_forward(x, tokens, wte, wpe, B, T, C, V);
}

/* all of dwte, as the forward's wte */
static void token_embed_backward(float *dwte, float *dwpe, const int32_t *tokens, const float *dx,
                                 size_t B, size_t T, size_t C, size_t V) {
    Accesses l = {0};
    if (B > 0 && T > 0 && C > 0) {
        updates(&l, dwte, floats(V * C));
        updates(&l, dwpe, floats(T * C));
        reads(&l, tokens, B * T * sizeof *tokens);
        reads(&l, dx, floats(B * T * C));
    }
    report(__func__, &l)->token_embed_backward(dwte, dwpe, tokens, dx, B, T, C, V);
}

/* ---- the fused ops ---- */

static void bias_gelu_forward(float *out, const float *pre, const float *b, size_t M, size_t N) {
    Accesses l = {0};
    if (M > 0 && N > 0) {
        writes(&l, out, floats(M * N));
        reads(&l, pre, floats(M * N));
        reads(&l, b, floats(N));
    }
    report(__func__, &l)->bias_gelu_forward(out, pre, b, M, N);
}

static void bias_gelu_backward(float *dpre, float *db, const float *dout, const float *pre,
                               const float *b, size_t M, size_t N) {
    Accesses l = {0};
    if (M > 0 && N > 0) {
        writes(&l, dpre, floats(M * N));
        updates(&l, db, floats(N));
        reads(&l, dout, floats(M * N));
        reads(&l, pre, floats(M * N));
        reads(&l, b, floats(N));
    }
    report(__func__, &l)->bias_gelu_backward(dpre, db, dout, pre, b, M, N);
}

/* LayerNorm's reads of sum are of the op's own writes: only x and y are read */
static void residual_layernorm_forward(float *sum, float *out, float *mean, float *rstd,
                                       const float *x, const float *y, const float *w,
                                       const float *b, size_t M, size_t C, float eps) {
    Accesses l = {0};
    if (M > 0 && C > 0) {
        writes(&l, sum, floats(M * C));
        writes(&l, out, floats(M * C));
        writes(&l, mean, floats(M));
        writes(&l, rstd, floats(M));
        reads(&l, x, floats(M * C));
        reads(&l, y, floats(M * C));
        reads(&l, w, floats(C));
        reads(&l, b, floats(C));
    }
    report(__func__, &l)->residual_layernorm_forward(sum, out, mean, rstd, x, y, w, b, M, C, eps);
}

/* ---- the Llama-shaped block's ops and attention over strided operands ---- */

static void rmsnorm_forward(float *out, float *rstd, const float *in, const float *w, size_t M,
                            size_t C, float eps) {
    Accesses l = {0};
    if (M > 0 && C > 0) {
        writes(&l, out, floats(M * C));
        writes(&l, rstd, floats(M));
        reads(&l, in, floats(M * C));
        reads(&l, w, floats(C));
    }
    report(__func__, &l)->rmsnorm_forward(out, rstd, in, w, M, C, eps);
}

static void rmsnorm_backward(float *din, float *dw, const float *dout, const float *in,
                             const float *rstd, const float *w, size_t M, size_t C) {
    Accesses l = {0};
    if (M > 0 && C > 0) {
        updates(&l, din, floats(M * C));
        updates(&l, dw, floats(C));
        reads(&l, dout, floats(M * C));
        reads(&l, in, floats(M * C));
        reads(&l, rstd, floats(M));
        reads(&l, w, floats(C));
    }
    report(__func__, &l)->rmsnorm_backward(din, dw, dout, in, rstd, w, M, C);
}

static void swiglu_forward(float *out, const float *gate, const float *up, size_t n) {
    Accesses l = {0};
    writes(&l, out, floats(n));
    reads(&l, gate, floats(n));
    reads(&l, up, floats(n));
    report(__func__, &l)->swiglu_forward(out, gate, up, n);
}

static void swiglu_backward(float *dgate, float *dup, const float *dout, const float *gate,
                            const float *up, size_t n) {
    Accesses l = {0};
    reads(&l, dout, floats(n));
    writes(&l, dgate, floats(n));
    writes(&l, dup, floats(n));
    reads(&l, gate, floats(n));
    reads(&l, up, floats(n));
    report(__func__, &l)->swiglu_backward(dgate, dup, dout, gate, up, n);
}

static void rope_forward(float *x, size_t B, size_t T, size_t heads, size_t D, float theta) {
    Accesses l = {0};
    if (D >= 2) updates(&l, x, floats(B * T * heads * D));
    report(__func__, &l)->rope_forward(x, B, T, heads, D, theta);
}

static void rope_backward(float *dx, size_t B, size_t T, size_t heads, size_t D, float theta) {
    Accesses l = {0};
    if (D >= 2) updates(&l, dx, floats(B * T * heads * D));
    report(__func__, &l)->rope_backward(dx, B, T, heads, D, theta);
}

static int attn_empty(const AttnShape *s) {
    return s->B == 0 || s->T == 0 || s->heads == 0 || s->kv_heads == 0 || s->head_dim == 0;
}

/* q's rows (or dq's), and k's or v's: the heads' columns of each row, rows a stride apart.
 * A K,V head shared by a group is added into by the op itself: reported as written. */
static void q_rows(Accesses *l, const float *q, const AttnShape *s, int write) {
    blocks(l, q, floats(s->heads * s->head_dim), s->B * s->T, floats(s->q_stride), write);
}

static void kv_rows(Accesses *l, const float *kv, const AttnShape *s, int write) {
    blocks(l, kv, floats(s->kv_heads * s->head_dim), s->B * s->T, floats(s->kv_stride), write);
}

static void dense_rows(Accesses *l, const float *x, const AttnShape *s, int write) {
    blocks(l, x, floats(s->B * s->T * s->heads * s->head_dim), 1, 0, write);
}

/* What every attention op reads: q's rows, and k's and v's of the KV heads. */
static void qkv_reads(Accesses *l, const float *q, const float *k, const float *v,
                      const AttnShape *s) {
    q_rows(l, q, s, 0);
    kv_rows(l, k, s, 0);
    kv_rows(l, v, s, 0);
}

static void gqa_attention_forward(float *out, float *probs, const float *q, const float *k,
                                  const float *v, const AttnShape *s) {
    Accesses l = {0};
    if (!attn_empty(s)) {
        dense_rows(&l, out, s, 1);
        writes(&l, probs, floats(s->B * s->heads * s->T * s->T));
        qkv_reads(&l, q, k, v, s);
    }
    report(__func__, &l)->gqa_attention_forward(out, probs, q, k, v, s);
}

static void gqa_attention_backward(float *dq, float *dk, float *dv, const float *dout,
                                   const float *q, const float *k, const float *v,
                                   const float *probs, const AttnShape *s) {
    Accesses l = {0};
    if (!attn_empty(s)) {
        q_rows(&l, dq, s, 1);
        kv_rows(&l, dk, s, 1);
        kv_rows(&l, dv, s, 1);
        dense_rows(&l, dout, s, 0);
        qkv_reads(&l, q, k, v, s);
        reads(&l, probs, floats(s->B * s->heads * s->T * s->T));
    }
    report(__func__, &l)->gqa_attention_backward(dq, dk, dv, dout, q, k, v, probs, s);
}

static void flash_attention_forward(float *out, float *lse, const float *q, const float *k,
                                    const float *v, const AttnShape *s) {
    Accesses l = {0};
    if (!attn_empty(s)) {
        dense_rows(&l, out, s, 1);
        writes(&l, lse, floats(s->B * s->heads * s->T));
        qkv_reads(&l, q, k, v, s);
    }
    report(__func__, &l)->flash_attention_forward(out, lse, q, k, v, s);
}

static void flash_attention_backward(float *dq, float *dk, float *dv, const float *dout,
                                     const float *q, const float *k, const float *v,
                                     const float *out, const float *lse, float *work,
                                     const AttnShape *s) {
    Accesses l = {0};
    if (!attn_empty(s)) {
        q_rows(&l, dq, s, 1);
        kv_rows(&l, dk, s, 1);
        kv_rows(&l, dv, s, 1);
        dense_rows(&l, dout, s, 0);
        qkv_reads(&l, q, k, v, s);
        dense_rows(&l, out, s, 0);
        reads(&l, lse, floats(s->B * s->heads * s->T));
        writes(&l, work, floats(s->T * s->T));
    }
    report(__func__, &l)->flash_attention_backward(dq, dk, dv, dout, q, k, v, out, lse, work, s);
}

#define SAME_NAME(op) .op = op,
const Kernels kernels_checked = {.name = "checked", KERNEL_OPS(SAME_NAME)};
