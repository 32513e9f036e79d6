/* lblock: the Llama-shaped block, tblock's sibling (llama_block, a BlockKind tblock.h's entry
 * points call through): x -> x + o_proj(attention(rope(q), rope(k), v)) over RMSNorm(x), then +
 * down (silu(gate) * up) over RMSNorm of that; grouped-query attention, no biases. */
#ifndef FSDP_LBLOCK_H
#define FSDP_LBLOCK_H

#include "models/tblock.h"

/* A Llama block's parameters in Hugging Face's LlamaDecoderLayer order. */
enum {
    LBLOCK_ATTN_NORM_W, /* input_layernorm [H] */
    LBLOCK_Q_W,         /* [H, H] */
    LBLOCK_K_W,         /* [KV, H], KV = kv_heads * H / heads */
    LBLOCK_V_W,         /* [KV, H] */
    LBLOCK_O_W,         /* [H, H] */
    LBLOCK_MLP_NORM_W,  /* post_attention_layernorm [H] */
    LBLOCK_GATE_W,      /* [F, H] */
    LBLOCK_UP_W,        /* [F, H] */
    LBLOCK_DOWN_W,      /* [H, F] */
    LBLOCK_PARAMS
};

/* A block module named `module` with Hugging Face's parameter names after `prefix`; weights
 * N(0, std), the two projections into the residual stream N(0, proj_std), norms 1. */
void lblock_describe(ParamMaker *pm, const char *module, const char *prefix, int64_t H, int64_t KV,
                     int64_t F, float std, float proj_std);
size_t lblock_param_count(size_t H, size_t KV, size_t F);

/* Llama's block: grouped-query attention. */
extern const BlockKind llama_block;

#endif
