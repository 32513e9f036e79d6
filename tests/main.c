/* main: the test runners' (test_fsdp, test_gpu), Criterion's own main with one step first: on a
 * CPU newer than OpenBLAS knows, the runner's GEMMs use the kernels ./fsdp's do
 * (kernels/cpu/blas_core.h), so what a test computes in the runner and what it has ./fsdp compute
 * come from the same kernels. */
#include <criterion/criterion.h>

#include "kernels/cpu/blas_core.h"

int main(int argc, char *argv[]) {
    blas_core_reexec(argv);
    struct criterion_test_set *tests = criterion_initialize();
    int failed = 0;
    if (criterion_handle_args(argc, argv, true)) failed = !criterion_run_all_tests(tests);
    criterion_finalize(tests);
    return failed;
}
