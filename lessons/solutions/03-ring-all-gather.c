/* Lesson 03: all-gather as a ring. Every GPU has one block; every GPU needs all of them.
 * The reference solution: ./fsdp lessons check 03 --file lessons/solutions/03-ring-all-gather.c */
#include <string.h>

#include "exercise.h"

/* Rank `rank` of the N ranks of the ring holds `count` floats in `mine`. On return, `all`
 * (N * count floats) holds every rank's block in rank order: rank q's block at
 * all + q * count. Every rank runs this function at the same time on a thread of its own. */
void ring_all_gather(Ring *ring, int rank, const float *mine, float *all, size_t count) {
    int n = ring_size(ring);
    memcpy(all + (size_t)rank * count, mine, count * sizeof *mine);
    /* N-1 steps. In step s a rank passes on the block it got in the step before (its own in
     * step 0), rank - s's, and receives rank - s - 1's from its left neighbour. Sending first
     * keeps the ring moving: if every rank waited to receive first, none would ever send. */
    for (int s = 0; s < n - 1; s++) {
        int send_block = (rank - s + n) % n;
        int recv_block = (rank - s - 1 + n) % n;
        ring_send_to_next(ring, rank, all + (size_t)send_block * count, count);
        ring_recv_from_prev(ring, rank, all + (size_t)recv_block * count, count);
    }
}

/* The bytes one rank sends in that all-gather, for `count` fp32 floats per rank and n ranks. */
size_t ring_all_gather_sent_bytes(size_t count, int n) {
    return (size_t)(n - 1) * count * sizeof(float); /* one block per step, N-1 steps */
}
