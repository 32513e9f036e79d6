// cuda_common: what every file of kernels/cuda shares: the calling thread's context (stream,
// cuBLASLt handle and workspace, scratch for returned values), the sticky error the void ops
// leave behind, and launch-size helpers. Internal to kernels/cuda.
#pragma once

#include <cublasLt.h>
#include <cuda_runtime.h>
#include <stddef.h>

extern "C" { // dtype.h is C (kernels/dtype.c), with no linkage guard of its own
#include "kernels/dtype.h"
}

struct CudaContext {
    cudaStream_t stream;
    cublasLtHandle_t lt;
    void *workspace; // cuBLASLt's, CUDA_WORKSPACE_BYTES
    void *scratch;   // CUDA_SCRATCH_BYTES of device memory for values ops return
    void *host;      // pinned host mirror of scratch
    int tf32;
    cudaError_t error;   // the first error since kernels_cuda_status, cudaSuccess if none
    int cublas_status;   // likewise for cuBLASLt (0: none)
    const char *refused; // likewise for a compute dtype an op does not take ("bf16"; NULL: none)
    const char *where;   // the op that met it
};

enum : size_t { CUDA_WORKSPACE_BYTES = 32u << 20, CUDA_SCRATCH_BYTES = 1u << 16 };

// The calling thread's context (kernels_cuda_bind made it); never NULL inside an op.
CudaContext *cuda_ctx();

// Keeps the first error of the thread's ops; returns 1 if `e` is one.
int cuda_note(cudaError_t e, const char *where);
int cuda_note_cublas(cublasStatus_t s, const char *where);

// The ops compute in fp32 only (kernels_cuda.dtypes), so the engine never asks them for another
// dtype; an op that is asked anyway keeps that as its error and returns 1: it launches nothing.
int cuda_fp32_only(DType t, const char *where);

// After a launch: records a launch error under the op's name.
#define CUDA_LAUNCHED(where) cuda_note(cudaGetLastError(), where)

static inline unsigned cuda_blocks(size_t n, unsigned threads, unsigned cap = 65535u * 8u) {
    size_t b = (n + threads - 1) / threads;
    if (b < 1) b = 1;
    return (unsigned)(b > cap ? cap : b);
}
