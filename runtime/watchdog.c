/* watchdog: never hang on a collective: a thread watches the oldest unfinished NCCL collective and
 * the host call in progress and, past the timeout, aborts the communicators, says which, exits. */
#include "runtime/watchdog.h"
#include "base/clock.h"

#include <cuda_runtime_api.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>
#include <unistd.h>

#define WATCH_SLOTS 1024 /* collectives in flight at once; the engine keeps far fewer */
#define MAX_COMMS 8
#define ABORT_GRACE_S 5.0 /* ncclCommAbort may wait on the very call that hung: not longer */

typedef struct Watched {
    cudaEvent_t done;
    double since;
    CollKind kind;
    int unit;
    const char *what; /* a call that is no collective (ncclCommInitRank), else NULL */
} Watched;

struct Watchdog {
    pthread_t thread;
    pthread_mutex_t lock;
    int rank, device, stop;
    double timeout;
    Watched slot[WATCH_SLOTS];
    long head, tail; /* slots [head, tail) are in flight, oldest first */
    Watched call;    /* the host call in progress while `calls` > 0; its `done` is unused */
    int calls;
    ncclComm_t comms[MAX_COMMS];
    int ncomms;
    atomic_int aborted;
};

/* Reads the communicators unlocked: the firing thread holds the lock until the process exits. */
static void *abort_comms(void *arg) {
    Watchdog *w = arg;
    for (int i = 0; i < w->ncomms; i++) ncclCommAbort(w->comms[i]);
    atomic_store(&w->aborted, 1);
    return NULL;
}

/* Something has run longer than the timeout: abort and leave. Aborting releases the peers
 * blocked in the same collective, whose own watchdogs then fire too. The abort runs on a thread
 * of its own and gets ABORT_GRACE_S: NCCL calls on one communicator are not thread-safe, and an
 * abort that waits on the rank's hung call must not keep the process from exiting. */
static void fire(Watchdog *w, const Watched *hung, double waited, const char *where) {
    char name[96];
    if (hung->what)
        snprintf(name, sizeof name, "%s", hung->what);
    else
        snprintf(name, sizeof name, "%s of unit %d", coll_kind_name(hung->kind), hung->unit);
    fprintf(stderr,
            "fsdp: rank %d: %s did not finish within %.1f s (waited %.1f s, %s); "
            "aborting the communicator\n",
            w->rank, name, w->timeout, waited, where);
    fflush(stderr);
    /* That line is the rank's last word: the abort makes the hung call return an error, which
     * the rank's own thread could print before _exit below ends the process, a second line on
     * a cause already said. From here stderr goes nowhere. */
    int null = open("/dev/null", O_WRONLY);
    if (null >= 0) dup2(null, STDERR_FILENO);
    pthread_t t;
    if (pthread_create(&t, NULL, abort_comms, w) == 0) {
        double until = clock_seconds() + ABORT_GRACE_S;
        while (!atomic_load(&w->aborted) && clock_seconds() < until) usleep(10000);
    }
    _exit(1);
}

/* Fires on a host call that has not returned in time, then drops the finished collectives at
 * the head and fires on a hung one. The host call comes first and needs no CUDA call: the
 * rank's thread may be blocked inside the runtime. */
static void check(Watchdog *w) {
    pthread_mutex_lock(&w->lock);
    if (w->calls > 0) {
        double waited = clock_seconds() - w->call.since;
        if (waited > w->timeout) fire(w, &w->call, waited, "in a call that never returned");
    }
    while (w->head < w->tail) {
        Watched *s = &w->slot[w->head % WATCH_SLOTS];
        cudaError_t e = cudaEventQuery(s->done);
        if (e == cudaErrorNotReady) {
            double waited = clock_seconds() - s->since;
            if (waited > w->timeout) fire(w, s, waited, "on the comm stream");
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
            s->since = clock_seconds();
            s->kind = kind;
            s->unit = unit;
            s->what = NULL;
            w->tail++;
        }
    }
    pthread_mutex_unlock(&w->lock);
    return rc;
}

void watchdog_call_begin(Watchdog *w, CollKind kind, int unit, const char *what) {
    if (!w) return;
    pthread_mutex_lock(&w->lock);
    if (w->calls++ == 0)
        w->call = (Watched){.since = clock_seconds(), .kind = kind, .unit = unit, .what = what};
    pthread_mutex_unlock(&w->lock);
}

void watchdog_call_end(Watchdog *w) {
    if (!w) return;
    pthread_mutex_lock(&w->lock);
    if (w->calls > 0) w->calls--;
    pthread_mutex_unlock(&w->lock);
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
