/* checkpoint_internal: what checkpoint.c (writing, loading) and checkpoint_read.c (reading
 * meta.json, checked) share: paths inside a checkpoint, the file read whole, the CRC32. */
#ifndef FSDP_CHECKPOINT_INTERNAL_H
#define FSDP_CHECKPOINT_INTERNAL_H

#include <stddef.h>

/* A file inside a checkpoint directory whose own path fits 4 KiB. */
enum { FILE_MAX = 4096 + 64 };

/* meta.json's last line is this key and the CRC32 of every byte before the line. */
#define META_CRC_KEY "\"crc32\":"

/* dir/name, and dir/rank-RRRRR.ext, into buf; non-zero when cut at n (a directory that long
 * fails to open, which says so). */
int ckpt_file_path(char *buf, size_t n, const char *dir, const char *name);
int ckpt_rank_path(char *buf, size_t n, const char *dir, int rank, const char *ext);
/* The whole file, NUL-terminated, its length in *len; NULL when it cannot be read. */
char *ckpt_slurp(const char *path, size_t *len);
/* zlib's CRC32 of bytes of any length. */
unsigned long ckpt_crc(const void *data, size_t bytes);

#endif
