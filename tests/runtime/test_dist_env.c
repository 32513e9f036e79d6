/* Where a process sits in a job, from each launcher's variables: torchrun (and fsdp launch),
 * Open MPI, Slurm; which wins when several are set; bad values named in one line. */
#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "runtime/dist_env.h"

/* A case's environment: "NAME=value" words separated by spaces, split into entries. */
typedef struct Env {
    char text[512];
    const char *entries[32]; /* NULL-terminated */
} Env;

static void env_split(Env *env, const char *vars) {
    snprintf(env->text, sizeof env->text, "%s", vars);
    int n = 0;
    for (char *save, *w = strtok_r(env->text, " ", &save); w; w = strtok_r(NULL, " ", &save)) {
        cr_assert_lt(n, 31, "too many variables in '%s'", vars);
        env->entries[n++] = w;
    }
    env->entries[n] = NULL;
}

static const char *lookup(void *user, const char *name) {
    size_t n = strlen(name);
    for (const char *const *kv = user; *kv; kv++)
        if (!strncmp(*kv, name, n) && (*kv)[n] == '=') return *kv + n + 1;
    return NULL;
}

/* Reading `vars` gives every field of `want`: {launcher, rank, world size, local rank, local
 * world size, master address, master port}. */
static void expect_env(DistEnv want, const char *vars) {
    Env env;
    env_split(&env, vars);
    DistEnv got;
    Err err = {0};
    int rc = dist_env_read(&got, lookup, (void *)env.entries, &err);
    cr_assert_eq(rc, 0, "%s: dist_env_read failed: %s", vars, err.msg);
    cr_expect_eq(got.launcher, want.launcher, "%s: launcher %s", vars, launcher_name(got.launcher));
    cr_expect_eq(got.rank, want.rank, "%s: rank %d", vars, got.rank);
    cr_expect_eq(got.world_size, want.world_size, "%s: world %d", vars, got.world_size);
    cr_expect_eq(got.local_rank, want.local_rank, "%s: local rank %d", vars, got.local_rank);
    cr_expect_eq(got.local_world_size, want.local_world_size, "%s: local world %d", vars,
                 got.local_world_size);
    cr_expect_str_eq(got.master_addr, want.master_addr, "%s: master %s", vars, got.master_addr);
    cr_expect_eq(got.master_port, want.master_port, "%s: port %d", vars, got.master_port);
}

/* The error names `mention` and `also` (when not NULL) and is one line. */
static void expect_bad(const char *vars, const char *mention, const char *also) {
    Env env;
    env_split(&env, vars);
    DistEnv got;
    Err err = {0};
    cr_expect_eq(dist_env_read(&got, lookup, (void *)env.entries, &err), ERR_USAGE, "accepted %s",
                 vars);
    cr_expect(strstr(err.msg, mention), "'%s' does not name %s", err.msg, mention);
    if (also) cr_expect(strstr(err.msg, also), "'%s' does not name %s", err.msg, also);
    cr_expect_null(strchr(err.msg, '\n'), "'%s' is more than one line", err.msg);
}

Test(dist_env, no_variables_is_one_process) {
    /* an salloc shell: not srun */
    expect_env((DistEnv){LAUNCHER_NONE, 0, 1, 0, 1, "127.0.0.1", 29500},
               "HOME=/root SLURM_NTASKS=4");
}

Test(dist_env, torchrun_sets_everything) {
    expect_env((DistEnv){LAUNCHER_TORCHRUN, 5, 8, 1, 4, "node0", 1234},
               "RANK=5 WORLD_SIZE=8 LOCAL_RANK=1 LOCAL_WORLD_SIZE=4 MASTER_ADDR=node0 "
               "MASTER_PORT=1234");
}

Test(dist_env, by_hand_on_one_node) {
    /* every rank here: local = global */
    expect_env((DistEnv){LAUNCHER_TORCHRUN, 1, 2, 1, 2, "127.0.0.1", 29500}, "RANK=1 WORLD_SIZE=2");
    expect_env((DistEnv){LAUNCHER_TORCHRUN, 5, 8, 1, 4, "h", 29500},
               "RANK=5 WORLD_SIZE=8 LOCAL_WORLD_SIZE=4 MASTER_ADDR=h");
}

Test(dist_env, open_mpi) {
    expect_env((DistEnv){LAUNCHER_OPENMPI, 3, 4, 1, 2, "10.0.0.7", 29500},
               "OMPI_COMM_WORLD_RANK=3 OMPI_COMM_WORLD_SIZE=4 OMPI_COMM_WORLD_LOCAL_RANK=1 "
               "OMPI_COMM_WORLD_LOCAL_SIZE=2 MASTER_ADDR=10.0.0.7");
    expect_env((DistEnv){LAUNCHER_OPENMPI, 1, 2, 1, 2, "127.0.0.1", 29500},
               "OMPI_COMM_WORLD_RANK=1 OMPI_COMM_WORLD_SIZE=2 OMPI_COMM_WORLD_LOCAL_RANK=1 "
               "OMPI_COMM_WORLD_LOCAL_SIZE=2");
    /* across nodes nothing says where rank 0 is */
    expect_bad("OMPI_COMM_WORLD_RANK=3 OMPI_COMM_WORLD_SIZE=4 OMPI_COMM_WORLD_LOCAL_RANK=1 "
               "OMPI_COMM_WORLD_LOCAL_SIZE=2",
               "MASTER_ADDR", "rank 0's host");
}

Test(dist_env, slurm_srun) {
    /* rank 0 runs on the step's first node */
    expect_env((DistEnv){LAUNCHER_SLURM, 5, 8, 1, 4, "gpu03", 29500},
               "SLURM_PROCID=5 SLURM_NTASKS=8 SLURM_LOCALID=1 SLURM_NODEID=1 "
               "SLURM_TASKS_PER_NODE=4(x2) SLURM_STEP_NODELIST=gpu[03-04] "
               "SLURM_JOB_NODELIST=other[1-9]");
}

Test(dist_env, slurm_local_world_and_master) {
    /* --ntasks-per-node wins over the list; MASTER_ADDR, when the job script sets it, wins */
    expect_env((DistEnv){LAUNCHER_SLURM, 2, 4, 0, 2, "head", 40000},
               "SLURM_PROCID=2 SLURM_NTASKS=4 SLURM_LOCALID=0 SLURM_NTASKS_PER_NODE=2 "
               "SLURM_TASKS_PER_NODE=3(x2) MASTER_ADDR=head MASTER_PORT=40000 "
               "SLURM_NODELIST=n[1-2]");
    /* uneven nodes: this node's own entry */
    expect_env((DistEnv){LAUNCHER_SLURM, 6, 8, 0, 2, "node1", 29500},
               "SLURM_PROCID=6 SLURM_NTASKS=8 SLURM_LOCALID=0 SLURM_NODEID=2 "
               "SLURM_TASKS_PER_NODE=3(x2),2 SLURM_JOB_NODELIST=node1,node2,node3");
    expect_env((DistEnv){LAUNCHER_SLURM, 1, 6, 1, 2, "a-001-ib", 29500},
               "SLURM_PROCID=1 SLURM_NTASKS=6 SLURM_LOCALID=1 SLURM_TASKS_PER_NODE=2,4 "
               "SLURM_NODELIST=a-[001-004,9]-ib");
}

Test(dist_env, the_innermost_launcher_wins) {
    /* torchrun inside srun inside an mpirun: torchrun's variables describe this process */
    expect_env((DistEnv){LAUNCHER_TORCHRUN, 7, 16, 3, 8, "a", 29500},
               "SLURM_PROCID=0 SLURM_NTASKS=2 OMPI_COMM_WORLD_RANK=1 OMPI_COMM_WORLD_SIZE=2 "
               "RANK=7 WORLD_SIZE=16 LOCAL_RANK=3 LOCAL_WORLD_SIZE=8 MASTER_ADDR=a");
    /* mpirun inside a Slurm allocation: Open MPI's */
    expect_env((DistEnv){LAUNCHER_OPENMPI, 1, 2, 1, 2, "127.0.0.1", 29500},
               "SLURM_PROCID=0 SLURM_NTASKS=1 OMPI_COMM_WORLD_RANK=1 OMPI_COMM_WORLD_SIZE=2");
}

Test(dist_env, bad_values_name_the_variable) {
    expect_bad("RANK=abc WORLD_SIZE=2", "RANK", "'abc'");
    expect_bad("RANK=4 WORLD_SIZE=4", "RANK=4", "WORLD_SIZE=4");
    expect_bad("RANK=-1 WORLD_SIZE=4", "RANK", "'-1'");
    expect_bad("RANK=0 WORLD_SIZE=0", "WORLD_SIZE", NULL);
    expect_bad("RANK=1", "WORLD_SIZE", "RANK");
    expect_bad("RANK=0 WORLD_SIZE=2 MASTER_PORT=70000", "MASTER_PORT", "70000");
    expect_bad("RANK=0 WORLD_SIZE=2 MASTER_PORT=http", "MASTER_PORT", "'http'");
    expect_bad("RANK=0 WORLD_SIZE=2 MASTER_ADDR=", "MASTER_ADDR", NULL);
    expect_bad("RANK=1 WORLD_SIZE=4 LOCAL_RANK=2 LOCAL_WORLD_SIZE=2", "LOCAL_RANK=2",
               "LOCAL_WORLD_SIZE=2");
    expect_bad("RANK=1 WORLD_SIZE=4 LOCAL_WORLD_SIZE=8", "LOCAL_WORLD_SIZE=8", "WORLD_SIZE=4");
    expect_bad("OMPI_COMM_WORLD_RANK=0 OMPI_COMM_WORLD_SIZE=x", "OMPI_COMM_WORLD_SIZE", "'x'");
    expect_bad("SLURM_PROCID=9 SLURM_NTASKS=8", "SLURM_PROCID=9", "SLURM_NTASKS=8");
    expect_bad("SLURM_PROCID=0 SLURM_NTASKS=2 SLURM_TASKS_PER_NODE=two", "SLURM_TASKS_PER_NODE",
               "'two'");
    expect_bad("SLURM_PROCID=0 SLURM_NTASKS=2 SLURM_NODEID=3 SLURM_TASKS_PER_NODE=1(x2)",
               "SLURM_TASKS_PER_NODE", "SLURM_NODEID is 3");
}

/* MPI meets its ranks itself: across nodes without MASTER_ADDR its shape still reads, where the
 * whole environment (CUDA's rendezvous needs rank 0's address) asks for MASTER_ADDR. Each test
 * runs in a process of its own, so setting this one's environment touches no other. */
Test(dist_env, mpi_across_nodes_needs_no_master_addr) {
    unsetenv("MASTER_ADDR");
    unsetenv("RANK");
    setenv("OMPI_COMM_WORLD_RANK", "1", 1);
    setenv("OMPI_COMM_WORLD_SIZE", "2", 1);
    setenv("OMPI_COMM_WORLD_LOCAL_RANK", "0", 1);
    setenv("OMPI_COMM_WORLD_LOCAL_SIZE", "1", 1);
    DistEnv env;
    Err err = {0};
    cr_expect_eq(dist_env_from_process(&env, &err), ERR_USAGE, "MASTER_ADDR should be asked for");
    cr_expect(strstr(err.msg, "MASTER_ADDR"), "%s", err.msg);
    err = (Err){0};
    int rc = dist_env_shape_from_process(&env, &err);
    cr_assert_eq(rc, 0, "%s", err.msg);
    cr_expect(env.launcher == LAUNCHER_OPENMPI && env.rank == 1 && env.world_size == 2 &&
                  env.local_rank == 0 && env.local_world_size == 1,
              "read rank %d of %d, local %d of %d", env.rank, env.world_size, env.local_rank,
              env.local_world_size);
}
