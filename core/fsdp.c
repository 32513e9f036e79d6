#include "fsdp.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "nvme_tier.h"

/* Requests in flight, in issue order; a rank waits on them first-in first-out, the way
 * one NCCL stream completes them. */
#define MAX_PENDING 64

typedef enum { PENDING_GATHER, PENDING_REDUCE } PendingKind;

typedef struct Pending {
    PendingKind kind;
    int unit;
} Pending;

typedef struct UnitState {
    float *param; /* fp32 master: this rank's rows (sharded) or the whole unit */
    float *grad;  /* persistent gradient: rows or whole unit */
    float *m, *v; /* Adam moments of the rows this rank updates */
    size_t param_n, grad_n, optim_n;
    size_t *param_local; /* per unit param: offset of its rows in `param` */
    size_t *grad_local;
    size_t *optim_local;
    void *unsharded;   /* gathered params in param_dtype; NULL when resharded */
    float *compute;    /* fp32 params the kernels read */
    int compute_owned; /* compute is a cast copy we allocated */
    DevEvent ready;    /* compute may read `compute` from this point of its stream */
    float *ugrad;      /* unsharded grads (sharded grads), or `grad` itself */
    int ugrad_owned;
    float **param_ptrs; /* per unit param: into compute */
    float **grad_ptrs;  /* per unit param: into ugrad */
    CommRequest gather, reduce;
    void *gather_send, *gather_recv, *reduce_buf, *reduce_send;
    int gather_in_flight, reduce_in_flight;
    DevEvent reduced;    /* the reduced gradient shard is in place from this point of comm */
    int reduced_pending; /* ... and compute has not waited for it yet */
    /* --offload nvme: param, m and v rest in the rank's file at these offsets and are in host
     * memory only while a unit needs them; nvme_bytes is charged to MEM_NVME */
    void *nvme_bytes;
    size_t nvme_at[3];
    NvmeRequest nvme_req[3];
    int nvme_reading, nvme_writing; /* which of param (1), m and v (2) are in flight */
} UnitState;

struct Engine {
    FsdpConfig cfg;
    const Plan *plan;
    const ModelDesc *model;
    RankEnv env;
    Device *dev;
    const Kernels *k;
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
    NvmeTier *nvme; /* --offload nvme: this rank's file */
};

/* ---------------------------------------------------------------- configuration */

void fsdp_config_defaults(FsdpConfig *c) {
    memset(c, 0, sizeof *c);
    c->strategy = STRAT_ZERO3;
    c->replicas = 1;
    c->wrap.kind = WRAP_LAYER;
    c->reshard_after_forward = -1;
    c->prefetch_forward = 1;
    c->prefetch_backward = 1;
    c->grad_accum = 1;
    c->optim = OPTIM_ADAM;
    c->lr = 1e-3f;
    c->beta1 = 0.9f;
    c->beta2 = 0.999f;
    c->eps = 1e-8f;
    c->param_dtype = DTYPE_FP32;
    c->reduce_dtype = DTYPE_FP32;
    c->output_dtype = -1;
    c->cast_forward_inputs = 1;
    c->batch_size = 8;
    c->seed = 1234;
}

int fsdp_reshard_after_forward(const FsdpConfig *c) {
    if (c->strategy == STRAT_DDP || c->strategy == STRAT_ZERO1) return 0;
    if (c->reshard_after_forward >= 0) return c->reshard_after_forward;
    return c->strategy != STRAT_ZERO2;
}

int fsdp_module_checkpointed(const FsdpConfig *c, const ModelDesc *m, int module) {
    if (c->ac_every <= 0 || !m->modules[module].is_block) return 0;
    int nth = 0; /* which block this is, from 1 */
    for (int i = 0; i <= module; i++) nth += m->modules[i].is_block;
    return nth % c->ac_every == 0;
}

int fsdp_uses_loss_scaling(const FsdpConfig *c) {
    return c->param_dtype == DTYPE_FP16 || c->reduce_dtype == DTYPE_FP16;
}

/* ---------------------------------------------------------------- memory helpers */

static int dev_alloc(Engine *e, void **out, size_t bytes, MemCategory cat, int unit, Err *err) {
    *out = bytes ? e->dev->ops->alloc(e->dev, bytes, cat, unit) : NULL;
    if (bytes && !*out)
        return err_set(err, ERR_NOMEM, "rank %d: out of memory allocating %zu bytes of %s",
                       e->env.rank, bytes, mem_category_label(cat));
    return 0;
}

static void dev_free(Engine *e, void *p, int unit) {
    if (p) e->dev->ops->free(e->dev, p, unit);
}

/* Where resting state of category `cat` lives under the offload tier (the NVMe tier's
 * param and optimizer state are host buffers only while a unit is loaded). */
static MemCategory resting(const Engine *e, MemCategory cat) {
    if (e->cfg.offload == OFFLOAD_CPU || e->cfg.offload == OFFLOAD_NVME) return MEM_HOST_OFFLOAD;
    if (e->cfg.offload == OFFLOAD_OPTIMIZER && cat == MEM_OPTIM_STATE) return MEM_HOST_OFFLOAD;
    return cat;
}

static const ParamSpec *unit_param_spec(const Engine *e, int u, int i) {
    return &e->model->params[e->plan->units[u].params[i].param];
}

static void set_phase(Engine *e, Phase p, int micro) {
    if (!e->env.trace) return;
    e->env.trace->phase = p;
    e->env.trace->step = (int)e->steps;
    e->env.trace->micro = micro;
}

static void run_work(Engine *e, StreamId s, Work w) {
    e->dev->ops->run(e->dev, s, &w);
}

/* The stream `waiter` does not run ahead of what `source` has done so far. */
static void stream_follow(Engine *e, StreamId waiter, StreamId source) {
    DevEvent ev = {0};
    e->dev->ops->event_record(e->dev, source, &ev);
    e->dev->ops->stream_wait(e->dev, waiter, &ev);
}

/* ---------------------------------------------------------------- the NVMe tier */

/* ZeRO-Infinity's tier: a unit's fp32 param rows and Adam's m and v rest in the rank's file.
 * A unit is loaded into host buffers (the param alone to gather it, all three for its
 * optimizer step) and dropped again; reads of the next unit start while this one computes. */
enum { NVME_PARAM = 1, NVME_STATE = 2 }; /* what a load brings in */

static int nvme_on(const Engine *e) {
    return e->cfg.offload == OFFLOAD_NVME;
}

static float **nvme_buffer(UnitState *us, int slot) {
    return slot == 0 ? &us->param : slot == 1 ? &us->m : &us->v;
}

static size_t nvme_numel(const UnitState *us, int slot) {
    return slot == 0 ? us->param_n : us->optim_n;
}

static void nvme_slots(int what, int *first, int *last) {
    *first = what & NVME_PARAM ? 0 : 1;
    *last = what & NVME_STATE ? 2 : 0;
}

/* Host buffers for `what` of unit u, and reads into them (not waited for). */
static int nvme_start_read(Engine *e, int u, int what, Err *err) {
    UnitState *us = &e->units[u];
    int first, last, rc = 0;
    nvme_slots(what, &first, &last);
    double bytes = 0;
    for (int s = first; s <= last && !rc; s++) {
        float **buf = nvme_buffer(us, s);
        size_t n = nvme_numel(us, s) * sizeof(float);
        if (*buf || !n) continue;
        if ((rc = dev_alloc(e, (void **)buf, n, MEM_HOST_OFFLOAD, u, err))) break;
        if (e->nvme) { /* an accounting-only run has no file and no data to read */
            rc = nvme_tier_read(e->nvme, us->nvme_at[s], *buf, n, &us->nvme_req[s], err);
            us->nvme_reading |= 1 << s;
        }
        bytes += (double)n;
    }
    if (bytes > 0)
        run_work(e, STREAM_COPY, (Work){.kind = WORK_NVME_READ, .unit = u, .bytes = bytes});
    return rc;
}

/* Unit u's `what` in host memory, read now or waited for if a read is already under way. */
static int nvme_load(Engine *e, int u, int what, Err *err) {
    UnitState *us = &e->units[u];
    int rc = nvme_start_read(e, u, what, err);
    for (int s = 0; s < 3 && !rc; s++)
        if (us->nvme_reading & (1 << s)) {
            rc = nvme_tier_wait(e->nvme, &us->nvme_req[s], err);
            us->nvme_reading &= ~(1 << s);
        }
    return rc;
}

/* Waits for unit u's writes and frees its buffers (a read still in flight is waited first). */
static int nvme_drop(Engine *e, int u, Err *err) {
    UnitState *us = &e->units[u];
    int rc = 0;
    for (int s = 0; s < 3; s++) {
        int bit = 1 << s;
        if ((us->nvme_reading | us->nvme_writing) & bit) {
            int w = nvme_tier_wait(e->nvme, &us->nvme_req[s], err);
            if (!rc) rc = w;
        }
        us->nvme_reading &= ~bit;
        us->nvme_writing &= ~bit;
        float **buf = nvme_buffer(us, s);
        dev_free(e, *buf, u);
        *buf = NULL;
    }
    return rc;
}

/* Starts writing unit u's `what` back; nvme_drop waits for it. */
static int nvme_start_write(Engine *e, int u, int what, Err *err) {
    UnitState *us = &e->units[u];
    int first, last, rc = 0;
    nvme_slots(what, &first, &last);
    double bytes = 0;
    for (int s = first; s <= last && !rc; s++) {
        float *buf = *nvme_buffer(us, s);
        size_t n = nvme_numel(us, s) * sizeof(float);
        if (!buf || !n) continue;
        if (e->nvme) {
            rc = nvme_tier_write(e->nvme, us->nvme_at[s], buf, n, &us->nvme_req[s], err);
            us->nvme_writing |= 1 << s;
        }
        bytes += (double)n;
    }
    if (bytes > 0)
        run_work(e, STREAM_COPY, (Work){.kind = WORK_NVME_WRITE, .unit = u, .bytes = bytes});
    return rc;
}

/* For code that reads or changes a unit's resting state outside the schedule (checkpoints,
 * initial values, reports): load it, and afterwards write it back if `dirty` and drop it. */
static int resident_begin(Engine *e, int u, Err *err) {
    return nvme_on(e) ? nvme_load(e, u, NVME_PARAM | NVME_STATE, err) : 0;
}

static int resident_end(Engine *e, int u, int dirty, Err *err) {
    if (!nvme_on(e)) return 0;
    int rc = dirty ? nvme_start_write(e, u, NVME_PARAM | NVME_STATE, err) : 0;
    int d = nvme_drop(e, u, err);
    return rc ? rc : d;
}

/* The byte ranges of every unit's param, m and v in the file, each 4 KiB aligned so the
 * transfers can go straight to the disk; opens the file; charges each unit's share. */
static int nvme_open(Engine *e, Err *err) {
    size_t at = 0;
    for (int u = 0; u < e->plan->nunits; u++)
        for (int s = 0; s < 3; s++) {
            e->units[u].nvme_at[s] = at;
            size_t n = nvme_numel(&e->units[u], s) * sizeof(float);
            at += (n + NVME_TIER_ALIGN - 1) / NVME_TIER_ALIGN * NVME_TIER_ALIGN;
        }
    int rc = e->dev->accounting_only
                 ? 0
                 : nvme_tier_open(&e->nvme, e->cfg.nvme_dir, e->env.rank, at ? at : 1, err);
    for (int u = 0; !rc && u < e->plan->nunits; u++) {
        UnitState *us = &e->units[u];
        rc = dev_alloc(e, &us->nvme_bytes, (us->param_n + 2 * us->optim_n) * sizeof(float),
                       MEM_NVME, u, err);
    }
    return rc;
}

/* ---------------------------------------------------------------- the pending queue */

static int complete_gather(Engine *e, int u, Err *err);
static int complete_reduce(Engine *e, int u, Err *err);

static int pending_push(Engine *e, PendingKind kind, int u, Err *err) {
    if (e->npending == MAX_PENDING)
        return err_set(err, ERR_INTERNAL, "more than %d collectives in flight", MAX_PENDING);
    e->pending[e->npending++] = (Pending){kind, u};
    return 0;
}

/* Waits for the oldest request in flight and runs its completion. */
static int pending_pop(Engine *e, Err *err) {
    Pending p = e->pending[0];
    memmove(e->pending, e->pending + 1, (size_t)(--e->npending) * sizeof *e->pending);
    UnitState *us = &e->units[p.unit];
    CommRequest *req = p.kind == PENDING_GATHER ? &us->gather : &us->reduce;
    Comm *c =
        p.kind == PENDING_GATHER || e->plan->grads_sharded ? e->env.shard_comm : e->env.world_comm;
    int rc = c->ops->wait(c, req, err);
    if (rc) return rc;
    return p.kind == PENDING_GATHER ? complete_gather(e, p.unit, err)
                                    : complete_reduce(e, p.unit, err);
}

static int pending_wait_for(Engine *e, PendingKind kind, int u, Err *err) {
    for (;;) {
        int found = 0;
        for (int i = 0; i < e->npending; i++)
            if (e->pending[i].kind == kind && e->pending[i].unit == u) found = 1;
        if (!found) return 0;
        int rc = pending_pop(e, err);
        if (rc) return rc;
    }
}

static int pending_drain(Engine *e, Err *err) {
    while (e->npending) {
        int rc = pending_pop(e, err);
        if (rc) return rc;
    }
    return 0;
}

/* ---------------------------------------------------------------- gathering parameters */

/* Copies this rank's rows (cast to `t`) into its padded wire block; padding is zero. */
static void pack_rows(Engine *e, int u, const float *src, const size_t *local, DType t,
                      char *block) {
    const Unit *unit = &e->plan->units[u];
    size_t ds = dtype_size(t);
    for (int i = 0; i < unit->nparams; i++) {
        const ParamSpec *ps = unit_param_spec(e, u, i);
        const UnitParam *up = &unit->params[i];
        size_t begin, rows;
        shard_rows((size_t)ps->shape[0], e->plan->shard_size, e->shard_rank, &begin, &rows);
        char *dst = block + up->wire_offset * ds;
        e->k->cast(dst, t, src + local[i], DTYPE_FP32, rows * ps->row_elems);
        e->k->zero_bytes(dst + rows * ps->row_elems * ds,
                         (up->chunk_rows - rows) * ps->row_elems * ds);
    }
}

/* Copies every rank's rows out of the gathered wire blocks into the unit's layout. */
static void unpack_gathered(Engine *e, int u, const char *recv, DType t, char *dst) {
    const Unit *unit = &e->plan->units[u];
    size_t ds = dtype_size(t);
    for (int q = 0; q < e->plan->shard_size; q++)
        for (int i = 0; i < unit->nparams; i++) {
            const ParamSpec *ps = unit_param_spec(e, u, i);
            const UnitParam *up = &unit->params[i];
            size_t begin, rows;
            shard_rows((size_t)ps->shape[0], e->plan->shard_size, q, &begin, &rows);
            const char *src = recv + ((size_t)q * unit->wire_numel + up->wire_offset) * ds;
            e->k->copy_bytes(dst + (up->offset + begin * ps->row_elems) * ds, src,
                             rows * ps->row_elems * ds);
        }
}

static int gather_start(Engine *e, int u, Err *err) {
    UnitState *us = &e->units[u];
    const Unit *unit = &e->plan->units[u];
    DType t = e->cfg.param_dtype;
    size_t block = unit->wire_numel * dtype_size(t);
    int rc = dev_alloc(e, &us->gather_send, block, MEM_COMM_BUFFER, u, err);
    if (!rc)
        rc = dev_alloc(e, &us->gather_recv, block * (size_t)e->plan->shard_size, MEM_COMM_BUFFER, u,
                       err);
    if (rc) return rc;
    if (e->cfg.offload == OFFLOAD_CPU || nvme_on(e)) { /* the shard crosses PCIe first */
        run_work(e, STREAM_COPY,
                 (Work){.kind = WORK_COPY_H2D,
                        .unit = u,
                        .bytes = (double)(us->param_n * sizeof(float))});
        stream_follow(e, STREAM_COMM, STREAM_COPY);
    }
    if (nvme_on(e) && (rc = nvme_load(e, u, NVME_PARAM, err))) return rc;
    pack_rows(e, u, us->param, us->param_local, t, us->gather_send);
    if (nvme_on(e) && (rc = nvme_drop(e, u, err))) return rc; /* the wire block has it now */
    us->gather = (CommRequest){.kind = COLL_ALL_GATHER,
                               .send = us->gather_send,
                               .recv = us->gather_recv,
                               .count = unit->wire_numel,
                               .dtype = t,
                               .unit = u};
    Comm *c = e->env.shard_comm;
    if ((rc = c->ops->start(c, &us->gather, err))) return rc;
    us->gather_in_flight = 1;
    return pending_push(e, PENDING_GATHER, u, err);
}

/* Points the kernels at fp32 params: the gathered buffer itself, or a cast copy of it. */
static int make_compute_view(Engine *e, int u, const void *src, Err *err) {
    UnitState *us = &e->units[u];
    const Unit *unit = &e->plan->units[u];
    if (e->cfg.param_dtype == DTYPE_FP32) {
        us->compute = (float *)src;
        us->compute_owned = 0;
    } else {
        int rc = dev_alloc(e, (void **)&us->compute, unit->numel * sizeof(float), MEM_COMPUTE_COPY,
                           u, err);
        if (rc) return rc;
        e->k->cast(us->compute, DTYPE_FP32, src, e->cfg.param_dtype, unit->numel);
        us->compute_owned = 1;
    }
    for (int i = 0; i < unit->nparams; i++)
        us->param_ptrs[i] = us->compute ? us->compute + unit->params[i].offset : NULL;
    return 0;
}

static int complete_gather(Engine *e, int u, Err *err) {
    UnitState *us = &e->units[u];
    const Unit *unit = &e->plan->units[u];
    DType t = e->cfg.param_dtype;
    us->gather_in_flight = 0;
    int rc = dev_alloc(e, &us->unsharded, unit->numel * dtype_size(t), MEM_PARAM_UNSHARDED, u, err);
    if (rc) return rc;
    unpack_gathered(e, u, us->gather_recv, t, us->unsharded);
    dev_free(e, us->gather_send, u);
    dev_free(e, us->gather_recv, u);
    us->gather_send = us->gather_recv = NULL;
    us->ready = us->gather.done;
    return make_compute_view(e, u, us->unsharded, err);
}

/* Replicated params need no collective, only a low-precision copy when asked for one. */
static int replicated_params_ready(Engine *e, int u, Err *err) {
    UnitState *us = &e->units[u];
    const Unit *unit = &e->plan->units[u];
    e->dev->ops->event_record(e->dev, STREAM_COMPUTE, &us->ready);
    if (e->cfg.param_dtype == DTYPE_FP32) return make_compute_view(e, u, us->param, err);
    int rc = dev_alloc(e, &us->unsharded, unit->numel * dtype_size(e->cfg.param_dtype),
                       MEM_PARAM_UNSHARDED, u, err);
    if (rc) return rc;
    e->k->cast(us->unsharded, e->cfg.param_dtype, us->param, DTYPE_FP32, unit->numel);
    return make_compute_view(e, u, us->unsharded, err);
}

static int unit_present(const Engine *e, int u) {
    return e->units[u].compute != NULL || e->units[u].gather_in_flight;
}

/* Makes unit u's params available to compute, gathering them if nobody prefetched them. */
static int unit_params_ready(Engine *e, int u, Err *err) {
    UnitState *us = &e->units[u];
    if (us->compute) return 0;
    if (!e->plan->params_sharded) return replicated_params_ready(e, u, err);
    if (!us->gather_in_flight) {
        /* not prefetched: the gather is issued only when compute gets here */
        stream_follow(e, STREAM_COMM, STREAM_COMPUTE);
        int rc = gather_start(e, u, err);
        if (rc) return rc;
    }
    return 0;
}

static int unit_params_wait(Engine *e, int u, Err *err) {
    int rc = pending_wait_for(e, PENDING_GATHER, u, err);
    if (rc) return rc;
    e->dev->ops->stream_wait(e->dev, STREAM_COMPUTE, &e->units[u].ready);
    return 0;
}

/* Starts gathers for the next `depth` entries of `seq` after position `pos` whose units are
 * not gathered (or being gathered) already. */
static int prefetch(Engine *e, const int *seq, int pos, int depth, Err *err) {
    if (!e->plan->params_sharded) return 0;
    for (int i = pos + 1; i < e->nseq && i <= pos + depth; i++)
        if (!unit_present(e, seq[i])) {
            int rc = gather_start(e, seq[i], err);
            if (rc) return rc;
        }
    return 0;
}

static void reshard(Engine *e, int u) {
    UnitState *us = &e->units[u];
    if (us->compute_owned) dev_free(e, us->compute, u);
    dev_free(e, us->unsharded, u);
    us->compute = NULL;
    us->unsharded = NULL;
    us->compute_owned = 0;
}

/* ---------------------------------------------------------------- reducing gradients */

static int ugrad_ready(Engine *e, int u, Err *err) {
    UnitState *us = &e->units[u];
    const Unit *unit = &e->plan->units[u];
    if (us->ugrad) return 0;
    if (!e->plan->grads_sharded) {
        us->ugrad = us->grad;
    } else {
        int rc = dev_alloc(e, (void **)&us->ugrad, unit->numel * sizeof(float), MEM_GRAD_UNSHARDED,
                           u, err);
        if (rc) return rc;
        e->k->zero(us->ugrad, unit->numel);
        us->ugrad_owned = 1;
    }
    for (int i = 0; i < unit->nparams; i++) us->grad_ptrs[i] = us->ugrad + unit->params[i].offset;
    return 0;
}

/* Every rank's rows of the unsharded grads, cast, into its padded wire block. */
static void pack_grads_for_scatter(Engine *e, int u, char *send) {
    const Unit *unit = &e->plan->units[u];
    UnitState *us = &e->units[u];
    DType t = e->cfg.reduce_dtype;
    size_t ds = dtype_size(t);
    for (int q = 0; q < e->plan->shard_size; q++)
        for (int i = 0; i < unit->nparams; i++) {
            const ParamSpec *ps = unit_param_spec(e, u, i);
            const UnitParam *up = &unit->params[i];
            size_t begin, rows;
            shard_rows((size_t)ps->shape[0], e->plan->shard_size, q, &begin, &rows);
            char *dst = send + ((size_t)q * unit->wire_numel + up->wire_offset) * ds;
            e->k->cast(dst, t, us->ugrad + up->offset + begin * ps->row_elems, DTYPE_FP32,
                       rows * ps->row_elems);
            e->k->zero_bytes(dst + rows * ps->row_elems * ds,
                             (up->chunk_rows - rows) * ps->row_elems * ds);
        }
}

static int reduce_start_sharded(Engine *e, int u, Err *err) {
    UnitState *us = &e->units[u];
    const Unit *unit = &e->plan->units[u];
    DType t = e->cfg.reduce_dtype;
    size_t block = unit->wire_numel * dtype_size(t);
    int rc = dev_alloc(e, &us->reduce_send, block * (size_t)e->plan->shard_size, MEM_COMM_BUFFER, u,
                       err);
    if (!rc) rc = dev_alloc(e, &us->reduce_buf, block, MEM_COMM_BUFFER, u, err);
    if (rc) return rc;
    pack_grads_for_scatter(e, u, us->reduce_send);
    dev_free(e, us->ugrad, u); /* the wire copy is all that is needed now */
    us->ugrad = NULL;
    us->ugrad_owned = 0;
    us->reduce = (CommRequest){.kind = COLL_REDUCE_SCATTER,
                               .send = us->reduce_send,
                               .recv = us->reduce_buf,
                               .count = unit->wire_numel,
                               .dtype = t,
                               .op = REDUCE_AVG,
                               .unit = u};
    return e->env.shard_comm->ops->start(e->env.shard_comm, &us->reduce, err);
}

/* DDP and zero1: every rank keeps whole grads, averaged with an all-reduce. */
static int reduce_start_replicated(Engine *e, int u, Err *err) {
    UnitState *us = &e->units[u];
    const Unit *unit = &e->plan->units[u];
    DType t = e->cfg.reduce_dtype;
    void *buf = us->grad;
    if (t != DTYPE_FP32) {
        int rc =
            dev_alloc(e, &us->reduce_buf, unit->numel * dtype_size(t), MEM_COMM_BUFFER, u, err);
        if (rc) return rc;
        e->k->cast(us->reduce_buf, t, us->grad, DTYPE_FP32, unit->numel);
        buf = us->reduce_buf;
    }
    us->ugrad = NULL;
    us->reduce = (CommRequest){.kind = COLL_ALL_REDUCE,
                               .send = buf,
                               .recv = buf,
                               .count = unit->numel,
                               .dtype = t,
                               .op = REDUCE_AVG,
                               .unit = u};
    return e->env.world_comm->ops->start(e->env.world_comm, &us->reduce, err);
}

/* FSDP2 keeps one reduce-scatter in flight: the previous one is waited for (and its buffers
 * freed) before the next starts, so a backward that gathers nothing (reshard_after_forward
 * false) does not hold every unit's gradient buffers until it ends. */
static int finish_earlier_reduces(Engine *e, Err *err) {
    for (;;) {
        int pending = 0;
        for (int i = 0; i < e->npending; i++) pending |= e->pending[i].kind == PENDING_REDUCE;
        if (!pending) return 0;
        int rc = pending_pop(e, err);
        if (rc) return rc;
    }
}

static int reduce_start(Engine *e, int u, Err *err) {
    int rc0 = finish_earlier_reduces(e, err);
    if (rc0) return rc0;
    stream_follow(e, STREAM_COMM, STREAM_COMPUTE); /* the grads must exist first */
    int rc = e->plan->grads_sharded ? reduce_start_sharded(e, u, err)
                                    : reduce_start_replicated(e, u, err);
    if (rc) return rc;
    e->units[u].reduce_in_flight = 1;
    return pending_push(e, PENDING_REDUCE, u, err);
}

static int complete_reduce(Engine *e, int u, Err *err) {
    UnitState *us = &e->units[u];
    const Unit *unit = &e->plan->units[u];
    DType t = e->cfg.reduce_dtype;
    us->reduce_in_flight = 0;
    DevEvent done = us->reduce.done;
    if (e->plan->grads_sharded) {
        if (e->env.replica_comm) { /* hsdp: average the shard across replica groups too */
            int rc = comm_all_reduce(e->env.replica_comm, us->reduce_buf, us->reduce_buf,
                                     unit->wire_numel, t, REDUCE_AVG, u, err);
            if (rc) return rc;
            e->dev->ops->event_record(e->dev, STREAM_COMM, &done);
        }
        for (int i = 0; i < unit->nparams; i++) {
            const ParamSpec *ps = unit_param_spec(e, u, i);
            size_t begin, rows;
            shard_rows((size_t)ps->shape[0], e->plan->shard_size, e->shard_rank, &begin, &rows);
            e->k->cast(us->grad + us->grad_local[i], DTYPE_FP32,
                       (char *)us->reduce_buf + unit->params[i].wire_offset * dtype_size(t), t,
                       rows * ps->row_elems);
        }
        dev_free(e, us->reduce_send, u);
        us->reduce_send = NULL;
    } else if (us->reduce_buf) {
        e->k->cast(us->grad, DTYPE_FP32, us->reduce_buf, t, unit->numel);
    }
    dev_free(e, us->reduce_buf, u);
    us->reduce_buf = NULL;
    if (e->cfg.offload == OFFLOAD_CPU || nvme_on(e)) { /* the reduced shard goes to the host */
        e->dev->ops->stream_wait(e->dev, STREAM_COPY, &done);
        run_work(e, STREAM_COPY,
                 (Work){.kind = WORK_COPY_D2H,
                        .unit = u,
                        .bytes = (double)(us->grad_n * sizeof(float))});
        e->dev->ops->event_record(e->dev, STREAM_COPY, &done);
    }
    /* compute needs the reduced shard only for the optimizer step: it waits at the end of
     * backward (backward_done), not here, so no unit's backward waits on another's reduction */
    us->reduced = done;
    us->reduced_pending = 1;
    return 0;
}

/* ---------------------------------------------------------------- mixed precision */

/* The unit computes in low precision and its inputs are cast to it. */
static int casts_inputs(const Engine *e) {
    return e->cfg.param_dtype != DTYPE_FP32 && e->cfg.cast_forward_inputs;
}

static int casts_outputs(const Engine *e) {
    return e->cfg.output_dtype >= 0 && e->cfg.output_dtype != DTYPE_FP32;
}

/* Rounds the model's buffer at a boundary of module m to dtype t in place, as a cast to t
 * and back would. */
static int round_boundary(Engine *e, int m, BoundaryKind which, DType t, Err *err) {
    size_t n = 0;
    float *x = e->model->ops->boundary ? e->model->ops->boundary(e->run, m, which, &n) : NULL;
    if (!x || !n || t == DTYPE_FP32) return 0;
    void *low;
    int rc = dev_alloc(e, &low, n * dtype_size(t), MEM_ACTIVATIONS, -1, err);
    if (rc) return rc;
    e->k->cast(low, t, x, DTYPE_FP32, n);
    e->k->cast(x, DTYPE_FP32, low, t, n);
    dev_free(e, low, -1);
    int backward = which == BOUNDARY_OUTPUT_GRAD || which == BOUNDARY_INPUT_GRAD;
    run_work(e, STREAM_COMPUTE,
             (Work){.kind = backward ? WORK_BACKWARD : WORK_FORWARD,
                    .unit = e->plan->module_unit[m],
                    .bytes = 2.0 * (double)n * (double)(sizeof(float) + dtype_size(t))});
    return 0;
}

/* ---------------------------------------------------------------- forward and backward */

static int last_module_of(const Engine *e, int u) {
    const Unit *unit = &e->plan->units[u];
    return unit->modules[unit->nmodules - 1];
}

/* The NVMe tier's double buffer: the param rows of the first unit past the gather prefetch
 * start loading now, so they are in host memory when its gather is issued. */
static int nvme_prefetch(Engine *e, const int *seq, int pos, int depth, Err *err) {
    int i = pos + depth + 1;
    if (!nvme_on(e) || i >= e->nseq || unit_present(e, seq[i])) return 0;
    return nvme_start_read(e, seq[i], NVME_PARAM, err);
}

static int enter_unit_forward(Engine *e, int pos, Err *err) {
    int u = e->fwd_seq[pos];
    int rc = unit_params_ready(e, u, err);
    if (!rc) rc = prefetch(e, e->fwd_seq, pos, e->cfg.prefetch_forward, err);
    if (!rc) rc = nvme_prefetch(e, e->fwd_seq, pos, e->cfg.prefetch_forward, err);
    return rc ? rc : unit_params_wait(e, u, err);
}

/* Training's forward (`training`: backward follows, so checkpointed blocks drop what they
 * saved) or evaluation's. */
static int forward_pass(Engine *e, int micro, int training, float grad_scale, float *loss,
                        Err *err) {
    set_phase(e, PHASE_FORWARD, micro);
    int prev = -1, pos = -1, rc;
    for (int m = 0; m < e->model->nmodules; m++) {
        int u = e->plan->module_unit[m];
        UnitState *us = &e->units[u];
        if (u != prev && (rc = enter_unit_forward(e, ++pos, err))) return rc;
        if (e->unit_entry[m] && casts_inputs(e) &&
            (rc = round_boundary(e, m, BOUNDARY_INPUT, e->cfg.param_dtype, err)))
            return rc;
        Work w = {.unit = u, .low_precision = e->cfg.param_dtype != DTYPE_FP32};
        rc = e->model->ops->forward(e->run, m, us->param_ptrs + e->module_first_up[m], &w, err);
        if (rc) return rc;
        w.unit = u;
        run_work(e, STREAM_COMPUTE, w);
        if (e->unit_exit[m] && casts_outputs(e) &&
            (rc = round_boundary(e, m, BOUNDARY_OUTPUT, (DType)e->cfg.output_dtype, err)))
            return rc;
        if (training && e->checkpointed[m] && (rc = e->model->ops->checkpoint(e->run, m, err)))
            return rc;
        if (m == last_module_of(e, u) && e->reshard && !e->plan->units[u].is_root) reshard(e, u);
        prev = u;
    }
    Work w = {.unit = -1};
    *loss = e->model->ops->loss(e->run, grad_scale, &w);
    run_work(e, STREAM_COMPUTE, w);
    return 0;
}

static int enter_unit_backward(Engine *e, int pos, Err *err) {
    int u = e->bwd_seq[pos];
    int rc = unit_params_ready(e, u, err);
    if (!rc) rc = prefetch(e, e->bwd_seq, pos, e->cfg.prefetch_backward, err);
    if (!rc) rc = nvme_prefetch(e, e->bwd_seq, pos, e->cfg.prefetch_backward, err);
    if (!rc) rc = unit_params_wait(e, u, err);
    return rc ? rc : ugrad_ready(e, u, err);
}

/* Every reduction of the micro-step finished, and compute (the optimizer next) after them. */
static int backward_done(Engine *e, Err *err) {
    int rc = pending_drain(e, err);
    for (int u = 0; !rc && u < e->plan->nunits; u++) {
        UnitState *us = &e->units[u];
        if (!us->reduced_pending) continue;
        e->dev->ops->stream_wait(e->dev, STREAM_COMPUTE, &us->reduced);
        us->reduced_pending = 0;
    }
    return rc;
}

/* Activation checkpointing: the block's forward again, on the parameters its backward has
 * just gathered (no extra all-gather). */
static int recompute(Engine *e, int m, int u, Err *err) {
    Work w = {.unit = u, .low_precision = e->cfg.param_dtype != DTYPE_FP32};
    int rc = e->model->ops->recompute(e->run, m, e->units[u].param_ptrs + e->module_first_up[m], &w,
                                      err);
    if (rc) return rc;
    w.unit = u;
    w.kind = WORK_RECOMPUTE;
    run_work(e, STREAM_COMPUTE, w);
    return 0;
}

static int backward_pass(Engine *e, int micro, int sync, Err *err) {
    set_phase(e, PHASE_BACKWARD, micro);
    int prev = -1, pos = -1, rc;
    for (int m = e->model->nmodules - 1; m >= 0; m--) {
        int u = e->plan->module_unit[m];
        UnitState *us = &e->units[u];
        if (u != prev && (rc = enter_unit_backward(e, ++pos, err))) return rc;
        int first = e->module_first_up[m];
        if (e->checkpointed[m] && (rc = recompute(e, m, u, err))) return rc;
        /* a low-precision unit's backward takes and gives gradients in its dtype */
        if (e->unit_exit[m] && casts_inputs(e) &&
            (rc = round_boundary(e, m, BOUNDARY_OUTPUT_GRAD, e->cfg.param_dtype, err)))
            return rc;
        Work w = {.unit = u, .low_precision = e->cfg.param_dtype != DTYPE_FP32};
        rc = e->model->ops->backward(e->run, m, us->param_ptrs + first, us->grad_ptrs + first, &w,
                                     err);
        if (rc) return rc;
        w.unit = u;
        run_work(e, STREAM_COMPUTE, w);
        if (e->unit_entry[m] && casts_inputs(e) &&
            (rc = round_boundary(e, m, BOUNDARY_INPUT_GRAD, e->cfg.param_dtype, err)))
            return rc;
        if (m == e->plan->units[u].modules[0]) { /* the unit's backward is complete */
            if (sync && (rc = reduce_start(e, u, err))) return rc;
            reshard(e, u);
        }
        prev = u;
    }
    return sync ? backward_done(e, err) : 0;
}

/* ---------------------------------------------------------------- optimizer */

/* Sum of squares of the gradient rows this rank is responsible for, over the group that
 * together holds each element once. */
static int grad_sq_norm(Engine *e, double *out, Err *err) {
    double local = 0.0;
    for (int u = 0; u < e->plan->nunits; u++)
        local += e->k->sum_squares(e->units[u].grad, e->units[u].grad_n);
    if (!e->plan->grads_sharded) { /* every rank holds identical whole grads */
        *out = local;
        return 0;
    }
    float f = (float)local;
    set_phase(e, PHASE_OPTIMIZER, 0);
    int rc = comm_all_reduce(e->env.shard_comm, &f, &f, 1, DTYPE_FP32, REDUCE_SUM, -1, err);
    *out = f;
    return rc;
}

static int grads_found_inf(Engine *e, int *found, Err *err) {
    float flag = 0.0f;
    for (int u = 0; u < e->plan->nunits; u++)
        if (!e->k->all_finite(e->units[u].grad, e->units[u].grad_n)) flag = 1.0f;
    int rc = 0;
    if (e->plan->grads_sharded)
        rc = comm_all_reduce(e->env.world_comm, &flag, &flag, 1, DTYPE_FP32, REDUCE_MAX, -1, err);
    *found = flag != 0.0f;
    return rc;
}

static void scale_grads(Engine *e, float s) {
    for (int u = 0; u < e->plan->nunits; u++) e->k->scale(e->units[u].grad, s, e->units[u].grad_n);
}

/* Adam on the rows of unit u this rank updates. */
static void adam_unit(Engine *e, int u, const AdamHyper *h) {
    UnitState *us = &e->units[u];
    const Unit *unit = &e->plan->units[u];
    size_t total = 0;
    for (int i = 0; i < unit->nparams; i++) {
        const ParamSpec *ps = unit_param_spec(e, u, i);
        size_t begin, rows;
        shard_rows((size_t)ps->shape[0], e->optim_size, e->optim_rank, &begin, &rows);
        size_t n = rows * ps->row_elems, row0 = begin * ps->row_elems;
        float *p = us->param + us->param_local[i] + (e->plan->params_sharded ? 0 : row0);
        const float *g = us->grad + us->grad_local[i] + (e->plan->grads_sharded ? 0 : row0);
        e->k->adam_step(p, g, us->m + us->optim_local[i], us->v + us->optim_local[i], n, h,
                        e->steps + 1);
        total += n;
    }
    int zero_offload = e->cfg.offload == OFFLOAD_OPTIMIZER;
    if (zero_offload) { /* ZeRO-Offload: the gradient rows go to the host's Adam ... */
        stream_follow(e, STREAM_COPY, STREAM_COMPUTE);
        run_work(e, STREAM_COPY,
                 (Work){.kind = WORK_COPY_D2H, .unit = u, .bytes = 4.0 * (double)total});
        stream_follow(e, STREAM_COMPUTE, STREAM_COPY);
    }
    run_work(e, STREAM_COMPUTE,
             (Work){.kind = WORK_OPTIMIZER,
                    .unit = u,
                    .flops = 14.0 * total,
                    .bytes = 28.0 * total,
                    .on_host = e->cfg.offload != OFFLOAD_NONE});
    if (zero_offload) { /* ... and the updated rows come back */
        stream_follow(e, STREAM_COPY, STREAM_COMPUTE);
        run_work(e, STREAM_COPY,
                 (Work){.kind = WORK_COPY_H2D, .unit = u, .bytes = 4.0 * (double)total});
        stream_follow(e, STREAM_COMPUTE, STREAM_COPY);
    }
}

/* Adam over units whose state rests on NVMe: unit u+1 loads while u steps, and u's writes
 * finish while u+1 steps; a unit's buffers are freed once its writes are done. */
static int nvme_adam(Engine *e, const AdamHyper *h, Err *err) {
    int n = e->plan->nunits, rc = 0, written = -1;
    if (n) rc = nvme_start_read(e, 0, NVME_PARAM | NVME_STATE, err);
    for (int u = 0; u < n && !rc; u++) {
        rc = nvme_load(e, u, NVME_PARAM | NVME_STATE, err);
        if (!rc && u + 1 < n) rc = nvme_start_read(e, u + 1, NVME_PARAM | NVME_STATE, err);
        if (rc) break;
        stream_follow(e, STREAM_COMPUTE, STREAM_COPY);
        adam_unit(e, u, h);
        stream_follow(e, STREAM_COPY, STREAM_COMPUTE);
        if (written >= 0 && (rc = nvme_drop(e, written, err))) break;
        rc = nvme_start_write(e, u, NVME_PARAM | NVME_STATE, err);
        written = u;
    }
    if (written >= 0) {
        int d = nvme_drop(e, written, err);
        if (!rc) rc = d;
    }
    return rc;
}

/* zero1: each rank updated its rows of a replicated parameter; gather them back. */
static int zero1_regather(Engine *e, int u, Err *err) {
    UnitState *us = &e->units[u];
    const Unit *unit = &e->plan->units[u];
    void *send = NULL, *recv = NULL;
    size_t block = unit->wire_numel * sizeof(float);
    int rc = dev_alloc(e, &send, block, MEM_COMM_BUFFER, u, err);
    if (!rc) rc = dev_alloc(e, &recv, block * (size_t)e->plan->shard_size, MEM_COMM_BUFFER, u, err);
    if (!rc) {
        size_t local[unit->nparams + 1];
        for (int i = 0; i < unit->nparams; i++) {
            const ParamSpec *ps = unit_param_spec(e, u, i);
            size_t begin, rows;
            shard_rows((size_t)ps->shape[0], e->plan->shard_size, e->shard_rank, &begin, &rows);
            local[i] = unit->params[i].offset + begin * ps->row_elems;
        }
        pack_rows(e, u, us->param, local, DTYPE_FP32, send);
        rc = comm_all_gather(e->env.world_comm, send, recv, unit->wire_numel, DTYPE_FP32, u, err);
        if (!rc) unpack_gathered(e, u, recv, DTYPE_FP32, (char *)us->param);
    }
    dev_free(e, send, u);
    dev_free(e, recv, u);
    return rc;
}

static int optimizer_step(Engine *e, StepStats *st, Err *err) {
    set_phase(e, PHASE_OPTIMIZER, 0);
    int rc;
    st->skipped = 0;
    st->loss_scale = e->loss_scale;
    if (fsdp_uses_loss_scaling(&e->cfg)) {
        int found_inf;
        if ((rc = grads_found_inf(e, &found_inf, err))) return rc;
        if (found_inf) { /* GradScaler: skip the step, back off the scale */
            e->loss_scale *= 0.5f;
            e->good_steps = 0;
            st->skipped = 1;
            return 0;
        }
        scale_grads(e, 1.0f / e->loss_scale);
        if (++e->good_steps == 2000) {
            e->loss_scale *= 2.0f;
            e->good_steps = 0;
        }
    }
    st->grad_norm = 0.0f;
    if (e->cfg.clip_grad_norm > 0.0f) {
        double sq;
        if ((rc = grad_sq_norm(e, &sq, err))) return rc;
        double norm = sqrt(sq);
        st->grad_norm = (float)norm;
        double coef = e->cfg.clip_grad_norm / (norm + 1e-6);
        if (coef < 1.0) scale_grads(e, (float)coef);
    }
    AdamHyper h = {e->cfg.lr,  e->cfg.beta1,        e->cfg.beta2,
                   e->cfg.eps, e->cfg.weight_decay, e->cfg.optim == OPTIM_ADAMW};
    if (nvme_on(e)) {
        if ((rc = nvme_adam(e, &h, err))) return rc;
    } else {
        for (int u = 0; u < e->plan->nunits; u++) adam_unit(e, u, &h);
    }
    e->steps++;
    if (e->plan->strategy == STRAT_ZERO1)
        for (int u = 0; u < e->plan->nunits; u++)
            if ((rc = zero1_regather(e, u, err))) return rc;
    return 0;
}

/* ---------------------------------------------------------------- one training step */

int engine_step(Engine *e, const Dataset *ds, const long *indices, int global_loss, StepStats *st,
                Err *err) {
    memset(st, 0, sizeof *st);
    for (int u = 0; u < e->plan->nunits; u++) /* an empty shard has no buffer at all */
        if (e->units[u].grad) e->k->zero(e->units[u].grad, e->units[u].grad_n);
    int K = e->cfg.grad_accum, B = e->cfg.batch_size, rc;
    /* the loss scale and the 1/K of accumulation both ride on the output gradient */
    float grad_scale = (fsdp_uses_loss_scaling(&e->cfg) ? e->loss_scale : 1.0f) / (float)K;
    double loss_sum = 0.0;
    for (int micro = 0; micro < K; micro++) {
        rc = e->model->ops->set_batch(e->run, ds, indices + (size_t)micro * B, (size_t)B, err);
        float loss;
        if (!rc) rc = forward_pass(e, micro, 1, grad_scale, &loss, err);
        if (!rc) rc = backward_pass(e, micro, micro == K - 1, err);
        if (rc) return rc;
        loss_sum += loss;
    }
    if ((rc = optimizer_step(e, st, err))) return rc;
    st->loss = (float)(loss_sum / K);
    if (global_loss)
        rc = comm_all_reduce(e->env.world_comm, &st->loss, &st->loss, 1, DTYPE_FP32, REDUCE_AVG, -1,
                             err);
    set_phase(e, PHASE_NONE, 0);
    return rc;
}

int engine_evaluate(Engine *e, const Dataset *ds, const long *indices, size_t n, EvalStats *st,
                    Err *err) {
    const ModelOps *ops = e->model->ops;
    memset(st, 0, sizeof *st);
    int rc = ops->set_batch(e->run, ds, indices, n, err);
    float loss = 0.0f;
    if (!rc) rc = forward_pass(e, 0, 0, 1.0f, &loss, err);
    if (!rc) rc = pending_drain(e, err); /* nothing should be in flight; be sure */
    if (!rc) {
        st->loss_sum = (double)loss * (double)n;
        st->correct = ops->correct ? ops->correct(e->run) : 0;
    }
    ops->discard(e->run);
    /* the root unit (and every unit without reshard_after_forward) is still gathered:
     * training's backward would reshard it, evaluation has no backward */
    for (int u = 0; u < e->plan->nunits; u++) reshard(e, u);
    set_phase(e, PHASE_NONE, 0);
    return rc;
}

long engine_steps_done(const Engine *e) {
    return e->steps;
}

int engine_full_params(Engine *e, float *out, Err *err) {
    for (int u = 0; u < e->plan->nunits; u++) {
        UnitState *us = &e->units[u];
        const Unit *unit = &e->plan->units[u];
        void *send = NULL, *recv = NULL;
        int rc = resident_begin(e, u, err);
        if (rc) return rc;
        float *full = us->param;
        if (e->plan->params_sharded) {
            size_t block = unit->wire_numel * sizeof(float);
            rc = dev_alloc(e, &send, block, MEM_COMM_BUFFER, u, err);
            if (!rc)
                rc = dev_alloc(e, &recv, block * (size_t)e->plan->shard_size, MEM_COMM_BUFFER, u,
                               err);
            if (!rc)
                rc = dev_alloc(e, (void **)&full, unit->numel * sizeof(float), MEM_PARAM_UNSHARDED,
                               u, err);
            if (!rc) {
                pack_rows(e, u, us->param, us->param_local, DTYPE_FP32, send);
                rc = comm_all_gather(e->env.shard_comm, send, recv, unit->wire_numel, DTYPE_FP32, u,
                                     err);
            }
            if (!rc) unpack_gathered(e, u, recv, DTYPE_FP32, (char *)full);
        }
        for (int i = 0; !rc && i < unit->nparams; i++) {
            const ParamSpec *ps = unit_param_spec(e, u, i);
            e->dev->ops->copy(e->dev, out + e->param_flat[unit->params[i].param],
                              full + unit->params[i].offset, ps->numel * sizeof(float));
        }
        dev_free(e, send, u);
        dev_free(e, recv, u);
        if (full != us->param) dev_free(e, full, u);
        int end = resident_end(e, u, 0, err);
        if (rc || end) return rc ? rc : end;
    }
    return 0;
}

/* ---------------------------------------------------------------- creation */

/* Offsets of each parameter's kept rows inside a rank's flat buffer. */
static void local_offsets(Engine *e, int u, int sharded, int size, int rank, size_t *off) {
    const Unit *unit = &e->plan->units[u];
    size_t acc = 0;
    for (int i = 0; i < unit->nparams; i++) {
        if (!sharded) {
            off[i] = unit->params[i].offset;
            continue;
        }
        const ParamSpec *ps = unit_param_spec(e, u, i);
        size_t begin, rows;
        shard_rows((size_t)ps->shape[0], size, rank, &begin, &rows);
        off[i] = acc;
        acc += rows * ps->row_elems;
    }
}

/* The elements [*first, *first + *n) of unit u's i-th parameter this rank keeps at rest:
 * its rows when parameters are sharded, all of them when they are replicated. */
static void kept_elements(const Engine *e, int u, int i, size_t *first, size_t *n) {
    const ParamSpec *ps = unit_param_spec(e, u, i);
    int S = e->plan->params_sharded ? e->plan->shard_size : 1;
    int r = e->plan->params_sharded ? e->shard_rank : 0;
    size_t begin, rows;
    shard_rows((size_t)ps->shape[0], S, r, &begin, &rows);
    *first = begin * ps->row_elems;
    *n = rows * ps->row_elems;
}

/* Each rank draws exactly its own rows: the starting point is the same at any world size.
 * The draw happens on the host and is copied to the device. */
static int init_params(Engine *e, int u, Err *err) {
    UnitState *us = &e->units[u];
    if (e->dev->accounting_only) return 0; /* nothing to fill */
    for (int i = 0; i < e->plan->units[u].nparams; i++) {
        size_t first, n;
        kept_elements(e, u, i, &first, &n);
        if (!n) continue;
        float *host = malloc(n * sizeof *host);
        if (!host) return err_set(err, ERR_NOMEM, "out of memory initialising parameters");
        param_init_fill(unit_param_spec(e, u, i), e->cfg.seed, first, n, host);
        e->dev->ops->copy(e->dev, us->param + us->param_local[i], host, n * sizeof *host);
        free(host);
    }
    return 0;
}

int engine_set_full_params(Engine *e, const float *full, Err *err) {
    for (int u = 0; u < e->plan->nunits; u++) {
        UnitState *us = &e->units[u];
        const Unit *unit = &e->plan->units[u];
        int rc = resident_begin(e, u, err);
        for (int i = 0; !rc && i < unit->nparams; i++) {
            size_t first, n;
            kept_elements(e, u, i, &first, &n);
            e->dev->ops->copy(e->dev, us->param + us->param_local[i],
                              full + e->param_flat[unit->params[i].param] + first,
                              n * sizeof(float));
        }
        if (!rc) rc = resident_end(e, u, 1, err);
        if (rc) return rc;
    }
    return 0;
}

/* The rank that reports values stored `sharded` or replicated: a shard's owner in the first
 * replica group (whose shard ranks are its world ranks), rank 0 for replicated values. */
static int reports_values(const Engine *e, int sharded) {
    return e->env.rank == (sharded ? e->shard_rank : 0);
}

/* Copies unit u's i-th tensor of a rank's local store (param or grad) to its place in full. */
static void copy_local_rows(const Engine *e, int u, int i, int sharded, const float *local,
                            float *full) {
    const ParamSpec *ps = unit_param_spec(e, u, i);
    size_t begin = 0, rows = (size_t)ps->shape[0];
    if (sharded) shard_rows(rows, e->plan->shard_size, e->shard_rank, &begin, &rows);
    if (!rows) return; /* an empty shard has no storage to copy from */
    e->dev->ops->copy(
        e->dev, full + e->param_flat[e->plan->units[u].params[i].param] + begin * ps->row_elems,
        local, rows * ps->row_elems * sizeof(float));
}

int engine_own_values(Engine *e, float *params, float *grads, Err *err) {
    const Plan *p = e->plan;
    for (int u = 0; u < p->nunits; u++) {
        const UnitState *us = &e->units[u];
        int rc = resident_begin(e, u, err);
        for (int i = 0; !rc && i < p->units[u].nparams; i++) {
            if (reports_values(e, p->params_sharded))
                copy_local_rows(e, u, i, p->params_sharded, us->param + us->param_local[i], params);
            if (grads && reports_values(e, p->grads_sharded))
                copy_local_rows(e, u, i, p->grads_sharded, us->grad + us->grad_local[i], grads);
        }
        if (!rc) rc = resident_end(e, u, 0, err);
        if (rc) return rc;
    }
    return 0;
}

/* ---------------------------------------------------------------- checkpoint state */

const char *state_kind_name(StateKind k) {
    static const char *const names[STATE_KIND_COUNT] = {"param", "adam_m", "adam_v"};
    return k >= 0 && k < STATE_KIND_COUNT ? names[k] : "unknown";
}

EngineCounters engine_counters(const Engine *e) {
    return (EngineCounters){
        .steps = e->steps, .loss_scale = e->loss_scale, .good_steps = e->good_steps};
}

void engine_set_counters(Engine *e, EngineCounters c) {
    e->steps = c.steps;
    e->loss_scale = c.loss_scale;
    e->good_steps = c.good_steps;
}

/* Where unit u's i-th tensor of `kind` lives on this rank: its rows and its device memory. */
static float *state_rows(Engine *e, int u, int i, StateKind kind, size_t *begin, size_t *rows) {
    UnitState *us = &e->units[u];
    const ParamSpec *ps = unit_param_spec(e, u, i);
    size_t d0 = (size_t)ps->shape[0];
    if (kind == STATE_PARAM) {
        *begin = 0;
        *rows = d0;
        if (e->plan->params_sharded)
            shard_rows(d0, e->plan->shard_size, e->shard_rank, begin, rows);
        return us->param + us->param_local[i];
    }
    shard_rows(d0, e->optim_size, e->optim_rank, begin, rows);
    return (kind == STATE_ADAM_M ? us->m : us->v) + us->optim_local[i];
}

/* The rank that saves a kind: as engine_own_values decides, with Adam's moments sharded by
 * the optimizer's groups. */
static int saves_state(const Engine *e, StateKind kind) {
    return kind == STATE_PARAM ? reports_values(e, e->plan->params_sharded)
                               : e->env.rank == e->optim_rank;
}

static int move_unit_state(Engine *e, int u, StateFn fn, void *user, int saving, Err *err);

/* Moves every piece this rank keeps between the device and fn: to fn when saving (only the
 * pieces it saves), from fn when loading. */
static int move_state(Engine *e, StateFn fn, void *user, int saving, Err *err) {
    for (int u = 0; u < e->plan->nunits; u++) {
        int rc = resident_begin(e, u, err);
        if (!rc) rc = move_unit_state(e, u, fn, user, saving, err);
        int end = resident_end(e, u, !saving, err);
        if (rc || end) return rc ? rc : end;
    }
    return 0;
}

static int move_unit_state(Engine *e, int u, StateFn fn, void *user, int saving, Err *err) {
    {
        for (int i = 0; i < e->plan->units[u].nparams; i++)
            for (int k = 0; k < STATE_KIND_COUNT; k++) {
                if (saving && !saves_state(e, (StateKind)k)) continue;
                StatePiece piece = {.param = e->plan->units[u].params[i].param,
                                    .kind = (StateKind)k,
                                    .row_elems = unit_param_spec(e, u, i)->row_elems};
                float *dev = state_rows(e, u, i, (StateKind)k, &piece.row_begin, &piece.rows);
                size_t bytes = piece.rows * piece.row_elems * sizeof(float);
                if (!bytes) continue;
                if (!(piece.data = malloc(bytes)))
                    return err_set(err, ERR_NOMEM, "out of memory moving a checkpoint piece");
                if (saving) e->dev->ops->copy(e->dev, piece.data, dev, bytes);
                int rc = fn(user, &piece, err);
                if (!rc && !saving) e->dev->ops->copy(e->dev, dev, piece.data, bytes);
                free(piece.data);
                if (rc) return rc;
            }
    }
    return 0;
}

int engine_save_state(Engine *e, StateFn fn, void *user, Err *err) {
    return move_state(e, fn, user, 1, err);
}

int engine_load_state(Engine *e, StateFn fn, void *user, Err *err) {
    return move_state(e, fn, user, 0, err);
}

/* Elements of unit u's param rows, gradient rows and each Adam moment this rank keeps. */
static void unit_sizes(Engine *e, int u) {
    UnitState *us = &e->units[u];
    us->param_n = plan_param_numel(e->plan, u, e->env.rank);
    us->grad_n = plan_grad_numel(e->plan, u, e->env.rank);
    us->optim_n = plan_optim_numel(e->plan, u, e->env.rank);
}

static int create_unit_state(Engine *e, int u, Err *err) {
    UnitState *us = &e->units[u];
    const Unit *unit = &e->plan->units[u];
    size_t np = (size_t)unit->nparams + 1;
    us->param_local = calloc(np, sizeof(size_t));
    us->grad_local = calloc(np, sizeof(size_t));
    us->optim_local = calloc(np, sizeof(size_t));
    us->param_ptrs = calloc(np, sizeof(float *));
    us->grad_ptrs = calloc(np, sizeof(float *));
    if (!us->param_local || !us->grad_local || !us->optim_local || !us->param_ptrs ||
        !us->grad_ptrs)
        return err_set(err, ERR_NOMEM, "out of memory creating the engine");
    const Plan *p = e->plan;
    unit_sizes(e, u);
    local_offsets(e, u, p->params_sharded, p->shard_size, e->shard_rank, us->param_local);
    local_offsets(e, u, p->grads_sharded, p->shard_size, e->shard_rank, us->grad_local);
    local_offsets(e, u, 1, e->optim_size, e->optim_rank, us->optim_local);
    int rc = dev_alloc(e, (void **)&us->param, us->param_n * sizeof(float),
                       resting(e, MEM_PARAM_SHARD), u, err);
    if (!rc)
        rc = dev_alloc(e, (void **)&us->grad, us->grad_n * sizeof(float),
                       resting(e, MEM_GRAD_SHARD), u, err);
    if (!rc)
        rc = dev_alloc(e, (void **)&us->m, us->optim_n * sizeof(float), resting(e, MEM_OPTIM_STATE),
                       u, err);
    if (!rc)
        rc = dev_alloc(e, (void **)&us->v, us->optim_n * sizeof(float), resting(e, MEM_OPTIM_STATE),
                       u, err);
    if (rc) return rc;
    if (us->grad) e->k->zero(us->grad, us->grad_n);
    if (us->m) e->k->zero(us->m, us->optim_n);
    if (us->v) e->k->zero(us->v, us->optim_n);
    rc = init_params(e, u, err);
    return rc ? rc : resident_end(e, u, 1, err); /* NVMe: to the file, out of memory */
}

/* Unit entries in module order (forward) and reverse module order (backward). */
static void entry_sequences(Engine *e) {
    int n = 0, nm = e->model->nmodules;
    for (int m = 0; m < nm; m++)
        if (m == 0 || e->plan->module_unit[m] != e->plan->module_unit[m - 1])
            e->fwd_seq[n++] = e->plan->module_unit[m];
    for (int i = 0; i < n; i++) e->bwd_seq[i] = e->fwd_seq[n - 1 - i];
    e->nseq = n;
}

/* The root unit's forward is the whole model's: it takes the model's input and gives its
 * output. Every other unit is entered at its first module and left after its last. */
static void mark_unit_boundaries(Engine *e) {
    int nm = e->model->nmodules;
    e->unit_entry[0] = e->unit_exit[nm - 1] = 1;
    for (int u = 0; u < e->plan->nunits; u++) {
        const Unit *unit = &e->plan->units[u];
        if (unit->is_root || !unit->nmodules) continue;
        e->unit_entry[unit->modules[0]] = 1;
        e->unit_exit[unit->modules[unit->nmodules - 1]] = 1;
    }
}

static int create_tables(Engine *e, Err *err) {
    const ModelDesc *m = e->model;
    e->units = calloc((size_t)e->plan->nunits + 1, sizeof *e->units);
    e->fwd_seq = calloc((size_t)m->nmodules + 1, sizeof *e->fwd_seq);
    e->bwd_seq = calloc((size_t)m->nmodules + 1, sizeof *e->bwd_seq);
    e->module_first_up = calloc((size_t)m->nmodules + 1, sizeof *e->module_first_up);
    e->param_flat = calloc((size_t)m->nparams + 1, sizeof *e->param_flat);
    e->checkpointed = calloc((size_t)m->nmodules + 1, 1);
    e->unit_entry = calloc((size_t)m->nmodules + 1, 1);
    e->unit_exit = calloc((size_t)m->nmodules + 1, 1);
    if (!e->units || !e->fwd_seq || !e->bwd_seq || !e->module_first_up || !e->param_flat ||
        !e->checkpointed || !e->unit_entry || !e->unit_exit)
        return err_set(err, ERR_NOMEM, "out of memory creating the engine");
    for (int i = 0; i < m->nmodules; i++)
        e->checkpointed[i] = (char)fsdp_module_checkpointed(&e->cfg, m, i);
    mark_unit_boundaries(e);
    size_t flat = 0;
    for (int i = 0; i < m->nparams; i++) {
        e->param_flat[i] = flat;
        flat += m->params[i].numel;
    }
    for (int u = 0; u < e->plan->nunits; u++) {
        const Unit *unit = &e->plan->units[u];
        for (int i = unit->nparams - 1; i >= 0; i--)
            e->module_first_up[m->params[unit->params[i].param].module] = i;
    }
    entry_sequences(e);
    return 0;
}

int engine_create(Engine **out, const FsdpConfig *cfg, const Plan *plan, const ModelDesc *model,
                  RankEnv env, Err *err) {
    Engine *e = calloc(1, sizeof *e);
    if (!e) return err_set(err, ERR_NOMEM, "out of memory creating the engine");
    *out = e;
    e->cfg = *cfg;
    e->plan = plan;
    e->model = model;
    e->env = env;
    e->dev = env.dev;
    e->k = env.k;
    e->reshard = fsdp_reshard_after_forward(cfg);
    e->shard_rank = plan_shard_rank(plan, env.rank);
    e->optim_rank = plan_optim_rank(plan, env.rank);
    e->optim_size = plan_optim_size(plan);
    e->loss_scale = 65536.0f;
    if (cfg->ac_every > 0 && !model->ops->checkpoint)
        return err_set(err, ERR_USAGE,
                       "--activation-checkpointing: the %s model has no blocks to checkpoint "
                       "(it saves only each layer's input); use a ViT",
                       model->name);
    int rc = create_tables(e, err);
    if (!rc && nvme_on(e)) { /* the file first: each unit goes there as it is created */
        for (int u = 0; u < plan->nunits; u++) unit_sizes(e, u);
        rc = nvme_open(e, err);
    }
    for (int u = 0; !rc && u < plan->nunits; u++) rc = create_unit_state(e, u, err);
    if (!rc)
        rc = model->ops->run_create(model, env.dev, env.k, (size_t)cfg->batch_size, &e->run, err);
    return rc;
}

void engine_destroy(Engine *e) {
    if (!e) return;
    if (e->run) e->model->ops->run_destroy(e->run);
    for (int u = 0; e->units && u < e->plan->nunits; u++) {
        UnitState *us = &e->units[u];
        reshard(e, u);
        if (e->nvme) {
            Err ignored = {0}; /* teardown: the file goes whatever its last writes did */
            nvme_drop(e, u, &ignored);
        }
        dev_free(e, us->nvme_bytes, u);
        if (us->ugrad_owned) dev_free(e, us->ugrad, u);
        dev_free(e, us->gather_send, u);
        dev_free(e, us->gather_recv, u);
        dev_free(e, us->reduce_send, u);
        dev_free(e, us->reduce_buf, u);
        dev_free(e, us->param, u);
        dev_free(e, us->grad, u);
        dev_free(e, us->m, u);
        dev_free(e, us->v, u);
        free(us->param_local);
        free(us->grad_local);
        free(us->optim_local);
        free(us->param_ptrs);
        free(us->grad_ptrs);
    }
    free(e->units);
    free(e->fwd_seq);
    free(e->bwd_seq);
    free(e->module_first_up);
    free(e->param_flat);
    free(e->checkpointed);
    free(e->unit_entry);
    free(e->unit_exit);
    nvme_tier_close(e->nvme); /* removes the file */
    free(e);
}
