/* A tiny fork-join worker pool for the CPU ops: cpu_pool_run hands tasks 0..ntasks-1 to the
 * calling thread and the pool's workers and returns when every one has finished. Thread i
 * (the caller is 0) takes task i first, then any task still left, so a task whose worker is
 * late is run by another thread: which thread runs a task may vary from call to call, and an
 * op stays deterministic by making each task's result depend only on its index (a fixed
 * partition of the work, reductions in task order).
 *
 * Idle workers spin briefly (sched_yield) waiting for the next call, then sleep on a condition
 * variable, so a pool that is not in use costs no CPU even when there are more threads than
 * cores. One thread at a time may call cpu_pool_run on a pool, and a task must not call it on
 * the same pool (no nesting). */
#ifndef FSDP_CPU_POOL_H
#define FSDP_CPU_POOL_H

#include <stddef.h>

typedef struct CpuPool CpuPool;

/* The task signature: task is in [0, ntasks). */
typedef void (*CpuPoolFn)(void *ctx, int task, int ntasks);

/* A pool of `threads` threads in all: the caller of cpu_pool_run plus threads - 1 workers
 * (threads < 1 is taken as 1: no workers, cpu_pool_run runs every task itself). NULL when
 * memory or a thread cannot be had. */
CpuPool *cpu_pool_create(int threads);
/* Stops and joins the workers and frees the pool; NULL is a no-op. Not while a run is going. */
void cpu_pool_destroy(CpuPool *p);
/* Threads in all (the caller included); 1 for NULL. */
int cpu_pool_threads(const CpuPool *p);
/* How many runs were handed to the workers so far (runs of one task, or on a pool without
 * workers, are done inline and not counted); for tests and statistics, on the calling thread. */
unsigned long cpu_pool_runs(const CpuPool *p);
/* The pool's scratch memory, allocated with it: CPU_POOL_SCRATCH_PER_THREAD floats per thread
 * (aligned for any vector type; *floats gets the count), for an op's per-task partial sums
 * between the start and the end of its runs. NULL (and 0) for NULL. Like the pool itself it
 * belongs to the one thread that calls cpu_pool_run. */
#define CPU_POOL_SCRATCH_PER_THREAD ((size_t)1 << 16)
float *cpu_pool_scratch(CpuPool *p, size_t *floats);
/* Runs fn(ctx, t, ntasks) for every t in [0, ntasks) exactly once, on this thread and the
 * workers, and returns when all have returned (their writes are then visible here). p == NULL
 * or ntasks == 1 runs them in order on this thread; ntasks < 1 does nothing. */
void cpu_pool_run(CpuPool *p, int ntasks, CpuPoolFn fn, void *ctx);

#endif
