/* tier: where the engine keeps a rank's resting state under `--offload nvme` (ZeRO-Infinity): one
 * file per rank, moved by byte range in the background so the next unit loads while this one
 * computes. The engine reaches it only through TierOps, as it reaches the device and the comm;
 * io/nvme_tier.c implements it, and whoever builds a RankEnv hands it over. */
#ifndef FSDP_TIER_H
#define FSDP_TIER_H

#include <stddef.h>

#include "base/err.h"

/* A transfer whose buffer address, offset and length are all multiples of this can go straight
 * between memory and the disk (O_DIRECT): the engine aligns every unit's offset to it. */
#define TIER_ALIGN 4096

/* One asynchronous read or write. The caller owns it: zero-initialise it ({0}) before its
 * first use, keep it (and its buffer) alive and untouched from the start of a read or write
 * until its wait returns, then it may be used again. The fields are the tier's. */
typedef struct TierRequest {
    struct TierRequest *next; /* the tier's queue */
    void *buf;
    size_t offset, bytes;
    size_t done;    /* bytes moved before it finished or failed */
    int write;      /* 1: buf -> file; 0: file -> buf */
    int state;      /* idle, queued (in flight) or finished (not yet waited) */
    int error;      /* errno of a failed transfer; 0 with done < bytes: the file ended */
    double seconds; /* time the I/O thread spent on it */
} TierRequest;

/* One rank's file: open it for `bytes` under `dir` (the file goes when it is closed); start a
 * write from src or a read into dst of [offset, offset + bytes) and return at once; wait for
 * one; close (every transfer in flight finished first). Errors are one line in err. */
typedef struct TierOps {
    int (*open)(void **tier, const char *dir, int rank, size_t bytes, Err *err);
    int (*write)(void *tier, size_t offset, const void *src, size_t bytes, TierRequest *req,
                 Err *err);
    int (*read)(void *tier, size_t offset, void *dst, size_t bytes, TierRequest *req, Err *err);
    int (*wait)(void *tier, TierRequest *req, Err *err);
    void (*close)(void *tier);
} TierOps;

#endif
