/* flags: the parser, the help and the JSON config that every command's flag table shares: one
 * row per flag, read by all three, so a flag's name, kind, bounds and help live in one place. */
#include "cmd/flags.h"

#include <cjson/cJSON.h>
#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/dtype.h"

const Flag *flag_find(const FlagTable *t, const char *name) {
    for (int i = 0; i < t->nrows; i++)
        if (t->rows[i].name && !strcmp(t->rows[i].name, name)) return &t->rows[i];
    return NULL;
}

int cli_parse_long(const char *flag, const char *v, long lo, long hi, long *out, Err *err) {
    char *end;
    errno = 0;
    long x = strtol(v, &end, 10);
    if (end == v || *end || errno || x < lo || x > hi)
        return err_set(err, ERR_USAGE, "%s must be an integer from %ld to %ld (got '%s')", flag, lo,
                       hi, v);
    *out = x;
    return 0;
}

int cli_parse_int(const char *flag, const char *v, long lo, long hi, int *out, Err *err) {
    long x;
    int rc = cli_parse_long(flag, v, lo, hi, &x, err);
    if (!rc) *out = (int)x;
    return rc;
}

static int parse_float(const char *flag, const char *v, double lo, double hi, float *out,
                       Err *err) {
    char *end;
    errno = 0;
    double x = strtod(v, &end);
    if (end == v || *end || errno || !isfinite(x) || x < lo || x > hi)
        return err_set(err, ERR_USAGE, "%s must be a number from %g to %g (got '%s')", flag, lo, hi,
                       v);
    *out = (float)x;
    return 0;
}

/* A count may be written as a number strtod reads: 1e4 is a count too. */
static int parse_count(const char *flag, const char *v, long lo, long hi, int *out, Err *err) {
    char *end;
    double d = strtod(v, &end);
    if (end == v || *end || d != floor(d) || d < (double)lo || d > (double)hi)
        return err_set(err, ERR_USAGE, "%s must be a whole number from %ld to %ld (got '%s')", flag,
                       lo, hi, v);
    *out = (int)d;
    return 0;
}

static int parse_positive(const char *flag, const char *v, double hi, double *out, Err *err) {
    char *end;
    double d = strtod(v, &end);
    if (end == v || *end || !(d > 0) || !(d <= hi))
        return err_set(err, ERR_USAGE, "%s must be a number above 0 and at most %g (got '%s')",
                       flag, hi, v);
    *out = d;
    return 0;
}

static int parse_bool(const char *flag, const char *v, int *out, Err *err) {
    if (!strcmp(v, "true") || !strcmp(v, "1"))
        *out = 1;
    else if (!strcmp(v, "false") || !strcmp(v, "0"))
        *out = 0;
    else
        return err_set(err, ERR_USAGE, "%s must be true or false (got '%s')", flag, v);
    return 0;
}

static int parse_dtype(const char *flag, const char *v, DType *out, Err *err) {
    if (dtype_parse(v, out))
        return err_set(err, ERR_USAGE, "%s must be fp32, bf16 or fp16 (got '%s')", flag, v);
    return 0;
}

static int copy_word(const char *flag, const char *v, char *dst, size_t n, Err *err) {
    if (strlen(v) >= n) return err_set(err, ERR_USAGE, "%s value is too long (got '%s')", flag, v);
    snprintf(dst, n, "%s", v);
    return 0;
}

int flag_set(const Flag *row, void *args, const char *v, Err *err) {
    char *field = (char *)args + row->field;
    const char *f = row->name;
    if (row->given) *(int *)((char *)args + row->given) = 1;
    switch (row->kind) {
    case FLAG_SWITCH:
        *(int *)field = 1;
        return 0;
    case FLAG_INT:
        return cli_parse_int(f, v, (long)row->lo, (long)row->hi, (int *)field, err);
    case FLAG_LONG:
        return cli_parse_long(f, v, (long)row->lo, (long)row->hi, (long *)field, err);
    case FLAG_COUNT:
        return parse_count(f, v, (long)row->lo, (long)row->hi, (int *)field, err);
    case FLAG_FLOAT:
        return parse_float(f, v, row->lo, row->hi, (float *)field, err);
    case FLAG_POSITIVE:
        return parse_positive(f, v, row->hi, (double *)field, err);
    case FLAG_BOOL:
        return parse_bool(f, v, (int *)field, err);
    case FLAG_DTYPE:
        return parse_dtype(f, v, (DType *)field, err);
    case FLAG_STRING:
        *(const char **)field = v;
        return 0;
    case FLAG_WORD:
        return copy_word(f, v, field, row->size, err);
    case FLAG_SET:
        return row->set(args, f, v, err);
    default:
        return err_set(err, ERR_INTERNAL, "%s is not set from this table", f);
    }
}

int flag_missing_value(const FlagTable *t, const Flag *row, const char *name, Err *err) {
    if (row && row->missing) return err_set(err, ERR_USAGE, "%s", row->missing);
    return err_set(err, ERR_USAGE, "%s needs a value (see ./fsdp %s --help)", name, t->command);
}

/* A row that takes a value (not a switch, not a heading) named `name`; NULL if none. */
static const Flag *find_valued(const FlagTable *t, const char *name) {
    const Flag *row = flag_find(t, name);
    return row && row->kind != FLAG_SWITCH ? row : NULL;
}

int flag_unknown(const FlagTable *t, const char *name, Err *err) {
    return err_set(err, ERR_USAGE, "unknown flag %s (see ./fsdp %s --help)", name, t->command);
}

/* "--flag value" or "--flag=value" at argv[*i]: its row parses the value. */
static int parse_valued(const FlagTable *t, void *args, int argc, char **argv, int *i, Err *err) {
    const char *f = argv[*i], *eq = strchr(f, '=');
    char name[64];
    const char *v;
    if (eq) {
        snprintf(name, sizeof name, "%.*s", (int)(eq - f < 63 ? eq - f : 63), f);
        v = eq + 1;
    } else {
        snprintf(name, sizeof name, "%.63s", f);
        if (*i + 1 >= argc) {
            const Flag *row = find_valued(t, name);
            if (!row) return flag_unknown(t, name, err); /* the better message of the two */
            flag_missing_value(t, row, name, err);
            flag_set(row, args, "", err); /* what the flag says of an empty value says more */
            return ERR_USAGE;
        }
        v = argv[++*i];
    }
    const Flag *row = find_valued(t, name);
    return row ? flag_set(row, args, v, err) : flag_unknown(t, name, err);
}

int flags_parse(const FlagTable *t, void *args, int argc, char **argv, Err *err) {
    for (int i = 0; i < argc; i++) {
        const char *f = argv[i];
        if (!strcmp(f, "--help") || !strcmp(f, "-h")) return 1;
        const Flag *row = flag_find(t, f);
        if (row && row->kind == FLAG_SWITCH) {
            flag_set(row, args, NULL, err);
            continue;
        }
        if (strncmp(f, "--", 2) != 0)
            return err_set(err, ERR_USAGE, "unexpected argument '%s' (flags start with --)", f);
        int rc = parse_valued(t, args, argc, argv, &i, err);
        if (rc) return rc;
    }
    return 0;
}

/* ---------------------------------------------------------------- help */

/* One flag's lines: its usage, then its description from the table's column (three spaces
 * after a usage too long for it), each continuation line indented to the column. */
static void help_row(const FlagTable *t, const Flag *row, FILE *f) {
    int width;
    if (row->usage)
        width = fprintf(f, "  %s", row->usage);
    else
        width = fprintf(f, "  %s%s%s", row->name, row->arg ? " " : "", row->arg ? row->arg : "");
    const char *line = row->help;
    size_t len = strcspn(line, "\n");
    if (len) fprintf(f, "%*s", width < t->column ? t->column - width : 3, "");
    fprintf(f, "%.*s\n", (int)len, line);
    for (line += len; *line == '\n'; line += len) {
        line++;
        len = strcspn(line, "\n");
        fprintf(f, "%*s%.*s\n", t->column, "", (int)len, line);
    }
}

/* The names of rows [from, to), wrapped into lines of at most 80 columns. */
static void help_names(const FlagTable *t, int from, int to, FILE *f) {
    int width = 0;
    for (int i = from; i < to; i++) {
        int len = (int)strlen(t->rows[i].name);
        if (width && width + 1 + len > 80) {
            fputc('\n', f);
            width = 0;
        }
        width += fprintf(f, "%s%s", width ? " " : "  ", t->rows[i].name);
    }
    if (width) fputc('\n', f);
}

static int is_heading(const Flag *row) {
    return row->kind == FLAG_SECTION || row->kind == FLAG_NAMES;
}

void flags_help(const FlagTable *t, FILE *f) {
    for (int i = 0; i < t->nrows; i++) {
        const Flag *row = &t->rows[i];
        if (is_heading(row)) fprintf(f, "%s\n", row->help);
        if (row->kind == FLAG_NAMES) {
            int end = i + 1;
            while (end < t->nrows && !is_heading(&t->rows[end])) end++;
            help_names(t, i + 1, end, f);
            i = end - 1;
        } else if (!is_heading(row) && row->help) {
            help_row(t, row, f);
        }
    }
}

/* ---------------------------------------------------------------- config files */

/* A whole number as one ("600", not "6e+02": the integer flags read no exponent). */
static int whole_text(double v, char *buf, size_t n) {
    if (v != floor(v) || fabs(v) >= 1e15) return 0;
    snprintf(buf, n, "%.0f", v);
    return 1;
}

/* The shortest text that the flag's parser (strtod, then a cast to float) reads back to v. */
static void float_text(float v, char *buf, size_t n) {
    if (whole_text(v, buf, n)) return;
    for (int digits = 1; digits <= 9; digits++) {
        snprintf(buf, n, "%.*g", digits, (double)v);
        if ((float)strtod(buf, NULL) == v) return;
    }
}

static void double_text(double v, char *buf, size_t n) {
    if (whole_text(v, buf, n)) return;
    for (int digits = 1; digits <= 17; digits++) {
        snprintf(buf, n, "%.*g", digits, v);
        if (strtod(buf, NULL) == v) return;
    }
}

static int in_bounds(const Flag *row, double v) {
    return v >= row->lo && v <= row->hi;
}

FlagValue flag_value(const Flag *row, const void *args, char *buf, size_t n) {
    if (row->get) return row->get(row, args, buf, n);
    const char *field = (const char *)args + row->field;
    buf[0] = 0;
    switch (row->kind) {
    case FLAG_SWITCH:
    case FLAG_BOOL: /* below 0: not given, something else decides */
        if (*(const int *)field < 0) return FLAG_VALUE_NONE;
        snprintf(buf, n, "%s", *(const int *)field ? "true" : "false");
        return FLAG_VALUE_BOOL;
    case FLAG_INT:
    case FLAG_COUNT: {
        int v = *(const int *)field;
        if (!in_bounds(row, v)) return FLAG_VALUE_NONE;
        snprintf(buf, n, "%d", v);
        return FLAG_VALUE_NUMBER;
    }
    case FLAG_LONG: {
        long v = *(const long *)field;
        if (!in_bounds(row, (double)v)) return FLAG_VALUE_NONE;
        snprintf(buf, n, "%ld", v);
        return FLAG_VALUE_NUMBER;
    }
    case FLAG_FLOAT: {
        float v = *(const float *)field;
        if (!in_bounds(row, v)) return FLAG_VALUE_NONE;
        float_text(v, buf, n);
        return FLAG_VALUE_NUMBER;
    }
    case FLAG_POSITIVE: {
        double v = *(const double *)field;
        if (!(v > 0 && v <= row->hi)) return FLAG_VALUE_NONE;
        double_text(v, buf, n);
        return FLAG_VALUE_NUMBER;
    }
    case FLAG_DTYPE:
        snprintf(buf, n, "%s", dtype_name(*(const DType *)field));
        return FLAG_VALUE_TEXT;
    case FLAG_STRING: {
        const char *v = *(const char *const *)field;
        if (!v) return FLAG_VALUE_NONE;
        snprintf(buf, n, "%s", v);
        return FLAG_VALUE_TEXT;
    }
    case FLAG_WORD:
        snprintf(buf, n, "%s", field);
        return FLAG_VALUE_TEXT;
    default: /* a heading, a forwarded flag, a setter without a getter */
        return FLAG_VALUE_NONE;
    }
}

/* A config's key for the row: its name without the leading dashes. */
static const char *config_key(const Flag *row) {
    return row->name + 2;
}

static int in_config(const Flag *row) {
    return row->name && row->kind != FLAG_SECTION && row->kind != FLAG_NAMES &&
           row->kind != FLAG_FORWARD && !row->not_in_config;
}

/* s as a JSON string: quotes, backslashes and control characters escaped. */
static void json_string(FILE *f, const char *s) {
    fputc('"', f);
    for (; *s; s++) {
        unsigned char c = (unsigned char)*s;
        if (c == '"' || c == '\\')
            fprintf(f, "\\%c", c);
        else if (c < 0x20)
            fprintf(f, "\\u%04x", c);
        else
            fputc(c, f);
    }
    fputc('"', f);
}

int flags_write_json(const FlagTable *t, const void *args, FILE *f, Err *err) {
    enum { VALUE_MAX = 8192 };
    char *value = malloc(VALUE_MAX);
    if (!value) return err_set(err, ERR_NOMEM, "out of memory writing a config");
    int first = 1, rc = 0;
    fputs("{\n", f);
    for (int i = 0; i < t->nrows && !rc; i++) {
        const Flag *row = &t->rows[i];
        if (!in_config(row)) continue;
        FlagValue kind = flag_value(row, args, value, VALUE_MAX);
        if (strlen(value) + 1 >= VALUE_MAX) {
            rc = err_set(err, ERR_USAGE, "%s is too long for a config file", row->name);
            break;
        }
        fprintf(f, "%s  \"%s\": ", first ? "" : ",\n", config_key(row));
        first = 0;
        if (kind == FLAG_VALUE_NONE)
            fputs("null", f);
        else if (kind == FLAG_VALUE_TEXT)
            json_string(f, value);
        else
            fputs(value, f);
    }
    fputs("\n}\n", f);
    free(value);
    return rc;
}

/* What a JSON value is, for messages. */
static const char *json_type(const cJSON *v) {
    return cJSON_IsBool(v)     ? "true or false"
           : cJSON_IsNumber(v) ? "a number"
           : cJSON_IsString(v) ? "a string"
           : cJSON_IsArray(v)  ? "an array"
           : cJSON_IsObject(v) ? "an object"
                               : "something else";
}

/* The JSON type a row's value takes in a config: what flag_value writes for it. */
static int json_type_fits(const Flag *row, const cJSON *v) {
    switch (row->kind) {
    case FLAG_SWITCH:
    case FLAG_BOOL:
        return cJSON_IsBool(v);
    case FLAG_INT:
    case FLAG_LONG:
    case FLAG_COUNT:
    case FLAG_FLOAT:
    case FLAG_POSITIVE:
        return cJSON_IsNumber(v);
    case FLAG_SET: /* its getter writes a number or a string */
        return cJSON_IsNumber(v) || cJSON_IsString(v);
    default:
        return cJSON_IsString(v);
    }
}

static const char *expected_type(const Flag *row) {
    switch (row->kind) {
    case FLAG_SWITCH:
    case FLAG_BOOL:
        return "true or false";
    case FLAG_INT:
    case FLAG_LONG:
    case FLAG_COUNT:
    case FLAG_FLOAT:
    case FLAG_POSITIVE:
        return "a number";
    case FLAG_SET:
        return "a string or a number";
    default:
        return "a string";
    }
}

/* One key's value into args through its row, as the command line would give it. */
static int read_value(const Flag *row, void *args, const cJSON *v, const char *source, Err *err) {
    const char *key = config_key(row);
    if (cJSON_IsNull(v)) return 0;
    if (!json_type_fits(row, v))
        return err_set(err, ERR_USAGE, "--config %s: \"%s\" must be %s (got %s)", source, key,
                       expected_type(row), json_type(v));
    if (row->kind == FLAG_SWITCH) {
        if (cJSON_IsTrue(v)) flag_set(row, args, NULL, err);
        return 0;
    }
    char text[64];
    const char *value = text;
    if (cJSON_IsBool(v))
        snprintf(text, sizeof text, "%s", cJSON_IsTrue(v) ? "true" : "false");
    else if (cJSON_IsNumber(v))
        double_text(v->valuedouble, text, sizeof text);
    else
        value = v->valuestring;
    Err why = {0};
    if (flag_set(row, args, value, &why) == 0) return 0;
    return err_set(err, ERR_USAGE, "--config %s: \"%s\": %s", source, key, why.msg);
}

/* The line of the text where a parse stopped. */
static int line_at(const char *text, const char *at) {
    int line = 1;
    for (const char *s = text; at && s < at && *s; s++) line += *s == '\n';
    return line;
}

int flags_read_json(const FlagTable *t, void *args, const char *text, const char *source,
                    void **doc, Err *err) {
    *doc = NULL;
    const char *end = NULL;
    cJSON *root = cJSON_ParseWithOpts(text, &end, 1);
    if (!root)
        return err_set(err, ERR_USAGE, "--config %s: not JSON (it stops making sense at line %d)",
                       source, line_at(text, end ? end : cJSON_GetErrorPtr()));
    *doc = root;
    if (!cJSON_IsObject(root))
        return err_set(err, ERR_USAGE,
                       "--config %s: not a config of ./fsdp %s (a JSON object of flag names, as "
                       "--run-dir writes config.json)",
                       source, t->command);
    const cJSON *v;
    cJSON_ArrayForEach(v, root) {
        char name[96];
        snprintf(name, sizeof name, "--%s", v->string);
        const Flag *row = strlen(v->string) < 90 ? flag_find(t, name) : NULL;
        if (!row || !in_config(row)) {
            if (row && row->not_in_config)
                return err_set(err, ERR_USAGE,
                               "--config %s: \"%s\" is not kept in a config (give %s on the "
                               "command line)",
                               source, v->string, name);
            return err_set(err, ERR_USAGE,
                           "--config %s: unknown key \"%.80s\" (not a flag of ./fsdp %s; see "
                           "--help)",
                           source, v->string, t->command);
        }
        for (const cJSON *before = root->child; before != v; before = before->next)
            if (!strcmp(before->string, v->string))
                return err_set(err, ERR_USAGE, "--config %s: \"%s\" is given twice", source,
                               v->string);
        int rc = read_value(row, args, v, source, err);
        if (rc) return rc;
    }
    return 0;
}

void flags_json_free(void *doc) {
    cJSON_Delete(doc);
}
