/* token_file: the header (magic, sources' key, counts), the sink that gathers a text's bytes into
 * a new token file or into memory, and the read-only mapping every process shares. */
#include "io/token_file.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

static const char MAGIC[8] = {'F', 'S', 'D', 'P', 'T', 'O', 'K', '1'};

/* The header, little-endian on every machine this builds for; the rest of its 64 bytes zero. */
typedef struct Header {
    char magic[8];
    uint64_t key, bytes, files, skipped;
} Header;

_Static_assert(sizeof(Header) <= TOKEN_FILE_HEADER, "the header fits its bytes");

/* mkdir -p for the one or two levels a cache folder needs. */
static int make_dirs(char *path) {
    for (char *p = path + 1; *p; p++) {
        if (*p != '/') continue;
        *p = '\0';
        int bad = mkdir(path, 0755) != 0 && errno != EEXIST;
        *p = '/';
        if (bad) return -1;
    }
    return mkdir(path, 0755) != 0 && errno != EEXIST ? -1 : 0;
}

int token_cache_dir(char *out, size_t cap) {
    const char *own = getenv("FSDP_CACHE"), *xdg = getenv("XDG_CACHE_HOME"), *home = getenv("HOME");
    int n;
    if (own && own[0])
        n = snprintf(out, cap, "%s", own);
    else if (xdg && xdg[0])
        n = snprintf(out, cap, "%s/fsdp", xdg);
    else if (home && home[0])
        n = snprintf(out, cap, "%s/.cache/fsdp", home);
    else {
        errno = ENOENT;
        return -1;
    }
    if (n < 0 || (size_t)n >= cap) {
        errno = ENAMETOOLONG;
        return -1;
    }
    struct stat sb;
    if (make_dirs(out) != 0 || stat(out, &sb) != 0) return -1;
    if (!S_ISDIR(sb.st_mode)) {
        errno = ENOTDIR;
        return -1;
    }
    return 0;
}

int token_sink_to_file(TokenSink *s, const char *path) {
    memset(s, 0, sizeof *s);
    if (atomic_create(&s->file, path) != ATOMIC_OK) return -1;
    static const uint8_t zeros[TOKEN_FILE_HEADER];
    if (fwrite(zeros, 1, sizeof zeros, s->file.f) == sizeof zeros) return 0;
    token_sink_abort(s);
    return -1;
}

void token_sink_to_memory(TokenSink *s) {
    memset(s, 0, sizeof *s);
}

int token_sink_write(TokenSink *s, const void *bytes, size_t n) {
    if (s->file.f) {
        if (fwrite(bytes, 1, n, s->file.f) != n) return -1;
    } else {
        size_t need = (size_t)s->bytes + n;
        if (need > s->cap) {
            size_t grown = s->cap ? 2 * s->cap : (size_t)1 << 22;
            while (grown < need) grown *= 2;
            uint8_t *more = realloc(s->mem, grown);
            if (!more) return -1;
            s->mem = more, s->cap = grown;
        }
        memcpy(s->mem + s->bytes, bytes, n);
    }
    s->bytes += (long long)n;
    return 0;
}

int token_sink_truncate(TokenSink *s, long long bytes) {
    s->bytes = bytes;
    if (!s->file.f) return 0;
    off_t at = (off_t)(TOKEN_FILE_HEADER + bytes);
    if (fflush(s->file.f) != 0 || ftruncate(fileno(s->file.f), at) != 0) return -1;
    return fseeko(s->file.f, at, SEEK_SET);
}

int token_sink_commit(TokenSink *s, uint64_t key, long files, long skipped) {
    if (!s->file.f) return 0;
    Header h = {.key = key,
                .bytes = (uint64_t)s->bytes,
                .files = (uint64_t)files,
                .skipped = (uint64_t)skipped};
    memcpy(h.magic, MAGIC, sizeof MAGIC);
    if (fseeko(s->file.f, 0, SEEK_SET) != 0 || fwrite(&h, sizeof h, 1, s->file.f) != 1) {
        token_sink_abort(s);
        return -1;
    }
    return atomic_finish(&s->file, 1) == ATOMIC_OK ? 0 : -1;
}

void token_sink_abort(TokenSink *s) {
    if (s->file.f) {
        fclose(s->file.f);
        unlink(s->file.tmp);
        s->file.f = NULL;
    }
    free(s->mem);
    s->mem = NULL;
}

/* The header of an open token file, if it is one made from `key` and as long as it says. */
static int header_matches(int fd, uint64_t key, off_t size, Header *h) {
    if (size < TOKEN_FILE_HEADER || pread(fd, h, sizeof *h, 0) != (ssize_t)sizeof *h) return 0;
    return !memcmp(h->magic, MAGIC, sizeof MAGIC) && h->key == key && h->bytes > 0 &&
           (off_t)h->bytes == size - TOKEN_FILE_HEADER;
}

int token_file_map(TokenMap *out, const char *path, uint64_t key) {
    memset(out, 0, sizeof *out);
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) return errno == ENOENT ? 1 : -1;
    struct stat sb;
    Header h;
    if (fstat(fd, &sb) != 0) {
        close(fd);
        return -1;
    }
    if (!header_matches(fd, key, sb.st_size, &h)) {
        close(fd);
        return 1;
    }
    void *base = mmap(NULL, (size_t)sb.st_size, PROT_READ, MAP_SHARED, fd, 0);
    int why = errno;
    close(fd); /* the mapping keeps the file */
    if (base == MAP_FAILED) {
        errno = why;
        return -1;
    }
    /* sequences are read in shuffled order: reading ahead would only fill memory */
    madvise(base, (size_t)sb.st_size, MADV_RANDOM);
    *out = (TokenMap){.tokens = (const uint8_t *)base + TOKEN_FILE_HEADER,
                      .bytes = (long long)h.bytes,
                      .files = (long)h.files,
                      .skipped = (long)h.skipped,
                      .base = base};
    return 0;
}

void token_map_release(void *owned) {
    TokenMap *m = owned;
    if (!m) return;
    munmap(m->base, (size_t)(TOKEN_FILE_HEADER + m->bytes));
    free(m);
}

void *token_map_owned(const TokenMap *m) {
    TokenMap *copy = malloc(sizeof *copy);
    if (copy)
        *copy = *m;
    else
        munmap(m->base, (size_t)(TOKEN_FILE_HEADER + m->bytes));
    return copy;
}
