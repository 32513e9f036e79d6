#include "comm.h"

const char *coll_kind_name(CollKind k) {
    static const char *names[COLL_KIND_COUNT] = {"all_gather", "reduce_scatter", "all_reduce",
                                                 "broadcast", "barrier"};
    return (k >= 0 && k < COLL_KIND_COUNT) ? names[k] : "?";
}

static int start_and_wait(Comm *c, CommRequest *req, Err *err) {
    int rc = c->ops->start(c, req, err);
    if (rc) return rc;
    return c->ops->wait(c, req, err);
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

int comm_reduce_scatter(Comm *c, const void *send, void *recv, size_t count, DType t, ReduceOp op,
                        int unit, Err *err) {
    CommRequest r = {.kind = COLL_REDUCE_SCATTER,
                     .send = send,
                     .recv = recv,
                     .count = count,
                     .dtype = t,
                     .op = op,
                     .unit = unit};
    return start_and_wait(c, &r, err);
}

int comm_all_reduce(Comm *c, const void *send, void *recv, size_t count, DType t, ReduceOp op,
                    int unit, Err *err) {
    CommRequest r = {.kind = COLL_ALL_REDUCE,
                     .send = send,
                     .recv = recv,
                     .count = count,
                     .dtype = t,
                     .op = op,
                     .unit = unit};
    return start_and_wait(c, &r, err);
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
