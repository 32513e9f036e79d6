/* flags: a command's flags as one table, read both by the parser and by --help. A row names a
 * flag, what kind of value it takes, the field of the command's args struct it sets (or a
 * setter for the odd ones), the bounds, and its help line. The same table writes and reads a
 * JSON config of the flags' values (train's --run-dir and --config). */
#ifndef FSDP_CMD_FLAGS_H
#define FSDP_CMD_FLAGS_H

#include <stddef.h>
#include <stdio.h>

#include "base/err.h"

typedef enum {
    FLAG_SECTION, /* not a flag: a heading of the help ("cluster") */
    FLAG_NAMES,   /* ... a heading under which the flags are listed by name only, wrapped */
    FLAG_SWITCH,  /* no value: sets the int field to 1 */
    FLAG_INT,     /* a whole number from lo to hi, into an int */
    FLAG_LONG,    /* ... into a long */
    FLAG_COUNT,   /* a whole number from lo to hi written any way strtod reads (1e4), into an int */
    FLAG_FLOAT,   /* a number from lo to hi, into a float */
    FLAG_POSITIVE, /* a number above 0 and at most hi, into a double */
    FLAG_BOOL,     /* true|false (or 1|0), into an int */
    FLAG_DTYPE,    /* fp32|bf16|fp16, into a DType */
    FLAG_STRING,   /* the value itself, kept as given (argv outlives the args), into a char * */
    FLAG_WORD,     /* the value copied into a char array of `size` bytes */
    FLAG_SET,      /* the row's setter does it all */
    FLAG_FORWARD,  /* taken by the command as it is and handed to another table (plan: train's) */
} FlagKind;

/* What a row's value is, as a config file holds it (flag_value). */
typedef enum {
    FLAG_VALUE_NONE,   /* not set: the default decides (JSON null) */
    FLAG_VALUE_TEXT,   /* a JSON string */
    FLAG_VALUE_NUMBER, /* a JSON number, written as the text */
    FLAG_VALUE_BOOL,   /* "true" or "false" */
} FlagValue;

typedef struct Flag {
    const char *name; /* "--ranks"; for a heading, NULL */
    FlagKind kind;
    size_t field;  /* offsetof the field in the command's args struct */
    double lo, hi; /* bounds of a number, both allowed */
    size_t size;   /* FLAG_WORD: the char array's size */
    /* offsetof an int set to 1 when the flag is given (train's --steps, --batch-size, --lr:
     * the model's defaults fill what was not); 0: none, so never a struct's first field */
    size_t given;
    int (*set)(void *args, const char *flag, const char *value, Err *err); /* FLAG_SET */
    const char *arg; /* the value's name in the help ("N", "FILE"); NULL: none shown */
    /* The help's description; a '\n' starts a continuation line, indented to the table's
     * column (a leading one puts the whole description under the flag). NULL: the flag is
     * described on an earlier row's line (whose usage names it too). A heading's text. */
    const char *help;
    const char *usage;   /* the help's left column when it is not "name arg" */
    const char *missing; /* the line when the value is missing; NULL: the table's */
    /* The value in args as the flag's own text, for config files, where the kind's reading of
     * the field does not do (a setter's field; a value that depends on others); writes buf and
     * says what it wrote. NULL: by the kind (flag_value). */
    FlagValue (*get)(const struct Flag *row, const void *args, char *buf, size_t n);
    /* How this process runs rather than what the job is (train's --config, --resume and the
     * injected faults --fail-at, --kill-in-save): no config holds it */
    int not_in_config;
} Flag;

typedef struct FlagTable {
    const char *command; /* "train": for "see ./fsdp train --help" */
    const Flag *rows;
    int nrows;
    int column; /* where the help's descriptions start */
} FlagTable;

/* The table of a command's array of rows. */
#define FLAG_TABLE(command, rows, column)                                                          \
    { (command), (rows), (int)(sizeof(rows) / sizeof *(rows)), (column) }

/* The row named `name` exactly; NULL if none. Headings have no name. */
const Flag *flag_find(const FlagTable *t, const char *name);

/* Parses value into the row's field of args. Returns 0, or ERR_USAGE naming the flag. */
int flag_set(const Flag *row, void *args, const char *value, Err *err);

/* ERR_USAGE: "FLAG needs a value", as the row (or its table) says it. */
int flag_missing_value(const FlagTable *t, const Flag *row, const char *name, Err *err);

/* ERR_USAGE: "unknown flag FLAG (see ./fsdp COMMAND --help)". */
int flag_unknown(const FlagTable *t, const char *name, Err *err);

/* argv[0] is the first flag. Every flag is "--name value", "--name=value" or a bare switch;
 * an unknown flag or a missing value is one line naming it. Returns 0, 1 for --help (or -h),
 * or ERR_USAGE. */
int flags_parse(const FlagTable *t, void *args, int argc, char **argv, Err *err);

/* The table's headings and flags, each with its help, as --help shows them. */
void flags_help(const FlagTable *t, FILE *f);

/* ---- config files: the table's flags and their values as one JSON object, a key per flag
 * (its name without the dashes: "lr", "checkpoint-dir") in the table's order. A number is
 * written as the shortest text that reads back to the same value, so a config run again
 * trains bit for bit the same. */

/* The row's value in args as the text the flag takes ("zero3", "0.001", "true") into buf.
 * A number outside the row's bounds is its "not given" (--epochs 0) and is FLAG_VALUE_NONE, as
 * is a string field that is NULL. */
FlagValue flag_value(const Flag *row, const void *args, char *buf, size_t n);

/* Every flag of the table but the headings, forwarded and not_in_config rows, one a line
 * (`  "key": value,`). Returns 0, or ERR_USAGE naming a value too long to write. */
int flags_write_json(const FlagTable *t, const void *args, FILE *f, Err *err);

/* Sets args from a config's text, each key through its flag's row as if given on the command
 * line (null: not given). The string fields then point into *doc, which the caller keeps while
 * args are used and frees with flags_json_free. A text that is not a JSON object, an unknown,
 * repeated or not_in_config key, a value of the wrong JSON type or one the flag refuses is one
 * line naming `source` and the key: ERR_USAGE. */
int flags_read_json(const FlagTable *t, void *args, const char *text, const char *source,
                    void **doc, Err *err);
void flags_json_free(void *doc);

/* A flag's whole-number value v in [lo, hi], or one line naming the flag and the range. */
int cli_parse_long(const char *flag, const char *v, long lo, long hi, long *out, Err *err);
int cli_parse_int(const char *flag, const char *v, long lo, long hi, int *out, Err *err);

#endif
