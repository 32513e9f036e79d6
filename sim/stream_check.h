/* stream_check: a happens-before checker for one rank's streams, as ThreadSanitizer is for
 * threads. A GPU runs compute, comm and copy as separate streams ordered only by events, so an
 * access on one stream to bytes another stream touched is correct only if an event recorded
 * after that access was waited on before this one. Each stream (and the host, which queues the
 * work) carries a vector clock; event_record snapshots its stream's clock and stream_wait
 * joins it; every access to device memory is checked against the earlier accesses to the same
 * bytes from other streams. The first hazard is kept as one line naming rank, unit, buffer,
 * both streams and both operations. Pure bookkeeping: it never touches the bytes. */
#ifndef FSDP_STREAM_CHECK_H
#define FSDP_STREAM_CHECK_H

#include <stddef.h>
#include <stdint.h>

#include "engine/device.h"

/* The streams and the host thread that queues work on them: an access by the host (a host
 * copy of a host-addressable block, a free) is ordered before everything it queues later. */
enum { SC_HOST = STREAM_COUNT, SC_CLOCKS = STREAM_COUNT + 1 };

typedef struct StreamClock {
    uint64_t c[SC_CLOCKS];
} StreamClock;

typedef enum { ACCESS_READ = 0, ACCESS_WRITE, ACCESS_FREE, ACCESS_REUSE } AccessKind;

/* What touches the bytes: an operation ("all_gather", "pack", "adam") of a unit (-1: none). */
typedef struct StreamOp {
    const char *name;
    int unit;
} StreamOp;

/* One earlier access still relevant to a range of a block. */
typedef struct AccessRecord {
    size_t lo, hi; /* byte range within the block */
    int stream;    /* StreamId or SC_HOST */
    uint64_t epoch;
    AccessKind kind;
    StreamOp op;
} AccessRecord;

/* A block of device memory the checker follows, from its allocation to its reuse. */
typedef struct ShadowBlock {
    uintptr_t base;
    size_t bytes;
    MemCategory cat;
    const char *label; /* "send buffer", ...; NULL: the category's label */
    int freed;         /* freed and waiting in a cache: its next owner must wait for the free */
    int reused;        /* handed out again: the free's record stays until an access passes it */
    AccessRecord *rec;
    int nrec, caprec;
} ShadowBlock;

typedef struct StreamCheck {
    int rank;
    StreamClock clock[SC_CLOCKS];
    ShadowBlock *blocks; /* sorted by base */
    int nblocks, capblocks;
    /* names units for the message; may be NULL ("unit 3") */
    const char *(*unit_name)(void *user, int unit);
    void *user;
    size_t across;  /* accesses checked against another stream's earlier access */
    size_t hazards; /* accesses that were not ordered after one */
    char first[512];
    int out_of_memory; /* the shadow could not grow: the check is incomplete (an error) */
} StreamCheck;

void stream_check_init(StreamCheck *sc, int rank);
void stream_check_free(StreamCheck *sc);

/* Events: record snapshots stream s's clock into ev and moves s on; wait joins ev into s. */
void stream_check_record(StreamCheck *sc, int s, StreamClock *ev);
void stream_check_wait(StreamCheck *sc, int s, const StreamClock *ev);
/* The same, with the clock kept in a DevEvent's order (the device's events carry it). */
void stream_check_record_event(StreamCheck *sc, int s, DevEvent *ev);
void stream_check_wait_event(StreamCheck *sc, int s, const DevEvent *ev);
/* The host waits for everything queued on s so far (cudaStreamSynchronize). */
void stream_check_sync(StreamCheck *sc, int s);

/* A block handed out: new bytes, or a cached block an earlier owner freed. The free stays on
 * record, so the block's first access by a stream not ordered after the free is a hazard (reuse
 * after free): the check falls on whichever stream touches the block first, as on a GPU. */
void stream_check_alloc(StreamCheck *sc, const void *p, size_t bytes, MemCategory cat,
                        const char *label);
/* The block at p is freed on stream s: checked as a write against every earlier access (a
 * block freed while another stream may still read it), then kept for its reuse. */
void stream_check_free_block(StreamCheck *sc, int s, const void *p, StreamOp op);
/* The block leaves the checker's sight (returned to the system). */
void stream_check_forget(StreamCheck *sc, const void *p);

/* An access by stream s to [p, p + bytes). Bytes outside every block (host memory, the
 * data set) are not followed. Returns 1 when it is a hazard (the first one's line is kept). */
int stream_check_access(StreamCheck *sc, int s, const void *p, size_t bytes, AccessKind kind,
                        StreamOp op);
/* One line for a run's end: "stream check: N accesses across streams, H hazards". */
void stream_check_summary(size_t across, size_t hazards, char *buf, size_t n);

/* "compute", "comm", "copy", "host" */
const char *stream_check_stream_name(int s);

#endif
