/* llama_cpu: the Llama-shaped block's own ops on the CPU (semantics in ../kernels.h): RMSNorm,
 * SwiGLU's gate and the rotary position embedding, forward and backward. Serial and plain: next
 * to the block's GEMMs they are a few passes over its activations. */
#include <math.h>
#include <stddef.h>

#include "kernels/cpu/cpu_fp32.h"
#include "kernels/cpu/cpu_ops.h"
#include "kernels/kernels.h"

void f32_rmsnorm_forward(float *restrict out, float *restrict rstd, const float *restrict in,
                         const float *restrict w, size_t M, size_t C, float eps) {
    for (size_t i = 0; i < M; i++) {
        const float *x = in + i * C;
        double squares = 0.0;
        for (size_t c = 0; c < C; c++) squares += (double)x[c] * (double)x[c];
        const float r = (float)(1.0 / sqrt(squares / (double)C + (double)eps));
        rstd[i] = r;
        for (size_t c = 0; c < C; c++) out[i * C + c] = x[c] * r * w[c];
    }
}

/* y = x r w with r = (mean(x^2) + eps)^-1/2: dx_c = r (w_c dy_c - x_c r^2 mean(w dy x)),
 * dw_c = sum over rows of dy_c x_c r. */
void f32_rmsnorm_backward(float *restrict din, float *restrict dw, const float *restrict dout,
                          const float *restrict in, const float *restrict rstd,
                          const float *restrict w, size_t M, size_t C) {
    for (size_t i = 0; i < M; i++) {
        const float *x = in + i * C, *dy = dout + i * C;
        const float r = rstd[i];
        double dot = 0.0;
        for (size_t c = 0; c < C; c++) dot += (double)w[c] * dy[c] * x[c];
        const float k = (float)(dot / (double)C) * r * r;
        for (size_t c = 0; c < C; c++) {
            din[i * C + c] += r * (w[c] * dy[c] - x[c] * k);
            dw[c] += dy[c] * x[c] * r;
        }
    }
}

static float sigmoid(float x) {
    return 1.0f / (1.0f + expf(-x));
}

void f32_swiglu_forward(float *restrict out, const float *restrict gate, const float *restrict up,
                        size_t n) {
    for (size_t i = 0; i < n; i++) out[i] = gate[i] * sigmoid(gate[i]) * up[i];
}

/* silu'(g) = s (1 + g (1 - s)), s = sigmoid(g). dgate may be dout: each element is read first. */
void f32_swiglu_backward(float *dgate, float *restrict dup, const float *dout,
                         const float *restrict gate, const float *restrict up, size_t n) {
    for (size_t i = 0; i < n; i++) {
        const float g = gate[i], s = sigmoid(g), dy = dout[i];
        dup[i] = dy * g * s;
        dgate[i] = dy * up[i] * s * (1.0f + g * (1.0f - s));
    }
}

/* Turns each pair (x_i, x_{i+D/2}) of every head by `sign` times its angle: forward +1,
 * backward -1 (a rotation's transpose is its inverse). Angles in double, then rounded. */
static void rope_turn(float *x, size_t B, size_t T, size_t heads, size_t D, float theta,
                      double sign) {
    const size_t half = D / 2;
    for (size_t row = 0; row < B * T; row++) {
        const double t = (double)(row % T);
        for (size_t i = 0; i < half; i++) {
            const double angle = t * pow((double)theta, -2.0 * (double)i / (double)D);
            const float c = (float)cos(angle), sn = (float)(sign * sin(angle));
            for (size_t h = 0; h < heads; h++) {
                float *p = x + row * heads * D + h * D;
                const float a = p[i], b = p[i + half];
                p[i] = a * c - b * sn;
                p[i + half] = b * c + a * sn;
            }
        }
    }
}

void f32_rope_forward(float *x, size_t B, size_t T, size_t heads, size_t D, float theta) {
    rope_turn(x, B, T, heads, D, theta, 1.0);
}

void f32_rope_backward(float *dx, size_t B, size_t T, size_t heads, size_t D, float theta) {
    rope_turn(dx, B, T, heads, D, theta, -1.0);
}
