/* trace: one event format for the simulator and real GPUs. Every alloc, free, collective,
 * compute span and offload copy is an event of one rank with its unit, bytes, stream and
 * start/end time. Backends append to a per-rank TraceBuf (no locks: one writer per rank);
 * trace_merge orders all ranks into the Trace the visualizer replays and that
 * trace_write_chrome turns into Chrome Trace Event JSON for Perfetto. */
#ifndef FSDP_TRACE_H
#define FSDP_TRACE_H

#include "base/err.h"
#include "engine/device.h"
#include <stddef.h>

typedef enum {
    EV_ALLOC = 0,
    EV_FREE,
    EV_ALL_GATHER,
    EV_REDUCE_SCATTER,
    EV_ALL_REDUCE,
    EV_BROADCAST,
    EV_BARRIER,
    EV_FORWARD,
    EV_BACKWARD,
    EV_OPTIMIZER,
    EV_COPY_H2D,
    EV_COPY_D2H,
    EV_PACK,
    EV_RECOMPUTE,
    EV_NVME_READ,
    EV_NVME_WRITE,
    EV_KIND_COUNT
} EventKind;

typedef enum { PHASE_NONE = 0, PHASE_FORWARD, PHASE_BACKWARD, PHASE_OPTIMIZER } Phase;

typedef struct TraceEvent {
    double start, end; /* seconds from the start of the run (modelled or measured) */
    long seq;          /* per-rank issue order, breaks ties deterministically */
    unsigned long long bytes;
    unsigned long long mem_total; /* alloc/free: this rank's total bytes after the event */
    int rank;
    int kind;     /* EventKind */
    int unit;     /* FSDP unit, -1 if none */
    int stream;   /* StreamId */
    int category; /* MemCategory for alloc/free, -1 otherwise */
    int phase;    /* Phase */
    int step;     /* training step (0-based) */
    int micro;    /* micro-step within the step (grad accumulation) */
    int peers;    /* collectives: ranks in the group (0: not recorded, e.g. read from a file) */
    int flags;    /* EVENT_* below: why the engine did this, where the kind alone cannot say */
} TraceEvent;

/* TraceEvent.flags */
enum {
    /* an all-gather issued ahead by prefetch, while the unit before it in the pass computes,
     * rather than when compute reached its unit */
    EVENT_PREFETCH = 1,
};

/* Growable per-rank buffer. enabled=0 makes appends free (long runs, benchmarks). */
typedef struct TraceBuf {
    TraceEvent *ev;
    size_t n, cap;
    long next_seq;
    int enabled;
    int rank;
    /* context stamped on every appended event */
    int phase, step, micro;
    /* Frees appended while a compute call runs (tracebuf_hold), kept back until it has been
     * recorded (tracebuf_release): the host frees a kernel's inputs once it has run them, but
     * the kernel's span is recorded after, and a free must not come before the work that reads
     * what it frees. */
    int holding;
    TraceEvent *held;
    size_t nheld, held_cap;
    double compute_end; /* the end of the last compute-stream span appended */
} TraceBuf;

void tracebuf_init(TraceBuf *b, int rank, int enabled);
void tracebuf_free(TraceBuf *b);
/* Appends e after stamping rank, seq, phase, step, micro. Returns 0 or ERR_NOMEM. */
int tracebuf_append(TraceBuf *b, TraceEvent e);
/* From here, frees wait; tracebuf_release appends them, none earlier than the end of the last
 * compute span appended meanwhile, in the order they were freed. */
void tracebuf_hold(TraceBuf *b);
int tracebuf_release(TraceBuf *b);

typedef struct Trace {
    TraceEvent *ev;
    size_t n;
    int nranks;
    /* Optional, for models small enough to show their numbers (the toy): the full parameters
     * at the start and after each of `steps` steps, params[s * numel ...] before step s, and
     * each step's gradients as the optimizer saw them, grads[s * numel ...]; model order.
     * NULL when not recorded. */
    float *params, *grads;
    /* Optional beside them: each rank's own gradients of each step before the reduction
     * averaged them (the mean over ranks of a step's is its grads), local_grads[(s * nranks +
     * r) * numel ...] for rank r; NULL when not recorded (traces written before they were). */
    float *local_grads;
    int steps;
    size_t numel;
    int measured; /* 1: times measured on real hardware (cuda, mpi); 0: the simulator's model */
    /* 1: an accounting-only run (viz --accounting-only, the planner): its events, bytes and
     * modelled times are a computed run's, but nothing was computed, so it has no values */
    int accounting_only;
} Trace;

/* "measured" or "modelled": how t's times were had, for what shows them. */
const char *trace_clock(const Trace *t);

const char *event_kind_name(EventKind k); /* "alloc", "all_gather", ... */
const char *phase_name(Phase p);          /* "forward", ... */
/* The trace event that timed work of kind k is recorded as (every backend's run op). */
EventKind event_kind_of_work(WorkKind k);
/* The event of an allocation or a free (kind) of `bytes` of category cat for unit at time t, the
 * device's total after it mem_total: on the compute stream, where the engine allocates (every
 * backend's alloc and free). */
TraceEvent trace_memory_event(EventKind kind, double t, size_t bytes, size_t mem_total, int cat,
                              int unit);
/* The event of work w run on stream st from start to end, the device's total then mem_total
 * (every backend's run op). */
TraceEvent trace_work_event(const Work *w, StreamId st, double start, double end, size_t mem_total);

/* Applies alloc/free event e (the index-th of its trace) to row, its rank's bytes per memory
 * category. An event without a category, or a free of more than the category holds, is one
 * line naming the event, returned as `code` (ERR_INTERNAL for a trace this program recorded,
 * ERR_USAGE for one read from a file). */
int trace_memory_apply(size_t *row, const TraceEvent *e, size_t index, int code, Err *err);

/* Where one rank's step went: its span, from its first event's start to its last event's end,
 * and the seconds its events of each kind took, summed (a stream runs one at a time, so on one
 * stream that is its busy time). For setting a measured step beside a modelled one. */
typedef struct StepTimes {
    double span;
    double busy[EV_KIND_COUNT];
    size_t events; /* 0: the rank has no event of that step */
} StepTimes;

/* Rank `rank`'s figures for step `step` of t. */
void trace_step_times(const Trace *t, int rank, int step, StepTimes *out);
/* The last step any event of t belongs to (-1 for an empty trace). */
int trace_last_step(const Trace *t);
/* The last training step of t: the last that reached its optimizer (an evaluation after the last
 * step runs forward tagged with the next step's number, and is not a training step), else, for
 * a trace cut short, the last with any phased work; -1 for none. */
int trace_last_trained_step(const Trace *t);

/* Merges per-rank buffers into one list ordered by (start, seq, rank): at equal times the
 * ranks take turns, event by event. */
int trace_merge(Trace *out, const TraceBuf *bufs, int nranks, Err *err);
void trace_free(Trace *t);

#endif
