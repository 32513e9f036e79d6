/* gpu/run.sh, what a GPU session runs from the bundle: its stages share one time budget, a step
 * is cut at the budget's end and the next one skipped, and a bad budget is one line and exit 2.
 * Run here in a stand-in bundle (stub programs, a stub nvidia-smi that lists one GPU). */
#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>

/* The stand-in bundle in a fresh folder: run.sh, an empty lib.tar.gz, a test_gpu that sleeps
 * `test_seconds`, an fsdp that only says it would run, and bin/nvidia-smi listing a GPU. */
static const char *const MAKE_BUNDLE =
    "d=$(mktemp -d) && cp gpu/run.sh \"$d\"/ && mkdir \"$d/empty\" \"$d/bin\" &&"
    " tar -C \"$d/empty\" -czf \"$d/lib.tar.gz\" . &&"
    " printf '#!/bin/sh\\nsleep %d\\n' > \"$d/test_gpu\" &&"
    " printf '#!/bin/sh\\necho \"backend: sim (auto: stub)\"\\n' > \"$d/fsdp\" &&"
    " printf '#!/bin/sh\\necho \"GPU 0: Stub H200 (UUID: stub)\"\\n' > \"$d/bin/nvidia-smi\" &&"
    " chmod +x \"$d/test_gpu\" \"$d/fsdp\" \"$d/bin/nvidia-smi\" && ";

/* Runs run.sh's `stages` under RUN_BUDGET=budget in a new stand-in bundle; returns its exit
 * status and, in out, what it printed followed by its summary.log (caller frees). */
static int run_stages(int test_seconds, const char *budget, const char *stages, char **out) {
    char cmd[2048], prefix[1024];
    snprintf(prefix, sizeof prefix, MAKE_BUNDLE, test_seconds);
    snprintf(cmd, sizeof cmd,
             "%s TMPDIR=\"$d\" PATH=\"$d/bin:$PATH\" RUN_BUDGET='%s' \"$d/run.sh\" %s \"$d/logs\""
             " 2>&1; rc=$?; echo '-- summary'; cat \"$d/logs/summary.log\" 2>/dev/null;"
             " rm -rf \"$d\"; exit $rc",
             prefix, budget, stages);
    FILE *p = popen(cmd, "r");
    cr_assert_not_null(p);
    size_t cap = 1 << 16, n = 0;
    char *buf = malloc(cap);
    cr_assert_not_null(buf);
    n = fread(buf, 1, cap - 1, p);
    buf[n] = 0;
    int status = pclose(p);
    *out = buf;
    return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

/* A 16 s budget over stage 1: test_gpu (a 420 s limit of its own, here a 30 s sleep) is cut at
 * the budget's end, and the vit-tiny run after it is skipped and named; the status says not all
 * ran. Without the budget test_gpu would end after 30 s with status 0. */
Test(gpu_run, a_step_is_cut_at_the_budgets_end_and_the_next_skipped) {
    char *out;
    int rc = run_stages(30, "16", "1", &out);
    cr_expect_eq(rc, 1, "%s", out);
    const char *summary = strstr(out, "-- summary");
    cr_assert_not_null(summary, "%s", out);
    cr_expect(strstr(summary, "== stage 1, 16 s of the budget left") ||
                  strstr(summary, "== stage 1, 15 s of the budget left"),
              "%s", out);
    cr_expect(strstr(summary, "== test_gpu: rc=124 (timed out)"), "%s", out);
    cr_expect(strstr(summary, "== train_vit_tiny: skipped"), "%s", out);
    free(out);
}

/* A budget that is not whole seconds is one line and exit 2, before any step. */
Test(gpu_run, a_bad_budget_is_one_line_and_exit_2) {
    const char *bad[] = {"abc", "-5", "1.5"};
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        char *out;
        int rc = run_stages(0, bad[i], "1 2", &out);
        cr_expect_eq(rc, 2, "%s: %s", bad[i], out);
        char want[128];
        snprintf(want, sizeof want,
                 "run.sh: RUN_BUDGET must be whole seconds, not '%s'\n-- summary", bad[i]);
        cr_expect(strstr(out, want) == out, "%s", out);
        free(out);
    }
}
