/* Lesson 11's functions: exercise.c defines them, check.c calls them. Do not edit. */
#ifndef LESSON_11_EXERCISE_H
#define LESSON_11_EXERCISE_H

#include <stddef.h>

/* The shape of one parameter tensor as sharding sees it (lesson 02): d0 rows on dim 0, each
 * of row_elems elements. */
typedef struct TensorShape {
    size_t d0;
    size_t row_elems;
} TensorShape;

/* One FSDP unit: its parameters, and how many times one training step all-gathers it (once
 * in forward, and again in backward when forward freed it). */
typedef struct UnitInfo {
    const TensorShape *params;
    int nparams;
    int gathers;
} UnitInfo;

/* Bytes one GPU copies over PCIe in one step: host to device, device to host. */
typedef struct PcieBytes {
    size_t h2d, d2h;
} PcieBytes;

size_t shard_bytes(const TensorShape *params, int nparams, int world, int rank, size_t dtype_bytes);
PcieBytes cpu_offload_bytes(const UnitInfo *units, int nunits, int world, int rank,
                            size_t param_bytes, size_t grad_bytes);
PcieBytes optimizer_offload_bytes(const UnitInfo *units, int nunits, int world, int rank,
                                  size_t param_bytes, size_t grad_bytes);

#endif
