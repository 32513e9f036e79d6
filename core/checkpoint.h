/* checkpoint: sharded checkpoints that survive crashes and load at any world size. Each rank
 * writes its own file of the state it is the one to save (engine_save_state); rank 0 writes
 * meta.json: format version, the model's tensors (name, shape, dtype), every piece (which
 * file, which rows of which tensor, offset, bytes, CRC32), the step and the engine's
 * counters. A checkpoint is written into D/.step-NNNNNNNN.tmp, fsync'd, and renamed to
 * D/step-NNNNNNNN only when complete, so a killed save leaves the previous one intact. Loading
 * reads, for each piece a rank keeps now, the overlapping rows of whichever saved pieces hold
 * them: that is resharding. */
#ifndef FSDP_CHECKPOINT_H
#define FSDP_CHECKPOINT_H

#include <stddef.h>

#include "fsdp.h"

#define CHECKPOINT_VERSION 1

typedef struct CheckpointInfo {
    const char *model_name; /* "toy", "vit-tiny", ... (recorded; loading checks the tensors) */
    const char *strategy;   /* recorded for people: any strategy loads any other's */
    long step;              /* steps done */
    int keep;               /* complete checkpoints to keep in the directory (0: all) */
} CheckpointInfo;

/* Saves this rank's state into dir's checkpoint of info->step. Collective: every rank of
 * env->world_comm calls it (barriers order the writing, the merge and the rename). */
int checkpoint_save(const RankEnv *env, Engine *e, const ModelDesc *m, const char *dir,
                    const CheckpointInfo *info, Err *err);

/* Loads a checkpoint directory (D/step-NNNNNNNN) into e: every rank reads the rows it keeps,
 * verifying each piece's CRC; sets the engine's counters and *step to the steps done. No
 * communication. A checkpoint of another model or version, a missing, cut or corrupt rank file
 * or rows no piece holds fail with one line naming the file and tensor. */
int checkpoint_load(Engine *e, const ModelDesc *m, const char *path, long *step, Err *err);

/* The newest complete checkpoint in dir into path ("" when there is none). */
int checkpoint_latest(const char *dir, char *path, size_t n, Err *err);

#endif
