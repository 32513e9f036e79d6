/* blas_core: where OpenBLAS took this CPU for an older one, the kernel set it should run instead
 * (blas_core.h says why). */
#include "kernels/cpu/blas_core.h"

#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* Declared by OpenBLAS's cblas.h, not by the netlib one the alternatives may point at. */
extern char *openblas_get_corename(void);

/* OpenBLAS's names of kernel sets older than AVX2 (its fallbacks for a CPU it does not know among
 * them). A set with AVX2 or wider, or one named after this list was written, is left alone. */
static int narrow_core(const char *name) {
    static const char *const narrow[] = {
        "Unknown",   "Prescott",   "Core2",     "Penryn", "Dunnington", "Nehalem", "Atom",
        "Katmai",    "Coppermine", "Northwood", "Banias", "Athlon",     "Opteron", "Opteron(SSE3)",
        "Barcelona", "Bobcat",     "Bulldozer", "Nano",   "Sandybridge"};
    for (size_t i = 0; i < sizeof narrow / sizeof *narrow; i++)
        if (!strcmp(name, narrow[i])) return 1;
    return 0;
}

const char *blas_core_pick(const char *loaded, const char *chosen, BlasCpu cpu) {
    if (chosen || !loaded || !narrow_core(loaded)) return NULL;
    return cpu.avx512 ? "SkylakeX" : cpu.avx2_fma ? "Haswell" : NULL;
}

BlasCpu blas_core_this_cpu(void) {
    __builtin_cpu_init();
    return (BlasCpu){.avx2_fma = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma"),
                     .avx512 =
                         __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
                         __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512dq")};
}

/* blas_core_pick for this process. */
static const char *better_core(void) {
    return blas_core_pick(openblas_get_corename(), getenv("OPENBLAS_CORETYPE"),
                          blas_core_this_cpu());
}

/* Whether this process is the program itself, not the dynamic loader running it
 * (`ld-linux-x86-64.so.2 ./fsdp`), whose exec would not find the program again. */
static int runs_as_itself(void) {
    char exe[4096];
    ssize_t n = readlink("/proc/self/exe", exe, sizeof exe - 1);
    if (n <= 0) return 0;
    exe[n] = 0;
    const char *base = strrchr(exe, '/');
    return strncmp(base ? base + 1 : exe, "ld-", 3) != 0;
}

void blas_core_reexec(char **argv) {
    const char *core = better_core();
    if (!core || !runs_as_itself() || setenv("OPENBLAS_CORETYPE", core, 1) != 0) return;
    execv("/proc/self/exe", argv);
    unsetenv("OPENBLAS_CORETYPE"); /* the exec failed: the kernels loaded are the ones in use */
}
