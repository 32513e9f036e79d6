/* Lesson 14's functions: exercise.c defines them, check.c calls them. Do not edit. */
#ifndef LESSON_14_EXERCISE_H
#define LESSON_14_EXERCISE_H

/* What a GPU promises and what it achieves of it: one of sim/cost.c's profiles, the fields a
 * GEMM and a memory-bound kernel need. */
typedef struct Gpu {
    double peak_flops; /* dense FLOP/s of the math's dtype (bf16 tensor cores, or fp32) */
    int sms;           /* streaming multiprocessors: each computes one output tile at a time */
    double gemm_eff;   /* the share of its slice of peak_flops an SM sustains on a tile */
    double mem_bw;     /* device memory bytes/s */
    double mem_eff;    /* the share of mem_bw a memory-bound kernel reaches */
    double launch_s;   /* what one kernel costs however small, in seconds */
} Gpu;

/* Seconds of the math of an [m, k] by [k, n] product, as cuBLAS runs it: 128 x 128 tiles of
 * the [m, n] output in waves over the SMs, k split over SMs when there are fewer tiles than
 * SMs (the README says how). Its launch is not included. */
double gemm_seconds(const Gpu *g, double m, double n, double k);

/* Seconds of `kernels` memory-bound kernels (norms, activations, adds, casts, Adam) that
 * together do `flops` and read and write `bytes`, their launches included. */
double kernels_seconds(const Gpu *g, double flops, double bytes, int kernels);

#endif
