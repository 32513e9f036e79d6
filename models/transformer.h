/* transformer: a decoder-only transformer, in GPT-2's layout and names (modules: embed, blocks
 * h.N with causal attention, head with an untied lm_head) or in Llama's (RMSNorm, grouped-query
 * attention with RoPE, SwiGLU, no biases; Hugging Face's names). It trains as a language model
 * over the bytes of a text (vocabulary 256, next-token cross-entropy), and the planner sizes a
 * 7B to 405B model with it in accounting-only runs: the same buffers charged, nothing computed. */
#ifndef FSDP_TRANSFORMER_H
#define FSDP_TRANSFORMER_H

#include "engine/model.h"

/* The vocabulary of a model that reads bytes: every byte is its own token. */
#define TRANSFORMER_BYTE_VOCAB 256
/* GPT-2's LayerNorm eps, and Llama 3's RMSNorm eps. */
#define TRANSFORMER_NORM_EPS 1e-5f

typedef enum {
    TRANSFORMER_GPT = 0, /* GPT-2's: LayerNorm, GELU MLP, biases, learned positions */
    TRANSFORMER_LLAMA    /* Llama's: RMSNorm, SwiGLU MLP, no biases, RoPE, K,V heads shared */
} TransformerArch;

/* How attention keeps what its backward needs: eager keeps the probabilities [B, heads, T, T],
 * flash only each row's log-sum-exp [B, heads, T] and recomputes the rest in backward. */
typedef enum { ATTENTION_EAGER = 0, ATTENTION_FLASH } AttentionKind;

/* How the loss runs: fused, one pass from the logits to their gradient in the compute dtype
 * (llm.c's); eager, PyTorch's cross_entropy(logits.float()) step by step, each step's fp32
 * output its own tensor [B, T, vocab] (torchtitan's, and what it costs at a 128k vocabulary). */
typedef enum { LOSS_FUSED = 0, LOSS_EAGER } LossKind;

/* How a Llama block's memory-bound ops are charged (computed the same either way): fsdp's fused
 * kernels, or eager PyTorch's one kernel per operator through fp32 temporaries, as torchtitan's
 * model runs them without torch.compile (lblock.c counts them), for planning the job it ran. */
typedef enum { ELEMENTWISE_FUSED = 0, ELEMENTWISE_EAGER } ElementwiseKind;

typedef struct TransformerConfig {
    int layers; /* blocks */
    int hidden; /* width of the residual stream */
    int heads;  /* attention heads; hidden % heads == 0 */
    int mlp;    /* width of the MLP's hidden layer */
    int seq;    /* tokens of a sequence (and rows of the position embedding) */
    int vocab;  /* rows of the token embedding and of the LM head */
    TransformerArch arch;
    int kv_heads; /* Llama: K,V heads, dividing heads; GPT: 0 (each head has its own) */
    AttentionKind attention;
    LossKind loss;
    ElementwiseKind elementwise; /* Llama only: eager charges PyTorch's unfused kernels */
} TransformerConfig;

/* "eager", "flash"; and back (-1: neither). */
const char *attention_name(AttentionKind a);
int attention_from_name(const char *name);
/* "fused", "eager"; and back (-1: neither). */
const char *loss_name(LossKind l);
int loss_from_name(const char *name);
/* "fused", "eager"; and back (-1: neither). */
const char *elementwise_name(ElementwiseKind e);
int elementwise_from_name(const char *name);

/* A Llama 3 shape by its published name (llama3-8b, llama3-70b, llama3-405b: layers, hidden,
 * heads, K,V heads, MLP and vocabulary as published, sequence 8192, eager attention). Returns
 * 0, or -1 for another name. */
int transformer_llama_preset(const char *name, TransformerConfig *out);
/* The preset names, for messages: "llama3-8b, llama3-70b, llama3-405b". */
const char *transformer_llama_preset_names(void);

/* The language models `--model` names by their shape, both reading bytes (vocabulary 256, so
 * fewer parameters than their tokenised originals), sequence 1,024, flash attention:
 *   gpt2-small  GPT-2 small's shape: 12 layers of 768, 12 heads, MLP 3072 (86,235,648
 *               parameters over bytes; GPT-2's 50,257 tokens make it 124M)
 *   llama-125m  a Llama of about 125M: 12 layers of 1024, 16 heads, 4 K,V heads, SwiGLU MLP
 *               2560 (126,379,008 parameters over bytes)
 * Returns 0, or -1 for another name. */
int transformer_lm_preset(const char *name, TransformerConfig *out);
/* Their names, for messages: "gpt2-small, llama-125m". */
const char *transformer_lm_preset_names(void);

/* Every field positive and within bounds that keep every byte count in 64 bits; one line
 * naming the bad field (as its flag) and its value. */
int transformer_config_check(const TransformerConfig *c, Err *err);
/* Parameters of the whole model, computed from the config alone. */
size_t transformer_param_count(const TransformerConfig *c);
/* A GPT-like shape of (within 0.1% of) `params` parameters, for `--params 7e9`: width,
 * heads and depth from published models of about that size, mlp 4 x hidden, seq 2048, and the
 * vocabulary that brings the count closest. Refuses <= 0, NaN and more than 1e13. */
int transformer_config_for_params(double params, TransformerConfig *out, Err *err);

int transformer_model_create(ModelDesc *m, const TransformerConfig *c, Err *err);

#endif
