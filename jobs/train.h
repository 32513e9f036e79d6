/* train: the training loop every rank runs. It walks the epochs' seeded permutations (the
 * global batch of a step is the next ranks x batch indices, rank r taking slice r), calls
 * the engine for each step, hands rank 0's per-step figures to a callback, and at the end
 * collects each rank's memory and the final full parameters. */
#ifndef FSDP_TRAIN_H
#define FSDP_TRAIN_H

#include "engine/fsdp.h"

/* The most steps a run counts (--steps, a checkpoint's step): the sampler's index math (the
 * epoch as an int, a step's place in the epoch times world, batch and micro-steps as a long)
 * holds well within it. */
#define TRAIN_MAX_STEPS 1000000000L
/* The most samples a run holds out for validation (--val-size, a checkpoint's held_out). */
#define TRAIN_MAX_HELD_OUT 1000000000L

typedef struct RankMemory {
    size_t rest[MEM_CATEGORY_COUNT];    /* after the last step */
    size_t at_peak[MEM_CATEGORY_COUNT]; /* breakdown when the total peaked */
    size_t peak;
    /* the GPU's own peak and its breakdown then, and the same for what offload keeps off the
     * GPU (host memory, NVMe files): what the memory table shows, each place at its own peak */
    MemPeak on_gpu, off_gpu;
    size_t resident_peak; /* the rank's process, measured (0: not measured, as in the simulator) */
} RankMemory;

typedef struct StepReport {
    long step;  /* 1-based */
    long steps; /* of the whole run */
    int epoch;  /* 0-based */
    long steps_per_epoch;
    double step_time;    /* rank 0's modelled (sim) or measured seconds for this step */
    double wall_time;    /* rank 0's wall-clock seconds for this step */
    double images_per_s; /* the global batch over wall_time */
    /* the rate this step's optimizer update used (FsdpConfig.lr_schedule's) */
    float lr;
    StepStats stats;
    size_t peak_bytes; /* rank 0's GPU memory peak so far (accounted), as max_memory_allocated */
} StepReport;

/* What an evaluation measured: eval_data at each epoch's end (no images held out), the
 * held-out images (TrainJob.held_out), or eval_data once after the last step (with them). */
typedef enum { EVAL_EACH_EPOCH, EVAL_VALIDATION, EVAL_TEST } EvalKind;

typedef struct EvalReport {
    long step; /* steps done when it ran */
    int epoch; /* epochs completed, counting a partial one */
    EvalKind kind;
    int epoch_end; /* at an epoch's end or after the last step; else an eval_every step */
    int best;      /* validation: the lowest loss of the run so far */
    long samples, correct;
    double accuracy; /* correct / samples */
    double loss;     /* mean over samples */
    double wall_time;
} EvalReport;

/* An epoch's end (or the run's, part-way through one): the mean of its steps' losses. */
typedef struct EpochReport {
    int epoch;   /* 1-based */
    int epochs;  /* of the whole run, counting a partial one */
    long step;   /* steps done */
    long steps;  /* the epoch's steps this run took (fewer when it resumed or ends mid-epoch) */
    double loss; /* the mean over them of each step's loss (each the global batch's mean) */
} EpochReport;

typedef void (*StepCallback)(void *user, const StepReport *r);
typedef void (*EvalCallback)(void *user, const EvalReport *r);
typedef void (*EpochCallback)(void *user, const EpochReport *r);

/* What a caller runs at points of the loop, the loop not knowing why (train_fault_hooks, for
 * one). Every rank calls them, from its own thread in the simulator. Each may be NULL. */
typedef struct TrainHooks {
    /* As step `step` (1-based) begins on rank `rank`: non-zero stops the rank, err set. */
    int (*step_begins)(void *state, int rank, long step, Err *err);
    /* Before the checkpoint of step `step` is saved: 1 to have rank 0 kill the whole process
     * (SIGKILL) half-way through writing it, its rank files begun and no meta.json. */
    int (*checkpoint_dies_midway)(void *state, long step);
    void *state;
} TrainHooks;

/* Fault injection for tests and demos (--fail-at, --kill-in-save; 0: never): rank fail_at_rank
 * fails as step fail_at_step begins, once (a restarted run goes past it), and the process is
 * killed half-way through writing the checkpoint of step kill_in_save_step, as a crash or an
 * out-of-memory kill would. */
typedef struct TrainFaults {
    long fail_at_step;
    int fail_at_rank;
    long kill_in_save_step;
    long kill_in_prune_step; /* ... or in the pruning after it (--kill-in-prune) */
} TrainFaults;

/* Hooks that inject `faults`, which must outlive the runs that use them. */
TrainHooks train_fault_hooks(TrainFaults *faults);

typedef struct TrainJob {
    const ModelDesc *model;
    const Dataset *data;
    const Plan *plan;
    const FsdpConfig *cfg;
    long steps;
    /* all-reduce the loss on the first step, every log_every-th and the last; 0: never */
    int log_every;
    StepCallback on_step; /* called by rank 0 on logged steps; may be NULL */
    /* Evaluation on eval_data (NULL: none) at each epoch's end and after the last step. */
    const Dataset *eval_data;
    EvalCallback on_eval; /* called by rank 0; may be NULL */
    /* Held-out validation (--val-size): the last held_out samples of data are never trained on
     * (each epoch's permutation is of the first n - held_out) and are evaluated at each epoch's
     * end and every eval_every steps (0: epoch ends only); eval_data is then evaluated once,
     * after the last step. 0: nothing held out. */
    long held_out;
    long eval_every;
    /* Each epoch's mean loss, to rank 0's on_epoch at its end (NULL: not measured, and no
     * collective for it): each rank sums its own step losses and one all-reduce at the epoch's
     * end averages the sums, so no step pays a collective for it. */
    EpochCallback on_epoch;
    /* With ckpt_dir and held_out, the state of the lowest validation loss is kept as
     * ckpt_dir/best (checkpoint.h). A resumed run sets has_best and best_val_loss to what best
     * holds already; a validation must do better to replace it. */
    int has_best;
    double best_val_loss;
    void *user;
    /* Starting parameters (model->total_numel floats in model order), NULL: the seeded
     * initialization. */
    const float *init_params;
    /* Or a safetensors file of PyTorch-named weights, of which each rank reads only its own
     * rows (checked beforehand with weights_open); NULL: none. */
    const char *init_from;
    /* --save-full: the trained parameters as one safetensors file (PyTorch's names), gathered
     * unit by unit at the end; NULL: none */
    const char *save_full;
    /* --save-hf: a language model as a Hugging Face folder (jobs/export_hf.h), gathered the same
     * way; NULL: none */
    const char *save_hf;
    /* Optional, for looking at a small model's numbers: the full parameters before the first
     * step and after each, [(steps + 1) * total_numel], and each step's gradients,
     * [steps * total_numel]; NULL: not recorded. */
    float *step_params, *step_grads;
    /* Optional beside them: each rank's own gradients of each step before the reduction
     * averaged them (engine_record_local_grads), [steps * world * total_numel], step s's of
     * rank r at (s * world + r) * total_numel; NULL: not recorded. */
    float *step_local_grads;
    /* Checkpoints: with ckpt_dir, saved every ckpt_every steps (0: only at epoch ends) and at
     * each epoch's end, keeping the newest ckpt_keep (0: all); model_name is recorded. With
     * resume_from (a checkpoint directory), training continues from its step: steps counts
     * every step, those before the checkpoint included. */
    const char *ckpt_dir;
    long ckpt_every;
    int ckpt_keep;
    const char *resume_from;
    const char *model_name;
    long resumed_step; /* filled: the step the run resumed from (0: from the start) */
    TrainHooks hooks;  /* none when zero */
    /* One rank per process (GPUs under fsdp launch): each rank's memory record is gathered
     * to every process, so rank 0 can report them all (in one process they share the array). */
    int rank_per_process;
    /* Accounting only (fsdp plan): no model reads a sample, so no shuffle of the data set is
     * kept and every index is sample 0 (a planned global batch may be a billion samples). */
    int no_sampler;
    /* filled by the ranks */
    RankMemory *memory; /* [world], or as memory_slot says */
    /* [world]: the entry of memory rank r writes (the planner keeps one per rank it runs);
     * NULL: memory[r] */
    const int *memory_slot;
    float *final_params; /* [model->total_numel], written by rank 0; may be NULL */
    EvalReport last_eval;
} TrainJob;

/* Steps per epoch with drop-last: the samples trained on (those not held out) / (ranks x batch
 * x grad_accum). */
long train_steps_per_epoch(const TrainJob *job, int world);

/* Loads a weights file (PyTorch's names, checked with weights_open) into the engine: each rank
 * reads only the rows it keeps; Adam's moments start at zero. No communication. */
int train_load_weights(Engine *e, const ModelDesc *m, const char *path, Err *err);

/* Rank-main for a cluster: runs the whole job on this rank. arg is a TrainJob. */
int train_rank(const RankEnv *env, void *arg, Err *err);

#endif
