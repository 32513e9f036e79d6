/* comm: the collectives the engine needs, NCCL-shaped (equal counts per rank, every rank
 * issues the same collectives in the same order). The simulator (sim/comm_sim.c) runs them
 * over shared buffers between rank threads; runtime/comm_nccl.c runs them on NCCL.
 * Each has a start/wait pair so communication can overlap compute. */
#ifndef FSDP_COMM_H
#define FSDP_COMM_H

#include <stddef.h>

#include "base/err.h"
#include "engine/device.h"
#include "engine/trace.h"
#include "kernels/dtype.h"

typedef enum {
    COLL_ALL_GATHER = 0,
    COLL_REDUCE_SCATTER,
    COLL_ALL_REDUCE,
    COLL_BROADCAST,
    COLL_BARRIER,
    COLL_KIND_COUNT
} CollKind;

typedef enum { REDUCE_SUM = 0, REDUCE_AVG, REDUCE_MAX } ReduceOp;

const char *coll_kind_name(CollKind k); /* "all_gather", ... */

/* One collective in flight. Fill the first block, pass to start, then to wait.
 *   all_gather:     send has count elems, recv has size*count (rank r's block at r*count)
 *   reduce_scatter: send has size*count, recv has count (this rank's block, reduced)
 *   all_reduce:     send and recv have count (may alias)
 *   broadcast:      recv has count; the root's recv is the source
 * The simulator's reductions sum in rank order in fp32 and round once to dtype, so they are
 * deterministic. NCCL's (runtime/comm_nccl.c) do not: a ring adds in its own order and a bf16
 * reduction rounds to bf16 at every hop, up to size - 1 roundings of 2^-8 relative each.
 * send must stay valid and unchanged until wait returns. */
typedef struct CommRequest {
    CollKind kind;
    const void *send;
    void *recv;
    size_t count;
    DType dtype;
    ReduceOp op;
    int root;
    int unit;        /* FSDP unit this moves, for the trace; -1 if none */
    int trace_flags; /* TraceEvent.flags of its event (EVENT_PREFETCH) */
    /* filled by the backend */
    long seq;                    /* position in this communicator's issue order */
    double start_time, end_time; /* modelled (sim) or measured (cuda) */
    DevEvent done;               /* completion on the comm stream: compute can stream_wait on it */
    void *backend;               /* backend-private */
} CommRequest;

typedef struct Comm Comm;

typedef struct CommOps {
    int (*start)(Comm *c, CommRequest *req, Err *err);
    int (*wait)(Comm *c, CommRequest *req, Err *err);
} CommOps;

struct Comm {
    const CommOps *ops;
    int rank; /* rank within this communicator */
    int size;
    int world_rank;
    void *impl;
    /* The device whose streams order the blocking forms below (NULL: none to order): the comm
     * stream waits for what compute queued before the collective, compute for its result. */
    Device *dev;
};

/* Blocking forms: start then wait, ordered on c->dev's streams as a GPU needs them: the
 * collective reads its input only after compute's work queued so far, and compute's next work
 * sees its output. */
int comm_all_gather(Comm *c, const void *send, void *recv, size_t count, DType t, int unit,
                    Err *err);
int comm_reduce_scatter(Comm *c, const void *send, void *recv, size_t count, DType t, ReduceOp op,
                        int unit, Err *err);
int comm_all_reduce(Comm *c, const void *send, void *recv, size_t count, DType t, ReduceOp op,
                    int unit, Err *err);
int comm_broadcast(Comm *c, void *buf, size_t count, DType t, int root, int unit, Err *err);
int comm_barrier(Comm *c, Err *err);
/* Every rank's `words` 4-byte words from host memory `mine` into host memory out[size * words]
 * on every rank, through a buffer on d (a GPU's collectives need device memory). An all-gather
 * copies and never adds, so the words may hold anything: counts, records, events. */
int comm_all_gather_host(Comm *c, Device *d, const void *mine, size_t words, void *out, Err *err);

/* Elements of a rank's input and output for a request (a broadcast's input is the root's
 * alone; a barrier moves nothing). */
size_t comm_input_count(const Comm *c, const CommRequest *r);
size_t comm_output_count(const Comm *c, const CommRequest *r);
/* The bytes a collective is charged and traced as: the larger of a rank's input and output
 * (a broadcast's whole buffer on every rank). */
double comm_wire_bytes(const Comm *c, const CommRequest *r);
/* The trace event a collective is recorded as (EV_ALL_GATHER, ...). */
EventKind coll_event_kind(CollKind k);

#endif
