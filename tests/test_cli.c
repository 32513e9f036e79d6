/* Bad input on the command line: one line naming the flag, exit status 2, no output file. */
#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

static const char *bin(void) {
    const char *b = getenv("FSDP_BIN");
    return b ? b : "./fsdp";
}

/* Runs `fsdp ARGS`, returns the exit status and stderr's text. */
static int run_fsdp(const char *args, char *err_text, size_t n) {
    char cmd[1024], path[] = "/tmp/fsdp_cli_XXXXXX";
    int fd = mkstemp(path);
    cr_assert_geq(fd, 0);
    close(fd);
    snprintf(cmd, sizeof cmd, "%s %s >/dev/null 2>%s", bin(), args, path);
    int status = system(cmd);
    FILE *f = fopen(path, "r");
    size_t got = f ? fread(err_text, 1, n - 1, f) : 0;
    err_text[got] = 0;
    if (f) fclose(f);
    unlink(path);
    return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

static int count_lines(const char *s) {
    int n = 0;
    for (; *s; s++) n += *s == '\n';
    return n;
}

static void expect_usage_error(const char *args, const char *must_mention) {
    char err[4096];
    int code = run_fsdp(args, err, sizeof err);
    cr_expect_eq(code, 2, "`fsdp %s` exited %d", args, code);
    cr_expect_eq(count_lines(err), 1, "`fsdp %s` printed: %s", args, err);
    cr_expect(strstr(err, must_mention) != NULL, "`fsdp %s` said: %s", args, err);
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
    expect_usage_error("launch", "unknown command");
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
