/* The command line of `fsdp launch`: torchrun's flags and defaults, and the command itself; the
 * ranks are started and watched by runtime/launch.c. */
#include <errno.h>
#include <math.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "cmd/commands.h"
#include "cmd/flags.h"
#include "cmd/launch.h"
#include "runtime/dist_env.h"

void launch_help(FILE *f) {
    fputs("usage: ./fsdp launch [--nproc-per-node N] [--nnodes M --node-rank K]\n"
          "                     [--master-addr A] [--master-port P] [--max-restarts R]\n"
          "                     [--kill-after S] -- COMMAND [ARGS...]\n"
          "Starts N copies of COMMAND on this node (one per GPU), each with the variables\n"
          "torchrun sets: RANK = K*N + LOCAL_RANK, WORLD_SIZE = M*N, LOCAL_RANK (0 to N-1),\n"
          "LOCAL_WORLD_SIZE = N, MASTER_ADDR, MASTER_PORT, GROUP_RANK = K, GROUP_WORLD_SIZE = M,\n"
          "ROLE_RANK, ROLE_WORLD_SIZE, ROLE_NAME, TORCHELASTIC_RESTART_COUNT and\n"
          "TORCHELASTIC_MAX_RESTARTS. COMMAND is any program: ./fsdp train, python3 script.py.\n"
          "Run it once on each of the M nodes, with that node's --node-rank.\n"
          "\n"
          "When a copy fails (a non-zero exit or a signal), the others get SIGTERM, then SIGKILL\n"
          "S seconds later; with --max-restarts R all N start again, up to R times. Failing\n"
          "after that, fsdp launch exits with the failed copy's status (128 + the signal that\n"
          "killed it).\n"
          "SIGINT (Ctrl-C), SIGTERM and SIGHUP are passed on to every copy.\n"
          "\n"
          "defaults (torchrun's): --nproc-per-node 1 --nnodes 1 --node-rank 0\n"
          "  --master-addr 127.0.0.1 --master-port 29500 --max-restarts 0; --kill-after 5\n"
          "example: ./fsdp launch --nproc-per-node 4 -- ./fsdp train --backend cuda\n",
          f);
}

static int set_kill_after(void *args, const char *flag, const char *v, Err *err) {
    char *end;
    double x = strtod(v, &end);
    if (end == v || *end || !isfinite(x) || x < 0 || x > 3600)
        return err_set(err, ERR_USAGE, "%s must be a number of seconds from 0 to 3600 (got '%s')",
                       flag, v);
    ((LaunchArgs *)args)->kill_after_s = x;
    return 0;
}

static int set_master_addr(void *args, const char *flag, const char *v, Err *err) {
    LaunchArgs *a = args;
    if (!*v || strlen(v) >= sizeof a->master_addr)
        return err_set(err, ERR_USAGE, "%s must be a host name or address (got '%s')", flag, v);
    snprintf(a->master_addr, sizeof a->master_addr, "%s", v);
    return 0;
}

#define ARG(field) offsetof(LaunchArgs, field)

/* torchrun's flags; launch_help describes them in prose. */
static const Flag launch_rows[] = {
    {"--nproc-per-node", FLAG_INT, ARG(nproc_per_node), 1, LAUNCH_MAX_NPROC, .arg = "N"},
    {"--nnodes", FLAG_INT, ARG(nnodes), 1, DIST_MAX_WORLD, .arg = "M"},
    {"--node-rank", FLAG_INT, ARG(node_rank), 0, DIST_MAX_WORLD, .arg = "K"},
    {"--master-addr", FLAG_SET, .set = set_master_addr, .arg = "A"},
    {"--master-port", FLAG_INT, ARG(master_port), 1, 65535, .arg = "P"},
    {"--max-restarts", FLAG_INT, ARG(max_restarts), 0, 1000000, .arg = "R"},
    {"--kill-after", FLAG_SET, .set = set_kill_after, .arg = "S"},
};

static const FlagTable launch_table = FLAG_TABLE("launch", launch_rows, 0);

/* "--nproc_per_node=4" -> name "--nproc-per-node", value "4": torchrun takes either spelling. */
static const char *split_flag(const char *arg, char *name, size_t n) {
    const char *eq = strchr(arg, '=');
    size_t len = eq ? (size_t)(eq - arg) : strlen(arg);
    if (len >= n) len = n - 1;
    for (size_t i = 0; i < len; i++) name[i] = i >= 2 && arg[i] == '_' ? '-' : arg[i];
    name[len] = 0;
    return eq ? eq + 1 : NULL;
}

static int check_args(const LaunchArgs *a, Err *err) {
    if (!a->command || !a->command[0])
        return err_set(err, ERR_USAGE,
                       "no command to run: ./fsdp launch [flags] -- COMMAND [ARGS...]");
    if (a->node_rank >= a->nnodes)
        return err_set(err, ERR_USAGE, "--node-rank %d must be below --nnodes %d", a->node_rank,
                       a->nnodes);
    if ((long)a->nnodes * a->nproc_per_node > DIST_MAX_WORLD)
        return err_set(err, ERR_USAGE, "--nnodes %d x --nproc-per-node %d is more than %d ranks",
                       a->nnodes, a->nproc_per_node, DIST_MAX_WORLD);
    return 0;
}

int launch_args_parse(LaunchArgs *a, int argc, char **argv, Err *err) {
    *a = (LaunchArgs){
        .nproc_per_node = 1, .nnodes = 1, .master_port = DIST_DEFAULT_PORT, .kill_after_s = 5.0};
    snprintf(a->master_addr, sizeof a->master_addr, "%s", DIST_DEFAULT_ADDR);
    int i = 0;
    for (; i < argc; i++) {
        const char *arg = argv[i];
        if (!strcmp(arg, "--")) {
            i++;
            break;
        }
        if (arg[0] != '-') break; /* the command, as torchrun's script */
        if (!strcmp(arg, "--help") || !strcmp(arg, "-h")) return 1;
        char flag[64];
        const char *value = split_flag(arg, flag, sizeof flag);
        const Flag *row = flag_find(&launch_table, flag);
        if (!value && i + 1 >= argc) return flag_missing_value(&launch_table, row, flag, err);
        if (!value) value = argv[++i];
        int rc = row ? flag_set(row, a, value, err) : flag_unknown(&launch_table, flag, err);
        if (rc) return rc;
    }
    a->command = i < argc ? argv + i : NULL;
    return check_args(a, err);
}

/* An executable regular file (what execvp would run). */
static int is_runnable(const char *path) {
    struct stat st;
    return stat(path, &st) == 0 && S_ISREG(st.st_mode) && access(path, X_OK) == 0;
}

int launch_command_runnable(const char *command, int *exit_status, Err *err) {
    if (strchr(command, '/')) {
        if (is_runnable(command)) return 0;
        int missing = access(command, F_OK) != 0;
        *exit_status = missing ? 127 : 126;
        return err_set(err, ERR_USAGE, "cannot run '%s': %s", command,
                       missing ? "no such file" : "not an executable file");
    }
    const char *path = getenv("PATH");
    if (!path) path = "/bin:/usr/bin"; /* execvp's own default */
    while (*path) {
        size_t len = strcspn(path, ":");
        char full[4096];
        /* an empty entry is the current directory, as execvp takes it */
        int n = snprintf(full, sizeof full, "%.*s%s%s", (int)len, path, len ? "/" : "", command);
        if (n > 0 && (size_t)n < sizeof full && is_runnable(full)) return 0;
        path += len + (path[len] == ':');
    }
    *exit_status = 127;
    return err_set(err, ERR_USAGE, "cannot run '%s': not found in PATH", command);
}

int cmd_launch(int argc, char **argv) {
    LaunchArgs a;
    Err err = {0};
    int rc = launch_args_parse(&a, argc, argv, &err), status = 2;
    if (cmd_help_asked(rc, launch_help)) return 0;
    if (!rc) rc = launch_command_runnable(a.command[0], &status, &err);
    if (!rc) rc = launch_run(&a, stderr, &status, &err);
    if (rc) fprintf(stderr, "fsdp launch: %s\n", err.msg);
    if (rc && rc != ERR_USAGE) status = 1;
    return status;
}
