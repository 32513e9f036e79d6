#include "gpu_run.h"

#include <cuda_runtime_api.h>
#include <string.h>

#include "../kernels/cuda/kernels_cuda.h"
#include "comm_local.h"

int gpu_available(char *why, size_t n) {
    return kernels_cuda_available(why, n);
}

/* The rank's own failure first, then what CUDA says went wrong under it. */
static int run_rank(CudaDevice *dev, TraceBuf *trace, RankMain fn, void *arg, Err *err) {
    LocalComm world;
    comm_local_init(&world, dev);
    RankEnv env = {.rank = 0,
                   .world = 1,
                   .dev = device_cuda_base(dev),
                   .k = &kernels_cuda,
                   .world_comm = &world.base,
                   .shard_comm = &world.base,
                   .trace = trace};
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

int gpu_run(const ClusterOptions *opt, RankMain fn, void *arg, ClusterResult *out, Err *err) {
    memset(out, 0, sizeof *out);
    char why[128];
    if (!gpu_available(why, sizeof why))
        return err_set(err, ERR_USAGE, "--backend cuda: no GPU here (%s)", why);
    if (opt->ranks != 1)
        return err_set(err, ERR_USAGE,
                       "--backend cuda runs one GPU for now: use --ranks 1 (got %d); many GPUs "
                       "come with NCCL",
                       opt->ranks);
    cudaError_t e = cudaSetDevice(0);
    if (e != cudaSuccess)
        return err_set(err, ERR_INTERNAL, "cudaSetDevice(0): %s", cudaGetErrorString(e));
    TraceBuf trace;
    tracebuf_init(&trace, 0, opt->trace);
    CudaDevice *dev = NULL;
    int rc = device_cuda_create(&dev, 0, &trace, err);
    if (!rc) rc = run_rank(dev, &trace, fn, arg, err);
    device_cuda_destroy(dev); /* resolves the last trace spans */
    if (!rc && opt->trace) rc = trace_merge(&out->trace, &trace, 1, err);
    tracebuf_free(&trace);
    return rc;
}
