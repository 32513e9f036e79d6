/* report: what `fsdp train` shows a person, written to a FILE* the caller chooses: the
 * plan (units and parameters), the ownership table ("GPU 0: a₀ b₀ c₀"), per-rank memory by
 * category beside DDP's, per-step lines and JSON, and the parameter dump. */
#ifndef FSDP_REPORT_H
#define FSDP_REPORT_H

#include <stdio.h>

#include "engine/fsdp.h"
#include "io/text.h"
#include "jobs/train.h"
#include "sim/viz/text.h"

/* where: what the ranks are, after their count ("simulated ranks (h100-nvlink)"). */
void report_config(FILE *f, const FsdpConfig *c, const char *model, int ranks, const char *where);
void report_plan(FILE *f, const Plan *p);
void report_ownership(FILE *f, const Plan *p);
void report_memory(FILE *f, const Plan *p, const FsdpConfig *c, const RankMemory *mem);
/* The data a ViT trains and is evaluated on (held_out: the split's last images, kept for
 * validation), and how long the run is (global_batch: the images of a step, for the epoch's
 * length in steps, drop-last). */
void report_data(FILE *f, const Dataset *train, const char *split, long held_out,
                 const Dataset *eval, const char *eval_name, long steps, int epochs,
                 long global_batch);
/* The run's learning rate (--lr-schedule, --warmup-steps) over its `steps`, as one line. */
void report_lr_schedule(FILE *f, const FsdpConfig *c, long steps);
/* Decimal units, as GPU memory and the workshop's arithmetic are quoted (28 GB = 28e9 B):
 * "512 B", "1.36 GB". */
const char *report_si_bytes(double b, char *buf, size_t n);
/* A modelled step's seconds: "12.212 s", or "0.292 ms" below one. */
const char *report_seconds(double t, char *buf, size_t n);
/* A learning-rate curve as the flags that give it, with the run's length where the kind reads
 * it: "--lr-schedule cosine --lr 0.001 --warmup-steps 10 --min-lr 0 over 702 steps". */
void report_lr_curve_flags(char *buf, size_t n, const LrCurve *c);
/* clock: how the step time was had ("modelled", "measured"); lr: show the step's rate (a
 * schedule moves it). */
void report_step_text(FILE *f, const StepReport *r, int fp16, int lr, const char *clock);
/* The run's pace so far, from the steps a printer has seen: their wall seconds, their images
 * and how many. Piped, only every few steps reach the printer, and a resumed run starts past
 * step 1, so the time left is per step seen, not per step number. */
typedef struct StepPace {
    double seconds, images;
    long steps;
} StepPace;
void step_pace_add(StepPace *p, const StepReport *r);
double step_pace_images_per_s(const StepPace *p); /* the average so far, wall clock */
/* A ViT step: the epoch, the step of the run's steps ("epoch 1/1  step 200/200"), loss, the
 * rate when lr (a schedule moves it), images/s and the time left at the pace p (which has seen
 * r). */
void report_step_vit(FILE *f, const StepReport *r, const StepPace *p, int lr);
/* The same redrawn in place on a terminal ("\r"), the bar filling over the run, ending the
 * line with each epoch. */
void report_progress_bar(FILE *f, const StepReport *r, const StepPace *p);
/* One JSON line: each rank's peak bytes and the largest, {"peak_bytes":N,"rank_peaks":[...]}. */
void report_memory_json(FILE *f, const RankMemory *m, int ranks);
/* --check-streams: "stream check: N accesses across streams, H hazards", or as one JSON line. */
void report_stream_check(FILE *f, size_t accesses, size_t hazards, int json);

/* One setting of --memory-compare: its name, the flags that make it, and the memory of the
 * rank whose GPU peak was largest. */
typedef struct CompareRow {
    const char *name;
    const char *flags;
    RankMemory peak;
} CompareRow;

/* The settings side by side: at each one's GPU peak, GPU memory by kind (params, grads, Adam,
 * activations with checkpointed inputs, comm buffers), the GPU total against gpu_bytes, and
 * what offload keeps in host memory (and NVMe) at that memory's own peak. */
void report_memory_compare(FILE *f, const CompareRow *rows, int n, size_t gpu_bytes,
                           const char *profile);
void report_step_json(FILE *f, const StepReport *r);
void report_eval_text(FILE *f, const EvalReport *r);
void report_eval_json(FILE *f, const EvalReport *r);
/* An epoch's mean training loss: "epoch 1/3: training loss 0.6123, the mean of its 234 steps",
 * or as one JSON line. */
void report_epoch_text(FILE *f, const EpochReport *r);
void report_epoch_json(FILE *f, const EpochReport *r);
void report_final_params(FILE *f, const ModelDesc *m, const float *params);
/* The text a transformer learns (its path, files, bytes, token file and sequences, the last
 * `held_out` of them kept for validation) and how long the run is, as report_data says it for
 * images. */
void report_text(FILE *f, const char *path, const TextInfo *info, const Dataset *text,
                 long held_out, long steps, int epochs, long global_batch);
/* A transformer's step: the step of the run's steps, the epoch, loss, with lr its learning
 * rate (a schedule moves it), tokens/s (seq a sequence) and the time left at the pace p (which
 * has seen r). */
void report_step_lm(FILE *f, const StepReport *r, const StepPace *p, int seq, int lr);
/* `name index value` lines, %.9e, into f, which is being written for `path` (the file a person
 * asked for, named by a failure: a full disk is one line naming it and why). Returns 0 or
 * ERR_IO. */
int report_dump_params(FILE *f, const char *path, const ModelDesc *m, const float *params,
                       Err *err);

#endif
