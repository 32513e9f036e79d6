/* frame: what the visualizer shows at one event of a trace, as plain data. A pure function of
 * (trace, plan, event index): it replays the events up to the index and reports, per rank
 * and FSDP unit, whether the unit's parameters are gathered and its gradients unsharded,
 * and per rank the bytes in use by category and the peak so far. Renderers (plain text,
 * ncurses) only draw a Frame; they never read the trace themselves. */
#ifndef FSDP_FRAME_H
#define FSDP_FRAME_H

#include <stddef.h>

#include "engine/device.h"
#include "engine/plan.h"
#include "engine/trace.h"

typedef struct FrameCell {
    size_t kept; /* elements of the unit's parameters this rank keeps at rest (the plan) */
    /* the rank's shard of the unit is allocated now (always, where the trace does not record
     * that allocation: a shard resting in host memory), so it has values to show */
    int resident;
    int gathered;   /* the unit's unsharded parameters are allocated on this rank */
    int grads_full; /* the unit's unsharded gradients are allocated on this rank */
    /* they were freed into the send buffer of the unit's reduction (FSDP2's order), which has
     * not run yet on this rank: the gradients are still there, packed for it */
    int grads_packed;
    /* the unit's backward of the step's last micro-step has run on this rank: its gradients
     * hold what the trace's local_grads say */
    int grads_computed;
    int reduced; /* this step's gradients of the unit have reached this rank (reduced) */
    /* hsdp: the reduce-scatter inside the shard group is done, the all-reduce across the
     * replicas, which makes the shard the final average, is not yet */
    int group_reduced;
    int stepped; /* this rank has stepped Adam on the unit in this step */
} FrameCell;

/* Columns of the timeline, the current step's time left to right: FRAME_TIMELINE_COLS (the text
 * frames', 80 columns with their 18 of labels) unless a renderer asks for as many as its width
 * holds (Frame.timeline_cols, frame_timeline), at most FRAME_TIMELINE_MAX. */
#define FRAME_TIMELINE_COLS 62
#define FRAME_TIMELINE_MAX 512

typedef struct Frame {
    size_t index, count;     /* the current event and how many the trace has */
    const TraceEvent *event; /* the current event (NULL for an empty trace) */
    int nranks, nunits;
    FrameCell *cells; /* [nranks * nunits], rank-major */
    size_t *mem;      /* [nranks * MEM_CATEGORY_COUNT] bytes in use after the event */
    size_t *peak;     /* [nranks] the largest GPU total so far (frame_gpu_bytes) */
    /* The current event's phase as a person reads it: "setup" (before its step's forward),
     * "forward", "backward", "optimizer", "between steps", "teardown" (after the last step) */
    const char *phase;
    /* "event 55 of 339 | step 1 | forward | GPU 0 | all_gather La": what every renderer puts
     * at the top */
    char header[384];
    /* what happens, and why (a prefetch, a reshard, an average); a presenter's moment tells
     * its collective or compute and what was folded in around it (moments.h) */
    char narration[2048];
    char flow[512]; /* a collective as the whole group sees it ("" for other events) */
    /* The current step on each rank's streams: timeline[(rank * STREAM_COUNT + stream)] is a
     * row of timeline_cols cells, '#' where compute runs, '=' where a collective does, '~' a
     * host copy, '.' idle; cursor is the column of the current event's start. phases is the
     * row of the step's phases over the same columns: 'f' forward, 'b' backward, 'o' optimizer
     * (the phase of the compute that last started by then, on any GPU; before the first, the
     * first work's), ' ' in a step without phases. A column is (step_end - step_start) /
     * timeline_cols seconds. */
    char (*timeline)[FRAME_TIMELINE_MAX + 1];
    char phases[FRAME_TIMELINE_MAX + 1];
    int timeline_cols;
    int cursor;
    double step_start, step_end; /* the step's modelled span, seconds */
    /* A small model's numbers when the trace has them (NULL otherwise), all parameters in
     * model order: before and after the current event's step, and its gradients. */
    const float *before, *after, *grads;
    /* And each rank's own gradients of that step before the reduction averaged them, rank r's
     * at local_grads[r * numel ...] (frame_local_grads); NULL where the trace has none. */
    const float *local_grads;
    size_t numel;
    /* The trace is an accounting-only run's (viz --accounting-only): every event, byte and
     * modelled time of a computed run, but no values; the header and the narration say so
     * where a computed run would show them. */
    int accounting_only;
    /* Whether any event of the trace gathers a unit or unshards its gradients (so renderers
     * size columns for what the run will show), and the trace that was scanned for it. */
    int ever_gathered, ever_grads_full, ever_packed;
    int last_micro; /* the trace's last micro-step in backward (grad_accum - 1) */
    /* Bytes an element of the gathered parameters, so of what the units compute in (4: fp32;
     * 2: --param-dtype bf16 or fp16); 0 before the trace gathers any. */
    int compute_bytes;
    /* hsdp's sharded gradients: each reduce-scatter is followed by an all-reduce across the
     * replicas, and only that one gives a shard its final value (frame_at sets it) */
    int reduce_in_two;
    const Trace *scanned;
    const TraceEvent *scanned_ev;
    size_t scanned_n;
    /* [nranks * nunits], from the scan: the trace records the allocation of the rank's shard
     * of the unit (so the cell shows values only once it is allocated), and scratch for it */
    char *shard_traced;
    int *scan_reduced;
    /* [scanned_n], from the scan: the events' indices ordered by step, then by index, so that a
     * step's events are found without walking the whole trace; and per event whether it is the
     * free that leaves its unit's unsharded gradients all freed on its rank (what a replay
     * would count), so that a step's progress is replayed without its memory. */
    size_t *by_step;
    unsigned char *grads_emptied;
    size_t last_phased; /* one past the last event of a phase other than none (0: none) */
    /* The replay carried from one call to the next, so that frames made walking forward (the
     * HTML page, the viewer's next key) cost the events between them, not the trace before them:
     * each rank r's events before done[r] are applied to state (the cells with counts, before
     * they are read as yes or no), whose progress is that of step progress_step. replayed:
     * the plan they were replayed for (NULL: nothing to carry on from). want: scratch. */
    FrameCell *state;
    size_t *done, *want, checked;
    const Plan *replayed;
    int progress_step;
    /* The step whose timeline is drawn, at drawn_cols columns, from trace drawn (NULL: none),
     * so that the frames of one step paint it once. */
    const Trace *drawn;
    int drawn_step, drawn_cols;
    /* What the replays have cost, all calls together (what a page of every event grows with):
     * events walked, steps whose progress was replayed anew, timelines drawn. */
    size_t walked, progress_replays, timelines_drawn;
} Frame;

/* Sizes a frame for a plan's ranks and units. */
int frame_init(Frame *f, const Plan *p, Err *err);
void frame_free(Frame *f);

/* Fills f with the state after event `index` of t (index < t->n, or 0 for an empty trace).
 * Events name ranks and units the plan must have; anything else is an error naming it. */
int frame_at(Frame *f, const Trace *t, const Plan *p, size_t index, Err *err);

/* The same with each rank r's state after its events before index ends[r] (ends has a value
 * per rank of the plan), whatever the others have run: another run beside this one with each
 * GPU at its own point of the same computation (compare.c), as the viewer's key d and its DDP
 * marks show it. The header, texts and timeline are those of event `index`. */
int frame_at_points(Frame *f, const Trace *t, const Plan *p, size_t index, const size_t *ends,
                    Err *err);

/* Only the narration and the flow of event `index` (header, state and timeline as they were),
 * in a frame frame_at has filled once, at any event of t: what they name of the state (the
 * elements each rank keeps at rest) is the plan's, and what changes from event to event
 * (which values a rank holds) does not change their length, so a viewer sizes its text rows by
 * them over a whole trace without replaying it for every event. */
void frame_narrate(Frame *f, const Trace *t, const Plan *p, size_t index);

/* Whether event `index` (a free in backward, say) comes after its rank's reduction of the
 * event's unit in the same backward: the seed's order, where a unit is freed once its
 * reduce-scatter is done (FSDP2's frees it before). */
int frame_after_reduction(const Trace *t, size_t index);

/* Puts the timeline's cursor at time `t` of the frame's step (a presenter's moment points at its
 * collective or compute, not at the last free folded into it). */
void frame_cursor_at(Frame *f, double t);

/* Redraws the timeline (rows, phases, cursor) of the current event's step at `cols` columns
 * (clamped to 8..FRAME_TIMELINE_MAX), as a renderer's width holds; t is the trace the frame was
 * filled from. Later frame_at calls draw at that width too. */
void frame_timeline(Frame *f, const Trace *t, int cols);

static inline FrameCell *frame_cell(const Frame *f, int rank, int unit) {
    return &f->cells[(size_t)rank * (size_t)f->nunits + (size_t)unit];
}

/* The parameter values rank r holds of unit u now: the step's result once it has stepped Adam
 * on the unit, else the values the step started from; NULL without values. */
static inline const float *frame_values(const Frame *f, int rank, int unit) {
    return frame_cell(f, rank, unit)->stepped ? f->after : f->before;
}

/* Rank r's own gradients of the current step before their average (all parameters in model
 * order), NULL without them. */
static inline const float *frame_local_grads(const Frame *f, int rank) {
    return f->local_grads ? f->local_grads + (size_t)rank * f->numel : NULL;
}

static inline size_t frame_mem(const Frame *f, int rank, MemCategory c) {
    return f->mem[(size_t)rank * MEM_CATEGORY_COUNT + (size_t)c];
}

/* What a GPU holds of category c: all of it but what offload keeps off the GPU (host memory and
 * NVMe files, mem_category_off_gpu: 0 here). A CUDA run's fp32 compute copies, a row apart in the
 * memory table, are on the GPU too. */
static inline size_t frame_gpu_mem(const Frame *f, int rank, MemCategory c) {
    return mem_category_off_gpu(c) ? 0 : frame_mem(f, rank, c);
}

/* What a GPU holds in all: its frame_gpu_mem of every category. */
static inline size_t frame_gpu_bytes(const Frame *f, int rank) {
    size_t sum = 0;
    for (int c = 0; c < MEM_CATEGORY_COUNT; c++) sum += frame_gpu_mem(f, rank, (MemCategory)c);
    return sum;
}

#endif
