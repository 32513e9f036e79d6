/* comm_sim: the comm interface for N ranks that are threads of one process. Collectives
 * meet in a shared slot per request, reduce in rank order (bit-identical every run) and
 * take modelled time from the cost model: a collective starts when the last rank is ready
 * on its comm stream and ends after cost_collective. Each rank's comm stream clock lives in
 * its SimClock; events go to the rank's TraceBuf. */
#ifndef FSDP_COMM_SIM_H
#define FSDP_COMM_SIM_H

#include "engine/comm.h"
#include "engine/trace.h"
#include "sim/cost.h"
#include "sim/stream_check.h"

/* Per-rank modelled clocks, shared with device_sim. */
typedef struct SimClock {
    double stream_time[STREAM_COUNT];
    /* End of the last collective this rank waited for: the comm stream is in-order, so a
     * collective cannot start before the previous one ended, whichever comm issued it. */
    double comm_last_end;
} SimClock;

typedef struct SimWorld SimWorld; /* shared by all ranks of a group */

/* Creates the shared state of a group of `size` ranks. world_ranks[i] is the world rank of
 * group rank i (NULL: identity); ranks_per_node decides which hops cross nodes (0: all in
 * one node). */
SimWorld *sim_world_create(int size, const int *world_ranks, int ranks_per_node,
                           const Profile *profile, Err *err);
void sim_world_destroy(SimWorld *w);
/* Collectives keep their timing and trace but move no data (accounting-only runs). */
void sim_world_accounting_only(SimWorld *w);
/* Accounting-only runs of some of the ranks (runs[world rank] != 0): a collective completes
 * once the members that run have arrived. Their timing is exact when every absent member
 * would arrive when some present one does, as the planner's representatives guarantee. */
void sim_world_set_present(SimWorld *w, const unsigned char *runs);
/* Wakes every rank blocked in this group; their waits fail with "aborted: why". Used when
 * one rank fails so the others stop instead of waiting forever for it. */
void sim_world_abort(SimWorld *w, const char *why);

/* Fills *c for group rank `rank`; clock and trace are that rank's (trace may be NULL). */
void comm_sim_init(Comm *c, SimWorld *w, int rank, SimClock *clock, TraceBuf *trace);
/* The rank's stream checker sees each collective's buffers on the comm stream (NULL: off). */
void comm_sim_check(Comm *c, StreamCheck *check);

#endif
