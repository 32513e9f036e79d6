/* bench_toy: the engine's own overhead. Trains the toy at 3 simulated ranks under zero3
 * (the workshop's setting) and reports training steps per second, median of 5 runs. The
 * math is a few hundred flops a step, so this measures scheduling, collectives between
 * rank threads and bookkeeping. Target: >= 5,000 steps/s on a 2-core machine. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "../core/toy.h"
#include "../core/train.h"
#include "../sim/cluster.h"

static double now_s(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

static int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

static double steps_per_second(const ModelDesc *m, const Dataset *d, const Plan *p,
                               const FsdpConfig *c, int ranks, long steps) {
    TrainJob job = {.model = m, .data = d, .plan = p, .cfg = c, .steps = steps};
    ClusterOptions opt = {.ranks = ranks, .profile = profile_default()};
    ClusterResult res;
    Err err = {0};
    double t0 = now_s();
    if (cluster_run(&opt, train_rank, &job, &res, &err)) {
        fprintf(stderr, "bench_toy: %s\n", err.msg);
        exit(1);
    }
    double dt = now_s() - t0;
    cluster_result_free(&res);
    return (double)steps / dt;
}

int main(int argc, char **argv) {
    long steps = argc > 1 ? atol(argv[1]) : 20000;
    int ranks = 3;
    Err err = {0};
    ModelDesc m;
    Dataset d;
    Plan p;
    FsdpConfig c;
    fsdp_config_defaults(&c);
    c.lr = 0.05f;
    if (toy_model_create(&m, &err) || toy_dataset_create(&d, &err) ||
        plan_create(&p, &m, c.wrap, c.strategy, ranks, 1, &err)) {
        fprintf(stderr, "bench_toy: %s\n", err.msg);
        return 1;
    }
    enum { RUNS = 5 };
    double r[RUNS];
    for (int i = 0; i < RUNS; i++) r[i] = steps_per_second(&m, &d, &p, &c, ranks, steps);
    qsort(r, RUNS, sizeof *r, cmp_double);
    printf("bench_toy: toy, %d ranks, zero3, batch %d, %ld steps x %d runs: median %.0f steps/s "
           "(min %.0f, max %.0f)\n",
           ranks, c.batch_size, steps, RUNS, r[RUNS / 2], r[0], r[RUNS - 1]);
    plan_free(&p);
    dataset_free(&d);
    model_desc_free(&m);
    return 0;
}
