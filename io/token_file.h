/* token_file: a text's bytes (its byte-level tokens) in one file behind a header saying which
 * sources they came from, written once through a temporary file and a rename, then mapped
 * read-only by any number of processes at once. */
#ifndef FSDP_IO_TOKEN_FILE_H
#define FSDP_IO_TOKEN_FILE_H

#include <stddef.h>
#include <stdint.h>

#include "base/err.h"
#include "io/atomic_file.h"

/* The header's bytes; the tokens start there. */
#define TOKEN_FILE_HEADER 64

/* Where the bytes being gathered go: a token file being written (f set) or memory. */
typedef struct TokenSink {
    AtomicFile file; /* file.f NULL: memory */
    uint8_t *mem;
    size_t cap;
    long long bytes; /* tokens so far */
} TokenSink;

/* The cache folder ($FSDP_CACHE, else $XDG_CACHE_HOME/fsdp, else $HOME/.cache/fsdp), made if
 * missing, into out; non-zero (errno set) when there is none to be had. */
int token_cache_dir(char *out, size_t cap);

/* A sink writing the token file at path (0), or -1 with errno set. */
int token_sink_to_file(TokenSink *s, const char *path);
/* A sink gathering into memory. */
void token_sink_to_memory(TokenSink *s);
/* Appends n bytes; -1 (errno set) on a failed write or allocation. */
int token_sink_write(TokenSink *s, const void *bytes, size_t n);
/* Drops what came after the first `bytes` tokens (a source that turned out not to be text). */
int token_sink_truncate(TokenSink *s, long long bytes);
/* A file sink: writes the header (key, files), syncs and renames the file into place. Memory:
 * nothing to do. -1 (errno set) on failure, the temporary file removed. */
int token_sink_commit(TokenSink *s, uint64_t key, long files, long skipped);
/* Drops everything: the temporary file, the memory. */
void token_sink_abort(TokenSink *s);

/* A mapped token file: tokens[bytes], files and skipped as its header says. */
typedef struct TokenMap {
    const uint8_t *tokens;
    long long bytes;
    long files, skipped;
    void *base; /* the mapping, TOKEN_FILE_HEADER + bytes long */
} TokenMap;

/* Maps path read-only if it is a whole token file made from the sources `key` names: 0 and
 * *out set; 1 when it is missing, cut short or made from other sources (to be built anew); -1
 * (errno set) when it exists but cannot be read. */
int token_file_map(TokenMap *out, const char *path, uint64_t key);
/* Unmaps and frees a TokenMap made by token_map_owned (Dataset.release). */
void token_map_release(void *owned);
/* A heap copy of m for a Dataset to own, or NULL (then m is unmapped). */
void *token_map_owned(const TokenMap *m);

#endif
