/* gpu_backend: the GPU backend, loaded only when a command asks for a GPU. runtime/ and
 * kernels/cuda are linked into libfsdp_cuda.so, which this opens on first use, so the
 * simulator, the planner and the lessons start without loading the CUDA libraries (0.3 s and
 * 150 MiB a process). Compiled into the fsdp binary whether or not CUDA was built. */
#ifndef FSDP_GPU_BACKEND_H
#define FSDP_GPU_BACKEND_H

#include "sim/cluster.h"

/* Whether this process can run on a GPU; if not, why (a few words): this fsdp was built
 * without CUDA, its backend did not load, or gpu_available's own reason. */
int gpu_backend_available(char *why, size_t n);

/* gpu_run (runtime/gpu_run.h) of the loaded backend; call after gpu_backend_available said
 * yes. */
int gpu_backend_run(const ClusterOptions *opt, RankMain fn, void *arg, ClusterResult *out,
                    Err *err);

#endif
