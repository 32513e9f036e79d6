/* device_cuda: the device interface on one NVIDIA GPU: a caching allocator charging every byte
 * by category, three CUDA streams joined by events, and spans timed into the trace. */
#include "runtime/device_cuda.h"

#include <cuda_runtime_api.h>
#include <limits.h>
#include <stdint.h>
#include <stdlib.h>

/* Blocks are rounded up so that near sizes share a free list. */
enum { ALIGN = 512, EVENT_RING = 8192, PENDING_MAX = 2048, MAX_SIZES = 512 };

/* A ring ticket that names no event: a mark or span start already read as a time. */
#define NO_TICKET (-1LL)

typedef struct Block {
    void *p;
    size_t bytes;
    int category; /* -1 while free */
} Block;

/* A freed block and the event recorded on the compute stream when it was freed: work queued
 * before the free (on any stream, since the engine orders its frees after every use) may still
 * touch it until that event has completed. */
typedef struct Cached {
    void *p;
    cudaEvent_t freed;
} Cached;

/* Free blocks of one (rounded) size, oldest first. */
typedef struct FreeList {
    size_t bytes;
    Cached *blocks;
    int n, cap;
} FreeList;

/* A span enqueued on a stream, timed when its end event has been reached. Events are ring
 * tickets; a start already read (a mark about to be re-recorded) is kept as start_time. */
typedef struct Pending {
    long long start, end;
    double start_time;
    TraceEvent ev;
} Pending;

struct CudaDevice {
    Device base; /* its memory: every byte charged, as device_sim charges them */
    cudaStream_t stream[STREAM_COUNT];
    TraceBuf *trace;
    /* the allocator: every block by pointer (open addressing), free lists by size, and the
     * events of freed blocks (created on demand, reused, never the timing ring's) */
    Block *blocks;
    size_t nblocks, cap;
    FreeList lists[MAX_SIZES];
    int nlists;
    cudaEvent_t *spare_events;
    int nspare, spare_cap;
    /* timing: a ring of events named by tickets (ticket t lives in ring[t % EVENT_RING] until
     * ticket t + EVENT_RING is issued), the base of all times, each stream's last mark (a
     * ticket, or NO_TICKET and its time once read), the spans not yet read and the oldest
     * ticket they need */
    cudaEvent_t ring[EVENT_RING];
    long long issued;
    cudaEvent_t base_event;
    long long mark[STREAM_COUNT];
    double mark_time[STREAM_COUNT];
    Pending pending[PENDING_MAX];
    int npending;
    long long oldest_needed;
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

/* ---------------------------------------------------------------- the cache of freed blocks */

/* An event for a freed block: a spare one if any, so a steady state creates none. Timing is
 * off: it is only ever queried and waited on. */
static cudaEvent_t take_event(CudaDevice *d) {
    if (d->nspare) return d->spare_events[--d->nspare];
    cudaEvent_t e = NULL;
    cudaError_t rc = cudaEventCreateWithFlags(&e, cudaEventDisableTiming);
    note(d, rc);
    return rc == cudaSuccess ? e : NULL;
}

static void give_event(CudaDevice *d, cudaEvent_t e) {
    if (d->nspare == d->spare_cap) {
        int cap = d->spare_cap ? 2 * d->spare_cap : 64;
        cudaEvent_t *spare = realloc(d->spare_events, (size_t)cap * sizeof *spare);
        if (!spare) {
            note(d, cudaEventDestroy(e));
            return;
        }
        d->spare_events = spare;
        d->spare_cap = cap;
    }
    d->spare_events[d->nspare++] = e;
}

static FreeList *list_for(CudaDevice *d, size_t bytes, int create) {
    for (int i = 0; i < d->nlists; i++)
        if (d->lists[i].bytes == bytes) return &d->lists[i];
    if (!create || d->nlists == MAX_SIZES) return NULL;
    d->lists[d->nlists] = (FreeList){.bytes = bytes};
    return &d->lists[d->nlists++];
}

/* A cached block of this size whose free event has completed: no work queued before its free,
 * on any stream, can touch it any more, so work on any stream may have it. Free events are all
 * recorded on the compute stream, so they complete in the list's order: if the oldest has not,
 * none has, and the caller goes to CUDA for fresh memory. */
static void *take_cached(CudaDevice *d, size_t bytes) {
    FreeList *l = list_for(d, bytes, 0);
    if (!l || !l->n) return NULL;
    cudaError_t rc = cudaEventQuery(l->blocks[0].freed);
    if (rc == cudaErrorNotReady) return NULL;
    note(d, rc);
    if (rc != cudaSuccess) return NULL;
    Cached c = l->blocks[0];
    for (int k = 1; k < l->n; k++) l->blocks[k - 1] = l->blocks[k];
    l->n--;
    give_event(d, c.freed);
    return c.p;
}

/* Keeps a freed block for reuse, with an event on the compute stream marking its free; 0 if it
 * could not be kept (then it goes back to CUDA). */
static int keep_cached(CudaDevice *d, void *p, size_t bytes) {
    FreeList *l = list_for(d, bytes, 1);
    if (!l) return 0;
    if (l->n == l->cap) {
        int cap = l->cap ? 2 * l->cap : 8;
        Cached *blocks = realloc(l->blocks, (size_t)cap * sizeof *blocks);
        if (!blocks) return 0;
        l->blocks = blocks;
        l->cap = cap;
    }
    cudaEvent_t e = take_event(d);
    if (!e) return 0;
    cudaError_t rc = cudaEventRecord(e, d->stream[STREAM_COMPUTE]);
    note(d, rc);
    if (rc != cudaSuccess) {
        give_event(d, e);
        return 0;
    }
    l->blocks[l->n++] = (Cached){.p = p, .freed = e};
    return 1;
}

/* Waits until no queued work can touch a cached block: after it every one may be reused. */
static void wait_cached(CudaDevice *d) {
    for (int i = 0; i < d->nlists; i++)
        for (int k = 0; k < d->lists[i].n; k++)
            note(d, cudaEventSynchronize(d->lists[i].blocks[k].freed));
}

/* Returns every cached block to CUDA (after wait_cached). Their addresses stay in the table with
 * no bytes: CUDA may hand the same address out again. */
static void empty_cache(CudaDevice *d) {
    for (int i = 0; i < d->nlists; i++) {
        FreeList *l = &d->lists[i];
        for (int k = 0; k < l->n; k++) {
            Block *b = find_block(d, l->blocks[k].p);
            note(d, cudaFree(l->blocks[k].p));
            if (b) b->bytes = 0;
            give_event(d, l->blocks[k].freed);
        }
        l->n = 0;
    }
}

/* Fresh device memory; when CUDA has none left, the cached blocks are reclaimed first (one of
 * this size once its free has completed, else all of them given back) and it is asked once
 * more. NULL only when it still has none. */
static void *malloc_or_reclaim(CudaDevice *d, size_t size) {
    void *p = NULL;
    if (cudaMalloc(&p, size) == cudaSuccess) return p;
    cudaGetLastError(); /* out of memory is this call's answer, not a fault for later calls */
    wait_cached(d);
    if ((p = take_cached(d, size))) return p;
    empty_cache(d);
    if (cudaMalloc(&p, size) == cudaSuccess) return p;
    cudaGetLastError();
    return NULL;
}

/* ---------------------------------------------------------------- timing */

static cudaEvent_t ring_at(const CudaDevice *d, long long ticket) {
    return d->ring[ticket % EVENT_RING];
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
        note(d, cudaEventSynchronize(ring_at(d, p->end)));
        p->ev.end = seconds_at(d, ring_at(d, p->end));
        p->ev.start = p->start == NO_TICKET ? p->start_time
                      : p->start == p->end  ? p->ev.end
                                            : seconds_at(d, ring_at(d, p->start));
        if (p->ev.end < p->ev.start) p->ev.end = p->ev.start;
        tracebuf_append(d->trace, p->ev);
    }
    d->npending = 0;
    d->oldest_needed = LLONG_MAX;
}

/* A stream's mark about to be re-recorded is read into a time: later spans start from it. */
static void resolve_mark(CudaDevice *d, StreamId s) {
    cudaEvent_t e = ring_at(d, d->mark[s]);
    note(d, cudaEventSynchronize(e));
    d->mark_time[s] = seconds_at(d, e);
    d->mark[s] = NO_TICKET;
}

/* The next ring ticket. Its slot last held the ticket EVENT_RING before it, which may still be
 * needed: pending spans that could need it are read first (synchronize, then read) and a stream
 * mark on it becomes a time, so the ring never re-records an event a span still reads. */
static long long next_ticket(CudaDevice *d) {
    long long t = d->issued++;
    long long old = t - EVENT_RING;
    if (old < 0) return t;
    if (d->npending && old >= d->oldest_needed) resolve_pending(d);
    for (int s = 0; s < STREAM_COUNT; s++)
        if (d->mark[s] == old) resolve_mark(d, (StreamId)s);
    return t;
}

/* Enqueues a trace event that spans from the stream's last mark (a point when start ==
 * end) to now on stream s. */
static void trace_enqueue(CudaDevice *d, StreamId s, TraceEvent ev, int point) {
    if (!d->trace || !d->trace->enabled) return;
    if (d->npending == PENDING_MAX) resolve_pending(d);
    long long end = next_ticket(d);
    note(d, cudaEventRecord(ring_at(d, end), d->stream[s]));
    Pending *p = &d->pending[d->npending++];
    p->start = point ? end : d->mark[s];
    p->start_time = d->mark_time[s];
    p->end = end;
    p->ev = ev;
    p->ev.stream = s;
    long long first = p->start == NO_TICKET ? end : p->start; /* its oldest event */
    if (first < d->oldest_needed) d->oldest_needed = first;
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
    if (!p && !(p = malloc_or_reclaim(d, size)))
        return NULL; /* the engine reports out of memory, naming the bytes and the category */
    Block *b = find_block(d, p);
    if (b)
        b->bytes = size; /* cached, or an address CUDA had back and gave out again */
    else if (!(b = insert_block(d, p, size))) {
        note(d, cudaFree(p));
        return NULL;
    }
    b->category = (int)cat;
    mem_account_charge(&base->memory, cat, size);
    trace_enqueue(d, STREAM_COMPUTE,
                  trace_memory_event(EV_ALLOC, 0, size, base->memory.total, cat, unit), 1);
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
                  trace_memory_event(EV_FREE, 0, b->bytes, base->memory.total, cat, unit), 1);
    /* the engine frees in the compute stream's order, after every stream's last use (the
     * simulator checks a free as an access by compute): an event recorded on compute now
     * completes only once nothing queued can touch the block, and the block waits for it */
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
    /* times and stream are filled in once its events complete */
    trace_enqueue(d, s, trace_work_event(w, s, 0, 0, base->memory.total), 0);
}

/* Nothing to record: the next work's span starts at the stream's last mark, before these. */
static void cuda_launched(Device *base, StreamId s, const Work *w) {
    (void)base, (void)s, (void)w;
}

/* The ring slot is the handle; its ticket and stream say whether the slot was re-recorded
 * since. */
static void cuda_event_record(Device *base, StreamId s, DevEvent *ev) {
    CudaDevice *d = dev_of(base);
    long long t = next_ticket(d);
    note(d, cudaEventRecord(ring_at(d, t), d->stream[s]));
    ev->handle = ring_at(d, t);
    ev->ticket = t;
    ev->stream = s;
    ev->time = 0.0;
}

/* A slot re-recorded since (more than EVENT_RING events recorded while the engine held this
 * one) no longer marks the point waited for: waiting for everything queued on the stream that
 * recorded it, which includes that point, keeps the order without racing. */
static void cuda_stream_wait(Device *base, StreamId s, const DevEvent *ev) {
    CudaDevice *d = dev_of(base);
    if (!ev->handle) return;
    if (d->issued - ev->ticket > EVENT_RING)
        note(d, cudaStreamSynchronize(d->stream[ev->stream]));
    else
        note(d, cudaStreamWaitEvent(d->stream[s], (cudaEvent_t)ev->handle, 0));
}

static double cuda_now(Device *base, StreamId s) {
    CudaDevice *d = dev_of(base);
    cudaEvent_t e = ring_at(d, next_ticket(d));
    note(d, cudaEventRecord(e, d->stream[s]));
    note(d, cudaEventSynchronize(e));
    return seconds_at(d, e);
}

static const DeviceOps cuda_ops = {DEVICE_OPS_NAMED(cuda)};

/* ---------------------------------------------------------------- lifetime */

static int create_streams_and_events(CudaDevice *d) {
    cudaError_t e = cudaSuccess;
    for (int s = 0; e == cudaSuccess && s < STREAM_COUNT; s++)
        e = cudaStreamCreateWithFlags(&d->stream[s], cudaStreamNonBlocking);
    for (int i = 0; e == cudaSuccess && i < EVENT_RING; i++) e = cudaEventCreate(&d->ring[i]);
    if (e == cudaSuccess) e = cudaEventCreate(&d->base_event);
    if (e == cudaSuccess) e = cudaEventRecord(d->base_event, d->stream[STREAM_COMPUTE]);
    for (int s = 0; e == cudaSuccess && s < STREAM_COUNT; s++) {
        d->mark[s] = NO_TICKET; /* base_event: time 0 */
        d->mark_time[s] = 0.0;
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
    d->oldest_needed = LLONG_MAX;
    if (grow_table(d) || create_streams_and_events(d)) {
        int rc = err_set(err, ERR_INTERNAL, "creating CUDA streams and events failed: %s",
                         cudaGetErrorString(d->error));
        device_cuda_destroy(d);
        return rc;
    }
    *out = d;
    return 0;
}

void device_cuda_settle(CudaDevice *d) {
    for (int s = 0; s < STREAM_COUNT; s++)
        if (d->stream[s]) cudaStreamSynchronize(d->stream[s]);
    if (d->trace) resolve_pending(d);
}

void device_cuda_destroy(CudaDevice *d) {
    if (!d) return;
    device_cuda_settle(d);
    empty_cache(d); /* every stream is idle: no block's free event is pending */
    for (int i = 0; i < d->nlists; i++) free(d->lists[i].blocks);
    for (int i = 0; i < d->nspare; i++) cudaEventDestroy(d->spare_events[i]);
    free(d->spare_events);
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

void device_cuda_trace_span(CudaDevice *d, StreamId s, EventKind kind, int unit, size_t bytes,
                            int flags) {
    trace_enqueue(d, s,
                  (TraceEvent){.bytes = bytes,
                               .mem_total = d->base.memory.total,
                               .kind = kind,
                               .unit = unit,
                               .category = -1,
                               .flags = flags},
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
