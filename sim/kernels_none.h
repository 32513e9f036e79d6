/* kernels_none: the op table of accounting-only runs. Every op does nothing (a sum is 0, every
 * value finite, no sample right), so the engine's whole schedule runs, allocating, freeing,
 * communicating and charging modelled time from the models' work estimates, on devices that
 * hold no data: how the simulator sizes models far larger than this machine's memory. */
#ifndef FSDP_KERNELS_NONE_H
#define FSDP_KERNELS_NONE_H

#include "kernels/kernels.h"

extern const Kernels kernels_none;

#endif
