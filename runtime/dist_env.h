/* dist_env: where this process sits in a job, read from the variables its launcher set
 * (torchrun or `fsdp launch`, Open MPI's mpirun, Slurm's srun): rank, world size, local rank,
 * local world size, and where rank 0 serves the rendezvous. Reads the environment only. */
#ifndef FSDP_DIST_ENV_H
#define FSDP_DIST_ENV_H

#include "base/err.h"

/* Which launcher's variables were read. `fsdp launch` sets torchrun's. */
typedef enum { LAUNCHER_NONE = 0, LAUNCHER_TORCHRUN, LAUNCHER_OPENMPI, LAUNCHER_SLURM } Launcher;

#define DIST_DEFAULT_ADDR "127.0.0.1"
#define DIST_DEFAULT_PORT 29500 /* torchrun's default --master-port */
#define DIST_MAX_WORLD 1000000

typedef struct DistEnv {
    Launcher launcher;
    int rank, world_size;             /* 0 <= rank < world_size */
    int local_rank, local_world_size; /* on this node: which GPU, and how many ranks share it */
    char master_addr[256];            /* rank 0's host, as the others reach it */
    int master_port;
} DistEnv;

/* getenv, or a stand-in for tests: the value of `name`, NULL when unset. */
typedef const char *(*EnvLookup)(void *user, const char *name);

/* Reads the job's shape through `lookup`. The launcher that started this very process wins
 * when several left variables: torchrun's (RANK, WORLD_SIZE) first, then Open MPI's
 * (OMPI_COMM_WORLD_*), then Slurm's (SLURM_PROCID, SLURM_NTASKS): torchrun runs inside srun
 * and mpirun inside a Slurm allocation, never the other way round. None set: rank 0 of 1.
 * A bad value (not a number, rank >= world, a port out of range) is ERR_USAGE naming the
 * variable. */
int dist_env_read(DistEnv *env, EnvLookup lookup, void *user, Err *err);

/* dist_env_read over this process's environment. */
int dist_env_from_process(DistEnv *env, Err *err);
/* The same without where rank 0 serves (master_addr and master_port keep their defaults), for
 * a backend that wires its ranks itself: MPI's ranks over several nodes need no MASTER_ADDR. */
int dist_env_shape_from_process(DistEnv *env, Err *err);

/* "torchrun", "openmpi", "slurm" or "none", for messages. */
const char *launcher_name(Launcher launcher);

#endif
