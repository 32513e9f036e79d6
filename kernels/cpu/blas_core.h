/* blas_core: OpenBLAS's kernels for a CPU newer than the library. OpenBLAS picks its GEMM kernels
 * from the CPU's model number when it loads; a model it does not know falls back to its oldest
 * x86-64 set (Debian 12's 0.3.21 takes an Emerald Rapids Xeon for a Prescott: SSE3 GEMMs, a third
 * of the speed its AVX-512 ones reach there). */
#ifndef FSDP_BLAS_CORE_H
#define FSDP_BLAS_CORE_H

/* The vectors a CPU has that OpenBLAS's kernel sets need. */
typedef struct BlasCpu {
    int avx2_fma; /* AVX2 and FMA: the Haswell set */
    int avx512;   /* AVX-512 F, BW, VL and DQ: the SkylakeX set */
} BlasCpu;

/* The kernel set to ask OpenBLAS for (its OPENBLAS_CORETYPE names: "SkylakeX" where the CPU has
 * the AVX-512 that set needs, else "Haswell" where it has AVX2 and FMA) where it loaded `loaded`,
 * a set older than AVX2; NULL where `loaded` is AVX2 or wider (or newer than this list), where
 * the CPU has no more than `loaded` uses, or where OPENBLAS_CORETYPE (`chosen`) said which. */
const char *blas_core_pick(const char *loaded, const char *chosen, BlasCpu cpu);

/* This CPU's (from CPUID, where the OS saves the registers: GCC's __builtin_cpu_supports). */
BlasCpu blas_core_this_cpu(void);

/* What a program's main calls first: where blas_core_pick names a set for this process (the set
 * OpenBLAS loaded, the variable, this CPU), sets OPENBLAS_CORETYPE to it and runs the program
 * again with the same arguments (OpenBLAS reads the variable only as it loads). Returns where it
 * names none, where the process is the dynamic loader running the program (it would not find the
 * program again), or where the exec fails (the program goes on as it is). A tool that watches one
 * process (valgrind without --trace-children=yes) loses it at that exec: under one, set
 * OPENBLAS_CORETYPE yourself. */
void blas_core_reexec(char **argv);

#endif
