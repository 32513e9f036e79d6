/* tstack: a model made of an embedding (module 0), `layers` transformer blocks (modules 1 to
 * layers) and a head (module layers + 1), as the ViT and the GPT-2-style transformer are. The
 * stack builds the model's description and is its ModelOps: it keeps the residual stream
 * between modules, runs the blocks (tblock) and calls the model's own functions for the two
 * ends (TStackEnds). It touches only the device it is given and its kernels. */
#ifndef FSDP_TSTACK_H
#define FSDP_TSTACK_H

#include <stdint.h>

#include "models/tblock.h"

typedef struct TStackEnds TStackEnds;

/* The sizes a model gives its stack. */
typedef struct TStackShape {
    int layers;
    size_t tokens; /* T: tokens of a sequence (image) */
    size_t hidden; /* H: width of the residual stream */
    size_t mlp;    /* F: width of the MLP's hidden layer */
    size_t heads;  /* attention heads; hidden % heads == 0 */
    float ln_eps;  /* the blocks' LayerNorms' eps */
    int causal;    /* the blocks' attention is causal (TBlock.causal) */
    int flash;     /* flash attention (TBlock.flash) */
    int llama;     /* Llama's blocks (llama_block), with kv_heads K,V heads */
    size_t kv_heads;
    size_t outputs; /* logits of one sequence: classes, or tokens x vocabulary */
    int eager_loss; /* the ends' loss takes dlogits itself, last, after fp32 steps of its own */
    int eager_elementwise; /* TBlock.eager_elementwise */
} TStackShape;

/* A run of a stacked model: the stack's state, and the model's own in `own`. */
struct ModelRun {
    const TStackEnds *ends;
    const void *config; /* the model's config (ModelDesc.config: a VitConfig, ...) */
    TStackShape shape;
    Device *dev;
    const Kernels *k;
    DType dtype;       /* the compute dtype: x, the blocks', logits and the gradients */
    size_t B, T, H;    /* sequences in the current batch; shape.tokens and shape.hidden */
    void **x;          /* x[m]: input of module m, [B, T, H] (x[0] unused: the model's input) */
    BlockActs *blocks; /* blocks[l]: what block l's forward saved */
    void *logits, *dlogits; /* the head's output [B, outputs] and the loss's gradient of it */
    void *grad;             /* dL/d(residual stream) flowing backward, updated in place */
    void *own;              /* the model's own state: ends->own_size bytes, zeroed at first */
};

/* What a model supplies: the description and computation of its embedding and its head (the
 * stack does the blocks'), and how its batches load. */
struct TStackEnds {
    const char *name;  /* ModelDesc.name: "vit" */
    const char *label; /* for messages: "ViT" */
    int embed_params, block_params, head_params;
    size_t own_size;
    /* Each describes its module into pm (param_maker_begin, then its parameters). */
    void (*describe_embed)(ParamMaker *pm, const void *config);
    void (*describe_block)(ParamMaker *pm, const void *config, int layer);
    void (*describe_head)(ParamMaker *pm, const void *config);
    /* ModelOps.set_batch: releases what the run holds (tstack_discard) and loads n samples. */
    int (*set_batch)(ModelRun *r, const Dataset *ds, const long *idx, size_t n, Err *err);
    /* The embedding's forward fills x[1]; the head's reads x[layers + 1] and fills logits. */
    int (*embed_forward)(ModelRun *r, void *const *p, Work *w, Err *err);
    int (*head_forward)(ModelRun *r, void *const *p, Work *w, Err *err);
    /* The loss of the logits, its gradient written into dlogits (taken, the batch not empty;
     * shape.eager_loss: taken by the loss, NaN if it cannot be); NULL: the model computes none
     * (0). */
    float (*loss)(ModelRun *r, float grad_scale);
    /* NULL: the model does not classify. */
    size_t (*correct)(ModelRun *r);
    /* The head's backward starts grad (and ends with tstack_release_head); the embedding's
     * ends it (the stack discards the batch after it). */
    int (*head_backward)(ModelRun *r, void *const *p, float *const *g, Work *w, Err *err);
    int (*embed_backward)(ModelRun *r, void *const *p, float *const *g, Work *w, Err *err);
    /* Release the batch and what the embedding saved; what the head saved (not the logits). */
    void (*release_input)(ModelRun *r);
    void (*release_head)(ModelRun *r);
    /* The embedding's input (elements of the compute dtype) and their count; NULL when it is
     * not numbers (token ids). */
    void *(*input)(ModelRun *r, size_t *n);
};

/* The description of a stacked model named ends->name: the embedding's, `layers` blocks' and
 * the head's parameters, in that order, as ends describe them; m->ops = ops. */
int tstack_model_create(ModelDesc *m, const TStackEnds *ends, const ModelOps *ops,
                        const void *config, size_t config_size, int layers, Err *err);
/* A model's run_create: the stack's state for shape and the model's own, zeroed. */
int tstack_run_create(const TStackEnds *ends, const TStackShape *shape, const void *config,
                      Device *dev, const Kernels *k, DType compute, ModelRun **out, Err *err);

/* ---- for the ends */

/* act_take and act_release on the run's device: n elements of the compute dtype, or n fp32 ones
 * (a norm's statistics); and n int32 ids (labels, tokens), charged as activations too (NULL for
 * n == 0). */
void *run_take(ModelRun *r, size_t n);
void *run_take_fp32(ModelRun *r, size_t n);
void run_release(ModelRun *r, void **p);
int32_t *run_take_ids(ModelRun *r, size_t n);
void run_release_ids(ModelRun *r, int32_t **p);
/* Releases what the head saved (ends->release_head), the logits, their gradient and the head's
 * input x[layers + 1]. */
void tstack_release_head(ModelRun *r);

/* ---- the ModelOps */

void tstack_run_destroy(ModelRun *r);
int tstack_set_batch(ModelRun *r, const Dataset *ds, const long *idx, size_t n, Err *err);
int tstack_forward(ModelRun *r, int module, void *const *params, Work *w, Err *err);
float tstack_loss(ModelRun *r, float grad_scale, Work *w);
int tstack_backward(ModelRun *r, int module, void *const *params, float *const *grads, Work *w,
                    Err *err);
size_t tstack_correct(ModelRun *r);
void tstack_discard(ModelRun *r);
int tstack_checkpoint(ModelRun *r, int module, AcPolicy policy, Err *err);
int tstack_recompute(ModelRun *r, int module, AcPolicy policy, void *const *params, Work *w,
                     Err *err);
void *tstack_boundary(ModelRun *r, int module, BoundaryKind which, size_t *n);

/* The ModelOps of a stacked model whose run_create is `create` (which calls tstack_run_create
 * with the model's ends and shape); every other entry is the stack's. */
#define TSTACK_MODEL_OPS(create)                                                                   \
    {                                                                                              \
        .run_create = (create), .run_destroy = tstack_run_destroy, .set_batch = tstack_set_batch,  \
        .forward = tstack_forward, .loss = tstack_loss, .backward = tstack_backward,               \
        .correct = tstack_correct, .discard = tstack_discard, .checkpoint = tstack_checkpoint,     \
        .recompute = tstack_recompute, .boundary = tstack_boundary,                                \
    }

#endif
