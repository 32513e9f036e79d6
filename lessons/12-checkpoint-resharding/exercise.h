/* Lesson 12's functions: exercise.c defines them, check.c calls them. Do not edit. */
#ifndef LESSON_12_EXERCISE_H
#define LESSON_12_EXERCISE_H

#include <stddef.h>

/* One piece of one tensor in a checkpoint, as meta.json lists it: rows
 * [row_begin, row_begin + rows) of the tensor, saved by rank `rank` into its file
 * rank-RRRRR.bin at byte `offset`, row after row, fp32. */
typedef struct SavedPiece {
    int rank;
    size_t row_begin, rows;
    unsigned long long offset;
} SavedPiece;

/* One read a loading rank makes: `rows` rows from byte `offset` of saved rank `rank`'s file,
 * which become rows [into_row, into_row + rows) of what the loading rank keeps (row 0 there
 * is the first row it keeps). */
typedef struct RowRead {
    int rank;
    unsigned long long offset;
    size_t rows;
    size_t into_row;
} RowRead;

int saved_ranks_to_read(size_t d0, int saved_world, int load_world, int r, int *first);
int plan_reads(const SavedPiece *saved, int nsaved, size_t row_elems, size_t want_begin,
               size_t want_rows, RowRead *reads);

#endif
