/* atomic_file: an output file written beside its final name and renamed into place only when
 * complete, so an error or a crash never leaves a partial file nor clobbers the old one. */
#include "io/atomic_file.h"

#include <errno.h>
#include <fcntl.h>
#include <unistd.h>

#include "io/output_path.h"

/* An unnamed file in path's folder, open for writing (NULL where O_TMPFILE is not had: an old
 * kernel, a file system without it). */
static FILE *open_unnamed(const char *path) {
    char dir[4096];
    path_folder(path, dir, sizeof dir);
    int fd = open(dir, O_TMPFILE | O_WRONLY | O_CLOEXEC, 0666);
    if (fd < 0) return NULL;
    FILE *f = fdopen(fd, "w");
    if (!f) close(fd);
    return f;
}

/* Gives the unnamed file its temporary name, to be renamed onto the path: through /proc (linkat
 * with AT_EMPTY_PATH needs a privilege; this needs none). */
static int name_unnamed(AtomicFile *o) {
    char self[64];
    snprintf(self, sizeof self, "/proc/self/fd/%d", fileno(o->f));
    unlink(o->tmp); /* one an earlier process of this pid left */
    return linkat(AT_FDCWD, self, AT_FDCWD, o->tmp, AT_SYMLINK_FOLLOW);
}

AtomicStatus atomic_create(AtomicFile *o, const char *path) {
    o->path = path;
    o->f = NULL;
    o->unnamed = 0;
    if (snprintf(o->tmp, sizeof o->tmp, "%s.tmp.%ld", path, (long)getpid()) >= (int)sizeof o->tmp) {
        errno = ENAMETOOLONG;
        return ATOMIC_PATH_TOO_LONG;
    }
    if (output_path_obstacle(path)) return ATOMIC_NOT_REGULAR;
    if ((o->f = open_unnamed(path))) {
        o->unnamed = 1;
        return ATOMIC_OK;
    }
    o->f = fopen(o->tmp, "w");
    return o->f ? ATOMIC_OK : ATOMIC_CANNOT_CREATE;
}

AtomicStatus atomic_finish(AtomicFile *o, int sync) {
    int bad = ferror(o->f) != 0;
    if (sync || o->unnamed) bad = fflush(o->f) != 0 || bad; /* every byte in before it is named */
    if (sync) bad = fsync(fileno(o->f)) != 0 || bad;
    if (!bad && o->unnamed) bad = name_unnamed(o) != 0;
    bad = fclose(o->f) != 0 || bad;
    o->f = NULL;
    AtomicStatus status = bad                             ? ATOMIC_CANNOT_WRITE
                          : output_path_obstacle(o->path) ? ATOMIC_NOT_REGULAR
                          : rename(o->tmp, o->path) != 0  ? ATOMIC_CANNOT_RENAME
                                                          : ATOMIC_OK;
    if (status != ATOMIC_OK) {
        int why = errno; /* the failed call's, not unlink's */
        unlink(o->tmp);
        errno = why;
    }
    return status;
}

int atomic_open(AtomicFile *o, const char *path, Err *err) {
    o->path = path;
    o->f = NULL;
    if (!path) return 0;
    switch (atomic_create(o, path)) {
    case ATOMIC_OK:
        return 0;
    case ATOMIC_PATH_TOO_LONG:
        return err_set(err, ERR_USAGE, "output path is too long: %s", path);
    case ATOMIC_NOT_REGULAR:
        return err_set(err, ERR_USAGE, "'%s' is %s; an output replaces only a regular file", path,
                       output_path_obstacle(path));
    default:
        return err_set(err, ERR_USAGE, "cannot write %s", path);
    }
}

int atomic_commit(AtomicFile *o, Err *err) {
    if (!o->f) return 0;
    AtomicStatus status = atomic_finish(o, 0);
    if (status == ATOMIC_NOT_REGULAR)
        return err_set(err, ERR_USAGE, "'%s' became %s while it was written; it is left as it is",
                       o->path, output_path_obstacle(o->path));
    if (status != ATOMIC_OK) return err_set(err, ERR_IO, "could not write %s", o->path);
    return 0;
}

void atomic_discard(AtomicFile *o) {
    if (!o->f) return;
    fclose(o->f);
    o->f = NULL;
    unlink(o->tmp);
}
