/* The CUDA device's allocator and timing ring: a freed block is not handed out while work queued
 * before its free is pending, a full GPU is reclaimed from the cache before out of memory, and
 * more spans than the event ring holds are all timed. Skipped where there is no GPU. */
#include <criterion/criterion.h>
#include <cuda_runtime_api.h>
#include <stdatomic.h>

#include "runtime/device_cuda.h"
#include "tests/gpu/gpu_util.h"

/* A host function that holds its stream until the test lets go: a free enqueued behind it stays
 * pending for as long as the test wants. */
static void CUDART_CB hold_stream(void *flag) {
    while (!atomic_load((atomic_int *)flag)) {
    }
}

static CudaDevice *device(TraceBuf *trace) {
    CudaDevice *d = NULL;
    Err err = {0};
    cr_assert_eq(device_cuda_create(&d, 0, trace, &err), 0, "%s", err.msg);
    return d;
}

static void expect_no_error(CudaDevice *d) {
    Err err = {0};
    cr_expect_eq(device_cuda_status(d, &err), 0, "%s", err.msg);
}

Test(cuda_device, freed_block_waits_for_its_event) {
    gpu_or_skip();
    CudaDevice *d = device(NULL);
    Device *dev = device_cuda_base(d);
    cudaStream_t compute = device_cuda_stream(d, STREAM_COMPUTE);
    atomic_int go = 0;
    void *p = dev->ops->alloc(dev, 1 << 20, MEM_COMM_BUFFER, 0);
    cr_assert(p);
    cr_assert_eq(cudaLaunchHostFunc(compute, hold_stream, &go), cudaSuccess);
    dev->ops->free(dev, p, 0);
    void *q = dev->ops->alloc(dev, 1 << 20, MEM_COMM_BUFFER, 0);
    cr_expect_neq(q, p, "a block whose free is still queued was handed out again");
    atomic_store(&go, 1);
    cr_assert_eq(cudaStreamSynchronize(compute), cudaSuccess);
    void *r = dev->ops->alloc(dev, 1 << 20, MEM_COMM_BUFFER, 0);
    cr_expect_eq(r, p, "a block whose free has completed is reused");
    cr_expect_eq(dev->ops->bytes_in_use(dev, MEM_COMM_BUFFER), (size_t)2 << 20);
    dev->ops->free(dev, q, 0);
    dev->ops->free(dev, r, 0);
    expect_no_error(d);
    device_cuda_destroy(d);
    gpu_done();
}

Test(cuda_device, full_gpu_reclaims_the_cache) {
    gpu_or_skip();
    CudaDevice *d = device(NULL);
    Device *dev = device_cuda_base(d);
    enum { MAX_BLOCKS = 4096 };
    static void *blocks[MAX_BLOCKS];
    size_t gib = (size_t)1 << 30;
    int n = 0;
    while (n < MAX_BLOCKS && (blocks[n] = dev->ops->alloc(dev, gib, MEM_ACTIVATIONS, -1))) n++;
    cr_assert_gt(n, 1, "the GPU held %d 1 GiB blocks", n);
    for (int i = 0; i < n; i++) dev->ops->free(dev, blocks[i], -1);
    /* every byte is cached in 1 GiB blocks: a 1.5 GiB block needs them given back */
    void *big = dev->ops->alloc(dev, gib + gib / 2, MEM_ACTIVATIONS, -1);
    cr_expect(big, "out of memory with %d GiB cached", n);
    dev->ops->free(dev, big, -1);
    expect_no_error(d);
    device_cuda_destroy(d);
    gpu_done();
}

Test(cuda_device, spans_past_the_event_ring_are_all_timed) {
    gpu_or_skip();
    TraceBuf trace;
    tracebuf_init(&trace, 0, 1);
    CudaDevice *d = device(&trace);
    Device *dev = device_cuda_base(d);
    DevEvent held = {0};
    device_cuda_trace_span(d, STREAM_COPY, EV_COPY_H2D, 0, 1, 0);
    dev->ops->event_record(dev, STREAM_COMM, &held);
    enum { SPANS = 3 * 8192 + 7 }; /* laps runtime/device_cuda.c's EVENT_RING three times */
    for (int i = 0; i < SPANS; i++) device_cuda_trace_span(d, STREAM_COMPUTE, EV_FORWARD, 1, 1, 0);
    dev->ops->stream_wait(dev, STREAM_COMPUTE, &held); /* its slot was re-recorded long ago */
    device_cuda_trace_span(d, STREAM_COPY, EV_COPY_H2D, 2, 1, 0);
    expect_no_error(d);
    device_cuda_destroy(d);
    cr_assert_eq(trace.n, (size_t)SPANS + 2);
    for (size_t i = 0; i < trace.n; i++) {
        cr_expect_geq(trace.ev[i].end, trace.ev[i].start, "span %zu", i);
        if (i > 1 && i < trace.n - 1)
            cr_expect_geq(trace.ev[i].start, trace.ev[i - 1].end, "compute span %zu", i);
    }
    /* the second copy span starts where the first ended, though that event was re-recorded */
    cr_expect_eq(trace.ev[trace.n - 1].start, trace.ev[0].end);
    tracebuf_free(&trace);
    gpu_done();
}
