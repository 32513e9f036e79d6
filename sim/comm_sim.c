/* comm_sim: the comm interface for ranks that are threads of one process: collectives meet in a
 * shared slot, reduce in rank order (bit-identical every run) and take the cost model's time. */
#include "sim/comm_sim.h"

#include <pthread.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/cpu/cpu_ops.h"

/* How it works. Every rank numbers its collectives on a group in issue order (seq); the
 * k-th collective of every rank meets in slot k % SLOTS. `start` notes when the rank issued
 * it and where its input is. `wait` marks the rank ready on its comm stream, blocks until
 * every rank is ready, then each rank computes its own output from all the inputs, reducing
 * in rank order in fp32, so every run gives the same bits. The last rank out frees the slot.
 *
 * Inputs of up to STAGE_BYTES (the toy's, every loss and norm) are copied into the slot at
 * start, like a NIC's buffer: the sender may reuse its buffer at once and one rendezvous is
 * all a collective costs. Larger inputs are read where they are, with no hidden copy, and
 * the ranks meet a second time before leaving so nobody frees a buffer another rank is still
 * reading; only an input its own output overlaps (an in-place all-reduce) is copied. */
enum { SLOTS = 128, STAGE_BYTES = 64 * 1024 };

/* A rank's view of its group. */
typedef struct SimComm {
    struct SimWorld *w;
    SimClock *clock;
    TraceBuf *trace;
    long next_seq;
    StreamCheck *check; /* this rank's stream checker; NULL: off */
} SimComm;

typedef struct Slot {
    long seq;      /* which collective occupies the slot; -1 when free */
    int ready;     /* ranks waiting on it */
    int finished;  /* ranks done reading the inputs (large collectives) */
    int departed;  /* ranks gone; the last one frees the slot */
    int large;     /* inputs above STAGE_BYTES: read in place, two rendezvous */
    CollKind kind; /* as issued by the first rank, to catch mismatched programs */
    size_t count;
    DType dtype;
    ReduceOp op;
    int root;
    double latest; /* when the last rank's comm stream reached the collective */
    /* per member: allocated at the slot's first use by a run that moves data (an
     * accounting-only group of 131,072 ranks would otherwise hold 4 KiB per rank in them) */
    void **staged;      /* [size] copies of each rank's input */
    size_t *staged_cap; /* [size] bytes allocated in staged[r] */
    const void **input; /* [size] where each rank's input is: staged[r] or its send buffer */
} Slot;

struct SimWorld {
    int size;
    int nnodes; /* nodes the group spans, for the cost model */
    const Profile *profile;
    pthread_mutex_t lock;
    pthread_cond_t changed;
    int aborted;
    char why[256];
    int accounting_only; /* collectives are timed and traced but move no data */
    int present;         /* members that run (all but in a planner's run of representatives) */
    int *world_ranks;    /* [size]; NULL: the world, whose rank i is world rank i */
    SimComm *members;    /* [size] each rank's view, handed out by comm_sim_init */
    Slot slots[SLOTS];
};

static int count_nodes(int size, const int *world_ranks, int ranks_per_node) {
    if (ranks_per_node <= 0) return 1;
    if (!world_ranks) return (size + ranks_per_node - 1) / ranks_per_node; /* the world */
    int nodes = 0, last = -1;
    /* group members are listed in increasing world rank, so nodes appear in order */
    for (int i = 0; i < size; i++) {
        int node = (world_ranks ? world_ranks[i] : i) / ranks_per_node;
        if (node != last) nodes++;
        last = node;
    }
    return nodes;
}

SimWorld *sim_world_create(int size, const int *world_ranks, int ranks_per_node,
                           const Profile *profile, Err *err) {
    if (size < 1) {
        err_set(err, ERR_USAGE, "a group needs at least one rank (got %d)", size);
        return NULL;
    }
    SimWorld *w = calloc(1, sizeof *w);
    if (!w) {
        err_set(err, ERR_NOMEM, "out of memory creating a group of %d ranks", size);
        return NULL;
    }
    w->size = size;
    w->present = size;
    w->nnodes = count_nodes(size, world_ranks, ranks_per_node);
    w->profile = profile;
    pthread_mutex_init(&w->lock, NULL);
    pthread_cond_init(&w->changed, NULL);
    /* the world's ranks are their own world ranks: no table (a million GPUs' would be written
     * and read on every plan) */
    w->world_ranks = world_ranks ? malloc((size_t)size * sizeof *w->world_ranks) : NULL;
    w->members = calloc((size_t)size, sizeof *w->members);
    if (w->world_ranks) memcpy(w->world_ranks, world_ranks, (size_t)size * sizeof *world_ranks);
    for (int i = 0; i < SLOTS; i++) w->slots[i].seq = -1;
    if ((world_ranks && !w->world_ranks) || !w->members) {
        sim_world_destroy(w);
        err_set(err, ERR_NOMEM, "out of memory creating a group of %d ranks", size);
        return NULL;
    }
    return w;
}

void sim_world_destroy(SimWorld *w) {
    if (!w) return;
    for (int i = 0; i < SLOTS; i++) {
        Slot *s = &w->slots[i];
        for (int r = 0; s->staged && r < w->size; r++) free(s->staged[r]);
        free(s->staged);
        free(s->staged_cap);
        free(s->input);
    }
    free(w->world_ranks);
    free(w->members);
    pthread_mutex_destroy(&w->lock);
    pthread_cond_destroy(&w->changed);
    free(w);
}

void sim_world_abort(SimWorld *w, const char *why) {
    pthread_mutex_lock(&w->lock);
    if (!w->aborted) {
        __atomic_store_n(&w->aborted, 1, __ATOMIC_RELEASE);
        snprintf(w->why, sizeof w->why, "%.200s", why);
    }
    pthread_cond_broadcast(&w->changed);
    pthread_mutex_unlock(&w->lock);
}

static SimComm *sim_comm(Comm *c) {
    return (SimComm *)c->impl;
}

/* Called with the lock held: fails if the group was aborted. */
static int check_aborted(SimWorld *w, Err *err) {
    if (w->aborted) return err_set(err, ERR_INTERNAL, "aborted: %s", w->why);
    return 0;
}

/* Called with the lock held; returns with it held. Ranks arrive within microseconds of each
 * other, and a sleep on the condition variable costs two context switches, so a waiter first
 * polls briefly, yielding its core to a rank that has not arrived yet (the machine may have
 * fewer cores than ranks), and only then sleeps. */
static int wait_for(SimWorld *w, const int *counter, int target, Err *err) {
    enum { POLLS = 64 };
    pthread_mutex_unlock(&w->lock);
    for (int i = 0; i < POLLS && __atomic_load_n(counter, __ATOMIC_ACQUIRE) < target &&
                    !__atomic_load_n(&w->aborted, __ATOMIC_ACQUIRE);
         i++)
        sched_yield();
    pthread_mutex_lock(&w->lock);
    while (*counter < target && !w->aborted) pthread_cond_wait(&w->changed, &w->lock);
    return check_aborted(w, err);
}

/* Called with the lock held: the slot's per-member buffers, at its first use by a run that
 * moves data. */
static int slot_buffers(SimWorld *w, Slot *s, Err *err) {
    s->staged = calloc((size_t)w->size, sizeof *s->staged);
    s->staged_cap = calloc((size_t)w->size, sizeof *s->staged_cap);
    s->input = calloc((size_t)w->size, sizeof *s->input);
    if (s->staged && s->staged_cap && s->input) return 0;
    free(s->staged), free(s->staged_cap), free(s->input);
    s->staged = NULL, s->staged_cap = NULL, s->input = NULL;
    return err_set(err, ERR_NOMEM, "out of memory for a collective of %d ranks", w->size);
}

static int same_program(const Comm *c, const Slot *s, const CommRequest *r, Err *err) {
    if (s->kind == r->kind && s->count == r->count && s->dtype == r->dtype && s->op == r->op &&
        s->root == r->root)
        return 0;
    return err_set(err, ERR_INTERNAL,
                   "rank %d issued %s of %zu %s as collective %ld, but another rank issued %s "
                   "of %zu %s: the ranks' programs diverged",
                   c->world_rank, coll_kind_name(r->kind), r->count, dtype_name(r->dtype), s->seq,
                   coll_kind_name(s->kind), s->count, dtype_name(s->dtype));
}

static int overlaps(const void *a, size_t an, const void *b, size_t bn) {
    const char *x = a, *y = b;
    return an && bn && x < y + bn && y < x + an;
}

/* Points the slot at this rank's input, copying it when it is small or when the rank's own
 * output overlaps it. */
static int place_input(Comm *c, Slot *s, const CommRequest *r, Err *err) {
    size_t es = dtype_size(r->dtype);
    size_t bytes = comm_input_count(c, r) * es;
    int in_place = overlaps(r->send, bytes, r->recv, comm_output_count(c, r) * es);
    if (sim_comm(c)->w->accounting_only) return 0; /* nothing is read */
    s->input[c->rank] = r->send;
    if (s->large && !in_place) return 0;
    if (bytes > s->staged_cap[c->rank]) {
        void *p = realloc(s->staged[c->rank], bytes);
        if (!p)
            return err_set(err, ERR_NOMEM, "out of memory staging a %zu-byte %s", bytes,
                           coll_kind_name(r->kind));
        s->staged[c->rank] = p;
        s->staged_cap[c->rank] = bytes;
    }
    if (bytes) memcpy(s->staged[c->rank], r->send, bytes);
    s->input[c->rank] = s->staged[c->rank];
    return 0;
}

/* Called with the lock held by the last rank to leave: big staging copies are not kept. */
static void retire_slot(SimWorld *w, Slot *s) {
    for (int q = 0; s->staged && q < w->size; q++)
        if (s->staged_cap[q] > STAGE_BYTES) {
            free(s->staged[q]);
            s->staged[q] = NULL;
            s->staged_cap[q] = 0;
        }
    s->seq = -1;
    pthread_cond_broadcast(&w->changed);
}

/* The collective, on the comm stream, reads the send buffer and writes the receive buffer; its
 * done event is recorded after both, so what waits for it is ordered after them. */
static void check_collective(SimComm *sc, const Comm *c, CommRequest *r) {
    if (!sc->check) return;
    StreamOp op = {coll_kind_name(r->kind), r->unit};
    size_t es = dtype_size(r->dtype);
    stream_check_access(sc->check, STREAM_COMM, r->send, comm_input_count(c, r) * es, ACCESS_READ,
                        op);
    stream_check_access(sc->check, STREAM_COMM, r->recv, comm_output_count(c, r) * es, ACCESS_WRITE,
                        op);
    stream_check_record_event(sc->check, STREAM_COMM, &r->done);
}

static int sim_start(Comm *c, CommRequest *r, Err *err) {
    SimComm *sc = sim_comm(c);
    SimWorld *w = sc->w;
    check_collective(sc, c, r);
    r->seq = sc->next_seq++;
    r->start_time = sc->clock->stream_time[STREAM_COMM]; /* when this rank issued it */
    Slot *s = &w->slots[r->seq % SLOTS];
    pthread_mutex_lock(&w->lock);
    int rc = 0;
    /* the slot may still hold collective seq - SLOTS that slower ranks are finishing */
    while (s->seq != r->seq && s->seq != -1 && !w->aborted)
        pthread_cond_wait(&w->changed, &w->lock);
    if (!(rc = check_aborted(w, err))) {
        if (s->seq == -1) {
            *s = (Slot){.seq = r->seq,
                        .kind = r->kind,
                        .count = r->count,
                        .dtype = r->dtype,
                        .op = r->op,
                        .root = r->root,
                        .large = comm_input_count(c, r) * dtype_size(r->dtype) > STAGE_BYTES,
                        .staged = s->staged,
                        .staged_cap = s->staged_cap,
                        .input = s->input};
        }
        rc = same_program(c, s, r, err);
    }
    if (!rc && !w->accounting_only && !s->input) rc = slot_buffers(w, s, err);
    pthread_mutex_unlock(&w->lock);
    /* staging needs no lock: each rank writes only its own entry, read after `ready` */
    if (!rc) rc = place_input(c, s, r, err);
    if (rc) sim_world_abort(w, err->msg);
    return rc;
}

/* reduce_range for fp32 sums and averages, the gradients' case: rank 0's values, each later
 * rank's added in rank order, then the division, element by element the same operations as the
 * general loop below, but without its per-element type and op switches, in passes the compiler
 * keeps in vector registers (vit-tiny at 1 rank spent 1.4% of its time in the general loop). */
static void reduce_range_fp32(const Slot *s, int size, size_t first, size_t n, float *out) {
    enum { CHUNK = 8 };
    const size_t whole = n / CHUNK * CHUNK;
    memcpy(out, (const float *)s->input[0] + first, n * sizeof(float));
    for (int q = 1; q < size; q++) {
        const float *in = (const float *)s->input[q] + first;
        size_t i = 0;
        for (; i < whole; i += CHUNK)
            for (int k = 0; k < CHUNK; k++) out[i + k] += in[i + k];
        for (; i < n; i++) out[i] += in[i];
    }
    if (s->op != REDUCE_AVG || size == 1) return; /* x / 1 is x */
    const float divisor = (float)size;
    size_t i = 0;
    for (; i < whole; i += CHUNK)
        for (int k = 0; k < CHUNK; k++) out[i + k] /= divisor;
    for (; i < n; i++) out[i] /= divisor;
}

/* Each element is reduced on its own, so the rank thread's pool may split the elements (cut at
 * 16 floats): the same operations on every element, so the same bits, in half the wall time at
 * 1 rank, where a reduction is a copy. */
typedef struct ReduceTask {
    const Slot *s;
    int size;
    size_t first, n;
    float *out;
} ReduceTask;

enum { REDUCE_MIN_FLOATS = 1 << 14 };

static void reduce_fp32_task(void *ctx, int t, int nt) {
    const ReduceTask *r = ctx;
    size_t i0, i1;
    cpu_split_range(r->n, 16, t, nt, &i0, &i1);
    if (i1 > i0) reduce_range_fp32(r->s, r->size, r->first + i0, i1 - i0, r->out + i0);
}

static void reduce_fp32_split(const Slot *s, int size, size_t first, size_t n, float *out) {
    ReduceTask r = {.s = s, .size = size, .first = first, .n = n, .out = out};
    cpu_parallel(cpu_split_count(n, REDUCE_MIN_FLOATS), reduce_fp32_task, &r);
}

/* out[i] = op over ranks (in rank order) of staged[q][first + i], rounded once. */
static void reduce_range(const Slot *s, int size, size_t first, size_t n, void *out) {
    if (s->dtype == DTYPE_FP32 && s->op != REDUCE_MAX && n) {
        reduce_fp32_split(s, size, first, n, out);
        return;
    }
    for (size_t i = 0; i < n; i++) {
        float acc = dtype_load(s->input[0], s->dtype, first + i);
        for (int q = 1; q < size; q++) {
            float x = dtype_load(s->input[q], s->dtype, first + i);
            acc = s->op == REDUCE_MAX ? (x > acc ? x : acc) : acc + x;
        }
        if (s->op == REDUCE_AVG) acc /= (float)size;
        dtype_store(out, s->dtype, i, acc);
    }
}

static void compute_output(const Comm *c, const Slot *s, void *recv) {
    size_t es = dtype_size(s->dtype), n = s->count;
    if (sim_comm((Comm *)c)->w->accounting_only) return;
    switch (s->kind) {
    case COLL_ALL_GATHER:
        for (int q = 0; q < c->size; q++)
            cpu_copy((char *)recv + (size_t)q * n * es, s->input[q], n * es);
        break;
    case COLL_REDUCE_SCATTER:
        reduce_range(s, c->size, (size_t)c->rank * n, n, recv);
        break;
    case COLL_ALL_REDUCE:
        reduce_range(s, c->size, 0, n, recv);
        break;
    case COLL_BROADCAST:
        cpu_copy(recv, s->input[s->root], n * es);
        break;
    case COLL_BARRIER:
    case COLL_KIND_COUNT:
        break;
    }
}

/* Every rank computes the same window: the collective starts when the last rank's comm
 * stream gets to it and lasts what the cost model says. */
static void model_time(const Comm *c, const Slot *s, const CommRequest *r, double *start,
                       double *end) {
    SimWorld *w = sim_comm((Comm *)c)->w;
    double t = s->latest;
    *start = t;
    *end = t + cost_collective(w->profile, r->kind, comm_wire_bytes(c, r), c->size, w->nnodes);
}

static void record(SimComm *sc, const CommRequest *r, double bytes, int peers) {
    if (!sc->trace || !sc->trace->enabled) return;
    TraceEvent e = {.start = r->start_time,
                    .end = r->end_time,
                    .bytes = (unsigned long long)bytes,
                    .kind = coll_event_kind(r->kind),
                    .unit = r->unit,
                    .stream = STREAM_COMM,
                    .category = -1,
                    .peers = peers,
                    .flags = r->trace_flags};
    tracebuf_append(sc->trace, e);
}

static int sim_wait(Comm *c, CommRequest *r, Err *err) {
    SimComm *sc = sim_comm(c);
    SimWorld *w = sc->w;
    Slot *s = &w->slots[r->seq % SLOTS];
    /* the comm stream runs collectives in order: this one cannot begin before the last ended */
    double ready =
        r->start_time > sc->clock->comm_last_end ? r->start_time : sc->clock->comm_last_end;
    pthread_mutex_lock(&w->lock);
    if (ready > s->latest) s->latest = ready;
    /* a rank is ready only after its start staged the input, so all ready means all staged;
     * only the last arrival wakes anyone: waking on every change would cost a context switch
     * per rank per change */
    if (__atomic_add_fetch(&s->ready, 1, __ATOMIC_RELEASE) == w->present)
        pthread_cond_broadcast(&w->changed);
    int rc = wait_for(w, &s->ready, w->present, err);
    pthread_mutex_unlock(&w->lock);
    if (rc) return rc;
    /* every input is in place and nobody writes the slot until all have departed */
    compute_output(c, s, r->recv);
    model_time(c, s, r, &r->start_time, &r->end_time);
    pthread_mutex_lock(&w->lock);
    if (s->large) { /* others may still be reading this rank's send buffer */
        if (__atomic_add_fetch(&s->finished, 1, __ATOMIC_RELEASE) == w->present)
            pthread_cond_broadcast(&w->changed);
        rc = wait_for(w, &s->finished, w->present, err);
    }
    if (++s->departed == w->present) retire_slot(w, s);
    pthread_mutex_unlock(&w->lock);
    if (rc) return rc;
    sc->clock->comm_last_end = r->end_time;
    if (sc->clock->stream_time[STREAM_COMM] < r->end_time)
        sc->clock->stream_time[STREAM_COMM] = r->end_time;
    r->done.time = r->end_time;
    r->done.handle = NULL;
    record(sc, r, comm_wire_bytes(c, r), c->size);
    return 0;
}

static const CommOps sim_comm_ops = {.start = sim_start, .wait = sim_wait};

void comm_sim_init(Comm *c, SimWorld *w, int rank, SimClock *clock, TraceBuf *trace) {
    SimComm *sc = &w->members[rank];
    *sc = (SimComm){.w = w, .clock = clock, .trace = trace};
    *c = (Comm){.ops = &sim_comm_ops,
                .rank = rank,
                .size = w->size,
                .world_rank = w->world_ranks ? w->world_ranks[rank] : rank,
                .impl = sc};
}

void comm_sim_check(Comm *c, StreamCheck *check) {
    sim_comm(c)->check = check;
}

void sim_world_accounting_only(SimWorld *w) {
    w->accounting_only = 1;
}

void sim_world_set_present(SimWorld *w, const unsigned char *runs) {
    w->present = 0;
    for (int i = 0; i < w->size; i++)
        w->present += runs[w->world_ranks ? w->world_ranks[i] : i] != 0;
}
