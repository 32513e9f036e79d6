/* watchdog: never hang on a collective. Every NCCL collective a rank enqueues is noted with an
 * event recorded after it on the comm stream; a thread checks the oldest unfinished one every
 * 50 ms and, once one has run longer than the timeout, aborts the communicators
 * (ncclCommAbort), says which rank, unit and collective hung, and exits the process non-zero:
 * a hung peer cannot be waited out, and the launcher then stops or restarts the group. */
#ifndef FSDP_WATCHDOG_H
#define FSDP_WATCHDOG_H

#include <nccl.h>

#include "engine/comm.h"
#include "engine/err.h"

typedef struct Watchdog Watchdog;

/* Starts the thread for this process's rank on CUDA device `device`; timeout in seconds. */
int watchdog_start(Watchdog **out, int rank, int device, double timeout_s, Err *err);
/* A communicator the watchdog aborts when it fires. */
void watchdog_add_comm(Watchdog *w, ncclComm_t comm);
/* Notes a collective just enqueued on `stream` (a cudaStream_t). */
int watchdog_track(Watchdog *w, void *stream, CollKind kind, int unit, Err *err);
/* Stops the thread; collectives still in flight are no longer watched. */
void watchdog_stop(Watchdog *w);

#endif
