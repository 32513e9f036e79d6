/* Lesson 14: how slow. How long does a GPU take for a GEMM of a given shape, and for the
 * memory-bound kernels between the GEMMs? */
#include "exercise.h"

/* Read lessons/14-gemm-time/README.md, fill in the two TODOs, then run
 *   ./fsdp lessons check 14
 * Helpers you add should be `static`; <math.h>'s ceil and floor are there to include. */

/* Seconds of the math of an [m, k] by [k, n] product: 128 x 128 tiles of the [m, n] output,
 * each on one SM at g->peak_flops / g->sms x g->gemm_eff, in waves of g->sms tiles; with fewer
 * tiles than SMs, k split over several SMs a tile (each slice at least 128 deep). */
double gemm_seconds(const Gpu *g, double m, double n, double k) {
    /* TODO: delete the next line when you use them */
    (void)g, (void)m, (void)n, (void)k;
    return 0; /* TODO */
}

/* Seconds of `kernels` memory-bound kernels that together do `flops` and move `bytes`: each
 * kernel's launch, then the slower of their math at g->peak_flops and their bytes at
 * g->mem_bw x g->mem_eff. */
double kernels_seconds(const Gpu *g, double flops, double bytes, int kernels) {
    /* TODO: delete the next line when you use them */
    (void)g, (void)flops, (void)bytes, (void)kernels;
    return 0; /* TODO */
}
