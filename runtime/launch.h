/* launch: `fsdp launch`, what torchrun does on one node. It starts --nproc-per-node copies of
 * any command, each with the variables torchrun sets (RANK, WORLD_SIZE, LOCAL_RANK, ...), waits
 * for them, and when one fails stops the others and, with --max-restarts, starts them all
 * again. Processes and signals only: no GPU, no sockets. */
#ifndef FSDP_LAUNCH_H
#define FSDP_LAUNCH_H

#include <stdio.h>

#include "base/err.h"

#define LAUNCH_MAX_NPROC 1024

typedef struct LaunchArgs {
    int nproc_per_node, nnodes, node_rank;
    char master_addr[256];
    int master_port;
    int max_restarts;
    double kill_after_s; /* from SIGTERM to SIGKILL when the others are stopped */
    char **command;      /* the command and its arguments, NULL-terminated */
} LaunchArgs;

/* Runs the job to its end, writing what happened to the ranks (one line each time) to `log`.
 * *exit_status: 0 when every rank exited 0; else the failed rank's status (128 + the signal
 * that killed it, as shells say), or 128 + the signal that stopped the launcher. Returns 0,
 * or an error code when a rank could not even be started. */
int launch_run(const LaunchArgs *a, FILE *log, int *exit_status, Err *err);

#endif
