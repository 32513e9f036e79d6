/* Checkpoints through the CLI: a resumed run ends with the uninterrupted run's parameters,
 * saves are atomic and pruned, and a damaged checkpoint is one clear line and exit 2. */
#include <criterion/criterion.h>
#include <math.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "io/safetensors.h"
#include "tests/util.h"

/* The resumed run's parameters are the uninterrupted run's bit for bit at the same world size,
 * under any strategy, and within fp32 rounding at another world size with the same global batch. */

/* A test's directory, and in it the parameters dumped by a run never interrupted and by one
 * resumed from a checkpoint. */
static char dir[128], full[256], resumed[256];

static void fresh_dir(const char *tag) {
    fresh_test_dir(dir, sizeof dir, "ckpt", tag);
    snprintf(full, sizeof full, "%s/full.txt", dir);
    snprintf(resumed, sizeof resumed, "%s/resumed.txt", dir);
}

static int same_file(const char *a, const char *b) {
    char cmd[1024];
    snprintf(cmd, sizeof cmd, "cmp -s %s %s", a, b);
    return system(cmd) == 0;
}

Test(checkpoint, resume_is_bit_identical_at_the_same_world_size, .timeout = 60) {
    const char *cases[] = {"--strategy zero3",
                           "--strategy zero2",
                           "--strategy zero1",
                           "--strategy ddp",
                           "--strategy hsdp --ranks 4 --replicas 2",
                           "--strategy zero3 --param-dtype fp16 --reduce-dtype fp16",
                           "--strategy zero2 --layout deepspeed --param-dtype bf16 "
                           "--reduce-dtype bf16",
                           "--strategy zero1 --layout deepspeed --param-dtype fp16 "
                           "--reduce-dtype fp16"};
    for (size_t c = 0; c < sizeof cases / sizeof *cases; c++) {
        fresh_dir("same");
        free(fsdp_ok("train %s --steps 12 --dump-params %s", cases[c], full));
        /* a run stopped after 5 steps with checkpoints every 5, then resumed to 12 */
        free(fsdp_ok("train %s --steps 5 --checkpoint-dir %s/ck --checkpoint-every 5", cases[c],
                     dir));
        char *out = fsdp_ok("train %s --steps 12 --checkpoint-dir %s/ck --resume auto "
                            "--dump-params %s",
                            cases[c], dir, resumed);
        cr_expect_neq(strstr(out, "resume: "), NULL, "%s", out);
        cr_expect_neq(strstr(out, "step-00000005"), NULL, "resumed from step 5: %.300s", out);
        cr_expect_eq(strstr(out, "step      1 "), NULL, "steps 1-5 are not run again");
        cr_expect(same_file(full, resumed), "%s: the resumed run differs", cases[c]);
        free(out);
    }
}

Test(checkpoint, a_checkpoint_loads_at_another_world_size_and_strategy, .timeout = 60) {
    fresh_dir("reshard");
    /* global batch 24 in every run: 4 x 6, 3 x 8, 2 x 12, 1 x 24 */
    free(fsdp_ok("train --ranks 4 --batch-size 6 --steps 10 --dump-params %s", full));
    free(fsdp_ok("train --ranks 4 --batch-size 6 --steps 4 --checkpoint-dir %s/ck "
                 "--checkpoint-every 4",
                 dir));
    const char *later[] = {"--ranks 3 --batch-size 8 --strategy zero2",
                           "--ranks 2 --batch-size 12 --strategy zero1",
                           "--ranks 1 --batch-size 24 --strategy ddp",
                           "--ranks 4 --batch-size 6 --strategy hsdp --replicas 2"};
    for (int i = 0; i < 4; i++) {
        free(fsdp_ok("train %s --steps 10 --resume %s/ck/step-00000004 --dump-params %s", later[i],
                     dir, resumed));
        double d = dump_rel_diff(resumed, full);
        cr_expect_leq(d, 1e-5, "resumed as %s: relative difference %.3g", later[i], d);
    }
}

/* A checkpoint holds fp32 values whatever the layout (DeepSpeed's saves its master), and both
 * layouts train to the same values: one saved under either resumes under the other to the
 * bits of a run never interrupted, at another strategy too. */
Test(checkpoint, a_checkpoint_moves_between_layouts, .timeout = 60) {
    const char *bf16 = "--ranks 3 --param-dtype bf16 --reduce-dtype bf16";
    struct {
        const char *before, *after;
    } cases[] = {{"--layout deepspeed --strategy zero1", "--layout fsdp --strategy zero3"},
                 {"--layout fsdp --strategy zero3", "--layout deepspeed --strategy zero2"},
                 {"--layout deepspeed --strategy zero2", "--layout deepspeed --strategy ddp"}};
    for (size_t c = 0; c < sizeof cases / sizeof *cases; c++) {
        fresh_dir("layouts");
        free(fsdp_ok("train %s %s --steps 8 --dump-params %s", bf16, cases[c].before, full));
        free(fsdp_ok("train %s %s --steps 4 --checkpoint-dir %s/ck --checkpoint-every 4", bf16,
                     cases[c].before, dir));
        free(fsdp_ok("train %s %s --steps 8 --checkpoint-dir %s/ck --resume auto "
                     "--dump-params %s",
                     bf16, cases[c].after, dir, resumed));
        cr_expect(same_file(full, resumed), "saved with %s, resumed with %s: they differ",
                  cases[c].before, cases[c].after);
    }
}

Test(checkpoint, saves_are_pruned_and_a_killed_save_is_ignored) {
    fresh_dir("keep");
    free(fsdp_ok("train --steps 9 --checkpoint-dir %s/ck --checkpoint-every 2 --keep 2", dir));
    char path[256];
    struct stat st;
    const long kept[] = {8, 9}, gone[] = {2, 4, 6};
    for (int i = 0; i < 2; i++) {
        snprintf(path, sizeof path, "%s/ck/step-%08ld/meta.json", dir, kept[i]);
        cr_expect_eq(stat(path, &st), 0, "%s is kept", path);
    }
    for (int i = 0; i < 3; i++) {
        snprintf(path, sizeof path, "%s/ck/step-%08ld", dir, gone[i]);
        cr_expect_neq(stat(path, &st), 0, "%s was pruned", path);
    }
    /* what a save killed half-way leaves: a temporary directory and a step without meta.json */
    char cmd[1024];
    snprintf(cmd, sizeof cmd,
             "mkdir -p %s/ck/.step-00000011.tmp %s/ck/step-00000012 && "
             "echo junk > %s/ck/step-00000012/rank-00000.bin",
             dir, dir, dir);
    cr_assert_eq(system(cmd), 0);
    char *out = fsdp_ok("train --steps 10 --checkpoint-dir %s/ck --resume auto", dir);
    cr_expect_neq(strstr(out, "step-00000009"), NULL, "the newest complete one: %.300s", out);
    free(out);
    /* --resume auto with nothing saved starts from the beginning */
    out = fsdp_ok("train --steps 2 --checkpoint-dir %s/empty --resume auto", dir);
    cr_expect_neq(strstr(out, "no checkpoint yet, from the start"), NULL, "%.300s", out);
    free(out);
}

static int killed_by_sigkill(int status) {
    /* the shell may exec fsdp (the signal shows) or wait for it (128 + 9) */
    return (WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL) ||
           (WIFEXITED(status) && WEXITSTATUS(status) == 128 + SIGKILL);
}

Test(checkpoint, a_process_killed_during_a_save_leaves_the_previous_checkpoint_loadable) {
    fresh_dir("kill");
    char path[512];
    free(fsdp_ok("train --steps 6 --dump-params %s", full));
    char args[512];
    snprintf(args, sizeof args,
             "train --steps 6 --checkpoint-dir %s/ck --checkpoint-every 2 --kill-in-save 4", dir);
    int status;
    free(fsdp_output(args, "> /dev/null 2>&1", &status));
    cr_assert(killed_by_sigkill(status), "the save of step 4 was not killed (status %d)", status);
    struct stat st;
    /* the kill came mid-save: a rank file begun, no metadata, no step-4 checkpoint */
    snprintf(path, sizeof path, "%s/ck/.step-00000004.tmp/rank-00000.bin", dir);
    cr_assert_eq(stat(path, &st), 0, "%s was being written", path);
    snprintf(path, sizeof path, "%s/ck/.step-00000004.tmp/meta.json", dir);
    cr_expect_neq(stat(path, &st), 0, "no metadata was written");
    snprintf(path, sizeof path, "%s/ck/step-00000004", dir);
    cr_expect_neq(stat(path, &st), 0, "step 4 does not exist");
    /* the previous checkpoint is whole: every CRC checks */
    snprintf(args, sizeof args, "ckpt inspect %s/ck/step-00000002", dir);
    char *out = fsdp_output(args, "2>&1", &status);
    cr_expect_eq(status, 0, "%.400s", out);
    free(out);
    /* and a resume from it ends where the run that was never killed did */
    out = fsdp_ok("train --steps 6 --checkpoint-dir %s/ck --checkpoint-every 2 --resume auto "
                  "--dump-params %s",
                  dir, resumed);
    cr_expect_neq(strstr(out, "step-00000002"), NULL, "resumed from step 2: %.300s", out);
    free(out);
    cr_expect(same_file(full, resumed), "the resumed run differs from the uninterrupted one");
    snprintf(path, sizeof path, "%s/ck/.step-00000004.tmp", dir);
    cr_expect_neq(stat(path, &st), 0, "the next save of step 4 cleared what the kill left");
    snprintf(path, sizeof path, "%s/ck/step-00000006/meta.json", dir);
    cr_expect_eq(stat(path, &st), 0);
    out = fsdp_output("train --kill-in-save 2", "2>&1 >/dev/null", &status);
    cr_expect(WIFEXITED(status) && WEXITSTATUS(status) == 2, "%s", out);
    cr_expect_str_eq(out, "fsdp: --kill-in-save needs --checkpoint-dir\n");
    free(out);
}

/* Damages the step-4 checkpoint with `cmd` (%s is its directory) and expects a resume from
 * it to fail with one line mentioning `want`. */
static void expect_refused(const char *cmd, const char *want) {
    fresh_dir("bad");
    free(fsdp_ok("train --steps 4 --checkpoint-dir %s/ck --checkpoint-every 4", dir));
    char ck[256], shell[2048], args[512];
    snprintf(ck, sizeof ck, "%s/ck/step-00000004", dir);
    snprintf(shell, sizeof shell, cmd, ck, ck, ck);
    cr_assert_eq(system(shell), 0, "%s", shell);
    snprintf(args, sizeof args, "train --steps 6 --resume %s", ck);
    int status;
    char *out = fsdp_output(args, "2>&1 >/dev/null", &status); /* stderr alone */
    cr_expect(WIFEXITED(status) && WEXITSTATUS(status) == 2, "`%s` after `%s`: %d", args, shell,
              status);
    cr_expect_neq(strstr(out, want), NULL, "after `%s`: %s", shell, out);
    int lines = 0;
    for (const char *c = out; *c; c++) lines += *c == '\n';
    cr_expect_eq(lines, 1, "one line: %s", out);
    free(out);
}

Test(checkpoint, a_damaged_checkpoint_is_one_line_and_exit_2) {
    /* a flipped byte in rank 1's parameters */
    expect_refused("printf '\\102' | dd of=%s/rank-00001.bin bs=1 seek=0 conv=notrunc 2>/dev/null",
                   "CRC mismatch");
    expect_refused("truncate -s 10 %s/rank-00002.bin", "rank-00002.bin is cut short");
    expect_refused("rm %s/rank-00000.bin", "cannot open");
    expect_refused("rm %s/meta.json", "is not a checkpoint");
    /* any edit of meta.json: its own CRC32 no longer agrees (each field's own check, with the
     * checksum recomputed, is in test_checkpoint_meta.c) */
    expect_refused("sed -i 's/\"version\":2/\"version\":9/' %s/meta.json",
                   "meta.json is damaged: its \"crc32\" line says");
}

/* The ViT too: every tensor (embedding, attention, MLP, head) with its Adam state survives a
 * change from 2 ranks under zero3 to 1 rank. */
Test(checkpoint, a_vit_resumes_at_another_world_size, .timeout = 60) {
    fresh_dir("vit");
    const char *vit = "--model vit-tiny --layers 1 --hidden 16 --heads 2 --mlp 16 --split test "
                      "--eval false";
    free(fsdp_ok("train %s --ranks 2 --batch-size 8 --steps 6 --dump-params %s", vit, full));
    free(fsdp_ok("train %s --ranks 2 --batch-size 8 --steps 3 --checkpoint-dir %s/ck "
                 "--checkpoint-every 3",
                 vit, dir));
    free(fsdp_ok("train %s --ranks 1 --batch-size 16 --steps 6 --resume %s/ck/step-00000003 "
                 "--dump-params %s",
                 vit, dir, resumed));
    double d = dump_rel_diff(resumed, full);
    cr_expect_leq(d, 1e-5, "relative difference %.3g", d);
}

/* The transformer: its embedding, causal blocks and LM head with their Adam state move from 2
 * ranks to 3 (invariant 5), its .config read back to build the model the checkpoint is of. */
Test(checkpoint, a_transformer_resumes_at_another_world_size, .timeout = 60) {
    fresh_dir("transformer");
    const char *tf = "--model transformer --layers 2 --hidden 24 --heads 2 --mlp 32 --seq 16";
    free(fsdp_ok("train %s --ranks 2 --batch-size 6 --steps 6 --dump-params %s", tf, full));
    free(fsdp_ok("train %s --ranks 2 --batch-size 6 --steps 3 --checkpoint-dir %s/ck "
                 "--checkpoint-every 3",
                 tf, dir));
    char *out = fsdp_ok("train %s --ranks 3 --batch-size 4 --steps 6 --resume "
                        "%s/ck/step-00000003 --dump-params %s",
                        tf, dir, resumed);
    cr_expect(strstr(out, "step     4/6") && !strstr(out, "step     3/6"),
              "it went on from "
              "step 3: %s",
              out);
    free(out);
    double d = dump_rel_diff(resumed, full);
    cr_expect_leq(d, 1e-5, "relative difference %.3g", d);
}

/* A rank that fails mid-run (injected) is survived: the job restarts from the newest
 * checkpoint and ends with exactly the parameters of a run that never failed. Without
 * --max-restarts the failure ends the run, naming the rank and step. */
Test(checkpoint, a_failed_rank_restarts_from_the_newest_checkpoint, .timeout = 60) {
    fresh_dir("fail");
    const char *survived = resumed; /* the run that restarted after a failure */
    free(fsdp_ok("train --steps 12 --dump-params %s", full));
    char *out = fsdp_ok("train --steps 12 --checkpoint-dir %s/ck --checkpoint-every 4 "
                        "--fail-at 7:1 --max-restarts 1 --dump-params %s",
                        dir, survived);
    cr_expect_neq(strstr(out, "rank 1 failed at step 7 (injected by --fail-at)"), NULL, "%.400s",
                  out);
    cr_expect_neq(strstr(out, "restart 1 of 1 from"), NULL, "%.400s", out);
    cr_expect_neq(strstr(out, "step-00000004"), NULL, "%.400s", out);
    cr_expect(same_file(full, survived), "the restarted run ends elsewhere");
    free(out);
    /* no checkpoint directory: the restart begins again from step 1, and still ends right */
    free(fsdp_ok("train --steps 12 --fail-at 3 --max-restarts 2 --dump-params %s", survived));
    cr_expect(same_file(full, survived));
    int status;
    out = fsdp_output("train --steps 12 --fail-at 7:1", "2>&1 >/dev/null", &status);
    cr_expect(WIFEXITED(status) && WEXITSTATUS(status) == 1, "status %d", status);
    cr_expect_str_eq(out, "fsdp: rank 1 failed at step 7 (injected by --fail-at)\n");
    free(out);
    out = fsdp_output("train --fail-at 3:5", "2>&1 >/dev/null", &status);
    cr_expect(WIFEXITED(status) && WEXITSTATUS(status) == 2, "%s", out);
    cr_expect_neq(strstr(out, "--fail-at names rank 5 but there are 3 ranks"), NULL, "%s", out);
    free(out);
    out = fsdp_output("train --fail-at x", "2>&1 >/dev/null", &status);
    cr_expect(WIFEXITED(status) && WEXITSTATUS(status) == 2, "%s", out);
    free(out);
}

/* --save-full: the trained model as one safetensors file, gathered unit by unit at 3 ranks; it
 * starts a 2-rank run exactly where the first ended (the dumps match byte for byte), carries the
 * ViT's configuration in __metadata__, and a path that cannot take it is refused before any
 * training. */
Test(checkpoint, save_full_writes_the_trained_model) {
    fresh_dir("savefull");
    const char *vit = "train --model vit-tiny --layers 2 --batch-size 4 --eval false";
    free(fsdp_ok("%s --ranks 3 --steps 3 --save-full %s/m.safetensors --dump-params %s/a.txt", vit,
                 dir, dir));
    free(fsdp_ok("%s --ranks 2 --steps 0 --init-from %s/m.safetensors --dump-params %s/b.txt", vit,
                 dir, dir));
    char a[256], b[256], path[256];
    snprintf(a, sizeof a, "%s/a.txt", dir);
    snprintf(b, sizeof b, "%s/b.txt", dir);
    cr_expect(same_file(a, b), "the saved model does not start where training ended");
    snprintf(path, sizeof path, "%s/m.safetensors", dir);
    SafeTensors st;
    Err err = {0};
    cr_assert_eq(st_open(&st, path, &err), 0, "%s", err.msg);
    cr_expect_str_eq(st_metadata(&st, "layers"), "2");
    cr_expect_str_eq(st_metadata(&st, "hidden"), "128");
    cr_expect_str_eq(st_metadata(&st, "fsdp_step"), "3");
    cr_expect_eq(st.n, 4 + 2 * 12 + 4, "every parameter: embed, two blocks, head");
    st_free(&st);
    int status;
    char args[512];
    snprintf(args, sizeof args, "%s --steps 1 --dump-params %s/c.txt --save-full %s", vit, dir,
             dir);
    char *out = fsdp_output(args, "2>&1", &status);
    cr_expect(WIFEXITED(status) && WEXITSTATUS(status) == 2, "%s", out);
    cr_expect(strstr(out, "is a directory") != NULL, "%s", out);
    snprintf(path, sizeof path, "%s/c.txt", dir);
    cr_expect_neq(access(path, F_OK), 0, "nothing written");
    free(out);
}
