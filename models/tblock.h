/* tblock: the transformer block the ViT, the GPT-2-style transformer and the Llama-shaped one
 * share: its parameters, saved activations, forward, backward, checkpointing and work estimate.
 * GPT's pre-LayerNorm block is here; Llama's (RMSNorm, grouped-query attention with RoPE,
 * SwiGLU, no biases) is its sibling in lblock.c: each is a BlockKind the same entry points call
 * through. Either keeps
 * attention's probabilities (eager) or only their per-row log-sum-exp (flash). It touches only
 * the device it is given (activations as MEM_ACTIVATIONS) and its kernels. */
#ifndef FSDP_TBLOCK_H
#define FSDP_TBLOCK_H

#include "engine/model.h"

/* A block's parameters, in the order a model describes them (torchvision's and GPT-2's
 * state dicts agree on it). */
enum {
    TBLOCK_LN1_W,
    TBLOCK_LN1_B,
    TBLOCK_QKV_W, /* [3H, H] */
    TBLOCK_QKV_B, /* [3H] */
    TBLOCK_OUT_W, /* [H, H] */
    TBLOCK_OUT_B,
    TBLOCK_LN2_W,
    TBLOCK_LN2_B,
    TBLOCK_FC1_W, /* [mlp, H] */
    TBLOCK_FC1_B, /* [mlp] */
    TBLOCK_FC2_W, /* [H, mlp] */
    TBLOCK_FC2_B, /* [H] */
    TBLOCK_PARAMS
};

typedef struct BlockKind BlockKind;

/* What one block's computation needs: where it runs and the current batch's shape. */
typedef struct TBlock {
    Device *dev;
    const Kernels *k;
    size_t B;     /* sequences (images) in the micro-batch */
    size_t T;     /* tokens of each */
    size_t H;     /* width of the residual stream */
    size_t F;     /* width of the MLP's hidden layer */
    size_t heads; /* attention heads; H % heads == 0 */
    float ln_eps; /* both LayerNorms' (RMSNorms') eps */
    int causal;   /* 1: each token attends to itself and those before it (a language model) */
    int flash;    /* 1: flash attention (keeps lse), 0: eager (keeps probs) */
    const BlockKind *kind; /* gpt_block (here) or llama_block (lblock.c) */
    DType dtype;           /* the compute dtype: parameters, activations and their gradients */
    size_t kv_heads;       /* Llama: K,V heads, dividing heads */
    /* Llama: the work charges eager PyTorch's unfused norms, RoPE, repeated K,V, adds and SwiGLU
     * (lblock.c); what is computed and kept is the same */
    int eager_elementwise;
} TBlock;

/* Llama's RoPE base (Llama 3's rope_theta). */
#define TBLOCK_ROPE_THETA 500000.0f

/* A block's attention as the kernels take it: q, k, v rows q_stride and kv_stride apart. */
AttnShape tblock_attn_shape(const TBlock *t, size_t q_stride, size_t kv_stride);

/* What a block's forward saves for its backward; NULL when not held. Llama's block keeps
 * ln1/ln2 (its RMSNorms' outputs) with their rstd, q, k, v, gate, up and swiglu in place of
 * GPT's qkv, fc1 and gelu. Tensors are in the compute dtype (TBlock.dtype); the norms'
 * statistics and flash's lse in fp32, as the kernels take them. */
typedef struct BlockActs {
    void *ln1, *ln1_mean, *ln1_rstd; /* LayerNorm 1 output and statistics */
    void *qkv;                       /* in_proj output [B*T, 3H] */
    void *q, *k, *v;                 /* Llama: [B*T, H], [B*T, KV], [B*T, KV] after RoPE */
    void *probs;                     /* eager: attention probabilities [B, heads, T, T] */
    void *lse;                       /* flash: each row's log-sum-exp [B, heads, T] */
    void *attn;                      /* attention output before out_proj [B*T, H] */
    void *mid;                       /* residual stream after attention [B*T, H] */
    void *ln2, *ln2_mean, *ln2_rstd;
    void *fc1;  /* fc1's GEMM output without its bias [B*T, F] (GELU's input: fc1 + bias) */
    void *gelu; /* GELU output [B*T, F] */
    void *gate, *up, *swiglu; /* Llama: the MLP's gate and up projections, silu(gate) * up */
    /* AC_TORCHTITAN, an odd number of GEMMs: the room for the last one's output [B*T, H],
     * which torchtitan saves; never written, nothing reads it */
    void *last_gemm;
} BlockActs;

/* ---- activations: how both models take and release their buffers (charged to the device as
 * MEM_ACTIVATIONS in the dtype they hold), so a block's buffers and a model's own are accounted
 * alike */

/* n elements of t, or NULL for n == 0 (and when out of memory). */
void *act_take(Device *dev, DType t, size_t n);
/* Frees *p if held and forgets it. */
void act_release(Device *dev, void **p);
/* Each pointer was just taken for `elems > 0` elements: any NULL is out of memory. */
int act_check_taken(void *const *ptrs, int n, size_t elems, Err *err);

/* Attention's saved statistics, as the block's kind keeps them: probs [B, heads, T, T] (eager)
 * or lse [B, heads, T] (flash); returns the one taken. And flash backward's work tile [T, T]
 * where the op table's backward uses one (tblock_needs_flash_work; NULL otherwise: eager, or a
 * GPU's flash), released by the backward that takes it. */
void **tblock_take_scores(const TBlock *t, BlockActs *a);
int tblock_needs_flash_work(const TBlock *t);
void *tblock_take_flash_work(const TBlock *t);

/* ---- describing parameters (shared by the models built from these blocks) */

typedef struct ParamMaker {
    ModelDesc *m; /* params and modules allocated large enough */
    int module;   /* the module being described */
} ParamMaker;

typedef struct ParamInit {
    InitKind kind;
    float a, b; /* as ParamSpec.init_a, init_b */
} ParamInit;

void param_maker_begin(ParamMaker *pm, const char *module, int is_block);
void param_maker_add(ParamMaker *pm, const char *name, int ndim, const int64_t *shape,
                     InitKind init, float a, float b);
/* A block module named `module` with the TBLOCK_PARAMS parameters `prefix` + suffix[i],
 * shaped for width H and MLP width F ([out, in] Linear weights), initialised by init[i]. */
void tblock_describe(ParamMaker *pm, const char *module, const char *prefix,
                     const char *const suffix[TBLOCK_PARAMS], const ParamInit init[TBLOCK_PARAMS],
                     int64_t H, int64_t F);
/* Parameters of one block. */
size_t tblock_param_count(size_t H, size_t F);

/* ---- computation */

/* A kind of block: its work estimate, forward and backward, as tblock_work, tblock_forward and
 * tblock_backward below describe them (they call through t->kind). */
struct BlockKind {
    void (*work)(const TBlock *t, Work *w, WorkKind kind);
    int (*forward)(const TBlock *t, BlockActs *a, void *const *p, const void *x, void **out,
                   Work *w, Err *err);
    int (*backward)(const TBlock *t, BlockActs *a, void *const *p, float *const *g, void **input,
                    void *dy, Work *w, Err *err);
    /* AC_OPS: release what the policy recomputes, and recompute it from the input x and what
     * was kept, charging w. */
    void (*release_recomputed)(const TBlock *t, BlockActs *a);
    int (*recompute_ops)(const TBlock *t, BlockActs *a, void *const *p, const void *x, Work *w,
                         Err *err);
    int grouped_kv; /* 1: attention has kv_heads K,V heads (grouped-query); 0: one per head */
    int gemms;      /* GEMMs in a forward, as torchtitan's policy counts its matmuls */
};

/* GPT's (and the ViT's) pre-LayerNorm block. */
extern const BlockKind gpt_block;

/* Roughly what the cost model charges for one block's forward or backward: its Linears' GEMMs
 * by shape, attention's products, activation traffic in the compute dtype, its kernels. */
void tblock_work(const TBlock *t, Work *w, WorkKind kind);
/* Attention's score and value products in that pass (QK^T and PV, with backward's three and
 * flash's recompute of the scores): 4BT^2H a forward, half of it with flash under a causal
 * mask, whose kernel skips the masked half (eager computes every score, then masks). */
double tblock_attention_flops(const TBlock *t, WorkKind kind);
/* Forward on full parameters p from input x[B*T, H]: takes the activations into a and the
 * output into *out (the next module's input); fills w. */
int tblock_forward(const TBlock *t, BlockActs *a, void *const *p, const void *x, void **out,
                   Work *w, Err *err);
/* Backward: dy arrives as dL/d(output) and leaves, updated in place, as dL/d(input); ADDS the
 * parameters' gradients into g. Releases a and the block's input *input afterwards. */
int tblock_backward(const TBlock *t, BlockActs *a, void *const *p, float *const *g, void **input,
                    void *dy, Work *w, Err *err);
/* Releases whatever a holds. */
void tblock_release(const TBlock *t, BlockActs *a);
/* Activation checkpointing, right after the forward: moves the input *input to MEM_AC_INPUT
 * and releases a (AC_BLOCK) or what AC_OPS recomputes (the kind's release_recomputed). */
int tblock_checkpoint(const TBlock *t, BlockActs *a, AcPolicy policy, void **input, Err *err);
/* Right before the backward: AC_BLOCK, the forward again from x, whose output *out (the next
 * block's input, already done with and freed) is released at once; AC_OPS, the kind's
 * recompute_ops. w is charged as WORK_RECOMPUTE. */
int tblock_recompute(const TBlock *t, BlockActs *a, AcPolicy policy, void *const *p, const void *x,
                     void **out, Work *w, Err *err);

#endif
