/* report: what `fsdp train` shows a person, written to a FILE* the caller chooses: the
 * plan (units and parameters), the ownership table ("GPU 0: a₀ b₀ c₀"), per-rank memory by
 * category beside DDP's, per-step lines and JSON, and the parameter dump. */
#ifndef FSDP_REPORT_H
#define FSDP_REPORT_H

#include <stdio.h>

#include "engine/fsdp.h"
#include "engine/train.h"

void report_config(FILE *f, const FsdpConfig *c, const char *model, int ranks, const char *profile);
void report_plan(FILE *f, const Plan *p);
void report_ownership(FILE *f, const Plan *p);
void report_memory(FILE *f, const Plan *p, const FsdpConfig *c, const RankMemory *mem);
/* The data a ViT trains and is evaluated on, and how long the run is. */
void report_data(FILE *f, const Dataset *train, const char *split, const Dataset *eval,
                 const char *eval_name, long steps, int epochs);
void report_step_text(FILE *f, const StepReport *r, int fp16);
/* A ViT step: epoch progress, loss, images/s (the run's average so far, wall clock) and the
 * time left; elapsed is the wall time of the steps so far. */
void report_step_vit(FILE *f, const StepReport *r, double elapsed, double images_per_s);
/* The same redrawn in place on a terminal ("\r"), ending the line with each epoch. */
void report_progress_bar(FILE *f, const StepReport *r, double elapsed, double images_per_s);
/* One JSON line: each rank's peak bytes and the largest, {"peak_bytes":N,"rank_peaks":[...]}. */
void report_memory_json(FILE *f, const RankMemory *m, int ranks);

/* v with thousands separators ("779,298,826") into buf; returns buf. */
const char *with_commas(size_t v, char *buf, size_t n);

/* One setting of --memory-compare: its name, the flags that make it, and the memory of the
 * rank whose peak was largest. */
typedef struct CompareRow {
    const char *name;
    const char *flags;
    RankMemory peak;
} CompareRow;

/* The settings side by side: at each one's peak, GPU memory by kind (params, grads, Adam,
 * activations with checkpointed inputs, comm buffers), the GPU total against gpu_bytes, and
 * what offload keeps in host memory. */
void report_memory_compare(FILE *f, const CompareRow *rows, int n, size_t gpu_bytes,
                           const char *profile);
void report_step_json(FILE *f, const StepReport *r);
void report_eval_text(FILE *f, const EvalReport *r);
void report_eval_json(FILE *f, const EvalReport *r);
void report_final_params(FILE *f, const ModelDesc *m, const float *params);
/* `name index value` lines, %.9e. Returns 0 or ERR_IO. */
int report_dump_params(FILE *f, const ModelDesc *m, const float *params, Err *err);
/* The elements of unit u that rank `rank` of a group of `size` owns (torch.chunk rows), as
 * the model's symbols each after `prefix` ("a₀ a₁", or "∂c₂" with prefix "∂"); size 1 gives
 * all of them. Returns 0 (and "") when the unit's parameters have no symbols. */
int report_unit_symbols(const Plan *p, int u, int size, int rank, const char *prefix, char *buf,
                        size_t n);
/* The same with each element's value from `values` (all parameters in model order, NULL for
 * none): "a₀=+0.887 a₁=+0.308". */
int report_unit_values(const Plan *p, int u, int size, int rank, const char *prefix,
                       const float *values, char *buf, size_t n);
/* Columns a UTF-8 string takes on a terminal (one per code point). */
size_t report_display_width(const char *s);
/* Human bytes: "36 B", "1.50 KiB", "12.3 GiB". */
const char *format_bytes(size_t b, char *buf, size_t n);

#endif
