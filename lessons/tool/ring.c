/* ring: the wire lessons 03 and 04 run their ring collectives on, one thread per rank. */
#include "lessons/tool/ring.h"

#include <errno.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

/* The ring's links are one-slot mailboxes under one lock: small, and enough for the handful of
 * ranks a lesson runs. A misuse (wrong count, a rank speaking for another, a wait that never ends)
 * breaks the ring: it records the first problem, wakes everyone, and from then on every send and
 * receive returns at once, so the check finishes and reports that problem. */

typedef struct Link { /* from rank r to rank r+1 */
    int full;
    float *data;
    size_t count, cap;
} Link;

struct Ring {
    int size;
    pthread_mutex_t mu;
    pthread_cond_t changed;
    Link links[RING_MAX_RANKS];
    size_t sent_bytes[RING_MAX_RANKS];
    int broken;
    char problem[256];
};

/* Which rank the calling thread is, so a rank cannot send as another. */
static _Thread_local int ring_self = -1;

int ring_size(const Ring *ring) {
    return ring->size;
}

/* Records the first problem and wakes every waiting rank. Call with the lock held. */
static void ring_break(Ring *ring, const char *fmt, ...) {
    if (!ring->broken) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(ring->problem, sizeof ring->problem, fmt, ap);
        va_end(ap);
        ring->broken = 1;
    }
    pthread_cond_broadcast(&ring->changed);
}

static int valid_caller(Ring *ring, int rank, const char *what, const float *buf, size_t count) {
    if (rank < 0 || rank >= ring->size) {
        ring_break(ring, "%s was called for rank %d, but the ring has ranks 0 to %d", what, rank,
                   ring->size - 1);
        return 0;
    }
    if (rank != ring_self) {
        ring_break(ring, "rank %d called %s as rank %d (a rank sends and receives only as itself)",
                   ring_self, what, rank);
        return 0;
    }
    if (!buf && count > 0) {
        ring_break(ring, "rank %d passed a NULL buffer to %s", rank, what);
        return 0;
    }
    return 1;
}

static struct timespec deadline_in(int seconds) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    t.tv_sec += seconds;
    return t;
}

/* Waits (lock held) until *flag == want, the ring breaks or the deadline passes; 1: it does. */
static int wait_until(Ring *ring, const int *flag, int want, const struct timespec *deadline) {
    while (!ring->broken && *flag != want)
        if (pthread_cond_timedwait(&ring->changed, &ring->mu, deadline) == ETIMEDOUT) break;
    return !ring->broken && *flag == want;
}

/* The link a rank's send (its own) or receive (the previous rank's) uses, once it is ready
 * (empty to send into, full to receive from), with the lock held; NULL when the ring is broken
 * or breaks while the rank waits. */
static Link *ready_link(Ring *ring, int rank, int receive, const float *buf, size_t count) {
    const char *what = receive ? "ring_recv_from_prev" : "ring_send_to_next";
    if (ring->broken || !valid_caller(ring, rank, what, buf, count)) return NULL;
    int peer = receive ? (rank - 1 + ring->size) % ring->size : (rank + 1) % ring->size;
    Link *l = &ring->links[receive ? peer : rank];
    struct timespec deadline = deadline_in(RING_WAIT_SECONDS);
    if (wait_until(ring, &l->full, receive, &deadline)) return l;
    if (receive)
        ring_break(ring,
                   "rank %d waited %d s to receive from rank %d, which sent nothing (if every "
                   "rank waits to receive before it sends, they all wait forever)",
                   rank, RING_WAIT_SECONDS, peer);
    else
        ring_break(ring,
                   "rank %d waited %d s to send to rank %d, which never received the previous "
                   "message (a link holds one message: receive before you send again)",
                   rank, RING_WAIT_SECONDS, peer);
    return NULL;
}

void ring_send_to_next(Ring *ring, int rank, const float *buf, size_t count) {
    pthread_mutex_lock(&ring->mu);
    Link *l = ready_link(ring, rank, 0, buf, count);
    if (!l) goto out;
    if (count > l->cap) {
        float *grown = realloc(l->data, count * sizeof *grown);
        if (!grown) {
            ring_break(ring, "out of memory for a message of %zu floats", count);
            goto out;
        }
        l->data = grown;
        l->cap = count;
    }
    if (count) memcpy(l->data, buf, count * sizeof *buf);
    l->count = count;
    l->full = 1;
    ring->sent_bytes[rank] += count * sizeof *buf;
    pthread_cond_broadcast(&ring->changed);
out:
    pthread_mutex_unlock(&ring->mu);
}

void ring_recv_from_prev(Ring *ring, int rank, float *buf, size_t count) {
    pthread_mutex_lock(&ring->mu);
    Link *l = ready_link(ring, rank, 1, buf, count);
    if (!l) goto out;
    if (l->count != count) {
        ring_break(ring, "rank %d asked to receive %zu floats from rank %d, which sent %zu", rank,
                   count, (rank - 1 + ring->size) % ring->size, l->count);
        goto out;
    }
    if (count) memcpy(buf, l->data, count * sizeof *buf);
    l->full = 0;
    pthread_cond_broadcast(&ring->changed);
out:
    pthread_mutex_unlock(&ring->mu);
}

typedef struct RankThread {
    Ring *ring;
    int rank;
    RingRankFn fn;
    void *arg;
} RankThread;

static void *rank_main(void *p) {
    RankThread *t = p;
    ring_self = t->rank;
    t->fn(t->ring, t->rank, t->arg);
    return NULL;
}

/* After every rank returned: a message still on a link was sent and never received. */
static void check_links_empty(Ring *ring) {
    for (int r = 0; r < ring->size && !ring->broken; r++)
        if (ring->links[r].full)
            ring_break(ring, "rank %d sent %zu floats that rank %d never received", r,
                       ring->links[r].count, (r + 1) % ring->size);
}

int ring_run(int n, RingRankFn fn, void *arg, RingReport *report) {
    memset(report, 0, sizeof *report);
    if (n < 1 || n > RING_MAX_RANKS) {
        snprintf(report->problem, sizeof report->problem, "a ring has 1 to %d ranks, not %d",
                 RING_MAX_RANKS, n);
        return -1;
    }
    Ring ring = {.size = n};
    pthread_condattr_t attr;
    pthread_condattr_init(&attr);
    pthread_condattr_setclock(&attr, CLOCK_MONOTONIC);
    pthread_cond_init(&ring.changed, &attr);
    pthread_condattr_destroy(&attr);
    pthread_mutex_init(&ring.mu, NULL);
    RankThread threads[RING_MAX_RANKS];
    pthread_t ids[RING_MAX_RANKS];
    int started = 0, rc = 0;
    for (; started < n; started++) {
        threads[started] = (RankThread){&ring, started, fn, arg};
        if (pthread_create(&ids[started], NULL, rank_main, &threads[started])) {
            pthread_mutex_lock(&ring.mu);
            ring_break(&ring, "could not start the thread of rank %d", started);
            pthread_mutex_unlock(&ring.mu);
            rc = -1;
            break;
        }
    }
    for (int r = 0; r < started; r++) pthread_join(ids[r], NULL);
    check_links_empty(&ring);
    memcpy(report->sent_bytes, ring.sent_bytes, sizeof report->sent_bytes);
    memcpy(report->problem, ring.problem, sizeof report->problem);
    for (int r = 0; r < n; r++) free(ring.links[r].data);
    pthread_cond_destroy(&ring.changed);
    pthread_mutex_destroy(&ring.mu);
    return rc;
}
