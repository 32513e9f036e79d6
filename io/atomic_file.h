/* atomic_file: write-to-temp-then-rename for every writer of a file a person keeps: the file
 * appears whole under its name or not at all, and an existing one is kept until then. */
#ifndef FSDP_ATOMIC_FILE_H
#define FSDP_ATOMIC_FILE_H

#include <stdio.h>

#include "base/err.h"

/* An output file is written beside its final name and renamed into place only when
 * complete, so an error never leaves a partial file or clobbers an old one. */
typedef struct AtomicFile {
    const char *path;
    char tmp[4096];
    FILE *f;
    /* The file has no name while it is written (O_TMPFILE), so a process killed meanwhile leaves
     * nothing behind; it is linked as tmp only to be renamed. 0 where the file system cannot. */
    int unnamed;
} AtomicFile;

/* Opens path's temporary sibling for writing (path NULL: nothing to write, f stays NULL). */
int atomic_open(AtomicFile *o, const char *path, Err *err);
/* Closes and renames the temporary file into place; on failure removes it. */
int atomic_commit(AtomicFile *o, Err *err);
/* Drops what was written; the old file, if any, is untouched. */
void atomic_discard(AtomicFile *o);

/* The same two steps for a writer that words its own errors: each says which step failed,
 * with errno telling why; on failure no temporary file is left behind. */
typedef enum AtomicStatus {
    ATOMIC_OK = 0,
    ATOMIC_PATH_TOO_LONG, /* the temporary file's name does not fit AtomicFile.tmp */
    ATOMIC_CANNOT_CREATE, /* the temporary file could not be created */
    ATOMIC_CANNOT_WRITE,  /* a write, the sync or the close failed */
    ATOMIC_CANNOT_RENAME, /* the complete file could not be renamed onto path */
    ATOMIC_NOT_REGULAR,   /* path is a device, FIFO, socket or directory: never replaced */
} AtomicStatus;

/* Creates path's temporary sibling, open for writing in o->f (path must not be NULL). What
 * stands at path must be a regular file or nothing, here and again before the rename: a rename
 * onto /dev/null would replace the device (io/output_path.h). */
AtomicStatus atomic_create(AtomicFile *o, const char *path);
/* Closes the temporary file, first syncing it to disk when sync is set, and renames it
 * onto o->path. A write that failed on the way (ferror) fails here too. */
AtomicStatus atomic_finish(AtomicFile *o, int sync);

#endif
