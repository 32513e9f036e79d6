/* nvme_tier: the storage under ZeRO-Infinity's `--offload nvme`. One rank's resting state lives
 * in one file under --nvme-dir, reserved whole when the tier opens, and moves by byte range
 * through one I/O thread so the next unit loads while this one computes. Touches only that
 * file (created new, and its name removed as soon as it is open, so it goes with the process
 * however that ends), its own thread and its own buffers. The engine's TierOps (engine/tier.h),
 * as nvme_tier_ops. */
#ifndef FSDP_NVME_TIER_H
#define FSDP_NVME_TIER_H

#include <stddef.h>

#include "base/err.h"
#include "engine/tier.h"

/* An O_DIRECT request (by default, every write) whose buffer address, offset and length are
 * all multiples of this goes straight between the caller's memory and the disk; any other is
 * copied through the tier's own aligned buffer, which costs a copy and, for a write with a
 * ragged edge, a read of the edge's 4 KiB block. Give each unit an aligned offset and an
 * aligned buffer. */
#define NVME_TIER_ALIGN TIER_ALIGN

typedef struct NvmeTier NvmeTier;

/* Which way the bytes go. DIRECT: O_DIRECT both ways, so offloaded bytes take no page cache.
 * BUFFERED: through the page cache both ways, each write synced (fdatasync) and the pages of
 * every request dropped (POSIX_FADV_DONTNEED) once done, so they do not stay in memory
 * either. AUTO, the default: O_DIRECT writes and buffered reads, the fastest pair measured
 * (bench/RESULTS.md, "NVMe tier"). Where the filesystem refuses O_DIRECT, every mode is
 * BUFFERED. */
typedef enum NvmeIoMode { NVME_IO_AUTO, NVME_IO_DIRECT, NVME_IO_BUFFERED } NvmeIoMode;

/* Creates DIR/fsdp-nvme-<pid>-rank<R>.bin, new (a file that is there already is left alone and
 * is an error), sized `bytes` (rounded up to NVME_TIER_ALIGN) and reserved up front with
 * posix_fallocate, so a full disk fails here and not in the middle of a step; a size over the
 * directory's free space is refused before any of it is reserved. Starts the I/O thread. Every
 * error is one line naming --nvme-dir, the directory and the reason, e.g.
 * "--nvme-dir /x: not writable: Permission denied" or "--nvme-dir /x: no room for 1.2 GiB of
 * offloaded state (0.3 GiB free)", and leaves no file behind.
 * The caller must call nvme_tier_close on every path out, error paths included: that is what
 * removes the file (the engine's teardown does it). A process killed outright leaves it. */
int nvme_tier_open(NvmeTier **out, const char *dir, int rank, size_t bytes, Err *err);
int nvme_tier_open_mode(NvmeTier **out, const char *dir, int rank, size_t bytes, NvmeIoMode mode,
                        Err *err);

/* Start moving [offset, offset + bytes) of the file from src / into dst, and return at once:
 * the I/O thread does requests one at a time in the order they were started, so a read
 * started after a write to the same bytes sees that write. The range must lie inside the
 * size given to open, and req must not be in flight; either mistake fails here (ERR_INTERNAL)
 * and starts nothing. */
int nvme_tier_write(NvmeTier *t, size_t offset, const void *src, size_t bytes, TierRequest *req,
                    Err *err);
int nvme_tier_read(NvmeTier *t, size_t offset, void *dst, size_t bytes, TierRequest *req, Err *err);

/* Blocks until req is done. An I/O error or a short transfer is ERR_IO with one line naming
 * the file, the offset and the reason. Waiting on a request never started is ERR_INTERNAL. */
int nvme_tier_wait(NvmeTier *t, TierRequest *req, Err *err);

/* Finishes every request in flight, stops the thread, closes and removes the file, and frees
 * the tier. Requests not yet waited on must not be waited on afterwards. Safe on NULL. */
void nvme_tier_close(NvmeTier *t);

/* What the tier has moved so far (finished requests, successful bytes only) and the seconds
 * its I/O thread spent moving them, for reports and the benchmark. */
typedef struct NvmeStats {
    size_t bytes_read, bytes_written;
    double read_seconds, write_seconds;
    int direct_writes, direct_reads; /* 1 where that direction uses O_DIRECT */
} NvmeStats;
NvmeStats nvme_tier_stats(const NvmeTier *t);

/* The tier as the engine's TierOps (RankEnv.tier), over nvme_tier_open and the calls above. */
extern const TierOps nvme_tier_ops;

/* The path the file was created at (its name is gone once it is open), for messages. */
const char *nvme_tier_path(const NvmeTier *t);

#endif
