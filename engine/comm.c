/* comm: the blocking form of every collective (start, then wait) on any backend's Comm, and what a
 * request moves: each rank's input and output counts and the bytes it is charged. */
#include "engine/comm.h"

const char *coll_kind_name(CollKind k) {
    static const char *names[COLL_KIND_COUNT] = {"all_gather", "reduce_scatter", "all_reduce",
                                                 "broadcast", "barrier"};
    return (k >= 0 && k < COLL_KIND_COUNT) ? names[k] : "?";
}

static int start_and_wait(Comm *c, CommRequest *req, Err *err) {
    Device *d = c->dev;
    if (d) device_follow(d, STREAM_COMM, STREAM_COMPUTE);
    int rc = c->ops->start(c, req, err);
    if (!rc) rc = c->ops->wait(c, req, err);
    if (!rc && d) d->ops->stream_wait(d, STREAM_COMPUTE, &req->done);
    return rc;
}

int comm_all_gather_host(Comm *c, Device *d, const void *mine, size_t words, void *out, Err *err) {
    size_t bytes = words * sizeof(float);
    char *buf = d->ops->alloc(d, bytes * (size_t)(c->size + 1) + 1, MEM_COMM_BUFFER, -1);
    if (!buf) return err_set(err, ERR_NOMEM, "rank %d: out of memory gathering", c->world_rank);
    char *slot = buf + bytes * (size_t)c->size;
    d->ops->copy(d, slot, mine, bytes);
    int rc = comm_all_gather(c, slot, buf, words, DTYPE_FP32, -1, err);
    if (!rc) d->ops->copy(d, out, buf, bytes * (size_t)c->size);
    d->ops->free(d, buf, -1);
    return rc;
}

int comm_all_gather(Comm *c, const void *send, void *recv, size_t count, DType t, int unit,
                    Err *err) {
    CommRequest r = {.kind = COLL_ALL_GATHER,
                     .send = send,
                     .recv = recv,
                     .count = count,
                     .dtype = t,
                     .unit = unit};
    return start_and_wait(c, &r, err);
}

/* A reduce-scatter and an all-reduce differ only in what each rank keeps of the reduction. */
static int reduce_and_wait(Comm *c, CollKind kind, const void *send, void *recv, size_t count,
                           DType t, ReduceOp op, int unit, Err *err) {
    CommRequest r = {.kind = kind,
                     .send = send,
                     .recv = recv,
                     .count = count,
                     .dtype = t,
                     .op = op,
                     .unit = unit};
    return start_and_wait(c, &r, err);
}

int comm_reduce_scatter(Comm *c, const void *send, void *recv, size_t count, DType t, ReduceOp op,
                        int unit, Err *err) {
    return reduce_and_wait(c, COLL_REDUCE_SCATTER, send, recv, count, t, op, unit, err);
}

int comm_all_reduce(Comm *c, const void *send, void *recv, size_t count, DType t, ReduceOp op,
                    int unit, Err *err) {
    return reduce_and_wait(c, COLL_ALL_REDUCE, send, recv, count, t, op, unit, err);
}

int comm_broadcast(Comm *c, void *buf, size_t count, DType t, int root, int unit, Err *err) {
    CommRequest r = {.kind = COLL_BROADCAST,
                     .send = buf,
                     .recv = buf,
                     .count = count,
                     .dtype = t,
                     .root = root,
                     .unit = unit};
    return start_and_wait(c, &r, err);
}

int comm_barrier(Comm *c, Err *err) {
    CommRequest r = {.kind = COLL_BARRIER, .unit = -1};
    return start_and_wait(c, &r, err);
}

EventKind coll_event_kind(CollKind k) {
    static const EventKind kinds[COLL_KIND_COUNT] = {EV_ALL_GATHER, EV_REDUCE_SCATTER,
                                                     EV_ALL_REDUCE, EV_BROADCAST, EV_BARRIER};
    return kinds[k];
}

size_t comm_input_count(const Comm *c, const CommRequest *r) {
    switch (r->kind) {
    case COLL_REDUCE_SCATTER:
        return r->count * (size_t)c->size;
    case COLL_BROADCAST:
        return c->rank == r->root ? r->count : 0;
    case COLL_BARRIER:
        return 0;
    default:
        return r->count;
    }
}

size_t comm_output_count(const Comm *c, const CommRequest *r) {
    switch (r->kind) {
    case COLL_ALL_GATHER:
        return r->count * (size_t)c->size;
    case COLL_BARRIER:
        return 0;
    default:
        return r->count;
    }
}

double comm_wire_bytes(const Comm *c, const CommRequest *r) {
    size_t in = r->kind == COLL_BROADCAST ? r->count : comm_input_count(c, r);
    size_t out = comm_output_count(c, r);
    return (double)((in > out ? in : out) * dtype_size(r->dtype));
}
