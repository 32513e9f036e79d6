/* The CPU worker pool (kernels/cpu/pool.h) and the ops that split their work over it: every task
 * runs exactly once, and every split op gives the serial result. */
#include <criterion/criterion.h>
#include <math.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "kernels/cpu/cpu_ops.h"
#include "kernels/cpu/pool.h"
#include "kernels/kernels.h"
#include "tests/util.h"

/* Every task of a run runs exactly once, whatever the thread and task counts and whether the
 * workers were spinning or asleep; pools come and go cleanly; the binding is per thread; and with
 * pools of 2 and 3 threads every parallelised op (checked to have really been split) gives the
 * serial result, exactly except for the sums over rows that tasks take separately (within 1e-6, and
 * bit-identical run to run), on vit-tiny's shapes and on ragged ones. */

static const Kernels *K = &kernels_cpu;

/* ---------------------------------------------------------------- the pool */

#define MAX_TASKS 128

typedef struct Counts {
    _Atomic int hits[MAX_TASKS];
    _Atomic int bad_ntasks;
    int ntasks;
} Counts;

static void count_task(void *ctx, int task, int ntasks) {
    Counts *c = ctx;
    if (ntasks != c->ntasks || task < 0 || task >= ntasks)
        atomic_fetch_add(&c->bad_ntasks, 1);
    else
        atomic_fetch_add(&c->hits[task], 1);
}

static void sleep_us(long us) {
    struct timespec ts = {.tv_sec = us / 1000000, .tv_nsec = (us % 1000000) * 1000};
    nanosleep(&ts, NULL);
}

/* `runs` runs of ntasks on p, sleeping pause_us between them (0: back to back, the workers
 * still spinning; long pauses let them fall asleep); the first run in which a task did not run
 * exactly once (or any ran with a wrong ntasks), or -1. No assertions: threads use it too. */
static int first_bad_run(CpuPool *p, int ntasks, int runs, long pause_us) {
    Counts c;
    for (int r = 0; r < runs; r++) {
        memset(&c, 0, sizeof c);
        c.ntasks = ntasks;
        cpu_pool_run(p, ntasks, count_task, &c);
        if (atomic_load(&c.bad_ntasks)) return r;
        for (int t = 0; t < MAX_TASKS; t++)
            if (atomic_load(&c.hits[t]) != (t < ntasks)) return r;
        if (pause_us) sleep_us(pause_us);
    }
    return -1;
}

static void check_runs(CpuPool *p, int ntasks, int runs, long pause_us) {
    const int bad = first_bad_run(p, ntasks, runs, pause_us);
    cr_assert_eq(bad, -1, "threads %d, %d tasks: run %d missed or repeated a task",
                 cpu_pool_threads(p), ntasks, bad);
}

Test(pool, every_task_runs_exactly_once) {
    const int threads[] = {1, 2, 3, 4, 8};
    const int ntasks[] = {1, 2, 3, 5, 16, MAX_TASKS};
    for (size_t i = 0; i < sizeof threads / sizeof *threads; i++) {
        CpuPool *p = cpu_pool_create(threads[i]);
        cr_assert_not_null(p);
        cr_assert_eq(cpu_pool_threads(p), threads[i]);
        for (size_t j = 0; j < sizeof ntasks / sizeof *ntasks; j++)
            check_runs(p, ntasks[j], 200, 0);
        cpu_pool_destroy(p);
    }
}

/* Pauses long enough for the workers to stop spinning and sleep: each run must wake them. */
Test(pool, runs_after_workers_fell_asleep) {
    for (int threads = 2; threads <= 3; threads++) {
        CpuPool *p = cpu_pool_create(threads);
        cr_assert_not_null(p);
        check_runs(p, threads, 30, 3000);
        check_runs(p, 7, 30, 300);
        check_runs(p, 2, 30, 50);
        cpu_pool_destroy(p);
    }
}

/* Tasks that take a while, so the caller waits for the workers (spinning, then sleeping). */
static void slow_task(void *ctx, int task, int ntasks) {
    (void)ntasks;
    sleep_us(task == 0 ? 100 : 2000);
    atomic_fetch_add(&((Counts *)ctx)->hits[task], 1);
}

Test(pool, caller_waits_for_slow_tasks) {
    CpuPool *p = cpu_pool_create(3);
    cr_assert_not_null(p);
    for (int r = 0; r < 10; r++) {
        Counts c;
        memset(&c, 0, sizeof c);
        cpu_pool_run(p, 3, slow_task, &c);
        for (int t = 0; t < 3; t++) cr_assert_eq(atomic_load(&c.hits[t]), 1);
    }
    cpu_pool_destroy(p);
}

Test(pool, degenerate_pools_and_runs) {
    Counts c;
    memset(&c, 0, sizeof c);
    c.ntasks = 4;
    cpu_pool_run(NULL, 4, count_task, &c); /* no pool: in order on this thread */
    for (int t = 0; t < 4; t++) cr_assert_eq(atomic_load(&c.hits[t]), 1);
    cpu_pool_run(NULL, 0, count_task, &c);
    cpu_pool_run(NULL, -3, count_task, &c);
    for (int t = 0; t < 4; t++) cr_assert_eq(atomic_load(&c.hits[t]), 1);
    cr_assert_eq(cpu_pool_threads(NULL), 1);
    cr_assert_eq(cpu_pool_runs(NULL), 0);
    cpu_pool_destroy(NULL);

    CpuPool *p = cpu_pool_create(0); /* taken as 1: no workers */
    cr_assert_not_null(p);
    cr_assert_eq(cpu_pool_threads(p), 1);
    check_runs(p, 5, 3, 0);
    cr_assert_eq(cpu_pool_runs(p), 0);
    cpu_pool_destroy(p);

    p = cpu_pool_create(2);
    cr_assert_not_null(p);
    check_runs(p, 1, 3, 0); /* one task: inline, not handed out */
    cr_assert_eq(cpu_pool_runs(p), 0);
    check_runs(p, 2, 3, 0);
    cr_assert_eq(cpu_pool_runs(p), 3);
    cpu_pool_run(p, 0, count_task, &c);
    cr_assert_eq(cpu_pool_runs(p), 3);
    cpu_pool_destroy(p);
}

Test(pool, create_and_destroy_many) {
    for (int i = 0; i < 50; i++) {
        CpuPool *p = cpu_pool_create(1 + i % 4);
        cr_assert_not_null(p);
        if (i % 2) check_runs(p, 3, 1, 0); /* half of them never run anything */
        cpu_pool_destroy(p);
    }
}

/* Several pools used at once from their own threads, as ranks do (more threads than cores).
 * A thread reports what went wrong (NULL: nothing); the test asserts. */
static void *rank_thread(void *arg) {
    (void)arg;
    if (kernels_cpu_pool()) return "a new thread inherited a pool binding";
    CpuPool *p = cpu_pool_create(2);
    if (!p) return "cpu_pool_create failed";
    kernels_cpu_use_pool(p);
    const char *why = NULL;
    if (kernels_cpu_pool() != p) why = "the binding did not hold";
    if (!why && first_bad_run(p, 4, 300, 0) >= 0) why = "a back-to-back run missed a task";
    if (!why && first_bad_run(p, 2, 20, 200) >= 0) why = "a paced run missed a task";
    kernels_cpu_use_pool(NULL);
    cpu_pool_destroy(p);
    return (void *)why;
}

Test(pool, pools_on_concurrent_threads_and_per_thread_binding) {
    CpuPool *mine = cpu_pool_create(2);
    cr_assert_not_null(mine);
    kernels_cpu_use_pool(mine);
    pthread_t th[4];
    for (int i = 0; i < 4; i++) cr_assert_eq(pthread_create(&th[i], NULL, rank_thread, NULL), 0);
    for (int i = 0; i < 4; i++) {
        void *why = NULL;
        cr_assert_eq(pthread_join(th[i], &why), 0);
        cr_assert_null(why, "rank thread %d: %s", i, why ? (const char *)why : "");
    }
    cr_assert_eq(kernels_cpu_pool(), mine);
    check_runs(mine, 3, 10, 0); /* the main thread's pool still works */
    kernels_cpu_use_pool(NULL);
    cr_assert_null(kernels_cpu_pool());
    cpu_pool_destroy(mine);
}

/* ---------------------------------------------------------------- the ops */

/* `what` on a pool of `threads`, for a failure's message */
static const char *pooled(const char *what, int threads) {
    static char text[160];
    snprintf(text, sizeof text, "%s, pool of %d", what, threads);
    return text;
}

static void assert_same(const char *what, int threads, const float *got, const float *want,
                        size_t n) {
    assert_same_floats(got, want, n, pooled(what, threads));
}

/* Sums split into per-task partials (linear's and LayerNorm's dw and db) are added in another
 * order than the serial loop's: ||got - want|| / ||want|| <= 1e-6. */
static void assert_sum_close(const char *what, int threads, const float *got, const float *want,
                             size_t n) {
    assert_close_floats(got, want, n, 1e-6, pooled(what, threads));
}

/* Linear's results: each task's GEMM is OpenBLAS's on a block of rows cut at multiples of 24,
 * which keeps the microkernel's 12-row tiles of OpenBLAS 0.3's Haswell sgemm (also used for
 * Zen) where the whole call has them, so there the results are bit-identical (checked on many
 * random shapes). Other kernels may round their edge tiles differently: there the check is
 * relative, ||got - want|| / ||want|| <= 1e-6. */
extern char *openblas_get_corename(void);

static void assert_gemm_same(const char *what, int threads, const float *got, const float *want,
                             size_t n) {
    const char *core = openblas_get_corename();
    if (core && (!strncmp(core, "Haswell", 7) || !strncmp(core, "Zen", 3)))
        assert_same(what, threads, got, want, n);
    else
        assert_sum_close(what, threads, got, want, n);
}

/* Asserts that the op since `before` was split over the pool (so the comparison means
 * something). */
static void assert_split(const char *what, CpuPool *p, unsigned long before) {
    cr_assert_gt(cpu_pool_runs(p), before, "%s was not split over the pool", what);
}

/* The checks below run the same ops on sides of a comparison: side 0 serially, the others
 * each on a new pool of `threads` (two pooled sides: bit-identical run to run). */
static CpuPool *bind_side(int side, int threads) {
    return side ? bind_pool(threads) : NULL;
}

/* Ends a side: on a pool, asserts the ops since `before` made exactly `runs` pool runs (at least
 * one where `runs` is 0), and unbinds it. */
static void end_side(CpuPool *p, unsigned long before, unsigned long runs, const char *what) {
    if (!p) return;
    if (runs)
        cr_assert_eq(cpu_pool_runs(p), before + runs, "%s: not every op was split", what);
    else
        assert_split(what, p, before);
    unbind_pool(p);
}

/* OpenBLAS at one thread for the serial runs too: that is how pools are used, and OpenBLAS's
 * own threads may round differently. */
static void one_blas_thread(void) {
    kernels_cpu_set_threads(1);
}

TestSuite(pool_ops, .init = one_blas_thread);

/* The two tests of check_NAME: NAME_matches_serial_pool_2 and _pool_3. */
#define POOL_TESTS(name)                                                                           \
    Test(pool_ops, name##_matches_serial_pool_2) {                                                 \
        check_##name(2);                                                                           \
    }                                                                                              \
    Test(pool_ops, name##_matches_serial_pool_3) {                                                 \
        check_##name(3);                                                                           \
    }

typedef struct Shape {
    size_t M, K, N;
    int cols; /* linear: dw too big for the pool's scratch, so split by columns: exact sums */
} Shape;

/* vit-tiny's at batch 64 (M = 64 x 17; qkv, out/fc1/fc2, the patch embedding), then ragged
 * ones that cut blocks unevenly, and one whose dw partials do not fit the scratch */
static const Shape LINEAR_SHAPES[] = {
    {1088, 128, 384, 0}, {1088, 128, 128, 0}, {1024, 49, 128, 0}, {1001, 77, 133, 0},
    {517, 300, 19, 0},   {100, 1000, 40, 0},  {300, 400, 400, 1},
};

static void check_linear(int threads) {
    for (size_t s = 0; s < sizeof LINEAR_SHAPES / sizeof *LINEAR_SHAPES; s++) {
        const size_t M = LINEAR_SHAPES[s].M, Kd = LINEAR_SHAPES[s].K, N = LINEAR_SHAPES[s].N;
        float *in = host_uniform(M * Kd, -1, 1, 1), *w = host_uniform(N * Kd, -0.5f, 0.5f, 2);
        float *b = host_uniform(N, -1, 1, 3), *dout = host_uniform(M * N, -1, 1, 4);
        float *out0 = host_uniform(M * N, 5, 6, 7), *din0 = host_uniform(M * Kd, 5, 6, 8);
        float *dw0 = host_uniform(N * Kd, -1, 1, 5), *db0 = host_uniform(N, -1, 1, 6);
        float *out[2], *din[3], *dw[3], *db[3];
        for (int c = 0; c < 3; c++) {
            din[c] = host_copy(din0, M * Kd), dw[c] = host_copy(dw0, N * Kd);
            db[c] = host_copy(db0, N);
        }

        for (int with_bias = 0; with_bias < 2; with_bias++) {
            for (int c = 0; c < 2; c++) {
                if (!with_bias) out[c] = host_copy(out0, M * N);
                CpuPool *p = bind_side(c, threads);
                unsigned long before = cpu_pool_runs(p);
                K->linear_forward(DTYPE_FP32, out[c], in, w, with_bias ? b : NULL, M, Kd, N);
                end_side(p, before, 0, "linear_forward");
            }
            assert_gemm_same("linear_forward out", threads, out[1], out[0], M * N);
        }

        /* twice: dw and db accumulate, din is overwritten; the second time without din and
         * db (the patch embedding's and qkv's calls) */
        for (int pass = 0; pass < 2; pass++) {
            for (int c = 0; c < 3; c++) {
                CpuPool *p = bind_side(c, threads);
                unsigned long before = cpu_pool_runs(p);
                K->linear_backward(DTYPE_FP32, pass ? NULL : din[c], dw[c], pass ? NULL : db[c],
                                   dout, in, w, M, Kd, N);
                end_side(p, before, 0, "linear_backward");
            }
            assert_same("linear_backward din run to run", threads, din[2], din[1], M * Kd);
            assert_same("linear_backward dw run to run", threads, dw[2], dw[1], N * Kd);
            assert_same("linear_backward db run to run", threads, db[2], db[1], N);
            assert_gemm_same("linear_backward din", threads, din[1], din[0], M * Kd);
            if (LINEAR_SHAPES[s].cols) {
                assert_gemm_same("linear_backward dw", threads, dw[1], dw[0], N * Kd);
                assert_same("linear_backward db", threads, db[1], db[0], N);
            } else {
                assert_sum_close("linear_backward dw", threads, dw[1], dw[0], N * Kd);
                assert_sum_close("linear_backward db", threads, db[1], db[0], N);
            }
        }
        float *bufs[] = {in,     w,      b,      dout,  out0,  din0,  dw0,   db0,   out[0], out[1],
                         din[0], din[1], din[2], dw[0], dw[1], dw[2], db[0], db[1], db[2]};
        free_floats(bufs, sizeof bufs / sizeof *bufs);
    }
}

/* bias_grad over some columns of a wider output (qkv's q and v biases) */
static void check_bias_grad(int threads) {
    const size_t rows = 1088, stride = 384, cols = 128;
    float *dout = host_uniform(rows * stride, -1, 1, 51), *db0 = host_uniform(cols, -1, 1, 52);
    float *db[3];
    for (int c = 0; c < 3; c++) {
        db[c] = host_copy(db0, cols);
        CpuPool *p = bind_side(c, threads);
        unsigned long before = cpu_pool_runs(p);
        K->bias_grad(DTYPE_FP32, db[c], dout + 2 * cols, rows, cols, stride);
        end_side(p, before, 0, "bias_grad");
    }
    assert_same("bias_grad run to run", threads, db[2], db[1], cols);
    assert_sum_close("bias_grad", threads, db[1], db[0], cols);
    float *bufs[] = {dout, db0, db[0], db[1], db[2]};
    free_floats(bufs, sizeof bufs / sizeof *bufs);
}

Test(pool_ops, bias_grad_matches_serial) {
    check_bias_grad(2);
    check_bias_grad(3);
}

POOL_TESTS(linear)

/* The outputs of LayerNorm on each side of a comparison: [0] serial, [1] and [2] pooled. */
typedef struct LayerNormSides {
    float *out[3], *mean[3], *rstd[3], *din[3], *dw[3], *db[3];
} LayerNormSides;

static void check_layernorm(int threads) {
    /* M, C: vit-tiny's, ragged ones, and rows too wide for per-task partials in the scratch */
    const Shape shapes[] = {
        {1088, 128, 0, 0}, {1000, 77, 0, 0}, {64, 771, 0, 0}, {3001, 12, 0, 0}, {5, 70001, 0, 1}};
    for (size_t s = 0; s < sizeof shapes / sizeof *shapes; s++) {
        const size_t M = shapes[s].M, C = shapes[s].K;
        float *in = host_uniform(M * C, -2, 3, 11), *w = host_uniform(C, 0.5f, 1.5f, 12);
        float *b = host_uniform(C, -1, 1, 13), *dout = host_uniform(M * C, -1, 1, 14);
        /* overwritten outputs start as garbage, "+=" ones from the same values on every side */
        float *out0 = host_uniform(M * C, 5, 6, 15), *mean0 = host_uniform(M, 5, 6, 16);
        float *rstd0 = host_uniform(M, 5, 6, 17), *din0 = host_uniform(M * C, -1, 1, 18);
        float *dw0 = host_uniform(C, -1, 1, 19), *db0 = host_uniform(C, -1, 1, 20);
        LayerNormSides x;
        for (int c = 0; c < 3; c++) {
            x.out[c] = host_copy(out0, M * C), x.mean[c] = host_copy(mean0, M);
            x.rstd[c] = host_copy(rstd0, M), x.din[c] = host_copy(din0, M * C);
            x.dw[c] = host_copy(dw0, C), x.db[c] = host_copy(db0, C);
            CpuPool *p = bind_side(c, threads);
            unsigned long before = cpu_pool_runs(p);
            K->layernorm_forward(DTYPE_FP32, x.out[c], x.mean[c], x.rstd[c], in, w, b, M, C, 1e-5f);
            if (p) assert_split("layernorm_forward", p, before);
            before = cpu_pool_runs(p);
            K->layernorm_backward(DTYPE_FP32, x.din[c], x.dw[c], x.db[c], dout, in, x.mean[c],
                                  x.rstd[c], w, M, C);
            end_side(p, before, 0, "layernorm_backward");
        }
        for (int c = 1; c < 3; c++) { /* pooled against serial, then run to run */
            const int ref = c - 1;
            assert_same("layernorm_forward out", threads, x.out[c], x.out[ref], M * C);
            assert_same("layernorm_forward mean", threads, x.mean[c], x.mean[ref], M);
            assert_same("layernorm_forward rstd", threads, x.rstd[c], x.rstd[ref], M);
            assert_same("layernorm_backward din", threads, x.din[c], x.din[ref], M * C);
            if (shapes[s].cols || c == 2) { /* too wide for the scratch: by columns, exact */
                assert_same("layernorm_backward dw", threads, x.dw[c], x.dw[ref], C);
                assert_same("layernorm_backward db", threads, x.db[c], x.db[ref], C);
            } else {
                assert_sum_close("layernorm_backward dw", threads, x.dw[c], x.dw[ref], C);
                assert_sum_close("layernorm_backward db", threads, x.db[c], x.db[ref], C);
            }
        }
        float *bufs[] = {in, w, b, dout, out0, mean0, rstd0, din0, dw0, db0};
        free_floats(bufs, sizeof bufs / sizeof *bufs);
        for (int c = 0; c < 3; c++) {
            float *sides[] = {x.out[c], x.mean[c], x.rstd[c], x.din[c], x.dw[c], x.db[c]};
            free_floats(sides, sizeof sides / sizeof *sides);
        }
    }
}

POOL_TESTS(layernorm)

/* GELU forward and backward, out of place and in place, and add in place */
static void check_elementwise(int threads) {
    const size_t sizes[] = {1088 * 128, 100003};
    for (size_t s = 0; s < sizeof sizes / sizeof *sizes; s++) {
        const size_t n = sizes[s];
        float *x = host_uniform(n, -6, 6, 21), *g = host_uniform(n, -1, 1, 22);
        float *y0 = host_uniform(n, 5, 6, 23), *d0 = host_uniform(n, 5, 6, 24);
        /* [0] serial, [1] pooled: out of place (y, d) and in place (ip, gp, a) */
        float *y[2], *d[2], *ip[2], *gp[2], *a[2];
        for (int c = 0; c < 2; c++) {
            y[c] = host_copy(y0, n), d[c] = host_copy(d0, n), ip[c] = host_copy(x, n);
            gp[c] = host_copy(g, n), a[c] = host_copy(x, n);
            CpuPool *p = bind_side(c, threads);
            unsigned long before = cpu_pool_runs(p);
            K->gelu_forward(DTYPE_FP32, y[c], x, n);
            K->gelu_forward(DTYPE_FP32, ip[c], ip[c], n);
            K->gelu_backward(DTYPE_FP32, d[c], x, g, n);
            K->gelu_backward(DTYPE_FP32, gp[c], x, gp[c], n);
            K->add(DTYPE_FP32, a[c], a[c], g, n);
            end_side(p, before, 5, "elementwise ops");
        }
        assert_same("gelu_forward", threads, y[1], y[0], n);
        assert_same("gelu_forward in place", threads, ip[1], ip[0], n);
        assert_same("gelu_backward", threads, d[1], d[0], n);
        assert_same("gelu_backward in place", threads, gp[1], gp[0], n);
        assert_same("add in place", threads, a[1], a[0], n);
        float *bufs[] = {x,    g,     y0,    d0,    y[0],  y[1], d[0],
                         d[1], ip[0], ip[1], gp[0], gp[1], a[0], a[1]};
        free_floats(bufs, sizeof bufs / sizeof *bufs);
    }
}

POOL_TESTS(elementwise)

/* Copies, zeroing and like-typed casts of the op table (and cpu_copy, which the simulator's
 * collectives use), split over the pool: every byte as memcpy and memset leave it, at ragged
 * lengths and offsets that cut no range at a cache line, with the bytes around untouched. */
static void check_copies(int threads) {
    const size_t sizes[] = {(1u << 20) + 3, 3 * (1u << 16) + 17};
    for (size_t s = 0; s < sizeof sizes / sizeof *sizes; s++) {
        const size_t n = sizes[s], pad = 64;
        unsigned char *src = malloc(n + pad), *want = malloc(n + 2 * pad);
        unsigned char *got[4];
        for (size_t i = 0; i < n + pad; i++) src[i] = (unsigned char)(i * 131u + 7u);
        for (int k = 0; k < 4; k++) {
            got[k] = malloc(n + 2 * pad);
            memset(got[k], 0xa5, n + 2 * pad);
        }
        CpuPool *p = bind_pool(threads);
        unsigned long before = cpu_pool_runs(p);
        K->copy_bytes(got[0] + 5, src + 3, n);
        cpu_copy(got[1] + 1, src + 9, n);
        K->zero_bytes(got[2] + 7, n);
        K->cast(got[3] + 2, DTYPE_BF16, src + 1, DTYPE_BF16, n / 2);
        end_side(p, before, 4, "copies");
        memset(want, 0xa5, n + 2 * pad);
        memcpy(want + 5, src + 3, n);
        cr_assert(!memcmp(got[0], want, n + 2 * pad), "copy_bytes, pool of %d", threads);
        memset(want, 0xa5, n + 2 * pad);
        memcpy(want + 1, src + 9, n);
        cr_assert(!memcmp(got[1], want, n + 2 * pad), "cpu_copy, pool of %d", threads);
        memset(want, 0xa5, n + 2 * pad);
        memset(want + 7, 0, n);
        cr_assert(!memcmp(got[2], want, n + 2 * pad), "zero_bytes, pool of %d", threads);
        memset(want, 0xa5, n + 2 * pad);
        memcpy(want + 2, src + 1, n / 2 * 2);
        cr_assert(!memcmp(got[3], want, n + 2 * pad), "cast bf16 to bf16, pool of %d", threads);
        for (int k = 0; k < 4; k++) free(got[k]);
        free(src);
        free(want);
    }
}

POOL_TESTS(copies)

static void check_attention(int threads) {
    /* B, T, C, heads: vit-tiny's, then odd pair counts and a longer sequence */
    const size_t shapes[][4] = {{64, 17, 128, 2}, {13, 17, 96, 3}, {5, 50, 64, 1}};
    for (size_t s = 0; s < sizeof shapes / sizeof *shapes; s++) {
        const size_t B = shapes[s][0], T = shapes[s][1], C = shapes[s][2], H = shapes[s][3];
        const size_t nqkv = B * T * 3 * C, nout = B * T * C, nprobs = B * H * T * T;
        float *qkv = host_uniform(nqkv, -2, 2, 31), *dout = host_uniform(nout, -1, 1, 32);
        float *out0 = host_uniform(nout, 5, 6, 33), *pr0 = host_uniform(nprobs, 5, 6, 34);
        float *dq0 = host_uniform(nqkv, 5, 6, 35);
        float *out[2], *pr[2], *dq[2]; /* [0] serial, [1] pooled */
        for (int c = 0; c < 2; c++) {
            out[c] = host_copy(out0, nout), pr[c] = host_copy(pr0, nprobs);
            dq[c] = host_copy(dq0, nqkv);
            CpuPool *p = bind_side(c, threads);
            unsigned long before = cpu_pool_runs(p);
            K->attention_forward(DTYPE_FP32, out[c], pr[c], qkv, B, T, C, H);
            K->attention_backward(DTYPE_FP32, dq[c], dout, qkv, pr[c], B, T, C, H);
            end_side(p, before, 2, "attention");
        }
        assert_same("attention_forward out", threads, out[1], out[0], nout);
        assert_same("attention_forward probs", threads, pr[1], pr[0], nprobs);
        assert_same("attention_backward dqkv", threads, dq[1], dq[0], nqkv);
        float *bufs[] = {qkv, dout, out0, pr0, dq0, out[0], out[1], pr[0], pr[1], dq[0], dq[1]};
        free_floats(bufs, sizeof bufs / sizeof *bufs);
    }
}

POOL_TESTS(attention)

static void check_adam(int threads) {
    const size_t n = 200003;
    /* lr, beta1, beta2, eps, weight decay; AdamW, then Adam */
    const AdamHyper hypers[] = {{1e-3f, 0.9f, 0.999f, 1e-8f, 0.01f, 1},
                                {3e-4f, 0.8f, 0.99f, 1e-6f, 0.1f, 0}};
    for (size_t h = 0; h < 2; h++) {
        float *grad = host_uniform(n, -1, 1, 41), *p0 = host_uniform(n, -1, 1, 42);
        float *m0 = host_uniform(n, -0.1f, 0.1f, 43), *v0 = host_uniform(n, 0, 0.01f, 44);
        float *param[2], *m[2], *v[2]; /* [0] serial, [1] pooled */
        for (int c = 0; c < 2; c++) {
            param[c] = host_copy(p0, n), m[c] = host_copy(m0, n), v[c] = host_copy(v0, n);
            for (long step = 1; step <= 3; step++) {
                CpuPool *p = bind_side(c, threads);
                unsigned long before = cpu_pool_runs(p);
                K->adam_step(param[c], grad, m[c], v[c], n, &hypers[h], step);
                end_side(p, before, 0, "adam_step");
            }
        }
        assert_same("adam param", threads, param[1], param[0], n);
        assert_same("adam m", threads, m[1], m[0], n);
        assert_same("adam v", threads, v[1], v[0], n);
        float *bufs[] = {grad, p0, m0, v0, param[0], param[1], m[0], m[1], v[0], v[1]};
        free_floats(bufs, sizeof bufs / sizeof *bufs);
    }
}

POOL_TESTS(adam)

/* Small ops stay on the calling thread: no dispatch for work below the thresholds. */
Test(pool_ops, small_ops_are_not_split) {
    CpuPool *p = bind_pool(2);
    float x[64], y[64], w[64 * 8], dw[64 * 8] = {0}, d[64];
    for (int i = 0; i < 64; i++) x[i] = (float)i / 64.0f, d[i] = 1.0f;
    for (int i = 0; i < 64 * 8; i++) w[i] = (float)(i % 7) / 7.0f;
    K->gelu_forward(DTYPE_FP32, y, x, 64);
    K->add(DTYPE_FP32, y, y, x, 64);
    K->linear_forward(DTYPE_FP32, y, x, w, NULL, 8, 8, 8);
    K->linear_backward(DTYPE_FP32, y, dw, NULL, d, x, w, 8, 8, 8);
    K->copy_bytes(y, x, sizeof x);
    K->zero(dw, 64 * 8);
    cr_assert_eq(cpu_pool_runs(p), 0);
    unbind_pool(p);
}
