/* fork, exec, read the pipe until it closes or the time is up. The child leads its own
 * process group so a time-out or Ctrl-C can kill it together with the processes it forked
 * (Criterion runs each test in a child of its own). */
#include "lessons/tool/lesson_proc.h"
#include "base/clock.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

/* Set by the SIGINT handler: the one piece of global state, as a signal handler needs. */
static volatile sig_atomic_t interrupted;

static void on_interrupt(int sig) {
    (void)sig;
    interrupted = 1;
}

void proc_catch_interrupt(void) {
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_interrupt;
    sigemptyset(&sa.sa_mask);
    sigaction(SIGINT, &sa, NULL); /* no SA_RESTART: poll returns EINTR at once */
}

int proc_was_interrupted(void) {
    return interrupted != 0;
}

static void child_exec(char *const argv[], char *const env[], int out_fd) {
    setpgid(0, 0);
    signal(SIGINT, SIG_DFL);
    for (int i = 0; env && env[i]; i++) putenv(env[i]); /* this process's own copy */
    /* A check is a Criterion program. When fsdp itself runs inside a Criterion test (the
     * lesson tests do), it inherits the sandbox's BXFI_MAP, and a check that sees it takes
     * itself for one of that test's sandboxed children and dies. */
    unsetenv("BXFI_MAP");
    int null_fd = open("/dev/null", O_RDONLY);
    if (null_fd >= 0) dup2(null_fd, STDIN_FILENO);
    dup2(out_fd, STDOUT_FILENO);
    dup2(out_fd, STDERR_FILENO);
    execvp(argv[0], argv);
    const char *msg = "cannot run ";
    (void)!write(STDERR_FILENO, msg, strlen(msg));
    (void)!write(STDERR_FILENO, argv[0], strlen(argv[0]));
    (void)!write(STDERR_FILENO, "\n", 1);
    _exit(127);
}

/* Appends what the pipe has, keeping at most PROC_OUTPUT_MAX bytes; 0 at end of file. */
static int read_some(int fd, ProcResult *out, size_t *cap) {
    char buf[8192];
    ssize_t n = read(fd, buf, sizeof buf);
    if (n < 0) return errno == EINTR ? 1 : 0;
    if (n == 0) return 0;
    size_t keep = (size_t)n;
    if (out->len + keep > PROC_OUTPUT_MAX) keep = PROC_OUTPUT_MAX - out->len;
    if (out->len + keep + 1 > *cap) {
        size_t grown = *cap * 2 > out->len + keep + 1 ? *cap * 2 : out->len + keep + 1;
        char *p = realloc(out->output, grown);
        if (!p) return 1; /* keep what we have; the rest is dropped */
        out->output = p;
        *cap = grown;
    }
    memcpy(out->output + out->len, buf, keep);
    out->len += keep;
    out->output[out->len] = 0;
    return 1;
}

int proc_run(char *const argv[], char *const env[], double timeout_s, ProcResult *out, Err *err) {
    memset(out, 0, sizeof *out);
    size_t cap = 4096;
    out->output = calloc(1, cap);
    if (!out->output) return err_set(err, ERR_NOMEM, "out of memory");
    int fds[2];
    if (pipe(fds) != 0) return err_set(err, ERR_IO, "cannot make a pipe: %s", strerror(errno));
    pid_t pid = fork();
    if (pid < 0) {
        close(fds[0]);
        close(fds[1]);
        return err_set(err, ERR_IO, "cannot start %s: %s", argv[0], strerror(errno));
    }
    if (pid == 0) child_exec(argv, env, fds[1]);
    setpgid(pid, pid); /* also here, so the group exists before we might kill it */
    close(fds[1]);
    double deadline = clock_seconds() + timeout_s;
    for (;;) {
        double left = deadline - clock_seconds();
        if (interrupted || left <= 0) {
            out->timed_out = !interrupted;
            out->interrupted = interrupted != 0;
            kill(-pid, SIGKILL);
            break;
        }
        struct pollfd p = {.fd = fds[0], .events = POLLIN};
        int ready = poll(&p, 1, (int)(left * 1000) + 1);
        if (ready < 0 && errno != EINTR) break;
        if (ready > 0 && !read_some(fds[0], out, &cap)) break;
    }
    close(fds[0]);
    int status = 0;
    while (waitpid(pid, &status, 0) < 0 && errno == EINTR) {
    }
    if (WIFEXITED(status)) out->exit_code = WEXITSTATUS(status);
    if (WIFSIGNALED(status)) out->signal = WTERMSIG(status);
    return 0;
}

void proc_result_free(ProcResult *r) {
    free(r->output);
    r->output = NULL;
}
