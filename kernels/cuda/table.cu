/* The op table on the GPU: every entry is a function of cuda_ops.h. */
#include "kernels/cuda/cuda_ops.h"
#include "kernels/cuda/kernels_cuda.h"

#define CUDA_OP(op) cuda_##op,
// bf16/fp16 forms exist: KERNEL_ALL_DTYPES once tests/gpu/test_cuda_dtypes.c passes on a GPU
extern "C" const Kernels kernels_cuda = {"cuda", KERNEL_DTYPE_BIT(DTYPE_FP32), KERNELS_MAX_TOKENS,
                                          KERNEL_OPS(CUDA_OP)};
