/* compare: which event of one run is "the same moment" as an event of another run of the same
 * model and steps under a different strategy (FSDP beside DDP in the viewer's key d). A pure
 * function of the two traces; it reads them and allocates only scratch counts. */
#ifndef FSDP_COMPARE_H
#define FSDP_COMPARE_H

#include <stddef.h>

#include "engine/trace.h"

/* Forward, backward and optimizer events: the model's computation, which is the same under
 * every strategy (same units, same schedule order), event for event on each rank. Everything
 * else (allocations, collectives, copies) differs between strategies. */
int compare_is_compute(const TraceEvent *e);

/* The event of b at the same point of the computation as event `index` of a.
 *
 * Let k_q be how many compute events rank q has run in a up to and including `index`. The
 * answer is the last event of b before the first compute event that would put some rank q of
 * b past k_q: b as far along as it gets while no GPU has computed more than the same GPU in a.
 * A compute event maps to the same compute event in b (the k_q-th of its rank q), so what that
 * compute reads is alive on both sides; the allocations and
 * collectives between two computes in a (zero3's all-gather before a forward) map to b ready
 * to run that next forward; the first event maps to b's setup done (the last event before b's
 * first compute) and the last event, once every rank's computation is done, to b's last
 * event. The answer never decreases as `index` grows.
 *
 * Ranks are those of the traces (events on ranks outside [0, nranks) are ignored). Fails on
 * an empty b or an index past a's end. */
int compare_match(const Trace *a, size_t index, const Trace *b, size_t *out, Err *err);

#endif
