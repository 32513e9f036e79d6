/* bulk_file: checkpoint files written and read in large aligned O_DIRECT blocks (through the page
 * cache where the filesystem refuses O_DIRECT), every read checked by CRC. */
#include "io/bulk_file.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <zlib.h>

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

/* ---------------------------------------------------------------- reading */

struct BulkReader {
    int fd;
    int direct;           /* fd is O_DIRECT: reads go through block, aligned */
    unsigned char *block; /* BLOCK_BYTES, aligned to BULK_ALIGN */
};

int bulk_reader_open(BulkReader **out, const char *path) {
    *out = NULL;
    BulkReader *r = calloc(1, sizeof *r);
    void *block = NULL;
    if (!r || posix_memalign(&block, BULK_ALIGN, BLOCK_BYTES)) {
        free(r);
        errno = ENOMEM;
        return -1;
    }
    r->block = block;
    r->fd = open(path, O_RDONLY | O_DIRECT | O_CLOEXEC);
    r->direct = r->fd >= 0;
    if (r->fd < 0 && errno == EINVAL) r->fd = open(path, O_RDONLY | O_CLOEXEC);
    if (r->fd < 0) {
        int e = errno;
        free(r->block);
        free(r);
        errno = e;
        return -1;
    }
    *out = r;
    return 0;
}

/* pread until n bytes have come or the file ends; the count read, or -1 on an error. */
static ssize_t read_some(int fd, unsigned char *into, size_t n, off_t at) {
    size_t done = 0;
    while (done < n) {
        ssize_t got = pread(fd, into + done, n - done, at + (off_t)done);
        if (got < 0 && errno == EINTR) continue;
        if (got < 0) return -1;
        if (got == 0) break;
        done += (size_t)got;
    }
    return (ssize_t)done;
}

/* Directly: whole aligned blocks around the range into block, the range's part of each
 * checked and copied out. Through the page cache: the same, unaligned. */
int bulk_read(BulkReader *r, unsigned long long offset, size_t n, void *dst, unsigned long *crc) {
    unsigned char *out = dst;
    unsigned long long end = offset + n, at = offset;
    while (at < end) {
        unsigned long long lo = r->direct ? at / BULK_ALIGN * BULK_ALIGN : at;
        unsigned long long hi = lo + BLOCK_BYTES;
        if (!r->direct && hi > end) hi = end;
        if (r->direct && hi > end) hi = (end + BULK_ALIGN - 1) / BULK_ALIGN * BULK_ALIGN;
        ssize_t got = read_some(r->fd, r->block, (size_t)(hi - lo), (off_t)lo);
        if (got < 0) return -1;
        if ((unsigned long long)got <= at - lo) { /* the file ended before the range did */
            errno = 0;
            return -1;
        }
        unsigned long long stop =
            lo + (unsigned long long)got < end ? lo + (unsigned long long)got : end;
        const unsigned char *part = r->block + (at - lo);
        size_t len = (size_t)(stop - at);
        *crc = crc32(*crc, part, (uInt)len);
        if (out) memcpy(out + (at - offset), part, len);
        at = stop;
    }
    return 0;
}

void bulk_reader_close(BulkReader *r) {
    if (!r) return;
    close(r->fd);
    free(r->block);
    free(r);
}
