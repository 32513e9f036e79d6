/* compare: which event of one run is "the same moment" as an event of another run of the same
 * model and steps under a different strategy (FSDP beside DDP in the viewer's key d, and the
 * DDP marks on its memory bars). A pure function of the two traces; it reads them and
 * allocates only scratch counts. */
#ifndef FSDP_COMPARE_H
#define FSDP_COMPARE_H

#include <stddef.h>

#include "engine/trace.h"

/* Forward, backward, recompute and optimizer events: the model's computation, which is the same
 * under every strategy (same units, same schedule order), event for event on each rank. */
int compare_is_compute(const TraceEvent *e);

/* The events two strategies share, in the same order on each rank: the computes and the
 * allocations and frees of what they save for backward (activations, checkpointed inputs),
 * which are the same model's on the same batch whatever a strategy shards. Everything else
 * (resting shards, gathered parameters, gradient buffers, collectives, copies) is the
 * strategy's own. */
int compare_is_shared(const TraceEvent *e);

/* Where rank `rank` of b stands at the same point as that rank of a after event `index`: *end
 * is such that b's events of that rank before index *end are those it has run by then.
 *
 * Let the rank's last event in a at or before `index` be its m-th shared event, or come after
 * its m-th (m = 0: none yet) and before its next. In the first case b's rank has run up to and
 * including its own m-th shared event, the same computation (or the same activation saved or
 * freed): what it reads is alive on both sides and neither has freed or allocated anything the
 * other has not for it. In the second, b's rank has run everything before its (m+1)-th shared
 * event: its own work for the gap (DDP's all-reduce where zero3 reduce-scatters), ready for the
 * next shared event; so a's setup maps to b's setup done and a's teardown to b's. Where b has
 * fewer shared events, its rank has run all of its events. For one rank, *end never decreases
 * as `index` grows.
 *
 * Fails on a rank outside either trace's or an index past a's end. */
int compare_rank_point(const Trace *a, size_t index, const Trace *b, int rank, size_t *end,
                       Err *err);

/* The same for every rank at once (ends has a.nranks values), in one pass over each trace: what
 * the viewer asks at every event. Fails on traces of different ranks, an index past a's end or
 * out of memory for the ranks' counts. */
int compare_points(const Trace *a, size_t index, const Trace *b, size_t *ends, Err *err);

/* The event of b at the same point as event `index` of a, on the same rank: the last event of
 * that rank that b has run then (compare_rank_point), so a compute maps to the same compute,
 * zero3's reduce-scatter of a unit to DDP's all-reduce of it, and the allocations before a
 * forward to b ready to run it. Where that rank has run nothing of b by then (b opens with a
 * shared event of it), the rank's first event of b. Fails on an empty b, an index past a's end,
 * or a rank b does not have. */
int compare_match(const Trace *a, size_t index, const Trace *b, size_t *out, Err *err);

/* compare_points and compare_match at many events of a (the HTML page asks at every one): b
 * indexed once (each rank's shared events, where each comes in b), a's counts carried on from the
 * previous event asked when this one is later. The one-shot functions above are this walk made
 * and freed for one event. */
typedef struct CompareWalk {
    const Trace *a, *b;
    int nranks;    /* a's */
    size_t *first; /* [nranks + 1]: rank r's shared events of b are the k in first[r]..first[r+1] */
    size_t *shared; /* [b's shared events]: where the k-th is in b */
    size_t *before; /* [the same]: one past the rank's event before it in b (0: none) */
    size_t *tail;   /* [nranks]: one past the rank's last event in b (0: none) */
    size_t *head;   /* [nranks]: the rank's first event in b (b->n: none) */
    size_t next;    /* a's events before next are counted */
    size_t *count;  /* [nranks]: a's shared events of the rank among them */
    int *on_shared; /* [nranks]: the rank's last event among them is a shared one */
} CompareWalk;

/* Fails only out of memory. */
int compare_walk_init(CompareWalk *w, const Trace *a, const Trace *b, Err *err);
/* compare_points(a, index, b, ends) and compare_match(a, index, b, out), with their failures. */
int compare_walk_points(CompareWalk *w, size_t index, size_t *ends, Err *err);
int compare_walk_match(CompareWalk *w, size_t index, size_t *out, Err *err);
void compare_walk_free(CompareWalk *w);

#endif
