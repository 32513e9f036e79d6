/* Lesson 12: checkpoint resharding. N ranks saved a checkpoint, each its own rows; M ranks load
 * it. Which files, and which rows of them, does each loading rank read? The reference solution:
 *   ./fsdp lessons check 12 --file lessons/solutions/12-checkpoint-resharding.c */
#include "exercise.h"

/* torch.chunk's rows of rank r of `world`: [*begin, *begin + *rows), maybe empty. */
static void chunk_rows(size_t d0, int world, int r, size_t *begin, size_t *rows) {
    size_t chunk = (d0 + (size_t)world - 1) / (size_t)world;
    size_t b = chunk * (size_t)r;
    if (b > d0) b = d0;
    *begin = b;
    *rows = (b + chunk > d0 ? d0 : b + chunk) - b;
}

/* A tensor of d0 rows was saved by saved_world ranks, each its torch.chunk rows (lesson 02).
 * Rank r of load_world ranks keeps its torch.chunk rows at load_world. Returns how many saved
 * ranks' files hold some of those rows; they are consecutive ranks, and *first is the lowest
 * of them (0 when none is needed: the rank keeps no rows of this tensor). */
int saved_ranks_to_read(size_t d0, int saved_world, int load_world, int r, int *first) {
    size_t begin, rows;
    chunk_rows(d0, load_world, r, &begin, &rows);
    *first = 0;
    if (rows == 0) return 0;
    /* saved rank k holds rows from k * chunk on: the wanted rows' first and last row say
     * which saved ranks hold them, and every rank between holds some too */
    size_t saved_chunk = (d0 + (size_t)saved_world - 1) / (size_t)saved_world;
    int lowest = (int)(begin / saved_chunk);
    int highest = (int)((begin + rows - 1) / saved_chunk);
    *first = lowest;
    return highest - lowest + 1;
}

/* A loading rank keeps rows [want_begin, want_begin + want_rows) of a tensor whose rows have
 * row_elems elements each. saved[0..nsaved) are the pieces of that tensor in the checkpoint,
 * in meta.json's order. Fill reads[] with one read per piece that holds some of the wanted
 * rows, in the order of saved[], and return how many (reads has room for nsaved). */
int plan_reads(const SavedPiece *saved, int nsaved, size_t row_elems, size_t want_begin,
               size_t want_rows, RowRead *reads) {
    size_t want_end = want_begin + want_rows, row_bytes = row_elems * sizeof(float);
    int n = 0;
    for (int i = 0; i < nsaved; i++) {
        const SavedPiece *p = &saved[i];
        size_t saved_end = p->row_begin + p->rows;
        /* the rows both hold: [lo, hi) */
        size_t lo = p->row_begin > want_begin ? p->row_begin : want_begin;
        size_t hi = saved_end < want_end ? saved_end : want_end;
        if (lo >= hi) continue;
        reads[n++] = (RowRead){.rank = p->rank,
                               .offset = p->offset + (lo - p->row_begin) * row_bytes,
                               .rows = hi - lo,
                               .into_row = lo - want_begin};
    }
    return n;
}
