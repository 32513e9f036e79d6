/* --backend mpi when things go wrong, and what a real job hands on: a rank that fails or is
 * SIGKILLed ends the job within 10 s naming it, and --resume auto then ends as the run that
 * never stopped; a rank that stops taking part is ended by --timeout; checkpoints move between
 * MPI and the simulator at other world sizes; the trace holds every rank; bad starts are one
 * line and exit 2; a run that diverges is one line and exit 1, whichever way it went non-finite. */
#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "base/clock.h"
#include "io/safetensors.h"
#include "tests/util.h"

#define TOY "train --model toy --steps 8"

/* The parameters the uninterrupted run ends with, at `ranks`, in the simulator (which the
 * MPI runs match bit for bit: test_mpi_train.c). */
static void reference_dump(const char *dir, int ranks, char *path, size_t n) {
    snprintf(path, n, "%s/reference.txt", dir);
    free(fsdp_ok("%s --ranks %d --dump-params %s", TOY, ranks, path));
}

/* How many times `what` occurs in `text`. */
static int occurrences(const char *text, const char *what) {
    int n = 0;
    for (const char *at = text; (at = strstr(at, what)); at += strlen(what)) n++;
    return n;
}

/* Runs a job that fails as `fault` says; asserts it ended within 10 s, non-zero, with one line
 * about a rank, the one saying `names`; then resumes it under MPI and asserts it ends as the
 * uninterrupted run. */
static void expect_fault_then_resume(const char *fault, const char *names) {
    skip_without_mpi();
    char dir[256], ref[320], out[320];
    fresh_test_dir(dir, sizeof dir, "mpi_fault", fault[2] == 'k' ? "kill" : "fail");
    reference_dump(dir, 3, ref, sizeof ref);
    int code;
    double t0 = clock_seconds();
    char *said = mpi_fsdp_run(&code, 3,
                              "%s --backend mpi --ranks 3 --checkpoint-dir %s/ck "
                              "--checkpoint-every 2 %s",
                              TOY, dir, fault);
    double took = clock_seconds() - t0;
    cr_expect_neq(code, 0, "%s: the job should have failed:\n%s", fault, said);
    cr_expect_lt(took, 10.0, "%s: the job took %.1f s to end", fault, took);
    cr_expect(strstr(said, names), "%s: nothing said '%s':\n%s", fault, names, said);
    cr_expect_eq(occurrences(said, "fsdp: rank "), 1, "%s: one line about a rank, not:\n%s", fault,
                 said);
    free(said);
    snprintf(out, sizeof out, "%s/resumed.txt", dir);
    said = mpi_fsdp_run(&code, 3,
                        "%s --backend mpi --ranks 3 --checkpoint-dir %s/ck --checkpoint-every 2 "
                        "--resume auto --dump-params %s",
                        TOY, dir, out);
    cr_assert_eq(code, 0, "resuming after %s:\n%s", fault, said);
    cr_expect(strstr(said, "resume: ") && !strstr(said, "no checkpoint yet"),
              "after %s the run should resume from a checkpoint:\n%s", fault, said);
    free(said);
    double d = dump_rel_diff(out, ref);
    cr_expect_leq(d, 1e-5, "after %s: relative L2 %.3g against the uninterrupted run", fault, d);
    remove_test_dir(dir);
}

Test(mpi_faults, a_rank_sigkilled_mid_save_ends_the_job_and_resume_auto_continues) {
    /* rank 0 kills itself half-way through step 6's checkpoint: step 4's stays the newest */
    expect_fault_then_resume("--kill-in-save 6", "rank 0 (pid");
}

Test(mpi_faults, a_failing_rank_ends_the_job_and_resume_auto_continues) {
    expect_fault_then_resume("--fail-at 5:2", "rank 2 failed at step 5");
}

/* The wall clock, as `date +%s.%N` reads it (the shell stamps when it sent the signal). */
static double wall_seconds(void) {
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* What a 3-rank toy job that would run for ever printed (into said, n bytes) when, once it is
 * training (its first checkpoint is there: a fixed sleep is not enough on a loaded machine,
 * where a rank signalled inside MPI_Init is mpirun's to report), its youngest rank was sent
 * `signal` ("STOP", "KILL"), with `flags` added; the shell prints "signalled PID" first.
 * Returns the job's wait status; *took is how long it ran after the signal. */
static int job_signalled_while_training(const char *signal, const char *flags, char *said, size_t n,
                                        double *took) {
    char dir[256], cmd[4096];
    fresh_test_dir(dir, sizeof dir, "mpi_fault", signal);
    /* the marker finds the ranks: command lines that start with the binary (the shells,
     * timeout and mpirun hold the same words further on); the shell says what it signalled */
    snprintf(cmd, sizeof cmd,
             "(for i in $(seq 600); do ls %s/ck 2>/dev/null | grep -q step- && break; sleep 0.1; "
             "done; pid=$(pgrep -n -f '^%s train .*%s/marker'); echo \"signalled $pid ($(tr '\\0' "
             "' ' < /proc/$pid/cmdline | cut -c1-60))\"; "
             "echo $(date +%%s.%%N) > %s/signalled_at; kill -%s $pid) & "
             "%s -np 3 %s train --backend mpi --ranks 3 --model toy --steps 100000000 %s "
             "--checkpoint-dir %s/ck --checkpoint-every 500 --save-full %s/marker.safetensors 2>&1",
             dir, fsdp_bin(), dir, dir, signal, MPIRUN, fsdp_bin(), flags, dir, dir);
    FILE *p = popen(cmd, "r");
    cr_assert(p);
    size_t got = fread(said, 1, n - 1, p);
    said[got] = 0;
    int status = pclose(p);
    double ended = wall_seconds();
    char at_path[300];
    snprintf(at_path, sizeof at_path, "%s/signalled_at", dir);
    char *at = read_text_file(at_path, NULL);
    *took = ended - atof(at);
    free(at);
    remove_test_dir(dir);
    return status;
}

/* The same, asserting the job failed within `within` seconds of the signal; returns what it
 * printed (a buffer of this file's, valid until the next call). */
static const char *job_ended_by_signal(const char *signal, const char *flags, double within) {
    skip_without_mpi();
    static char said[16384];
    double took;
    int status = job_signalled_while_training(signal, flags, said, sizeof said, &took);
    cr_expect_neq(status, 0, "the job should have failed:\n%s", said);
    cr_expect_lt(took, within, "the job took %.1f s to end after the %s", took, signal);
    return said;
}

/* One rank stopped (SIGSTOP) mid-run: the others' next collective times out, naming the rank,
 * the unit and the collective, and the job ends. */
Test(mpi_faults, a_rank_that_stops_taking_part_is_ended_by_the_timeout) {
    const char *said = job_ended_by_signal("STOP", "--timeout 2", 13.0);
    cr_expect(strstr(said, "did not complete in 2 s (--timeout)") && strstr(said, "fsdp: rank "),
              "no rank named the collective that hung:\n%s", said);
}

/* A rank SIGKILLed from outside mid-run: the survivors' lowest rank names it (rank and pid)
 * and the job ends within 10 s. (--kill-in-save above is a SIGKILL too, at the worst moment
 * for the checkpoint, and is resumed from.) */
Test(mpi_faults, a_rank_sigkilled_from_outside_is_named_and_ends_the_job) {
    const char *said = job_ended_by_signal("KILL", "", 10.0);
    const char *killed = strstr(said, "signalled ");
    cr_assert(killed, "the kill did not happen:\n%s", said);
    int pid = atoi(killed + strlen("signalled "));
    cr_assert_gt(pid, 0, "%s", said);
    cr_expect(strstr(said, fmt_text("(pid %d) has ended", pid)),
              "no line named the killed rank (pid %d):\n%s", pid, said);
    cr_expect_eq(occurrences(said, "fsdp: rank "), 1, "one line about a rank, not:\n%s", said);
}

/* Saved under MPI at 4 ranks, resumed in the simulator at 2; saved in the simulator at 2,
 * resumed under MPI at 4: both end as the uninterrupted run. The global batch stays 8 (4 ranks
 * of 2, 2 of 4), so every step sees the same samples whatever the world. */
#define AT4 "train --model toy --ranks 4 --batch-size 2"
#define AT2 "train --model toy --ranks 2 --batch-size 4"

Test(mpi_faults, checkpoints_move_between_mpi_and_the_simulator) {
    skip_without_mpi();
    char dir[256], ref[320], out[320];
    fresh_test_dir(dir, sizeof dir, "mpi_ckpt", "cross");
    snprintf(ref, sizeof ref, "%s/reference.txt", dir);
    free(fsdp_ok("%s --steps 8 --dump-params %s", AT2, ref));
    int code;
    char *said =
        mpi_fsdp_run(&code, 4, "%s --backend mpi --steps 4 --checkpoint-dir %s/mpi", AT4, dir);
    cr_assert_eq(code, 0, "%s", said);
    free(said);
    snprintf(out, sizeof out, "%s/sim_resumed.txt", dir);
    free(fsdp_ok("%s --steps 8 --checkpoint-dir %s/mpi --resume auto --dump-params %s", AT2, dir,
                 out));
    double d = dump_rel_diff(out, ref);
    cr_expect_leq(d, 1e-5, "MPI at 4 -> simulator at 2: relative L2 %.3g", d);

    free(fsdp_ok("%s --steps 4 --checkpoint-dir %s/sim", AT2, dir));
    snprintf(out, sizeof out, "%s/mpi_resumed.txt", dir);
    said = mpi_fsdp_run(&code, 4,
                        "%s --backend mpi --steps 8 --checkpoint-dir %s/sim --resume auto "
                        "--dump-params %s",
                        AT4, dir, out);
    cr_assert_eq(code, 0, "%s", said);
    free(said);
    d = dump_rel_diff(out, ref);
    cr_expect_leq(d, 1e-5, "simulator at 2 -> MPI at 4: relative L2 %.3g", d);
    remove_test_dir(dir);
}

/* --trace-out of an MPI run holds every rank's events and replays; the memory table has each
 * rank's measured peak resident memory beside its accounted bytes. */
Test(mpi_faults, the_trace_holds_every_rank_and_memory_is_measured_too) {
    skip_without_mpi();
    char dir[256];
    fresh_test_dir(dir, sizeof dir, "mpi_trace", "t");
    int code;
    char *said = mpi_fsdp_run(&code, 3,
                              "train --model toy --steps 2 --backend mpi --ranks 3 --memory "
                              "--trace-out %s/run.trace",
                              dir);
    cr_assert_eq(code, 0, "%s", said);
    cr_expect(strstr(said, "process resident") && strstr(said, "(peak RSS, measured)"),
              "no measured resident row:\n%s", said);
    free(said);
    char *replay = fsdp_ok("viz --trace %s/run.trace --plain --events 1", dir);
    for (int r = 0; r < 3; r++)
        cr_expect(strstr(replay, fmt_text("GPU %d ", r)), "rank %d missing from the replay:\n%s", r,
                  replay);
    cr_expect(strstr(replay, " us measured)"), "the replay should say its times are measured:\n%s",
              replay);
    free(replay);
    remove_test_dir(dir);
}

Test(mpi_faults, bad_starts_are_one_line_and_exit_2) {
    skip_without_mpi();
    int code;
    char *said = mpi_fsdp_run(&code, 2, "train --model toy --backend mpi --ranks 3");
    cr_expect_eq(code, 2, "%s", said);
    cr_expect_str_eq(said, "fsdp: --ranks 3: this is rank 0 of 2 processes (openmpi); pass "
                           "--ranks 2\n");
    free(said);
    said = mpi_fsdp_run(&code, 2, "train --model toy --backend mpi --ranks 2 --steps nope");
    cr_expect_eq(code, 2, "%s", said);
    cr_expect_str_eq(said, "fsdp: --steps must be an integer from 0 to 1000000000 (got 'nope')\n");
    free(said);
    said = fsdp_run(&code, "2>&1", "train --model toy --backend mpi --ranks 2");
    cr_expect_eq(code, 2, "%s", said);
    cr_expect_str_eq(said, "fsdp: --backend mpi runs one process per rank: start it with mpirun "
                           "-np 2 (or srun)\n");
    free(said);
    said = fsdp_run(&code, "2>&1", "train --model toy --backend mpi --ranks 2 --max-restarts 1");
    cr_expect_eq(code, 2, "%s", said);
    free(said);
}

/* Every rank sees the divergence at the same step (the loss is all-reduced each step under one
 * process per rank, the gradient norm always, a checkpoint's values are agreed on before it is
 * published): rank 0 alone says it, once, and the job exits 1 leaving the newest checkpoint. */
Test(mpi_faults, a_run_that_diverges_is_one_line_and_exit_1) {
    skip_without_mpi();
    char dir[256], weights[320], listing[512];
    fresh_test_dir(dir, sizeof dir, "mpi_fault", "diverge");
    int code;
    char *said = mpi_fsdp_run(&code, 3,
                              "train --model toy --backend mpi --ranks 3 --steps 12 --optim adamw "
                              "--lr 10 --weight-decay 100 --checkpoint-dir %s/ck "
                              "--checkpoint-every 3",
                              dir);
    cr_expect_eq(code, 1, "%s", said);
    cr_expect_eq(occurrences(said, "fsdp: step"), 1, "one line:\n%s", said);
    cr_expect_neq(strstr(said, "fsdp: step 8: the loss is inf (training diverged; the newest "
                               "checkpoint, step 6, is intact)\n"),
                  NULL, "%s", said);
    free(said);
    snprintf(listing, sizeof listing,
             "test \"$(ls -A %s/ck | tr '\\n' ' ')\" = "
             "'step-00000003 step-00000006 '",
             dir);
    cr_expect_eq(system(listing), 0, "%s", listing);
    /* Lb's output near 3e38 makes Lc's gradient inf while the loss stays finite */
    snprintf(weights, sizeof weights, "%s/toy.safetensors", dir);
    write_overflowing_toy(weights);
    said = mpi_fsdp_run(&code, 3,
                        "train --model toy --backend mpi --ranks 3 --steps 3 --init-from %s "
                        "--clip-grad-norm 1",
                        weights);
    cr_expect_eq(code, 1, "%s", said);
    cr_expect_eq(occurrences(said, "fsdp: step"), 1, "one line:\n%s", said);
    cr_expect_neq(strstr(said, "fsdp: step 1: the gradient norm is inf (training diverged)\n"),
                  NULL, "%s", said);
    free(said);
    said = mpi_fsdp_run(&code, 3,
                        "train --model toy --backend mpi --ranks 3 --steps 3 --init-from %s "
                        "--checkpoint-dir %s/ck2 --checkpoint-every 1",
                        weights, dir);
    cr_expect_eq(code, 1, "%s", said);
    cr_expect_eq(occurrences(said, "fsdp: step"), 1, "one line:\n%s", said);
    cr_expect_neq(strstr(said, "fsdp: step 1: Lc.weight's param holds values that are not finite, "
                               "so its checkpoint was not saved (training diverged; no checkpoint "
                               "was saved before it)\n"),
                  NULL, "%s", said);
    free(said);
    snprintf(listing, sizeof listing, "test -z \"$(ls -A %s/ck2)\"", dir);
    cr_expect_eq(system(listing), 0, "nothing is left in ck2");
    remove_test_dir(dir);
}

/* A build that found no mpicc (and no nvcc), started as a real job asks: one line, exit 2.
 * make test builds that binary beside fsdp from the same objects ($FSDP_NO_BACKENDS_BIN). */
Test(mpi_faults, a_build_without_mpi_says_so) {
    skip_without_mpi();
    const char *bare = getenv("FSDP_NO_BACKENDS_BIN");
    if (!bare || !*bare) cr_skip_test("FSDP_NO_BACKENDS_BIN is not set (make test sets it)");
    char cmd[1024];
    snprintf(cmd, sizeof cmd, "%s -np 2 %s train --model toy --backend mpi --ranks 2 2>&1", MPIRUN,
             bare);
    FILE *p = popen(cmd, "r");
    cr_assert(p);
    char said[4096] = "";
    size_t n = fread(said, 1, sizeof said - 1, p);
    said[n] = 0;
    int status = pclose(p);
    cr_expect(WIFEXITED(status) && WEXITSTATUS(status) == 2, "exit status %d:\n%s", status, said);
    cr_expect_str_eq(said, "fsdp: --backend mpi: this fsdp was built without MPI: mpicc was not "
                           "found (apt-get install libopenmpi-dev openmpi-bin)\n");
    snprintf(cmd, sizeof cmd, "%s train --model toy --backend cuda --ranks 1 2>&1", bare);
    p = popen(cmd, "r");
    cr_assert(p);
    n = fread(said, 1, sizeof said - 1, p);
    said[n] = 0;
    status = pclose(p);
    cr_expect(WIFEXITED(status) && WEXITSTATUS(status) == 2, "exit status %d:\n%s", status, said);
    cr_expect_str_eq(said, "fsdp: --backend cuda: no GPU to run on (this fsdp was built without "
                           "CUDA: nvcc was not found)\n");
}
