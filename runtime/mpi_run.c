/* mpi_run: --backend mpi on the shared one-process-per-rank runner: where the rank comes from
 * (MPI_COMM_WORLD), which device (a host device) and which communicators (MPI's). */
#include "runtime/mpi_run.h"

#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "base/clock.h"
#include "kernels/cpu/cpu_ops.h"
#include "runtime/comm_mpi.h"
#include "runtime/rank_process.h"

int fsdp_mpi_available(char *why, size_t n) {
    int major = 0, minor = 0;
    MPI_Get_version(&major, &minor);
    snprintf(why, n, "MPI %d.%d", major, minor);
    return 1;
}

typedef struct MpiRank {
    HostDevice dev;
    MpiComm world;
} MpiRank;

static int mpi_join(void *self, int *rank, int *world, Err *err) {
    (void)self;
    int ready = 0;
    MPI_Initialized(&ready);
    if (!ready) {
        int provided;
        /* the engine calls MPI from this thread only */
        if (MPI_Init_thread(NULL, NULL, MPI_THREAD_FUNNELED, &provided) != MPI_SUCCESS)
            return err_set(err, ERR_INTERNAL, "MPI_Init failed");
    }
    MPI_Comm_rank(MPI_COMM_WORLD, rank);
    MPI_Comm_size(MPI_COMM_WORLD, world);
    return 0;
}

/* ---------------------------------------------------------------- when mpirun ends the job */

/* When a rank ends (an error, a signal, SIGKILL itself), mpirun stops the others with SIGTERM,
 * and with `mpirun -q` says nothing: the rank that failed may have said why, but one that was
 * killed cannot. So each rank knows the pids of its node's ranks, and the first survivor to see
 * one gone names it: a thread of each rank looks every 50 ms (so the line does not wait on
 * mpirun's SIGTERM, a second after the death, nor on a main thread that a disk write keeps from
 * its handler), and the SIGTERM handler looks too, in case the thread has not yet. Which rank
 * sees it first is the scheduler's choice, and a survivor that has already exited looks gone
 * too: so the first one claims the report by creating a file in mpirun's session folder for the
 * job (removed with it), while every other survivor is still running, and the rest see the claim
 * and stay quiet. Read by the thread and the handler only. */
static struct {
    int rank, world;
    pid_t *pid;           /* [world], 0 for ranks on other nodes */
    char claim_path[512]; /* "" outside mpirun: then the lowest rank still running reports */
} peers;

/* Appends the decimal digits of v to *at (async-signal-safe). */
static void put_number(char **at, long v) {
    char digits[24];
    int n = 0;
    do digits[n++] = (char)('0' + v % 10);
    while ((v /= 10) > 0);
    while (n) *(*at)++ = digits[--n];
}

static void put_text(char **at, const char *s) {
    while (*s) *(*at)++ = *s++;
}

/* nanosleep for ms milliseconds (async-signal-safe: the SIGTERM handler waits with it too). */
static void sleep_ms(long ms) {
    struct timespec t = {ms / 1000, (ms % 1000) * 1000000L};
    nanosleep(&t, NULL);
}

/* A rank of this node ends with an error it prints itself (it sent SIGUSR1 first): the others
 * then stay quiet when mpirun stops them, so the job's end is that rank's one line. */
static atomic_int peer_said_why; /* lock-free, so a handler may set it */

static void on_sigusr1(int sig) {
    (void)sig;
    atomic_store(&peer_said_why, 1);
}

static void tell_peers_this_rank_says_why(void) {
    for (int r = 0; r < peers.world; r++)
        if (r != peers.rank && peers.pid[r]) kill(peers.pid[r], SIGUSR1);
}

static int peer_gone(int r) {
    return r != peers.rank && peers.pid[r] && kill(peers.pid[r], 0) != 0;
}

/* Whether this rank reports the end: the first to claim it (open with O_EXCL is
 * async-signal-safe), or without a session folder the lowest rank still running. */
static int claim_the_report(int first_alive) {
    if (!peers.claim_path[0]) return first_alive == peers.rank;
    int fd = open(peers.claim_path, O_WRONLY | O_CREAT | O_EXCL, 0600);
    if (fd < 0) return 0;
    close(fd);
    return 1;
}

/* The first rank of this node that is gone, or -1; *first_alive the first that is not. */
static int first_gone(int *first_alive) {
    int gone = -1;
    *first_alive = -1;
    for (int r = 0; r < peers.world; r++) {
        if (peer_gone(r)) {
            if (gone < 0) gone = r;
        } else if (*first_alive < 0) {
            *first_alive = r;
        }
    }
    return gone;
}

/* Taken by whichever of this rank's watcher and SIGTERM handler goes to report first (a
 * lock-free flag: the handler may test it). */
static atomic_flag report_taken = ATOMIC_FLAG_INIT;

static void say_rank_ended(int gone) {
    char line[160], *at = line;
    put_text(&at, "fsdp: rank ");
    put_number(&at, gone);
    put_text(&at, " (pid ");
    put_number(&at, peers.pid[gone]);
    put_text(&at, ") has ended: mpirun stops the job\n");
    ssize_t wrote = write(STDERR_FILENO, line, (size_t)(at - line));
    (void)wrote; /* nothing more a dying rank can do */
}

/* The rank that reports on SIGTERM waits up to REPORT_WAIT_TICKS x REPORT_TICK_MS for the rank
 * that ended to be gone (its process reaped: until then kill(pid, 0) still finds it), and stays
 * REPORT_PAUSE_MS after its line (or the watcher's) so that mpirun reads it from the pipe before
 * the process ends (both seen under load: a job ended on SIGKILL with no line at all). */
enum { REPORT_WAIT_TICKS = 25, REPORT_TICK_MS = 20, REPORT_PAUSE_MS = 300 };

static void on_sigterm(int sig) {
    if (atomic_load(&peer_said_why)) _exit(128 + sig);
    if (atomic_flag_test_and_set(&report_taken)) {
        sleep_ms(REPORT_PAUSE_MS); /* the watcher's line, if it wrote one, reaches mpirun */
        _exit(128 + sig);
    }
    int first_alive, gone = first_gone(&first_alive);
    if (!claim_the_report(first_alive)) _exit(128 + sig);
    for (int i = 0; gone < 0 && i < REPORT_WAIT_TICKS; i++) {
        sleep_ms(REPORT_TICK_MS);
        gone = first_gone(&first_alive);
    }
    if (gone >= 0) {
        say_rank_ended(gone);
        sleep_ms(REPORT_PAUSE_MS); /* without a claim, the others also see this rank alive */
    }
    _exit(128 + sig);
}

/* The watcher: every WATCH_TICK_MS it looks for a rank of this node that is gone, and once it
 * sees one, waits WATCH_GRACE_MS (a rank that failed and says why sends SIGUSR1 before it ends:
 * then this one stays quiet), then reports as the handler would. It runs from the backend's open
 * to its close, which every rank passes before any ends without an error (mpi_close). */
enum { WATCH_TICK_MS = 50, WATCH_GRACE_MS = 100 };
static atomic_int watching;
static pthread_t watcher;
static int watcher_started;

static void *watch_peers_for_an_end(void *unused) {
    (void)unused;
    sigset_t all;
    sigfillset(&all);
    pthread_sigmask(SIG_BLOCK, &all, NULL); /* signals are the main thread's */
    while (atomic_load(&watching)) {
        sleep_ms(WATCH_TICK_MS);
        int first_alive;
        if (first_gone(&first_alive) < 0) continue;
        sleep_ms(WATCH_GRACE_MS);
        int gone = first_gone(&first_alive);
        if (!atomic_load(&watching) || atomic_load(&peer_said_why)) break;
        if (gone < 0) continue;
        if (!atomic_flag_test_and_set(&report_taken) && claim_the_report(first_alive))
            say_rank_ended(gone);
        break;
    }
    return NULL;
}

static void start_watcher(void) {
    atomic_store(&watching, 1);
    watcher_started = pthread_create(&watcher, NULL, watch_peers_for_an_end, NULL) == 0;
}

static void stop_watcher(void) {
    atomic_store(&watching, 0);
    if (watcher_started) pthread_join(watcher, NULL);
    watcher_started = 0;
}

/* Every rank's pid where it runs on this node (the same host name), then the handler. */
static int watch_peers(int rank, int world, Err *err) {
    struct {
        long pid;
        char host[64];
    } mine = {(long)getpid(), ""}, *all = calloc((size_t)world, sizeof mine);
    peers.pid = calloc((size_t)world, sizeof *peers.pid);
    if (!all || !peers.pid) {
        free(all);
        return err_set(err, ERR_NOMEM, "out of memory for the ranks' pids");
    }
    gethostname(mine.host, sizeof mine.host - 1);
    int rc =
        MPI_Allgather(&mine, sizeof mine, MPI_BYTE, all, sizeof mine, MPI_BYTE, MPI_COMM_WORLD);
    for (int r = 0; rc == MPI_SUCCESS && r < world; r++)
        if (!strcmp(all[r].host, mine.host)) peers.pid[r] = (pid_t)all[r].pid;
    free(all);
    if (rc != MPI_SUCCESS) return err_set(err, ERR_INTERNAL, "rank %d: MPI_Allgather failed", rank);
    peers.rank = rank;
    peers.world = world;
    const char *session = getenv("OMPI_MCA_orte_jobfam_session_dir"); /* Open MPI 4 */
    const char *job = getenv("OMPI_MCA_ess_base_jobid");
    if (session && job &&
        snprintf(peers.claim_path, sizeof peers.claim_path, "%s/fsdp-end-%s", session, job) >=
            (int)sizeof peers.claim_path)
        peers.claim_path[0] = 0;
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_sigterm;
    sigaction(SIGTERM, &sa, NULL);
    sa.sa_handler = on_sigusr1;
    sa.sa_flags = SA_RESTART; /* MPI's own waits go on */
    sigaction(SIGUSR1, &sa, NULL);
    start_watcher();
    return 0;
}

/* ---------------------------------------------------------------- the backend */

static int mpi_open(void *self, int rank, int world, const ClusterOptions *opt, TraceBuf *trace,
                    RankParts *p, Err *err) {
    MpiRank *m = self;
    device_host_init(&m->dev, rank, trace);
    int rc = comm_mpi_create(&m->world, MPI_COMM_WORLD, err);
    if (!rc) rc = watch_peers(rank, world, err);
    if (rc) return rc;
    /* one zero for every rank's trace, as near as a barrier makes it (clocks of different
     * machines need not agree) */
    MPI_Barrier(MPI_COMM_WORLD);
    m->dev.t0 = clock_seconds();
    m->world.dev = &m->dev;
    m->world.timeout = opt->timeout > 0 ? opt->timeout : 600;
    m->world.names = opt->unit_names;
    m->dev.progress = comm_mpi_progress;
    *p = (RankParts){.dev = &m->dev.base, .k = &kernels_cpu, .world = &m->world.base};
    return 0;
}

static int mpi_split(void *self, Comm *parent, int color, int key, Comm **out, Err *err) {
    (void)self;
    MpiComm *c = calloc(1, sizeof *c);
    if (!c) return err_set(err, ERR_NOMEM, "out of memory splitting a communicator");
    int rc = comm_mpi_split(c, parent->impl, color, key, err);
    if (rc) {
        free(c);
        return rc;
    }
    *out = &c->base;
    return 0;
}

/* The cores of this node shared by its ranks, as the simulator shares them between rank threads
 * (sim/cluster.c): a rank with more than one core to itself splits its kernels over a pool;
 * OpenBLAS itself stays single-threaded. */
static int threads_per_rank(void) {
    long cores = sysconf(_SC_NPROCESSORS_ONLN);
    int local = 1;
    MPI_Comm node;
    if (MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, 0, MPI_INFO_NULL, &node) ==
        MPI_SUCCESS) {
        MPI_Comm_size(node, &local);
        MPI_Comm_free(&node);
    }
    return cores > local ? (int)(cores / local) : 1;
}

/* Whether a rank that ends with error `rc` prints it: all do, but for a usage error or a
 * divergence, which every rank meets alike and rank 0 alone prints (cmd/train.c). Only a rank
 * that prints may tell the others to keep quiet: a silent rank that did could end a diverged
 * job with no line at all, rank 0 stopped by mpirun (and keeping quiet) before it printed. */
static int says_why(int rank, int rc) {
    return rank == 0 || (rc != ERR_USAGE && rc != ERR_DIVERGED);
}

/* A quiet rank (a usage error or a divergence: rank 0 prints it) ends only after rank 0 has.
 * mpirun stops the job as soon as one rank exits with an error: a quiet rank that exited first
 * had rank 0 stopped before its line, and the job ended on "rank N has ended" instead (seen under
 * load). So it waits: for mpirun's SIGTERM, sent once rank 0 has exited (rank 0's SIGUSR1 has
 * told this one to keep quiet then), for rank 0's process to be gone where it shares this node,
 * or at most QUIET_RANK_WAIT_S where neither can come (a launcher that lets the others run). */
enum { QUIET_RANK_WAIT_S = 30, QUIET_TICK_MS = 20 };

static void wait_for_rank_0_to_say_why(void) {
    for (int i = 0; i < QUIET_RANK_WAIT_S * 1000 / QUIET_TICK_MS && !peer_gone(0); i++)
        sleep_ms(QUIET_TICK_MS);
}

static int mpi_rank_main(void *self, const RankEnv *env, RankMain fn, void *arg, Err *err) {
    (void)self;
    kernels_cpu_set_threads(1);
    int threads = threads_per_rank();
    CpuPool *pool = threads > 1 ? cpu_pool_create(threads) : NULL;
    kernels_cpu_use_pool(pool);
    int rc = fn(env, arg, err);
    if (rc && says_why(env->rank, rc)) tell_peers_this_rank_says_why();
    if (rc && !says_why(env->rank, rc)) wait_for_rank_0_to_say_why();
    kernels_cpu_use_pool(NULL);
    cpu_pool_destroy(pool);
    return rc;
}

static void mpi_close_comm(void *self, Comm *c) {
    (void)self;
    comm_mpi_destroy(c->impl);
    free(c->impl);
}

static void mpi_close(void *self, RankParts *p) {
    MpiRank *m = self;
    stop_watcher();
    if (p->world) comm_mpi_destroy(&m->world);
    signal(SIGTERM, SIG_DFL);
    signal(SIGUSR1, SIG_IGN); /* a peer that fails later must not end this process */
    free(peers.pid);
    peers.pid = NULL;
    peers.world = 0;
}

int fsdp_mpi_run(const ClusterOptions *opt, RankMain fn, void *arg, ClusterResult *out, Err *err) {
    MpiRank m;
    memset(&m, 0, sizeof m);
    RankBackend b = {
        .name = "mpi", .start = "mpirun -np N (or srun)", .self = &m, RANK_BACKEND_NAMED(mpi)};
    int rc = rank_process_run(&b, opt, fn, arg, out, err);
    /* no rank ends before every rank's watcher has stopped: it would be seen gone */
    if (!rc) MPI_Barrier(MPI_COMM_WORLD);
    if (!rc) MPI_Finalize();
    return rc;
}
