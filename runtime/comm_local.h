/* comm_local: the communicator of a world of one GPU. Every collective of a single rank is a
 * copy from send to recv (or nothing when they alias), enqueued on the compute stream so it is
 * ordered with the work around it, and traced like any collective. */
#ifndef FSDP_COMM_LOCAL_H
#define FSDP_COMM_LOCAL_H

#include "engine/comm.h"
#include "runtime/device_cuda.h"

typedef struct LocalComm {
    Comm base;
    CudaDevice *dev;
    long seq;
} LocalComm;

void comm_local_init(LocalComm *c, CudaDevice *dev);

#endif
