/* Lesson 01's functions: exercise.c defines them, check.c calls them. Do not edit. */
#ifndef LESSON_01_EXERCISE_H
#define LESSON_01_EXERCISE_H

#include <stddef.h>

/* What one GPU holds between training steps ("at rest"), in bytes, for training in fp32
 * with Adam. */
typedef struct RestMemory {
    size_t params; /* the parameters (or this GPU's shard of them) */
    size_t grads;  /* their gradients */
    size_t adam;   /* Adam's two moments, m and v, for each of those parameters */
    size_t total;  /* the three together */
} RestMemory;

RestMemory ddp_rest_memory(size_t params);
RestMemory fsdp_rest_memory(size_t params, int gpus);

#endif
