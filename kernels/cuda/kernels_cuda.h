/* kernels_cuda: the op table on an NVIDIA GPU. kernels/kernels.h documents every op's meaning
 * once; this header says how to run them here. Every pointer is device memory. Ops launch on
 * the calling thread's stream (kernels_cuda_bind); those that return a value (sum_squares,
 * all_finite, mse_loss, cross_entropy, count_correct) wait for that stream. Plain C, so engine/
 * and runtime/ include it without CUDA's headers. */
#ifndef FSDP_KERNELS_CUDA_H
#define FSDP_KERNELS_CUDA_H

#include <stddef.h>

#ifdef __cplusplus
extern "C" { /* core's headers are C: their functions keep C names in the .cu files too */
#endif

#include "base/err.h"
#include "kernels/kernels.h"

extern const Kernels kernels_cuda;
/* kernels_cuda with every dtype its ops have (bf16, fp16) and flash attention at any length,
 * before tests/gpu has passed on a GPU with them: what runtime/gpu_run.c binds when
 * FSDP_CUDA_UNVERIFIED=1, so one GPU session can run the tests and then measure (docs/gpus.md). */
extern const Kernels kernels_cuda_unverified;

/* Binds the calling thread's later ops to `stream` (a cudaStream_t; NULL: the legacy default
 * stream) on the current device and creates what they need: a cuBLASLt handle, its workspace,
 * a small scratch for returned values. Once per thread, before its first op. */
int kernels_cuda_bind(void *stream, Err *err);
void kernels_cuda_unbind(void);

/* Ops return void, so a CUDA error is kept: the first one this thread's ops met since the last
 * call (named with the op), or 0. Every op takes fp32, bf16 and fp16 (the table's dtypes offer
 * fp32 only until tests/gpu/test_cuda_dtypes.c has passed on a GPU); one asked for a DType that
 * is none of them launches nothing and keeps that as its error. */
int kernels_cuda_status(Err *err);

/* Whether this process can use a GPU; if not, `why` says why in a few words. Never fails
 * loudly: it is how --backend auto and make test-gpu decide. */
int kernels_cuda_available(char *why, size_t n);

/* TF32 tensor cores for fp32 GEMMs (off by default: fp32 then matches the CPU to 1e-5). */
void kernels_cuda_allow_tf32(int on);

#ifdef __cplusplus
}
#endif

#endif
