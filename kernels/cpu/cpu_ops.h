/* The internal header of the CPU op table: the functions kernels_cpu.c puts into the
 * `kernels_cpu` table (semantics are documented once, in ../kernels.h), the knob that sets
 * how many threads OpenBLAS uses, and the one that gives the calling thread's ops a worker
 * pool. Only kernels/cpu, its tests and whoever starts rank threads include it. */
#ifndef FSDP_CPU_OPS_H
#define FSDP_CPU_OPS_H

#include <stddef.h>
#include <stdint.h>

#include "base/vector_clones.h"
#include "kernels/cpu/pool.h"
#include "kernels/kernels.h"

/* OpenBLAS threads for every later GEMM in this process (the simulator gives each rank thread
 * one BLAS thread); n < 1 is taken as 1. */
void kernels_cpu_set_threads(int n);

/* The pool that the calling thread's later kernels_cpu ops split their work over (NULL: each
 * op runs serially on the calling thread, the default). Ops whose work pays for a dispatch
 * (linear, LayerNorm, GELU, attention, add, bias_grad, Adam, the fused ops) cut it into a fixed
 * partition that depends only on the shapes and the pool's size, so results are bit-identical run
 * to run for a given pool size. Elementwise results, LayerNorm's and attention's outputs and
 * linear's out and din equal the serial ones exactly (linear's with OpenBLAS's Haswell/Zen
 * kernels; see vit_cpu.c); the sums over rows (linear's and LayerNorm's dw and db, bias_grad,
 * bias_gelu_backward's db) are taken per task and added in task order, so their last bits
 * depend on the pool's size.
 * The binding is per thread: a rank thread binds its own pool, and the pool must outlive the
 * binding (bind NULL before destroying it). Use with kernels_cpu_set_threads(1): OpenBLAS
 * threads inside the tasks would only compete with the pool's. */
void kernels_cpu_use_pool(CpuPool *p);
/* The calling thread's pool (NULL if none). */
CpuPool *kernels_cpu_pool(void);

/* How ops split work over the bound pool (vit_cpu.c). cpu_split_count: tasks for `work` units,
 * one per pool thread but each with at least min_work (1 without a pool); cpu_split_range:
 * task t of n's share [begin, end) of count items, cut at multiples of align; cpu_parallel:
 * runs fn over n tasks on the bound pool (n == 1: directly on this thread). */
int cpu_split_count(size_t work, size_t min_work);
void cpu_split_range(size_t count, size_t align, int t, int n, size_t *begin, size_t *end);
void cpu_parallel(int n, CpuPoolFn fn, void *ctx);
/* fn(ctx, begin, end) over count items: called once with [0, count) when cpu_split_count(work,
 * min_work) gives one task, else once per task with its cpu_split_range share cut at multiples of
 * align. What every op that splits rows or elements does. */
typedef void (*CpuRangeFn)(const void *ctx, size_t begin, size_t end);
void cpu_parallel_range(size_t count, size_t align, size_t work, size_t min_work, CpuRangeFn fn,
                        const void *ctx);

/* memcpy of `bytes` (0: nothing), split over the bound pool when large (kernels_cpu.c): the op
 * table's copies, like-typed casts and zeroing go through it, and so do the simulator's
 * collectives, which run on the rank's thread. */
void cpu_copy(void *dst, const void *src, size_t bytes);

/* cpu_<op> for every op of the table, with the op's own type (semantics in ../kernels.h):
 * defined in kernels_cpu.c, vit_cpu.c, attention_cpu.c, lm_cpu.c and llama_cpu.c. */
#define CPU_DECLARE(op) KERNEL_OP_TYPE(op) cpu_##op;
KERNEL_OPS(CPU_DECLARE)
#undef CPU_DECLARE

#endif
