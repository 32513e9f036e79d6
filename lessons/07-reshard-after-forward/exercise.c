/* Lesson 07: reshard_after_forward. Free each unit after its forward and gather it again in
 * backward, or keep it until backward: all-gathers against memory. */
#include "exercise.h"

/* Read lessons/07-reshard-after-forward/README.md, fill in the two TODOs, then run
 *   ./fsdp lessons check 07
 * Helpers you add should be `static`. */

/* All-gathers one GPU runs in one training step (forward and backward, zero3 or zero2) of a
 * model of these units, in the order forward runs them. */
int all_gathers_per_step(const UnitSize *units, int nunits, int reshard_after_forward) {
    (void)units, (void)nunits, (void)reshard_after_forward; /* TODO: delete this line */
    return -1;                                              /* TODO */
}

/* The most bytes of unsharded fp32 parameters one GPU holds at any moment of that step, with
 * the default prefetch of one unit. A unit being prefetched is not counted until the GPU waits
 * for its all-gather: till then its bytes are in the all-gather's receive buffer, which the
 * engine books as comm buffers. */
size_t peak_gathered_bytes(const UnitSize *units, int nunits, int reshard_after_forward) {
    (void)units, (void)nunits, (void)reshard_after_forward; /* TODO: delete this line */
    return 0;                                               /* TODO */
}
