/* bulk_file: checkpoint files moved in large aligned blocks with O_DIRECT. A writer writes one
 * file start to finish; a reader reads byte ranges through a CRC. Gigabytes through the page
 * cache wait on dirty-page throttling and page reclaim, and push out memory training still
 * uses; direct transfers skip all three (bench/RESULTS.md has the figures). Where the
 * filesystem refuses O_DIRECT (tmpfs), the same blocks go through the page cache. */
#ifndef FSDP_BULK_FILE_H
#define FSDP_BULK_FILE_H

#include <stddef.h>

#include "base/err.h"

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

typedef struct BulkReader BulkReader;

/* Opens path for reading; -1 with errno set when it cannot be opened (no Err: the caller
 * names the file in its own words). */
int bulk_reader_open(BulkReader **out, const char *path);
/* Reads bytes [offset, offset + n): folds them into *crc (zlib's crc32) and copies them to dst
 * unless dst is NULL. 0, or -1 when the file ends first or a read fails (errno). */
int bulk_read(BulkReader *r, unsigned long long offset, size_t n, void *dst, unsigned long *crc);
void bulk_reader_close(BulkReader *r);

#endif
