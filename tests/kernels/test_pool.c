/* The CPU worker pool (kernels/cpu/pool.h) and the ops that split their work over it: every task
 * runs exactly once, and every split op gives the serial result. */
#include <criterion/criterion.h>
#include <math.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "kernels/cpu/cpu_ops.h"
#include "kernels/cpu/pool.h"
#include "kernels/kernels.h"

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

static uint32_t rand_next(uint32_t *s) {
    *s ^= *s << 13;
    *s ^= *s >> 17;
    *s ^= *s << 5;
    return *s;
}

static float *rand_buf(size_t n, float lo, float hi, uint32_t seed) {
    float *x = malloc((n ? n : 1) * sizeof *x);
    cr_assert_not_null(x);
    uint32_t s = seed * 2654435761u + 1u;
    for (size_t i = 0; i < n; i++)
        x[i] = lo + (hi - lo) * (float)((rand_next(&s) >> 8) * (1.0 / 16777216.0));
    return x;
}

static float *copy_buf(const float *x, size_t n) {
    float *y = malloc((n ? n : 1) * sizeof *y);
    cr_assert_not_null(y);
    memcpy(y, x, n * sizeof *y);
    return y;
}

static void assert_same(const char *what, int threads, const float *got, const float *want,
                        size_t n) {
    for (size_t i = 0; i < n; i++)
        if (memcmp(&got[i], &want[i], sizeof(float)))
            cr_assert_fail("%s, pool of %d: element %zu is %.9g, serially %.9g", what, threads, i,
                           (double)got[i], (double)want[i]);
}

/* A pool of `threads` bound to this thread. */
static CpuPool *bind_pool(int threads) {
    CpuPool *p = cpu_pool_create(threads);
    cr_assert_not_null(p);
    kernels_cpu_use_pool(p);
    return p;
}

static void unbind_pool(CpuPool *p) {
    kernels_cpu_use_pool(NULL);
    cpu_pool_destroy(p);
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
    if (core && (!strncmp(core, "Haswell", 7) || !strncmp(core, "Zen", 3))) {
        assert_same(what, threads, got, want, n);
        return;
    }
    double diff = 0.0, norm = 0.0;
    for (size_t i = 0; i < n; i++) {
        const double d = (double)got[i] - (double)want[i];
        diff += d * d;
        norm += (double)want[i] * (double)want[i];
    }
    cr_assert_leq(sqrt(diff), 1e-6 * sqrt(norm), "%s, pool of %d: relative difference %g", what,
                  threads, norm > 0 ? sqrt(diff / norm) : sqrt(diff));
}

/* Asserts that the op since `before` was split over the pool (so the comparison means
 * something). */
static void assert_split(const char *what, CpuPool *p, unsigned long before) {
    cr_assert_gt(cpu_pool_runs(p), before, "%s was not split over the pool", what);
}

/* OpenBLAS at one thread for the serial runs too: that is how pools are used, and OpenBLAS's
 * own threads may round differently. */
static void one_blas_thread(void) {
    kernels_cpu_set_threads(1);
}

TestSuite(pool_ops, .init = one_blas_thread);

/* Sums split into per-task partials (linear's and LayerNorm's dw and db) are added in another
 * order than the serial loop's: ||got - want|| / ||want|| <= 1e-6. */
static void assert_sum_close(const char *what, int threads, const float *got, const float *want,
                             size_t n) {
    double diff = 0.0, norm = 0.0;
    for (size_t i = 0; i < n; i++) {
        const double d = (double)got[i] - (double)want[i];
        diff += d * d;
        norm += (double)want[i] * (double)want[i];
    }
    cr_assert_leq(sqrt(diff), 1e-6 * sqrt(norm), "%s, pool of %d: relative difference %g", what,
                  threads, norm > 0 ? sqrt(diff / norm) : sqrt(diff));
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
        float *in = rand_buf(M * Kd, -1, 1, 1), *w = rand_buf(N * Kd, -0.5f, 0.5f, 2);
        float *b = rand_buf(N, -1, 1, 3), *dout = rand_buf(M * N, -1, 1, 4);
        float *out_s = rand_buf(M * N, 5, 6, 7), *out_p = copy_buf(out_s, M * N);
        /* serial, and twice with a pool of the same size: bit-identical run to run */
        float *din[3], *dw[3], *db[3];
        din[0] = rand_buf(M * Kd, 5, 6, 8);
        dw[0] = rand_buf(N * Kd, -1, 1, 5);
        db[0] = rand_buf(N, -1, 1, 6);
        for (int c = 1; c < 3; c++) {
            din[c] = copy_buf(din[0], M * Kd);
            dw[c] = copy_buf(dw[0], N * Kd);
            db[c] = copy_buf(db[0], N);
        }

        for (int with_bias = 0; with_bias < 2; with_bias++) {
            kernels_cpu_use_pool(NULL);
            K->linear_forward(out_s, in, w, with_bias ? b : NULL, M, Kd, N);
            CpuPool *p = bind_pool(threads);
            unsigned long before = cpu_pool_runs(p);
            K->linear_forward(out_p, in, w, with_bias ? b : NULL, M, Kd, N);
            assert_split("linear_forward", p, before);
            assert_gemm_same("linear_forward out", threads, out_p, out_s, M * N);
            unbind_pool(p);
        }

        /* twice: dw and db accumulate, din is overwritten; the second time without din and
         * db (the patch embedding's and qkv's calls) */
        for (int pass = 0; pass < 2; pass++) {
            for (int c = 0; c < 3; c++) {
                CpuPool *p = c ? bind_pool(threads) : NULL;
                unsigned long before = cpu_pool_runs(p);
                K->linear_backward(pass ? NULL : din[c], dw[c], pass ? NULL : db[c], dout, in, w, M,
                                   Kd, N);
                if (p) assert_split("linear_backward", p, before);
                if (p) unbind_pool(p);
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
        float *bufs[] = {in,     w,     b,     dout,  out_s, out_p, din[0], din[1],
                         din[2], dw[0], dw[1], dw[2], db[0], db[1], db[2]};
        for (size_t i = 0; i < sizeof bufs / sizeof *bufs; i++) free(bufs[i]);
    }
}

/* bias_grad over some columns of a wider output (qkv's q and v biases) */
static void check_bias_grad(int threads) {
    const size_t rows = 1088, stride = 384, cols = 128;
    float *dout = rand_buf(rows * stride, -1, 1, 51);
    float *db[3];
    db[0] = rand_buf(cols, -1, 1, 52);
    db[1] = copy_buf(db[0], cols);
    db[2] = copy_buf(db[0], cols);
    for (int c = 0; c < 3; c++) {
        CpuPool *p = c ? bind_pool(threads) : NULL;
        unsigned long before = cpu_pool_runs(p);
        K->bias_grad(db[c], dout + 2 * cols, rows, cols, stride);
        if (p) assert_split("bias_grad", p, before);
        if (p) unbind_pool(p);
    }
    assert_same("bias_grad run to run", threads, db[2], db[1], cols);
    assert_sum_close("bias_grad", threads, db[1], db[0], cols);
    free(dout), free(db[0]), free(db[1]), free(db[2]);
}

Test(pool_ops, bias_grad_matches_serial) {
    check_bias_grad(2);
    check_bias_grad(3);
}

Test(pool_ops, linear_matches_serial_pool_2) {
    check_linear(2);
}

Test(pool_ops, linear_matches_serial_pool_3) {
    check_linear(3);
}

static void check_layernorm(int threads) {
    /* M, C: vit-tiny's, ragged ones, and rows too wide for per-task partials in the scratch */
    const Shape shapes[] = {
        {1088, 128, 0, 0}, {1000, 77, 0, 0}, {64, 771, 0, 0}, {3001, 12, 0, 0}, {5, 70001, 0, 1}};
    for (size_t s = 0; s < sizeof shapes / sizeof *shapes; s++) {
        const size_t M = shapes[s].M, C = shapes[s].K;
        float *in = rand_buf(M * C, -2, 3, 11), *w = rand_buf(C, 0.5f, 1.5f, 12);
        float *b = rand_buf(C, -1, 1, 13), *dout = rand_buf(M * C, -1, 1, 14);
        float *out_s = rand_buf(M * C, 5, 6, 15), *out_p = copy_buf(out_s, M * C);
        float *mean_s = rand_buf(M, 5, 6, 16), *mean_p = copy_buf(mean_s, M);
        float *rstd_s = rand_buf(M, 5, 6, 17), *rstd_p = copy_buf(rstd_s, M);
        float *din_s = rand_buf(M * C, -1, 1, 18), *din_p = copy_buf(din_s, M * C);
        float *dw_s = rand_buf(C, -1, 1, 19), *dw_p = copy_buf(dw_s, C);
        float *db_s = rand_buf(C, -1, 1, 20), *db_p = copy_buf(db_s, C);

        float *din_s0 = copy_buf(din_s, M * C), *dw_s0 = copy_buf(dw_s, C),
              *db_s0 = copy_buf(db_s, C);
        kernels_cpu_use_pool(NULL);
        K->layernorm_forward(out_s, mean_s, rstd_s, in, w, b, M, C, 1e-5f);
        K->layernorm_backward(din_s, dw_s, db_s, dout, in, mean_s, rstd_s, w, M, C);
        CpuPool *p = bind_pool(threads);
        unsigned long before = cpu_pool_runs(p);
        K->layernorm_forward(out_p, mean_p, rstd_p, in, w, b, M, C, 1e-5f);
        assert_split("layernorm_forward", p, before);
        before = cpu_pool_runs(p);
        K->layernorm_backward(din_p, dw_p, db_p, dout, in, mean_p, rstd_p, w, M, C);
        assert_split("layernorm_backward", p, before);
        unbind_pool(p);
        float *din_1 = copy_buf(din_p, M * C), *dw_1 = copy_buf(dw_p, C), *db_1 = copy_buf(db_p, C);
        assert_same("layernorm_forward out", threads, out_p, out_s, M * C);
        assert_same("layernorm_forward mean", threads, mean_p, mean_s, M);
        assert_same("layernorm_forward rstd", threads, rstd_p, rstd_s, M);
        assert_same("layernorm_backward din", threads, din_p, din_s, M * C);
        if (shapes[s].cols) { /* too wide for the scratch: split by columns, exact sums */
            assert_same("layernorm_backward dw", threads, dw_p, dw_s, C);
            assert_same("layernorm_backward db", threads, db_p, db_s, C);
        } else {
            assert_sum_close("layernorm_backward dw", threads, dw_p, dw_s, C);
            assert_sum_close("layernorm_backward db", threads, db_p, db_s, C);
        }
        /* again from the same start with a new pool of the same size: bit-identical */
        memcpy(din_p, din_s0, M * C * sizeof(float));
        memcpy(dw_p, dw_s0, C * sizeof(float));
        memcpy(db_p, db_s0, C * sizeof(float));
        p = bind_pool(threads);
        K->layernorm_backward(din_p, dw_p, db_p, dout, in, mean_p, rstd_p, w, M, C);
        unbind_pool(p);
        assert_same("layernorm_backward din run to run", threads, din_p, din_1, M * C);
        assert_same("layernorm_backward dw run to run", threads, dw_p, dw_1, C);
        assert_same("layernorm_backward db run to run", threads, db_p, db_1, C);
        free(din_s0), free(dw_s0), free(db_s0), free(din_1), free(dw_1), free(db_1);
        float *bufs[] = {in,     w,      b,     dout,  out_s, out_p, mean_s, mean_p,
                         rstd_s, rstd_p, din_s, din_p, dw_s,  dw_p,  db_s,   db_p};
        for (size_t i = 0; i < sizeof bufs / sizeof *bufs; i++) free(bufs[i]);
    }
}

Test(pool_ops, layernorm_matches_serial_pool_2) {
    check_layernorm(2);
}

Test(pool_ops, layernorm_matches_serial_pool_3) {
    check_layernorm(3);
}

/* GELU forward and backward, out of place and in place, and add in place */
static void check_elementwise(int threads) {
    const size_t sizes[] = {1088 * 128, 100003};
    for (size_t s = 0; s < sizeof sizes / sizeof *sizes; s++) {
        const size_t n = sizes[s];
        float *x = rand_buf(n, -6, 6, 21), *g = rand_buf(n, -1, 1, 22);
        float *y_s = rand_buf(n, 5, 6, 23), *y_p = copy_buf(y_s, n);
        float *d_s = rand_buf(n, 5, 6, 24), *d_p = copy_buf(d_s, n);
        float *ip_s = copy_buf(x, n), *ip_p = copy_buf(x, n);
        float *gp_s = copy_buf(g, n), *gp_p = copy_buf(g, n);
        float *a_s = copy_buf(x, n), *a_p = copy_buf(x, n);

        kernels_cpu_use_pool(NULL);
        K->gelu_forward(y_s, x, n);
        K->gelu_forward(ip_s, ip_s, n);
        K->gelu_backward(d_s, x, g, n);
        K->gelu_backward(gp_s, x, gp_s, n);
        K->add(a_s, a_s, g, n);
        CpuPool *p = bind_pool(threads);
        unsigned long before = cpu_pool_runs(p);
        K->gelu_forward(y_p, x, n);
        K->gelu_forward(ip_p, ip_p, n);
        K->gelu_backward(d_p, x, g, n);
        K->gelu_backward(gp_p, x, gp_p, n);
        K->add(a_p, a_p, g, n);
        cr_assert_eq(cpu_pool_runs(p), before + 5, "not every elementwise op was split");
        unbind_pool(p);
        assert_same("gelu_forward", threads, y_p, y_s, n);
        assert_same("gelu_forward in place", threads, ip_p, ip_s, n);
        assert_same("gelu_backward", threads, d_p, d_s, n);
        assert_same("gelu_backward in place", threads, gp_p, gp_s, n);
        assert_same("add in place", threads, a_p, a_s, n);
        float *bufs[] = {x, g, y_s, y_p, d_s, d_p, ip_s, ip_p, gp_s, gp_p, a_s, a_p};
        for (size_t i = 0; i < sizeof bufs / sizeof *bufs; i++) free(bufs[i]);
    }
}

Test(pool_ops, elementwise_matches_serial_pool_2) {
    check_elementwise(2);
}

Test(pool_ops, elementwise_matches_serial_pool_3) {
    check_elementwise(3);
}

static void check_attention(int threads) {
    /* B, T, C, heads: vit-tiny's, then odd pair counts and a longer sequence */
    const size_t shapes[][4] = {{64, 17, 128, 2}, {13, 17, 96, 3}, {5, 50, 64, 1}};
    for (size_t s = 0; s < sizeof shapes / sizeof *shapes; s++) {
        const size_t B = shapes[s][0], T = shapes[s][1], C = shapes[s][2], H = shapes[s][3];
        const size_t nqkv = B * T * 3 * C, nout = B * T * C, nprobs = B * H * T * T;
        float *qkv = rand_buf(nqkv, -2, 2, 31), *dout = rand_buf(nout, -1, 1, 32);
        float *out_s = rand_buf(nout, 5, 6, 33), *out_p = copy_buf(out_s, nout);
        float *pr_s = rand_buf(nprobs, 5, 6, 34), *pr_p = copy_buf(pr_s, nprobs);
        float *dq_s = rand_buf(nqkv, 5, 6, 35), *dq_p = copy_buf(dq_s, nqkv);

        kernels_cpu_use_pool(NULL);
        K->attention_forward(out_s, pr_s, qkv, B, T, C, H);
        K->attention_backward(dq_s, dout, qkv, pr_s, B, T, C, H);
        CpuPool *p = bind_pool(threads);
        unsigned long before = cpu_pool_runs(p);
        K->attention_forward(out_p, pr_p, qkv, B, T, C, H);
        K->attention_backward(dq_p, dout, qkv, pr_p, B, T, C, H);
        cr_assert_eq(cpu_pool_runs(p), before + 2, "attention was not split");
        unbind_pool(p);
        assert_same("attention_forward out", threads, out_p, out_s, nout);
        assert_same("attention_forward probs", threads, pr_p, pr_s, nprobs);
        assert_same("attention_backward dqkv", threads, dq_p, dq_s, nqkv);
        float *bufs[] = {qkv, dout, out_s, out_p, pr_s, pr_p, dq_s, dq_p};
        for (size_t i = 0; i < sizeof bufs / sizeof *bufs; i++) free(bufs[i]);
    }
}

Test(pool_ops, attention_matches_serial_pool_2) {
    check_attention(2);
}

Test(pool_ops, attention_matches_serial_pool_3) {
    check_attention(3);
}

static void check_adam(int threads) {
    const size_t n = 200003;
    const AdamHyper hypers[] = {
        {.lr = 1e-3f,
         .beta1 = 0.9f,
         .beta2 = 0.999f,
         .eps = 1e-8f,
         .weight_decay = 0.01f,
         .decoupled = 1},
        {.lr = 3e-4f,
         .beta1 = 0.8f,
         .beta2 = 0.99f,
         .eps = 1e-6f,
         .weight_decay = 0.1f,
         .decoupled = 0},
    };
    for (size_t h = 0; h < 2; h++) {
        float *grad = rand_buf(n, -1, 1, 41);
        float *p_s = rand_buf(n, -1, 1, 42), *p_p = copy_buf(p_s, n);
        float *m_s = rand_buf(n, -0.1f, 0.1f, 43), *m_p = copy_buf(m_s, n);
        float *v_s = rand_buf(n, 0, 0.01f, 44), *v_p = copy_buf(v_s, n);
        for (long step = 1; step <= 3; step++) {
            kernels_cpu_use_pool(NULL);
            K->adam_step(p_s, grad, m_s, v_s, n, &hypers[h], step);
            CpuPool *p = bind_pool(threads);
            unsigned long before = cpu_pool_runs(p);
            K->adam_step(p_p, grad, m_p, v_p, n, &hypers[h], step);
            assert_split("adam_step", p, before);
            unbind_pool(p);
        }
        assert_same("adam param", threads, p_p, p_s, n);
        assert_same("adam m", threads, m_p, m_s, n);
        assert_same("adam v", threads, v_p, v_s, n);
        float *bufs[] = {grad, p_s, p_p, m_s, m_p, v_s, v_p};
        for (size_t i = 0; i < sizeof bufs / sizeof *bufs; i++) free(bufs[i]);
    }
}

Test(pool_ops, adam_matches_serial_pool_2) {
    check_adam(2);
}

Test(pool_ops, adam_matches_serial_pool_3) {
    check_adam(3);
}

/* Small ops stay on the calling thread: no dispatch for work below the thresholds. */
Test(pool_ops, small_ops_are_not_split) {
    CpuPool *p = bind_pool(2);
    float x[64], y[64], w[64 * 8], dw[64 * 8] = {0}, d[64];
    for (int i = 0; i < 64; i++) x[i] = (float)i / 64.0f, d[i] = 1.0f;
    for (int i = 0; i < 64 * 8; i++) w[i] = (float)(i % 7) / 7.0f;
    K->gelu_forward(y, x, 64);
    K->add(y, y, x, 64);
    K->linear_forward(y, x, w, NULL, 8, 8, 8);
    K->linear_backward(y, dw, NULL, d, x, w, 8, 8, 8);
    cr_assert_eq(cpu_pool_runs(p), 0);
    unbind_pool(p);
}
