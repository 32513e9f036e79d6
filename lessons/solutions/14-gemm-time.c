/* Lesson 14: how slow. How long does a GPU take for a GEMM of a given shape, and for the
 * memory-bound kernels between the GEMMs?
 * The reference solution: ./fsdp lessons check 14 --file lessons/solutions/14-gemm-time.c */
#include <math.h>

#include "exercise.h"

enum { TILE = 128 }; /* a tile's rows and columns of the output */

/* Seconds of the math of an [m, k] by [k, n] product: 128 x 128 tiles of the [m, n] output,
 * each on one SM at g->peak_flops / g->sms x g->gemm_eff, in waves of g->sms tiles; with fewer
 * tiles than SMs, k split over several SMs a tile (each slice at least 128 deep). */
double gemm_seconds(const Gpu *g, double m, double n, double k) {
    double tiles = ceil(m / TILE) * ceil(n / TILE), sms = g->sms;
    double splits = tiles >= sms ? 1 : fmin(floor(sms / tiles), ceil(k / TILE));
    double waves = ceil(tiles * splits / sms);
    double per_sm = g->peak_flops / sms * g->gemm_eff;
    return waves * 2.0 * TILE * TILE * (k / splits) / per_sm;
}

/* Seconds of `kernels` memory-bound kernels that together do `flops` and move `bytes`: each
 * kernel's launch, then the slower of their math at g->peak_flops and their bytes at
 * g->mem_bw x g->mem_eff. */
double kernels_seconds(const Gpu *g, double flops, double bytes, int kernels) {
    double math = flops / g->peak_flops, memory = bytes / (g->mem_bw * g->mem_eff);
    return kernels * g->launch_s + fmax(math, memory);
}
