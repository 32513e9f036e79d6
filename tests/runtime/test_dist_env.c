/* Where a process sits in a job, from each launcher's variables: torchrun (and fsdp launch),
 * Open MPI, Slurm; which wins when several are set; bad values named in one line. */
#include <criterion/criterion.h>
#include <string.h>

#include "runtime/dist_env.h"

/* The environment of a case: "NAME=value" entries, NULL-terminated. */
static const char *lookup(void *user, const char *name) {
    size_t n = strlen(name);
    for (const char *const *kv = user; *kv; kv++)
        if (!strncmp(*kv, name, n) && (*kv)[n] == '=') return *kv + n + 1;
    return NULL;
}

static DistEnv read_env(const char *const *vars) {
    DistEnv env;
    Err err = {0};
    int rc = dist_env_read(&env, lookup, (void *)vars, &err);
    cr_assert_eq(rc, 0, "dist_env_read failed: %s", err.msg);
    return env;
}

static void expect_shape(const DistEnv *e, Launcher launcher, int rank, int world, int local,
                         int local_world) {
    cr_expect_eq(e->launcher, launcher, "launcher %s", launcher_name(e->launcher));
    cr_expect_eq(e->rank, rank);
    cr_expect_eq(e->world_size, world);
    cr_expect_eq(e->local_rank, local);
    cr_expect_eq(e->local_world_size, local_world);
}

static void expect_master(const DistEnv *e, const char *addr, int port) {
    cr_expect_str_eq(e->master_addr, addr);
    cr_expect_eq(e->master_port, port);
}

/* The error names each of `mentions` (up to two) and is one line. */
static void expect_bad(const char *const *vars, const char *mention, const char *also) {
    DistEnv env;
    Err err = {0};
    cr_expect_eq(dist_env_read(&env, lookup, (void *)vars, &err), ERR_USAGE, "accepted %s",
                 vars[0]);
    cr_expect(strstr(err.msg, mention), "'%s' does not name %s", err.msg, mention);
    if (also) cr_expect(strstr(err.msg, also), "'%s' does not name %s", err.msg, also);
    cr_expect_null(strchr(err.msg, '\n'), "'%s' is more than one line", err.msg);
}

Test(dist_env, no_variables_is_one_process) {
    const char *vars[] = {"HOME=/root", "SLURM_NTASKS=4", NULL}; /* an salloc shell: not srun */
    DistEnv e = read_env(vars);
    expect_shape(&e, LAUNCHER_NONE, 0, 1, 0, 1);
    expect_master(&e, "127.0.0.1", 29500);
}

Test(dist_env, torchrun_sets_everything) {
    const char *vars[] = {"RANK=5",
                          "WORLD_SIZE=8",
                          "LOCAL_RANK=1",
                          "LOCAL_WORLD_SIZE=4",
                          "MASTER_ADDR=node0",
                          "MASTER_PORT=1234",
                          NULL};
    DistEnv e = read_env(vars);
    expect_shape(&e, LAUNCHER_TORCHRUN, 5, 8, 1, 4);
    expect_master(&e, "node0", 1234);
}

Test(dist_env, by_hand_on_one_node) {
    const char *vars[] = {"RANK=1", "WORLD_SIZE=2", NULL};
    DistEnv e = read_env(vars);
    expect_shape(&e, LAUNCHER_TORCHRUN, 1, 2, 1, 2); /* every rank here: local = global */
    expect_master(&e, "127.0.0.1", 29500);
    const char *local_world_only[] = {"RANK=5", "WORLD_SIZE=8", "LOCAL_WORLD_SIZE=4",
                                      "MASTER_ADDR=h", NULL};
    e = read_env(local_world_only);
    expect_shape(&e, LAUNCHER_TORCHRUN, 5, 8, 1, 4);
}

Test(dist_env, open_mpi) {
    const char *vars[] = {"OMPI_COMM_WORLD_RANK=3",       "OMPI_COMM_WORLD_SIZE=4",
                          "OMPI_COMM_WORLD_LOCAL_RANK=1", "OMPI_COMM_WORLD_LOCAL_SIZE=2",
                          "MASTER_ADDR=10.0.0.7",         NULL};
    DistEnv e = read_env(vars);
    expect_shape(&e, LAUNCHER_OPENMPI, 3, 4, 1, 2);
    expect_master(&e, "10.0.0.7", 29500);
    const char *one_node[] = {"OMPI_COMM_WORLD_RANK=1", "OMPI_COMM_WORLD_SIZE=2",
                              "OMPI_COMM_WORLD_LOCAL_RANK=1", "OMPI_COMM_WORLD_LOCAL_SIZE=2", NULL};
    e = read_env(one_node);
    expect_master(&e, "127.0.0.1", 29500);
    /* across nodes nothing says where rank 0 is */
    const char *two_nodes[] = {"OMPI_COMM_WORLD_RANK=3", "OMPI_COMM_WORLD_SIZE=4",
                               "OMPI_COMM_WORLD_LOCAL_RANK=1", "OMPI_COMM_WORLD_LOCAL_SIZE=2",
                               NULL};
    expect_bad(two_nodes, "MASTER_ADDR", "rank 0's host");
}

Test(dist_env, slurm_srun) {
    const char *vars[] = {"SLURM_PROCID=5",
                          "SLURM_NTASKS=8",
                          "SLURM_LOCALID=1",
                          "SLURM_NODEID=1",
                          "SLURM_TASKS_PER_NODE=4(x2)",
                          "SLURM_STEP_NODELIST=gpu[03-04]",
                          "SLURM_JOB_NODELIST=other[1-9]",
                          NULL};
    DistEnv e = read_env(vars);
    expect_shape(&e, LAUNCHER_SLURM, 5, 8, 1, 4);
    expect_master(&e, "gpu03", 29500); /* rank 0 runs on the step's first node */
}

Test(dist_env, slurm_local_world_and_master) {
    /* --ntasks-per-node wins over the list */
    const char *fixed[] = {"SLURM_PROCID=2",
                           "SLURM_NTASKS=4",
                           "SLURM_LOCALID=0",
                           "SLURM_NTASKS_PER_NODE=2",
                           "SLURM_TASKS_PER_NODE=3(x2)",
                           "MASTER_ADDR=head",
                           "MASTER_PORT=40000",
                           "SLURM_NODELIST=n[1-2]",
                           NULL};
    DistEnv e = read_env(fixed);
    expect_shape(&e, LAUNCHER_SLURM, 2, 4, 0, 2);
    expect_master(&e, "head", 40000); /* MASTER_ADDR, when the job script sets it, wins */
    /* uneven nodes: this node's own entry */
    const char *uneven[] = {"SLURM_PROCID=6",
                            "SLURM_NTASKS=8",
                            "SLURM_LOCALID=0",
                            "SLURM_NODEID=2",
                            "SLURM_TASKS_PER_NODE=3(x2),2",
                            "SLURM_JOB_NODELIST=node1,node2,node3",
                            NULL};
    e = read_env(uneven);
    expect_shape(&e, LAUNCHER_SLURM, 6, 8, 0, 2);
    expect_master(&e, "node1", 29500);
    const char *no_nodeid[] = {"SLURM_PROCID=1",
                               "SLURM_NTASKS=6",
                               "SLURM_LOCALID=1",
                               "SLURM_TASKS_PER_NODE=2,4",
                               "SLURM_NODELIST=a-[001-004,9]-ib",
                               NULL};
    e = read_env(no_nodeid);
    expect_shape(&e, LAUNCHER_SLURM, 1, 6, 1, 2);
    expect_master(&e, "a-001-ib", 29500);
}

Test(dist_env, the_innermost_launcher_wins) {
    /* torchrun inside srun inside an mpirun: torchrun's variables describe this process */
    const char *all[] = {"SLURM_PROCID=0",
                         "SLURM_NTASKS=2",
                         "OMPI_COMM_WORLD_RANK=1",
                         "OMPI_COMM_WORLD_SIZE=2",
                         "RANK=7",
                         "WORLD_SIZE=16",
                         "LOCAL_RANK=3",
                         "LOCAL_WORLD_SIZE=8",
                         "MASTER_ADDR=a",
                         NULL};
    DistEnv e = read_env(all);
    expect_shape(&e, LAUNCHER_TORCHRUN, 7, 16, 3, 8);
    /* mpirun inside a Slurm allocation: Open MPI's */
    const char *mpi_in_slurm[] = {"SLURM_PROCID=0", "SLURM_NTASKS=1", "OMPI_COMM_WORLD_RANK=1",
                                  "OMPI_COMM_WORLD_SIZE=2", NULL};
    e = read_env(mpi_in_slurm);
    expect_shape(&e, LAUNCHER_OPENMPI, 1, 2, 1, 2);
}

Test(dist_env, bad_values_name_the_variable) {
    const char *not_number[] = {"RANK=abc", "WORLD_SIZE=2", NULL};
    expect_bad(not_number, "RANK", "'abc'");
    const char *too_big[] = {"RANK=4", "WORLD_SIZE=4", NULL};
    expect_bad(too_big, "RANK=4", "WORLD_SIZE=4");
    const char *negative[] = {"RANK=-1", "WORLD_SIZE=4", NULL};
    expect_bad(negative, "RANK", "'-1'");
    const char *empty_world[] = {"RANK=0", "WORLD_SIZE=0", NULL};
    expect_bad(empty_world, "WORLD_SIZE", NULL);
    const char *half[] = {"RANK=1", NULL};
    expect_bad(half, "WORLD_SIZE", "RANK");
    const char *port[] = {"RANK=0", "WORLD_SIZE=2", "MASTER_PORT=70000", NULL};
    expect_bad(port, "MASTER_PORT", "70000");
    const char *port_word[] = {"RANK=0", "WORLD_SIZE=2", "MASTER_PORT=http", NULL};
    expect_bad(port_word, "MASTER_PORT", "'http'");
    const char *addr[] = {"RANK=0", "WORLD_SIZE=2", "MASTER_ADDR=", NULL};
    expect_bad(addr, "MASTER_ADDR", NULL);
    const char *local[] = {"RANK=1", "WORLD_SIZE=4", "LOCAL_RANK=2", "LOCAL_WORLD_SIZE=2", NULL};
    expect_bad(local, "LOCAL_RANK=2", "LOCAL_WORLD_SIZE=2");
    const char *local_world[] = {"RANK=1", "WORLD_SIZE=4", "LOCAL_WORLD_SIZE=8", NULL};
    expect_bad(local_world, "LOCAL_WORLD_SIZE=8", "WORLD_SIZE=4");
    const char *mpi[] = {"OMPI_COMM_WORLD_RANK=0", "OMPI_COMM_WORLD_SIZE=x", NULL};
    expect_bad(mpi, "OMPI_COMM_WORLD_SIZE", "'x'");
    const char *slurm[] = {"SLURM_PROCID=9", "SLURM_NTASKS=8", NULL};
    expect_bad(slurm, "SLURM_PROCID=9", "SLURM_NTASKS=8");
    const char *list[] = {"SLURM_PROCID=0", "SLURM_NTASKS=2", "SLURM_TASKS_PER_NODE=two", NULL};
    expect_bad(list, "SLURM_TASKS_PER_NODE", "'two'");
    const char *nodeid[] = {"SLURM_PROCID=0", "SLURM_NTASKS=2", "SLURM_NODEID=3",
                            "SLURM_TASKS_PER_NODE=1(x2)", NULL};
    expect_bad(nodeid, "SLURM_TASKS_PER_NODE", "SLURM_NODEID is 3");
}
