/* device_cuda: the device interface on one NVIDIA GPU: a caching allocator charging every byte
 * by category, three CUDA streams joined by events, and spans timed into the trace. */
#include "runtime/device_cuda.h"

#include <cuda_runtime_api.h>
#include <stdint.h>
#include <stdlib.h>

/* Blocks are rounded up so that near sizes share a free list. */
enum { ALIGN = 512, EVENT_RING = 8192, PENDING_MAX = 2048, MAX_SIZES = 512 };

typedef struct Block {
    void *p;
    size_t bytes;
    int category; /* -1 while free */
} Block;

/* Free blocks of one (rounded) size. */
typedef struct FreeList {
    size_t bytes;
    void **ptrs;
    int n, cap;
} FreeList;

/* A span enqueued on a stream, timed when its end event has been reached. */
typedef struct Pending {
    cudaEvent_t start, end;
    TraceEvent ev;
} Pending;

struct CudaDevice {
    Device base; /* its memory: every byte charged, as device_sim charges them */
    cudaStream_t stream[STREAM_COUNT];
    TraceBuf *trace;
    /* the allocator: every block by pointer (open addressing), free lists by size */
    Block *blocks;
    size_t nblocks, cap;
    FreeList lists[MAX_SIZES];
    int nlists;
    /* timing: a ring of events, the base of all times, each stream's last mark */
    cudaEvent_t ring[EVENT_RING];
    int next_event;
    cudaEvent_t base_event, mark[STREAM_COUNT];
    Pending pending[PENDING_MAX];
    int npending;
    cudaError_t error;
};

static CudaDevice *dev_of(Device *d) {
    return (CudaDevice *)d->impl;
}

static void note(CudaDevice *d, cudaError_t e) {
    if (e != cudaSuccess && d->error == cudaSuccess) d->error = e;
}

/* ---------------------------------------------------------------- the block table */

static size_t slot_of(const CudaDevice *d, const void *p) {
    uintptr_t h = (uintptr_t)p / ALIGN;
    h ^= h >> 17;
    h *= 0x9E3779B97F4A7C15ull;
    return (size_t)(h >> 20) & (d->cap - 1);
}

static Block *find_block(CudaDevice *d, const void *p) {
    for (size_t i = slot_of(d, p);; i = (i + 1) & (d->cap - 1)) {
        if (!d->blocks[i].p) return NULL;
        if (d->blocks[i].p == p) return &d->blocks[i];
    }
}

static int grow_table(CudaDevice *d);

static Block *insert_block(CudaDevice *d, void *p, size_t bytes) {
    if (2 * (d->nblocks + 1) > d->cap && grow_table(d)) return NULL;
    size_t i = slot_of(d, p);
    while (d->blocks[i].p) i = (i + 1) & (d->cap - 1);
    d->blocks[i] = (Block){.p = p, .bytes = bytes, .category = -1};
    d->nblocks++;
    return &d->blocks[i];
}

static int grow_table(CudaDevice *d) {
    size_t old_cap = d->cap;
    Block *old = d->blocks;
    d->cap = old_cap ? old_cap * 2 : 1024;
    d->blocks = calloc(d->cap, sizeof *d->blocks);
    if (!d->blocks) {
        d->blocks = old;
        d->cap = old_cap;
        return -1;
    }
    d->nblocks = 0;
    for (size_t i = 0; i < old_cap; i++)
        if (old[i].p) {
            Block *b = insert_block(d, old[i].p, old[i].bytes);
            b->category = old[i].category;
        }
    free(old);
    return 0;
}

static FreeList *list_for(CudaDevice *d, size_t bytes, int create) {
    for (int i = 0; i < d->nlists; i++)
        if (d->lists[i].bytes == bytes) return &d->lists[i];
    if (!create || d->nlists == MAX_SIZES) return NULL;
    d->lists[d->nlists] = (FreeList){.bytes = bytes};
    return &d->lists[d->nlists++];
}

static void *take_cached(CudaDevice *d, size_t bytes) {
    FreeList *l = list_for(d, bytes, 0);
    return l && l->n ? l->ptrs[--l->n] : NULL;
}

/* Keeps a freed block for reuse; 0 if it could not be kept (then it goes back to CUDA). */
static int keep_cached(CudaDevice *d, void *p, size_t bytes) {
    FreeList *l = list_for(d, bytes, 1);
    if (!l) return 0;
    if (l->n == l->cap) {
        int cap = l->cap ? 2 * l->cap : 8;
        void **ptrs = realloc(l->ptrs, (size_t)cap * sizeof *ptrs);
        if (!ptrs) return 0;
        l->ptrs = ptrs;
        l->cap = cap;
    }
    l->ptrs[l->n++] = p;
    return 1;
}

/* ---------------------------------------------------------------- timing */

static cudaEvent_t ring_event(CudaDevice *d) {
    cudaEvent_t e = d->ring[d->next_event];
    d->next_event = (d->next_event + 1) % EVENT_RING;
    return e;
}

static double seconds_at(CudaDevice *d, cudaEvent_t e) {
    float ms = 0.0f;
    note(d, cudaEventElapsedTime(&ms, d->base_event, e));
    return (double)ms / 1e3;
}

/* Waits for every pending span and appends it to the trace, in the order they were issued. */
static void resolve_pending(CudaDevice *d) {
    for (int i = 0; i < d->npending; i++) {
        Pending *p = &d->pending[i];
        note(d, cudaEventSynchronize(p->end));
        p->ev.start = seconds_at(d, p->start);
        p->ev.end = p->start == p->end ? p->ev.start : seconds_at(d, p->end);
        if (p->ev.end < p->ev.start) p->ev.end = p->ev.start;
        tracebuf_append(d->trace, p->ev);
    }
    d->npending = 0;
}

/* Enqueues a trace event that spans from the stream's last mark (a point when start ==
 * end) to now on stream s. */
static void trace_enqueue(CudaDevice *d, StreamId s, TraceEvent ev, int point) {
    if (!d->trace || !d->trace->enabled) return;
    /* the ring must not lap events still pending */
    if (d->npending == PENDING_MAX) resolve_pending(d);
    cudaEvent_t end = ring_event(d);
    note(d, cudaEventRecord(end, d->stream[s]));
    Pending *p = &d->pending[d->npending++];
    p->start = point ? end : d->mark[s];
    p->end = end;
    p->ev = ev;
    p->ev.stream = s;
    if (!point) d->mark[s] = end;
}

/* ---------------------------------------------------------------- DeviceOps */

static size_t rounded(size_t bytes) {
    return (bytes + ALIGN - 1) / ALIGN * ALIGN;
}

static void *cuda_alloc(Device *base, size_t bytes, MemCategory cat, int unit) {
    CudaDevice *d = dev_of(base);
    /* host offload (pinned host memory, an optimizer step on the CPU) is not built for the
     * GPU yet: the CLI refuses --offload cpu with --backend cuda */
    if (cat == MEM_HOST_OFFLOAD) return NULL;
    size_t size = rounded(bytes ? bytes : 1);
    void *p = take_cached(d, size);
    Block *b = p ? find_block(d, p) : NULL;
    if (!p) {
        cudaError_t e = cudaMalloc(&p, size);
        if (e != cudaSuccess) return NULL; /* the engine reports out of memory */
        if ((b = find_block(d, p)))
            b->bytes = size; /* an address CUDA had back and gave out again */
        else if (!(b = insert_block(d, p, size))) {
            cudaFree(p);
            return NULL;
        }
    }
    b->category = (int)cat;
    mem_account_charge(&base->memory, cat, size);
    trace_enqueue(d, STREAM_COMPUTE,
                  (TraceEvent){.bytes = size,
                               .mem_total = base->memory.total,
                               .kind = EV_ALLOC,
                               .unit = unit,
                               .category = cat},
                  1);
    return p;
}

static void cuda_free(Device *base, void *p, int unit) {
    if (!p) return;
    CudaDevice *d = dev_of(base);
    Block *b = find_block(d, p);
    if (!b || b->category < 0) return; /* not ours, or freed twice: leave it alone */
    int cat = b->category;
    mem_account_uncharge(&base->memory, (MemCategory)cat, b->bytes);
    b->category = -1;
    trace_enqueue(d, STREAM_COMPUTE,
                  (TraceEvent){.bytes = b->bytes,
                               .mem_total = base->memory.total,
                               .kind = EV_FREE,
                               .unit = unit,
                               .category = cat},
                  1);
    /* later work on any stream may still read it: the compute stream is where frees happen in
     * the engine's order, so a cached block is reused only by work ordered after it */
    if (!keep_cached(d, p, b->bytes)) {
        note(d, cudaStreamSynchronize(d->stream[STREAM_COMPUTE]));
        note(d, cudaFree(p));
        b->bytes = 0; /* stays in the table: CUDA may hand the same address out again */
    }
}

/* Synchronous, in the compute stream's order (UVA: any direction). */
static void cuda_copy(Device *base, void *dst, const void *src, size_t bytes) {
    CudaDevice *d = dev_of(base);
    if (!bytes) return;
    note(d, cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDefault, d->stream[STREAM_COMPUTE]));
    note(d, cudaStreamSynchronize(d->stream[STREAM_COMPUTE]));
}

static void cuda_run(Device *base, StreamId s, const Work *w) {
    CudaDevice *d = dev_of(base);
    trace_enqueue(d, s,
                  (TraceEvent){.bytes = (unsigned long long)w->bytes,
                               .mem_total = base->memory.total,
                               .kind = event_kind_of_work(w->kind),
                               .unit = w->unit,
                               .category = -1},
                  0);
}

static void cuda_event_record(Device *base, StreamId s, DevEvent *ev) {
    CudaDevice *d = dev_of(base);
    cudaEvent_t e = ring_event(d);
    note(d, cudaEventRecord(e, d->stream[s]));
    ev->handle = e;
    ev->time = 0.0;
}

static void cuda_stream_wait(Device *base, StreamId s, const DevEvent *ev) {
    CudaDevice *d = dev_of(base);
    if (ev->handle) note(d, cudaStreamWaitEvent(d->stream[s], (cudaEvent_t)ev->handle, 0));
}

static double cuda_now(Device *base, StreamId s) {
    CudaDevice *d = dev_of(base);
    cudaEvent_t e = ring_event(d);
    note(d, cudaEventRecord(e, d->stream[s]));
    note(d, cudaEventSynchronize(e));
    return seconds_at(d, e);
}

static const DeviceOps cuda_ops = {
    .alloc = cuda_alloc,
    .free = cuda_free,
    .copy = cuda_copy,
    .run = cuda_run,
    .event_record = cuda_event_record,
    .stream_wait = cuda_stream_wait,
    .now = cuda_now,
    .bytes_in_use = device_bytes_in_use,
    .peak_bytes = device_peak_bytes,
    .peak_bytes_by_category = device_peak_bytes_by_category,
    .reset_peak = device_reset_peak,
};

/* ---------------------------------------------------------------- lifetime */

static int create_streams_and_events(CudaDevice *d) {
    cudaError_t e = cudaSuccess;
    for (int s = 0; e == cudaSuccess && s < STREAM_COUNT; s++)
        e = cudaStreamCreateWithFlags(&d->stream[s], cudaStreamNonBlocking);
    for (int i = 0; e == cudaSuccess && i < EVENT_RING; i++) e = cudaEventCreate(&d->ring[i]);
    if (e == cudaSuccess) e = cudaEventCreate(&d->base_event);
    if (e == cudaSuccess) e = cudaEventRecord(d->base_event, d->stream[STREAM_COMPUTE]);
    for (int s = 0; e == cudaSuccess && s < STREAM_COUNT; s++) {
        d->mark[s] = d->base_event;
        if (s != STREAM_COMPUTE) e = cudaStreamWaitEvent(d->stream[s], d->base_event, 0);
    }
    note(d, e);
    return e == cudaSuccess ? 0 : -1;
}

int device_cuda_create(CudaDevice **out, int rank, TraceBuf *trace, Err *err) {
    CudaDevice *d = calloc(1, sizeof *d);
    if (!d) return err_set(err, ERR_NOMEM, "out of memory creating the CUDA device");
    d->base = (Device){.ops = &cuda_ops, .rank = rank, .impl = d};
    d->trace = trace;
    if (grow_table(d) || create_streams_and_events(d)) {
        int rc = err_set(err, ERR_INTERNAL, "creating CUDA streams and events failed: %s",
                         cudaGetErrorString(d->error));
        device_cuda_destroy(d);
        return rc;
    }
    *out = d;
    return 0;
}

void device_cuda_destroy(CudaDevice *d) {
    if (!d) return;
    for (int s = 0; s < STREAM_COUNT; s++)
        if (d->stream[s]) cudaStreamSynchronize(d->stream[s]);
    if (d->trace) resolve_pending(d);
    for (int i = 0; i < d->nlists; i++) {
        for (int k = 0; k < d->lists[i].n; k++) {
            Block *b = find_block(d, d->lists[i].ptrs[k]);
            if (b && b->category == -1 && d->lists[i].bytes) cudaFree(d->lists[i].ptrs[k]);
        }
        free(d->lists[i].ptrs);
    }
    for (int i = 0; i < EVENT_RING; i++)
        if (d->ring[i]) cudaEventDestroy(d->ring[i]);
    if (d->base_event) cudaEventDestroy(d->base_event);
    for (int s = 0; s < STREAM_COUNT; s++)
        if (d->stream[s]) cudaStreamDestroy(d->stream[s]);
    free(d->blocks);
    free(d);
}

Device *device_cuda_base(CudaDevice *d) {
    return &d->base;
}

void *device_cuda_stream(CudaDevice *d, StreamId s) {
    return d->stream[s];
}

void device_cuda_trace_span(CudaDevice *d, StreamId s, EventKind kind, int unit, size_t bytes) {
    trace_enqueue(d, s,
                  (TraceEvent){.bytes = bytes,
                               .mem_total = d->base.memory.total,
                               .kind = kind,
                               .unit = unit,
                               .category = -1},
                  0);
}

int device_cuda_status(CudaDevice *d, Err *err) {
    if (d->error == cudaSuccess) return 0;
    return err_set(err, ERR_INTERNAL, "CUDA error: %s", cudaGetErrorString(d->error));
}

int device_cuda_is_host_memory(const void *p) {
    struct cudaPointerAttributes a;
    if (cudaPointerGetAttributes(&a, p) != cudaSuccess) {
        cudaGetLastError(); /* clear it: an unknown pointer is plain host memory */
        return 1;
    }
    return a.type == cudaMemoryTypeHost || a.type == cudaMemoryTypeUnregistered;
}
