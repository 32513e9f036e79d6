/* metrics.jsonl's writer: every line JSON with its fields, read back on reopening, cut back
 * when a run goes back to an earlier step, a line cut short by a kill dropped, a line that is
 * not a metrics line refused. */
#include <cjson/cJSON.h>
#include <criterion/criterion.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "io/metrics_log.h"
#include "tests/util.h"

static MetricsStep step_report(long step, float loss) {
    return (MetricsStep){.step = step,
                         .epoch = (int)(step / 10),
                         .step_time = 8.6e-5,
                         .wall_time = 0.01,
                         .images_per_s = 2400,
                         .lr = 0.05f,
                         .loss = loss,
                         .grad_norm = 1.5f,
                         .peak_bytes = 312};
}

static MetricsEval eval_report(long step, long correct) {
    return (MetricsEval){.step = step,
                         .epoch = (int)(step / 10),
                         .samples = 1000,
                         .correct = correct,
                         .accuracy = correct / 1000.0,
                         .loss = 0.75,
                         .wall_time = 0.5};
}

static void temp_path(char *path, size_t n, const char *tag) {
    snprintf(path, n, "/tmp/fsdp_metrics_%ld_%s.jsonl", (long)getpid(), tag);
    unlink(path);
}

/* The "step" of every line of the file, in order, into steps; returns how many. */
static int steps_in_file(const char *path, long *steps, int max) {
    char *text = read_text_file(path, NULL);
    int n = 0;
    for (char *line = strtok(text, "\n"); line && n < max; line = strtok(NULL, "\n")) {
        cJSON *o = cJSON_Parse(line);
        cr_assert(o, "not JSON: %s", line);
        steps[n++] = (long)cJSON_GetObjectItem(o, "step")->valuedouble;
        cJSON_Delete(o);
    }
    free(text);
    return n;
}

Test(metrics_log, lines_hold_every_field_with_its_value) {
    char path[256];
    temp_path(path, sizeof path, "fields");
    MetricsLog m;
    Err err = {0};
    cr_assert_eq(metrics_log_open(&m, path, &err), 0, "%s", err.msg);
    MetricsStep r = step_report(3, 2.25f);
    cr_assert_eq(metrics_log_step(&m, &r, &err), 0, "%s", err.msg);
    MetricsEval e = eval_report(3, 821);
    cr_assert_eq(metrics_log_eval(&m, &e, "test", &err), 0, "%s", err.msg);
    metrics_log_close(&m);
    char *text = read_text_file(path, NULL);
    cr_expect_str_eq(text,
                     "{\"split\":\"train\",\"step\":3,\"epoch\":0,\"loss\":2.25,\"lr\":0.05,"
                     "\"grad_norm\":1.5,\"step_time_s\":8.6e-05,\"peak_bytes\":312,"
                     "\"images_per_s\":2400,\"wall_s\":0.01}\n"
                     "{\"split\":\"test\",\"step\":3,\"epoch\":0,\"loss\":0.75,\"accuracy\":0.821,"
                     "\"correct\":821,\"samples\":1000,\"wall_s\":0.5}\n");
    free(text);
    unlink(path);
}

Test(metrics_log, a_loss_that_is_not_finite_is_null) {
    char path[256];
    temp_path(path, sizeof path, "nan");
    MetricsLog m;
    Err err = {0};
    cr_assert_eq(metrics_log_open(&m, path, &err), 0, "%s", err.msg);
    MetricsStep r = step_report(1, NAN);
    cr_assert_eq(metrics_log_step(&m, &r, &err), 0, "%s", err.msg);
    metrics_log_close(&m);
    char *text = read_text_file(path, NULL);
    cJSON *o = cJSON_Parse(text);
    cr_assert(o, "still JSON: %s", text);
    cr_expect(cJSON_IsNull(cJSON_GetObjectItem(o, "loss")), "%s", text);
    cJSON_Delete(o);
    free(text);
    unlink(path);
}

/* A run resumed from step 4's checkpoint logs step 5 again: the lines of steps 5 to 8 from
 * before go, the evaluation at step 4 stays, and the file's steps keep increasing. */
Test(metrics_log, a_run_that_goes_back_cuts_the_lines_after_its_step) {
    char path[256];
    temp_path(path, sizeof path, "rewind");
    MetricsLog m;
    Err err = {0};
    cr_assert_eq(metrics_log_open(&m, path, &err), 0, "%s", err.msg);
    for (long s = 1; s <= 8; s++) {
        MetricsStep r = step_report(s, 3.0f - 0.1f * (float)s);
        cr_assert_eq(metrics_log_step(&m, &r, &err), 0, "%s", err.msg);
        if (s == 4) {
            MetricsEval e = eval_report(4, 500);
            cr_assert_eq(metrics_log_eval(&m, &e, "test", &err), 0, "%s", err.msg);
        }
    }
    metrics_log_close(&m);
    cr_assert_eq(metrics_log_open(&m, path, &err), 0, "%s", err.msg);
    cr_expect_eq(m.n, 9, "the nine lines read back");
    cr_expect_eq(m.lines[4].step, 4);
    cr_expect_str_eq(m.lines[4].split, "test");
    cr_expect_float_eq(m.lines[4].accuracy, 0.5, 1e-12);
    cr_expect_float_eq(m.lines[8].loss, 3.0f - 0.8f, 1e-6);
    for (long s = 5; s <= 6; s++) {
        MetricsStep r = step_report(s, 1.0f);
        cr_assert_eq(metrics_log_step(&m, &r, &err), 0, "%s", err.msg);
    }
    metrics_log_close(&m);
    long steps[32];
    int n = steps_in_file(path, steps, 32);
    long want[] = {1, 2, 3, 4, 4, 5, 6};
    cr_assert_eq(n, 7, "lines after the cut: %d", n);
    for (int i = 0; i < n; i++) cr_expect_eq(steps[i], want[i], "line %d", i + 1);
    /* the same evaluation again replaces its line, and what came after it */
    cr_assert_eq(metrics_log_open(&m, path, &err), 0, "%s", err.msg);
    MetricsEval e = eval_report(4, 600);
    cr_assert_eq(metrics_log_eval(&m, &e, "test", &err), 0, "%s", err.msg);
    metrics_log_close(&m);
    n = steps_in_file(path, steps, 32);
    cr_expect_eq(n, 5, "steps 1-4 and the new evaluation");
    char *text = read_text_file(path, NULL);
    cr_expect(strstr(text, "\"correct\":600") && !strstr(text, "\"correct\":500"), "%s", text);
    free(text);
    unlink(path);
}

/* A kill in the middle of a write leaves a line without its newline: it is dropped. */
Test(metrics_log, a_line_cut_short_is_dropped) {
    char path[256];
    temp_path(path, sizeof path, "torn");
    MetricsLog m;
    Err err = {0};
    cr_assert_eq(metrics_log_open(&m, path, &err), 0, "%s", err.msg);
    MetricsStep r = step_report(1, 2.0f);
    cr_assert_eq(metrics_log_step(&m, &r, &err), 0, "%s", err.msg);
    metrics_log_close(&m);
    struct stat whole;
    cr_assert_eq(stat(path, &whole), 0);
    FILE *f = fopen(path, "a");
    fputs("{\"split\":\"train\",\"step\":2,\"lo", f);
    fclose(f);
    cr_assert_eq(metrics_log_open(&m, path, &err), 0, "%s", err.msg);
    cr_expect_eq(m.n, 1);
    r = step_report(2, 1.5f);
    cr_assert_eq(metrics_log_step(&m, &r, &err), 0, "%s", err.msg);
    metrics_log_close(&m);
    long steps[8];
    cr_expect_eq(steps_in_file(path, steps, 8), 2);
    cr_expect_eq(steps[1], 2);
    unlink(path);
}

Test(metrics_log, a_file_that_is_not_metrics_is_refused_untouched) {
    char path[256];
    temp_path(path, sizeof path, "bad");
    const char *text = "{\"split\":\"train\",\"step\":1,\"loss\":2}\nhello\n";
    FILE *f = fopen(path, "w");
    fputs(text, f);
    fclose(f);
    MetricsLog m;
    Err err = {0};
    cr_expect_eq(metrics_log_open(&m, path, &err), ERR_USAGE);
    metrics_log_close(&m);
    cr_expect(strstr(err.msg, path) && strstr(err.msg, "line 2 is not a metrics line"), "%s",
              err.msg);
    char *kept = read_text_file(path, NULL);
    cr_expect_str_eq(kept, text);
    free(kept);
    unlink(path);
}
