/* metrics_log: a run directory's metrics.jsonl, a JSON line per logged training step and per
 * evaluation, each appended and flushed as it comes (a killed run keeps what it logged), read
 * back and cut back when a resumed run starts from an earlier step. */
#ifndef FSDP_METRICS_LOG_H
#define FSDP_METRICS_LOG_H

#include <stdio.h>

#include <stddef.h>

#include "base/err.h"

/* The fields, in the order each line has them (all of them on every line of its kind):
 *   a step: "split":"train", "step" (1-based), "epoch" (0-based, the epoch the step is in),
 *           "loss" (the global batch's mean), "lr", "grad_norm" (0 when not computed),
 *           "step_time_s" (modelled in the simulator, measured on a real backend),
 *           "peak_bytes" (rank 0's GPU memory peak so far, accounted), "images_per_s",
 *           "wall_s" (the step's wall-clock seconds)
 *   an evaluation: "split" (the set's role: "val" for --val-size's held-out images, "test"
 *           for the evaluation set, the test split unless the run trains on it),
 *           "step" (steps done), "epoch" (epochs done, counting a partial one), "loss",
 *           "accuracy" (0 to 1), "correct", "samples", "wall_s"
 * A number that is not finite is written null (a run stops on a loss that is not). */
#define METRICS_SPLIT_TRAIN "train"

/* A training step as its line has it (the loop's StepReport, as the run directory hands it). */
typedef struct MetricsStep {
    long step;
    int epoch;
    float loss, lr, grad_norm;
    double step_time;
    size_t peak_bytes;
    double images_per_s, wall_time;
} MetricsStep;

/* An evaluation as its line has it (the loop's EvalReport). */
typedef struct MetricsEval {
    long step;
    int epoch;
    double loss, accuracy;
    long correct, samples;
    double wall_time;
} MetricsEval;

/* Reopened (a resumed or restarted run), the log reads the lines back; when the run goes back
 * to an earlier step, the lines from that step on are cut, so the steps in the file only
 * increase. It keeps what the curves need of every line: */
typedef struct MetricsLine {
    char split[16]; /* "train" for a step */
    long step;
    double loss;
    double accuracy; /* evaluations only */
    long offset;     /* where the line starts in the file */
} MetricsLine;

typedef struct MetricsLog {
    char path[4096];
    FILE *f; /* appending */
    MetricsLine *lines;
    size_t n, cap;
    long end; /* the file's length: where the next line starts */
} MetricsLog;

/* Opens path for appending, first reading back the lines it holds (a last line cut short by
 * a kill is dropped). A line that is not a metrics line is one message naming the file and
 * the line: ERR_USAGE, nothing changed. Free with metrics_log_close, also on failure. */
int metrics_log_open(MetricsLog *m, const char *path, Err *err);

/* Appends a step's line (the lines from its step on cut first, if any). ERR_IO when the
 * file cannot take it. */
int metrics_log_step(MetricsLog *m, const MetricsStep *r, Err *err);

/* Appends an evaluation's line of set `split` (the lines after its step, and any of the same
 * set at its step, cut first). */
int metrics_log_eval(MetricsLog *m, const MetricsEval *r, const char *split, Err *err);

void metrics_log_close(MetricsLog *m);

#endif
