/* A job's folders are its own (issue 39, cases 3 to 5): one job at a time in a run directory or
 * a checkpoint folder (the second is told the first's pid, and the lock goes with the first's
 * process however it ends); a fresh run never takes over a folder holding checkpoints; --resume
 * auto does not start a finished run over because its checkpoints were deleted. Every refusal is
 * one line, exit 2, with the folder's files as they were. */
#include <criterion/criterion.h>
#include <dirent.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "tests/util.h"

static char dir[256];

static void setup_dir(void) {
    fresh_test_dir(dir, sizeof dir, "folders", "t");
}

static void teardown_dir(void) {
    remove_test_dir(dir);
}

/* Every file under path, names and bytes, as one string (to compare before and after). */
static char *tree_bytes(const char *path) {
    return shell_output(fmt_text("cd %s && find . -type f | sort | xargs -r md5sum", path),
                        &(int){0});
}

/* Case 3: a copy of a run's checkpoints, missing its newest step, is not taken over by a fresh
 * run of other flags (it overwrote step 2, and --resume auto would then have mixed the runs). */
Test(folders, a_fresh_run_does_not_take_over_a_folder_of_checkpoints, .init = setup_dir,
     .fini = teardown_dir, .timeout = 60) {
    free(fsdp_ok(
        "train --model toy --ranks 3 --steps 4 --checkpoint-dir %s/ckA --checkpoint-every 1", dir));
    cr_assert_eq(
        system(fmt_text("cp -r %s/ckA %s/ckB && rm -r %s/ckB/step-00000004", dir, dir, dir)), 0);
    char *before = tree_bytes(fmt_text("%s/ckB", dir));
    expect_fsdp_refused(
        fmt_text("train --model toy --ranks 3 --steps 3 --seed 99 --checkpoint-dir %s/ckB "
                 "--checkpoint-every 1",
                 dir),
        "already holds checkpoints");
    char *after = tree_bytes(fmt_text("%s/ckB", dir));
    cr_expect_str_eq(after, before, "ckB as it was");
    free(before);
    free(after);
    free(fsdp_ok(
        "train --model toy --ranks 3 --steps 6 --checkpoint-dir %s/ckB --checkpoint-every 1 "
        "--resume auto",
        dir)); /* continuing it is what a folder of checkpoints is for */
}

/* Whether process pid holds a flock on path, by /proc/locks (as the refusal finds the holder). */
static int holds_lock(pid_t pid, const char *path) {
    struct stat st;
    if (stat(path, &st) != 0) return 0;
    FILE *f = fopen("/proc/locks", "r");
    if (!f) return 0;
    char line[256];
    int held = 0;
    while (!held && fgets(line, sizeof line, f)) {
        long p;
        unsigned long ino;
        held = sscanf(line, "%*s FLOCK %*s %*s %ld %*x:%*x:%lu", &p, &ino) == 2 && p == pid &&
               ino == (unsigned long)st.st_ino;
    }
    fclose(f);
    return held;
}

/* Whether a checkpoint (a step-N folder) is in `folder` or in its checkpoints/. */
static int has_checkpoint(const char *folder) {
    char sub[320];
    snprintf(sub, sizeof sub, "%s/checkpoints", folder);
    const char *where[] = {folder, sub};
    for (int i = 0; i < 2; i++) {
        DIR *d = opendir(where[i]);
        for (struct dirent *e; d && (e = readdir(d));)
            if (!strncmp(e->d_name, "step-", 5)) {
                closedir(d);
                return 1;
            }
        if (d) closedir(d);
    }
    return 0;
}

/* Starts a long run on `folder` in the background and returns its pid once it holds the folder's
 * lock and has saved its first checkpoint (at most 20 s each: a sanitizer build starts slowly).
 * Killed before that, a run directory would hold a run's metrics and no checkpoint, which
 * --resume auto refuses to start over on (seen under load). */
static pid_t start_long_run(const char *folder_flag, const char *folder) {
    pid_t pid = fork();
    cr_assert_geq(pid, 0);
    if (pid == 0) {
        freopen("/dev/null", "w", stdout);
        freopen("/dev/null", "w", stderr);
        execl(fsdp_bin(), fsdp_bin(), "train", "--model", "toy", "--ranks", "2", "--steps",
              "200000", folder_flag, folder, "--checkpoint-every", "20", "--keep", "2", "--resume",
              "auto", (char *)NULL);
        _exit(127);
    }
    for (int i = 0; i < 800 && !holds_lock(pid, folder); i++) usleep(25 * 1000);
    cr_assert(holds_lock(pid, folder), "the first job holds %s's lock", folder);
    for (int i = 0; i < 800 && !has_checkpoint(folder); i++) usleep(25 * 1000);
    cr_assert(has_checkpoint(folder), "the first job saved a checkpoint in %s", folder);
    return pid;
}

/* Case 4: two jobs on one folder; the second refused naming the first's pid; once the first is
 * killed (SIGKILL: no clean-up of its own) the folder is free again. */
static void one_job_at_a_time(const char *flag, const char *sub) {
    char folder_copy[300];
    snprintf(folder_copy, sizeof folder_copy, "%s/%s", dir, sub);
    pid_t first = start_long_run(flag, folder_copy);
    expect_fsdp_refused(
        fmt_text("train --model toy --ranks 2 --steps 4 %s %s --resume auto", flag, folder_copy),
        fmt_text("is in use by another job (pid %ld)", (long)first));
    kill(first, SIGKILL);
    int status;
    waitpid(first, &status, 0);
    /* continuing what the killed job left, a few steps further, shows the lock is gone */
    int code;
    char *out = fsdp_run(&code, "2>&1", "ckpt inspect %s%s", folder_copy,
                         strcmp(flag, "--run-dir") ? "" : "/checkpoints");
    const char *at = strstr(out, "\nstep        ");
    long step = at ? strtol(at + strlen("\nstep        "), NULL, 10) : 0;
    free(out);
    out = fsdp_run(&code, "2>&1", "train --model toy --ranks 2 --steps %ld %s %s --resume auto",
                   step + 4, flag, folder_copy);
    cr_expect_eq(code, 0, "the lock went with the killed job:\n%s", out);
    free(out);
}

Test(folders, one_job_at_a_time_in_a_checkpoint_folder, .init = setup_dir, .fini = teardown_dir,
     .timeout = 60) {
    one_job_at_a_time("--checkpoint-dir", "ck");
}

Test(folders, one_job_at_a_time_in_a_run_directory, .init = setup_dir, .fini = teardown_dir,
     .timeout = 60) {
    one_job_at_a_time("--run-dir", "run");
}

/* Case 5: a finished run whose checkpoints/ was deleted is not started over by --resume auto. */
Test(folders, resume_auto_does_not_start_a_finished_run_over, .init = setup_dir,
     .fini = teardown_dir, .timeout = 60) {
    free(fsdp_ok("train --model toy --steps 4 --run-dir %s/run", dir));
    cr_assert_eq(system(fmt_text("rm -r %s/run/checkpoints", dir)), 0);
    char *before = tree_bytes(fmt_text("%s/run", dir));
    expect_fsdp_refused(fmt_text("train --model toy --steps 4 --run-dir %s/run --resume auto", dir),
                        "holds a run (model.safetensors) but no checkpoint to continue it from");
    char *after = tree_bytes(fmt_text("%s/run", dir));
    cr_expect_str_eq(after, before, "the run's files as they were");
    free(before);
    free(after);
}
