/* Helpers of the GPU tests: skip where there is no GPU, move arrays between host and device,
 * and poison device outputs so a kernel that forgets to write one cannot pass. */
#ifndef FSDP_GPU_UTIL_H
#define FSDP_GPU_UTIL_H

#include <stddef.h>

/* Skips the calling test (cr_skip_test) with the reason when no GPU is usable, and binds the
 * thread's kernels_cuda context to the default stream. */
void gpu_or_skip(void);
/* Releases what gpu_or_skip bound. */
void gpu_done(void);

void *gpu_alloc(size_t bytes); /* asserts */
void gpu_free(void *p);
void gpu_put(void *dst, const void *host, size_t bytes); /* host -> device */
void gpu_get(void *host, const void *src, size_t bytes); /* device -> host, synchronises */
void gpu_poison(void *p, size_t bytes);                  /* fills with NaN bits (0xFF) */
/* A device copy of n host floats. */
float *gpu_floats(const float *host, size_t n);
/* Asserts the thread's kernels met no CUDA error. */
void gpu_check(void);

/* Expects ||got - want|| <= rel * ||want|| (L2 over n elements; an all-zero want needs got all
 * zero) and every got[i] finite where want[i] is: NaN never passes. `what` names the output. */
void gpu_expect_close(const float *got, const float *want, size_t n, double rel, const char *what);
/* n floats uniform in [lo, hi) from a seeded generator (the same seed, the same numbers). */
void gpu_random(float *out, size_t n, float lo, float hi, unsigned seed);

/* Host arrays of n floats (asserted; free them): uninitialised, gpu_random's numbers, zeros,
 * a copy of src. */
float *host_floats(size_t n);
float *host_random(size_t n, float lo, float hi, unsigned seed);
float *host_zeros(size_t n);
float *host_copy(const float *src, size_t n);
/* n floats of device memory, NaN-poisoned (gpu_free it). */
float *gpu_poisoned_floats(size_t n);
/* A host copy of n device floats (free it). */
float *gpu_fetch(const float *d, size_t n);

#endif
