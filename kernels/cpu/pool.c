/* pool: the fork-join pool of pool.h: a run's tasks dealt into slots that threads claim through one
 * atomic word, each preferring its own slot, so rows stay on the core that wrote them. */
#include "kernels/cpu/pool.h"

#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdlib.h>

/* A run's tasks are dealt into S = min(ntasks, 32) slots, slot s holding tasks s, s + S, s + 2S,
 * ... (one task per slot when ntasks <= 32, as in every op). The run is published through one
 * atomic word, `claim` = generation << 32 | a bit per slot not yet claimed. Thread i (the caller is
 * 0, worker w is w) first claims slot i, then any slot left, lowest first, by a compare-and-swap
 * that clears the slot's bit; it fails if the word moved on (another claim, or a later run), so a
 * worker that saw a run late can never take a slot of the next one. A thread reads the run's fn,
 * ctx and ntasks only after a successful claim, when the caller cannot be rewriting them (a run is
 * not finished while one of its slots is running).
 *
 * Preferring its own slot keeps task t of one op and task t of the next on the same thread whenever
 * the workers are awake (with several workers racing for the lowest free slot the mapping would
 * change from run to run): ops split rows the same way, so each core finds the rows it wrote in its
 * own cache. A slot whose worker is slow to come is taken by whoever is free, so a sleeping worker
 * delays nothing. Finished slots are counted in `done`; the caller returns when it reaches S.
 *
 * Waiting, on both sides, spins a while (sched_yield, so a runnable thread on the same core gets
 * it) and then sleeps on a condition variable. Each sleep and its wake-up pair a sequentially
 * consistent store and load of two atomics (sleepers/claim, caller_waiting/done): either the
 * sleeper sees the news before waiting or the waker sees the sleeper and signals it under the
 * mutex, so no wake-up is lost. */

/* sched_yield rounds a worker spins for the next run before sleeping. A yield takes about
 * 1.2 us on the 2-core development VM, so this waits some 80 us there: it
 * covers the gaps between one op and the next without holding a core for long once the rank
 * stops issuing ops. Measured there: a run reaches a spinning worker in about 2 us, a sleeping
 * one in about 10 us, or 40-80 us once its core has idled for milliseconds; whole-model
 * throughput at 1 rank was the same within noise for 16 to 16384 rounds. */
enum { WORKER_SPINS = 64 };
/* Rounds the caller spins for its workers' last tasks before sleeping: they are running, so
 * the wait is usually short, and a futex wake-up costs more than the spin. */
enum { CALLER_SPINS = 256 };
enum { MAX_SLOTS = 32 };

typedef struct Worker {
    struct CpuPool *pool;
    int index; /* 1.. (the caller is 0) */
    pthread_t thread;
} Worker;

struct CpuPool {
    int threads, nworkers, started;
    Worker *workers;
    float *scratch;     /* threads * CPU_POOL_SCRATCH_PER_THREAD */
    uint32_t gen;       /* the current run's generation; only the caller touches it */
    unsigned long runs; /* runs handed to the workers; the caller's too */

    /* the current run: written by the caller before it publishes the claim word */
    CpuPoolFn fn;
    void *ctx;
    int ntasks, slots;

    _Atomic uint64_t claim; /* gen << 32 | a bit per slot not yet claimed */
    _Atomic int done;       /* slots of the current run finished */
    _Atomic int sleepers;   /* workers about to sleep or asleep on `wake` */
    _Atomic int caller_waiting;
    _Atomic int stop;

    pthread_mutex_t mu;
    pthread_cond_t wake;     /* a new run (or stop) for the workers */
    pthread_cond_t finished; /* the last slot of a run is done, for the caller */
};

int cpu_pool_threads(const CpuPool *p) {
    return p ? p->threads : 1;
}

float *cpu_pool_scratch(CpuPool *p, size_t *floats) {
    *floats = p ? (size_t)p->threads * CPU_POOL_SCRATCH_PER_THREAD : 0;
    return p ? p->scratch : NULL;
}

unsigned long cpu_pool_runs(const CpuPool *p) {
    return p ? p->runs : 0;
}

static uint32_t word_gen(uint64_t w) {
    return (uint32_t)(w >> 32);
}

/* Claims and runs slots of run `gen` until none is left, slot `self` first. */
static void run_slots(CpuPool *p, uint32_t gen, int self) {
    uint64_t w = atomic_load_explicit(&p->claim, memory_order_acquire);
    for (;;) {
        const uint32_t mask = (uint32_t)w;
        if (word_gen(w) != gen || mask == 0) return;
        const int slot = self < MAX_SLOTS && (mask >> self & 1u) ? self : __builtin_ctz(mask);
        /* on failure w is reloaded: retry unless the run moved on */
        if (!atomic_compare_exchange_weak_explicit(&p->claim, &w, w & ~((uint64_t)1 << slot),
                                                   memory_order_acq_rel, memory_order_acquire))
            continue;
        const int ntasks = p->ntasks, slots = p->slots;
        for (int t = slot; t < ntasks; t += slots) p->fn(p->ctx, t, ntasks);
        /* after this the caller may return and start another run: touch no field of this
         * run past it (slots was read above) */
        if (atomic_fetch_add(&p->done, 1) + 1 == slots && atomic_load(&p->caller_waiting)) {
            pthread_mutex_lock(&p->mu);
            pthread_cond_signal(&p->finished);
            pthread_mutex_unlock(&p->mu);
        }
        w = atomic_load_explicit(&p->claim, memory_order_acquire);
    }
}

static void *worker_main(void *arg) {
    const Worker *self = arg;
    CpuPool *p = self->pool;
    uint32_t seen = 0; /* the generation of the last run this worker looked at */
    for (;;) {
        uint64_t w = 0;
        int news = 0;
        for (int i = 0; i < WORKER_SPINS && !news; i++) {
            w = atomic_load_explicit(&p->claim, memory_order_acquire);
            news = word_gen(w) != seen || atomic_load_explicit(&p->stop, memory_order_relaxed);
            if (!news) sched_yield();
        }
        if (!news) {
            pthread_mutex_lock(&p->mu);
            atomic_fetch_add(&p->sleepers, 1);
            while (w = atomic_load(&p->claim), word_gen(w) == seen && !atomic_load(&p->stop))
                pthread_cond_wait(&p->wake, &p->mu);
            atomic_fetch_sub(&p->sleepers, 1);
            pthread_mutex_unlock(&p->mu);
        }
        if (atomic_load(&p->stop)) return NULL;
        seen = word_gen(w);
        run_slots(p, seen, self->index);
    }
}

CpuPool *cpu_pool_create(int threads) {
    if (threads < 1) threads = 1;
    CpuPool *p = calloc(1, sizeof *p);
    if (!p) return NULL;
    p->threads = threads;
    p->nworkers = threads - 1;
    atomic_init(&p->claim, 0);
    atomic_init(&p->done, 0);
    atomic_init(&p->sleepers, 0);
    atomic_init(&p->caller_waiting, 0);
    atomic_init(&p->stop, 0);
    int mu = 0, wake = 0, finished = 0;
    p->scratch = aligned_alloc(64, (size_t)threads * CPU_POOL_SCRATCH_PER_THREAD * sizeof(float));
    p->workers = p->nworkers ? calloc((size_t)p->nworkers, sizeof *p->workers) : NULL;
    if (!p->scratch || (p->nworkers && !p->workers) || !(mu = !pthread_mutex_init(&p->mu, NULL)) ||
        !(wake = !pthread_cond_init(&p->wake, NULL)) ||
        !(finished = !pthread_cond_init(&p->finished, NULL))) {
        if (finished) pthread_cond_destroy(&p->finished);
        if (wake) pthread_cond_destroy(&p->wake);
        if (mu) pthread_mutex_destroy(&p->mu);
        free(p->workers);
        free(p->scratch);
        free(p);
        return NULL;
    }
    for (; p->started < p->nworkers; p->started++) {
        Worker *w = &p->workers[p->started];
        w->pool = p;
        w->index = p->started + 1;
        if (pthread_create(&w->thread, NULL, worker_main, w)) {
            cpu_pool_destroy(p); /* joins the ones that did start */
            return NULL;
        }
    }
    return p;
}

void cpu_pool_destroy(CpuPool *p) {
    if (!p) return;
    pthread_mutex_lock(&p->mu);
    atomic_store(&p->stop, 1);
    pthread_cond_broadcast(&p->wake);
    pthread_mutex_unlock(&p->mu);
    for (int i = 0; i < p->started; i++) pthread_join(p->workers[i].thread, NULL);
    pthread_cond_destroy(&p->finished);
    pthread_cond_destroy(&p->wake);
    pthread_mutex_destroy(&p->mu);
    free(p->workers);
    free(p->scratch);
    free(p);
}

void cpu_pool_run(CpuPool *p, int ntasks, CpuPoolFn fn, void *ctx) {
    if (ntasks < 1) return;
    if (!p || p->nworkers == 0 || ntasks == 1) {
        for (int t = 0; t < ntasks; t++) fn(ctx, t, ntasks);
        return;
    }
    const int slots = ntasks < MAX_SLOTS ? ntasks : MAX_SLOTS;
    p->fn = fn;
    p->ctx = ctx;
    p->ntasks = ntasks;
    p->slots = slots;
    atomic_store_explicit(&p->done, 0, memory_order_relaxed);
    const uint32_t gen = ++p->gen;
    p->runs++;
    const uint32_t mask = slots == 32 ? 0xffffffffu : (1u << slots) - 1u;
    atomic_store(&p->claim, (uint64_t)gen << 32 | mask); /* publishes the run */
    if (atomic_load(&p->sleepers) > 0) {
        pthread_mutex_lock(&p->mu);
        pthread_cond_broadcast(&p->wake);
        pthread_mutex_unlock(&p->mu);
    }
    run_slots(p, gen, 0);
    for (int i = 0; i < CALLER_SPINS; i++) {
        if (atomic_load_explicit(&p->done, memory_order_acquire) == slots) return;
        sched_yield();
    }
    pthread_mutex_lock(&p->mu);
    atomic_store(&p->caller_waiting, 1);
    while (atomic_load(&p->done) != slots) pthread_cond_wait(&p->finished, &p->mu);
    atomic_store(&p->caller_waiting, 0);
    pthread_mutex_unlock(&p->mu);
}
