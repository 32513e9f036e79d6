/* The TCP rendezvous among forked processes on 127.0.0.1: a blob reaches every rank; a rank
 * that never arrives, a wrong world size, a rank seen twice, a taken port and a stray
 * connection are each one line, within the timeout, on every rank. */
#include <arpa/inet.h>
#include <criterion/criterion.h>
#include <netinet/in.h>
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "runtime/rendezvous.h"

#define MAX_PROCS 8

/* What each process of a meeting came to, in memory the test shares with them. */
typedef struct Outcome {
    int rc;
    char msg[512];
} Outcome;

typedef struct Meeting {
    int port;
    size_t n;
    double timeout_s;
    Outcome *out;         /* [MAX_PROCS], shared */
    unsigned char *blobs; /* [MAX_PROCS][n], shared */
    pid_t pid[MAX_PROCS];
    int nprocs;
} Meeting;

static double now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* A port nobody listens on right now: the kernel's pick for port 0. */
static int free_port(void) {
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    socklen_t len = sizeof a;
    cr_assert(bind(fd, (struct sockaddr *)&a, sizeof a) == 0);
    cr_assert(getsockname(fd, (struct sockaddr *)&a, &len) == 0);
    close(fd);
    return ntohs(a.sin_port);
}

static unsigned char pattern(size_t i) {
    return (unsigned char)(i * 7 + 3);
}

static void meeting_open(Meeting *m, size_t n, double timeout_s) {
    *m = (Meeting){.port = free_port(), .n = n, .timeout_s = timeout_s};
    m->out = mmap(NULL, MAX_PROCS * sizeof *m->out, PROT_READ | PROT_WRITE,
                  MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    m->blobs = mmap(NULL, MAX_PROCS * n, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    cr_assert(m->out != MAP_FAILED && m->blobs != MAP_FAILED);
}

/* Starts a process that is `rank` of a world it believes has `world` ranks. Rank 0 offers the
 * pattern; the others start from zeros. */
static void start(Meeting *m, int rank, int world) {
    int slot = m->nprocs++;
    cr_assert_leq(m->nprocs, MAX_PROCS);
    pid_t pid = fork();
    cr_assert_geq(pid, 0);
    if (pid > 0) {
        m->pid[slot] = pid;
        return;
    }
    /* all on one node: local rank and world are the global ones */
    DistEnv env = {LAUNCHER_TORCHRUN, rank, world, rank, world, "127.0.0.1", m->port};
    unsigned char *blob = m->blobs + (size_t)slot * m->n;
    for (size_t i = 0; i < m->n; i++) blob[i] = rank == 0 ? pattern(i) : 0;
    Err err = {0};
    m->out[slot].rc = rendezvous_exchange(&env, blob, m->n, m->timeout_s, &err);
    memcpy(m->out[slot].msg, err.msg, sizeof err.msg);
    _exit(0);
}

/* Waits for every process; returns the seconds since `t0`. */
static double finish(Meeting *m, double t0) {
    for (int i = 0; i < m->nprocs; i++) {
        int status;
        cr_assert_eq(waitpid(m->pid[i], &status, 0), m->pid[i]);
        cr_expect(WIFEXITED(status) && WEXITSTATUS(status) == 0, "process %d crashed", i);
    }
    return now() - t0;
}

static void meeting_close(Meeting *m) {
    munmap(m->out, MAX_PROCS * sizeof *m->out);
    munmap(m->blobs, MAX_PROCS * m->n);
}

/* One process coming to a meeting: its rank, the world size it believes in, and how long it
 * waits after the one before it started. */
typedef struct Arrival {
    int rank, world;
    int delay_ms;
} Arrival;

/* Opens a meeting of `n`-byte blobs, starts the `count` arrivals in order and waits for them
 * all; returns the seconds from the first start to the last exit. */
static double meet(Meeting *m, size_t n, double timeout_s, const Arrival *arrivals, int count) {
    meeting_open(m, n, timeout_s);
    double t0 = now();
    for (int i = 0; i < count; i++) {
        usleep((useconds_t)arrivals[i].delay_ms * 1000);
        start(m, arrivals[i].rank, arrivals[i].world);
    }
    return finish(m, t0);
}

static void expect_blob(const Meeting *m, int slot) {
    const unsigned char *blob = m->blobs + (size_t)slot * m->n;
    size_t wrong = 0;
    for (size_t i = 0; i < m->n; i++) wrong += blob[i] != pattern(i);
    cr_expect_eq(wrong, 0, "process %d got %zu of %zu bytes wrong", slot, wrong, m->n);
}

/* Every process of the meeting succeeded and holds rank 0's pattern. */
static void expect_all_got_the_blob(const Meeting *m) {
    for (int i = 0; i < m->nprocs; i++) {
        cr_expect_eq(m->out[i].rc, 0, "process %d: %s", i, m->out[i].msg);
        expect_blob(m, i);
    }
}

static void expect_failed_saying(const Meeting *m, int slot, const char *words) {
    const Outcome *o = &m->out[slot];
    cr_expect_neq(o->rc, 0, "process %d succeeded", slot);
    cr_expect(strstr(o->msg, words), "process %d said '%s', not '%s'", slot, o->msg, words);
    cr_expect_null(strchr(o->msg, '\n'), "'%s' is more than one line", o->msg);
}

Test(rendezvous, four_ranks_share_a_128_byte_id, .timeout = 20) {
    Meeting m; /* rank 0 comes last: the others keep trying */
    meet(&m, 128, 10.0, (Arrival[]){{3, 4, 0}, {2, 4, 0}, {1, 4, 0}, {0, 4, .delay_ms = 200}}, 4);
    expect_all_got_the_blob(&m);
    meeting_close(&m);
}

Test(rendezvous, a_large_blob_arrives_whole, .timeout = 20) {
    Meeting m; /* more than a socket buffer: many partial sends */
    meet(&m, 3 << 20, 10.0, (Arrival[]){{0, 3, 0}, {1, 3, 0}, {2, 3, 0}}, 3);
    expect_all_got_the_blob(&m);
    meeting_close(&m);
}

Test(rendezvous, ranks_that_never_arrive_are_named, .timeout = 20) {
    Meeting m;
    double took = meet(&m, 128, 1.0, (Arrival[]){{0, 4, 0}, {1, 4, 0}}, 2);
    char words[200];
    snprintf(words, sizeof words,
             "rendezvous at 127.0.0.1:%d timed out after 1.0 s: ranks 2, 3 never arrived", m.port);
    expect_failed_saying(&m, 0, words);
    expect_failed_saying(&m, 1, "rank 0 called it off: timed out after 1.0 s: ranks 2, 3 never");
    cr_expect_lt(took, 3.0, "took %.1f s", took);
    meeting_close(&m);
}

Test(rendezvous, many_missing_ranks_read_as_ranges, .timeout = 20) {
    Meeting m;
    meet(&m, 16, 0.5, (Arrival[]){{0, 8, 0}, {6, 8, 0}}, 2);
    expect_failed_saying(&m, 0, "ranks 1-5, 7 never arrived");
    meeting_close(&m);
}

Test(rendezvous, without_rank_0_the_others_say_so, .timeout = 20) {
    Meeting m;
    double took = meet(&m, 128, 0.5, (Arrival[]){{1, 2, 0}}, 1);
    expect_failed_saying(&m, 0, "timed out after 0.5 s: rank 0 was not reachable");
    cr_expect_lt(took, 2.0, "took %.1f s", took);
    meeting_close(&m);
}

Test(rendezvous, a_wrong_world_size_names_both_sizes, .timeout = 20) {
    Meeting m;
    double took = meet(&m, 128, 10.0, (Arrival[]){{0, 2, 0}, {1, 3, 0}}, 2);
    expect_failed_saying(&m, 0, "rank 1 believes the world has 3 ranks, rank 0 that it has 2");
    expect_failed_saying(&m, 1, "rank 0 called it off: rank 1 believes the world has 3 ranks");
    cr_expect_lt(took, 5.0, "took %.1f s: the mismatch should end it at once", took);
    meeting_close(&m);
}

Test(rendezvous, a_rank_seen_twice_or_out_of_range, .timeout = 20) {
    Meeting m;
    double took = meet(&m, 8, 10.0, (Arrival[]){{0, 3, 0}, {1, 3, 0}, {1, 3, .delay_ms = 100}}, 3);
    expect_failed_saying(&m, 0, "two processes say they are rank 1");
    cr_expect_lt(took, 5.0, "took %.1f s", took);
    meeting_close(&m);

    meet(&m, 8, 10.0, (Arrival[]){{0, 2, 0}, {5, 2, 0}}, 2);
    expect_failed_saying(&m, 0, "a process says it is rank 5, but the ranks are 0 to 1");
    expect_failed_saying(&m, 1, "rank 0 called it off");
    meeting_close(&m);
}

/* Another program listening on `port`, on every address (IPv4 and IPv6). */
static int listen_elsewhere(int port) {
    int fd = socket(AF_INET6, SOCK_STREAM, 0);
    struct sockaddr_in6 a = {.sin6_family = AF_INET6, .sin6_port = htons((uint16_t)port)};
    int zero = 0;
    setsockopt(fd, IPPROTO_IPV6, IPV6_V6ONLY, &zero, sizeof zero);
    cr_assert(bind(fd, (struct sockaddr *)&a, sizeof a) == 0 && listen(fd, 1) == 0);
    return fd;
}

/* A connection to 127.0.0.1:port, tried for up to 2 s while the listener comes up. */
static int connect_when_listening(int port) {
    for (int tries = 0; tries < 100; tries++) {
        int fd = socket(AF_INET, SOCK_STREAM, 0);
        struct sockaddr_in a = {.sin_family = AF_INET,
                                .sin_port = htons((uint16_t)port),
                                .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
        if (connect(fd, (struct sockaddr *)&a, sizeof a) == 0) return fd;
        close(fd);
        usleep(20 * 1000);
    }
    cr_assert_fail("rank 0 never listened on port %d", port);
    return -1;
}

Test(rendezvous, a_taken_port_is_one_line, .timeout = 20) {
    Meeting m;
    meeting_open(&m, 8, 1.0);
    int fd = listen_elsewhere(m.port);
    start(&m, 0, 2);
    finish(&m, now());
    close(fd);
    expect_failed_saying(&m, 0, "rank 0 cannot listen on port");
    expect_failed_saying(&m, 0, "Address already in use");
    meeting_close(&m);
}

Test(rendezvous, a_stray_connection_is_not_a_rank, .timeout = 20) {
    Meeting m;
    meeting_open(&m, 128, 10.0);
    double t0 = now();
    start(&m, 0, 2);
    int fd = connect_when_listening(m.port); /* something that is not fsdp talks to rank 0 first */
    const char *junk = "GET / HTTP/1.0\r\nHost: x\r\n\r\n";
    cr_assert_eq(write(fd, junk, strlen(junk)), (ssize_t)strlen(junk));
    start(&m, 1, 2);
    finish(&m, t0);
    close(fd);
    expect_all_got_the_blob(&m);
    meeting_close(&m);
}
