/* Lesson 12: checkpoint resharding. N ranks saved a checkpoint, each its own rows; M ranks
 * load it. Which files, and which rows of them, does each loading rank read? */
#include "exercise.h"

/* Read lessons/12-checkpoint-resharding/README.md, fill in the two TODOs, then run
 *   ./fsdp lessons check 12
 * Helpers you add should be `static`. */

/* A tensor of d0 rows was saved by saved_world ranks, each its torch.chunk rows (lesson 02).
 * Rank r of load_world ranks keeps its torch.chunk rows at load_world. Returns how many saved
 * ranks' files hold some of those rows; they are consecutive ranks, and *first is the lowest
 * of them (0 when none is needed: the rank keeps no rows of this tensor). */
int saved_ranks_to_read(size_t d0, int saved_world, int load_world, int r, int *first) {
    (void)d0, (void)saved_world, (void)load_world, (void)r; /* TODO: delete this line */
    *first = -1;                                            /* TODO */
    return -1;                                              /* TODO */
}

/* A loading rank keeps rows [want_begin, want_begin + want_rows) of a tensor whose rows have
 * row_elems elements each. saved[0..nsaved) are the pieces of that tensor in the checkpoint,
 * in meta.json's order. Fill reads[] with one read per piece that holds some of the wanted
 * rows, in the order of saved[], and return how many (reads has room for nsaved). */
int plan_reads(const SavedPiece *saved, int nsaved, size_t row_elems, size_t want_begin,
               size_t want_rows, RowRead *reads) {
    (void)saved, (void)nsaved, (void)row_elems, (void)want_begin, (void)want_rows; /* TODO */
    (void)reads; /* TODO: delete these two lines when you use them */
    return 0;    /* TODO */
}
