/* --backend mpi across two "hosts": tests/mpi/two_hosts.sh runs 2 ranks in two network
 * namespaces joined by a veth pair, mpirun over TCP; the job ends as the simulator does. Skipped
 * where namespaces cannot be made (not root) or MPI is not built. */
#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>

#include "base/clock.h"
#include "tests/util.h"

#define TOY "--model toy --steps 6"
#define SKIP_CODE 77 /* two_hosts.sh: no network namespaces here */

/* The namespace two_hosts.sh says `rank` ran in ("net:[4026532177]"), copied into ns. */
static void rank_netns(const char *said, int rank, char *ns, size_t n) {
    char key[32];
    snprintf(key, sizeof key, "rank %d netns ", rank);
    const char *at = strstr(said, key);
    cr_assert(at, "the script did not say rank %d's namespace:\n%s", rank, said);
    at += strlen(key);
    size_t len = strcspn(at, "\n");
    cr_assert(len > 0 && len < n, "rank %d's namespace is not one word:\n%s", rank, said);
    memcpy(ns, at, len);
    ns[len] = 0;
}

Test(mpi_hosts, two_ranks_in_two_network_namespaces_end_as_the_simulator) {
    skip_without_mpi();
    char dir[256], cmd[1024], mpi[320], sim[320];
    fresh_test_dir(dir, sizeof dir, "mpi_hosts", "two");
    snprintf(mpi, sizeof mpi, "%s/mpi.txt", dir);
    snprintf(cmd, sizeof cmd, "bash tests/mpi/two_hosts.sh %s %s %s --dump-params %s 2>&1",
             fsdp_bin(), dir, TOY, mpi);
    double t0 = clock_seconds();
    FILE *p = popen(cmd, "r");
    cr_assert(p, "cannot run %s", cmd);
    static char said[1 << 16];
    size_t n = fread(said, 1, sizeof said - 1, p);
    said[n] = 0;
    int status = pclose(p);
    int code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
    if (code == SKIP_CODE) {
        remove_test_dir(dir);
        cr_skip_test("%s", said);
    }
    cr_assert_eq(code, 0, "two_hosts.sh exited with %d:\n%s", code, said);
    cr_log_info("two hosts: %.1f s", clock_seconds() - t0);

    /* each rank in a namespace of its own: the job really went over the veth pair */
    char ns0[64], ns1[64];
    rank_netns(said, 0, ns0, sizeof ns0);
    rank_netns(said, 1, ns1, sizeof ns1);
    cr_expect_str_neq(ns0, ns1, "both ranks ran in one network namespace:\n%s", said);

    snprintf(sim, sizeof sim, "%s/sim.txt", dir);
    free(fsdp_ok("train --ranks 2 %s --dump-params %s", TOY, sim));
    double d = dump_rel_diff(mpi, sim);
    cr_expect_leq(d, 1e-5, "two hosts against the simulator: relative L2 %.3g", d);
    remove_test_dir(dir);
}
