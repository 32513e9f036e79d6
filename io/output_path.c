/* output_path: an output replaces only a regular file, never an input or another output of the
 * same command; checked on the paths' names and on the files they are. */
#include "io/output_path.h"

#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

const char *output_path_obstacle(const char *path) {
    struct stat st;
    if (!path || stat(path, &st) != 0 || S_ISREG(st.st_mode)) return NULL;
    if (S_ISDIR(st.st_mode)) return "a directory";
    if (S_ISCHR(st.st_mode)) return "a character device";
    if (S_ISBLK(st.st_mode)) return "a block device";
    if (S_ISFIFO(st.st_mode)) return "a FIFO";
    if (S_ISSOCK(st.st_mode)) return "a socket";
    return "not a regular file";
}

void path_folder(const char *path, char *out, size_t n) {
    const char *slash = strrchr(path, '/');
    if (!slash)
        snprintf(out, n, ".");
    else
        snprintf(out, n, "%.*s", (int)(slash - path + (slash == path)), path);
}

/* The name a path will have: its real path where it exists, else its folder's real path and its
 * last component (the folder may be missing too: then the path as given). Caller frees. */
static char *canonical_name(const char *path) {
    char *real = realpath(path, NULL);
    if (real) return real;
    const char *slash = strrchr(path, '/');
    char parent[PATH_MAX];
    path_folder(path, parent, sizeof parent);
    char *dir = realpath(parent, NULL);
    char *out = NULL;
    if (dir && asprintf(&out, "%s/%s", dir, slash ? slash + 1 : path) < 0) out = NULL;
    free(dir);
    return out ? out : strdup(path);
}

/* Whether a and b name the same file: the same inode where both exist, else the same name. */
static int same_file(const char *a, const char *b) {
    struct stat sa, sb;
    if (stat(a, &sa) == 0 && stat(b, &sb) == 0)
        return sa.st_dev == sb.st_dev && sa.st_ino == sb.st_ino;
    char *ca = canonical_name(a), *cb = canonical_name(b);
    int same = ca && cb && !strcmp(ca, cb);
    free(ca);
    free(cb);
    return same;
}

int output_paths_check(const NamedPath *outputs, size_t n_outputs, const NamedPath *inputs,
                       size_t n_inputs, Err *err) {
    for (size_t i = 0; i < n_outputs; i++) {
        const NamedPath *o = &outputs[i];
        if (!o->path) continue;
        const char *obstacle = output_path_obstacle(o->path);
        if (obstacle && !strcmp(obstacle, "a directory")) /* the wording every writer had */
            return err_set(err, ERR_USAGE, "%s %s is a directory; give a file", o->flag, o->path);
        if (obstacle)
            return err_set(err, ERR_USAGE, "%s '%s' is %s; an output replaces only a regular file",
                           o->flag, o->path, obstacle);
        for (size_t j = 0; j < n_inputs; j++)
            if (inputs[j].path && same_file(o->path, inputs[j].path))
                return err_set(err, ERR_USAGE,
                               "%s '%s' is the file %s reads; write the output elsewhere", o->flag,
                               o->path, inputs[j].flag);
        for (size_t j = 0; j < i; j++)
            if (outputs[j].path && same_file(o->path, outputs[j].path))
                return err_set(err, ERR_USAGE, "%s and %s both name '%s'; give each its own file",
                               outputs[j].flag, o->flag, o->path);
    }
    return 0;
}
