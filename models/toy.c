/* toy: the workshop's model, layers La, Lb, Lc of three scalars each computing
 * y = w0 tanh(w1 x + w2), its description, its forward and backward, and its teacher's data. */
#include "models/toy.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* The target function: a teacher with the same architecture, so the student can reach
 * zero loss and the numbers it learns are meaningful to look at. */
const float toy_teacher[3][3] = {{1.0f, 1.5f, 0.5f}, {1.5f, 2.0f, -0.5f}, {2.0f, 1.0f, 0.0f}};

static const char *const toy_layer_names[3] = {"La", "Lb", "Lc"};
static const char *const toy_symbols[3] = {"a", "b", "c"};

struct ModelRun {
    Device *dev;
    const Kernels *k;
    DType dtype; /* the compute dtype: act and grad */
    size_t batch;
    void *act[4];  /* act[0] = input x, act[m+1] = output of module m */
    void *grad[4]; /* grad[m] = dL/d act[m] */
    float *target; /* fp32, as the loss reads it */
};

/* A batch of elements of t: an activation (the compute dtype) or the target (fp32). */
static void *alloc_batch(ModelRun *r, DType t) {
    return r->dev->ops->alloc(r->dev, r->batch * dtype_size(t), MEM_ACTIVATIONS, -1);
}

static void *alloc_act(ModelRun *r) {
    return alloc_batch(r, r->dtype);
}

static void free_act(ModelRun *r, void *slot) {
    void **p = slot;
    if (*p) r->dev->ops->free(r->dev, *p, -1);
    *p = NULL;
}

static int toy_run_create(const ModelDesc *m, Device *dev, const Kernels *k, DType compute,
                          size_t max_batch, ModelRun **out, Err *err) {
    (void)m;
    (void)max_batch;
    ModelRun *r = calloc(1, sizeof *r);
    if (!r) return err_set(err, ERR_NOMEM, "out of memory creating the toy model");
    r->dev = dev;
    r->k = k;
    r->dtype = compute;
    *out = r;
    return 0;
}

static void toy_discard(ModelRun *r);

static void toy_run_destroy(ModelRun *r) {
    if (!r) return;
    toy_discard(r);
    free(r);
}

static int toy_set_batch(ModelRun *r, const Dataset *ds, const long *idx, size_t n, Err *err) {
    r->batch = n;
    free_act(r, &r->act[0]);
    free_act(r, &r->target);
    r->act[0] = alloc_act(r);
    r->target = alloc_batch(r, DTYPE_FP32);
    if (n && (!r->act[0] || !r->target))
        return err_set(err, ERR_NOMEM, "out of memory for a toy batch of %zu", n);
    /* the inputs rounded to the compute dtype (FSDP2 casts the root's inputs), the targets
     * kept in fp32 */
    unsigned char *x = malloc(n * dtype_size(r->dtype) + 1);
    float *target = malloc(n * sizeof *target + 1);
    if (!x || !target) {
        free(x);
        free(target);
        return err_set(err, ERR_NOMEM, "out of memory staging a toy batch of %zu", n);
    }
    for (size_t i = 0; i < n; i++) {
        dtype_store(x, r->dtype, i, ds->inputs[idx[i]]);
        target[i] = ds->targets[idx[i]];
    }
    r->dev->ops->copy(r->dev, r->act[0], x, n * dtype_size(r->dtype)); /* staged: device memory */
    r->dev->ops->copy(r->dev, r->target, target, n * sizeof *target);
    free(x);
    free(target);
    return 0;
}

/* ~8 flops per element for tanh, 3 for the affine parts. */
static void toy_work(Work *w, WorkKind kind, size_t n, double passes) {
    work_begin(w, kind);
    w->flops = 11.0 * (double)n * passes;
    w->bytes = 8.0 * (double)n * passes;
}

static int toy_forward(ModelRun *r, int m, void *const *params, Work *w, Err *err) {
    free_act(r, &r->act[m + 1]);
    r->act[m + 1] = alloc_act(r);
    if (r->batch && !r->act[m + 1]) return err_set(err, ERR_NOMEM, "out of memory in forward");
    r->k->toy_forward(r->dtype, params[0], r->act[m], r->act[m + 1], r->batch);
    toy_work(w, WORK_FORWARD, r->batch, 1.0);
    return 0;
}

/* g *= s in the compute dtype: the fp32 scale is the op table's, so a low-precision gradient
 * goes through fp32 scratch on the device and is rounded back once. */
static void toy_scale_grad(ModelRun *r, void *g, float s) {
    if (r->dtype == DTYPE_FP32) {
        r->k->scale(g, s, r->batch);
        return;
    }
    float *wide = alloc_batch(r, DTYPE_FP32);
    if (!wide) return; /* the accounting-only device holds nothing to scale */
    r->k->cast(wide, DTYPE_FP32, g, r->dtype, r->batch);
    r->k->scale(wide, s, r->batch);
    r->k->cast(g, r->dtype, wide, DTYPE_FP32, r->batch);
    free_act(r, &wide);
}

static float toy_loss(ModelRun *r, float grad_scale, Work *w) {
    free_act(r, &r->grad[3]);
    r->grad[3] = alloc_act(r);
    float loss = r->k->mse_loss(r->dtype, r->act[3], r->target, r->grad[3], r->batch);
    if (grad_scale != 1.0f) toy_scale_grad(r, r->grad[3], grad_scale);
    toy_work(w, WORK_FORWARD, r->batch, 0.5);
    return loss;
}

static int toy_backward(ModelRun *r, int m, void *const *params, float *const *grads, Work *w,
                        Err *err) {
    void *dx = NULL;
    if (m > 0) {
        dx = r->grad[m] = alloc_act(r);
        if (r->batch && !dx) return err_set(err, ERR_NOMEM, "out of memory in backward");
    }
    r->k->toy_backward(r->dtype, params[0], r->act[m], r->grad[m + 1], dx, grads[0], r->batch);
    /* what this layer saved for backward is no longer needed */
    free_act(r, &r->act[m + 1]);
    free_act(r, &r->grad[m + 1]);
    if (m == 0) {
        free_act(r, &r->act[0]);
        free_act(r, &r->target);
    }
    toy_work(w, WORK_BACKWARD, r->batch, 2.0);
    return 0;
}

static void toy_discard(ModelRun *r) {
    for (int i = 0; i < 4; i++) {
        free_act(r, &r->act[i]);
        free_act(r, &r->grad[i]);
    }
    free_act(r, &r->target);
}

static void *toy_boundary(ModelRun *r, int m, BoundaryKind which, size_t *n) {
    *n = r->batch;
    switch (which) {
    case BOUNDARY_INPUT:
        return r->act[m];
    case BOUNDARY_OUTPUT:
        return r->act[m + 1];
    case BOUNDARY_OUTPUT_GRAD:
        return r->grad[m + 1];
    case BOUNDARY_INPUT_GRAD:
        return m == 0 ? NULL : r->grad[m];
    }
    return NULL;
}

static const ModelOps toy_ops = {
    .run_create = toy_run_create,
    .run_destroy = toy_run_destroy,
    .set_batch = toy_set_batch,
    .forward = toy_forward,
    .loss = toy_loss,
    .backward = toy_backward,
    .discard = toy_discard,
    .boundary = toy_boundary,
};

int toy_model_create(ModelDesc *m, Err *err) {
    memset(m, 0, sizeof *m);
    snprintf(m->name, sizeof m->name, "toy");
    m->nparams = m->nmodules = 3;
    m->params = calloc(3, sizeof *m->params);
    m->modules = calloc(3, sizeof *m->modules);
    if (!m->params || !m->modules) {
        model_desc_free(m);
        return err_set(err, ERR_NOMEM, "out of memory creating the toy model");
    }
    for (int i = 0; i < 3; i++) {
        ModuleSpec *mod = &m->modules[i];
        snprintf(mod->name, sizeof mod->name, "%s", toy_layer_names[i]);
        mod->first_param = i;
        mod->nparams = 1;
        mod->is_block = 1;
        ParamSpec *p = &m->params[i];
        snprintf(p->name, sizeof p->name, "%s.weight", toy_layer_names[i]);
        snprintf(p->symbol, sizeof p->symbol, "%s", toy_symbols[i]);
        p->ndim = 1;
        p->shape[0] = 3;
        p->numel = 3;
        p->row_elems = 1;
        p->module = i;
        /* positive and away from zero so every scalar gets a gradient from step one */
        p->init = INIT_UNIFORM;
        p->init_a = 0.25f;
        p->init_b = 1.25f;
    }
    m->total_numel = 9;
    m->ops = &toy_ops;
    return 0;
}

int toy_dataset_create(Dataset *d, Err *err) {
    memset(d, 0, sizeof *d);
    float *buf = malloc(2 * TOY_DATASET_SIZE * sizeof(float));
    if (!buf) return err_set(err, ERR_NOMEM, "out of memory creating the toy data set");
    float *x = buf, *y = buf + TOY_DATASET_SIZE;
    for (int i = 0; i < TOY_DATASET_SIZE; i++) {
        x[i] = -2.0f + 4.0f * ((float)i + 0.5f) / TOY_DATASET_SIZE;
        float h = x[i];
        for (int l = 0; l < 3; l++) kernels_cpu.toy_forward(DTYPE_FP32, toy_teacher[l], &h, &h, 1);
        y[i] = h;
    }
    d->n = TOY_DATASET_SIZE;
    d->in_elems = d->target_elems = 1;
    d->inputs = x;
    d->targets = y;
    d->owned = buf;
    return 0;
}
