/* gpu_run: --backend cuda, a training job of one process per GPU, the real-hardware twin of
 * sim/cluster.c: what a rank runs on (a CUDA device, the kernels_cuda table bound to its compute
 * stream, NCCL's communicators, or copies for a world of one) under the runner the MPI backend
 * shares (runtime/rank_process.h). Built into libfsdp_cuda.so. */
#ifndef FSDP_GPU_RUN_H
#define FSDP_GPU_RUN_H

#include "sim/cluster.h"

/* Whether this process can run on a GPU; if not, why (a few words). */
int gpu_available(char *why, size_t n);

/* Runs fn on this process's rank: rank 0 of a one-GPU world, or, when the environment says
 * this process is one of many (torchrun, fsdp launch, srun, mpirun: runtime/dist_env.h), its
 * rank of opt->ranks on its LOCAL_RANK's GPU, with NCCL communicators (the unique id carried
 * by runtime/rendezvous.c) and a watchdog. The profile is ignored (times are measured);
 * out->trace holds this process's rank when opt->trace. */
int gpu_run(const ClusterOptions *opt, RankMain fn, void *arg, ClusterResult *out, Err *err);

#endif
