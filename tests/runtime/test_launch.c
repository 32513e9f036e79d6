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

/* `fsdp ARGS` with stderr folded into stdout: what it printed (free it), its exit status
 * (-1 when a signal ended it) and how long it took. */
static char *run(const char *args, int *code, double *took) {
    int status;
    double t0 = now();
    char *out = fsdp_output(args, "2>&1", &status);
    *took = now() - t0;
    *code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
    return out;
}

static int count(const char *s, const char *needle) {
    int n = 0;
    for (const char *p = s; (p = strstr(p, needle)); p += strlen(needle)) n++;
    return n;
}

static void make_dir(char *dir) {
    strcpy(dir, "/tmp/fsdp_launch_XXXXXX");
    cr_assert_not_null(mkdtemp(dir));
}

static void remove_dir(const char *dir) {
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

/* Every pid in DIR/pids is gone (given a second to be reaped); returns how many it listed. */
static int expect_pids_gone(const char *dir) {
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
    int code;
    double took;
    char *out = run("launch --nnodes 2 --node-rank 1 --nproc-per-node 2 --master-addr 10.1.2.3 "
                    "--master-port 29555 -- sh -c 'echo $RANK $WORLD_SIZE $LOCAL_RANK "
                    "$LOCAL_WORLD_SIZE $MASTER_ADDR $MASTER_PORT $GROUP_RANK $GROUP_WORLD_SIZE "
                    "$ROLE_RANK $ROLE_WORLD_SIZE $ROLE_NAME $TORCHELASTIC_RESTART_COUNT "
                    "$TORCHELASTIC_MAX_RESTARTS'",
                    &code, &took);
    cr_expect_eq(code, 0, "%s", out);
    cr_expect(strstr(out, "2 4 0 2 10.1.2.3 29555 1 2 2 4 default 0 0\n"), "%s", out);
    cr_expect(strstr(out, "3 4 1 2 10.1.2.3 29555 1 2 3 4 default 0 0\n"), "%s", out);
    cr_expect_eq(count(out, "\n"), 2, "%s", out);
    free(out);
}

Test(launch, defaults_are_torchruns) {
    int code;
    double took;
    char *out = run("launch --nproc_per_node=2 -- sh -c 'echo rank $RANK of $WORLD_SIZE at "
                    "$MASTER_ADDR:$MASTER_PORT'",
                    &code, &took);
    cr_expect_eq(code, 0, "%s", out);
    cr_expect(strstr(out, "rank 0 of 2 at 127.0.0.1:29500\n"), "%s", out);
    cr_expect(strstr(out, "rank 1 of 2 at 127.0.0.1:29500\n"), "%s", out);
    free(out);
    out = run("launch sh -c 'echo $RANK/$WORLD_SIZE'", &code, &took); /* no --: as torchrun */
    cr_expect_eq(code, 0);
    cr_expect_str_eq(out, "0/1\n");
    free(out);
}

Test(launch, a_failing_rank_sets_the_exit_status) {
    int code;
    double took;
    char *out =
        run("launch --nproc-per-node 3 -- sh -c '[ $RANK = 1 ] && exit 3; sleep 30'", &code, &took);
    cr_expect_eq(code, 3, "%s", out);
    cr_expect_str_eq(out, "fsdp launch: rank 1 exited with status 3\n");
    cr_expect_lt(took, 5.0, "took %.1f s: the sleeping ranks were not stopped", took);
    free(out);
}

Test(launch, a_killed_rank_takes_the_group_down) {
    char dir[64], args[1024];
    make_dir(dir);
    /* ranks 0 and 1 leave a sleep of their own behind their shell, and note its pid */
    snprintf(args, sizeof args,
             "launch --nproc-per-node 3 -- sh -c 'if [ $RANK = 2 ]; then sleep 0.5; kill -9 $$; "
             "fi; sleep 30 & echo $! >> %s/pids; wait'",
             dir);
    int code;
    double took;
    char *out = run(args, &code, &took);
    cr_expect_eq(code, 128 + SIGKILL, "%s", out);
    cr_expect_str_eq(out, "fsdp launch: rank 2 was killed by SIGKILL\n");
    cr_expect_lt(took, 5.0, "took %.1f s", took);
    cr_expect_eq(expect_pids_gone(dir), 2);
    free(out);
    remove_dir(dir);
}

Test(launch, a_rank_that_ignores_sigterm_gets_sigkill) {
    int code;
    double took;
    char *out = run("launch --nproc-per-node 2 --kill-after 0.5 -- sh -c 'trap \"\" TERM; "
                    "[ $RANK = 0 ] && { sleep 0.2; exit 1; }; sleep 30'",
                    &code, &took);
    cr_expect_eq(code, 1, "%s", out);
    cr_expect(strstr(out, "rank 0 exited with status 1\n"), "%s", out);
    cr_expect(strstr(out, "1 rank still running 0.5 s after SIGTERM: SIGKILL\n"), "%s", out);
    cr_expect_lt(took, 4.0, "took %.1f s", took);
    free(out);
}

Test(launch, restarts_start_every_rank_again) {
    char dir[64], args[1024];
    make_dir(dir);
    snprintf(args, sizeof args,
             "launch --nproc-per-node 2 --max-restarts 3 -- sh -c 'echo rank $RANK try "
             "$TORCHELASTIC_RESTART_COUNT of $TORCHELASTIC_MAX_RESTARTS; if [ $RANK = 1 ] && [ ! "
             "-e %s/failed ]; then touch %s/failed; exit 3; fi'",
             dir, dir);
    int code;
    double took;
    char *out = run(args, &code, &took);
    cr_expect_eq(code, 0, "%s", out);
    cr_expect(strstr(out, "fsdp launch: rank 1 exited with status 3\n"), "%s", out);
    cr_expect(strstr(out, "fsdp launch: restart 1 of 3: starting the 2 ranks again\n"), "%s", out);
    cr_expect(strstr(out, "rank 0 try 1 of 3\n"), "%s", out);
    cr_expect(strstr(out, "rank 1 try 1 of 3\n"), "%s", out);
    cr_expect_eq(count(out, "try 2"), 0, "%s", out);
    free(out);
    remove_dir(dir);
}

Test(launch, restarts_run_out) {
    int code;
    double took;
    char *out = run("launch --max-restarts 2 -- sh -c 'echo try $TORCHELASTIC_RESTART_COUNT; "
                    "exit 4'",
                    &code, &took);
    cr_expect_eq(code, 4, "%s", out);
    cr_expect_eq(count(out, "try "), 3, "%s", out);
    cr_expect_eq(count(out, "exited with status 4"), 3, "%s", out);
    cr_expect(strstr(out, "fsdp launch: no restarts left (2 used)\n"), "%s", out);
    free(out);
}

Test(launch, a_missing_command_is_one_line) {
    int code;
    double took;
    char *out = run("launch --nproc-per-node 2 -- fsdp-no-such-command --flag", &code, &took);
    cr_expect_eq(code, 127, "%s", out);
    cr_expect_str_eq(out, "fsdp launch: cannot run 'fsdp-no-such-command': not found in PATH\n");
    free(out);
    out = run("launch -- /tmp", &code, &took);
    cr_expect_eq(code, 126, "%s", out);
    cr_expect_eq(count(out, "\n"), 1, "%s", out);
    free(out);
}

static void expect_bad_flag(const char *args, const char *mention) {
    int code;
    double took;
    char *out = run(args, &code, &took);
    cr_expect_eq(code, 2, "`fsdp %s` exited %d", args, code);
    cr_expect_eq(count(out, "\n"), 1, "`fsdp %s` printed: %s", args, out);
    cr_expect(strstr(out, mention), "`fsdp %s` said: %s", args, out);
    free(out);
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

Test(launch, the_launchers_signals_reach_every_rank) {
    char dir[64], cmd[256], log[128], pids[128];
    make_dir(dir);
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
    cr_expect_eq(expect_pids_gone(dir), 2);

    /* Ctrl-C: SIGINT to ranks that run their command themselves (exec) */
    unlink(pids);
    snprintf(cmd, sizeof cmd, "echo $$ >> %s; exec sleep 30", pids);
    launcher = start_launcher(argv, log);
    wait_for_lines(pids, 2);
    kill(launcher, SIGINT);
    cr_assert_eq(waitpid(launcher, &status, 0), launcher);
    cr_expect(WIFEXITED(status) && WEXITSTATUS(status) == 128 + SIGINT, "status %d", status);
    cr_expect_eq(expect_pids_gone(dir), 2);
    remove_dir(dir);
}

/* On GPUs a process started as one of many runs one rank: --ranks must be the world. */
Test(launch, train_on_gpus_is_one_rank_of_the_processes) {
    setenv("RANK", "1", 1);
    setenv("WORLD_SIZE", "2", 1);
    int code;
    double took;
    char *out = run("train --backend cuda --ranks 3 --print-plan", &code, &took);
    cr_expect_eq(code, 2, "%s", out);
    cr_expect_eq(count(out, "\n"), 1, "%s", out);
    cr_expect(strstr(out, "--ranks 3: this is rank 1 of 2 processes (torchrun); pass --ranks 2"),
              "%s", out);
    free(out);
    out = run("train --backend sim --ranks 2 --print-plan", &code, &took); /* its own ranks */
    cr_expect_eq(code, 0, "%s", out);
    free(out);
    setenv("RANK", "x", 1);
    out = run("train --backend cuda --print-plan", &code, &took);
    cr_expect_eq(code, 2, "%s", out);
    cr_expect(strstr(out, "environment variable RANK must be an integer"), "%s", out);
    free(out);
}
