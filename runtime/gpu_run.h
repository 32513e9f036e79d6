/* gpu_run: a training job on this machine's GPU, the real-hardware twin of sim/cluster.c. It
 * builds what a rank runs on (CUDA device, the kernels_cuda table bound to the compute stream,
 * communicators) and runs the same rank-main the simulator runs. One GPU for now: a world of
 * one rank, whose collectives are copies (comm_local); many GPUs come with NCCL. */
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
