/* The NCCL communicator on this machine's GPU: tests/nccl/nccl_check.c under `fsdp launch` at 2 and
 * 4 ranks, every collective against a host reference, and a hang caught by the watchdog. `make
 * test-nccl`. */
#include <criterion/criterion.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "tests/gpu/gpu_util.h"
#include "tests/util.h"

/* The ranks share the one GPU (each rank its own NCCL_HOSTID, sockets on lo); every collective
 * agrees with a host reference in fp32 and bf16 (nccl_check.c says how closely), on the world
 * and on split halves. A rank that never joins a collective (a host scalar, a device buffer,
 * the communicator's creation) makes the others' watchdog abort
 * within its timeout, naming the rank, the unit and the collective, and the launcher take the
 * group down. */

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

/* `nccl_check <mode>` at 2 ranks: the rank that waits must be aborted by its watchdog with
 * `message`, and the group must be down well before the last rank's 30 s sleep ends. */
static void expect_watchdog(const char *mode, int port, const char *message) {
    char args[512];
    snprintf(args, sizeof args,
             "launch --nproc-per-node 2 --master-port %d --kill-after 1 -- %s %s", port,
             nccl_check(), mode);
    struct timespec t0, t1;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    int status;
    char *out = fsdp_output(args, "2>&1", &status);
    clock_gettime(CLOCK_MONOTONIC, &t1);
    double took = (double)(t1.tv_sec - t0.tv_sec) + 1e-9 * (double)(t1.tv_nsec - t0.tv_nsec);
    cr_expect(!(WIFEXITED(status) && WEXITSTATUS(status) == 0), "%s: %s", mode, out);
    cr_expect_neq(strstr(out, message), NULL, "%s: %s", mode, out);
    cr_expect_eq(strstr(out, "the watchdog never fired"), NULL, "%s: %s", mode, out);
    cr_expect_lt(took, 25.0, "%s: the group went down after %.1f s: %s", mode, took, out);
    free(out);
}

/* A host scalar as the first collective: the rank blocks inside NCCL (lazy connection) or in the
 * copy back to pageable memory, before any stream event exists. */
Test(nccl, a_rank_that_never_joins_is_aborted_by_the_watchdog, .timeout = 120) {
    gpu_or_skip();
    gpu_done();
    expect_watchdog("--hang", 29610, "rank 0: all_reduce of unit 7 did not finish within 3.0 s");
}

Test(nccl, a_device_collective_that_never_completes_is_aborted, .timeout = 120) {
    gpu_or_skip();
    gpu_done();
    expect_watchdog("--hang-device", 29611,
                    "rank 0: all_reduce of unit 8 did not finish within 3.0 s");
}

Test(nccl, a_rank_that_never_creates_its_communicator_is_aborted, .timeout = 120) {
    gpu_or_skip();
    gpu_done();
    expect_watchdog("--hang-init", 29612, "rank 0: ncclCommInitRank did not finish within 3.0 s");
}

/* The GPU run's dump against the simulator's. Their fp32 sums differ in order (NCCL's ring
 * against the simulator's rank order), so a gradient near zero may take the other sign and
 * Adam move its parameter about 2 * lr the other way; one such flip is 2 * lr / ||params||
 * in relative L2 (1e-4 for a small ViT), so L2 at 1e-5 would fail on rounding alone. Instead
 * (gpu_expect_params_close): every value within Adam's drift over the steps, 4 * lr a step
 * (2 * lr for the flip, twice that as Adam's step may exceed lr once gradients shrink), and at
 * most one in a thousand beyond fp32 rounding of the values' scale (1e-5, invariant 1's). */
static void expect_dump_close(const char *gpu, const char *sim, double lr, int steps,
                              const char *what) {
    size_t ng, ns;
    double *dg = dump_read(gpu, &ng), *ds = dump_read(sim, &ns);
    cr_assert_eq(ng, ns, "%s: %zu values, the simulator %zu", what, ng, ns);
    float *g = host_floats(ng), *s = host_floats(ng);
    for (size_t i = 0; i < ng; i++) g[i] = (float)dg[i], s[i] = (float)ds[i];
    gpu_expect_params_close(g, s, ng, 1e-5, 4.0 * lr * steps, what);
    free(g);
    free(s);
    free(dg);
    free(ds);
}

/* Invariant 1 across real processes: 2 and 4 ranks on GPUs (one process each, NCCL between
 * them) end at the simulator's parameters for the same command, under every strategy. The toy
 * trains at 0.05, the ViT at 1e-3 (cmd/cli.c's defaults). */
Test(nccl, training_on_many_gpus_matches_the_simulator, .timeout = 900) {
    gpu_or_skip();
    gpu_done();
    struct {
        const char *flags;
        int ranks, steps;
        double lr;
    } cases[] = {
        {"--model toy --strategy ddp --steps 20", 2, 20, 0.05},
        {"--model toy --strategy zero1 --steps 20", 2, 20, 0.05},
        {"--model toy --strategy zero2 --steps 20", 2, 20, 0.05},
        {"--model toy --strategy zero3 --steps 20", 2, 20, 0.05},
        {"--model toy --strategy zero3 --steps 20", 4, 20, 0.05},
        {"--model toy --strategy hsdp --replicas 2 --steps 20", 4, 20, 0.05},
        {"--model vit-tiny --layers 2 --strategy zero3 --batch-size 8 --steps 5", 2, 5, 1e-3},
        {"--model vit-tiny --layers 2 --strategy hsdp --replicas 2 --batch-size 8 "
         "--steps 5",
         4, 5, 1e-3}};
    char sim[64], gpu[64];
    snprintf(sim, sizeof sim, "/tmp/fsdp_nccl_sim_%d.txt", (int)getpid());
    snprintf(gpu, sizeof gpu, "/tmp/fsdp_nccl_gpu_%d.txt", (int)getpid());
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        char args[1024];
        int status;
        snprintf(args, sizeof args, "train %s --ranks %d --eval false --dump-params %s",
                 cases[i].flags, cases[i].ranks, sim);
        char *out = fsdp_output(args, "2>&1", &status);
        cr_assert_eq(status, 0, "%s: %s", args, out);
        free(out);
        snprintf(args, sizeof args,
                 "launch --nproc-per-node %d --master-port %d -- %s train --backend cuda %s "
                 "--ranks %d --eval false --dump-params %s",
                 cases[i].ranks, 29620 + (int)i, fsdp_bin(), cases[i].flags, cases[i].ranks, gpu);
        out = fsdp_output(args, "2>&1", &status);
        cr_expect_eq(status, 0, "%s: %s", args, out);
        if (status == 0)
            expect_dump_close(gpu, sim, cases[i].lr, cases[i].steps,
                              fmt_text("%s at %d ranks", cases[i].flags, cases[i].ranks));
        free(out);
    }
    unlink(sim);
    unlink(gpu);
}
