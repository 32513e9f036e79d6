/* cuda_ops: the functions kernels_cuda's table holds, one per op of kernels/kernels.h with the
 * same signature and meaning (documented there once). Internal to kernels/cuda. */
#ifndef FSDP_CUDA_OPS_H
#define FSDP_CUDA_OPS_H

#include <stddef.h>
#include <stdint.h>

#include "kernels/kernels.h"

#ifdef __cplusplus
extern "C" {
#endif

/* cuda_<op> for every op of the table, with the op's own type. */
#define CUDA_DECLARE(op) KERNEL_OP_TYPE(op) cuda_##op;
KERNEL_OPS(CUDA_DECLARE)
#undef CUDA_DECLARE

#ifdef __cplusplus
}
#endif

#endif
