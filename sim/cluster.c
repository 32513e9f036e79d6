/* cluster: the simulated cluster: N ranks as threads of this process, each with its own
 * simulated device, trace and communicators; cluster_run creates, starts, joins and collects. */
#include "sim/cluster.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "io/nvme_tier.h"
#include "kernels/cpu/cpu_ops.h"
#include "kernels/cpu/pool.h"
#include "sim/comm_sim.h"
#include "sim/device_sim.h"
#include "sim/kernels_checked.h"
#include "sim/kernels_none.h"

typedef struct RankSlot {
    RankEnv env;
    SimDevice dev;
    SimClock clock;
    TraceBuf trace;
    Comm world, shard, replica;
    RankMain fn;
    void *arg;
    Err err;
    int rc;
    struct Cluster *cluster;
    pthread_t thread;
    int started; /* thread is running (or ran) and is to be joined */
} RankSlot;

typedef struct Cluster {
    const ClusterOptions *opt;
    int n, replicas;
    int checking;     /* the stream checker is on for every rank */
    int pool_threads; /* threads each rank's kernels may use (1: the rank thread alone) */
    SimWorld *world;
    SimWorld **shard_groups;   /* replicas groups of n/replicas consecutive ranks */
    SimWorld **replica_groups; /* n/replicas groups of the ranks with one shard rank */
    RankSlot *slots;           /* [running]: one for each rank that runs, in rank order */
    int running;
} Cluster;

static int runs(const Cluster *c, int r) {
    return !c->opt->run_rank || c->opt->run_rank[r];
}

/* The groups ranks talk in: the world, then hsdp's shard groups and replica groups; NULL for a
 * group none of whose members runs (a plan of 131,072 GPUs makes a handful, not thousands). */
static int group_count(const Cluster *c) {
    return c->replicas > 1 ? 1 + c->replicas + c->n / c->replicas : 1;
}

static SimWorld *group_at(const Cluster *c, int i) {
    if (i == 0) return c->world;
    if (i <= c->replicas) return c->shard_groups ? c->shard_groups[i - 1] : NULL;
    return c->replica_groups ? c->replica_groups[i - 1 - c->replicas] : NULL;
}

static void abort_all(Cluster *c, const char *why) {
    for (int i = 0; i < group_count(c); i++)
        if (group_at(c, i)) sim_world_abort(group_at(c, i), why);
}

static void *rank_thread(void *p) {
    RankSlot *s = p;
    int threads = s->cluster->pool_threads;
    CpuPool *pool = threads > 1 ? cpu_pool_create(threads) : NULL; /* NULL: run serially */
    kernels_cpu_use_pool(pool);
    if (s->cluster->checking) kernels_checked_bind(&kernels_cpu, device_sim_kernel_access, &s->dev);
    s->rc = s->fn(&s->env, s->arg, &s->err);
    if (s->cluster->checking) kernels_checked_bind(NULL, NULL, NULL);
    kernels_cpu_use_pool(NULL);
    cpu_pool_destroy(pool);
    if (s->rc) abort_all(s->cluster, s->err.msg);
    return NULL;
}

/* A group of `size` ranks, members[i] = first + i * stride. */
static SimWorld *make_group(int first, int stride, int size, int *members, const Profile *prof,
                            int *rc, Err *err) {
    for (int i = 0; i < size; i++) members[i] = first + i * stride;
    SimWorld *w = sim_world_create(size, members, prof->gpus_per_node, prof, err);
    if (!w) *rc = err->code ? err->code : ERR_NOMEM;
    return w;
}

/* The world, and hsdp's shard and replica groups of the ranks that run (the others stay NULL:
 * a plan of 131,072 GPUs in 16,384 groups of 8 runs ranks of one or two of them). */
static int create_groups(Cluster *c, const Profile *prof, Err *err) {
    c->world = sim_world_create(c->n, NULL, prof->gpus_per_node, prof, err);
    if (!c->world) return err->code ? err->code : ERR_NOMEM;
    if (c->replicas <= 1) return 0;
    int S = c->n / c->replicas;
    c->shard_groups = calloc((size_t)c->replicas, sizeof(SimWorld *));
    c->replica_groups = calloc((size_t)S, sizeof(SimWorld *));
    int *members = calloc((size_t)(S > c->replicas ? S : c->replicas), sizeof(int));
    if (!c->shard_groups || !c->replica_groups || !members) {
        free(members);
        return err_set(err, ERR_NOMEM, "out of memory creating rank groups");
    }
    int rc = 0;
    for (int r = 0; !rc && r < c->n; r++) {
        if (!runs(c, r)) continue;
        SimWorld **shard = &c->shard_groups[r / S], **replica = &c->replica_groups[r % S];
        if (!*shard) *shard = make_group(r / S * S, 1, S, members, prof, &rc, err);
        if (!rc && !*replica) *replica = make_group(r % S, S, c->replicas, members, prof, &rc, err);
    }
    free(members);
    return rc;
}

static void destroy_groups(Cluster *c) {
    for (int i = 0; i < group_count(c); i++)
        if (group_at(c, i)) sim_world_destroy(group_at(c, i));
    free(c->shard_groups);
    free(c->replica_groups);
}

static void mark_accounting_only(Cluster *c, const unsigned char *runs) {
    for (int i = 0; i < group_count(c); i++) {
        SimWorld *w = group_at(c, i);
        if (w) sim_world_accounting_only(w);
        if (w && runs) sim_world_set_present(w, runs);
    }
}

static const char *plan_unit_name(void *plan, int u) {
    const Plan *p = plan;
    return u >= 0 && u < p->nunits ? p->units[u].name : NULL;
}

/* The rank's device, collectives and kernels report to its stream checker. */
static void check_slot(Cluster *c, RankSlot *s) {
    const Plan *names = c->opt->unit_names;
    device_sim_check(&s->dev, names ? plan_unit_name : NULL, (void *)names);
    comm_sim_check(&s->world, &s->dev.check);
    if (c->replicas > 1) {
        comm_sim_check(&s->shard, &s->dev.check);
        comm_sim_check(&s->replica, &s->dev.check);
    }
    s->env.k = &kernels_checked;
}

static void init_slot(Cluster *c, RankSlot *s, int r, RankMain fn, void *arg) {
    const ClusterOptions *opt = c->opt;
    s->cluster = c;
    s->fn = fn;
    s->arg = arg;
    tracebuf_init(&s->trace, r, opt->trace);
    device_sim_init(&s->dev, r, &s->clock, &s->trace, opt->profile);
    if (opt->accounting_only) device_sim_accounting_only(&s->dev);
    comm_sim_init(&s->world, c->world, r, &s->clock, &s->trace);
    s->world.dev = &s->dev.base;
    s->env = (RankEnv){.rank = r,
                       .world = c->n,
                       .dev = &s->dev.base,
                       .k = opt->accounting_only ? &kernels_none : &kernels_cpu,
                       .world_comm = &s->world,
                       .shard_comm = &s->world,
                       .trace = &s->trace,
                       .tier = &nvme_tier_ops};
    if (c->replicas > 1) {
        int S = c->n / c->replicas;
        comm_sim_init(&s->shard, c->shard_groups[r / S], r % S, &s->clock, &s->trace);
        comm_sim_init(&s->replica, c->replica_groups[r % S], r / S, &s->clock, &s->trace);
        s->shard.dev = s->replica.dev = &s->dev.base;
        s->env.shard_comm = &s->shard;
        s->env.replica_comm = &s->replica;
    }
    if (c->checking) check_slot(c, s);
}

/* Rank threads share the machine's cores. When there are more cores than ranks, each rank
 * gets a pool of cores / ranks threads that its kernels split their work over (one rank on
 * this 2-core machine: 1,200 images/s of vit-tiny instead of 650); otherwise a rank is one
 * thread. OpenBLAS itself always runs single-threaded: the pools split GEMMs by rows, and
 * OpenBLAS's own idle workers spin, which starved oversubscribed rank threads (4 ranks with
 * 2 BLAS threads each ran 5x slower than with 1). */
static int pool_threads_per_rank(int ranks) {
    long cores = sysconf(_SC_NPROCESSORS_ONLN);
    kernels_cpu_set_threads(1);
    return cores > ranks ? (int)(cores / ranks) : 1;
}

/* The groups, and a slot (device, clock, trace, communicators) for each rank that runs. */
/* Whether the stream checker runs: asked for, or the environment asks (the test suite), and the
 * run moves bytes. */
static int checks_streams(const ClusterOptions *opt) {
    const char *env = getenv("FSDP_CHECK_STREAMS");
    int asked = opt->check_streams || (env && !strcmp(env, "1"));
    return asked && !opt->accounting_only;
}

static int cluster_create(Cluster *c, const ClusterOptions *opt, RankMain fn, void *arg, Err *err) {
    *c = (Cluster){.opt = opt,
                   .n = opt->ranks,
                   .replicas = opt->replicas > 1 ? opt->replicas : 1,
                   .pool_threads = pool_threads_per_rank(opt->ranks),
                   .checking = checks_streams(opt)};
    int rc = opt->run_rank && !opt->accounting_only
                 ? err_set(err, ERR_INTERNAL, "running some ranks only needs accounting_only")
                 : create_groups(c, opt->profile, err);
    if (!rc && opt->accounting_only) mark_accounting_only(c, opt->run_rank);
    for (int r = 0; !rc && r < c->n; r++) c->running += runs(c, r);
    /* a slot (device, clock, trace: kilobytes) only for the ranks that run: a plan of 131,072
     * GPUs runs a handful */
    c->slots = rc ? NULL : calloc((size_t)c->running, sizeof *c->slots);
    if (!rc && !c->slots) rc = err_set(err, ERR_NOMEM, "out of memory creating %d ranks", c->n);
    for (int r = 0, i = 0; !rc && r < c->n; r++)
        if (runs(c, r)) init_slot(c, &c->slots[i++], r, fn, arg);
    return rc;
}

/* A thread for each rank that runs. If one cannot start, the ranks already running are told to
 * stop, so that joining them does not wait forever. */
static int cluster_start(Cluster *c, Err *err) {
    for (int i = 0; i < c->running; i++) {
        if (pthread_create(&c->slots[i].thread, NULL, rank_thread, &c->slots[i])) {
            abort_all(c, "a rank thread could not start");
            return err_set(err, ERR_INTERNAL, "could not start the thread of rank %d",
                           c->slots[i].env.rank);
        }
        c->slots[i].started = 1;
    }
    return 0;
}

static void cluster_join(Cluster *c) {
    for (int i = 0; c->slots && i < c->running; i++)
        if (c->slots[i].started) pthread_join(c->slots[i].thread, NULL);
}

/* The first failing rank's error: the root cause, a rank that failed other than by being
 * aborted, before those that were aborted because of it. */
static int rank_failure(const Cluster *c, Err *err) {
    for (int pass = 0; pass < 2; pass++)
        for (int i = 0; i < c->running; i++) {
            const RankSlot *s = &c->slots[i];
            if (s->rc && (pass || strncmp(s->err.msg, "aborted", 7) != 0)) {
                *err = s->err;
                return s->rc;
            }
        }
    return 0;
}

/* The stream checker's figures, summed; the lowest rank's first hazard fails the run. */
static int stream_check_outcome(const Cluster *c, ClusterResult *out, Err *err) {
    out->checked = c->checking;
    const char *first = NULL;
    for (int i = 0; c->checking && i < c->running; i++) {
        const StreamCheck *sc = &c->slots[i].dev.check;
        out->stream_accesses += sc->across;
        out->stream_hazards += sc->hazards;
        if (sc->hazards && !first) first = sc->first;
        if (sc->out_of_memory && !first) first = "out of memory following device memory";
    }
    return first ? err_set(err, ERR_INTERNAL, "stream check: %s", first) : 0;
}

/* The run's outcome: the first failing rank's error, else a stream hazard, else the ranks'
 * traces merged. */
static int cluster_collect(Cluster *c, ClusterResult *out, Err *err) {
    int rc = rank_failure(c, err);
    if (!rc) rc = stream_check_outcome(c, out, err);
    if (rc || !c->opt->trace) return rc;
    TraceBuf *bufs = calloc((size_t)c->running, sizeof *bufs);
    if (!bufs) return err_set(err, ERR_NOMEM, "out of memory merging the trace");
    for (int i = 0; i < c->running; i++) bufs[i] = c->slots[i].trace;
    rc = trace_merge(&out->trace, bufs, c->running, err);
    out->trace.accounting_only = c->opt->accounting_only;
    free(bufs);
    return rc;
}

static void cluster_destroy(Cluster *c) {
    for (int i = 0; c->slots && i < c->running; i++) {
        tracebuf_free(&c->slots[i].trace);
        device_sim_release(&c->slots[i].dev);
    }
    free(c->slots);
    destroy_groups(c);
}

int cluster_run(const ClusterOptions *opt, RankMain fn, void *arg, ClusterResult *out, Err *err) {
    memset(out, 0, sizeof *out);
    Cluster c;
    int rc = cluster_create(&c, opt, fn, arg, err);
    if (!rc) rc = cluster_start(&c, err);
    cluster_join(&c);
    if (!rc) rc = cluster_collect(&c, out, err);
    cluster_destroy(&c);
    return rc;
}

void cluster_result_free(ClusterResult *r) {
    trace_free(&r->trace);
}
