/* atomic_file: write-to-temp-then-rename for every writer of a file a person keeps: the file
 * appears whole under its name or not at all, and an existing one is kept until then. */
#ifndef FSDP_ATOMIC_FILE_H
#define FSDP_ATOMIC_FILE_H

#include <stdio.h>

#include "engine/err.h"

/* An output file is written beside its final name and renamed into place only when
 * complete, so an error never leaves a partial file or clobbers an old one. */
typedef struct AtomicFile {
    const char *path;
    char tmp[4096];
    FILE *f;
} AtomicFile;

/* Opens path's temporary sibling for writing (path NULL: nothing to write, f stays NULL). */
int atomic_open(AtomicFile *o, const char *path, Err *err);
/* Closes and renames the temporary file into place; on failure removes it. */
int atomic_commit(AtomicFile *o, Err *err);
/* Drops what was written; the old file, if any, is untouched. */
void atomic_discard(AtomicFile *o);

#endif
