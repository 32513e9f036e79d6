/* comm_nccl: the comm interface on NCCL, one process per GPU: collectives on the comm stream so
 * they overlap compute, host scalars through a device buffer, each one and each wait watched. */
#include "runtime/comm_nccl.h"

#include <cuda_runtime_api.h>

#define SCRATCH_BYTES 4096 /* host scalars: the engine reduces a float or two */

static ncclDataType_t nccl_type(DType t) {
    return t == DTYPE_BF16 ? ncclBfloat16 : t == DTYPE_FP16 ? ncclFloat16 : ncclFloat32;
}

static ncclRedOp_t nccl_op(ReduceOp op) {
    return op == REDUCE_AVG ? ncclAvg : op == REDUCE_MAX ? ncclMax : ncclSum;
}

static int nccl_failed(const NcclComm *c, ncclResult_t r, const char *what, Err *err) {
    return err_set(err, ERR_INTERNAL, "rank %d: %s: %s", c->base.world_rank, what,
                   ncclGetErrorString(r));
}

static ncclResult_t enqueue(NcclComm *c, const CommRequest *r, const void *send, void *recv,
                            cudaStream_t s) {
    ncclDataType_t t = nccl_type(r->dtype);
    switch (r->kind) {
    case COLL_ALL_GATHER:
        return ncclAllGather(send, recv, r->count, t, c->nccl, s);
    case COLL_REDUCE_SCATTER:
        return ncclReduceScatter(send, recv, r->count, t, nccl_op(r->op), c->nccl, s);
    case COLL_ALL_REDUCE:
        return ncclAllReduce(send, recv, r->count, t, nccl_op(r->op), c->nccl, s);
    case COLL_BROADCAST:
        return ncclBroadcast(recv, recv, r->count, t, r->root, c->nccl, s);
    default: /* a barrier: every rank sums one float */
        return ncclAllReduce(c->scratch, c->scratch, 1, ncclFloat32, ncclSum, c->nccl, s);
    }
}

/* A collective on host buffers: staged through the scratch buffer, on the same stream. */
static int start_on_host(NcclComm *c, const CommRequest *r, cudaStream_t s, Err *err) {
    size_t ds = dtype_size(r->dtype);
    size_t in = comm_input_count(&c->base, r) * ds, out = comm_output_count(&c->base, r) * ds;
    if (in + out > SCRATCH_BYTES)
        return err_set(err, ERR_INTERNAL, "%s of %zu bytes of host memory: at most %d",
                       coll_kind_name(r->kind), in + out, SCRATCH_BYTES);
    char *dsend = c->scratch, *drecv = (char *)c->scratch + in;
    const void *src = r->kind == COLL_BROADCAST ? r->recv : r->send; /* the root's data */
    if (in && cudaMemcpyAsync(dsend, src, in, cudaMemcpyHostToDevice, s) != cudaSuccess)
        return err_set(err, ERR_INTERNAL, "staging a host buffer failed");
    if (r->kind == COLL_BROADCAST) drecv = dsend;
    ncclResult_t nr = enqueue(c, r, dsend, drecv, s);
    if (nr != ncclSuccess) return nccl_failed(c, nr, coll_kind_name(r->kind), err);
    if (cudaMemcpyAsync(r->recv, drecv, out, cudaMemcpyDeviceToHost, s) != cudaSuccess)
        return err_set(err, ERR_INTERNAL, "copying a host result back failed");
    return 0;
}

/* The watchdog's deadline is set before anything here can block: the first collective on a
 * communicator may connect to its peers inside the NCCL call, and copying a result back into
 * pageable host memory (the loss, a norm on the stack) returns only once the collective has
 * finished, both before the stream event below exists. */
static int nccl_start(Comm *base, CommRequest *r, Err *err) {
    NcclComm *c = base->impl;
    Device *dev = device_cuda_base(c->dev);
    cudaStream_t s = (cudaStream_t)device_cuda_stream(c->dev, STREAM_COMM);
    r->seq = c->seq++;
    int rc = 0;
    watchdog_call_begin(c->watchdog, r->kind, r->unit, NULL);
    if (r->kind != COLL_BARRIER && r->recv && device_cuda_is_host_memory(r->recv)) {
        rc = start_on_host(c, r, s, err);
    } else {
        ncclResult_t nr = enqueue(c, r, r->send, r->recv, s);
        if (nr != ncclSuccess) rc = nccl_failed(c, nr, coll_kind_name(r->kind), err);
    }
    if (!rc) {
        size_t bytes = (size_t)comm_wire_bytes(base, r);
        device_cuda_trace_span(c->dev, STREAM_COMM, coll_event_kind(r->kind), r->unit, bytes,
                               r->trace_flags);
        dev->ops->event_record(dev, STREAM_COMM, &r->done);
        /* tracked before the call's deadline ends, so the collective is never unwatched */
        if (c->watchdog) rc = watchdog_track(c->watchdog, s, r->kind, r->unit, err);
    }
    watchdog_call_end(c->watchdog);
    return rc;
}

/* Device buffers need no waiting here: compute waits on r->done. A host buffer is read right
 * after this returns, so its copy must have landed; the wait is under the watchdog's deadline
 * as well as the collective's event, so it ends even if the event was never tracked. */
static int nccl_wait(Comm *base, CommRequest *r, Err *err) {
    NcclComm *c = base->impl;
    if (r->kind != COLL_BARRIER && !(r->recv && device_cuda_is_host_memory(r->recv))) return 0;
    watchdog_call_begin(c->watchdog, r->kind, r->unit, NULL);
    cudaError_t e = cudaStreamSynchronize((cudaStream_t)device_cuda_stream(c->dev, STREAM_COMM));
    ncclResult_t async = ncclSuccess;
    if (e == cudaSuccess) ncclCommGetAsyncError(c->nccl, &async);
    watchdog_call_end(c->watchdog);
    if (e != cudaSuccess)
        return err_set(err, ERR_INTERNAL, "rank %d: %s: %s", base->world_rank,
                       coll_kind_name(r->kind), cudaGetErrorString(e));
    return async == ncclSuccess ? 0 : nccl_failed(c, async, coll_kind_name(r->kind), err);
}

static const CommOps nccl_ops = {.start = nccl_start, .wait = nccl_wait};

static int finish_init(NcclComm *c, int world_rank, Err *err) {
    int rank = 0, size = 0;
    ncclCommUserRank(c->nccl, &rank);
    ncclCommCount(c->nccl, &size);
    c->base =
        (Comm){.ops = &nccl_ops, .rank = rank, .size = size, .world_rank = world_rank, .impl = c};
    if (cudaMalloc(&c->scratch, SCRATCH_BYTES) != cudaSuccess)
        return err_set(err, ERR_NOMEM, "rank %d: no device memory for the comm's staging buffer",
                       world_rank);
    if (cudaMemset(c->scratch, 0, SCRATCH_BYTES) != cudaSuccess)
        return err_set(err, ERR_INTERNAL, "rank %d: clearing the staging buffer failed",
                       world_rank);
    if (c->watchdog) watchdog_add_comm(c->watchdog, c->nccl);
    return 0;
}

int comm_nccl_create(NcclComm *c, CudaDevice *dev, Watchdog *w, const ncclUniqueId *id, int rank,
                     int size, Err *err) {
    *c = (NcclComm){.dev = dev, .watchdog = w};
    /* returns only once every rank has joined: a rank that never does must not hang the rest */
    watchdog_call_begin(w, COLL_BARRIER, -1, "ncclCommInitRank");
    ncclResult_t r = ncclCommInitRank(&c->nccl, size, *id, rank);
    watchdog_call_end(w);
    if (r != ncclSuccess)
        return err_set(err, ERR_INTERNAL, "rank %d of %d: ncclCommInitRank: %s", rank, size,
                       ncclGetErrorString(r));
    return finish_init(c, rank, err);
}

int comm_nccl_split(NcclComm *c, NcclComm *parent, int color, int key, Err *err) {
    *c = (NcclComm){.dev = parent->dev, .watchdog = parent->watchdog};
    watchdog_call_begin(c->watchdog, COLL_BARRIER, -1, "ncclCommSplit"); /* collective too */
    ncclResult_t r = ncclCommSplit(parent->nccl, color, key, &c->nccl, NULL);
    watchdog_call_end(c->watchdog);
    if (r != ncclSuccess) return nccl_failed(parent, r, "ncclCommSplit", err);
    return finish_init(c, parent->base.world_rank, err);
}

void comm_nccl_destroy(NcclComm *c) {
    if (!c->nccl) return;
    cudaFree(c->scratch);
    ncclCommDestroy(c->nccl);
    c->nccl = NULL;
}
