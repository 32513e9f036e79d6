/* context: the per-thread context of kernels_cuda: binding to a stream, the sticky error, the
 * probe. */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include <new>

#include "kernels/cuda/cuda_common.cuh"
#include "kernels/cuda/kernels_cuda.h"

static thread_local CudaContext *current;
static int allow_tf32;

CudaContext *cuda_ctx() {
    return current;
}

// Whether the thread has a context and nothing kept yet: only the first error is kept.
static int first_error(void) {
    return current && current->error == cudaSuccess && !current->cublas_status && !current->refused;
}

int cuda_note(cudaError_t e, const char *where) {
    if (e == cudaSuccess) return 0;
    if (first_error()) {
        current->error = e;
        current->where = where;
    }
    return 1;
}

int cuda_note_cublas(cublasStatus_t s, const char *where) {
    if (s == CUBLAS_STATUS_SUCCESS) return 0;
    if (first_error()) {
        current->cublas_status = (int)s;
        current->where = where;
    }
    return 1;
}

// Only a value outside the DType enum gets here: the three compute dtypes each have kernels.
void cuda_refuse(DType t, const char *where) {
    if (first_error()) {
        static thread_local char name[16];
        snprintf(name, sizeof name, "%d", (int)t);
        current->refused = name;
        current->where = where;
    }
}

float cuda_mean_of_partials(unsigned blocks, size_t rows, const char *where) {
    if (cuda_note(cudaMemcpyAsync(current->host, current->scratch, blocks * sizeof(double),
                                  cudaMemcpyDeviceToHost, current->stream),
                  where) ||
        cuda_note(cudaStreamSynchronize(current->stream), where))
        return NAN;
    const double *host = (const double *)current->host;
    double total = 0.0;
    for (unsigned k = 0; k < blocks; k++) total += host[k];
    return (float)(total / (double)rows);
}

extern "C" void kernels_cuda_allow_tf32(int on) {
    allow_tf32 = on != 0;
    if (current) current->tf32 = allow_tf32;
}

static int bind_fail(Err *err, const char *what, const char *why) {
    kernels_cuda_unbind();
    return err_set(err, ERR_INTERNAL, "kernels_cuda: %s failed: %s", what, why);
}

extern "C" int kernels_cuda_bind(void *stream, Err *err) {
    if (current) kernels_cuda_unbind();
    current = new (std::nothrow) CudaContext();
    if (!current) return err_set(err, ERR_NOMEM, "out of memory for the CUDA context");
    current->stream = (cudaStream_t)stream;
    current->tf32 = allow_tf32;
    cudaError_t e = cudaMalloc(&current->workspace, CUDA_WORKSPACE_BYTES);
    if (e == cudaSuccess) e = cudaMalloc(&current->scratch, CUDA_SCRATCH_BYTES);
    if (e == cudaSuccess) e = cudaMallocHost(&current->host, CUDA_SCRATCH_BYTES);
    if (e != cudaSuccess) return bind_fail(err, "allocating the workspace", cudaGetErrorString(e));
    if (cublasLtCreate(&current->lt) != CUBLAS_STATUS_SUCCESS)
        return bind_fail(err, "cublasLtCreate", "no cuBLASLt handle");
    return 0;
}

extern "C" void kernels_cuda_unbind(void) {
    if (!current) return;
    if (current->lt) cublasLtDestroy(current->lt);
    cudaFree(current->workspace);
    cudaFree(current->scratch);
    cudaFreeHost(current->host);
    delete current;
    current = NULL;
}

extern "C" int kernels_cuda_status(Err *err) {
    if (!current) return 0;
    int rc = 0;
    if (current->error != cudaSuccess)
        rc = err_set(err, ERR_INTERNAL, "CUDA error in %s: %s",
                     current->where ? current->where : "?", cudaGetErrorString(current->error));
    else if (current->cublas_status)
        rc = err_set(err, ERR_INTERNAL, "cuBLASLt error %d in %s", current->cublas_status,
                     current->where ? current->where : "?");
    else if (current->refused)
        rc = err_set(err, ERR_INTERNAL, "cuda_%s: no compute dtype %s (fp32, bf16 and fp16 are)",
                     current->where ? current->where : "?", current->refused);
    current->error = cudaSuccess;
    current->cublas_status = 0;
    current->refused = NULL;
    current->where = NULL;
    return rc;
}

extern "C" int kernels_cuda_available(char *why, size_t n) {
    int count = 0;
    cudaError_t e = cudaGetDeviceCount(&count);
    if (e != cudaSuccess) {
        snprintf(why, n, "%s", cudaGetErrorString(e));
        return 0;
    }
    if (count < 1) {
        snprintf(why, n, "no CUDA device");
        return 0;
    }
    snprintf(why, n, "%d CUDA device%s", count, count == 1 ? "" : "s");
    return 1;
}
