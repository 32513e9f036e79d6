/* `fsdp launch` through the binary, with plain shell commands for ranks: variables, exit statuses,
 * failures taking the group down, restarts, signals and bad input. */
#include <criterion/criterion.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "tests/util.h"

/* torchrun's variables, exit statuses passed on, a rank killed by a signal taking the group down at
 * once and leaving nothing behind, restarts, SIGKILL for a rank that ignores SIGTERM, the
 * launcher's own signals, a missing command, bad flags; and `fsdp train --backend cuda` refusing to
 * be one of many processes until NCCL is built. */

static double now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* What `fsdp ARGS` did, with stderr folded into stdout. */
typedef struct Launched {
    char *out;   /* what it printed, until the next run */
    int code;    /* its exit status, -1 when a signal ended it */
    double took; /* seconds */
} Launched;

static char *last_output; /* freed by the next run, or after the test */

static void free_last_output(void) {
    free(last_output);
    last_output = NULL;
}

TestSuite(launch, .fini = free_last_output);

static Launched run(const char *args) {
    free_last_output();
    int status;
    double t0 = now();
    last_output = fsdp_output(args, "2>&1", &status);
    return (Launched){last_output, WIFEXITED(status) ? WEXITSTATUS(status) : -1, now() - t0};
}

static void expect_exit(const Launched *r, int code) {
    cr_expect_eq(r->code, code, "exited %d, not %d: %s", r->code, code, r->out);
}

/* It ended within `seconds`: the launcher stopped the ranks that were still running. */
static void expect_quick(const Launched *r, double seconds) {
    cr_expect_lt(r->took, seconds, "took %.1f s: %s", r->took, r->out);
}

static void expect_printed(const Launched *r, const char *text) {
    cr_expect(strstr(r->out, text), "no '%s' in: %s", text, r->out);
}

static int count(const char *s, const char *needle) {
    int n = 0;
    for (const char *p = s; (p = strstr(p, needle)); p += strlen(needle)) n++;
    return n;
}

/* It printed `text` exactly `times` times. */
static void expect_count(const Launched *r, const char *text, int times) {
    cr_expect_eq(count(r->out, text), times, "'%s' %d times, not %d, in: %s", text,
                 count(r->out, text), times, r->out);
}

/* The fixture of the tests whose ranks leave files: a fresh directory, also in $TEST_DIR for
 * the ranks' commands. */
static char dir[64];

static void make_dir(void) {
    strcpy(dir, "/tmp/fsdp_launch_XXXXXX");
    cr_assert_not_null(mkdtemp(dir));
    setenv("TEST_DIR", dir, 1);
}

static void remove_dir(void) {
    DIR *d = opendir(dir);
    char path[512];
    for (struct dirent *e; d && (e = readdir(d));)
        if (e->d_name[0] != '.') {
            snprintf(path, sizeof path, "%s/%s", dir, e->d_name);
            unlink(path);
        }
    if (d) closedir(d);
    rmdir(dir);
}

/* Gone, or a zombie nobody has reaped yet (it runs no more). */
static int process_gone(pid_t pid) {
    char path[64], stat[256] = "";
    snprintf(path, sizeof path, "/proc/%d/stat", (int)pid);
    FILE *f = fopen(path, "r");
    if (!f) return kill(pid, 0) != 0 && errno == ESRCH;
    size_t n = fread(stat, 1, sizeof stat - 1, f);
    fclose(f);
    stat[n] = 0;
    const char *paren = strrchr(stat, ')'); /* "pid (name) STATE ..." */
    return paren && paren[1] == ' ' && paren[2] == 'Z';
}

/* Every pid in $TEST_DIR/pids is gone (given a second to be reaped); returns how many it listed. */
static int expect_pids_gone(void) {
    char path[512];
    snprintf(path, sizeof path, "%s/pids", dir);
    FILE *f = fopen(path, "r");
    int n = 0;
    for (int pid; f && fscanf(f, "%d", &pid) == 1; n++) {
        double until = now() + 1.0;
        while (!process_gone(pid) && now() < until) usleep(10 * 1000);
        cr_expect(process_gone(pid), "process %d was left running", pid);
        if (!process_gone(pid)) kill(pid, SIGKILL);
    }
    if (f) fclose(f);
    return n;
}

Test(launch, ranks_see_torchruns_variables) {
    setenv("RANK", "99", 1); /* the launcher's own are replaced, not inherited */
    Launched r = run("launch --nnodes 2 --node-rank 1 --nproc-per-node 2 --master-addr 10.1.2.3 "
                     "--master-port 29555 -- sh -c 'echo $RANK $WORLD_SIZE $LOCAL_RANK "
                     "$LOCAL_WORLD_SIZE $MASTER_ADDR $MASTER_PORT $GROUP_RANK $GROUP_WORLD_SIZE "
                     "$ROLE_RANK $ROLE_WORLD_SIZE $ROLE_NAME $TORCHELASTIC_RESTART_COUNT "
                     "$TORCHELASTIC_MAX_RESTARTS'");
    expect_exit(&r, 0);
    expect_printed(&r, "2 4 0 2 10.1.2.3 29555 1 2 2 4 default 0 0\n");
    expect_printed(&r, "3 4 1 2 10.1.2.3 29555 1 2 3 4 default 0 0\n");
    expect_count(&r, "\n", 2);
}

Test(launch, defaults_are_torchruns) {
    Launched r = run("launch --nproc_per_node=2 -- sh -c 'echo rank $RANK of $WORLD_SIZE at "
                     "$MASTER_ADDR:$MASTER_PORT'");
    expect_exit(&r, 0);
    expect_printed(&r, "rank 0 of 2 at 127.0.0.1:29500\n");
    expect_printed(&r, "rank 1 of 2 at 127.0.0.1:29500\n");
    r = run("launch sh -c 'echo $RANK/$WORLD_SIZE'"); /* no --: as torchrun */
    expect_exit(&r, 0);
    cr_expect_str_eq(r.out, "0/1\n");
}

Test(launch, a_failing_rank_sets_the_exit_status) {
    Launched r = run("launch --nproc-per-node 3 -- sh -c '[ $RANK = 1 ] && exit 3; sleep 30'");
    expect_exit(&r, 3);
    cr_expect_str_eq(r.out, "fsdp launch: rank 1 exited with status 3\n");
    expect_quick(&r, 5.0);
}

Test(launch, a_killed_rank_takes_the_group_down, .init = make_dir, .fini = remove_dir) {
    /* ranks 0 and 1 leave a sleep of their own behind their shell, and note its pid */
    Launched r = run("launch --nproc-per-node 3 -- sh -c 'if [ $RANK = 2 ]; then sleep 0.5; "
                     "kill -9 $$; fi; sleep 30 & echo $! >> $TEST_DIR/pids; wait'");
    expect_exit(&r, 128 + SIGKILL);
    cr_expect_str_eq(r.out, "fsdp launch: rank 2 was killed by SIGKILL\n");
    expect_quick(&r, 5.0);
    cr_expect_eq(expect_pids_gone(), 2);
}

Test(launch, a_rank_that_ignores_sigterm_gets_sigkill) {
    Launched r = run("launch --nproc-per-node 2 --kill-after 0.5 -- sh -c 'trap \"\" TERM; "
                     "[ $RANK = 0 ] && { sleep 0.2; exit 1; }; sleep 30'");
    expect_exit(&r, 1);
    expect_printed(&r, "rank 0 exited with status 1\n");
    expect_printed(&r, "1 rank still running 0.5 s after SIGTERM: SIGKILL\n");
    expect_quick(&r, 4.0);
}

Test(launch, restarts_start_every_rank_again, .init = make_dir, .fini = remove_dir) {
    Launched r = run("launch --nproc-per-node 2 --max-restarts 3 -- sh -c 'echo rank $RANK try "
                     "$TORCHELASTIC_RESTART_COUNT of $TORCHELASTIC_MAX_RESTARTS; if [ $RANK = 1 ] "
                     "&& [ ! -e $TEST_DIR/failed ]; then touch $TEST_DIR/failed; exit 3; fi'");
    expect_exit(&r, 0);
    expect_printed(&r, "fsdp launch: rank 1 exited with status 3\n");
    expect_printed(&r, "fsdp launch: restart 1 of 3: starting the 2 ranks again\n");
    expect_printed(&r, "rank 0 try 1 of 3\n");
    expect_printed(&r, "rank 1 try 1 of 3\n");
    expect_count(&r, "try 2", 0);
}

Test(launch, restarts_run_out) {
    Launched r = run("launch --max-restarts 2 -- sh -c 'echo try $TORCHELASTIC_RESTART_COUNT; "
                     "exit 4'");
    expect_exit(&r, 4);
    expect_count(&r, "try ", 3);
    expect_count(&r, "exited with status 4", 3);
    expect_printed(&r, "fsdp launch: no restarts left (2 used)\n");
}

Test(launch, a_missing_command_is_one_line) {
    Launched r = run("launch --nproc-per-node 2 -- fsdp-no-such-command --flag");
    expect_exit(&r, 127);
    cr_expect_str_eq(r.out, "fsdp launch: cannot run 'fsdp-no-such-command': not found in PATH\n");
    r = run("launch -- /tmp");
    expect_exit(&r, 126);
    expect_count(&r, "\n", 1);
}

static void expect_bad_flag(const char *args, const char *mention) {
    Launched r = run(args);
    cr_expect_eq(r.code, 2, "`fsdp %s` exited %d", args, r.code);
    cr_expect_eq(count(r.out, "\n"), 1, "`fsdp %s` printed: %s", args, r.out);
    cr_expect(strstr(r.out, mention), "`fsdp %s` said: %s", args, r.out);
}

Test(launch, bad_flags_exit_2_with_one_line) {
    expect_bad_flag("launch", "no command to run");
    expect_bad_flag("launch --nproc-per-node 2 --", "no command to run");
    expect_bad_flag("launch --nproc-per-node 0 -- true", "--nproc-per-node");
    expect_bad_flag("launch --nproc-per-node two -- true", "--nproc-per-node");
    expect_bad_flag("launch --nnodes 2 --node-rank 2 -- true", "--node-rank 2 must be below");
    expect_bad_flag("launch --master-port 70000 -- true", "--master-port");
    expect_bad_flag("launch --master-port 0 -- true", "--master-port");
    expect_bad_flag("launch --max-restarts -1 -- true", "--max-restarts");
    expect_bad_flag("launch --kill-after forever -- true", "--kill-after");
    expect_bad_flag("launch --rdzv-backend c10d -- true", "unknown flag --rdzv-backend");
    expect_bad_flag("launch --nproc-per-node", "--nproc-per-node needs a value");
}

/* Starts `fsdp launch` with the command line `argv`, its output in `log`. */
static pid_t start_launcher(char *const argv[], const char *log) {
    pid_t pid = fork();
    cr_assert_geq(pid, 0);
    if (pid == 0) {
        /* as from a terminal, even when the tests run in the background (which ignores SIGINT,
         * and fsdp launch keeps a signal that was ignored on purpose ignored) */
        signal(SIGINT, SIG_DFL);
        signal(SIGTERM, SIG_DFL);
        int fd = open(log, O_WRONLY | O_CREAT | O_TRUNC, 0644);
        dup2(fd, 1);
        dup2(fd, 2);
        execv(fsdp_bin(), argv);
        _exit(127);
    }
    return pid;
}

/* Waits for `lines` lines in `path` (the ranks are up). */
static void wait_for_lines(const char *path, int lines) {
    double until = now() + 10.0;
    for (;;) {
        FILE *f = fopen(path, "r");
        int n = 0;
        for (int c; f && (c = fgetc(f)) != EOF;) n += c == '\n';
        if (f) fclose(f);
        if (n >= lines) return;
        cr_assert_lt(now(), until, "the ranks never started");
        usleep(10 * 1000);
    }
}

static char *read_text(const char *path) {
    static char text[4096];
    FILE *f = fopen(path, "r");
    size_t n = f ? fread(text, 1, sizeof text - 1, f) : 0;
    if (f) fclose(f);
    text[n] = 0;
    return text;
}

Test(launch, the_launchers_signals_reach_every_rank, .init = make_dir, .fini = remove_dir) {
    char cmd[256], log[128], pids[128];
    snprintf(log, sizeof log, "%s/log", dir);
    snprintf(pids, sizeof pids, "%s/pids", dir);
    snprintf(cmd, sizeof cmd, "sleep 30 & echo $! >> %s; wait", pids);
    char *argv[] = {"fsdp", "launch", "--nproc-per-node", "2", "--", "sh", "-c", cmd, NULL};
    pid_t launcher = start_launcher(argv, log);
    wait_for_lines(pids, 2);
    double t0 = now();
    kill(launcher, SIGTERM);
    int status;
    cr_assert_eq(waitpid(launcher, &status, 0), launcher);
    double took = now() - t0;
    cr_expect(WIFEXITED(status) && WEXITSTATUS(status) == 128 + SIGTERM, "status %d", status);
    cr_expect_lt(took, 3.0, "took %.1f s", took);
    cr_expect(strstr(read_text(log), "fsdp launch: SIGTERM: passing it on to the 2 ranks\n"), "%s",
              read_text(log));
    cr_expect_eq(expect_pids_gone(), 2);

    /* Ctrl-C: SIGINT to ranks that run their command themselves (exec) */
    unlink(pids);
    snprintf(cmd, sizeof cmd, "echo $$ >> %s; exec sleep 30", pids);
    launcher = start_launcher(argv, log);
    wait_for_lines(pids, 2);
    kill(launcher, SIGINT);
    cr_assert_eq(waitpid(launcher, &status, 0), launcher);
    cr_expect(WIFEXITED(status) && WEXITSTATUS(status) == 128 + SIGINT, "status %d", status);
    cr_expect_eq(expect_pids_gone(), 2);
}

/* What a rank started and left (issue 39, case 15) goes with the job: a child that left the
 * rank's process group (setsid), when the launcher gets SIGINT, and every rank's children, when
 * the launcher itself is SIGKILLed (no handler of its own runs: each rank's keeper goes with it,
 * a parent-death signal, and stops what it adopted). */
Test(launch, what_ranks_leave_goes_with_the_launcher, .init = make_dir, .fini = remove_dir,
     .timeout = 60) {
    char cmd[512], log[128], pids[128];
    snprintf(log, sizeof log, "%s/log", dir);
    snprintf(pids, sizeof pids, "%s/pids", dir);
    snprintf(cmd, sizeof cmd, "setsid sleep 30 & echo $! >> %s; sleep 30 & echo $! >> %s; wait",
             pids, pids);
    char *argv[] = {"fsdp", "launch", "--nproc-per-node", "2", "--", "sh", "-c", cmd, NULL};
    for (int sig = 0; sig < 2; sig++) {
        unlink(pids);
        pid_t launcher = start_launcher(argv, log);
        wait_for_lines(pids, 4);
        kill(launcher, sig ? SIGKILL : SIGINT);
        int status;
        cr_assert_eq(waitpid(launcher, &status, 0), launcher);
        double until = now() + 5.0; /* the keepers' grace */
        FILE *f = fopen(pids, "r");
        for (int pid; f && fscanf(f, "%d", &pid) == 1;) {
            while (!process_gone(pid) && now() < until) usleep(20 * 1000);
            cr_expect(process_gone(pid), "%s: process %d was left running",
                      sig ? "SIGKILL" : "SIGINT", pid);
            if (!process_gone(pid)) kill(pid, SIGKILL);
        }
        if (f) fclose(f);
    }
}

/* On GPUs a process started as one of many runs one rank: --ranks must be the world. Every
 * process finds a bad flag alike, and rank 0 alone says so. */
Test(launch, train_on_gpus_is_one_rank_of_the_processes) {
    setenv("RANK", "0", 1);
    setenv("WORLD_SIZE", "2", 1);
    Launched r = run("train --backend cuda --ranks 3 --print-plan");
    expect_exit(&r, 2);
    expect_count(&r, "\n", 1);
    expect_printed(&r, "--ranks 3: this is rank 0 of 2 processes (torchrun); pass --ranks 2");
    setenv("RANK", "1", 1);
    r = run("train --backend cuda --ranks 3 --print-plan");
    expect_exit(&r, 2);
    expect_count(&r, "\n", 0);
    r = run("train --backend sim --ranks 2 --print-plan"); /* its own ranks */
    expect_exit(&r, 0);
    setenv("RANK", "x", 1);
    r = run("train --backend cuda --print-plan");
    expect_exit(&r, 2);
    expect_printed(&r, "environment variable RANK must be an integer");
}
