/* safetensors: the safetensors format, read and validated completely, and written beside its name
 * and renamed (io/atomic_file), all at once (st_write) or a tensor at a time (StWriter). */
#include "io/safetensors.h"

#include <cjson/cJSON.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "io/atomic_file.h"
#include "io/output_path.h"

#define ST_MAX_HEADER ((uint64_t)100 * 1000 * 1000) /* 100 MB, as the reference reader */
#define ST_MAX_INT ((double)(1ull << 53))           /* largest exactly representable in JSON */

static const struct {
    const char *name;
    size_t size;
} dtypes[] = {{"F32", 4}, {"BF16", 2}, {"F16", 2}, {"I32", 4}, {"I64", 8}, {"U8", 1}};

size_t st_dtype_size(const char *dtype) {
    if (!dtype) return 0;
    for (size_t i = 0; i < sizeof dtypes / sizeof dtypes[0]; i++)
        if (strcmp(dtype, dtypes[i].name) == 0) return dtypes[i].size;
    return 0;
}

/* numel = product of shape and nbytes = numel * elem, refusing overflow. */
static int shape_bytes(const int64_t *shape, int ndim, size_t elem, size_t *numel, size_t *nbytes) {
    size_t n = 1;
    for (int d = 0; d < ndim; d++) {
        if (shape[d] < 0) return -1;
        if (__builtin_mul_overflow(n, (size_t)shape[d], &n)) return -1;
    }
    if (__builtin_mul_overflow(n, elem, nbytes)) return -1;
    *numel = n;
    return 0;
}

static void shape_str(char *buf, size_t cap, const int64_t *shape, int ndim) {
    size_t len = 0;
    len += (size_t)snprintf(buf, cap, "[");
    for (int d = 0; d < ndim && len < cap; d++)
        len += (size_t)snprintf(buf + len, cap - len, "%s%lld", d ? "," : "", (long long)shape[d]);
    if (len < cap) snprintf(buf + len, cap - len, "]");
}

/* ---------------------------------------------------------------- reading */

void st_free(SafeTensors *st) {
    if (!st) return;
    free(st->tensors);
    free(st->data);
    for (int i = 0; i < st->n_meta; i++) {
        free(st->meta_keys[i]);
        free(st->meta_values[i]);
    }
    free(st->meta_keys);
    free(st->meta_values);
    memset(st, 0, sizeof *st);
}

/* A JSON number that is a whole number in [0, 2^53]. Returns 0, or -1 for negative, -2 for
 * anything else (not a number, fractional, too large). */
static int json_count(const cJSON *v, uint64_t *out) {
    if (!cJSON_IsNumber(v)) return -2;
    double d = v->valuedouble;
    if (d < 0) return -1;
    if (!(d <= ST_MAX_INT) || d != (double)(uint64_t)d) return -2;
    *out = (uint64_t)d;
    return 0;
}

static char *dup_str(const char *s) {
    size_t n = strlen(s) + 1;
    char *p = malloc(n);
    if (p) memcpy(p, s, n);
    return p;
}

static int parse_metadata(SafeTensors *st, const cJSON *meta, Err *err) {
    if (cJSON_IsNull(meta)) return 0;
    if (!cJSON_IsObject(meta))
        return err_set(err, ERR_IO, "%s: \"__metadata__\" is not a JSON object", st->path);
    int n = cJSON_GetArraySize(meta);
    st->meta_keys = calloc((size_t)n + 1, sizeof *st->meta_keys);
    st->meta_values = calloc((size_t)n + 1, sizeof *st->meta_values);
    if (!st->meta_keys || !st->meta_values)
        return err_set(err, ERR_NOMEM, "%s: out of memory for metadata", st->path);
    const cJSON *kv;
    cJSON_ArrayForEach(kv, meta) {
        if (!cJSON_IsString(kv))
            return err_set(err, ERR_IO, "%s: metadata value for '%s' is not a string", st->path,
                           kv->string);
        char *k = dup_str(kv->string), *v = dup_str(kv->valuestring);
        if (!k || !v) {
            free(k);
            free(v);
            return err_set(err, ERR_NOMEM, "%s: out of memory for metadata", st->path);
        }
        st->meta_keys[st->n_meta] = k;
        st->meta_values[st->n_meta] = v;
        st->n_meta++;
    }
    return 0;
}

static int parse_tensor(const SafeTensors *st, const cJSON *e, StTensor *t, Err *err) {
    const char *path = st->path;
    const char *name = e->string;
    if (strlen(name) >= ST_MAX_NAME)
        return err_set(err, ERR_IO, "%s: tensor name '%.40s...' is longer than %d bytes", path,
                       name, ST_MAX_NAME - 1);
    snprintf(t->name, sizeof t->name, "%s", name);
    if (!cJSON_IsObject(e))
        return err_set(err, ERR_IO, "%s: tensor '%s' is not a JSON object", path, name);

    const cJSON *dtype = cJSON_GetObjectItemCaseSensitive(e, "dtype");
    if (!dtype) return err_set(err, ERR_IO, "%s: tensor '%s' is missing \"dtype\"", path, name);
    if (!cJSON_IsString(dtype) || st_dtype_size(dtype->valuestring) == 0)
        return err_set(err, ERR_IO,
                       "%s: tensor '%s' has unknown dtype '%.16s' (known: F32 BF16 F16 I32 I64 U8)",
                       path, name, cJSON_IsString(dtype) ? dtype->valuestring : "(not a string)");
    snprintf(t->dtype, sizeof t->dtype, "%s", dtype->valuestring);
    size_t elem = st_dtype_size(t->dtype);

    const cJSON *shape = cJSON_GetObjectItemCaseSensitive(e, "shape");
    if (!shape) return err_set(err, ERR_IO, "%s: tensor '%s' is missing \"shape\"", path, name);
    if (!cJSON_IsArray(shape))
        return err_set(err, ERR_IO, "%s: tensor '%s' has a \"shape\" that is not a list", path,
                       name);
    int ndim = cJSON_GetArraySize(shape);
    if (ndim > ST_MAX_DIMS)
        return err_set(err, ERR_IO, "%s: tensor '%s' has %d dimensions, more than %d", path, name,
                       ndim, ST_MAX_DIMS);
    t->ndim = ndim;
    int d = 0;
    const cJSON *dim;
    cJSON_ArrayForEach(dim, shape) {
        uint64_t v = 0;
        int rc = json_count(dim, &v);
        if (rc == -1)
            return err_set(err, ERR_IO, "%s: tensor '%s' has a negative shape entry (%g)", path,
                           name, dim->valuedouble);
        if (rc != 0)
            return err_set(err, ERR_IO,
                           "%s: tensor '%s' has a shape entry that is not an integer in [0, 2^53]",
                           path, name);
        t->shape[d++] = (int64_t)v;
    }
    if (shape_bytes(t->shape, ndim, elem, &t->numel, &t->nbytes) != 0) {
        char s[96];
        shape_str(s, sizeof s, t->shape, ndim);
        return err_set(err, ERR_IO, "%s: tensor '%s' shape %s is too large (size overflows)", path,
                       name, s);
    }

    const cJSON *offs = cJSON_GetObjectItemCaseSensitive(e, "data_offsets");
    if (!offs)
        return err_set(err, ERR_IO, "%s: tensor '%s' is missing \"data_offsets\"", path, name);
    uint64_t begin = 0, end = 0;
    if (!cJSON_IsArray(offs) || cJSON_GetArraySize(offs) != 2 ||
        json_count(cJSON_GetArrayItem(offs, 0), &begin) != 0 ||
        json_count(cJSON_GetArrayItem(offs, 1), &end) != 0)
        return err_set(
            err, ERR_IO,
            "%s: tensor '%s' \"data_offsets\" is not a list of two non-negative integers", path,
            name);
    if (end < begin)
        return err_set(err, ERR_IO, "%s: tensor '%s' data_offsets end %llu < begin %llu", path,
                       name, (unsigned long long)end, (unsigned long long)begin);
    if (end > st->data_bytes)
        return err_set(err, ERR_IO,
                       "%s: tensor '%s' data_offsets [%llu, %llu] out of range: the data buffer "
                       "has %zu bytes",
                       path, name, (unsigned long long)begin, (unsigned long long)end,
                       st->data_bytes);
    if (end - begin != t->nbytes) {
        char s[96];
        shape_str(s, sizeof s, t->shape, ndim);
        return err_set(err, ERR_IO,
                       "%s: tensor '%s' data_offsets span %llu bytes but %s %s needs %zu", path,
                       name, (unsigned long long)(end - begin), t->dtype, s, t->nbytes);
    }
    t->offset = (size_t)begin;
    return 0;
}

typedef struct Span {
    size_t begin, end;
    int index;
} Span;

static int span_cmp(const void *a, const void *b) {
    const Span *x = a, *y = b;
    if (x->begin != y->begin) return x->begin < y->begin ? -1 : 1;
    if (x->end != y->end) return x->end < y->end ? -1 : 1;
    return x->index - y->index;
}

static int name_cmp(const void *a, const void *b) {
    return strcmp(*(const char *const *)a, *(const char *const *)b);
}

/* Every byte of the data buffer belongs to exactly one tensor, and names are unique. */
static int check_tiling(const SafeTensors *st, Err *err) {
    int rc = 0;
    Span *spans = malloc(sizeof *spans * ((size_t)st->n + 1));
    const char **names = malloc(sizeof *names * ((size_t)st->n + 1));
    if (!spans || !names) {
        rc = err_set(err, ERR_NOMEM, "%s: out of memory checking the header", st->path);
        goto done;
    }
    for (int i = 0; i < st->n; i++) {
        spans[i] = (Span){st->tensors[i].offset, st->tensors[i].offset + st->tensors[i].nbytes, i};
        names[i] = st->tensors[i].name;
    }
    qsort(names, (size_t)st->n, sizeof *names, name_cmp);
    for (int i = 1; i < st->n; i++)
        if (strcmp(names[i - 1], names[i]) == 0) {
            rc = err_set(err, ERR_IO, "%s: duplicate tensor name '%s'", st->path, names[i]);
            goto done;
        }
    qsort(spans, (size_t)st->n, sizeof *spans, span_cmp);
    size_t pos = 0;
    int prev = -1;
    for (int i = 0; i < st->n; i++) {
        const StTensor *t = &st->tensors[spans[i].index];
        if (spans[i].begin > pos) {
            rc = err_set(err, ERR_IO,
                         "%s: gap in the data buffer: bytes [%zu, %zu) before tensor '%s' belong "
                         "to no tensor",
                         st->path, pos, spans[i].begin, t->name);
            goto done;
        }
        if (spans[i].begin < pos) {
            rc = err_set(err, ERR_IO, "%s: tensor '%s' overlaps tensor '%s' in the data buffer",
                         st->path, t->name, st->tensors[prev].name);
            goto done;
        }
        pos = spans[i].end;
        prev = spans[i].index;
    }
    if (pos != st->data_bytes)
        rc = err_set(err, ERR_IO,
                     "%s: gap in the data buffer: %zu trailing bytes after the last tensor belong "
                     "to no tensor",
                     st->path, st->data_bytes - pos);
done:
    free(spans);
    free(names);
    return rc;
}

static int parse_header(SafeTensors *st, const char *json, Err *err) {
    const char *end = NULL;
    cJSON *root = cJSON_ParseWithOpts(json, &end, 1);
    if (!root) {
        size_t at = end ? (size_t)(end - json) : 0;
        return err_set(err, ERR_IO, "%s: header is not valid JSON (near byte %zu)", st->path, at);
    }
    int rc = 0;
    if (!cJSON_IsObject(root)) {
        rc = err_set(err, ERR_IO, "%s: header is not a JSON object", st->path);
        goto done;
    }
    int count = cJSON_GetArraySize(root);
    st->tensors = calloc((size_t)count + 1, sizeof *st->tensors);
    if (!st->tensors) {
        rc = err_set(err, ERR_NOMEM, "%s: out of memory for %d tensors", st->path, count);
        goto done;
    }
    const cJSON *e;
    cJSON_ArrayForEach(e, root) {
        if (strcmp(e->string, "__metadata__") == 0) {
            if (st->meta_keys) {
                rc = err_set(err, ERR_IO, "%s: \"__metadata__\" appears twice", st->path);
                goto done;
            }
            if ((rc = parse_metadata(st, e, err)) != 0) goto done;
            continue;
        }
        if ((rc = parse_tensor(st, e, &st->tensors[st->n], err)) != 0) goto done;
        st->n++;
    }
    rc = check_tiling(st, err);
done:
    cJSON_Delete(root);
    return rc;
}

static int read_all(FILE *f, void *buf, size_t n) {
    return n == 0 || fread(buf, 1, n, f) == n ? 0 : -1;
}

/* Reads the header of path and, with load_data, the data buffer too. */
static int st_load(SafeTensors *out, const char *path, int load_data, Err *err) {
    memset(out, 0, sizeof *out);
    snprintf(out->path, sizeof out->path, "%s", path);
    FILE *f = fopen(path, "rb");
    if (!f) return err_set(err, ERR_IO, "cannot open %s: %s", path, strerror(errno));
    char *json = NULL;
    int rc = 0;
    struct stat sb;
    if (fstat(fileno(f), &sb) != 0 || !S_ISREG(sb.st_mode)) {
        rc = err_set(err, ERR_IO, "%s: not a regular file", path);
        goto done;
    }
    uint64_t file_bytes = (uint64_t)sb.st_size;
    unsigned char len8[8];
    if (file_bytes < 8 || read_all(f, len8, 8) != 0) {
        rc =
            err_set(err, ERR_IO, "%s: file too short (%llu bytes) to hold the 8-byte header length",
                    path, (unsigned long long)file_bytes);
        goto done;
    }
    uint64_t header_len = 0;
    for (int i = 7; i >= 0; i--) header_len = header_len << 8 | len8[i];
    if (header_len > ST_MAX_HEADER) {
        rc = err_set(err, ERR_IO,
                     "%s: header length %llu is absurd (over 100 MB): not a safetensors "
                     "file?",
                     path, (unsigned long long)header_len);
        goto done;
    }
    if (header_len > file_bytes - 8) {
        rc = err_set(err, ERR_IO, "%s: header length %llu is larger than the file (%llu bytes)",
                     path, (unsigned long long)header_len, (unsigned long long)file_bytes);
        goto done;
    }
    json = malloc((size_t)header_len + 1);
    if (!json) {
        rc = err_set(err, ERR_NOMEM, "%s: out of memory for a %llu-byte header", path,
                     (unsigned long long)header_len);
        goto done;
    }
    if (read_all(f, json, (size_t)header_len) != 0) {
        rc = err_set(err, ERR_IO, "%s: cannot read the header: %s", path,
                     ferror(f) ? strerror(errno) : "unexpected end of file");
        goto done;
    }
    json[header_len] = '\0';
    if (strlen(json) != header_len) {
        rc = err_set(err, ERR_IO, "%s: header is not valid JSON (NUL byte at %zu)", path,
                     strlen(json));
        goto done;
    }
    out->data_bytes = (size_t)(file_bytes - 8 - header_len);
    out->data_start = (size_t)(8 + header_len);
    if (!load_data) {
        rc = parse_header(out, json, err);
        goto done;
    }
    /* aligned_alloc wants a size that is a multiple of the alignment. */
    out->data = aligned_alloc(64, (out->data_bytes + 63) / 64 * 64 + 64);
    if (!out->data) {
        rc = err_set(err, ERR_NOMEM, "%s: out of memory for %zu bytes of data", path,
                     out->data_bytes);
        goto done;
    }
    if (read_all(f, out->data, out->data_bytes) != 0) {
        rc = err_set(err, ERR_IO, "%s: cannot read the data: %s", path,
                     ferror(f) ? strerror(errno) : "unexpected end of file");
        goto done;
    }
    rc = parse_header(out, json, err);
done:
    free(json);
    fclose(f);
    if (rc != 0) st_free(out);
    return rc;
}

int st_read(SafeTensors *out, const char *path, Err *err) {
    return st_load(out, path, 1, err);
}

int st_open(SafeTensors *out, const char *path, Err *err) {
    return st_load(out, path, 0, err);
}

int st_read_bytes(const SafeTensors *st, const StTensor *t, size_t begin, size_t n, void *dst,
                  Err *err) {
    if (begin > t->nbytes || n > t->nbytes - begin)
        return err_set(err, ERR_INTERNAL, "%s: bytes %zu..%zu are outside %s", st->path, begin,
                       begin + n, t->name);
    if (st->data) {
        memcpy(dst, st->data + t->offset + begin, n);
        return 0;
    }
    int fd = open(st->path, O_RDONLY);
    if (fd < 0) return err_set(err, ERR_IO, "cannot open %s: %s", st->path, strerror(errno));
    size_t done = 0;
    while (done < n) {
        ssize_t got = pread(fd, (char *)dst + done, n - done,
                            (off_t)(st->data_start + t->offset + begin + done));
        if (got < 0 && errno == EINTR) continue;
        if (got <= 0) {
            int e = errno;
            close(fd);
            return err_set(err, ERR_IO, "%s: cannot read %s: %s", st->path, t->name,
                           got < 0 ? strerror(e) : "the file is shorter than its header says");
        }
        done += (size_t)got;
    }
    close(fd);
    return 0;
}

const StTensor *st_find(const SafeTensors *st, const char *name) {
    for (int i = 0; i < st->n; i++)
        if (strcmp(st->tensors[i].name, name) == 0) return &st->tensors[i];
    return NULL;
}

const void *st_data(const SafeTensors *st, const StTensor *t) {
    return st->data + t->offset;
}

int st_copy(const SafeTensors *st, const char *name, const char *dtype, void *dst, size_t numel,
            Err *err) {
    const StTensor *t = st_find(st, name);
    if (!t) return err_set(err, ERR_IO, "%s: no tensor named '%s'", st->path, name);
    if (strcmp(t->dtype, dtype) != 0)
        return err_set(err, ERR_IO, "%s: tensor '%s' is %s, expected %s", st->path, name, t->dtype,
                       dtype);
    if (t->numel != numel) {
        char s[96];
        shape_str(s, sizeof s, t->shape, t->ndim);
        return err_set(err, ERR_IO, "%s: tensor '%s' has shape %s (%zu elements), expected %zu",
                       st->path, name, s, t->numel, numel);
    }
    if (t->nbytes) memcpy(dst, st->data + t->offset, t->nbytes);
    return 0;
}

const char *st_metadata(const SafeTensors *st, const char *key) {
    for (int i = 0; i < st->n_meta; i++)
        if (strcmp(st->meta_keys[i], key) == 0) return st->meta_values[i];
    return NULL;
}

/* ---------------------------------------------------------------- writing */

/* need_data: every tensor with bytes must point at them (st_write; a streamed file gets its
 * data later). */
static int check_outputs(const char *path, const StTensorOut *tensors, int n,
                         const char *const *meta_kv, int n_meta, int need_data, size_t *sizes,
                         Err *err) {
    if (n < 0 || n_meta < 0 || (n > 0 && !tensors) || (n_meta > 0 && !meta_kv))
        return err_set(err, ERR_USAGE, "%s: bad tensor or metadata count", path);
    for (int i = 0; i < 2 * n_meta; i++)
        if (!meta_kv[i]) return err_set(err, ERR_USAGE, "%s: metadata entry %d is NULL", path, i);
    for (int i = 0; i < n_meta; i++)
        for (int j = 0; j < i; j++)
            if (strcmp(meta_kv[2 * i], meta_kv[2 * j]) == 0)
                return err_set(err, ERR_USAGE, "%s: duplicate metadata key '%s'", path,
                               meta_kv[2 * i]);
    for (int i = 0; i < n; i++) {
        const StTensorOut *t = &tensors[i];
        if (!t->name || !t->name[0] || strlen(t->name) >= ST_MAX_NAME ||
            strcmp(t->name, "__metadata__") == 0)
            return err_set(err, ERR_USAGE, "%s: tensor %d has an empty, reserved or too long name",
                           path, i);
        size_t elem = st_dtype_size(t->dtype);
        if (elem == 0)
            return err_set(err, ERR_USAGE, "%s: tensor '%s' has unknown dtype '%s'", path, t->name,
                           t->dtype ? t->dtype : "(null)");
        if (t->ndim < 0 || t->ndim > ST_MAX_DIMS || (t->ndim > 0 && !t->shape))
            return err_set(err, ERR_USAGE, "%s: tensor '%s' has %d dimensions (0..%d allowed)",
                           path, t->name, t->ndim, ST_MAX_DIMS);
        size_t numel = 0;
        for (int d = 0; d < t->ndim; d++)
            if (t->shape[d] < 0 || (double)t->shape[d] > ST_MAX_INT)
                return err_set(err, ERR_USAGE, "%s: tensor '%s' has shape entry %lld", path,
                               t->name, (long long)t->shape[d]);
        if (shape_bytes(t->shape, t->ndim, elem, &numel, &sizes[i]) != 0)
            return err_set(err, ERR_USAGE, "%s: tensor '%s' is too large", path, t->name);
        if (need_data && sizes[i] > 0 && !t->data)
            return err_set(err, ERR_USAGE, "%s: tensor '%s' has no data", path, t->name);
    }
    /* Unique names: the writer's inputs are small, quadratic is fine but sort anyway. */
    const char **names = malloc(sizeof *names * ((size_t)n + 1));
    if (!names) return err_set(err, ERR_NOMEM, "%s: out of memory", path);
    for (int i = 0; i < n; i++) names[i] = tensors[i].name;
    qsort(names, (size_t)n, sizeof *names, name_cmp);
    int rc = 0;
    for (int i = 1; i < n && rc == 0; i++)
        if (strcmp(names[i - 1], names[i]) == 0)
            rc = err_set(err, ERR_USAGE, "%s: duplicate tensor name '%s'", path, names[i]);
    free(names);
    return rc;
}

/* The header JSON, unformatted, or NULL when out of memory. */
static char *build_header(const StTensorOut *tensors, int n, const char *const *meta_kv, int n_meta,
                          const size_t *sizes) {
    cJSON *root = cJSON_CreateObject();
    if (!root) return NULL;
    int ok = 1;
    if (n_meta > 0) {
        cJSON *meta = cJSON_AddObjectToObject(root, "__metadata__");
        ok = meta != NULL;
        for (int i = 0; ok && i < n_meta; i++)
            ok = cJSON_AddStringToObject(meta, meta_kv[2 * i], meta_kv[2 * i + 1]) != NULL;
    }
    size_t offset = 0;
    for (int i = 0; ok && i < n; i++) {
        const StTensorOut *t = &tensors[i];
        cJSON *e = cJSON_AddObjectToObject(root, t->name);
        ok = e && cJSON_AddStringToObject(e, "dtype", t->dtype);
        cJSON *shape = ok ? cJSON_AddArrayToObject(e, "shape") : NULL;
        cJSON *offs = NULL;
        ok = ok && shape;
        for (int d = 0; ok && d < t->ndim; d++) {
            cJSON *v = cJSON_CreateNumber((double)t->shape[d]);
            ok = v && cJSON_AddItemToArray(shape, v);
        }
        if (ok) ok = (offs = cJSON_AddArrayToObject(e, "data_offsets")) != NULL;
        for (int k = 0; ok && k < 2; k++) {
            cJSON *v = cJSON_CreateNumber((double)(k == 0 ? offset : offset + sizes[i]));
            ok = v && cJSON_AddItemToArray(offs, v);
        }
        offset += sizes[i];
    }
    char *json = ok ? cJSON_PrintUnformatted(root) : NULL;
    cJSON_Delete(root);
    return json;
}

static int write_all(FILE *f, const void *buf, size_t n) {
    return n == 0 || fwrite(buf, 1, n, f) == n ? 0 : -1;
}

struct StWriter {
    char *path;
    AtomicFile out; /* the temporary file beside path, renamed onto it by the commit */
    size_t *sizes;
    int n, next; /* tensors in the header, and the next one to write */
};

void st_writer_abort(StWriter *w) {
    if (!w) return;
    atomic_discard(&w->out);
    free(w->sizes);
    free(w->path);
    free(w);
}

/* Creates the temporary file beside w->path and writes the length and the header. */
static int writer_start(StWriter *w, const char *json, Err *err) {
    const char *path = w->path;
    size_t json_len = strlen(json);
    size_t header_len = (json_len + 7) / 8 * 8; /* padded with spaces, as the spec allows */
    AtomicStatus created = atomic_create(&w->out, path);
    if (created == ATOMIC_PATH_TOO_LONG)
        return err_set(err, ERR_USAGE, "%.200s...: path too long", path);
    if (created == ATOMIC_NOT_REGULAR)
        return err_set(err, ERR_USAGE, "'%s' is %s; an output replaces only a regular file", path,
                       output_path_obstacle(path));
    if (created != ATOMIC_OK)
        return err_set(err, ERR_IO, "cannot create a temporary file next to %s: %s", path,
                       strerror(errno));
    FILE *f = w->out.f;
    unsigned char len8[8];
    for (int i = 0; i < 8; i++) len8[i] = (unsigned char)((uint64_t)header_len >> (8 * i));
    int bad = write_all(f, len8, 8) || write_all(f, json, json_len);
    for (size_t i = json_len; i < header_len && !bad; i++) bad = fputc(' ', f) == EOF;
    if (bad) return err_set(err, ERR_IO, "cannot write %s: %s", path, strerror(errno));
    return 0;
}

int st_writer_open(StWriter **out, const char *path, const StTensorOut *tensors, int n,
                   const char *const *meta_kv, int n_meta, Err *err) {
    *out = NULL;
    StWriter *w = calloc(1, sizeof *w);
    size_t len = path ? strlen(path) + 1 : 1;
    if (w) w->path = malloc(len);
    if (w && w->path) w->sizes = calloc((size_t)(n > 0 ? n : 0) + 1, sizeof *w->sizes);
    if (!w || !w->path || !w->sizes) {
        st_writer_abort(w);
        return err_set(err, ERR_NOMEM, "%s: out of memory", path ? path : "(null)");
    }
    memcpy(w->path, path ? path : "", len);
    w->n = n;
    char *json = NULL;
    int rc = check_outputs(path, tensors, n, meta_kv, n_meta, 0, w->sizes, err);
    if (!rc && !(json = build_header(tensors, n, meta_kv, n_meta, w->sizes)))
        rc = err_set(err, ERR_NOMEM, "%s: out of memory building the header", path);
    if (!rc) rc = writer_start(w, json, err);
    free(json);
    if (rc) {
        st_writer_abort(w);
        return rc;
    }
    *out = w;
    return 0;
}

int st_writer_tensor(StWriter *w, const void *data, Err *err) {
    if (w->next >= w->n)
        return err_set(err, ERR_INTERNAL, "%s: all %d tensors are written already", w->path, w->n);
    size_t bytes = w->sizes[w->next];
    if (bytes > 0 && !data)
        return err_set(err, ERR_USAGE, "%s: tensor %d has no data", w->path, w->next);
    if (write_all(w->out.f, data, bytes))
        return err_set(err, ERR_IO, "cannot write %s: %s", w->path, strerror(errno));
    w->next++;
    return 0;
}

int st_writer_commit(StWriter *w, Err *err) {
    int rc = 0;
    if (w->next != w->n) {
        rc =
            err_set(err, ERR_INTERNAL, "%s: %d of %d tensors were written", w->path, w->next, w->n);
    } else {
        AtomicStatus finished = atomic_finish(&w->out, 1);
        if (finished == ATOMIC_NOT_REGULAR)
            rc = err_set(err, ERR_USAGE, "'%s' became %s while it was written; it is left as it is",
                         w->path, output_path_obstacle(w->path));
        else if (finished == ATOMIC_CANNOT_RENAME)
            rc = err_set(err, ERR_IO, "cannot rename %s to %s: %s", w->out.tmp, w->path,
                         strerror(errno));
        else if (finished != ATOMIC_OK)
            rc = err_set(err, ERR_IO, "cannot write %s: %s", w->path, strerror(errno));
    }
    st_writer_abort(w); /* frees; the file is closed already unless the count was short */
    return rc;
}

int st_write(const char *path, const StTensorOut *tensors, int n, const char *const *meta_kv,
             int n_meta, Err *err) {
    size_t *sizes = calloc((size_t)(n > 0 ? n : 0) + 1, sizeof *sizes);
    if (!sizes) return err_set(err, ERR_NOMEM, "%s: out of memory", path);
    int rc = check_outputs(path, tensors, n, meta_kv, n_meta, 1, sizes, err);
    free(sizes);
    StWriter *w = NULL;
    if (!rc) rc = st_writer_open(&w, path, tensors, n, meta_kv, n_meta, err);
    for (int i = 0; !rc && i < n; i++) rc = st_writer_tensor(w, tensors[i].data, err);
    if (rc) {
        st_writer_abort(w);
        return rc;
    }
    return st_writer_commit(w, err);
}
