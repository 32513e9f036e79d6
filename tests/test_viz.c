/* `fsdp viz` in plain mode against golden frames of the toy at 3 ranks (zero3, zero2, DDP),
 * and its bad input. A golden file changes only when the picture is meant to change:
 * regenerate it with the command in its test and read the diff. */
#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>

#include "util.h"

static char *slurp(const char *path) {
    FILE *f = fopen(path, "r");
    cr_assert(f, "missing golden file %s", path);
    static char buf[1 << 16];
    size_t n = fread(buf, 1, sizeof buf - 1, f);
    buf[n] = 0;
    fclose(f);
    return buf;
}

static void expect_golden(const char *args, const char *golden) {
    int status;
    char *out = fsdp_output(args, "2>&1", &status);
    cr_expect_eq(status, 0, "fsdp %s failed: %s", args, out);
    cr_expect_str_eq(out, slurp(golden), "fsdp %s differs from %s", args, golden);
    free(out);
}

Test(viz, plain_frames_match_the_golden_files) {
    expect_golden("viz --model toy --ranks 3 --strategy zero3 --events 55-59",
                  "tests/golden/viz_toy_zero3_55-59.txt");
    expect_golden("viz --model toy --ranks 3 --strategy zero3 --events 214-216",
                  "tests/golden/viz_toy_zero3_214-216.txt");
    expect_golden("viz --model toy --ranks 3 --strategy zero2 --events 55-59",
                  "tests/golden/viz_toy_zero2_55-59.txt");
    expect_golden("viz --model toy --ranks 3 --strategy ddp --events 91-93",
                  "tests/golden/viz_toy_ddp_91-93.txt");
}

Test(viz, bad_events_exit_2_with_one_line) {
    const char *bad[] = {"viz --events 0", "viz --events 5-3",    "viz --events x",
                         "viz --events",   "viz --events 100000", "viz --strategy zro3"};
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
