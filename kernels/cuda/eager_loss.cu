/* eager_loss: --loss eager's three fp32 ops on the GPU (the CPU's in ../cpu/loss_cpu.c): the
 * log-softmax, the NLL's dense gradient with the mean loss, and log-softmax's backward, each a
 * warp per row with the row's sums in double, so each result is the same bits run to run. */
#include <math.h>
#include <stdint.h>

#include "kernels/cuda/cuda_common.cuh"
#include "kernels/cuda/cuda_ops.h"
#include "kernels/cuda/row_sums.cuh"

namespace {

constexpr unsigned ROW_WARPS = 8; // rows a block, a warp each
constexpr unsigned MAX_BLOCKS = 1024;
static_assert(MAX_BLOCKS * sizeof(double) <= CUDA_SCRATCH_BYTES, "the loss's partials fit");

unsigned row_blocks(size_t rows) {
    return cuda_blocks(rows, ROW_WARPS, MAX_BLOCKS);
}

__global__ void __launch_bounds__(ROW_WARPS * 32)
    log_softmax_kernel(float *__restrict__ logp, const float *__restrict__ x, size_t rows,
                       size_t classes) {
    const unsigned lane = threadIdx.x & 31u, warp = threadIdx.x >> 5;
    for (size_t row = (size_t)blockIdx.x * ROW_WARPS + warp; row < rows;
         row += (size_t)gridDim.x * ROW_WARPS) {
        const float *z = x + row * classes;
        const float mx = warp_row_max(z, classes, lane);
        double sum = 0.0;
        for (size_t j = lane; j < classes; j += 32) sum += exp((double)(z[j] - mx));
        const float lse = (float)log(warp_sum(sum)); // apart from mx, as the CPU's
        for (size_t j = lane; j < classes; j += 32) logp[row * classes + j] = (z[j] - mx) - lse;
    }
}

// Each warp adds its rows' -logp[label] in order, each block its warps' in order, into one
// double per block; the host adds the blocks' in order.
__global__ void __launch_bounds__(ROW_WARPS * 32)
    nll_loss_kernel(float *__restrict__ dlogp, const float *__restrict__ logp,
                    const int32_t *__restrict__ labels, size_t rows, size_t classes, float g,
                    double *__restrict__ partials) {
    __shared__ double warp_total[ROW_WARPS];
    const unsigned lane = threadIdx.x & 31u, warp = threadIdx.x >> 5;
    double total = 0.0;
    for (size_t row = (size_t)blockIdx.x * ROW_WARPS + warp; row < rows;
         row += (size_t)gridDim.x * ROW_WARPS) {
        const int32_t label = labels[row];
        const size_t y = label < 0 ? classes : (size_t)label; // outside: no entry gets g
        for (size_t j = lane; j < classes; j += 32) dlogp[row * classes + j] = j == y ? g : 0.0f;
        if (lane == 0) total -= y < classes ? (double)logp[row * classes + y] : (double)NAN;
    }
    if (lane == 0) warp_total[warp] = total;
    __syncthreads();
    if (threadIdx.x == 0) {
        double s = warp_total[0];
        for (unsigned k = 1; k < ROW_WARPS; k++) s += warp_total[k];
        partials[blockIdx.x] = s;
    }
}

__global__ void __launch_bounds__(ROW_WARPS * 32)
    log_softmax_backward_kernel(float *__restrict__ dx, const float *__restrict__ dlogp,
                                const float *__restrict__ logp, size_t rows, size_t classes) {
    const unsigned lane = threadIdx.x & 31u, warp = threadIdx.x >> 5;
    for (size_t row = (size_t)blockIdx.x * ROW_WARPS + warp; row < rows;
         row += (size_t)gridDim.x * ROW_WARPS) {
        const float *d = dlogp + row * classes, *lp = logp + row * classes;
        double sum = 0.0;
        for (size_t j = lane; j < classes; j += 32) sum += (double)d[j];
        const float s = (float)warp_sum(sum);
        for (size_t j = lane; j < classes; j += 32) dx[row * classes + j] = d[j] - expf(lp[j]) * s;
    }
}

} // namespace

void cuda_log_softmax(float *logp, const float *x, size_t rows, size_t classes) {
    if (rows == 0 || classes == 0) return;
    log_softmax_kernel<<<row_blocks(rows), ROW_WARPS * 32, 0, cuda_ctx()->stream>>>(logp, x, rows,
                                                                                    classes);
    CUDA_LAUNCHED("log_softmax");
}

// NaN on a CUDA error, as cross_entropy.
float cuda_nll_loss(float *dlogp, const float *logp, const int32_t *labels, size_t rows,
                    size_t classes, float grad_scale) {
    if (rows == 0 || classes == 0) return 0.0f;
    CudaContext *ctx = cuda_ctx();
    const float g = -grad_scale / (float)rows; // as the CPU rounds it
    const unsigned blocks = row_blocks(rows);
    double *partials = (double *)ctx->scratch;
    nll_loss_kernel<<<blocks, ROW_WARPS * 32, 0, ctx->stream>>>(dlogp, logp, labels, rows, classes,
                                                                g, partials);
    if (CUDA_LAUNCHED("nll_loss")) return NAN;
    return cuda_mean_of_partials(blocks, rows, "nll_loss");
}

void cuda_log_softmax_backward(float *dx, const float *dlogp, const float *logp, size_t rows,
                               size_t classes) {
    if (rows == 0 || classes == 0) return;
    log_softmax_backward_kernel<<<row_blocks(rows), ROW_WARPS * 32, 0, cuda_ctx()->stream>>>(
        dx, dlogp, logp, rows, classes);
    CUDA_LAUNCHED("log_softmax_backward");
}
