// cuda_common: what every file of kernels/cuda shares: the calling thread's context (stream,
// cuBLASLt handle and workspace, scratch for returned values), the sticky error the void ops
// leave behind, launch-size helpers, and the compute dtype: element access (load, store) and the
// dispatch from an op's DType to its kernels' element type. Internal to kernels/cuda.
#pragma once

#include <cublasLt.h>
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>
#include <stddef.h>

extern "C" { // dtype.h is C (kernels/dtype.c), with no linkage guard of its own
#include "kernels/dtype.h"
}

struct CudaContext {
    cudaStream_t stream;
    cublasLtHandle_t lt;
    // cuBLASLt's, CUDA_WORKSPACE_BYTES. A GEMM uses it only while its kernels run on `stream`, so
    // between GEMMs a kernel on the same stream may use it as fp32 scratch (CUDA_WORKSPACE_FLOATS).
    void *workspace;
    void *scratch; // CUDA_SCRATCH_BYTES of device memory for values ops return
    void *host;    // pinned host mirror of scratch
    int tf32;
    cudaError_t error;   // the first error since kernels_cuda_status, cudaSuccess if none
    int cublas_status;   // likewise for cuBLASLt (0: none)
    const char *refused; // likewise for a DType that is no compute dtype ("7"; NULL: none)
    const char *where;   // the op that met it
};

enum : size_t { CUDA_WORKSPACE_BYTES = 32u << 20, CUDA_SCRATCH_BYTES = 1u << 16 };

// The calling thread's context (kernels_cuda_bind made it); never NULL inside an op.
CudaContext *cuda_ctx();

// Keeps the first error of the thread's ops; returns 1 if `e` is one.
int cuda_note(cudaError_t e, const char *where);
int cuda_note_cublas(cublasStatus_t s, const char *where);

// The mean over `rows` of the `blocks` doubles a loss kernel left in the context's scratch, one a
// block: copied to the host when the stream gets there and added in block order. NaN (the error
// kept under `where`) if the copy fails.
float cuda_mean_of_partials(unsigned blocks, size_t rows, const char *where);

// An op asked for a DType outside fp32, bf16 and fp16 keeps that as its error (cuda_dispatch).
void cuda_refuse(DType t, const char *where);

// After a launch: records a launch error under the op's name.
#define CUDA_LAUNCHED(where) cuda_note(cudaGetLastError(), where)

static inline unsigned cuda_blocks(size_t n, unsigned threads, unsigned cap = 65535u * 8u) {
    size_t b = (n + threads - 1) / threads;
    if (b < 1) b = 1;
    return (unsigned)(b > cap ? cap : b);
}

// ---- the compute dtype (kernels/kernels.h, above `typedef struct Kernels`)
//
// An op's kernels are templates over T, the element type of its compute-dtype tensors (float,
// __nv_bfloat16 or __half); float * tensors (parameter gradients, norm statistics, lse) stay
// float whatever T is. A kernel widens what it reads with load, computes in fp32 and rounds
// each output once, as it stores it, with store (round to nearest even, the CPU's dtype_store
// for every number; a NaN becomes the hardware's canonical one). With T = float both are plain
// accesses, so the fp32 kernels are the code they were before the templates.

static __device__ __forceinline__ float load(const float *p, size_t i) {
    return p[i];
}
static __device__ __forceinline__ float load(const __nv_bfloat16 *p, size_t i) {
    return __bfloat162float(p[i]);
}
static __device__ __forceinline__ float load(const __half *p, size_t i) {
    return __half2float(p[i]);
}

static __device__ __forceinline__ void store(float *p, size_t i, float x) {
    p[i] = x;
}
static __device__ __forceinline__ void store(__nv_bfloat16 *p, size_t i, float x) {
    p[i] = __float2bfloat16_rn(x);
}
static __device__ __forceinline__ void store(__half *p, size_t i, float x) {
    p[i] = __float2half_rn(x);
}

// x as an element of T holds it: what load returns after store (x itself for float).
template <class T> static __device__ __forceinline__ float round_to(float x) {
    T v[1];
    store(v, 0, x);
    return load(v, 0);
}

// T itself, as a value: cuda_dispatch hands one to its lambda, which takes the type back with
// `using T = typename decltype(e)::type;`.
template <class T> struct Elem { using type = T; };

// Runs f(Elem<T>{}) with T the element type of compute dtype t and returns 0; for a DType that
// is none of the three, records the refusal under `where` and returns 1 (f does not run). Each
// op's host function is its checks, then one cuda_dispatch around its launches.
template <class F> static inline int cuda_dispatch(DType t, const char *where, F &&f) {
    switch (t) {
    case DTYPE_FP32:
        f(Elem<float>{});
        return 0;
    case DTYPE_BF16:
        f(Elem<__nv_bfloat16>{});
        return 0;
    case DTYPE_FP16:
        f(Elem<__half>{});
        return 0;
    default:
        cuda_refuse(t, where);
        return 1;
    }
}

// cuda_dispatch's check alone, for an op that hands t on as a type (cuBLASLt's) rather than
// instantiating kernels: 1, with the refusal recorded, if t is no compute dtype.
static inline int cuda_refused(DType t, const char *where) {
    return cuda_dispatch(t, where, [](auto) {});
}

// Bytes of an element of compute dtype t: dtype_size's values (the library calls none of
// dtype.c's functions, as context.cu says).
static inline size_t cuda_dtype_bytes(DType t) {
    return t == DTYPE_FP32 ? 4 : 2;
}

// The floats of the context's cuBLASLt workspace, for kernels that need fp32 room of their own
// between GEMMs (attention's fp32 accumulators of dk and dv in bf16 and fp16): the same stream
// orders them after the last GEMM that used it and before the next.
constexpr size_t CUDA_WORKSPACE_FLOATS = CUDA_WORKSPACE_BYTES / sizeof(float);
