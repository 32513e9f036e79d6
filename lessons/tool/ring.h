/* ring: the wire of lessons 03 and 04. N ranks are threads of one process joined in a ring:
 * rank r sends only to rank r+1 and receives only from rank r-1 (mod N), like the rings NCCL
 * builds out of point-to-point links. A link holds one message at a time, and every byte a
 * rank sends is counted, so a check can compare both the result and the traffic. */
#ifndef FSDP_LESSONS_RING_H
#define FSDP_LESSONS_RING_H

#include <stddef.h>

#define RING_MAX_RANKS 16
/* How long a send or receive waits for its neighbour before the ring calls it a deadlock. */
#define RING_WAIT_SECONDS 3

typedef struct Ring Ring;

/* Ranks in the ring (N). */
int ring_size(const Ring *ring);
/* Rank `rank` sends `count` floats to rank (rank + 1) % N. The link holds one message: if
 * the previous one has not been received yet, this waits until it is. */
void ring_send_to_next(Ring *ring, int rank, const float *buf, size_t count);
/* Rank `rank` receives `count` floats from rank (rank - 1 + N) % N into buf; waits until they
 * arrive. The sender must have sent exactly `count` floats. */
void ring_recv_from_prev(Ring *ring, int rank, float *buf, size_t count);

/* ------------------------------------------------------------ for the checks */

typedef void (*RingRankFn)(Ring *ring, int rank, void *arg);

typedef struct RingReport {
    size_t sent_bytes[RING_MAX_RANKS]; /* what each rank sent */
    /* The first misuse of the ring ("rank 1 waited 3 s to receive from rank 0, which sent
     * nothing"), or "" when every send met its receive. */
    char problem[256];
} RingReport;

/* Runs fn(ring, r, arg) on a thread for each rank r of a fresh ring of n ranks (1 to
 * RING_MAX_RANKS) and waits for all. Returns 0, or -1 if the threads could not be started
 * (report->problem says why). */
int ring_run(int n, RingRankFn fn, void *arg, RingReport *report);

#endif
