/* comm_mpi: the comm interface on MPI (Open MPI), one process per rank on CPUs, every buffer in
 * host memory. Each collective is MPI's non-blocking form, so start returns at once and wait is
 * MPI_Wait. */
#ifndef FSDP_COMM_MPI_H
#define FSDP_COMM_MPI_H

#include <mpi.h>

#include "engine/comm.h"
#include "engine/plan.h"
#include "runtime/device_host.h"

/* Reductions: REDUCE_SUM and REDUCE_MAX are MPI_SUM and MPI_MAX; REDUCE_AVG is MPI_SUM, then a
 * division by the size in fp32 on each rank's own output after MPI_Wait (in wait, before any
 * rounding). MPI has no bf16 or fp16: such a reduction widens its input to fp32 (exact), MPI
 * reduces in fp32, and wait rounds once into the output, the simulator's rule, so the two agree
 * bit for bit whenever the fp32 sum is exact (MPI may add in another order than the
 * simulator's rank order; an inexact fp32 sum may then differ before the one rounding).
 * Gathers and broadcasts of 16-bit types move the bits as they are.
 * `done` stays zero but for its time, the moment wait saw it complete: a host device has no
 * stream to order. base.dev is NULL. */
typedef struct MpiComm {
    Comm base;
    MPI_Comm mpi; /* owned: a duplicate or a split, errors returned (MPI_ERRORS_RETURN) */
    long seq;
    /* Set by the caller after create (a split takes its parent's): */
    HostDevice *dev;   /* times are its clock's, collectives go into its trace; NULL: none */
    double timeout;    /* seconds a wait may last before it fails naming the collective; 0: none */
    const Plan *names; /* names units in that message; NULL: "unit N" */
} MpiComm;

/* A communicator over the ranks of `parent` (MPI_COMM_WORLD for the world), duplicated so that
 * the engine's traffic never matches anyone else's. Collective over parent's ranks; MPI must
 * be initialized. */
int comm_mpi_create(MpiComm *c, MPI_Comm parent, Err *err);
/* A sub-communicator of parent's ranks with the same color, ordered by key (hsdp's shard and
 * replica groups), MPI_Comm_split. Collective over the parent's ranks. */
int comm_mpi_split(MpiComm *c, MpiComm *parent, int color, int key, Err *err);
void comm_mpi_destroy(MpiComm *c);
/* Lets MPI move the collectives in flight (a HostDevice's progress hook; ctx unused): Open MPI
 * advances a non-blocking collective only inside its own calls. */
void comm_mpi_progress(void *ctx);

#endif
