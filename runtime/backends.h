/* backends: the real backends, each a library opened only when a command asks for it:
 * libfsdp_cuda.so (--backend cuda: runtime/gpu_run.h with kernels/cuda) and libfsdp_mpi.so
 * (--backend mpi: runtime/mpi_run.h), so the simulator, the planner and the lessons start
 * without loading CUDA (0.3 s and 150 MiB a process) or MPI. Compiled into the fsdp binary
 * whether or not either library was built. */
#ifndef FSDP_BACKENDS_H
#define FSDP_BACKENDS_H

#include "sim/cluster.h"

typedef enum { REAL_CUDA = 0, REAL_MPI, REAL_BACKEND_COUNT } RealBackend;

/* Whether this process can run on backend b; if not, why (a few words): this fsdp was built
 * without it, its library did not load, or the library's own reason. */
int backend_available(RealBackend b, char *why, size_t n);

/* Runs fn on backend b (gpu_run or fsdp_mpi_run of its library); call after backend_available
 * said yes. */
int backend_run(RealBackend b, const ClusterOptions *opt, RankMain fn, void *arg,
                ClusterResult *out, Err *err);

#endif
