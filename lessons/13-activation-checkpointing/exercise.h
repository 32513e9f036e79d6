/* Lesson 13's functions: exercise.c defines them, check.c calls them. Do not edit. */
#ifndef LESSON_13_EXERCISE_H
#define LESSON_13_EXERCISE_H

#include <stddef.h>

/* One Llama block as the engine runs it: `batch` sequences of `seq` tokens, the residual stream
 * `hidden` wide, K and V `kv` wide (kv_heads x the head's width), the MLP `mlp` wide, `heads`
 * attention heads; its activations elem_bytes bytes an element (the compute dtype: 4 for fp32,
 * 2 for bf16). flash: attention keeps each (sequence, head, query) row's log-sum-exp, one fp32
 * number; eager: the probabilities [batch, heads, seq, seq], elem_bytes each. */
typedef struct BlockShape {
    size_t batch, seq, hidden, kv, mlp, heads;
    size_t elem_bytes;
    int flash;
} BlockShape;

/* What a block keeps from its forward for its backward. */
typedef enum {
    KEEP_EVERYTHING,   /* no checkpointing */
    KEEP_INPUT,        /* --activation-checkpointing: its input alone */
    KEEP_GEMM_OUTPUTS, /* --ac-policy ops: also every other GEMM's output and attention's */
} Keep;

size_t kept_bytes(const BlockShape *s, Keep keep);
double recompute_gemm_flops(const BlockShape *s, Keep keep);

#endif
