/* dir_lock: one job at a time in a folder a job writes (a run directory, a checkpoint folder):
 * an advisory lock on the folder itself, held for the job's life and let go when its process
 * ends, however it ends; a second job is told which pid holds it. Nothing is written into the
 * folder. */
#ifndef FSDP_DIR_LOCK_H
#define FSDP_DIR_LOCK_H

#include "base/err.h"

/* Zeroed: not held. */
typedef struct DirLock {
    int held, fd;
} DirLock;

/* Takes the lock of folder `dir` (which must exist), named in messages by `flag`
 * ("--checkpoint-dir"). Held by another job: one line naming the folder and the holder's pid,
 * ERR_USAGE. A folder is locked once per process (flock's locks belong to the open file). */
int dir_lock(DirLock *l, const char *flag, const char *dir, Err *err);
void dir_unlock(DirLock *l);

#endif
