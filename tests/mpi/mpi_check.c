/* mpi_check: the MPI communicator (runtime/comm_mpi.c), one process per rank under
 * `mpirun -np N` (tests/runtime/test_comm_mpi.c runs it at 2 and 4 ranks). Exits 0 when every
 * check passes on this rank, else prints the first failure and exits 1. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/dtype.h"
#include "runtime/comm_mpi.h"

/* Every collective on world, and at 4 ranks on its halves (hsdp's shard groups) and on the
 * groups of even and odd ranks (its replica groups), in each dtype at odd counts. fp32 inputs
 * are integers, so any order of addition is exact; bf16 and fp16 inputs are multiples of a
 * 16-bit value whose fp32 sums over 4 ranks are exact too, so the simulator's rule (fp32 sum
 * in rank order, divided for an average, rounded once) gives the bits MPI's path must give. */

static int failures;
static int world_rank;

static void fail(const char *group, const char *what, DType t, size_t count, size_t i) {
    if (!failures++)
        fprintf(stderr, "mpi_check: rank %d: %s: %s %s count %zu: element %zu wrong\n", world_rank,
                group, what, dtype_name(t), count, i);
}

static void check_rc(int rc, const Err *e) {
    if (rc && !failures++) fprintf(stderr, "mpi_check: rank %d: %s\n", world_rank, e->msg);
}

/* Rank q's i-th input in group `salt` (groups differ, so a collective on the wrong group
 * shows), exact in t. */
static float input(DType t, int salt, int q, size_t i) {
    int k = (int)((size_t)(q * 37 + salt * 5) + i * 11) % 23 - 11;
    return t == DTYPE_FP32 ? (float)k : dtype_round(t, (float)k * 0.173f);
}

static void *inputs(DType t, int salt, int q, size_t first, size_t n) {
    char *v = malloc(n * dtype_size(t) + 1);
    for (size_t i = 0; i < n; i++) dtype_store(v, t, i, input(t, salt, q, first + i));
    return v;
}

/* The simulator's rule for element i of a reduction over `size` ranks. */
static float reference(DType t, ReduceOp op, int salt, int size, size_t i) {
    float acc = input(t, salt, 0, i);
    for (int q = 1; q < size; q++) {
        float x = input(t, salt, q, i);
        acc = op == REDUCE_MAX ? (x > acc ? x : acc) : acc + x;
    }
    if (op == REDUCE_AVG) acc /= (float)size;
    return dtype_round(t, acc);
}

/* got[i] against want[i], bit for bit. */
static void compare(const char *group, const char *what, DType t, size_t count, const void *got,
                    const void *want, size_t n) {
    size_t es = dtype_size(t);
    for (size_t i = 0; i < n; i++)
        if (memcmp((const char *)got + i * es, (const char *)want + i * es, es)) {
            fail(group, what, t, count, i);
            return;
        }
}

static void check_gather(Comm *c, const char *g, int salt, DType t, size_t n) {
    Err e = {0};
    size_t es = dtype_size(t), all = n * (size_t)c->size;
    void *send = inputs(t, salt, c->rank, 0, n), *recv = calloc(all + 1, es);
    char *want = malloc(all * es + 1);
    for (int q = 0; q < c->size; q++) {
        void *v = inputs(t, salt, q, 0, n);
        memcpy(want + (size_t)q * n * es, v, n * es);
        free(v);
    }
    check_rc(comm_all_gather(c, send, recv, n, t, 0, &e), &e);
    compare(g, "all_gather", t, n, recv, want, all);
    memset(recv, 0, all * es); /* in place: the input already in this rank's block */
    char *mine = (char *)recv + (size_t)c->rank * n * es;
    memcpy(mine, send, n * es);
    check_rc(comm_all_gather(c, mine, recv, n, t, 0, &e), &e);
    compare(g, "all_gather in place", t, n, recv, want, all);
    free(send), free(recv), free(want);
}

static void check_reduce(Comm *c, const char *g, int salt, DType t, size_t n, ReduceOp op) {
    static const char *names[] = {"sum", "avg", "max"};
    char what[64];
    Err e = {0};
    size_t es = dtype_size(t), all = n * (size_t)c->size;
    char *want = malloc(all * es + 1), *recv = calloc(all + 1, es);
    for (size_t i = 0; i < all; i++) dtype_store(want, t, i, reference(t, op, salt, c->size, i));
    void *send = inputs(t, salt, c->rank, 0, all);
    snprintf(what, sizeof what, "reduce_scatter %s", names[op]);
    check_rc(comm_reduce_scatter(c, send, recv, n, t, op, 0, &e), &e);
    compare(g, what, t, n, recv, want + (size_t)c->rank * n * es, n);
    snprintf(what, sizeof what, "all_reduce %s", names[op]);
    check_rc(comm_all_reduce(c, send, recv, n, t, op, 0, &e), &e);
    compare(g, what, t, n, recv, want, n);
    snprintf(what, sizeof what, "all_reduce %s in place", names[op]);
    memcpy(recv, send, n * es);
    check_rc(comm_all_reduce(c, recv, recv, n, t, op, 0, &e), &e);
    compare(g, what, t, n, recv, want, n);
    free(send), free(recv), free(want);
}

static void check_broadcast(Comm *c, const char *g, int salt, DType t, size_t n) {
    Err e = {0};
    int root = c->size - 1;
    void *want = inputs(t, salt, root, 0, n);
    void *buf = c->rank == root ? inputs(t, salt, root, 0, n) : calloc(n + 1, dtype_size(t));
    check_rc(comm_broadcast(c, buf, n, t, root, 0, &e), &e);
    compare(g, "broadcast", t, n, buf, want, n);
    free(want), free(buf);
}

/* Two collectives in flight at once, waited for in the opposite order. */
static void check_overlap(Comm *c, const char *g, int salt) {
    Err e = {0};
    size_t n = 5, all = n * (size_t)c->size;
    float *gin = inputs(DTYPE_FP32, salt, c->rank, 0, n), *gout = calloc(all, sizeof(float));
    float *rin = inputs(DTYPE_FP32, salt, c->rank, 0, n), rout[5], want[5];
    CommRequest a = {.kind = COLL_ALL_GATHER, .send = gin, .recv = gout, .count = n, .unit = -1};
    CommRequest b = {.kind = COLL_ALL_REDUCE, .send = rin, .recv = rout, .count = n, .unit = -1};
    check_rc(c->ops->start(c, &a, &e), &e);
    check_rc(c->ops->start(c, &b, &e), &e);
    check_rc(c->ops->wait(c, &b, &e), &e);
    check_rc(c->ops->wait(c, &a, &e), &e);
    for (size_t i = 0; i < n; i++) want[i] = reference(DTYPE_FP32, REDUCE_SUM, salt, c->size, i);
    compare(g, "all_reduce beside an all_gather", DTYPE_FP32, n, rout, want, n);
    if (memcmp(gout + (size_t)c->rank * n, gin, n * sizeof(float)))
        fail(g, "all_gather beside an all_reduce", DTYPE_FP32, n, 0);
    if (b.seq != a.seq + 1 || b.end_time < b.start_time) fail(g, "seq or times", DTYPE_FP32, n, 0);
    free(gin), free(gout), free(rin);
}

static void check_group(Comm *c, const char *g, int salt) {
    static const size_t counts[] = {1, 7, 1001};
    Err e = {0};
    for (int t = 0; t < DTYPE_COUNT; t++)
        for (size_t k = 0; k < sizeof counts / sizeof *counts; k++) {
            check_gather(c, g, salt, (DType)t, counts[k]);
            for (int op = REDUCE_SUM; op <= REDUCE_MAX; op++)
                check_reduce(c, g, salt, (DType)t, counts[k], (ReduceOp)op);
            check_broadcast(c, g, salt, (DType)t, counts[k]);
        }
    check_overlap(c, g, salt);
    check_rc(comm_barrier(c, &e), &e);
}

/* A bad root must come back as an error naming the collective, not abort the job. */
static void check_error(Comm *c) {
    Err e = {0};
    float x = 0;
    if (!comm_broadcast(c, &x, 1, DTYPE_FP32, c->size + 3, 0, &e) || !strstr(e.msg, "broadcast"))
        fail("world", "bad root not reported", DTYPE_FP32, 1, 0);
}

int main(int argc, char **argv) {
    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &world_rank);
    MpiComm world, sub;
    Err e = {0};
    check_rc(comm_mpi_create(&world, MPI_COMM_WORLD, &e), &e);
    if (!failures) {
        Comm *w = &world.base;
        check_group(w, "world", 0);
        check_error(w);
        if (w->size % 2 == 0 && w->size >= 4) {
            int half = w->rank / (w->size / 2), parity = w->rank % 2;
            check_rc(comm_mpi_split(&sub, &world, half, w->rank, &e), &e);
            if (!failures) check_group(&sub.base, half ? "second half" : "first half", 1 + half);
            comm_mpi_destroy(&sub);
            check_rc(comm_mpi_split(&sub, &world, parity, w->rank, &e), &e);
            if (!failures) check_group(&sub.base, parity ? "odd ranks" : "even ranks", 3 + parity);
            comm_mpi_destroy(&sub);
        }
        comm_mpi_destroy(&world);
    }
    MPI_Finalize();
    if (!failures && world_rank == 0) printf("mpi_check: all passed\n");
    return failures ? 1 : 0;
}
