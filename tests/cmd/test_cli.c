/* Bad input on the command line: one line naming the flag, exit status 2, no output file. */
#include <cjson/cJSON.h>
#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "cmd/report.h"
#include "models/toy.h"
#include "tests/util.h"

/* Runs `fsdp ARGS`, returns the exit status and stderr's text. */
static int run_fsdp(const char *args, char *err_text, size_t n) {
    char cmd[1024], path[] = "/tmp/fsdp_cli_XXXXXX";
    make_temp_file(path);
    snprintf(cmd, sizeof cmd, "%s %s >/dev/null 2>%s", fsdp_bin(), args, path);
    int status = system(cmd);
    FILE *f = fopen(path, "r");
    size_t got = f ? fread(err_text, 1, n - 1, f) : 0;
    err_text[got] = 0;
    if (f) fclose(f);
    unlink(path);
    return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

Test(cli, bad_input_exits_2_with_one_line) {
    expect_usage_error("train --ranks 0", "--ranks");
    expect_usage_error("train --ranks 100000", "--ranks");
    expect_usage_error("train --ranks abc", "--ranks");
    expect_usage_error("train --strategy zro3", "--strategy");
    expect_usage_error("train --strategy zro3", "zero3");
    expect_usage_error("train --grad-accum -1", "--grad-accum");
    expect_usage_error("train --strategy hsdp --ranks 4 --replicas 3", "--replicas");
    expect_usage_error("train --replicas 2", "--replicas");
    expect_usage_error("train --frobnicate 3", "--frobnicate");
    expect_usage_error("train --lr", "--lr");
    expect_usage_error("train --param-dtype fp8", "--param-dtype");
    expect_usage_error("train --wrap block:0", "--wrap");
    expect_usage_error("train --profile tpu", "--profile");
    expect_usage_error("train --model gpt5", "--model");
    expect_usage_error("train --offload cpu --strategy ddp", "--offload");
    expect_usage_error("train --batch-size 100 --ranks 5", "batch");
    expect_usage_error("lanch", "unknown command");
    expect_usage_error("train --model vit-tiny --split val", "--split");
    expect_usage_error("train --model vit-tiny --heads 3", "--heads");
    expect_usage_error("train --model vit-tiny --steps 3 --epochs 1", "--epochs");
    expect_usage_error("train --model toy --layers 2", "--layers");
    expect_usage_error("train --model vit-tiny --data /nonexistent/dir",
                       "/nonexistent/dir/train-images-idx3-ubyte.gz");
    expect_usage_error("train --backend gpu", "--backend must be sim, cuda, mpi or auto");
    expect_usage_error("train --backend cuda --offload cpu", "--offload cpu");
    expect_usage_error("train --backend auto --offload cpu", "--offload cpu");
}

Test(cli, a_bad_flag_writes_no_file) {
    char err[4096], args[512];
    const char *out = "/tmp/fsdp_cli_params.txt";
    unlink(out);
    snprintf(args, sizeof args, "train --steps 5 --dump-params %s --ranks 0", out);
    cr_expect_eq(run_fsdp(args, err, sizeof err), 2);
    struct stat st;
    cr_expect_neq(stat(out, &st), 0, "no output file after bad input");
    /* an existing file survives a failing run untouched */
    FILE *f = fopen(out, "w");
    fputs("precious\n", f);
    fclose(f);
    snprintf(args, sizeof args, "train --steps 5 --dump-params %s --batch-size 100 --ranks 5", out);
    cr_expect_eq(run_fsdp(args, err, sizeof err), 2);
    char buf[64] = {0};
    f = fopen(out, "r");
    cr_assert(f);
    cr_expect_eq(fread(buf, 1, sizeof buf - 1, f), 9);
    fclose(f);
    cr_expect_str_eq(buf, "precious\n");
    unlink(out);
}

Test(cli, dump_params_writes_every_element) {
    char err[4096], args[512];
    const char *out = "/tmp/fsdp_cli_dump.txt";
    snprintf(args, sizeof args, "train --steps 3 --ranks 3 --json --dump-params %s", out);
    cr_assert_eq(run_fsdp(args, err, sizeof err), 0, "%s", err);
    FILE *f = fopen(out, "r");
    cr_assert(f);
    char name[64];
    size_t idx;
    double v;
    int lines = 0;
    while (fscanf(f, "%63s %zu %lf", name, &idx, &v) == 3) {
        cr_expect_eq(idx, (size_t)(lines % 3));
        lines++;
    }
    fclose(f);
    unlink(out);
    cr_expect_eq(lines, 9);
}

/* --dump-params on a full disk: the write fails (the whole dump fits stdio's buffer for the toy,
 * so the flush does; the ViT's fails mid-way) and the line names the file and why. The file a
 * person asked for, not the temporary one it is written as: run_write_outputs hands the path.
 * /dev/full stands for the disk, as no test can fill a real one. */
Test(cli, dump_params_on_a_full_disk_names_the_file) {
    FILE *f = fopen("/dev/full", "w");
    if (!f) cr_skip_test("this machine has no /dev/full");
    ModelDesc m[2];
    Err err = {0};
    cr_assert_eq(toy_model_create(&m[0], &err), 0, "%s", err.msg);
    vit_small_create(&m[1], 2);
    float *params = host_zeros(m[1].total_numel);
    for (int i = 0; i < 2; i++) {
        err = (Err){0};
        cr_expect_eq(report_dump_params(f, "/tmp/somewhere/params.txt", &m[i], params, &err),
                     ERR_IO);
        cr_expect_str_eq(err.msg, "could not write the parameters to /tmp/somewhere/params.txt: "
                                  "No space left on device");
        clearerr(f);
        model_desc_free(&m[i]);
    }
    fclose(f);
    free(params);
}

/* Runs `fsdp ARGS` and returns its stdout (caller frees). */
static char *stdout_of(const char *args) {
    int status;
    char *out = fsdp_output(args, "2>/dev/null", &status);
    cr_expect_eq(status, 0, "`fsdp %s` failed", args);
    return out;
}

Test(cli, print_plan_shows_the_workshop_table) {
    char *out = stdout_of("train --model toy --ranks 3 --print-plan");
    /* GPU k owns a_k, b_k and c_k: the workshop's table */
    cr_expect(strstr(out, "GPU 0  a₀     b₀     c₀") != NULL, "%s", out);
    cr_expect(strstr(out, "GPU 1  a₁     b₁     c₁") != NULL, "%s", out);
    cr_expect(strstr(out, "GPU 2  a₂     b₂     c₂") != NULL, "%s", out);
    cr_expect(strstr(out, "step") == NULL, "--print-plan exits before training");
    free(out);
    out = stdout_of("train --ranks 2 --strategy ddp --print-plan");
    cr_expect(strstr(out, "GPU 1  a₀ a₁ a₂") != NULL, "DDP: every rank holds everything\n%s", out);
    free(out);
}

Test(cli, json_lines_show_the_loss_falling) {
    char *out = stdout_of("train --ranks 3 --steps 60 --batch-size 8 --json");
    int lines = 0, memory = 0, epochs = 0;
    double first = 0, last = 0, epoch_sum = 0;
    for (char *line = strtok(out, "\n"); line; line = strtok(NULL, "\n")) {
        long step, steps;
        double loss;
        unsigned long peak;
        int epoch;
        if (sscanf(line, "{\"peak_bytes\":%lu,", &peak) == 1) { /* the last line */
            cr_expect_eq(peak, 312, "the toy's peak at 3 ranks: %s", line);
            memory++;
            continue;
        }
        /* each epoch's end (10 steps of 24 of the 256 points): the mean of its step lines */
        if (sscanf(line,
                   "{\"epoch_end\":true,\"epoch\":%d,\"step\":%ld,\"steps\":%ld,"
                   "\"train_loss\":%lf}",
                   &epoch, &step, &steps, &loss) == 4) {
            cr_expect_eq(epoch, ++epochs, "%s", line);
            cr_expect_eq(step, lines, "%s", line);
            cr_expect_eq(steps, 10, "%s", line);
            cr_expect_float_eq(loss, epoch_sum / 10, 1e-5 * loss, "%s", line);
            epoch_sum = 0;
            continue;
        }
        cr_expect_eq(memory, 0, "the memory line comes last");
        cr_assert_eq(sscanf(line, "{\"step\":%ld,\"epoch\":%*d,\"loss\":%lf", &step, &loss), 2,
                     "not a step line: %s", line);
        cr_expect_eq(step, lines + 1);
        if (!lines) first = loss;
        last = loss;
        epoch_sum += loss;
        lines++;
    }
    cr_expect_eq(lines, 60);
    cr_expect_eq(epochs, 6);
    cr_expect_eq(memory, 1);
    cr_expect_lt(last, 0.2 * first, "loss %g -> %g", first, last);
    free(out);
}

Test(cli, trace_out_writes_chrome_json) {
    char err[4096], args[512];
    const char *out = "/tmp/fsdp_cli_trace.json";
    unlink(out);
    snprintf(args, sizeof args, "train --ranks 3 --steps 1 --json --trace-out %s", out);
    cr_assert_eq(run_fsdp(args, err, sizeof err), 0, "%s", err);
    FILE *f = fopen(out, "r");
    cr_assert(f);
    static char text[1 << 20];
    size_t n = fread(text, 1, sizeof text - 1, f);
    text[n] = 0;
    fclose(f);
    unlink(out);
    /* one step of zero3 at 3 ranks: every rank gathers each of the 3 units in forward and
     * again in backward, and reduce-scatters each unit's gradients once (the gather of the
     * final parameters for printing comes after, outside any phase) */
    cJSON *root = cJSON_Parse(text);
    cr_assert(root, "not JSON");
    int count[2][2] = {{0}}; /* [all_gather, reduce_scatter][forward, backward] */
    const cJSON *e;
    cJSON_ArrayForEach(e, cJSON_GetObjectItem(root, "traceEvents")) {
        const cJSON *cat = cJSON_GetObjectItem(e, "cat");
        const cJSON *phase = cJSON_GetObjectItem(cJSON_GetObjectItem(e, "args"), "phase");
        if (!cJSON_IsString(cat) || !cJSON_IsString(phase)) continue;
        int kind = !strcmp(cat->valuestring, "all_gather")       ? 0
                   : !strcmp(cat->valuestring, "reduce_scatter") ? 1
                                                                 : -1;
        int ph = !strcmp(phase->valuestring, "forward")    ? 0
                 : !strcmp(phase->valuestring, "backward") ? 1
                                                           : -1;
        if (kind >= 0 && ph >= 0) count[kind][ph]++;
    }
    cJSON_Delete(root);
    cr_expect_eq(count[0][0], 3 * 3, "forward all-gathers");
    cr_expect_eq(count[0][1], 3 * 3, "backward all-gathers");
    cr_expect_eq(count[1][0], 0, "no reduce-scatter in forward");
    cr_expect_eq(count[1][1], 3 * 3, "backward reduce-scatters");
    cr_expect(strstr(text, "\"name\":\"all_gather La\"") != NULL);
}

Test(cli, vit_json_has_steps_and_an_evaluation) {
    /* a small ViT trained on the test split for 3 steps, evaluated on held-out train images */
    char *out = stdout_of("train --model vit-tiny --layers 1 --hidden 16 --heads 2 --mlp 16 "
                          "--split test --steps 3 --batch-size 16 --ranks 2 --json");
    int steps = 0, evals = 0, memory = 0, epochs = 0;
    for (char *line = strtok(out, "\n"); line; line = strtok(NULL, "\n")) {
        cJSON *o = cJSON_Parse(line);
        cr_assert(o, "not JSON: %s", line);
        if (cJSON_GetObjectItem(o, "epoch_end")) { /* the run ends in its first epoch */
            cr_expect_eq(cJSON_GetObjectItem(o, "steps")->valueint, 3, "%s", line);
            cr_expect(cJSON_IsNumber(cJSON_GetObjectItem(o, "train_loss")), "%s", line);
            epochs++;
        } else if (cJSON_GetObjectItem(o, "eval")) {
            const cJSON *acc = cJSON_GetObjectItem(o, "test_accuracy");
            cr_assert(cJSON_IsNumber(acc), "%s", line);
            cr_expect(acc->valuedouble >= 0.0 && acc->valuedouble <= 1.0, "%s", line);
            cr_expect_eq(cJSON_GetObjectItem(o, "samples")->valueint, 10000);
            evals++;
        } else if (cJSON_GetObjectItem(o, "peak_bytes")) {
            const cJSON *ranks = cJSON_GetObjectItem(o, "rank_peaks");
            cr_expect_eq(cJSON_GetArraySize(ranks), 2, "%s", line);
            cr_expect_gt(cJSON_GetObjectItem(o, "peak_bytes")->valuedouble, 0.0);
            memory++;
        } else {
            const char *keys[] = {"step", "epoch", "loss", "images_per_s", "lr"};
            for (int k = 0; k < 5; k++)
                cr_expect(cJSON_IsNumber(cJSON_GetObjectItem(o, keys[k])), "%s lacks %s", line,
                          keys[k]);
            cr_expect_float_eq(cJSON_GetObjectItem(o, "lr")->valuedouble, 1e-3, 1e-9);
            cr_expect_gt(cJSON_GetObjectItem(o, "images_per_s")->valuedouble, 0.0);
            steps++;
        }
        cJSON_Delete(o);
    }
    cr_expect_eq(steps, 3);
    cr_expect_eq(epochs, 1);
    cr_expect_eq(evals, 1);
    cr_expect_eq(memory, 1);
    free(out);
}

/* auto says what it chose and why; on a machine with a GPU it is cuda, else the simulator,
 * and one rank trains either way. --backend cuda without a GPU is a usage error. */
Test(cli, backend_auto_says_which_it_chose) {
    char *out = stdout_of("train --backend auto --ranks 1 --steps 3");
    int gpu = strstr(out, "backend: cuda (auto: ") != NULL;
    cr_expect(gpu || strstr(out, "backend: sim (auto: ") != NULL, "%s", out);
    cr_expect(strstr(out, "final parameters:") != NULL, "it trained: %s", out);
    free(out);
    if (!gpu) expect_usage_error("train --backend cuda --ranks 1", "--backend cuda: no GPU");
}

/* Paths the run writes are checked before it trains: each bad one is the only line printed
 * (no training output before it), exit 2, and a file named as --checkpoint-dir is untouched. */
Test(cli, outputs_are_checked_before_training) {
    char dir[256], file[300];
    fresh_test_dir(dir, sizeof dir, "cli", "outputs");
    snprintf(file, sizeof file, "%s/precious", dir);
    FILE *f = fopen(file, "w");
    cr_assert(f);
    fputs("precious\n", f);
    fclose(f);
    const char *cases[][2] = {
        {"--trace-out %s", "--trace-out %s is a directory; give a file"},
        {"--dump-params %s", "--dump-params %s is a directory; give a file"},
        {"--memory-svg %s", "--memory-svg %s is a directory; give a file"},
        {"--save-full %s", "--save-full %s is a directory; give a file"},
        {"--checkpoint-dir %s/precious", "--checkpoint-dir %s/precious is not a directory"},
        {"--checkpoint-dir %s/no/such", "--checkpoint-dir %s/no/such: cannot create it: No such"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        char flag[512], want[512];
        snprintf(flag, sizeof flag, cases[i][0], dir);
        snprintf(want, sizeof want, cases[i][1], dir);
        int code;
        char *said = fsdp_run(&code, "2>&1", "train --model toy --ranks 2 --steps 3 %s", flag);
        cr_expect_eq(code, 2, "%s: exit %d", flag, code);
        cr_expect(strstr(said, want) == said + strlen("fsdp: ") &&
                      strchr(said, '\n') == said + strlen(said) - 1,
                  "%s: should say only 'fsdp: %s', said:\n%s", flag, want, said);
        free(said);
    }
    char *kept = read_text_file(file, NULL);
    cr_expect_str_eq(kept, "precious\n");
    free(kept);
    remove_test_dir(dir);
}
