/* dist_env: where this process sits in a job (rank, world size, local rank, rendezvous address),
 * read from what torchrun, `fsdp launch`, mpirun or srun set in the environment. */
#include "runtime/dist_env.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* The variables one launcher sets for each process it starts. `world_marks` says whether the
 * world size alone means this launcher started us: not for Slurm, whose salloc and sbatch
 * shells export SLURM_NTASKS for the whole allocation, while only srun's tasks get
 * SLURM_PROCID. Slurm has no local world size variable of its own (slurm_local_world). */
typedef struct LauncherVars {
    Launcher launcher;
    const char *rank, *world, *local_rank, *local_world;
    int world_marks;
} LauncherVars;

/* In precedence order (dist_env.h says why). */
static const LauncherVars LAUNCHERS[] = {
    {LAUNCHER_TORCHRUN, "RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE", 1},
    {LAUNCHER_OPENMPI, "OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE", "OMPI_COMM_WORLD_LOCAL_RANK",
     "OMPI_COMM_WORLD_LOCAL_SIZE", 1},
    {LAUNCHER_SLURM, "SLURM_PROCID", "SLURM_NTASKS", "SLURM_LOCALID", NULL, 0},
};

const char *launcher_name(Launcher launcher) {
    switch (launcher) {
    case LAUNCHER_TORCHRUN:
        return "torchrun";
    case LAUNCHER_OPENMPI:
        return "openmpi";
    case LAUNCHER_SLURM:
        return "slurm";
    default:
        return "none";
    }
}

static int parse_number(const char *name, const char *value, long lo, long hi, int *out, Err *err) {
    char *end;
    errno = 0;
    long x = strtol(value, &end, 10);
    if (end == value || *end || errno || x < lo || x > hi)
        return err_set(err, ERR_USAGE,
                       "environment variable %s must be an integer from %ld to %ld (got '%s')",
                       name, lo, hi, value);
    *out = (int)x;
    return 0;
}

static const LauncherVars *find_launcher(EnvLookup lookup, void *user) {
    for (size_t i = 0; i < sizeof LAUNCHERS / sizeof *LAUNCHERS; i++) {
        const LauncherVars *v = &LAUNCHERS[i];
        if (lookup(user, v->rank) || (v->world_marks && lookup(user, v->world))) return v;
    }
    return NULL;
}

static int read_world(DistEnv *env, const LauncherVars *v, EnvLookup lookup, void *user, Err *err) {
    const char *rank = lookup(user, v->rank), *world = lookup(user, v->world);
    if (!rank || !world)
        return err_set(
            err, ERR_USAGE, "environment variable %s is set but %s is not (%s sets both)",
            rank ? v->rank : v->world, rank ? v->world : v->rank, launcher_name(v->launcher));
    int rc = parse_number(v->world, world, 1, DIST_MAX_WORLD, &env->world_size, err);
    if (!rc) rc = parse_number(v->rank, rank, 0, DIST_MAX_WORLD, &env->rank, err);
    if (!rc && env->rank >= env->world_size)
        rc = err_set(err, ERR_USAGE, "environment variable %s=%d must be below %s=%d", v->rank,
                     env->rank, v->world, env->world_size);
    return rc;
}

/* Entry `node` of a Slurm task count list: "2(x3),1" is two tasks on each of the first three
 * nodes and one on the fourth. */
static int tasks_on_node(const char *list, int node, int *out, Err *err) {
    const char *p = list;
    long nodes_before = 0;
    while (*p) {
        char *end;
        long count = strtol(p, &end, 10), repeat = 1;
        if (end == p || count < 1 || count > DIST_MAX_WORLD) break;
        p = end;
        if (p[0] == '(' && p[1] == 'x') {
            repeat = strtol(p + 2, &end, 10);
            if (end == p + 2 || *end != ')' || repeat < 1 || repeat > DIST_MAX_WORLD) break;
            p = end + 1;
        }
        if (node < nodes_before + repeat) {
            *out = (int)count;
            return 0;
        }
        nodes_before += repeat;
        if (*p == ',')
            p++;
        else if (*p)
            break;
        else
            return err_set(err, ERR_USAGE,
                           "environment variable SLURM_TASKS_PER_NODE='%s' lists %ld nodes, but "
                           "SLURM_NODEID is %d",
                           list, nodes_before, node);
    }
    return err_set(err, ERR_USAGE,
                   "environment variable SLURM_TASKS_PER_NODE must be task counts like 2(x3),1 "
                   "(got '%s')",
                   list);
}

/* Slurm's ranks on this node: SLURM_NTASKS_PER_NODE when the job asked for a fixed count, else
 * this node's entry (SLURM_NODEID, first when unset) of SLURM_TASKS_PER_NODE; neither: the
 * caller's default. *name is the variable it came from, for messages. */
static int slurm_local_world(DistEnv *env, EnvLookup lookup, void *user, const char **name,
                             Err *err) {
    const char *fixed = lookup(user, "SLURM_NTASKS_PER_NODE");
    if (fixed) {
        *name = "SLURM_NTASKS_PER_NODE";
        return parse_number(*name, fixed, 1, DIST_MAX_WORLD, &env->local_world_size, err);
    }
    const char *list = lookup(user, "SLURM_TASKS_PER_NODE"), *nodeid = lookup(user, "SLURM_NODEID");
    if (!list) return 0;
    *name = "SLURM_TASKS_PER_NODE";
    int node = 0;
    if (nodeid && parse_number("SLURM_NODEID", nodeid, 0, DIST_MAX_WORLD, &node, err))
        return ERR_USAGE;
    return tasks_on_node(list, node, &env->local_world_size, err);
}

/* A launcher that says nothing about nodes has put every rank on this one: local rank = rank
 * (rank modulo the local world size when only that is given). */
static int read_local(DistEnv *env, const LauncherVars *v, EnvLookup lookup, void *user, Err *err) {
    const char *world_name = NULL; /* the variable the local world size came from */
    const char *local_world = v->local_world ? lookup(user, v->local_world) : NULL;
    env->local_world_size = env->world_size;
    int rc = 0;
    if (v->launcher == LAUNCHER_SLURM) {
        rc = slurm_local_world(env, lookup, user, &world_name, err);
    } else if (local_world) {
        world_name = v->local_world;
        rc = parse_number(world_name, local_world, 1, DIST_MAX_WORLD, &env->local_world_size, err);
    }
    if (rc) return rc;
    if (!world_name) world_name = v->world;
    if (env->local_world_size > env->world_size)
        return err_set(err, ERR_USAGE, "environment variable %s=%d is more than %s=%d", world_name,
                       env->local_world_size, v->world, env->world_size);
    env->local_rank = env->rank % env->local_world_size;
    const char *local_rank = lookup(user, v->local_rank);
    if (local_rank &&
        parse_number(v->local_rank, local_rank, 0, DIST_MAX_WORLD, &env->local_rank, err))
        return ERR_USAGE;
    if (env->local_rank >= env->local_world_size)
        return err_set(err, ERR_USAGE, "environment variable %s=%d must be below %s=%d",
                       v->local_rank, env->local_rank, world_name, env->local_world_size);
    return 0;
}

/* The first host of a Slurm host list, where rank 0 runs: "gpu[03-04,07],cpu1" -> "gpu03".
 * Returns 0 when the list is malformed or the name does not fit. */
static int first_host(const char *list, char *out, size_t n) {
    size_t k = 0;
    for (const char *p = list; *p && *p != ','; p++) {
        if (*p == '[') { /* the first number of the range, then skip to its end */
            for (p++; *p && *p != '-' && *p != ',' && *p != ']'; p++) {
                if (k + 1 >= n) return 0;
                out[k++] = *p;
            }
            while (*p && *p != ']') p++;
            if (!*p) return 0;
            continue;
        }
        if (k + 1 >= n) return 0;
        out[k++] = *p;
    }
    out[k] = 0;
    return k > 0;
}

static int copy_addr(DistEnv *env, const char *name, const char *addr, Err *err) {
    if (!*addr) return err_set(err, ERR_USAGE, "environment variable %s is empty", name);
    if (strlen(addr) >= sizeof env->master_addr)
        return err_set(err, ERR_USAGE, "environment variable %s is too long (%zu characters)", name,
                       strlen(addr));
    snprintf(env->master_addr, sizeof env->master_addr, "%s", addr);
    return 0;
}

/* MASTER_ADDR and MASTER_PORT when set (every launcher's job script sets them for PyTorch).
 * Else: under Slurm, the first host of the step's node list; else 127.0.0.1 when every rank
 * is on this node; else the address is unknown, which is one line naming MASTER_ADDR. The
 * port defaults to torchrun's 29500. */
static int read_master(DistEnv *env, const LauncherVars *v, EnvLookup lookup, void *user,
                       Err *err) {
    const char *addr = lookup(user, "MASTER_ADDR"), *port = lookup(user, "MASTER_PORT");
    if (port && parse_number("MASTER_PORT", port, 1, 65535, &env->master_port, err))
        return ERR_USAGE;
    if (addr) return copy_addr(env, "MASTER_ADDR", addr, err);
    if (v->launcher == LAUNCHER_SLURM) {
        const char *lists[] = {"SLURM_STEP_NODELIST", "SLURM_JOB_NODELIST", "SLURM_NODELIST"};
        for (int i = 0; i < 3; i++) {
            const char *list = lookup(user, lists[i]);
            char host[sizeof env->master_addr];
            if (list && first_host(list, host, sizeof host))
                return copy_addr(env, lists[i], host, err);
        }
    }
    if (env->local_world_size == env->world_size) return 0;
    return err_set(err, ERR_USAGE,
                   "environment variable MASTER_ADDR is not set and the %d ranks span more than "
                   "this node's %d: set it to rank 0's host",
                   env->world_size, env->local_world_size);
}

/* dist_env_read; `master` 0 leaves where rank 0 serves unread (the default stays). */
static int read_env(DistEnv *env, EnvLookup lookup, void *user, int master, Err *err) {
    *env = (DistEnv){.launcher = LAUNCHER_NONE,
                     .world_size = 1,
                     .local_world_size = 1,
                     .master_port = DIST_DEFAULT_PORT};
    snprintf(env->master_addr, sizeof env->master_addr, "%s", DIST_DEFAULT_ADDR);
    const LauncherVars *v = find_launcher(lookup, user);
    if (!v) return 0; /* one process, nothing to meet: MASTER_* are not even read */
    env->launcher = v->launcher;
    int rc = read_world(env, v, lookup, user, err);
    if (!rc) rc = read_local(env, v, lookup, user, err);
    if (!rc && master) rc = read_master(env, v, lookup, user, err);
    return rc;
}

int dist_env_read(DistEnv *env, EnvLookup lookup, void *user, Err *err) {
    return read_env(env, lookup, user, 1, err);
}

static const char *process_lookup(void *user, const char *name) {
    (void)user;
    return getenv(name);
}

int dist_env_from_process(DistEnv *env, Err *err) {
    return dist_env_read(env, process_lookup, NULL, err);
}

int dist_env_shape_from_process(DistEnv *env, Err *err) {
    return read_env(env, process_lookup, NULL, 0, err);
}
