/* bench_toy: the engine's own overhead: the toy trained at 3 simulated ranks under zero3 (the
 * workshop's setting), in steps per second, median of 5 runs. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bench/bench_util.h"
#include "jobs/train.h"
#include "models/toy.h"
#include "sim/cluster.h"

/* The math is a few hundred flops a step, so this measures scheduling, collectives between rank
 * threads and bookkeeping. Target: >= 5,000 steps/s on a 2-core machine. */

static double steps_per_second(const ModelDesc *m, const Dataset *d, const Plan *p,
                               const FsdpConfig *c, int ranks, long steps) {
    TrainJob job = {.model = m, .data = d, .plan = p, .cfg = c, .steps = steps};
    ClusterOptions opt = {.ranks = ranks, .profile = profile_default()};
    ClusterResult res;
    Err err = {0};
    double t0 = clock_seconds();
    if (cluster_run(&opt, train_rank, &job, &res, &err)) {
        fprintf(stderr, "bench_toy: %s\n", err.msg);
        exit(1);
    }
    double dt = clock_seconds() - t0;
    cluster_result_free(&res);
    return (double)steps / dt;
}

/* Median steps/s of RUNS runs of `steps` steps of strategy s at `ranks` ranks. */
static double median_rate(const ModelDesc *m, const Dataset *d, Strategy s, int ranks, long steps,
                          double *lo, double *hi) {
    enum { RUNS = 5 };
    FsdpConfig c;
    fsdp_config_defaults(&c);
    c.lr = 0.05f;
    c.strategy = s;
    Plan p = bench_plan_or_exit("bench_toy", m, &c, ranks);
    double r[RUNS];
    for (int i = 0; i < RUNS; i++) r[i] = steps_per_second(m, d, &p, &c, ranks, steps);
    qsort(r, RUNS, sizeof *r, cmp_double);
    plan_free(&p);
    *lo = r[0];
    *hi = r[RUNS - 1];
    return r[RUNS / 2];
}

int main(int argc, char **argv) {
    long steps = argc > 1 ? atol(argv[1]) : 20000;
    Err err = {0};
    ModelDesc m;
    Dataset d;
    if (toy_model_create(&m, &err) || toy_dataset_create(&d, &err)) {
        fprintf(stderr, "bench_toy: %s\n", err.msg);
        return 1;
    }
    /* the target case, then its peers in the same run: one rank (no collectives at all)
     * and DDP at 3 ranks (one all-reduce per unit instead of gathers and scatters) */
    struct {
        Strategy s;
        int ranks;
    } cases[] = {{STRAT_ZERO3, 3}, {STRAT_ZERO3, 1}, {STRAT_DDP, 3}};
    double target = 0;
    printf("bench_toy: toy, batch 8 per rank, %ld steps a run, median of 5 runs\n", steps);
    for (int i = 0; i < 3; i++) {
        double lo, hi, med = median_rate(&m, &d, cases[i].s, cases[i].ranks, steps, &lo, &hi);
        if (i == 0) target = med;
        printf("  %-5s %d rank%s  %8.0f steps/s  (min %.0f, max %.0f)  %.2fx the zero3/3 figure\n",
               strategy_name(cases[i].s), cases[i].ranks, cases[i].ranks == 1 ? " " : "s", med, lo,
               hi, med / target);
    }
    printf("target: zero3 at 3 ranks >= 5000 steps/s: %s\n", target >= 5000 ? "met" : "NOT met");
    dataset_free(&d);
    model_desc_free(&m);
    return 0;
}
