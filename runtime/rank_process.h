/* rank_process: a job of one process per rank, the runner the real backends share (cuda: one
 * process per GPU; mpi: one per rank on CPUs). Where the rank comes from, which device and which
 * communicators are the backend's (RankBackend); the rest is here, so what CI runs under mpirun
 * is what a GPU job runs: --ranks against the world, hsdp's groups, the rank-main, and the
 * rank's trace events gathered so that rank 0 holds every rank's. */
#ifndef FSDP_RANK_PROCESS_H
#define FSDP_RANK_PROCESS_H

#include "sim/cluster.h"

/* What a backend opens for one rank. */
typedef struct RankParts {
    Device *dev;
    const Kernels *k;
    Comm *world;
} RankParts;

typedef struct RankBackend {
    const char *name;  /* "cuda", "mpi": for messages */
    const char *start; /* how to start a job of N processes, for messages ("mpirun -np N") */
    void *self;
    /* This process's rank and the world's size: its launcher's (cuda) or MPI's (mpi). */
    int (*join)(void *self, int *rank, int *world, Err *err);
    /* The rank's device (its events into trace) with the kernels that run on it, then the
     * world's communicator. */
    int (*open)(void *self, int rank, int world, const ClusterOptions *opt, TraceBuf *trace,
                RankParts *p, Err *err);
    /* A communicator of parent's ranks that give the same color, ordered by key (hsdp). */
    int (*split)(void *self, Comm *parent, int color, int key, Comm **out, Err *err);
    /* Runs fn on env (binding the kernels to the device's compute stream where it has streams)
     * and returns once nothing of the rank's is in flight and its trace is complete. */
    int (*run)(void *self, const RankEnv *env, RankMain fn, void *arg, Err *err);
    void (*close_comm)(void *self, Comm *c);
    /* The world's communicator and the device, and whatever else open made. */
    void (*close)(void *self, RankParts *p);
} RankBackend;

/* A backend's entries from functions named after them, as device.h's DEVICE_OPS_NAMED:
 * RANK_BACKEND_NAMED(mpi) is .join = mpi_join, .open = mpi_open, .split = mpi_split, .run =
 * mpi_rank_main, .close_comm = mpi_close_comm, .close = mpi_close. */
#define RANK_BACKEND_NAMED(prefix)                                                                 \
    .join = prefix##_join, .open = prefix##_open, .split = prefix##_split,                         \
    .run = prefix##_rank_main, .close_comm = prefix##_close_comm, .close = prefix##_close

/* Runs fn as this process's rank of the job: opt->ranks must be the world's size (else
 * ERR_USAGE saying how many there are). With opt->trace, out->trace holds every rank's events
 * on every rank. */
int rank_process_run(const RankBackend *b, const ClusterOptions *opt, RankMain fn, void *arg,
                     ClusterResult *out, Err *err);

/* hsdp's groups of rank in a world of `replicas` replicas, as sim/cluster.c builds them: its
 * shard group (the S = world/replicas consecutive ranks of its replica) and its replica group
 * (the ranks with its position in their shard group). Colors, and the rank as the key. */
void rank_hsdp_colors(int rank, int world, int replicas, int *shard_color, int *replica_color);

#endif
