/* frame: what the visualizer shows at one event, as plain data: the trace replayed up to it into
 * each unit's state on each rank and each rank's bytes by category and peak. */
#include "sim/viz/frame.h"

#include "sim/viz/text.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int frame_init(Frame *f, const Plan *p, Err *err) {
    memset(f, 0, sizeof *f);
    f->nranks = p->world;
    f->nunits = p->nunits;
    f->cells = calloc((size_t)p->world * (size_t)p->nunits + 1, sizeof *f->cells);
    f->mem = calloc((size_t)p->world * MEM_CATEGORY_COUNT, sizeof *f->mem);
    f->peak = calloc((size_t)p->world, sizeof *f->peak);
    f->timeline = calloc((size_t)p->world * STREAM_COUNT, sizeof *f->timeline);
    f->timeline_cols = FRAME_TIMELINE_COLS;
    f->shard_traced = calloc((size_t)p->world * (size_t)p->nunits + 1, 1);
    f->scan_reduced = calloc((size_t)p->world * (size_t)p->nunits + 1, sizeof *f->scan_reduced);
    f->state = calloc((size_t)p->world * (size_t)p->nunits + 1, sizeof *f->state);
    f->done = calloc((size_t)p->world + 1, sizeof *f->done);
    f->want = calloc((size_t)p->world + 1, sizeof *f->want);
    if (!f->cells || !f->mem || !f->peak || !f->timeline || !f->shard_traced || !f->scan_reduced ||
        !f->state || !f->done || !f->want) {
        frame_free(f);
        return err_set(err, ERR_NOMEM, "out of memory for a frame of %d ranks", p->world);
    }
    return 0;
}

void frame_free(Frame *f) {
    free(f->cells);
    free(f->mem);
    free(f->peak);
    free(f->timeline);
    free(f->shard_traced);
    free(f->scan_reduced);
    free(f->by_step);
    free(f->grads_emptied);
    free(f->state);
    free(f->done);
    free(f->want);
    memset(f, 0, sizeof *f);
}

static FrameCell *state_cell(const Frame *f, int rank, int unit) {
    return &f->state[(size_t)rank * (size_t)f->nunits + (size_t)unit];
}

/* The replay from the trace's first event: nothing applied, nothing allocated. */
static void restart(Frame *f, const Plan *p) {
    memset(f->mem, 0, (size_t)f->nranks * MEM_CATEGORY_COUNT * sizeof *f->mem);
    memset(f->peak, 0, (size_t)f->nranks * sizeof *f->peak);
    memset(f->done, 0, (size_t)f->nranks * sizeof *f->done);
    for (int r = 0; r < f->nranks; r++)
        for (int u = 0; u < f->nunits; u++)
            *state_cell(f, r, u) = (FrameCell){.kept = plan_param_numel(p, u, r)};
    f->checked = 0;
    f->replayed = p;
    f->progress_step = 0;
}

/* An alloc or free moves the rank's bytes of its category; allocations of unsharded
 * parameters and gradients say whether a unit is gathered (with mixed precision a unit has
 * two such blocks, the low-precision copy and its fp32 view, so these are counts). */
static int apply_memory(Frame *f, const TraceEvent *e, size_t index, Err *err) {
    int rc =
        trace_memory_apply(&f->mem[(size_t)e->rank * MEM_CATEGORY_COUNT], e, index, ERR_USAGE, err);
    if (rc) return rc;
    int delta = e->kind == EV_ALLOC ? 1 : -1;
    if (e->unit >= 0 && e->unit < f->nunits) {
        FrameCell *cell = state_cell(f, e->rank, e->unit);
        if (e->category == MEM_PARAM_SHARD) cell->resident += delta;
        if (e->category == MEM_PARAM_UNSHARDED) cell->gathered += delta;
        if (e->category == MEM_GRAD_UNSHARDED) cell->grads_full += delta;
    }
    size_t total = frame_gpu_bytes(f, e->rank);
    if (total > f->peak[e->rank]) f->peak[e->rank] = total;
    return 0;
}

/* Bytes an element of a unit's unsharded parameters, from the allocation of them (0: not one). */
static int element_bytes(const Plan *p, const TraceEvent *e) {
    if (e->kind != EV_ALLOC || e->category != MEM_PARAM_UNSHARDED || e->unit < 0 ||
        e->unit >= p->nunits || p->units[e->unit].numel == 0)
        return 0;
    return (int)((size_t)e->bytes / p->units[e->unit].numel);
}

static int is_reduction(const TraceEvent *e) {
    return e->kind == EV_REDUCE_SCATTER || e->kind == EV_ALL_REDUCE;
}

/* A free of a unit's unsharded gradients in backward: into its reduction's send buffer when
 * the reduction comes after (FSDP2's order), or once it is done (the seed's). */
static int frees_unsharded_grads(const TraceEvent *e) {
    return e->kind == EV_FREE && e->category == MEM_GRAD_UNSHARDED && e->phase == PHASE_BACKWARD;
}

/* An event's place in the trace by step: the order of Frame.by_step. */
typedef struct StepKey {
    int step;
    size_t index;
} StepKey;

static int by_step_then_index(const void *a, const void *b) {
    const StepKey *x = a, *y = b;
    if (x->step != y->step) return x->step < y->step ? -1 : 1;
    return x->index < y->index ? -1 : x->index > y->index;
}

/* Frame.by_step and Frame.grads_emptied for t (the scan has sized nothing else). */
static int index_trace(Frame *f, const Trace *t, Err *err) {
    size_t n = t->n ? t->n : 1, cells = (size_t)f->nranks * (size_t)f->nunits;
    StepKey *keys = malloc(n * sizeof *keys);
    int *grads = calloc(cells + 1, sizeof *grads); /* each cell's unsharded gradient blocks */
    free(f->by_step);
    free(f->grads_emptied);
    f->by_step = malloc(n * sizeof *f->by_step);
    f->grads_emptied = calloc(n, 1);
    if (!keys || !grads || !f->by_step || !f->grads_emptied) {
        free(keys);
        free(grads);
        return err_set(err, ERR_NOMEM, "out of memory to index a trace of %zu events", t->n);
    }
    for (size_t i = 0; i < t->n; i++) {
        const TraceEvent *e = &t->ev[i];
        keys[i] = (StepKey){e->step, i};
        int in_plan = e->rank >= 0 && e->rank < f->nranks && e->unit >= 0 && e->unit < f->nunits;
        if (!in_plan || e->category != MEM_GRAD_UNSHARDED) continue;
        int *blocks = &grads[(size_t)e->rank * (size_t)f->nunits + (size_t)e->unit];
        if (e->kind == EV_ALLOC) *blocks += 1;
        if (e->kind == EV_FREE) *blocks -= 1;
        f->grads_emptied[i] = frees_unsharded_grads(e) && *blocks <= 0;
    }
    qsort(keys, t->n, sizeof *keys, by_step_then_index);
    for (size_t i = 0; i < t->n; i++) f->by_step[i] = keys[i].index;
    free(keys);
    free(grads);
    return 0;
}

/* Scans the whole trace once for what it ever holds unsharded, and in how many bytes; which
 * ranks' shards it records the allocation of; whether it ever frees gradients packed for a
 * reduction still to come (scan_reduced: the step, from 1, of each cell's last reduction); and
 * indexes it (index_trace). A new trace starts the replay and the timeline over. */
static int scan_trace(Frame *f, const Trace *t, const Plan *p, Err *err) {
    if (f->scanned == t && f->scanned_ev == t->ev && f->scanned_n == t->n) return 0;
    f->scanned = NULL;
    f->replayed = NULL;
    f->drawn = NULL;
    f->ever_gathered = f->ever_grads_full = f->ever_packed = f->compute_bytes = 0;
    f->last_micro = 0;
    f->last_phased = 0;
    size_t cells = (size_t)f->nranks * (size_t)f->nunits;
    memset(f->shard_traced, 0, cells);
    memset(f->scan_reduced, 0, cells * sizeof *f->scan_reduced);
    for (size_t i = 0; i < t->n; i++) {
        const TraceEvent *e = &t->ev[i];
        /* frame_at refuses a file's event outside the plan; here it only is not counted */
        size_t cell = (size_t)e->rank * (size_t)f->nunits + (size_t)e->unit;
        int in_plan = e->rank >= 0 && e->rank < f->nranks && e->unit >= 0 && e->unit < f->nunits;
        if (in_plan && is_reduction(e)) f->scan_reduced[cell] = e->step + 1;
        if (e->phase == PHASE_BACKWARD && e->micro > f->last_micro) f->last_micro = e->micro;
        if (e->phase != PHASE_NONE) f->last_phased = i + 1;
        if (in_plan && frees_unsharded_grads(e) && f->scan_reduced[cell] != e->step + 1)
            f->ever_packed = 1;
        if (e->kind != EV_ALLOC) continue;
        if (in_plan && e->category == MEM_PARAM_SHARD) f->shard_traced[cell] = 1;
        f->ever_gathered |= e->category == MEM_PARAM_UNSHARDED;
        f->ever_grads_full |= e->category == MEM_GRAD_UNSHARDED;
        if (!f->compute_bytes) f->compute_bytes = element_bytes(p, e);
    }
    int rc = index_trace(f, t, err);
    if (rc) return rc;
    f->scanned = t;
    f->scanned_ev = t->ev;
    f->scanned_n = t->n;
    return 0;
}

/* The first position of by_step whose event's step is at least `step` (by_step is sorted). */
static size_t first_of_step(const Frame *f, const Trace *t, long step) {
    size_t lo = 0, hi = t->n;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        if (t->ev[f->by_step[mid]].step < step)
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo;
}

/* The indices of the events of `step`, *count of them in trace order (none when the frame has
 * not scanned t). */
static const size_t *step_events(const Frame *f, const Trace *t, int step, size_t *count) {
    *count = 0;
    if (f->scanned != t || !f->by_step) return NULL;
    size_t lo = first_of_step(f, t, step);
    *count = first_of_step(f, t, (long)step + 1) - lo;
    return f->by_step + lo;
}

/* How far each rank is through the current step: gradients computed (by the backward of the
 * last micro-step, which they then hold), packed for their reduction (freed before it, once
 * apply_memory has counted the free), reduced, Adam stepped. */
static void apply_progress(Frame *f, const TraceEvent *e, size_t index) {
    if (e->unit < 0) return;
    FrameCell *cell = state_cell(f, e->rank, e->unit);
    if (f->grads_emptied[index] && !cell->reduced) cell->grads_packed = 1;
    if (e->kind == EV_ALLOC && e->category == MEM_GRAD_UNSHARDED)
        cell->grads_packed = cell->grads_computed = 0;
    if (e->kind == EV_BACKWARD && e->micro == f->last_micro) cell->grads_computed = 1;
    if (is_reduction(e)) cell->grads_packed = 0;
    if (e->kind == EV_REDUCE_SCATTER && f->reduce_in_two)
        cell->group_reduced = 1;
    else if (is_reduction(e))
        cell->reduced = 1;
    if (e->kind == EV_OPTIMIZER) cell->stepped = 1;
}

/* The trace's values around the current event's step, when it has them for that step. */
static void point_values(Frame *f, const Trace *t) {
    f->before = f->after = f->grads = f->local_grads = NULL;
    f->numel = t->numel;
    if (!f->event || !t->params || !t->grads) return;
    int s = f->event->step;
    if (s < 0 || s >= t->steps) return;
    f->before = t->params + (size_t)s * t->numel;
    f->after = t->params + (size_t)(s + 1) * t->numel;
    f->grads = t->grads + (size_t)s * t->numel;
    if (t->local_grads && t->nranks == f->nranks)
        f->local_grads = t->local_grads + (size_t)s * (size_t)t->nranks * t->numel;
}

/* ---------------------------------------------------------------- reading the trace */

static int is_compute(const TraceEvent *e) {
    return e->kind == EV_FORWARD || e->kind == EV_BACKWARD || e->kind == EV_RECOMPUTE;
}

/* Whether the event at `index` is of a phase other than none, or one of its step is before it
 * (then a phase-less event is after the step's work), or one of any step after it (then it is
 * not the run's teardown). */
static const char *phase_label(const Frame *f, const Trace *t, size_t index) {
    const TraceEvent *e = &t->ev[index];
    if (e->phase != PHASE_NONE) return phase_name((Phase)e->phase);
    size_t n;
    const size_t *step = step_events(f, t, e->step, &n);
    int worked = 0;
    for (size_t k = 0; k < n && step[k] < index && !worked; k++)
        worked = t->ev[step[k]].phase != PHASE_NONE;
    if (!worked) return "setup";
    return f->last_phased > index + 1 ? "between steps" : "teardown";
}

/* A compute span of another unit on the same rank that runs while e does: what a prefetched
 * all-gather overlaps. NULL when none does. */
static const TraceEvent *compute_beside(const Frame *f, const Trace *t, const TraceEvent *e) {
    size_t n;
    const size_t *step = step_events(f, t, e->step, &n);
    for (size_t k = 0; k < n; k++) {
        const TraceEvent *c = &t->ev[step[k]];
        if (c->rank == e->rank && is_compute(c) && c->unit != e->unit && c->unit >= 0 &&
            c->start < e->end && c->end > e->start)
            return c;
    }
    return NULL;
}

/* For a forward of unit u at `index`: whether it is u's last forward compute on this rank in
 * this pass (the root unit computes at both ends of the model). */
static int last_forward_of_unit(const Trace *t, size_t index) {
    const TraceEvent *e = &t->ev[index];
    for (size_t i = index + 1; i < t->n; i++) {
        const TraceEvent *c = &t->ev[i];
        if (c->rank != e->rank) continue;
        if (c->step != e->step || c->micro != e->micro || c->phase != PHASE_FORWARD) return 1;
        if (c->kind == EV_FORWARD && c->unit == e->unit) return 0;
    }
    return 1;
}

/* Whether rank e->rank frees unit u's unsharded parameters after `index` and before its
 * forward pass ends: reshard_after_forward at work. */
static int freed_in_forward(const Trace *t, size_t index) {
    const TraceEvent *e = &t->ev[index];
    for (size_t i = index + 1; i < t->n; i++) {
        const TraceEvent *c = &t->ev[i];
        if (c->rank != e->rank) continue;
        if (c->step != e->step || c->micro != e->micro || c->phase != PHASE_FORWARD) return 0;
        if (c->kind == EV_FREE && c->unit == e->unit && c->category == MEM_PARAM_UNSHARDED)
            return 1;
    }
    return 0;
}

static int frees_unsharded_params(const TraceEvent *e) {
    return e->kind == EV_FREE && e->category == MEM_PARAM_UNSHARDED;
}

/* Rank e's next (dir 1) or previous (dir -1) event of e's unit that `is` accepts, in the same
 * backward pass (step and micro-step), looking no further than a reduction of another unit on
 * that rank: FSDP2 keeps one in flight, so a unit's frees and its own reduction lie between the
 * reductions of the units beside it. NULL when there is none. */
static const TraceEvent *near_in_backward(const Trace *t, size_t index, int dir,
                                          int (*is)(const TraceEvent *)) {
    const TraceEvent *e = &t->ev[index];
    for (size_t i = index; dir > 0 ? i + 1 < t->n : i > 0;) {
        i = dir > 0 ? i + 1 : i - 1;
        const TraceEvent *c = &t->ev[i];
        if (c->rank != e->rank) continue;
        if (c->step != e->step || c->micro != e->micro || c->phase != PHASE_BACKWARD) return NULL;
        if (c->unit == e->unit && is(c)) return c;
        if (c->unit != e->unit && is_reduction(c)) return NULL;
    }
    return NULL;
}

int frame_after_reduction(const Trace *t, size_t index) {
    return index < t->n && near_in_backward(t, index, -1, is_reduction) != NULL;
}

/* "reduce-scatter" or "all-reduce": what a reduction event is called in a sentence. */
static const char *reduction_name(const TraceEvent *e) {
    return e->kind == EV_ALL_REDUCE ? "all-reduce" : "reduce-scatter";
}

/* ---------------------------------------------------------------- narration */

/* Sets the narration; a sentence longer than the buffer is cut, which is fine for people. */
__attribute__((format(printf, 2, 3))) static void say(Frame *f, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(f->narration, sizeof f->narration, fmt, ap);
    va_end(ap);
}

/* Appends to the narration, cut at the buffer's end. */
__attribute__((format(printf, 2, 3))) static void tell(Frame *f, const char *fmt, ...) {
    size_t at = strlen(f->narration);
    if (at + 1 >= sizeof f->narration) return;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(f->narration + at, sizeof f->narration - at, fmt, ap);
    va_end(ap);
}

/* "a₀ from GPU 0, a₁ from GPU 1 and a₂ from GPU 2" (with values when the trace has them:
 * "a₀=+0.887 from GPU 0"): each member of the S-rank group starting at `first` with its shard
 * of unit u, leaving out member `skip` (-1: nobody) and members whose shard is empty (they
 * send nothing). */
static void shards_from(const Frame *f, const Plan *p, int u, int first, int S, int skip, char *buf,
                        size_t n) {
    int senders[64], count = 0;
    char shard[64][160];
    for (int q = 0; q < S && count < 64; q++) {
        if (q == skip) continue;
        text_unit_values(p, u, S, q, "", frame_values(f, first + q, u), shard[count],
                         sizeof shard[count]);
        if (shard[count][0]) senders[count++] = first + q;
    }
    size_t at = 0;
    buf[0] = 0;
    for (int i = 0; i < count && at < n; i++) {
        const char *sep = i == 0 ? "" : i == count - 1 ? " and " : ", ";
        at += (size_t)snprintf(buf + at, n - at, "%s%s from GPU %d", sep, shard[i], senders[i]);
    }
}

/* Why this all-gather happens now: "Prefetch: ... " when prefetch issued it ahead (and what
 * computes meanwhile); in backward, that forward resharded the unit. Appends to f->narration. */
static void gather_reason(Frame *f, const Trace *t, const TraceEvent *e, const Plan *p,
                          const char *name) {
    const char *pass = e->phase == PHASE_BACKWARD ? "backward" : "forward";
    if (e->flags & EVENT_PREFETCH) {
        const TraceEvent *c = compute_beside(f, t, e);
        tell(f, "Prefetch: %s's all-gather is issued ahead, before %s's %s needs it", name, name,
             pass);
        if (c)
            tell(f, ", so it runs while %s's %s computes", p->units[c->unit].name,
                 event_kind_name((EventKind)c->kind));
        tell(f, ". ");
    }
    if (e->phase == PHASE_BACKWARD)
        tell(f, "%s was resharded after forward, so backward gathers it again. ", name);
}

static void narrate_gather(Frame *f, const Trace *t, const Plan *p, const TraceEvent *e,
                           const char *name) {
    char all[160], mine[200], from[400];
    int r = e->rank;
    gather_reason(f, t, e, p, name);
    if (!text_unit_symbols(p, e->unit, 1, 0, "", all, sizeof all)) {
        char kept[32];
        with_commas(frame_cell(f, r, e->unit)->kept, kept, sizeof kept);
        tell(f,
             "GPU %d gathers %s: it keeps %s of its parameters and receives the rest from "
             "the other %d GPU%s of its group",
             r, name, kept, p->shard_size - 1, p->shard_size == 2 ? "" : "s");
    } else {
        text_unit_values(p, e->unit, p->shard_size, r % p->shard_size, "",
                         frame_values(f, r, e->unit), mine, sizeof mine);
        shards_from(f, p, e->unit, r - r % p->shard_size, p->shard_size, r % p->shard_size, from,
                    sizeof from);
        if (!from[0])
            tell(f, "GPU %d needs %s for %s and has them all", r, all, name);
        else if (!mine[0])
            tell(f, "GPU %d needs %s for %s, has none of them, gathers %s", r, all, name, from);
        else
            tell(f, "GPU %d needs %s for %s, has %s, gathers %s", r, all, name, mine, from);
    }
    tell(f, " (DDP keeps all of %s on every GPU and gathers nothing)", name);
}

/* hsdp: shards within a group of S GPUs, the group replicated R times (plan.h). */
static int is_hybrid(const Plan *p) {
    return p->shard_size > 1 && p->replicas > 1;
}

/* hsdp's reduce-scatter averages over the shard group only: the replicas' all-reduce that follows
 * makes it the global batch's, and the values the frame knows are that final average, so this
 * one names the shard without them. */
static void narrate_group_scatter(Frame *f, const Plan *p, const TraceEvent *e, const char *name) {
    int r = e->rank, S = p->shard_size, first = r - r % S;
    char mine[200];
    if (!text_unit_symbols(p, e->unit, S, r % S, "\u2202", mine, sizeof mine) || !mine[0])
        snprintf(mine, sizeof mine, "its shard");
    tell(f,
         "GPU %d's gradients of %s are summed over its shard group, GPUs %d-%d, and divided by "
         "%d: the average over this replica's part of the batch; GPU %d keeps %s, which the "
         "all-reduce across the %d replicas averages next",
         r, name, first, first + S - 1, S, r, mine, p->replicas);
}

/* Where parameter `param` starts in the model-order vector of all parameters. */
static size_t model_offset(const ModelDesc *m, int param) {
    size_t at = 0;
    for (int i = 0; i < param; i++) at += m->params[i].numel;
    return at;
}

/* The GPUs of a group of S (from `first`) whose own gradients the frame shows in sums: the
 * toy's scale, where a sum of each GPU's value still reads as one. */
enum { SUM_MAX_GPUS = 4 };

/* For each element of unit u that member q of the S-rank group from `first` keeps: "∂c₀=(+0.656
 * +0.381 +2.458)/3=+1.165", each GPU's own gradient (in rank order, as the reduction adds them)
 * and their average, joined by `sep` with the element's " to GPU n" after it when `to`; "" when
 * the frame has no such values or the group is too large to show them. */
static void sums_text(const Frame *f, const Plan *p, int u, int first, int S, int q, int to,
                      const char *sep, char *buf, size_t n) {
    size_t at = 0;
    buf[0] = 0;
    if (!f->local_grads || !f->grads || S > SUM_MAX_GPUS || !text_unit_is_symbolic(p, u)) return;
    const Unit *unit = &p->units[u];
    for (int i = 0; i < unit->nparams && at < n; i++) {
        const ParamSpec *ps = &p->model->params[unit->params[i].param];
        size_t begin, rows, base = model_offset(p->model, unit->params[i].param);
        shard_rows((size_t)ps->shape[0], S, q, &begin, &rows);
        for (size_t el = begin * ps->row_elems; el < (begin + rows) * ps->row_elems && at < n;
             el++) {
            char sym[32];
            text_subscript(sym, sizeof sym, ps->symbol, el);
            at += (size_t)snprintf(buf + at, n - at, "%s\u2202%s=(", at ? sep : "", sym);
            for (int g = 0; g < S && at < n; g++)
                at += (size_t)snprintf(buf + at, n - at, "%s%+.3f", g ? " " : "",
                                       (double)frame_local_grads(f, first + g)[base + el]);
            if (at < n)
                at += (size_t)snprintf(buf + at, n - at, ")/%d=%+.3f", S,
                                       (double)f->grads[base + el]);
            if (to && at < n) at += (size_t)snprintf(buf + at, n - at, " to GPU %d", first + q);
        }
    }
}

/* Why a unit's reduction comes where it does (appended to the narration): in FSDP2's order its
 * unsharded parameters are freed already, in the seed's (--seed-order) they are freed after
 * it; and what computes while it runs. */
static void reduction_order(Frame *f, const Trace *t, size_t index, const Plan *p,
                            const char *name) {
    const TraceEvent *e = &t->ev[index];
    if (near_in_backward(t, index, -1, frees_unsharded_params))
        tell(f,
             "%s's parameters are freed already (FSDP2 reshards first: the %s needs only "
             "gradients)",
             name, reduction_name(e));
    else if (near_in_backward(t, index, 1, frees_unsharded_params))
        tell(f,
             "In the seed's order the %s comes before %s's parameters are freed (FSDP2 frees "
             "them first)",
             reduction_name(e), name);
    else
        return;
    const TraceEvent *c = compute_beside(f, t, e);
    if (c)
        tell(f, "; it runs while %s's %s computes", p->units[c->unit].name,
             event_kind_name((EventKind)c->kind));
    tell(f, ". ");
}

/* A reduce-scatter averages: summed over the S GPUs and divided by S, so that the step equals
 * one GPU's on the whole global batch. */
static void narrate_scatter(Frame *f, const Trace *t, size_t index, const Plan *p,
                            const char *name) {
    const TraceEvent *e = &t->ev[index];
    char all[200], mine[160], sums[400];
    int r = e->rank, S = p->shard_size;
    if (is_hybrid(p)) {
        narrate_group_scatter(f, p, e, name);
        return;
    }
    reduction_order(f, t, index, p, name);
    sums_text(f, p, e->unit, r - r % S, S, r % S, 0, " and ", sums, sizeof sums);
    if (sums[0]) { /* each GPU's own values, then their sum divided */
        tell(f,
             "Each GPU's gradients of its own samples, summed and divided by %d, average to one "
             "GPU's on the global batch: GPU %d keeps %s (DDP all-reduces instead: every GPU "
             "keeps all of them)",
             S, r, sums);
        return;
    }
    if (!text_unit_symbols(p, e->unit, 1, 0, "\u2202", all, sizeof all)) {
        char kept[32];
        with_commas(frame_cell(f, r, e->unit)->kept, kept, sizeof kept);
        tell(f,
             "GPU %d's gradients of %s are summed over the %d GPUs of its group and divided by "
             "%d: averaged, so the step equals one GPU's on the global batch; it keeps the "
             "average of its own %s",
             r, name, S, S, kept);
    } else {
        text_unit_values(p, e->unit, S, r % S, "\u2202", f->grads, mine, sizeof mine);
        tell(f,
             "%s of %s are summed over the %d GPUs and divided by %d: averaged, so the step "
             "equals one GPU's on the global batch; GPU %d keeps %s",
             all, name, S, S, r, mine[0] ? mine : "nothing (its shard is empty)");
    }
    tell(f, " (DDP all-reduces instead: every GPU keeps all of them)");
}

/* A unit's last forward compute: whether its gathered parameters now go (zero3's
 * reshard_after_forward, said where the free happens) or stay until backward, and why. */
static void forward_epilogue(Frame *f, const Trace *t, size_t index, const Plan *p,
                             const char *name) {
    const TraceEvent *e = &t->ev[index];
    if (!p->params_sharded || e->unit < 0 || !last_forward_of_unit(t, index) ||
        freed_in_forward(t, index))
        return;
    if (p->units[e->unit].is_root)
        tell(f,
             "; %s is the root unit and stays gathered: backward starts with it, so freeing it "
             "now would only mean gathering it again at once",
             name);
    else
        tell(f,
             "; %s stays gathered after forward (reshard_after_forward=false, as zero2 does): "
             "backward uses it without a second all-gather, at the cost of holding it until then",
             name);
}

static const char *category_phrase(int c) {
    return c >= 0 && c < MEM_CATEGORY_COUNT ? mem_category_label((MemCategory)c) : "memory";
}

/* A free of unit e's unsharded parameters in backward: in FSDP2's order before the unit's
 * reduction, in the seed's after it, and why. */
static void narrate_backward_reshard(Frame *f, const Trace *t, size_t index, const char *name,
                                     const char *bytes) {
    const TraceEvent *e = &t->ev[index], *later, *earlier;
    if ((later = near_in_backward(t, index, 1, is_reduction)))
        tell(f,
             "GPU %d frees %s's unsharded parameters (%s): its backward is done with them, and "
             "FSDP2's post-backward reshards the unit before its %s, which needs only the "
             "gradients and runs later on the comm stream; the GPU keeps only its shard",
             e->rank, name, bytes, reduction_name(later));
    else if ((earlier = near_in_backward(t, index, -1, is_reduction)))
        tell(f,
             "GPU %d frees %s's unsharded parameters (%s) after its %s, in the seed's order "
             "(--seed-order): backward, %s, free; FSDP2 frees them before it, so that it runs "
             "behind the next unit's backward. The GPU keeps only its shard",
             e->rank, name, bytes, reduction_name(earlier), reduction_name(earlier));
    else
        tell(f,
             "GPU %d frees %s's unsharded parameters (%s): its backward is done with them, and "
             "the GPU keeps only its shard",
             e->rank, name, bytes);
}

/* A free of unit e's unsharded gradients in backward: packed for the reduction still to come
 * (FSDP2's order; the grid keeps them, "packed" where its column has room, until it has run),
 * or done with after it (the seed's). */
static void narrate_grads_free(Frame *f, const Trace *t, size_t index, const char *name,
                               const char *bytes) {
    const TraceEvent *e = &t->ev[index], *later, *earlier;
    if ((later = near_in_backward(t, index, 1, is_reduction)))
        tell(f,
             "GPU %d frees %s's unsharded gradients (%s): they are packed into the buffer its "
             "%s sends, which runs later on the comm stream (the grid keeps them until it has)",
             e->rank, name, bytes, reduction_name(later));
    else if ((earlier = near_in_backward(t, index, -1, is_reduction)))
        tell(f,
             "GPU %d frees %s's unsharded gradients (%s): its %s has averaged them, and each "
             "GPU keeps its shard of the average",
             e->rank, name, bytes, reduction_name(earlier));
    else
        tell(f,
             "GPU %d frees %s's unsharded gradients (%s): they are packed into the buffer "
             "their reduction sends",
             e->rank, name, bytes);
}

/* A free or an allocation: what the bytes were for, and for unsharded parameters why now. */
static void narrate_memory(Frame *f, const Trace *t, size_t index, const char *name) {
    const TraceEvent *e = &t->ev[index];
    char bytes[32];
    format_bytes((size_t)e->bytes, bytes, sizeof bytes);
    int r = e->rank;
    if (e->kind == EV_FREE && e->category == MEM_PARAM_UNSHARDED && e->unit >= 0) {
        if (e->phase == PHASE_FORWARD)
            tell(f,
                 "GPU %d frees %s's unsharded parameters (%s) right after its forward: "
                 "reshard_after_forward keeps only its shard until backward gathers %s again "
                 "(DDP keeps them all)",
                 r, name, bytes, name);
        else if (e->phase == PHASE_BACKWARD)
            narrate_backward_reshard(f, t, index, name, bytes);
        else
            tell(f,
                 "GPU %d frees %s's unsharded parameters (%s): they are done with them, and the "
                 "GPU keeps only its shard",
                 r, name, bytes);
        return;
    }
    if (e->unit >= 0 && frees_unsharded_grads(e)) {
        narrate_grads_free(f, t, index, name, bytes);
        return;
    }
    if (e->kind == EV_ALLOC && e->category == MEM_PARAM_UNSHARDED && e->unit >= 0) {
        tell(f,
             "GPU %d allocates %s's unsharded parameters (%s) and unpacks the gathered shards "
             "into them",
             r, name, bytes);
        if (f->compute_bytes == 2)
            tell(f, ", in 16 bits (--param-dtype): mixed precision gathers and computes in it, "
                    "while the fp32 shard stays the master");
        return;
    }
    tell(f, "GPU %d %s %s of %s for %s", r, e->kind == EV_ALLOC ? "allocates" : "frees", bytes,
         category_phrase(e->category), name);
    if (e->kind == EV_ALLOC && e->category == MEM_ACTIVATIONS && f->compute_bytes == 2)
        tell(f, ", in 16 bits as the unit computes (but a norm's statistics, kept in fp32)");
}

/* With values: "GPU 0 steps Adam on its c₀ of Lc with ∂c₀=+0.239: c₀=+0.855 becomes
 * c₀=+0.805". */
static void narrate_adam(Frame *f, const Plan *p, const TraceEvent *e, const char *name) {
    int r = e->rank, S = plan_optim_size(p), q = plan_optim_rank(p, r);
    char mine[160], grads[200], before[200], after[200];
    if (e->unit < 0 || !text_unit_symbols(p, e->unit, S, q, "", mine, sizeof mine) || !mine[0]) {
        say(f, "GPU %d steps Adam on the %zu parameters of %s it keeps", r,
            e->unit >= 0 ? frame_cell(f, r, e->unit)->kept : 0, name);
        return;
    }
    if (!f->before) { /* symbols without values (an accounting-only run's) */
        text_unit_symbols(p, e->unit, S, q, "\u2202", grads, sizeof grads);
        say(f, "GPU %d steps Adam on its %s of %s with %s", r, mine, name, grads);
        return;
    }
    text_unit_values(p, e->unit, S, q, "\u2202", f->grads, grads, sizeof grads);
    text_unit_values(p, e->unit, S, q, "", f->before, before, sizeof before);
    text_unit_values(p, e->unit, S, q, "", f->after, after, sizeof after);
    say(f, "GPU %d steps Adam on its %s of %s with %s: %s becomes %s", r, mine, name, grads, before,
        after);
}

/* Appends to f->flow; cut at the buffer's end. */
__attribute__((format(printf, 2, 3))) static void flow_add(Frame *f, const char *fmt, ...) {
    size_t at = strlen(f->flow);
    if (at + 1 >= sizeof f->flow) return;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(f->flow + at, sizeof f->flow - at, fmt, ap);
    va_end(ap);
}

/* The group of the rank's collective: the shard group for sharded units, else the world. */
static void group_of(const Plan *p, const TraceEvent *e, int *first, int *size) {
    int S = e->kind == EV_ALL_REDUCE ? p->world : p->shard_size;
    *size = S;
    *first = e->rank - e->rank % S;
}

/* "GPUs 0, 2": rank r's replica group under hsdp, the GPUs holding the same shard. */
static void replica_group_text(const Plan *p, int r, char *out, size_t n) {
    size_t at = (size_t)snprintf(out, n, "GPUs");
    for (int k = 0; k < p->replicas && at < n; k++)
        at += (size_t)snprintf(out + at, n - at, "%s %d", k ? "," : "",
                               r % p->shard_size + k * p->shard_size);
}

/* hsdp's all-reduce of a shard: "∂c₀ ∂c₁ summed over GPUs 0, 2 and averaged; each keeps
 * ∂c₀=+1.613 ∂c₁=+0.102" */
static void flow_replica_reduce(Frame *f, const Plan *p, const TraceEvent *e) {
    int r = e->rank, S = p->shard_size;
    char shard[200], values[200], group[96];
    replica_group_text(p, r, group, sizeof group);
    if (!text_unit_symbols(p, e->unit, S, r % S, "\u2202", shard, sizeof shard) || !shard[0])
        snprintf(shard, sizeof shard, "GPU %d's shard of the gradients of %s", r,
                 p->units[e->unit].name);
    flow_add(f, "%s summed over %s and averaged; each keeps ", shard, group);
    if (text_unit_values(p, e->unit, S, r % S, "\u2202", f->grads, values, sizeof values) &&
        values[0])
        flow_add(f, "%s", values);
    else
        flow_add(f, "the average");
}

/* "a₀ from GPU 0, a₁ from GPU 1 and a₂ from GPU 2 -> every GPU has a₀ a₁ a₂" */
static void flow_gather(Frame *f, const Plan *p, const TraceEvent *e) {
    int first, S;
    group_of(p, e, &first, &S);
    char all[200];
    if (!text_unit_symbols(p, e->unit, 1, 0, "", all, sizeof all)) {
        flow_add(f,
                 "each of GPUs %d-%d sends its shard of %s to the others -> each holds all %zu "
                 "parameters",
                 first, first + S - 1, p->units[e->unit].name, p->units[e->unit].numel);
        return;
    }
    char from[600];
    shards_from(f, p, e->unit, first, S, -1, from, sizeof from);
    flow_add(f, "%s", from);
    flow_add(f, " -> every GPU has %s", all);
}

/* "∂c₀ ∂c₁ ∂c₂ summed over GPUs 0-2 and averaged; GPU 0 keeps ∂c₀, GPU 1 ∂c₁, GPU 2 ∂c₂" */
static void flow_reduce(Frame *f, const Plan *p, const TraceEvent *e) {
    int first, S;
    group_of(p, e, &first, &S);
    char all[240], part[160];
    const char *name = p->units[e->unit].name;
    if (!text_unit_symbols(p, e->unit, 1, 0, "\u2202", all, sizeof all))
        snprintf(all, sizeof all, "the gradients of %s", name);
    if (e->kind == EV_ALL_REDUCE && is_hybrid(p)) {
        flow_replica_reduce(f, p, e);
        return;
    }
    char sums[480];
    sums_text(f, p, e->unit, first, S, 0, 1, ", ", sums, sizeof sums);
    if (e->kind == EV_REDUCE_SCATTER && !is_hybrid(p) && sums[0]) {
        /* each GPU's own gradients, summed in rank order and divided: what each one keeps */
        for (int q = 0, n = 0; q < S; q++) {
            sums_text(f, p, e->unit, first, S, q, 1, ", ", sums, sizeof sums);
            if (sums[0]) flow_add(f, "%s%s", n++ ? ", " : "", sums);
        }
        return;
    }
    flow_add(f, "%s summed over GPUs %d-%d and averaged; ", all, first, first + S - 1);
    if (e->kind == EV_ALL_REDUCE) {
        flow_add(f, "every GPU keeps all of them");
        return;
    }
    /* hsdp: the values known are the replicas' average, which this group's is not yet */
    const float *grads = is_hybrid(p) ? NULL : f->grads;
    for (int q = 0, n = 0; q < S; q++) {
        if (!text_unit_values(p, e->unit, S, q, "\u2202", grads, part, sizeof part))
            snprintf(part, sizeof part, "its share");
        if (!part[0]) continue;
        flow_add(f, n++ ? ", GPU %d %s" : "GPU %d keeps %s", first + q, part);
    }
}

static void describe_flow(Frame *f, const Plan *p, const TraceEvent *e) {
    f->flow[0] = 0;
    if (e->unit < 0 || e->unit >= p->nunits) return;
    if (e->kind == EV_ALL_GATHER) flow_gather(f, p, e);
    if (e->kind == EV_REDUCE_SCATTER || e->kind == EV_ALL_REDUCE) flow_reduce(f, p, e);
}

/* Where a computed run's frame says a value (the toy's gathered shards, its reduced gradients,
 * Adam's step), an accounting-only run's says why it has none, rather than show a number that
 * was never computed. */
static void values_not_computed(Frame *f, const Plan *p, const TraceEvent *e) {
    int valued =
        e->kind == EV_ALL_GATHER || e->kind == EV_REDUCE_SCATTER || e->kind == EV_OPTIMIZER;
    if (f->accounting_only && valued && e->unit >= 0 && e->unit < p->nunits &&
        text_unit_is_symbolic(p, e->unit))
        tell(f, ". No values: --accounting-only computes nothing");
}

static void narrate(Frame *f, const Trace *t, size_t index, const Plan *p) {
    const TraceEvent *e = &t->ev[index];
    const char *name = e->unit >= 0 && e->unit < p->nunits ? p->units[e->unit].name : "the model";
    char bytes[32];
    format_bytes((size_t)e->bytes, bytes, sizeof bytes);
    int r = e->rank;
    switch ((EventKind)e->kind) {
    case EV_ALL_GATHER:
        narrate_gather(f, t, p, e, name);
        return;
    case EV_REDUCE_SCATTER:
        narrate_scatter(f, t, index, p, name);
        return;
    case EV_ALL_REDUCE:
        if (e->unit >= 0 && is_hybrid(p)) {
            char group[96];
            replica_group_text(p, r, group, sizeof group);
            say(f,
                "GPU %d all-reduces its shard of %s's gradients over its replica group, %s, "
                "each holding the same shard (%s): averaged over the %d replicas, the step now "
                "equals one GPU's on the global batch",
                r, name, group, bytes, p->replicas);
        } else if (e->unit >= 0)
            say(f, "GPU %d averages its gradients of %s with every other GPU (all-reduce, %s)", r,
                name, bytes);
        else
            say(f, "GPU %d all-reduces %s with every other GPU (the loss or a norm)", r, bytes);
        return;
    case EV_FORWARD:
        say(f, "GPU %d runs %s's forward", r, name);
        forward_epilogue(f, t, index, p, name);
        return;
    case EV_BACKWARD:
        say(f, "GPU %d runs %s's backward, computing its gradients", r, name);
        return;
    case EV_RECOMPUTE:
        say(f,
            "GPU %d runs %s's forward again from its checkpointed input, on the parameters "
            "backward just gathered, to get back what it dropped (activation checkpointing)",
            r, name);
        return;
    case EV_NVME_READ:
    case EV_NVME_WRITE:
        say(f, "GPU %d %s %s of %s's resting state %s its NVMe file", r,
            e->kind == EV_NVME_READ ? "reads" : "writes", bytes, name,
            e->kind == EV_NVME_READ ? "from" : "back to");
        return;
    case EV_OPTIMIZER:
        narrate_adam(f, p, e, name);
        return;
    case EV_ALLOC:
    case EV_FREE:
        narrate_memory(f, t, index, name);
        return;
    case EV_COPY_H2D:
    case EV_COPY_D2H:
        say(f, "GPU %d copies %s of %s %s", r, bytes, name,
            e->kind == EV_COPY_H2D ? "from host memory (offload)" : "to host memory (offload)");
        return;
    default:
        say(f, "GPU %d: %s of %s", r, event_kind_name((EventKind)e->kind), name);
    }
}

/* ---------------------------------------------------------------- timeline */

static int is_span(const TraceEvent *e) {
    return e->kind != EV_ALLOC && e->kind != EV_FREE && e->end > e->start;
}

static char stream_mark(int stream) {
    return stream == STREAM_COMM ? '=' : stream == STREAM_COPY ? '~' : '#';
}

/* The timeline column of time t, in [0, cols]: clamped as a double, since an event of another
 * step (or of a replayed file) may lie any distance away, and a cast of a double beyond an int's
 * range is undefined (fuzz_trace found 7.65e46). */
static int column(double t, double lo, double width, int cols) {
    double c = (t - lo) / width;
    return !(c > 0) ? 0 : c >= cols ? cols : (int)c;
}

static char phase_mark(int phase) {
    return phase == PHASE_FORWARD ? 'f' : phase == PHASE_BACKWARD ? 'b' : 'o';
}

/* Paints every span of the current event's step onto its rank's stream row, and the phases'
 * row: each column takes the phase of the last compute span started by its end, on any GPU, so
 * the idle gaps inside a phase stay in it and micro-steps alternate forward and backward. The
 * compute stream decides: a copy or gather is issued ahead for the phase after (offload's
 * copies for backward run during forward). The columns before the first compute are the first
 * span's phase (zero3's first all-gather is forward's). */
static void draw_timeline(Frame *f, const Trace *t) {
    int step = f->event->step, cols = f->timeline_cols;
    if (f->drawn == t && f->drawn_step == step && f->drawn_cols == cols) {
        frame_cursor_at(f, f->event->start); /* the step's rows are drawn already */
        return;
    }
    size_t n;
    const size_t *events = step_events(f, t, step, &n);
    double lo = 0.0, hi = 0.0;
    int any = 0;
    for (size_t k = 0; k < n; k++) {
        const TraceEvent *e = &t->ev[events[k]];
        if (!is_span(e)) continue;
        if (!any || e->start < lo) lo = e->start;
        if (!any || e->end > hi) hi = e->end;
        any = 1;
    }
    for (int r = 0; r < f->nranks * STREAM_COUNT; r++) {
        memset(f->timeline[r], '.', (size_t)cols);
        f->timeline[r][cols] = 0;
    }
    f->step_start = lo;
    f->step_end = hi;
    double width = hi > lo ? (hi - lo) / cols : 1.0;
    /* latest[c]: the start of the last phased span that starts in column c (-1: none) */
    double latest[FRAME_TIMELINE_MAX], first = 0;
    char lead = ' '; /* the first phased span's phase */
    for (int c = 0; c < cols; c++) latest[c] = -1, f->phases[c] = 0;
    for (size_t k = 0; any && k < n; k++) {
        const TraceEvent *e = &t->ev[events[k]];
        if (!is_span(e) || e->stream < 0 || e->stream >= STREAM_COUNT) continue;
        int a = column(e->start, lo, width, cols), b = column(e->end, lo, width, cols);
        if (b == a) b = a + 1;
        for (int c = a; c < b && c < cols; c++)
            f->timeline[e->rank * STREAM_COUNT + e->stream][c] = stream_mark(e->stream);
        if (e->phase == PHASE_NONE || a >= cols) continue;
        if (lead == ' ' || e->start < first) first = e->start, lead = phase_mark(e->phase);
        if (e->stream != STREAM_COMPUTE) continue;
        if (latest[a] < 0 || e->start >= latest[a]) {
            latest[a] = e->start;
            f->phases[a] = phase_mark(e->phase);
        }
    }
    for (int c = 0; c < cols; c++)
        if (!f->phases[c]) f->phases[c] = c ? f->phases[c - 1] : lead;
    f->phases[cols] = 0;
    f->drawn = f->scanned == t ? t : NULL;
    f->drawn_step = step;
    f->drawn_cols = cols;
    f->timelines_drawn++;
    frame_cursor_at(f, f->event->start);
}

void frame_cursor_at(Frame *f, double t) {
    double lo = f->step_start, hi = f->step_end;
    int cols = f->timeline_cols;
    int cursor = column(t, lo, hi > lo ? (hi - lo) / cols : 1.0, cols);
    f->cursor = cursor >= cols ? cols - 1 : cursor;
}

void frame_timeline(Frame *f, const Trace *t, int cols) {
    f->timeline_cols = cols < 8 ? 8 : cols > FRAME_TIMELINE_MAX ? FRAME_TIMELINE_MAX : cols;
    if (f->event) draw_timeline(f, t);
}

static void write_header(Frame *f, const Plan *p) {
    const TraceEvent *e = f->event;
    int n = snprintf(f->header, sizeof f->header, "event %zu of %zu | step %d | %s | GPU %d | %s",
                     f->index + 1, f->count, e->step + 1, f->phase, e->rank,
                     event_kind_name((EventKind)e->kind));
    if (e->unit >= 0 && e->unit < p->nunits && n > 0 && (size_t)n < sizeof f->header)
        n += snprintf(f->header + n, sizeof f->header - (size_t)n, " %s", p->units[e->unit].name);
    if (f->accounting_only && n > 0 && (size_t)n < sizeof f->header)
        snprintf(f->header + n, sizeof f->header - (size_t)n, " | accounting only");
}

/* Events outside the plan are refused, the first one named. */
static int check_event(const Frame *f, const TraceEvent *e, size_t i, Err *err) {
    if (e->rank < 0 || e->rank >= f->nranks)
        return err_set(err, ERR_USAGE, "trace event %zu is on rank %d; the plan has %d", i, e->rank,
                       f->nranks);
    if (e->unit >= f->nunits)
        return err_set(err, ERR_USAGE, "trace event %zu names unit %d; the plan has %d", i, e->unit,
                       f->nunits);
    return 0;
}

/* Whether the replay so far is a prefix of the one asked for: the same trace (scan_trace starts
 * it over for another) and plan, and no rank asked back from where it is. */
static int carries_on(const Frame *f, const Plan *p) {
    if (f->replayed != p) return 0;
    for (int r = 0; r < f->nranks; r++)
        if (f->want[r] < f->done[r]) return 0;
    return 1;
}

/* Applies each rank r's events from done[r] up to want[r], in trace order, checking every event
 * up to `last` once; progress only of events of `step` when the replay's progress is of it. */
static int advance(Frame *f, const Trace *t, size_t last, int step, Err *err) {
    size_t lo = last;
    for (int r = 0; r < f->nranks; r++) {
        if (f->done[r] < lo) lo = f->done[r];
        if (f->want[r] > last) last = f->want[r];
    }
    int progress = f->progress_step == step;
    for (size_t i = lo; i < last; i++) {
        const TraceEvent *e = &t->ev[i];
        int rc = i >= f->checked ? check_event(f, e, i, err) : 0;
        if (rc) return rc;
        if (i < f->done[e->rank] || i >= f->want[e->rank]) continue;
        if (e->kind == EV_ALLOC || e->kind == EV_FREE) {
            rc = apply_memory(f, e, i, err);
            if (rc) return rc;
        }
        if (progress && e->step == step) apply_progress(f, e, i);
    }
    f->walked += last - lo;
    if (last > f->checked) f->checked = last;
    memcpy(f->done, f->want, (size_t)f->nranks * sizeof *f->done);
    return 0;
}

/* The progress of `step` replayed anew from its events alone (apply_progress reads no memory). */
static void replay_progress(Frame *f, const Trace *t, int step) {
    for (int r = 0; r < f->nranks; r++)
        for (int u = 0; u < f->nunits; u++) {
            FrameCell *c = state_cell(f, r, u);
            c->grads_packed = c->grads_computed = c->reduced = c->group_reduced = c->stepped = 0;
        }
    size_t n;
    const size_t *events = step_events(f, t, step, &n);
    for (size_t k = 0; k < n; k++) {
        const TraceEvent *e = &t->ev[events[k]];
        if (events[k] < f->checked && events[k] < f->done[e->rank]) apply_progress(f, e, events[k]);
    }
    f->progress_step = step;
    f->progress_replays++;
}

/* The cells as renderers read them: counts of blocks as yes or no, a shard the trace does not
 * record as allocated as resident. */
static void read_cells(Frame *f) {
    for (int r = 0; r < f->nranks; r++)
        for (int u = 0; u < f->nunits; u++) {
            FrameCell c = *state_cell(f, r, u);
            c.resident = c.resident > 0 || !f->shard_traced[(size_t)r * (size_t)f->nunits + u];
            c.gathered = c.gathered > 0;
            c.grads_full = c.grads_full > 0;
            *frame_cell(f, r, u) = c;
        }
}

/* frame_at and frame_at_points: each rank's state after its events before ends[rank] (ends
 * NULL: every event up to and including index), then the current event's texts and timeline.
 * The replay goes on from the previous call's when that one is a prefix of this one. */
static int replay(Frame *f, const Trace *t, const Plan *p, size_t index, const size_t *ends,
                  Err *err) {
    if (f->nranks != p->world || f->nunits != p->nunits)
        return err_set(err, ERR_INTERNAL, "frame sized for another plan");
    if (t->n && index >= t->n)
        return err_set(err, ERR_USAGE, "event %zu is past the trace's %zu events", index, t->n);
    int rc = scan_trace(f, t, p, err);
    if (rc) return rc;
    f->reduce_in_two = p->strategy == STRAT_HSDP && p->grads_sharded && p->replicas > 1;
    f->count = t->n;
    f->index = index;
    f->event = t->n ? &t->ev[index] : NULL;
    size_t last = t->n ? index + 1 : 0; /* events [0, last) are looked at */
    for (int r = 0; r < f->nranks; r++) f->want[r] = !ends ? last : ends[r] < t->n ? ends[r] : t->n;
    if (!carries_on(f, p)) restart(f, p);
    int step = f->event ? f->event->step : 0;
    if ((rc = advance(f, t, last, step, err))) {
        f->replayed = NULL; /* half applied: the next call starts over */
        return rc;
    }
    if (f->progress_step != step) replay_progress(f, t, step);
    if (!f->event) restart(f, p); /* an empty trace: no progress of any step */
    read_cells(f);
    point_values(f, t);
    f->accounting_only = t->accounting_only;
    f->narration[0] = 0;
    f->flow[0] = 0;
    f->header[0] = 0;
    f->phase = "none";
    if (f->event) {
        f->phase = phase_label(f, t, index);
        write_header(f, p);
        narrate(f, t, index, p);
        values_not_computed(f, p, f->event);
        describe_flow(f, p, f->event);
        draw_timeline(f, t);
    }
    return 0;
}

int frame_at(Frame *f, const Trace *t, const Plan *p, size_t index, Err *err) {
    return replay(f, t, p, index, NULL, err);
}

int frame_at_points(Frame *f, const Trace *t, const Plan *p, size_t index, const size_t *ends,
                    Err *err) {
    return replay(f, t, p, index, ends, err);
}

void frame_narrate(Frame *f, const Trace *t, const Plan *p, size_t index) {
    f->narration[0] = f->flow[0] = 0;
    if (index >= t->n) return;
    Err ignored = {0}; /* out of memory to index it: the texts leave out what overlaps */
    scan_trace(f, t, p, &ignored); /* once per trace: what the run gathers, in which dtype */
    f->index = index;
    f->event = &t->ev[index];
    f->accounting_only = t->accounting_only;
    point_values(f, t);
    narrate(f, t, index, p);
    values_not_computed(f, p, f->event);
    describe_flow(f, p, f->event);
}
