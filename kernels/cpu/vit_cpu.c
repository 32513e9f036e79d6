/* vit_cpu: the transformer block's ops but attention (attention_cpu.c) and the Vision
 * Transformer's on the CPU (semantics in ../kernels.h): GEMMs through OpenBLAS, the rest
 * vectorised by GCC, split over the bound pool with results that depend only on the inputs and
 * the pool's size. The shared inner loops are cpu_math.h's. */
#include <cblas.h>
#include <math.h>
#include <stdint.h>
#include <string.h>

#include "kernels/cpu/cpu_fp32.h"
#include "kernels/cpu/cpu_math.h"
#include "kernels/cpu/cpu_ops.h"
#include "kernels/cpu/pool.h"
#include "kernels/kernels.h"

/* GEMMs go through OpenBLAS; everything else is written for GCC at -O2, whose "very cheap"
 * vectoriser only takes loops whose trip count is a known multiple of the vector width: inner loops
 * run over fixed chunks of CHUNK elements (then a scalar tail) and are fully unrolled (UNROLL) so
 * partial sums stay in registers. Reductions keep CHUNK interleaved partial sums added in a fixed
 * order, so a result depends only on the inputs and the pool's size (below). exp and erf are inline
 * approximations (no libm call per element), erf being the one PyTorch's vectorised CPU GELU uses.
 * Ops never allocate device memory; attention keeps a T x T tile of host scratch per task
 * (attention_cpu.c), and the low-precision forms their widened operands (dtype_cpu.c).
 *
 * With a pool bound to the calling thread (kernels_cpu_use_pool), an op whose work pays for a
 * dispatch splits it into one task per pool thread, fewer when each would get less than a measured
 * minimum (the *_MIN_* constants below). Everything is split by rows, cut at the same places from
 * one op to the next (linear's at multiples of GEMM_ROW_ALIGN, attention's by (sample, head) pairs,
 * elementwise ops by elements: within a few rows of each other), so each core works on the rows it
 * wrote in the op before; on the 2-core development VM, splitting the gradients' column ranges
 * instead (every task reading every row) made LayerNorm backward 2x slower than serial and linear
 * backward 10% slower. Where a task computes whole outputs (linear's out and din, LayerNorm, GELU,
 * attention, add, Adam, the fused ops' outputs) it does so in the serial code's order: the same
 * bits. The gradients that sum over rows (linear's and LayerNorm's dw and db, bias_grad, bias +
 * GELU's db) are summed per task into the pool's scratch and added in task order: bit-identical run
 * to run for a pool size, rounded differently between sizes. When the partials do not fit the
 * scratch, they are split by columns instead, every task summing all rows in the serial order.
 *
 * linear's tasks each make their own single-threaded sgemm call on a block of rows. Cut at
 * multiples of 24 rows, these give exactly the whole call's results with OpenBLAS 0.3's Haswell
 * sgemm kernel (also Zen's), whose microkernel works on 12 rows of our row-major matrices at a
 * time: the blocks keep its tiles where the whole call has them (checked on 900 random shapes; cut
 * at multiples of 16, tiles at the edges rounded differently). Other kernels may round their edge
 * tiles differently. */

/* Declared by OpenBLAS's cblas.h but not by the netlib one the alternatives may point at. */
extern void openblas_set_num_threads(int);

static const float INV_SQRT2 = 0.70710678118654752440f;
static const float INV_SQRT_2PI = 0.39894228040143267794f;

void kernels_cpu_set_threads(int n) {
    openblas_set_num_threads(n < 1 ? 1 : n);
}

/* ---- the calling thread's pool ----
 *
 * Thread-local because the Kernels table's signatures carry no context to put a pool in: the
 * simulator runs each rank as a thread, each rank thread creates and binds its own pool, and
 * nothing else is shared, so ranks never contend for one pool and ops called on a pool's
 * workers (where nothing is bound) run serially instead of nesting. */
static _Thread_local CpuPool *bound_pool;

void kernels_cpu_use_pool(CpuPool *p) {
    bound_pool = p;
}

CpuPool *kernels_cpu_pool(void) {
    return bound_pool;
}

/* Smallest work per task worth a dispatch: multiply-adds for linear, elements for LayerNorm,
 * the elementwise ops and bias sums, multiply-adds of q k^T and P v per (sample, head) for
 * attention (backward counts 2.5 times that). Measured with a pool of 2 on the 2-core
 * development VM, serial against split at growing sizes (K = N = 128, C = 128, T = 17, D = 64):
 * each is about where splitting in two starts to pay (1.1-1.5x), e.g. linear backward 1.1x at
 * 2^20 multiply-adds in all, GELU 1.2x at 4096 elements, add 1.1x at 65536, attention 1.4x at
 * 2 samples; vit-tiny's ops at batch 64 are 5 to 50 times these and run 1.3x (LayerNorm) to
 * 2x (GEMMs, attention, GELU) faster. A dispatch costs about 2 us when the workers are
 * spinning. */
#define LINEAR_MIN_MACS ((size_t)1 << 19)
#define LAYERNORM_MIN_ELEMS ((size_t)1 << 14)
#define GELU_MIN_ELEMS ((size_t)1 << 11)
#define ADD_MIN_ELEMS ((size_t)1 << 15)
#define BIAS_MIN_ELEMS ((size_t)1 << 16)
#define REDUCE_MIN_ELEMS ((size_t)1 << 15)
/* Row blocks of linear's GEMMs are multiples of this: a multiple of the 12 rows that OpenBLAS's
 * Haswell sgemm microkernel takes at a time (and of 8, 6, 4, 3 and 2), see above. */
#define GEMM_ROW_ALIGN 24

/* How many tasks to cut `work` into: one per thread of the bound pool, fewer so that each has
 * at least min_work; 1 without a pool. Depends only on its arguments and the pool's size. */
int cpu_split_count(size_t work, size_t min_work) {
    const int threads = cpu_pool_threads(bound_pool);
    if (threads <= 1) return 1;
    const size_t most = min_work ? work / min_work : work;
    if (most <= 1) return 1;
    return most < (size_t)threads ? (int)most : threads;
}

/* Task t of n's share [*begin, *end) of `count` items, cut at multiples of `align` (the last
 * share takes the remainder; shares may be empty). */
void cpu_split_range(size_t count, size_t align, int t, int n, size_t *begin, size_t *end) {
    const size_t units = (count + align - 1) / align;
    const size_t b = units * (size_t)t / (size_t)n * align;
    const size_t e = units * (size_t)(t + 1) / (size_t)n * align;
    *begin = b < count ? b : count;
    *end = e < count ? e : count;
}

/* Runs fn over n tasks on the bound pool (n == 1: directly). */
void cpu_parallel(int n, CpuPoolFn fn, void *ctx) {
    if (n <= 1)
        fn(ctx, 0, 1);
    else
        cpu_pool_run(bound_pool, n, fn, ctx);
}

typedef struct RangeTask {
    CpuRangeFn fn;
    const void *ctx;
    size_t count, align;
} RangeTask;

static void range_task(void *ctx, int t, int n) {
    const RangeTask *r = ctx;
    size_t begin, end;
    cpu_split_range(r->count, r->align, t, n, &begin, &end);
    r->fn(r->ctx, begin, end);
}

void cpu_parallel_range(size_t count, size_t align, size_t work, size_t min_work, CpuRangeFn fn,
                        const void *ctx) {
    const int n = cpu_split_count(work, min_work);
    if (n == 1) {
        fn(ctx, 0, count);
        return;
    }
    RangeTask r = {.fn = fn, .ctx = ctx, .count = count, .align = align};
    cpu_parallel(n, range_task, &r);
}

/* dst[j] += sum over `rows` rows (src + i * stride) of src[j], j < cols: each column is summed
 * over the rows first (strips of STRIP columns held in registers) and added to dst once. */
VECTOR_CLONES
static void colsum_add(float *restrict dst, const float *restrict src, size_t rows, size_t cols,
                       size_t stride) {
    enum { STRIP = 32 };
    for (size_t j0 = 0; j0 < cols; j0 += STRIP) {
        float acc[STRIP] = {0};
        size_t width = cols - j0 < STRIP ? cols - j0 : STRIP;
        const float *col = src + j0;
        if (width == STRIP) {
            for (size_t i = 0; i < rows; i++) {
                UNROLL
                for (int k = 0; k < STRIP; k++) acc[k] += col[i * stride + k];
            }
        } else {
            for (size_t i = 0; i < rows; i++)
                for (size_t k = 0; k < width; k++) acc[k] += col[i * stride + k];
        }
        for (size_t k = 0; k < width; k++) dst[j0 + k] += acc[k];
    }
}

/* y[i] += x[i], in CHUNKs so that it vectorises (at -O2 GCC leaves a loop of unknown length
 * scalar): how the per-task partial sums are added, in task order, into a gradient. */
VECTOR_CLONES
static void add_into(float *restrict y, const float *restrict x, size_t n) {
    size_t i = 0;
    for (; i + CHUNK <= n; i += CHUNK) {
        UNROLL
        for (int k = 0; k < CHUNK; k++) y[i + k] += x[i + k];
    }
    for (; i < n; i++) y[i] += x[i];
}

typedef struct ColsumArgs {
    float *partials; /* cols floats per task */
    const float *src;
    size_t rows, cols, stride;
} ColsumArgs;

/* Task t: the column sums of its share of the rows (cut like linear's), into its partials. */
static void colsum_rows_task(void *ctx, int t, int n) {
    const ColsumArgs *a = ctx;
    size_t r0, r1;
    cpu_split_range(a->rows, GEMM_ROW_ALIGN, t, n, &r0, &r1);
    float *part = a->partials + a->cols * (size_t)t;
    memset(part, 0, a->cols * sizeof(float));
    colsum_add(part, a->src + r0 * a->stride, r1 - r0, a->cols, a->stride);
}

/* With a pool, each task sums the rows it holds in its cache and the partials are added to db
 * in task order. */
void f32_bias_grad(float *db, const float *dout, size_t rows, size_t cols, size_t stride) {
    const int n = cpu_split_count(rows * cols, BIAS_MIN_ELEMS);
    size_t room;
    float *partials = cpu_pool_scratch(kernels_cpu_pool(), &room);
    if (n == 1 || cols * (size_t)n > room) {
        colsum_add(db, dout, rows, cols, stride);
        return;
    }
    ColsumArgs a = {
        .partials = partials, .src = dout, .rows = rows, .cols = cols, .stride = stride};
    cpu_parallel(n, colsum_rows_task, &a);
    for (int t = 0; t < n; t++) {
        const float *part = partials + cols * (size_t)t;
        add_into(db, part, cols);
    }
}

/* ---- Linear ---- */

typedef struct LinearArgs {
    float *out, *din, *dw, *db;
    const float *in, *w, *b, *dout;
    size_t M, K, N;
    float *partials; /* backward by rows: tasks 1.. sum dw and db here, N K + N floats each */
} LinearArgs;

/* rows [m0, m1) of out */
static void linear_forward_rows(const LinearArgs *a, size_t m0, size_t m1) {
    const size_t K = a->K, N = a->N;
    if (m1 <= m0) return;
    float *out = a->out + m0 * N;
    if (a->b)
        for (size_t i = m0; i < m1; i++) memcpy(a->out + i * N, a->b, N * sizeof(float));
    if (K == 0) { /* an empty product: lda = 0 is not a valid GEMM */
        if (!a->b) memset(out, 0, (m1 - m0) * N * sizeof(float));
        return;
    }
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, (int)(m1 - m0), (int)N, (int)K, 1.0f,
                a->in + m0 * K, (int)K, a->w, (int)K, a->b ? 1.0f : 0.0f, out, (int)N);
}

static void linear_forward_task(void *ctx, int t, int n) {
    const LinearArgs *a = ctx;
    size_t m0, m1;
    cpu_split_range(a->M, GEMM_ROW_ALIGN, t, n, &m0, &m1);
    linear_forward_rows(a, m0, m1);
}

void f32_linear_forward(float *out, const float *in, const float *w, const float *b, size_t M,
                        size_t K, size_t N) {
    if (M == 0 || N == 0) return;
    LinearArgs a = {.out = out, .in = in, .w = w, .b = b, .M = M, .K = K, .N = N};
    const int n = cpu_split_count(M * K * N, LINEAR_MIN_MACS);
    if (n == 1)
        linear_forward_rows(&a, 0, M);
    else
        cpu_parallel(n, linear_forward_task, &a);
}

/* din's rows [m0, m1) = dout[m0:m1] w */
static void linear_din_rows(const LinearArgs *a, size_t m0, size_t m1) {
    const size_t K = a->K, N = a->N;
    if (!a->din || K == 0 || m1 <= m0) return;
    if (N == 0)
        memset(a->din + m0 * K, 0, (m1 - m0) * K * sizeof(float));
    else
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, (int)(m1 - m0), (int)K, (int)N, 1.0f,
                    a->dout + m0 * N, (int)N, a->w, (int)K, 0.0f, a->din + m0 * K, (int)K);
}

/* dw[n0:n1] += dout[:, n0:n1]^T in (a GEMM over dout's columns n0.. with leading dimension
 * N) and db[n0:n1] += dout's column sums: every row, in the serial order. */
static void linear_dw_cols(const LinearArgs *a, size_t n0, size_t n1) {
    const size_t M = a->M, K = a->K, N = a->N;
    if (n1 <= n0) return;
    if (K > 0)
        cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, (int)(n1 - n0), (int)K, (int)M, 1.0f,
                    a->dout + n0, (int)N, a->in, (int)K, 1.0f, a->dw + n0 * K, (int)K);
    if (a->db) colsum_add(a->db + n0, a->dout + n0, M, n1 - n0, N);
}

/* Split by columns: din's rows share t, dw's and db's columns share t. Each task reads every
 * row of dout and in: the fallback when the pool's scratch cannot hold the partials. */
static void linear_backward_cols_task(void *ctx, int t, int n) {
    const LinearArgs *a = ctx;
    size_t m0, m1, n0, n1;
    cpu_split_range(a->M, GEMM_ROW_ALIGN, t, n, &m0, &m1);
    cpu_split_range(a->N, GEMM_ROW_ALIGN, t, n, &n0, &n1);
    linear_din_rows(a, m0, m1);
    linear_dw_cols(a, n0, n1);
}

/* Split by rows: din's rows share t, and dw and db summed over the same rows, task 0 into dw
 * and db themselves, task t > 0 into its zeroed partials, which linear_reduce_task adds. Each
 * task touches only its own rows of dout, in and din: the ones it wrote or will read in the
 * ops before and after, which stay in its core's cache. */
static void linear_backward_rows_task(void *ctx, int t, int n) {
    const LinearArgs *a = ctx;
    const size_t K = a->K, N = a->N;
    size_t m0, m1;
    cpu_split_range(a->M, GEMM_ROW_ALIGN, t, n, &m0, &m1);
    linear_din_rows(a, m0, m1);
    float *dw = a->dw, *db = a->db;
    if (t > 0) {
        dw = a->partials + (size_t)(t - 1) * (N * K + N);
        db = a->db ? dw + N * K : NULL;
        memset(dw, 0, (N * K + (db ? N : 0)) * sizeof(float));
    }
    if (m1 <= m0) return;
    cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, (int)N, (int)K, (int)(m1 - m0), 1.0f,
                a->dout + m0 * N, (int)N, a->in + m0 * K, (int)K, 1.0f, dw, (int)K);
    if (db) colsum_add(db, a->dout + m0 * N, m1 - m0, N, N);
}

/* dw and db += the partials of tasks 1..n-1 in task order, over task t's share of their
 * elements (dw's N K, then db's N, as one range). */
typedef struct ReduceArgs {
    float *dw, *db;
    const float *partials;
    size_t NK, N;
    int parts;
} ReduceArgs;

VECTOR_CLONES
static void linear_reduce_task(void *ctx, int t, int n) {
    const ReduceArgs *r = ctx;
    const size_t total = r->NK + (r->db ? r->N : 0), stride = r->NK + r->N;
    size_t i0, i1;
    cpu_split_range(total, 64, t, n, &i0, &i1);
    const size_t dw_end = i1 < r->NK ? i1 : r->NK, db_begin = i0 > r->NK ? i0 : r->NK;
    for (int p = 0; p < r->parts; p++) {
        const float *part = r->partials + (size_t)p * stride;
        if (i0 < dw_end) add_into(r->dw + i0, part + i0, dw_end - i0);
        if (db_begin < i1) add_into(r->db + (db_begin - r->NK), part + db_begin, i1 - db_begin);
    }
}

void f32_linear_backward(float *din, float *dw, float *db, const float *dout, const float *in,
                         const float *w, size_t M, size_t K, size_t N) {
    if (M == 0) return; /* no rows: every gradient is += 0 and din is empty */
    LinearArgs a = {
        .din = din, .dw = dw, .db = db, .dout = dout, .in = in, .w = w, .M = M, .K = K, .N = N};
    /* din and dw are each M K N multiply-adds, split the same n ways */
    const int n = cpu_split_count(M * K * N, LINEAR_MIN_MACS);
    if (n == 1) {
        linear_din_rows(&a, 0, M);
        linear_dw_cols(&a, 0, N);
        return;
    }
    size_t room;
    a.partials = cpu_pool_scratch(kernels_cpu_pool(), &room);
    if (K == 0 || N == 0 || (size_t)(n - 1) * (N * K + N) > room) {
        cpu_parallel(n, linear_backward_cols_task, &a);
        return;
    }
    cpu_parallel(n, linear_backward_rows_task, &a);
    ReduceArgs r = {
        .dw = dw, .db = db, .partials = a.partials, .NK = N * K, .N = N, .parts = n - 1};
    cpu_parallel(cpu_split_count(N * K, REDUCE_MIN_ELEMS), linear_reduce_task, &r);
}

/* ---- LayerNorm ---- */

typedef struct LayerNormArgs {
    float *out, *mean, *rstd, *din, *dw, *db;
    const float *in, *w, *b, *dout, *cmean, *crstd;
    size_t M, C;
    float eps;
} LayerNormArgs;

VECTOR_CLONES
static void layernorm_forward_rows(float *restrict out, float *restrict mean, float *restrict rstd,
                                   const float *restrict in, const float *restrict w,
                                   const float *restrict b, size_t m0, size_t m1, size_t C,
                                   float eps) {
    const float inv_c = 1.0f / (float)C;
    for (size_t i = m0; i < m1; i++) {
        const float *x = in + i * C;
        float *y = out + i * C;
        /* two passes over a row that sits in L1: no cancellation from sum of squares */
        const float mu = row_sum(x, C) * inv_c;
        const float rs = 1.0f / sqrtf(row_sq_dev(x, mu, C) * inv_c + eps);
        mean[i] = mu;
        rstd[i] = rs;
        size_t j = 0;
        for (; j + CHUNK <= C; j += CHUNK) {
            UNROLL
            for (int k = 0; k < CHUNK; k++) y[j + k] = (x[j + k] - mu) * rs * w[j + k] + b[j + k];
        }
        for (; j < C; j++) y[j] = (x[j] - mu) * rs * w[j] + b[j];
    }
}

static void layernorm_forward_task(const void *ctx, size_t m0, size_t m1) {
    const LayerNormArgs *a = ctx;
    layernorm_forward_rows(a->out, a->mean, a->rstd, a->in, a->w, a->b, m0, m1, a->C, a->eps);
}

void f32_layernorm_forward(float *out, float *mean, float *rstd, const float *in, const float *w,
                           const float *b, size_t M, size_t C, float eps) {
    if (C == 0) return;
    LayerNormArgs a = {.out = out,
                       .mean = mean,
                       .rstd = rstd,
                       .in = in,
                       .w = w,
                       .b = b,
                       .M = M,
                       .C = C,
                       .eps = eps};
    cpu_parallel_range(M, 1, M * C, LAYERNORM_MIN_ELEMS, layernorm_forward_task, &a);
}

/* din's rows [m0, m1) alone: the row's two sums first, each its own loop of loads so GCC keeps
 * the partial sums in registers; then one elementwise pass. */
VECTOR_CLONES
static void layernorm_backward_din_rows(float *restrict din, const float *restrict dout,
                                        const float *restrict in, const float *restrict mean,
                                        const float *restrict rstd, const float *restrict w,
                                        size_t m0, size_t m1, size_t C) {
    const float inv_c = 1.0f / (float)C;
    for (size_t i = m0; i < m1; i++) {
        const float *x = in + i * C, *g = dout + i * C;
        float *dx = din + i * C;
        const float mu = mean[i], rs = rstd[i];
        const float s1 = dot(g, w, C), s2 = dot_centered(g, w, x, mu, C) * rs;
        const float m1_ = s1 * inv_c, m2 = s2 * inv_c;
        size_t j = 0;
        for (; j + CHUNK <= C; j += CHUNK) {
            UNROLL
            for (int k = 0; k < CHUNK; k++) {
                const float xh = (x[j + k] - mu) * rs;
                dx[j + k] += rs * (g[j + k] * w[j + k] - m1_ - xh * m2);
            }
        }
        for (; j < C; j++) {
            const float xh = (x[j] - mu) * rs;
            dx[j] += rs * (g[j] * w[j] - m1_ - xh * m2);
        }
    }
}

/* dw and db's columns [c0, c1) over all M rows, each column summed over the rows in order
 * starting from its current value: the serial loop's order, so the same sums. Strips of STRIP
 * columns are held in registers across the rows. */
VECTOR_CLONES
static void layernorm_backward_dw_cols(float *restrict dw, float *restrict db,
                                       const float *restrict dout, const float *restrict in,
                                       const float *restrict mean, const float *restrict rstd,
                                       size_t M, size_t C, size_t c0, size_t c1) {
    enum { STRIP = 16 };
    for (size_t j0 = c0; j0 < c1; j0 += STRIP) {
        const size_t width = c1 - j0 < STRIP ? c1 - j0 : STRIP;
        if (width == STRIP) {
            float aw[STRIP], ab[STRIP];
            UNROLL
            for (int k = 0; k < STRIP; k++) aw[k] = dw[j0 + k], ab[k] = db[j0 + k];
            for (size_t i = 0; i < M; i++) {
                const float *x = in + i * C + j0, *g = dout + i * C + j0;
                const float mu = mean[i], rs = rstd[i];
                UNROLL
                for (int k = 0; k < STRIP; k++) {
                    const float xh = (x[k] - mu) * rs;
                    aw[k] += g[k] * xh;
                    ab[k] += g[k];
                }
            }
            UNROLL
            for (int k = 0; k < STRIP; k++) dw[j0 + k] = aw[k], db[j0 + k] = ab[k];
        } else {
            for (size_t i = 0; i < M; i++) {
                const float *x = in + i * C + j0, *g = dout + i * C + j0;
                const float mu = mean[i], rs = rstd[i];
                for (size_t k = 0; k < width; k++) {
                    const float xh = (x[k] - mu) * rs;
                    dw[j0 + k] += g[k] * xh;
                    db[j0 + k] += g[k];
                }
            }
        }
    }
}

/* dxhat = dout * w; din += rstd * (dxhat - mean(dxhat) - xhat * mean(dxhat * xhat));
 * dw += dout * xhat; db += dout. The serial form: din row by row, then dw and db column by
 * column over all rows in order (each sum as a loop over the rows would make it). */
static void layernorm_backward_serial(float *din, float *dw, float *db, const float *dout,
                                      const float *in, const float *mean, const float *rstd,
                                      const float *w, size_t M, size_t C) {
    layernorm_backward_din_rows(din, dout, in, mean, rstd, w, 0, M, C);
    layernorm_backward_dw_cols(dw, db, dout, in, mean, rstd, M, C, 0, C);
}

/* Task t: din's rows share t and dw/db's columns share t (columns in multiples of CHUNK). */
static void layernorm_backward_cols_task(void *ctx, int t, int n) {
    const LayerNormArgs *a = ctx;
    size_t m0, m1, c0, c1;
    cpu_split_range(a->M, 1, t, n, &m0, &m1);
    cpu_split_range(a->C, CHUNK, t, n, &c0, &c1);
    layernorm_backward_din_rows(a->din, a->dout, a->in, a->cmean, a->crstd, a->w, m0, m1, a->C);
    layernorm_backward_dw_cols(a->dw, a->db, a->dout, a->in, a->cmean, a->crstd, a->M, a->C, c0,
                               c1);
}

/* Task t: rows share t of everything, dw and db summed into zeroed partials (scratch
 * + 2 C t: dw's, then db's) that the caller adds in task order. Unlike the column split, each
 * task touches only its own rows, which the ops before and after it also give to it. */
static void layernorm_backward_rows_task(void *ctx, int t, int n) {
    const LayerNormArgs *a = ctx;
    const size_t C = a->C;
    size_t m0, m1;
    cpu_split_range(a->M, 1, t, n, &m0, &m1);
    float *pw = a->dw + 2 * C * (size_t)t, *pb = pw + C;
    memset(pw, 0, 2 * C * sizeof(float));
    layernorm_backward_serial(a->din + m0 * C, pw, pb, a->dout + m0 * C, a->in + m0 * C,
                              a->cmean + m0, a->crstd + m0, a->w, m1 - m0, C);
}

void f32_layernorm_backward(float *din, float *dw, float *db, const float *dout, const float *in,
                            const float *mean, const float *rstd, const float *w, size_t M,
                            size_t C) {
    if (C == 0) return;
    const int n = cpu_split_count(M * C, LAYERNORM_MIN_ELEMS);
    if (n == 1) {
        layernorm_backward_serial(din, dw, db, dout, in, mean, rstd, w, M, C);
        return;
    }
    LayerNormArgs a = {.din = din,
                       .dw = dw,
                       .db = db,
                       .dout = dout,
                       .in = in,
                       .cmean = mean,
                       .crstd = rstd,
                       .w = w,
                       .M = M,
                       .C = C};
    size_t room;
    float *partials = cpu_pool_scratch(kernels_cpu_pool(), &room);
    if (2 * C * (size_t)n > room) { /* a very wide row: columns, exactly the serial sums */
        cpu_parallel(n, layernorm_backward_cols_task, &a);
        return;
    }
    a.dw = partials;
    cpu_parallel(n, layernorm_backward_rows_task, &a);
    for (int t = 0; t < n; t++) {
        const float *pw = partials + 2 * C * (size_t)t, *pb = pw + C;
        add_into(dw, pw, C);
        add_into(db, pb, C);
    }
}

/* ---- exp and erf without calls, so loops over them vectorise ---- */

/* ---- GELU (exact, erf) ---- */

/* Elementwise ops over a split: task t of nt takes its CHUNK-aligned share of n elements. */
typedef struct ElemArgs {
    float *out;
    const float *a, *b;
    size_t n;
} ElemArgs;

static void gelu_forward_serial(float *out, const float *in, size_t n);
static void gelu_backward_serial(float *din, const float *in, const float *dout, size_t n);
static void add_serial(float *out, const float *a, const float *b, size_t n);

static void gelu_forward_elems(const void *ctx, size_t i0, size_t i1) {
    const ElemArgs *e = ctx;
    gelu_forward_serial(e->out + i0, e->a + i0, i1 - i0);
}

static void gelu_backward_elems(const void *ctx, size_t i0, size_t i1) {
    const ElemArgs *e = ctx;
    gelu_backward_serial(e->out + i0, e->a + i0, e->b + i0, i1 - i0);
}

static void add_elems(const void *ctx, size_t i0, size_t i1) {
    const ElemArgs *e = ctx;
    add_serial(e->out + i0, e->a + i0, e->b + i0, i1 - i0);
}

void f32_gelu_forward(float *out, const float *in, size_t n) {
    ElemArgs e = {.out = out, .a = in, .n = n};
    cpu_parallel_range(n, CHUNK, n, GELU_MIN_ELEMS, gelu_forward_elems, &e);
}

void f32_gelu_backward(float *din, const float *in, const float *dout, size_t n) {
    ElemArgs e = {.out = din, .a = in, .b = dout, .n = n};
    cpu_parallel_range(n, CHUNK, n, GELU_MIN_ELEMS, gelu_backward_elems, &e);
}

void f32_add(float *out, const float *a, const float *b, size_t n) {
    ElemArgs e = {.out = out, .a = a, .b = b, .n = n};
    cpu_parallel_range(n, CHUNK, n, ADD_MIN_ELEMS, add_elems, &e);
}

/* GELU(x) = x Phi(x) */
static inline float gelu_value(float x) {
    return 0.5f * x * (1.0f + erf_approx(x * INV_SQRT2));
}

/* Every element of a chunk is read before any is written, so out may be in. */
VECTOR_CLONES
static void gelu_forward_serial(float *out, const float *in, size_t n) {
    size_t i = 0;
    for (; i + CHUNK <= n; i += CHUNK) {
        float y[CHUNK];
        UNROLL
        for (int k = 0; k < CHUNK; k++) y[k] = gelu_value(in[i + k]);
        UNROLL
        for (int k = 0; k < CHUNK; k++) out[i + k] = y[k];
    }
    for (; i < n; i++) out[i] = gelu_value(in[i]);
}

/* GELU'(x) = Phi(x) + x phi(x) */
static inline float gelu_grad(float x) {
    const float cdf = 0.5f * (1.0f + erf_approx(x * INV_SQRT2));
    const float pdf = exp_approx(-0.5f * x * x) * INV_SQRT_2PI;
    return cdf + x * pdf;
}

/* din may be dout (chunks are read before they are written). */
VECTOR_CLONES
static void gelu_backward_serial(float *din, const float *in, const float *dout, size_t n) {
    size_t i = 0;
    for (; i + CHUNK <= n; i += CHUNK) {
        float g[CHUNK];
        UNROLL
        for (int k = 0; k < CHUNK; k++) g[k] = dout[i + k] * gelu_grad(in[i + k]);
        UNROLL
        for (int k = 0; k < CHUNK; k++) din[i + k] = g[k];
    }
    for (; i < n; i++) din[i] = dout[i] * gelu_grad(in[i]);
}

/* ---- fused: bias + GELU, residual + LayerNorm ----
 *
 * Each computes, element for element, what the unfused ops compute, in the same order: bias
 * + GELU is the bias add then gelu_forward's formula; its backward redoes the bias add (the
 * same float add, so the same pre-activation) for gelu_backward's product, with the bias
 * gradient's column sums taken as colsum_add takes them (each column summed over the rows in
 * order from 0, then added once); residual + LayerNorm is add, then layernorm_forward's rows. So
 * serially the results are those of the ops they replace, bit for bit (bias + GELU's against
 * linear_forward with its bias: see kernels.h). What they save is memory traffic: a pass over the
 * tensor each, with the row still in L1 for the second half. (Here that is worth little: at
 * vit-tiny's sizes the tensors sit in cache and GELU's erf and exp cost more than the passes; on
 * the development VM the fused ops and the pairs they replace ran within a few percent of each
 * other, inside the noise.) With a pool, bias + GELU forward splits elements as gelu_forward does;
 * its backward splits rows at multiples of GEMM_ROW_ALIGN (the cut of the GEMM after it, so each
 * core keeps its rows) with each task's column sums in the scratch, added in task order
 * (bias_grad's scheme: the last bits depend on the pool's size), or, for few or very wide rows,
 * columns (every row in the serial order: the serial sums); residual + LayerNorm splits rows as
 * LayerNorm does. */

typedef struct FusedArgs {
    float *out, *dpre, *db, *partials, *sum, *mean, *rstd;
    const float *b, *dout, *cpre, *x, *y, *w;
    size_t M, N; /* rows, columns (LayerNorm's C) */
    float eps;
} FusedArgs;

/* elements [i0, i1) of pre[., N]: out = GELU(pre + b) (b[j] for column j); a run of columns
 * at a time, so any cut works */
VECTOR_CLONES
static void bias_gelu_forward_range(float *restrict out, const float *restrict pre,
                                    const float *restrict b, size_t i0, size_t i1, size_t N) {
    for (size_t i = i0; i < i1;) {
        const size_t j0 = i % N, len = N - j0 < i1 - i ? N - j0 : i1 - i;
        const float *x = pre + i, *bj = b + j0;
        float *y = out + i;
        size_t j = 0;
        for (; j + CHUNK <= len; j += CHUNK) {
            UNROLL
            for (int k = 0; k < CHUNK; k++) y[j + k] = gelu_value(x[j + k] + bj[j + k]);
        }
        for (; j < len; j++) y[j] = gelu_value(x[j] + bj[j]);
        i += len;
    }
}

/* Task t: its share of the elements, cut at CHUNK multiples as gelu_forward's. */
static void bias_gelu_forward_task(const void *ctx, size_t i0, size_t i1) {
    const FusedArgs *a = ctx;
    bias_gelu_forward_range(a->out, a->cpre, a->b, i0, i1, a->N);
}

void f32_bias_gelu_forward(float *out, const float *pre, const float *b, size_t M, size_t N) {
    if (M == 0 || N == 0) return;
    FusedArgs a = {.out = out, .cpre = pre, .b = b, .M = M, .N = N};
    cpu_parallel_range(M * N, CHUNK, M * N, GELU_MIN_ELEMS, bias_gelu_forward_task, &a);
}

/* Rows [m0, m1), columns [c0, c1) of dpre = dout * GELU'(pre + b), and db[j] += those rows' sum of
 * dpre[., j]. Row by row over blocks of at most BG_COLS columns, each column's sum kept in a
 * block of zeroed sums on the stack and added to db once: colsum_add's order (rows in order,
 * from 0), while the rows stream through as they lie in memory. dpre may be dout: a chunk is
 * read before it is written. */
enum { BG_COLS = 512 };

VECTOR_CLONES
static void bias_gelu_backward_block(float *dpre, float *restrict db, const float *dout,
                                     const float *restrict pre, const float *restrict b, size_t m0,
                                     size_t m1, size_t N, size_t c0, size_t c1) {
    float acc[BG_COLS];
    for (size_t j0 = c0; j0 < c1; j0 += BG_COLS) {
        const size_t width = c1 - j0 < BG_COLS ? c1 - j0 : BG_COLS;
        const float *bj = b + j0;
        memset(acc, 0, width * sizeof(float));
        for (size_t i = m0; i < m1; i++) {
            const float *g = dout + i * N + j0, *x = pre + i * N + j0;
            float *d = dpre + i * N + j0;
            size_t k = 0;
            for (; k + CHUNK <= width; k += CHUNK) {
                float v[CHUNK];
                UNROLL
                for (int c = 0; c < CHUNK; c++) v[c] = g[k + c] * gelu_grad(x[k + c] + bj[k + c]);
                UNROLL
                for (int c = 0; c < CHUNK; c++) {
                    d[k + c] = v[c];
                    acc[k + c] += v[c];
                }
            }
            for (; k < width; k++) {
                const float v = g[k] * gelu_grad(x[k] + bj[k]);
                d[k] = v;
                acc[k] += v;
            }
        }
        for (size_t k = 0; k < width; k++) db[j0 + k] += acc[k];
    }
}

/* Task t: its rows (cut like the GEMMs'), db's sums into its zeroed partials (N floats). */
static void bias_gelu_backward_rows_task(void *ctx, int t, int n) {
    const FusedArgs *a = ctx;
    size_t m0, m1;
    cpu_split_range(a->M, GEMM_ROW_ALIGN, t, n, &m0, &m1);
    float *part = a->partials + a->N * (size_t)t;
    memset(part, 0, a->N * sizeof(float));
    bias_gelu_backward_block(a->dpre, part, a->dout, a->cpre, a->b, m0, m1, a->N, 0, a->N);
}

/* Task t: every row of its columns (cut at CHUNK multiples), straight into db: the serial sums.
 * For rows too few to give every task a block of GEMM_ROW_ALIGN, or too wide for the partials
 * to fit the scratch. */
static void bias_gelu_backward_cols_task(void *ctx, int t, int n) {
    const FusedArgs *a = ctx;
    size_t c0, c1;
    cpu_split_range(a->N, CHUNK, t, n, &c0, &c1);
    bias_gelu_backward_block(a->dpre, a->db, a->dout, a->cpre, a->b, 0, a->M, a->N, c0, c1);
}

void f32_bias_gelu_backward(float *dpre, float *db, const float *dout, const float *pre,
                            const float *b, size_t M, size_t N) {
    if (M == 0 || N == 0) return;
    const int n = cpu_split_count(M * N, GELU_MIN_ELEMS);
    if (n == 1) {
        bias_gelu_backward_block(dpre, db, dout, pre, b, 0, M, N, 0, N);
        return;
    }
    size_t room;
    FusedArgs a = {.dpre = dpre, .db = db, .dout = dout, .cpre = pre, .b = b, .M = M, .N = N};
    a.partials = cpu_pool_scratch(kernels_cpu_pool(), &room);
    if (N * (size_t)n > room || M < (size_t)n * GEMM_ROW_ALIGN) {
        cpu_parallel(n, bias_gelu_backward_cols_task, &a);
        return;
    }
    cpu_parallel(n, bias_gelu_backward_rows_task, &a);
    for (int t = 0; t < n; t++) {
        const float *part = a.partials + N * (size_t)t;
        add_into(db, part, N);
    }
}

/* rows [m0, m1): sum = x + y, then LayerNorm of the row just written (still in L1) */
VECTOR_CLONES
static void residual_layernorm_rows(float *sum, float *restrict out, float *restrict mean,
                                    float *restrict rstd, const float *x, const float *y,
                                    const float *restrict w, const float *restrict b, size_t m0,
                                    size_t m1, size_t C, float eps) {
    for (size_t i = m0; i < m1; i++) {
        add_serial(sum + i * C, x + i * C, y + i * C, C);
        layernorm_forward_rows(out, mean, rstd, sum, w, b, i, i + 1, C, eps);
    }
}

static void residual_layernorm_task(const void *ctx, size_t m0, size_t m1) {
    const FusedArgs *a = ctx;
    residual_layernorm_rows(a->sum, a->out, a->mean, a->rstd, a->x, a->y, a->w, a->b, m0, m1, a->N,
                            a->eps);
}

void f32_residual_layernorm_forward(float *sum, float *out, float *mean, float *rstd,
                                    const float *x, const float *y, const float *w, const float *b,
                                    size_t M, size_t C, float eps) {
    if (C == 0) return;
    FusedArgs a = {.sum = sum,
                   .out = out,
                   .mean = mean,
                   .rstd = rstd,
                   .x = x,
                   .y = y,
                   .w = w,
                   .b = b,
                   .M = M,
                   .N = C,
                   .eps = eps};
    cpu_parallel_range(M, 1, M * C, LAYERNORM_MIN_ELEMS, residual_layernorm_task, &a);
}

/* ---- patches, tokens, class token ---- */

void f32_patchify(float *restrict patches, const float *restrict images, size_t B, size_t S,
                  size_t P) {
    if (P == 0) return;
    const size_t G = S / P; /* patches per side */
    for (size_t b = 0; b < B; b++) {
        const float *img = images + b * S * S;
        for (size_t py = 0; py < G; py++)
            for (size_t px = 0; px < G; px++) {
                float *dst = patches + ((b * G + py) * G + px) * P * P;
                for (size_t ky = 0; ky < P; ky++) {
                    const float *src = img + (py * P + ky) * S + px * P;
                    for (size_t kx = 0; kx < P; kx++) dst[ky * P + kx] = src[kx];
                }
            }
    }
}

/* out[i] = a[i] + b[i]; every element of a chunk is read before any is written, so out may be
 * a or b. */
VECTOR_CLONES
static void add_serial(float *out, const float *a, const float *b, size_t n) {
    size_t i = 0;
    for (; i + CHUNK <= n; i += CHUNK) {
        float t[CHUNK];
        UNROLL
        for (int k = 0; k < CHUNK; k++) t[k] = a[i + k] + b[i + k];
        UNROLL
        for (int k = 0; k < CHUNK; k++) out[i + k] = t[k];
    }
    for (; i < n; i++) out[i] = a[i] + b[i];
}

void f32_embed_forward(float *restrict x, const float *restrict patch_out,
                       const float *restrict cls, const float *restrict pos, size_t B, size_t T,
                       size_t C) {
    if (T == 0) return;
    for (size_t b = 0; b < B; b++) {
        float *xb = x + b * T * C;
        add_serial(xb, cls, pos, C);
        /* rows 1..T-1 of the sample and of pos are contiguous: one add */
        add_serial(xb + C, patch_out + b * (T - 1) * C, pos + C, (T - 1) * C);
    }
}

void f32_embed_backward(float *restrict dcls, float *restrict dpos, float *restrict dpatch_out,
                        const float *restrict dx, size_t B, size_t T, size_t C) {
    if (T == 0 || C == 0) return;
    colsum_add(dcls, dx, B, C, T * C);
    colsum_add(dpos, dx, B, T * C, T * C);
    if (T > 1)
        for (size_t b = 0; b < B; b++)
            memcpy(dpatch_out + b * (T - 1) * C, dx + (b * T + 1) * C, (T - 1) * C * sizeof(float));
}

void f32_class_token_select(float *restrict out, const float *restrict x, size_t B, size_t T,
                            size_t C) {
    if (C == 0) return;
    for (size_t b = 0; b < B; b++) memcpy(out + b * C, x + b * T * C, C * sizeof(float));
}

void f32_class_token_select_backward(float *restrict dx, const float *restrict dout, size_t B,
                                     size_t T, size_t C) {
    for (size_t b = 0; b < B; b++) add_serial(dx + b * T * C, dx + b * T * C, dout + b * C, C);
}

/* ---- loss and accuracy ---- */

float f32_cross_entropy(float *restrict dlogits, const float *restrict logits,
                        const int32_t *restrict labels, size_t B, size_t classes,
                        float grad_scale) {
    if (B == 0 || classes == 0) return 0.0f;
    const float g = grad_scale / (float)B;
    double total = 0.0;
    for (size_t i = 0; i < B; i++) {
        const float *z = logits + i * classes;
        const size_t y = labels[i] < 0 ? classes : (size_t)labels[i];
        const float mx = row_max(z, classes);
        double sum = 0.0;
        if (dlogits) {
            float *d = dlogits + i * classes;
            for (size_t j = 0; j < classes; j++) {
                d[j] = expf(z[j] - mx); /* the exponentials, normalised below */
                sum += d[j];
            }
            const float inv = (float)(1.0 / sum);
            for (size_t j = 0; j < classes; j++) d[j] = (d[j] * inv - (j == y ? 1.0f : 0.0f)) * g;
        } else {
            for (size_t j = 0; j < classes; j++) sum += expf(z[j] - mx);
        }
        /* a label outside [0, classes) makes the loss NaN (callers check finiteness) rather
         * than reading past the row */
        total += y < classes ? (double)mx + log(sum) - (double)z[y] : NAN;
    }
    return (float)(total / (double)B);
}

size_t f32_count_correct(const float *logits, const int32_t *labels, size_t B, size_t classes) {
    if (classes == 0) return 0;
    size_t correct = 0;
    for (size_t i = 0; i < B; i++) {
        const float *z = logits + i * classes;
        size_t best = 0;
        for (size_t j = 1; j < classes; j++)
            if (z[j] > z[best]) best = j; /* strict: the first maximum wins ties */
        correct += (labels[i] >= 0 && (size_t)labels[i] == best);
    }
    return correct;
}
