/* vector_clones: VECTOR_CLONES, the attribute that compiles a hot loop once per x86 vector width
 * and lets the loader pick this CPU's. Header-only, below kernels/, so the CPU kernels and the
 * dtype conversions share the one definition. */
#ifndef FSDP_VECTOR_CLONES_H
#define FSDP_VECTOR_CLONES_H

/* Marks a hot loop's function to be compiled three times, for x86-64-v4 (AVX-512, which GCC
 * runs on 8-float vectors too unless a loop is written in 16-float ones), x86-64-v3 (AVX2: a
 * CHUNK of 8 floats is one vector) and the baseline (SSE2: two), the loader picking the one this
 * CPU runs (an ifunc). All give the same bits: -std=c11 keeps GCC from contracting a * b + c into
 * an FMA, and a vectoriser may not reorder a float sum, so wider vectors only do the same
 * operations at once. Measured on the development VM: vit-tiny at 1 rank took 5% less CPU time
 * and ran 1.06x the images/s with the AVX2 clone (bench/RESULTS.md, issue 28). A loop written in
 * 16-float vectors is slow in every clone but AVX-512's (attention_cpu.c's combine). Left out
 * under the sanitizers, whose run-time starts after ifunc resolvers run. */
#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__) &&                             \
    !defined(__SANITIZE_ADDRESS__)
#define VECTOR_CLONES __attribute__((target_clones("arch=x86-64-v4", "arch=x86-64-v3", "default")))
#else
#define VECTOR_CLONES
#endif

#endif
