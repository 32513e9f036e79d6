/* bench_vit: training speed of vit-tiny on FashionMNIST on the simulated cluster, in images per
 * second of wall-clock time (steps after a warm-up, median of several runs), and the model's
 * FLOP rate beside OpenBLAS's at the model's own GEMM shapes, timed in the same run. */
#include <cblas.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "bench/bench_util.h"
#include "io/mnist.h"
#include "jobs/train.h"
#include "kernels/cpu/blas_core.h"
#include "kernels/cpu/cpu_ops.h"
#include "models/vit.h"
#include "sim/cluster.h"

/* Runs one rank at the global batch and `ranks` ranks at global batch / ranks each, the same math
 * split differently, so their ratio is the engine's cost of sharding. Each repeat runs both and
 * then times the model's GEMMs alone (on one thread, on the pool of one rank, and on the pool
 * with each Linear on its own buffers), so a machine whose speed drifts moves them together.
 * Prints one JSON line per configuration and one for the GEMMs, so `make bench-vs-torch` can set
 * them beside PyTorch's.
 *
 * The FLOPs are counted from the shapes (multiply-adds x 2): every Linear's forward GEMM, its
 * backward's dw and din (the patch embedding has no din), and attention's q k^T and P v forward
 * and their four products backward. LayerNorm, GELU, softmax, Adam and the rest are left out,
 * as FLOP counts of training usually leave them: they are what the achieved rate pays for. */

/* One Linear layer of the model: out[M, N] = in[M, K] . w[N, K]^T, its backward's dw, and its
 * din unless it is the first layer. */
typedef struct LinearShape {
    size_t M, K, N;
    int has_din;
} LinearShape;

enum { MAX_LINEARS = 4 * 1000 + 2 };

/* The model's Linears at batch B, in the order a step runs them forward; returns how many. */
static int vit_linears(const VitConfig *c, size_t B, LinearShape *out) {
    const size_t T = (size_t)vit_tokens(c), H = (size_t)c->hidden, F = (size_t)c->mlp;
    const size_t P = (size_t)c->patch, M = B * T;
    int n = 0;
    out[n++] = (LinearShape){B * (T - 1), P * P, H, 0}; /* conv_proj as a GEMM over patches */
    for (int l = 0; l < c->layers; l++) {
        out[n++] = (LinearShape){M, H, 3 * H, 1}; /* in_proj */
        out[n++] = (LinearShape){M, H, H, 1};     /* out_proj */
        out[n++] = (LinearShape){M, H, F, 1};     /* fc1 */
        out[n++] = (LinearShape){M, F, H, 1};     /* fc2 */
    }
    out[n++] = (LinearShape){B, H, (size_t)c->classes, 1}; /* head */
    return n;
}

static double linear_step_flops(const LinearShape *s) {
    return 2.0 * (double)s->M * (double)s->K * (double)s->N * (s->has_din ? 3.0 : 2.0);
}

/* FLOPs of one training step at batch B: the Linears' GEMMs and attention's products. */
static double vit_step_flops(const VitConfig *c, size_t B) {
    static LinearShape lin[MAX_LINEARS];
    const int n = vit_linears(c, B, lin);
    double flops = 0.0;
    for (int i = 0; i < n; i++) flops += linear_step_flops(&lin[i]);
    const double T = vit_tokens(c), D = (double)c->hidden / c->heads;
    const double product = 2.0 * (double)B * c->heads * T * T * D; /* q k^T, or P v */
    return flops + (double)c->layers * product * (2 + 4);
}

typedef struct Timing {
    long warmup;
    double start, end; /* wall clock of the steps after the warm-up */
} Timing;

static void on_step(void *user, const StepReport *r) {
    Timing *t = user;
    if (r->step == t->warmup) t->start = clock_seconds();
    t->end = clock_seconds();
}

static double images_per_s(const ModelDesc *m, const Dataset *d, int ranks, int batch, long steps,
                           long warmup) {
    FsdpConfig c;
    fsdp_config_defaults(&c);
    c.lr = 1e-3f;
    c.batch_size = batch;
    Plan p = bench_plan_or_exit("bench_vit", m, &c, ranks);
    Timing t = {.warmup = warmup};
    TrainJob job = {.model = m,
                    .data = d,
                    .plan = &p,
                    .cfg = &c,
                    .steps = warmup + steps,
                    .log_every = 1,
                    .on_step = on_step,
                    .user = &t};
    ClusterOptions opt = {.ranks = ranks, .profile = profile_default()};
    ClusterResult res;
    Err err = {0};
    if (cluster_run(&opt, train_rank, &job, &res, &err)) {
        fprintf(stderr, "bench_vit: %s\n", err.msg);
        exit(1);
    }
    cluster_result_free(&res);
    plan_free(&p);
    return (double)steps * ranks * batch / (t.end - t.start);
}

/* Buffers big enough for every Linear of the list, filled with small values (no denormals). */
typedef struct GemmBuffers {
    float *in, *w, *out, *din, *dw;
} GemmBuffers;

static int gemm_buffers_alloc(GemmBuffers *g, const LinearShape *lin, int n) {
    size_t in = 0, w = 0, out = 0;
    for (int i = 0; i < n; i++) {
        const size_t MK = lin[i].M * lin[i].K, NK = lin[i].N * lin[i].K, MN = lin[i].M * lin[i].N;
        in = MK > in ? MK : in, w = NK > w ? NK : w, out = MN > out ? MN : out;
    }
    g->in = malloc(in * sizeof(float)), g->din = malloc(in * sizeof(float));
    g->w = malloc(w * sizeof(float)), g->dw = calloc(w, sizeof(float));
    g->out = malloc(out * sizeof(float));
    if (!g->in || !g->din || !g->w || !g->dw || !g->out) return -1;
    for (size_t i = 0; i < in; i++) g->in[i] = 0.01f * (float)(i % 13);
    for (size_t i = 0; i < w; i++) g->w[i] = 0.01f * (float)(i % 7) - 0.03f;
    return 0;
}

static void gemm_buffers_free(GemmBuffers *g) {
    free(g->in), free(g->w), free(g->out), free(g->din), free(g->dw);
}

/* Seconds for one step's GEMMs through the CPU op table's linear_forward and linear_backward
 * (no biases), on the calling thread's bound pool (none: one sgemm call per GEMM, OpenBLAS on
 * one thread); Linear i works on buffers g[i]. The forward's output stands in for the
 * backward's dout. */
static double time_step_gemms(const LinearShape *lin, int n, GemmBuffers *g) {
    const Kernels *k = &kernels_cpu;
    const double start = clock_seconds();
    for (int i = 0; i < n; i++)
        k->linear_forward(DTYPE_FP32, g[i].out, g[i].in, g[i].w, NULL, lin[i].M, lin[i].K,
                          lin[i].N);
    for (int i = n - 1; i >= 0; i--)
        k->linear_backward(DTYPE_FP32, lin[i].has_din ? g[i].din : NULL, g[i].dw, NULL, g[i].out,
                           g[i].in, g[i].w, lin[i].M, lin[i].K, lin[i].N);
    return clock_seconds() - start;
}

/* GFLOP/s of the model's GEMMs at batch B (`steps` steps' worth, after one untimed), with the
 * op table's work split over a pool of `threads` threads (1: OpenBLAS alone, one thread).
 * Shared buffers: every Linear reuses one set, so its operands are in cache whenever it runs,
 * the GEMMs' best case. Otherwise (`own_buffers`) each Linear has its own inputs, weights,
 * outputs and gradients, as a training step holds them, about 70 MB at batch 64, so that by the
 * time a Linear runs again its operands have left the caches: the case of the model's backward,
 * which reads what forward stored long before. */
static double gemm_gflops(const VitConfig *c, size_t B, int threads, int steps, int own_buffers) {
    static LinearShape lin[MAX_LINEARS];
    static GemmBuffers bufs[MAX_LINEARS];
    const int n = vit_linears(c, B, lin), sets = own_buffers ? n : 1;
    double flops = 0.0;
    for (int i = 0; i < n; i++) flops += linear_step_flops(&lin[i]);
    CpuPool *pool = threads > 1 ? cpu_pool_create(threads) : NULL;
    int rc = threads > 1 && !pool;
    for (int i = 0; i < sets; i++)
        rc = rc || gemm_buffers_alloc(&bufs[i], own_buffers ? &lin[i] : lin, own_buffers ? 1 : n);
    if (rc) {
        fprintf(stderr, "bench_vit: out of memory for the GEMM timing\n");
        exit(1);
    }
    for (int i = sets; i < n; i++) bufs[i] = bufs[0];
    kernels_cpu_set_threads(1);
    kernels_cpu_use_pool(pool);
    time_step_gemms(lin, n, bufs);
    double seconds = 0.0;
    for (int s = 0; s < steps; s++) seconds += time_step_gemms(lin, n, bufs);
    kernels_cpu_use_pool(NULL);
    cpu_pool_destroy(pool);
    for (int i = 0; i < sets; i++) gemm_buffers_free(&bufs[i]);
    return flops * steps / seconds / 1e9;
}

static double median_of(double *v, int n) {
    qsort(v, (size_t)n, sizeof *v, cmp_double);
    return v[n / 2];
}

int main(int argc, char **argv) {
    blas_core_reexec(argv); /* the GEMM kernels ./fsdp runs on this CPU */
    int global = 64, ranks = 4, repeats = 5;
    long steps = 30, warmup = 5;
    for (int i = 1; i + 1 < argc; i += 2) {
        if (!strcmp(argv[i], "--batch"))
            global = atoi(argv[i + 1]);
        else if (!strcmp(argv[i], "--ranks"))
            ranks = atoi(argv[i + 1]);
        else if (!strcmp(argv[i], "--steps"))
            steps = atol(argv[i + 1]);
        else if (!strcmp(argv[i], "--repeats"))
            repeats = atoi(argv[i + 1]);
        else {
            fprintf(stderr, "bench_vit: unknown flag %s\n", argv[i]);
            return 2;
        }
    }
    if (global < 1 || ranks < 1 || global % ranks || steps < 1 || repeats < 1 || repeats > 99) {
        fprintf(stderr, "bench_vit: --batch must be a positive multiple of --ranks\n");
        return 2;
    }
    Err err = {0};
    ModelDesc m;
    Dataset d;
    VitConfig c;
    vit_preset("vit-tiny", &c);
    if (vit_model_create(&m, &c, &err) || mnist_load(&d, mnist_dir(NULL), "train", &err)) {
        fprintf(stderr, "bench_vit: %s\n", err.msg);
        return 1;
    }
    /* repeats outer: each round runs 1 rank, `ranks` ranks, then the GEMMs alone */
    const int ncases = ranks > 1 ? 2 : 1, cases[2] = {1, ranks};
    const long cores = sysconf(_SC_NPROCESSORS_ONLN);
    const int pool = cores > 1 ? (int)cores : 1; /* the pool one rank runs its kernels on */
    const double step_flops = vit_step_flops(&c, (size_t)global);
    static double rates[2][99], gemm1[99], gemm_pool[99], gemm_own[99];
    for (int i = 0; i < repeats; i++) {
        for (int k = 0; k < ncases; k++)
            rates[k][i] = images_per_s(&m, &d, cases[k], global / cases[k], steps, warmup);
        gemm1[i] = gemm_gflops(&c, (size_t)global, 1, 10, 0);
        gemm_pool[i] = pool > 1 ? gemm_gflops(&c, (size_t)global, pool, 10, 0) : gemm1[i];
        gemm_own[i] = gemm_gflops(&c, (size_t)global, pool, 10, 1);
    }
    const double g1 = median_of(gemm1, repeats), gp = median_of(gemm_pool, repeats);
    const double gown = median_of(gemm_own, repeats);
    const double gemm_best = gp > g1 ? gp : g1;
    for (int k = 0; k < ncases; k++) {
        double *r = rates[k];
        const double med = median_of(r, repeats), model_gflops = med * step_flops / global / 1e9;
        printf("{\"impl\":\"fsdp\",\"model\":\"vit-tiny\",\"ranks\":%d,\"batch_per_rank\":%d,"
               "\"global_batch\":%d,\"steps\":%ld,\"images_per_s_median\":%.1f,"
               "\"images_per_s_min\":%.1f,\"images_per_s_max\":%.1f,\"mflop_per_image\":%.2f,"
               "\"model_gflops\":%.1f,\"of_gemm_rate\":%.3f}\n",
               cases[k], global / cases[k], global, steps, med, r[0], r[repeats - 1],
               step_flops / global / 1e6, model_gflops, model_gflops / gemm_best);
    }
    printf("{\"impl\":\"openblas_sgemm\",\"model\":\"vit-tiny\",\"batch\":%d,"
           "\"gflop_per_step\":%.3f,\"gflops_1_thread\":%.1f,\"gflops_pool\":%.1f,"
           "\"gflops_pool_own_buffers\":%.1f,\"pool_threads\":%d,\"openblas\":\"%s\"}\n",
           global, step_flops / 1e9, g1, gp, gown, pool, openblas_get_corename());
    fflush(stdout);
    dataset_free(&d);
    model_desc_free(&m);
    return 0;
}
