/* device_sim: the device interface for a simulated rank. Memory is host malloc, but every
 * byte is charged to the rank and a category (and traced), and time is the cost model's:
 * work advances the modelled clock of its stream, events carry modelled times. Freed blocks
 * are kept for reuse by the next request of the same size, as PyTorch's caching allocator
 * does on a GPU: a training step asks for the same sizes every time, and handing big blocks
 * back to the OS only to fault them in again cost a third of a ViT step. */
#ifndef FSDP_DEVICE_SIM_H
#define FSDP_DEVICE_SIM_H

#include "engine/device.h"
#include "engine/trace.h"
#include "sim/comm_sim.h"
#include "sim/cost.h"
#include "sim/kernels_checked.h"
#include "sim/stream_check.h"

/* Freed blocks of one size, waiting to be reused. */
typedef struct SimBlockCache {
    size_t bytes;
    void *head; /* a list threaded through the blocks' headers */
} SimBlockCache;

enum { SIM_CACHE_SIZES = 64 };

typedef struct SimDevice {
    Device base; /* its memory: every byte charged */
    SimClock *clock;
    TraceBuf *trace; /* may be NULL */
    const Profile *profile;
    SimBlockCache cache[SIM_CACHE_SIZES];
    int ncache;
    size_t cached; /* bytes held in the cache: resident, not charged to any category */
    int checking;  /* the stream checker follows this device's memory (device_sim_check) */
    /* 1: kernels were launched on the stream (DeviceOps.launched) since its last work, event or
     * idling wait, from launched_from on: the next work's trace event begins there, as a GPU's
     * trace times it, or, where an event or a wait comes first, the last one's (last_work: its
     * index in the trace, -1 none) ends after them */
    int launched[STREAM_COUNT];
    double launched_from[STREAM_COUNT];
    long last_work[STREAM_COUNT];
    StreamCheck check;
} SimDevice;

void device_sim_init(SimDevice *d, int rank, SimClock *clock, TraceBuf *trace,
                     const Profile *profile);
/* Accounting only: every allocation is charged as usual but holds no data (a header), and
 * copies move nothing; for runs of models too big to hold, with the no-op kernel table. */
void device_sim_accounting_only(SimDevice *d);
/* Turns the stream checker on: every allocation, free, copy, event, wait, declared access and
 * (through kernels_checked, bound with device_sim_kernel_access and this device) kernel access
 * is checked; unit_name(user, u) names units in its messages. */
void device_sim_check(SimDevice *d, const char *(*unit_name)(void *user, int unit), void *user);
/* kernels_checked's callback for a device with the checker on (ctx: the SimDevice): kernels
 * run on the compute stream; those that return a value make the host wait for it. */
void device_sim_kernel_access(void *ctx, const char *op, const KernelAccess *acc, int n);
/* Returns the cached blocks to the system. Blocks still allocated stay the caller's. */
void device_sim_release(SimDevice *d);

#endif
