/* lm_ops: the language model's own ops on the GPU, the token and position embeddings (the CPU's
 * in ../cpu/lm_cpu.c); causal attention is attention.cu's. */
#include <math.h>
#include <stdint.h>

#include "kernels/cuda/cuda_common.cuh"
#include "kernels/cuda/cuda_ops.h"

// No floating-point atomics: each output element is summed by one thread, in the CPU's order, so
// the results are the CPU's bits and the same on every run.
//
// - forward: a thread per element of x.
// - dwpe: a thread per (position, column) adds the batch's gradients in sample order.
// - dwte: a thread per (vocabulary row, column) walks every token of the batch in order and adds
//   the gradients of those that are its row: B x T reads of the ids per thread (cached: every
//   thread of a block reads the same id at once), which at a byte vocabulary (256 rows) keeps
//   V x C threads busy where a thread per column would leave most of the GPU idle. A vocabulary
//   of GPT-2's size would want the tokens sorted first; this model's is 256.
//
// x, wte, wpe and dx are of the compute dtype's element type E (cuda_common.cuh; E, since T is
// the sequence length): the forward's sum is rounded once as it is stored, and the gradients
// widen dx into their fp32 sums.

namespace {

constexpr unsigned LM_THREADS = 256;

template <class E>
__global__ void token_embed_forward_kernel(E *__restrict__ x, const int32_t *__restrict__ tokens,
                                           const E *__restrict__ wte, const E *__restrict__ wpe,
                                           size_t total, size_t T, size_t C, size_t V) {
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < total;
         i += (size_t)gridDim.x * blockDim.x) {
        const size_t bt = i / C, c = i % C, t = bt % T;
        const int32_t id = tokens[bt];
        const float tok = (id < 0 || (size_t)id >= V) ? NAN : load(wte, (size_t)id * C + c);
        // no table (RoPE's models): the row as it is, as the CPU copies it (+ 0.0f would turn -0
        // into +0)
        store(x, i, wpe ? tok + load(wpe, t * C + c) : tok);
    }
}

template <class E>
__global__ void token_embed_dwpe_kernel(float *__restrict__ dwpe, const E *__restrict__ dx,
                                        size_t B, size_t TC) {
    for (size_t col = (size_t)blockIdx.x * blockDim.x + threadIdx.x; col < TC;
         col += (size_t)gridDim.x * blockDim.x) {
        float acc = dwpe[col];
        for (size_t b = 0; b < B; b++) acc += load(dx, b * TC + col);
        dwpe[col] = acc;
    }
}

template <class E>
__global__ void token_embed_dwte_kernel(float *__restrict__ dwte,
                                        const int32_t *__restrict__ tokens,
                                        const E *__restrict__ dx, size_t n, size_t C, size_t V) {
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < V * C;
         i += (size_t)gridDim.x * blockDim.x) {
        const size_t v = i / C, c = i % C;
        float acc = dwte[i];
        for (size_t k = 0; k < n; k++)
            if (tokens[k] == (int32_t)v) acc += load(dx, k * C + c);
        dwte[i] = acc;
    }
}

} // namespace

extern "C" void cuda_token_embed_forward(DType t, void *x, const int32_t *tokens, const void *wte,
                                         const void *wpe, size_t B, size_t T, size_t C, size_t V) {
    const size_t total = B * T * C;
    if (total == 0) return;
    if (cuda_dispatch(t, "token_embed_forward", [&](auto e) {
            using E = typename decltype(e)::type;
            token_embed_forward_kernel<<<cuda_blocks(total, LM_THREADS), LM_THREADS, 0,
                                         cuda_ctx()->stream>>>((E *)x, tokens, (const E *)wte,
                                                               (const E *)wpe, total, T, C, V);
        }))
        return;
    CUDA_LAUNCHED("token_embed_forward");
}

extern "C" void cuda_token_embed_backward(DType t, float *dwte, float *dwpe, const int32_t *tokens,
                                          const void *dx, size_t B, size_t T, size_t C, size_t V) {
    if (B == 0 || T == 0 || C == 0) return;
    cudaStream_t stream = cuda_ctx()->stream;
    if (cuda_dispatch(t, "token_embed_backward", [&](auto e) {
            using E = typename decltype(e)::type;
            if (dwpe)
                token_embed_dwpe_kernel<<<cuda_blocks(T * C, LM_THREADS), LM_THREADS, 0, stream>>>(
                    dwpe, (const E *)dx, B, T * C);
            if (V > 0)
                token_embed_dwte_kernel<<<cuda_blocks(V * C, LM_THREADS), LM_THREADS, 0, stream>>>(
                    dwte, tokens, (const E *)dx, B * T, C, V);
        }))
        return;
    CUDA_LAUNCHED("token_embed_backward");
}
