/* checkpoint_read: a checkpoint's meta.json read and checked before any of it is believed, and
 * its pieces read through their CRC32 (CkptMeta, io/checkpoint.h): what loading and the tools of
 * `fsdp ckpt` share. */
#include <cjson/cJSON.h>
#include <errno.h>
#include <float.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zlib.h>

#include "io/bulk_file.h"
#include "io/checkpoint.h"
#include "io/checkpoint_internal.h"

/* ---------------------------------------------------------------- reading, checked
 *
 * meta.json is believed only once checked, in this order: its CRC32 (on the bytes, nothing
 * parsed yet); its format and version; every field's range; its tensors against the model its
 * "model" and "config" describe; its pieces against the tensors, each other and the rank files
 * on disk. Nothing is allocated from a number before that number is checked. A failure is one
 * line naming meta.json and the field by its jq path (.step, .tensors[3].shape), so that
 * `jq .step meta.json` shows what was refused. */

/* The last line, `"crc32":N}` with N below 2^32: 0 with *body, the bytes before it, and N; -1
 * when the file does not end so (a file cut short, or not ours). */
static int meta_crc_line(const char *text, size_t len, size_t *body, unsigned long *stated) {
    if (len < 2 || text[len - 1] != '\n') return -1;
    size_t start = len - 1;
    while (start > 0 && text[start - 1] != '\n') start--;
    const char *s = text + start, *end = text + len - 1;
    size_t key = sizeof META_CRC_KEY - 1;
    if (start == 0 || (size_t)(end - s) < key || memcmp(s, META_CRC_KEY, key)) return -1;
    unsigned long long v = 0;
    int digits = 0;
    for (s += key; s < end && *s >= '0' && *s <= '9' && digits <= 10; s++, digits++)
        v = 10 * v + (unsigned long long)(*s - '0');
    const char *first = text + start + key;
    if (digits < 1 || digits > 10 || (digits > 1 && *first == '0') || v > 0xffffffffull ||
        s + 1 != end || *s != '}')
        return -1; /* N as the writer prints it: decimal, no leading zero */
    *body = start;
    *stated = (unsigned long)v;
    return 0;
}

/* *twice: the first key an object in the tree repeats, else NULL (-1: out of memory). cJSON
 * keeps both members and finds the first, jq shows the last: fsdp and a person reading the
 * file would disagree on what it says. */
static int key_order(const void *a, const void *b) {
    return strcmp(*(const char *const *)a, *(const char *const *)b);
}

static int repeated_key(const cJSON *node, const char **twice) {
    *twice = NULL;
    if (!cJSON_IsObject(node) && !cJSON_IsArray(node)) return 0;
    int n = cJSON_GetArraySize(node);
    if (cJSON_IsObject(node) && n > 1) {
        const char **keys = malloc((size_t)n * sizeof *keys);
        if (!keys) return -1;
        int k = 0;
        for (const cJSON *c = node->child; c; c = c->next) keys[k++] = c->string;
        qsort(keys, (size_t)n, sizeof *keys, key_order);
        for (int i = 1; !*twice && i < n; i++)
            if (!strcmp(keys[i - 1], keys[i])) *twice = keys[i];
        free(keys);
    }
    for (const cJSON *c = node->child; !*twice && c; c = c->next)
        if (repeated_key(c, twice)) return -1;
    return 0;
}

/* o's member `key` (named where.key in messages) as a whole number in [lo, hi]; `why` follows
 * the range in the message ("" or " (...)"). */
static int whole_field(const char *meta, const cJSON *o, const char *where, const char *key,
                       double lo, double hi, const char *why, double *out, Err *err) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, key);
    if (!cJSON_IsNumber(v))
        return err_set(err, ERR_USAGE,
                       "%s: %s.%s is %s; it must be a whole number from %.15g to %.15g%s", meta,
                       where, key, v ? "not a number" : "missing", lo, hi, why);
    double x = v->valuedouble;
    if (!(x >= lo && x <= hi && x == floor(x)))
        return err_set(err, ERR_USAGE,
                       "%s: %s.%s is %.15g; it must be a whole number from %.15g to %.15g%s", meta,
                       where, key, x, lo, hi, why);
    *out = x;
    return 0;
}

static void copy_string(char *dst, size_t n, const cJSON *o, const char *key) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, key);
    snprintf(dst, n, "%s", cJSON_IsString(v) ? v->valuestring : "");
}

/* Format and version, read only to refuse: a file that is not ours, or of another version, is
 * refused whatever else it says. sealed: it ends with a checksum line, already verified. */
static int check_version(const char *meta, const cJSON *root, int sealed, Err *err) {
    const cJSON *format = cJSON_GetObjectItemCaseSensitive(root, "format");
    const cJSON *version = cJSON_GetObjectItemCaseSensitive(root, "version");
    if (!sealed && !cJSON_IsObject(root)) /* most likely a save cut short, or a file cut since */
        return err_set(err, ERR_USAGE,
                       "%s has no \"crc32\" line at its end: it was cut short or edited", meta);
    if (!cJSON_IsObject(root) || !cJSON_IsString(format) ||
        strcmp(format->valuestring, "fsdp-checkpoint"))
        return err_set(err, ERR_USAGE, "%s is not an fsdp checkpoint's metadata", meta);
    if (!cJSON_IsNumber(version))
        return err_set(err, ERR_USAGE, "%s: .version is %s; this fsdp reads version %d", meta,
                       version ? "not a number" : "missing", CHECKPOINT_VERSION);
    double v = version->valuedouble;
    if (v == 1)
        return err_set(err, ERR_USAGE,
                       "%s is format version 1, whose meta.json has no CRC32 of its own; this "
                       "fsdp reads version %d (the fsdp that saved it can consolidate it into a "
                       "file --init-from takes)",
                       meta, CHECKPOINT_VERSION);
    if (v != CHECKPOINT_VERSION)
        return err_set(err, ERR_USAGE, "%s is format version %.15g; this fsdp reads version %d",
                       meta, v, CHECKPOINT_VERSION);
    if (!sealed)
        return err_set(err, ERR_USAGE,
                       "%s has no \"crc32\" line at its end: it was cut short or edited", meta);
    return 0;
}

/* The counters: a step the training loop's index math holds to, Adam's steps at most the
 * steps (fewer when fp16's loss scaling skipped some), the loss scale a finite positive float,
 * the steps since it last grew or shrank below the growth interval. */
static int read_counters(CkptMeta *c, const char *meta, const cJSON *root, Err *err) {
    double world, step, adam, good;
    int rc = whole_field(meta, root, "", "world", 1, CHECKPOINT_MAX_WORLD, "", &world, err);
    if (!rc)
        rc = whole_field(meta, root, "", "step", 0, (double)CHECKPOINT_MAX_STEP,
                         " (the most steps a run takes)", &step, err);
    if (!rc)
        rc = whole_field(meta, root, "", "adam_steps", 0, step,
                         " (Adam steps at most .step, fewer when fp16 skipped some)", &adam, err);
    if (rc) return rc;
    const cJSON *scale = cJSON_GetObjectItemCaseSensitive(root, "loss_scale");
    if (!cJSON_IsNumber(scale))
        return err_set(err, ERR_USAGE, "%s: .loss_scale is %s; it must be a finite number above 0",
                       meta, scale ? "not a number" : "missing");
    double s = scale->valuedouble;
    if (!(isfinite(s) && s > 0 && s <= FLT_MAX && (float)s > 0))
        return err_set(err, ERR_USAGE,
                       "%s: .loss_scale is %.15g; it must be a finite number above 0 (a float: "
                       "%g to %g)",
                       meta, s, (double)FLT_TRUE_MIN, (double)FLT_MAX);
    double most = adam < ENGINE_SCALE_GROWTH_INTERVAL - 1 ? adam : ENGINE_SCALE_GROWTH_INTERVAL - 1;
    if ((rc = whole_field(meta, root, "", "good_steps", 0, most,
                          " (Adam's steps since the loss scale last changed, below the growth "
                          "interval)",
                          &good, err)))
        return rc;
    c->world = (int)world;
    c->step = (long)step;
    c->counters =
        (EngineCounters){.steps = (long)adam, .loss_scale = (float)s, .good_steps = (int)good};
    return 0;
}

/* held_out and val_loss, written by a run with --val-size: optional, but believed only in range,
 * and a loss only with the samples it was measured on. */
static int read_validation(CkptMeta *c, const char *meta, const cJSON *root, Err *err) {
    const cJSON *held = cJSON_GetObjectItemCaseSensitive(root, "held_out");
    const cJSON *loss = cJSON_GetObjectItemCaseSensitive(root, "val_loss");
    double n = 0;
    int rc = held ? whole_field(meta, root, "", "held_out", 1, (double)CHECKPOINT_MAX_HELD_OUT,
                                " (the samples --val-size held out)", &n, err)
                  : 0;
    if (rc || !loss) {
        c->held_out = (long)n;
        return rc;
    }
    if (!held)
        return err_set(err, ERR_USAGE,
                       "%s: .val_loss is there but .held_out is missing: a validation loss needs "
                       "the samples it was measured on",
                       meta);
    if (!cJSON_IsNumber(loss))
        return err_set(err, ERR_USAGE,
                       "%s: .val_loss is not a number; it must be a finite number "
                       "from 0 (a mean loss)",
                       meta);
    if (!(isfinite(loss->valuedouble) && loss->valuedouble >= 0))
        return err_set(err, ERR_USAGE,
                       "%s: .val_loss is %.15g; it must be a finite number from 0 (a mean loss)",
                       meta, loss->valuedouble);
    c->held_out = (long)n;
    c->validated = 1;
    c->val_loss = loss->valuedouble;
    return 0;
}

/* o's member `key` as a finite number in [lo, hi] that a float holds ("a rate"). */
static int rate_field(const char *meta, const cJSON *o, const char *key, double lo, double hi,
                      double *out, Err *err) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, key);
    if (!cJSON_IsNumber(v))
        return err_set(err, ERR_USAGE,
                       "%s: .lr_schedule.%s is %s; it must be a number from %g to %g", meta, key,
                       v ? "not a number" : "missing", lo, hi);
    if (!(v->valuedouble >= lo && v->valuedouble <= hi))
        return err_set(err, ERR_USAGE,
                       "%s: .lr_schedule.%s is %.15g; it must be a number from %g to %g", meta, key,
                       v->valuedouble, lo, hi);
    *out = v->valuedouble;
    return 0;
}

/* lr_schedule, written by a run whose rate varies: optional, believed only whole and in the
 * ranges `fsdp train` accepts for its flags. */
static int read_lr_curve(CkptMeta *c, const char *meta, const cJSON *root, Err *err) {
    const cJSON *o = cJSON_GetObjectItemCaseSensitive(root, "lr_schedule");
    if (!o) return 0;
    if (!cJSON_IsObject(o))
        return err_set(err, ERR_USAGE, "%s: .lr_schedule is not an object", meta);
    const cJSON *kind = cJSON_GetObjectItemCaseSensitive(o, "kind");
    LrCurve *curve = &c->lr_curve;
    if (!cJSON_IsString(kind) || lr_schedule_parse(kind->valuestring, &curve->schedule.kind))
        return err_set(err, ERR_USAGE,
                       "%s: .lr_schedule.kind is %s; it must be constant, cosine, linear or step",
                       meta, cJSON_IsString(kind) ? "not a schedule's name" : "missing");
    double lr, warmup, min_lr, step_size, gamma, total;
    double most = (double)CHECKPOINT_MAX_STEP;
    int rc = rate_field(meta, o, "lr", 0, 1e3, &lr, err);
    if (!rc) rc = whole_field(meta, o, ".lr_schedule", "warmup_steps", 0, most, "", &warmup, err);
    if (!rc) rc = rate_field(meta, o, "min_lr", 0, lr, &min_lr, err);
    if (!rc) rc = whole_field(meta, o, ".lr_schedule", "step_size", 0, most, "", &step_size, err);
    if (!rc) rc = rate_field(meta, o, "gamma", FLT_TRUE_MIN, 1, &gamma, err);
    if (!rc)
        rc = whole_field(meta, o, ".lr_schedule", "total_steps", 1, most, " (the run's steps)",
                         &total, err);
    if (rc) return rc;
    curve->lr = (float)lr;
    curve->schedule.warmup_steps = (long)warmup;
    curve->schedule.min_lr = (float)min_lr;
    curve->schedule.step_size = (long)step_size;
    curve->schedule.gamma = gamma;
    curve->total_steps = (long)total;
    c->has_lr_curve = 1;
    return 0;
}

/* A JSON value as a message shows it: "text" (cut at 64 bytes), a number, or what it is. */
static const char *value_text(char *buf, size_t n, const cJSON *v) {
    if (cJSON_IsString(v))
        snprintf(buf, n, "\"%.64s\"", v->valuestring);
    else if (cJSON_IsNumber(v))
        snprintf(buf, n, "%.15g", v->valuedouble);
    else
        snprintf(buf, n, "%s", v ? "not a string" : "missing");
    return buf;
}

/* "model" and "strategy": names this fsdp knows. */
static int read_names(CkptMeta *c, const char *meta, const cJSON *root, const ModelKinds *kinds,
                      Err *err) {
    const cJSON *model = cJSON_GetObjectItemCaseSensitive(root, "model");
    const cJSON *strategy = cJSON_GetObjectItemCaseSensitive(root, "strategy");
    char text[80];
    if (!cJSON_IsString(model) || !model_kind_named(kinds, model->valuestring))
        return err_set(err, ERR_USAGE, "%s: .model is %s; it must be a model this fsdp builds: %s",
                       meta, value_text(text, sizeof text, model), kinds->names_text);
    Strategy s;
    if (!cJSON_IsString(strategy) || strategy_parse(strategy->valuestring, &s))
        return err_set(err, ERR_USAGE, "%s: .strategy is %s; it must be one of %s", meta,
                       value_text(text, sizeof text, strategy), strategy_names());
    copy_string(c->model, sizeof c->model, root, "model");
    copy_string(c->strategy, sizeof c->strategy, root, "strategy");
    return 0;
}

/* ---- the model meta.json describes */

/* The model of .model and .config: exactly its kind's sizes, each a whole number in range, built
 * with the checks training makes; described names it for messages. */
static int described_model(const CkptMeta *c, const char *meta, const cJSON *root,
                           const ModelKinds *kinds, ModelDesc *out, char *described, size_t n,
                           Err *err) {
    const ModelKind *kind = model_kind_named(kinds, c->model);
    const cJSON *config = cJSON_GetObjectItemCaseSensitive(root, "config");
    long sizes[MODEL_MAX_SIZES] = {0};
    if (!kind->nsizes && config)
        return err_set(err, ERR_USAGE, "%s: .config is there, but %s has no sizes to set", meta,
                       kind->what);
    if (kind->nsizes && !cJSON_IsObject(config))
        return err_set(err, ERR_USAGE, "%s: .config is %s; %s's checkpoint records its %s", meta,
                       config ? "not an object" : "missing", kind->what, kind->sizes_text);
    for (const cJSON *kv = kind->nsizes ? config->child : NULL; kv; kv = kv->next) {
        int known = 0;
        for (int k = 0; k < kind->nsizes; k++) known |= !strcmp(kv->string, kind->sizes[k]);
        if (!known)
            return err_set(err, ERR_USAGE, "%s: .config.%.64s is no size of %s", meta, kv->string,
                           kind->what);
    }
    for (int k = 0; k < kind->nsizes; k++) {
        double v;
        int rc = whole_field(meta, config, ".config", kind->sizes[k], 1, (double)kind->max_size, "",
                             &v, err);
        if (rc) return rc;
        sizes[k] = (long)v;
    }
    return kind->build(meta, sizes, out, described, n, err);
}

static void shape_text(char *buf, size_t n, const int64_t *shape, int ndim) {
    size_t at = (size_t)snprintf(buf, n, "[");
    for (int d = 0; d < ndim && at < n; d++)
        at += (size_t)snprintf(buf + at, n - at, d ? ", %lld" : "%lld", (long long)shape[d]);
    if (at < n) snprintf(buf + at, n - at, "]");
}

/* A shape as meta.json gives it, whatever it is. */
static void json_shape_text(char *buf, size_t n, const cJSON *shape) {
    if (!cJSON_IsArray(shape)) {
        snprintf(buf, n, "%s", shape ? "not a list" : "missing");
        return;
    }
    size_t at = (size_t)snprintf(buf, n, "[");
    int d = 0;
    for (const cJSON *x = shape->child; x && at < n; x = x->next, d++) {
        if (cJSON_IsNumber(x))
            at += (size_t)snprintf(buf + at, n - at, d ? ", %.15g" : "%.15g", x->valuedouble);
        else
            at += (size_t)snprintf(buf + at, n - at, d ? ", ?" : "?");
    }
    if (at < n) snprintf(buf + at, n - at, "]");
}

static int same_shape(const cJSON *shape, const ParamSpec *p) {
    if (!cJSON_IsArray(shape) || cJSON_GetArraySize(shape) != p->ndim) return 0;
    int d = 0;
    for (const cJSON *x = shape->child; x; x = x->next, d++)
        if (!cJSON_IsNumber(x) || x->valuedouble != (double)p->shape[d]) return 0;
    return 1;
}

typedef struct NameAt {
    const char *name;
    int at;
} NameAt;

static int name_order(const void *a, const void *b) {
    const NameAt *x = a, *y = b;
    int c = strcmp(x->name, y->name);
    return c ? c : (x->at > y->at) - (x->at < y->at);
}

/* .tensors is exactly m's parameters: as many, no name twice, each name, fp32 and shape in
 * m's order. */
static int check_tensor_list(const char *meta, const cJSON *list, const ModelDesc *m,
                             const char *described, Err *err) {
    if (!cJSON_IsArray(list))
        return err_set(err, ERR_USAGE, "%s: .tensors is %s", meta, list ? "not a list" : "missing");
    int n = cJSON_GetArraySize(list);
    if (n != m->nparams)
        return err_set(err, ERR_USAGE, "%s: .tensors lists %d tensors; %s has %d", meta, n,
                       described, m->nparams);
    NameAt *names = calloc((size_t)n + 1, sizeof *names);
    if (!names) return err_set(err, ERR_NOMEM, "out of memory reading %s", meta);
    int i = 0, rc = 0;
    for (const cJSON *t = list->child; !rc && t; t = t->next, i++) {
        const cJSON *name = cJSON_GetObjectItemCaseSensitive(t, "name");
        if (!cJSON_IsString(name))
            rc = err_set(err, ERR_USAGE, "%s: .tensors[%d].name is %s", meta, i,
                         name ? "not a string" : "missing");
        names[i] = (NameAt){cJSON_IsString(name) ? name->valuestring : "", i};
    }
    if (!rc) qsort(names, (size_t)n, sizeof *names, name_order);
    for (int k = 1; !rc && k < n; k++)
        if (!strcmp(names[k - 1].name, names[k].name))
            rc = err_set(err, ERR_USAGE, "%s: .tensors[%d].name is %.96s, as .tensors[%d].name is",
                         meta, names[k].at, names[k].name, names[k - 1].at);
    free(names);
    i = 0;
    for (const cJSON *t = list->child; !rc && t; t = t->next, i++) {
        const ParamSpec *p = &m->params[i];
        const char *name = cJSON_GetObjectItemCaseSensitive(t, "name")->valuestring;
        const cJSON *dtype = cJSON_GetObjectItemCaseSensitive(t, "dtype");
        const cJSON *shape = cJSON_GetObjectItemCaseSensitive(t, "shape");
        char got[160], want[160];
        if (strcmp(name, p->name))
            rc = err_set(err, ERR_USAGE, "%s: .tensors[%d].name is %.96s; %s has %s there", meta, i,
                         name, described, p->name);
        else if (!cJSON_IsString(dtype) || strcmp(dtype->valuestring, "fp32"))
            rc = err_set(err, ERR_USAGE,
                         "%s: .tensors[%d].dtype of %s is %.32s; checkpoints hold fp32", meta, i,
                         p->name, cJSON_IsString(dtype) ? dtype->valuestring : "not fp32");
        else if (!same_shape(shape, p)) {
            json_shape_text(got, sizeof got, shape);
            shape_text(want, sizeof want, p->shape, p->ndim);
            rc = err_set(err, ERR_USAGE, "%s: .tensors[%d].shape of %s is %s; %s has %s", meta, i,
                         p->name, got, described, want);
        }
    }
    return rc;
}

/* With a model to load into: its parameters must be those saved (another model's checkpoint
 * says so, with the shapes). saved is the model meta.json describes, already checked equal to
 * its tensors. */
static int check_expected(const char *path, const ModelDesc *saved, const ModelDesc *m, Err *err) {
    if (saved->nparams != m->nparams)
        return err_set(err, ERR_USAGE,
                       "checkpoint %s is of another model: %d tensors, this model has %d", path,
                       saved->nparams, m->nparams);
    for (int i = 0; i < m->nparams; i++) {
        const ParamSpec *s = &saved->params[i], *p = &m->params[i];
        int same = !strcmp(s->name, p->name) && s->ndim == p->ndim;
        for (int d = 0; same && d < p->ndim; d++) same = s->shape[d] == p->shape[d];
        if (same) continue;
        char a[160], b[160];
        shape_text(a, sizeof a, s->shape, s->ndim);
        shape_text(b, sizeof b, p->shape, p->ndim);
        return err_set(err, ERR_USAGE,
                       "checkpoint %s is of another model: tensor %d is %s %s, this model's is "
                       "%s %s",
                       path, i, s->name, a, p->name, b);
    }
    return 0;
}

static void set_tensors(CkptMeta *c, const ModelDesc *m) {
    for (int i = 0; i < m->nparams; i++) {
        const ParamSpec *p = &m->params[i];
        CkptTensor *t = &c->tensors[i];
        snprintf(t->name, sizeof t->name, "%s", p->name);
        t->ndim = p->ndim;
        memcpy(t->shape, p->shape, (size_t)p->ndim * sizeof *t->shape);
        t->numel = p->numel;
        t->row_elems = 1;
        for (int d = 1; d < p->ndim; d++) t->row_elems *= (size_t)p->shape[d];
    }
    c->ntensors = m->nparams;
}

/* "config" as text pairs, for the tools that print or pass it on (checked already). */
static int read_config(CkptMeta *c, const char *meta, const cJSON *config, Err *err) {
    if (!cJSON_IsObject(config)) return 0;
    int n = cJSON_GetArraySize(config);
    if (!(c->config = calloc(2 * (size_t)n + 1, sizeof *c->config)))
        return err_set(err, ERR_NOMEM, "out of memory reading %s", meta);
    for (const cJSON *kv = config->child; kv; kv = kv->next) {
        char value[64];
        snprintf(value, sizeof value, "%.17g", kv->valuedouble);
        char *key = strdup(kv->string), *val = strdup(value);
        c->config[2 * c->nconfig] = key;
        c->config[2 * c->nconfig + 1] = val;
        c->nconfig++;
        if (!key || !val) return err_set(err, ERR_NOMEM, "out of memory reading %s", meta);
    }
    return 0;
}

/* ---- the pieces */

static int kind_of(const char *s) {
    for (int k = 0; k < STATE_KIND_COUNT; k++)
        if (!strcmp(s, state_kind_name((StateKind)k))) return k;
    return -1;
}

/* One piece, each field in range: a known kind, a tensor and rank that exist, rows inside the
 * tensor, bytes that are exactly those rows' fp32, a CRC32 below 2^32. */
static int read_piece(CkptMeta *c, const char *meta, const cJSON *o, size_t i, Err *err) {
    char where[48];
    snprintf(where, sizeof where, ".pieces[%zu]", i);
    const cJSON *kind = cJSON_GetObjectItemCaseSensitive(o, "kind");
    char text[80];
    if (!cJSON_IsString(kind) || kind_of(kind->valuestring) < 0)
        return err_set(err, ERR_USAGE, "%s: %s.kind is %s; it must be param, adam_m or adam_v",
                       meta, where, value_text(text, sizeof text, kind));
    double tensor, rank, row_begin, rows = 0, offset, bytes = 0, crc;
    const double most = 9007199254740992.0; /* 2^53: every whole double below it is exact */
    int rc = whole_field(meta, o, where, "tensor", 0, c->ntensors - 1, "", &tensor, err);
    if (!rc)
        rc = whole_field(meta, o, where, "rank", 0, c->world - 1, " (the ranks of .world)", &rank,
                         err);
    if (rc) return rc;
    const CkptTensor *t = &c->tensors[(int)tensor];
    double height = (double)t->shape[0];
    char of[160];
    snprintf(of, sizeof of, " (%s has %.15g rows)", t->name, height);
    rc = whole_field(meta, o, where, "row_begin", 0, height, of, &row_begin, err);
    if (!rc) rc = whole_field(meta, o, where, "rows", 0, height - row_begin, of, &rows, err);
    if (!rc) rc = whole_field(meta, o, where, "offset", 0, most, "", &offset, err);
    if (!rc) rc = whole_field(meta, o, where, "bytes", 0, most, "", &bytes, err);
    double want = rows * (double)t->row_elems * sizeof(float);
    if (!rc && bytes != want)
        rc = err_set(err, ERR_USAGE,
                     "%s: %s.bytes is %.15g; its %.15g rows of %s are %.15g bytes of fp32", meta,
                     where, bytes, rows, t->name, want);
    if (!rc) rc = whole_field(meta, o, where, "crc32", 0, 4294967295.0, "", &crc, err);
    if (rc) return rc;
    c->pieces[c->npieces++] = (CkptPiece){.tensor = (int)tensor,
                                          .kind = (StateKind)kind_of(kind->valuestring),
                                          .rank = (int)rank,
                                          .row_begin = (size_t)row_begin,
                                          .rows = (size_t)rows,
                                          .offset = (unsigned long long)offset,
                                          .bytes = (unsigned long long)bytes,
                                          .crc = (unsigned long)crc};
    return 0;
}

/* The order of CkptMeta.by_rows: (tensor, kind, row_begin, rows, rank). */
static int piece_order(const void *a, const void *b) {
    const CkptPiece *x = a, *y = b;
    if (x->tensor != y->tensor) return x->tensor < y->tensor ? -1 : 1;
    if (x->kind != y->kind) return x->kind < y->kind ? -1 : 1;
    if (x->row_begin != y->row_begin) return x->row_begin < y->row_begin ? -1 : 1;
    if (x->rows != y->rows) return x->rows < y->rows ? -1 : 1;
    return (x->rank > y->rank) - (x->rank < y->rank);
}

/* Every tensor's rows [0, shape[0]) are held by exactly one piece of each kind: a gap or a
 * row held twice names the tensor, the kind, the rows and the ranks. Empty pieces (an empty
 * last shard) hold nothing. */
static int check_coverage(const CkptMeta *c, const char *meta, Err *err) {
    size_t at = 0;
    const CkptPiece *s = c->by_rows;
    for (int t = 0; t < c->ntensors; t++) {
        const CkptTensor *ct = &c->tensors[t];
        for (int k = 0; k < STATE_KIND_COUNT; k++) {
            const char *kind = state_kind_name((StateKind)k);
            size_t next = 0; /* rows [0, next) are held */
            int last_rank = -1;
            for (; at < c->npieces && s[at].tensor == t && (int)s[at].kind == k; at++) {
                const CkptPiece *p = &s[at];
                if (!p->rows) continue;
                if (p->row_begin > next)
                    return err_set(err, ERR_USAGE,
                                   "%s: .pieces: no piece holds rows %zu-%zu of %s's %s", meta,
                                   next, p->row_begin, ct->name, kind);
                if (p->row_begin < next) {
                    size_t end = p->row_begin + p->rows < next ? p->row_begin + p->rows : next;
                    char by[48];
                    if (last_rank == p->rank) /* a piece listed twice */
                        snprintf(by, sizeof by, "by rank %d", p->rank);
                    else
                        snprintf(by, sizeof by, "(ranks %d and %d)", last_rank, p->rank);
                    return err_set(err, ERR_USAGE,
                                   "%s: .pieces: rows %zu-%zu of %s's %s are held twice %s", meta,
                                   p->row_begin, end, ct->name, kind, by);
                }
                next = p->row_begin + p->rows;
                last_rank = p->rank;
            }
            if (next < (size_t)ct->shape[0])
                return err_set(err, ERR_USAGE,
                               "%s: .pieces: no piece holds rows %zu-%lld of %s's %s", meta, next,
                               (long long)ct->shape[0], ct->name, kind);
        }
    }
    return 0;
}

/* Each rank's pieces lie back to back from byte 0 of its file, in meta.json's order (the order
 * they were written), and each rank file has exactly the bytes they end at: no more (bytes
 * from elsewhere), no fewer (cut short). */
static int check_rank_files(const CkptMeta *c, const char *meta, Err *err) {
    unsigned long long *end = calloc((size_t)c->world, sizeof *end);
    if (!end) return err_set(err, ERR_NOMEM, "out of memory reading %s", meta);
    int rc = 0;
    for (size_t i = 0; !rc && i < c->npieces; i++) {
        const CkptPiece *p = &c->pieces[i];
        if (p->offset != end[p->rank])
            rc = err_set(err, ERR_USAGE,
                         "%s: .pieces[%zu].offset is %llu, but rank %d's pieces before it in "
                         "rank-%05d.bin end at byte %llu",
                         meta, i, p->offset, p->rank, p->rank, end[p->rank]);
        end[p->rank] += p->bytes;
    }
    for (int r = 0; !rc && r < c->world; r++) {
        char path[FILE_MAX];
        ckpt_rank_path(path, sizeof path, c->path, r, "bin");
        struct stat sb;
        if (stat(path, &sb) != 0)
            rc = err_set(err, ERR_USAGE, "cannot open %s: %s (meta.json's .world is %d)", path,
                         strerror(errno), c->world);
        else if ((unsigned long long)sb.st_size < end[r])
            rc = err_set(err, ERR_USAGE, "%s is cut short: %llu bytes, its pieces end at byte %llu",
                         path, (unsigned long long)sb.st_size, end[r]);
        else if ((unsigned long long)sb.st_size > end[r])
            rc = err_set(err, ERR_USAGE,
                         "%s has %llu bytes but its pieces end at byte %llu: it is not the file "
                         "this checkpoint saved",
                         path, (unsigned long long)sb.st_size, end[r]);
    }
    free(end);
    return rc;
}

static int read_pieces(CkptMeta *c, const char *meta, const cJSON *list, Err *err) {
    if (!cJSON_IsArray(list))
        return err_set(err, ERR_USAGE, "%s: .pieces is %s", meta, list ? "not a list" : "missing");
    size_t n = (size_t)cJSON_GetArraySize(list);
    if (!(c->pieces = calloc(n + 1, sizeof *c->pieces)) ||
        !(c->by_rows = calloc(n + 1, sizeof *c->by_rows)))
        return err_set(err, ERR_NOMEM, "out of memory reading %s", meta);
    int rc = 0;
    for (const cJSON *o = list->child; !rc && o; o = o->next)
        rc = read_piece(c, meta, o, c->npieces, err);
    if (rc) return rc;
    if (n) memcpy(c->by_rows, c->pieces, n * sizeof *c->by_rows);
    qsort(c->by_rows, n, sizeof *c->by_rows, piece_order);
    rc = check_coverage(c, meta, err);
    return rc ? rc : check_rank_files(c, meta, err);
}

static int read_root(CkptMeta *c, const cJSON *root, const char *meta, int sealed,
                     const ModelKinds *kinds, const ModelDesc *expect, Err *err) {
    int rc = check_version(meta, root, sealed, err);
    const char *twice = NULL;
    if (!rc && repeated_key(root, &twice))
        rc = err_set(err, ERR_NOMEM, "out of memory reading %s", meta);
    if (!rc && twice)
        rc = err_set(err, ERR_USAGE,
                     "%s: the key \"%.64s\" appears twice in one object (jq would show the last, "
                     "fsdp read the first)",
                     meta, twice);
    if (!rc) rc = read_counters(c, meta, root, err);
    if (!rc) rc = read_validation(c, meta, root, err);
    if (!rc) rc = read_lr_curve(c, meta, root, err);
    if (!rc) rc = read_names(c, meta, root, kinds, err);
    if (rc) return rc;
    c->version = CHECKPOINT_VERSION;
    ModelDesc saved = {0};
    char described[256];
    rc = described_model(c, meta, root, kinds, &saved, described, sizeof described, err);
    const cJSON *tensors = cJSON_GetObjectItemCaseSensitive(root, "tensors");
    if (!rc) rc = check_tensor_list(meta, tensors, &saved, described, err);
    if (!rc && expect) rc = check_expected(c->path, &saved, expect, err);
    if (!rc && !(c->tensors = calloc((size_t)saved.nparams + 1, sizeof *c->tensors)))
        rc = err_set(err, ERR_NOMEM, "out of memory reading %s", meta);
    if (!rc) set_tensors(c, &saved);
    model_desc_free(&saved);
    if (!rc) rc = read_pieces(c, meta, cJSON_GetObjectItemCaseSensitive(root, "pieces"), err);
    if (!rc) rc = read_config(c, meta, cJSON_GetObjectItemCaseSensitive(root, "config"), err);
    return rc;
}

void ckpt_meta_free(CkptMeta *m) {
    for (int r = 0; m->readers && r < m->world; r++) bulk_reader_close(m->readers[r]);
    free(m->readers);
    for (int i = 0; i < 2 * m->nconfig; i++) free(m->config[i]);
    free(m->config);
    free(m->tensors);
    free(m->pieces);
    free(m->by_rows);
    memset(m, 0, sizeof *m);
}

int ckpt_meta_read(CkptMeta *out, const char *path, const ModelKinds *kinds,
                   const ModelDesc *expect, Err *err) {
    memset(out, 0, sizeof *out);
    if (strlen(path) + 64 > sizeof out->path)
        return err_set(err, ERR_USAGE, "checkpoint path is too long: %.200s...", path);
    snprintf(out->path, sizeof out->path, "%s", path);
    char meta[FILE_MAX];
    size_t len;
    ckpt_file_path(meta, sizeof meta, path, "meta.json");
    char *text = ckpt_slurp(meta, &len);
    if (!text) return err_set(err, ERR_USAGE, "%s is not a checkpoint: cannot read %s", path, meta);
    /* the checksum first, on the bytes: nothing is parsed from a file that fails it */
    size_t body;
    unsigned long stated, actual = 0;
    int sealed = !meta_crc_line(text, len, &body, &stated);
    if (sealed && (actual = ckpt_crc(text, body)) != stated) {
        free(text);
        return err_set(err, ERR_USAGE,
                       "%s is damaged: its \"crc32\" line says %lu, its content's CRC32 is %lu",
                       meta, stated, actual);
    }
    cJSON *root = cJSON_ParseWithLength(text, len);
    free(text);
    int rc = read_root(out, root, meta, sealed, kinds, expect, err);
    cJSON_Delete(root);
    if (!rc && !(out->readers = calloc((size_t)out->world, sizeof *out->readers)))
        rc = err_set(err, ERR_NOMEM, "out of memory reading %s", meta);
    if (rc) ckpt_meta_free(out);
    return rc;
}

void ckpt_rank_file(const CkptMeta *m, int rank, char *buf, size_t n) {
    ckpt_rank_path(buf, n, m->path, rank, "bin");
}

/* pread until n bytes have come (a read may return fewer); 0 at end of file or on error. */
/* Rank file `rank`'s reader, opened on first use; NULL with errno set when it cannot be. */
static BulkReader *rank_reader(const CkptMeta *m, int rank, const char *path) {
    if (!m->readers[rank] && bulk_reader_open(&m->readers[rank], path)) return NULL;
    return m->readers[rank];
}

static const char *nonfinite_name(float v) {
    return isnan(v) ? "nan" : v > 0 ? "inf" : "-inf";
}

/* The first value of n at `values` (element `first` of piece p onward) that is not a finite
 * number: one line naming the rank file, the tensor, the kind, its flat index in the tensor and
 * the value. A CRC only says the bytes are the ones saved; a nan saved, or written with its CRC
 * recomputed, would resume (or consolidate into) weights that are nothing but nan. */
static int check_finite(const CkptMeta *m, const CkptPiece *p, const char *path,
                        const float *values, size_t first, size_t n, Err *err) {
    for (size_t i = 0; i < n; i++)
        if (!isfinite(values[i]))
            return err_set(err, ERR_USAGE,
                           "%s: %s's %s holds %s at flat index %zu (a checkpoint's values must be "
                           "finite)",
                           path, m->tensors[p->tensor].name, state_kind_name(p->kind),
                           nonfinite_name(values[i]),
                           p->row_begin * m->tensors[p->tensor].row_elems + first + i);
    return 0;
}

enum { VERIFY_CHUNK = 1 << 20 }; /* bytes read at a time when the caller keeps none */

/* Reads piece p through CRC32, into buf when given (else through a chunk of its own), and
 * checks every value is finite. */
static int piece_read(const CkptMeta *m, const CkptPiece *p, unsigned char *buf, Err *err) {
    char path[FILE_MAX];
    ckpt_rank_file(m, p->rank, path, sizeof path);
    const char *tensor = m->tensors[p->tensor].name, *kind = state_kind_name(p->kind);
    BulkReader *r = rank_reader(m, p->rank, path);
    if (!r) return err_set(err, ERR_USAGE, "cannot open %s: %s", path, strerror(errno));
    unsigned char *chunk = buf ? NULL : malloc(VERIFY_CHUNK);
    if (!buf && !chunk) return err_set(err, ERR_NOMEM, "out of memory reading %s", path);
    unsigned long crc = crc32(0L, Z_NULL, 0);
    size_t bytes = (size_t)p->bytes, step = buf ? (bytes ? bytes : 1) : VERIFY_CHUNK;
    int rc = 0, finite = 0;
    for (size_t at = 0; !rc && at < bytes; at += step) {
        size_t n = bytes - at < step ? bytes - at : step;
        unsigned char *into = buf ? buf + at : chunk;
        if (bulk_read(r, p->offset + at, n, into, &crc))
            rc = err_set(err, ERR_USAGE, "%s is cut short: %s's %s needs bytes %llu-%llu", path,
                         tensor, kind, p->offset, p->offset + p->bytes);
        else if (!finite) /* the first value that is not is said once the CRC has vouched */
            finite = check_finite(m, p, path, (const float *)into, at / sizeof(float),
                                  n / sizeof(float), err) != 0;
    }
    free(chunk);
    if (!rc && crc != p->crc)
        rc = err_set(err, ERR_USAGE, "%s is corrupt: CRC mismatch in %s's %s (rows %zu-%zu)", path,
                     tensor, kind, p->row_begin, p->row_begin + p->rows);
    return rc ? rc : finite ? ERR_USAGE : 0;
}

int ckpt_piece_read(const CkptMeta *m, const CkptPiece *p, void *buf, Err *err) {
    return piece_read(m, p, buf, err);
}

int ckpt_piece_verify(const CkptMeta *m, const CkptPiece *p, Err *err) {
    return piece_read(m, p, NULL, err);
}
