/* model: what the engine needs to know about a model. A model is an ordered list of
 * modules with named parameters (names and shapes as PyTorch would have them) plus per-module
 * forward and backward on full (gathered) parameters. The engine decides where parameters
 * live and when they are gathered; a model only computes. */
#ifndef FSDP_MODEL_H
#define FSDP_MODEL_H

#include <stddef.h>
#include <stdint.h>

#include "base/err.h"
#include "engine/device.h"
#include "kernels/kernels.h"

#define MODEL_MAX_NDIM 4

/* INIT_TRUNC_NORMAL is PyTorch's trunc_normal_: normal(mean, std) redrawn outside the absolute
 * bounds [-2, 2], its defaults. */
typedef enum { INIT_ZERO = 0, INIT_ONE, INIT_UNIFORM, INIT_NORMAL, INIT_TRUNC_NORMAL } InitKind;

typedef struct ParamSpec {
    char name[96];
    int ndim;
    int64_t shape[MODEL_MAX_NDIM];
    size_t numel;
    size_t row_elems; /* elements per dim-0 row: sharding moves whole rows */
    int module;
    InitKind init;
    float init_a, init_b; /* uniform: [a, b); (truncated) normal: mean a, std b */
    /* a short symbol for narration: the toy's "a" so element 1 prints as a₁ */
    char symbol[8];
} ParamSpec;

typedef struct ModuleSpec {
    char name[64];
    int first_param, nparams;
    int is_block; /* the `layer` wrap policy gives each block its own unit */
} ModuleSpec;

/* A data set held in memory. The toy's samples are floats (inputs, targets); image data
 * sets keep their bytes (pixels 0..255, labels) and the model normalises a batch as it
 * loads it, so the data set costs a quarter of its float size. A text is its bytes, each a
 * token: sample i is the in_elems bytes from i * in_elems, each predicting the byte after it. */
typedef struct Dataset {
    long n;
    size_t in_elems, target_elems; /* per sample */
    const float *inputs;           /* toy: [n, in_elems] */
    const float *targets;          /* toy: [n, target_elems] */
    const uint8_t *pixels;         /* images: [n, in_elems] */
    const uint8_t *labels;         /* images: [n] class indices */
    const uint8_t *text;           /* text: [n * in_elems + 1] bytes at least */
    int rows, cols;                /* images: in_elems = rows * cols */
    int classes;
    void *owned;                  /* freed by dataset_free */
    void (*release)(void *owned); /* how: NULL is free() (a mapped text unmaps) */
} Dataset;

typedef struct ModelDesc ModelDesc;

/* Per-rank runtime state of a model (activations of the current micro-batch). */
typedef struct ModelRun ModelRun;

/* Where a module meets the rest of the model: FSDP2's mixed precision casts there. */
typedef enum {
    BOUNDARY_INPUT = 0,   /* the module's forward input, before its forward */
    BOUNDARY_OUTPUT,      /* its forward output, after its forward */
    BOUNDARY_OUTPUT_GRAD, /* the gradient arriving at its output, before its backward */
    BOUNDARY_INPUT_GRAD,  /* the gradient it passes to its input, after its backward */
} BoundaryKind;

/* What a checkpointed block keeps (--ac-policy): AC_BLOCK its input alone, recomputing all of
 * it (torchtitan's full checkpointing); AC_OPS also every other GEMM's output that a backward
 * reads, and attention's, recomputing its norms, activations, residual adds and the other GEMMs
 * (torchtitan's selective op checkpointing); AC_TORCHTITAN that rule as torchtitan applies it,
 * every other GEMM's output whether a backward reads it or not: in a block of an odd number of
 * GEMMs (Llama's seven) the last's too, bytes fsdp holds and never reads, to plan what a
 * torchtitan job holds. */
typedef enum { AC_BLOCK = 0, AC_OPS, AC_TORCHTITAN } AcPolicy;

/* "block", "ops", "torchtitan"; and back (-1: none of them). */
const char *ac_policy_name(AcPolicy p);
int ac_policy_from_name(const char *name);

typedef struct ModelOps {
    /* The run computes in dtype `compute` (FSDP2's param_dtype; k computes in it): its
     * parameters, activations and activation gradients are arrays of it. */
    int (*run_create)(const ModelDesc *m, Device *dev, const Kernels *k, DType compute,
                      size_t max_batch, ModelRun **out, Err *err);
    void (*run_destroy)(ModelRun *run);
    /* Loads samples `indices` of ds as the current micro-batch. */
    int (*set_batch)(ModelRun *run, const Dataset *ds, const long *indices, size_t n, Err *err);
    /* Module forward on full parameters in the compute dtype (params[i] is the module's i-th
     * parameter); fills w with the work done so the clock can charge it. */
    int (*forward)(ModelRun *run, int module, void *const *params, Work *w, Err *err);
    /* Loss of the current batch after the last module; seeds the output gradient with
     * dL/dy * grad_scale (the loss scale under fp16). */
    float (*loss)(ModelRun *run, float grad_scale, Work *w);
    /* Module backward: ADDS this micro-batch's gradients into grads[i] (fp32). */
    int (*backward)(ModelRun *run, int module, void *const *params, float *const *grads, Work *w,
                    Err *err);
    /* Samples of the current batch the model classified right (after forward). NULL for a
     * model that does not classify. */
    size_t (*correct)(ModelRun *run);
    /* Frees what forward saved for backward: evaluation runs forward alone. */
    void (*discard)(ModelRun *run);
    /* Activation checkpointing of a block module (NULL: the model has nothing to checkpoint).
     * checkpoint, right after the block's forward: frees what the forward saved for backward
     * but the block's input, which moves to MEM_AC_INPUT, and under AC_OPS what that policy
     * keeps. recompute, right before the block's backward: runs again from them on the same
     * parameters what was freed, so backward finds exactly the values it would have found. */
    int (*checkpoint)(ModelRun *run, int module, AcPolicy policy, Err *err);
    int (*recompute)(ModelRun *run, int module, AcPolicy policy, void *const *params, Work *w,
                     Err *err);
    /* The current micro-batch's buffer at a boundary of module m and its length in elements of
     * the compute dtype; NULL when there is none (the gradient of the images). */
    void *(*boundary)(ModelRun *run, int module, BoundaryKind which, size_t *n);
} ModelOps;

struct ModelDesc {
    char name[32];
    int nparams, nmodules;
    ParamSpec *params;
    ModuleSpec *modules;
    size_t total_numel;
    const ModelOps *ops;
    void *config; /* the model's own description (a VitConfig, ...); model_desc_free frees it */
};

/* A kind of model as a saved file records it: the names its "model" may have and the sizes its
 * "config" holds. io/ reads and writes checkpoints through a list of these and so knows no
 * model; models/kinds.c has one per model. */
enum { MODEL_MAX_SIZES = 8 };
typedef struct ModelKind {
    const char *const *names; /* NULL-terminated: the names "model" may have; the first is
                               * ModelDesc.name */
    const char *what;         /* the model in words, for messages: "a ViT", "the toy" */
    const char *const *sizes; /* .config's keys in the order it has them (NULL: no sizes) */
    int nsizes;
    const char *sizes_text; /* them in words: "layers, heads, ... and vocab" */
    long max_size;          /* the largest any of them may be */
    /* The model of these sizes (nsizes whole numbers from 1 to max_size), or one line naming
     * `where` (the file) and what is wrong (ERR_USAGE); described: the model in words. */
    int (*build)(const char *where, const long *sizes, ModelDesc *out, char *described, size_t n,
                 Err *err);
    /* m's sizes, in the order of `sizes` */
    void (*sizes_of)(const ModelDesc *m, long *out);
} ModelKind;

typedef struct ModelKinds {
    const ModelKind *const *kinds; /* NULL-terminated */
    const char *names_text;        /* every name in words, for messages */
} ModelKinds;

/* The kind `name` is one of the names of; NULL: none. */
const ModelKind *model_kind_named(const ModelKinds *kinds, const char *name);

/* An empty description named `name` with room for nparams parameters and nmodules modules,
 * and its own copy of the model's config (config_size bytes). */
int model_desc_alloc(ModelDesc *m, const char *name, int nparams, int nmodules, const void *config,
                     size_t config_size, Err *err);
void model_desc_free(ModelDesc *m);
void dataset_free(Dataset *d);
/* A view of d's last n samples (n at most d->n), owning nothing: the held-out images or
 * sequences of --val-size. */
Dataset dataset_tail(const Dataset *d, long n);

/* Initial value of element `index` (flat, row-major) of parameter p: a pure function of
 * (seed, parameter name, index), so every world size starts from the same bits. */
float param_init_value(const ParamSpec *p, uint64_t seed, size_t index);
/* out[j] = param_init_value(p, seed, first + j) for j < n. */
void param_init_fill(const ParamSpec *p, uint64_t seed, size_t first, size_t n, float *out);

#endif
