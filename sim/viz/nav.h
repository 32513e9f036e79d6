/* nav: where the viewer's movement keys lead in a trace: the next or previous event, collective
 * or compute, and the first event of a step's forward, backward or optimizer phase. Pure
 * functions of the trace (no frame, no screen), so tests can check every key against it. */
#ifndef FSDP_NAV_H
#define FSDP_NAV_H

#include <stddef.h>

#include "engine/trace.h"

typedef enum {
    NAV_NEXT,            /* n, space, Right */
    NAV_PREV,            /* p, Left */
    NAV_NEXT_COLLECTIVE, /* c */
    NAV_PREV_COLLECTIVE, /* C */
    NAV_NEXT_COMPUTE,    /* k */
    NAV_PREV_COMPUTE,    /* K */
    NAV_FORWARD,         /* f */
    NAV_BACKWARD,        /* b */
    NAV_OPTIMIZER,       /* o */
} NavMove;

/* all_gather, reduce_scatter, all_reduce, broadcast, barrier: what key c stops at. */
int nav_is_collective(const TraceEvent *e);
/* forward, backward, recompute, optimizer: what key k stops at. */
int nav_is_compute(const TraceEvent *e);

/* The event that `move` leads to from event `from` of t: returns 1 and sets *to, or returns 0
 * and sets *to = from where there is none (past either end; no such phase from here on). A
 * phase key on the first event of its phase finds that event (1, *to = from).
 *
 * The phase moves go to the first event, in trace order, of the current step's phase; from an
 * event after the step's last phased event (the teardown after the last step, the allocations
 * between two steps), or when the step has no such phase (no optimizer in a micro-step), to
 * the first of the next step that has it. */
int nav_move(const Trace *t, size_t from, NavMove move, size_t *to);

/* One line on why `move` went nowhere ("no collective after this event"). */
const char *nav_nowhere(NavMove move);

#endif
