/* bulk_file: writes one file start to finish in large aligned blocks with O_DIRECT, for
 * checkpoints. Gigabytes written through the page cache wait on dirty-page throttling and push
 * out memory training still uses; direct writes skip both. Where the filesystem refuses
 * O_DIRECT (tmpfs), the same blocks go through the page cache. */
#ifndef FSDP_BULK_FILE_H
#define FSDP_BULK_FILE_H

#include <stddef.h>

#include "err.h"

typedef struct BulkFile BulkFile;

/* Creates path (truncating what is there). Errors are one line naming the path. */
int bulk_open(BulkFile **out, const char *path, Err *err);
/* Appends n bytes. */
int bulk_write(BulkFile *f, const void *data, size_t n, Err *err);
/* Bytes appended so far: the offset the next bulk_write starts at. */
unsigned long long bulk_size(const BulkFile *f);
/* Writes what is left, cuts the file to its exact size, syncs it and closes it. */
int bulk_close(BulkFile *f, Err *err);
/* Closes without finishing (after an error); the file stays as far as it got. */
void bulk_abandon(BulkFile *f);

#endif
