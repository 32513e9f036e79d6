/* train --check-streams: every strategy and lever of the engine runs with its streams ordered
 * as a GPU needs them (0 hazards over a positive count of cross-stream accesses), the summary is
 * one line in text and in JSON, and the flag is refused where it means nothing. */
#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tests/util.h"

/* The summary line of `fsdp train ARGS --check-streams`: N > 0 accesses, 0 hazards. */
static void expect_ordered(const char *args) {
    char *out = fsdp_ok("train %s --check-streams", args);
    const char *line = strstr(out, "stream check: ");
    cr_assert(line, "fsdp train %s: no summary line in %.400s", args, out);
    unsigned long long n = 0, hazards = 1;
    int got =
        sscanf(line, "stream check: %llu accesses across streams, %llu hazards", &n, &hazards);
    cr_expect_eq(got, 2, "fsdp train %s: '%.80s'", args, line);
    cr_expect_gt(n, 0, "fsdp train %s: no access was checked across streams", args);
    cr_expect_eq(hazards, 0, "fsdp train %s: %.200s", args, line);
    free(out);
}

Test(check_streams, every_strategy_at_four_ranks) {
    static const char *const strategies[] = {"ddp", "zero1", "zero2", "zero3", "hsdp --replicas 2"};
    for (size_t i = 0; i < sizeof strategies / sizeof *strategies; i++) {
        char args[128];
        snprintf(args, sizeof args, "--model toy --ranks 4 --steps 3 --strategy %s", strategies[i]);
        expect_ordered(args);
    }
}

Test(check_streams, every_lever_at_four_ranks) {
    static const char *const levers[] = {
        "--param-dtype bf16",
        "--param-dtype fp16 --reduce-dtype fp16",
        "--reduce-dtype bf16 --strategy zero1",
        "--offload cpu",
        "--offload optimizer",
        "--grad-accum 2",
        "--layout deepspeed --param-dtype bf16 --strategy zero2",
        "--prefetch-forward 0 --prefetch-backward 0",
        "--prefetch-forward 2 --prefetch-backward 2",
        "--clip-grad-norm 0.5",
    };
    for (size_t i = 0; i < sizeof levers / sizeof *levers; i++) {
        char args[160];
        snprintf(args, sizeof args, "--model toy --ranks 4 --steps 3 %s", levers[i]);
        expect_ordered(args);
    }
}

Test(check_streams, a_vit_with_activation_checkpointing_and_its_outputs) {
    char dir[128], args[1024];
    fresh_test_dir(dir, sizeof dir, "streams", "vit");
    snprintf(args, sizeof args,
             "--model vit-tiny --layers 2 --ranks 4 --batch-size 2 --steps 2 "
             "--activation-checkpointing --eval false --checkpoint-dir %s/ck --save-full %s/m.st "
             "--dump-params %s/d.txt",
             dir, dir, dir);
    expect_ordered(args);
    snprintf(args, sizeof args,
             "--model toy --ranks 4 --steps 2 --offload nvme --nvme-dir %s --memory", dir);
    expect_ordered(args);
    remove_test_dir(dir);
}

Test(check_streams, the_summary_as_json) {
    char *out = fsdp_ok("train --model toy --ranks 2 --steps 1 --json --check-streams");
    cr_expect(strstr(out, "{\"stream_check\":{\"accesses\":") != NULL, "%.400s", out);
    cr_expect(strstr(out, ",\"hazards\":0}}") != NULL, "%.400s", out);
    free(out);
}
