/* run: a training run as the commands build it (model, data, plan, backend, output files) and
 * run it (ranks, restarts); what train and viz share. Printing is the commands' own. */
#ifndef FSDP_CMD_RUN_H
#define FSDP_CMD_RUN_H

#include <stdio.h>

#include "cmd/cli.h"
#include "cmd/run_dir.h"
#include "io/atomic_file.h"
#include "io/dir_lock.h"
#include "io/text.h"
#include "jobs/train.h"
#include "sim/cluster.h"
#include "sim/cost.h"

typedef struct TrainRun {
    TrainArgs args;
    int nflags;
    char **flags; /* the train flags as given, for the trace file */
    const Profile *profile;
    ModelDesc model;
    Dataset data, eval;
    long eval_loaded;   /* images read for evaluation (more than eval.n when it is a slice) */
    char eval_name[96]; /* what the evaluation set is, for people */
    TextInfo text;      /* a language model's: where its bytes came from */
    Plan plan;
    AtomicFile dump, trace, svg;
    char backend_note[192]; /* what --backend auto chose, and why ("" otherwise) */
    char resume[4096];      /* the checkpoint --resume resolved to ("" for none) */
    RankMemory *memory;
    float *params;
    int rank_per_process; /* one of many processes, one rank each (join_processes) */
    int quiet_rank;       /* ... and not rank 0: prints nothing, opens no output file */
    TrainFaults faults;   /* --fail-at, --kill-in-save: the fault hooks' state, for every run */
    RunDir run_dir;       /* --run-dir's own files (rank 0's) */
    DirLock run_lock, ckpt_lock; /* one job at a time in --run-dir and --checkpoint-dir */
    int has_best;                /* --val-size, resumed: the validation loss D/best holds */
    double best_val_loss;
} TrainRun;

/* The model and plan of a run, as a trace's replay needs them: no data, no parameters. */
int run_plan_only(TrainRun *t, Err *err);

/* How much of what the flags ask a job does: viz's recording and --memory-compare's runs only
 * compute the steps; train's run also evaluates, saves and resumes checkpoints, writes the
 * whole model, gathers the final parameters and takes the injected failures. */
typedef enum { JOB_STEPS_ONLY, JOB_WHOLE_RUN } JobScope;

/* The job the parsed flags describe, on this run's model, data, plan and memory records: the
 * one place a TrainJob is filled from the flags. The caller adds what is its own (callbacks and
 * their printer, how often the loss is logged, a config of its own). */
TrainJob run_job(TrainRun *t, JobScope scope);

/* The job on every rank: simulated ranks, this machine's GPU, or this process's MPI rank. */
int run_ranks(const TrainRun *t, const ClusterOptions *opt, TrainJob *job, ClusterResult *res,
              Err *err);

int run_prepare(TrainRun *t, Err *err);

/* 1 when a launcher started this process as one of many and it is not rank 0: every process of
 * a job finds a bad flag alike, and rank 0 alone says so. */
int run_not_rank_0(void);

/* Memory over the last step, from the trace: as an SVG picture into svg (NULL: none) and, with
 * text, as the terminal's timeline on stdout. */
int run_memory_timeline(const TrainRun *t, const Trace *trace, FILE *svg, int text, Err *err);

int run_write_outputs(TrainRun *t, const ClusterResult *res, Err *err);

/* The simulated cluster a run asks for: its ranks, hsdp's replica groups, the cost profile,
 * and devices that hold nothing for an accounting-only run (--accounting-only). */
ClusterOptions run_cluster_options(const TrainRun *t, int trace);

int run_values_alloc(const TrainRun *t, TrainJob *job, Err *err);

/* Hands the recorded values to the trace, which frees them with its events. */
void run_values_to_trace(TrainJob *job, size_t numel, Trace *trace);
/* Frees what run_values_alloc gave the job and the trace did not take. */
void run_values_free(TrainJob *job);

/* Runs the job; when a rank fails and --max-restarts allows, starts again from the newest
 * complete checkpoint (or from the beginning when there is none yet), as torchrun and Ray do.
 * An injected failure (--fail-at) happens once: the restarted run goes past it. */
int run_with_restarts(TrainRun *t, const ClusterOptions *opt, TrainJob *job, ClusterResult *res,
                      Err *err);

void run_cleanup(TrainRun *t);

#endif
