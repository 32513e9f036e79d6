/* The NCCL communicator on this machine's GPU: tests/nccl/nccl_check.c under `fsdp launch` at 2
 * and 4 ranks sharing the one GPU (each rank its own NCCL_HOSTID, sockets on lo), every
 * collective exact in fp32 and bf16, on the world and on split halves; and a rank that never
 * joins a collective makes the others' watchdog abort within its timeout, naming the rank,
 * the unit and the collective, and the launcher take the group down. `make test-nccl`. */
#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>

#include "../util.h"
#include "gpu_util.h"

static const char *nccl_check(void) {
    const char *p = getenv("FSDP_NCCL_CHECK");
    cr_assert(p && *p, "FSDP_NCCL_CHECK names the nccl_check binary (make test-nccl sets it)");
    return p;
}

static int count(const char *text, const char *what) {
    int n = 0;
    for (const char *p = text; (p = strstr(p, what)); p += strlen(what)) n++;
    return n;
}

Test(nccl, every_collective_at_2_and_4_ranks, .timeout = 300) {
    gpu_or_skip();
    gpu_done();
    for (int n = 2; n <= 4; n += 2) {
        char args[512];
        snprintf(args, sizeof args, "launch --nproc-per-node %d --master-port %d -- %s", n,
                 29600 + n, nccl_check());
        int status;
        char *out = fsdp_output(args, "2>&1", &status);
        cr_expect(WIFEXITED(status) && WEXITSTATUS(status) == 0, "%d ranks: %s", n, out);
        cr_expect_eq(count(out, "every collective agrees"), n, "%d ranks: %s", n, out);
        free(out);
    }
}

Test(nccl, a_rank_that_never_joins_is_aborted_by_the_watchdog, .timeout = 120) {
    gpu_or_skip();
    gpu_done();
    char args[512];
    snprintf(args, sizeof args,
             "launch --nproc-per-node 2 --master-port 29610 --kill-after 1 -- %s --hang",
             nccl_check());
    struct timespec t0, t1;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    int status;
    char *out = fsdp_output(args, "2>&1", &status);
    clock_gettime(CLOCK_MONOTONIC, &t1);
    double took = (double)(t1.tv_sec - t0.tv_sec) + 1e-9 * (double)(t1.tv_nsec - t0.tv_nsec);
    cr_expect(!(WIFEXITED(status) && WEXITSTATUS(status) == 0), "%s", out);
    cr_expect_neq(strstr(out, "rank 0: all_reduce of unit 7 did not finish within 3.0 s"), NULL,
                  "%s", out);
    cr_expect_eq(strstr(out, "the watchdog never fired"), NULL, "%s", out);
    cr_expect_lt(took, 25.0, "the group went down after %.1f s: %s", took, out);
    free(out);
}
