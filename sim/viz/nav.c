/* nav: where the viewer's movement keys lead in a trace (next/previous event, collective,
 * compute; the first event of a step's forward, backward or optimizer phase). */
#include "sim/viz/nav.h"

int nav_is_collective(const TraceEvent *e) {
    return e->kind == EV_ALL_GATHER || e->kind == EV_REDUCE_SCATTER || e->kind == EV_ALL_REDUCE ||
           e->kind == EV_BROADCAST || e->kind == EV_BARRIER;
}

int nav_is_compute(const TraceEvent *e) {
    return e->kind == EV_FORWARD || e->kind == EV_BACKWARD || e->kind == EV_RECOMPUTE ||
           e->kind == EV_OPTIMIZER;
}

/* The nearest event after (dir +1) or before (dir -1) `from` that `is` accepts. */
static int seek(const Trace *t, size_t from, int dir, int (*is)(const TraceEvent *), size_t *to) {
    for (size_t i = from; dir > 0 ? i + 1 < t->n : i > 0;) {
        i = dir > 0 ? i + 1 : i - 1;
        if (is(&t->ev[i])) {
            *to = i;
            return 1;
        }
    }
    return 0;
}

static int any_event(const TraceEvent *e) {
    (void)e;
    return 1;
}

/* The first event of `phase` in the current step, or in the first step after it that has
 * one. Events are ordered by time, not by step, so this does not assume a step's events are
 * contiguous: "the current step is over" means no event from `from` on belongs to it with a
 * phase. */
static int phase_start(const Trace *t, size_t from, Phase phase, size_t *to) {
    int step = t->ev[from].step, over = 1;
    for (size_t i = from; i < t->n && over; i++)
        if (t->ev[i].step == step && t->ev[i].phase != PHASE_NONE) over = 0;
    if (over) step++;
    int found = 0, best_step = 0;
    for (size_t i = 0; i < t->n; i++) {
        const TraceEvent *e = &t->ev[i];
        if (e->phase != (int)phase || e->step < step) continue;
        if (!found || e->step < best_step) { /* the first such event of the earliest step */
            found = 1;
            best_step = e->step;
            *to = i;
        }
    }
    return found;
}

int nav_move(const Trace *t, size_t from, NavMove move, size_t *to) {
    *to = from;
    if (from >= t->n) return 0;
    size_t at = from;
    int moved = 0;
    switch (move) {
    case NAV_NEXT:
    case NAV_PREV:
        moved = seek(t, from, move == NAV_NEXT ? 1 : -1, any_event, &at);
        break;
    case NAV_NEXT_COLLECTIVE:
    case NAV_PREV_COLLECTIVE:
        moved = seek(t, from, move == NAV_NEXT_COLLECTIVE ? 1 : -1, nav_is_collective, &at);
        break;
    case NAV_NEXT_COMPUTE:
    case NAV_PREV_COMPUTE:
        moved = seek(t, from, move == NAV_NEXT_COMPUTE ? 1 : -1, nav_is_compute, &at);
        break;
    case NAV_FORWARD:
        moved = phase_start(t, from, PHASE_FORWARD, &at);
        break;
    case NAV_BACKWARD:
        moved = phase_start(t, from, PHASE_BACKWARD, &at);
        break;
    case NAV_OPTIMIZER:
        moved = phase_start(t, from, PHASE_OPTIMIZER, &at);
        break;
    }
    if (moved) *to = at;
    return moved;
}

const char *nav_nowhere(NavMove move) {
    switch (move) {
    case NAV_NEXT:
        return "this is the last event";
    case NAV_PREV:
        return "this is the first event";
    case NAV_NEXT_COLLECTIVE:
        return "no collective after this event";
    case NAV_PREV_COLLECTIVE:
        return "no collective before this event";
    case NAV_NEXT_COMPUTE:
        return "no compute after this event";
    case NAV_PREV_COMPUTE:
        return "no compute before this event";
    case NAV_FORWARD:
        return "no forward phase in this step or after it";
    case NAV_BACKWARD:
        return "no backward phase in this step or after it";
    case NAV_OPTIMIZER:
        return "no optimizer phase in this step or after it";
    }
    return "";
}
