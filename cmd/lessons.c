/* lessons (command): `fsdp lessons` and its subcommands: list, check, hint, watch, start.
 * Everything a learner reads is printed here; the building and running is lesson_check.c's, the
 * state lesson_progress.c's. */
#include "cmd/commands.h"

#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "lessons/tool/lesson_check.h"
#include "lessons/tool/lesson_hints.h"
#include "lessons/tool/lesson_index.h"
#include "lessons/tool/lesson_proc.h"
#include "lessons/tool/lesson_progress.h"
#include "lessons/tool/lesson_takeaway.h"

#define EXIT_PASSED 0
#define EXIT_FAILED 1
#define EXIT_USAGE 2
#define EXIT_INTERRUPTED 130
#define WATCH_POLL_NS 500000000L

static void help(FILE *f) {
    fputs("usage: ./fsdp lessons [command]\n"
          "\n"
          "Exercises: you write a piece of FSDP in lessons/NN-topic/exercise.c; the check builds\n"
          "it with the engine and compares the two.\n"
          "\n"
          "commands\n"
          "  (none), list       every lesson with its state, and the next one to do\n"
          "  check [NN|all]     build lesson NN's check with its exercise.c and run it (default:\n"
          "                     the first lesson not done; all: every lesson)\n"
          "    --file PATH      check PATH instead of the lesson's exercise.c (progress is not\n"
          "                     recorded)\n"
          "    --verbose        also print every command the check ran and all it printed\n"
          "  hint [NN] [K]      the next hint of lesson NN, or its hint K\n"
          "  watch [NN]         check lesson NN each time its exercise.c is saved, until it\n"
          "                     passes (Ctrl-C stops); --file and --verbose as for check\n"
          "  start NN DIR       copy lesson NN's exercise.c, exercise.h and README.md into DIR\n"
          "                     (made if missing; a file already there is never overwritten),\n"
          "                     to work outside this checkout: check it with\n"
          "                     ./fsdp lessons check NN --file DIR/exercise.c\n"
          "  help               this text\n"
          "\n"
          "Progress is kept in lessons/.progress ($FSDP_LESSONS_STATE keeps it elsewhere;\n"
          "$FSDP_LESSONS_DIR checks a copy of the lessons folder instead).\n",
          f);
}

static int usage_error(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static int usage_error(const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    fputs("fsdp: ", stderr);
    vfprintf(stderr, fmt, ap);
    fputs("\n", stderr);
    va_end(ap);
    return EXIT_USAGE;
}

static int fail_with(const Err *err) {
    fprintf(stderr, "fsdp: %s\n", err->msg);
    return err->code == ERR_USAGE ? EXIT_USAGE : EXIT_FAILED;
}

static const Lesson *find_or_complain(const char *name) {
    const Lesson *l = lesson_find(name);
    if (!l)
        usage_error("no lesson '%s' (lessons are %02d to %02d; ./fsdp lessons lists them)", name,
                    lesson_at(0)->number, lesson_at(lesson_count() - 1)->number);
    return l;
}

/* The first lesson not done; NULL when all are. */
static const Lesson *current_lesson(const Progress *p) {
    for (int i = 0; i < lesson_count(); i++)
        if (lesson_state(lesson_at(i), p) != STATE_DONE) return lesson_at(i);
    return NULL;
}

static void print_next(const Progress *p) {
    const Lesson *next = current_lesson(p);
    char readme[4096];
    if (next) {
        lesson_path(next, "README.md", readme, sizeof readme);
        printf("next: ./fsdp lessons check %02d (%s)\n", next->number, lessons_shown_path(readme));
    } else
        printf("all %d lessons done\n", lesson_count());
}

/* ------------------------------------------------------------ list */

static int cmd_list(void) {
    Progress p;
    Err err = {0};
    if (progress_load(&p, &err)) return fail_with(&err);
    printf("lessons: write a piece of FSDP yourself; its check compares it with the engine\n");
    for (int i = 0; i < lesson_count(); i++) {
        const Lesson *l = lesson_at(i);
        printf("  %02d  %-41s %s\n", l->number, l->title, lesson_state_name(lesson_state(l, &p)));
    }
    print_next(&p);
    return EXIT_PASSED;
}

/* ------------------------------------------------------------ check */

typedef struct CheckArgs {
    const char *lesson; /* NN, all, or NULL: the current one */
    const char *file;   /* --file, or NULL: the lesson's exercise.c */
    int verbose;
} CheckArgs;

/* An exercise is a page of C: a --file that is not a regular file (/dev/zero, a FIFO) or is
 * larger than any exercise would keep the compiler reading for ever. */
enum { EXERCISE_MAX_BYTES = 1 << 20 };

static int check_exercise_file(const char *path) {
    struct stat st;
    if (stat(path, &st) != 0)
        return usage_error("--file %s: cannot open it: %s", path, strerror(errno));
    if (!S_ISREG(st.st_mode))
        return usage_error("--file %s is not a regular file; give the exercise's .c file", path);
    if (st.st_size > EXERCISE_MAX_BYTES)
        return usage_error("--file %s is %lld bytes; an exercise is at most %d", path,
                           (long long)st.st_size, EXERCISE_MAX_BYTES);
    return 0;
}

static int parse_check_args(const char *cmd, int argc, char **argv, CheckArgs *a) {
    memset(a, 0, sizeof *a);
    for (int i = 0; i < argc; i++) {
        if (!strcmp(argv[i], "--file")) {
            if (i + 1 >= argc)
                return usage_error("--file needs a path (lessons %s --file PATH)", cmd);
            a->file = argv[++i];
            int rc = check_exercise_file(a->file);
            if (rc) return rc;
        } else if (!strcmp(argv[i], "--verbose")) {
            a->verbose = 1;
        } else if (argv[i][0] == '-') {
            return usage_error("unknown flag '%s' for lessons %s (./fsdp lessons help)", argv[i],
                               cmd);
        } else if (a->lesson) {
            return usage_error("lessons %s takes one lesson, got '%s' and '%s'", cmd, a->lesson,
                               argv[i]);
        } else {
            a->lesson = argv[i];
        }
    }
    return 0;
}

static int count_char(const char *s, char c) {
    int n = 0;
    for (; *s; s++) n += *s == c;
    return n;
}

/* The lesson a check or a watch is about: the one named, else the first not done (NULL when
 * all are). Returns EXIT_USAGE, having said why, for a name that is no lesson or a --file
 * without the lesson it answers. */
static int lesson_for(const CheckArgs *a, const Progress *p, const Lesson **out) {
    *out = a->lesson ? find_or_complain(a->lesson) : current_lesson(p);
    if (a->lesson && !*out) return EXIT_USAGE;
    if (!a->lesson && a->file)
        return usage_error("--file needs the lesson it answers: ./fsdp lessons check NN --file "
                           "PATH");
    return 0;
}

/* "expected rows=0, got 1": when both sides are one "name=value" with the same name, the
 * name is said once. */
static const char *got_without_name(const char *expected, const char *got) {
    if (count_char(expected, '=') != 1 || count_char(got, '=') != 1) return got;
    size_t name_len = (size_t)(strchr(expected, '=') - expected) + 1; /* "rows=" */
    return strncmp(expected, got, name_len) ? got : got + name_len;
}

static void print_failure(const Lesson *l, const CheckResult *r) {
    if (r->expected[0])
        printf("lesson %02d failed: %s: expected %s, got %s\n", l->number, r->input, r->expected,
               got_without_name(r->expected, r->got));
    else if (r->input[0])
        printf("lesson %02d failed: %s: %s\n", l->number, r->input, r->detail);
    else
        printf("lesson %02d failed: %s\n", l->number, r->detail);
    if (r->why[0]) printf("%s\n", r->why); /* the misconception a known wrong value comes from */
    if (r->hint > 0)
        printf("read hint %d: ./fsdp lessons hint %02d %d\n", r->hint, l->number, r->hint);
}

static void print_crash(const Lesson *l, const CheckResult *r) {
    const char *where = r->input[0] ? r->input : "the check";
    if (strstr(r->detail, "LeakSanitizer"))
        printf("lesson %02d failed: %s leaks memory (%s): free what you allocate\n", l->number,
               where, r->detail);
    else if (r->detail[0])
        printf("lesson %02d failed: your code crashed in %s: %s\n", l->number, where, r->detail);
    else
        printf("lesson %02d failed: your code crashed in %s (a bad pointer, or an index past the "
               "end of a buffer?)\n",
               l->number, where);
    printf("./fsdp lessons check %02d --verbose shows everything the check printed\n", l->number);
}

/* After a pass: what the piece teaches, in two lines, and the command that shows it in the
 * engine, from the lesson's README (lesson_takeaway.h). A README without them (a lesson being
 * written) prints the pass alone; the tests hold every lesson to having them. */
static void print_takeaway(const Lesson *l) {
    Takeaway t;
    Err err = {0};
    if (takeaway_load(l, &t, &err)) return;
    printf("  %s\n  %s\n  see it live: %s\n", t.line[0], t.line[1], t.command);
}

/* Prints the outcome in plain words; returns the exit status. */
static int report(const Lesson *l, const char *shown_file, const CheckResult *r) {
    switch (r->outcome) {
    case CHECK_PASSED:
        printf("lesson %02d passed: %s agrees with the engine in all %d checks\n", l->number,
               shown_file, r->tests);
        print_takeaway(l);
        return EXIT_PASSED;
    case CHECK_FAILED:
        print_failure(l, r);
        break;
    case CHECK_NO_COMPILE:
        printf("lesson %02d: %s does not compile\n%s\nfix it and run ./fsdp lessons check %02d "
               "again\n",
               l->number, shown_file, r->detail, l->number);
        break;
    case CHECK_NO_LINK:
        printf("lesson %02d: %s does not link: %s\nkeep every function exercise.c came with, "
               "under its name, and make the helpers you add static\n",
               l->number, shown_file, r->detail);
        break;
    case CHECK_CRASHED:
        print_crash(l, r);
        break;
    case CHECK_TIMED_OUT:
        printf("lesson %02d failed: %s %s (an endless loop?)\n", l->number,
               r->input[0] ? r->input : "the check", r->detail);
        break;
    case CHECK_INTERRUPTED:
        printf("lesson %02d: interrupted\n", l->number);
        return EXIT_INTERRUPTED;
    }
    return EXIT_FAILED;
}

/* Checks one lesson and prints the outcome; records a pass of the learner's own file. */
static int check_one(const Lesson *l, const CheckArgs *a, Progress *p) {
    char own[4096];
    lesson_path(l, "exercise.c", own, sizeof own);
    const char *file = a->file ? a->file : own;
    uint32_t crc = 0;
    Err err = {0};
    if (file_crc32(file, &crc, &err)) return usage_error("%s", err.msg);
    CheckResult r;
    int rc = lesson_check_run(l, file, &r, &err);
    if (rc) {
        check_result_free(&r);
        return fail_with(&err);
    }
    if (a->verbose && r.log) fputs(r.log, stdout);
    int status = report(l, lessons_shown_path(file), &r);
    check_result_free(&r);
    if (status == EXIT_PASSED && !a->file) {
        p->of[l->number].passed = 1;
        p->of[l->number].passed_crc = crc;
        if (progress_save(p, &err)) return fail_with(&err);
    }
    return status;
}

/* Every lesson on the learner's files (make lessons). One still as shipped is reported as
 * not started without building it: its check is known to fail. */
static int check_all(const CheckArgs *a, Progress *p) {
    int passed = 0;
    for (int i = 0; i < lesson_count(); i++) {
        const Lesson *l = lesson_at(i);
        int status;
        if (lesson_state(l, p) == STATE_NOT_STARTED) {
            char file[4096];
            lesson_path(l, "exercise.c", file, sizeof file);
            printf("lesson %02d: not started (%s is as shipped)\n", l->number,
                   lessons_shown_path(file));
            status = EXIT_FAILED;
        } else {
            status = check_one(l, a, p);
        }
        if (status == EXIT_INTERRUPTED || status == EXIT_USAGE) return status;
        passed += status == EXIT_PASSED;
    }
    printf("%d of %d lessons pass\n", passed, lesson_count());
    return passed == lesson_count() ? EXIT_PASSED : EXIT_FAILED;
}

/* check's and watch's start: their flags and the learner's progress. Returns -1 to go on, else
 * the exit status to end with. */
static int start_checking(const char *command, int argc, char **argv, CheckArgs *a, Progress *p) {
    if (parse_check_args(command, argc, argv, a)) return EXIT_USAGE;
    Err err = {0};
    return progress_load(p, &err) ? fail_with(&err) : -1;
}

/* The lesson to check: the one named, or the next not done. Returns -1 to go on, else the exit
 * status to end with (every lesson done: passed, and said). */
static int lesson_to_check(const CheckArgs *a, const Progress *p, const Lesson **l) {
    if (lesson_for(a, p, l)) return EXIT_USAGE;
    if (*l) return -1;
    printf("all %d lessons done\n", lesson_count());
    return EXIT_PASSED;
}

static int cmd_check(int argc, char **argv) {
    CheckArgs a;
    Progress p;
    int status = start_checking("check", argc, argv, &a, &p);
    if (status >= 0) return status;
    proc_catch_interrupt();
    if (a.lesson && !strcmp(a.lesson, "all")) {
        if (a.file) return usage_error("--file checks one lesson, not all");
        return check_all(&a, &p);
    }
    const Lesson *l;
    if ((status = lesson_to_check(&a, &p, &l)) >= 0) return status;
    status = check_one(l, &a, &p);
    if (status == EXIT_PASSED && !a.file) print_next(&p);
    return status;
}

/* ------------------------------------------------------------ hint */

static int parse_hint_number(const char *s, int count, const Lesson *l, int *k) {
    char *end;
    long v = strtol(s, &end, 10);
    if (*end || v < 1 || v > count)
        return usage_error("lesson %02d has hints 1 to %d, not '%s'", l->number, count, s);
    *k = (int)v;
    return 0;
}

static int cmd_hint(int argc, char **argv) {
    if (argc > 2) return usage_error("usage: ./fsdp lessons hint [NN] [K]");
    Progress p;
    Err err = {0};
    if (progress_load(&p, &err)) return fail_with(&err);
    const Lesson *l = argc > 0 ? find_or_complain(argv[0]) : current_lesson(&p);
    if (argc > 0 && !l) return EXIT_USAGE;
    if (!l) return usage_error("all lessons are done: name one (./fsdp lessons hint NN)");
    Hints h;
    if (hints_load(l, &h, &err)) return fail_with(&err);
    LessonProgress *lp = &p.of[l->number];
    int k = lp->hints_shown < h.count ? lp->hints_shown + 1 : h.count;
    if (argc == 2 && parse_hint_number(argv[1], h.count, l, &k)) {
        hints_free(&h);
        return EXIT_USAGE;
    }
    printf("lesson %02d, hint %d of %d:\n\n%s\n\n", l->number, k, h.count, h.text[k - 1]);
    if (k < h.count)
        printf("%d more: ./fsdp lessons hint %02d\n", h.count - k, l->number);
    else
        printf("that was the last one (./fsdp lessons hint %02d K shows hint K again)\n",
               l->number);
    hints_free(&h);
    if (k > lp->hints_shown) {
        lp->hints_shown = k;
        if (progress_save(&p, &err)) return fail_with(&err);
    }
    return EXIT_PASSED;
}

/* ------------------------------------------------------------ watch */

typedef struct FileStamp {
    struct timespec mtime;
    off_t size;
    int exists;
} FileStamp;

static FileStamp stamp_of(const char *path) {
    struct stat st;
    FileStamp s = {0};
    if (stat(path, &st) == 0) s = (FileStamp){st.st_mtim, st.st_size, 1};
    return s;
}

static int same_stamp(FileStamp a, FileStamp b) {
    return a.exists == b.exists && a.size == b.size && a.mtime.tv_sec == b.mtime.tv_sec &&
           a.mtime.tv_nsec == b.mtime.tv_nsec;
}

static int cmd_watch(int argc, char **argv) {
    CheckArgs a;
    Progress p;
    const Lesson *l;
    int status = start_checking("watch", argc, argv, &a, &p);
    if (status < 0) status = lesson_to_check(&a, &p, &l);
    if (status >= 0) return status;
    char own[4096];
    lesson_path(l, "exercise.c", own, sizeof own);
    const char *file = a.file ? a.file : own;
    proc_catch_interrupt();
    printf("watching %s: lesson %02d is checked each time it is saved, until it passes (Ctrl-C "
           "stops)\n",
           lessons_shown_path(file), l->number);
    fflush(stdout);
    FileStamp seen = {0};
    for (int first = 1; !proc_was_interrupted(); first = 0) {
        FileStamp now = stamp_of(file);
        if (now.exists && (first || !same_stamp(now, seen))) {
            seen = now;
            time_t t = time(NULL);
            char clock[16];
            strftime(clock, sizeof clock, "%H:%M:%S", localtime(&t));
            printf("\n[%s] checking lesson %02d\n", clock, l->number);
            fflush(stdout);
            status = check_one(l, &a, &p);
            fflush(stdout);
            if (status == EXIT_PASSED) {
                if (!a.file) print_next(&p);
                return EXIT_PASSED;
            }
            if (status == EXIT_USAGE) return status;
        }
        nanosleep(&(struct timespec){0, WATCH_POLL_NS}, NULL);
    }
    printf("\nstopped watching\n");
    return EXIT_INTERRUPTED;
}

/* ------------------------------------------------------------ start */

/* What a learner needs to work on lesson l in a folder of their own: the file they edit, the
 * declarations it includes (the check refuses a changed copy), and the lesson's text. Hints
 * stay behind, graded: ./fsdp lessons hint NN. */
static const char *const start_files[] = {"exercise.c", "exercise.h", "README.md"};
#define NSTART_FILES (int)(sizeof start_files / sizeof start_files[0])

/* Copies src to dst, which must not exist yet (O_EXCL: never overwrites, even a file made
 * since it was looked for). 0, or -1 with errno set; a dst half written is removed. */
static int copy_new_file(const char *src, const char *dst) {
    FILE *in = fopen(src, "rb");
    if (!in) return -1;
    int fd = open(dst, O_WRONLY | O_CREAT | O_EXCL, 0644);
    FILE *out = fd >= 0 ? fdopen(fd, "wb") : NULL;
    if (!out) {
        int saved = errno;
        if (fd >= 0) close(fd);
        fclose(in);
        errno = saved;
        return -1;
    }
    char buf[8192];
    size_t n;
    int rc = 0;
    while (!rc && (n = fread(buf, 1, sizeof buf, in)) > 0)
        if (fwrite(buf, 1, n, out) != n) rc = -1;
    if (ferror(in)) rc = -1;
    int saved = errno;
    if (fclose(out) != 0) rc = -1;
    fclose(in);
    if (rc) {
        unlink(dst);
        errno = saved ? saved : EIO;
    }
    return rc;
}

/* DIR itself: an existing folder, or one made now (its parent must exist). */
static int start_folder(const char *dir, int *made) {
    struct stat st;
    *made = 0;
    if (stat(dir, &st) == 0) {
        if (S_ISDIR(st.st_mode)) return 0;
        return usage_error("%s exists and is not a folder: name a folder to put the lesson in",
                           dir);
    }
    if (mkdir(dir, 0755) != 0)
        return usage_error("cannot make the folder %s: %s", dir, strerror(errno));
    *made = 1;
    return 0;
}

static int cmd_start(int argc, char **argv) {
    if (argc != 2 || argv[0][0] == '-' || argv[1][0] == '-')
        return usage_error("usage: ./fsdp lessons start NN DIR (DIR: a folder outside the "
                           "checkout, made if missing)");
    const Lesson *l = find_or_complain(argv[0]);
    if (!l) return EXIT_USAGE;
    const char *dir = argv[1];
    char src[NSTART_FILES][4096], dst[NSTART_FILES][4096];
    for (int i = 0; i < NSTART_FILES; i++) {
        lesson_path(l, start_files[i], src[i], sizeof src[i]);
        snprintf(dst[i], sizeof dst[i], "%s/%s", dir, start_files[i]);
        if (access(dst[i], F_OK) == 0)
            return usage_error("%s already exists: lessons start never overwrites a file (choose "
                               "another folder, or check that one: ./fsdp lessons check %02d "
                               "--file %s/exercise.c)",
                               dst[i], l->number, dir);
    }
    int made;
    if (start_folder(dir, &made)) return EXIT_USAGE;
    for (int i = 0; i < NSTART_FILES; i++) {
        if (copy_new_file(src[i], dst[i]) == 0) continue;
        int saved = errno;
        for (int k = 0; k < i; k++) unlink(dst[k]); /* only what this command wrote */
        if (made) rmdir(dir);
        fprintf(stderr, "fsdp: cannot copy %s to %s: %s\n", lessons_shown_path(src[i]), dst[i],
                strerror(saved));
        return saved == EEXIST ? EXIT_USAGE : EXIT_FAILED;
    }
    printf("lesson %02d is in %s: read %s/README.md, write %s/exercise.c, then check it:\n"
           "  ./fsdp lessons check %02d --file %s/exercise.c\n"
           "  ./fsdp lessons hint %02d      (stuck? the next hint)\n",
           l->number, dir, dir, dir, l->number, dir, l->number);
    return EXIT_PASSED;
}

int cmd_lessons(int argc, char **argv) {
    if (!lessons_root())
        return usage_error("no lessons/ in the folder of this fsdp or above it: the lessons are "
                           "run by the fsdp built in the checkout that has them");
    if (argc == 0 || !strcmp(argv[0], "list")) {
        if (argc > 1) return usage_error("lessons list takes no arguments");
        return cmd_list();
    }
    const char *cmd = argv[0];
    if (!strcmp(cmd, "help") || !strcmp(cmd, "--help") || !strcmp(cmd, "-h")) {
        help(stdout);
        return EXIT_PASSED;
    }
    if (!strcmp(cmd, "check")) return cmd_check(argc - 1, argv + 1);
    if (!strcmp(cmd, "hint")) return cmd_hint(argc - 1, argv + 1);
    if (!strcmp(cmd, "watch")) return cmd_watch(argc - 1, argv + 1);
    if (!strcmp(cmd, "start")) return cmd_start(argc - 1, argv + 1);
    return usage_error("unknown lessons command '%s' (./fsdp lessons help)", cmd);
}
