/* device_sim: the device interface for a simulated rank. Memory is host malloc, but every
 * byte is charged to the rank and a category (and traced), and time is the cost model's:
 * work advances the modelled clock of its stream, events carry modelled times. */
#ifndef FSDP_DEVICE_SIM_H
#define FSDP_DEVICE_SIM_H

#include "../core/device.h"
#include "../core/trace.h"
#include "comm_sim.h"
#include "cost.h"

typedef struct SimDevice {
    Device base;
    SimClock *clock;
    TraceBuf *trace; /* may be NULL */
    const Profile *profile;
    size_t in_use[MEM_CATEGORY_COUNT];
    size_t total, peak;
    size_t at_peak[MEM_CATEGORY_COUNT]; /* breakdown when the total peaked */
} SimDevice;

void device_sim_init(SimDevice *d, int rank, SimClock *clock, TraceBuf *trace,
                     const Profile *profile);

#endif
