/* Helpers of the GPU tests: skip where there is no GPU, move arrays between host and device,
 * and poison device outputs so a kernel that forgets to write one cannot pass. */
#ifndef FSDP_GPU_UTIL_H
#define FSDP_GPU_UTIL_H

#include <stddef.h>

#include "tests/util.h" /* host_floats, host_zeros, host_copy, host_biased, fmt_text */

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
 * zero), every |got[i] - want[i]| <= 8 * rel * max|want| (one wrong element cannot hide in a
 * large array; gpu_util.c says why 8) and every got[i] finite where want[i] is: NaN never
 * passes. `what` names the output. */
void gpu_expect_close(const float *got, const float *want, size_t n, double rel, const char *what);
/* Parameters after Adam steps against a reference, where a gradient near zero may take the other
 * sign and move its parameter up to `drift` (2 * lr a step) away: every value within drift +
 * rel * max|want|, and at most one in a thousand (at least one) beyond rel * max|want|. */
void gpu_expect_params_close(const float *got, const float *want, size_t n, double rel,
                             double drift, const char *what);
/* Checks of n floats of device memory `d` against the host's `want` (fmt_text names a case):
 * within rel (as gpu_expect_close), and want's bits exactly (copies, single adds, run to run). */
void gpu_expect_close_dev(const float *d, const float *want, size_t n, double rel,
                          const char *what);
void gpu_expect_same_dev(const float *d, const float *want, size_t n, const char *what);
/* Device arrays a and b (the reference) within rel of each other. */
void gpu_expect_close_devs(const float *a, const float *b, size_t n, double rel, const char *what);
/* The CPU's erf is Abramowitz & Stegun 7.1.26, within 1.5e-7 of erf (kernels/cpu/vit_cpu.c, as
 * PyTorch's vectorised CPU GELU), the GPU's CUDA's erff, so GELU = x/2 (1 + erf(x/sqrt 2)) may
 * differ between them by |x|/2 x 1.5e-7, and by |x|/2 x 1.2e-7 more for 1 + erf's rounding. In
 * the negative tail GELU is near 0 (-1.4e-6 at x = -5), so that is far above 1e-5 of the value:
 * the first GPU run (an H100, 2026-11-25) failed relative L2 at a shape of a few elements all in
 * the tail by 1.5e-4, 2e-7 absolute. The fused and the dtype tests hold each GELU output
 * within their relative bound plus that one. */
#define GELU_ERF_ABS (1.5e-7 + 1.2e-7)
/* GELU's outputs at inputs x (all host floats): every |got - want| <= rel |want| + GELU_ERF_ABS
 * |x| / 2 + step, step being the smallest step of the dtype the outputs were rounded to (0 in
 * fp32). `what` names the output. */
void gpu_expect_gelu_close(const float *got, const float *want, const float *x, size_t n,
                           double rel, double step, const char *what);
/* n floats uniform in [lo, hi) from a seeded generator (the same seed, the same numbers). */
void gpu_random(float *out, size_t n, float lo, float hi, unsigned seed);

/* n host floats of gpu_random's numbers (asserted; free it). */
float *host_random(size_t n, float lo, float hi, unsigned seed);
/* n floats of device memory, NaN-poisoned (gpu_free it). */
float *gpu_poisoned_floats(size_t n);
/* A host copy of n device floats (free it). */
float *gpu_fetch(const float *d, size_t n);

#endif
