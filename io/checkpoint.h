/* checkpoint: sharded checkpoints that survive crashes and load at any world size. Each rank
 * writes its own file of the state it is the one to save (engine_save_state); rank 0 writes
 * meta.json: format version, the model's configuration (the ViT's, the transformer's) and
 * tensors (name, shape, dtype), every piece (which file, which rows of which tensor, offset,
 * bytes, CRC32), the step and the engine's counters, and last the CRC32 of all of that. A
 * checkpoint is written into D/.step-NNNNNNNN.tmp, fsync'd, and renamed to D/step-NNNNNNNN only
 * when complete, so a killed save leaves the previous one intact. Loading reads, for each piece
 * a rank keeps now, the overlapping rows of whichever saved pieces hold them: that is
 * resharding. The reader below (CkptMeta) serves loading and the tools of `fsdp ckpt` alike: it
 * reads meta.json without a model, and reads or verifies one piece at a time. D/best, the state
 * of a run's lowest validation loss, is a symbolic link to a checkpoint directory of its own
 * (checkpoint_save). */
#ifndef FSDP_CHECKPOINT_H
#define FSDP_CHECKPOINT_H

#include <stddef.h>

#include "engine/fsdp.h"
#include "engine/model.h"

/* 2: meta.json ends with a CRC32 of its own content. Version 1 (no such line) is refused:
 * what its meta.json says cannot be told from damage (docs/checkpoints.md). */
#define CHECKPOINT_VERSION 2
/* The most ranks a checkpoint may have been saved by. */
#define CHECKPOINT_MAX_WORLD 65536
/* The largest step a checkpoint may record, and the most samples it may say were held out: the
 * training loop's own limits (jobs/train.h's TRAIN_MAX_STEPS and TRAIN_MAX_HELD_OUT, which it
 * checks equal these). */
#define CHECKPOINT_MAX_STEP 1000000000L
#define CHECKPOINT_MAX_HELD_OUT 1000000000L

enum { CKPT_KILL_NONE = 0, CKPT_KILL_IN_RANK_FILES, CKPT_KILL_IN_PRUNE };

typedef struct CheckpointInfo {
    const char *model_name;  /* "toy", "vit-tiny", ... (recorded; loading checks the tensors) */
    const char *strategy;    /* recorded for people: any strategy loads any other's */
    long step;               /* steps done */
    int keep;                /* complete checkpoints to keep in the directory (0: all) */
    int kill_midway;         /* fault injection (CKPT_KILL_*): rank 0 SIGKILLs the whole process
                              * right after handing over its first piece (rank files begun, no
                              * meta.json), or in pruning, right after the first file of the
                              * checkpoint it removes */
    long held_out;           /* samples the run holds out for validation (recorded; 0: none) */
    int validated;           /* the held-out samples were evaluated at this step: */
    double val_loss;         /* ... their mean loss (recorded when finite) */
    int best;                /* keep it as D/best too (the lowest validation loss so far) */
    int best_only;           /* ... and as nothing else: no D/step-NNNNNNNN */
    const LrCurve *lr_curve; /* the run's learning-rate curve, recorded when it varies (NULL:
                              * none): a resumed run is held to the same rates */
    const ModelKinds *kinds; /* how the model's sizes are recorded (models/kinds.h) */
} CheckpointInfo;

/* Saves this rank's state into dir's checkpoint of info->step. Collective: every rank of
 * env->world_comm calls it (barriers order the writing, the merge and the rename). A state that
 * holds a value that is not finite (nan, inf) on any rank is not saved: every rank returns
 * ERR_DIVERGED naming the first such tensor and kind, and nothing is left in dir.
 *
 * With info->best it becomes dir/best as well: a symbolic link to dir/.best-NNNNNNNN (hard
 * links to the step's files, which are never written again, or the files themselves with
 * best_only), made whole and synced before the link is replaced by one rename(2), so a save
 * killed at any point leaves dir/best the old best or the new one, whole. prune (keep) and
 * checkpoint_latest look only at step-NNNNNNNN: --keep never removes the best, and --resume auto
 * never picks it. */
int checkpoint_save(const RankEnv *env, Engine *e, const ModelDesc *m, const char *dir,
                    const CheckpointInfo *info, Err *err);

/* Loads a checkpoint directory (D/step-NNNNNNNN) into e: every rank reads the rows it keeps,
 * verifying each piece's CRC; sets the engine's counters and *step to the steps done. No
 * communication. A checkpoint of another model or version, a missing, cut or corrupt rank file
 * or rows no piece holds fail with one line naming the file and tensor; so does a value that is
 * not finite (nan, inf), with its flat index in the tensor. */
int checkpoint_load(Engine *e, const ModelDesc *m, const ModelKinds *kinds, const char *path,
                    long *step, Err *err);

/* The newest complete checkpoint in dir into path ("" when there is none). */
int checkpoint_latest(const char *dir, char *path, size_t n, Err *err);

/* dir/best into path, when there is one ("" when there is none); a dir/best that is not a
 * symbolic link (so not the one checkpoint_save keeps) is refused (ERR_USAGE): a save would
 * have to remove it. */
int checkpoint_best(const char *dir, char *path, size_t n, Err *err);

/* ---------------------------------------------------------------- reading, for any reader */

/* A tensor as meta.json lists it. */
typedef struct CkptTensor {
    char name[96];
    int ndim;
    int64_t shape[MODEL_MAX_NDIM];
    size_t numel, row_elems; /* row_elems: elements per dim-0 row */
} CkptTensor;

/* One saved piece: rows [row_begin, row_begin + rows) of a tensor's kind, `bytes` bytes of fp32
 * at `offset` in rank-RRRRR.bin, with their CRC32. */
typedef struct CkptPiece {
    int tensor; /* index into CkptMeta.tensors */
    StateKind kind;
    int rank;
    size_t row_begin, rows;
    unsigned long long offset, bytes;
    unsigned long crc;
} CkptPiece;

/* A checkpoint's meta.json, believed only once checked (ckpt_meta_read): its CRC32, every field
 * in range, the tensors exactly those of the model its "model" and "config" describe, every
 * tensor's rows held by exactly one piece of each kind, each rank file exactly its pieces. */
typedef struct CkptMeta {
    char path[4096]; /* the checkpoint directory (D/step-NNNNNNNN) */
    int version;
    char model[64];    /* as saved ("toy", "vit-tiny"); "" if not recorded */
    char strategy[32]; /* as saved; "" if not recorded */
    int world;
    long step;
    EngineCounters counters;
    long held_out;    /* samples held out for validation (0: none recorded) */
    int validated;    /* val_loss recorded: */
    double val_loss;  /* the held-out samples' mean loss at this step */
    int has_lr_curve; /* lr_curve recorded (a run whose rate varies records it): */
    LrCurve lr_curve; /* ... the schedule, base rate and length of the run that saved it */
    CkptTensor *tensors;
    int ntensors;
    CkptPiece *pieces; /* in meta.json's order (rank by rank, in each rank's file order) */
    size_t npieces;
    /* the same pieces sorted by (tensor, kind, row_begin): each tensor's kind's rows in order */
    CkptPiece *by_rows;
    /* the model's configuration as saved ("config": the ViT's image, patch, layers, heads,
     * hidden, mlp, classes, channels; the transformer's layers, heads, hidden, mlp, seq, vocab),
     * as text: key config[2i], value config[2i + 1] */
    char **config;
    int nconfig;
    /* [world] each rank file's reader, opened at its first read and kept (NULL: not yet) */
    struct BulkReader **readers;
} CkptMeta;

/* Reads path/meta.json and checks it before believing any of it: its CRC32 first, then its
 * format version, each field's range (world 1 to CHECKPOINT_MAX_WORLD, step 0 to
 * CHECKPOINT_MAX_STEP, Adam's steps at most the step, the loss scale a finite positive float), the
 * model and strategy known (one of kinds' names), the tensors exactly those of the model that
 * "model" and "config" describe (kinds builds it: names, order, shapes), each tensor's rows held by
 * exactly one piece of each kind, each rank's pieces back to back in its file, and each rank file
 * of exactly their size. With expect, the tensors must also be that model's, name for name and
 * shape for shape (another model's checkpoint says so, with both shapes). Failures (ERR_USAGE) are
 * one line naming the file and the field (by its jq path: .step, .tensors[3].shape). On failure
 * *out is empty and safe to ckpt_meta_free. The optional fields: held_out a whole number from 1 to
 * CHECKPOINT_MAX_HELD_OUT, val_loss a finite number at least 0, only beside held_out. */
int ckpt_meta_read(CkptMeta *out, const char *path, const ModelKinds *kinds,
                   const ModelDesc *expect, Err *err);
void ckpt_meta_free(CkptMeta *m);

/* The path of rank's file, path/rank-RRRRR.bin. */
void ckpt_rank_file(const CkptMeta *m, int rank, char *buf, size_t n);

/* Reads piece p's bytes into buf (p->bytes of them) and checks its CRC32 and that every value
 * is finite. A missing or cut file, a CRC mismatch or a nan or inf is one line naming the file,
 * the tensor and the kind (and the value's flat index in the tensor) (ERR_USAGE). */
int ckpt_piece_read(const CkptMeta *m, const CkptPiece *p, void *buf, Err *err);
/* The same checks without keeping the bytes: reads through a small buffer. */
int ckpt_piece_verify(const CkptMeta *m, const CkptPiece *p, Err *err);

#endif
