/* metrics_log: metrics.jsonl, appended a flushed line at a time, read back and cut back to a
 * step when a run resumes or restarts from a checkpoint. */
#include "io/metrics_log.h"

#include "io/output_path.h"

#include <cjson/cJSON.h>
#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* ---- keeping the lines */

static int keep_line(MetricsLog *m, const MetricsLine *line, Err *err) {
    if (m->n == m->cap) {
        size_t cap = m->cap ? 2 * m->cap : 256;
        MetricsLine *grown = realloc(m->lines, cap * sizeof *grown);
        if (!grown) return err_set(err, ERR_NOMEM, "out of memory keeping %s", m->path);
        m->lines = grown;
        m->cap = cap;
    }
    m->lines[m->n++] = *line;
    return 0;
}

/* Drops lines [from, n) from the file and the log. */
static int cut_from(MetricsLog *m, size_t from, Err *err) {
    if (from >= m->n) return 0;
    long at = m->lines[from].offset;
    if (fflush(m->f) != 0 || ftruncate(fileno(m->f), at) != 0)
        return err_set(err, ERR_IO, "could not cut %s back to step %ld: %s", m->path,
                       m->lines[from].step, strerror(errno));
    m->n = from;
    m->end = at;
    return 0;
}

/* ---- reading back */

static int number_field(const cJSON *o, const char *key, double *out) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, key);
    if (cJSON_IsNull(v)) {
        *out = NAN;
        return 1;
    }
    if (!cJSON_IsNumber(v)) return 0;
    *out = v->valuedouble;
    return 1;
}

/* What the log keeps of one line of text; 0 if it is not a metrics line. */
static int parse_line(const char *text, MetricsLine *line) {
    cJSON *o = cJSON_Parse(text);
    const cJSON *split = cJSON_GetObjectItemCaseSensitive(o, "split");
    const cJSON *step = cJSON_GetObjectItemCaseSensitive(o, "step");
    int ok = cJSON_IsObject(o) && cJSON_IsString(split) && cJSON_IsNumber(step) &&
             strlen(split->valuestring) < sizeof line->split &&
             number_field(o, "loss", &line->loss);
    if (ok) {
        snprintf(line->split, sizeof line->split, "%s", split->valuestring);
        line->step = (long)step->valuedouble;
        line->accuracy = NAN;
        if (strcmp(line->split, METRICS_SPLIT_TRAIN) != 0)
            ok = number_field(o, "accuracy", &line->accuracy);
    }
    cJSON_Delete(o);
    return ok;
}

/* The lines the file holds; a last one without its newline (a kill mid-write) is cut off. */
static int read_back(MetricsLog *m, Err *err) {
    FILE *f = fopen(m->path, "r");
    if (!f) {
        if (errno == ENOENT) return 0;
        return err_set(err, ERR_USAGE, "cannot read %s: %s", m->path, strerror(errno));
    }
    char *text = NULL;
    size_t cap = 0;
    ssize_t len;
    long at = 0;
    int rc = 0, number = 0;
    while (!rc && (len = getline(&text, &cap, f)) > 0) {
        number++;
        if (text[len - 1] != '\n') break; /* cut short: not kept */
        text[len - 1] = 0;
        MetricsLine line = {.offset = at};
        if (!parse_line(text, &line))
            rc = err_set(err, ERR_USAGE, "%s: line %d is not a metrics line (split, step, loss)",
                         m->path, number);
        else
            rc = keep_line(m, &line, err);
        at += len;
    }
    free(text);
    fclose(f);
    m->end = at;
    if (!rc && truncate(m->path, at) != 0)
        rc = err_set(err, ERR_IO, "could not cut %s's unfinished last line: %s", m->path,
                     strerror(errno));
    return rc;
}

int metrics_log_open(MetricsLog *m, const char *path, Err *err) {
    memset(m, 0, sizeof *m);
    if (snprintf(m->path, sizeof m->path, "%s", path) >= (int)sizeof m->path)
        return err_set(err, ERR_USAGE, "path too long: %s", path);
    const char *obstacle = output_path_obstacle(path); /* a FIFO would block the read back */
    if (obstacle)
        return err_set(err, ERR_USAGE, "%s is %s; the run's metrics are a regular file", path,
                       obstacle);
    int rc = read_back(m, err);
    if (rc) return rc;
    if (!(m->f = fopen(path, "a")))
        return err_set(err, ERR_USAGE, "cannot write %s: %s", path, strerror(errno));
    return 0;
}

/* ---- writing */

/* A JSON number: %.9g, null when not finite. */
static const char *json_number(double v, char *buf, size_t n) {
    if (!isfinite(v)) return "null";
    snprintf(buf, n, "%.9g", v);
    return buf;
}

/* A float as the shortest text that reads back to it: "0.05", not 0.0500000007. */
static const char *json_float(float v, char *buf, size_t n) {
    if (!isfinite(v)) return "null";
    for (int digits = 1; digits <= 9; digits++) {
        snprintf(buf, n, "%.*g", digits, (double)v);
        if (strtof(buf, NULL) == v) break;
    }
    return buf;
}

static int append(MetricsLog *m, const char *text, const MetricsLine *line, Err *err) {
    MetricsLine kept = *line;
    kept.offset = m->end;
    size_t len = strlen(text);
    if (fputs(text, m->f) < 0 || fflush(m->f) != 0)
        return err_set(err, ERR_IO, "could not write %s: %s", m->path, strerror(errno));
    m->end += (long)len;
    return keep_line(m, &kept, err);
}

/* The first line at or past `step` (n when none): the lines are in step order. */
static size_t first_at(const MetricsLog *m, long step) {
    size_t lo = 0, hi = m->n;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        if (m->lines[mid].step < step)
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo;
}

int metrics_log_step(MetricsLog *m, const MetricsStep *r, Err *err) {
    /* a line at or past this step is from a run before that went further */
    int rc = cut_from(m, first_at(m, r->step), err);
    if (rc) return rc;
    char loss[32], lr[32], norm[32], t[32], ips[32], wall[32], line[512];
    snprintf(line, sizeof line,
             "{\"split\":\"" METRICS_SPLIT_TRAIN "\",\"step\":%ld,\"epoch\":%d,\"loss\":%s,"
             "\"lr\":%s,\"grad_norm\":%s,\"step_time_s\":%s,\"peak_bytes\":%zu,"
             "\"images_per_s\":%s,\"wall_s\":%s}\n",
             r->step, r->epoch, json_float(r->loss, loss, sizeof loss),
             json_float(r->lr, lr, sizeof lr), json_float(r->grad_norm, norm, sizeof norm),
             json_number(r->step_time, t, sizeof t), r->peak_bytes,
             json_number(r->images_per_s, ips, sizeof ips),
             json_number(r->wall_time, wall, sizeof wall));
    MetricsLine kept = {
        .split = METRICS_SPLIT_TRAIN, .step = r->step, .loss = r->loss, .accuracy = NAN};
    return append(m, line, &kept, err);
}

int metrics_log_eval(MetricsLog *m, const MetricsEval *r, const char *split, Err *err) {
    size_t from = first_at(m, r->step); /* past this step, or this set's evaluation at it */
    while (from < m->n && m->lines[from].step == r->step && strcmp(m->lines[from].split, split))
        from++;
    int rc = cut_from(m, from, err);
    if (rc) return rc;
    char loss[32], acc[32], wall[32], line[512];
    snprintf(line, sizeof line,
             "{\"split\":\"%.15s\",\"step\":%ld,\"epoch\":%d,\"loss\":%s,\"accuracy\":%s,"
             "\"correct\":%ld,\"samples\":%ld,\"wall_s\":%s}\n",
             split, r->step, r->epoch, json_number(r->loss, loss, sizeof loss),
             json_number(r->accuracy, acc, sizeof acc), r->correct, r->samples,
             json_number(r->wall_time, wall, sizeof wall));
    MetricsLine kept = {.step = r->step, .loss = r->loss, .accuracy = r->accuracy};
    snprintf(kept.split, sizeof kept.split, "%s", split);
    return append(m, line, &kept, err);
}

void metrics_log_close(MetricsLog *m) {
    if (m->f) fclose(m->f);
    free(m->lines);
    memset(m, 0, sizeof *m);
}
