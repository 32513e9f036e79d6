/* text: the files a --text names (one file, or a folder's text files in path order), read through
 * zlib (a .gz decompressed, a plain file as it is) into a token file once, then mapped as a
 * byte-level Dataset of sequences, with one line for each way it can be wrong. */
#include "io/text.h"

#include "io/output_path.h"

#include <dirent.h>
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <zlib.h>

#include "io/token_file.h"

#define READ_CHUNK (1u << 20) /* bytes a gzread call asks for */

const char *text_path(const char *flag_value) {
    if (flag_value && flag_value[0]) return flag_value;
    const char *env = getenv("FSDP_TEXT");
    return env && env[0] ? env : TEXT_DEFAULT_PATH;
}

/* ---------------------------------------------------------------- the sources */

typedef struct Source {
    char *path;
    long long size;
    long long mtime_ns;
} Source;

typedef struct Sources {
    Source *at;
    long n, cap;
    int folder; /* path was a folder: files that are not text are left out */
} Sources;

static void sources_free(Sources *s) {
    for (long i = 0; i < s->n; i++) free(s->at[i].path);
    free(s->at);
    memset(s, 0, sizeof *s);
}

static int add_source(Sources *s, const char *root, const char *path, const struct stat *sb,
                      Err *err) {
    if (s->n == TEXT_MAX_FILES)
        return err_set(err, ERR_USAGE, "--text %s holds more than %d files", root, TEXT_MAX_FILES);
    if (s->n == s->cap) {
        long grown = s->cap ? 2 * s->cap : 64;
        Source *more = realloc(s->at, (size_t)grown * sizeof *more);
        if (!more) return err_set(err, ERR_NOMEM, "--text %s: out of memory listing it", root);
        s->at = more, s->cap = grown;
    }
    char *copy = strdup(path);
    if (!copy) return err_set(err, ERR_NOMEM, "--text %s: out of memory listing it", root);
    s->at[s->n++] = (Source){copy, (long long)sb->st_size,
                             (long long)sb->st_mtim.tv_sec * 1000000000LL + sb->st_mtim.tv_nsec};
    return 0;
}

/* Every regular file under dir, depth first; hidden names and symbolic links are not followed
 * (a folder of a package's files links the same file under two names). */
static int walk(Sources *s, const char *root, const char *dir, int depth, Err *err) {
    if (depth > 64) return err_set(err, ERR_USAGE, "--text %s: folders nest too deep", root);
    DIR *d = opendir(dir);
    if (!d)
        return err_set(err, ERR_USAGE, "--text %s: cannot read folder %s: %s", root, dir,
                       strerror(errno));
    int rc = 0;
    struct dirent *ent;
    while (!rc && (ent = readdir(d))) {
        if (ent->d_name[0] == '.') continue;
        char path[4096];
        struct stat sb;
        if (snprintf(path, sizeof path, "%s/%s", dir, ent->d_name) >= (int)sizeof path)
            rc = err_set(err, ERR_USAGE, "--text %s: a path under it is too long", root);
        else if (lstat(path, &sb) != 0)
            rc = err_set(err, ERR_USAGE, "--text %s: cannot read %s: %s", root, path,
                         strerror(errno));
        else if (S_ISDIR(sb.st_mode))
            rc = walk(s, root, path, depth + 1, err);
        else if (S_ISREG(sb.st_mode))
            rc = add_source(s, root, path, &sb, err);
    }
    closedir(d);
    return rc;
}

static int by_path(const void *a, const void *b) {
    return strcmp(((const Source *)a)->path, ((const Source *)b)->path);
}

static int list_sources(Sources *s, const char *path, Err *err) {
    memset(s, 0, sizeof *s);
    struct stat sb;
    if (stat(path, &sb) != 0)
        return err_set(err, ERR_USAGE, "--text %s: cannot open it: %s", path, strerror(errno));
    if (!S_ISDIR(sb.st_mode) && !S_ISREG(sb.st_mode)) /* a FIFO's open would block */
        return err_set(err, ERR_USAGE, "--text %s is %s; give a file or a folder of them", path,
                       output_path_obstacle(path));
    if (!S_ISDIR(sb.st_mode)) return add_source(s, path, path, &sb, err);
    s->folder = 1;
    int rc = walk(s, path, path, 0, err);
    if (!rc && s->n == 0)
        rc = err_set(err, ERR_USAGE, "--text %s: the folder holds no files", path);
    if (rc)
        sources_free(s);
    else
        qsort(s->at, (size_t)s->n, sizeof *s->at, by_path);
    return rc;
}

/* FNV-1a over the sources' paths, sizes and times: a source edited, added or removed makes
 * another key, so another token file. */
static uint64_t fnv(uint64_t h, const void *bytes, size_t n) {
    const uint8_t *p = bytes;
    for (size_t i = 0; i < n; i++) h = (h ^ p[i]) * 0x100000001b3ULL;
    return h;
}

static uint64_t sources_key(const Sources *s) {
    uint64_t h = fnv(0xcbf29ce484222325ULL, "fsdp text 1", 12);
    for (long i = 0; i < s->n; i++) {
        h = fnv(h, s->at[i].path, strlen(s->at[i].path) + 1);
        h = fnv(h, &s->at[i].size, sizeof s->at[i].size);
        h = fnv(h, &s->at[i].mtime_ns, sizeof s->at[i].mtime_ns);
    }
    return h;
}

/* ---------------------------------------------------------------- reading them */

/* zlib's message for the last error, and the Err it makes. */
static int gz_failed(gzFile gz, const char *root, const char *path, Err *err) {
    int errnum = Z_OK;
    const char *m = gzerror(gz, &errnum);
    if (errnum == Z_ERRNO)
        return err_set(err, ERR_USAGE, "--text %s: cannot read %s: %s", root, path,
                       strerror(errno));
    if (errnum == Z_MEM_ERROR)
        return err_set(err, ERR_NOMEM, "--text %s: out of memory in zlib", root);
    return err_set(err, ERR_USAGE, "--text %s: %s: gzip data is cut short or corrupt (zlib: %s)",
                   root, path, m);
}

/* One source's bytes onto the sink; *is_text 0 when the text is a folder and this file holds a
 * 0 byte (what it wrote is dropped again). */
static int read_source(TokenSink *sink, const Sources *s, const char *root, const char *path,
                       uint8_t *buf, int *is_text, Err *err) {
    *is_text = 1;
    gzFile gz = gzopen(path, "rb");
    if (!gz)
        return err_set(err, ERR_USAGE, "--text %s: cannot open %s: %s", root, path,
                       errno ? strerror(errno) : "out of memory");
    long long start = sink->bytes;
    int rc = 0;
    for (;;) {
        int got = gzread(gz, buf, READ_CHUNK);
        int errnum = Z_OK;
        if (got == 0) (void)gzerror(gz, &errnum); /* a .gz cut short ends without an error */
        if (got < 0 || (errnum != Z_OK && errnum != Z_STREAM_END))
            rc = gz_failed(gz, root, path, err);
        if (got <= 0) break;
        if (s->folder && memchr(buf, 0, (size_t)got)) {
            *is_text = 0;
            if (token_sink_truncate(sink, start) != 0)
                rc = err_set(err, ERR_IO, "--text %s: cannot write its token file: %s", root,
                             strerror(errno));
            break;
        }
        if (sink->bytes + got > TEXT_MAX_BYTES)
            rc = err_set(err, ERR_USAGE, "--text %s holds more than %lld bytes", root,
                         TEXT_MAX_BYTES);
        else if (token_sink_write(sink, buf, (size_t)got) != 0)
            rc = err_set(err, ERR_IO, "--text %s: cannot write its token file: %s", root,
                         strerror(errno));
        if (rc) break;
    }
    gzclose_r(gz);
    return rc;
}

/* Every source onto the sink, in order; the counts into info. */
static int gather(TokenSink *sink, const Sources *s, const char *root, TextInfo *info, Err *err) {
    uint8_t *buf = malloc(READ_CHUNK);
    if (!buf) return err_set(err, ERR_NOMEM, "--text %s: out of memory reading it", root);
    int rc = 0;
    for (long i = 0; i < s->n && !rc; i++) {
        int is_text = 1;
        rc = read_source(sink, s, root, s->at[i].path, buf, &is_text, err);
        if (is_text)
            info->files++;
        else
            info->skipped++;
    }
    free(buf);
    if (!rc && sink->bytes == 0)
        rc = s->folder && info->skipped
                 ? err_set(err, ERR_USAGE,
                           "--text %s holds no text: its files (%ld) each hold a 0 byte", root,
                           info->skipped)
                 : err_set(err, ERR_USAGE, "--text %s is empty", root);
    return rc;
}

/* ---------------------------------------------------------------- the data set */

/* The token file for these sources, built first if the cache lacks it: 0 and *map set; 1 when
 * there is no cache to use (info->why_not says why); else the error. */
static int map_cached(const Sources *s, const char *root, TokenMap *map, TextInfo *info, Err *err) {
    char dir[3800];
    if (token_cache_dir(dir, sizeof dir) != 0) {
        snprintf(info->why_not, sizeof info->why_not, "no cache folder: %s", strerror(errno));
        return 1;
    }
    uint64_t key = sources_key(s);
    snprintf(info->cache, sizeof info->cache, "%s/text-%016llx.tokens", dir,
             (unsigned long long)key);
    int found = token_file_map(map, info->cache, key);
    if (found == 0) info->from_cache = 1;
    if (found == -1) {
        snprintf(info->why_not, sizeof info->why_not, "cannot read %s: %s", info->cache,
                 strerror(errno));
        info->cache[0] = '\0';
    }
    if (found != 1) return found == 0 ? 0 : 1;
    TokenSink sink;
    if (token_sink_to_file(&sink, info->cache) != 0) {
        snprintf(info->why_not, sizeof info->why_not, "cannot write %s: %s", info->cache,
                 strerror(errno));
        info->cache[0] = '\0';
        return 1;
    }
    int rc = gather(&sink, s, root, info, err);
    if (rc) {
        token_sink_abort(&sink);
        return rc;
    }
    if (token_sink_commit(&sink, key, info->files, info->skipped) != 0 ||
        token_file_map(map, info->cache, key) != 0)
        return err_set(err, ERR_IO, "--text %s: cannot write its token file %s: %s", root,
                       info->cache, strerror(errno));
    return 0;
}

/* The sequences of `bytes` tokens at `tokens`, owned as the caller says. */
static int make_dataset(Dataset *out, const char *root, const uint8_t *tokens, long long bytes,
                        int seq, Err *err) {
    if (bytes < (long long)seq + 1)
        return err_set(err, ERR_USAGE,
                       "--text %s has %lld bytes; one sequence of --seq %d needs %d (each byte "
                       "predicts the one after it)",
                       root, bytes, seq, seq + 1);
    out->n = (long)((bytes - 1) / seq);
    out->in_elems = out->target_elems = (size_t)seq;
    out->text = tokens;
    out->classes = 256;
    return 0;
}

static int load_in_memory(Dataset *out, const Sources *s, const char *root, int seq, TextInfo *info,
                          Err *err) {
    TokenSink sink;
    token_sink_to_memory(&sink);
    int rc = gather(&sink, s, root, info, err);
    if (!rc) rc = make_dataset(out, root, sink.mem, sink.bytes, seq, err);
    if (rc) {
        token_sink_abort(&sink);
        return rc;
    }
    out->owned = sink.mem;
    info->bytes = sink.bytes;
    return 0;
}

int text_load(Dataset *out, const char *path, int seq, TextInfo *info, Err *err) {
    memset(out, 0, sizeof *out);
    TextInfo own;
    if (!info) info = &own;
    memset(info, 0, sizeof *info);
    Sources s;
    int rc = list_sources(&s, path, err);
    if (rc) return rc;
    TokenMap map;
    rc = map_cached(&s, path, &map, info, err);
    if (rc == 1)
        rc = load_in_memory(out, &s, path, seq, info, err);
    else if (rc == 0) {
        info->files = map.files, info->skipped = map.skipped, info->bytes = map.bytes;
        rc = make_dataset(out, path, map.tokens, map.bytes, seq, err);
        void *owned = token_map_owned(&map); /* unmaps where it cannot be had */
        if (!owned && !rc) rc = err_set(err, ERR_NOMEM, "--text %s: out of memory", path);
        if (rc)
            token_map_release(owned);
        else
            out->owned = owned, out->release = token_map_release;
    }
    sources_free(&s);
    if (rc) memset(out, 0, sizeof *out);
    return rc;
}
