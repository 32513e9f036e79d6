/* cluster: the simulated cluster. Runs N ranks as threads of this process, each with its
 * own SimDevice (accounted memory, modelled clock), trace buffer and communicators (the
 * world, and for hsdp its shard and replica groups). If one rank fails, the others are
 * woken and stop instead of waiting forever. */
#ifndef FSDP_CLUSTER_H
#define FSDP_CLUSTER_H

#include "engine/fsdp.h"
#include "engine/trace.h"
#include "sim/cost.h"

typedef int (*RankMain)(const RankEnv *env, void *arg, Err *err);

typedef struct ClusterOptions {
    int ranks;
    int replicas; /* > 1: build hsdp shard groups of ranks/replicas and replica groups */
    const Profile *profile;
    int trace; /* record every event */
    /* accounting only: devices hold no data, collectives move none, kernels do nothing; the
     * schedule, memory accounting and modelled times are those of a real run */
    int accounting_only;
    /* With accounting_only, the ranks to run (run_rank[r] != 0), NULL: all. The others do not
     * exist; collectives complete when the running members arrive. Sound only when each
     * absent rank would do exactly what a running one does (sim/planner.c picks them). */
    const unsigned char *run_rank;
    /* Real GPUs: seconds a collective may take before the watchdog aborts the job (0: 600,
     * PyTorch's default). The simulator cannot hang and ignores it. */
    double timeout;
    /* The stream checker (sim/stream_check.h) on every rank: a hazard fails the run with its
     * line. Also on when the environment has FSDP_CHECK_STREAMS=1 (the test suite runs so).
     * Accounting-only runs, which move no bytes, are not checked. */
    int check_streams;
    /* Real GPUs: fp32 matrix products on TF32 tensor cores (PyTorch's allow_tf32: inputs
     * rounded to 10 mantissa bits, fp32 accumulation). The CPU computes fp32 as fp32. */
    int tf32;
    const Plan *unit_names; /* names units in the checker's lines; NULL: "unit N" */
} ClusterOptions;

typedef struct ClusterResult {
    Trace trace; /* merged trace of all ranks (empty unless ClusterOptions.trace) */
    int checked; /* the stream checker ran: the figures below are its */
    size_t stream_accesses, stream_hazards; /* summed over ranks */
} ClusterResult;

/* Runs fn on every rank and waits for all. Returns the first failing rank's error. */
int cluster_run(const ClusterOptions *opt, RankMain fn, void *arg, ClusterResult *out, Err *err);
void cluster_result_free(ClusterResult *r);

#endif
