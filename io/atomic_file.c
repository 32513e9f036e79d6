/* atomic_file: an output file written beside its final name and renamed into place only when
 * complete, so an error or a crash never leaves a partial file nor clobbers the old one. */
#include "io/atomic_file.h"

#include <unistd.h>

int atomic_open(AtomicFile *o, const char *path, Err *err) {
    o->path = path;
    o->f = NULL;
    if (!path) return 0;
    if (snprintf(o->tmp, sizeof o->tmp, "%s.tmp.%ld", path, (long)getpid()) >= (int)sizeof o->tmp)
        return err_set(err, ERR_USAGE, "output path is too long: %s", path);
    o->f = fopen(o->tmp, "w");
    if (!o->f) return err_set(err, ERR_USAGE, "cannot write %s", path);
    return 0;
}

int atomic_commit(AtomicFile *o, Err *err) {
    if (!o->f) return 0;
    int bad = fclose(o->f) != 0;
    o->f = NULL;
    if (bad || rename(o->tmp, o->path) != 0) {
        unlink(o->tmp);
        return err_set(err, ERR_IO, "could not write %s", o->path);
    }
    return 0;
}

void atomic_discard(AtomicFile *o) {
    if (!o->f) return;
    fclose(o->f);
    o->f = NULL;
    unlink(o->tmp);
}
