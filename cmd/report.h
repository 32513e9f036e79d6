/* report: what `fsdp train` shows a person, written to a FILE* the caller chooses: the
 * plan (units and parameters), the ownership table ("GPU 0: a₀ b₀ c₀"), per-rank memory by
 * category beside DDP's, per-step lines and JSON, and the parameter dump. */
#ifndef FSDP_REPORT_H
#define FSDP_REPORT_H

#include <stdio.h>

#include "engine/fsdp.h"
#include "engine/train.h"
#include "sim/viz/text.h"

/* where: what the ranks are, after their count ("simulated ranks (h100-nvlink)"). */
void report_config(FILE *f, const FsdpConfig *c, const char *model, int ranks, const char *where);
void report_plan(FILE *f, const Plan *p);
void report_ownership(FILE *f, const Plan *p);
void report_memory(FILE *f, const Plan *p, const FsdpConfig *c, const RankMemory *mem);
/* The data a ViT trains and is evaluated on, and how long the run is. */
void report_data(FILE *f, const Dataset *train, const char *split, const Dataset *eval,
                 const char *eval_name, long steps, int epochs);
/* clock: how the step time was had ("modelled", "measured"). */
void report_step_text(FILE *f, const StepReport *r, int fp16, const char *clock);
/* A ViT step: epoch progress, loss, images/s (the run's average so far, wall clock) and the
 * time left; elapsed is the wall time of the steps so far. */
void report_step_vit(FILE *f, const StepReport *r, double elapsed, double images_per_s);
/* The same redrawn in place on a terminal ("\r"), ending the line with each epoch. */
void report_progress_bar(FILE *f, const StepReport *r, double elapsed, double images_per_s);
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
void report_final_params(FILE *f, const ModelDesc *m, const float *params);
/* `name index value` lines, %.9e. Returns 0 or ERR_IO. */
int report_dump_params(FILE *f, const ModelDesc *m, const float *params, Err *err);

#endif
