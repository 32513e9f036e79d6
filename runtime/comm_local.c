/* comm_local: the communicator of a one-GPU world: every collective is a copy from send to recv
 * (nothing when they alias) on the compute stream, traced like any collective. */
#include "runtime/comm_local.h"

#include <cuda_runtime_api.h>

static int local_start(Comm *base, CommRequest *r, Err *err) {
    LocalComm *c = (LocalComm *)base;
    Device *dev = device_cuda_base(c->dev);
    cudaStream_t s = (cudaStream_t)device_cuda_stream(c->dev, STREAM_COMPUTE);
    size_t bytes = r->kind == COLL_BARRIER ? 0 : r->count * dtype_size(r->dtype);
    r->seq = c->seq++;
    int copies = r->kind != COLL_BROADCAST && r->kind != COLL_BARRIER && r->send != r->recv;
    if (copies && bytes) {
        cudaError_t e = cudaMemcpyAsync(r->recv, r->send, bytes, cudaMemcpyDefault, s);
        if (e != cudaSuccess)
            return err_set(err, ERR_INTERNAL, "%s of %zu bytes: %s", coll_kind_name(r->kind), bytes,
                           cudaGetErrorString(e));
    }
    device_cuda_trace_span(c->dev, STREAM_COMPUTE, coll_event_kind(r->kind), r->unit, bytes,
                           r->trace_flags);
    dev->ops->event_record(dev, STREAM_COMPUTE, &r->done);
    return 0;
}

static int local_wait(Comm *base, CommRequest *r, Err *err) {
    LocalComm *c = (LocalComm *)base;
    if (r->kind == COLL_BARRIER || !r->recv || !device_cuda_is_host_memory(r->recv)) return 0;
    cudaError_t e = cudaStreamSynchronize((cudaStream_t)device_cuda_stream(c->dev, STREAM_COMPUTE));
    if (e != cudaSuccess)
        return err_set(err, ERR_INTERNAL, "%s: %s", coll_kind_name(r->kind), cudaGetErrorString(e));
    return 0;
}

static const CommOps local_ops = {.start = local_start, .wait = local_wait};

void comm_local_init(LocalComm *c, CudaDevice *dev) {
    *c = (LocalComm){.base = {.ops = &local_ops, .rank = 0, .size = 1, .world_rank = 0, .impl = c},
                     .dev = dev};
}
