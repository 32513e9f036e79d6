/* Lesson 03: all-gather as a ring. Every GPU has one block; every GPU needs all of them. */
#include <string.h>

#include "exercise.h"

/* Read lessons/03-ring-all-gather/README.md, fill in the two TODOs, then run
 *   ./fsdp lessons check 03
 * The ring (lessons/tool/ring.h) gives you exactly two calls:
 *   ring_send_to_next(ring, rank, buf, count)    count floats to rank (rank + 1) % N
 *   ring_recv_from_prev(ring, rank, buf, count)  count floats from rank (rank - 1 + N) % N
 * and ring_size(ring) is N. Helpers you add should be `static`. */

/* Rank `rank` of the N ranks of the ring holds `count` floats in `mine`. On return, `all`
 * (N * count floats) holds every rank's block in rank order: rank q's block at
 * all + q * count. Every rank runs this function at the same time on a thread of its own. */
void ring_all_gather(Ring *ring, int rank, const float *mine, float *all, size_t count) {
    (void)ring, (void)rank, (void)mine, (void)all, (void)count; /* TODO: delete this line */
    /* TODO */
}

/* The bytes one rank sends in that all-gather, for `count` fp32 floats per rank and n ranks. */
size_t ring_all_gather_sent_bytes(size_t count, int n) {
    (void)count, (void)n; /* TODO: delete this line when you use them */
    return 0;             /* TODO */
}
