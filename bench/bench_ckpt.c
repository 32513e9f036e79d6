/* bench_ckpt: sharded checkpoint save and load against dd on the same disk, in the same run.
 *     build/bench_ckpt [--model vit-workshop] [--ranks 4] [--runs 3] [--layers L] [--dir D] */
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "bench/bench_util.h"
#include "io/checkpoint.h"
#include "jobs/train.h"
#include "models/kinds.h"
#include "models/vit.h"
#include "sim/cluster.h"

/* Every simulated rank creates its engine (seeded parameters, zero Adam state), then all ranks save
 * one checkpoint together (each its own file, fsync'd, then the merge and the rename) and load it
 * back (each reading the rows it keeps, CRCs checked). dd then writes a file of the same size in
 * the same directory twice, through the page cache (conv=fsync) and with O_DIRECT (oflag=direct),
 * and reads the second back. Target: save >= 70% of dd's better write, load >= 70% of dd's read.
 * The checkpoint writes with O_DIRECT (io/bulk_file.c), so dd's read is of a file written the same
 * way: on this virtual disk, a file written through the page cache is read back from the host's
 * cache several times faster than the disk, and one written directly is not. --dir defaults to
 * /tmp/bench_ckpt.
 *
 * Both reads start cold: the files were fsync'd, so posix_fadvise(DONTNEED) can evict their pages
 * from the page cache without root (which dropping the whole cache would need). Each run measures
 * the checkpoint and dd back to back; the medians are over the runs. */

typedef struct Job {
    const ModelDesc *model;
    const Plan *plan;
    FsdpConfig cfg;
    const char *dir;
    const char *model_name; /* --model: what meta.json records, so that loading checks it */
    double save_s, load_s;  /* rank 0's, between barriers */
} Job;

/* Evicts a synced file's pages from the page cache, so the next read comes from the disk. */
static void evict(const char *path) {
    int fd = open(path, O_RDONLY);
    if (fd < 0) return;
    if (fdatasync(fd) != 0 || posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED) != 0)
        fprintf(stderr, "bench_ckpt: could not evict %s from the page cache\n", path);
    close(fd);
}

static void evict_checkpoint(const char *dir, int ranks) {
    for (int r = 0; r < ranks; r++) {
        char path[4096];
        snprintf(path, sizeof path, "%s/step-00000001/rank-%05d.bin", dir, r);
        evict(path);
    }
}

static int rank_main(const RankEnv *env, void *arg, Err *err) {
    Job *j = arg;
    Engine *e = NULL;
    int rc = engine_create(&e, &j->cfg, j->plan, j->model, *env, err);
    CheckpointInfo info = {.kinds = &model_kinds,
                           .model_name = j->model_name,
                           .strategy = "zero3",
                           .step = 1,
                           .keep = 1};
    double t0 = 0;
    if (!rc) rc = comm_barrier(env->world_comm, err);
    t0 = clock_seconds();
    if (!rc) rc = checkpoint_save(env, e, j->model, j->dir, &info, err);
    if (!rc && env->rank == 0) j->save_s = clock_seconds() - t0;
    char path[4096];
    snprintf(path, sizeof path, "%s/step-00000001", j->dir);
    long step;
    if (!rc && env->rank == 0) evict_checkpoint(j->dir, env->world);
    if (!rc) rc = comm_barrier(env->world_comm, err);
    t0 = clock_seconds();
    if (!rc) rc = checkpoint_load(e, j->model, &model_kinds, path, &step, err);
    if (!rc) rc = comm_barrier(env->world_comm, err);
    if (!rc && env->rank == 0) j->load_s = clock_seconds() - t0;
    engine_destroy(e);
    return rc;
}

/* Bytes of the rank files of the saved checkpoint. */
static double checkpoint_bytes(const char *dir, int ranks) {
    double total = 0;
    for (int r = 0; r < ranks; r++) {
        char path[4096];
        struct stat st;
        snprintf(path, sizeof path, "%s/step-00000001/rank-%05d.bin", dir, r);
        if (stat(path, &st) == 0) total += (double)st.st_size;
    }
    return total;
}

/* dd's rate in bytes/s for writing `bytes` in dir, through the page cache with one fsync at
 * the end (conv=fsync) or with O_DIRECT (oflag=direct), as the checkpoint writes. The data is
 * random (a 256 MiB block of /dev/urandom, repeated): a virtual disk may compress zeros, and a
 * checkpoint is not zeros. */
static double dd_write(const char *dir, double bytes, int direct) {
    char cmd[8192];
    long blocks = (long)(bytes / (256 << 20)) + 1;
    snprintf(cmd, sizeof cmd, "dd if=/dev/urandom of=%s/seed.bin bs=16M count=16 status=none", dir);
    if (system(cmd) != 0) return 0;
    snprintf(cmd, sizeof cmd,
             "for i in $(seq %ld); do cat %s/seed.bin; done | dd of=%s/dd.bin bs=16M "
             "iflag=fullblock %s status=none",
             blocks, dir, dir, direct ? "oflag=direct conv=fsync" : "conv=fsync");
    double t0 = clock_seconds();
    if (system(cmd) != 0) return 0;
    return (double)blocks * (256 << 20) / (clock_seconds() - t0);
}

/* dd's rate reading back the file dd_write wrote last, evicted from the page cache first. */
static double dd_read(const char *dir, double bytes) {
    char cmd[8192];
    long blocks = (long)(bytes / (256 << 20)) + 1;
    snprintf(cmd, sizeof cmd, "%s/dd.bin", dir);
    evict(cmd);
    snprintf(cmd, sizeof cmd, "dd if=%s/dd.bin of=/dev/null bs=16M status=none", dir);
    double t0 = clock_seconds();
    if (system(cmd) != 0) return 0;
    return (double)blocks * (256 << 20) / (clock_seconds() - t0);
}

enum { RUNS_MAX = 15 };

static double median(double *v, int n) {
    qsort(v, (size_t)n, sizeof *v, cmp_double);
    return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

int main(int argc, char **argv) {
    const char *model = "vit-workshop", *dir = "/tmp/bench_ckpt";
    int ranks = 4, runs = 3, layers = 0;
    for (int i = 1; i + 1 < argc; i += 2) {
        if (!strcmp(argv[i], "--model")) model = argv[i + 1];
        if (!strcmp(argv[i], "--ranks")) ranks = atoi(argv[i + 1]);
        if (!strcmp(argv[i], "--dir")) dir = argv[i + 1];
        if (!strcmp(argv[i], "--runs")) runs = atoi(argv[i + 1]);
        if (!strcmp(argv[i], "--layers")) layers = atoi(argv[i + 1]);
    }
    if (runs < 1 || runs > RUNS_MAX) {
        fprintf(stderr, "bench_ckpt: --runs must be 1 to %d\n", RUNS_MAX);
        return 2;
    }
    VitConfig c;
    ModelDesc m;
    Plan p;
    Err err = {0};
    vit_preset(model, &c);
    if (layers > 0) c.layers = layers;
    WrapPolicy wrap = {.kind = WRAP_LAYER};
    if (vit_model_create(&m, &c, &err) || plan_create(&p, &m, wrap, STRAT_ZERO3, ranks, 1, &err)) {
        fprintf(stderr, "bench_ckpt: %s\n", err.msg);
        return 1;
    }
    double save[RUNS_MAX], load[RUNS_MAX], dd_w[RUNS_MAX], dd_r[RUNS_MAX], bytes = 0;
    mkdir(dir, 0777);
    for (int run = 0; run < runs; run++) {
        Job job = {.model = &m, .plan = &p, .dir = dir, .model_name = model};
        fsdp_config_defaults(&job.cfg);
        ClusterOptions opt = {.ranks = ranks, .profile = profile_default()};
        ClusterResult res;
        if (cluster_run(&opt, rank_main, &job, &res, &err)) {
            fprintf(stderr, "bench_ckpt: %s\n", err.msg);
            return 1;
        }
        cluster_result_free(&res);
        bytes = checkpoint_bytes(dir, ranks);
        /* dd's better write, then a read of what it wrote as the checkpoint did (O_DIRECT) */
        double buffered = dd_write(dir, bytes, 0), direct = dd_write(dir, bytes, 1);
        dd_w[run] = buffered > direct ? buffered : direct;
        dd_r[run] = dd_read(dir, bytes);
        save[run] = bytes / job.save_s;
        load[run] = bytes / job.load_s;
        printf("run %d: save %.0f MB/s, dd write %.0f MB/s (%.0f%%); load %.0f MB/s, dd read "
               "%.0f MB/s (%.0f%%)\n",
               run + 1, save[run] / 1e6, dd_w[run] / 1e6, 100 * save[run] / dd_w[run],
               load[run] / 1e6, dd_r[run] / 1e6, 100 * load[run] / dd_r[run]);
        fflush(stdout);
        char cmd[4096];
        snprintf(cmd, sizeof cmd, "rm -rf %s/step-00000001 %s/dd.bin %s/seed.bin", dir, dir, dir);
        if (system(cmd) != 0) fprintf(stderr, "bench_ckpt: could not clean %s\n", dir);
    }
    double ms = median(save, runs), mw = median(dd_w, runs), ml = median(load, runs),
           mr = median(dd_r, runs);
    printf("bench_ckpt: %s at %d ranks, %.2f GB, medians of %d: save %.0f MB/s (%.0f%% of dd's "
           "%.0f MB/s write), load %.0f MB/s (%.0f%% of dd's %.0f MB/s read); target >= 70%%\n",
           model, ranks, bytes / 1e9, runs, ms / 1e6, 100 * ms / mw, mw / 1e6, ml / 1e6,
           100 * ml / mr, mr / 1e6);
    plan_free(&p);
    model_desc_free(&m);
    return 0;
}
