#include "frame.h"

#include <stdlib.h>
#include <string.h>

int frame_init(Frame *f, const Plan *p, Err *err) {
    memset(f, 0, sizeof *f);
    f->nranks = p->world;
    f->nunits = p->nunits;
    f->cells = calloc((size_t)p->world * (size_t)p->nunits + 1, sizeof *f->cells);
    f->mem = calloc((size_t)p->world * MEM_CATEGORY_COUNT, sizeof *f->mem);
    f->peak = calloc((size_t)p->world, sizeof *f->peak);
    if (!f->cells || !f->mem || !f->peak) {
        frame_free(f);
        return err_set(err, ERR_NOMEM, "out of memory for a frame of %d ranks", p->world);
    }
    return 0;
}

void frame_free(Frame *f) {
    free(f->cells);
    free(f->mem);
    free(f->peak);
    memset(f, 0, sizeof *f);
}

static void reset(Frame *f, const Plan *p) {
    memset(f->mem, 0, (size_t)f->nranks * MEM_CATEGORY_COUNT * sizeof *f->mem);
    memset(f->peak, 0, (size_t)f->nranks * sizeof *f->peak);
    for (int r = 0; r < f->nranks; r++)
        for (int u = 0; u < f->nunits; u++)
            *frame_cell(f, r, u) = (FrameCell){.kept = plan_param_numel(p, u, r)};
}

static size_t rank_total(const Frame *f, int r) {
    size_t t = 0;
    for (int c = 0; c < MEM_CATEGORY_COUNT; c++) t += frame_mem(f, r, (MemCategory)c);
    return t;
}

/* An alloc or free moves the rank's bytes of its category; allocations of unsharded
 * parameters and gradients say whether a unit is gathered (with mixed precision a unit has
 * two such blocks, the low-precision copy and its fp32 view, so these are counts). */
static int apply_memory(Frame *f, const TraceEvent *e, Err *err) {
    if (e->category < 0 || e->category >= MEM_CATEGORY_COUNT)
        return err_set(err, ERR_USAGE, "trace event %ld of rank %d has memory category %d", e->seq,
                       e->rank, e->category);
    size_t *bytes = &f->mem[(size_t)e->rank * MEM_CATEGORY_COUNT + (size_t)e->category];
    int delta = e->kind == EV_ALLOC ? 1 : -1;
    if (delta < 0 && *bytes < e->bytes)
        return err_set(err, ERR_USAGE, "trace event %ld frees %llu bytes rank %d never allocated",
                       e->seq, e->bytes, e->rank);
    *bytes = delta > 0 ? *bytes + e->bytes : *bytes - e->bytes;
    if (e->unit >= 0 && e->unit < f->nunits) {
        FrameCell *cell = frame_cell(f, e->rank, e->unit);
        if (e->category == MEM_PARAM_UNSHARDED) cell->gathered += delta;
        if (e->category == MEM_GRAD_UNSHARDED) cell->grads_full += delta;
    }
    size_t total = rank_total(f, e->rank);
    if (total > f->peak[e->rank]) f->peak[e->rank] = total;
    return 0;
}

int frame_at(Frame *f, const Trace *t, const Plan *p, size_t index, Err *err) {
    if (f->nranks != p->world || f->nunits != p->nunits)
        return err_set(err, ERR_INTERNAL, "frame sized for another plan");
    if (t->n && index >= t->n)
        return err_set(err, ERR_USAGE, "event %zu is past the trace's %zu events", index, t->n);
    reset(f, p);
    f->count = t->n;
    f->index = index;
    f->event = t->n ? &t->ev[index] : NULL;
    for (size_t i = 0; t->n && i <= index; i++) {
        const TraceEvent *e = &t->ev[i];
        if (e->rank < 0 || e->rank >= f->nranks)
            return err_set(err, ERR_USAGE, "trace event %zu is on rank %d; the plan has %d", i,
                           e->rank, f->nranks);
        if (e->unit >= f->nunits)
            return err_set(err, ERR_USAGE, "trace event %zu names unit %d; the plan has %d", i,
                           e->unit, f->nunits);
        if (e->kind == EV_ALLOC || e->kind == EV_FREE) {
            int rc = apply_memory(f, e, err);
            if (rc) return rc;
        }
    }
    for (int r = 0; r < f->nranks; r++)
        for (int u = 0; u < f->nunits; u++) {
            FrameCell *c = frame_cell(f, r, u);
            c->gathered = c->gathered > 0;
            c->grads_full = c->grads_full > 0;
        }
    return 0;
}
