/* moments: the presenter's step. A trace's events grouped into moments a room can follow: one per
 * collective or compute across all GPUs, the allocations, frees and copies around it folded in
 * (still reachable one by one in the event view). A pure function of the trace, as nav is. */
#ifndef FSDP_MOMENTS_H
#define FSDP_MOMENTS_H

#include <stddef.h>
#include <stdint.h>

#include "sim/viz/frame.h"
#include "sim/viz/nav.h"

/* Events [first, last] of the trace, inclusive; a frame of it shows the state after `last`. The
 * anchor is the first event of its collective or compute (the lowest GPU's, usually GPU 0's);
 * a moment of allocations and frees alone (a step's setup, the teardown) has anchor
 * MOMENT_NO_ANCHOR. */
typedef struct Moment {
    size_t first, anchor, last;
    int anchors; /* events of the anchor's collective or compute: one per GPU taking part */
} Moment;

#define MOMENT_NO_ANCHOR SIZE_MAX

typedef struct Moments {
    Moment *m;
    size_t n;
} Moments;

/* Groups t's events, in order, every event in exactly one moment:
 * - a collective or compute event joins the moment being built when that moment's anchor is
 *   the same work (kind, unit, step, micro-step, phase) and its GPU has not joined it yet;
 *   otherwise it anchors a new moment;
 * - an allocation, free or copy of a phase (forward, backward, optimizer) joins the moment
 *   before it, the one whose work it follows (a free after a forward, the unpack after an
 *   all-gather), except where no work of its phase came before it: then it opens the moment
 *   of the work it prepares (the comm buffers an all-gather will fill);
 * - phase-less events (a step's setup, what comes between steps, the teardown) make moments of
 *   their own, with no anchor. */
int moments_build(Moments *out, const Trace *t, Err *err);
void moments_free(Moments *m);

/* The moment that holds event `index` (index < t->n the moments were built from). */
size_t moments_find(const Moments *ms, size_t index);

/* Where a key leads in the presenter's step from moment `from`: n/p the next or previous moment,
 * c/C and k/K the next or previous one anchored on a collective or a compute, f/b/o the moment
 * of the first collective or compute of the step's forward, backward or optimizer phase (not
 * an allocation before it). Returns 1 and sets *to, or 0 and *to = from where there is none. */
int moments_move(const Moments *ms, const Trace *t, size_t from, NavMove move, size_t *to);

/* Fills f for moment k of ms: the state after its last event, the header naming the moment
 * ("frame 3 of 21 | events 43-69 of 339 | step 1 | forward | all GPUs | all_gather La"), the
 * narration and flow of its anchor, then in order the narration of each event folded in that
 * changes what a unit holds (its gathered parameters or full gradients allocated or freed, a
 * copy to or from the host), then one sentence summing the comm buffers and activations it
 * allocated and freed. The timeline's cursor is at the anchor. */
int moments_frame(Frame *f, const Trace *t, const Plan *p, const Moments *ms, size_t k, Err *err);

/* Only the narration and flow of moment k (the state and header as they were), in a frame
 * frame_at has filled once: as frame_narrate, for sizing text rows over a whole trace. */
void moments_narrate(Frame *f, const Trace *t, const Plan *p, const Moments *ms, size_t k);

#endif
