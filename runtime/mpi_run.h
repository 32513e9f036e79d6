/* mpi_run: --backend mpi, a training job of one process per rank on CPUs under mpirun or srun:
 * each process is one rank of MPI_COMM_WORLD on a host device (runtime/device_host.h) with the
 * CPU kernels and MPI's communicators, run by the runner the GPU backend shares
 * (runtime/rank_process.h). Built into libfsdp_mpi.so, which fsdp opens on first use. */
#ifndef FSDP_MPI_RUN_H
#define FSDP_MPI_RUN_H

#include "sim/cluster.h"

/* Whether MPI can be used here; if not, why (a few words). */
int fsdp_mpi_available(char *why, size_t n);

/* Runs fn as this process's rank (MPI_Init on the first call; MPI_Finalize once the job has
 * ended well; a failed rank leaves MPI as it is, exits non-zero, and mpirun ends the others).
 * opt->timeout bounds every wait on a collective. With opt->trace, out->trace holds every
 * rank's events. */
int fsdp_mpi_run(const ClusterOptions *opt, RankMain fn, void *arg, ClusterResult *out, Err *err);

#endif
