/* sample: a language model's continuation of a prompt with trained weights, byte by byte: the
 * next byte from the logits at the last position of the context (the prompt and what has been
 * added, its last seq bytes), the likeliest one or one drawn at a temperature from a seeded
 * generator. Runs the engine's forward on simulated ranks; reads only the weights file. */
#ifndef FSDP_SAMPLE_H
#define FSDP_SAMPLE_H

#include "jobs/train.h"

typedef struct SampleJob {
    const ModelDesc *model; /* a transformer over bytes (vocabulary 256) */
    const Plan *plan;
    const char *weights; /* safetensors with the model's names */
    const uint8_t *prompt;
    size_t prompt_len; /* at least 1 */
    int tokens;        /* bytes to add */
    float temperature; /* 0: the likeliest byte (the first, on ties); else softmax(z / t) */
    uint64_t seed;     /* the draws: a pure function of (seed, the byte's place) */
    uint8_t *out;      /* [tokens], written by rank 0 */
} SampleJob;

/* The byte logits z[V] choose at temperature t (0: the first largest), u in [0, 1) the draw. */
int sample_pick(const float *z, int V, float t, float u);

/* Rank-main for a cluster; arg is a SampleJob. */
int sample_rank(const RankEnv *env, void *arg, Err *err);

#endif
