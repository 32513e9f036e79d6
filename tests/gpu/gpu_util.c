/* Helpers of the GPU tests: skip where there is no GPU, move arrays between host and device, and
 * poison device outputs so a kernel that forgets one cannot pass. */
#include "tests/gpu/gpu_util.h"

#include <criterion/criterion.h>
#include <cuda_runtime_api.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/cuda/kernels_cuda.h"

void gpu_or_skip(void) {
    char why[128];
    if (!kernels_cuda_available(why, sizeof why)) cr_skip_test("no GPU: %s", why);
    Err err = {0};
    cr_assert_eq(kernels_cuda_bind(NULL, &err), 0, "%s", err.msg);
}

void gpu_done(void) {
    kernels_cuda_unbind();
}

void *gpu_alloc(size_t bytes) {
    void *p = NULL;
    cudaError_t e = cudaMalloc(&p, bytes ? bytes : 1);
    cr_assert_eq(e, cudaSuccess, "cudaMalloc(%zu): %s", bytes, cudaGetErrorString(e));
    return p;
}

void gpu_free(void *p) {
    cudaFree(p);
}

void gpu_put(void *dst, const void *host, size_t bytes) {
    cudaError_t e = cudaMemcpy(dst, host, bytes, cudaMemcpyHostToDevice);
    cr_assert_eq(e, cudaSuccess, "%s", cudaGetErrorString(e));
}

void gpu_get(void *host, const void *src, size_t bytes) {
    cudaError_t e = cudaDeviceSynchronize();
    if (e == cudaSuccess) e = cudaMemcpy(host, src, bytes, cudaMemcpyDeviceToHost);
    cr_assert_eq(e, cudaSuccess, "%s", cudaGetErrorString(e));
}

void gpu_poison(void *p, size_t bytes) {
    cudaError_t e = cudaMemset(p, 0xFF, bytes);
    cr_assert_eq(e, cudaSuccess, "%s", cudaGetErrorString(e));
}

float *gpu_floats(const float *host, size_t n) {
    float *d = gpu_alloc(n * sizeof *d);
    gpu_put(d, host, n * sizeof *d);
    return d;
}

void gpu_check(void) {
    Err err = {0};
    cr_assert_eq(kernels_cuda_status(&err), 0, "%s", err.msg);
    cudaError_t e = cudaDeviceSynchronize();
    cr_assert_eq(e, cudaSuccess, "%s", cudaGetErrorString(e));
}

/* The largest |got - want| gpu_expect_close allows, in units of rel * max|want|. Relative L2
 * averages: one wrong element among a million moves it by only 1e-3 of that element's share, so
 * a kernel that writes one index wrong (a value of the array's own scale) can hide under the L2
 * bound. Each element must also lie within MAX_ABS_SLACK * rel * max|want|. The bound follows
 * the dtype through rel (1e-5 fp32, 1e-2 bf16, invariant 6) and the values' scale through
 * max|want|; rounding errors of a correct kernel sit a few ulps of the largest magnitudes
 * involved (fp32: ~1e-7 each, times sqrt of a reduction's length), far below 8 * rel, while
 * a wrong element is off by about the scale itself. An all-zero want allows no error. */
#define MAX_ABS_SLACK 8.0

void gpu_expect_close(const float *got, const float *want, size_t n, double rel, const char *what) {
    double diff = 0.0, norm = 0.0, scale = 0.0, worst = 0.0;
    size_t at = 0;
    for (size_t i = 0; i < n; i++) {
        if (isfinite(want[i]) && !isfinite(got[i])) {
            cr_expect_fail("%s[%zu] is %g, want %g", what, i, (double)got[i], (double)want[i]);
            return;
        }
        double d = (double)got[i] - (double)want[i];
        diff += d * d;
        norm += (double)want[i] * (double)want[i];
        if (fabs(want[i]) > scale) scale = fabs(want[i]);
        if (fabs(d) > worst) worst = fabs(d), at = i;
    }
    diff = sqrt(diff);
    norm = sqrt(norm);
    cr_expect(diff <= rel * norm, "%s: relative L2 error %.3g (bound %.1g) over %zu values", what,
              norm > 0 ? diff / norm : diff, rel, n);
    double bound = MAX_ABS_SLACK * rel * scale;
    cr_expect(worst <= bound,
              "%s: [%zu] is %.9g, want %.9g: off by %.3g (bound %.3g = %g x %.1g x max|want| %.3g)",
              what, at, n ? (double)got[at] : 0.0, n ? (double)want[at] : 0.0, worst, bound,
              MAX_ABS_SLACK, rel, scale);
}

void gpu_expect_gelu_close(const float *got, const float *want, const float *x, size_t n,
                           double rel, double step, const char *what) {
    size_t bad = 0, first = 0;
    for (size_t i = 0; i < n; i++) {
        double bound = rel * fabs((double)want[i]) + 0.5 * fabs((double)x[i]) * GELU_ERF_ABS + step;
        if (!(fabs((double)got[i] - (double)want[i]) <= bound) && !bad++) first = i;
    }
    cr_expect_eq(bad, 0,
                 "%s: %zu of %zu elements off, the first [%zu]: %.9g against the CPU's %.9g at "
                 "x = %.9g",
                 what, bad, n, first, (double)got[first], (double)want[first], (double)x[first]);
}

/* A parameter off by more than rounding (rel * max|want|) counts against a budget of one in a
 * thousand (at least one): only a gradient within its own rounding error of zero can do that. */
void gpu_expect_params_close(const float *got, const float *want, size_t n, double rel,
                             double drift, const char *what) {
    double scale = 0.0, worst = 0.0;
    size_t at = 0, off = 0, budget = n / 1000 > 0 ? n / 1000 : 1;
    for (size_t i = 0; i < n; i++)
        if (fabs(want[i]) > scale) scale = fabs(want[i]);
    for (size_t i = 0; i < n; i++) {
        if (isfinite(want[i]) && !isfinite(got[i])) {
            cr_expect_fail("%s[%zu] is %g, want %g", what, i, (double)got[i], (double)want[i]);
            return;
        }
        double d = fabs((double)got[i] - (double)want[i]);
        off += d > rel * scale;
        if (d > worst) worst = d, at = i;
    }
    cr_expect(worst <= drift + rel * scale,
              "%s: [%zu] is %.9g, want %.9g: off by %.3g (bound %.3g)", what, at,
              n ? (double)got[at] : 0.0, n ? (double)want[at] : 0.0, worst, drift + rel * scale);
    cr_expect(off <= budget, "%s: %zu of %zu values off by more than %.3g (at most %zu may be)",
              what, off, n, rel * scale, budget);
}

void gpu_expect_close_dev(const float *d, const float *want, size_t n, double rel,
                          const char *what) {
    float *got = gpu_fetch(d, n);
    gpu_expect_close(got, want, n, rel, what);
    free(got);
}

void gpu_expect_same_dev(const float *d, const float *want, size_t n, const char *what) {
    float *got = gpu_fetch(d, n);
    size_t bad = 0, first = 0;
    for (size_t i = 0; i < n; i++)
        if (memcmp(&got[i], &want[i], sizeof(float)) != 0 && bad++ == 0) first = i;
    cr_expect_eq(bad, 0, "%s: %zu of %zu values differ, first [%zu]: %g, want %g", what, bad, n,
                 first, bad ? (double)got[first] : 0.0, bad ? (double)want[first] : 0.0);
    free(got);
}

void gpu_expect_close_devs(const float *a, const float *b, size_t n, double rel, const char *what) {
    float *want = gpu_fetch(b, n);
    gpu_expect_close_dev(a, want, n, rel, what);
    free(want);
}

void gpu_random(float *out, size_t n, float lo, float hi, unsigned seed) {
    unsigned long long s = 0x9E3779B97F4A7C15ull * (seed + 1);
    for (size_t i = 0; i < n; i++) {
        s ^= s << 13;
        s ^= s >> 7;
        s ^= s << 17;
        out[i] = lo + (hi - lo) * (float)((s >> 40) / 16777216.0);
    }
}

float *host_random(size_t n, float lo, float hi, unsigned seed) {
    float *h = host_floats(n);
    gpu_random(h, n, lo, hi, seed);
    return h;
}

float *gpu_poisoned_floats(size_t n) {
    float *d = gpu_alloc((n ? n : 1) * sizeof *d);
    gpu_poison(d, (n ? n : 1) * sizeof *d);
    return d;
}

float *gpu_fetch(const float *d, size_t n) {
    float *h = host_floats(n);
    if (n) gpu_get(h, d, n * sizeof *h);
    return h;
}
