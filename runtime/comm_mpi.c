/* comm_mpi: the comm interface on MPI's non-blocking collectives, one process per rank, host
 * memory only. 16-bit reductions go through fp32 staging and round once in wait. */
#include "runtime/comm_mpi.h"

#include <sched.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/clock.h"

/* What a started collective keeps until wait: MPI's request, and for a reduction that cannot
 * land in recv as it is (16-bit, an average, an output inside the input) the fp32 buffer MPI
 * reduces into, finished into recv by wait. */
typedef struct Pending {
    MPI_Request req;
    float *out;  /* reduction's fp32 output to finish into recv; NULL: MPI wrote recv */
    void *stage; /* owned: fp32 input and output, or a copy of an overlapping send */
} Pending;

static int mpi_failed(const MpiComm *c, int rc, const char *what, Err *err) {
    char msg[MPI_MAX_ERROR_STRING];
    int len = 0;
    if (MPI_Error_string(rc, msg, &len) != MPI_SUCCESS) snprintf(msg, sizeof msg, "error %d", rc);
    return err_set(err, ERR_INTERNAL, "rank %d: MPI %s: %s", c->base.world_rank, what, msg);
}

static MPI_Op mpi_op(ReduceOp op) {
    return op == REDUCE_MAX ? MPI_MAX : MPI_SUM; /* an average is a sum divided in wait */
}

/* Moving bits, not values: 16-bit types need no arithmetic, so any 2-byte type carries them. */
static MPI_Datatype mpi_bits_type(DType t) {
    return t == DTYPE_FP32 ? MPI_FLOAT : MPI_UINT16_T;
}

static int overlaps(const void *a, size_t an, const void *b, size_t bn) {
    uintptr_t x = (uintptr_t)a, y = (uintptr_t)b;
    return an && bn && x < y + bn && y < x + an;
}

static int gather_start(MpiComm *c, const CommRequest *r, Pending *p) {
    size_t es = dtype_size(r->dtype), n = r->count;
    char *mine = (char *)r->recv + (size_t)c->base.rank * n * es;
    const void *send = r->send;
    if (send == mine) {
        send = MPI_IN_PLACE; /* NCCL's in-place form: the rank's input already in its block */
    } else if (overlaps(send, n * es, r->recv, n * es * (size_t)c->base.size)) {
        if (!(p->stage = malloc(n * es + 1))) return MPI_ERR_NO_MEM;
        send = memcpy(p->stage, send, n * es);
    }
    MPI_Datatype t = mpi_bits_type(r->dtype);
    return MPI_Iallgather(send, (int)n, t, r->recv, (int)n, t, c->mpi, &p->req);
}

/* A reduction's input and output in fp32: recv and send themselves when MPI can use them as
 * they are, else staging (widened 16-bit input; an output wait must divide or round, or one
 * that overlaps the input). */
static int reduce_start(MpiComm *c, const CommRequest *r, Pending *p) {
    size_t in = comm_input_count(&c->base, r), n = r->count, es = dtype_size(r->dtype);
    int wide = r->dtype != DTYPE_FP32;
    int in_place = r->kind == COLL_ALL_REDUCE && r->send == r->recv; /* MPI_IN_PLACE */
    int stage_out =
        wide || r->op == REDUCE_AVG || (!in_place && overlaps(r->send, in * es, r->recv, n * es));
    const void *send = r->send;
    float *out = r->recv;
    if (wide || stage_out) {
        size_t floats = (wide && !in_place ? in : 0) + (stage_out ? n : 0);
        if (!(p->stage = malloc(floats * sizeof(float) + 1))) return MPI_ERR_NO_MEM;
        float *s = p->stage;
        if (wide && !in_place) {
            for (size_t i = 0; i < in; i++) s[i] = dtype_load(r->send, r->dtype, i);
            send = s;
            s += in;
        }
        if (stage_out) out = p->out = s;
        if (in_place)
            for (size_t i = 0; i < n; i++) s[i] = dtype_load(r->recv, r->dtype, i);
    }
    if (in_place) send = MPI_IN_PLACE;
    if (r->kind == COLL_ALL_REDUCE)
        return MPI_Iallreduce(send, out, (int)n, MPI_FLOAT, mpi_op(r->op), c->mpi, &p->req);
    return MPI_Ireduce_scatter_block(send, out, (int)n, MPI_FLOAT, mpi_op(r->op), c->mpi, &p->req);
}

/* Seconds on the device's clock (the trace's), or the process's monotonic clock without one. */
static double comm_now(const MpiComm *c) {
    return clock_seconds() - (c->dev ? c->dev->t0 : 0.0);
}

static int mpi_start(Comm *base, CommRequest *r, Err *err) {
    MpiComm *c = base->impl;
    if (r->count > (size_t)INT32_MAX / (size_t)base->size)
        return err_set(err, ERR_USAGE, "%s of %zu elements: MPI counts are ints",
                       coll_kind_name(r->kind), r->count);
    Pending *p = calloc(1, sizeof *p);
    if (!p) return err_set(err, ERR_NOMEM, "out of memory starting a %s", coll_kind_name(r->kind));
    r->seq = c->seq++;
    r->start_time = comm_now(c);
    int rc;
    switch (r->kind) {
    case COLL_ALL_GATHER:
        rc = gather_start(c, r, p);
        break;
    case COLL_REDUCE_SCATTER:
    case COLL_ALL_REDUCE:
        rc = reduce_start(c, r, p);
        break;
    case COLL_BROADCAST:
        rc = MPI_Ibcast(r->recv, (int)r->count, mpi_bits_type(r->dtype), r->root, c->mpi, &p->req);
        break;
    default:
        rc = MPI_Ibarrier(c->mpi, &p->req);
    }
    if (rc != MPI_SUCCESS) {
        free(p->stage);
        free(p);
        return mpi_failed(c, rc, coll_kind_name(r->kind), err);
    }
    r->backend = p;
    return 0;
}

/* A staged reduction's output into recv: divided by the size in fp32 for an average, then
 * rounded once to the request's type. */
static void finish_reduction(const MpiComm *c, const CommRequest *r, const float *out) {
    for (size_t i = 0; i < r->count; i++) {
        float x = out[i];
        if (r->op == REDUCE_AVG) x /= (float)c->base.size;
        dtype_store(r->recv, r->dtype, i, x);
    }
}

static int timed_out(const MpiComm *c, const CommRequest *r, Err *err) {
    char unit[160] = "";
    if (r->unit >= 0 && c->names && r->unit < c->names->nunits)
        snprintf(unit, sizeof unit, " of unit %s", c->names->units[r->unit].name);
    else if (r->unit >= 0)
        snprintf(unit, sizeof unit, " of unit %d", r->unit);
    return err_set(err, ERR_INTERNAL,
                   "rank %d: %s%s did not complete in %g s (--timeout): a peer stopped taking "
                   "part",
                   c->base.world_rank, coll_kind_name(r->kind), unit, c->timeout);
}

/* MPI_Wait with a deadline: tests until the collective completes, giving the core away between
 * tests (ranks may outnumber cores), and fails once c->timeout has passed. */
static int wait_until_done(const MpiComm *c, Pending *p, const CommRequest *r, Err *err) {
    double deadline = c->timeout > 0 ? clock_seconds() + c->timeout : 0;
    for (long tries = 0;; tries++) {
        int done = 0, rc = MPI_Test(&p->req, &done, MPI_STATUS_IGNORE);
        if (rc != MPI_SUCCESS) return mpi_failed(c, rc, coll_kind_name(r->kind), err);
        if (done) return 0;
        if (deadline && (tries & 255) == 255 && clock_seconds() > deadline)
            return timed_out(c, r, err);
        sched_yield();
    }
}

static void trace_collective(const MpiComm *c, const CommRequest *r) {
    TraceBuf *t = c->dev ? c->dev->trace : NULL;
    if (!t || !t->enabled) return;
    tracebuf_append(t, (TraceEvent){.start = r->start_time,
                                    .end = r->end_time,
                                    .bytes = (unsigned long long)comm_wire_bytes(&c->base, r),
                                    .kind = coll_event_kind(r->kind),
                                    .unit = r->unit,
                                    .stream = STREAM_COMM,
                                    .category = -1,
                                    .peers = c->base.size,
                                    .flags = r->trace_flags});
}

static int mpi_wait(Comm *base, CommRequest *r, Err *err) {
    MpiComm *c = base->impl;
    Pending *p = r->backend;
    if (!p)
        return err_set(err, ERR_INTERNAL, "wait on a %s never started", coll_kind_name(r->kind));
    int rc = wait_until_done(c, p, r, err);
    if (!rc && p->out) finish_reduction(c, r, p->out);
    free(p->stage);
    free(p);
    r->backend = NULL;
    if (rc) return rc;
    r->end_time = r->done.time = comm_now(c);
    trace_collective(c, r);
    return 0;
}

void comm_mpi_progress(void *ctx) {
    (void)ctx;
    int flag;
    MPI_Iprobe(MPI_ANY_SOURCE, MPI_ANY_TAG, MPI_COMM_WORLD, &flag, MPI_STATUS_IGNORE);
}

static const CommOps mpi_ops = {.start = mpi_start, .wait = mpi_wait};

/* Takes ownership of `mpi`: errors returned rather than aborting the job, rank and size. */
static int adopt(MpiComm *c, MPI_Comm mpi, Err *err) {
    memset(c, 0, sizeof *c);
    c->mpi = mpi;
    c->base.ops = &mpi_ops;
    c->base.impl = c;
    int rc = MPI_Comm_set_errhandler(mpi, MPI_ERRORS_RETURN);
    if (rc == MPI_SUCCESS) rc = MPI_Comm_rank(mpi, &c->base.rank);
    if (rc == MPI_SUCCESS) rc = MPI_Comm_size(mpi, &c->base.size);
    if (rc == MPI_SUCCESS) rc = MPI_Comm_rank(MPI_COMM_WORLD, &c->base.world_rank);
    if (rc != MPI_SUCCESS) {
        MPI_Comm_free(&c->mpi);
        return mpi_failed(c, rc, "communicator setup", err);
    }
    return 0;
}

int comm_mpi_create(MpiComm *c, MPI_Comm parent, Err *err) {
    MPI_Comm dup = MPI_COMM_NULL;
    /* the parent's handler decides whether MPI_Comm_dup itself can return an error */
    MPI_Comm_set_errhandler(parent, MPI_ERRORS_RETURN);
    int rc = MPI_Comm_dup(parent, &dup);
    if (rc != MPI_SUCCESS) {
        memset(c, 0, sizeof *c);
        return mpi_failed(c, rc, "comm_dup", err);
    }
    return adopt(c, dup, err);
}

int comm_mpi_split(MpiComm *c, MpiComm *parent, int color, int key, Err *err) {
    MPI_Comm sub = MPI_COMM_NULL;
    int rc = MPI_Comm_split(parent->mpi, color, key, &sub);
    if (rc != MPI_SUCCESS) {
        memset(c, 0, sizeof *c);
        c->base.world_rank = parent->base.world_rank;
        return mpi_failed(c, rc, "comm_split", err);
    }
    rc = adopt(c, sub, err);
    c->dev = parent->dev;
    c->timeout = parent->timeout;
    c->names = parent->names;
    return rc;
}

void comm_mpi_destroy(MpiComm *c) {
    if (c->mpi != MPI_COMM_NULL && c->mpi != 0) MPI_Comm_free(&c->mpi);
    c->mpi = MPI_COMM_NULL;
}
