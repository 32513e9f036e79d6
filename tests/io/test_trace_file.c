/* The trace file: what trace_file_write writes, trace_file_read gives back exactly (events,
 * flags, unit names, values), and a file that is missing, cut, not JSON, not a trace, of
 * another version or with an event out of range is one clear error. */
#include <criterion/criterion.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "io/trace_file.h"
#include "tests/util.h"

static char *meta_args[] = {"--model", "toy", "--ranks", "3", "--strategy", "zero2"};
static char *meta_units[] = {"La", "Lb", "Lc"};

static TraceMeta toy_meta(void) {
    return (TraceMeta){.nargs = 6, .args = meta_args, .nunits = 3, .units = meta_units};
}

/* A temporary file name under /tmp, unique to this process and tag. */
static void temp_path(char *buf, size_t n, const char *tag) {
    snprintf(buf, n, "/tmp/fsdp_test_trace_%ld_%s.json", (long)getpid(), tag);
}

static void write_file(const char *path, const Trace *t, const TraceMeta *m) {
    FILE *f = fopen(path, "w");
    cr_assert_not_null(f);
    Err err = {0};
    cr_assert_eq(trace_file_write(t, m, f, &err), 0, "%s", err.msg);
    fclose(f);
}

static void write_text(const char *path, const char *text, size_t n) {
    FILE *f = fopen(path, "w");
    cr_assert_not_null(f);
    cr_assert_eq(fwrite(text, 1, n, f), n);
    fclose(f);
}

Test(trace_file, a_real_run_round_trips_exactly) {
    ToyRun run;
    FsdpConfig c = toy_config(STRAT_ZERO2, 4);
    toy_train(&run, &c, 3, 2, 1);
    Trace *t = &run.trace;
    cr_assert_gt(t->n, 100);
    t->params = run.step_params;
    t->grads = run.step_grads;
    t->steps = 2;
    t->numel = 9;
    char path[256];
    temp_path(path, sizeof path, "roundtrip");
    TraceMeta m = toy_meta();
    write_file(path, t, &m);
    Trace back;
    TraceMeta mb;
    Err err = {0};
    cr_assert_eq(trace_file_read(path, &back, &mb, &err), 0, "%s", err.msg);
    cr_assert_eq(back.n, t->n);
    cr_assert_eq(back.nranks, 3);
    size_t prefetches = 0;
    for (size_t i = 0; i < t->n; i++) {
        const TraceEvent *a = &t->ev[i], *b = &back.ev[i];
        /* times bit for bit: a replay must draw the frames the run drew */
        cr_assert(a->start == b->start && a->end == b->end, "event %zu's times", i);
        cr_assert(a->seq == b->seq && a->bytes == b->bytes && a->mem_total == b->mem_total &&
                      a->rank == b->rank && a->kind == b->kind && a->unit == b->unit &&
                      a->stream == b->stream && a->category == b->category &&
                      a->phase == b->phase && a->step == b->step && a->micro == b->micro &&
                      a->flags == b->flags,
                  "event %zu's fields", i);
        prefetches += (a->flags & EVENT_PREFETCH) != 0;
    }
    cr_assert_gt(prefetches, 0, "the toy's prefetched all-gathers, flagged and read back");
    cr_assert_eq(mb.nargs, 6);
    for (int i = 0; i < 6; i++) cr_expect_str_eq(mb.args[i], meta_args[i]);
    cr_assert_eq(mb.nunits, 3);
    for (int u = 0; u < 3; u++) cr_expect_str_eq(mb.units[u], meta_units[u]);
    cr_assert_eq(back.steps, 2);
    cr_assert_eq(back.numel, 9);
    cr_expect_eq(memcmp(back.params, run.step_params, 27 * sizeof(float)), 0);
    cr_expect_eq(memcmp(back.grads, run.step_grads, 18 * sizeof(float)), 0);
    t->params = t->grads = NULL; /* the run owns them */
    trace_free(&back);
    trace_meta_free(&mb);
    toy_run_free(&run);
    unlink(path);
}

/* Reads path, expects failure with `want` in the message. */
static void expect_refused(const char *path, const char *want) {
    Trace t;
    TraceMeta m;
    Err err = {0};
    int rc = trace_file_read(path, &t, &m, &err);
    cr_expect_neq(rc, 0, "%s was accepted", path);
    cr_expect_neq(strstr(err.msg, want), NULL, "'%s' does not say '%s'", err.msg, want);
    cr_expect_null(strchr(err.msg, '\n'), "one line: %s", err.msg);
    trace_free(&t);
    trace_meta_free(&m);
}

/* A valid file's text with `from` replaced by `to` (first occurrence). */
static void write_edited(const char *good, const char *bad, const char *from, const char *to) {
    size_t n;
    char *s = read_text_file(good, &n);
    char *at = strstr(s, from);
    cr_assert_not_null(at, "'%s' not in the file", from);
    FILE *f = fopen(bad, "w");
    cr_assert_not_null(f);
    fwrite(s, 1, (size_t)(at - s), f);
    fputs(to, f);
    fputs(at + strlen(from), f);
    fclose(f);
    free(s);
}

Test(trace_file, bad_files_are_one_clear_line) {
    ToyRun run;
    FsdpConfig c = toy_config(STRAT_ZERO3, 4);
    toy_train(&run, &c, 3, 1, 1);
    char good[256], bad[256];
    temp_path(good, sizeof good, "good");
    temp_path(bad, sizeof bad, "bad");
    TraceMeta m = toy_meta();
    write_file(good, &run.trace, &m);

    expect_refused("/nonexistent/trace.json", "cannot open trace '/nonexistent/trace.json'");
    /* not read at all: a folder, a device that never ends, a (sparse) file past the limit */
    expect_refused("/tmp", "trace '/tmp' is not a regular file");
    expect_refused("/dev/zero", "trace '/dev/zero' is not a regular file");
    write_text(bad, "{", 1);
    cr_assert_eq(truncate(bad, (off_t)TRACE_FILE_MAX_BYTES + 1), 0);
    expect_refused(bad, fmt_text("trace '%s' is 1073741825 bytes, more than the 1073741824 a "
                                 "trace may be",
                                 bad));
    /* a step that would overflow the header's step + 1 */
    write_edited(good, bad, "\"events\":[\n[",
                 "\"events\":[\n[1,1,0,0,0,0,0,0,0,0,0,2147483647,0,0],[");
    expect_refused(bad, "event 1: step");
    /* numbers no long or float can hold (fuzz_trace found the first: a cast beyond a long's
     * range is undefined) */
    write_edited(good, bad, "\"events\":[\n[",
                 "\"events\":[\n[1,1,0,0,0,5.5e73,0,0,0,0,0,0,0,0],[");
    expect_refused(bad, "event 1: rank");

    size_t n;
    char *text = read_text_file(good, &n);
    write_text(bad, text, n / 2);
    expect_refused(bad, "truncated");
    write_text(bad, text, n - 3);
    expect_refused(bad, "truncated");
    free(text);
    write_text(bad, "hello", 5);
    expect_refused(bad, "not valid JSON");
    write_text(bad, "{\"traceEvents\":[]}", 18);
    expect_refused(bad, "not an fsdp trace");
    write_edited(good, bad, "\"version\":2", "\"version\":1");
    expect_refused(bad, "format version 1; this fsdp reads version 2");
    /* the first event row: a rank the run does not have, a kind that does not exist */
    write_edited(good, bad, "\"version\":2,\"nranks\":3", "\"version\":2,\"nranks\":2");
    expect_refused(bad, ": rank");
    write_edited(good, bad, "\"events\":[\n[", "\"events\":[\n[1,1,0,0,0,0,99,0,0,0,0,0,0,0],[");
    expect_refused(bad, "event 1: kind");
    write_edited(good, bad, "\"events\":[\n[", "\"events\":[\n[\"x\"],[");
    expect_refused(bad, "event 1: not a row of 14 numbers");
    /* fsdpTrace after another key: read from the whole document, the same events */
    write_edited(good, bad, "{\"fsdpTrace\"", "{\"other\":[1,{}],\n\"fsdpTrace\"");
    Trace t;
    TraceMeta tm;
    Err err = {0};
    cr_expect_eq(trace_file_read(bad, &t, &tm, &err), 0, "%s", err.msg);
    cr_expect_eq(t.n, run.trace.n);
    trace_free(&t);
    trace_meta_free(&tm);
    write_edited(good, bad, "\"units\":[\"La\",", "\"units\":[7,");
    expect_refused(bad, "\"units\" holds a non-string");
    unlink(good);
    unlink(bad);
    toy_run_free(&run);
}

Test(trace_file, values_must_have_their_length) {
    TraceEvent e = {.start = 0, .end = 1e-6, .kind = EV_FORWARD, .unit = 0, .category = -1};
    float params[18] = {1, 2, 3}, grads[9] = {4};
    Trace t = {
        .ev = &e, .n = 1, .nranks = 1, .params = params, .grads = grads, .steps = 1, .numel = 9};
    char good[256], bad[256];
    temp_path(good, sizeof good, "vgood");
    temp_path(bad, sizeof bad, "vbad");
    TraceMeta m = toy_meta();
    write_file(good, &t, &m);
    Trace back;
    TraceMeta mb;
    Err err = {0};
    cr_assert_eq(trace_file_read(good, &back, &mb, &err), 0, "%s", err.msg);
    cr_expect_eq(back.params[2], 3.0f);
    cr_expect_eq(back.grads[0], 4.0f);
    trace_free(&back);
    trace_meta_free(&mb);
    write_edited(good, bad, "\"steps\":1", "\"steps\":2");
    expect_refused(bad, "\"params\" must hold 27 values");
    unlink(good);
    unlink(bad);
}

/* A real backend's times are measured and say so; the simulator's are modelled (no "clock"). */
Test(trace_file, the_clock_kind_round_trips) {
    ToyRun run;
    FsdpConfig c = toy_config(STRAT_ZERO3, 4);
    toy_train(&run, &c, 2, 1, 1);
    TraceMeta m = toy_meta();
    for (int measured = 0; measured <= 1; measured++) {
        run.trace.measured = measured;
        char path[256];
        temp_path(path, sizeof path, measured ? "measured" : "modelled");
        write_file(path, &run.trace, &m);
        Trace back;
        TraceMeta mb;
        Err err = {0};
        cr_assert_eq(trace_file_read(path, &back, &mb, &err), 0, "%s", err.msg);
        cr_expect_eq(back.measured, measured);
        cr_expect_str_eq(trace_clock(&back), measured ? "measured" : "modelled");
        trace_free(&back);
        trace_meta_free(&mb);
        unlink(path);
    }
    toy_run_free(&run);
}

/* A value no float holds, in a trace's recorded parameters: refused, not cast (undefined). */
Test(trace_file, a_value_beyond_a_float_is_refused) {
    ToyRun run;
    FsdpConfig c = toy_config(STRAT_ZERO3, 4);
    toy_train(&run, &c, 3, 1, 1);
    run.step_params[0] = 0.5f; /* a value whose text is known */
    run.trace.params = run.step_params;
    run.trace.grads = run.step_grads;
    run.trace.steps = 1;
    run.trace.numel = 9;
    char good[256], bad[256];
    temp_path(good, sizeof good, "floats");
    temp_path(bad, sizeof bad, "floats_bad");
    TraceMeta m = toy_meta();
    write_file(good, &run.trace, &m);
    write_edited(good, bad, "\"params\":[0.5,", "\"params\":[1e300,");
    expect_refused(bad, "holds 1e+300, beyond a float");
    run.trace.params = run.trace.grads = NULL; /* the run owns them */
    toy_run_free(&run);
    unlink(good);
    unlink(bad);
}

/* Each GPU's own gradients before the average ("local_grads") round-trip exactly beside the
 * values; a file written before they were recorded (the fuzz corpus's toy trace, as the
 * writer then wrote it) still loads, without them; and a list of the wrong length is refused. */
Test(trace_file, each_gpus_own_gradients_round_trip_and_old_files_load) {
    static float local[2 * 3 * 9];
    ToyRun run;
    FsdpConfig c = toy_config(STRAT_ZERO3, 4);
    toy_train_recording(&run, &c, 3, 2, 1, local);
    Trace *t = &run.trace;
    t->params = run.step_params;
    t->grads = run.step_grads;
    t->local_grads = local;
    t->steps = 2;
    t->numel = 9;
    char path[256], bad[256];
    temp_path(path, sizeof path, "local");
    temp_path(bad, sizeof bad, "local_bad");
    TraceMeta m = toy_meta();
    write_file(path, t, &m);
    Trace back;
    TraceMeta mb;
    Err err = {0};
    cr_assert_eq(trace_file_read(path, &back, &mb, &err), 0, "%s", err.msg);
    cr_assert_not_null(back.local_grads);
    cr_expect_eq(memcmp(back.local_grads, local, sizeof local), 0, "bit for bit");
    trace_free(&back);
    trace_meta_free(&mb);
    write_edited(path, bad, "\"local_grads\":[", "\"local_grads\":[1,");
    expect_refused(bad, "\"local_grads\" must hold 54 values");
    /* without them (what every trace file before them holds) */
    t->local_grads = NULL;
    write_file(path, t, &m);
    char *text = read_text_file(path, NULL);
    cr_assert_null(strstr(text, "local_grads"), "none written");
    free(text);
    cr_assert_eq(trace_file_read(path, &back, &mb, &err), 0, "%s", err.msg);
    cr_expect_null(back.local_grads);
    cr_expect_eq(memcmp(back.grads, run.step_grads, 18 * sizeof(float)), 0);
    trace_free(&back);
    trace_meta_free(&mb);
    const char *old = "tests/fuzz/corpus/toy_2ranks.trace.json";
    text = read_text_file(old, NULL);
    cr_assert_null(strstr(text, "local_grads"), "%s is from before", old);
    free(text);
    cr_assert_eq(trace_file_read(old, &back, &mb, &err), 0, "%s", err.msg);
    cr_expect_null(back.local_grads);
    cr_expect_not_null(back.params);
    cr_expect_eq(back.steps, 1);
    trace_free(&back);
    trace_meta_free(&mb);
    t->params = t->grads = NULL; /* the run owns them */
    toy_run_free(&run);
    unlink(path);
    unlink(bad);
}
