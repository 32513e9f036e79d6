/* dtype: the element types the engine moves and computes in (fp32, bf16, fp16) and the
 * scalar conversions between them, round-to-nearest-even like PyTorch and CUDA.
 * Pure functions; no allocation, no state. */
#ifndef FSDP_DTYPE_H
#define FSDP_DTYPE_H

#include <stddef.h>
#include <stdint.h>

typedef enum { DTYPE_FP32 = 0, DTYPE_BF16, DTYPE_FP16, DTYPE_COUNT } DType;

size_t dtype_size(DType t);
const char *dtype_name(DType t);            /* "fp32", "bf16", "fp16" */
int dtype_parse(const char *s, DType *out); /* 0 on success, -1 if unknown */

/* The IEEE-754 bits of x, and the float of bits u (memcpy: C's defined way to reinterpret). */
uint32_t fp32_bits(float x);
float fp32_from_bits(uint32_t u);

uint16_t fp32_to_bf16(float x); /* round to nearest even; NaN stays NaN */
float bf16_to_fp32(uint16_t h);
uint16_t fp32_to_fp16(float x); /* RNE; overflow -> inf; subnormals kept */
float fp16_to_fp32(uint16_t h);

/* x rounded to the nearest value representable in t (identity for fp32). */
float dtype_round(DType t, float x);

/* Element i of an array of t, widened to fp32 (exact); x rounded into element i of one. */
float dtype_load(const void *src, DType t, size_t i);
void dtype_store(void *dst, DType t, size_t i, float x);
/* Element i of an array of t: where a tensor's rows or columns start inside another. */
static inline void *dtype_at(const void *p, DType t, size_t i) {
    return (char *)p + i * dtype_size(t);
}

/* n elements at once: src's of t widened into dst (exact), src rounded into dst's of t. */
void dtype_widen(float *dst, const void *src, DType t, size_t n);
void dtype_narrow(void *dst, DType t, const float *src, size_t n);

#endif
