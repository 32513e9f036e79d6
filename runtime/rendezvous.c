/* rendezvous: how a job's processes first meet over TCP: rank 0 serves, the others connect and say
 * who they are, and each gets NCCL's unique id; every wait has a deadline. */
#include "runtime/rendezvous.h"

#include <errno.h>
#include <math.h>
#include <poll.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "runtime/tcp.h"

/* The wire, every number big-endian:
 *   hello  rank r -> 0:  magic, version, rank, world size (u32 each), blob bytes (u64)
 *   reply  0 -> rank r:  magic, kind (u32 each), length (u64), then the blob (REPLY_BLOB) or
 *                        rank 0's reason in words (REPLY_REFUSED)
 *   ack    rank r -> 0:  magic (u32), once the blob is in
 * The magic keeps a stray connection (a port scanner, another service) from counting as a
 * rank; the version catches two different fsdp builds in one job. */
#define WIRE_MAGIC 0x46534452u /* "FSDR" */
#define WIRE_VERSION 1u
enum { HELLO_BYTES = 24, REPLY_BYTES = 16, ACK_BYTES = 4 };
enum { REPLY_BLOB = 0, REPLY_REFUSED = 1 };
#define REASON_MAX 400 /* a refusal's words: fits in an Err after "rendezvous at HOST:PORT: " */

static void put_u32(unsigned char *p, uint32_t x) {
    for (int i = 0; i < 4; i++) p[i] = (unsigned char)(x >> (24 - 8 * i));
}

static void put_u64(unsigned char *p, uint64_t x) {
    put_u32(p, (uint32_t)(x >> 32));
    put_u32(p + 4, (uint32_t)x);
}

static uint32_t get_u32(const unsigned char *p) {
    return (uint32_t)p[0] << 24 | (uint32_t)p[1] << 16 | (uint32_t)p[2] << 8 | p[3];
}

static uint64_t get_u64(const unsigned char *p) {
    return (uint64_t)get_u32(p) << 32 | get_u32(p + 4);
}

static void put_reply(unsigned char *head, uint32_t kind, uint64_t length) {
    put_u32(head, WIRE_MAGIC);
    put_u32(head + 4, kind);
    put_u64(head + 8, length);
}

/* ---------------------------------------------------------------- rank 0 */

/* A connection that has not said who it is yet. */
typedef struct Arrival {
    int fd;
    size_t got;
    unsigned char hello[HELLO_BYTES];
} Arrival;

typedef struct Server {
    const DistEnv *env;
    const char *where; /* "host:port", for messages */
    size_t blob_bytes;
    int listen_fd;
    int *rank_fd;     /* [world_size]: each rank's connection once it said hello, -1 before */
    int arrived;      /* ranks other than 0 that have */
    Arrival *waiting; /* connections yet to say hello */
    int nwaiting, cap;
    struct pollfd *polled; /* [1 + cap]: the listening socket, then `waiting` */
    int refused_fd;        /* the connection whose hello ended the meeting, -1 before */
    char reason[REASON_MAX];
} Server;

/* Ends the meeting: err is "rendezvous at WHERE<sep>REASON", and REASON is what the other
 * ranks are told (refuse_all). */
static int server_fail(Server *s, Err *err, const char *sep, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
static int server_fail(Server *s, Err *err, const char *sep, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(s->reason, sizeof s->reason, fmt, ap);
    va_end(ap);
    return err_set(err, ERR_IO, "rendezvous at %s%s%s", s->where, sep, s->reason);
}

static int add_waiting(Server *s, int fd) {
    if (s->nwaiting == s->cap) {
        int cap = s->cap ? 2 * s->cap : 16;
        Arrival *w = realloc(s->waiting, (size_t)cap * sizeof *w);
        if (w) s->waiting = w;
        struct pollfd *p = w ? realloc(s->polled, (size_t)(cap + 1) * sizeof *p) : NULL;
        if (p) s->polled = p;
        if (!w || !p) return ERR_NOMEM;
        s->cap = cap;
    }
    s->waiting[s->nwaiting++] = (Arrival){.fd = fd};
    return 0;
}

/* Takes waiting[i] out of the list (its socket stays open: the caller decides). */
static void drop_waiting(Server *s, int i) {
    s->waiting[i] = s->waiting[--s->nwaiting];
}

/* "rank 2", "ranks 2, 3" or "ranks 1-5, 9": who never said hello, cut short past n. */
static void describe_missing(const Server *s, char *out, size_t n) {
    int world = s->env->world_size, count = 0;
    for (int r = 1; r < world; r++) count += s->rank_fd[r] < 0;
    size_t len = (size_t)snprintf(out, n, "%s", count == 1 ? "rank " : "ranks ");
    const size_t tail = 32; /* room for ", ... (1000000 in all)" */
    for (int r = 1, listed = 0; r < world; r++) {
        if (s->rank_fd[r] >= 0) continue;
        int last = r;
        while (last + 1 < world && s->rank_fd[last + 1] < 0) last++;
        char item[40];
        if (last - r >= 2)
            snprintf(item, sizeof item, "%d-%d", r, last);
        else if (last > r)
            snprintf(item, sizeof item, "%d, %d", r, last);
        else
            snprintf(item, sizeof item, "%d", r);
        if (len + strlen(item) + 2 + tail >= n) {
            snprintf(out + len, n - len, ", ... (%d in all)", count);
            return;
        }
        len += (size_t)snprintf(out + len, n - len, "%s%s", listed++ ? ", " : "", item);
        r = last;
    }
}

/* A whole hello from waiting[i]: 1 when it is a rank, now in rank_fd; 0 when it is not ours
 * (closed and forgotten); ERR_IO when it ends the meeting. */
static int admit(Server *s, int i, Err *err) {
    const unsigned char *h = s->waiting[i].hello;
    int fd = s->waiting[i].fd, world = s->env->world_size;
    uint32_t magic = get_u32(h), version = get_u32(h + 4), rank = get_u32(h + 8),
             their_world = get_u32(h + 12);
    uint64_t their_bytes = get_u64(h + 16);
    drop_waiting(s, i); /* h is another connection's from here on */
    if (magic != WIRE_MAGIC) {
        close(fd);
        return 0;
    }
    s->refused_fd = fd; /* told why, whatever is wrong below */
    if (version != WIRE_VERSION)
        return server_fail(s, err, ": ",
                           "rank %u speaks rendezvous version %u, rank 0 version %u (two "
                           "different fsdp builds?)",
                           rank, version, WIRE_VERSION);
    if (their_world != (uint32_t)world)
        return server_fail(s, err, ": ",
                           "rank %u believes the world has %u ranks, rank 0 that it has %d", rank,
                           their_world, world);
    if (rank == 0) return server_fail(s, err, ": ", "a second process says it is rank 0");
    if (rank >= (uint32_t)world)
        return server_fail(s, err, ": ", "a process says it is rank %u, but the ranks are 0 to %d",
                           rank, world - 1);
    if (s->rank_fd[rank] >= 0)
        return server_fail(s, err, ": ", "two processes say they are rank %u", rank);
    if (their_bytes != (uint64_t)s->blob_bytes)
        return server_fail(s, err, ": ", "rank %u expects %llu bytes, rank 0 sends %zu", rank,
                           (unsigned long long)their_bytes, s->blob_bytes);
    s->refused_fd = -1;
    s->rank_fd[rank] = fd;
    s->arrived++;
    return 1;
}

/* Reads what the waiting connections sent (newest first, so that dropping one moves only an
 * entry already looked at), then takes in new ones. */
static int take_activity(Server *s, int nwatched, Err *err) {
    for (int i = nwatched - 1; i >= 0; i--) {
        if (!s->polled[1 + i].revents) continue;
        Arrival *a = &s->waiting[i];
        int rc = tcp_recv_some(a->fd, a->hello, HELLO_BYTES, &a->got);
        if (rc != TCP_OK) { /* gone before saying who it was: nobody to count */
            close(a->fd);
            drop_waiting(s, i);
        } else if (a->got == HELLO_BYTES && admit(s, i, err) < 0) {
            return ERR_IO;
        }
    }
    if (s->polled[0].revents)
        for (int fd; (fd = tcp_accept(s->listen_fd)) >= 0;)
            if (add_waiting(s, fd)) {
                close(fd);
                return err_set(err, ERR_NOMEM, "rendezvous: out of memory");
            }
    return 0;
}

/* Waits until every other rank has said hello, or the deadline. */
static int gather(Server *s, double deadline, double timeout_s, Err *err) {
    while (s->arrived < s->env->world_size - 1) {
        int ms = tcp_ms_until(deadline);
        if (ms == 0) {
            char missing[300];
            describe_missing(s, missing, sizeof missing);
            return server_fail(s, err, " ", "timed out after %.1f s: %s never arrived", timeout_s,
                               missing);
        }
        int nwatched = s->nwaiting;
        s->polled[0] = (struct pollfd){.fd = s->listen_fd, .events = POLLIN};
        for (int i = 0; i < nwatched; i++)
            s->polled[1 + i] = (struct pollfd){.fd = s->waiting[i].fd, .events = POLLIN};
        int ready = poll(s->polled, (nfds_t)(1 + nwatched), ms);
        if (ready < 0 && errno != EINTR)
            return server_fail(s, err, ": ", "poll failed: %s", strerror(errno));
        int rc = ready > 0 ? take_activity(s, nwatched, err) : 0;
        if (rc) return rc;
    }
    return 0;
}

/* Everyone is here: each rank gets the blob and says it has it. A fresh allowance of
 * timeout_s, since the wait for the last rank may have used up the first. */
static int hand_out(Server *s, const void *blob, double timeout_s, Err *err) {
    double deadline = clock_seconds() + timeout_s;
    unsigned char head[REPLY_BYTES], ack[ACK_BYTES];
    put_reply(head, REPLY_BLOB, s->blob_bytes);
    for (int r = 1; r < s->env->world_size; r++) {
        int fd = s->rank_fd[r];
        if (tcp_send_all(fd, head, sizeof head, deadline) ||
            tcp_send_all(fd, blob, s->blob_bytes, deadline))
            return server_fail(s, err, ": ", "rank %d went away before it had the ID", r);
    }
    for (int r = 1; r < s->env->world_size; r++)
        if (tcp_recv_all(s->rank_fd[r], ack, sizeof ack, deadline) || get_u32(ack) != WIRE_MAGIC)
            return server_fail(s, err, ": ", "rank %d did not confirm it had the ID", r);
    return 0;
}

static void refuse(int fd, const char *reason) {
    unsigned char head[REPLY_BYTES];
    size_t n = strlen(reason);
    double deadline = clock_seconds() + 0.5; /* a peer that does not read is not waited for */
    put_reply(head, REPLY_REFUSED, n);
    if (tcp_send_all(fd, head, sizeof head, deadline) == TCP_OK)
        tcp_send_all(fd, reason, n, deadline);
}

/* Tells every rank that came why the meeting is off, so that each fails now with rank 0's
 * reason instead of at its own deadline with none. */
static void refuse_all(Server *s) {
    for (int r = 1; r < s->env->world_size; r++)
        if (s->rank_fd[r] >= 0) refuse(s->rank_fd[r], s->reason);
    if (s->refused_fd >= 0) refuse(s->refused_fd, s->reason);
    for (int i = 0; i < s->nwaiting; i++) refuse(s->waiting[i].fd, s->reason);
}

static void server_close(Server *s) {
    for (int r = 1; s->rank_fd && r < s->env->world_size; r++)
        if (s->rank_fd[r] >= 0) close(s->rank_fd[r]);
    if (s->refused_fd >= 0) close(s->refused_fd);
    for (int i = 0; i < s->nwaiting; i++) close(s->waiting[i].fd);
    if (s->listen_fd >= 0) close(s->listen_fd);
    free(s->rank_fd);
    free(s->waiting);
    free(s->polled);
}

static int serve(const DistEnv *env, const char *where, const void *blob, size_t n,
                 double timeout_s, Err *err) {
    double deadline = clock_seconds() + timeout_s;
    Server s = {.env = env, .where = where, .blob_bytes = n, .refused_fd = -1};
    s.listen_fd = tcp_listen(env->master_port);
    if (s.listen_fd < 0)
        return err_set(err, ERR_IO, "rendezvous at %s: rank 0 cannot listen on port %d: %s%s",
                       where, env->master_port, strerror(errno),
                       errno == EADDRINUSE ? " (another job on this port? set MASTER_PORT)" : "");
    s.rank_fd = malloc((size_t)env->world_size * sizeof *s.rank_fd);
    s.polled = malloc(sizeof *s.polled);
    int rc = s.rank_fd && s.polled ? 0 : err_set(err, ERR_NOMEM, "rendezvous: out of memory");
    for (int r = 0; !rc && r < env->world_size; r++) s.rank_fd[r] = -1;
    if (!rc) rc = gather(&s, deadline, timeout_s, err);
    if (!rc) rc = hand_out(&s, blob, timeout_s, err);
    if (rc && s.rank_fd) refuse_all(&s);
    server_close(&s);
    return rc;
}

/* ---------------------------------------------------------------- every other rank */

/* rank 0 stopped answering mid-way: why, in the caller's words. */
static int lost_rank0(const char *where, int how, double timeout_s, Err *err) {
    if (how == TCP_TIMEOUT)
        return err_set(err, ERR_IO,
                       "rendezvous at %s timed out after %.1f s: rank 0 answered, but not every "
                       "rank arrived (rank 0's message names them)",
                       where, timeout_s);
    if (how == TCP_CLOSED)
        return err_set(err, ERR_IO,
                       "rendezvous at %s: rank 0 closed the connection (it failed: its message "
                       "says why)",
                       where);
    return err_set(err, ERR_IO, "rendezvous at %s: %s", where, strerror(errno));
}

static int read_refusal(int fd, uint64_t length, const char *where, double deadline, Err *err) {
    char reason[REASON_MAX];
    size_t n = length < sizeof reason - 1 ? (size_t)length : sizeof reason - 1;
    if (tcp_recv_all(fd, reason, n, deadline) != TCP_OK) n = 0;
    reason[n] = 0;
    return err_set(err, ERR_IO, "rendezvous at %s: rank 0 called it off: %s", where,
                   n ? reason : "(no reason given)");
}

/* Says hello over fd, then takes the blob (or rank 0's refusal) and confirms it. */
static int meet_rank0(int fd, const DistEnv *env, const char *where, void *blob, size_t n,
                      double deadline, double timeout_s, Err *err) {
    unsigned char hello[HELLO_BYTES], head[REPLY_BYTES], ack[ACK_BYTES];
    put_u32(hello, WIRE_MAGIC);
    put_u32(hello + 4, WIRE_VERSION);
    put_u32(hello + 8, (uint32_t)env->rank);
    put_u32(hello + 12, (uint32_t)env->world_size);
    put_u64(hello + 16, n);
    int rc = tcp_send_all(fd, hello, sizeof hello, deadline);
    if (!rc) rc = tcp_recv_all(fd, head, sizeof head, deadline);
    if (rc) return lost_rank0(where, rc, timeout_s, err);
    uint32_t kind = get_u32(head + 4);
    uint64_t length = get_u64(head + 8);
    if (get_u32(head) != WIRE_MAGIC)
        return err_set(err, ERR_IO,
                       "rendezvous at %s: what answered is not fsdp's rank 0 (another service on "
                       "port %d?)",
                       where, env->master_port);
    if (kind == REPLY_REFUSED) return read_refusal(fd, length, where, deadline, err);
    if (kind != REPLY_BLOB || length != n)
        return err_set(err, ERR_IO,
                       "rendezvous at %s: rank 0 sent %llu bytes, rank %d expected %zu", where,
                       (unsigned long long)length, env->rank, n);
    put_u32(ack, WIRE_MAGIC);
    rc = tcp_recv_all(fd, blob, n, deadline);
    if (!rc) rc = tcp_send_all(fd, ack, sizeof ack, deadline);
    return rc ? lost_rank0(where, rc, timeout_s, err) : 0;
}

/* Connects to rank 0, trying again every 100 ms for timeout_s: rank 0 may well start after
 * the others. */
static int join(const DistEnv *env, const char *where, void *blob, size_t n, double timeout_s,
                Err *err) {
    double deadline = clock_seconds() + timeout_s;
    char why[160];
    int fd;
    while ((fd = tcp_connect(env->master_addr, env->master_port, deadline, why, sizeof why)) < 0) {
        int ms = tcp_ms_until(deadline);
        if (ms == 0)
            return err_set(err, ERR_IO,
                           "rendezvous at %s timed out after %.1f s: rank 0 was not reachable (%s)",
                           where, timeout_s, why);
        poll(NULL, 0, ms < 100 ? ms : 100);
    }
    /* Rank 0 listened before we got in, so it gives up no later than timeout_s from now: wait
     * that long (and a little) for its word, which names the missing ranks if it gives up. */
    int rc = meet_rank0(fd, env, where, blob, n, clock_seconds() + timeout_s + 0.5, timeout_s, err);
    close(fd);
    return rc;
}

int rendezvous_exchange(const DistEnv *env, void *blob, size_t n, double timeout_s, Err *err) {
    if (env->world_size <= 1) return 0;
    if (!(timeout_s > 0 && isfinite(timeout_s)))
        return err_set(err, ERR_USAGE,
                       "rendezvous: the timeout must be a positive number of seconds");
    char where[300];
    const char *fmt = strchr(env->master_addr, ':') ? "[%s]:%d" : "%s:%d"; /* IPv6 literal */
    snprintf(where, sizeof where, fmt, env->master_addr, env->master_port);
    return env->rank == 0 ? serve(env, where, blob, n, timeout_s, err)
                          : join(env, where, blob, n, timeout_s, err);
}
