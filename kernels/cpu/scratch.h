/* scratch: each thread's reusable host buffers for the CPU kernels' temporaries (bf16 and fp16
 * operands widened to fp32, AMX's packed tiles), so a step's thousands of ops do not each map
 * and fault in fresh pages. */
#pragma once

#include <stddef.h>

/* At least `bytes` (64-byte aligned, contents undefined) from this thread's cache of buffers
 * put back, the smallest that holds them, else a new one. Out of host memory: one line, abort
 * (an op has no caller to tell). */
void *scratch_get(size_t bytes);
/* p (from scratch_get on this thread, or NULL) back to this thread's cache; the cache keeps the
 * SCRATCH_KEEP largest and frees the rest, and all of them when the thread ends. */
void scratch_put(void *p);
