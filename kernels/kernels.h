/* kernels: the math behind one op table. kernels/cpu implements it in C (GEMM through
 * OpenBLAS), kernels/cuda on the GPU with the same signatures and semantics, so the engine
 * in engine/ never knows where its numbers are computed. Ops never allocate device memory. */
#ifndef FSDP_KERNELS_H
#define FSDP_KERNELS_H

#include <stddef.h>
#include <stdint.h>

#include "kernels/dtype.h"

/* One piece of a batched copy (copy_spans): n elements from src + src_at to dst + dst_at, cast
 * to dst's type, then `pad` zero elements after them in dst. Offsets count elements of their own
 * buffer's type. */
typedef struct CopySpan {
    size_t dst_at, src_at, n, pad;
} CopySpan;

typedef struct AdamHyper {
    float lr, beta1, beta2, eps, weight_decay;
    int decoupled; /* 1: AdamW (decay applied to the parameter), 0: Adam (L2 added to grad) */
} AdamHyper;

/* Where attention's operands are: q[B, T, heads * D] with rows q_stride floats apart, k and
 * v [B, T, kv_heads * D] with rows kv_stride apart (heads % kv_heads == 0), out and dout
 * [B, T, heads * D] dense. GPT's packed qkv[B, T, 3C] is q = qkv, k = qkv + C, v = qkv + 2C,
 * strides 3C and kv_heads = heads. Causal: query t attends to keys s <= t only. */
typedef struct AttnShape {
    size_t B, T, heads, kv_heads, head_dim;
    size_t q_stride, kv_stride;
    int causal;
} AttnShape;

/* The compute dtype. A job computes in one dtype, FSDP2's param_dtype: an op that takes
 * `DType t` first reads and writes its `void *` tensors (parameters, activations and their
 * gradients) as arrays of t, and its `float *` ones (parameter gradients, LayerNorm's and
 * RMSNorm's statistics, flash attention's lse, scratch) in fp32 whatever t is. Inside, every op
 * computes in fp32: products accumulate in fp32, norms, softmax and losses widen their inputs,
 * and each output is rounded to t once, where the op stores it. So a bf16 op and its fp32 form
 * differ only by the rounding of what they read and write; kernels/cpu and kernels/cuda round at
 * the same points (DESIGN's invariant 6). */
typedef struct Kernels {
    const char *name;
    /* Bit t set: the ops take compute dtype t (kernels_computes_in). */
    unsigned dtypes;
    /* The longest sequence T eager attention takes (attention_*, causal_attention_forward,
     * gqa_attention_*: they keep T x T probabilities), and flash attention (flash_attention_*,
     * which keeps only lse); 0: any the memory holds. Two limits, because a table's flash kernels
     * may take sequences its eager ones cannot (models/transformer.c reads the one its config's
     * attention uses). */
    size_t max_tokens;
    size_t max_flash_tokens;
    /* 1: flash_attention_backward recomputes each pair's probabilities into its work tile
     * (T x T floats the caller takes); 0: it keeps them on chip and work may be NULL, so a model
     * takes no tile (models/tblock.c's tblock_take_flash_work). */
    int flash_uses_work;

    /* Element-type conversion with round-to-nearest-even; src and dst may not overlap. */
    void (*cast)(void *dst, DType dst_type, const void *src, DType src_type, size_t n);
    /* x[i] = 0 (device memory is not the host's: core never memsets it itself) */
    void (*zero)(float *x, size_t n);
    /* Device memory to device memory, and zeroing bytes: how the engine packs a unit's shards
     * into comm buffers and pads them (core never memcpys device memory itself). dst and src
     * may not overlap. */
    void (*copy_bytes)(void *dst, const void *src, size_t bytes);
    void (*zero_bytes)(void *dst, size_t bytes);
    /* Every span of `spans` (an array in host memory) as one op: each is a cast of its n
     * elements, then zeros in its padding. How the engine packs a unit's rows into its wire
     * block and unpacks every rank's rows from the gathered blocks in one launch, as FSDP2's
     * all-gather copy-in and copy-out do. No span's dst overlaps another's, nor src. A table
     * may leave it NULL: the engine then makes a cast and a zero_bytes per span. */
    void (*copy_spans)(void *dst, DType dst_type, const void *src, DType src_type,
                       const CopySpan *spans, size_t nspans);
    /* x[i] *= s */
    void (*scale)(float *x, float s, size_t n);
    /* y[i] += x[i] */
    void (*accumulate)(float *y, const float *x, size_t n);
    /* sum of x[i]^2 in double, for the global gradient norm */
    double (*sum_squares)(const float *x, size_t n);
    /* 1 if every x[i] is finite */
    int (*all_finite)(const float *x, size_t n);
    /* One Adam/AdamW update of n elements, PyTorch's formulas; step counts from 1 (bias
     * correction; a step below 1 is taken as 1). */
    void (*adam_step)(float *param, const float *grad, float *m, float *v, size_t n,
                      const AdamHyper *h, long step);

    /* Toy layer: y = w0 * tanh(w1 * x + w2), elementwise over a batch of n scalars; y may be
     * x (in place). */
    void (*toy_forward)(DType t, const void *w, const void *x, void *y, size_t n);
    /* Given dL/dy, writes dL/dx (if dx; it may alias x or dy) and adds dL/dw into dw[3],
     * summing the batch in double and rounding once. */
    void (*toy_backward)(DType t, const void *w, const void *x, const void *dy, void *dx,
                         float dw[3], size_t n);
    /* Mean squared error over n: returns loss; dy[i] = 2 (y[i]-t[i]) / n (dy may be NULL:
     * loss only). n == 0 gives 0 and touches nothing. */
    float (*mse_loss)(DType t, const void *y, const float *target, void *dy, size_t n);

    /* ---- the Vision Transformer's ops. Tensors are row-major; [B, T, C] means B*T rows of
     * C. Weights use PyTorch's layouts (Linear: [out, in]). "+=" marks an output that is
     * accumulated into (gradients of weights, and of inputs with more than one consumer);
     * every other output is overwritten. Pointers documented as nullable may be NULL. */

    /* Linear: out[M, N] = in[M, K] . w[N, K]^T + b[N] (b nullable). */
    void (*linear_forward)(DType t, void *out, const void *in, const void *w, const void *b,
                           size_t M, size_t K, size_t N);
    /* din[M, K] = dout . w (din nullable: not needed for the first layer);
     * dw[N, K] += dout^T . in; db[N] += column sums of dout (db nullable). */
    void (*linear_backward)(DType t, void *din, float *dw, float *db, const void *dout,
                            const void *in, const void *w, size_t M, size_t K, size_t N);

    /* db[j] += sum over `rows` rows of dout[i * stride + j], j < cols: a bias gradient taken
     * over some of a wider output's columns. */
    void (*bias_grad)(DType t, float *db, const void *dout, size_t rows, size_t cols,
                      size_t stride);

    /* LayerNorm over the last dim C of M rows, biased variance, eps inside the sqrt (PyTorch).
     * Saves mean[M] and rstd[M] = 1/sqrt(var + eps) for backward. */
    void (*layernorm_forward)(DType t, void *out, float *mean, float *rstd, const void *in,
                              const void *w, const void *b, size_t M, size_t C, float eps);
    /* din[M, C] += ..., dw[C] += ..., db[C] += ... */
    void (*layernorm_backward)(DType t, void *din, float *dw, float *db, const void *dout,
                               const void *in, const float *mean, const float *rstd, const void *w,
                               size_t M, size_t C);

    /* Exact GELU, 0.5 x (1 + erf(x / sqrt 2)), elementwise; out may be in. */
    void (*gelu_forward)(DType t, void *out, const void *in, size_t n);
    /* din = dout * GELU'(in); din may be dout. */
    void (*gelu_backward)(DType t, void *din, const void *in, const void *dout, size_t n);

    /* Multi-head self-attention core, PyTorch's nn.MultiheadAttention after in_proj:
     * qkv[B, T, 3C] packs q, k, v (columns [0,C), [C,2C), [2C,3C)); head h uses columns
     * [h*D, (h+1)*D) of each, D = C/heads. probs[B, heads, T, T] = softmax(q k^T / sqrt(D))
     * over the last dim (saved for backward); out[B, T, C] = probs . v, heads concatenated.
     * T <= the table's max_tokens (as for causal_attention_forward and gqa_attention_*). */
    void (*attention_forward)(DType t, void *out, void *probs, const void *qkv, size_t B, size_t T,
                              size_t C, size_t heads);
    /* dqkv[B, T, 3C] = gradient wrt qkv, from dout[B, T, C]. */
    void (*attention_backward)(DType t, void *dqkv, const void *dout, const void *qkv,
                               const void *probs, size_t B, size_t T, size_t C, size_t heads);

    /* Patch embedding's input as a GEMM operand: images[B, S, S] (one channel, already
     * normalised) -> patches[B, (S/P)^2, P*P]; patch p = py*(S/P) + px, element ky*P + kx,
     * so patches . conv_weight[C, P*P]^T is Conv2d(1, C, P, stride P) flattened the way
     * torchvision's VisionTransformer flattens it. S % P == 0. */
    void (*patchify)(DType t, void *patches, const void *images, size_t B, size_t S, size_t P);
    /* Tokens x[B, T, C] with T = 1 + patches: x[b, 0] = cls[C] + pos[0];
     * x[b, 1 + p] = patch_out[b, p] + pos[1 + p] (pos is [T, C]). */
    void (*embed_forward)(DType t, void *x, const void *patch_out, const void *cls, const void *pos,
                          size_t B, size_t T, size_t C);
    /* dcls[C] += ..., dpos[T, C] += ..., dpatch_out[B, T-1, C] = ... */
    void (*embed_backward)(DType t, float *dcls, float *dpos, void *dpatch_out, const void *dx,
                           size_t B, size_t T, size_t C);
    /* out[B, C] = x[b, 0, :] (the class token's row of each sample). */
    void (*class_token_select)(DType t, void *out, const void *x, size_t B, size_t T, size_t C);
    /* dx[B, T, C] += dout[b] on row 0 of each sample (other rows untouched). */
    void (*class_token_select_backward)(DType t, void *dx, const void *dout, size_t B, size_t T,
                                        size_t C);

    /* Softmax cross-entropy with mean reduction over B rows of `classes` logits: returns the
     * mean loss (accumulated in double); dlogits = (softmax - onehot(label)) / B * grad_scale
     * (dlogits nullable: loss only). */
    float (*cross_entropy)(DType t, void *dlogits, const void *logits, const int32_t *labels,
                           size_t B, size_t classes, float grad_scale);
    /* Rows whose largest logit (first on ties) is the label. */
    size_t (*count_correct)(DType t, const void *logits, const int32_t *labels, size_t B,
                            size_t classes);
    /* out[i] = a[i] + b[i]; out may be a or b (residual connections). */
    void (*add)(DType t, void *out, const void *a, const void *b, size_t n);

    /* ---- the language model's ops (the transformer over bytes). Token ids are int32. */

    /* Causal self-attention: attention_forward with query t attending to keys s <= t only;
     * probs[b, h, t, s] = 0 for s > t. Its backward is attention_backward: a zero probability
     * passes no gradient to its score, to k or to v, and a row's softmax gradient sums over
     * its nonzero terms, so the same formula is exact. */
    void (*causal_attention_forward)(DType t, void *out, void *probs, const void *qkv, size_t B,
                                     size_t T, size_t C, size_t heads);
    /* Token and position embeddings: x[b, t] = wte[tokens[b, t]] + wpe[t], x [B, T, C], wte
     * [V, C], wpe [T, C] (at least T rows; NULL: no position table, as RoPE's models). A token
     * outside [0, V) gives a row of NaN (a divergence the engine reports) rather than a read past
     * wte. */
    void (*token_embed_forward)(DType t, void *x, const int32_t *tokens, const void *wte,
                                const void *wpe, size_t B, size_t T, size_t C, size_t V);
    /* dwte[tokens[b, t]] += dx[b, t], token by token in (b, t) order; dwpe[t] += dx[b, t] over
     * b in order (dwpe NULL: none). Tokens outside [0, V) add nothing. */
    void (*token_embed_backward)(DType t, float *dwte, float *dwpe, const int32_t *tokens,
                                 const void *dx, size_t B, size_t T, size_t C, size_t V);

    /* ---- fused ops: one pass where the unfused ops take two, each computing what the ops it
     * replaces compute (fp32: within 1e-5 relative; kernels_cpu serially: bit for bit, except
     * where noted). */

    /* Bias + exact GELU after a GEMM: pre[M, N] is linear_forward's output without its bias
     * (b = NULL); out[M, N] = GELU(pre + b) (b[N] added to every row), as gelu_forward computes
     * it. pre is left as it is and backward redoes the add (recomputing one float add an
     * element rather than writing the pre-activation back: a pass over memory saved), so out
     * may not be pre. Equals linear_forward with b, then gelu_forward: linear_forward adds its
     * bias as the GEMM's C (beta = 1), the same float add when the GEMM takes K in one block
     * (OpenBLAS 0.3's Haswell sgemm: bit for bit up to K = 300, the last bit of some elements
     * beyond). */
    void (*bias_gelu_forward)(DType t, void *out, const void *pre, const void *b, size_t M,
                              size_t N);
    /* dpre[M, N] = dout * GELU'(pre + b) (gelu_backward at the pre-activation; dpre may be
     * dout) and db[N] += the column sums of dpre (bias_grad of dpre): the bias's gradient, so
     * the GEMM's linear_backward that follows takes db = NULL. pre and b are bias_gelu_forward's
     * (b is read, not written). */
    void (*bias_gelu_backward)(DType t, void *dpre, float *db, const void *dout, const void *pre,
                               const void *b, size_t M, size_t N);

    /* A residual add and the LayerNorm that reads it: sum[M, C] = x + y (sum may be x or y),
     * then LayerNorm of sum exactly as layernorm_forward: out, mean[M], rstd[M] (out may not
     * alias sum, x or y). Backward needs no fused op: the add passes the residual stream's
     * gradient through unchanged, and layernorm_backward's din is "+=", so it adds LayerNorm's
     * share straight into that gradient. */
    void (*residual_layernorm_forward)(DType t, void *sum, void *out, float *mean, float *rstd,
                                       const void *x, const void *y, const void *w, const void *b,
                                       size_t M, size_t C, float eps);

    /* ---- the Llama-shaped model's ops, and attention over grouped, strided operands (GQA, and
     * flash attention, which any of the transformer family may use) */

    /* RMSNorm over the last dim C of M rows (no mean, no bias, as Llama's): rstd[M] =
     * 1/sqrt(mean(in^2) + eps), out = in * rstd * w; rstd saved for backward. */
    void (*rmsnorm_forward)(DType t, void *out, float *rstd, const void *in, const void *w,
                            size_t M, size_t C, float eps);
    /* din[M, C] += ..., dw[C] += ... */
    void (*rmsnorm_backward)(DType t, void *din, float *dw, const void *dout, const void *in,
                             const float *rstd, const void *w, size_t M, size_t C);
    /* SwiGLU's gate: out[i] = silu(gate[i]) * up[i], silu(g) = g / (1 + exp(-g)). */
    void (*swiglu_forward)(DType t, void *out, const void *gate, const void *up, size_t n);
    /* dgate = dout * up * silu'(gate), dup = dout * silu(gate); dgate may be dout. */
    void (*swiglu_backward)(DType t, void *dgate, void *dup, const void *dout, const void *gate,
                            const void *up, size_t n);
    /* Rotary position embedding in place on x[B, T, heads * D] (D even), position t = row % T,
     * pairs (i, i + D/2) of each head (Hugging Face's rotate_half) turned by the angle
     * t * theta^(-2i/D). Backward turns a gradient back by the same angle. */
    void (*rope_forward)(DType t, void *x, size_t B, size_t T, size_t heads, size_t D, float theta);
    void (*rope_backward)(DType t, void *dx, size_t B, size_t T, size_t heads, size_t D,
                          float theta);

    /* Attention as attention_forward computes it (softmax(q k^T / sqrt(D)) v, per head), with
     * the operands where AttnShape says and query head h reading K,V head h / (heads /
     * kv_heads). Eager keeps probs[B, heads, T, T]; its backward overwrites dq, dk, dv (strided
     * as q, k, v; a K,V head's gradient is the sum over its group's query heads). */
    void (*gqa_attention_forward)(DType t, void *out, void *probs, const void *q, const void *k,
                                  const void *v, const AttnShape *s);
    void (*gqa_attention_backward)(DType t, void *dq, void *dk, void *dv, const void *dout,
                                   const void *q, const void *k, const void *v, const void *probs,
                                   const AttnShape *s);
    /* Flash attention: the same out, keeping only lse[B, heads, T], each row's log-sum-exp of
     * its scaled scores, in place of the probabilities. Backward recomputes each (sample, head)
     * pair's probabilities exp(score - lse) into work[T, T] (scratch the caller owns, where the
     * table's flash_uses_work is 1; the GPU's recomputes a row at a time on chip, and takes NULL)
     * and needs out for each row's sum of dout * out. T <= the table's max_flash_tokens. */
    void (*flash_attention_forward)(DType t, void *out, float *lse, const void *q, const void *k,
                                    const void *v, const AttnShape *s);
    void (*flash_attention_backward)(DType t, void *dq, void *dk, void *dv, const void *dout,
                                     const void *q, const void *k, const void *v, const void *out,
                                     const float *lse, float *work, const AttnShape *s);

    /* ---- the eager loss: PyTorch's cross_entropy(logits.float()) step by step, in fp32, each
     * step's output its own tensor (what --loss eager holds; cross_entropy above is the fused
     * pass). Rows of `classes` values. */

    /* logp[i, j] = x[i, j] - max_j x[i] - log(sum_j exp(x[i, j] - max_j x[i])); logp != x. */
    void (*log_softmax)(float *logp, const float *x, size_t rows, size_t classes);
    /* The mean over rows of -logp[i, label[i]] (accumulated in double; NaN for a label outside
     * [0, classes)), and its gradient, dense: dlogp = -grad_scale / rows at each row's label, 0
     * elsewhere. */
    float (*nll_loss)(float *dlogp, const float *logp, const int32_t *labels, size_t rows,
                      size_t classes, float grad_scale);
    /* dx = dlogp - exp(logp) * sum_j dlogp[i, j] (the row's sum in double); dx != dlogp. */
    void (*log_softmax_backward)(float *dx, const float *dlogp, const float *logp, size_t rows,
                                 size_t classes);
} Kernels;

/* Every op of the table in its order, for building a table from functions named after the ops:
 * the tables of kernels/cpu, kernels/cuda, sim/kernels_none.c and sim/kernels_checked.c. A new
 * op goes into the struct above and here, in the same place. */
/* clang-format off */
#define KERNEL_OPS(X) X(cast) X(zero) X(copy_bytes) X(zero_bytes) X(copy_spans) X(scale)           \
    X(accumulate) X(sum_squares) X(all_finite) X(adam_step) X(toy_forward) X(toy_backward)         \
    X(mse_loss) X(linear_forward) X(linear_backward) X(bias_grad) X(layernorm_forward)             \
    X(layernorm_backward) X(gelu_forward) X(gelu_backward) X(attention_forward)                    \
    X(attention_backward) X(patchify) X(embed_forward) X(embed_backward) X(class_token_select)     \
    X(class_token_select_backward) X(cross_entropy) X(count_correct) X(add)                        \
    X(causal_attention_forward) X(token_embed_forward) X(token_embed_backward)                     \
    X(bias_gelu_forward) X(bias_gelu_backward) X(residual_layernorm_forward) X(rmsnorm_forward)    \
    X(rmsnorm_backward) X(swiglu_forward) X(swiglu_backward) X(rope_forward) X(rope_backward)      \
    X(gqa_attention_forward) X(gqa_attention_backward) X(flash_attention_forward)                  \
    X(flash_attention_backward) X(log_softmax) X(nll_loss) X(log_softmax_backward)
/* clang-format on */
/* The type of op `op`'s function: `KERNEL_OP_TYPE(add) cpu_add;` declares cpu_add exactly as the
 * table holds it, so an implementation's header declares every op from the one list above
 * (cpu/cpu_ops.h, cuda/cuda_ops.h). */
#define KERNEL_OP_TYPE(op) __typeof__(*((Kernels *)0)->op)
#define KERNEL_COUNT_ONE(op) +1
/* A table is its name, its dtypes and one pointer per op: an op missing from KERNEL_OPS fails
 * here. */
#ifdef __cplusplus
static_assert
#else
_Static_assert
#endif
    (sizeof(Kernels) - offsetof(Kernels, cast) ==
         (0 KERNEL_OPS(KERNEL_COUNT_ONE)) * sizeof(void (*)(void)),
     "KERNEL_OPS must list every op of Kernels");

/* The bit of Kernels.dtypes for t, and whether table k computes in t. */
#define KERNEL_DTYPE_BIT(t) (1u << (unsigned)(t))
#define KERNEL_ALL_DTYPES                                                                          \
    (KERNEL_DTYPE_BIT(DTYPE_FP32) | KERNEL_DTYPE_BIT(DTYPE_BF16) | KERNEL_DTYPE_BIT(DTYPE_FP16))
static inline int kernels_computes_in(const Kernels *k, DType t) {
    return (k->dtypes & KERNEL_DTYPE_BIT(t)) != 0;
}

/* The longest sequence the CUDA eager attention kernels take (a row of probabilities in shared
 * memory): kernels_cuda.max_tokens. The CPU's take any (kernels_cpu.max_tokens and
 * max_flash_tokens 0). */
#define KERNELS_MAX_TOKENS 256

extern const Kernels kernels_cpu;

/* copy_spans as table k's own cast and zero_bytes, span by span: kernels_cpu's copy_spans, and
 * what the engine does on a table that leaves copy_spans NULL. */
static inline void kernels_copy_spans_each(const Kernels *k, void *dst, DType dst_type,
                                           const void *src, DType src_type, const CopySpan *spans,
                                           size_t nspans) {
    const size_t ds = dtype_size(dst_type), ss = dtype_size(src_type);
    for (size_t i = 0; i < nspans; i++) {
        char *to = (char *)dst + spans[i].dst_at * ds;
        k->cast(to, dst_type, (const char *)src + spans[i].src_at * ss, src_type, spans[i].n);
        k->zero_bytes(to + spans[i].n * ds, spans[i].pad * ds);
    }
}

#endif
