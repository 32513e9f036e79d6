/* Flags from one table per command: --help, written from the table, is byte for byte the text
 * in tests/golden/help_*.txt; every flag of train's table is in its help; and a bad flag of
 * each kind is one exact line and exit status 2. */
#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>

#include "cmd/cli.h"
#include "tests/util.h"

Test(flags, help_matches_the_golden_files) {
    static const char *const commands[] = {"train", "plan", "viz"};
    for (int i = 0; i < 3; i++) {
        char args[64], diff[128];
        snprintf(args, sizeof args, "%s --help", commands[i]);
        snprintf(diff, sizeof diff, "2>&1 | diff tests/golden/help_%s.txt -", commands[i]);
        int status;
        char *out = fsdp_output(args, diff, &status);
        cr_expect_str_eq(out, "", "fsdp %s differs from its golden file:\n%s", args, out);
        free(out);
    }
}

Test(flags, every_train_flag_is_in_its_help) {
    char *text;
    size_t n;
    FILE *f = open_memstream(&text, &n);
    cr_assert(f);
    train_args_help(f);
    fclose(f);
    const FlagTable *t = train_flags();
    for (int i = 0; i < t->nrows; i++)
        if (t->rows[i].name)
            cr_expect(strstr(text, t->rows[i].name), "%s is not in train's help", t->rows[i].name);
    free(text);
}

static void expect_line(const char *args, const char *line) {
    int status;
    char *err = fsdp_output(args, "2>&1 >/dev/null", &status);
    cr_expect(WIFEXITED(status) && WEXITSTATUS(status) == 2, "`fsdp %s` exited %d", args,
              WEXITSTATUS(status));
    cr_expect_str_eq(err, line, "`fsdp %s`", args);
    free(err);
}

Test(flags, a_bad_flag_is_one_exact_line) {
    expect_line("train --ranks 0", "fsdp: --ranks must be an integer from 1 to 1024 (got '0')\n");
    expect_line("train --seed -1",
                "fsdp: --seed must be an integer from 0 to 9223372036854775807 (got '-1')\n");
    expect_line("train --lr nan", "fsdp: --lr must be a number from 0 to 1000 (got 'nan')\n");
    expect_line("train --eval yes", "fsdp: --eval must be true or false (got 'yes')\n");
    expect_line("train --param-dtype fp8",
                "fsdp: --param-dtype must be fp32, bf16 or fp16 (got 'fp8')\n");
    expect_line("train --output-dtype fp8",
                "fsdp: --output-dtype must be fp32, bf16 or fp16 (got 'fp8')\n");
    expect_line("train --strategy zro3",
                "fsdp: --strategy must be one of ddp, zero1, zero2, zero3, hsdp (got 'zro3')\n");
    expect_line("train --wrap block:0",
                "fsdp: --wrap must be layer, block:K, size:N or none (got 'block:0')\n");
    expect_line("train --optim sgd", "fsdp: --optim must be adam or adamw (got 'sgd')\n");
    expect_line("train --layout ds", "fsdp: --layout must be fsdp or deepspeed (got 'ds')\n");
    expect_line("train --offload disk",
                "fsdp: --offload must be none, optimizer, cpu or nvme (got 'disk')\n");
    expect_line("train --backend gpu",
                "fsdp: --backend must be sim, cuda, mpi or auto (got 'gpu')\n");
    expect_line("train --split val", "fsdp: --split must be train or test (got 'val')\n");
    expect_line("train --scenario other", "fsdp: --scenario must be workshop (got 'other')\n");
    expect_line("train --fail-at 3:x",
                "fsdp: --fail-at must be STEP or STEP:RANK, STEP >= 1 (got '3:x')\n");
    expect_line("train --model aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa",
                "fsdp: --model value is too long (got "
                "'aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa')\n");
    /* a switch takes no value; a missing value is what the flag says of an empty one */
    expect_line("train --json=1", "fsdp: unknown flag --json (see ./fsdp train --help)\n");
    expect_line("train --lr", "fsdp: --lr must be a number from 0 to 1000 (got '')\n");
    expect_line("train --data", "fsdp: --data needs a value (see ./fsdp train --help)\n");
    expect_line("train --frobnicate",
                "fsdp: unknown flag --frobnicate (see ./fsdp train --help)\n");
    expect_line("train foo", "fsdp: unexpected argument 'foo' (flags start with --)\n");
}

Test(flags, plan_and_viz_say_their_own_lines) {
    expect_line("plan --gpus 1.5",
                "fsdp: --gpus must be a whole number from 1 to 1048576 (got '1.5')\n");
    expect_line("plan --params 0",
                "fsdp: --params must be a number above 0 and at most 1e+13 (got '0')\n");
    expect_line("plan --model aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa",
                "fsdp: --model is too long (got 'aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa')\n");
    expect_line("plan --gpus", "fsdp: --gpus needs a value (see ./fsdp plan --help)\n");
    expect_line("plan --steps 3", "fsdp: plan does not take --steps (see ./fsdp plan --help)\n");
    /* a training knob goes through train's row, with the GPUs as train's --ranks */
    expect_line("plan --strategy hsdp --gpus 4 --replicas 3",
                "fsdp: --replicas 3 does not divide --gpus 4\n");
    expect_line("viz --events 3-1 --plain",
                "fsdp: --events must be A-B or A with 1 <= A <= B (got '3-1')\n");
    expect_line("viz --events", "fsdp: --events needs a value (A-B)\n");
    expect_line("viz --trace", "fsdp: --trace needs a file\n");
    expect_line("viz --plain=1", "fsdp: unknown flag --plain (see ./fsdp train --help)\n");
}
