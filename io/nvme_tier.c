/* nvme_tier: the file under `--offload nvme`: one rank's resting state in one file reserved whole
 * at open, moved by byte range through one I/O thread so loads overlap compute. */
#include "io/nvme_tier.h"
#include "base/clock.h"

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <time.h>
#include <unistd.h>

/* The I/O thread's own aligned buffer, for requests that cannot go straight to the disk. */
enum { BOUNCE_BYTES = 4 << 20 };
enum { REQ_IDLE = 0, REQ_QUEUED = 1, REQ_FINISHED = 2 };

struct NvmeTier {
    int fd;                        /* through the page cache */
    int direct_fd;                 /* the same file with O_DIRECT, or -1 */
    int direct_write, direct_read; /* which directions use direct_fd */
    size_t size;                   /* bytes the caller asked for: requests must lie inside */
    char path[4096 + 64];
    unsigned char *bounce; /* BOUNCE_BYTES, NVME_TIER_ALIGN-aligned; the I/O thread's */

    pthread_t thread;
    pthread_mutex_t lock;
    pthread_cond_t work; /* a request was queued, or the tier is closing */
    pthread_cond_t done; /* a request finished */
    TierRequest *head, *tail;
    int closing;
    NvmeStats stats;
};

/* ---------------------------------------------------------------- helpers */

static size_t align_down(size_t x) {
    return x & ~(size_t)(NVME_TIER_ALIGN - 1);
}

static size_t align_up(size_t x) {
    return align_down(x + NVME_TIER_ALIGN - 1);
}

static int is_aligned(uintptr_t x) {
    return (x & (NVME_TIER_ALIGN - 1)) == 0;
}

/* "1.2 GiB" or "300.0 MiB": sizes as the error messages give them. */
static void human_bytes(char *buf, size_t n, double bytes) {
    if (bytes >= (double)(1u << 30))
        snprintf(buf, n, "%.1f GiB", bytes / (double)(1u << 30));
    else
        snprintf(buf, n, "%.1f MiB", bytes / (double)(1u << 20));
}

/* Moves `bytes` between buf and the file at `offset`, in as many calls as the kernel needs
 * (a call may move less than asked, or be interrupted). Returns 0 or an errno; *done is what
 * was moved. A read that meets the end of the file stops early with 0: *done < bytes. */
static int transfer(int fd, int write, unsigned char *buf, size_t bytes, size_t offset,
                    size_t *done) {
    *done = 0;
    while (*done < bytes) {
        ssize_t n = write ? pwrite(fd, buf + *done, bytes - *done, (off_t)(offset + *done))
                          : pread(fd, buf + *done, bytes - *done, (off_t)(offset + *done));
        if (n < 0 && errno == EINTR) continue;
        if (n < 0) return errno;
        if (n == 0) return write ? EIO : 0; /* a write that moves nothing would spin */
        *done += (size_t)n;
    }
    return 0;
}

/* A request whose buffer, offset or length is not aligned, on an O_DIRECT file: moved through
 * the bounce buffer in aligned pieces. A write whose piece starts or ends inside a block first
 * reads that block, so the bytes around the request keep their values. */
static int transfer_bounced(NvmeTier *t, TierRequest *r) {
    unsigned char *user = r->buf;
    const size_t end = r->offset + r->bytes;
    r->done = 0;
    while (r->done < r->bytes) {
        size_t at = r->offset + r->done;
        size_t lo = align_down(at), hi = align_up(end);
        if (hi - lo > BOUNCE_BYTES) hi = lo + BOUNCE_BYTES;
        size_t take = (end < hi ? end : hi) - at, moved;
        int rc;
        if (r->write) {
            if (at > lo) {
                rc = transfer(t->direct_fd, 0, t->bounce, NVME_TIER_ALIGN, lo, &moved);
                if (rc || moved < NVME_TIER_ALIGN) return rc;
            }
            /* the last block, unless it is the first one, read just above */
            if (at + take < hi && !(at > lo && hi - lo == NVME_TIER_ALIGN)) {
                size_t last = hi - NVME_TIER_ALIGN;
                rc = transfer(t->direct_fd, 0, t->bounce + (last - lo), NVME_TIER_ALIGN, last,
                              &moved);
                if (rc || moved < NVME_TIER_ALIGN) return rc;
            }
            memcpy(t->bounce + (at - lo), user + r->done, take);
            rc = transfer(t->direct_fd, 1, t->bounce, hi - lo, lo, &moved);
            if (rc) return rc;
        } else {
            rc = transfer(t->direct_fd, 0, t->bounce, hi - lo, lo, &moved);
            if (rc || moved < hi - lo) {
                /* report the bytes of the request that did arrive */
                size_t got = moved > at - lo ? moved - (at - lo) : 0;
                if (got > take) got = take;
                memcpy(user + r->done, t->bounce + (at - lo), got);
                r->done += got;
                return rc;
            }
            memcpy(user + r->done, t->bounce + (at - lo), take);
        }
        r->done += take;
    }
    return 0;
}

/* One request, on the I/O thread, without the lock. */
static void run_request(NvmeTier *t, TierRequest *r) {
    double t0 = clock_seconds();
    int direct = r->write ? t->direct_write : t->direct_read;
    int aligned = is_aligned((uintptr_t)r->buf) && is_aligned(r->offset) && is_aligned(r->bytes);
    if (direct && aligned) {
        r->error = transfer(t->direct_fd, r->write, r->buf, r->bytes, r->offset, &r->done);
    } else if (direct) {
        r->error = transfer_bounced(t, r);
    } else {
        r->error = transfer(t->fd, r->write, r->buf, r->bytes, r->offset, &r->done);
        /* Through the page cache the bytes are offloaded only once they are on the disk and
         * out of memory. fdatasync (not sync_file_range) so a failed writeback is reported;
         * a read's pages are dropped too, or reading the tier back would fill the cache. */
        if (!r->error && r->done == r->bytes) {
            if (r->write && fdatasync(t->fd)) r->error = errno;
            if (!r->error)
                posix_fadvise(t->fd, (off_t)r->offset, (off_t)r->bytes, POSIX_FADV_DONTNEED);
        }
    }
    r->seconds = clock_seconds() - t0;
}

static void *io_thread(void *arg) {
    NvmeTier *t = arg;
    pthread_mutex_lock(&t->lock);
    for (;;) {
        while (!t->head && !t->closing) pthread_cond_wait(&t->work, &t->lock);
        if (!t->head) break; /* closing, and everything queued is done */
        TierRequest *r = t->head;
        pthread_mutex_unlock(&t->lock);
        run_request(t, r);
        pthread_mutex_lock(&t->lock);
        t->head = r->next;
        if (!t->head) t->tail = NULL;
        r->next = NULL;
        r->state = REQ_FINISHED;
        if (!r->error && r->done == r->bytes) {
            if (r->write) {
                t->stats.bytes_written += r->bytes;
                t->stats.write_seconds += r->seconds;
            } else {
                t->stats.bytes_read += r->bytes;
                t->stats.read_seconds += r->seconds;
            }
        }
        pthread_cond_broadcast(&t->done);
    }
    pthread_mutex_unlock(&t->lock);
    return NULL;
}

/* ---------------------------------------------------------------- open and close */

/* "--nvme-dir D: no room for X of offloaded state (Y free)", Y as statvfs says now: after a
 * failed reservation is gone, which on some filesystems had taken space until then. */
static int no_room(const char *dir, size_t reserve, Err *err) {
    struct statvfs vfs;
    char want[32], have[32] = "?";
    human_bytes(want, sizeof want, (double)reserve);
    if (statvfs(dir, &vfs) == 0)
        human_bytes(have, sizeof have, (double)vfs.f_bavail * (double)vfs.f_frsize);
    return err_set(err, ERR_IO, "--nvme-dir %s: no room for %s of offloaded state (%s free)", dir,
                   want, have);
}

/* The file, created new and reserved whole, and its descriptors; or why not, leaving no file.
 * The order makes the first complaint the most basic one: no such directory, then not
 * writable, then no room. */
static int create_file(NvmeTier *t, const char *dir, size_t reserve, NvmeIoMode mode, Err *err) {
    struct stat st;
    if (stat(dir, &st))
        return err_set(err, ERR_IO, "--nvme-dir %s: not usable: %s", dir, strerror(errno));
    if (!S_ISDIR(st.st_mode)) return err_set(err, ERR_IO, "--nvme-dir %s: not a directory", dir);
    t->direct_fd = -1;
    t->fd = open(t->path, O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
    if (t->fd < 0) {
        int e = errno;
        if (e == EACCES || e == EPERM || e == EROFS)
            return err_set(err, ERR_IO, "--nvme-dir %s: not writable: %s", dir, strerror(e));
        if (e == EEXIST)
            return err_set(err, ERR_IO,
                           "--nvme-dir %s: %s is already there (left by another run? remove "
                           "it); it was not touched",
                           dir, t->path);
        return err_set(err, ERR_IO, "--nvme-dir %s: cannot create %s: %s", dir, t->path,
                       strerror(e));
    }
    /* More than the free space is refused before reserving any of it: posix_fallocate on ext4
     * fills the disk as far as it goes before it fails, which would starve everyone else for
     * that moment. f_bavail is what an unprivileged process may use (root's reserve is not
     * ours to fill). */
    struct statvfs vfs;
    int full =
        fstatvfs(t->fd, &vfs) == 0 && (double)reserve > (double)vfs.f_bavail * (double)vfs.f_frsize;
    /* The O_DIRECT descriptor is opened once the file exists: open(O_CREAT | O_DIRECT) on a
     * filesystem without direct I/O creates the file and then fails. Without it, both
     * directions go through the page cache. */
    if (!full && mode != NVME_IO_BUFFERED)
        t->direct_fd = open(t->path, O_RDWR | O_DIRECT | O_CLOEXEC);
    t->direct_write = t->direct_fd >= 0;
    t->direct_read = t->direct_fd >= 0 && mode == NVME_IO_DIRECT;
    int e = full || !reserve ? 0 : posix_fallocate(t->fd, 0, (off_t)reserve); /* an errno */
    full = full || e == ENOSPC || e == EDQUOT || e == EFBIG;
    /* Both descriptors are open: the name goes now, so that the file (gigabytes at
     * vit-workshop's size) cannot outlive this process however it ends, SIGKILL included.
     * The space stays reserved until the last descriptor closes. */
    unlink(t->path);
    if (!full && !e) return 0;
    close(t->fd);
    if (t->direct_fd >= 0) close(t->direct_fd);
    if (full) return no_room(dir, reserve, err);
    char want[32];
    human_bytes(want, sizeof want, (double)reserve);
    return err_set(err, ERR_IO, "--nvme-dir %s: cannot reserve %s in %s: %s", dir, want, t->path,
                   strerror(e));
}

int nvme_tier_open_mode(NvmeTier **out, const char *dir, int rank, size_t bytes, NvmeIoMode mode,
                        Err *err) {
    *out = NULL;
    if (bytes > (size_t)INT64_MAX - NVME_TIER_ALIGN)
        return err_set(err, ERR_USAGE, "--nvme-dir %s: %zu bytes is too large a file", dir, bytes);
    size_t reserve = align_up(bytes);
    NvmeTier *t = calloc(1, sizeof *t);
    if (!t) return err_set(err, ERR_NOMEM, "out of memory opening the NVMe tier");
    t->size = bytes;
    if (snprintf(t->path, sizeof t->path, "%s/fsdp-nvme-%ld-rank%d.bin", dir, (long)getpid(),
                 rank) >= (int)sizeof t->path) {
        free(t);
        return err_set(err, ERR_USAGE, "--nvme-dir %s: the path is too long", dir);
    }
    int rc = create_file(t, dir, reserve, mode, err);
    if (rc) {
        free(t);
        return rc;
    }
    /* default attributes: glibc's init of these cannot fail */
    pthread_mutex_init(&t->lock, NULL);
    pthread_cond_init(&t->work, NULL);
    pthread_cond_init(&t->done, NULL);
    if (posix_memalign((void **)&t->bounce, NVME_TIER_ALIGN, BOUNCE_BYTES)) {
        t->bounce = NULL;
        rc = err_set(err, ERR_NOMEM, "out of memory opening the NVMe tier");
    } else if ((rc = pthread_create(&t->thread, NULL, io_thread, t))) {
        rc =
            err_set(err, ERR_INTERNAL, "cannot start the NVMe tier's I/O thread: %s", strerror(rc));
    }
    if (rc) {
        pthread_cond_destroy(&t->done);
        pthread_cond_destroy(&t->work);
        pthread_mutex_destroy(&t->lock);
        free(t->bounce);
        close(t->fd);
        if (t->direct_fd >= 0) close(t->direct_fd);
        free(t);
        return rc;
    }
    t->stats.direct_writes = t->direct_write;
    t->stats.direct_reads = t->direct_read;
    *out = t;
    return 0;
}

int nvme_tier_open(NvmeTier **out, const char *dir, int rank, size_t bytes, Err *err) {
    return nvme_tier_open_mode(out, dir, rank, bytes, NVME_IO_AUTO, err);
}

void nvme_tier_close(NvmeTier *t) {
    if (!t) return;
    pthread_mutex_lock(&t->lock);
    t->closing = 1;
    pthread_cond_signal(&t->work);
    pthread_mutex_unlock(&t->lock);
    pthread_join(t->thread, NULL); /* it leaves only once the queue is empty */
    pthread_cond_destroy(&t->done);
    pthread_cond_destroy(&t->work);
    pthread_mutex_destroy(&t->lock);
    close(t->fd);
    if (t->direct_fd >= 0) close(t->direct_fd);
    free(t->bounce);
    free(t);
}

/* ---------------------------------------------------------------- requests */

static int start(NvmeTier *t, int write, size_t offset, void *buf, size_t bytes, TierRequest *req,
                 Err *err) {
    if (offset > t->size || bytes > t->size - offset)
        return err_set(err, ERR_INTERNAL, "NVMe tier: bytes [%zu, %zu) are outside %s's %zu bytes",
                       offset, offset + bytes, t->path, t->size);
    pthread_mutex_lock(&t->lock);
    if (req->state == REQ_QUEUED) {
        pthread_mutex_unlock(&t->lock);
        return err_set(err, ERR_INTERNAL, "NVMe tier: a request was started while in flight");
    }
    *req = (TierRequest){
        .buf = buf, .offset = offset, .bytes = bytes, .write = write, .state = REQ_QUEUED};
    if (t->tail)
        t->tail->next = req;
    else
        t->head = req;
    t->tail = req;
    pthread_cond_signal(&t->work);
    pthread_mutex_unlock(&t->lock);
    return 0;
}

int nvme_tier_write(NvmeTier *t, size_t offset, const void *src, size_t bytes, TierRequest *req,
                    Err *err) {
    /* the I/O thread only reads src; the request's buf is shared by both directions */
    return start(t, 1, offset, (void *)(uintptr_t)src, bytes, req, err);
}

int nvme_tier_read(NvmeTier *t, size_t offset, void *dst, size_t bytes, TierRequest *req,
                   Err *err) {
    return start(t, 0, offset, dst, bytes, req, err);
}

int nvme_tier_wait(NvmeTier *t, TierRequest *req, Err *err) {
    pthread_mutex_lock(&t->lock);
    int state = req->state;
    while (req->state == REQ_QUEUED) pthread_cond_wait(&t->done, &t->lock);
    req->state = REQ_IDLE;
    pthread_mutex_unlock(&t->lock);
    if (state == REQ_IDLE)
        return err_set(err, ERR_INTERNAL, "NVMe tier: waited on a request never started");
    const char *what = req->write ? "writing" : "reading";
    if (req->error)
        return err_set(err, ERR_IO, "NVMe tier: %s %zu bytes at offset %zu of %s failed: %s", what,
                       req->bytes, req->offset, t->path, strerror(req->error));
    if (req->done < req->bytes)
        return err_set(err, ERR_IO,
                       "NVMe tier: %s %zu bytes at offset %zu of %s stopped after %zu: the file "
                       "is shorter than it was made (changed by someone else?)",
                       what, req->bytes, req->offset, t->path, req->done);
    return 0;
}

NvmeStats nvme_tier_stats(const NvmeTier *t) {
    /* the lock is not part of the tier's value: taking it does not change what stats says */
    pthread_mutex_t *lock = (pthread_mutex_t *)&t->lock;
    pthread_mutex_lock(lock);
    NvmeStats s = t->stats;
    pthread_mutex_unlock(lock);
    return s;
}

const char *nvme_tier_path(const NvmeTier *t) {
    return t->path;
}

/* ---------------------------------------------------------------- as the engine's TierOps */

static int ops_open(void **tier, const char *dir, int rank, size_t bytes, Err *err) {
    NvmeTier *t = NULL;
    int rc = nvme_tier_open(&t, dir, rank, bytes, err);
    *tier = t;
    return rc;
}

static int ops_write(void *tier, size_t offset, const void *src, size_t bytes, TierRequest *req,
                     Err *err) {
    return nvme_tier_write(tier, offset, src, bytes, req, err);
}

static int ops_read(void *tier, size_t offset, void *dst, size_t bytes, TierRequest *req,
                    Err *err) {
    return nvme_tier_read(tier, offset, dst, bytes, req, err);
}

static int ops_wait(void *tier, TierRequest *req, Err *err) {
    return nvme_tier_wait(tier, req, err);
}

static void ops_close(void *tier) {
    nvme_tier_close(tier);
}

const TierOps nvme_tier_ops = {ops_open, ops_write, ops_read, ops_wait, ops_close};
