/* rng: a counter-based generator (splitmix64's finaliser over seed, stream and index), so every
 * number is a pure function of where it is drawn, never of the order or the world size. */
#include "engine/rng.h"

#include <math.h>

/* splitmix64's finaliser: a bijection with good avalanche, cheap enough per element. */
static uint64_t mix64(uint64_t z) {
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    return z ^ (z >> 31);
}

uint64_t rng_bits(uint64_t seed, uint64_t stream, uint64_t index) {
    uint64_t key = mix64(seed + 0x9e3779b97f4a7c15ULL) ^ mix64(stream * 0xd1b54a32d192ed03ULL);
    return mix64(key + index * 0x9e3779b97f4a7c15ULL);
}

float rng_uniform(uint64_t seed, uint64_t stream, uint64_t index) {
    return (float)(rng_bits(seed, stream, index) >> 40) * (1.0f / 16777216.0f);
}

float rng_normal(uint64_t seed, uint64_t stream, uint64_t index) {
    uint64_t bits = rng_bits(seed, stream ^ 0x6a09e667f3bcc909ULL, index);
    /* two 32-bit uniforms in (0, 1]: never log(0) */
    double u1 = ((double)(bits >> 32) + 1.0) / 4294967296.0;
    double u2 = (double)(bits & 0xffffffffULL) / 4294967296.0;
    return (float)(sqrt(-2.0 * log(u1)) * cos(6.283185307179586 * u2));
}

uint64_t rng_hash_string(const char *s) {
    uint64_t h = 0xcbf29ce484222325ULL; /* FNV-1a, then mixed */
    for (; *s; s++) h = (h ^ (unsigned char)*s) * 0x100000001b3ULL;
    return mix64(h);
}

void rng_permutation(uint64_t seed, uint64_t stream, long *out, long n) {
    for (long i = 0; i < n; i++) out[i] = i;
    for (long i = n - 1; i > 0; i--) {
        long j = (long)(rng_bits(seed, stream, (uint64_t)i) % (uint64_t)(i + 1));
        long t = out[i];
        out[i] = out[j];
        out[j] = t;
    }
}
