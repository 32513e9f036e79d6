/* launch: `fsdp launch`, what torchrun does on one node. It starts --nproc-per-node copies of
 * any command, each with the variables torchrun sets (RANK, WORLD_SIZE, LOCAL_RANK, ...), waits
 * for them, and when one fails stops the others and, with --max-restarts, starts them all
 * again. Processes and signals only: no GPU, no sockets. */
#ifndef FSDP_LAUNCH_H
#define FSDP_LAUNCH_H

#include <stdio.h>

#include "engine/err.h"

#define LAUNCH_MAX_NPROC 1024

typedef struct LaunchArgs {
    int nproc_per_node, nnodes, node_rank;
    char master_addr[256];
    int master_port;
    int max_restarts;
    double kill_after_s; /* from SIGTERM to SIGKILL when the others are stopped */
    char **command;      /* the command and its arguments, NULL-terminated */
} LaunchArgs;

void launch_help(FILE *f);

/* argv[0] is the first word after "launch", and argv[argc] is NULL (as main's argv). Flags are
 * torchrun's, with - or _ and with or without `=`; the command starts after `--` or at the
 * first word that is not a flag. Returns 0, 1 for --help, or ERR_USAGE with one line. */
int launch_args_parse(LaunchArgs *a, int argc, char **argv, Err *err);

/* Whether execvp would find the command: asked once, so that a typo is one line and exit 127
 * (126: found but not executable) instead of one line per rank. */
int launch_command_runnable(const char *command, int *exit_status, Err *err);

/* Runs the job to its end, writing what happened to the ranks (one line each time) to `log`.
 * *exit_status: 0 when every rank exited 0; else the failed rank's status (128 + the signal
 * that killed it, as shells say), or 128 + the signal that stopped the launcher. Returns 0,
 * or an error code when a rank could not even be started. */
int launch_run(const LaunchArgs *a, FILE *log, int *exit_status, Err *err);

/* `fsdp launch ARGS`: returns the exit status (2 for bad flags, with one line on stderr). */
int launch_command(int argc, char **argv);

#endif
