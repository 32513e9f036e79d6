/* bench_ckpt: sharded checkpoint save and load against this disk's own sequential bandwidth,
 * measured with dd in the same run. Every simulated rank creates its engine (seeded
 * parameters, zero Adam state), then all ranks save one checkpoint together (each its own
 * file, fsync'd, then the merge and the rename) and load it back (each reading the rows it
 * keeps, CRCs checked). dd then writes (conv=fsync) and reads a file of the same size in the
 * same directory. Target: save and load >= 70% of dd's write and read rates.
 *
 *     build/bench_ckpt [--model vit-workshop] [--ranks 4] [--dir /tmp/bench_ckpt]
 *
 * The machine cannot drop the page cache (no root over /proc/sys/vm here), so reads may be
 * served partly from memory: dd's read of its file is measured under the same conditions. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "../core/checkpoint.h"
#include "../core/train.h"
#include "../core/vit.h"
#include "../sim/cluster.h"
#include "bench_util.h"

typedef struct Job {
    const ModelDesc *model;
    const Plan *plan;
    FsdpConfig cfg;
    const char *dir;
    double save_s, load_s; /* rank 0's, between barriers */
} Job;

static int rank_main(const RankEnv *env, void *arg, Err *err) {
    Job *j = arg;
    Engine *e = NULL;
    int rc = engine_create(&e, &j->cfg, j->plan, j->model, *env, err);
    CheckpointInfo info = {.model_name = "bench", .strategy = "zero3", .step = 1, .keep = 1};
    double t0 = 0;
    if (!rc) rc = comm_barrier(env->world_comm, err);
    t0 = now_s();
    if (!rc) rc = checkpoint_save(env, e, j->model, j->dir, &info, err);
    if (!rc && env->rank == 0) j->save_s = now_s() - t0;
    char path[4096];
    snprintf(path, sizeof path, "%s/step-00000001", j->dir);
    long step;
    if (!rc) rc = comm_barrier(env->world_comm, err);
    t0 = now_s();
    if (!rc) rc = checkpoint_load(e, j->model, path, &step, err);
    if (!rc) rc = comm_barrier(env->world_comm, err);
    if (!rc && env->rank == 0) j->load_s = now_s() - t0;
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

/* dd's rate in bytes/s for writing (fsync'd) or reading `bytes` in dir. The data written is
 * random (a 256 MiB block of /dev/urandom, repeated): a virtual disk may compress zeros, and a
 * checkpoint is not zeros. */
static double dd_rate(const char *dir, double bytes, int write) {
    char cmd[8192];
    long blocks = (long)(bytes / (256 << 20)) + 1;
    if (write) {
        snprintf(cmd, sizeof cmd, "dd if=/dev/urandom of=%s/seed.bin bs=16M count=16 status=none",
                 dir);
        if (system(cmd) != 0) return 0;
        snprintf(cmd, sizeof cmd,
                 "for i in $(seq %ld); do cat %s/seed.bin; done | dd of=%s/dd.bin bs=16M "
                 "iflag=fullblock conv=fsync status=none",
                 blocks, dir, dir);
    } else {
        snprintf(cmd, sizeof cmd, "dd if=%s/dd.bin of=/dev/null bs=16M status=none", dir);
    }
    double t0 = now_s();
    if (system(cmd) != 0) return 0;
    return (double)blocks * (256 << 20) / (now_s() - t0);
}

int main(int argc, char **argv) {
    const char *model = "vit-workshop", *dir = "/tmp/bench_ckpt";
    int ranks = 4;
    for (int i = 1; i + 1 < argc; i += 2) {
        if (!strcmp(argv[i], "--model")) model = argv[i + 1];
        if (!strcmp(argv[i], "--ranks")) ranks = atoi(argv[i + 1]);
        if (!strcmp(argv[i], "--dir")) dir = argv[i + 1];
    }
    VitConfig c;
    ModelDesc m;
    Plan p;
    Err err = {0};
    vit_preset(model, &c);
    WrapPolicy wrap = {.kind = WRAP_LAYER};
    if (vit_model_create(&m, &c, &err) || plan_create(&p, &m, wrap, STRAT_ZERO3, ranks, 1, &err)) {
        fprintf(stderr, "bench_ckpt: %s\n", err.msg);
        return 1;
    }
    Job job = {.model = &m, .plan = &p, .dir = dir};
    fsdp_config_defaults(&job.cfg);
    mkdir(dir, 0777);
    ClusterOptions opt = {.ranks = ranks, .profile = profile_default()};
    ClusterResult res;
    if (cluster_run(&opt, rank_main, &job, &res, &err)) {
        fprintf(stderr, "bench_ckpt: %s\n", err.msg);
        return 1;
    }
    cluster_result_free(&res);
    double bytes = checkpoint_bytes(dir, ranks);
    double w = dd_rate(dir, bytes, 1), r = dd_rate(dir, bytes, 0);
    double save = bytes / job.save_s, load = bytes / job.load_s;
    printf("bench_ckpt: %s at %d ranks, %.2f GB: save %.0f MB/s (%.0f%% of dd's %.0f MB/s "
           "write), load %.0f MB/s (%.0f%% of dd's %.0f MB/s read); target >= 70%%\n",
           model, ranks, bytes / 1e9, save / 1e6, 100 * save / w, w / 1e6, load / 1e6,
           100 * load / r, r / 1e6);
    char cmd[4096];
    snprintf(cmd, sizeof cmd, "rm -rf %s/step-00000001 %s/dd.bin %s/seed.bin", dir, dir, dir);
    if (system(cmd) != 0) fprintf(stderr, "bench_ckpt: could not clean %s\n", dir);
    plan_free(&p);
    model_desc_free(&m);
    return 0;
}
