/* watchdog: never hang on a collective. Every NCCL collective a rank enqueues is noted with an
 * event recorded after it on the comm stream, and every host call that can block on one (the
 * NCCL call itself, which may connect to peers lazily; a copy of a host scalar; a stream wait;
 * communicator creation) is noted before it starts. A thread checks both every 50 ms and, once
 * one has run longer than the timeout, aborts the communicators (ncclCommAbort), says which
 * rank, unit and collective hung, and exits the process non-zero: a hung peer cannot be waited
 * out, and the launcher then stops or restarts the group. */
#ifndef FSDP_WATCHDOG_H
#define FSDP_WATCHDOG_H

#include <nccl.h>

#include "base/err.h"
#include "engine/comm.h"

typedef struct Watchdog Watchdog;

/* Starts the thread for this process's rank on CUDA device `device`; timeout in seconds. */
int watchdog_start(Watchdog **out, int rank, int device, double timeout_s, Err *err);
/* A communicator the watchdog aborts when it fires. */
void watchdog_add_comm(Watchdog *w, ncclComm_t comm);
/* Notes a collective just enqueued on `stream` (a cudaStream_t). */
int watchdog_track(Watchdog *w, void *stream, CollKind kind, int unit, Err *err);
/* Notes that this thread is about to make a call that may block until peers take part in
 * `kind` of `unit` (`what` names a call that is no collective, such as "ncclCommInitRank", else
 * NULL); the timeout runs from here until watchdog_call_end, so a call that never returns is
 * caught. Nested calls keep the outermost's start. No-ops when `w` is NULL. */
void watchdog_call_begin(Watchdog *w, CollKind kind, int unit, const char *what);
void watchdog_call_end(Watchdog *w);
/* Stops the thread; collectives still in flight are no longer watched. */
void watchdog_stop(Watchdog *w);

#endif
