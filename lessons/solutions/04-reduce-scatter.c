/* Lesson 04: reduce-scatter as a ring, and all-reduce as reduce-scatter + all-gather.
 * The reference solution: ./fsdp lessons check 04 --file lessons/solutions/04-reduce-scatter.c */
#include <stdlib.h>
#include <string.h>

#include "exercise.h"

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
    int n = ring_size(ring);
    /* N-1 steps. A running sum travels around the ring: in step s a rank sends its sum of
     * block rank-s-1, receives its left neighbour's sum of block rank-s-2 and adds its own
     * contribution to it. After the last step that block is rank - N = rank itself, summed
     * over every rank. (With one rank there is no step: its own contribution is the sum.) */
    const float *own = full + (size_t)((rank - 1 + n) % n) * count;
    memcpy(mine, own, count * sizeof *mine);
    float *incoming = malloc((count ? count : 1) * sizeof *incoming);
    if (!incoming) abort();
    for (int s = 0; s < n - 1; s++) {
        int recv_block = ((rank - s - 2) % n + n) % n;
        ring_send_to_next(ring, rank, mine, count);
        ring_recv_from_prev(ring, rank, incoming, count);
        own = full + (size_t)recv_block * count;
        for (size_t i = 0; i < count; i++) mine[i] = incoming[i] + own[i];
    }
    free(incoming);
}

/* Every rank holds `buf` (count floats, any count); on return every rank's `buf` holds the
 * sum over all ranks. Build it from ring_reduce_scatter and ring_all_gather. */
void ring_all_reduce(Ring *ring, int rank, float *buf, size_t count) {
    int n = ring_size(ring);
    /* Both halves move N equal blocks, so pad the buffer to N blocks of ceil(count / N) (the
     * engine pads a unit's shards the same way); the padding sums zeros and is dropped. */
    size_t chunk = (count + (size_t)n - 1) / (size_t)n;
    float *padded = calloc((size_t)n * chunk + 1, sizeof *padded);
    float *mine = malloc((chunk + 1) * sizeof *mine);
    if (!padded || !mine) abort();
    memcpy(padded, buf, count * sizeof *buf);
    ring_reduce_scatter(ring, rank, padded, mine, chunk); /* rank r: block r, summed */
    ring_all_gather(ring, rank, mine, padded, chunk);     /* every block to every rank */
    memcpy(buf, padded, count * sizeof *buf);
    free(padded);
    free(mine);
}

/* The bytes one rank sends in that all-reduce of `count` fp32 floats over n ranks. */
size_t ring_all_reduce_sent_bytes(size_t count, int n) {
    size_t chunk = (count + (size_t)n - 1) / (size_t)n;
    return 2 * (size_t)(n - 1) * chunk * sizeof(float); /* reduce-scatter, then all-gather */
}
