/* export_hf: a language model written as a Hugging Face model folder (config.json and
 * model.safetensors, fp32), a tensor at a time, so neither train --save-hf nor ckpt consolidate
 * --hf holds more than one tensor beyond what it already has. */
#ifndef FSDP_JOBS_EXPORT_HF_H
#define FSDP_JOBS_EXPORT_HF_H

#include "base/err.h"
#include "engine/model.h"

typedef struct HfWriter HfWriter;

/* Starts dir (made if missing; an existing folder's other files are left alone) for model m,
 * whose parameters will come in the order order[0..n) (every parameter once). Nothing under dir
 * changes until hf_writer_commit: both files are written beside their names and renamed into
 * place then. ERR_USAGE: m has no Hugging Face form, or dir cannot be made or written. */
int hf_writer_open(HfWriter **out, const ModelDesc *m, const int *order, int n, const char *dir,
                   Err *err);
/* The next parameter's values (its numel floats, in this project's layout). */
int hf_writer_next(HfWriter *w, const float *values, Err *err);
/* Once every parameter is written: renames model.safetensors, then config.json, into place;
 * frees w whatever happens. */
int hf_writer_commit(HfWriter *w, Err *err);
/* Drops what was written (NULL is fine); dir's files are as they were. */
void hf_writer_abort(HfWriter *w);

#endif
