/* The op table on the GPU: every entry is a function of cuda_ops.h. */
#include "kernels/cuda/cuda_ops.h"
#include "kernels/cuda/kernels_cuda.h"

#define CUDA_OP(op) cuda_##op,
// bf16/fp16 forms exist: KERNEL_ALL_DTYPES once tests/gpu/test_cuda_dtypes.c passes on a GPU.
// Eager attention keeps a row of probabilities in shared memory: KERNELS_MAX_TOKENS. Flash
// attention (flash_attention.cu) is tiled and takes any T, but no GPU has run it yet: its limit
// becomes 0 once tests/gpu (test_cuda_llama_ops.c, test_cuda_dtypes.c) pass on a GPU.
// Flash's backward recomputes its probabilities on chip: no work tile (flash_uses_work 0).
// copy_spans (a unit's spans in one launch) is NULL here, so the engine makes a launch a span as
// it did before, until tests/gpu/test_cuda_elementwise.c's copy_spans test passes on a GPU.
static Kernels verified_table() {
    Kernels k = {"cuda", KERNEL_DTYPE_BIT(DTYPE_FP32), KERNELS_MAX_TOKENS, KERNELS_MAX_TOKENS,
                 0,      KERNEL_OPS(CUDA_OP)};
    k.copy_spans = nullptr;
    return k;
}
extern "C" const Kernels kernels_cuda = verified_table();

// The same ops offering what they have that no GPU has validated yet: for the session that runs
// tests/gpu and, in the same minutes, measures what those forms give (FSDP_CUDA_UNVERIFIED=1).
extern "C" const Kernels kernels_cuda_unverified = {
    "cuda (unverified forms)", KERNEL_ALL_DTYPES, KERNELS_MAX_TOKENS, 0, 0, KERNEL_OPS(CUDA_OP)};
