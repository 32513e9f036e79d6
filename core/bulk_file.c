#include "bulk_file.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* O_DIRECT needs the buffer, the offset and the length aligned to the device's block; 4 KiB
 * covers the disks and filesystems there are. 16 MiB blocks keep each write long enough that
 * the disk, not the system call, sets the pace. */
enum { BULK_ALIGN = 4096, BLOCK_BYTES = 16 << 20 };

struct BulkFile {
    int fd;               /* through the page cache: truncating and syncing, and the fallback */
    int direct_fd;        /* the same file opened O_DIRECT, or -1 */
    unsigned char *block; /* BLOCK_BYTES, aligned to BULK_ALIGN */
    size_t filled;        /* bytes waiting in block */
    unsigned long long flushed; /* bytes written to the file */
    char path[4096 + 64];
};

static int write_all(int fd, const unsigned char *p, size_t n, off_t at) {
    while (n > 0) {
        ssize_t put = pwrite(fd, p, n, at);
        if (put < 0 && errno == EINTR) continue;
        if (put <= 0) return -1;
        p += put, n -= (size_t)put, at += put;
    }
    return 0;
}

/* Writes the block's first n bytes (n aligned, or the file falls back to the page cache). */
static int flush_block(BulkFile *f, size_t n, Err *err) {
    int fd = f->direct_fd >= 0 && n % BULK_ALIGN == 0 ? f->direct_fd : f->fd;
    if (write_all(fd, f->block, n, (off_t)f->flushed))
        return err_set(err, ERR_IO, "writing %s failed: %s", f->path, strerror(errno));
    f->flushed += n;
    f->filled = 0;
    return 0;
}

int bulk_open(BulkFile **out, const char *path, Err *err) {
    *out = NULL;
    BulkFile *f = calloc(1, sizeof *f);
    void *block = NULL;
    if (!f || posix_memalign(&block, BULK_ALIGN, BLOCK_BYTES)) {
        free(f);
        return err_set(err, ERR_NOMEM, "out of memory writing %s", path);
    }
    f->block = block;
    snprintf(f->path, sizeof f->path, "%s", path);
    f->fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0666);
    if (f->fd < 0) {
        int e = errno;
        free(f->block);
        free(f);
        return err_set(err, ERR_IO, "cannot write %s: %s", path, strerror(e));
    }
    /* opened once the file exists: open(O_CREAT | O_DIRECT) where direct I/O is refused
     * would create the file and then fail */
    f->direct_fd = open(path, O_WRONLY | O_DIRECT | O_CLOEXEC);
    *out = f;
    return 0;
}

int bulk_write(BulkFile *f, const void *data, size_t n, Err *err) {
    const unsigned char *p = data;
    while (n > 0) {
        size_t take = BLOCK_BYTES - f->filled < n ? BLOCK_BYTES - f->filled : n;
        memcpy(f->block + f->filled, p, take);
        f->filled += take, p += take, n -= take;
        if (f->filled == BLOCK_BYTES && flush_block(f, BLOCK_BYTES, err)) return ERR_IO;
    }
    return 0;
}

unsigned long long bulk_size(const BulkFile *f) {
    return f->flushed + f->filled;
}

static void close_fds(BulkFile *f) {
    if (f->direct_fd >= 0) close(f->direct_fd);
    free(f->block);
}

int bulk_close(BulkFile *f, Err *err) {
    unsigned long long size = bulk_size(f);
    /* the tail goes out padded to a whole block, then the file is cut back to its size */
    size_t padded = (f->filled + BULK_ALIGN - 1) / BULK_ALIGN * BULK_ALIGN;
    memset(f->block + f->filled, 0, padded - f->filled);
    int rc = padded ? flush_block(f, padded, err) : 0;
    if (!rc && ftruncate(f->fd, (off_t)size) != 0)
        rc = err_set(err, ERR_IO, "writing %s failed: %s", f->path, strerror(errno));
    if (!rc && fsync(f->fd) != 0)
        rc = err_set(err, ERR_IO, "writing %s failed: %s", f->path, strerror(errno));
    close_fds(f);
    if (close(f->fd) != 0 && !rc)
        rc = err_set(err, ERR_IO, "writing %s failed: %s", f->path, strerror(errno));
    free(f);
    return rc;
}

void bulk_abandon(BulkFile *f) {
    if (!f) return;
    close_fds(f);
    close(f->fd);
    free(f);
}
