/* lm_cpu: the language model's own ops on the CPU (semantics in ../kernels.h): the token and
 * position embeddings of a byte-level transformer, forward and backward. */
#include <math.h>
#include <stdint.h>
#include <string.h>

#include "kernels/cpu/cpu_fp32.h"
#include "kernels/cpu/cpu_ops.h"
#include "kernels/kernels.h"

void f32_token_embed_forward(float *restrict x, const int32_t *restrict tokens,
                             const float *restrict wte, const float *restrict wpe, size_t B,
                             size_t T, size_t C, size_t V) {
    for (size_t b = 0; b < B; b++)
        for (size_t t = 0; t < T; t++) {
            const int32_t id = tokens[b * T + t];
            float *row = x + (b * T + t) * C;
            const float *pos = wpe ? wpe + t * C : NULL;
            if (id < 0 || (size_t)id >= V) { /* NaN, not a read past the table */
                for (size_t c = 0; c < C; c++) row[c] = NAN;
                continue;
            }
            const float *tok = wte + (size_t)id * C;
            if (pos)
                for (size_t c = 0; c < C; c++) row[c] = tok[c] + pos[c];
            else
                memcpy(row, tok, C * sizeof *row);
        }
}

/* Serial, in (b, t) order: a token's row of dwte takes its gradients in the order they come, and
 * the CUDA op adds them in the same order, so both give the same bits. A pool is not used: this
 * is B x T x C adds, next to the block's GEMMs of B x T x C x C. */
void f32_token_embed_backward(float *restrict dwte, float *restrict dwpe,
                              const int32_t *restrict tokens, const float *restrict dx, size_t B,
                              size_t T, size_t C, size_t V) {
    for (size_t b = 0; b < B; b++)
        for (size_t t = 0; t < T; t++) {
            const float *g = dx + (b * T + t) * C;
            if (dwpe)
                for (size_t c = 0; c < C; c++) dwpe[t * C + c] += g[c];
            const int32_t id = tokens[b * T + t];
            if (id < 0 || (size_t)id >= V) continue;
            float *tok = dwte + (size_t)id * C;
            for (size_t c = 0; c < C; c++) tok[c] += g[c];
        }
}
