/* --backend mpi against the simulator: `mpirun -np N fsdp train --backend mpi` ends with the
 * parameters `fsdp train --ranks N` ends with (relative L2 <= 1e-5), for the toy at 2, 3 and 4
 * ranks and vit-tiny (2 layers) at 2 and 4, under every strategy and with each lever, and the
 * transformer on its default text at 2 and 3. */
#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

#include "tests/util.h"

/* Trains `flags` at `ranks` on both and compares the dumped parameters. */
static void expect_mpi_matches_sim(int ranks, const char *flags) {
    char sim[128], mpi[128];
    snprintf(sim, sizeof sim, "/tmp/fsdp_mpi_train_%d_sim.txt", (int)getpid());
    snprintf(mpi, sizeof mpi, "/tmp/fsdp_mpi_train_%d_mpi.txt", (int)getpid());
    free(fsdp_ok("train --ranks %d %s --dump-params %s", ranks, flags, sim));
    int code;
    char *out = mpi_fsdp_run(&code, ranks, "train --backend mpi --ranks %d %s --dump-params %s",
                             ranks, flags, mpi);
    cr_assert_eq(code, 0, "mpirun -np %d train --backend mpi %s exited %d:\n%.1500s", ranks, flags,
                 code, out);
    free(out);
    double d = dump_rel_diff(mpi, sim);
    cr_expect_leq(d, 1e-5, "%s at %d ranks: relative L2 %.3g against the simulator", flags, ranks,
                  d);
    unlink(sim);
    unlink(mpi);
}

static const char *const strategies[] = {"--strategy ddp", "--strategy zero1", "--strategy zero2",
                                         "--strategy zero3"};
enum { NSTRATEGIES = sizeof strategies / sizeof *strategies };

/* Every strategy at this world size, and hsdp where two replicas divide it. */
static void every_strategy(int ranks, const char *model) {
    char flags[256];
    for (int i = 0; i < NSTRATEGIES; i++) {
        snprintf(flags, sizeof flags, "%s %s", model, strategies[i]);
        expect_mpi_matches_sim(ranks, flags);
    }
    if (ranks % 2 == 0) {
        snprintf(flags, sizeof flags, "%s --strategy hsdp --replicas 2", model);
        expect_mpi_matches_sim(ranks, flags);
    }
}

#define TOY "--model toy --steps 6"
#define VIT "--model vit-tiny --layers 2 --steps 3 --eval false"
#define TF "--model transformer --layers 1 --hidden 32 --heads 2 --mlp 64 --seq 32 --steps 4"

Test(mpi_train, toy_every_strategy_at_2_3_and_4_ranks) {
    skip_without_mpi();
    for (int ranks = 2; ranks <= 4; ranks++) every_strategy(ranks, TOY);
}

Test(mpi_train, toy_levers) {
    skip_without_mpi();
    static const char *const levers[] = {"--offload cpu", "--grad-accum 2", "--param-dtype bf16"};
    for (int ranks = 2; ranks <= 4; ranks += 2)
        for (int i = 0; i < 3; i++)
            expect_mpi_matches_sim(ranks, fmt_text("%s --strategy zero3 %s", TOY, levers[i]));
}

Test(mpi_train, vit_tiny_every_strategy_at_2_and_4_ranks) {
    skip_without_mpi();
    every_strategy(2, VIT);
    every_strategy(4, VIT);
}

Test(mpi_train, vit_tiny_levers) {
    skip_without_mpi();
    static const char *const levers[] = {"--offload cpu", "--grad-accum 2", "--param-dtype bf16",
                                         "--activation-checkpointing"};
    for (int ranks = 2; ranks <= 4; ranks += 2)
        for (int i = 0; i < 4; i++)
            expect_mpi_matches_sim(ranks, fmt_text("%s --strategy zero3 %s", VIT, levers[i]));
}

Test(mpi_train, transformer_zero3_and_ddp_at_2_and_3_ranks) {
    skip_without_mpi();
    for (int ranks = 2; ranks <= 3; ranks++) {
        expect_mpi_matches_sim(ranks, TF " --strategy zero3");
        expect_mpi_matches_sim(ranks, TF " --strategy ddp --activation-checkpointing");
    }
}
