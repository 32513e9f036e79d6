/* watchdog: never hang on a collective: a thread watches the oldest unfinished NCCL collective and,
 * past the timeout, aborts the communicators, says which hung, and exits. */
#include "runtime/watchdog.h"

#include <cuda_runtime_api.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>
#include <unistd.h>

#define WATCH_SLOTS 1024 /* collectives in flight at once; the engine keeps far fewer */
#define MAX_COMMS 8

typedef struct Watched {
    cudaEvent_t done;
    double since;
    CollKind kind;
    int unit;
} Watched;

struct Watchdog {
    pthread_t thread;
    pthread_mutex_t lock;
    int rank, device, stop;
    double timeout;
    Watched slot[WATCH_SLOTS];
    long head, tail; /* slots [head, tail) are in flight, oldest first */
    ncclComm_t comms[MAX_COMMS];
    int ncomms;
};

static double now_seconds(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* The oldest collective still running for longer than the timeout: abort and leave. Aborting
 * releases the peers blocked in the same collective, whose own watchdogs then fire too. */
static void fire(Watchdog *w, const Watched *hung, double waited) {
    fprintf(stderr,
            "fsdp: rank %d: %s of unit %d did not finish within %.1f s (waited %.1f s); "
            "aborting the communicator\n",
            w->rank, coll_kind_name(hung->kind), hung->unit, w->timeout, waited);
    for (int i = 0; i < w->ncomms; i++) ncclCommAbort(w->comms[i]);
    _exit(1);
}

/* Drops the finished collectives at the head; fires on a hung one. */
static void check(Watchdog *w) {
    pthread_mutex_lock(&w->lock);
    while (w->head < w->tail) {
        Watched *s = &w->slot[w->head % WATCH_SLOTS];
        cudaError_t e = cudaEventQuery(s->done);
        if (e == cudaErrorNotReady) {
            double waited = now_seconds() - s->since;
            if (waited > w->timeout) fire(w, s, waited);
            break;
        }
        w->head++; /* done, or an error the rank's own calls will report */
    }
    pthread_mutex_unlock(&w->lock);
}

static void *watch(void *arg) {
    Watchdog *w = arg;
    cudaSetDevice(w->device); /* events belong to the device's context */
    for (;;) {
        pthread_mutex_lock(&w->lock);
        int stop = w->stop;
        pthread_mutex_unlock(&w->lock);
        if (stop) return NULL;
        check(w);
        usleep(50000);
    }
}

int watchdog_start(Watchdog **out, int rank, int device, double timeout_s, Err *err) {
    Watchdog *w = calloc(1, sizeof *w);
    if (!w) return err_set(err, ERR_NOMEM, "out of memory for the watchdog");
    w->rank = rank;
    w->device = device;
    w->timeout = timeout_s;
    pthread_mutex_init(&w->lock, NULL);
    for (int i = 0; i < WATCH_SLOTS; i++) {
        cudaError_t e = cudaEventCreateWithFlags(&w->slot[i].done, cudaEventDisableTiming);
        if (e != cudaSuccess) {
            for (int j = 0; j < i; j++) cudaEventDestroy(w->slot[j].done);
            free(w);
            return err_set(err, ERR_INTERNAL, "watchdog events: %s", cudaGetErrorString(e));
        }
    }
    if (pthread_create(&w->thread, NULL, watch, w) != 0) {
        for (int i = 0; i < WATCH_SLOTS; i++) cudaEventDestroy(w->slot[i].done);
        free(w);
        return err_set(err, ERR_INTERNAL, "cannot start the watchdog thread");
    }
    *out = w;
    return 0;
}

void watchdog_add_comm(Watchdog *w, ncclComm_t comm) {
    pthread_mutex_lock(&w->lock);
    if (w->ncomms < MAX_COMMS) w->comms[w->ncomms++] = comm;
    pthread_mutex_unlock(&w->lock);
}

int watchdog_track(Watchdog *w, void *stream, CollKind kind, int unit, Err *err) {
    pthread_mutex_lock(&w->lock);
    int rc = 0;
    if (w->tail - w->head == WATCH_SLOTS) {
        rc = err_set(err, ERR_INTERNAL, "more than %d collectives in flight", WATCH_SLOTS);
    } else {
        Watched *s = &w->slot[w->tail % WATCH_SLOTS];
        cudaError_t e = cudaEventRecord(s->done, (cudaStream_t)stream);
        if (e != cudaSuccess) {
            rc = err_set(err, ERR_INTERNAL, "watchdog: %s", cudaGetErrorString(e));
        } else {
            s->since = now_seconds();
            s->kind = kind;
            s->unit = unit;
            w->tail++;
        }
    }
    pthread_mutex_unlock(&w->lock);
    return rc;
}

void watchdog_stop(Watchdog *w) {
    if (!w) return;
    pthread_mutex_lock(&w->lock);
    w->stop = 1;
    pthread_mutex_unlock(&w->lock);
    pthread_join(w->thread, NULL);
    for (int i = 0; i < WATCH_SLOTS; i++) cudaEventDestroy(w->slot[i].done);
    pthread_mutex_destroy(&w->lock);
    free(w);
}
