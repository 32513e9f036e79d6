/* rank_process: one process per rank, the part of a real job every backend runs alike: the
 * world checked against --ranks, hsdp's groups split off, the rank-main run, the traces
 * gathered (runtime/rank_process.h). */
#include "runtime/rank_process.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "io/nvme_tier.h"

void rank_hsdp_colors(int rank, int world, int replicas, int *shard_color, int *replica_color) {
    int S = world / replicas;
    *shard_color = rank / S;
    *replica_color = rank % S;
}

/* Every rank's trace events into out on every rank: how many each has, then each rank's padded
 * to the most any has. */
static int gather_trace(const RankEnv *env, const TraceBuf *mine, Trace *out, Err *err) {
    _Static_assert(sizeof(TraceEvent) % sizeof(float) == 0, "events travel as 4-byte words");
    int world = env->world;
    if (mine->n > UINT32_MAX)
        return err_set(err, ERR_USAGE, "rank %d: %zu trace events are too many to gather",
                       env->rank, mine->n);
    uint32_t count = (uint32_t)mine->n, *counts = calloc((size_t)world, sizeof *counts);
    TraceBuf *bufs = calloc((size_t)world, sizeof *bufs);
    int rc = counts && bufs
                 ? comm_all_gather_host(env->world_comm, env->dev, &count, 1, counts, err)
                 : err_set(err, ERR_NOMEM, "out of memory gathering the trace");
    size_t most = 0;
    for (int r = 0; !rc && r < world; r++)
        if (counts[r] > most) most = counts[r];
    size_t words = most * sizeof(TraceEvent) / sizeof(float);
    TraceEvent *padded = rc ? NULL : calloc(most + 1, sizeof *padded);
    TraceEvent *all = rc ? NULL : calloc(most * (size_t)world + 1, sizeof *all);
    if (!rc && (!padded || !all))
        rc = err_set(err, ERR_NOMEM, "out of memory gathering %zu trace events", most);
    if (!rc && mine->n) memcpy(padded, mine->ev, mine->n * sizeof *padded);
    if (!rc && words) rc = comm_all_gather_host(env->world_comm, env->dev, padded, words, all, err);
    for (int r = 0; !rc && r < world; r++)
        bufs[r] = (TraceBuf){.ev = all + most * (size_t)r, .n = counts[r], .rank = r};
    if (!rc) rc = trace_merge(out, bufs, world, err);
    free(all);
    free(padded);
    free(bufs);
    free(counts);
    return rc;
}

static int world_matches(const RankBackend *b, const ClusterOptions *opt, int rank, int world,
                         Err *err) {
    if (opt->ranks == world) return 0;
    if (world == 1)
        return err_set(err, ERR_USAGE,
                       "--ranks %d: --backend %s runs one rank per process and this process is "
                       "alone; start %d with %s",
                       opt->ranks, b->name, opt->ranks, b->start);
    return err_set(err, ERR_USAGE, "--ranks %d: this is rank %d of %d processes; pass --ranks %d",
                   opt->ranks, rank, world, world);
}

/* hsdp's shard and replica communicators, split off the world. */
static int split_groups(const RankBackend *b, const ClusterOptions *opt, RankEnv *env, Err *err) {
    if (opt->replicas <= 1) return 0;
    int shard_color, replica_color;
    rank_hsdp_colors(env->rank, env->world, opt->replicas, &shard_color, &replica_color);
    int rc = b->split(b->self, env->world_comm, shard_color, env->rank, &env->shard_comm, err);
    if (rc) env->shard_comm = env->world_comm;
    if (!rc)
        rc = b->split(b->self, env->world_comm, replica_color, env->rank, &env->replica_comm, err);
    return rc;
}

int rank_process_run(const RankBackend *b, const ClusterOptions *opt, RankMain fn, void *arg,
                     ClusterResult *out, Err *err) {
    memset(out, 0, sizeof *out);
    int rank = 0, world = 1;
    int rc = b->join(b->self, &rank, &world, err);
    if (!rc) rc = world_matches(b, opt, rank, world, err);
    if (rc) return rc;
    TraceBuf trace;
    tracebuf_init(&trace, rank, opt->trace);
    RankParts p = {0};
    rc = b->open(b->self, rank, world, opt, &trace, &p, err);
    RankEnv env = {.rank = rank,
                   .world = world,
                   .dev = p.dev,
                   .k = p.k,
                   .world_comm = p.world,
                   .shard_comm = p.world,
                   .trace = &trace,
                   .tier = &nvme_tier_ops};
    if (!rc) rc = split_groups(b, opt, &env, err);
    if (!rc) rc = b->run(b->self, &env, fn, arg, err);
    trace.enabled = 0; /* gathering is not the job's: its own allocations are not recorded */
    if (!rc && opt->trace) rc = gather_trace(&env, &trace, &out->trace, err);
    if (env.replica_comm) b->close_comm(b->self, env.replica_comm);
    if (env.shard_comm && env.shard_comm != env.world_comm) b->close_comm(b->self, env.shard_comm);
    b->close(b->self, &p);
    tracebuf_free(&trace);
    return rc;
}
