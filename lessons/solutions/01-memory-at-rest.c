/* Lesson 01: DDP versus FSDP, memory at rest. How many bytes does each GPU hold?
 * The reference solution: ./fsdp lessons check 01 --file lessons/solutions/01-memory-at-rest.c */
#include "exercise.h"

/* Bytes of one fp32 number. */
#define FP32_BYTES 4

/* Under DDP every GPU keeps the whole model: all `params` parameters in fp32, a gradient for
 * each, and Adam's m and v for each. */
RestMemory ddp_rest_memory(size_t params) {
    RestMemory m;
    m.params = params * FP32_BYTES;
    m.grads = params * FP32_BYTES;
    m.adam = 2 * params * FP32_BYTES; /* m and v */
    m.total = m.params + m.grads + m.adam;
    return m;
}

/* Under FSDP (FULL_SHARD, ZeRO-3) on `gpus` GPUs each GPU keeps only its shard of all three.
 * Assume `params` divides evenly by `gpus` (lesson 02 deals with the remainder). */
RestMemory fsdp_rest_memory(size_t params, int gpus) {
    return ddp_rest_memory(params / (size_t)gpus); /* DDP's bytes for the GPU's share */
}
