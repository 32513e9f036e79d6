/* gpu_run: --backend cuda on the shared one-process-per-rank runner (runtime/rank_process.h):
 * where the rank comes from (its launcher's variables), which device (this process's GPU) and
 * which communicators (NCCL's, or a copy for a world of one). */
#include "runtime/gpu_run.h"

#include <cuda_runtime_api.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "kernels/cuda/kernels_cuda.h"
#include "runtime/comm_local.h"
#include "runtime/comm_nccl.h"
#include "runtime/dist_env.h"
#include "runtime/rank_process.h"
#include "runtime/rendezvous.h"

int gpu_available(char *why, size_t n) {
    return kernels_cuda_available(why, n);
}

typedef struct GpuRank {
    DistEnv env;
    int device;
    CudaDevice *dev;
    Watchdog *watchdog;
    NcclComm world;  /* many processes */
    LocalComm alone; /* a world of one */
} GpuRank;

static int gpu_join(void *self, int *rank, int *world, Err *err) {
    GpuRank *g = self;
    int rc = dist_env_from_process(&g->env, err);
    *rank = g->env.rank;
    *world = g->env.world_size;
    return rc;
}

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

/* The op table a rank computes with: kernels_cuda, or with FSDP_CUDA_UNVERIFIED=1 the forms no
 * GPU has validated yet (bf16/fp16 compute, flash attention past 256 tokens), for measuring them
 * in the session that tests them. */
static const Kernels *cuda_table(void) {
    const char *e = getenv("FSDP_CUDA_UNVERIFIED");
    return e && !strcmp(e, "1") ? &kernels_cuda_unverified : &kernels_cuda;
}

/* The world's NCCL communicator: rank 0's unique id carried to every rank by the rendezvous,
 * and a watchdog that aborts it if a collective hangs. */
static int open_nccl_world(GpuRank *g, const ClusterOptions *opt, Err *err) {
    ncclUniqueId id;
    memset(&id, 0, sizeof id);
    int rc = 0;
    if (g->env.rank == 0) {
        ncclResult_t r = ncclGetUniqueId(&id);
        if (r != ncclSuccess)
            rc = err_set(err, ERR_INTERNAL, "ncclGetUniqueId: %s", ncclGetErrorString(r));
    }
    if (!rc) rc = rendezvous_exchange(&g->env, &id, sizeof id, 120.0, err);
    if (!rc)
        rc = watchdog_start(&g->watchdog, g->env.rank, g->device,
                            opt->timeout > 0 ? opt->timeout : 600, err);
    if (!rc)
        rc = comm_nccl_create(&g->world, g->dev, g->watchdog, &id, g->env.rank, g->env.world_size,
                              err);
    return rc;
}

static int gpu_open(void *self, int rank, int world, const ClusterOptions *opt, TraceBuf *trace,
                    RankParts *p, Err *err) {
    GpuRank *g = self;
    kernels_cuda_allow_tf32(opt->tf32);
    int rc = pick_gpu(&g->env, &g->device, err);
    if (!rc) rc = device_cuda_create(&g->dev, rank, trace, err);
    if (rc) return rc;
    Comm *c = &g->alone.base;
    if (world > 1) {
        rc = open_nccl_world(g, opt, err);
        c = &g->world.base;
    } else {
        comm_local_init(&g->alone, g->dev);
    }
    c->dev = device_cuda_base(g->dev); /* blocking collectives order themselves on its streams */
    *p = (RankParts){.dev = device_cuda_base(g->dev), .k = cuda_table(), .world = rc ? NULL : c};
    return rc;
}

static int gpu_split(void *self, Comm *parent, int color, int key, Comm **out, Err *err) {
    (void)self;
    NcclComm *c = calloc(1, sizeof *c);
    if (!c) return err_set(err, ERR_NOMEM, "out of memory splitting a communicator");
    int rc = comm_nccl_split(c, parent->impl, color, key, err);
    if (rc) {
        free(c);
        return rc;
    }
    c->base.dev = parent->dev;
    *out = &c->base;
    return 0;
}

/* The rank's own failure first, then what CUDA says went wrong under it; returns once nothing
 * of the rank's is in flight and every span is in the trace. */
static int gpu_rank_main(void *self, const RankEnv *env, RankMain fn, void *arg, Err *err) {
    GpuRank *g = self;
    int rc = kernels_cuda_bind(device_cuda_stream(g->dev, STREAM_COMPUTE), err);
    if (!rc) rc = fn(env, arg, err);
    device_cuda_settle(g->dev);
    Err cuda = {0};
    if (kernels_cuda_status(&cuda) || device_cuda_status(g->dev, &cuda)) {
        if (!rc) *err = cuda;
        rc = rc ? rc : ERR_INTERNAL;
    }
    kernels_cuda_unbind();
    return rc;
}

static void gpu_close_comm(void *self, Comm *c) {
    (void)self;
    comm_nccl_destroy(c->impl);
    free(c->impl);
}

static void gpu_close(void *self, RankParts *p) {
    GpuRank *g = self;
    watchdog_stop(g->watchdog);
    if (p->world == &g->world.base) comm_nccl_destroy(&g->world);
    device_cuda_destroy(g->dev);
}

int gpu_run(const ClusterOptions *opt, RankMain fn, void *arg, ClusterResult *out, Err *err) {
    memset(out, 0, sizeof *out);
    char why[128];
    if (!gpu_available(why, sizeof why))
        return err_set(err, ERR_USAGE, "--backend cuda: no GPU here (%s)", why);
    GpuRank g = {0};
    RankBackend b = {.name = "cuda",
                     .start = "./fsdp launch --nproc-per-node N (or torchrun, srun, mpirun)",
                     .self = &g,
                     RANK_BACKEND_NAMED(gpu)};
    return rank_process_run(&b, opt, fn, arg, out, err);
}
