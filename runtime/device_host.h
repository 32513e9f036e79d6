/* device_host: the device of a rank that runs in its own process on CPUs (--backend mpi). Memory
 * is this process's heap, charged to categories as the simulator charges it; time is the wall
 * clock, and the process's peak resident memory is measured beside the accounted bytes. */
#ifndef FSDP_DEVICE_HOST_H
#define FSDP_DEVICE_HOST_H

#include "engine/device.h"
#include "engine/trace.h"

typedef struct HostDevice {
    Device base;     /* its memory: every byte charged, as in the simulator */
    TraceBuf *trace; /* may be NULL */
    double t0;       /* clock_seconds() at creation: the trace's zero */
    /* The end of the last traced span. One thread runs every stream's work in order, so a
     * span runs from here to the moment its work is handed to run. */
    double mark;
    /* Called after each piece of work, so that collectives in flight make progress while the
     * rank computes (MPI progresses a non-blocking collective only inside its own calls). */
    void (*progress)(void *ctx);
    void *progress_ctx;
} HostDevice;

void device_host_init(HostDevice *d, int rank, TraceBuf *trace);
/* This process's peak resident memory so far, in bytes (getrusage). */
size_t device_host_resident_peak(void);

#endif
