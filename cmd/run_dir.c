/* run_dir: the run directory's own files (config.json, metrics.jsonl, curves.svg), the refusal
 * of a directory that holds a run already, and the curves drawn from the metrics' lines. */
#include "cmd/run_dir.h"

#include <cjson/cJSON.h>
#include <dirent.h>
#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "io/atomic_file.h"
#include "sim/viz/curves.h"

/* ---- the directory */

/* mkdir -p: each missing folder of the path, in turn. */
static int make_dirs(const char *path) {
    char p[4096];
    if (snprintf(p, sizeof p, "%s", path) >= (int)sizeof p) {
        errno = ENAMETOOLONG;
        return -1;
    }
    for (char *s = p + 1;; s++) {
        if (*s != '/' && *s) continue;
        char c = *s;
        *s = 0;
        if (mkdir(p, 0777) != 0 && errno != EEXIST) return -1;
        if (!c) return 0;
        *s = c;
    }
}

/* The first file of a run that dir holds, into what ("" when none). checkpoints/ counts once
 * something is in it: the other ranks may have made it empty. */
static void file_of_a_run(const char *dir, char *what, size_t n) {
    static const char *const files[] = {RUN_DIR_CONFIG,     RUN_DIR_METRICS, RUN_DIR_CURVES,
                                        RUN_DIR_MODEL,      RUN_DIR_TRACE,   RUN_DIR_MEMORY_SVG,
                                        RUN_DIR_CHECKPOINTS};
    char path[4200];
    struct stat sb;
    what[0] = 0;
    for (size_t i = 0; i < sizeof files / sizeof *files; i++) {
        snprintf(path, sizeof path, "%s/%s", dir, files[i]);
        if (lstat(path, &sb) != 0) continue;
        if (S_ISDIR(sb.st_mode) && !strcmp(files[i], RUN_DIR_CHECKPOINTS)) {
            DIR *d = opendir(path);
            struct dirent *e;
            int any = 0;
            while (d && !any && (e = readdir(d)))
                any = strcmp(e->d_name, ".") != 0 && strcmp(e->d_name, "..") != 0;
            if (d) closedir(d);
            if (!any) continue;
        }
        snprintf(what, n, "%s", path);
        return;
    }
}

int run_dir_prepare(const TrainArgs *a, int rank0, Err *err) {
    const char *dir = a->run_dir;
    if (!dir) return 0;
    struct stat sb;
    if (stat(dir, &sb) == 0 && !S_ISDIR(sb.st_mode))
        return err_set(err, ERR_USAGE, "--run-dir %s is not a directory", dir);
    char held[4200];
    if (rank0 && !a->resume) {
        file_of_a_run(dir, held, sizeof held);
        if (held[0])
            return err_set(err, ERR_USAGE,
                           "--run-dir %s already holds a run (%s): continue it with --resume "
                           "auto, or give another --run-dir",
                           dir, held);
    }
    if (make_dirs(dir) != 0)
        return err_set(err, ERR_USAGE, "--run-dir %s: cannot create it: %s", dir, strerror(errno));
    if (access(dir, W_OK) != 0)
        return err_set(err, ERR_USAGE, "--run-dir %s: cannot write in it: %s", dir,
                       strerror(errno));
    return 0;
}

int run_dir_check_resumable(const TrainArgs *a, const char *resumed, Err *err) {
    if (!a->run_dir || !a->resume || strcmp(a->resume, "auto") || resumed[0]) return 0;
    static const char *const files[] = {RUN_DIR_MODEL, RUN_DIR_METRICS};
    for (size_t i = 0; i < sizeof files / sizeof *files; i++) {
        char path[4200];
        struct stat sb;
        snprintf(path, sizeof path, "%s/%s", a->run_dir, files[i]);
        if (stat(path, &sb) == 0 && S_ISREG(sb.st_mode) && sb.st_size > 0)
            return err_set(err, ERR_USAGE,
                           "--resume auto: --run-dir %s holds a run (%s) but no checkpoint to "
                           "continue it from (%s has none): starting over would replace its files; "
                           "give another --run-dir, or move the old run away",
                           a->run_dir, files[i], a->ckpt_dir);
    }
    return 0;
}

/* ---- config.json */

/* A resumed run writes config.json again; one that is there but damaged (not JSON, or not an
 * object) is said, not overwritten: it may be all that says how the run was started. */
static int check_old_config(const char *path, Err *err) {
    enum { CONFIG_MAX = 1 << 20 };
    struct stat st;
    if (stat(path, &st) != 0) return 0; /* none yet */
    if (!S_ISREG(st.st_mode) || st.st_size > CONFIG_MAX)
        return err_set(err, ERR_USAGE, "%s is not the config.json fsdp writes; move it away", path);
    FILE *f = fopen(path, "r");
    char *text = malloc(CONFIG_MAX + 1);
    size_t n = f && text ? fread(text, 1, CONFIG_MAX, f) : 0;
    if (f) fclose(f);
    if (!text) return err_set(err, ERR_NOMEM, "out of memory reading %s", path);
    text[n] = 0;
    cJSON *doc = f ? cJSON_Parse(text) : NULL;
    int ok = cJSON_IsObject(doc);
    cJSON_Delete(doc);
    free(text);
    if (!ok)
        return err_set(err, ERR_USAGE,
                       "%s is damaged (not the JSON object fsdp writes); it records how the run "
                       "was started: mend it, or remove it to have it written anew",
                       path);
    return 0;
}

static int write_config(const RunDir *d, const TrainArgs *a, Err *err) {
    AtomicFile o;
    int rc = atomic_open(&o, d->config, err);
    if (!rc) rc = flags_write_json(train_flags(), a, o.f, err);
    if (!rc) rc = atomic_commit(&o, err);
    atomic_discard(&o);
    return rc;
}

int run_dir_open(RunDir *d, const TrainArgs *a, long steps, const char *title, Err *err) {
    memset(d, 0, sizeof *d);
    if (!a->run_dir) return 0;
    const char *dir = a->run_dir;
    int n = snprintf(d->config, sizeof d->config, "%s/" RUN_DIR_CONFIG, dir);
    n |= snprintf(d->metrics, sizeof d->metrics, "%s/" RUN_DIR_METRICS, dir);
    n |= snprintf(d->curves, sizeof d->curves, "%s/" RUN_DIR_CURVES, dir);
    if (n >= (int)sizeof d->config - 16)
        return err_set(err, ERR_USAGE, "--run-dir %s: the path is too long", dir);
    snprintf(d->title, sizeof d->title, "%s", title);
    d->steps = steps;
    /* what a resumed run's metrics hold is checked before anything is written */
    int rc = a->resume ? check_old_config(d->config, err) : 0;
    if (!rc) rc = metrics_log_open(&d->log, d->metrics, err);
    if (!rc) rc = write_config(d, a, err);
    if (!rc) d->dir = dir;
    return rc;
}

/* ---- metrics.jsonl and curves.svg */

/* The set an evaluation ran on, as metrics.jsonl's "split" names it: the images --val-size
 * held out, or the test set. */
static const char *eval_split(const EvalReport *r) {
    return r->kind == EVAL_VALIDATION ? "val" : "test";
}

static const char *split_colour(const char *split) {
    if (!strcmp(split, METRICS_SPLIT_TRAIN)) return "#4e79a7"; /* blue */
    if (!strcmp(split, "test")) return "#e15759";              /* red */
    if (!strcmp(split, "val")) return "#f28e2b";               /* orange */
    return "#59a14f";                                          /* green */
}

enum { CURVES_MAX_SETS = 4 }; /* evaluation sets drawn at most (the test set; validation) */

/* The curves' series, built from the log's lines: training loss, and per evaluation set its
 * loss and its accuracy; their arrays and labels are owned here. */
typedef struct Series {
    CurveSeries loss[1 + CURVES_MAX_SETS], accuracy[CURVES_MAX_SETS];
    int nloss, naccuracy;
    const char *sets[1 + CURVES_MAX_SETS]; /* the splits drawn */
    char labels[1 + 2 * CURVES_MAX_SETS][48];
    int nlabels;
    long *steps;    /* room for every line, per set drawn */
    double *values; /* ... twice: a set's losses, then its accuracies */
    size_t used;    /* lines' room taken */
} Series;

static const char *series_label(Series *s, const char *what, const char *split) {
    char *label = s->labels[s->nlabels++];
    snprintf(label, sizeof s->labels[0], "%s %s", split, what);
    return label;
}

/* The series of one set: every line of it, in order. */
static void add_series(Series *s, const MetricsLog *log, const char *split) {
    int train = !strcmp(split, METRICS_SPLIT_TRAIN);
    long *steps = s->steps + s->used;
    double *loss = s->values + 2 * s->used, *accuracy = loss + log->n;
    size_t n = 0;
    for (size_t i = 0; i < log->n; i++) {
        const MetricsLine *l = &log->lines[i];
        if (strcmp(l->split, split)) continue;
        steps[n] = l->step;
        loss[n] = l->loss;
        accuracy[n++] = l->accuracy;
    }
    s->used += log->n;
    s->sets[s->nloss] = split;
    CurveSeries line = {.colour = split_colour(split), .steps = steps, .n = n, .dots = !train};
    line.values = loss;
    line.label = series_label(s, "loss", train ? "training" : split);
    s->loss[s->nloss++] = line;
    int classifies = 0; /* a language model's evaluations have no accuracy */
    for (size_t i = 0; i < n; i++) classifies |= isfinite(accuracy[i]);
    if (train || !classifies) return;
    line.values = accuracy;
    line.label = series_label(s, "accuracy", split);
    s->accuracy[s->naccuracy++] = line;
}

static int build_series(Series *s, const MetricsLog *log, Err *err) {
    memset(s, 0, sizeof *s);
    size_t room = log->n * (1 + CURVES_MAX_SETS) + 1;
    s->steps = malloc(room * sizeof *s->steps);
    s->values = malloc(2 * room * sizeof *s->values);
    if (!s->steps || !s->values) return err_set(err, ERR_NOMEM, "out of memory drawing curves");
    add_series(s, log, METRICS_SPLIT_TRAIN);
    for (size_t i = 0; i < log->n; i++) { /* each evaluation set, in the order it first came */
        const char *split = log->lines[i].split;
        int seen = 0;
        for (int k = 0; k < s->nloss && !seen; k++) seen = !strcmp(s->sets[k], split);
        if (!seen && s->nloss < 1 + CURVES_MAX_SETS) add_series(s, log, split);
    }
    return 0;
}

static int draw_curves(const RunDir *d, Err *err) {
    Series s;
    int rc = build_series(&s, &d->log, err);
    CurvesSvg c = {.title = d->title,
                   .last_step = d->steps,
                   .loss = s.loss,
                   .nloss = s.nloss,
                   .accuracy = s.accuracy,
                   .naccuracy = s.naccuracy};
    AtomicFile o = {0};
    if (!rc) rc = atomic_open(&o, d->curves, err);
    if (!rc && curves_svg_write(&c, o.f, err))
        rc = err_set(err, ERR_IO, "could not write %s", d->curves);
    if (!rc) rc = atomic_commit(&o, err);
    atomic_discard(&o);
    free(s.steps);
    free(s.values);
    return rc;
}

void run_dir_step(RunDir *d, const StepReport *r) {
    if (!d->dir || d->failed) return;
    MetricsStep line = {.step = r->step,
                        .epoch = r->epoch,
                        .loss = r->stats.loss,
                        .lr = r->lr,
                        .grad_norm = r->stats.grad_norm,
                        .step_time = r->step_time,
                        .peak_bytes = r->peak_bytes,
                        .images_per_s = r->images_per_s,
                        .wall_time = r->wall_time};
    d->failed = metrics_log_step(&d->log, &line, &d->err) != 0;
}

void run_dir_eval(RunDir *d, const EvalReport *r) {
    if (!d->dir || d->failed) return;
    MetricsEval line = {.step = r->step,
                        .epoch = r->epoch,
                        .loss = r->loss,
                        .accuracy = r->accuracy,
                        .correct = r->correct,
                        .samples = r->samples,
                        .wall_time = r->wall_time};
    d->failed = metrics_log_eval(&d->log, &line, eval_split(r), &d->err) != 0;
    if (!d->failed) d->failed = draw_curves(d, &d->err) != 0;
}

int run_dir_finish(RunDir *d, Err *err) {
    if (!d->dir) return 0;
    if (!d->failed) d->failed = draw_curves(d, &d->err) != 0;
    if (d->failed) return err_set(err, d->err.code, "%s", d->err.msg);
    return 0;
}

void run_dir_close(RunDir *d) {
    metrics_log_close(&d->log);
    d->dir = NULL;
}
