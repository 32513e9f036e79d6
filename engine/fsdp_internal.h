/* fsdp_internal: the engine's private state, shared by the files that make it up: fsdp.c (the
 * schedule: gathers, reductions, forward, backward, the optimizer step), fsdp_state.c
 * (creation, initial values, values for reports and checkpoints) and fsdp_nvme.c (the NVMe
 * tier's unit-by-unit residency). Nothing outside engine/fsdp*.c includes it. */
#ifndef FSDP_FSDP_INTERNAL_H
#define FSDP_FSDP_INTERNAL_H

#include "engine/fsdp.h"
#include "engine/tier.h"

/* Requests in flight, in issue order; a rank waits on them first-in first-out, the way
 * one NCCL stream completes them. */
#define MAX_PENDING 64

typedef enum { PENDING_GATHER, PENDING_REDUCE } PendingKind;

typedef struct Pending {
    PendingKind kind;
    int unit;
} Pending;

typedef struct UnitState {
    /* resting parameters in plan->param_store (FSDP: the fp32 master itself) and gradients in
     * plan->grad_store: this rank's rows when sharded, else the whole unit */
    void *param, *grad;
    float *m, *v;  /* Adam moments of the rows this rank updates */
    float *master; /* DeepSpeed's layout: the fp32 master of those rows */
    float *grad32; /* DeepSpeed's layout, during the optimizer step: their gradients in fp32 */
    size_t param_n, grad_n, optim_n;
    size_t *param_local; /* per unit param: offset of its rows in `param` */
    size_t *grad_local;
    size_t *optim_local;
    void *unsharded;   /* gathered params in param_dtype; NULL when resharded */
    void *compute;     /* the params the kernels read, in the compute dtype */
    int compute_owned; /* compute is a cast copy we allocated */
    DevEvent ready;    /* compute may read `compute` from this point of its stream */
    float *ugrad;      /* unsharded grads (sharded grads), or `grad` itself */
    int ugrad_owned;
    void **param_ptrs; /* per unit param: into compute */
    float **grad_ptrs; /* per unit param: into ugrad */
    CommRequest gather, reduce;
    void *gather_send, *gather_recv, *reduce_buf, *reduce_send;
    int gather_in_flight, reduce_in_flight;
    DevEvent reduced;    /* the reduced gradient shard is in place from this point of comm */
    int reduced_pending; /* ... and compute has not waited for it yet */
    /* --offload nvme: param, m and v rest in the rank's file at these offsets and are in host
     * memory only while a unit needs them; nvme_bytes is charged to MEM_NVME */
    void *nvme_bytes;
    size_t nvme_at[3];
    TierRequest nvme_req[3];
    int nvme_reading, nvme_writing; /* which of param (1), m and v (2) are in flight */
} UnitState;

struct Engine {
    FsdpConfig cfg;
    const Plan *plan;
    const ModelDesc *model;
    RankEnv env;
    Device *dev;
    const Kernels *k;
    /* What the model computes in: param_dtype where the kernels compute in it (FSDP2's
     * MixedPrecisionPolicy), fp32 where they do not (a cast copy of each gathered unit) */
    DType compute_dtype;
    UnitState *units;
    ModelRun *run;
    /* The units in the order forward (backward) enters them, one entry per entry: a unit
     * whose modules are not adjacent (the root: embedding and head) appears twice. Prefetch
     * looks ahead in these. */
    int *fwd_seq, *bwd_seq;
    int nseq;
    int *module_first_up; /* module -> index of its first parameter within its unit */
    char *checkpointed;   /* module -> activation checkpointing keeps only its input */
    /* module -> FSDP2 casts there: the model's input or a non-root unit's first module
     * (enters), the model's output or a non-root unit's last module (leaves) */
    char *unit_entry, *unit_exit;
    size_t *param_flat; /* model param -> offset in the flat full-parameter vector */
    int reshard;
    int shard_rank, optim_rank, optim_size;
    Pending pending[MAX_PENDING];
    int npending;
    long steps;
    float loss_scale;
    int good_steps;
    /* The spans of one batched copy (copy_spans): room for every rank's spans of the unit with
     * the most parameters (this rank's only, in accounting-only runs, which unpack nothing) */
    CopySpan *spans;
    size_t spans_cap;
    void *tier;         /* --offload nvme: this rank's file (env.tier's) */
    float *local_grads; /* engine_record_local_grads's array; NULL: not recording */
};

/* ---------------------------------------------------------------- memory helpers */

static inline int dev_alloc(Engine *e, void **out, size_t bytes, MemCategory cat, int unit,
                            Err *err) {
    *out = bytes ? e->dev->ops->alloc(e->dev, bytes, cat, unit) : NULL;
    if (bytes && !*out)
        return err_set(err, ERR_NOMEM, "rank %d: out of memory allocating %zu bytes of %s",
                       e->env.rank, bytes, mem_category_label(cat));
    return 0;
}

static inline void dev_free(Engine *e, void *p, int unit) {
    if (p) e->dev->ops->free(e->dev, p, unit);
}

/* ZeRO-Offload's layout (--offload optimizer with sharded gradients): each reduced gradient
 * shard streams to the host as its reduction completes, where the host's Adam reads it, so the
 * GPU keeps no gradient shard (ddp and zero1 keep their whole gradients on the GPU and copy the
 * optimizer's rows at its step). */
static inline int grads_stream_to_host(const Engine *e) {
    return e->cfg.offload == OFFLOAD_OPTIMIZER && e->plan->grads_sharded;
}

/* Where resting state of category `cat` lives under the offload tier (the NVMe tier's
 * param and optimizer state are host buffers only while a unit is loaded). */
static inline MemCategory resting(const Engine *e, MemCategory cat) {
    if (e->cfg.offload == OFFLOAD_CPU || e->cfg.offload == OFFLOAD_NVME) return MEM_HOST_OFFLOAD;
    if (e->cfg.offload == OFFLOAD_OPTIMIZER && cat == MEM_OPTIM_STATE) return MEM_HOST_OFFLOAD;
    if (cat == MEM_GRAD_SHARD && grads_stream_to_host(e)) return MEM_HOST_OFFLOAD;
    return cat;
}

/* Element `at` of unit u's resting parameters (gradients), in the dtype they rest in. */
static inline void *param_at(const Engine *e, int u, size_t at) {
    return (char *)e->units[u].param + at * dtype_size(e->plan->param_store);
}

static inline void *grad_at(const Engine *e, int u, size_t at) {
    return (char *)e->units[u].grad + at * dtype_size(e->plan->grad_store);
}

/* ---------------------------------------------------------------- a unit's rows on a rank */

/* The rows of unit u's i-th parameter that rank `rank` of a group of `size` owns (torch.chunk
 * on dim 0): rows [begin, begin + rows), elements [first, first + n) of the parameter. */
typedef struct RowSpan {
    int i; /* the parameter's index in the unit */
    const ParamSpec *ps;
    const UnitParam *up;
    size_t begin, rows;
    size_t first, n; /* begin * row_elems, rows * row_elems */
} RowSpan;

static inline RowSpan param_rows(const Engine *e, int u, int i, int size, int rank) {
    RowSpan s = {.i = i, .up = &e->plan->units[u].params[i]};
    s.ps = &e->model->params[s.up->param];
    shard_rows((size_t)s.ps->shape[0], size, rank, &s.begin, &s.rows);
    s.first = s.begin * s.ps->row_elems;
    s.n = s.rows * s.ps->row_elems;
    return s;
}

/* Every parameter of unit u in the unit's order, each with the rows a rank owns:
 *     UnitRows it = unit_shard_rows(e, u);
 *     for (RowSpan s; unit_rows_next(&it, &s);) ... rows s.first .. s.first + s.n ... */
typedef struct UnitRows {
    const Engine *e;
    int u, size, rank, next;
} UnitRows;

static inline UnitRows unit_rows(const Engine *e, int u, int size, int rank) {
    return (UnitRows){.e = e, .u = u, .size = size, .rank = rank};
}

/* This rank's rows in its shard group: what it keeps of sharded parameters and gradients. */
static inline UnitRows unit_shard_rows(const Engine *e, int u) {
    return unit_rows(e, u, e->plan->shard_size, e->shard_rank);
}

/* The rows this rank's optimizer updates (all of them when optimizer state is replicated). */
static inline UnitRows unit_optim_rows(const Engine *e, int u) {
    return unit_rows(e, u, e->optim_size, e->optim_rank);
}

static inline int unit_rows_next(UnitRows *it, RowSpan *s) {
    if (it->next == it->e->plan->units[it->u].nparams) return 0;
    *s = param_rows(it->e, it->u, it->next++, it->size, it->rank);
    return 1;
}

/* The rows of unit u's i-th parameter this rank keeps of a tensor stored `sharded` (its rows in
 * the shard group) or replicated (all of them). */
static inline RowSpan kept_rows(const Engine *e, int u, int i, int sharded) {
    return sharded ? param_rows(e, u, i, e->plan->shard_size, e->shard_rank)
                   : param_rows(e, u, i, 1, 0);
}

/* Where the fp32 values of unit u's parameters live on this rank: FSDP's resting rows are the
 * master itself; DeepSpeed's master keeps the optimizer's rows, whose group (optim_size,
 * optim_rank) is the shard group whenever it is sharded. */
typedef struct Fp32Rows {
    float *base;
    const size_t *local; /* per unit param: offset of its rows in base */
    int sharded;         /* rows of the shard group, else the whole unit */
} Fp32Rows;

static inline Fp32Rows fp32_rows(const Engine *e, int u) {
    const UnitState *us = &e->units[u];
    if (e->plan->master) return (Fp32Rows){us->master, us->optim_local, e->plan->optim_sharded};
    return (Fp32Rows){us->param, us->param_local, e->plan->params_sharded};
}

static inline const ParamSpec *unit_param_spec(const Engine *e, int u, int i) {
    return &e->model->params[e->plan->units[u].params[i].param];
}

/* What the trace stamps on the events that follow. Between phases (PHASE_NONE) they belong to
 * the step just done (its teardown, an evaluation), or before the first step to its setup:
 * a one-step run has one step. */
static inline void set_phase(Engine *e, Phase p, int micro) {
    if (!e->env.trace) return;
    e->env.trace->phase = p;
    e->env.trace->step = p == PHASE_NONE && e->steps > 0 ? (int)e->steps - 1 : (int)e->steps;
    e->env.trace->micro = micro;
}

static inline void run_work(Engine *e, StreamId s, Work w) {
    e->dev->ops->run(e->dev, s, &w);
}

/* Kernels the engine launches itself on the GPU's compute stream (packing, unpacking, casts,
 * zeroing, the gradient passes), `bytes` read and written by them all: no work of their own
 * (DeviceOps.launched), so the step pays for every launch without a trace event for each. */
static inline void launched_kernels(Engine *e, int launches, double bytes) {
    if (launches)
        e->dev->ops->launched(
            e->dev, STREAM_COMPUTE,
            &(Work){.kind = WORK_PACK, .unit = -1, .bytes = bytes, .kernels = launches});
}

/* A model's compute call frees the inputs it has read before its work is accounted (run_work
 * after it returns): the trace keeps those frees back until the work is recorded, so the work
 * comes first, as it does on the device (engine/trace.h, tracebuf_hold). */
static inline void compute_call_begin(Engine *e) {
    if (e->env.trace) tracebuf_hold(e->env.trace);
}

static inline void compute_call_end(Engine *e, StreamId s, Work w) {
    run_work(e, s, w);
    if (e->env.trace) tracebuf_release(e->env.trace);
}

/* The stream `waiter` does not run ahead of what `source` has done so far. */
static inline void stream_follow(Engine *e, StreamId waiter, StreamId source) {
    device_follow(e->dev, waiter, source);
}

/* ---- shared between the engine's files */

/* fsdp.c */
void pack_rows(Engine *e, int u, const void *src, DType src_t, const size_t *local, DType t,
               char *block);
void unpack_gathered(Engine *e, int u, const char *recv, DType t, char *dst);
void reshard(Engine *e, int u);

/* fsdp_nvme.c: --offload nvme. A unit's param rows, or all of its resting state, in host
 * buffers for a while, and back to its file. */
enum { NVME_PARAM = 1, NVME_STATE = 2 }; /* what a load brings in */

static inline int nvme_on(const Engine *e) {
    return e->cfg.offload == OFFLOAD_NVME;
}

int nvme_open(Engine *e, Err *err);
int nvme_start_read(Engine *e, int u, int what, Err *err);
int nvme_load(Engine *e, int u, int what, Err *err);
int nvme_start_write(Engine *e, int u, int what, Err *err);
int nvme_drop(Engine *e, int u, Err *err);
int resident_begin(Engine *e, int u, Err *err);
int resident_end(Engine *e, int u, int dirty, Err *err);

#endif
