/* The eager loss on the CPU: PyTorch's cross_entropy(logits.float()) as its three steps, each
 * writing its own fp32 tensor (log-softmax, the NLL's dense gradient, log-softmax's backward).
 * Serial loops in libm's exp and log: it is the reference, and --loss eager is for the memory it
 * holds more than for speed. */
#include <math.h>
#include <stdint.h>

#include "kernels/cpu/cpu_math.h"
#include "kernels/cpu/cpu_ops.h"

void cpu_log_softmax(float *logp, const float *x, size_t rows, size_t classes) {
    if (classes == 0) return;
    for (size_t i = 0; i < rows; i++) {
        const float *z = x + i * classes;
        float *out = logp + i * classes;
        const float mx = row_max(z, classes);
        double sum = 0.0;
        for (size_t j = 0; j < classes; j++) sum += exp((double)(z[j] - mx));
        const float lse = (float)log(sum); /* subtracted apart from mx: no rounding of their sum */
        for (size_t j = 0; j < classes; j++) out[j] = (z[j] - mx) - lse;
    }
}

float cpu_nll_loss(float *dlogp, const float *logp, const int32_t *labels, size_t rows,
                   size_t classes, float grad_scale) {
    if (rows == 0 || classes == 0) return 0.0f;
    const float g = -grad_scale / (float)rows;
    double total = 0.0;
    for (size_t i = 0; i < rows; i++) {
        float *d = dlogp + i * classes;
        for (size_t j = 0; j < classes; j++) d[j] = 0.0f;
        /* a label outside [0, classes) makes the loss NaN and the row's gradient zero */
        if (labels[i] < 0 || (size_t)labels[i] >= classes) {
            total = NAN;
            continue;
        }
        d[labels[i]] = g;
        total -= (double)logp[i * classes + (size_t)labels[i]];
    }
    return (float)(total / (double)rows);
}

void cpu_log_softmax_backward(float *dx, const float *dlogp, const float *logp, size_t rows,
                              size_t classes) {
    for (size_t i = 0; i < rows; i++) {
        const float *d = dlogp + i * classes, *lp = logp + i * classes;
        double sum = 0.0;
        for (size_t j = 0; j < classes; j++) sum += (double)d[j];
        const float s = (float)sum;
        for (size_t j = 0; j < classes; j++) dx[i * classes + j] = d[j] - expf(lp[j]) * s;
    }
}
