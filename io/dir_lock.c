/* dir_lock: flock(2) on the folder's own descriptor: the kernel drops the lock when the holder's
 * process ends (a kill included), so nothing stale can block a job, and /proc/locks says who
 * holds it. */
#include "io/dir_lock.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <unistd.h>

/* The pid holding a flock on the file st describes, from /proc/locks ("1: FLOCK ADVISORY WRITE
 * 4242 08:01:1234 0 EOF"); 0 where it cannot be told. */
static long holder_pid(const struct stat *st) {
    FILE *f = fopen("/proc/locks", "r");
    if (!f) return 0;
    char line[256];
    long pid = 0;
    while (!pid && fgets(line, sizeof line, f)) {
        char kind[16];
        long p;
        unsigned maj, min;
        unsigned long ino;
        if (sscanf(line, "%*s %15s %*s %*s %ld %x:%x:%lu", kind, &p, &maj, &min, &ino) == 5 &&
            !strcmp(kind, "FLOCK") && ino == (unsigned long)st->st_ino &&
            maj == major(st->st_dev) && min == minor(st->st_dev))
            pid = p;
    }
    fclose(f);
    return pid;
}

int dir_lock(DirLock *l, const char *flag, const char *dir, Err *err) {
    *l = (DirLock){0};
    int fd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (fd < 0)
        return err_set(err, ERR_USAGE, "%s %s: cannot open it: %s", flag, dir, strerror(errno));
    if (flock(fd, LOCK_EX | LOCK_NB) != 0) {
        int why = errno;
        struct stat st;
        long pid = why == EWOULDBLOCK && fstat(fd, &st) == 0 ? holder_pid(&st) : 0;
        close(fd);
        if (pid > 0)
            return err_set(err, ERR_USAGE,
                           "%s %s is in use by another job (pid %ld): one job at a time in a "
                           "folder",
                           flag, dir, pid);
        return err_set(err, ERR_USAGE, "%s %s is in use by another job: %s", flag, dir,
                       strerror(why));
    }
    *l = (DirLock){.held = 1, .fd = fd};
    return 0;
}

void dir_unlock(DirLock *l) {
    if (l->held) close(l->fd); /* closing lets the lock go */
    *l = (DirLock){0};
}
