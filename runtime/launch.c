/* launch: starting, watching and stopping the ranks of `fsdp launch` (runtime/launch.h). */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>
#ifdef __linux__
#include <sys/prctl.h>
#endif

#include "runtime/launch.h"
#include "runtime/tcp.h"

/* Each rank runs in a process group of its own, so that stopping a rank stops what it started too
 * (`sh -c 'sleep 30'` leaves a sleep behind if only the shell is signalled). The launcher learns of
 * exits and of its own signals through handlers that write to a pipe, not through blocked signals
 * and sigwait: fsdp links OpenBLAS, whose thread starts at load time and would take (and drop) any
 * signal the main thread blocks. */

/* The launcher's own signals, passed on to the ranks. */
static const int FORWARDED[] = {SIGINT, SIGTERM, SIGHUP};
enum { NFORWARDED = sizeof FORWARDED / sizeof *FORWARDED };

/* The write end of the wake-up pipe: a signal handler can reach nothing but a global. */
static int wake_fd = -1;

static void on_signal(int sig) {
    int saved = errno;
    unsigned char b = (unsigned char)sig;
    ssize_t ignored = write(wake_fd, &b, 1); /* full: wake-ups are waiting already */
    (void)ignored;
    errno = saved;
}

/* In a new child: the launcher's handlers (and its pipe) are not the child's business. */
static void drop_handlers(void) {
    for (int i = 0; i <= NFORWARDED; i++) {
        int sig = i < NFORWARDED ? FORWARDED[i] : SIGCHLD;
        struct sigaction sa;
        if (sigaction(sig, NULL, &sa) == 0 && sa.sa_handler == on_signal) signal(sig, SIG_DFL);
    }
    close(wake_fd);
}

typedef struct Rank {
    pid_t pid;       /* also its process group */
    int running;     /* not reaped yet */
    int group_empty; /* nothing of its group is left (never signal the id again) */
} Rank;

/* One start of the N ranks, and how it ended. */
typedef struct Group {
    const LaunchArgs *a;
    FILE *log;
    int wake_read; /* the read end of the wake-up pipe */
    int restart;   /* TORCHELASTIC_RESTART_COUNT */
    Rank *ranks;   /* [nproc_per_node], by local rank */
    int running;
    int stopping;       /* the ranks have been told to stop */
    int killed;         /* ... and have had SIGKILL */
    double kill_at;     /* when SIGKILL goes out */
    int failed_rank;    /* the first rank that failed, -1 for none */
    int failed_status;  /* its wait status */
    int stopped_by_sig; /* the signal the launcher got and passed on; 0 for none */
} Group;

static int global_rank(const Group *g, int local) {
    return g->a->node_rank * g->a->nproc_per_node + local;
}

static const char *signal_name(int sig, char *buf, size_t n) {
    const char *abbrev = sigabbrev_np(sig);
    if (abbrev)
        snprintf(buf, n, "SIG%s", abbrev);
    else
        snprintf(buf, n, "signal %d", sig);
    return buf;
}

/* ---------------------------------------------------------------- each rank's environment */

/* The variables torchrun sets for a worker, by the names torch/distributed/elastic/agent/
 * server/local_elastic_agent.py (_start_workers) gives them, for the one role torchrun runs
 * by default ("default"), so that ROLE_RANK = RANK and ROLE_WORLD_SIZE = WORLD_SIZE. Left out:
 * TORCHELASTIC_RUN_ID and TORCHELASTIC_USE_AGENT_STORE (there is no agent store here: rank 0
 * serves the rendezvous), TORCH_NCCL_ASYNC_ERROR_HANDLING and OMP_NUM_THREADS (PyTorch's
 * own settings). */
enum { NVARS = 13, VAR_TEXT = 320 };

typedef struct RankEnv {
    char **envp;
    char text[NVARS][VAR_TEXT];
} RankEnv;

static void rank_vars(const Group *g, int local, RankEnv *e) {
    const LaunchArgs *a = g->a;
    int rank = global_rank(g, local), world = a->nnodes * a->nproc_per_node;
    int i = 0;
#define SET(name, fmt, value) snprintf(e->text[i++], VAR_TEXT, name "=" fmt, value)
    SET("RANK", "%d", rank);
    SET("WORLD_SIZE", "%d", world);
    SET("LOCAL_RANK", "%d", local);
    SET("LOCAL_WORLD_SIZE", "%d", a->nproc_per_node);
    SET("GROUP_RANK", "%d", a->node_rank);
    SET("GROUP_WORLD_SIZE", "%d", a->nnodes);
    SET("ROLE_RANK", "%d", rank);
    SET("ROLE_WORLD_SIZE", "%d", world);
    SET("ROLE_NAME", "%s", "default");
    SET("MASTER_ADDR", "%s", a->master_addr);
    SET("MASTER_PORT", "%d", a->master_port);
    SET("TORCHELASTIC_RESTART_COUNT", "%d", g->restart);
    SET("TORCHELASTIC_MAX_RESTARTS", "%d", a->max_restarts);
#undef SET
}

/* Whether environ's entry is one of the variables we set ("NAME=..."). */
static int is_ours(const RankEnv *e, const char *entry) {
    for (int i = 0; i < NVARS; i++) {
        size_t len = strcspn(e->text[i], "=") + 1;
        if (!strncmp(entry, e->text[i], len)) return 1;
    }
    return 0;
}

/* This process's environment with the rank's variables in place of any inherited ones. Built
 * before fork: the child of a threaded process should only exec. */
static int rank_env_build(RankEnv *e, const Group *g, int local) {
    extern char **environ;
    size_t n = 0, k = 0;
    while (environ[n]) n++;
    rank_vars(g, local, e);
    e->envp = malloc((n + NVARS + 1) * sizeof *e->envp);
    if (!e->envp) return ERR_NOMEM;
    for (size_t i = 0; i < n; i++)
        if (!is_ours(e, environ[i])) e->envp[k++] = environ[i];
    for (int i = 0; i < NVARS; i++) e->envp[k++] = e->text[i];
    e->envp[k] = NULL;
    return 0;
}

/* ---------------------------------------------------------------- starting and stopping */

#ifdef __linux__
/* ---------------------------------------------------------------- the keeper
 *
 * Each rank is a small keeper process and the command under it, in the keeper's process group.
 * The keeper goes when the launcher goes (even by SIGKILL: a parent-death signal) and it adopts
 * what the command leaves (a child subreaper), so a process the command started that left the
 * group (setsid) comes back to the keeper once the command is gone. When the command ends, or
 * the keeper is told to stop, it stops what is left: SIGTERM, a grace, then SIGKILL, and ends
 * as the command ended. */

static volatile sig_atomic_t keeper_stop; /* a signal handler can reach nothing but a global */

static void on_keeper_signal(int sig) {
    keeper_stop = sig;
}

/* Signals what is left of the rank: the keeper's group and every process it adopted (whose
 * parent it now is); whether any is left. */
static int signal_leftovers(int sig) {
    pid_t self = getpid();
    int any = 0;
    DIR *d = opendir("/proc");
    struct dirent *e;
    while (d && (e = readdir(d))) {
        char *end, path[300], line[512];
        long pid = strtol(e->d_name, &end, 10);
        if (*end || pid <= 1 || pid == self) continue;
        snprintf(path, sizeof path, "/proc/%ld/stat", pid);
        FILE *f = fopen(path, "r");
        if (!f) continue;
        char *paren = fgets(line, sizeof line, f) ? strrchr(line, ')') : NULL;
        fclose(f);
        long ppid = 0, pgrp = 0;
        if (!paren || sscanf(paren + 1, " %*c %ld %ld", &ppid, &pgrp) != 2) continue;
        if (ppid == self || pgrp == self) {
            kill((pid_t)pid, sig);
            any = 1;
        }
    }
    if (d) closedir(d);
    return any;
}

/* Reaps every child that has ended; the command's status into *status when it is among them. */
static int reap_kept(pid_t command, int *status) {
    int done = 0, st;
    for (pid_t pid; (pid = waitpid(-1, &st, WNOHANG)) > 0;)
        if (pid == command) *status = st, done = 1;
    return done;
}

/* The keeper's life: start the command, wait for it (passing on a stop), stop what it left,
 * end as it ended. */
static void exec_command(const Group *g, int local, char **envp);

static void on_keeper_child(int sig) {
    (void)sig; /* only to wake sigsuspend: the loop reaps */
}

static void keep_rank(const Group *g, int local, char **envp, const sigset_t *mask) {
    prctl(PR_SET_CHILD_SUBREAPER, 1);
    struct sigaction sa = {.sa_handler = on_keeper_signal}, child = {.sa_handler = on_keeper_child};
    sigemptyset(&sa.sa_mask);
    sigemptyset(&child.sa_mask);
    for (int i = 0; i < NFORWARDED; i++) sigaction(FORWARDED[i], &sa, NULL);
    sigaction(SIGCHLD, &child, NULL);
    /* every signal is still blocked (since the launcher's fork): the keeper lets them in only
     * inside sigsuspend, so none comes between looking at keeper_stop and waiting */
    pid_t pid = fork();
    if (pid == 0) {
        for (int i = 0; i < NFORWARDED; i++) signal(FORWARDED[i], SIG_DFL);
        signal(SIGCHLD, SIG_DFL);
        pthread_sigmask(SIG_SETMASK, mask, NULL);
        exec_command(g, local, envp);
    }
    if (pid < 0) _exit(126);
    double grace_s = g->a->kill_after_s;
    int status = 0, ended = 0, passed = 0;
    while (!ended) {
        if (keeper_stop && !passed) { /* the launcher's word, or its death: to the whole rank */
            signal_leftovers(keeper_stop);
            passed = 1;
        }
        ended = reap_kept(pid, &status);
        if (!ended) sigsuspend(mask); /* until a child ends or a stop comes */
    }
    pthread_sigmask(SIG_SETMASK, mask, NULL);
    /* the command is gone: what it left gets SIGTERM, the grace, then SIGKILL */
    double waited = 0;
    for (int sig = SIGTERM; signal_leftovers(sig) && waited < grace_s + 2;) {
        usleep(50 * 1000);
        waited += 0.05;
        reap_kept(pid, &status);
        sig = waited < grace_s ? 0 : SIGKILL; /* 0: only whether any is left */
    }
    if (WIFSIGNALED(status)) {
        signal(WTERMSIG(status), SIG_DFL);
        raise(WTERMSIG(status));
    }
    _exit(WIFEXITED(status) ? WEXITSTATUS(status) : 1);
}
#endif

/* Runs the rank's command in this process; one line and exit 127 or 126 where it cannot. */
static void exec_command(const Group *g, int local, char **envp) {
    char **command = g->a->command;
    execvpe(command[0], command, envp);
    int e = errno;
    char msg[600];
    int n = snprintf(msg, sizeof msg, "fsdp launch: rank %d: cannot run '%s': %s\n",
                     global_rank(g, local), command[0],
                     e == ENOENT ? "not found" : "not an executable file");
    ssize_t ignored = write(2, msg, n > 0 && (size_t)n < sizeof msg ? (size_t)n : 0);
    (void)ignored;
    _exit(e == ENOENT ? 127 : 126);
}

/* In the child: the launcher's handlers gone before any signal gets through (they were all
 * blocked across fork), its own process group, gone with the launcher, then (under the keeper,
 * on Linux) the command. */
static void exec_rank(const Group *g, int local, char **envp, pid_t launcher,
                      const sigset_t *mask) {
    drop_handlers();
    setpgid(0, 0);
#ifdef __linux__
    prctl(PR_SET_PDEATHSIG, SIGTERM); /* the launcher died, even by SIGKILL: stop too */
    if (getppid() != launcher) _exit(1);
    keep_rank(g, local, envp, mask);
#else
    (void)launcher;
    pthread_sigmask(SIG_SETMASK, mask, NULL);
    exec_command(g, local, envp);
#endif
}

static int start_rank(Group *g, int local, Err *err) {
    RankEnv *e = malloc(sizeof *e);
    if (!e || rank_env_build(e, g, local)) {
        free(e);
        return err_set(err, ERR_NOMEM, "out of memory");
    }
    fflush(NULL); /* or the child would print the launcher's buffered output again */
    sigset_t all, mask;
    sigfillset(&all);
    pthread_sigmask(SIG_SETMASK, &all, &mask);
    pid_t launcher = getpid(), pid = fork();
    if (pid == 0) exec_rank(g, local, e->envp, launcher, &mask);
    int saved = errno;
    pthread_sigmask(SIG_SETMASK, &mask, NULL);
    free(e->envp);
    free(e);
    if (pid < 0)
        return err_set(err, ERR_IO, "cannot start rank %d: %s", global_rank(g, local),
                       strerror(saved));
    setpgid(pid, pid); /* the child does too: whichever runs first, the group exists now */
    g->ranks[local] = (Rank){.pid = pid, .running = 1};
    g->running++;
    return 0;
}

/* Sends sig to every rank's process group (ranks already reaped too: what they started). */
static void signal_groups(Group *g, int sig) {
    for (int i = 0; i < g->a->nproc_per_node; i++) {
        Rank *r = &g->ranks[i];
        if (r->pid > 0 && !r->group_empty && kill(-r->pid, sig) != 0 && errno == ESRCH)
            r->group_empty = 1;
    }
}

static void begin_stop(Group *g, int sig) {
    g->stopping = 1;
    g->kill_at = clock_seconds() + g->a->kill_after_s;
    signal_groups(g, sig);
}

static void kill_now(Group *g) {
    signal_groups(g, SIGKILL);
    g->killed = 1;
}

/* Whether anything of a rank's group is still alive once the ranks themselves are gone: what
 * they started gets the same grace before SIGKILL. */
static int groups_alive(Group *g) {
    int alive = 0;
    for (int i = 0; i < g->a->nproc_per_node; i++) {
        Rank *r = &g->ranks[i];
        if (r->pid <= 0 || r->group_empty) continue;
        if (kill(-r->pid, 0) == 0 || errno != ESRCH)
            alive = 1;
        else
            r->group_empty = 1;
    }
    return alive;
}

/* ---------------------------------------------------------------- waiting */

static void report_failure(Group *g, int local, int status) {
    char name[32];
    g->failed_rank = global_rank(g, local);
    g->failed_status = status;
    if (WIFEXITED(status))
        fprintf(g->log, "fsdp launch: rank %d exited with status %d\n", g->failed_rank,
                WEXITSTATUS(status));
    else
        fprintf(g->log, "fsdp launch: rank %d was killed by %s\n", g->failed_rank,
                signal_name(WTERMSIG(status), name, sizeof name));
    fflush(g->log);
}

/* Collects every exit there is; the first failure stops the others. Processes that are not
 * ranks are what the ranks left behind (the launcher adopts them): reaped and forgotten. */
static void reap(Group *g) {
    int status;
    for (pid_t pid; (pid = waitpid(-1, &status, WNOHANG)) > 0;) {
        int local = -1;
        for (int i = 0; i < g->a->nproc_per_node && local < 0; i++)
            if (g->ranks[i].pid == pid && g->ranks[i].running) local = i;
        if (local < 0) continue;
        g->ranks[local].running = 0;
        g->running--;
        if (g->stopping || (WIFEXITED(status) && WEXITSTATUS(status) == 0)) continue;
        report_failure(g, local, status);
        begin_stop(g, SIGTERM);
    }
}

/* A signal to the launcher: passed on to every rank; a second one is SIGKILL at once. */
static void on_launcher_signal(Group *g, int sig) {
    char name[32];
    if (g->stopped_by_sig) {
        fprintf(g->log, "fsdp launch: %s again: sending SIGKILL\n",
                signal_name(sig, name, sizeof name));
        kill_now(g);
        return;
    }
    g->stopped_by_sig = sig;
    fprintf(g->log, "fsdp launch: %s: passing it on to the %d rank%s\n",
            signal_name(sig, name, sizeof name), g->running, g->running == 1 ? "" : "s");
    fflush(g->log);
    if (g->stopping)
        signal_groups(g, sig);
    else
        begin_stop(g, sig);
}

/* Sleeps until a signal or the next deadline, then handles what the pipe says. */
static void wait_for_news(Group *g) {
    int ms = -1;
    if (g->stopping && !g->killed) {
        ms = tcp_ms_until(g->kill_at);
        if (!g->running && ms > 20) ms = 20; /* leftovers send no SIGCHLD: look again soon */
    }
    struct pollfd p = {.fd = g->wake_read, .events = POLLIN};
    if (poll(&p, 1, ms) > 0) {
        unsigned char sigs[64];
        ssize_t n = read(g->wake_read, sigs, sizeof sigs);
        for (ssize_t i = 0; i < n; i++)
            if (sigs[i] != SIGCHLD) on_launcher_signal(g, sigs[i]);
    }
    reap(g);
    if (g->stopping && !g->killed && clock_seconds() >= g->kill_at) {
        char name[32];
        if (g->running)
            fprintf(
                g->log, "fsdp launch: %d rank%s still running %.1f s after %s: SIGKILL\n",
                g->running, g->running == 1 ? "" : "s", g->a->kill_after_s,
                signal_name(g->stopped_by_sig ? g->stopped_by_sig : SIGTERM, name, sizeof name));
        kill_now(g);
    }
}

static int run_group(Group *g, Err *err) {
    int rc = 0;
    for (int i = 0; !rc && i < g->a->nproc_per_node; i++) rc = start_rank(g, i, err);
    if (rc && !g->stopping) begin_stop(g, SIGTERM);
    while (g->running > 0 || (g->stopping && !g->killed && groups_alive(g))) wait_for_news(g);
    return rc;
}

/* ---------------------------------------------------------------- the job */

/* What the launcher changes about itself while the job runs, to put back afterwards. */
typedef struct Saved {
    struct sigaction chld, forwarded[NFORWARDED];
    int pipe[2];
} Saved;

static int install_handlers(Saved *s, Err *err) {
    if (pipe2(s->pipe, O_CLOEXEC | O_NONBLOCK) != 0)
        return err_set(err, ERR_IO, "pipe: %s", strerror(errno));
    wake_fd = s->pipe[1];
    struct sigaction sa = {.sa_handler = on_signal, .sa_flags = SA_RESTART | SA_NOCLDSTOP};
    sigemptyset(&sa.sa_mask);
    sigaction(SIGCHLD, &sa, &s->chld);
    for (int i = 0; i < NFORWARDED; i++) {
        sigaction(FORWARDED[i], NULL, &s->forwarded[i]);
        /* ignored on purpose (nohup, a background job): the ranks inherit that, the launcher too */
        if (s->forwarded[i].sa_handler != SIG_IGN) sigaction(FORWARDED[i], &sa, NULL);
    }
#ifdef __linux__
    /* What a rank leaves behind is re-parented to the launcher, which can then reap it and
     * see when a stopped group is really gone. */
    prctl(PR_SET_CHILD_SUBREAPER, 1);
#endif
    return 0;
}

static void restore_handlers(Saved *s) {
    sigaction(SIGCHLD, &s->chld, NULL);
    for (int i = 0; i < NFORWARDED; i++) sigaction(FORWARDED[i], &s->forwarded[i], NULL);
    wake_fd = -1;
    close(s->pipe[0]);
    close(s->pipe[1]);
}

static int exit_status_of(int wait_status) {
    return WIFEXITED(wait_status) ? WEXITSTATUS(wait_status) : 128 + WTERMSIG(wait_status);
}

int launch_run(const LaunchArgs *a, FILE *log, int *exit_status, Err *err) {
    Saved saved;
    int rc = install_handlers(&saved, err);
    if (rc) return rc;
    Rank *ranks = malloc((size_t)a->nproc_per_node * sizeof *ranks);
    if (!ranks) rc = err_set(err, ERR_NOMEM, "out of memory");
    for (int restart = 0; !rc; restart++) {
        memset(ranks, 0, (size_t)a->nproc_per_node * sizeof *ranks);
        Group g = {.a = a,
                   .log = log,
                   .wake_read = saved.pipe[0],
                   .restart = restart,
                   .ranks = ranks,
                   .failed_rank = -1};
        rc = run_group(&g, err);
        if (rc) break;
        if (g.stopped_by_sig) {
            *exit_status = 128 + g.stopped_by_sig;
            break;
        }
        if (g.failed_rank < 0) {
            *exit_status = 0;
            break;
        }
        if (restart < a->max_restarts) {
            if (a->nproc_per_node == 1)
                fprintf(log, "fsdp launch: restart %d of %d: starting the rank again\n",
                        restart + 1, a->max_restarts);
            else
                fprintf(log, "fsdp launch: restart %d of %d: starting the %d ranks again\n",
                        restart + 1, a->max_restarts, a->nproc_per_node);
            fflush(log);
            continue;
        }
        if (a->max_restarts)
            fprintf(log, "fsdp launch: no restarts left (%d used)\n", a->max_restarts);
        *exit_status = exit_status_of(g.failed_status);
        break;
    }
    free(ranks);
    restore_handlers(&saved);
    return rc;
}
