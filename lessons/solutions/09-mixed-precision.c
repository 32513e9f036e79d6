/* Lesson 09: mixed precision. bf16 halves the bytes a unit puts on the wire; the sum of the
 * gradients still wants fp32.
 * The reference solution: ./fsdp lessons check 09 --file lessons/solutions/09-mixed-precision.c */
#include <math.h>
#include <string.h>

#include "exercise.h"

/* The bf16 value nearest to x, as its 16 bits: the top half of x's fp32 bits, rounded to
 * nearest with ties to even. inf stays inf, a NaN stays a NaN, and a finite value too large
 * for bf16 becomes inf. */
uint16_t bf16_round(float x) {
    uint32_t u;
    memcpy(&u, &x, sizeof u); /* the defined way to read a float's bits in C */
    /* A NaN first: adding to its bits could carry its payload into inf, or past the sign
     * bit. Keep its top half and set the quiet bit, so it stays a NaN. */
    if ((u & 0x7fffffffu) > 0x7f800000u) return (uint16_t)((u >> 16) | 0x0040u);
    /* Adding just under half of the dropped part (0x7fff), plus one more when the kept
     * half is odd, rounds to nearest with ties to even. A carry out of the mantissa bumps
     * the exponent, which is right, and the largest finite floats carry into inf. */
    uint32_t keep_lsb = (u >> 16) & 1u;
    return (uint16_t)((u + 0x7fffu + keep_lsb) >> 16);
}

/* The fp32 value of bf16 bits h: exact, every bf16 value is an fp32 value. */
float bf16_widen(uint16_t h) {
    uint32_t u = (uint32_t)h << 16;
    float x;
    memcpy(&x, &u, sizeof x);
    return x;
}

/* The bytes of the buffer one all-gather (or one reduce-scatter) of an FSDP unit hands to the
 * collective on each of `world` ranks, when its elements travel as dtype_bytes bytes each:
 * every rank's padded block of every parameter of the unit (lesson 02's wire rows). */
size_t unit_collective_bytes(const TensorShape *params, int nparams, int world,
                             size_t dtype_bytes) {
    size_t block = 0; /* one rank's padded block, in elements */
    for (int i = 0; i < nparams; i++) {
        size_t wire_rows = (params[i].d0 + (size_t)world - 1) / (size_t)world;
        block += wire_rows * params[i].row_elems;
    }
    return (size_t)world * block * dtype_bytes;
}

/* g[0] + g[1] + ... + g[n-1], added in that order in fp32. */
float sum_fp32(const float *g, size_t n) {
    float sum = 0.0f;
    for (size_t i = 0; i < n; i++) sum += g[i];
    return sum;
}

static float to_bf16(float x) {
    return bf16_widen(bf16_round(x));
}

/* The same sum kept in bf16: each g[i] is rounded to bf16 (it travels in bf16), and the
 * running sum is rounded to bf16 after every addition (it is stored in bf16). */
float sum_bf16(const float *g, size_t n) {
    float sum = 0.0f;
    for (size_t i = 0; i < n; i++) sum = to_bf16(sum + to_bf16(g[i]));
    return sum;
}
