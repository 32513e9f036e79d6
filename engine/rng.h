/* rng: a counter-based generator. Every number is a pure function of (seed, stream,
 * index), so a rank can draw exactly the elements of its own rows and the result never
 * depends on the world size or on the order things are drawn in. */
#ifndef FSDP_RNG_H
#define FSDP_RNG_H

#include <stdint.h>

/* 64 well-mixed bits for (seed, stream, index). */
uint64_t rng_bits(uint64_t seed, uint64_t stream, uint64_t index);
/* Uniform in [0, 1) with 24 bits of precision. */
float rng_uniform(uint64_t seed, uint64_t stream, uint64_t index);
/* Standard normal (Box-Muller on two draws derived from index). */
float rng_normal(uint64_t seed, uint64_t stream, uint64_t index);
/* Hash of a string, to key streams by parameter name. */
uint64_t rng_hash_string(const char *s);
/* Fisher-Yates permutation of 0..n-1 keyed by (seed, stream). */
void rng_permutation(uint64_t seed, uint64_t stream, long *out, long n);

#endif
