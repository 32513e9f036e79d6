/* The MPI communicator under mpirun: build/mpi_check (tests/mpi/mpi_check.c) at 2, 3 and 4
 * ranks on this machine; skipped with the reason when the Makefile found no MPI. */
#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "tests/util.h"

/* Under mpirun as every MPI test starts ranks (tests/util.h, MPIRUN). */
static void run_mpi_check(int ranks) {
    const char *check = getenv("FSDP_MPI_CHECK");
    if (!check || !*check || access(check, X_OK) != 0)
        cr_skip_test("MPI not built (no mpicc when make ran): no mpi_check to run");
    mpi_private_session_dir(NULL);
    char cmd[1024], out[4096] = "";
    snprintf(cmd, sizeof cmd, "%s -np %d %s 2>&1", MPIRUN, ranks, check);
    FILE *p = popen(cmd, "r");
    cr_assert(p, "popen failed");
    size_t n = fread(out, 1, sizeof out - 1, p);
    out[n] = 0;
    while (fread(cmd, 1, sizeof cmd, p) > 0) {
    } /* drain: ranks must not block on a full pipe */
    int status = pclose(p);
    cr_assert(WIFEXITED(status) && WEXITSTATUS(status) == 0, "mpirun -np %d failed:\n%s", ranks,
              out);
    cr_assert(strstr(out, "mpi_check: all passed"), "mpirun -np %d said:\n%s", ranks, out);
}

Test(comm_mpi, two_ranks) {
    run_mpi_check(2);
}
Test(comm_mpi, three_ranks) {
    run_mpi_check(3);
}
Test(comm_mpi, four_ranks_and_splits) {
    run_mpi_check(4);
}
