/* text: a text file read whole (through zlib, so a .gz is decompressed and a plain file read as
 * it is) into a byte-level Dataset of sequences, with one line for each way it can be wrong. */
#include "io/text.h"

#include <errno.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <zlib.h>

#define READ_CHUNK (1u << 20) /* bytes a gzread call asks for */

const char *text_path(const char *flag_value) {
    return flag_value && flag_value[0] ? flag_value : TEXT_DEFAULT_PATH;
}

/* zlib's message for the last error, and the Err it makes. */
static int gz_failed(gzFile gz, const char *path, Err *err) {
    int errnum = Z_OK;
    const char *m = gzerror(gz, &errnum);
    if (errnum == Z_ERRNO)
        return err_set(err, ERR_USAGE, "--text %s: cannot read it: %s", path, strerror(errno));
    if (errnum == Z_MEM_ERROR)
        return err_set(err, ERR_NOMEM, "--text %s: out of memory in zlib", path);
    return err_set(err, ERR_USAGE, "--text %s: gzip data is cut short or corrupt (zlib: %s)", path,
                   m);
}

/* Reads the whole stream into a buffer that grows as it fills (a .gz does not say its size);
 * *bytes its length. */
static int read_all(gzFile gz, const char *path, uint8_t **out, size_t *bytes, Err *err) {
    size_t cap = 0, n = 0;
    uint8_t *buf = NULL;
    for (;;) {
        if (cap - n < READ_CHUNK) {
            size_t grown = cap ? 2 * cap : 4 * (size_t)READ_CHUNK;
            uint8_t *more = realloc(buf, grown);
            if (!more) {
                free(buf);
                return err_set(err, ERR_NOMEM, "--text %s: out of memory reading it", path);
            }
            buf = more, cap = grown;
        }
        int got = gzread(gz, buf + n, READ_CHUNK);
        if (got < 0) {
            free(buf);
            return gz_failed(gz, path, err);
        }
        n += (size_t)got;
        if (n > (size_t)TEXT_MAX_BYTES) {
            free(buf);
            return err_set(err, ERR_USAGE, "--text %s holds more than %ld bytes", path,
                           TEXT_MAX_BYTES);
        }
        if (got == 0) break;
    }
    *out = buf;
    *bytes = n;
    return 0;
}

int text_load(Dataset *out, const char *path, int seq, Err *err) {
    memset(out, 0, sizeof *out);
    struct stat sb;
    if (stat(path, &sb) != 0)
        return err_set(err, ERR_USAGE, "--text %s: cannot open it: %s", path, strerror(errno));
    if (S_ISDIR(sb.st_mode))
        return err_set(err, ERR_USAGE, "--text %s is a directory; give a text file", path);
    gzFile gz = gzopen(path, "rb");
    if (!gz)
        return err_set(err, ERR_USAGE, "--text %s: cannot open it: %s", path,
                       errno ? strerror(errno) : "out of memory");
    uint8_t *bytes = NULL;
    size_t n = 0;
    int rc = read_all(gz, path, &bytes, &n, err);
    gzclose_r(gz);
    if (rc) return rc;
    if (n == 0)
        rc = err_set(err, ERR_USAGE, "--text %s is empty", path);
    else if (n < (size_t)seq + 1)
        rc = err_set(err, ERR_USAGE,
                     "--text %s has %zu bytes; one sequence of --seq %d needs %d (each byte "
                     "predicts the one after it)",
                     path, n, seq, seq + 1);
    if (rc) {
        free(bytes);
        return rc;
    }
    out->n = (long)((n - 1) / (size_t)seq);
    out->in_elems = out->target_elems = (size_t)seq;
    out->text = bytes;
    out->classes = 256;
    out->owned = bytes;
    return 0;
}
