/* comm_nccl: the comm interface on NCCL, one process per GPU. Collectives run on the device's
 * comm stream: the engine orders each after the compute it needs and makes compute wait on
 * its `done` event, so prefetched gathers and reductions overlap compute for real. Host
 * scalars (the loss, a norm, an overflow flag) travel through a small device buffer. Every
 * collective is handed to the watchdog, which aborts the communicators if one hangs. */
#ifndef FSDP_COMM_NCCL_H
#define FSDP_COMM_NCCL_H

#include <nccl.h>

#include "engine/comm.h"
#include "runtime/device_cuda.h"
#include "runtime/watchdog.h"

typedef struct NcclComm {
    Comm base;
    CudaDevice *dev;
    ncclComm_t nccl;
    Watchdog *watchdog;
    void *scratch; /* device staging for collectives on host memory */
    long seq;
} NcclComm;

/* The world communicator: rank `rank` of `size`, all holding the same unique id (rank 0's
 * ncclGetUniqueId, carried by runtime/rendezvous.c). */
int comm_nccl_create(NcclComm *c, CudaDevice *dev, Watchdog *w, const ncclUniqueId *id, int rank,
                     int size, Err *err);
/* A sub-communicator of the ranks with the same color, ordered by key (hsdp's shard and
 * replica groups). Collective over the parent's ranks. */
int comm_nccl_split(NcclComm *c, NcclComm *parent, int color, int key, Err *err);
void comm_nccl_destroy(NcclComm *c);

#endif
