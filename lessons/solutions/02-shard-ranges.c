/* Lesson 02: shard ranges. Which rows of a parameter does each GPU keep?
 * The reference solution: ./fsdp lessons check 02 --file lessons/solutions/02-shard-ranges.c */
#include "exercise.h"

/* Rank r of S GPUs keeps rows [*begin, *begin + *rows) of a tensor with d0 rows on dim 0,
 * split the way torch.chunk(S, dim=0) splits it: every piece has ceil(d0 / S) rows except
 * that the last ones may be shorter, or empty. Rank r's rows begin at r * ceil(d0 / S) and
 * end at d0 at the latest. An empty shard (r * ceil(d0 / S) at or past d0) begins at d0 with
 * 0 rows: d0=5, S=4, r=3 gives begin=5 rows=0. size_t is unsigned: a difference that would
 * be negative wraps around to a huge number, so clamp before you subtract. */
void shard_range(size_t d0, int S, int r, size_t *begin, size_t *rows) {
    size_t chunk = wire_rows(d0, S);
    size_t b = chunk * (size_t)r;
    if (b > d0) b = d0; /* past the end: an empty shard that starts at the end */
    size_t e = b + chunk > d0 ? d0 : b + chunk;
    *begin = b;
    *rows = e - b;
}

/* The rows every rank's block reserves when the shards travel in one collective: a
 * collective moves the same count from every rank, so short and empty shards are padded. */
size_t wire_rows(size_t d0, int S) {
    return (d0 + (size_t)S - 1) / (size_t)S;
}

/* Elements rank r keeps of a whole model: its rows of every tensor, whole rows each. */
size_t rank_numel(const TensorShape *tensors, int ntensors, int S, int r) {
    size_t total = 0;
    for (int i = 0; i < ntensors; i++) {
        size_t begin, rows;
        shard_range(tensors[i].d0, S, r, &begin, &rows);
        total += rows * tensors[i].row_elems;
    }
    return total;
}
