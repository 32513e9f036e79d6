/* gpu_run: a training job on this machine's GPU, sim/cluster.c's real-hardware twin: the device,
 * kernel table and communicators a rank needs, then the simulator's own rank-main. */
#include "runtime/gpu_run.h"

#include <cuda_runtime_api.h>
#include <string.h>

#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

#include "kernels/cuda/kernels_cuda.h"
#include "runtime/comm_local.h"
#include "runtime/comm_nccl.h"
#include "runtime/dist_env.h"
#include "runtime/rendezvous.h"

int gpu_available(char *why, size_t n) {
    return kernels_cuda_available(why, n);
}

/* The rank's own failure first, then what CUDA says went wrong under it. */
static int run_rank(CudaDevice *dev, RankEnv env, RankMain fn, void *arg, Err *err) {
    int rc = kernels_cuda_bind(device_cuda_stream(dev, STREAM_COMPUTE), err);
    if (!rc) rc = fn(&env, arg, err);
    Err cuda = {0};
    if (kernels_cuda_status(&cuda) || device_cuda_status(dev, &cuda)) {
        if (!rc) *err = cuda;
        rc = rc ? rc : ERR_INTERNAL;
    }
    kernels_cuda_unbind();
    return rc;
}

static int run_one_gpu(const ClusterOptions *opt, RankMain fn, void *arg, ClusterResult *out,
                       Err *err) {
    if (opt->ranks != 1)
        return err_set(err, ERR_USAGE,
                       "--backend cuda in one process runs one GPU: use --ranks 1 (got %d), or "
                       "start one process per GPU with ./fsdp launch",
                       opt->ranks);
    cudaError_t e = cudaSetDevice(0);
    if (e != cudaSuccess)
        return err_set(err, ERR_INTERNAL, "cudaSetDevice(0): %s", cudaGetErrorString(e));
    TraceBuf trace;
    tracebuf_init(&trace, 0, opt->trace);
    CudaDevice *dev = NULL;
    int rc = device_cuda_create(&dev, 0, &trace, err);
    LocalComm world;
    if (!rc) {
        comm_local_init(&world, dev);
        world.base.dev = device_cuda_base(dev);
        RankEnv env = {.rank = 0,
                       .world = 1,
                       .dev = device_cuda_base(dev),
                       .k = &kernels_cuda,
                       .world_comm = &world.base,
                       .shard_comm = &world.base,
                       .trace = &trace};
        rc = run_rank(dev, env, fn, arg, err);
    }
    device_cuda_destroy(dev); /* resolves the last trace spans */
    if (!rc && opt->trace) rc = trace_merge(&out->trace, &trace, 1, err);
    tracebuf_free(&trace);
    return rc;
}

/* ---------------------------------------------------------------- one process per GPU */

/* This process's GPU: its LOCAL_RANK's. Ranks of one node that share a GPU (more ranks than
 * GPUs, as the tests do on one GPU) must look like different hosts to NCCL, which otherwise
 * refuses them ("Duplicate GPU detected"): each takes its own NCCL_HOSTID, and, when the whole
 * job is on this node, talks over sockets on lo; InfiniBand is off (NCCL_IB_DISABLE), since
 * "hosts" that share one adapter would otherwise try it. NCCL documents several ranks on one GPU
 * as unsupported: the first GPU run says whether this works (MPS is the fallback to try). */
static int pick_gpu(const DistEnv *env, int *device, Err *err) {
    int n = 0;
    cudaError_t e = cudaGetDeviceCount(&n);
    if (e != cudaSuccess || n < 1)
        return err_set(err, ERR_INTERNAL, "rank %d: no GPU: %s", env->rank, cudaGetErrorString(e));
    *device = env->local_rank % n;
    if (env->local_world_size > n) {
        char host[128] = "node", id[192];
        gethostname(host, sizeof host - 1);
        snprintf(id, sizeof id, "%s-fsdp-rank-%d", host, env->rank);
        setenv("NCCL_HOSTID", id, 0);
        setenv("NCCL_IB_DISABLE", "1", 0);
        if (env->local_world_size == env->world_size) setenv("NCCL_SOCKET_IFNAME", "lo", 0);
    }
    e = cudaSetDevice(*device);
    return e == cudaSuccess ? 0
                            : err_set(err, ERR_INTERNAL, "rank %d: cudaSetDevice(%d): %s",
                                      env->rank, *device, cudaGetErrorString(e));
}

/* The communicators of one rank: the world, and for hsdp its shard group (replicas groups of
 * S consecutive ranks) and replica group (the ranks with its shard rank), as sim/cluster.c
 * builds them. */
typedef struct RankComms {
    NcclComm world, shard, replica;
    int grouped;
} RankComms;

static int create_comms(RankComms *c, CudaDevice *dev, Watchdog *w, const ncclUniqueId *id,
                        const DistEnv *env, int replicas, Err *err) {
    int rc = comm_nccl_create(&c->world, dev, w, id, env->rank, env->world_size, err);
    if (rc || replicas <= 1) return rc;
    int S = env->world_size / replicas;
    c->grouped = 1;
    rc = comm_nccl_split(&c->shard, &c->world, env->rank / S, env->rank, err);
    return rc ? rc : comm_nccl_split(&c->replica, &c->world, env->rank % S, env->rank, err);
}

static void destroy_comms(RankComms *c) {
    if (c->grouped) {
        comm_nccl_destroy(&c->replica);
        comm_nccl_destroy(&c->shard);
    }
    comm_nccl_destroy(&c->world);
}

static int run_many_gpus(const ClusterOptions *opt, const DistEnv *denv, RankMain fn, void *arg,
                         ClusterResult *out, Err *err) {
    if (opt->ranks != denv->world_size)
        return err_set(err, ERR_USAGE,
                       "--ranks %d: this is rank %d of %d processes; pass --ranks %d", opt->ranks,
                       denv->rank, denv->world_size, denv->world_size);
    int device = 0;
    int rc = pick_gpu(denv, &device, err);
    ncclUniqueId id;
    memset(&id, 0, sizeof id);
    if (!rc && denv->rank == 0) {
        ncclResult_t r = ncclGetUniqueId(&id);
        if (r != ncclSuccess)
            rc = err_set(err, ERR_INTERNAL, "ncclGetUniqueId: %s", ncclGetErrorString(r));
    }
    if (!rc) rc = rendezvous_exchange(denv, &id, sizeof id, 120.0, err);
    if (rc) return rc;
    TraceBuf trace;
    tracebuf_init(&trace, denv->rank, opt->trace);
    CudaDevice *dev = NULL;
    Watchdog *w = NULL;
    RankComms comms = {0};
    rc = device_cuda_create(&dev, denv->rank, &trace, err);
    if (!rc)
        rc = watchdog_start(&w, denv->rank, device, opt->timeout > 0 ? opt->timeout : 600, err);
    if (!rc) rc = create_comms(&comms, dev, w, &id, denv, opt->replicas, err);
    if (!rc) /* the blocking collectives order themselves on this GPU's streams */
        comms.world.base.dev = comms.shard.base.dev = comms.replica.base.dev =
            device_cuda_base(dev);
    if (!rc) {
        RankEnv env = {.rank = denv->rank,
                       .world = denv->world_size,
                       .dev = device_cuda_base(dev),
                       .k = &kernels_cuda,
                       .world_comm = &comms.world.base,
                       .shard_comm = comms.grouped ? &comms.shard.base : &comms.world.base,
                       .replica_comm = comms.grouped ? &comms.replica.base : NULL,
                       .trace = &trace};
        rc = run_rank(dev, env, fn, arg, err);
        cudaDeviceSynchronize(); /* nothing of this rank's is still in flight */
    }
    watchdog_stop(w);
    destroy_comms(&comms);
    device_cuda_destroy(dev);
    if (!rc && opt->trace) rc = trace_merge(&out->trace, &trace, 1, err);
    tracebuf_free(&trace);
    return rc;
}

int gpu_run(const ClusterOptions *opt, RankMain fn, void *arg, ClusterResult *out, Err *err) {
    memset(out, 0, sizeof *out);
    char why[128];
    if (!gpu_available(why, sizeof why))
        return err_set(err, ERR_USAGE, "--backend cuda: no GPU here (%s)", why);
    DistEnv env;
    int rc = dist_env_from_process(&env, err);
    if (rc) return rc;
    return env.world_size > 1 ? run_many_gpus(opt, &env, fn, arg, out, err)
                              : run_one_gpu(opt, fn, arg, out, err);
}
