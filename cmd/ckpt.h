/* checkpoint_tools: `fsdp ckpt`, the tools for the sharded checkpoints train writes.
 * inspect reports what a checkpoint holds (format, model, strategy, world size, step; each
 * tensor's shape and which ranks hold which rows of its parameters and Adam moments; each rank
 * file's totals) and verifies every piece's CRC32, once checkpoint.h's reader has checked
 * meta.json itself (its own CRC32, every field against the model it describes, every row held
 * once). consolidate writes the parameters as one safetensors file with PyTorch's names and
 * shapes (what train --init-from loads), a tensor at a time so that no more than one tensor is
 * ever in memory, through a temporary file renamed into place only when complete. Reads
 * checkpoints through checkpoint.h's reader; writes only the file it is given; prints only to
 * the stream it is given. */
#ifndef FSDP_CHECKPOINT_TOOLS_H
#define FSDP_CHECKPOINT_TOOLS_H

#include <stddef.h>
#include <stdio.h>

#include "base/err.h"
#include "io/checkpoint.h"

typedef enum { CKPT_INSPECT = 1, CKPT_CONSOLIDATE } CkptTool;

typedef struct CkptArgs {
    CkptTool tool;
    const char *path; /* a checkpoint (D/step-NNNNNNNN) or a --checkpoint-dir */
    const char *out;  /* consolidate's -o */
    const char *hf;   /* consolidate's --hf */
} CkptArgs;

void ckpt_help(FILE *f);
/* `fsdp ckpt`'s arguments (after "ckpt"). Returns 1 for --help, 0, or an error. */
int ckpt_args_parse(CkptArgs *a, int argc, char **argv, Err *err);

/* path itself when it holds meta.json, else the newest complete checkpoint in it (a
 * --checkpoint-dir); a path that is neither is an error (ERR_USAGE). */
int ckpt_resolve(const char *path, char *out, size_t n, Err *err);

/* Prints path's report to f once checkpoint.h's reader has checked meta.json (its CRC32, its
 * fields, every row held once, every rank file's size), then verifies every piece's CRC,
 * ending with "all N pieces verified". Any damage: one line naming the file and the field or
 * tensor (ERR_USAGE), and nothing printed when meta.json is what is damaged. */
int ckpt_inspect(FILE *f, const char *path, Err *err);

/* Writes path's parameters (kind param) to out as fp32 safetensors with the checkpoint's
 * tensor names and shapes and __metadata__ {fsdp_model, fsdp_step, and the model's config as
 * saved}; verifies each parameter piece's CRC as it reads it. On success prints one line to f.
 * A bad checkpoint or -o fails with ERR_USAGE, leaving out as it was and no temporary file. */
int ckpt_consolidate(FILE *f, const char *path, const char *out, Err *err);

/* Writes a language model's checkpoint (transformer, llama) as a Hugging Face folder dir
 * (jobs/export_hf.h: config.json and model.safetensors in the layout from_pretrained reads),
 * a tensor at a time, verifying each piece's CRC as it reads it. On success prints one line to
 * f. Another model, a bad checkpoint or a dir that cannot be written fail with ERR_USAGE,
 * leaving dir's files as they were. */
int ckpt_consolidate_hf(FILE *f, const char *path, const char *dir, Err *err);

#endif
