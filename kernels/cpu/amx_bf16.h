/* amx_bf16: bf16 matrix products on AMX tiles (Sapphire Rapids and later), fp32 accumulation:
 * what the CPU table's bf16 Linears use where the CPU has them. */
#pragma once

#include <stddef.h>
#include <stdint.h>

/* A bf16 matrix by its strides: element (r, c) at p[r * row_stride + c * col_stride], so a
 * transposed operand is the same memory with its strides swapped. */
typedef struct AmxMatrix {
    const uint16_t *p;
    size_t row_stride, col_stride;
} AmxMatrix;

/* 1 if this CPU has AMX-BF16 and Linux granted the process its tiles (asked once, on the first
 * call); 0 as well when FSDP_CPU_AMX=0 is in the environment (the widening path, to compare). */
int amx_bf16_available(void);

/* C[M, N] (fp32, rows ldc apart) = (accumulate ? C : 0) + A[M, K] B[K, N]: every element's k in
 * order, 32 at a time, so the result is the same for any split over the bound pool (by rows of
 * C). bf16 subnormals count as zero, as the tiles take them. Needs amx_bf16_available(). */
void amx_bf16_gemm(float *c, size_t ldc, const AmxMatrix *a, const AmxMatrix *b, size_t M, size_t N,
                   size_t K, int accumulate);
