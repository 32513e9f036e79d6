/* lesson_check: builds a lesson's check with the learner's exercise in a fresh temporary folder and
 * runs it one test at a time, stopping at the first failure. */
#include "lessons/tool/lesson_check.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <unistd.h>

#include "lessons/tool/check.h"
#include "lessons/tool/lesson_proc.h"
#include "lessons_baked.h"

/* A check is built in a fresh temporary folder (so two checks, or a test and a learner, never share
 * files) in three steps: the exercise file alone (so its errors are the learner's), the lesson's
 * check.c, then the link against the library archive with Criterion. The check then runs one test
 * at a time and stops at the first failure; check.h's tagged lines say what it tried and what
 * differed. */

#define COMPILE_SECONDS 120.0
#define RUN_SECONDS 30.0
#define MAX_ARGS 256

typedef struct ArgList {
    char *argv[MAX_ARGS + 1]; /* NULL-terminated; every entry owned */
    int n;
} ArgList;

static void args_add(ArgList *a, const char *arg) {
    if (a->n < MAX_ARGS) a->argv[a->n++] = strdup(arg);
    a->argv[a->n] = NULL;
}

/* The baked flag strings hold no quoted spaces: split on blanks. */
static void args_add_words(ArgList *a, const char *words) {
    char *copy = strdup(words);
    for (char *w = strtok(copy, " \t"); w; w = strtok(NULL, " \t")) args_add(a, w);
    free(copy);
}

static void args_free(ArgList *a) {
    for (int i = 0; i < a->n; i++) free(a->argv[i]);
    a->n = 0;
}

static int args_complete(const ArgList *a, Err *err) {
    for (int i = 0; i < a->n; i++)
        if (!a->argv[i]) return err_set(err, ERR_NOMEM, "out of memory");
    if (a->n == MAX_ARGS) return err_set(err, ERR_INTERNAL, "too many compiler flags");
    return 0;
}

/* ------------------------------------------------------------ the log for --verbose */

static void log_append(CheckResult *r, const char *text) {
    size_t have = r->log ? strlen(r->log) : 0, add = strlen(text);
    char *grown = realloc(r->log, have + add + 1);
    if (!grown) return;
    memcpy(grown + have, text, add + 1);
    r->log = grown;
}

static void log_command(CheckResult *r, const ArgList *a) {
    log_append(r, "$");
    for (int i = 0; i < a->n; i++) {
        log_append(r, " ");
        log_append(r, a->argv[i]);
    }
    log_append(r, "\n");
}

/* ------------------------------------------------------------ reading the output */

/* Copies the line starting at s (without its newline) into buf. */
static void copy_line(const char *s, char *buf, size_t n) {
    size_t len = strcspn(s, "\n");
    if (len >= n) len = n - 1;
    memcpy(buf, s, len);
    buf[len] = 0;
}

/* Appends len bytes of text to the string in buf (size n), cut short if they do not fit. */
static void append_text(char *buf, size_t n, const char *text, size_t len) {
    size_t used = strlen(buf);
    if (used + len + 1 > n) len = n - used - 1;
    memcpy(buf + used, text, len);
    buf[used + len] = 0;
}

/* Line `number` (1-based) of a file into buf; 0 if there is none. */
static int read_source_line(const char *path, long number, char *buf, size_t n) {
    FILE *f = fopen(path, "r");
    if (!f) return 0;
    char line[1024];
    long at = 0;
    int found = 0;
    while (fgets(line, sizeof line, f))
        if (++at == number) {
            copy_line(line, buf, n);
            found = 1;
            break;
        }
    fclose(f);
    return found;
}

/* "   14 |     *rows = 0" and a caret under column col, the way compilers show it. */
static void append_source(char *detail, size_t n, const char *path, long line, long col) {
    char src[512];
    if (!read_source_line(path, line, src, sizeof src)) return;
    char caret[512];
    size_t k = 0;
    for (long i = 0; i + 1 < col && src[i] && k + 2 < sizeof caret; i++)
        caret[k++] = src[i] == '\t' ? '\t' : ' ';
    caret[k++] = '^';
    caret[k] = 0;
    size_t used = strlen(detail);
    snprintf(detail + used, n - used, "\n%5ld | %s\n%5s | %s", line, src, "", caret);
}

/* The compiler's first "FILE:LINE:COL: error: ..." with its source line; 0 if none. */
static int first_compile_error(const char *output, char *detail, size_t n) {
    for (const char *s = output; *s; s += strcspn(s, "\n") + (s[strcspn(s, "\n")] != 0)) {
        char line[CHECK_TEXT_MAX];
        copy_line(s, line, sizeof line);
        char *mark = strstr(line, ": error: ");
        if (!mark) mark = strstr(line, ": fatal error: ");
        if (!mark) continue;
        char path[CHECK_TEXT_MAX];
        long at_line = 0, at_col = 0;
        *mark = 0;
        /* FILE:LINE:COL, split from the right: FILE may hold colons */
        char *c2 = strrchr(line, ':');
        char *c1 = c2 ? (*c2 = 0, strrchr(line, ':')) : NULL;
        if (c1 && c2) {
            *c1 = 0;
            at_line = strtol(c1 + 1, NULL, 10);
            at_col = strtol(c2 + 1, NULL, 10);
            snprintf(path, sizeof path, "%s", line);
            snprintf(detail, n, "%s:%ld:%ld:%s", lessons_shown_path(path), at_line, at_col,
                     mark + 1);
            append_source(detail, n, path, at_line, at_col);
        } else {
            if (c2) *c2 = ':';
            snprintf(detail, n, "%s:%s", lessons_shown_path(line), mark + 1);
        }
        return 1;
    }
    return 0;
}

/* The linker's complaint, from "undefined reference to" or "multiple definition of". */
static void first_link_error(const char *output, char *detail, size_t n) {
    static const char *const marks[] = {"undefined reference to", "multiple definition of"};
    for (int i = 0; i < 2; i++) {
        const char *m = strstr(output, marks[i]);
        if (!m) continue;
        copy_line(m, detail, n);
        detail[strcspn(detail, ";")] = 0;
        return;
    }
    const char *e = strstr(output, "error");
    copy_line(e ? e : output, detail, n);
}

/* Splits a tagged line's fields (tab-separated) in place; returns how many. */
static int split_tabs(char *line, char **fields, int max) {
    int k = 0;
    for (char *p = line; k < max; k++) {
        fields[k] = p;
        char *tab = strchr(p, '\t');
        if (!tab) return k + 1;
        *tab = 0;
        p = tab + 1;
    }
    return k;
}

static void copy_text(char *dst, const char *src) {
    snprintf(dst, CHECK_TEXT_MAX, "%s", src);
}

#define MAX_TESTS 64

/* A test of the check as its output shows it: its name, and the last call it named (its
 * input while it ran). */
typedef struct TestSeen {
    char name[128];
    char input[CHECK_TEXT_MAX];
} TestSeen;

/* What the check's output says, line by line. */
typedef struct OutputScan {
    int failed, crashed;
    TestSeen tests[MAX_TESTS]; /* in the order they began */
    int ntests;
    char sanitizer[CHECK_TEXT_MAX]; /* the sanitizer's verdict in one line */
    char frame[CHECK_TEXT_MAX / 2]; /* "ring_all_reduce at exercise.c:24" from its stack */
    const char *file_name;          /* the learner's file name (no folder), to find that frame */
} OutputScan;

/* UBSan's "exercise.c:12:9: runtime error: ...", or ASan's "AddressSanitizer: SEGV" without
 * the addresses and the DEADLYSIGNAL line before it. */
static void sanitizer_verdict(const char *line, char *out, size_t n) {
    if (strstr(line, "runtime error:")) {
        snprintf(out, n, "%s", lessons_shown_path(line));
        return;
    }
    const char *s = strstr(line, "Sanitizer:");
    if (!s || strstr(line, "DEADLYSIGNAL")) return;
    while (s > line && s[-1] >= 'A' && s[-1] <= 'z') s--; /* back to "Address" */
    snprintf(out, n, "%s", s);
    char *on = strstr(out, " on ");
    if (on) *on = 0; /* "heap-buffer-overflow on address 0x... at pc ..." */
}

/* The first stack frame in the learner's file: "    #1 0x55 in ring_all_reduce /x/ex.c:24:9". */
static void learner_frame(const char *line, const char *file_name, char *out, size_t n) {
    const char *in = strstr(line, " in ");
    char needle[300], where[256];
    snprintf(needle, sizeof needle, "/%s:", file_name);
    if (!strchr(line, '#') || !in || !strstr(line, needle)) return;
    const char *func = in + 4;
    size_t func_len = strcspn(func, " ");
    if (!func[func_len]) return;
    snprintf(where, sizeof where, "%s", func + func_len + 1); /* "/x/exercise.c:24:9" */
    char *colon = strchr(where, ':');
    if (colon && (colon = strchr(colon + 1, ':'))) *colon = 0; /* "/x/exercise.c:24" */
    out[0] = 0;
    append_text(out, n, func, func_len);
    append_text(out, n, " at ", 4);
    append_text(out, n, lessons_shown_path(where), strlen(lessons_shown_path(where)));
}

/* One line of the check's output. Once a failure is recorded, only a crash still counts.
 * Criterion's own summary is not read: the learner's code can print one (check.h). */
static void read_check_line(char *line, CheckResult *r, OutputScan *scan) {
    char *f[6];
    int nf;
    if (strstr(line, "CRASH")) scan->crashed = 1;
    if (scan->failed) return;
    TestSeen *test = scan->ntests ? &scan->tests[scan->ntests - 1] : NULL;
    /* after a sanitizer's report the input stays the call it interrupted */
    if (!strncmp(line, LESSON_TEST_TAG "\t", sizeof LESSON_TEST_TAG)) {
        if (scan->ntests < MAX_TESTS) {
            test = &scan->tests[scan->ntests++];
            snprintf(test->name, sizeof test->name, "%s", line + sizeof LESSON_TEST_TAG);
            test->input[0] = 0;
        }
    } else if (!strncmp(line, LESSON_TRY_TAG "\t", sizeof LESSON_TRY_TAG) && !scan->sanitizer[0]) {
        copy_text(r->input, line + sizeof LESSON_TRY_TAG);
        if (test) copy_text(test->input, r->input);
    } else if (!strncmp(line, LESSON_EXPECT_TAG "\t", sizeof LESSON_EXPECT_TAG) &&
               ((nf = split_tabs(line, f, 6)) == 5 || nf == 6)) {
        r->hint = atoi(f[1]);
        copy_text(r->input, f[2]);
        copy_text(r->expected, f[3]);
        copy_text(r->got, f[4]);
        copy_text(r->why, nf == 6 ? f[5] : "");
        scan->failed = 1;
    } else if (!strncmp(line, LESSON_PROBLEM_TAG "\t", sizeof LESSON_PROBLEM_TAG) &&
               split_tabs(line, f, 4) == 4) {
        r->hint = atoi(f[1]);
        copy_text(r->input, f[2]);
        snprintf(r->detail, sizeof r->detail, "%s", f[3]);
        scan->failed = 1;
    } else if (!scan->sanitizer[0]) {
        sanitizer_verdict(line, scan->sanitizer, sizeof scan->sanitizer);
    } else if (!scan->frame[0]) {
        learner_frame(line, scan->file_name, scan->frame, sizeof scan->frame);
    }
}

/* The input of the first test that began and never reached its end (`finished`: the names
 * the results file has, one a line), into r->input; "" when every test that began did. */
static void input_of_unfinished(const OutputScan *scan, const char *finished, CheckResult *r) {
    for (int i = 0; i < scan->ntests; i++) {
        char line[160];
        snprintf(line, sizeof line, "\n%s\n", scan->tests[i].name);
        if (strstr(finished, line)) continue;
        if (scan->tests[i].input[0])
            copy_text(r->input, scan->tests[i].input);
        else
            snprintf(r->input, sizeof r->input, "test %s", scan->tests[i].name);
        return;
    }
    r->input[0] = 0;
}

/* The outcome, from what the output said (scan) and which tests finished. */
static void read_check_verdict(const ProcResult *p, const OutputScan *scan, const char *finished,
                               CheckResult *r) {
    if (scan->failed) {
        r->outcome = CHECK_FAILED;
    } else if (p->interrupted) {
        r->outcome = CHECK_INTERRUPTED;
    } else if (p->timed_out) {
        r->outcome = CHECK_TIMED_OUT;
        snprintf(r->detail, sizeof r->detail, "did not return within %.0f s", RUN_SECONDS);
    } else if (scan->crashed || scan->sanitizer[0] || p->signal) {
        r->outcome = CHECK_CRASHED;
        r->detail[0] = 0;
        append_text(r->detail, sizeof r->detail, scan->sanitizer, strlen(scan->sanitizer));
        if (scan->frame[0]) {
            append_text(r->detail, sizeof r->detail, ", in ", 5);
            append_text(r->detail, sizeof r->detail, scan->frame, strlen(scan->frame));
        }
    } else if (r->tests_finished < r->tests) {
        /* a test never reached its end, and nothing failed or crashed: the learner's code ended
         * the process itself (exit, _exit), whatever it printed and whatever Criterion made of
         * that exit */
        r->outcome = CHECK_FAILED;
        input_of_unfinished(scan, finished, r);
        snprintf(r->detail, sizeof r->detail,
                 "your code ended the check's process before this test finished (%d of %d tests "
                 "ran to their end): your functions must return, never call exit or _exit, nor "
                 "print the check's verdict",
                 r->tests_finished, r->tests);
    } else if (p->exit_code == 0) {
        r->outcome = CHECK_PASSED;
    } else {
        r->outcome = CHECK_FAILED;
        snprintf(r->detail, sizeof r->detail,
                 "the check failed without naming an expectation (exit status %d)", p->exit_code);
    }
}

static void read_check_output(const ProcResult *p, const char *file, const char *finished,
                              CheckResult *r) {
    char *out = strdup(p->output);
    OutputScan *scan = calloc(1, sizeof *scan);
    if (!out || !scan) {
        free(out);
        free(scan);
        r->outcome = CHECK_FAILED;
        snprintf(r->detail, sizeof r->detail, "out of memory reading the check's output");
        return;
    }
    scan->file_name = strrchr(file, '/') ? strrchr(file, '/') + 1 : file;
    for (char *line = strtok(out, "\n"); line; line = strtok(NULL, "\n"))
        read_check_line(line, r, scan);
    free(out);
    read_check_verdict(p, scan, finished, r);
    free(scan);
}

/* ------------------------------------------------------------ the three builds and the run */

typedef struct Workdir {
    char dir[256];
    char exercise_o[300], check_o[300], check_bin[300];
    char results[300]; /* where each test of the check says it finished (check.h) */
} Workdir;

static int workdir_make(Workdir *w, Err *err) {
    const char *tmp = getenv("TMPDIR");
    snprintf(w->dir, sizeof w->dir, "%s/fsdp-lesson-XXXXXX", tmp && *tmp ? tmp : "/tmp");
    if (!mkdtemp(w->dir))
        return err_set(err, ERR_IO, "cannot make a folder in %s: %s", tmp && *tmp ? tmp : "/tmp",
                       strerror(errno));
    snprintf(w->exercise_o, sizeof w->exercise_o, "%s/exercise.o", w->dir);
    snprintf(w->check_o, sizeof w->check_o, "%s/check.o", w->dir);
    snprintf(w->check_bin, sizeof w->check_bin, "%s/check", w->dir);
    snprintf(w->results, sizeof w->results, "%s/results", w->dir);
    return 0;
}

static void workdir_remove(const Workdir *w) {
    unlink(w->exercise_o);
    unlink(w->check_o);
    unlink(w->check_bin);
    unlink(w->results);
    rmdir(w->dir);
}

/* cc CFLAGS -I<root> -I<lesson folder> -c SRC -o OBJ */
static void compile_args(ArgList *a, const Lesson *l, const char *src, const char *obj) {
    char lesson_dir[4096];
    snprintf(lesson_dir, sizeof lesson_dir, "-I%s/%s", lessons_dir(), l->folder);
    args_add_words(a, LESSONS_CC);
    args_add_words(a, LESSONS_CFLAGS);
    args_add(a, "-I");
    args_add(a, lessons_root());
    args_add(a, lesson_dir);
    args_add(a, "-c");
    args_add(a, src);
    args_add(a, "-o");
    args_add(a, obj);
}

/* Runs a command with `env` added to its environment (NULL: none), logs it and what it
 * printed; 0 when it ran, whatever its exit. */
static int run_logged(ArgList *a, char *const env[], double seconds, CheckResult *r, ProcResult *p,
                      Err *err) {
    int rc = args_complete(a, err);
    if (!rc) {
        log_command(r, a);
        rc = proc_run(a->argv, env, seconds, p, err);
        if (!rc) log_append(r, p->output);
    }
    args_free(a);
    return rc;
}

static int proc_failed(const ProcResult *p) {
    return p->exit_code != 0 || p->signal || p->timed_out || p->interrupted;
}

/* The learner's file on its own: a failure here is the learner's to fix. */
static int build_exercise(const Lesson *l, const char *file, const Workdir *w, CheckResult *r,
                          Err *err) {
    ArgList a = {0};
    ProcResult p;
    compile_args(&a, l, file, w->exercise_o);
    int rc = run_logged(&a, NULL, COMPILE_SECONDS, r, &p, err);
    if (rc) return rc;
    if (p.interrupted)
        r->outcome = CHECK_INTERRUPTED;
    else if (proc_failed(&p)) {
        r->outcome = CHECK_NO_COMPILE;
        if (!first_compile_error(p.output, r->detail, sizeof r->detail))
            copy_line(p.output, r->detail, sizeof r->detail);
    }
    proc_result_free(&p);
    return 0;
}

/* The lesson's check.c. One that does not compile is the lesson's bug (or an archive older
 * than the headers): an error, not the learner's failure. */
static int compile_check(const Lesson *l, const Workdir *w, CheckResult *r, Err *err) {
    char check_c[4096];
    lesson_path(l, "check.c", check_c, sizeof check_c);
    ArgList a = {0};
    ProcResult p;
    compile_args(&a, l, check_c, w->check_o);
    int rc = run_logged(&a, NULL, COMPILE_SECONDS, r, &p, err);
    if (rc) return rc;
    char first[2 * CHECK_TEXT_MAX] = "";
    if (p.interrupted) {
        r->outcome = CHECK_INTERRUPTED;
    } else if (proc_failed(&p)) {
        if (!first_compile_error(p.output, first, sizeof first))
            copy_line(p.output, first, sizeof first);
        first[strcspn(first, "\n")] = 0;
        rc = err_set(err, ERR_INTERNAL,
                     "lesson %02d's own check does not build (is %s older than the sources? run "
                     "make): %s",
                     l->number, lessons_shown_path(lessons_archive()), first);
    }
    proc_result_free(&p);
    return rc;
}

/* The learner's object, the check's, the engine's archive and Criterion. A failure here is
 * the learner's: a function missing or renamed, or one that clashes with the engine's. */
static int link_check(const Workdir *w, CheckResult *r, Err *err) {
    ArgList a = {0};
    ProcResult p;
    args_add_words(&a, LESSONS_CC);
    args_add_words(&a, LESSONS_LDFLAGS);
    args_add(&a, "-o");
    args_add(&a, w->check_bin);
    args_add(&a, w->exercise_o);
    args_add(&a, w->check_o);
    args_add(&a, lessons_archive());
    args_add_words(&a, LESSONS_LDLIBS);
    int rc = run_logged(&a, NULL, COMPILE_SECONDS, r, &p, err);
    if (rc) return rc;
    if (p.interrupted) {
        r->outcome = CHECK_INTERRUPTED;
    } else if (proc_failed(&p)) {
        r->outcome = CHECK_NO_LINK;
        first_link_error(p.output, r->detail, sizeof r->detail);
    }
    proc_result_free(&p);
    return 0;
}

/* The tests of a lesson's check.c: its lines that open with "Test(". A check.c without
 * LESSON_CHECK_SUITE could never say its tests finished: the lesson's bug, said as one. */
static int count_tests(const Lesson *l, int *tests, Err *err) {
    char path[4096], line[1024];
    lesson_path(l, "check.c", path, sizeof path);
    FILE *f = fopen(path, "r");
    if (!f) return err_set(err, ERR_IO, "cannot read %s: %s", path, strerror(errno));
    int suite = 0;
    *tests = 0;
    while (fgets(line, sizeof line, f)) {
        *tests += !strncmp(line, "Test(", 5);
        suite |= !strncmp(line, "LESSON_CHECK_SUITE(", 19);
    }
    fclose(f);
    if (!suite || *tests == 0)
        return err_set(err, ERR_INTERNAL, "%s has %s", lessons_shown_path(path),
                       suite ? "no Test(...)" : "no LESSON_CHECK_SUITE(lessonNN) line (check.h)");
    return 0;
}

/* A token made for this run of the check, as hex; an error if the system gives no random
 * bytes. */
static int make_token(char *hex, size_t n, Err *err) {
    unsigned char bytes[16];
    if (getrandom(bytes, sizeof bytes, 0) != (ssize_t)sizeof bytes)
        return err_set(err, ERR_IO, "no random bytes for the check's token: %s", strerror(errno));
    for (size_t i = 0; i < sizeof bytes && 2 * i + 2 < n; i++)
        snprintf(hex + 2 * i, 3, "%02x", bytes[i]);
    return 0;
}

/* The names of the tests that wrote "TOKEN<tab>NAME" to the results file, as "\nA\nB\n",
 * each once, into `finished` (malloc'ed; the caller frees); returns how many. */
static int read_finished(const char *results, const char *token, char **finished) {
    *finished = strdup("\n");
    FILE *f = fopen(results, "r");
    if (!f || !*finished) {
        if (f) fclose(f);
        return 0;
    }
    char line[CHECK_TEXT_MAX];
    size_t token_len = strlen(token);
    int count = 0;
    while (fgets(line, sizeof line, f)) {
        line[strcspn(line, "\n")] = 0;
        if (strncmp(line, token, token_len) || line[token_len] != '\t') continue;
        char entry[CHECK_TEXT_MAX + 2];
        snprintf(entry, sizeof entry, "\n%s\n", line + token_len + 1);
        if (strstr(*finished, entry)) continue; /* said twice: one test */
        size_t have = strlen(*finished);
        char *grown = realloc(*finished, have + strlen(entry));
        if (!grown) break;
        strcpy(grown + have, entry + 1);
        *finished = grown;
        count++;
    }
    fclose(f);
    return count;
}

static int run_check(const Lesson *l, const Workdir *w, const char *file, CheckResult *r,
                     Err *err) {
    char token[40], results_env[400], token_env[80];
    int rc = count_tests(l, &r->tests, err);
    if (!rc) rc = make_token(token, sizeof token, err);
    if (rc) return rc;
    int fd = open(w->results, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
    if (fd < 0) return err_set(err, ERR_IO, "cannot make %s: %s", w->results, strerror(errno));
    close(fd);
    snprintf(results_env, sizeof results_env, "%s=%s", LESSON_RESULTS_ENV, w->results);
    snprintf(token_env, sizeof token_env, "%s=%s", LESSON_TOKEN_ENV, token);
    char *const env[] = {results_env, token_env, NULL};
    ArgList a = {0};
    args_add(&a, w->check_bin);
    args_add(&a, "--jobs");
    args_add(&a, "1");
    args_add(&a, "--fail-fast");
    ProcResult p;
    rc = run_logged(&a, env, RUN_SECONDS, r, &p, err);
    if (rc) return rc;
    char *finished;
    r->tests_finished = read_finished(w->results, token, &finished);
    read_check_output(&p, file, finished ? finished : "\n", r);
    free(finished);
    proc_result_free(&p);
    return 0;
}

/* Whether two files hold the same bytes (0 when either cannot be read). */
static int same_contents(const char *a, const char *b) {
    FILE *fa = fopen(a, "rb"), *fb = fopen(b, "rb");
    int same = fa && fb;
    while (same) {
        int ca = getc(fa), cb = getc(fb);
        same = ca == cb;
        if (ca == EOF || cb == EOF) break;
    }
    if (fa) fclose(fa);
    if (fb) fclose(fb);
    return same;
}

/* The learner's file finds "exercise.h" in its own folder first. A copy there (fsdp lessons start
 * puts one beside exercise.c) must be the lesson's own, or the exercise would be built on other
 * declarations than the check: 0, or 1 with the failure said in out. */
static int foreign_header(const Lesson *l, const char *file, CheckResult *out) {
    char beside[4096], own[4096];
    const char *slash = strrchr(file, '/');
    snprintf(beside, sizeof beside, "%.*sexercise.h", slash ? (int)(slash - file + 1) : 0, file);
    lesson_path(l, "exercise.h", own, sizeof own);
    if (access(beside, F_OK) != 0 || same_contents(beside, own)) return 0;
    out->outcome = CHECK_FAILED;
    snprintf(out->detail, sizeof out->detail,
             "%s is not lesson %02d's exercise.h, and %s is built with it while the check uses "
             "%s: put the lesson's back (cp %s %s)",
             lessons_shown_path(beside), l->number, lessons_shown_path(file),
             lessons_shown_path(own), lessons_shown_path(own), lessons_shown_path(beside));
    return 1;
}

int lesson_check_run(const Lesson *l, const char *file, CheckResult *out, Err *err) {
    memset(out, 0, sizeof *out);
    struct stat st;
    if (stat(lessons_archive(), &st) != 0)
        return err_set(err, ERR_USAGE, "%s is missing: build it with make (or make lessons)",
                       lessons_shown_path(lessons_archive()));
    if (access(file, R_OK) != 0)
        return err_set(err, ERR_USAGE, "cannot read %s: %s", lessons_shown_path(file),
                       strerror(errno));
    if (foreign_header(l, file, out)) return 0;
    Workdir w;
    int rc = workdir_make(&w, err);
    if (rc) return rc;
    /* each step runs while nothing has gone wrong (outcome is still 0, CHECK_PASSED) */
    rc = build_exercise(l, file, &w, out, err);
    if (!rc && out->outcome == CHECK_PASSED) rc = compile_check(l, &w, out, err);
    if (!rc && out->outcome == CHECK_PASSED) rc = link_check(&w, out, err);
    if (!rc && out->outcome == CHECK_PASSED) rc = run_check(l, &w, file, out, err);
    workdir_remove(&w);
    return rc;
}

void check_result_free(CheckResult *r) {
    free(r->log);
    r->log = NULL;
}
