/* trace: the per-rank event buffers the backends append to, their merge into one ordered Trace, the
 * names of event kinds and phases, and an event's bytes applied to a memory row. */
#include "engine/trace.h"

#include <errno.h>
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "engine/device.h"

/* First allocation of an enabled buffer; doubling from here keeps appends amortised O(1). */
enum { TRACEBUF_INITIAL_CAP = 256 };

void tracebuf_init(TraceBuf *b, int rank, int enabled) {
    /* No allocation here: a disabled buffer (the common case in long runs) never owns memory. */
    *b = (TraceBuf){.rank = rank, .enabled = enabled != 0};
}

void tracebuf_free(TraceBuf *b) {
    free(b->ev);
    free(b->held);
    b->ev = b->held = NULL;
    b->n = b->cap = b->nheld = b->held_cap = 0;
}

static int tracebuf_grow(TraceBuf *b) {
    size_t cap = b->cap ? b->cap : TRACEBUF_INITIAL_CAP;
    if (b->cap) {
        if (b->cap > SIZE_MAX / 2 / sizeof *b->ev) return ERR_NOMEM;
        cap = b->cap * 2;
    }
    TraceEvent *ev = realloc(b->ev, cap * sizeof *ev);
    if (!ev) return ERR_NOMEM;
    b->ev = ev;
    b->cap = cap;
    return 0;
}

/* Keeps a free back until tracebuf_release. */
static int hold_free(TraceBuf *b, TraceEvent e) {
    if (b->nheld == b->held_cap) {
        size_t cap = b->held_cap ? 2 * b->held_cap : 16;
        TraceEvent *h = realloc(b->held, cap * sizeof *h);
        if (!h) return ERR_NOMEM;
        b->held = h;
        b->held_cap = cap;
    }
    b->held[b->nheld++] = e;
    return 0;
}

void tracebuf_hold(TraceBuf *b) {
    b->holding = b->enabled;
}

int tracebuf_release(TraceBuf *b) {
    b->holding = 0;
    int rc = 0;
    for (size_t i = 0; i < b->nheld && !rc; i++) {
        TraceEvent e = b->held[i];
        if (e.start < b->compute_end) e.start = e.end = b->compute_end;
        rc = tracebuf_append(b, e);
    }
    b->nheld = 0;
    return rc;
}

int tracebuf_append(TraceBuf *b, TraceEvent e) {
    /* Hot path when tracing is off: one load and one branch. */
    if (__builtin_expect(!b->enabled, 1)) return 0;
    if (b->holding && e.kind == EV_FREE) return hold_free(b, e);
    if (e.stream == STREAM_COMPUTE && e.category < 0 && e.end > b->compute_end)
        b->compute_end = e.end;
    if (b->n == b->cap) {
        int rc = tracebuf_grow(b);
        if (rc) return rc;
    }
    e.rank = b->rank;
    e.seq = b->next_seq++;
    e.phase = b->phase;
    e.step = b->step;
    e.micro = b->micro;
    b->ev[b->n++] = e;
    return 0;
}

const char *event_kind_name(EventKind k) {
    static const char *const names[EV_KIND_COUNT] = {
        "alloc",   "free",      "all_gather", "reduce_scatter", "all_reduce", "broadcast",
        "barrier", "forward",   "backward",   "optimizer",      "copy_h2d",   "copy_d2h",
        "pack",    "recompute", "nvme_read",  "nvme_write"};
    return (k >= 0 && k < EV_KIND_COUNT) ? names[k] : "unknown";
}

TraceEvent trace_memory_event(EventKind kind, double t, size_t bytes, size_t mem_total, int cat,
                              int unit) {
    return (TraceEvent){.start = t,
                        .end = t,
                        .bytes = bytes,
                        .mem_total = mem_total,
                        .kind = kind,
                        .unit = unit,
                        .stream = STREAM_COMPUTE,
                        .category = cat};
}

TraceEvent trace_work_event(const Work *w, StreamId st, double start, double end,
                            size_t mem_total) {
    return (TraceEvent){.start = start,
                        .end = end,
                        .bytes = (unsigned long long)w->bytes,
                        .mem_total = mem_total,
                        .kind = event_kind_of_work(w->kind),
                        .unit = w->unit,
                        .stream = st,
                        .category = -1};
}

EventKind event_kind_of_work(WorkKind k) {
    static const EventKind kinds[] = {EV_FORWARD,   EV_BACKWARD,  EV_OPTIMIZER,
                                      EV_COPY_H2D,  EV_COPY_D2H,  EV_PACK,
                                      EV_RECOMPUTE, EV_NVME_READ, EV_NVME_WRITE};
    return k >= WORK_FORWARD && k <= WORK_NVME_WRITE ? kinds[k] : EV_PACK;
}

const char *phase_name(Phase p) {
    static const char *const names[] = {"none", "forward", "backward", "optimizer"};
    return (p >= PHASE_NONE && p <= PHASE_OPTIMIZER) ? names[p] : "unknown";
}

/* ---- merge ---------------------------------------------------------------------------- */

/* A total order on doubles (NaN after every number) so qsort always sees a consistent
 * comparator, even if a backend ever produced a bad timestamp. */
static int compare_times(double a, double b) {
    if (a < b) return -1;
    if (a > b) return 1;
    return isnan(a) - isnan(b);
}

static int compare_ints(long a, long b) {
    return (a > b) - (a < b);
}

/* (start, seq, rank) is unique per event, so the merged order does not depend on qsort's
 * (unstable) algorithm: the same run always gives the same trace. Within one modelled
 * instant the ranks take turns, event k of every rank before event k + 1 of any: the ranks
 * run the same program, so a step through the trace sees all of them do each thing together
 * rather than one rank's whole start before the next rank's. */
static int compare_events(const void *pa, const void *pb) {
    const TraceEvent *a = pa, *b = pb;
    int c = compare_times(a->start, b->start);
    if (c) return c;
    c = compare_ints(a->seq, b->seq);
    if (c) return c;
    return compare_ints(a->rank, b->rank);
}

static int count_events(const TraceBuf *bufs, int nranks, size_t *total, Err *err) {
    *total = 0;
    for (int r = 0; r < nranks; r++) {
        if (bufs[r].n > SIZE_MAX / sizeof(TraceEvent) - *total)
            return err_set(err, ERR_NOMEM, "trace too large to merge (%d ranks)", nranks);
        *total += bufs[r].n;
    }
    return 0;
}

int trace_merge(Trace *out, const TraceBuf *bufs, int nranks, Err *err) {
    *out = (Trace){.nranks = nranks};
    if (nranks < 0 || (nranks > 0 && !bufs))
        return err_set(err, ERR_USAGE, "trace_merge: bad rank count %d", nranks);
    size_t total;
    int rc = count_events(bufs, nranks, &total, err);
    if (rc) return rc;
    if (total == 0) return 0;
    out->ev = malloc(total * sizeof *out->ev);
    if (!out->ev) return err_set(err, ERR_NOMEM, "out of memory merging %zu trace events", total);
    for (int r = 0; r < nranks; r++) {
        if (bufs[r].n) memcpy(out->ev + out->n, bufs[r].ev, bufs[r].n * sizeof *out->ev);
        out->n += bufs[r].n;
    }
    qsort(out->ev, out->n, sizeof *out->ev, compare_events);
    return 0;
}

const char *trace_clock(const Trace *t) {
    return t->measured ? "measured" : "modelled";
}

void trace_step_times(const Trace *t, int rank, int step, StepTimes *out) {
    *out = (StepTimes){0};
    double first = 0, last = 0;
    for (size_t i = 0; i < t->n; i++) {
        const TraceEvent *e = &t->ev[i];
        if (e->rank != rank || e->step != step) continue;
        if (!out->events++ || e->start < first) first = e->start;
        if (out->events == 1 || e->end > last) last = e->end;
        if ((unsigned)e->kind < EV_KIND_COUNT) out->busy[e->kind] += e->end - e->start;
    }
    out->span = last - first;
}

int trace_last_step(const Trace *t) {
    int last = -1;
    for (size_t i = 0; i < t->n; i++)
        if (t->ev[i].step > last) last = t->ev[i].step;
    return last;
}

int trace_last_trained_step(const Trace *t) {
    int last_optimizer = -1, last_any = -1;
    for (size_t i = 0; i < t->n; i++) {
        const TraceEvent *e = &t->ev[i];
        if (e->phase == PHASE_NONE) continue;
        if (e->step > last_any) last_any = e->step;
        if (e->phase == PHASE_OPTIMIZER && e->step > last_optimizer) last_optimizer = e->step;
    }
    return last_optimizer >= 0 ? last_optimizer : last_any;
}

void trace_free(Trace *t) {
    free(t->ev);
    free(t->params);
    free(t->grads);
    free(t->local_grads);
    *t = (Trace){0};
}

int trace_memory_apply(size_t *row, const TraceEvent *e, size_t index, int code, Err *err) {
    if (e->category < 0 || e->category >= MEM_CATEGORY_COUNT)
        return err_set(err, code, "trace event %zu (GPU %d, %s) has no memory category", index,
                       e->rank, event_kind_name((EventKind)e->kind));
    size_t *held = &row[e->category];
    if (e->kind == EV_ALLOC) {
        *held += (size_t)e->bytes;
    } else if (e->bytes > *held) {
        return err_set(
            err, code, "trace event %zu (GPU %d) frees %llu bytes of %s, which holds only %zu",
            index, e->rank, e->bytes, mem_category_name((MemCategory)e->category), *held);
    } else {
        *held -= (size_t)e->bytes;
    }
    return 0;
}
