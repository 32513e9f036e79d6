/* train --val-size through the CLI: bad input is one line and exit 2; the checkpoint dir's best
 * is the validation with the lowest loss, outlives --keep, survives a kill mid-save and a resume,
 * and is what ckpt inspect and consolidate read; each epoch's mean in --json is the mean of its
 * step lines. A small ViT on the test split, so each run takes a second or so. */
#include <cjson/cJSON.h>
#include <criterion/criterion.h>
#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "tests/util.h"

/* One block, hidden 16, on FashionMNIST's test split (its last 1000 images held out), 16 images
 * a step. At lr 0.003 the held-out loss falls at each of the validations at 10, 20, 30 and 40 by
 * 3% or more, a margin no GEMM kernel's rounding closes; resumed at lr 0.1 (far too high) it
 * goes up by a fifth. That is how a case gets its lowest loss before its end on every machine: at
 * lr 0.03 the curve went up and down, and which step was lowest hung on the CPU's rounding. */
#define SMALL_VIT_AT(lr)                                                                           \
    "train --model vit-tiny --layers 1 --hidden 16 --heads 2 --mlp 16 --split test --ranks 2 "     \
    "--batch-size 8 --lr " lr
#define SMALL_VIT SMALL_VIT_AT("0.003")
#define VALIDATED " --val-size 1000 --eval-every 10 --checkpoint-every 20"
#define HELD_OUT SMALL_VIT VALIDATED
#define STORMY SMALL_VIT_AT("0.1") VALIDATED

static char dir[128];

static void shell(const char *cmd) {
    cr_assert_eq(system(cmd), 0, "%s", cmd);
}

/* The validations of a --json run: their steps, losses and best marks, in order. */
typedef struct Validations {
    long step[64];
    double loss[64];
    int best[64], n;
} Validations;

static Validations validations_of(char *json) {
    Validations v = {.n = 0};
    for (char *line = strtok(json, "\n"); line; line = strtok(NULL, "\n")) {
        cJSON *o = cJSON_Parse(line);
        if (o && cJSON_IsTrue(cJSON_GetObjectItem(o, "validation"))) {
            cr_assert_lt(v.n, 64);
            v.step[v.n] = (long)cJSON_GetObjectItem(o, "step")->valuedouble;
            v.loss[v.n] = cJSON_GetObjectItem(o, "val_loss")->valuedouble;
            v.best[v.n] = cJSON_IsTrue(cJSON_GetObjectItem(o, "best"));
            v.n++;
        }
        cJSON_Delete(o);
    }
    return v;
}

/* Where a link points, "" when path is no link. */
static void link_of(const char *path, char *target, size_t n) {
    ssize_t len = readlink(path, target, n - 1);
    target[len > 0 ? len : 0] = 0;
}

static void expect_same_file(const char *a, const char *b) {
    size_t na, nb;
    char *x = read_text_file(a, &na), *y = read_text_file(b, &nb);
    cr_expect(na == nb && !memcmp(x, y, na), "%s and %s differ", a, b);
    free(x);
    free(y);
}

Test(validation_cli, bad_input_is_one_line_and_exit_2) {
    const UsageCase cases[] = {
        {"train --model vit-tiny --split test --val-size 10000",
         "fsdp: --val-size 10000 holds out the whole test split (10000 images); it must be below "
         "10000"},
        {SMALL_VIT " --val-size 9990",
         "fsdp: --batch-size 8 x --ranks 2 x --grad-accum 1 = 16 samples a step, more than the 10 "
         "images --val-size 9990 leaves to train on"},
        {"train --model vit-tiny --val-size 0",
         "fsdp: --val-size must be an integer from 1 to 1000000000 (got '0')"},
        {"train --model vit-tiny --val-size 1000 --eval-every 0",
         "fsdp: --eval-every must be an integer from 1 to 1000000000 (got '0')"},
        {"train --model vit-tiny --eval-every 10",
         "fsdp: --eval-every needs --val-size N (the held-out samples it evaluates)"},
        {"train --model vit-tiny --val-size 1000 --eval false",
         "fsdp: --val-size evaluates the samples it holds out; it cannot go with --eval false"},
        {"train --val-size 10",
         "fsdp: --val-size holds out images or sequences: it applies to the ViT models and the "
         "transformers, not the toy"},
        {"train --model transformer --val-size 40260",
         "fsdp: --val-size 40260 holds out the whole text (40260 sequences); it must be below "
         "40260"},
    };
    expect_usage_errors(cases, sizeof cases / sizeof *cases);
    /* a best that is not fsdp's link is refused, not replaced */
    fresh_test_dir(dir, sizeof dir, "validation_cli", "notlink");
    char cmd[512];
    snprintf(cmd, sizeof cmd, "mkdir -p %s/ck/best && echo mine > %s/ck/best/notes", dir, dir);
    shell(cmd);
    snprintf(cmd, sizeof cmd, HELD_OUT " --steps 20 --checkpoint-dir %s/ck", dir);
    free(
        expect_usage_error_text(cmd, "/ck/best is not the link fsdp keeps to the best checkpoint"));
    snprintf(cmd, sizeof cmd, "%s/ck/best/notes", dir);
    char *notes = read_text_file(cmd, NULL);
    cr_expect_str_eq(notes, "mine\n");
    free(notes);
    remove_test_dir(dir);
}

/* 40 calm steps into checkpoint dir `ck`, then resumed to 60 at the stormy rate; `extra` goes
 * to both. The validations of both runs, in order. */
static Validations calm_to_40_then_stormy_to_60(const char *extra) {
    char *calm = fsdp_ok(HELD_OUT " --steps 40 %s --json", extra);
    char *stormy = fsdp_ok(STORMY " --steps 60 %s --resume auto --json", extra);
    size_t n = strlen(calm) + strlen(stormy) + 1;
    char *both = malloc(n);
    cr_assert(both);
    snprintf(both, n, "%s%s", calm, stormy);
    Validations v = validations_of(both);
    free(both);
    free(calm);
    free(stormy);
    return v;
}

/* The index of the lowest loss, asserted lower than every other by 1% (so that no machine's
 * rounding picks another). */
static int lowest_by_a_margin(const Validations *v) {
    int lowest = 0;
    for (int i = 1; i < v->n; i++)
        if (v->loss[i] < v->loss[lowest]) lowest = i;
    for (int i = 0; i < v->n; i++)
        cr_assert(i == lowest || v->loss[lowest] < 0.99 * v->loss[i],
                  "step %ld's loss %.6f is within 1%% of the lowest, step %ld's %.6f", v->step[i],
                  v->loss[i], v->step[lowest], v->loss[lowest]);
    return lowest;
}

/* Validated every 10 steps, checkpoints every 20 keeping 1: best points at the lowest loss's
 * step (40: neither the newest checkpoint nor one --keep kept), holds the very files an identical
 * run saved as step-00000040, records that loss, and ckpt reads it; a resumed run measures itself
 * against it (50 and 60 are no best); --resume auto takes the newest step, not best. */
Test(validation_cli, best_is_the_lowest_validation_loss_and_outlives_keep) {
    fresh_test_dir(dir, sizeof dir, "validation_cli", "best");
    char extra[256];
    snprintf(extra, sizeof extra, "--keep 1 --checkpoint-dir %s/ck", dir);
    Validations v = calm_to_40_then_stormy_to_60(extra);
    cr_assert_eq(v.n, 6, "validations at 10, 20, ..., 60");
    for (int i = 0; i < v.n; i++) {
        cr_expect_eq(v.step[i], 10 * (i + 1));
        cr_expect_eq(v.best[i], i < 4, "step %ld best %d", v.step[i], v.best[i]);
    }
    int lowest = lowest_by_a_margin(&v);
    cr_assert_eq(v.step[lowest], 40, "the case needs its lowest loss at step 40");

    char path[256], target[64], other[256];
    snprintf(path, sizeof path, "%s/ck/best", dir);
    link_of(path, target, sizeof target);
    cr_expect_str_eq(target, ".best-00000040");
    snprintf(path, sizeof path, "ls -A %s/ck | tr '\\n' ' '", dir);
    FILE *p = popen(path, "r");
    char names[256] = "";
    cr_assert(fgets(names, sizeof names, p));
    pclose(p);
    cr_expect_str_eq(names, ".best-00000040 best step-00000060 ");

    /* the same runs keeping every checkpoint: best's files are its step 40's */
    snprintf(extra, sizeof extra, "--keep 0 --checkpoint-dir %s/all", dir);
    calm_to_40_then_stormy_to_60(extra);
    const char *files[] = {"meta.json", "rank-00000.bin", "rank-00001.bin"};
    for (int f = 0; f < 3; f++) {
        snprintf(path, sizeof path, "%s/ck/best/%s", dir, files[f]);
        snprintf(other, sizeof other, "%s/all/step-00000040/%s", dir, files[f]);
        expect_same_file(path, other);
    }
    snprintf(path, sizeof path, "%s/all/best", dir);
    link_of(path, target, sizeof target);
    cr_expect_str_eq(target, ".best-00000040");

    /* the loss it records, and the tools read it */
    char *out = fsdp_ok("ckpt inspect %s/ck/best", dir);
    char want[160];
    snprintf(want, sizeof want, "checkpoint  %s/ck/best\n", dir);
    cr_expect(strstr(out, want) != NULL, "%s", out);
    cr_expect(strstr(out, "\nstep        40 (") != NULL, "%s", out);
    snprintf(want, sizeof want,
             "\nvalidation  loss %.6f on the split's last 1000 images, held out\n", v.loss[lowest]);
    cr_expect(strstr(out, want) != NULL, "want %s in\n%s", want, out);
    cr_expect(strstr(out, "\nall 114 pieces verified (CRC32, every value finite)") != NULL, "%s",
              out);
    free(out);
    out = fsdp_ok("ckpt consolidate %s/ck/best -o %s/best.safetensors", dir, dir);
    cr_expect(strstr(out, "/ck/best (vit-tiny, step 40)") != NULL, "%s", out);
    free(out);
    snprintf(path, sizeof path, "%s/ck/best/meta.json", dir);
    char *meta = read_text_file(path, NULL);
    double recorded = -1;
    char *at = strstr(meta, "\"held_out\":1000,\"val_loss\":");
    cr_assert(at, "%s", meta);
    cr_assert_eq(sscanf(at, "\"held_out\":1000,\"val_loss\":%lf", &recorded), 1);
    cr_expect_float_eq(recorded, v.loss[lowest], 1e-8 * recorded);
    free(meta);

    out = fsdp_ok(STORMY " --steps 60 --checkpoint-dir %s/ck --resume auto", dir);
    snprintf(want, sizeof want, "resume: %s/ck/step-00000060\n", dir);
    cr_expect(strstr(out, want) != NULL, "%s", out);
    free(out);
    remove_test_dir(dir);
}

/* Stopped after 30 steps and resumed to 40, then to 60 at the stormy rate, the run keeps the same
 * best as one stopped only at 40 (the resumed runs measure themselves against the loss best
 * holds); killed while saving a new best, the previous best is whole and --resume auto takes the
 * newest step. */
Test(validation_cli, best_survives_a_resume_and_a_kill_mid_save) {
    fresh_test_dir(dir, sizeof dir, "validation_cli", "resume");
    char extra[256];
    snprintf(extra, sizeof extra, "--checkpoint-dir %s/whole", dir);
    calm_to_40_then_stormy_to_60(extra);
    free(fsdp_ok(HELD_OUT " --steps 30 --checkpoint-dir %s/ck", dir));
    char path[256], other[256], target[64];
    snprintf(path, sizeof path, "%s/ck/best", dir);
    link_of(path, target, sizeof target);
    cr_expect_str_eq(target, ".best-00000030", "the lowest of 10, 20, 30");
    char *out = fsdp_ok(HELD_OUT " --steps 40 --checkpoint-dir %s/ck --resume auto", dir);
    cr_expect(strstr(out, "validation after epoch 1 (step 40): accuracy") != NULL, "%s", out);
    free(out);
    link_of(path, target, sizeof target);
    cr_expect_str_eq(target, ".best-00000040");
    free(fsdp_ok(STORMY " --steps 60 --checkpoint-dir %s/ck --resume auto", dir));
    link_of(path, target, sizeof target);
    cr_expect_str_eq(target, ".best-00000040");
    const char *files[] = {"meta.json", "rank-00000.bin", "rank-00001.bin"};
    for (int f = 0; f < 3; f++) {
        snprintf(path, sizeof path, "%s/ck/best/%s", dir, files[f]);
        snprintf(other, sizeof other, "%s/whole/best/%s", dir, files[f]);
        expect_same_file(path, other);
    }

    /* step 30's validation is a new best, saved alone (no checkpoint is due at 30): killed */
    char args[512];
    int status;
    snprintf(args, sizeof args, HELD_OUT " --steps 40 --checkpoint-dir %s/kill --kill-in-save 30",
             dir);
    free(fsdp_output(args, "> /dev/null 2>&1", &status));
    /* the shell may exec fsdp (the signal shows) or wait for it (128 + 9) */
    cr_expect((WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL) ||
                  (WIFEXITED(status) && WEXITSTATUS(status) == 128 + SIGKILL),
              "the save of step 30 was not killed (status %d)", status);
    snprintf(path, sizeof path, "%s/kill/best", dir);
    link_of(path, target, sizeof target);
    cr_expect_str_eq(target, ".best-00000020");
    out = fsdp_ok("ckpt inspect %s/kill/best", dir);
    cr_expect(strstr(out, "\nstep        20 (") != NULL, "%s", out);
    free(out);
    out = fsdp_ok(HELD_OUT " --steps 40 --checkpoint-dir %s/kill --resume auto", dir);
    char want[160];
    snprintf(want, sizeof want, "resume: %s/kill/step-00000020\n", dir);
    cr_expect(strstr(out, want) != NULL, "%s", out);
    free(out);
    link_of(path, target, sizeof target);
    cr_expect_str_eq(target, ".best-00000040");
    remove_test_dir(dir);
}

/* Under --run-dir the validations are metrics.jsonl's "val" lines (curves.svg draws them) and
 * the best is checkpoints/best, at the step of their lowest loss; config.json keeps --val-size and
 * --eval-every, so --config reruns the job to the same best, byte for byte. */
Test(validation_cli, a_run_directory_logs_validation_and_keeps_the_best) {
    fresh_test_dir(dir, sizeof dir, "validation_cli", "rundir");
    free(fsdp_ok(SMALL_VIT " --val-size 1000 --eval-every 10 --steps 60 --run-dir %s/run", dir));
    char path[256], other[256], target[64];
    snprintf(path, sizeof path, "%s/run/metrics.jsonl", dir);
    char *metrics = read_text_file(path, NULL);
    int val = 0;
    long lowest_step = 0;
    double lowest = INFINITY;
    for (const char *at = metrics; (at = strstr(at, "{\"split\":\"val\",\"step\":")); at++) {
        long step;
        double loss;
        cr_assert_eq(
            sscanf(at, "{\"split\":\"val\",\"step\":%ld,\"epoch\":1,\"loss\":%lf", &step, &loss), 2,
            "%.80s", at);
        cr_expect_eq(step, 10 * ++val, "%.80s", at);
        if (loss < lowest) lowest = loss, lowest_step = step;
    }
    cr_expect_eq(val, 6, "%s", metrics);
    free(metrics);
    snprintf(path, sizeof path, "%s/run/config.json", dir);
    char *config = read_text_file(path, NULL);
    cr_expect(strstr(config, "\"val-size\": 1000,") && strstr(config, "\"eval-every\": 10,"), "%s",
              config);
    free(config);
    /* best is the step of metrics.jsonl's lowest validation loss, whichever that is here */
    char want[64];
    snprintf(want, sizeof want, ".best-%08ld", lowest_step);
    snprintf(path, sizeof path, "%s/run/checkpoints/best", dir);
    link_of(path, target, sizeof target);
    cr_expect_str_eq(target, want);
    free(fsdp_ok("train --config %s/run/config.json --run-dir %s/again", dir, dir));
    snprintf(path, sizeof path, "%s/run/checkpoints/best/rank-00001.bin", dir);
    snprintf(other, sizeof other, "%s/again/checkpoints/best/rank-00001.bin", dir);
    expect_same_file(path, other);
    remove_test_dir(dir);
}

/* A resumed run holds out what its checkpoint's run held out, and a best of another --val-size
 * is not compared with: each is one line, exit 2. */
Test(validation_cli, a_resume_must_hold_out_the_same_images) {
    fresh_test_dir(dir, sizeof dir, "validation_cli", "mismatch");
    free(fsdp_ok(HELD_OUT " --steps 20 --checkpoint-dir %s/ck", dir));
    free(fsdp_ok(SMALL_VIT " --steps 20 --eval false --checkpoint-dir %s/plain", dir));
    char args[512], says[512];
    snprintf(args, sizeof args,
             SMALL_VIT " --val-size 900 --steps 40 --checkpoint-dir %s/ck --resume auto", dir);
    snprintf(says, sizeof says,
             "%s/ck/step-00000020 was trained with the split's last 1000 images held out: resume "
             "it with --val-size 1000, not 900",
             dir);
    free(expect_usage_error_text(args, says));
    snprintf(args, sizeof args, SMALL_VIT " --steps 40 --checkpoint-dir %s/ck --resume auto", dir);
    free(
        expect_usage_error_text(args, "resume it with --val-size 1000, or it would train on them"));
    snprintf(args, sizeof args,
             SMALL_VIT " --val-size 1000 --steps 40 --resume %s/plain/step-00000020", dir);
    free(expect_usage_error_text(args, "/plain/step-00000020 was trained on every image of its "
                                       "split; --val-size 1000 would validate on images it "
                                       "trained on"));
    /* best chosen on 1000 images, the checkpoint resumed says 900 (edited and resealed) */
    char cmd[512];
    snprintf(cmd, sizeof cmd,
             "cd %s/ck && sed -i 's/\"held_out\":1000,/\"held_out\":900,/' step-00000020/meta.json",
             dir);
    shell(cmd);
    snprintf(cmd, sizeof cmd, "%s/ck/step-00000020/meta.json", dir);
    ckpt_meta_reseal(cmd);
    snprintf(args, sizeof args,
             SMALL_VIT " --val-size 900 --steps 40 --checkpoint-dir %s/ck --resume auto", dir);
    snprintf(says, sizeof says,
             "%s/ck/best was chosen on the split's last 1000 images held out, this run holds out "
             "900: give --val-size 1000, or another --checkpoint-dir",
             dir);
    free(expect_usage_error_text(args, says));
    remove_test_dir(dir);
}

/* Two epochs of 62 steps (1000 images trained on, 9000 held out): each epoch's line in --json is
 * the mean of its 62 step lines; validation follows each epoch's end, the test images once. */
Test(validation_cli, an_epochs_mean_in_json_is_the_mean_of_its_step_lines) {
    char *out = fsdp_ok(SMALL_VIT " --val-size 9000 --epochs 2 --json");
    double sum = 0;
    long steps = 0;
    int epochs = 0, validations = 0, tests = 0;
    for (char *line = strtok(out, "\n"); line; line = strtok(NULL, "\n")) {
        cJSON *o = cJSON_Parse(line);
        cr_assert(o, "not JSON: %s", line);
        const cJSON *loss = cJSON_GetObjectItem(o, "loss");
        if (cJSON_GetObjectItem(o, "epoch_end")) {
            epochs++;
            cr_expect_eq(cJSON_GetObjectItem(o, "epoch")->valueint, epochs, "%s", line);
            cr_expect_eq(cJSON_GetObjectItem(o, "step")->valueint, 62 * epochs, "%s", line);
            cr_expect_eq(cJSON_GetObjectItem(o, "steps")->valueint, 62, "%s", line);
            cr_expect_eq(steps, 62, "%s", line);
            double mean = sum / 62, got = cJSON_GetObjectItem(o, "train_loss")->valuedouble;
            cr_expect_leq(fabs(got - mean), 1e-5 * mean, "%s: the step lines' mean is %.9g", line,
                          mean);
            sum = 0;
            steps = 0;
        } else if (cJSON_IsTrue(cJSON_GetObjectItem(o, "validation"))) {
            validations++;
            cr_expect_eq(cJSON_GetObjectItem(o, "step")->valueint, 62 * epochs, "%s", line);
            cr_expect_eq(cJSON_GetObjectItem(o, "samples")->valueint, 9000, "%s", line);
        } else if (cJSON_GetObjectItem(o, "test_accuracy")) {
            tests++;
            cr_expect_eq(cJSON_GetObjectItem(o, "step")->valueint, 124, "%s", line);
        } else if (cJSON_IsNumber(loss)) {
            sum += loss->valuedouble;
            steps++;
        }
        cJSON_Delete(o);
    }
    cr_expect_eq(epochs, 2);
    cr_expect_eq(validations, 2);
    cr_expect_eq(tests, 1);
    free(out);
    out = fsdp_ok(SMALL_VIT " --val-size 9000 --epochs 2");
    cr_expect(strstr(out, "\nepoch 1/2: training loss ") != NULL, "%s", out);
    cr_expect(strstr(out, ", the mean of its 62 steps\nvalidation after epoch 1 (step 62): ") !=
                  NULL,
              "%s", out);
    cr_expect(strstr(out, "\ntest after epoch 2 (step 124): accuracy ") != NULL, "%s", out);
    free(out);
}
