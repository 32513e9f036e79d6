/* tstack: the embedding-blocks-head skeleton the ViT and the transformer share: their
 * description, their run's state, and every ModelOps entry, the two ends left to the model. */
#include "models/tstack.h"

#include <stdlib.h>

#include "models/lblock.h"

/* ---------------------------------------------------------------- the description */

int tstack_model_create(ModelDesc *m, const TStackEnds *ends, const ModelOps *ops,
                        const void *config, size_t config_size, int layers, Err *err) {
    int nparams = ends->embed_params + layers * ends->block_params + ends->head_params;
    int rc = model_desc_alloc(m, ends->name, nparams, layers + 2, config, config_size, err);
    if (rc) return rc;
    ParamMaker pm = {.m = m};
    ends->describe_embed(&pm, config);
    for (int l = 0; l < layers; l++) ends->describe_block(&pm, config, l);
    ends->describe_head(&pm, config);
    m->ops = ops;
    return 0;
}

/* ---------------------------------------------------------------- per-rank state */

void *run_take(ModelRun *r, size_t n) {
    return act_take(r->dev, r->dtype, n);
}

void *run_take_fp32(ModelRun *r, size_t n) {
    return act_take(r->dev, DTYPE_FP32, n);
}

void run_release(ModelRun *r, void **p) {
    act_release(r->dev, p);
}

int32_t *run_take_ids(ModelRun *r, size_t n) {
    return n ? r->dev->ops->alloc(r->dev, n * sizeof(int32_t), MEM_ACTIVATIONS, -1) : NULL;
}

void run_release_ids(ModelRun *r, int32_t **p) {
    if (*p) r->dev->ops->free(r->dev, *p, -1);
    *p = NULL;
}

/* The shared block's view of this run's current batch. */
static TBlock block_of(const ModelRun *r) {
    return (TBlock){.dev = r->dev,
                    .k = r->k,
                    .B = r->B,
                    .T = r->T,
                    .H = r->H,
                    .F = r->shape.mlp,
                    .heads = r->shape.heads,
                    .ln_eps = r->shape.ln_eps,
                    .causal = r->shape.causal,
                    .flash = r->shape.flash,
                    .kind = r->shape.llama ? &llama_block : &gpt_block,
                    .kv_heads = r->shape.kv_heads,
                    .eager_elementwise = r->shape.eager_elementwise,
                    .dtype = r->dtype};
}

static void free_run(ModelRun *r) {
    if (!r) return;
    free(r->x);
    free(r->blocks);
    free(r->own);
    free(r);
}

int tstack_run_create(const TStackEnds *ends, const TStackShape *shape, const void *config,
                      Device *dev, const Kernels *k, DType compute, ModelRun **out, Err *err) {
    ModelRun *r = calloc(1, sizeof *r);
    if (r) {
        r->x = calloc((size_t)shape->layers + 2, sizeof *r->x);
        r->blocks = calloc((size_t)shape->layers, sizeof *r->blocks);
        r->own = calloc(1, ends->own_size);
    }
    if (!r || !r->x || !r->blocks || !r->own) {
        free_run(r);
        return err_set(err, ERR_NOMEM, "out of memory creating the %s's state", ends->label);
    }
    r->ends = ends;
    r->config = config;
    r->shape = *shape;
    r->dev = dev;
    r->k = k;
    r->dtype = compute;
    r->T = shape->tokens;
    r->H = shape->hidden;
    *out = r;
    return 0;
}

void tstack_release_head(ModelRun *r) {
    r->ends->release_head(r);
    void **done[] = {&r->logits, &r->dlogits, &r->x[r->shape.layers + 1]};
    for (size_t i = 0; i < sizeof done / sizeof *done; i++) run_release(r, done[i]);
}

/* In the order the trace shows: the batch, the stream between modules, the blocks', the
 * head's, the stream's gradient. */
void tstack_discard(ModelRun *r) {
    TBlock t = block_of(r);
    r->ends->release_input(r);
    for (int m = 0; m < r->shape.layers + 2; m++) run_release(r, &r->x[m]);
    for (int l = 0; l < r->shape.layers; l++) tblock_release(&t, &r->blocks[l]);
    tstack_release_head(r);
    run_release(r, &r->grad);
}

void tstack_run_destroy(ModelRun *r) {
    if (!r) return;
    tstack_discard(r);
    free_run(r);
}

int tstack_set_batch(ModelRun *r, const Dataset *ds, const long *idx, size_t n, Err *err) {
    return r->ends->set_batch(r, ds, idx, n, err);
}

/* ---------------------------------------------------------------- forward and backward */

int tstack_forward(ModelRun *r, int module, void *const *params, Work *w, Err *err) {
    if (module == 0) return r->ends->embed_forward(r, params, w, err);
    if (module > r->shape.layers) return r->ends->head_forward(r, params, w, err);
    TBlock t = block_of(r);
    return tblock_forward(&t, &r->blocks[module - 1], params, r->x[module], &r->x[module + 1], w,
                          err);
}

/* The eager loss's five kernels over its n logits, in bytes an element: the fp32 cast (the
 * compute dtype's read, 4 written), log-softmax (three passes read 4, one writes 4), the NLL's
 * gradient (4 written), log-softmax's backward (dlogp read twice, logp once, 4 written) and the
 * cast back (4 read, the compute dtype's written). */
static void eager_loss_work(const ModelRun *r, Work *w, double n) {
    double low = (double)dtype_size(r->dtype);
    w->flops = 12.0 * n;
    w->bytes = n * ((low + 4) + 16 + 4 + 16 + (4 + low));
    w->kernels = 5;
}

/* Cross-entropy work over every logit, whether or not the model computes it: the gradient of
 * the logits is what it leaves. */
float tstack_loss(ModelRun *r, float grad_scale, Work *w) {
    size_t n = r->B * r->shape.outputs;
    run_release(r, &r->dlogits);
    work_begin(w, WORK_FORWARD);
    if (r->shape.eager_loss) {
        eager_loss_work(r, w, (double)n);
        return r->ends->loss && r->B ? r->ends->loss(r, grad_scale) : 0.0f;
    }
    r->dlogits = run_take(r, n);
    w->flops = 8.0 * (double)n;
    w->bytes = 8.0 * (double)n;
    if (!r->ends->loss || !r->B || !r->dlogits) return 0.0f;
    return r->ends->loss(r, grad_scale);
}

size_t tstack_correct(ModelRun *r) {
    return r->ends->correct ? r->ends->correct(r) : 0;
}

/* A block's gradient r->grad arrives as dL/d(output) and leaves, updated in place, as
 * dL/d(input). */
int tstack_backward(ModelRun *r, int module, void *const *params, float *const *grads, Work *w,
                    Err *err) {
    if (module > r->shape.layers) return r->ends->head_backward(r, params, grads, w, err);
    if (module == 0) {
        int rc = r->ends->embed_backward(r, params, grads, w, err);
        tstack_discard(r); /* the batch is done: nothing it saved is needed any more */
        return rc;
    }
    TBlock t = block_of(r);
    return tblock_backward(&t, &r->blocks[module - 1], params, grads, &r->x[module], r->grad, w,
                           err);
}

/* ---------------------------------------------------------------- activation checkpointing */

static int check_is_block(const ModelRun *r, int module, Err *err) {
    if (module >= 1 && module <= r->shape.layers) return 0;
    return err_set(err, ERR_INTERNAL, "module %d is not a block (1 to %d)", module,
                   r->shape.layers);
}

/* A block keeps its input x[module] and what the policy keeps (tblock_checkpoint). */
int tstack_checkpoint(ModelRun *r, int module, AcPolicy policy, Err *err) {
    int rc = check_is_block(r, module, err);
    if (rc) return rc;
    TBlock t = block_of(r);
    return tblock_checkpoint(&t, &r->blocks[module - 1], policy, &r->x[module], err);
}

/* The block's output is the next block's input, whose backward is done and freed it, so the
 * copy made here is dropped at once. */
int tstack_recompute(ModelRun *r, int module, AcPolicy policy, void *const *params, Work *w,
                     Err *err) {
    int rc = check_is_block(r, module, err);
    if (rc) return rc;
    TBlock t = block_of(r);
    return tblock_recompute(&t, &r->blocks[module - 1], policy, params, r->x[module],
                            &r->x[module + 1], w, err);
}

/* ---------------------------------------------------------------- unit boundaries */

void *tstack_boundary(ModelRun *r, int m, BoundaryKind which, size_t *n) {
    size_t hidden = r->B * r->T * r->H, logits = r->B * r->shape.outputs;
    int head = r->shape.layers + 1;
    *n = hidden;
    switch (which) {
    case BOUNDARY_INPUT:
        if (m > 0) return r->x[m];
        return r->ends->input ? r->ends->input(r, n) : NULL;
    case BOUNDARY_OUTPUT:
        if (m == head) *n = logits;
        return m == head ? r->logits : r->x[m + 1];
    case BOUNDARY_OUTPUT_GRAD:
        if (m == head) *n = logits;
        return m == head ? r->dlogits : r->grad;
    case BOUNDARY_INPUT_GRAD:
        return m == 0 ? NULL : r->grad;
    }
    return NULL;
}
