/* ./fsdp lessons: every reference solution passes its lesson's check, every exercise as shipped
 * fails it on an expectation (not a crash), and the runner's commands behave. */
#include <criterion/criterion.h>
#include <glob.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>
#include <zlib.h>

#include "tests/util.h"

/* Also: a fresh checkout lists every lesson as not started, a compile error is one error line and
 * its source line, hints step through and are remembered, progress goes not started -> done -> in
 * progress, watch stops on a pass, and bad input is one line and exit 2. Every run keeps its
 * progress in a temporary file, never the learner's lessons/.progress; the lessons are found by
 * their folders, so a new lesson is tested without touching this file. */

#define MAX_LESSONS 64

typedef struct LessonDir {
    int number;
    char folder[128]; /* "02-shard-ranges" */
} LessonDir;

/* lessons/NN-topic/ folders with an exercise.c, in order. */
static int find_lessons(LessonDir *out) {
    glob_t g;
    int n = 0;
    if (glob("lessons/[0-9][0-9]-*/exercise.c", 0, NULL, &g) != 0) return 0;
    for (size_t i = 0; i < g.gl_pathc && n < MAX_LESSONS; i++) {
        const char *folder = g.gl_pathv[i] + strlen("lessons/");
        size_t len = strcspn(folder, "/");
        snprintf(out[n].folder, sizeof out[n].folder, "%.*s", (int)len, folder);
        out[n].number = atoi(out[n].folder);
        n++;
    }
    globfree(&g);
    cr_assert_gt(n, 0, "no lessons/NN-topic/exercise.c found (run the tests from the root)");
    return n;
}

typedef struct Tmp {
    char dir[64];
    char state[128]; /* a progress file that does not exist yet */
} Tmp;

static void tmp_make(Tmp *t) {
    snprintf(t->dir, sizeof t->dir, "/tmp/fsdp_lessons_XXXXXX");
    cr_assert(mkdtemp(t->dir));
    snprintf(t->state, sizeof t->state, "%s/progress", t->dir);
}

static void tmp_remove(const Tmp *t) {
    char cmd[128];
    snprintf(cmd, sizeof cmd, "rm -rf %s", t->dir);
    cr_expect_eq(system(cmd), 0);
}

/* Every test's directory: a fresh one each test, removed after it however it ended. */
static Tmp tmp;

static void make_tmp(void) {
    tmp_make(&tmp);
}

static void remove_tmp(void) {
    tmp_remove(&tmp);
}

TestSuite(lessons, .init = make_tmp, .fini = remove_tmp);

typedef struct Run {
    int code;
    char *out, *err;
} Run;

/* `ENV fsdp lessons ARGS` with the progress in t->state; stdout and stderr apart. */
static Run lessons(const Tmp *t, const char *env, const char *args) {
    char cmd[2048], out[160], err[160];
    snprintf(out, sizeof out, "%s/stdout", t->dir);
    snprintf(err, sizeof err, "%s/stderr", t->dir);
    snprintf(cmd, sizeof cmd, "FSDP_LESSONS_STATE=%s %s timeout 120 %s lessons %s >%s 2>%s",
             t->state, env ? env : "", fsdp_bin(), args, out, err);
    int status = system(cmd);
    Run r = {WIFEXITED(status) ? WEXITSTATUS(status) : -1, read_text_file(out, NULL),
             read_text_file(err, NULL)};
    return r;
}

static void run_free(Run *r) {
    free(r->out);
    free(r->err);
}

static int count_lines(const char *s) {
    int n = 0;
    for (; *s; s++) n += *s == '\n';
    return n;
}

/* The line of `text` that starts with `prefix`, into buf; 0 if none. */
static int line_starting(const char *text, const char *prefix, char *buf, size_t n) {
    for (const char *s = text; *s;) {
        size_t len = strcspn(s, "\n");
        if (!strncmp(s, prefix, strlen(prefix))) {
            snprintf(buf, n, "%.*s", (int)len, s);
            return 1;
        }
        s += len + (s[len] != 0);
    }
    return 0;
}

/* A learner's edits to the shipped exercise: git says the file differs from HEAD. Without
 * git (a tarball) the file is taken as shipped. */
static int edited_by_learner(const LessonDir *l) {
    char cmd[256];
    snprintf(cmd, sizeof cmd, "git diff --quiet HEAD -- lessons/%s/exercise.c 2>/dev/null",
             l->folder);
    int status = system(cmd);
    return WIFEXITED(status) && WEXITSTATUS(status) == 1;
}

static unsigned long file_crc(const char *path) {
    char *text = read_text_file(path, NULL);
    unsigned long crc = crc32(0L, (const Bytef *)text, (uInt)strlen(text));
    free(text);
    return crc;
}

Test(lessons, every_lesson_is_listed_and_has_a_solution) {
    LessonDir ls[MAX_LESSONS];
    int n = find_lessons(ls);
    Run r = lessons(&tmp, NULL, "");
    cr_expect_eq(r.code, 0, "%s", r.err);
    for (int i = 0; i < n; i++) {
        char want[16], path[256], line[256];
        snprintf(want, sizeof want, "  %02d  ", ls[i].number);
        cr_expect(line_starting(r.out, want, line, sizeof line), "lesson %s is not listed:\n%s",
                  ls[i].folder, r.out);
        const char *parts[] = {"README.md", "exercise.h", "check.c", "hints.md"};
        for (int k = 0; k < 4; k++) {
            snprintf(path, sizeof path, "lessons/%s/%s", ls[i].folder, parts[k]);
            cr_expect_eq(access(path, R_OK), 0, "%s is missing", path);
        }
        snprintf(path, sizeof path, "lessons/solutions/%s.c", ls[i].folder);
        cr_expect_eq(access(path, R_OK), 0, "%s is missing", path);
    }
    run_free(&r);
}

/* A lesson's take-away, as its README holds it (README.md's "## Take-away"): two lines of text,
 * then "See it live: `COMMAND`". */
typedef struct Takeaway {
    char line[2][256], command[256];
} Takeaway;

static Takeaway takeaway_of(const LessonDir *l) {
    char path[256];
    snprintf(path, sizeof path, "lessons/%s/README.md", l->folder);
    char *text = read_text_file(path, NULL);
    const char *at = strstr(text, "\n## Take-away\n\n");
    cr_assert(at, "%s has no \"## Take-away\" section: what a pass prints", path);
    Takeaway t;
    int n = sscanf(at, "\n## Take-away\n\n%255[^\n]\n%255[^\n]\n\nSee it live: `%255[^`]`",
                   t.line[0], t.line[1], t.command);
    cr_assert_eq(n, 3, "%s: the take-away is two lines, a blank one, then See it live: `...`",
                 path);
    const char *rest = strstr(at, t.command) + strlen(t.command) + 1;
    cr_assert(strspn(rest, "\n") == strlen(rest), "%s: the take-away ends the README", path);
    free(text);
    return t;
}

/* Issue 38: a pass printed no take-away and no way to see the piece live. It now prints the
 * two lines of the README's take-away and its command. */
Test(lessons, every_solution_passes_its_check) {
    LessonDir ls[MAX_LESSONS];
    int n = find_lessons(ls);
    for (int i = 0; i < n; i++) {
        char args[256], want[1024];
        snprintf(args, sizeof args, "check %02d --file lessons/solutions/%s.c", ls[i].number,
                 ls[i].folder);
        Run r = lessons(&tmp, NULL, args);
        snprintf(want, sizeof want, "lesson %02d passed: ", ls[i].number);
        cr_expect_eq(r.code, 0, "`lessons %s` exited %d:\n%s%s", args, r.code, r.out, r.err);
        cr_expect(strstr(r.out, want), "`lessons %s` said:\n%s", args, r.out);
        Takeaway t = takeaway_of(&ls[i]);
        snprintf(want, sizeof want, "\n  %s\n  %s\n  see it live: %s\n", t.line[0], t.line[1],
                 t.command);
        cr_expect(strstr(r.out, want), "`lessons %s` does not end with the take-away:\n%s", args,
                  r.out);
        run_free(&r);
    }
    cr_expect_neq(access(tmp.state, F_OK), 0, "a --file check records no progress");
}

/* Each take-away's command is ./fsdp viz, train or plan, and runs: in a folder of its own, with
 * this build's fsdp. */
Test(lessons, every_take_away_command_runs) {
    LessonDir ls[MAX_LESSONS];
    int n = find_lessons(ls);
    for (int i = 0; i < n; i++) {
        Takeaway t = takeaway_of(&ls[i]);
        const char *args = t.command + strlen("./fsdp ");
        cr_expect(!strncmp(t.command, "./fsdp viz ", 11) ||
                      !strncmp(t.command, "./fsdp train ", 13) ||
                      !strncmp(t.command, "./fsdp plan ", 12),
                  "lesson %s: %s is no ./fsdp viz, train or plan command", ls[i].folder, t.command);
        char cmd[2 * PATH_MAX], bin[PATH_MAX];
        cr_assert(realpath(fsdp_bin(), bin));
        snprintf(cmd, sizeof cmd, "cd %s && timeout 120 %s %s > out 2>&1", tmp.dir, bin, args);
        int status = system(cmd);
        snprintf(cmd, sizeof cmd, "%s/out", tmp.dir);
        char *out = read_text_file(cmd, NULL);
        cr_expect(WIFEXITED(status) && WEXITSTATUS(status) == 0 && out[0],
                  "lesson %s's take-away command `%s` failed:\n%s", ls[i].folder, t.command, out);
        free(out);
    }
}

/* As shipped, each exercise fails on its first expectation, in two lines: the input, what
 * was expected and what came back, then the hint to read. Not a crash, not a time-out. */
Test(lessons, every_shipped_exercise_fails_on_an_expectation) {
    LessonDir ls[MAX_LESSONS];
    int n = find_lessons(ls);
    for (int i = 0; i < n; i++) {
        if (edited_by_learner(&ls[i])) {
            cr_log_warn("lessons/%s/exercise.c differs from git HEAD: not checked as shipped",
                        ls[i].folder);
            continue;
        }
        char args[256], first[64], hint[64], line[1024];
        snprintf(args, sizeof args, "check %02d --file lessons/%s/exercise.c", ls[i].number,
                 ls[i].folder);
        Run r = lessons(&tmp, NULL, args);
        cr_expect_eq(r.code, 1, "`lessons %s` exited %d:\n%s%s", args, r.code, r.out, r.err);
        cr_expect_eq(count_lines(r.out), 2, "`lessons %s` said:\n%s", args, r.out);
        snprintf(first, sizeof first, "lesson %02d failed: ", ls[i].number);
        cr_expect(line_starting(r.out, first, line, sizeof line), "%s", r.out);
        cr_expect(strstr(line, ": expected ") && strstr(line, ", got "), "%s", line);
        snprintf(hint, sizeof hint, "read hint ");
        cr_expect(line_starting(r.out, hint, line, sizeof line), "%s", r.out);
        snprintf(hint, sizeof hint, "./fsdp lessons hint %02d ", ls[i].number);
        cr_expect(strstr(line, hint), "%s", line);
        run_free(&r);
    }
}

Test(lessons, a_fresh_checkout_lists_every_lesson_as_not_started) {
    LessonDir ls[MAX_LESSONS];
    int n = find_lessons(ls);
    Run r = lessons(&tmp, NULL, "");
    cr_expect_eq(r.code, 0);
    for (int i = 0; i < n; i++) {
        char want[16], line[256], path[256];
        snprintf(want, sizeof want, "  %02d  ", ls[i].number);
        cr_assert(line_starting(r.out, want, line, sizeof line), "%s", r.out);
        if (edited_by_learner(&ls[i])) continue;
        snprintf(path, sizeof path, "lessons/%s/exercise.c", ls[i].folder);
        cr_expect(strstr(line, "not started"),
                  "%s\n%s is as shipped but not 'not started': its crc32 is 0x%08lx; put that in "
                  "lessons/tool/lesson_index.c",
                  line, path, file_crc(path));
    }
    cr_expect(strstr(r.out, "next: ./fsdp lessons check 01 (lessons/01-"), "%s", r.out);
    run_free(&r);
}

/* Whitespace runs (newlines included) as one space, in place: text as a reader reads it. */
static void squeeze_spaces(char *s) {
    char *out = s;
    for (const char *in = s; *in; in++) {
        int space = *in == ' ' || *in == '\n' || *in == '\t';
        if (space && (out == s || out[-1] == ' ')) continue;
        *out++ = space ? ' ' : *in;
    }
    *out = 0;
}

/* The README's prose paragraphs (fenced blocks left out), each on one line, "\n" between. */
static char *prose_paragraphs(const char *path) {
    char *text = read_text_file(path, NULL), *out = calloc(1, strlen(text) + 2);
    cr_assert(out);
    int fenced = 0;
    size_t at = 0;
    for (char *line = text; *line;) {
        size_t len = strcspn(line, "\n");
        if (!strncmp(line, "```", 3)) {
            fenced = !fenced;
        } else if (!fenced) {
            if (len == 0) out[at++] = '\n'; /* a blank line ends a paragraph */
            memcpy(out + at, line, len);
            at += len;
            out[at++] = ' ';
        }
        line += len + (line[len] != 0);
    }
    free(text);
    return out;
}

/* A viewer key a README names, as in "`k`/`K` (next/previous compute)": the keys, then the
 * viewer's own words for them in brackets. Returns what follows it, and writes "k/K next/previous
 * compute" (as `fsdp viz --help` says it) to out; NULL where s holds no more keys. A key named
 * without the viewer's words writes "`f` without ..." to out and returns where it was. */
static const char *next_viewer_key(const char *s, char *out, size_t n) {
    const char *k = s;
    while ((k = strchr(k, '`')) && !(k[1] && k[1] != '`' && k[1] != ' ' && k[2] == '`')) k++;
    if (!k) return NULL;
    char keys[32] = "";
    const char *p = k;
    while (p[0] == '`' && p[1] && p[2] == '`' && strlen(keys) + 2 < sizeof keys) {
        size_t at = strlen(keys);
        if (at) keys[at++] = '/';
        keys[at++] = p[1];
        keys[at] = 0;
        p += 3;
        if (p[0] == '/' && p[1] == '`') p++;
    }
    if (strncmp(p, " (", 2) || !strchr(p + 2, ')')) {
        snprintf(out, n, "`%c` without the viewer's words for it in brackets after it", k[1]);
        return p;
    }
    snprintf(out, n, "%s %.*s", keys, (int)strcspn(p + 2, ")"), p + 2);
    return p + 2 + strcspn(p + 2, ")") + 1;
}

/* Issue 38: lesson 03 sent the learner to `f` "to step from forward event to forward event" in
 * the viewer, where `k` does that (`f` jumps to the first event of the step's forward). A
 * paragraph of a lesson's README that speaks of the viewer names a key as "`k` (next compute)",
 * its words as `fsdp viz --help` gives them, and this holds every such key to that text. */
Test(lessons, every_viewer_key_a_readme_names_is_the_viewers) {
    int code;
    char *help = fsdp_run(&code, "2>&1", "viz --help");
    cr_assert_eq(code, 0, "%s", help);
    squeeze_spaces(help);
    glob_t g;
    cr_assert_eq(glob("lessons/*/README.md", 0, NULL, &g), 0);
    int keys = 0;
    for (size_t i = 0; i < g.gl_pathc; i++) {
        char *prose = prose_paragraphs(g.gl_pathv[i]);
        for (char *para = strtok(prose, "\n"); para; para = strtok(NULL, "\n")) {
            if (!strstr(para, "viewer") && !strstr(para, "./fsdp viz")) continue;
            squeeze_spaces(para);
            char said[256];
            for (const char *at = para; (at = next_viewer_key(at, said, sizeof said)); keys++)
                cr_expect(strstr(help, said) != NULL,
                          "%s names the viewer's key as \"%s\", which `fsdp viz --help` does not "
                          "say:\n%s",
                          g.gl_pathv[i], said, para);
        }
        free(prose);
    }
    globfree(&g);
    cr_expect_gt(keys, 0, "no lesson README names a key of the viewer");
    free(help);
}

static void write_file(const char *path, const char *text) {
    FILE *f = fopen(path, "w");
    cr_assert(f);
    fputs(text, f);
    fclose(f);
}

/* `fsdp lessons check NN --file PATH` of `source` written to PATH, tmp's directory/`name`
 * (path: room for 128). */
static Run check_source(int lesson, const char *name, const char *source, char *path) {
    snprintf(path, 128, "%s/%s", tmp.dir, name);
    write_file(path, source);
    char args[256];
    snprintf(args, sizeof args, "check %02d --file %s", lesson, path);
    return lessons(&tmp, NULL, args);
}

static Run check_02_source(const char *name, const char *source, char *path) {
    return check_source(2, name, source, path);
}

Test(lessons, a_compile_error_is_its_first_error_and_source_line) {
    char path[128];
    Run r =
        check_02_source("exercise.c",
                        "#include \"exercise.h\"\n"
                        "\n"
                        "void shard_range(size_t d0, int S, int r, size_t *begin, size_t *rows) {\n"
                        "    *begin = d0 * (size_t)r\n"
                        "    *rows = (size_t)S + undeclared;\n"
                        "}\n",
                        path);
    cr_expect_eq(r.code, 1, "%s%s", r.out, r.err);
    /* "does not compile", the error, the source line, the caret, "fix it ..." */
    cr_expect_eq(count_lines(r.out), 5, "%s", r.out);
    int errors = 0;
    for (const char *s = r.out; (s = strstr(s, "error:")); s++) errors++;
    cr_expect_eq(errors, 1, "%s", r.out);
    char line[512], prefix[160];
    snprintf(prefix, sizeof prefix, "%s:", path);
    cr_expect(line_starting(r.out, prefix, line, sizeof line), "%s", r.out);
    cr_expect(strstr(line, ": error: "), "%s", line);
    cr_expect(strstr(r.out, "    4 |     *begin = d0 * (size_t)r\n") ||
                  strstr(r.out, "    5 |     *rows = (size_t)S + undeclared;\n"),
              "%s", r.out);
    cr_expect(strstr(r.out, "fix it and run ./fsdp lessons check 02 again\n"), "%s", r.out);
    run_free(&r);
}

Test(lessons, a_crash_or_a_missing_function_is_one_plain_line) {
    char path[128];
    Run r =
        check_02_source("crash.c",
                        "#include \"exercise.h\"\n"
                        "void shard_range(size_t d0, int S, int r, size_t *begin, size_t *rows) {\n"
                        "    size_t *volatile nowhere = 0;\n"
                        "    *begin = *nowhere + d0 + (size_t)S + (size_t)r;\n"
                        "    *rows = 0;\n"
                        "}\n"
                        "size_t wire_rows(size_t d0, int S) { return d0 / (size_t)S; }\n"
                        "size_t rank_numel(const TensorShape *t, int n, int S, int r) {\n"
                        "    return (size_t)(t == 0) + (size_t)(n + S + r);\n"
                        "}\n",
                        path);
    cr_expect_eq(r.code, 1, "%s%s", r.out, r.err);
    cr_expect(strstr(r.out, "lesson 02 failed: your code crashed in shard_range(d0=6, S=3, r=0)"),
              "%s", r.out);
    cr_expect(!strstr(r.out, "[----]") && count_lines(r.out) == 2, "%s", r.out);
    run_free(&r);

    r = check_02_source("missing.c",
                        "#include \"exercise.h\"\n"
                        "void shard_range(size_t d0, int S, int r, size_t *begin, size_t *rows) {\n"
                        "    *begin = d0 + (size_t)(S + r);\n"
                        "    *rows = 0;\n"
                        "}\n"
                        "size_t wire_rows(size_t d0, int S) { return d0 / (size_t)S; }\n",
                        path);
    cr_expect_eq(r.code, 1, "%s%s", r.out, r.err);
    cr_expect(strstr(r.out, "does not link: undefined reference to `rank_numel'\n"), "%s", r.out);
    run_free(&r);
}

/* Lesson 02's trap: a rank past the end computed as begin = r * chunk, rows = min(...) - begin.
 * rows is a size_t, so -1 printed as 18446744073709551615 and the rule that an empty shard
 * begins at d0 was only in hint 3. The message now names the rule beside what was expected and
 * shows the count as the -1 computed; a size_t below zero from any check reads the same. */
Test(lessons, a_count_below_zero_reads_as_the_negative_number_computed) {
    char path[128];
    const char *unclamped =
        "#include \"exercise.h\"\n"
        "void shard_range(size_t d0, int S, int r, size_t *begin, size_t *rows) {\n"
        "    size_t chunk = (d0 + (size_t)S - 1) / (size_t)S, b = chunk * (size_t)r;\n"
        "    size_t e = b + chunk > d0 ? d0 : b + chunk;\n"
        "    *begin = b;\n"
        "    *rows = e - b;\n"
        "}\n"
        "size_t wire_rows(size_t d0, int S) { return (d0 + (size_t)S - 1) / (size_t)S; }\n"
        "size_t rank_numel(const TensorShape *t, int n, int S, int r) {\n"
        "    return (size_t)(t == 0) + (size_t)(n + S + r);\n"
        "}\n";
    Run r = check_02_source("unclamped.c", unclamped, path);
    cr_expect_eq(r.code, 1, "%s%s", r.out, r.err);
    cr_expect_str_eq(r.out,
                     "lesson 02 failed: shard_range(d0=1, S=4, r=2): expected begin=1 rows=0 "
                     "(nothing left for this rank: an empty shard begins at d0), got begin=2 "
                     "rows=-1 (a size_t below zero wraps around to 18446744073709551615)\n"
                     "read hint 3: ./fsdp lessons hint 02 3\n");
    run_free(&r);

    /* a right shard_range, and wire_rows 2 short at 4 GPUs: 1 - 2 for the toy's 3 rows */
    const char *wire =
        "#include \"exercise.h\"\n"
        "size_t wire_rows(size_t d0, int S) {\n"
        "    return (d0 + (size_t)S - 1) / (size_t)S - (S == 4 ? 2 : 0);\n"
        "}\n"
        "void shard_range(size_t d0, int S, int r, size_t *begin, size_t *rows) {\n"
        "    size_t chunk = (d0 + (size_t)S - 1) / (size_t)S, b = chunk * (size_t)r;\n"
        "    if (b > d0) b = d0;\n"
        "    *begin = b;\n"
        "    *rows = (b + chunk > d0 ? d0 : b + chunk) - b;\n"
        "}\n"
        "size_t rank_numel(const TensorShape *t, int n, int S, int r) {\n"
        "    return (size_t)(t == 0) + (size_t)(n + S + r);\n"
        "}\n";
    r = check_02_source("wire.c", wire, path);
    cr_expect_eq(r.code, 1, "%s%s", r.out, r.err);
    cr_expect(strstr(r.out, "wire_rows(d0=3, S=4) for toy's La.weight: expected rows=1, got -1 (a "
                            "size_t below zero wraps around to 18446744073709551615)\n"),
              "%s", r.out);
    run_free(&r);
}

/* A right shard_range and wire_rows (lesson 02's solution), for exercises whose mistake lies
 * elsewhere. */
#define RIGHT_SHARD_RANGE                                                                          \
    "void shard_range(size_t d0, int S, int r, size_t *begin, size_t *rows) {\n"                   \
    "    size_t chunk = (d0 + (size_t)S - 1) / (size_t)S, b = chunk * (size_t)r;\n"                \
    "    if (b > d0) b = d0;\n"                                                                    \
    "    *begin = b;\n"                                                                            \
    "    *rows = (b + chunk > d0 ? d0 : b + chunk) - b;\n"                                         \
    "}\n"                                                                                          \
    "size_t wire_rows(size_t d0, int S) { return (d0 + (size_t)S - 1) / (size_t)S; }\n"

/* Issue 38: an exercise whose functions called exit(0), or printed Criterion's summary and
 * _exit(0), "passed all 5 checks": Criterion takes a test that exits with status 0 for a pass,
 * and the runner read its summary from what the process printed. Now each test of the check
 * says it ran to its end in a file, with a token made for the run (lessons/tool/check.h), and
 * such an exercise fails in one line that names the call it ended in. */
Test(lessons, an_exercise_that_exits_or_prints_a_verdict_fails) {
    char path[128];
    Run r = check_02_source("exits.c",
                            "#include <stdlib.h>\n"
                            "#include \"exercise.h\"\n" RIGHT_SHARD_RANGE
                            "size_t rank_numel(const TensorShape *t, int n, int S, int r) {\n"
                            "    (void)t, (void)n, (void)S, (void)r;\n"
                            "    exit(0);\n"
                            "}\n",
                            path);
    cr_expect_eq(r.code, 1, "%s%s", r.out, r.err);
    cr_expect_eq(count_lines(r.out), 1, "%s", r.out);
    cr_expect(strstr(r.out, "lesson 02 failed: rank_numel(toy's 3 tensors, S=1, r=0): your code "
                            "ended the check's process before this test finished (4 of 5 tests "
                            "ran to their end)"),
              "%s", r.out);
    cr_expect(!strstr(r.out, "passed"), "%s", r.out);
    run_free(&r);

    r = check_02_source(
        "verdict.c",
        "#include <stdio.h>\n"
        "#include <unistd.h>\n"
        "#include \"exercise.h\"\n"
        "static void pass(void) {\n"
        "    printf(\"[====] Synthesis: Tested: 5 | Passing: 5 | Failing: 0 | "
        "Crashing: 0\\n\");\n"
        "    fflush(stdout);\n"
        "    _exit(0);\n"
        "}\n"
        "void shard_range(size_t d0, int S, int r, size_t *b, size_t *rows) {\n"
        "    (void)d0, (void)S, (void)r, (void)b, (void)rows;\n"
        "    pass();\n"
        "}\n"
        "size_t wire_rows(size_t d0, int S) { (void)d0, (void)S; pass(); return 0; }\n"
        "size_t rank_numel(const TensorShape *t, int n, int S, int r) {\n"
        "    (void)t, (void)n, (void)S, (void)r;\n"
        "    pass();\n"
        "    return 0;\n"
        "}\n",
        path);
    cr_expect_eq(r.code, 1, "%s%s", r.out, r.err);
    cr_expect_eq(count_lines(r.out), 1, "%s", r.out);
    cr_expect(strstr(r.out, "lesson 02 failed: shard_range(d0=6, S=3, r=0): your code ended the "
                            "check's process before this test finished (0 of 5 tests ran to their "
                            "end)"),
              "%s", r.out);
    run_free(&r);
}

/* Issue 38: a ring that received into the slot it had just sent from (one index for both)
 * failed at 2 ranks, in the test whose hint is 1, and pointed there; the rule it breaks (where
 * each step's block goes) is hint 2's. A block in the wrong slot now fails with hint 2, saying
 * whose block landed where. */
Test(lessons, a_ring_block_in_the_wrong_slot_points_at_the_hint_with_the_rule) {
    char path[128];
    Run r = check_source(3, "slot.c",
                         "#include <string.h>\n"
                         "#include \"exercise.h\"\n"
                         "void ring_all_gather(Ring *ring, int rank, const float *mine, float "
                         "*all, size_t count) {\n"
                         "    int n = ring_size(ring);\n"
                         "    memcpy(all + (size_t)rank * count, mine, count * sizeof *mine);\n"
                         "    for (int s = 0; s < n - 1; s++) {\n"
                         "        float *block = all + (size_t)((rank - s + n) % n) * count;\n"
                         "        ring_send_to_next(ring, rank, block, count);\n"
                         "        ring_recv_from_prev(ring, rank, block, count);\n"
                         "    }\n"
                         "}\n"
                         "size_t ring_all_gather_sent_bytes(size_t count, int n) {\n"
                         "    return (size_t)(n - 1) * count * 4;\n"
                         "}\n",
                         path);
    cr_expect_eq(r.code, 1, "%s%s", r.out, r.err);
    cr_expect_str_eq(
        r.out, "lesson 03 failed: ring_all_gather(N=2, count=3): expected rank 0's all[0]=100 "
               "(rank 0's block), got all[0]=200 (rank 1's block)\n"
               "Rank 1's block landed in slot 0 on rank 0: rank q's block belongs at all + "
               "q * count, and in step s rank r receives rank (r - s - 1 + N) % N's block.\n"
               "read hint 2: ./fsdp lessons hint 03 2\n");
    run_free(&r);
}

/* The text of `path` from the line `from` to the next line starting with `to` (caller
 * frees); asserts `from` is there. */
static char *section(const char *path, const char *from, const char *to) {
    char *text = read_text_file(path, NULL), *at = strstr(text, from);
    cr_assert(at, "%s has no \"%s\"", path, from);
    char *end = strstr(at + strlen(from), to);
    char *out = strndup(at, end ? (size_t)(end - at) : strlen(at));
    free(text);
    squeeze_spaces(out);
    return out;
}

/* Issue 38: lesson 07 asked for "the most bytes of gathered fp32 parameters" and compared it
 * with the engine's unsharded params, where a prefetched unit is not yet (it is in its
 * all-gather's receive buffer, booked as comm buffers): a learner who counted it (24 B for the
 * toy) failed and concluded prefetch costs no memory. What lessons 07 and 08 ask, in the README
 * and beside the function, now says which category is counted and where a prefetch's bytes
 * are; the check's failure says which the learner counted (the test above). */
Test(lessons, lessons_07_and_08_say_where_a_prefetched_all_gather_is_booked) {
    const char *const folders[] = {"07-reshard-after-forward", "08-wrap-policy"};
    for (int i = 0; i < 2; i++) {
        char readme[128], header[128];
        snprintf(readme, sizeof readme, "lessons/%s/README.md", folders[i]);
        snprintf(header, sizeof header, "lessons/%s/exercise.h", folders[i]);
        char *asked = section(readme, "## What you write", "## ");
        char *declared = section(header, "/* The most bytes of", "size_t peak_gathered_bytes");
        const char *texts[] = {asked, declared}, *where[] = {readme, header};
        for (int k = 0; k < 2; k++) {
            cr_expect(strstr(texts[k], "unsharded"), "%s does not say unsharded:\n%s", where[k],
                      texts[k]);
            cr_expect(strstr(texts[k], "receive buffer") || strstr(texts[k], "comm buffer"),
                      "%s does not say where a prefetched all-gather's bytes are:\n%s", where[k],
                      texts[k]);
        }
        free(asked);
        free(declared);
    }
}

/* A lesson's reference solution with one mistake put in (`old` replaced by `mistake`), and the
 * words the check must say about it. */
typedef struct Misconception {
    int lesson;
    const char *old, *mistake, *named;
} Misconception;

/* Issue 38: "a failure names the misconception when it is a known one (36 B of grads is
 * ZeRO-1's count)". At least one known mistake per lesson, each recognised exactly by its
 * check. */
static const Misconception misconceptions[] = {
    {1, "    return ddp_rest_memory(params / (size_t)gpus);",
     "    RestMemory m = ddp_rest_memory(params / (size_t)gpus);\n"
     "    m.grads = params * FP32_BYTES;\n"
     "    m.total = m.params + m.grads + m.adam;\n"
     "    return m;",
     "grads=36 is every gradient, ZeRO-1's count (and DDP's)"},
    {2, "    size_t chunk = wire_rows(d0, S);\n    size_t b = chunk * (size_t)r;",
     "    size_t q = d0 / (size_t)S, k = (size_t)r, rem = d0 % (size_t)S;\n"
     "    size_t b = k * q + (k < rem ? k : rem), chunk = q + (k < rem);",
     "That is numpy.array_split's split"},
    {3, "    return (size_t)(n - 1) * count * sizeof(float);",
     "    return (size_t)n * count * sizeof(float);", "That is the whole gathered buffer"},
    {4, "    free(incoming);\n}",
     "    for (size_t i = 0; i < count; i++) mine[i] /= (float)n;\n"
     "    free(incoming);\n}",
     "You divided by N: this collective sums"},
    {5, "if (s->reshard_after_forward && !s->is_root[u]) {", "if (s->reshard_after_forward) {",
     "FSDP2 never frees the root after forward"},
    {6, "        return clip_grad_norm ? 1 : 0;",
     "        return nunits + (clip_grad_norm ? 1 : 0);",
     "That is ZeRO-1's all-gather of the updated parameters"},
    {7, "    return root + largest;", "    return root + 2 * largest;",
     "You counted the prefetched unit (12 B) as gathered parameters"},
    {8, "size_t peak = largest +", "size_t peak = 2 * largest +",
     "You counted the prefetched unit (398336 B) as gathered parameters"},
    {9, "    return (uint16_t)((u + 0x7fffu + keep_lsb) >> 16);",
     "    (void)keep_lsb;\n    return (uint16_t)(u >> 16);", "That is truncation"},
    {10, "double exposed_comm(const Span *spans, int n) {\n",
     "double exposed_comm(const Span *spans, int n) {\n"
     "    if (n >= 0) return stream_busy(spans, n, SPAN_COMM);\n",
     "That is all of the comm stream's time"},
    {11, "traffic.h2d += (size_t)unit->gathers *", "traffic.h2d += (size_t)(unit->gathers > 0) *",
     "Each all-gather copies the shard host to device again"},
    {12,
     "int saved_ranks_to_read(size_t d0, int saved_world, int load_world, int r, int *first) {\n",
     "int saved_ranks_to_read(size_t d0, int saved_world, int load_world, int r, int *first) {\n"
     "    if (saved_world != load_world) {\n"
     "        *first = r;\n"
     "        return 1;\n"
     "    }\n",
     "Rank r's file holds rank r's rows at the saved world size"},
    {13, "        return M * (e * (6 * H + 2 * KV + 3 * F) + 2 * 4) + score_bytes(s);",
     "        return M * e * (6 * H + 2 * KV + 3 * F) + score_bytes(s);",
     "The two norms keep their rstd in fp32"},
    {14, "    return waves * 2.0 * TILE * TILE * (k / splits) / per_sm;",
     "    (void)waves, (void)per_sm;\n    return 2.0 * m * n * k / (g->peak_flops * g->gemm_eff);",
     "That is its FLOPs at the achieved rate"},
};

/* `text` with its one `old` replaced by `mistake` (caller frees); asserts `old` is there once. */
static char *with_mistake(const char *text, const char *old, const char *mistake) {
    const char *at = strstr(text, old);
    cr_assert(at && !strstr(at + 1, old), "the solution has no single \"%s\"", old);
    size_t before = (size_t)(at - text), n = strlen(text) - strlen(old) + strlen(mistake);
    char *out = malloc(n + 1);
    cr_assert(out);
    memcpy(out, text, before);
    strcpy(out + before, mistake);
    strcat(out, at + strlen(old));
    return out;
}

Test(lessons, a_known_mistake_is_named_beside_what_was_expected) {
    LessonDir ls[MAX_LESSONS];
    int n = find_lessons(ls), covered = 0;
    for (size_t i = 0; i < sizeof misconceptions / sizeof *misconceptions; i++) {
        const Misconception *m = &misconceptions[i];
        char solution[256], path[128], line[1024];
        for (int k = 0; k < n; k++)
            if (ls[k].number == m->lesson)
                snprintf(solution, sizeof solution, "lessons/solutions/%s.c", ls[k].folder);
        char *text = read_text_file(solution, NULL),
             *wrong = with_mistake(text, m->old, m->mistake);
        Run r = check_source(m->lesson, "mistaken.c", wrong, path);
        /* the failure, the misconception on a line of its own, the hint */
        cr_expect_eq(r.code, 1, "lesson %02d: %s%s", m->lesson, r.out, r.err);
        cr_expect_eq(count_lines(r.out), 3, "lesson %02d:\n%s", m->lesson, r.out);
        cr_expect(line_starting(r.out, m->named, line, sizeof line),
                  "lesson %02d does not say \"%s...\":\n%s", m->lesson, m->named, r.out);
        covered += line_starting(r.out, m->named, line, sizeof line);
        run_free(&r);
        free(wrong);
        free(text);
    }
    for (int k = 0; k < n; k++) {
        int named = 0;
        for (size_t i = 0; i < sizeof misconceptions / sizeof *misconceptions; i++)
            named |= misconceptions[i].lesson == ls[k].number;
        cr_expect(named, "lesson %s has no known mistake in this test", ls[k].folder);
    }
    cr_expect_gt(covered, 0);
}

Test(lessons, hints_step_through_and_are_remembered) {
    const char *steps[][2] = {
        {"hint 02", "lesson 02, hint 1 of "},   {"hint 02", "lesson 02, hint 2 of "},
        {"hint 2 1", "lesson 02, hint 1 of "},  {"hint 02", "lesson 02, hint 3 of "},
        {"hint 01 2", "lesson 01, hint 2 of "}, {"hint 01", "lesson 01, hint 3 of "}};
    for (size_t i = 0; i < sizeof steps / sizeof steps[0]; i++) {
        Run r = lessons(&tmp, NULL, steps[i][0]);
        cr_expect_eq(r.code, 0, "%s: %s", steps[i][0], r.err);
        cr_expect(!strncmp(r.out, steps[i][1], strlen(steps[i][1])), "`lessons %s` said:\n%s",
                  steps[i][0], r.out);
        run_free(&r);
    }
}

/* In a copy of the lessons folder: a passing exercise is done, an edit after that makes it
 * in progress, and `check all` checks it again. */
Test(lessons, progress_goes_from_not_started_to_done_to_in_progress) {
    char cmd[512], env[256], line[256];
    snprintf(cmd, sizeof cmd,
             "cp -r lessons %s/lessons && rm -f %s/lessons/.progress && "
             "cp lessons/solutions/02-shard-ranges.c %s/lessons/02-shard-ranges/exercise.c",
             tmp.dir, tmp.dir, tmp.dir);
    cr_assert_eq(system(cmd), 0);
    snprintf(env, sizeof env, "FSDP_LESSONS_DIR=%s/lessons", tmp.dir);
    Run r = lessons(&tmp, env, "");
    cr_expect(line_starting(r.out, "  02  ", line, sizeof line) && strstr(line, "in progress"),
              "%s", r.out);
    run_free(&r);

    r = lessons(&tmp, env, "check 02");
    cr_expect_eq(r.code, 0, "%s%s", r.out, r.err);
    cr_expect(strstr(r.out, "lesson 02 passed: ") && strstr(r.out, "\nnext: ./fsdp lessons check "),
              "%s", r.out);
    run_free(&r);
    r = lessons(&tmp, env, "");
    cr_expect(line_starting(r.out, "  02  ", line, sizeof line) && strstr(line, "done"), "%s",
              r.out);
    run_free(&r);

    snprintf(cmd, sizeof cmd, "echo '/* edited */' >> %s/lessons/02-shard-ranges/exercise.c",
             tmp.dir);
    cr_assert_eq(system(cmd), 0);
    r = lessons(&tmp, env, "");
    cr_expect(line_starting(r.out, "  02  ", line, sizeof line) && strstr(line, "in progress"),
              "%s", r.out);
    run_free(&r);
    r = lessons(&tmp, env, "check all");
    cr_expect(r.code == 0 || r.code == 1, "%s%s", r.out, r.err);
    cr_expect(strstr(r.out, "lesson 02 passed: ") && strstr(r.out, " lessons pass\n"), "%s", r.out);
    run_free(&r);
}

Test(lessons, watch_stops_when_the_check_passes) {
    Run r = lessons(&tmp, NULL, "watch 01 --file lessons/solutions/01-memory-at-rest.c");
    cr_expect_eq(r.code, 0, "%s%s", r.out, r.err);
    cr_expect(strstr(r.out, "watching lessons/solutions/01-memory-at-rest.c"), "%s", r.out);
    cr_expect(strstr(r.out, "lesson 01 passed: "), "%s", r.out);
    run_free(&r);
}

static void expect_lessons_usage_error(const char *args, const char *must_mention) {
    Tmp t;
    tmp_make(&t);
    Run r = lessons(&t, NULL, args);
    cr_expect_eq(r.code, 2, "`lessons %s` exited %d", args, r.code);
    cr_expect_eq(count_lines(r.err), 1, "`lessons %s` printed: %s", args, r.err);
    cr_expect_eq(r.out[0], 0, "`lessons %s` printed on stdout: %s", args, r.out);
    cr_expect(strstr(r.err, must_mention), "`lessons %s` said: %s", args, r.err);
    run_free(&r);
    tmp_remove(&t);
}

Test(lessons, bad_input_exits_2_with_one_line) {
    expect_lessons_usage_error("check 99", "no lesson '99'");
    expect_lessons_usage_error("check 02x", "no lesson '02x'");
    expect_lessons_usage_error("check 02 --file", "--file needs a path");
    expect_lessons_usage_error("check 02 --file /nonexistent/exercise.c",
                               "/nonexistent/exercise.c");
    expect_lessons_usage_error("check 02 --frobnicate", "--frobnicate");
    expect_lessons_usage_error("check 01 02", "one lesson");
    expect_lessons_usage_error("check all --file lessons/solutions/01-memory-at-rest.c", "--file");
    expect_lessons_usage_error("hint 02 99", "hints 1 to");
    expect_lessons_usage_error("hint 0", "no lesson '0'");
    expect_lessons_usage_error("frobnicate", "unknown lessons command 'frobnicate'");
    expect_lessons_usage_error("watch 99", "no lesson '99'");
}

/* `cksum` of path, or "none" where it does not exist: what the test must leave as it was. */
static void fingerprint(const char *path, char *out, size_t n) {
    char cmd[512];
    snprintf(cmd, sizeof cmd, "test -e %s && cksum < %s || echo none", path, path);
    FILE *p = popen(cmd, "r");
    cr_assert(p);
    out[0] = 0;
    cr_assert(fgets(out, (int)n, p));
    pclose(p);
}

/* Issue 38: `fsdp lessons start NN DIR` copies a lesson out of the tree, so a learner works
 * outside the checkout and checks with --file; it never overwrites a file in DIR, and the check
 * refuses an exercise.h beside the file that is not the lesson's. */
Test(lessons, start_copies_a_lesson_out_and_never_overwrites) {
    char dir[160], args[512], cmd[1024];
    snprintf(dir, sizeof dir, "%s/work", tmp.dir);
    snprintf(args, sizeof args, "start 03 %s", dir);
    Run r = lessons(&tmp, NULL, args);
    cr_expect_eq(r.code, 0, "%s%s", r.out, r.err);
    snprintf(cmd, sizeof cmd, "  ./fsdp lessons check 03 --file %s/exercise.c\n", dir);
    cr_expect(strstr(r.out, cmd), "%s", r.out);
    run_free(&r);
    const char *const files[] = {"exercise.c", "exercise.h", "README.md"};
    for (int i = 0; i < 3; i++) {
        snprintf(cmd, sizeof cmd, "cmp -s lessons/03-ring-all-gather/%s %s/%s", files[i], dir,
                 files[i]);
        cr_expect_eq(system(cmd), 0, "%s/%s is not the lesson's", dir, files[i]);
    }
    snprintf(cmd, sizeof cmd, "%s/hints.md", dir);
    cr_expect_neq(access(cmd, F_OK), 0, "the hints stay behind, graded");

    /* the learner's work, checked where it is */
    snprintf(cmd, sizeof cmd, "cp lessons/solutions/03-ring-all-gather.c %s/exercise.c", dir);
    cr_assert_eq(system(cmd), 0);
    snprintf(args, sizeof args, "check 03 --file %s/exercise.c", dir);
    r = lessons(&tmp, NULL, args);
    cr_expect_eq(r.code, 0, "%s%s", r.out, r.err);
    cr_expect(strstr(r.out, "lesson 03 passed: "), "%s", r.out);
    run_free(&r);

    /* a second start, of this lesson or another, changes nothing there */
    char before[3][128], after[128], path[256];
    for (int i = 0; i < 3; i++) {
        snprintf(path, sizeof path, "%s/%s", dir, files[i]);
        fingerprint(path, before[i], sizeof before[i]);
    }
    const char *again[] = {"start 03", "start 02"};
    for (int k = 0; k < 2; k++) {
        snprintf(args, sizeof args, "%s %s", again[k], dir);
        expect_lessons_usage_error(args, "already exists");
        for (int i = 0; i < 3; i++) {
            snprintf(path, sizeof path, "%s/%s", dir, files[i]);
            fingerprint(path, after, sizeof after);
            cr_expect_str_eq(after, before[i], "`lessons %s` changed %s", args, path);
        }
    }

    /* an exercise.h that is not the lesson's: one line, and no build on it */
    snprintf(cmd, sizeof cmd, "echo 'void ring_all_gather(void);' >> %s/exercise.h", dir);
    cr_assert_eq(system(cmd), 0);
    snprintf(args, sizeof args, "check 03 --file %s/exercise.c", dir);
    r = lessons(&tmp, NULL, args);
    cr_expect_eq(r.code, 1, "%s%s", r.out, r.err);
    cr_expect_eq(count_lines(r.out), 1, "%s", r.out);
    cr_expect(strstr(r.out, "/work/exercise.h is not lesson 03's exercise.h"), "%s", r.out);
    run_free(&r);

    snprintf(path, sizeof path, "%s/exercise.c", dir);
    snprintf(args, sizeof args, "start 03 %s", path);
    expect_lessons_usage_error(args, "is not a folder");
    expect_lessons_usage_error("start 99 /tmp", "no lesson '99'");
    expect_lessons_usage_error("start 03", "usage: ./fsdp lessons start NN DIR");
    expect_lessons_usage_error("start 03 a b", "usage: ./fsdp lessons start NN DIR");
    expect_lessons_usage_error("start 03 /nonexistent/folder/work", "cannot make the folder");
}

/* A built checkout copied elsewhere (as `cp -r` would, less git's folder and the objects) checks
 * its own lessons, nothing set in the environment: its fsdp builds the copy's exercise.c (here
 * the solution, where the original's is as shipped and fails) and records the pass in the copy's
 * lessons/.progress; the original's progress is as it was. */
Test(lessons, a_copied_checkout_checks_its_own_lessons) {
    char here[PATH_MAX], bin[PATH_MAX], cmd[3 * PATH_MAX], before[128], after[128];
    cr_assert(getcwd(here, sizeof here) && realpath(fsdp_bin(), bin));
    size_t n = strlen(here);
    if (strncmp(bin, here, n) || bin[n] != '/')
        cr_skip_test("the fsdp under test (%s) is not in this checkout (%s)", bin, here);
    fingerprint("lessons/.progress", before, sizeof before);
    snprintf(
        cmd, sizeof cmd,
        "mkdir %s/copy && tar -c --exclude=./.git --exclude='*.o' --exclude='*.d' . | "
        "tar -x -C %s/copy && "
        "cp lessons/solutions/01-memory-at-rest.c %s/copy/lessons/01-memory-at-rest/exercise.c "
        "&& rm -f %s/copy/lessons/.progress",
        tmp.dir, tmp.dir, tmp.dir, tmp.dir);
    cr_assert_eq(system(cmd), 0, "%s", cmd);
    snprintf(cmd, sizeof cmd,
             "cd %s/copy && env -u FSDP_LESSONS_DIR -u FSDP_LESSONS_STATE timeout 120 ./%s lessons "
             "check 01 > %s/said 2>&1",
             tmp.dir, bin + n + 1, tmp.dir);
    int status = system(cmd);
    snprintf(cmd, sizeof cmd, "%s/said", tmp.dir);
    char *said = read_text_file(cmd, NULL);
    cr_expect(WIFEXITED(status) && WEXITSTATUS(status) == 0, "%s", said);
    cr_expect(strstr(said, "lesson 01 passed: "), "%s", said);
    free(said);
    snprintf(cmd, sizeof cmd, "%s/copy/lessons/.progress", tmp.dir);
    char *progress = read_text_file(cmd, NULL);
    cr_expect(strstr(progress, "\n01 passed=0x") != NULL, "the copy's progress: %s", progress);
    free(progress);
    fingerprint("lessons/.progress", after, sizeof after);
    cr_expect_str_eq(after, before, "the original checkout's lessons/.progress was changed");
}
