/* device_sim: a simulated rank's device: malloc'd memory charged by category, a cache of freed
 * blocks, and time from the cost model (sim/device_sim.h says more). */
#include "sim/device_sim.h"

#include <stdlib.h>
#include <string.h>

/* Each block carries its size and category so free can uncharge it. 64 bytes keeps the
 * payload aligned for vector loads. */
typedef struct BlockHeader {
    struct BlockHeader *next; /* in a cache list while free */
    size_t bytes;
    int category;
    char pad[64 - sizeof(void *) - sizeof(size_t) - sizeof(int)];
} BlockHeader;

_Static_assert(sizeof(BlockHeader) == 64, "the header keeps payloads 64-byte aligned");

static SimDevice *sim(Device *d) {
    return (SimDevice *)d->impl;
}

/* Stamped where the compute stream is, or with kernels launched since its last work, where they
 * began: the next work's span holds them, and what the host allocates or frees meanwhile comes
 * before that work, as the host did it. */
static void trace_memory(SimDevice *s, EventKind kind, size_t bytes, int cat, int unit) {
    if (!s->trace || !s->trace->enabled) return;
    double t = s->launched[STREAM_COMPUTE] ? s->launched_from[STREAM_COMPUTE]
                                           : s->clock->stream_time[STREAM_COMPUTE];
    tracebuf_append(s->trace, trace_memory_event(kind, t, bytes, s->base.memory.total, cat, unit));
}

static SimBlockCache *cache_for(SimDevice *s, size_t bytes) {
    for (int i = 0; i < s->ncache; i++)
        if (s->cache[i].bytes == bytes) return &s->cache[i];
    return NULL;
}

static BlockHeader *cache_take(SimDevice *s, size_t bytes) {
    SimBlockCache *c = cache_for(s, bytes);
    BlockHeader *h = c ? c->head : NULL;
    if (h) {
        c->head = h->next;
        s->cached -= bytes;
    }
    return h;
}

/* Keeps a freed block for the next request of its size; 0 if there is no room to track it. */
static int cache_put(SimDevice *s, BlockHeader *h) {
    SimBlockCache *c = cache_for(s, h->bytes);
    if (!c) {
        if (s->ncache == SIM_CACHE_SIZES) return 0;
        c = &s->cache[s->ncache++];
        *c = (SimBlockCache){.bytes = h->bytes};
    }
    h->next = c->head;
    c->head = h;
    s->cached += h->bytes;
    return 1;
}

static void *sim_alloc(Device *d, size_t bytes, MemCategory cat, int unit) {
    SimDevice *s = sim(d);
    /* NVMe bytes live in a file, and an accounting-only device holds nothing: charge them,
     * keep only the header */
    size_t held = cat == MEM_NVME || d->accounting_only ? 0 : bytes;
    BlockHeader *h = held ? cache_take(s, held) : NULL;
    if (!h && !(h = malloc(sizeof *h + held))) return NULL;
    h->bytes = bytes;
    h->category = cat;
    mem_account_charge(&d->memory, cat, bytes);
    if (s->checking && held) stream_check_alloc(&s->check, h + 1, bytes, cat, NULL);
    trace_memory(s, EV_ALLOC, bytes, cat, unit);
    return h + 1;
}

static void sim_free(Device *d, void *p, int unit) {
    if (!p) return;
    SimDevice *s = sim(d);
    BlockHeader *h = (BlockHeader *)p - 1;
    mem_account_uncharge(&d->memory, h->category, h->bytes);
    trace_memory(s, EV_FREE, h->bytes, h->category, unit);
    /* the engine frees on the host in compute's order (the caching allocator's rule on a GPU:
     * another stream's use must be waited for before the block is freed) */
    if (s->checking)
        stream_check_free_block(&s->check, STREAM_COMPUTE, p, (StreamOp){"free", unit});
    /* a header-only block must never serve a request of its charged size */
    if (h->category == MEM_NVME || d->accounting_only || !cache_put(s, h)) {
        if (s->checking) stream_check_forget(&s->check, p);
        free(h);
    }
}

/* As the CUDA device's: queued on the compute stream, which the host then waits for. */
static void sim_copy(Device *d, void *dst, const void *src, size_t bytes) {
    SimDevice *s = sim(d);
    if (s->checking) {
        StreamOp op = {"copy", -1};
        stream_check_access(&s->check, STREAM_COMPUTE, src, bytes, ACCESS_READ, op);
        stream_check_access(&s->check, STREAM_COMPUTE, dst, bytes, ACCESS_WRITE, op);
        stream_check_sync(&s->check, STREAM_COMPUTE);
    }
    if (!d->accounting_only) memcpy(dst, src, bytes);
}

static void sim_run(Device *d, StreamId st, const Work *w) {
    SimDevice *s = sim(d);
    double start = s->clock->stream_time[st];
    double end = start + cost_work(s->profile, w, w->on_host);
    s->clock->stream_time[st] = end;
    /* the kernels launched just before it are in its span, as in a GPU's */
    if (s->launched[st]) start = s->launched_from[st];
    s->launched[st] = 0;
    if (s->trace && s->trace->enabled &&
        !tracebuf_append(s->trace, trace_work_event(w, st, start, end, d->memory.total)))
        s->last_work[st] = (long)s->trace->n - 1;
}

/* The kernels launched on st since its last work end before what comes now (an event another
 * stream may start from, a wait that idles st): the last work's span takes them, so that every
 * launch is inside some work's span and none starts before what it follows. */
static void end_launched(SimDevice *s, StreamId st) {
    if (!s->launched[st]) return;
    s->launched[st] = 0;
    if (!s->trace || !s->trace->enabled || s->last_work[st] < 0) return;
    double now = s->clock->stream_time[st];
    s->trace->ev[s->last_work[st]].end = now;
    if (st == STREAM_COMPUTE && now > s->trace->compute_end) s->trace->compute_end = now;
}

/* The stream runs the kernels now: the next work's event covers them, or the last one's where an
 * event or an idling wait comes first (end_launched). */
static void sim_launched(Device *d, StreamId st, const Work *w) {
    SimDevice *s = sim(d);
    if (!s->launched[st]) s->launched_from[st] = s->clock->stream_time[st];
    s->launched[st] = 1;
    s->clock->stream_time[st] += cost_work(s->profile, w, 0);
}

static void sim_event_record(Device *d, StreamId st, DevEvent *ev) {
    SimDevice *s = sim(d);
    ev->time = s->clock->stream_time[st];
    ev->handle = NULL;
    end_launched(s, st);
    if (s->checking) stream_check_record_event(&s->check, st, ev);
}

static void sim_stream_wait(Device *d, StreamId st, const DevEvent *ev) {
    SimDevice *s = sim(d);
    double *t = &s->clock->stream_time[st];
    if (ev->time > *t) {
        end_launched(s, st);
        *t = ev->time;
    }
    if (s->checking) stream_check_wait_event(&s->check, st, ev);
}

/* The ops whose result the host reads: on a GPU they wait for the compute stream. */
static int returns_to_host(const char *op) {
    static const char *const ops[] = {"sum_squares",   "all_finite",    "mse_loss",
                                      "cross_entropy", "count_correct", "nll_loss"};
    for (size_t i = 0; i < sizeof ops / sizeof *ops; i++)
        if (!strcmp(op, ops[i])) return 1;
    return 0;
}

void device_sim_kernel_access(void *ctx, const char *op, const KernelAccess *acc, int n) {
    SimDevice *s = ctx;
    StreamOp what = {op, -1};
    for (int i = 0; i < n; i++)
        for (size_t b = 0; b < acc[i].count; b++)
            stream_check_access(&s->check, STREAM_COMPUTE,
                                (const char *)acc[i].p + b * acc[i].stride, acc[i].bytes,
                                acc[i].write ? ACCESS_WRITE : ACCESS_READ, what);
    if (returns_to_host(op)) stream_check_sync(&s->check, STREAM_COMPUTE);
}

static double sim_now(Device *d, StreamId st) {
    return sim(d)->clock->stream_time[st];
}

static const DeviceOps sim_device_ops = {DEVICE_OPS_NAMED(sim)};

void device_sim_release(SimDevice *d) {
    for (int i = 0; i < d->ncache; i++)
        while (d->cache[i].head) {
            BlockHeader *h = d->cache[i].head;
            d->cache[i].head = h->next;
            free(h);
        }
    d->ncache = 0;
    d->cached = 0;
    if (d->checking) stream_check_free(&d->check);
    d->checking = 0;
}

void device_sim_check(SimDevice *d, const char *(*unit_name)(void *user, int unit), void *user) {
    stream_check_init(&d->check, d->base.rank);
    d->check.unit_name = unit_name;
    d->check.user = user;
    d->checking = 1;
}

void device_sim_init(SimDevice *d, int rank, SimClock *clock, TraceBuf *trace,
                     const Profile *profile) {
    memset(d, 0, sizeof *d);
    d->base = device_on_host(&sim_device_ops, rank, d);
    d->clock = clock;
    d->trace = trace;
    d->profile = profile;
    for (int st = 0; st < STREAM_COUNT; st++) d->last_work[st] = -1;
}

void device_sim_accounting_only(SimDevice *d) {
    d->base.accounting_only = 1;
    d->base.host_addressable = 0; /* blocks are headers only */
}
