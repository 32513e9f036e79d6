/* clock: seconds on the monotonic clock, for wall-clock timing and deadlines (modelled time is
 * the device's). Header-only, so every layer and tool can use the one definition. */
#ifndef FSDP_CLOCK_H
#define FSDP_CLOCK_H

#include <time.h>

static inline double clock_seconds(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

#endif
