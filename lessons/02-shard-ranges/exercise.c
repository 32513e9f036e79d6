/* Lesson 02: shard ranges. Which rows of a parameter does each GPU keep? */
#include "exercise.h"

/* Read lessons/02-shard-ranges/README.md, fill in the three TODOs, then run
 *   ./fsdp lessons check 02
 * Helpers you add should be `static`. */

/* Rank r of S GPUs keeps rows [*begin, *begin + *rows) of a tensor with d0 rows on dim 0,
 * split the way torch.chunk(S, dim=0) splits it: every piece has ceil(d0 / S) rows except
 * that the last ones may be shorter, or empty. Rank r's rows begin at r * ceil(d0 / S) and
 * end at d0 at the latest. An empty shard (r * ceil(d0 / S) at or past d0) begins at d0 with
 * 0 rows: d0=5, S=4, r=3 gives begin=5 rows=0. size_t is unsigned: a difference that would
 * be negative wraps around to a huge number, so clamp before you subtract. */
void shard_range(size_t d0, int S, int r, size_t *begin, size_t *rows) {
    (void)d0, (void)S, (void)r; /* TODO: delete this line when you use them */
    *begin = 0;                 /* TODO */
    *rows = 0;                  /* TODO */
}

/* The rows every rank's block reserves when the shards travel in one collective: a
 * collective moves the same count from every rank, so short and empty shards are padded. */
size_t wire_rows(size_t d0, int S) {
    (void)d0, (void)S; /* TODO: delete this line when you use them */
    return 0;          /* TODO */
}

/* Elements rank r keeps of a whole model: its rows of every tensor, whole rows each. */
size_t rank_numel(const TensorShape *tensors, int ntensors, int S, int r) {
    (void)tensors, (void)ntensors, (void)S, (void)r; /* TODO: delete this line when you use them */
    return 0;                                        /* TODO */
}
