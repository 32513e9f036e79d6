/* output_path: which paths a command may write. An output replaces only a regular file (or makes
 * a new one): never a device, a FIFO, a socket or a directory, never a file the same command
 * reads, never another of its outputs. Commands check their paths with this before any work. */
#ifndef FSDP_OUTPUT_PATH_H
#define FSDP_OUTPUT_PATH_H

#include <stddef.h>

#include "base/err.h"

/* A path a command names, with the flag that named it ("--save-full"). NULL paths are skipped. */
typedef struct NamedPath {
    const char *flag;
    const char *path;
} NamedPath;

/* The folder path names a file in: "." for a bare name, "/" for one in the root. */
void path_folder(const char *path, char *out, size_t n);

/* What kind of thing stands at path, when it is not a regular file: "a character device", "a
 * FIFO", "a directory", ... (following symbolic links); NULL for a regular file or nothing. */
const char *output_path_obstacle(const char *path);

/* The outputs may be written: each is a regular file or not there yet (else an error naming the
 * flag, the path and what stands there), none is one of the inputs or another output, by the
 * same file on disk or the same name. ERR_USAGE, one line. */
int output_paths_check(const NamedPath *outputs, size_t n_outputs, const NamedPath *inputs,
                       size_t n_inputs, Err *err);

#endif
