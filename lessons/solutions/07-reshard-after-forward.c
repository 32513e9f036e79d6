/* Lesson 07: reshard_after_forward. Free each unit after its forward and gather it again in
 * backward, or keep it until backward: all-gathers against memory. The reference solution:
 *   ./fsdp lessons check 07 --file lessons/solutions/07-reshard-after-forward.c */
#include "exercise.h"

/* All-gathers one GPU runs in one training step (forward and backward, zero3 or zero2) of a
 * model of these units, in the order forward runs them. */
int all_gathers_per_step(const UnitSize *units, int nunits, int reshard_after_forward) {
    int gathers = nunits; /* forward gathers every unit once */
    if (!reshard_after_forward) return gathers;
    /* backward gathers again every unit forward freed: all but the root */
    for (int u = 0; u < nunits; u++) gathers += !units[u].is_root;
    return gathers;
}

/* The most bytes of unsharded fp32 parameters one GPU holds at any moment of that step, with
 * the default prefetch of one unit. A unit being prefetched is not counted until the GPU waits
 * for its all-gather: till then its bytes are in the all-gather's receive buffer, which the
 * engine books as comm buffers. */
size_t peak_gathered_bytes(const UnitSize *units, int nunits, int reshard_after_forward) {
    size_t root = 0, largest = 0, all = 0;
    for (int u = 0; u < nunits; u++) {
        size_t bytes = units[u].numel * sizeof(float);
        all += bytes;
        if (units[u].is_root)
            root += bytes;
        else if (bytes > largest)
            largest = bytes;
    }
    /* kept: at the end of forward every unit is whole at once */
    if (!reshard_after_forward) return all;
    /* freed: a prefetched unit's parameters land only when it is waited for, after the unit
     * before it was freed, so one unit is whole at a time, beside the root (the prefetch's
     * receive buffer is comm buffers, not counted here) */
    return root + largest;
}
