/* blas_core: which OpenBLAS kernel set a CPU newer than the library gets, and that ./fsdp and this
 * runner end up on one that uses the CPU's vectors. */
#include <criterion/criterion.h>
#include <stdio.h>
#include <string.h>

#include "kernels/cpu/blas_core.h"
#include "tests/util.h"

static const BlasCpu SSE_ONLY = {0, 0}, AVX2 = {1, 0}, AVX512 = {1, 1};

/* An older set than the CPU's vectors: the widest set the CPU runs; OpenBLAS's fallback for a CPU
 * it does not know (Prescott) among them. */
Test(blas_core, an_older_set_than_the_cpu_runs_is_replaced_by_the_widest_it_runs) {
    cr_expect_str_eq(blas_core_pick("Prescott", NULL, AVX512), "SkylakeX");
    cr_expect_str_eq(blas_core_pick("Prescott", NULL, AVX2), "Haswell");
    cr_expect_str_eq(blas_core_pick("Sandybridge", NULL, AVX512), "SkylakeX");
    cr_expect_str_eq(blas_core_pick("Nehalem", NULL, AVX2), "Haswell");
    cr_expect_str_eq(blas_core_pick("Unknown", NULL, AVX2), "Haswell");
}

/* A set of AVX2 or wider, one this list does not know, a CPU with no more than it, or the
 * user's own OPENBLAS_CORETYPE: left as it is. */
Test(blas_core, a_wide_set_a_narrow_cpu_or_the_users_choice_is_left_alone) {
    const char *wide[] = {"Haswell", "Zen", "SkylakeX", "Cooperlake", "SapphireRapids"};
    for (size_t i = 0; i < sizeof wide / sizeof *wide; i++)
        cr_expect_null(blas_core_pick(wide[i], NULL, AVX512), "%s", wide[i]);
    cr_expect_null(blas_core_pick("Prescott", NULL, SSE_ONLY));
    cr_expect_null(blas_core_pick("Sandybridge", "Sandybridge", AVX512), "the user's choice");
    cr_expect_null(blas_core_pick("Prescott", "Prescott", AVX2), "the user's choice");
    cr_expect_null(blas_core_pick(NULL, NULL, AVX512));
}

/* The set the last "Core: X" line OPENBLAS_VERBOSE=2 makes OpenBLAS print names (each load
 * prints one: a re-run prints two). */
static void last_core(const char *out, char *core, size_t n) {
    core[0] = 0;
    for (const char *at = strstr(out, "Core: "); at; at = strstr(at + 1, "Core: ")) {
        size_t len = strcspn(at + 6, "\n");
        snprintf(core, n, "%.*s", (int)len, at + 6);
    }
}

/* With no OPENBLAS_CORETYPE, ./fsdp's GEMMs run on a set that leaves none of the CPU's vectors
 * unused: where OpenBLAS took the CPU for an older one, ./fsdp ran itself again on the set
 * blas_core_pick names (on an Emerald Rapids Xeon Debian 12's OpenBLAS loads Prescott first). */
Test(blas_core, fsdp_runs_on_a_set_that_uses_the_cpus_vectors) {
    char cmd[600];
    snprintf(cmd, sizeof cmd, "env -u OPENBLAS_CORETYPE OPENBLAS_VERBOSE=2 %s train --steps 0 2>&1",
             fsdp_bin());
    FILE *p = popen(cmd, "r");
    cr_assert_not_null(p);
    char out[8192];
    size_t n = fread(out, 1, sizeof out - 1, p);
    out[n] = 0;
    cr_assert_eq(pclose(p), 0, "%s", out);
    char core[64];
    last_core(out, core, sizeof core);
    cr_assert_neq(core[0], 0, "OpenBLAS said no core:\n%s", out);
    cr_expect_null(blas_core_pick(core, NULL, blas_core_this_cpu()), "./fsdp ends on %s:\n%s", core,
                   out);
}
