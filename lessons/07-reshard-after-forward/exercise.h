/* Lesson 07's functions: exercise.c defines them, check.c calls them. Do not edit. */
#ifndef LESSON_07_EXERCISE_H
#define LESSON_07_EXERCISE_H

#include <stddef.h>

/* One FSDP unit as this lesson needs it: how many parameters it has (all of them, unsharded)
 * and whether it is the root unit. */
typedef struct UnitSize {
    size_t numel;
    int is_root;
} UnitSize;

/* All-gathers one GPU runs in one training step (forward and backward, zero3 or zero2) of a
 * model of these units, in the order forward runs them. */
int all_gathers_per_step(const UnitSize *units, int nunits, int reshard_after_forward);

/* The most bytes of unsharded fp32 parameters one GPU holds at any moment of that step, with
 * the default prefetch of one unit. A unit being prefetched is not counted until the GPU waits
 * for its all-gather: till then its bytes are in the all-gather's receive buffer, which the
 * engine books as comm buffers. */
size_t peak_gathered_bytes(const UnitSize *units, int nunits, int reshard_after_forward);

#endif
