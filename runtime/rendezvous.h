/* rendezvous: how the processes of a job first meet. Rank 0 serves at MASTER_ADDR:MASTER_PORT,
 * every other rank connects and says who it is, and once all have arrived rank 0 hands each
 * one blob (NCCL's ncclUniqueId, 128 bytes). Plain TCP with a deadline on every wait; the
 * error of a failed meeting names who never came or who disagreed. */
#ifndef FSDP_RENDEZVOUS_H
#define FSDP_RENDEZVOUS_H

#include <stddef.h>

#include "base/err.h"
#include "runtime/dist_env.h"

/* Rank 0 sends blob[n] to every other rank, whose blob[n] it fills; every rank returns only
 * once all world_size ranks have arrived (a barrier), or fails: rank 0 after timeout_s
 * seconds, the others at most timeout_s after reaching rank 0 (so that they hear its reason),
 * or timeout_s without reaching it. A world of one returns at once. Errors (ERR_IO) are one
 * line:
 *   rank 0:  "rendezvous at 127.0.0.1:29500 timed out after 2.0 s: ranks 2, 3 never arrived",
 *            "... rank 3 believes the world has 3 ranks, rank 0 that it has 4", a rank seen
 *            twice, a rank out of range, the port taken;
 *   others:  "... rank 0 was not reachable (Connection refused)", or rank 0's reason when it
 *            refused the meeting. */
int rendezvous_exchange(const DistEnv *env, void *blob, size_t n, double timeout_s, Err *err);

#endif
