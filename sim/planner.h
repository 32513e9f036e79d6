/* planner: the engine behind `fsdp plan`. It answers "will it fit, and how slow will it be?"
 * for any model and cluster by running the engine's own schedule accounting-only on the
 * simulated cluster, so its bytes are the simulator's by construction. Ranks that would do
 * exactly the same thing (the same rows of every unit) run once: a 70B model on 1,024 GPUs
 * takes a handful of representative ranks, and the rest copy their figures. */
#ifndef FSDP_PLANNER_H
#define FSDP_PLANNER_H

#include "jobs/train.h"
#include "sim/cost.h"

typedef struct PlannerJob {
    const ModelDesc *model;
    const Plan *plan; /* the sharding of model over plan->world GPUs */
    FsdpConfig cfg;   /* strategy, wrap, dtypes, offload, batch, grad_accum, checkpointing */
    const Profile *profile;
    long steps; /* training steps to run (0: 2); the last is the one timed */
    /* Memory only: rank 0 alone, untraced, and no times. Its peak is the fullest GPU's: shard
     * rank 0 keeps whole chunks of every parameter, so no rank keeps more, and everything else
     * a rank allocates is the same on every rank. One thread and no rendezvous: what the
     * search for the largest batch runs. */
    int memory_only;
} PlannerJob;

/* What every GPU's collectives of one kind do in one step. */
typedef struct PlannerTraffic {
    double calls;        /* per GPU */
    double buffer_bytes; /* per GPU: the buffers handed to the collective */
    double sent_bytes;   /* per GPU: what the ring algorithm puts on the wire */
    double total_sent;   /* all GPUs */
} PlannerTraffic;

typedef struct PlannerResult {
    int gpus;
    int representatives; /* ranks actually run */
    /* [representatives]: the figures of each rank that ran, in rank order; a rank's are
     * memory[memory_of[rank]] (planner_memory): nothing bigger than an int is kept per GPU */
    RankMemory *memory;
    int *memory_of; /* [gpus]; NULL under memory_only, where every rank's are memory[0] */
    int top;        /* the rank with the highest GPU peak (the lowest such rank) */
    /* the top rank's last step, in modelled seconds: its span; the compute stream's busy
     * time and the rest of the span, when compute waited (on collectives, or on host copies
     * and NVMe under offload); the comm and copy streams' busy times */
    double step_time, compute_time, waiting, comm_time, copy_time;
    PlannerTraffic traffic[COLL_KIND_COUNT];
    int communicators; /* NCCL communicators a GPU holds (planner_communicators) */
    StepTimes kinds;   /* the top rank's last step: seconds of each kind of event (trace.h) */
} PlannerResult;

/* The most GPUs a plan takes: 2^20, eight times the largest clusters built (2024: 16,384 to
 * 131,072 GPUs). What a plan keeps per GPU is an int (its representative), so 2^20 GPUs cost
 * 4 MiB; everything else is per representative. */
#define PLANNER_MAX_GPUS (1 << 20)

/* The most samples one GPU's step may name (--batch-size x --grad-accum): a step keeps their
 * indices (8 bytes each), so 2^24 of them are 128 MiB a planned GPU; no batch near it fits a
 * GPU anyway. */
#define PLANNER_MAX_GPU_SAMPLES (1L << 24)

/* The NCCL communicators each GPU of plan p holds: none alone, hsdp's shard group and replica
 * group, else the world's one. */
int planner_communicators(const Plan *p);

/* Runs the job. Failures are the engine's (out of memory is not one: accounting-only devices
 * charge past their capacity, and the result says whether it fits), and a job past
 * PLANNER_MAX_GPU_SAMPLES, refused before anything is allocated. */
int planner_run(const PlannerJob *job, PlannerResult *out, Err *err);
/* A data set of n samples of model m's input shape for an accounting-only run, which reads
 * none of it (the lessons' checks use it too). Free with dataset_free. */
int planner_blank_dataset(Dataset *d, const ModelDesc *m, long n, Err *err);
void planner_result_free(PlannerResult *r);

/* Rank r's memory figures (its representative's). */
const RankMemory *planner_memory(const PlannerResult *res, int r);
/* The fullest GPU's: planner_memory(res, res->top). */
const RankMemory *planner_top_memory(const PlannerResult *res);

/* The ranks that must run: rank 0, and the first rank of every distinct set of per-unit
 * parameter, gradient and optimizer row counts. rep[r] is the rank whose figures r shares;
 * returns how many run. */
int planner_representatives(const Plan *p, int *rep, Err *err);

/* Bytes the top rank's device holds at its peak and at rest (every category but the fp32
 * copies the simulator keeps out of totals). */
size_t planner_rest_total(const RankMemory *m);

#endif
