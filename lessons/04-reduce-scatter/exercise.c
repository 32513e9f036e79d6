/* Lesson 04: reduce-scatter as a ring, and all-reduce as reduce-scatter + all-gather. */
#include <stdlib.h>
#include <string.h>

#include "exercise.h"

/* Read lessons/04-reduce-scatter/README.md, fill in the three TODOs, then run
 *   ./fsdp lessons check 04
 * The ring (lessons/tool/ring.h) is lesson 03's: ring_send_to_next, ring_recv_from_prev,
 * ring_size. Helpers you add should be `static`. */

/* Lesson 03's all-gather, given (put yours here if you like): `mine` (count floats) from
 * every rank into `all` (N * count floats), rank q's block at all + q * count. */
void ring_all_gather(Ring *ring, int rank, const float *mine, float *all, size_t count) {
    int n = ring_size(ring);
    memcpy(all + (size_t)rank * count, mine, count * sizeof *mine);
    for (int s = 0; s < n - 1; s++) {
        int send_block = (rank - s + n) % n;
        int recv_block = (rank - s - 1 + n) % n;
        ring_send_to_next(ring, rank, all + (size_t)send_block * count, count);
        ring_recv_from_prev(ring, rank, all + (size_t)recv_block * count, count);
    }
}

/* Rank `rank` of N holds `full`: N blocks of `count` floats, its contribution to every
 * rank's block (block q at full + q * count). On return `mine` (count floats) holds block
 * `rank` summed over all N ranks. Every rank runs this at the same time on its own thread. */
void ring_reduce_scatter(Ring *ring, int rank, const float *full, float *mine, size_t count) {
    (void)ring, (void)rank, (void)full, (void)mine, (void)count; /* TODO: delete this line */
    /* TODO */
}

/* Every rank holds `buf` (count floats, any count); on return every rank's `buf` holds the
 * sum over all ranks. Build it from ring_reduce_scatter and ring_all_gather. */
void ring_all_reduce(Ring *ring, int rank, float *buf, size_t count) {
    (void)ring, (void)rank, (void)buf, (void)count; /* TODO: delete this line */
    /* TODO */
}

/* The bytes one rank sends in that all-reduce of `count` fp32 floats over n ranks. */
size_t ring_all_reduce_sent_bytes(size_t count, int n) {
    (void)count, (void)n; /* TODO: delete this line when you use them */
    return 0;             /* TODO */
}
