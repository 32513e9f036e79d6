/* run_dir: `train --run-dir DIR`, one place for a run's files as Ray's RunConfig(storage_path,
 * name) keeps them: config.json, metrics.jsonl, curves.svg, checkpoints/, model.safetensors,
 * and memory.svg and trace.json when asked. Rank 0 alone writes them. */
#ifndef FSDP_CMD_RUN_DIR_H
#define FSDP_CMD_RUN_DIR_H

#include "cmd/cli.h" /* TrainArgs and the files of a run directory, RUN_DIR_* */
#include "io/metrics_log.h"
#include "jobs/train.h"

typedef struct RunDir {
    const char *dir; /* NULL: no run directory (every call below does nothing) */
    char config[4096], metrics[4096], curves[4096];
    char title[160];
    long steps; /* the run's: the curves' step axis */
    MetricsLog log;
    /* The first failure of the callbacks, which cannot return one; run_dir_finish says it. */
    int failed;
    Err err;
} RunDir;

/* Before any file of the run is opened, on every rank: makes DIR (and its parents). On rank
 * 0, a DIR that already holds a run (any of the files above; checkpoints/ not empty) is refused
 * unless resume: one line, ERR_USAGE, nothing touched. Other ranks only make the folder: what
 * they make never counts as a run, so whichever rank comes first, rank 0 decides alike. */
int run_dir_prepare(const TrainArgs *a, int rank0, Err *err);

/* --resume auto found no checkpoint (resumed ""): refused where the run directory holds a run
 * all the same (its model or metrics), which starting over would replace: a finished run whose
 * checkpoints/ was deleted (issue 39). */
int run_dir_check_resumable(const TrainArgs *a, const char *resumed, Err *err);

/* Rank 0, once every check has passed and before training: writes config.json (atomically,
 * from train's flag table) and opens metrics.jsonl, reading back what a resumed run's holds.
 * title heads curves.svg. */
int run_dir_open(RunDir *d, const TrainArgs *a, long steps, const char *title, Err *err);

/* The step and evaluation callbacks' share: a line each in metrics.jsonl; an evaluation
 * redraws curves.svg. */
void run_dir_step(RunDir *d, const StepReport *r);
void run_dir_eval(RunDir *d, const EvalReport *r);

/* At the run's end (also one that failed): curves.svg drawn from every line, metrics.jsonl
 * closed. Returns the first failure of the run directory's files, naming the file. */
int run_dir_finish(RunDir *d, Err *err);

void run_dir_close(RunDir *d);

#endif
