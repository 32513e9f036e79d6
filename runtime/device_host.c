/* device_host: a rank's device in its own process on CPUs: heap memory charged by category, wall
 * clock time, spans traced as the simulator traces modelled ones (runtime/device_host.h). */
#include "runtime/device_host.h"

#include <malloc.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>

#include "base/clock.h"

/* Each block carries its size and category so free can uncharge it; 64 bytes keeps the payload
 * aligned for vector loads. */
typedef struct BlockHeader {
    size_t bytes;
    int category;
    char pad[64 - sizeof(size_t) - sizeof(int)];
} BlockHeader;

_Static_assert(sizeof(BlockHeader) == 64, "the header keeps payloads 64-byte aligned");

static HostDevice *host(Device *d) {
    return (HostDevice *)d->impl;
}

static double elapsed(const HostDevice *h) {
    return clock_seconds() - h->t0;
}

static void trace_event(HostDevice *h, TraceEvent e) {
    if (h->trace && h->trace->enabled) tracebuf_append(h->trace, e);
}

static void trace_memory(HostDevice *h, EventKind kind, size_t bytes, int cat, int unit) {
    trace_event(h, trace_memory_event(kind, elapsed(h), bytes, h->base.memory.total, cat, unit));
}

static void *host_alloc(Device *d, size_t bytes, MemCategory cat, int unit) {
    /* NVMe bytes live in a file (io/nvme_tier.c): charge them, hold only the header */
    size_t held = cat == MEM_NVME ? 0 : bytes;
    BlockHeader *b = aligned_alloc(sizeof *b, sizeof *b + (held + 63) / 64 * 64);
    if (!b) return NULL;
    b->bytes = bytes;
    b->category = cat;
    mem_account_charge(&d->memory, cat, bytes);
    trace_memory(host(d), EV_ALLOC, bytes, cat, unit);
    return b + 1;
}

static void host_free(Device *d, void *p, int unit) {
    if (!p) return;
    BlockHeader *b = (BlockHeader *)p - 1;
    mem_account_uncharge(&d->memory, b->category, b->bytes);
    trace_memory(host(d), EV_FREE, b->bytes, b->category, unit);
    free(b);
}

static void host_copy(Device *d, void *dst, const void *src, size_t bytes) {
    (void)d;
    memmove(dst, src, bytes);
}

/* The work has just run on this thread: its span ends now and began where the last one ended. */
static void host_run(Device *d, StreamId st, const Work *w) {
    HostDevice *h = host(d);
    double end = elapsed(h);
    trace_event(h, trace_work_event(w, st, h->mark, end, d->memory.total));
    h->mark = end;
    if (h->progress) h->progress(h->progress_ctx);
}

/* They have run on this thread: the next work's span, from the last mark, holds them. */
static void host_launched(Device *d, StreamId st, const Work *w) {
    (void)d, (void)st, (void)w;
}

/* Work is done when it is handed over, so an event is only a time. */
static void host_event_record(Device *d, StreamId st, DevEvent *ev) {
    (void)st;
    ev->time = elapsed(host(d));
    ev->handle = NULL;
}

/* What was waited for has happened (a collective's wait returned): the next span starts after
 * it, not across the wait. */
static void host_stream_wait(Device *d, StreamId st, const DevEvent *ev) {
    HostDevice *h = host(d);
    (void)st;
    double now = elapsed(h);
    if (ev->time > h->mark) h->mark = ev->time < now ? ev->time : now;
}

static double host_now(Device *d, StreamId st) {
    (void)st;
    return elapsed(host(d));
}

size_t device_host_resident_peak(void) {
    struct rusage u;
    if (getrusage(RUSAGE_SELF, &u) != 0) return 0;
    return (size_t)u.ru_maxrss * 1024; /* Linux counts KiB */
}

static size_t host_resident_peak(Device *d) {
    (void)d;
    return device_host_resident_peak();
}

static const DeviceOps host_device_ops = {DEVICE_OPS_NAMED(host),
                                          .resident_peak = host_resident_peak};

void device_host_init(HostDevice *d, int rank, TraceBuf *trace) {
    memset(d, 0, sizeof *d);
    /* accounted as the simulator accounts (the measured resident peak also holds the fp32
     * scratch the CPU's low-precision kernels widen their operands into) */
    d->base = device_on_host(&host_device_ops, rank, d);
    d->trace = trace;
    d->t0 = clock_seconds();
    /* A training step frees and asks again for the same sizes: keep freed memory in the heap
     * (no unmapping of big blocks, no trimming) so the next step does not fault it in again,
     * as a caching allocator does on a GPU. Process-wide, which a process of one rank allows. */
    mallopt(M_MMAP_THRESHOLD, 32 << 20);
    mallopt(M_TRIM_THRESHOLD, 1 << 30);
}
