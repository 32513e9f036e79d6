/* kernels_cpu: the op table on the CPU (semantics in ../kernels.h): the elementwise ops, Adam, the
 * toy's layer and MSE here, the ViT's ops from vit_cpu.c, the language model's from lm_cpu.c. */
#include "kernels/cpu/cpu_fp32.h"
#include "kernels/cpu/cpu_ops.h"
#include "kernels/kernels.h"

#include <math.h>
#include <stdint.h>
#include <string.h>

/* Copies and zeroing of at least COPY_MIN_BYTES a task are split over the bound pool in byte
 * ranges cut at cache lines. The engine packs and unpacks a unit's parameters and gradients
 * around every collective with these ops, and at 1 rank run serially they were 9% of vit-tiny's
 * step outside any pool run (the pool's second thread idle, often asleep by the next op); split,
 * they take half the wall time and the step 2-3% less (bench/RESULTS.md, issue 28). */
#define COPY_MIN_BYTES ((size_t)1 << 16)
enum { CACHE_LINE = 64 };

typedef struct CopyArgs {
    char *dst;
    const char *src; /* NULL: zero dst */
    size_t bytes;
} CopyArgs;

static void copy_task(void *ctx, int t, int n) {
    const CopyArgs *a = ctx;
    size_t b0, b1;
    cpu_split_range(a->bytes, CACHE_LINE, t, n, &b0, &b1);
    if (b1 <= b0) return;
    if (a->src)
        memcpy(a->dst + b0, a->src + b0, b1 - b0);
    else
        memset(a->dst + b0, 0, b1 - b0);
}

/* dst's bytes from src, or zeroed where src is NULL. */
static void split_bytes(void *dst, const void *src, size_t bytes) {
    if (bytes == 0) return; /* memcpy with NULL is undefined even for 0 bytes */
    CopyArgs a = {.dst = dst, .src = src, .bytes = bytes};
    cpu_parallel(cpu_split_count(bytes, COPY_MIN_BYTES), copy_task, &a);
}

void cpu_copy(void *dst, const void *src, size_t bytes) {
    split_bytes(dst, src, bytes);
}

/* Casts of at least CAST_MIN_ELEMS a task are split over the bound pool: the low-precision
 * ops (dtype_cpu.c) widen and round every operand, so casts are most of their extra work. */
#define CAST_MIN_ELEMS ((size_t)1 << 15)

typedef struct CastArgs {
    void *dst;
    DType dst_type;
    const void *src;
    DType src_type;
} CastArgs;

/* Elements [i0, i1): every pair goes through fp32, which widening reaches exactly, so the
 * result is rounded once. */
static void cast_range(const void *ctx, size_t i0, size_t i1) {
    const CastArgs *a = ctx;
    const size_t ds = dtype_size(a->dst_type), ss = dtype_size(a->src_type);
    char *dst = (char *)a->dst + i0 * ds;
    const char *src = (const char *)a->src + i0 * ss;
    if (a->dst_type == DTYPE_FP32)
        dtype_widen((float *)dst, src, a->src_type, i1 - i0);
    else if (a->src_type == DTYPE_FP32)
        dtype_narrow(dst, a->dst_type, (const float *)src, i1 - i0);
    else
        for (size_t i = 0; i < i1 - i0; i++)
            dtype_store(dst, a->dst_type, i, dtype_load(src, a->src_type, i));
}

void cpu_cast(void *dst, DType dst_type, const void *src, DType src_type, size_t n) {
    if (n == 0) return;
    /* Same type is a copy; this also keeps bf16/fp16 NaN payloads bit-exact. */
    if (dst_type == src_type) {
        cpu_copy(dst, src, n * dtype_size(dst_type));
        return;
    }
    CastArgs a = {.dst = dst, .dst_type = dst_type, .src = src, .src_type = src_type};
    cpu_parallel_range(n, CACHE_LINE, n, CAST_MIN_ELEMS, cast_range, &a);
}

void cpu_zero(float *x, size_t n) {
    split_bytes(x, NULL, n * sizeof *x);
}

void cpu_copy_bytes(void *dst, const void *src, size_t bytes) {
    cpu_copy(dst, src, bytes);
}

void cpu_zero_bytes(void *dst, size_t bytes) {
    split_bytes(dst, NULL, bytes);
}

/* Span by span, each exactly as cast and zero_bytes make it, so a batched copy is bit-identical
 * to the per-span calls it replaces. */
void cpu_copy_spans(void *dst, DType dst_type, const void *src, DType src_type,
                    const CopySpan *spans, size_t nspans) {
    kernels_copy_spans_each(&kernels_cpu, dst, dst_type, src, src_type, spans, nspans);
}

void cpu_scale(float *x, float s, size_t n) {
    for (size_t i = 0; i < n; i++) x[i] *= s;
}

void cpu_accumulate(float *y, const float *x, size_t n) {
    for (size_t i = 0; i < n; i++) y[i] += x[i];
}

double cpu_sum_squares(const float *x, size_t n) {
    double s = 0.0;
    for (size_t i = 0; i < n; i++) s += (double)x[i] * (double)x[i];
    return s;
}

int cpu_all_finite(const float *x, size_t n) {
    for (size_t i = 0; i < n; i++)
        if (!isfinite(x[i])) return 0;
    return 1;
}

/* The per-call constants of an Adam step and the arrays it updates. */
typedef struct AdamArgs {
    float *param, *m, *v;
    const float *grad;
    size_t n;
    float b1, b2, eps, wd, step_size, bc2_sqrt, decay;
    int coupled_decay, param_decay;
} AdamArgs;

/* Eight floats as one GCC vector: arithmetic on it is elementwise, the same IEEE operations as
 * on each float, and compiles to one AVX register in the x86-64-v3 clone. */
typedef float AdamVec __attribute__((vector_size(8 * sizeof(float))));
enum { ADAM_LANES = 8 };

/* One element's update, as the vector body below does it lane by lane. */
static inline void adam_one(const AdamArgs *a, size_t i) {
    float p = a->param[i], g = a->grad[i];
    if (a->coupled_decay) g += a->wd * p; /* Adam: L2 penalty enters the moments */
    if (a->param_decay) p *= a->decay;    /* AdamW: decay bypasses the moments */
    const float mi = a->b1 * a->m[i] + (1.0f - a->b1) * g;
    const float vi = a->b2 * a->v[i] + (1.0f - a->b2) * g * g;
    a->m[i] = mi;
    a->v[i] = vi;
    a->param[i] = p - a->step_size * mi / (sqrtf(vi) / a->bc2_sqrt + a->eps);
}

/* Elements [i0, i1): each one's update depends only on its own values. Eight at a time as
 * vectors (written as arrays, GCC left the loop scalar), the square roots lane by lane, which
 * GCC turns into one vector sqrt (kernels/cpu is built with -fno-math-errno); then adam_one for
 * the tail. The same operations in the same order as adam_one: the same bits. Vectors move
 * through memcpy, never as arguments (a 32-byte vector argument differs between the clones'
 * ABIs). */
VECTOR_CLONES
static void adam_elems(const AdamArgs *a, size_t i0, size_t i1) {
    const float b1 = a->b1, b2 = a->b2, eps = a->eps, wd = a->wd, step_size = a->step_size;
    const float bc2_sqrt = a->bc2_sqrt, decay = a->decay;
    size_t i = i0;
    for (; i + ADAM_LANES <= i1; i += ADAM_LANES) {
        AdamVec p, g, m, v, root;
        float lanes[ADAM_LANES];
        memcpy(&p, a->param + i, sizeof p);
        memcpy(&g, a->grad + i, sizeof g);
        memcpy(&m, a->m + i, sizeof m);
        memcpy(&v, a->v + i, sizeof v);
        if (a->coupled_decay) g += wd * p;
        if (a->param_decay) p *= decay;
        m = b1 * m + (1.0f - b1) * g;
        v = b2 * v + (1.0f - b2) * g * g;
        memcpy(lanes, &v, sizeof lanes);
        for (int k = 0; k < ADAM_LANES; k++) lanes[k] = sqrtf(lanes[k]);
        memcpy(&root, lanes, sizeof root);
        p = p - step_size * m / (root / bc2_sqrt + eps);
        memcpy(a->m + i, &m, sizeof m);
        memcpy(a->v + i, &v, sizeof v);
        memcpy(a->param + i, &p, sizeof p);
    }
    for (; i < i1; i++) adam_one(a, i);
}

static void adam_task(void *ctx, int t, int nt) {
    const AdamArgs *a = ctx;
    size_t i0, i1;
    cpu_split_range(a->n, 64, t, nt, &i0, &i1);
    adam_elems(a, i0, i1);
}

/* Elements per task worth a dispatch: with a pool of 2 on the 2-core development VM, splitting
 * 4096 elements ran 1.36x faster and 65536 1.97x (see vit_cpu.c for the other thresholds). */
#define ADAM_MIN_ELEMS ((size_t)1 << 11)

/* Follows torch.optim.Adam/AdamW (single-tensor path): bias corrections in double once per
 * call, then float per element, dividing by sqrt(bc2) after the sqrt as PyTorch does. With a
 * pool bound (kernels_cpu_use_pool) the elements are split over it: the same results. */
void cpu_adam_step(float *param, const float *grad, float *m, float *v, size_t n,
                   const AdamHyper *h, long step) {
    if (step < 1) step = 1; /* step 0 would divide by a zero bias correction */
    const float b1 = h->beta1, b2 = h->beta2, wd = h->weight_decay;
    const double bc1 = 1.0 - pow((double)b1, (double)step);
    const double bc2 = 1.0 - pow((double)b2, (double)step);
    AdamArgs a = {
        .param = param,
        .m = m,
        .v = v,
        .grad = grad,
        .n = n,
        .b1 = b1,
        .b2 = b2,
        .eps = h->eps,
        .wd = wd,
        .step_size = (float)((double)h->lr / bc1),
        .bc2_sqrt = (float)sqrt(bc2),
        .decay = (float)(1.0 - (double)h->lr * (double)wd),
        .coupled_decay = !h->decoupled && wd != 0.0f,
        .param_decay = h->decoupled && wd != 0.0f,
    };
    const int nt = cpu_split_count(n, ADAM_MIN_ELEMS);
    if (nt == 1)
        adam_elems(&a, 0, n);
    else
        cpu_parallel(nt, adam_task, &a);
}

/* Reads x[i] before writing y[i], so x == y (in place) is allowed. */
void f32_toy_forward(const float w[3], const float *x, float *y, size_t n) {
    const float w0 = w[0], w1 = w[1], w2 = w[2];
    for (size_t i = 0; i < n; i++) y[i] = w0 * tanhf(w1 * x[i] + w2);
}

/* Batch sums in double, in index order, so dw does not depend on how a caller splits work.
 * dx may alias x or dy: each element is read before it is written. */
void f32_toy_backward(const float w[3], const float *x, const float *dy, float *dx, float dw[3],
                      size_t n) {
    const float w0 = w[0], w1 = w[1], w2 = w[2];
    double s0 = 0.0, s1 = 0.0, s2 = 0.0;
    for (size_t i = 0; i < n; i++) {
        float xi = x[i], t = tanhf(w1 * xi + w2);
        float dz = dy[i] * w0 * (1.0f - t * t); /* dL/dz */
        s0 += (double)dy[i] * (double)t;
        s1 += (double)dz * (double)xi;
        s2 += (double)dz;
        if (dx) dx[i] = dz * w1;
    }
    dw[0] = (float)((double)dw[0] + s0);
    dw[1] = (float)((double)dw[1] + s1);
    dw[2] = (float)((double)dw[2] + s2);
}

/* dy may be NULL when only the loss is wanted (evaluation). */
float f32_mse_loss(const float *y, const float *target, float *dy, size_t n) {
    if (n == 0) return 0.0f;
    const double scale = 2.0 / (double)n;
    double sum = 0.0;
    for (size_t i = 0; i < n; i++) {
        double d = (double)y[i] - (double)target[i];
        sum += d * d;
        if (dy) dy[i] = (float)(scale * d);
    }
    return (float)(sum / (double)n);
}

#define CPU_OP(op) .op = cpu_##op,
/* Attention of any length: the probabilities (eager's, and flash's one pair at a time in the
 * caller's work tile) are host memory. */
const Kernels kernels_cpu = {.name = "cpu",
                             .dtypes = KERNEL_ALL_DTYPES,
                             .max_tokens = 0,
                             .max_flash_tokens = 0,
                             .flash_uses_work = 1,
                             KERNEL_OPS(CPU_OP)};
