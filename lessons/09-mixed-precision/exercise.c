/* Lesson 09: mixed precision. bf16 halves the bytes a unit puts on the wire; the sum of the
 * gradients still wants fp32. */
#include <math.h>
#include <string.h>

#include "exercise.h"

/* Read lessons/09-mixed-precision/README.md, fill in the five TODOs, then run
 *   ./fsdp lessons check 09
 * Helpers you add should be `static`. */

/* The bf16 value nearest to x, as its 16 bits: the top half of x's fp32 bits, rounded to
 * nearest with ties to even. inf stays inf, a NaN stays a NaN, and a finite value too large
 * for bf16 becomes inf. */
uint16_t bf16_round(float x) {
    (void)x;  /* TODO: delete this line when you use x */
    return 0; /* TODO */
}

/* The fp32 value of bf16 bits h: exact, every bf16 value is an fp32 value. */
float bf16_widen(uint16_t h) {
    (void)h;  /* TODO: delete this line when you use h */
    return 0; /* TODO */
}

/* The bytes of the buffer one all-gather (or one reduce-scatter) of an FSDP unit hands to the
 * collective on each of `world` ranks, when its elements travel as dtype_bytes bytes each:
 * every rank's padded block of every parameter of the unit (lesson 02's wire rows). */
size_t unit_collective_bytes(const TensorShape *params, int nparams, int world,
                             size_t dtype_bytes) {
    (void)params, (void)nparams, (void)world, (void)dtype_bytes; /* TODO: delete this line */
    return 0;                                                    /* TODO */
}

/* g[0] + g[1] + ... + g[n-1], added in that order in fp32. */
float sum_fp32(const float *g, size_t n) {
    (void)g, (void)n; /* TODO: delete this line when you use them */
    return NAN;       /* TODO */
}

/* The same sum kept in bf16: each g[i] is rounded to bf16 (it travels in bf16), and the
 * running sum is rounded to bf16 after every addition (it is stored in bf16). */
float sum_bf16(const float *g, size_t n) {
    (void)g, (void)n; /* TODO: delete this line when you use them */
    return NAN;       /* TODO */
}
