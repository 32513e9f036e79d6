/* flags: the parser and the help that every command's flag table shares: one row per flag,
 * read by both, so a flag's name, kind, bounds and help live in one place. */
#include "cmd/flags.h"

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
