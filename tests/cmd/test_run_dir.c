/* train --run-dir and --config as a person uses them: the directory holds its files, metrics
 * agree with --json, curves render, a config reruns bit for bit; bad configs and occupied
 * directories are one line and exit 2 with nothing written. */
#include <cjson/cJSON.h>
#include <criterion/criterion.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "cmd/cli.h"
#include "io/safetensors.h"
#include "tests/util.h"

static int exists(const char *fmt, const char *dir) {
    char path[512];
    struct stat st;
    snprintf(path, sizeof path, fmt, dir);
    return stat(path, &st) == 0;
}

/* The file's lines, each parsed as JSON (asserted): a cJSON array of them (free it). */
static cJSON *json_lines(const char *path) {
    char *text = read_text_file(path, NULL);
    cJSON *lines = cJSON_CreateArray();
    for (char *line = strtok(text, "\n"); line; line = strtok(NULL, "\n")) {
        cJSON *o = cJSON_Parse(line);
        cr_assert(cJSON_IsObject(o), "%s: not a JSON object: %s", path, line);
        cJSON_AddItemToArray(lines, o);
    }
    free(text);
    return lines;
}

static cJSON *config_of(const char *dir) {
    char path[512];
    snprintf(path, sizeof path, "%s/config.json", dir);
    char *text = read_text_file(path, NULL);
    cJSON *c = cJSON_Parse(text);
    cr_assert(cJSON_IsObject(c), "%s is not a JSON object:\n%s", path, text);
    free(text);
    return c;
}

static const cJSON *field(const cJSON *o, const char *key) {
    return cJSON_GetObjectItemCaseSensitive(o, key);
}

static int is_whole(const cJSON *v) {
    return cJSON_IsNumber(v) && v->valuedouble == floor(v->valuedouble) && v->valuedouble >= 0;
}

/* A step's line: exactly its ten fields, each of its type. */
static void expect_step_line(const cJSON *o, long step) {
    static const char *const whole[] = {"step", "epoch", "peak_bytes"};
    static const char *const numbers[] = {"loss",        "lr",           "grad_norm",
                                          "step_time_s", "images_per_s", "wall_s"};
    cr_expect_eq(cJSON_GetArraySize(o), 10, "ten fields on step %ld's line", step);
    cr_expect(cJSON_IsString(field(o, "split")) &&
              !strcmp(field(o, "split")->valuestring, "train"));
    for (int i = 0; i < 3; i++)
        cr_expect(is_whole(field(o, whole[i])), "step %ld: %s is a whole number", step, whole[i]);
    for (int i = 0; i < 6; i++)
        cr_expect(cJSON_IsNumber(field(o, numbers[i])), "step %ld: %s is a number", step,
                  numbers[i]);
    cr_expect_eq((long)field(o, "step")->valuedouble, step);
}

/* The values of two --dump-params files are the same, text for text. */
static void expect_same_file(const char *a, const char *b) {
    char *x = read_text_file(a, NULL), *y = read_text_file(b, NULL);
    cr_expect(x[0] && !strcmp(x, y), "%s and %s differ", a, b);
    free(x);
    free(y);
}

/* The toy at 3 ranks for 12 steps, a checkpoint every 4: the directory holds the config, a
 * metrics line per step that says what --json said, the curves, the checkpoints (keep 3 of
 * steps 4, 8, 10: the epoch's end, 12) and the trained model, and nothing that was not asked. */
Test(run_dir, the_toy_run_dir_holds_its_files_and_a_line_per_step) {
    char dir[256], r[300];
    fresh_test_dir(dir, sizeof dir, "rundir", "toy");
    snprintf(r, sizeof r, "%s/r", dir);
    char *out = fsdp_ok("train --model toy --ranks 3 --steps 12 --checkpoint-every 4 --json "
                        "--run-dir %s --dump-params %s/p.txt",
                        r, dir);
    static const char *const files[] = {"%s/config.json",
                                        "%s/metrics.jsonl",
                                        "%s/curves.svg",
                                        "%s/model.safetensors",
                                        "%s/checkpoints/step-00000012/meta.json",
                                        "%s/checkpoints/step-00000008/meta.json"};
    for (int i = 0; i < 6; i++) cr_expect(exists(files[i], r), "no %s in %s", files[i], r);
    cr_expect(!exists("%s/checkpoints/step-00000004", r), "keep 3 (the default)");
    cr_expect(!exists("%s/memory.svg", r) && !exists("%s/trace.json", r), "not asked");

    /* stdout's JSON: a line per step, then the memory line (and each epoch's end's, set aside:
     * 10 steps an epoch, and the run's end part-way through the second) */
    cJSON *printed = cJSON_CreateArray();
    int epoch_ends = 0;
    for (char *line = strtok(out, "\n"); line; line = strtok(NULL, "\n")) {
        cJSON *o = cJSON_Parse(line);
        if (cJSON_GetObjectItem(o, "epoch_end")) {
            epoch_ends++;
            cJSON_Delete(o);
        } else {
            cJSON_AddItemToArray(printed, o);
        }
    }
    cr_expect_eq(epoch_ends, 2);
    cr_assert_eq(cJSON_GetArraySize(printed), 13, "12 steps and the memory line");
    const cJSON *memory = cJSON_GetArrayItem(printed, 12);
    double peak0 = cJSON_GetArrayItem(field(memory, "rank_peaks"), 0)->valuedouble;

    char path[512];
    snprintf(path, sizeof path, "%s/metrics.jsonl", r);
    cJSON *lines = json_lines(path);
    cr_assert_eq(cJSON_GetArraySize(lines), 12);
    for (int i = 0; i < 12; i++) {
        const cJSON *o = cJSON_GetArrayItem(lines, i), *p = cJSON_GetArrayItem(printed, i);
        expect_step_line(o, i + 1);
        cr_expect_eq(field(o, "epoch")->valueint, field(p, "epoch")->valueint, "step %d", i + 1);
        cr_expect_eq((float)field(o, "loss")->valuedouble, (float)field(p, "loss")->valuedouble,
                     "step %d: the loss --json printed", i + 1);
        cr_expect_eq((float)field(o, "lr")->valuedouble, 0.05f);
        cr_expect_float_eq(field(o, "step_time_s")->valuedouble,
                           field(p, "step_time_s")->valuedouble, 1e-9, "the modelled time");
        cr_expect_gt(field(o, "images_per_s")->valuedouble, 0.0);
    }
    const cJSON *last = cJSON_GetArrayItem(lines, 11);
    cr_expect_eq(field(last, "peak_bytes")->valuedouble, peak0, "rank 0's peak, as --json's");
    cr_expect_eq(peak0, 312.0, "the toy's peak at 3 ranks");
    cJSON_Delete(lines);
    cJSON_Delete(printed);
    free(out);

    /* model.safetensors holds the trained parameters, those --dump-params wrote */
    snprintf(path, sizeof path, "%s/p.txt", dir);
    size_t n;
    double *dumped = dump_read(path, &n);
    cr_assert_eq(n, 9);
    SafeTensors st;
    Err err = {0};
    snprintf(path, sizeof path, "%s/model.safetensors", r);
    cr_assert_eq(st_read(&st, path, &err), 0, "%s", err.msg);
    cr_assert_eq(st.n, 3);
    for (int t = 0; t < 3; t++)
        for (int k = 0; k < 3; k++) {
            float v;
            memcpy(&v, st.data + st.tensors[t].offset + 4 * (size_t)k, 4);
            cr_expect_eq(v, (float)dumped[3 * t + k], "%s[%d]", st.tensors[t].name, k);
        }
    st_free(&st);
    free(dumped);
    remove_test_dir(dir);
}

#define SMALL_VIT "--model vit-tiny --layers 1 --hidden 16 --heads 2 --mlp 16 --split test"

/* A small ViT for 2 epochs of 78 steps: an evaluation line after each epoch that says what
 * --json's did, the steps only increasing, and curves.svg with both panels, which librsvg
 * renders. */
Test(run_dir, a_vit_run_dir_logs_its_evaluations_and_draws_them) {
    char dir[256], r[300];
    fresh_test_dir(dir, sizeof dir, "rundir", "vit");
    snprintf(r, sizeof r, "%s/v", dir);
    char *out = fsdp_ok("train " SMALL_VIT " --epochs 2 --batch-size 64 --ranks 2 --json "
                        "--run-dir %s",
                        r);
    cJSON *printed_evals = cJSON_CreateArray();
    for (char *line = strtok(out, "\n"); line; line = strtok(NULL, "\n")) {
        cJSON *o = cJSON_Parse(line);
        if (field(o, "eval"))
            cJSON_AddItemToArray(printed_evals, o);
        else
            cJSON_Delete(o);
    }
    cr_assert_eq(cJSON_GetArraySize(printed_evals), 2);
    char path[512];
    snprintf(path, sizeof path, "%s/metrics.jsonl", r);
    cJSON *lines = json_lines(path);
    long steps = 0, last_step = 0;
    int evals = 0;
    const cJSON *o;
    cJSON_ArrayForEach(o, lines) {
        long step = (long)field(o, "step")->valuedouble;
        cr_expect_geq(step, last_step, "steps never go back");
        last_step = step;
        if (!strcmp(field(o, "split")->valuestring, "train")) {
            expect_step_line(o, ++steps);
            continue;
        }
        const cJSON *p = cJSON_GetArrayItem(printed_evals, evals++);
        cr_expect_str_eq(field(o, "split")->valuestring, "test");
        cr_expect_eq(cJSON_GetArraySize(o), 8, "eight fields on an evaluation's line");
        cr_expect_eq(step, 78 * evals, "after each epoch");
        cr_expect_eq(field(o, "epoch")->valueint, evals);
        cr_expect(is_whole(field(o, "correct")) && is_whole(field(o, "samples")));
        cr_expect_eq(field(o, "samples")->valueint, 10000);
        double acc = field(o, "accuracy")->valuedouble;
        cr_expect_float_eq(acc, field(o, "correct")->valuedouble / 10000.0, 1e-12);
        cr_expect_float_eq(acc, field(p, "test_accuracy")->valuedouble, 1e-6);
        cr_expect_eq(field(o, "loss")->valuedouble, field(p, "test_loss")->valuedouble);
        cr_expect(cJSON_IsNumber(field(o, "wall_s")));
    }
    cr_expect_eq(steps, 156);
    cr_expect_eq(evals, 2);
    cJSON_Delete(lines);
    cJSON_Delete(printed_evals);
    free(out);

    snprintf(path, sizeof path, "%s/curves.svg", r);
    char *svg = read_text_file(path, NULL);
    cr_expect(strstr(svg, "<g id=\"loss\">") && strstr(svg, "<g id=\"accuracy\">"));
    cr_expect(strstr(svg, "training loss") && strstr(svg, "test loss") &&
              strstr(svg, "test accuracy"));
    free(svg);
    if (system("command -v rsvg-convert >/dev/null 2>&1") == 0) {
        char cmd[1024];
        snprintf(cmd, sizeof cmd, "rsvg-convert %s/curves.svg -o %s/curves.png 2>&1", r, dir);
        cr_expect_eq(system(cmd), 0, "%s", cmd);
        snprintf(path, sizeof path, "%s/curves.png", dir);
        size_t n;
        char *png = read_text_file(path, &n);
        cr_expect(n > 1000 && !memcmp(png, "\x89PNG", 4), "a PNG of %zu bytes", n);
        free(png);
    }
    remove_test_dir(dir);
}

/* Each config.json, run again into another directory, trains to the same parameters, bit
 * for bit, and writes the same config but for the paths given. */
static void expect_config_reruns(const char *dir, const char *tag, const char *flags) {
    free(
        fsdp_ok("train %s --run-dir %s/%s_a --dump-params %s/%s_a.txt", flags, dir, tag, dir, tag));
    free(fsdp_ok("train --config %s/%s_a/config.json --run-dir %s/%s_b --dump-params %s/%s_b.txt",
                 dir, tag, dir, tag, dir, tag));
    char a[512], b[512];
    snprintf(a, sizeof a, "%s/%s_a.txt", dir, tag);
    snprintf(b, sizeof b, "%s/%s_b.txt", dir, tag);
    expect_same_file(a, b);
    snprintf(a, sizeof a, "%s/%s_a", dir, tag);
    snprintf(b, sizeof b, "%s/%s_b", dir, tag);
    cJSON *ca = config_of(a), *cb = config_of(b);
    cJSON_DeleteItemFromObject(ca, "run-dir");
    cJSON_DeleteItemFromObject(cb, "run-dir");
    cJSON_DeleteItemFromObject(ca, "dump-params");
    cJSON_DeleteItemFromObject(cb, "dump-params");
    cr_expect(cJSON_Compare(ca, cb, 1), "%s: the configs differ beyond the paths", tag);
    cJSON_Delete(ca);
    cJSON_Delete(cb);
}

Test(run_dir, a_config_runs_the_same_job_again_bit_for_bit) {
    char dir[256];
    fresh_test_dir(dir, sizeof dir, "rundir", "config");
    expect_config_reruns(dir, "toy",
                         "--model toy --ranks 2 --strategy zero2 --steps 9 --lr 0.02 --seed 7 "
                         "--grad-accum 2 --clip-grad-norm 0.5 --optim adamw --weight-decay 0.01 "
                         "--lr-schedule cosine --warmup-steps 2 --min-lr 0.001");
    expect_config_reruns(dir, "step",
                         "--model toy --ranks 3 --steps 8 --lr-schedule step --step-size 3 "
                         "--gamma 0.5");
    expect_config_reruns(dir, "vit",
                         SMALL_VIT " --steps 4 --batch-size 16 --ranks 2 --lr 3e-3 "
                                   "--param-dtype bf16 --wrap size:100 --eval false");
    remove_test_dir(dir);
}

/* Generated from train's table: every flag is a key, but those that say how this process runs
 * (--config, --resume, the injected faults); and a setter's flag has a getter, or its value
 * would be lost. */
Test(run_dir, config_json_has_a_key_for_every_flag) {
    char dir[256], r[300];
    fresh_test_dir(dir, sizeof dir, "rundir", "keys");
    snprintf(r, sizeof r, "%s/r", dir);
    free(fsdp_ok("train --steps 1 --run-dir %s", r));
    cJSON *c = config_of(r);
    const FlagTable *t = train_flags();
    int keys = 0;
    for (int i = 0; i < t->nrows; i++) {
        const Flag *row = &t->rows[i];
        if (!row->name) continue;
        const cJSON *v = field(c, row->name + 2);
        if (row->not_in_config) {
            cr_expect(!v, "%s is not kept in a config", row->name);
            continue;
        }
        keys++;
        cr_expect(v, "config.json has no \"%s\"", row->name + 2);
        cr_expect(row->kind != FLAG_SET || row->get, "%s has a setter but no getter", row->name);
    }
    cr_expect_eq(cJSON_GetArraySize(c), keys, "a key per flag, no more");
    cr_expect_str_eq(field(c, "model")->valuestring, "toy");
    cr_expect_eq(field(c, "steps")->valueint, 1);
    cr_expect_eq(field(c, "lr")->valuedouble, 0.05, "the shortest text of 0.05f");
    cr_expect(cJSON_IsNull(field(c, "checkpoint-dir")), "the run directory's: null");
    cr_expect(cJSON_IsNull(field(c, "save-full")));
    cr_expect(cJSON_IsNull(field(c, "epochs")), "not given: null");
    cr_expect_str_eq(field(c, "run-dir")->valuestring, r);
    cJSON_Delete(c);
    remove_test_dir(dir);
}

static void write_file(const char *path, const char *text) {
    FILE *f = fopen(path, "w");
    cr_assert(f, "%s", path);
    fputs(text, f);
    fclose(f);
}

/* A config of some keys (the others keep their defaults) under flags given: the flags win,
 * and --steps given replaces the config's --epochs (one setting). */
Test(run_dir, flags_given_replace_the_configs_values) {
    char dir[256], path[512], r[300];
    fresh_test_dir(dir, sizeof dir, "rundir", "over");
    snprintf(path, sizeof path, "%s/c.json", dir);
    write_file(path, "{\"model\": \"vit-tiny\", \"layers\": 1, \"hidden\": 16, \"heads\": 2,\n"
                     " \"mlp\": 16, \"split\": \"test\", \"epochs\": 1, \"ranks\": 2,\n"
                     " \"batch-size\": 16, \"lr\": 0.002, \"eval\": true}\n");
    snprintf(r, sizeof r, "%s/r", dir);
    free(fsdp_ok("train --config %s --steps 3 --lr 0.004 --eval false --run-dir %s", path, r));
    cJSON *c = config_of(r);
    cr_expect_eq(field(c, "steps")->valueint, 3);
    cr_expect(cJSON_IsNull(field(c, "epochs")), "--steps replaced the config's epochs");
    cr_expect_eq((float)field(c, "lr")->valuedouble, 0.004f);
    cr_expect(cJSON_IsFalse(field(c, "eval")));
    cr_expect_eq(field(c, "layers")->valueint, 1, "the config's, not given again");
    cr_expect_str_eq(field(c, "split")->valuestring, "test");
    cJSON_Delete(c);
    snprintf(path, sizeof path, "%s/metrics.jsonl", r);
    cJSON *lines = json_lines(path);
    cr_expect_eq(cJSON_GetArraySize(lines), 3, "3 steps, no evaluation");
    cr_expect_eq((float)field(cJSON_GetArrayItem(lines, 0), "lr")->valuedouble, 0.004f);
    cJSON_Delete(lines);
    remove_test_dir(dir);
}

/* A config that is not this program's, or a value its flag refuses: one line naming the file
 * and the key, exit 2, and the run directory never made. */
Test(run_dir, a_config_that_is_not_trains_is_one_line_naming_the_key) {
    static const struct {
        const char *text, *mention;
    } cases[] = {
        {"model: toy\n", "not JSON"},
        {"{\"lr\": 0.1,\n \"steps\": }\n", "not JSON (it stops making sense at line 2)"},
        {"[1, 2]\n", "not a config of ./fsdp train"},
        {"{\"train_batch_size\": 8}\n", "unknown key \"train_batch_size\""},
        {"{\"lr\": \"fast\"}\n", "\"lr\" must be a number (got a string)"},
        {"{\"lr\": 5000}\n", "\"lr\": --lr must be a number from 0 to 1000 (got '5000')"},
        {"{\"steps\": 1.5}\n", "\"steps\": --steps must be an integer"},
        {"{\"strategy\": \"zro3\"}\n", "\"strategy\": --strategy must be one of"},
        {"{\"json\": 1}\n", "\"json\" must be true or false (got a number)"},
        {"{\"model\": [\"toy\"]}\n", "\"model\" must be a string (got an array)"},
        {"{\"lr\": 0.1, \"lr\": 0.2}\n", "\"lr\" is given twice"},
        {"{\"resume\": \"auto\"}\n", "\"resume\" is not kept in a config"},
        {"{\"config\": \"other.json\"}\n", "\"config\" is not kept in a config"},
    };
    char dir[256], path[512], args[1200];
    fresh_test_dir(dir, sizeof dir, "rundir", "badcfg");
    snprintf(path, sizeof path, "%s/c.json", dir);
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        write_file(path, cases[i].text);
        snprintf(args, sizeof args, "train --config %s --run-dir %s/r", path, dir);
        char *said = expect_usage_error_text(args, cases[i].mention);
        cr_expect(strstr(said, path), "names the file: %s", said);
        free(said);
        cr_expect(!exists("%s/r", dir), "case %zu: no run directory made", i);
    }
    snprintf(args, sizeof args, "train --config %s/none.json", dir);
    expect_usage_error(args, "none.json: cannot read it: No such file or directory");
    snprintf(args, sizeof args, "train --config %s", dir);
    expect_usage_error(args, "cannot read it: Is a directory");
    remove_test_dir(dir);
}

/* The steps of a run directory's metrics.jsonl, in order, into steps; returns how many. */
static int logged_steps(const char *r, long *steps, int max) {
    char path[512];
    snprintf(path, sizeof path, "%s/metrics.jsonl", r);
    cJSON *lines = json_lines(path);
    int n = 0;
    const cJSON *o;
    cJSON_ArrayForEach(o, lines) if (n < max) steps[n++] = (long)field(o, "step")->valuedouble;
    cJSON_Delete(lines);
    return n;
}

/* A directory that holds a run is refused, every file as it was; --resume auto continues it,
 * and its metrics.jsonl goes on from the checkpoint's step, each step once. */
Test(run_dir, a_run_dir_that_holds_a_run_needs_resume) {
    char dir[256], r[300], args[1024], path[512];
    fresh_test_dir(dir, sizeof dir, "rundir", "again");
    snprintf(r, sizeof r, "%s/r", dir);
    free(fsdp_ok("train --steps 8 --checkpoint-every 4 --run-dir %s", r));
    snprintf(path, sizeof path, "%s/config.json", r);
    char *config = read_text_file(path, NULL);
    snprintf(path, sizeof path, "%s/metrics.jsonl", r);
    char *metrics = read_text_file(path, NULL);
    snprintf(args, sizeof args, "train --steps 8 --run-dir %s", r);
    char *said = expect_usage_error_text(args, "already holds a run");
    cr_expect(strstr(said, "r/config.json") && strstr(said, "--resume auto"), "%s", said);
    free(said);
    char *now = read_text_file(path, NULL);
    cr_expect_str_eq(now, metrics, "metrics.jsonl untouched");
    free(now);
    snprintf(path, sizeof path, "%s/config.json", r);
    now = read_text_file(path, NULL);
    cr_expect_str_eq(now, config, "config.json untouched");
    free(now);
    free(config);
    free(metrics);

    /* any file of a run counts; an empty folder, or one of other files, is no run */
    char other[300];
    snprintf(other, sizeof other, "%s/other", dir);
    cr_assert_eq(mkdir(other, 0777), 0);
    snprintf(path, sizeof path, "%s/notes.txt", other);
    write_file(path, "mine\n");
    free(fsdp_ok("train --steps 2 --run-dir %s", other));
    snprintf(path, sizeof path, "%s/notes.txt", other);
    now = read_text_file(path, NULL);
    cr_expect_str_eq(now, "mine\n");
    free(now);
    snprintf(path, sizeof path, "%s/config.json", other);
    unlink(path);
    snprintf(args, sizeof args, "train --steps 2 --run-dir %s", other);
    expect_usage_error(args, "already holds a run");

    free(fsdp_ok("train --steps 12 --checkpoint-every 4 --run-dir %s --resume auto", r));
    long steps[32];
    int n = logged_steps(r, steps, 32);
    cr_expect_eq(n, 12);
    for (int i = 0; i < n; i++) cr_expect_eq(steps[i], i + 1, "line %d", i + 1);
    cJSON *c = config_of(r);
    cr_expect_eq(field(c, "steps")->valueint, 12, "config.json says the run as it is now");
    cJSON_Delete(c);
    remove_test_dir(dir);
}

/* Killed half-way through saving step 8's checkpoint, a run keeps the lines it logged (steps
 * 1 to 8); its config resumed from step 4's checkpoint logs 5 to 12 again, once each. */
Test(run_dir, a_killed_run_keeps_its_lines_and_resumes_without_repeating_them) {
    char dir[256], r[300];
    fresh_test_dir(dir, sizeof dir, "rundir", "kill");
    snprintf(r, sizeof r, "%s/r", dir);
    int code;
    free(fsdp_run(&code, "> /dev/null 2>&1",
                  "train --steps 12 --checkpoint-every 4 --kill-in-save 8 --run-dir %s", r));
    /* the shell may exec fsdp (the signal shows) or wait for it (128 + 9) */
    cr_assert(code == -1 || code == 128 + 9, "killed by SIGKILL (status %d)", code);
    long steps[32];
    int n = logged_steps(r, steps, 32);
    cr_expect_eq(n, 8, "what the killed run logged");
    cr_expect_eq(steps[n - 1], 8);
    char *out = fsdp_ok("train --config %s/config.json --resume auto", r);
    cr_expect(strstr(out, "resume: ") && strstr(out, "checkpoints/step-00000004"), "%.300s", out);
    free(out);
    n = logged_steps(r, steps, 32);
    cr_expect_eq(n, 12);
    for (int i = 0; i < n; i++) cr_expect_eq(steps[i], i + 1, "line %d", i + 1);
    cr_expect(exists("%s/curves.svg", r) && exists("%s/model.safetensors", r));
    remove_test_dir(dir);
}

/* Paths given win over the run directory's; --memory and --trace put memory.svg and
 * trace.json there, and the trace replays. */
Test(run_dir, paths_given_win_and_memory_and_trace_go_in_the_run_dir) {
    char dir[256], r[300], ck[300];
    fresh_test_dir(dir, sizeof dir, "rundir", "paths");
    snprintf(r, sizeof r, "%s/r", dir);
    snprintf(ck, sizeof ck, "%s/ck", dir);
    free(fsdp_ok("train --steps 2 --run-dir %s --checkpoint-dir %s --memory --trace", r, ck));
    cr_expect(exists("%s/memory.svg", r) && exists("%s/trace.json", r));
    cr_expect(!exists("%s/checkpoints", r), "--checkpoint-dir won");
    cr_expect(exists("%s/step-00000002/meta.json", ck));
    cJSON *c = config_of(r);
    cr_expect_str_eq(field(c, "checkpoint-dir")->valuestring, ck);
    cr_expect(cJSON_IsNull(field(c, "memory-svg")) && cJSON_IsNull(field(c, "trace-out")));
    cr_expect(cJSON_IsTrue(field(c, "memory")) && cJSON_IsTrue(field(c, "trace")));
    cJSON_Delete(c);
    char *out = fsdp_ok("viz --trace %s/trace.json --events 1", r);
    cr_expect(strstr(out, "-- event 1 of "), "%.300s", out);
    free(out);
    remove_test_dir(dir);
}

Test(run_dir, run_dir_flags_that_do_not_fit_are_one_line) {
    char dir[256], args[512];
    fresh_test_dir(dir, sizeof dir, "rundir", "flags");
    expect_usage_error("train --trace", "--trace writes trace.json into --run-dir DIR");
    snprintf(args, sizeof args, "train --print-plan --run-dir %s/r", dir);
    expect_usage_error(args, "--print-plan trains nothing");
    snprintf(args, sizeof args, "train --memory-compare --run-dir %s/r", dir);
    expect_usage_error(args, "--memory-compare trains nothing");
    snprintf(args, sizeof args, "viz --run-dir %s/r", dir);
    expect_usage_error(args, "--run-dir is train's");
    cr_expect(!exists("%s/r", dir), "none of them made the directory");
    expect_usage_error("train --run-dir ''", "--run-dir needs a directory");
    char file[300];
    snprintf(file, sizeof file, "%s/file", dir);
    write_file(file, "x\n");
    snprintf(args, sizeof args, "train --run-dir %s", file);
    expect_usage_error(args, "is not a directory");
    remove_test_dir(dir);
}

/* Under mpirun, rank 0 alone writes the run directory's files; the other rank's mkdir of the
 * same folder is no run, so nothing is refused; the second time rank 0 refuses it. */
Test(run_dir, under_mpi_rank_0_writes_the_run_dir) {
    skip_without_mpi();
    char dir[256], r[300];
    fresh_test_dir(dir, sizeof dir, "rundir", "mpi");
    snprintf(r, sizeof r, "%s/r", dir);
    int code;
    char *out = mpi_fsdp_run(&code, 2,
                             "train --backend mpi --ranks 2 --steps 6 --checkpoint-every 3 "
                             "--run-dir %s",
                             r);
    cr_assert_eq(code, 0, "%.1500s", out);
    free(out);
    long steps[16];
    int n = logged_steps(r, steps, 16);
    cr_expect_eq(n, 6);
    for (int i = 0; i < n; i++) cr_expect_eq(steps[i], i + 1);
    cr_expect(exists("%s/checkpoints/step-00000006/meta.json", r) &&
              exists("%s/model.safetensors", r) && exists("%s/curves.svg", r));
    out = mpi_fsdp_run(&code, 2, "train --backend mpi --ranks 2 --steps 6 --run-dir %s", r);
    cr_expect_eq(code, 2, "%.500s", out);
    cr_expect(strstr(out, "already holds a run"), "%.500s", out);
    free(out);
    remove_test_dir(dir);
}
