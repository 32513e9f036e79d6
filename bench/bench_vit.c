/* bench_vit: training speed of vit-tiny on FashionMNIST on the simulated cluster, in images per
 * second of wall-clock time (steps after a warm-up, median of several runs). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bench/bench_util.h"
#include "engine/train.h"
#include "io/mnist.h"
#include "models/vit.h"
#include "sim/cluster.h"

/* Runs one rank at the global batch and `ranks` ranks at global batch / ranks each, the same math
 * split differently, so their ratio is the engine's cost of sharding. Prints one JSON line per
 * configuration so `make bench-vs-torch` can set them beside PyTorch's. */

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

int main(int argc, char **argv) {
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
    int cases[2] = {1, ranks};
    for (int k = 0; k < (ranks > 1 ? 2 : 1); k++) {
        double r[99];
        for (int i = 0; i < repeats; i++)
            r[i] = images_per_s(&m, &d, cases[k], global / cases[k], steps, warmup);
        qsort(r, (size_t)repeats, sizeof *r, cmp_double);
        printf("{\"impl\":\"fsdp\",\"model\":\"vit-tiny\",\"ranks\":%d,\"batch_per_rank\":%d,"
               "\"global_batch\":%d,\"steps\":%ld,\"images_per_s_median\":%.1f,"
               "\"images_per_s_min\":%.1f,\"images_per_s_max\":%.1f}\n",
               cases[k], global / cases[k], global, steps, r[repeats / 2], r[0], r[repeats - 1]);
        fflush(stdout);
    }
    dataset_free(&d);
    model_desc_free(&m);
    return 0;
}
