/* `fsdp viz` in plain mode against golden frames of the toy at 3 ranks (zero3, zero2, DDP),
 * the replay of a recorded trace, and bad input. A golden file changes only when the picture is
 * meant to change: regenerate it with the command in its test and read the diff. */
#include <criterion/criterion.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>

#include "tests/util.h"

static void expect_golden(const char *args, const char *golden) {
    int status;
    char *out = fsdp_output(args, "2>&1", &status);
    cr_expect_eq(status, 0, "fsdp %s failed: %s", args, out);
    char *want = read_text_file(golden, NULL);
    cr_expect_str_eq(out, want, "fsdp %s differs from %s", args, golden);
    free(want);
    free(out);
}

Test(viz, plain_frames_match_the_golden_files) {
    expect_golden("viz --model toy --ranks 3 --strategy zero3 --events 55-59",
                  "tests/golden/viz_toy_zero3_55-59.txt");
    expect_golden("viz --model toy --ranks 3 --strategy zero3 --events 190-192",
                  "tests/golden/viz_toy_zero3_190-192.txt");
    expect_golden("viz --model toy --ranks 3 --strategy zero2 --events 55-59",
                  "tests/golden/viz_toy_zero2_55-59.txt");
    expect_golden("viz --model toy --ranks 3 --strategy ddp --events 85-87",
                  "tests/golden/viz_toy_ddp_85-87.txt");
    /* Adam's step on each rank's shard, with the values before and after */
    expect_golden("viz --model toy --ranks 3 --strategy zero3 --events 295-297",
                  "tests/golden/viz_toy_zero3_295-297.txt");
    /* hsdp: the reduce-scatter averages within a shard group (no values yet: the frame knows
     * only the final ones), then the all-reduce over a replica group (GPUs 0 and 2), each
     * keeping its shard */
    expect_golden("viz --model toy --ranks 4 --strategy hsdp --replicas 2 --events 253-253",
                  "tests/golden/viz_toy_hsdp_253.txt");
    expect_golden("viz --model toy --ranks 4 --strategy hsdp --replicas 2 --events 291-291",
                  "tests/golden/viz_toy_hsdp_291.txt");
    /* the seed's order: Lc's reduce-scatter with each GPU's own gradients summed and divided,
     * then Lc's frees after it */
    expect_golden("viz --model toy --ranks 3 --strategy zero3 --seed-order --events 169-171",
                  "tests/golden/viz_toy_zero3_seed_order_169-171.txt");
    expect_golden("viz --model toy --ranks 3 --strategy zero3 --seed-order --events 178-181",
                  "tests/golden/viz_toy_zero3_seed_order_178-181.txt");
    /* the presenter's frames: La's all-gather on every GPU with its unpacking folded in, then
     * its forward; hsdp's reduce-scatter inside each shard group, Lb's backward (which starts
     * after it: its own all-gather's rows are packed on the compute stream first), then the
     * all-reduce across the replicas with Lb's post-backward folded in */
    expect_golden("viz --model toy --ranks 3 --strategy zero3 --frames 2-3",
                  "tests/golden/viz_toy_zero3_frames_2-3.txt");
    expect_golden("viz --model toy --ranks 4 --strategy hsdp --replicas 2 --frames 12-14",
                  "tests/golden/viz_toy_hsdp_frames_12-14.txt");
}

/* GPU 0's all-gathers, computes, reduce-scatters and frees of gathered parameters in the text
 * frames of `fsdp ARGS` as "G0 F0 X0 ...": letter and unit (La 0, Lb 1, Lc 2). */
static void gpu0_sequence(const char *args, char *got, size_t n) {
    int status;
    char *out = fsdp_output(args, "2>&1", &status);
    cr_assert_eq(status, 0, "fsdp %s: %.300s", args, out);
    size_t at = 0;
    got[0] = 0;
    static const struct {
        const char *header, *narration;
        char letter;
    } kinds[] = {{"all_gather", NULL, 'G'},
                 {"forward", NULL, 'F'},
                 {"backward", NULL, 'B'},
                 {"reduce_scatter", NULL, 'R'},
                 {"free", "unsharded parameters", 'X'}};
    for (const char *line = strstr(out, "-- event "); line; line = strstr(line + 1, "-- event ")) {
        const char *end = strchr(line, '\n');
        if (!end || !strstr(line, "| step 1 |")) continue;
        char head[160];
        snprintf(head, sizeof head, "%.*s", (int)(end - line), line);
        const char *what = strstr(head, "| GPU 0 | ");
        if (!what || (!strstr(head, "| forward |") && !strstr(head, "| backward |"))) continue;
        what += strlen("| GPU 0 | ");
        const char *next = strchr(end + 1, '\n');
        for (size_t k = 0; k < sizeof kinds / sizeof *kinds; k++) {
            size_t len = strlen(kinds[k].header);
            if (strncmp(what, kinds[k].header, len) || what[len] != ' ' || what[len + 1] != 'L')
                continue;
            if (kinds[k].narration &&
                !(next && memmem(end, (size_t)(next - end), kinds[k].narration,
                                 strlen(kinds[k].narration))))
                continue;
            at += (size_t)snprintf(got + at, n - at, "%s%c%d", at ? " " : "", kinds[k].letter,
                                   what[len + 2] - 'a');
        }
    }
    free(out);
}

/* --seed-order is the workshop seed's list for the toy at 3 ranks: per unit in forward
 * all-gather, forward, free; in backward all-gather, backward, reduce-scatter, free. Without it
 * the order is FSDP2's; --help says what it sets, and a flag that asks for a prefetch, or a
 * replay (whose order is the file's), is refused in one line. */
Test(viz, seed_order_is_the_seeds_list) {
    char got[512];
    gpu0_sequence("viz --model toy --ranks 3 --strategy zero3 --seed-order", got, sizeof got);
    cr_expect_str_eq(got, "G0 F0 X0 G1 F1 X1 G2 F2 X2 G2 B2 R2 X2 G1 B1 R1 X1 G0 B0 R0 X0");
    gpu0_sequence("viz --model toy --ranks 3 --strategy zero3", got, sizeof got);
    cr_expect_str_eq(got, "G0 F0 G1 X0 F1 G2 X1 F2 X2 G2 B2 G1 X2 R2 B1 G0 X1 B0 R1 X0 R0");
    gpu0_sequence("viz --model toy --ranks 3 --strategy zero3 --seed-order --prefetch-forward 0",
                  got, sizeof got);
    cr_expect_str_eq(got, "G0 F0 X0 G1 F1 X1 G2 F2 X2 G2 B2 R2 X2 G1 B1 R1 X1 G0 B0 R0 X0",
                     "a prefetch of 0 is what it sets");
    int status;
    /* the presenter's frame of Lc's reduce-scatter folds in the frees after it, and says so;
     * FSDP2's frees come before theirs, packed */
    char *seed = fsdp_output("viz --model toy --ranks 3 --strategy zero3 --seed-order --frames 11",
                             "2>&1", &status);
    cr_expect(strstr(seed, "reduce_scatter Lc --") &&
                  strstr(seed, "Then each GPU frees Lc's full gradients (their reduce-scatter has "
                               "averaged them) and frees its unsharded parameters (after its "
                               "reduce-scatter, in the seed's order)."),
              "%s", seed);
    free(seed);
    char *fsdp2 =
        fsdp_output("viz --model toy --ranks 3 --strategy zero3 --frames 16", "2>&1", &status);
    cr_expect(strstr(fsdp2, "reduce_scatter Lb --") &&
                  strstr(fsdp2, "Then each GPU frees La's full gradients (packed for their "
                                "reduce-scatter) and frees its unsharded parameters (its backward "
                                "is done)."),
              "%s", fsdp2);
    free(fsdp2);
    char *help = fsdp_output("viz --help", "2>&1", &status);
    cr_expect(strstr(help, "--seed-order") && strstr(help, "--prefetch-forward 0") &&
                  strstr(help, "--prefetch-backward 0"),
              "%s", help);
    free(help);
    const UsageCase refused[] = {
        {"viz --model toy --seed-order --prefetch-forward 1", "--prefetch-forward 1"},
        {"viz --model toy --seed-order --prefetch-backward=2", "--prefetch-backward 2"},
        {"viz --seed-order --trace /tmp/none.json", "--trace replays one"},
    };
    expect_usage_errors(refused, sizeof refused / sizeof *refused);
}

Test(viz, bad_events_exit_2_with_one_line) {
    const char *bad[] = {"viz --events 0",   "viz --events 5-3",     "viz --events x",
                         "viz --events",     "viz --events 100000",  "viz --strategy zro3",
                         "viz --trace /tmp", "viz --trace /dev/zero"};
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        int status;
        char *out = fsdp_output(bad[i], "2>&1", &status);
        cr_expect(WIFEXITED(status) && WEXITSTATUS(status) == 2, "`fsdp %s` exited %d", bad[i],
                  status);
        int lines = 0;
        for (const char *c = out; *c; c++) lines += *c == '\n';
        cr_expect_eq(lines, 1, "`fsdp %s` printed: %s", bad[i], out);
        free(out);
    }
}

/* A run recorded with --trace-out and replayed with --trace draws the very same frames, every
 * one of them, and the file keeps the flags (not the output path) that made it. */
Test(viz, a_replayed_trace_draws_the_same_frames) {
    char path[128], args[256];
    snprintf(path, sizeof path, "/tmp/fsdp_test_viz_%ld.json", (long)getpid());
    snprintf(args, sizeof args,
             "viz --model toy --ranks 3 --strategy zero2 --steps 2 --trace-out %s", path);
    int status;
    char *live = fsdp_output(args, "2>&1", &status);
    cr_assert_eq(status, 0, "%.300s", live);
    cr_assert_gt(strlen(live), 100000, "two steps of frames");
    snprintf(args, sizeof args, "viz --trace %s", path);
    char *replay = fsdp_output(args, "2>&1", &status);
    cr_expect_eq(status, 0, "%.300s", replay);
    cr_expect(strcmp(live, replay) == 0, "the replay differs from the run");
    free(live);
    free(replay);
    /* a train run's trace replays too, at one of its events */
    snprintf(args, sizeof args, "train --model toy --ranks 3 --steps 1 --trace-out %s", path);
    free(fsdp_output(args, ">/dev/null 2>&1", &status));
    cr_assert_eq(status, 0);
    snprintf(args, sizeof args, "viz --trace %s --events 55", path);
    char *frame = fsdp_output(args, "2>&1", &status);
    cr_expect_eq(status, 0, "%s", frame);
    cr_expect_neq(strstr(frame, "GPU 0 needs a₀ a₁ a₂ for La, has a₀=+0.887, gathers"), NULL, "%s",
                  frame);
    free(frame);
    /* train flags beside --trace would be ignored silently: refused instead */
    snprintf(args, sizeof args, "viz --trace %s --ranks 4", path);
    char *out = fsdp_output(args, "2>&1", &status);
    cr_expect(WIFEXITED(status) && WEXITSTATUS(status) == 2, "%s", out);
    cr_expect_neq(strstr(out, "flags come from the file (got --ranks)"), NULL, "%s", out);
    free(out);
    remove(path);
}

/* --times: the last step's seconds per kind of work, rank by rank, as the trace holds them;
 * --against: rank 0 beside another trace, with their ratio (1.00 against itself, and the
 * a100 profile's slower compute above 1). */
Test(viz, times_are_the_trace_spans_and_against_sets_two_beside) {
    char h100[128], a100[128], args[512];
    snprintf(h100, sizeof h100, "/tmp/fsdp_test_viz_h100_%ld.json", (long)getpid());
    snprintf(a100, sizeof a100, "/tmp/fsdp_test_viz_a100_%ld.json", (long)getpid());
    snprintf(args, sizeof args, "viz --model toy --ranks 3 --steps 2 --times --trace-out %s", h100);
    char *out = fsdp_ok("%s", args);
    /* the toy's step as the cost model gives it: every rank alike */
    cr_expect_neq(strstr(out, "step 2 of this run, modelled: seconds of each kind of work"), NULL,
                  "%s", out);
    cr_expect_neq(strstr(out, "                        rank 0      rank 1      rank 2\n"), NULL,
                  "%s", out);
    cr_expect_neq(strstr(out, "  forward            40.000 us   40.000 us   40.000 us\n"), NULL,
                  "%s", out);
    cr_expect_neq(strstr(out, "  all_gather         27.241 us   27.241 us   27.241 us\n"), NULL,
                  "%s", out);
    cr_expect_neq(strstr(out, "  step (span)       129.621 us  129.621 us  129.621 us\n"), NULL,
                  "%s", out);
    cr_expect_eq(strstr(out, "all_reduce"), NULL, "no all-reduce under zero3: %s", out);
    free(out);
    free(fsdp_ok("viz --model toy --ranks 3 --steps 2 --times --profile a100-nvlink --trace-out %s",
                 a100));
    out = fsdp_ok("viz --trace %s --times --against %s", h100, h100);
    int rows = 0;
    for (const char *c = strstr(out, "ratio\n"); c && (c = strstr(c, "      1.00\n")); c++) rows++;
    cr_expect_eq(rows, 6, "forward, backward, optimizer, two collectives and the span: %s", out);
    free(out);
    out = fsdp_ok("viz --trace %s --times --against %s", h100, a100);
    const char *fwd = strstr(out, "  forward  ");
    cr_assert_not_null(fwd, "%s", out);
    double a, b, ratio;
    cr_assert_eq(sscanf(fwd, "  forward %lf us %lf us %lf", &a, &b, &ratio), 3, "%s", out);
    cr_expect(b > a && fabs(ratio - b / a) < 0.01, "the A100 computes slower: %s", out);
    free(out);
    const UsageCase bad[] = {
        {"viz --against x.json", "--against sets another trace beside --times; give --times"},
        {"viz --times --plain", "--times prints the step's times instead of frames; --plain"},
        {"viz --times --events 3", "--events is for frames"},
        {"viz --times --against /nonexistent.json", "/nonexistent.json"},
    };
    expect_usage_errors(bad, sizeof bad / sizeof *bad);
    remove(h100);
    remove(a100);
}

Test(viz, a_bad_trace_file_exits_2_with_one_line) {
    char path[128], args[256];
    snprintf(path, sizeof path, "/tmp/fsdp_test_viz_bad_%ld.json", (long)getpid());
    FILE *f = fopen(path, "w");
    cr_assert_not_null(f);
    fputs("{\"traceEvents\":[{\"name\":\"x\"", f); /* cut short */
    fclose(f);
    const char *cases[][2] = {{"/nonexistent.json", "cannot open trace"}, {path, "truncated"}};
    for (int i = 0; i < 2; i++) {
        snprintf(args, sizeof args, "viz --trace %s", cases[i][0]);
        int status;
        char *out = fsdp_output(args, "2>&1", &status);
        cr_expect(WIFEXITED(status) && WEXITSTATUS(status) == 2, "`fsdp %s` exited %d", args,
                  status);
        cr_expect_neq(strstr(out, cases[i][1]), NULL, "`fsdp %s` said: %s", args, out);
        int lines = 0;
        for (const char *c = out; *c; c++) lines += *c == '\n';
        cr_expect_eq(lines, 1, "`fsdp %s` printed: %s", args, out);
        free(out);
    }
    remove(path);
}

/* viz --dump-params writes the parameters after its step: train's after the same step. */
Test(viz, dump_params_is_the_parameters_after_the_step) {
    char dir[256];
    fresh_test_dir(dir, sizeof dir, "viz", "dump");
    free(fsdp_ok("viz --model toy --ranks 3 --plain --events 1-1 --dump-params %s/viz.txt", dir));
    free(fsdp_ok("train --model toy --ranks 3 --steps 1 --dump-params %s/train.txt", dir));
    char a[300], b[300];
    snprintf(a, sizeof a, "%s/viz.txt", dir);
    snprintf(b, sizeof b, "%s/train.txt", dir);
    size_t n = 0;
    double *v = dump_read(a, &n);
    double moved = 0; /* the step moved them off their initial values: not all zero */
    for (size_t i = 0; i < n; i++) moved += v[i] != 0.0;
    cr_expect(n == 9 && moved > 0, "%zu values, %g non-zero", n, moved);
    free(v);
    cr_expect_eq(dump_rel_diff(a, b), 0.0, "viz's dump differs from train's");
    remove_test_dir(dir);
}
