/* dtype: fp32, bf16 and fp16 and the scalar conversions between them, round-to-nearest-even as
 * PyTorch and CUDA do. Pure functions. */
#include "kernels/dtype.h"

#include "base/vector_clones.h"

#include <string.h>

static const struct {
    const char *name, *torch_name;
    size_t size;
} dtype_info[DTYPE_COUNT] = {
    [DTYPE_FP32] = {"fp32", "float32", 4},
    [DTYPE_BF16] = {"bf16", "bfloat16", 2},
    [DTYPE_FP16] = {"fp16", "float16", 2},
};

static int dtype_valid(DType t) {
    return (int)t >= 0 && t < DTYPE_COUNT;
}

size_t dtype_size(DType t) {
    return dtype_valid(t) ? dtype_info[t].size : 0;
}

const char *dtype_name(DType t) {
    return dtype_valid(t) ? dtype_info[t].name : "unknown";
}

/* PyTorch's spellings are accepted too, so "--param-dtype bfloat16" works as users expect. */
int dtype_parse(const char *s, DType *out) {
    if (!s) return -1;
    for (int t = 0; t < DTYPE_COUNT; t++) {
        if (!strcmp(s, dtype_info[t].name) || !strcmp(s, dtype_info[t].torch_name)) {
            *out = (DType)t;
            return 0;
        }
    }
    return -1;
}

#define FP32_ABS_MASK 0x7fffffffu
#define FP32_INF 0x7f800000u

uint32_t fp32_bits(float x) {
    uint32_t u;
    memcpy(&u, &x, sizeof u);
    return u;
}

float fp32_from_bits(uint32_t u) {
    float x;
    memcpy(&x, &u, sizeof x);
    return x;
}

/* Without a branch, so the bulk loops below vectorize it. Adding 0x7fff plus the kept LSB rounds
 * half to even; a carry bumps the exponent, which is right, and the largest finite floats round
 * up to inf exactly as RNE requires. Rounding could carry a NaN's payload into inf (or wipe it),
 * so a NaN sets the quiet bit instead. */
static uint16_t bf16_round_bits(uint32_t u) {
    uint16_t rounded = (uint16_t)((u + 0x7fffu + ((u >> 16) & 1u)) >> 16);
    uint16_t quiet_nan = (uint16_t)((u >> 16) | 0x0040u);
    return (u & FP32_ABS_MASK) > FP32_INF ? quiet_nan : rounded;
}

uint16_t fp32_to_bf16(float x) {
    return bf16_round_bits(fp32_bits(x));
}

float bf16_to_fp32(uint16_t h) {
    return fp32_from_bits((uint32_t)h << 16);
}

/* Magnitudes from 65520 (halfway between fp16's max 65504 and 2^16) up round to inf. */
#define FP16_OVERFLOW_BITS 0x477ff000u
/* Exponent rebias from fp32 (127) to fp16 (15). */
#define FP16_REBIAS (127u - 15u)

/* A value below 2^-14 becomes q units of 2^-24; round the 24-bit significand to q by hand. */
static uint16_t fp16_subnormal(uint32_t abs) {
    uint32_t e = abs >> 23;
    if (e < 102) return 0; /* below 2^-25: less than half the smallest subnormal */
    uint32_t sig = (abs & 0x7fffffu) | 0x800000u;
    uint32_t shift = 126u - e; /* 14..24: sig * 2^(e-150) / 2^-24 == sig >> shift */
    uint32_t q = sig >> shift;
    uint32_t rem = sig & ((1u << shift) - 1u);
    uint32_t half = 1u << (shift - 1u);
    if (rem > half || (rem == half && (q & 1u))) q++; /* q may reach 0x400: the smallest normal */
    return (uint16_t)q;
}

uint16_t fp32_to_fp16(float x) {
    uint32_t u = fp32_bits(x);
    uint16_t sign = (uint16_t)((u >> 16) & 0x8000u);
    uint32_t abs = u & FP32_ABS_MASK;
    if (abs > FP32_INF)
        return (uint16_t)(sign | 0x7e00u); /* a quiet NaN, as PyTorch's conversion gives */
    if (abs >= FP16_OVERFLOW_BITS) return (uint16_t)(sign | 0x7c00u);
    if (abs < ((FP16_REBIAS + 1u) << 23)) return (uint16_t)(sign | fp16_subnormal(abs));
    /* Normal: drop 13 mantissa bits with the same add-and-truncate RNE as bf16; the overflow
     * check above keeps a carry from reaching the inf exponent. */
    uint32_t lsb = (abs >> 13) & 1u;
    return (uint16_t)(sign | ((abs + 0xfffu + lsb - (FP16_REBIAS << 23)) >> 13));
}

float fp16_to_fp32(uint16_t h) {
    uint32_t sign = (uint32_t)(h & 0x8000u) << 16;
    uint32_t exp = (h >> 10) & 0x1fu;
    uint32_t mant = h & 0x3ffu;
    if (exp == 0x1f) return fp32_from_bits(sign | FP32_INF | (mant << 13)); /* inf, NaN payload */
    if (exp == 0) {
        /* zero or subnormal: mant * 2^-24 is exact in fp32 */
        float mag = (float)mant * 0x1p-24f;
        return sign ? -mag : mag;
    }
    return fp32_from_bits(sign | ((exp + FP16_REBIAS) << 23) | (mant << 13));
}

float dtype_round(DType t, float x) {
    switch (t) {
    case DTYPE_BF16:
        return bf16_to_fp32(fp32_to_bf16(x));
    case DTYPE_FP16:
        return fp16_to_fp32(fp32_to_fp16(x));
    default:
        return x;
    }
}

float dtype_load(const void *src, DType t, size_t i) {
    switch (t) {
    case DTYPE_BF16:
        return bf16_to_fp32(((const uint16_t *)src)[i]);
    case DTYPE_FP16:
        return fp16_to_fp32(((const uint16_t *)src)[i]);
    default:
        return ((const float *)src)[i];
    }
}

void dtype_store(void *dst, DType t, size_t i, float x) {
    switch (t) {
    case DTYPE_BF16:
        ((uint16_t *)dst)[i] = fp32_to_bf16(x);
        break;
    case DTYPE_FP16:
        ((uint16_t *)dst)[i] = fp32_to_fp16(x);
        break;
    default:
        ((float *)dst)[i] = x;
        break;
    }
}

/* The loops with the switch outside them, so each is a straight pass the compiler can inline
 * the conversion into. The bf16 ones go in blocks of a fixed count, a trip count GCC's -O2
 * vectorizes (its cheapest cost model takes no loop whose count may leave a remainder), with the
 * remainder one at a time: as plain loops the two were 28% of a bf16 vit-tiny step on an AVX2
 * CPU. */
enum { BLOCK = 16 };
VECTOR_CLONES
void dtype_widen(float *dst, const void *src, DType t, size_t n) {
    const uint16_t *h = src;
    switch (t) {
    case DTYPE_BF16: {
        size_t i = 0;
        for (; i + BLOCK <= n; i += BLOCK)
            for (size_t j = 0; j < BLOCK; j++) dst[i + j] = bf16_to_fp32(h[i + j]);
        for (; i < n; i++) dst[i] = bf16_to_fp32(h[i]);
        break;
    }
    case DTYPE_FP16:
        for (size_t i = 0; i < n; i++) dst[i] = fp16_to_fp32(h[i]);
        break;
    default:
        memcpy(dst, src, n * sizeof *dst);
        break;
    }
}

VECTOR_CLONES
void dtype_narrow(void *dst, DType t, const float *src, size_t n) {
    uint16_t *h = dst;
    switch (t) {
    case DTYPE_BF16: {
        size_t i = 0;
        for (; i + BLOCK <= n; i += BLOCK)
            for (size_t j = 0; j < BLOCK; j++) h[i + j] = fp32_to_bf16(src[i + j]);
        for (; i < n; i++) h[i] = fp32_to_bf16(src[i]);
        break;
    }
    case DTYPE_FP16:
        for (size_t i = 0; i < n; i++) h[i] = fp32_to_fp16(src[i]);
        break;
    default:
        memcpy(dst, src, n * sizeof *src);
        break;
    }
}
