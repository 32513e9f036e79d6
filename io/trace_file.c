/* trace_file: a trace as one JSON file for two readers: "traceEvents" (Chrome Trace Event format)
 * for Perfetto, and the "fsdpTrace" object `fsdp viz --trace` replays exactly. */
#include "io/trace_file.h"

#include <cjson/cJSON.h>
#include <ctype.h>
#include <errno.h>
#include <float.h>
#include <limits.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "engine/device.h"
#include "io/utf8.h"

/* ---- Chrome Trace Event JSON -------------------------------------------------------------- */

/* A quote or a backslash escaped, a control character as JSON writes it (backslash, u, 00XX). */
static const char *json_escape(unsigned char c, char room[8]) {
    if (c == '"') return "\\\"";
    if (c == '\\') return "\\\\";
    if (c >= 0x20) return NULL;
    snprintf(room, 8, "\\u%04x", c);
    return room;
}

/* Writes s as the inside of a JSON string: quotes, backslashes and control characters
 * escaped, invalid UTF-8 replaced by U+FFFD. */
static void write_json_escaped(FILE *f, const char *str) {
    utf8_write_escaped(f, str, json_escape, "\\ufffd");
}

static const char *stream_name(int stream) {
    static const char *const names[STREAM_COUNT] = {"compute", "comm", "copy"};
    return (stream >= 0 && stream < STREAM_COUNT) ? names[stream] : "other";
}

static int is_memory_event(const TraceEvent *e) {
    return e->kind == EV_ALLOC || e->kind == EV_FREE;
}

/* Separates array elements: every element but the first is preceded by ",\n". */
static void begin_element(FILE *f, int *first) {
    fputs(*first ? "\n" : ",\n", f);
    *first = 0;
}

/* One process per rank ("GPU r") with one thread per stream, sorted so ranks and streams
 * appear in order in Perfetto. */
static void write_metadata(FILE *f, int nranks, int *first) {
    for (int r = 0; r < nranks; r++) {
        begin_element(f, first);
        fprintf(f,
                "{\"name\":\"process_name\",\"ph\":\"M\",\"pid\":%d,\"tid\":0,"
                "\"args\":{\"name\":\"GPU %d\"}}",
                r, r);
        begin_element(f, first);
        fprintf(f,
                "{\"name\":\"process_sort_index\",\"ph\":\"M\",\"pid\":%d,\"tid\":0,"
                "\"args\":{\"sort_index\":%d}}",
                r, r);
        for (int s = 0; s < STREAM_COUNT; s++) {
            begin_element(f, first);
            fprintf(f,
                    "{\"name\":\"thread_name\",\"ph\":\"M\",\"pid\":%d,\"tid\":%d,"
                    "\"args\":{\"name\":\"%s\"}}",
                    r, s, stream_name(s));
            begin_element(f, first);
            fprintf(f,
                    "{\"name\":\"thread_sort_index\",\"ph\":\"M\",\"pid\":%d,\"tid\":%d,"
                    "\"args\":{\"sort_index\":%d}}",
                    r, s, s);
        }
    }
}

/* Memory over time: one "memory" counter event per alloc/free whose args are every category's
 * bytes on that rank after the event (mem: the rank's running totals). Chrome draws the args
 * of one counter as stacked areas and Perfetto gives each category its own track; either way
 * the args add up to the event's mem_total. */
static void write_memory_counter(FILE *f, const TraceEvent *e, const size_t *mem) {
    fprintf(f, "{\"name\":\"memory\",\"ph\":\"C\",\"pid\":%d,\"tid\":0,\"ts\":%.3f,\"args\":{",
            e->rank, e->start * 1e6);
    for (int c = 0; c < MEM_CATEGORY_COUNT; c++)
        fprintf(f, "%s\"%s\":%zu", c ? "," : "", mem_category_name((MemCategory)c), mem[c]);
    fputs("}}", f);
}

/* Applies alloc/free event i to its rank's running totals (mem: [nranks * MEM_CATEGORY_COUNT]).
 * An event without a category, or a free of more than its category holds, means the backend
 * traced its memory wrongly: the counters would lie, so it is an error. */
/* Event i's memory change on its rank's row of mem (a rank's bytes per category). */
static int apply_memory_event(size_t *mem, const TraceEvent *e, size_t i, Err *err) {
    if (e->rank < 0) return err_set(err, ERR_INTERNAL, "trace event %zu has a negative rank", i);
    return trace_memory_apply(&mem[(size_t)e->rank * MEM_CATEGORY_COUNT], e, i, ERR_INTERNAL, err);
}

/* Replays every alloc and free once before anything is written, so a trace whose memory does
 * not add up fails without leaving half a file behind. Leaves mem zeroed for the writer. */
static int check_memory(const Trace *t, size_t *mem, size_t nmem, Err *err) {
    for (size_t i = 0; i < t->n; i++) {
        if (!is_memory_event(&t->ev[i])) continue;
        int rc = apply_memory_event(mem, &t->ev[i], i, err);
        if (rc) return rc;
    }
    memset(mem, 0, nmem * sizeof *mem);
    return 0;
}

static const char *unit_name_of(const TraceEvent *e, const TraceMeta *meta) {
    if (!meta || e->unit < 0 || e->unit >= meta->nunits) return NULL;
    return meta->units[e->unit];
}

static void write_span(FILE *f, const TraceEvent *e, const char *unit_name) {
    const char *kind = event_kind_name((EventKind)e->kind);
    double dur = e->end > e->start ? e->end - e->start : 0.0; /* Perfetto rejects dur < 0 */
    fprintf(f, "{\"name\":\"%s", kind);
    if (unit_name) {
        fputc(' ', f);
        write_json_escaped(f, unit_name);
    }
    fprintf(f, "\",\"cat\":\"%s\",\"ph\":\"X\",\"pid\":%d,\"tid\":%d,\"ts\":%.3f,\"dur\":%.3f,",
            kind, e->rank, e->stream, e->start * 1e6, dur * 1e6);
    fprintf(f, "\"args\":{\"unit\":%d,\"bytes\":%llu,\"phase\":\"%s\",\"step\":%d,\"micro\":%d}}",
            e->unit, e->bytes, phase_name((Phase)e->phase), e->step, e->micro);
}

/* "nan" and "inf" are not JSON: refuse them rather than write a file nobody can open. */
static int check_times(const Trace *t, Err *err) {
    for (size_t i = 0; i < t->n; i++) {
        if (!isfinite(t->ev[i].start) || !isfinite(t->ev[i].end))
            return err_set(err, ERR_INTERNAL, "trace event %zu (rank %d, %s) has a non-finite time",
                           i, t->ev[i].rank, event_kind_name((EventKind)t->ev[i].kind));
    }
    return 0;
}

static int nranks_in(const Trace *t) {
    int n = t->nranks;
    for (size_t i = 0; i < t->n; i++)
        if (t->ev[i].rank >= n) n = t->ev[i].rank + 1;
    return n;
}

/* ---- the fsdpTrace object: what a replay needs -------------------------------------------- */

/* The order of an event's fields in "events" rows; the file names them too. */
static const char *const event_fields[] = {"start", "end",  "seq",   "bytes",  "mem_total",
                                           "rank",  "kind", "unit",  "stream", "category",
                                           "phase", "step", "micro", "flags"};
enum { EVENT_FIELDS = sizeof event_fields / sizeof *event_fields };

static void write_string_array(FILE *f, char *const *s, int n) {
    fputc('[', f);
    for (int i = 0; i < n; i++) {
        fputs(i ? ",\"" : "\"", f);
        write_json_escaped(f, s[i]);
        fputc('"', f);
    }
    fputc(']', f);
}

/* Times with 17 significant digits so a replay rebuilds exactly the frames the run showed. */
static void write_event_row(FILE *f, const TraceEvent *e) {
    fprintf(f, "[%.17g,%.17g,%ld,%llu,%llu,%d,%d,%d,%d,%d,%d,%d,%d,%d]", e->start, e->end, e->seq,
            e->bytes, e->mem_total, e->rank, e->kind, e->unit, e->stream, e->category, e->phase,
            e->step, e->micro, e->flags);
}

/* Floats with 9 significant digits round-trip exactly; JSON has no NaN, so null stands in. */
static void write_floats(FILE *f, const char *name, const float *v, size_t n) {
    fprintf(f, ",\"%s\":[", name);
    for (size_t i = 0; i < n; i++) {
        if (i) fputc(',', f);
        if (isfinite(v[i]))
            fprintf(f, "%.9g", (double)v[i]);
        else
            fputs("null", f);
    }
    fputc(']', f);
}

static void write_fsdp_object(FILE *f, const Trace *t, const TraceMeta *meta, int nranks) {
    fprintf(f, "\"fsdpTrace\":{\"version\":%d,\"nranks\":%d,\"args\":", TRACE_FILE_VERSION, nranks);
    write_string_array(f, meta->args, meta->nargs);
    fputs(",\"units\":", f);
    write_string_array(f, meta->units, meta->nunits);
    if (t->measured) fputs(",\"clock\":\"measured\"", f);    /* absent: modelled */
    if (t->accounting_only) fputs(",\"computed\":false", f); /* absent: computed */
    fputs(",\"fields\":", f);
    write_string_array(f, (char *const *)event_fields, EVENT_FIELDS);
    fputs(",\"events\":[", f);
    for (size_t i = 0; i < t->n; i++) {
        fputs(i ? ",\n" : "\n", f);
        write_event_row(f, &t->ev[i]);
    }
    fputs("\n]", f);
    if (t->params && t->grads) {
        fprintf(f, ",\"steps\":%d,\"numel\":%zu", t->steps, t->numel);
        write_floats(f, "params", t->params, (size_t)(t->steps + 1) * t->numel);
        write_floats(f, "grads", t->grads, (size_t)t->steps * t->numel);
        /* each rank's own, before the average (a file from before them has none) */
        if (t->local_grads && nranks == t->nranks)
            write_floats(f, "local_grads", t->local_grads,
                         (size_t)t->steps * (size_t)nranks * t->numel);
    }
    fputs("},\n", f);
}

int trace_file_write(const Trace *t, const TraceMeta *meta, FILE *f, Err *err) {
    int rc = check_times(t, err);
    if (rc) return rc;
    int nranks = nranks_in(t);
    /* each rank's bytes by category so far, for the memory counters */
    size_t nmem = (size_t)nranks * MEM_CATEGORY_COUNT;
    size_t *mem = calloc(nmem ? nmem : 1, sizeof *mem);
    if (!mem)
        return err_set(err, ERR_NOMEM, "out of memory for the memory counters of %d ranks", nranks);
    if ((rc = check_memory(t, mem, nmem, err))) {
        free(mem);
        return rc;
    }
    int first = 1;
    errno = 0;
    /* fsdpTrace first: a replay parses only it, and stops before Chrome's events */
    fputc('{', f);
    if (meta) write_fsdp_object(f, t, meta, nranks);
    fputs("\"traceEvents\":[", f);
    write_metadata(f, nranks, &first);
    for (size_t i = 0; i < t->n; i++) {
        const TraceEvent *e = &t->ev[i];
        begin_element(f, &first);
        if (is_memory_event(e)) {
            (void)apply_memory_event(mem, e, i, err); /* check_memory replayed it: no error */
            write_memory_counter(f, e, &mem[(size_t)e->rank * MEM_CATEGORY_COUNT]);
        } else
            write_span(f, e, unit_name_of(e, meta));
    }
    fprintf(f,
            "\n],\n\"displayTimeUnit\":\"ms\",\n\"otherData\":{\"generator\":\"fsdp\","
            "\"nranks\":%d,\"events\":%zu,\"time_unit\":\"us\"}",
            nranks, t->n);
    fputs("}\n", f);
    free(mem);
    /* Buffered writes fail late (a full disk shows at flush), so flush before judging. */
    if (fflush(f) != 0 || ferror(f))
        return err_set(err, ERR_IO, "writing the trace failed: %s",
                       errno ? strerror(errno) : "write error");
    return 0;
}

/* ---- reading ------------------------------------------------------------------------------ */

void trace_meta_free(TraceMeta *m) {
    for (int i = 0; m->args && i < m->nargs; i++) free(m->args[i]);
    for (int i = 0; m->units && i < m->nunits; i++) free(m->units[i]);
    free(m->args);
    free(m->units);
    *m = (TraceMeta){0};
}

/* The whole file, NUL-terminated. */
/* The whole file, when it is a regular file of at most TRACE_FILE_MAX_BYTES: a directory, a
 * device (/dev/zero never ends) or a huge (perhaps sparse) file is refused by its size before
 * a byte is read. */
static int slurp(const char *path, char **out, size_t *len, Err *err) {
    FILE *f = fopen(path, "rb");
    if (!f) return err_set(err, ERR_USAGE, "cannot open trace '%s': %s", path, strerror(errno));
    struct stat st;
    int rc = 0;
    if (fstat(fileno(f), &st) || !S_ISREG(st.st_mode))
        rc = err_set(err, ERR_USAGE, "trace '%s' is not a regular file", path);
    else if ((unsigned long long)st.st_size > TRACE_FILE_MAX_BYTES)
        rc = err_set(err, ERR_USAGE, "trace '%s' is %lld bytes, more than the %llu a trace may be",
                     path, (long long)st.st_size, (unsigned long long)TRACE_FILE_MAX_BYTES);
    size_t n = rc ? 0 : (size_t)st.st_size;
    char *buf = rc ? NULL : malloc(n + 1);
    if (!rc && !buf) rc = err_set(err, ERR_NOMEM, "out of memory reading trace '%s'", path);
    if (!rc && fread(buf, 1, n, f) != n)
        rc = err_set(err, ERR_USAGE, "trace '%s' changed or could not be read while reading it",
                     path);
    fclose(f);
    if (rc) {
        free(buf);
        return rc;
    }
    buf[n] = 0;
    *out = buf;
    *len = n;
    return 0;
}

static int read_strings(const cJSON *arr, char ***out, int *n, const char *path, const char *what,
                        Err *err) {
    if (!cJSON_IsArray(arr))
        return err_set(err, ERR_USAGE, "trace '%s': \"%s\" is missing or not a list", path, what);
    int count = cJSON_GetArraySize(arr);
    *out = calloc((size_t)count + 1, sizeof **out);
    if (!*out) return err_set(err, ERR_NOMEM, "out of memory reading trace '%s'", path);
    const cJSON *item;
    cJSON_ArrayForEach(item, arr) {
        if (!cJSON_IsString(item))
            return err_set(err, ERR_USAGE, "trace '%s': \"%s\" holds a non-string", path, what);
        if (!((*out)[*n] = strdup(item->valuestring)))
            return err_set(err, ERR_NOMEM, "out of memory reading trace '%s'", path);
        (*n)++;
    }
    return 0;
}

/* An integer field in [lo, hi]; returns 0 or -1. The bounds are checked on the double, before
 * any cast: converting a double beyond a long's range is undefined (the fuzzer found one). */
static int int_field(const cJSON *v, long lo, long hi, long *out) {
    if (!cJSON_IsNumber(v)) return -1;
    double d = v->valuedouble;
    if (!(d >= (double)lo && d <= (double)hi && d == floor(d) && fabs(d) < 9e18)) return -1;
    *out = (long)d;
    return *out < lo || *out > hi ? -1 : 0;
}

/* Field ranges of an event row, in event_fields order (times checked apart). */
static int event_from_row(const cJSON *row, int nranks, int nunits, TraceEvent *e, int *bad) {
    const cJSON *f[EVENT_FIELDS];
    if (!cJSON_IsArray(row) || cJSON_GetArraySize(row) != EVENT_FIELDS) return *bad = -1, -1;
    int i = 0;
    const cJSON *item;
    cJSON_ArrayForEach(item, row) f[i++] = item;
    for (i = 0; i < 2; i++)
        if (!cJSON_IsNumber(f[i]) || !isfinite(f[i]->valuedouble)) return *bad = i, -1;
    const long lo[EVENT_FIELDS] = {0, 0, 0, 0, 0, 0, 0, -1, 0, -1, 0, 0, 0, 0};
    const long hi[EVENT_FIELDS] = {0,
                                   0,
                                   LONG_MAX,
                                   LONG_MAX,
                                   LONG_MAX,
                                   nranks - 1,
                                   EV_KIND_COUNT - 1,
                                   nunits - 1,
                                   STREAM_COUNT - 1,
                                   MEM_CATEGORY_COUNT - 1,
                                   PHASE_OPTIMIZER,
                                   TRACE_FILE_MAX_STEP,
                                   TRACE_FILE_MAX_STEP,
                                   EVENT_PREFETCH};
    long v[EVENT_FIELDS];
    for (i = 2; i < EVENT_FIELDS; i++)
        if (int_field(f[i], lo[i], hi[i], &v[i])) return *bad = i, -1;
    *e = (TraceEvent){.start = f[0]->valuedouble,
                      .end = f[1]->valuedouble,
                      .seq = v[2],
                      .bytes = (unsigned long long)v[3],
                      .mem_total = (unsigned long long)v[4],
                      .rank = (int)v[5],
                      .kind = (int)v[6],
                      .unit = (int)v[7],
                      .stream = (int)v[8],
                      .category = (int)v[9],
                      .phase = (int)v[10],
                      .step = (int)v[11],
                      .micro = (int)v[12],
                      .flags = (int)v[13]};
    return 0;
}

static int read_events(const cJSON *arr, Trace *t, int nunits, const char *path, Err *err) {
    if (!cJSON_IsArray(arr))
        return err_set(err, ERR_USAGE, "trace '%s': \"events\" is missing or not a list", path);
    size_t n = (size_t)cJSON_GetArraySize(arr);
    if (n && !(t->ev = malloc(n * sizeof *t->ev)))
        return err_set(err, ERR_NOMEM, "out of memory for %zu trace events", n);
    const cJSON *row;
    cJSON_ArrayForEach(row, arr) {
        int bad = 0;
        if (event_from_row(row, t->nranks, nunits, &t->ev[t->n], &bad))
            return err_set(err, ERR_USAGE, "trace '%s': event %zu: %s", path, t->n + 1,
                           bad < 0 ? "not a row of 14 numbers" : event_fields[bad]);
        t->n++;
    }
    return 0;
}

static int read_floats(const cJSON *arr, float **out, size_t n, const char *path, const char *what,
                       Err *err) {
    if (!cJSON_IsArray(arr) || (size_t)cJSON_GetArraySize(arr) != n)
        return err_set(err, ERR_USAGE, "trace '%s': \"%s\" must hold %zu values", path, what, n);
    if (!(*out = malloc((n ? n : 1) * sizeof **out)))
        return err_set(err, ERR_NOMEM, "out of memory reading trace '%s'", path);
    size_t i = 0;
    const cJSON *item;
    cJSON_ArrayForEach(item, arr) {
        if (!cJSON_IsNumber(item) && !cJSON_IsNull(item))
            return err_set(err, ERR_USAGE, "trace '%s': \"%s\" holds a non-number", path, what);
        if (cJSON_IsNumber(item) && !(fabs(item->valuedouble) <= FLT_MAX))
            return err_set(err, ERR_USAGE, "trace '%s': \"%s\" holds %g, beyond a float", path,
                           what, item->valuedouble);
        (*out)[i++] = cJSON_IsNull(item) ? NAN : (float)item->valuedouble;
    }
    return 0;
}

/* The optional per-step values: both lists or neither, and beside them, optional again (a file
 * written before they were recorded has none), each rank's own gradients before the average. */
static int read_values(const cJSON *o, Trace *t, const char *path, Err *err) {
    const cJSON *steps = cJSON_GetObjectItemCaseSensitive(o, "steps");
    const cJSON *numel = cJSON_GetObjectItemCaseSensitive(o, "numel");
    if (!steps && !numel) return 0;
    long s, n;
    if (int_field(steps, 0, 1 << 20, &s) || int_field(numel, 1, 1 << 20, &n))
        return err_set(err, ERR_USAGE, "trace '%s': \"steps\" or \"numel\" is out of range", path);
    t->steps = (int)s;
    t->numel = (size_t)n;
    int rc = read_floats(cJSON_GetObjectItemCaseSensitive(o, "params"), &t->params,
                         (size_t)(s + 1) * (size_t)n, path, "params", err);
    if (!rc)
        rc = read_floats(cJSON_GetObjectItemCaseSensitive(o, "grads"), &t->grads,
                         (size_t)s * (size_t)n, path, "grads", err);
    const cJSON *local = cJSON_GetObjectItemCaseSensitive(o, "local_grads");
    if (!rc && local)
        rc = read_floats(local, &t->local_grads, (size_t)s * (size_t)t->nranks * (size_t)n, path,
                         "local_grads", err);
    return rc;
}

static int read_fsdp_object(const cJSON *o, Trace *t, TraceMeta *m, const char *path, Err *err) {
    if (!cJSON_IsObject(o))
        return err_set(err, ERR_USAGE,
                       "'%s' is not an fsdp trace (no \"fsdpTrace\" object; traces come from "
                       "train --trace-out)",
                       path);
    long version, nranks;
    if (int_field(cJSON_GetObjectItemCaseSensitive(o, "version"), 0, INT_MAX, &version))
        return err_set(err, ERR_USAGE, "trace '%s' has no format version", path);
    if (version != TRACE_FILE_VERSION)
        return err_set(err, ERR_USAGE,
                       "trace '%s' is format version %ld; this fsdp reads version %d", path,
                       version, TRACE_FILE_VERSION);
    if (int_field(cJSON_GetObjectItemCaseSensitive(o, "nranks"), 1, 1 << 16, &nranks))
        return err_set(err, ERR_USAGE, "trace '%s': \"nranks\" is missing or out of range", path);
    t->nranks = (int)nranks;
    const cJSON *clock = cJSON_GetObjectItemCaseSensitive(o, "clock");
    t->measured = cJSON_IsString(clock) && !strcmp(clock->valuestring, "measured");
    t->accounting_only = cJSON_IsFalse(cJSON_GetObjectItemCaseSensitive(o, "computed"));
    int rc = read_strings(cJSON_GetObjectItemCaseSensitive(o, "args"), &m->args, &m->nargs, path,
                          "args", err);
    if (!rc)
        rc = read_strings(cJSON_GetObjectItemCaseSensitive(o, "units"), &m->units, &m->nunits, path,
                          "units", err);
    if (!rc)
        rc = read_events(cJSON_GetObjectItemCaseSensitive(o, "events"), t, m->nunits, path, err);
    return rc ? rc : read_values(o, t, path, err);
}

/* A JSON object that never closes: what a file cut short by a full disk or a killed writer
 * looks like, as opposed to a file that was never JSON. */
static int looks_cut(const char *text, size_t len) {
    size_t a = 0, b = len;
    while (a < len && isspace((unsigned char)text[a])) a++;
    while (b > a && isspace((unsigned char)text[b - 1])) b--;
    return a < b && text[a] == '{' && text[b - 1] != '}';
}

/* Where the value of a leading "fsdpTrace" key starts, as trace_file_write puts it; NULL when
 * the file does not open that way. */
static const char *leading_fsdp_object(const char *text) {
    static const char key[] = "\"fsdpTrace\"";
    const char *s = text;
    while (isspace((unsigned char)*s)) s++;
    if (*s++ != '{') return NULL;
    while (isspace((unsigned char)*s)) s++;
    if (strncmp(s, key, sizeof key - 1)) return NULL;
    s += sizeof key - 1;
    while (isspace((unsigned char)*s)) s++;
    return *s == ':' ? s + 1 : NULL;
}

/* Parses the fsdpTrace object: alone when it leads the file (the common case, and half the
 * work or less: Chrome's events after it are for Perfetto), else from the whole document, which
 * also tells a file that is not JSON from one that is not a trace. *root is what to free. */
static int parse_fsdp_object(const char *text, size_t len, const char *path, cJSON **root,
                             const cJSON **o, Err *err) {
    if (looks_cut(text, len))
        return err_set(err, ERR_USAGE, "trace '%s' ends early (truncated?): %zu bytes", path, len);
    const char *lead = leading_fsdp_object(text);
    if (lead && (*root = cJSON_ParseWithOpts(lead, NULL, 0))) {
        *o = *root;
        return 0;
    }
    if (!(*root = cJSON_ParseWithLength(text, len))) {
        const char *at = cJSON_GetErrorPtr();
        size_t where = at && at >= text && at <= text + len ? (size_t)(at - text) : len;
        return err_set(err, ERR_USAGE, "trace '%s' is not valid JSON (at byte %zu of %zu)", path,
                       where, len);
    }
    *o = cJSON_GetObjectItemCaseSensitive(*root, "fsdpTrace");
    return 0;
}

int trace_file_read(const char *path, Trace *t, TraceMeta *meta, Err *err) {
    *t = (Trace){0};
    *meta = (TraceMeta){0};
    char *text = NULL;
    size_t len = 0;
    int rc = slurp(path, &text, &len, err);
    if (rc) return rc;
    cJSON *root = NULL;
    const cJSON *o = NULL;
    rc = parse_fsdp_object(text, len, path, &root, &o, err);
    free(text);
    if (!rc) rc = read_fsdp_object(o, t, meta, path, err);
    cJSON_Delete(root);
    return rc;
}
