/* fsdp: the engine's step schedule (engine_step): gathering a unit's parameters, forward and
 * backward, reduce-scattering gradients, and the optimizer step on this rank's rows. */
#include "engine/fsdp_internal.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

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
    c->lr_schedule.gamma = 0.1; /* StepLR's default */
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

int fsdp_plan_create(Plan *p, const ModelDesc *m, const FsdpConfig *c, int world, Err *err) {
    int rc = plan_create(p, m, c->wrap, c->strategy, world, c->replicas, err);
    if (!rc) plan_use_layout(p, c->layout, c->param_dtype, c->reduce_dtype);
    return rc;
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

int ac_policy_check(const FsdpConfig *c, Err *err) {
    if (c->ac_policy == AC_BLOCK || c->ac_every) return 0;
    return err_set(err, ERR_USAGE,
                   "--ac-policy %s says what a checkpointed block keeps: it needs "
                   "--activation-checkpointing or --ac-every",
                   ac_policy_name(c->ac_policy));
}

int fsdp_uses_loss_scaling(const FsdpConfig *c) {
    return c->param_dtype == DTYPE_FP16 || c->reduce_dtype == DTYPE_FP16;
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

/* ---- batched copies: a unit's spans in one copy_spans call */

/* The spans of one copy, in the engine's e->spans. span_add merges a span into the one before it
 * where both run on in src and in dst, so a unit whose rows lie end to end on both sides (one
 * rank, or a shard without padding) is one span whatever its parameters. */
typedef struct SpanList {
    CopySpan *at;
    size_t n, cap;
} SpanList;

static SpanList span_list(Engine *e) {
    return (SpanList){.at = e->spans, .cap = e->spans_cap};
}

static void span_add(SpanList *l, size_t dst_at, size_t src_at, size_t n, size_t pad) {
    if (n == 0 && pad == 0) return;
    CopySpan *last = l->n ? &l->at[l->n - 1] : NULL;
    if (last && last->pad == 0 && last->dst_at + last->n == dst_at &&
        last->src_at + last->n == src_at) {
        last->n += n;
        last->pad = pad;
        return;
    }
    if (l->n == l->cap) { /* engine_create sized e->spans for the most a unit makes */
        fprintf(stderr, "fsdp: more than %zu spans in one copy\n", l->cap);
        abort();
    }
    l->at[l->n++] = (CopySpan){.dst_at = dst_at, .src_at = src_at, .n = n, .pad = pad};
}

/* The bytes a copy of n elements cast from src_t to dst_t, then pad zeros, reads and writes. */
static double copy_bytes(size_t n, DType src_t, DType dst_t, size_t pad) {
    return (double)n * (double)(dtype_size(src_t) + dtype_size(dst_t)) +
           (double)pad * (double)dtype_size(dst_t);
}

/* The list as one copy_spans call, or, on a table that has no batched form yet (kernels_cuda
 * until a GPU has run its test), as a cast and a zeroing per span: the launches it makes and
 * the bytes they move. */
typedef struct Launches {
    int n;
    double bytes;
} Launches;

static Launches span_copy_made(Engine *e, void *dst, DType dst_t, const void *src, DType src_t,
                               const SpanList *l) {
    Launches made = {0};
    for (size_t i = 0; i < l->n; i++) {
        made.bytes += copy_bytes(l->at[i].n, src_t, dst_t, l->at[i].pad);
        made.n += (l->at[i].n > 0) + (l->at[i].pad > 0);
    }
    if (e->k->copy_spans) {
        e->k->copy_spans(dst, dst_t, src, src_t, l->at, l->n);
        made.n = 1;
    } else {
        kernels_copy_spans_each(e->k, dst, dst_t, src, src_t, l->at, l->n);
    }
    return made;
}

/* span_copy_made on the GPU's compute stream, its launches charged there. */
static void span_copy(Engine *e, void *dst, DType dst_t, const void *src, DType src_t,
                      const SpanList *l) {
    Launches made = span_copy_made(e, dst, dst_t, src, src_t, l);
    launched_kernels(e, made.n, made.bytes);
}

/* A kernel of n elements cast from src_t to dst_t, charged on the compute stream. */
static void launched_cast(Engine *e, size_t n, DType src_t, DType dst_t) {
    launched_kernels(e, 1, copy_bytes(n, src_t, dst_t, 0));
}

/* The zeros after a rank's rows of a parameter in its wire block: every block reserves
 * chunk_rows rows, and the last ranks own fewer. */
static size_t wire_pad(const RowSpan *s) {
    return (s->up->chunk_rows - s->rows) * s->ps->row_elems;
}

/* Copies this rank's rows of src (of type src_t; parameter i's rows at local[i]), cast to `t`,
 * into its padded wire block; padding is zero. One copy for the unit: FSDP2's copy-in. */
void pack_rows(Engine *e, int u, const void *src, DType src_t, const size_t *local, DType t,
               char *block) {
    SpanList l = span_list(e);
    UnitRows it = unit_shard_rows(e, u);
    for (RowSpan s; unit_rows_next(&it, &s);)
        span_add(&l, s.up->wire_offset, local[s.i], s.n, wire_pad(&s));
    span_copy(e, block, t, src, src_t, &l);
}

/* Copies every rank's rows out of the gathered wire blocks into the unit's layout: one copy
 * over every rank's spans, FSDP2's copy-out. */
void unpack_gathered(Engine *e, int u, const char *recv, DType t, char *dst) {
    /* nothing stored, nothing to move: a plan of 1,024 ranks would loop over every rank's
     * rows for nothing. The copy is still charged: kernels_none's, one call of every row. */
    if (e->dev->accounting_only) {
        launched_kernels(e, 1, copy_bytes(e->plan->units[u].numel, t, t, 0));
        return;
    }
    SpanList l = span_list(e);
    size_t wire = e->plan->units[u].wire_numel;
    for (int q = 0; q < e->plan->shard_size; q++) {
        UnitRows it = unit_rows(e, u, e->plan->shard_size, q);
        for (RowSpan s; unit_rows_next(&it, &s);)
            span_add(&l, s.up->offset + s.first, (size_t)q * wire + s.up->wire_offset, s.n, 0);
    }
    span_copy(e, dst, t, recv, t, &l);
}

/* Unit u's collective of its wire block (a rank's packed rows): send and recv as comm.h's kind
 * has them. */
static CommRequest unit_collective(CollKind kind, int u, const Unit *unit, const void *send,
                                   void *recv, DType t) {
    return (CommRequest){
        .kind = kind, .send = send, .recv = recv, .count = unit->wire_numel, .dtype = t, .unit = u};
}

/* Starts unit u's all-gather: this rank's rows, packed into its wire block (from host memory
 * under offload, first loaded from the file under the NVMe tier), to every rank of its shard
 * group. complete_gather unpacks every rank's rows when the collective is done. `prefetched`:
 * issued ahead by prefetch, which the trace says (the visualizer names it). */
static int unit_all_gather_start(Engine *e, int u, int prefetched, Err *err) {
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
                        .bytes = (double)(us->param_n * dtype_size(e->plan->param_store))});
        stream_follow(e, STREAM_COMM, STREAM_COPY);
    }
    if (nvme_on(e) && (rc = nvme_load(e, u, NVME_PARAM, err))) return rc;
    pack_rows(e, u, us->param, e->plan->param_store, us->param_local, t, us->gather_send);
    if (nvme_on(e) && (rc = nvme_drop(e, u, err))) return rc; /* the wire block has it now */
    stream_follow(e, STREAM_COMM, STREAM_COMPUTE); /* the collective reads what compute packed */
    us->gather = unit_collective(COLL_ALL_GATHER, u, unit, us->gather_send, us->gather_recv, t);
    us->gather.trace_flags = prefetched ? EVENT_PREFETCH : 0;
    Comm *c = e->env.shard_comm;
    if ((rc = c->ops->start(c, &us->gather, err))) return rc;
    us->gather_in_flight = 1;
    return pending_push(e, PENDING_GATHER, u, err);
}

/* Points the kernels at the unit's params in the compute dtype: src itself when it is in that
 * dtype already (src_t), or a cast copy of it. */
static int make_compute_view(Engine *e, int u, const void *src, DType src_t, Err *err) {
    UnitState *us = &e->units[u];
    const Unit *unit = &e->plan->units[u];
    const DType ct = e->compute_dtype;
    if (src_t == ct) {
        us->compute = (void *)src;
        us->compute_owned = 0;
    } else {
        int rc = dev_alloc(e, &us->compute, unit->numel * dtype_size(ct), MEM_COMPUTE_COPY, u, err);
        if (rc) return rc;
        e->k->cast(us->compute, ct, src, src_t, unit->numel);
        launched_cast(e, unit->numel, src_t, ct);
        us->compute_owned = 1;
    }
    for (int i = 0; i < unit->nparams; i++)
        us->param_ptrs[i] = us->compute ? dtype_at(us->compute, ct, unit->params[i].offset) : NULL;
    return 0;
}

static int complete_gather(Engine *e, int u, Err *err) {
    UnitState *us = &e->units[u];
    const Unit *unit = &e->plan->units[u];
    DType t = e->cfg.param_dtype;
    us->gather_in_flight = 0;
    int rc = dev_alloc(e, &us->unsharded, unit->numel * dtype_size(t), MEM_PARAM_UNSHARDED, u, err);
    if (rc) return rc;
    /* compute unpacks what the collective wrote, and frees its buffers, only once it is done */
    e->dev->ops->stream_wait(e->dev, STREAM_COMPUTE, &us->gather.done);
    unpack_gathered(e, u, us->gather_recv, t, us->unsharded);
    dev_free(e, us->gather_send, u);
    dev_free(e, us->gather_recv, u);
    us->gather_send = us->gather_recv = NULL;
    us->ready = us->gather.done;
    return make_compute_view(e, u, us->unsharded, t, err);
}

/* Replicated params need no collective, only a low-precision copy when asked for one. */
static int replicated_params_ready(Engine *e, int u, Err *err) {
    UnitState *us = &e->units[u];
    const Unit *unit = &e->plan->units[u];
    e->dev->ops->event_record(e->dev, STREAM_COMPUTE, &us->ready);
    /* resting in param_dtype already (fp32, or DeepSpeed's layout): no copy to make */
    if (e->plan->param_store == e->cfg.param_dtype)
        return make_compute_view(e, u, us->param, e->plan->param_store, err);
    int rc = dev_alloc(e, &us->unsharded, unit->numel * dtype_size(e->cfg.param_dtype),
                       MEM_PARAM_UNSHARDED, u, err);
    if (rc) return rc;
    e->k->cast(us->unsharded, e->cfg.param_dtype, us->param, DTYPE_FP32, unit->numel);
    launched_cast(e, unit->numel, DTYPE_FP32, e->cfg.param_dtype);
    return make_compute_view(e, u, us->unsharded, e->cfg.param_dtype, err);
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
        int rc = unit_all_gather_start(e, u, 0, err);
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
            int rc = unit_all_gather_start(e, seq[i], 1, err);
            if (rc) return rc;
        }
    return 0;
}

void reshard(Engine *e, int u) {
    UnitState *us = &e->units[u];
    if (us->compute_owned) dev_free(e, us->compute, u);
    dev_free(e, us->unsharded, u);
    us->compute = NULL;
    us->unsharded = NULL;
    us->compute_owned = 0;
}

/* ---------------------------------------------------------------- reducing gradients */

/* 1 where backward accumulates into the resting gradient itself (whole fp32 gradients: ddp,
 * zero1). Elsewhere the reduction writes the resting gradient whole, over what it held. */
static int grads_accumulate_at_rest(const Engine *e) {
    return !e->plan->grads_sharded && e->plan->grad_store == DTYPE_FP32;
}

static int ugrad_ready(Engine *e, int u, Err *err) {
    UnitState *us = &e->units[u];
    const Unit *unit = &e->plan->units[u];
    if (us->ugrad) return 0;
    if (grads_accumulate_at_rest(e)) {
        us->ugrad = us->grad;
    } else {
        int rc = dev_alloc(e, (void **)&us->ugrad, unit->numel * sizeof(float), MEM_GRAD_UNSHARDED,
                           u, err);
        if (rc) return rc;
        e->k->zero(us->ugrad, unit->numel);
        launched_kernels(e, 1, (double)(unit->numel * sizeof(float)));
        us->ugrad_owned = 1;
    }
    for (int i = 0; i < unit->nparams; i++) us->grad_ptrs[i] = us->ugrad + unit->params[i].offset;
    return 0;
}

/* Every rank's rows of the unsharded grads, cast, into its padded wire block: one copy. */
static void pack_grads_for_scatter(Engine *e, int u, char *send) {
    const Unit *unit = &e->plan->units[u];
    size_t wire = unit->wire_numel;
    DType t = e->cfg.reduce_dtype;
    if (e->dev->accounting_only) { /* as unpack_gathered: every row, and the blocks' pads */
        size_t pads = (size_t)e->plan->shard_size * wire - unit->numel;
        launched_kernels(e, 1, copy_bytes(unit->numel, DTYPE_FP32, t, pads));
        return;
    }
    SpanList l = span_list(e);
    for (int q = 0; q < e->plan->shard_size; q++) {
        UnitRows it = unit_rows(e, u, e->plan->shard_size, q);
        for (RowSpan s; unit_rows_next(&it, &s);)
            span_add(&l, (size_t)q * wire + s.up->wire_offset, s.up->offset + s.first, s.n,
                     wire_pad(&s));
    }
    span_copy(e, send, t, e->units[u].ugrad, DTYPE_FP32, &l);
}

/* The unit's unsharded gradients go, once nothing reads them any more. */
static void ugrad_free(Engine *e, int u) {
    UnitState *us = &e->units[u];
    if (us->ugrad_owned) dev_free(e, us->ugrad, u);
    us->ugrad = NULL;
    us->ugrad_owned = 0;
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
    /* the wire copy is all that is needed now; free_after_reduce keeps them until the
     * reduction is done, so that they are freed after it, as the seed lists it */
    if (!e->cfg.free_after_reduce) ugrad_free(e, u);
    us->reduce = unit_collective(COLL_REDUCE_SCATTER, u, unit, us->reduce_send, us->reduce_buf, t);
    us->reduce.op = REDUCE_AVG;
    stream_follow(e, STREAM_COMM, STREAM_COMPUTE); /* the collective reads what compute packed */
    return e->env.shard_comm->ops->start(e->env.shard_comm, &us->reduce, err);
}

/* DDP and zero1: every rank keeps whole grads, averaged with an all-reduce. */
static int reduce_start_replicated(Engine *e, int u, Err *err) {
    UnitState *us = &e->units[u];
    const Unit *unit = &e->plan->units[u];
    DType t = e->cfg.reduce_dtype;
    void *buf = us->grad;
    if (us->ugrad_owned) { /* DeepSpeed's layout: rounded to the resting gradient, reduced there */
        e->k->cast(us->grad, e->plan->grad_store, us->ugrad, DTYPE_FP32, unit->numel);
        launched_cast(e, unit->numel, DTYPE_FP32, e->plan->grad_store);
        dev_free(e, us->ugrad, u);
        us->ugrad_owned = 0;
    } else if (t != DTYPE_FP32) {
        int rc =
            dev_alloc(e, &us->reduce_buf, unit->numel * dtype_size(t), MEM_COMM_BUFFER, u, err);
        if (rc) return rc;
        e->k->cast(us->reduce_buf, t, us->grad, DTYPE_FP32, unit->numel);
        launched_cast(e, unit->numel, DTYPE_FP32, t);
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
    stream_follow(e, STREAM_COMM, STREAM_COMPUTE); /* the grads (or their cast) must exist */
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

/* engine_record_local_grads: this rank's unsharded gradients of unit u, before the reduction
 * averages them, into their places in the model-order array. The copy reads what backward
 * wrote on the compute stream, from the host, as engine_own_values does after a step. */
static void record_local_grads(Engine *e, int u) {
    const UnitState *us = &e->units[u];
    const Unit *unit = &e->plan->units[u];
    if (!e->local_grads || !us->ugrad || e->dev->accounting_only) return;
    for (int i = 0; i < unit->nparams; i++) {
        const UnitParam *up = &unit->params[i];
        e->dev->ops->copy(e->dev, e->local_grads + e->param_flat[up->param], us->ugrad + up->offset,
                          e->model->params[up->param].numel * sizeof(float));
    }
}

static int reduce_start(Engine *e, int u, Err *err) {
    int rc0 = finish_earlier_reduces(e, err);
    if (rc0) return rc0;
    record_local_grads(e, u);
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
    /* compute reads the reduction and frees its buffers only after it, as FSDP2's next
     * post-backward waits for the previous reduce-scatter before freeing its input; an fp32
     * all-reduce in place leaves compute nothing to read until the optimizer (backward_done) */
    if (e->plan->grads_sharded || us->reduce_buf)
        e->dev->ops->stream_wait(e->dev, STREAM_COMPUTE, &done);
    if (e->plan->grads_sharded) {
        if (e->env.replica_comm) { /* hsdp: average the shard across replica groups too */
            int rc = comm_all_reduce(e->env.replica_comm, us->reduce_buf, us->reduce_buf,
                                     unit->wire_numel, t, REDUCE_AVG, u, err);
            if (rc) return rc;
            e->dev->ops->event_record(e->dev, STREAM_COMM, &done);
        }
        SpanList l = span_list(e); /* the shard's rows out of the wire block, cast */
        UnitRows it = unit_shard_rows(e, u);
        for (RowSpan s; unit_rows_next(&it, &s);)
            span_add(&l, us->grad_local[s.i], s.up->wire_offset, s.n, 0);
        span_copy(e, us->grad, e->plan->grad_store, us->reduce_buf, t, &l);
        dev_free(e, us->reduce_send, u);
        us->reduce_send = NULL;
    } else if (us->reduce_buf) {
        e->k->cast(us->grad, DTYPE_FP32, us->reduce_buf, t, unit->numel);
        launched_cast(e, unit->numel, t, DTYPE_FP32);
    }
    dev_free(e, us->reduce_buf, u);
    us->reduce_buf = NULL;
    if (e->cfg.offload == OFFLOAD_CPU || nvme_on(e) || grads_stream_to_host(e)) {
        /* the reduced shard goes to the host */
        e->dev->ops->stream_wait(e->dev, STREAM_COPY, &done);
        run_work(e, STREAM_COPY,
                 (Work){.kind = WORK_COPY_D2H,
                        .unit = u,
                        .bytes = (double)(us->grad_n * dtype_size(e->plan->grad_store))});
        e->dev->ops->event_record(e->dev, STREAM_COPY, &done);
    }
    /* compute needs the reduced shard only for the optimizer step: it waits at the end of
     * backward (backward_done), not here, so no unit's backward waits on another's reduction */
    us->reduced = done;
    us->reduced_pending = 1;
    return 0;
}

/* ---------------------------------------------------------------- mixed precision */

int fsdp_check_casts(const FsdpConfig *c, DType compute, Err *err) {
    if (compute == DTYPE_FP32 || c->cast_forward_inputs) return 0;
    return err_set(err, ERR_USAGE,
                   "--cast-forward-inputs false: every unit computes in %s and takes its inputs "
                   "in it (an FSDP2 unit in %s fails on fp32 inputs); it needs --param-dtype fp32",
                   dtype_name(compute), dtype_name(compute));
}

/* The unit computes in low precision and its inputs are cast to it. */
static int casts_inputs(const Engine *e) {
    return e->cfg.param_dtype != DTYPE_FP32 && e->cfg.cast_forward_inputs;
}

static int casts_outputs(const Engine *e) {
    return e->cfg.output_dtype >= 0 && e->cfg.output_dtype != DTYPE_FP32;
}

/* Rounds the model's buffer at a boundary of module m (in the compute dtype) to dtype t in
 * place, as a cast to t and back would; nothing where t is the compute dtype or wider. */
static int round_boundary(Engine *e, int m, BoundaryKind which, DType t, Err *err) {
    const DType ct = e->compute_dtype;
    size_t n = 0;
    void *x = e->model->ops->boundary ? e->model->ops->boundary(e->run, m, which, &n) : NULL;
    if (!x || !n || t == ct || t == DTYPE_FP32) return 0;
    void *low;
    int rc = dev_alloc(e, &low, n * dtype_size(t), MEM_ACTIVATIONS, -1, err);
    if (rc) return rc;
    e->k->cast(low, t, x, ct, n);
    e->k->cast(x, ct, low, t, n);
    dev_free(e, low, -1);
    int backward = which == BOUNDARY_OUTPUT_GRAD || which == BOUNDARY_INPUT_GRAD;
    run_work(e, STREAM_COMPUTE,
             (Work){.kind = backward ? WORK_BACKWARD : WORK_FORWARD,
                    .unit = e->plan->module_unit[m],
                    .bytes = 2.0 * (double)n * (double)(dtype_size(ct) + dtype_size(t)),
                    .kernels = 2});
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
        compute_call_begin(e);
        rc = e->model->ops->forward(e->run, m, us->param_ptrs + e->module_first_up[m], &w, err);
        if (rc) return rc;
        w.unit = u;
        compute_call_end(e, STREAM_COMPUTE, w);
        if (e->unit_exit[m] && casts_outputs(e) &&
            (rc = round_boundary(e, m, BOUNDARY_OUTPUT, (DType)e->cfg.output_dtype, err)))
            return rc;
        if (training && e->checkpointed[m] &&
            (rc = e->model->ops->checkpoint(e->run, m, e->cfg.ac_policy, err)))
            return rc;
        if (m == last_module_of(e, u) && e->reshard && !e->plan->units[u].is_root) reshard(e, u);
        prev = u;
    }
    Work w = {.unit = -1};
    compute_call_begin(e);
    *loss = e->model->ops->loss(e->run, grad_scale, &w);
    compute_call_end(e, STREAM_COMPUTE, w);
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
    compute_call_begin(e);
    int rc = e->model->ops->recompute(e->run, m, e->cfg.ac_policy,
                                      e->units[u].param_ptrs + e->module_first_up[m], &w, err);
    if (rc) return rc;
    w.unit = u;
    w.kind = WORK_RECOMPUTE;
    compute_call_end(e, STREAM_COMPUTE, w);
    return 0;
}

/* free_after_reduce: the unit's reduction is waited for here, in backward, and only then are
 * its unsharded gradients freed (its parameters next, by reshard): the seed's strict order.
 * FSDP2 frees both at once and waits for the reduction only when the next one starts. */
static int reduce_then_free_grads(Engine *e, int u, Err *err) {
    int rc = pending_wait_for(e, PENDING_REDUCE, u, err);
    if (!rc) ugrad_free(e, u);
    return rc;
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
        compute_call_begin(e);
        rc = e->model->ops->backward(e->run, m, us->param_ptrs + first, us->grad_ptrs + first, &w,
                                     err);
        if (rc) return rc;
        w.unit = u;
        compute_call_end(e, STREAM_COMPUTE, w);
        if (e->unit_entry[m] && casts_inputs(e) &&
            (rc = round_boundary(e, m, BOUNDARY_INPUT_GRAD, e->cfg.param_dtype, err)))
            return rc;
        if (m == e->plan->units[u].modules[0]) { /* the unit's backward is complete */
            if (sync && (rc = reduce_start(e, u, err))) return rc;
            if (sync && e->cfg.free_after_reduce && (rc = reduce_then_free_grads(e, u, err)))
                return rc;
            reshard(e, u);
        }
        prev = u;
    }
    return sync ? backward_done(e, err) : 0;
}

/* ---------------------------------------------------------------- optimizer */

/* The gradients the optimizer step reads, as fp32 the kernels take: FSDP's resting gradient
 * (rows, or the whole unit when replicated), or under DeepSpeed's layout an fp32 copy of the
 * rows this rank's optimizer updates, made for the step (DeepSpeed's optimizer upcasts its
 * partition's gradients the same way). */
static float *step_grads(const Engine *e, int u, size_t *n) {
    const UnitState *us = &e->units[u];
    if (e->plan->layout == LAYOUT_DEEPSPEED) {
        *n = us->optim_n;
        return us->grad32;
    }
    *n = us->grad_n;
    return us->grad;
}

/* 1 if each rank's step_grads are its own part of the whole, to be combined across ranks. */
static int step_grads_sharded(const Engine *e) {
    return e->plan->layout == LAYOUT_DEEPSPEED ? e->plan->optim_sharded : e->plan->grads_sharded;
}

/* 1 where the gradients the step reads are in host memory (an offloaded step's own): its passes
 * over them run on the CPU and charge the GPU no launch. */
static int step_grads_on_host(const Engine *e) {
    if (e->plan->layout == LAYOUT_DEEPSPEED) return e->cfg.offload != OFFLOAD_NONE;
    return !mem_category_on_gpu(resting(e, MEM_GRAD_SHARD));
}

/* A pass over n fp32 gradients that reads them (and `writes`: writes them back), charged where
 * they are on the GPU. */
static void launched_grad_pass(Engine *e, size_t n, int writes) {
    if (!step_grads_on_host(e))
        launched_kernels(e, 1, (double)(n * sizeof(float)) * (writes ? 2 : 1));
}

/* Offset in unit u's resting tensor (local offsets `local`, sharded or whole) of the first of
 * parameter i's rows that this rank's optimizer updates, which start at element row0. */
static size_t optim_rows_at(const size_t *local, int i, int sharded, size_t row0) {
    return local[i] + (sharded ? 0 : row0);
}

/* DeepSpeed's layout: the fp32 gradients of the optimizer's rows, for this step. They live where
 * the optimizer runs: on the host under ZeRO-Offload. */
static int step_grads_create(Engine *e, Err *err) {
    MemCategory cat = step_grads_on_host(e) ? MEM_HOST_OFFLOAD : MEM_GRAD_SHARD;
    for (int u = 0; u < e->plan->nunits; u++) {
        UnitState *us = &e->units[u];
        int rc = dev_alloc(e, (void **)&us->grad32, us->optim_n * sizeof(float), cat, u, err);
        if (rc) return rc;
        SpanList l = span_list(e);
        UnitRows it = unit_optim_rows(e, u);
        for (RowSpan s; unit_rows_next(&it, &s);)
            span_add(&l, us->optim_local[s.i],
                     optim_rows_at(us->grad_local, s.i, e->plan->grads_sharded, s.first), s.n, 0);
        if (step_grads_on_host(e)) /* ZeRO-Offload's upcast, by the host */
            (void)span_copy_made(e, us->grad32, DTYPE_FP32, us->grad, e->plan->grad_store, &l);
        else
            span_copy(e, us->grad32, DTYPE_FP32, us->grad, e->plan->grad_store, &l);
    }
    return 0;
}

static void step_grads_free(Engine *e) {
    for (int u = 0; u < e->plan->nunits; u++) {
        dev_free(e, e->units[u].grad32, u);
        e->units[u].grad32 = NULL;
    }
}

/* Sum of squares of the gradients the step reads, over the group that together holds each
 * element once. */
static int grad_sq_norm(Engine *e, double *out, Err *err) {
    double local = 0.0;
    for (int u = 0; u < e->plan->nunits; u++) {
        size_t n;
        const float *g = step_grads(e, u, &n);
        local += e->k->sum_squares(g, n);
        launched_grad_pass(e, n, 0);
    }
    if (!step_grads_sharded(e)) { /* every rank holds identical whole grads */
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
    for (int u = 0; u < e->plan->nunits; u++) {
        size_t n;
        const float *g = step_grads(e, u, &n);
        if (!e->k->all_finite(g, n)) flag = 1.0f;
        launched_grad_pass(e, n, 0);
    }
    int rc = 0;
    if (step_grads_sharded(e))
        rc = comm_all_reduce(e->env.world_comm, &flag, &flag, 1, DTYPE_FP32, REDUCE_MAX, -1, err);
    *found = flag != 0.0f;
    return rc;
}

static void scale_grads(Engine *e, float s) {
    for (int u = 0; u < e->plan->nunits; u++) {
        size_t n;
        float *g = step_grads(e, u, &n);
        e->k->scale(g, s, n);
        launched_grad_pass(e, n, 1);
    }
}

/* What one Adam call updates: n fp32 values p (FSDP's resting rows; under DeepSpeed's layout
 * the master, whose rows are then rounded back to `resting` in param_store), their gradients g
 * and this rank's moments m and v. */
typedef struct AdamRun {
    float *p, *m, *v;
    const float *g;
    char *resting;
    size_t n;
} AdamRun;

/* One parameter's rows that this rank updates, as a run of their own. */
static AdamRun adam_span(Engine *e, int u, const RowSpan *s) {
    UnitState *us = &e->units[u];
    const Plan *pl = e->plan;
    size_t mine = us->optim_local[s->i]; /* the rows in the optimizer's own buffers */
    char *resting =
        param_at(e, u, optim_rows_at(us->param_local, s->i, pl->params_sharded, s->first));
    return (AdamRun){
        .p = pl->master ? us->master + mine : (float *)resting,
        .m = us->m + mine,
        .v = us->v + mine,
        .g = pl->layout == LAYOUT_DEEPSPEED
                 ? us->grad32 + mine
                 : grad_at(e, u, optim_rows_at(us->grad_local, s->i, pl->grads_sharded, s->first)),
        .resting = resting,
        .n = s->n};
}

/* Span s lies right after run r in every buffer: r can take it in the same call. */
static int adam_run_continues(const Engine *e, const AdamRun *r, const AdamRun *s) {
    size_t rest = r->n * dtype_size(e->plan->param_store);
    return s->p == r->p + r->n && s->g == r->g + r->n && s->m == r->m + r->n &&
           s->v == r->v + r->n && s->resting == r->resting + rest;
}

/* The run's Adam step, and the master's rows rounded to where they rest: the kernels it takes. */
static int adam_run(Engine *e, const AdamRun *r, const AdamHyper *h) {
    if (r->n == 0) return 0;
    e->k->adam_step(r->p, r->g, r->m, r->v, r->n, h, e->steps + 1);
    if (!e->plan->master) return 1;
    e->k->cast(r->resting, e->plan->param_store, r->p, DTYPE_FP32, r->n);
    return 2;
}

/* A copy on the copy stream between two points of compute: after what compute has done so far,
 * and before whatever compute does next. */
static void copy_between_compute(Engine *e, int u, WorkKind kind, double bytes) {
    stream_follow(e, STREAM_COPY, STREAM_COMPUTE);
    run_work(e, STREAM_COPY, (Work){.kind = kind, .unit = u, .bytes = bytes});
    stream_follow(e, STREAM_COMPUTE, STREAM_COPY);
}

/* The time unit u's optimizer step takes (`kernels` the launches adam_unit made), on the host
 * under any offload. Under ZeRO-Offload the gradient rows are on the host already (they streamed
 * there in backward; ddp's and zero1's whole gradients stay on the GPU, so their optimizer rows
 * cross first), and the updated rows come back after it. */
static void optimizer_work(Engine *e, int u, int kernels) {
    size_t n = e->units[u].optim_n; /* the rows adam_unit updated */
    /* Adam reads p, g, m and v and writes p, m and v (28 bytes a row); a master's rows are then
     * rounded to where the parameters rest */
    double rounding = e->plan->master ? (double)(n * (4 + dtype_size(e->plan->param_store))) : 0;
    int zero_offload = e->cfg.offload == OFFLOAD_OPTIMIZER;
    if (zero_offload && !grads_stream_to_host(e))
        copy_between_compute(e, u, WORK_COPY_D2H, (double)(dtype_size(e->plan->grad_store) * n));
    run_work(e, STREAM_COMPUTE,
             (Work){.kind = WORK_OPTIMIZER,
                    .unit = u,
                    .flops = 14.0 * n,
                    .bytes = 28.0 * n + rounding,
                    .kernels = kernels,
                    .on_host = e->cfg.offload != OFFLOAD_NONE});
    if (zero_offload)
        copy_between_compute(e, u, WORK_COPY_H2D, (double)(dtype_size(e->plan->param_store) * n));
}

/* Adam on the rows of unit u this rank updates, then the time it took. Its parameters' rows
 * lie end to end in every buffer (a shard packs them; a whole unit is its layout), so the unit
 * is one Adam call, as PyTorch's foreach Adam makes one launch of many tensors; Adam is
 * elementwise, so the values are the same as a call per parameter. */
static void adam_unit(Engine *e, int u, const AdamHyper *h) {
    AdamRun run = {0};
    int kernels = 0;
    UnitRows it = unit_optim_rows(e, u);
    for (RowSpan s; unit_rows_next(&it, &s);) {
        if (s.n == 0) continue;
        AdamRun next = adam_span(e, u, &s);
        if (run.n && adam_run_continues(e, &run, &next)) {
            run.n += next.n;
            continue;
        }
        kernels += adam_run(e, &run, h);
        run = next;
    }
    kernels += adam_run(e, &run, h);
    optimizer_work(e, u, kernels);
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

/* zero1 (and DeepSpeed's zero2): each rank updated its rows of a replicated parameter; gather
 * them back, in the dtype the parameters rest in. */
static int regather_params(Engine *e, int u, Err *err) {
    UnitState *us = &e->units[u];
    const Unit *unit = &e->plan->units[u];
    DType t = e->plan->param_store;
    void *send = NULL, *recv = NULL;
    size_t block = unit->wire_numel * dtype_size(t);
    int rc = dev_alloc(e, &send, block, MEM_COMM_BUFFER, u, err);
    if (!rc) rc = dev_alloc(e, &recv, block * (size_t)e->plan->shard_size, MEM_COMM_BUFFER, u, err);
    if (!rc) {
        size_t local[unit->nparams + 1]; /* this rank's rows, inside the whole unit */
        UnitRows it = unit_shard_rows(e, u);
        for (RowSpan s; unit_rows_next(&it, &s);) local[s.i] = s.up->offset + s.first;
        pack_rows(e, u, us->param, t, local, t, send);
        rc = comm_all_gather(e->env.world_comm, send, recv, unit->wire_numel, t, u, err);
        if (!rc) unpack_gathered(e, u, recv, t, (char *)us->param);
    }
    dev_free(e, send, u);
    dev_free(e, recv, u);
    return rc;
}

/* Unscaling, clipping and Adam on the gradients step_grads gives. */
static int optimizer_update(Engine *e, StepStats *st, Err *err) {
    int rc;
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
        if (++e->good_steps == ENGINE_SCALE_GROWTH_INTERVAL) {
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
    return 0;
}

static int optimizer_step(Engine *e, StepStats *st, Err *err) {
    set_phase(e, PHASE_OPTIMIZER, 0);
    st->skipped = 0;
    st->loss_scale = e->loss_scale;
    int ds = e->plan->layout == LAYOUT_DEEPSPEED;
    int rc = ds ? step_grads_create(e, err) : 0;
    if (!rc) rc = optimizer_update(e, st, err);
    if (ds) step_grads_free(e);
    if (rc || st->skipped || e->plan->params_sharded || !e->plan->optim_sharded) return rc;
    for (int u = 0; u < e->plan->nunits; u++)
        if ((rc = regather_params(e, u, err))) return rc;
    return 0;
}

/* ---------------------------------------------------------------- one training step */

/* The resting gradients start each step at zero where its micro-steps accumulate into them;
 * elsewhere the step's reduction overwrites them, as FSDP2's does a gradient set to None, and
 * no kernel runs. */
static void zero_grads(Engine *e) {
    if (!grads_accumulate_at_rest(e)) return;
    int on_gpu = mem_category_on_gpu(resting(e, MEM_GRAD_SHARD));
    for (int u = 0; u < e->plan->nunits; u++) { /* an empty shard has no buffer at all */
        size_t bytes = e->units[u].grad_n * dtype_size(e->plan->grad_store);
        if (!e->units[u].grad) continue;
        e->k->zero_bytes(e->units[u].grad, bytes);
        if (on_gpu) launched_kernels(e, 1, (double)bytes);
    }
}

/* DESIGN.md's step: forward and backward of each micro-step (forward_pass, backward_pass; a
 * unit's all-gather is unit_all_gather_start, issued by unit_params_ready or prefetch, its
 * reduce-scatter reduce_start), then Adam on this rank's rows (optimizer_step; adam_span). */
int engine_step(Engine *e, const Dataset *ds, const long *indices, int global_loss, StepStats *st,
                Err *err) {
    memset(st, 0, sizeof *st);
    zero_grads(e);
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

/* n elements of the compute dtype at y on the device, widened to fp32 into host memory out. */
static int copy_out_fp32(Engine *e, float *out, const void *y, size_t n, Err *err) {
    if (e->compute_dtype == DTYPE_FP32) {
        e->dev->ops->copy(e->dev, out, y, n * sizeof(float));
        return 0;
    }
    void *wide;
    int rc = dev_alloc(e, &wide, n * sizeof(float), MEM_ACTIVATIONS, -1, err);
    if (rc) return rc;
    e->k->cast(wide, DTYPE_FP32, y, e->compute_dtype, n);
    launched_cast(e, n, e->compute_dtype, DTYPE_FP32);
    e->dev->ops->copy(e->dev, out, wide, n * sizeof(float));
    dev_free(e, wide, -1);
    return 0;
}

/* engine_evaluate, and with `out` the last module's forward output copied to host memory. */
static int evaluate_batch(Engine *e, const Dataset *ds, const long *indices, size_t n,
                          EvalStats *st, float *out, size_t cap, Err *err) {
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
    if (!rc && out) {
        size_t len = 0;
        const void *y = ops->boundary(e->run, e->model->nmodules - 1, BOUNDARY_OUTPUT, &len);
        if (!y || len > cap)
            rc = err_set(err, ERR_INTERNAL, "the model's output (%zu floats) does not fit %zu", len,
                         cap);
        else
            rc = copy_out_fp32(e, out, y, len, err);
    }
    ops->discard(e->run);
    /* the root unit (and every unit without reshard_after_forward) is still gathered:
     * training's backward would reshard it, evaluation has no backward */
    for (int u = 0; u < e->plan->nunits; u++) reshard(e, u);
    set_phase(e, PHASE_NONE, 0);
    return rc;
}

int engine_evaluate(Engine *e, const Dataset *ds, const long *indices, size_t n, EvalStats *st,
                    Err *err) {
    return evaluate_batch(e, ds, indices, n, st, NULL, 0, err);
}

int engine_forward_outputs(Engine *e, const Dataset *ds, const long *indices, size_t n, float *out,
                           size_t cap, Err *err) {
    EvalStats st;
    return evaluate_batch(e, ds, indices, n, &st, out, cap, err);
}

long engine_steps_done(const Engine *e) {
    return e->steps;
}

void engine_record_local_grads(Engine *e, float *out) {
    e->local_grads = out;
}

/* The rate lives in the engine's own copy of the config, where optimizer_update reads it. */
void engine_set_lr(Engine *e, float lr) {
    e->cfg.lr = lr;
}
