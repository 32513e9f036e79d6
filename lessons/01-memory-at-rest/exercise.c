/* Lesson 01: DDP versus FSDP, memory at rest. How many bytes does each GPU hold? */
#include "exercise.h"

/* Read lessons/01-memory-at-rest/README.md, fill in the two TODOs, then run
 *   ./fsdp lessons check 01
 * Helpers you add should be `static`. */

/* Under DDP every GPU keeps the whole model: all `params` parameters in fp32, a gradient for
 * each, and Adam's m and v for each. */
RestMemory ddp_rest_memory(size_t params) {
    (void)params; /* TODO: delete this line when you use it */
    RestMemory m = {0};
    /* TODO: fill m.params, m.grads, m.adam and m.total */
    return m;
}

/* Under FSDP (FULL_SHARD, ZeRO-3) on `gpus` GPUs each GPU keeps only its shard of all three.
 * Assume `params` divides evenly by `gpus` (lesson 02 deals with the remainder). */
RestMemory fsdp_rest_memory(size_t params, int gpus) {
    (void)params, (void)gpus; /* TODO: delete this line when you use them */
    RestMemory m = {0};
    /* TODO: fill m.params, m.grads, m.adam and m.total */
    return m;
}
