/* train: the training loop every rank runs. It walks the epochs' seeded permutations (the
 * global batch of a step is the next ranks x batch indices, rank r taking slice r), calls
 * the engine for each step, hands rank 0's per-step figures to a callback, and at the end
 * collects each rank's memory and the final full parameters. */
#ifndef FSDP_TRAIN_H
#define FSDP_TRAIN_H

#include "fsdp.h"

typedef struct RankMemory {
    size_t rest[MEM_CATEGORY_COUNT];    /* after the last step */
    size_t at_peak[MEM_CATEGORY_COUNT]; /* breakdown when the total peaked */
    size_t peak;
} RankMemory;

typedef struct StepReport {
    long step;        /* 1-based */
    int epoch;        /* 0-based */
    double step_time; /* rank 0's modelled (sim) or measured seconds for this step */
    StepStats stats;
} StepReport;

typedef void (*StepCallback)(void *user, const StepReport *r);

typedef struct TrainJob {
    const ModelDesc *model;
    const Dataset *data;
    const Plan *plan;
    const FsdpConfig *cfg;
    long steps;
    int log_every;        /* all-reduce the loss on these steps (and the last); 0: never */
    StepCallback on_step; /* called by rank 0 on logged steps; may be NULL */
    void *user;
    /* filled by the ranks */
    RankMemory *memory;  /* [world] */
    float *final_params; /* [model->total_numel], written by rank 0; may be NULL */
} TrainJob;

/* Steps per epoch with drop-last: data size / (ranks x batch x grad_accum). */
long train_steps_per_epoch(const TrainJob *job, int world);

/* Rank-main for a cluster: runs the whole job on this rank. arg is a TrainJob. */
int train_rank(const RankEnv *env, void *arg, Err *err);

#endif
