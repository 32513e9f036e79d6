/* The pages' shown outputs stay true: every ```console block of README.md and the docs/ pages is
 * run and what its commands print is compared with what the page shows (the convention below). */
#include <criterion/criterion.h>
#include <ctype.h>
#include <glob.h>
#include <limits.h>
#include <math.h>
#include <regex.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "tests/util.h"

/* The convention, for whoever writes a page:
 *
 * - A block fenced with ```console is checked. Its lines that start with "$ " are commands (one
 *   ending in "\" goes on to the next line); the lines after a command, up to the next command
 *   or the end of the block, are what it prints, stdout and stderr together as a terminal shows
 *   them. A line that is only "..." stands for any number of lines, none included: an excerpt.
 * - An HTML comment on the line right before the fence changes that:
 *   `<!-- not checked: WHY -->` shows the block without running it (say why: it takes minutes,
 *   it needs a GPU); `<!-- any order -->` compares the lines whatever their order (processes
 *   printing side by side), and then "..." is not allowed.
 * - A line starting with "$ " in any other fenced block is an error, so every shown command is
 *   either checked or says why not. Lists of commands without output use ```sh and no "$ ".
 * - A page's commands run in order, each with /bin/sh under `timeout 300`, in a fresh temporary
 *   directory removed afterwards: ./fsdp there is the binary under test ($FSDP_BIN), and the
 *   lessons are a copy as shipped (git's HEAD, else the tree's) with their progress kept there.
 *   So the files commands write land there, and a later block of a page may use what an
 *   earlier one wrote.
 * - Before comparing, both sides lose their trailing spaces, the temporary directory's path, and
 *   the figures that change from run to run (the masks below).
 * - Figures that depend on floating-point rounding, and so on which GEMM kernel OpenBLAS picks for
 *   the CPU (DESIGN's invariant 8), match within a tolerance written once (the tolerances below):
 *   a loss within 2%, an accuracy within 1 point. Every other figure, and all the text, is exact.
 *   So a page shows one machine's run and stays true on any; what rounding could change beyond
 *   that (which step is the best, where a run diverges) a page shows only where it is certain.
 *
 * Why a Criterion test and not a script: it runs with the rest of `make test` (and under
 * SANITIZE=1), one test per page so pages run side by side under --jobs, and POSIX regex.h is
 * all the text handling it needs. */

/* Run-dependent figures, masked on both sides: pattern (POSIX extended) and what replaces it. */
static const char *const masks[][2] = {
    {" *[0-9][0-9,.]* img/s", " # img/s"},                 /* training's throughput */
    {" *[0-9][0-9,.]* tok/s", " # tok/s"},                 /* a language model's */
    {"eta [0-9:]+", "eta #"},                              /* and its estimate */
    {" *[0-9][0-9.]* [KMGT]i?B/s", " # B/s"},              /* bandwidths */
    {", +[0-9][0-9.]* s$", ", # s"},                       /* an evaluation's wall time */
    {"peak resident +[0-9.]+ [KMG]iB", "peak resident #"}, /* the process's resident memory */
    {" *[0-9.]+ [KMG]iB unaccounted \\( *[0-9.]+%", " # unaccounted (#%"}, /* and its rest */
    {"[0-9]{4}-[0-9]{2}-[0-9]{2}", "#-#-#"},                               /* dates */
    {"[0-9]{1,2}:[0-9]{2}:[0-9]{2}", "#:#:#"},                             /* clock times */
    {"step +[0-9][0-9.]* us \\(measured\\)", "step # us (measured)"},      /* a real rank's step */
    {"\\(pid [0-9]+\\)", "(pid #)"},                                       /* process ids */
    {"process resident .*", "process resident #"}, /* measured resident memory per rank */
    /* a text's token file: its cache folder and its key (the sources' times) are the machine's */
    {"tokens: .*/text-[0-9a-f]+\\.tokens, made [a-z]+", "tokens: #/text-#.tokens, made #"},
};
enum { NMASKS = sizeof masks / sizeof masks[0] };

/* Figures that rounding moves, found by the text right before them (a POSIX extended pattern that
 * must match the line up to the figure), and how far the output may be from the page: relative
 * to the page's figure, absolute, or a fraction of the figure after it (N of "(N/M)"). */
typedef enum { WITHIN_RELATIVE, WITHIN_ABSOLUTE, WITHIN_SHARE_OF_NEXT } Within;
static const struct {
    const char *before;
    Within kind;
    double tolerance;
} tolerances[] = {
    {"loss(\":| +)$", WITHIN_RELATIVE, 0.02},                  /* a loss: 2% */
    {"nats/byte, $", WITHIN_RELATIVE, 0.02},                   /* and in bits */
    {"accuracy:? +$", WITHIN_ABSOLUTE, 1.0},                   /* an accuracy in percent: 1 point */
    {"accuracy:? +[0-9.]+% \\($", WITHIN_SHARE_OF_NEXT, 0.01}, /* its count: 1% of the images */
    {"\"accuracy\":$", WITHIN_ABSOLUTE, 0.01},                 /* one as a fraction in JSON */
    {"\"correct\":$", WITHIN_SHARE_OF_NEXT, 0.01},             /* and its count */
};
enum { NTOLERANCES = sizeof tolerances / sizeof tolerances[0] };

typedef enum { MODE_CHECK, MODE_SKIP, MODE_ANY_ORDER } BlockMode;

typedef struct Lines {
    char **at;
    int n;
} Lines;

/* One shown command: where it is, what it runs, what the page says it prints. */
typedef struct Shown {
    int line;
    BlockMode mode;
    char *cmd;
    Lines expect;
} Shown;

typedef struct Page {
    const char *path;
    Shown *shown;
    int n;
} Page;

static char *slurp(const char *path) {
    FILE *f = fopen(path, "r");
    cr_assert(f, "cannot read %s", path);
    fseek(f, 0, SEEK_END);
    long size = ftell(f);
    fseek(f, 0, SEEK_SET);
    char *buf = malloc((size_t)size + 1);
    cr_assert(buf);
    size_t got = fread(buf, 1, (size_t)size, f);
    buf[got] = 0;
    fclose(f);
    return buf;
}

static void lines_push(Lines *l, const char *s, size_t len) {
    if (l->n % 64 == 0) cr_assert(l->at = realloc(l->at, sizeof *l->at * (size_t)(l->n + 64)));
    while (len > 0 && (s[len - 1] == ' ' || s[len - 1] == '\r')) len--; /* trailing spaces */
    cr_assert(l->at[l->n] = strndup(s, len));
    l->n++;
}

/* The lines of `text`; a final newline ends the last line rather than starting an empty one. */
static Lines split_lines(const char *text) {
    Lines l = {0};
    for (const char *s = text; *s;) {
        size_t len = strcspn(s, "\n");
        lines_push(&l, s, len);
        s += len + (s[len] == '\n');
    }
    return l;
}

static void lines_free(Lines *l) {
    for (int i = 0; i < l->n; i++) free(l->at[i]);
    free(l->at);
    *l = (Lines){0};
}

static int starts_with(const char *s, const char *prefix) {
    return !strncmp(s, prefix, strlen(prefix));
}

static int is_ellipsis(const char *s) {
    while (isspace((unsigned char)*s)) s++;
    return !strcmp(s, "...");
}

/* What the comment on the line before a ```console fence says about the block. */
static BlockMode block_mode(const char *page, int fence_line, const char *before) {
    if (starts_with(before, "<!-- not checked: ")) return MODE_SKIP;
    if (!strcmp(before, "<!-- any order -->")) return MODE_ANY_ORDER;
    cr_assert(!starts_with(before, "<!--"), "%s:%d: unknown marker %s (see tests/docs/test_docs.c)",
              page, fence_line, before);
    return MODE_CHECK;
}

static Shown *shown_new(Page *p, int line, BlockMode mode, const char *cmd) {
    if (p->n % 16 == 0) cr_assert(p->shown = realloc(p->shown, sizeof *p->shown * (p->n + 16)));
    Shown *s = &p->shown[p->n++];
    *s = (Shown){.line = line, .mode = mode};
    cr_assert(s->cmd = strdup(cmd));
    return s;
}

/* Reads one ```console block's commands and their outputs from line `at`, the first after the
 * fence; returns the line after the closing fence. */
static int parse_console(Page *p, const Lines *l, int at, BlockMode mode) {
    Shown *cur = NULL;
    for (; at < l->n && !starts_with(l->at[at], "```"); at++) {
        const char *s = l->at[at];
        if (starts_with(s, "$ ")) {
            cur = shown_new(p, at + 1, mode, s + 2);
            while (cur->cmd[0] && cur->cmd[strlen(cur->cmd) - 1] == '\\' && at + 1 < l->n) {
                size_t n = strlen(cur->cmd) + strlen(l->at[++at]) + 2;
                cr_assert(cur->cmd = realloc(cur->cmd, n));
                strcat(strcat(cur->cmd, "\n"), l->at[at]);
            }
            continue;
        }
        cr_assert(cur, "%s:%d: a console block must start with a \"$ \" command", p->path, at + 1);
        cr_assert(mode != MODE_ANY_ORDER || !is_ellipsis(s),
                  "%s:%d: \"...\" in a block of any order", p->path, at + 1);
        lines_push(&cur->expect, s, strlen(s));
    }
    cr_assert(at < l->n, "%s: a console block is not closed", p->path);
    return at + 1;
}

static Page parse_page(const char *path) {
    Page p = {.path = path};
    char *text = slurp(path);
    Lines l = split_lines(text);
    free(text);
    for (int i = 0; i < l.n;) {
        if (!starts_with(l.at[i], "```")) {
            i++;
            continue;
        }
        if (!strcmp(l.at[i], "```console")) {
            BlockMode mode = block_mode(path, i + 1, i > 0 ? l.at[i - 1] : "");
            i = parse_console(&p, &l, i + 1, mode);
            continue;
        }
        for (i++; i < l.n && !starts_with(l.at[i], "```"); i++)
            cr_assert(!starts_with(l.at[i], "$ "),
                      "%s:%d: a shown command outside a ```console block is never checked", path,
                      i + 1);
        i++;
    }
    lines_free(&l);
    return p;
}

static void page_free(Page *p) {
    for (int i = 0; i < p->n; i++) {
        free(p->shown[i].cmd);
        lines_free(&p->shown[i].expect);
    }
    free(p->shown);
}

/* Replaces every match of `re` in line with `with`. */
static void mask_one(char **line, const regex_t *re, const char *with) {
    char out[8192];
    size_t n = 0;
    const char *s = *line;
    regmatch_t m;
    int flags = 0;
    while (*s && !regexec(re, s, 1, &m, flags) && m.rm_eo > 0) {
        n += (size_t)snprintf(out + n, sizeof out - n, "%.*s%s", (int)m.rm_so, s, with);
        cr_assert(n < sizeof out);
        s += m.rm_eo;
        flags = REG_NOTBOL;
    }
    snprintf(out + n, sizeof out - n, "%s", s);
    free(*line);
    cr_assert(*line = strdup(out));
}

/* Drops `tmp` (the directory the commands ran in, with its slash) and masks run-dependent
 * figures, in every line. */
static void mask_lines(Lines *l, const char *tmp) {
    static regex_t re[NMASKS];
    static int compiled;
    for (int i = 0; !compiled && i < NMASKS; i++)
        cr_assert(!regcomp(&re[i], masks[i][0], REG_EXTENDED), "bad mask %s", masks[i][0]);
    compiled = 1;
    for (int i = 0; i < l->n; i++) {
        for (char *at; tmp && (at = strstr(l->at[i], tmp));)
            memmove(at, at + strlen(tmp), strlen(at + strlen(tmp)) + 1);
        for (int k = 0; k < NMASKS; k++) mask_one(&l->at[i], &re[k], masks[k][1]);
    }
}

/* The length of the figure at s: digits, then a fraction's. */
static size_t figure_len(const char *s) {
    size_t n = strspn(s, "0123456789");
    if (s[n] == '.' && isdigit((unsigned char)s[n + 1])) n += 1 + strspn(s + n + 1, "0123456789");
    return n;
}

/* Whether the figure at `w` of the page's line (its first `at` bytes before it) and the output's
 * at `g` differ by no more than a rule of tolerances allows. */
static int within_tolerance(const char *line, size_t at, const char *w, const char *g) {
    static regex_t re[NTOLERANCES];
    static int compiled;
    for (int i = 0; !compiled && i < NTOLERANCES; i++)
        cr_assert(!regcomp(&re[i], tolerances[i].before, REG_EXTENDED), "bad pattern %s",
                  tolerances[i].before);
    compiled = 1;
    char *before = strndup(line, at);
    cr_assert(before);
    int k = 0;
    while (k < NTOLERANCES && regexec(&re[k], before, 0, NULL, 0)) k++;
    free(before);
    if (k == NTOLERANCES) return 0;
    double a = strtod(w, NULL), b = strtod(g, NULL), off = fabs(a - b);
    if (tolerances[k].kind == WITHIN_RELATIVE) return off <= tolerances[k].tolerance * fabs(a);
    if (tolerances[k].kind == WITHIN_ABSOLUTE) return off <= tolerances[k].tolerance;
    const char *next = w + figure_len(w);
    next += strcspn(next, "0123456789");
    return *next && off <= tolerances[k].tolerance * strtod(next, NULL);
}

/* Does the output's line fit the page's: the same text, each figure the same or within its
 * tolerance? */
static int line_fits(const char *want, const char *got) {
    const char *w = want, *g = got;
    while (*w && *g) {
        int figure = isdigit((unsigned char)*w) && isdigit((unsigned char)*g) &&
                     (w == want || !isalnum((unsigned char)w[-1]));
        if (!figure) {
            if (*w++ != *g++) return 0;
            continue;
        }
        size_t nw = figure_len(w), ng = figure_len(g);
        if ((nw != ng || strncmp(w, g, nw)) && !within_tolerance(want, (size_t)(w - want), w, g))
            return 0;
        w += nw;
        g += ng;
    }
    return !*w && !*g;
}

/* Does `got` fit `want`, where a "..." line of want stands for any number of lines? */
static int lines_match(char *const *want, int nw, char *const *got, int ng) {
    if (nw == 0) return ng == 0;
    if (is_ellipsis(want[0])) {
        for (int skip = 0; skip <= ng; skip++)
            if (lines_match(want + 1, nw - 1, got + skip, ng - skip)) return 1;
        return 0;
    }
    return ng > 0 && line_fits(want[0], got[0]) && lines_match(want + 1, nw - 1, got + 1, ng - 1);
}

static int by_text(const void *a, const void *b) {
    return strcmp(*(char *const *)a, *(char *const *)b);
}

/* `cmd` quoted for sh: in single quotes, each ' written as '\''. */
static char *sh_quote(const char *cmd) {
    char *q = malloc(4 * strlen(cmd) + 3), *o = q;
    cr_assert(q);
    *o++ = '\'';
    for (const char *s = cmd; *s; s++) o = *s == '\'' ? stpcpy(o, "'\\''") : (*o++ = *s, o);
    strcpy(o, "'");
    return q;
}

/* What `cmd` prints, stdout and stderr together, run with /bin/sh in directory `dir`. The ranks
 * mpirun starts run without LeakSanitizer (a sanitizer build): Open MPI keeps allocations until
 * exit by design. */
static char *run_shown(const char *dir, const char *cmd) {
    char *quoted = sh_quote(cmd), *line = NULL;
    size_t n = strlen(dir) + strlen(quoted) + 96;
    cr_assert(line = malloc(n));
    snprintf(line, n, "cd '%s' && %stimeout 300 sh -c %s 2>&1 </dev/null", dir,
             strncmp(cmd, "mpirun ", 7) ? "" : "ASAN_OPTIONS=detect_leaks=0 ", quoted);
    int status;
    char *buf = shell_output(line, &status);
    free(quoted);
    free(line);
    return buf;
}

static char *joined(const Lines *l) {
    size_t n = 1;
    for (int i = 0; i < l->n; i++) n += strlen(l->at[i]) + 1;
    char *s = calloc(1, n), *o = s;
    cr_assert(s);
    for (int i = 0; i < l->n; i++) o += sprintf(o, "%s\n", l->at[i]);
    return s;
}

/* The first line the page shows that the output lacks, in order ("..." skipped); NULL if every
 * shown line is there (then the output has lines the page does not show). */
static const char *first_missing(const Lines *want, const Lines *got) {
    int at = 0;
    for (int i = 0; i < want->n; i++) {
        if (is_ellipsis(want->at[i])) continue;
        while (at < got->n && !line_fits(want->at[i], got->at[at])) at++;
        if (at == got->n) return want->at[i];
        at++;
    }
    return NULL;
}

/* Runs one shown command in `dir` and compares; a failure names the first line that differs
 * and shows what the page shows and what the command printed. */
static void check_shown(const Page *p, const Shown *s, const char *dir, const char *tmp_prefix) {
    char *out = run_shown(dir, s->cmd);
    Lines got = split_lines(out), want = {0};
    for (int i = 0; i < s->expect.n; i++)
        lines_push(&want, s->expect.at[i], strlen(s->expect.at[i]));
    mask_lines(&got, tmp_prefix);
    mask_lines(&want, NULL);
    if (s->mode == MODE_ANY_ORDER) {
        qsort(got.at, (size_t)got.n, sizeof *got.at, by_text);
        qsort(want.at, (size_t)want.n, sizeof *want.at, by_text);
    }
    if (!lines_match(want.at, want.n, got.at, got.n)) {
        const char *missing = first_missing(&want, &got);
        char *w = joined(&want);
        cr_expect_fail("%s:%d: `%s` printed other than the page shows: %s%s%s\n"
                       "-- the page shows (masked as compared):\n%s-- it printed:\n%s",
                       p->path, s->line, s->cmd, missing ? "it did not print \"" : "",
                       missing ? missing : "it printed lines the page does not show",
                       missing ? "\"" : "", w, out);
        free(w);
    }
    lines_free(&got);
    lines_free(&want);
    free(out);
}

/* The page's temporary directory, removed by remove_workdir even when an assertion ends the
 * test early. */
static char workdir[64];

static void remove_workdir(void) {
    char cmd[96];
    if (!workdir[0]) return;
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", workdir);
    if (system(cmd) == 0) workdir[0] = 0;
}

/* A fresh directory for a page's commands: ./fsdp, and the lessons as shipped. */
static void make_workdir(void) {
    snprintf(workdir, sizeof workdir, "/tmp/fsdp_docs_XXXXXX");
    cr_assert(mkdtemp(workdir));
    char bin[PATH_MAX], link[PATH_MAX + 8], cmd[3 * PATH_MAX];
    cr_assert(realpath(fsdp_bin(), bin), "no fsdp binary at %s", fsdp_bin());
    snprintf(link, sizeof link, "%s/fsdp", workdir);
    cr_assert_eq(symlink(bin, link), 0);
    snprintf(cmd, sizeof cmd,
             "{ git archive HEAD lessons 2>/dev/null | tar -x -C '%s' 2>/dev/null; } || "
             "cp -r lessons '%s/'",
             workdir, workdir);
    cr_assert_eq(system(cmd), 0);
    /* the page's mpiruns keep their session files in it, hidden from its `ls` (tests/util.h) */
    snprintf(cmd, sizeof cmd, "%s/.ompi", workdir);
    cr_assert_eq(mkdir(cmd, 0700), 0);
    mpi_private_session_dir(cmd);
    snprintf(cmd, sizeof cmd, "%s/lessons", workdir);
    setenv("FSDP_LESSONS_DIR", cmd, 1);
    snprintf(cmd, sizeof cmd, "%s/lessons/.progress", workdir);
    setenv("FSDP_LESSONS_STATE", cmd, 1);
    /* The pages show output, not orderings: the stream checker (which make test turns on for
     * every run) stays off here. Under ASan it made checkpoints.md's `predict --eval` of 10,000
     * images take over the 300 s a command may (about 12x its time without the checker). The
     * rest of the suite checks streams; a page that shows --check-streams still asks for it. */
    unsetenv("FSDP_CHECK_STREAMS");
    /* the pages' mpirun commands: mpirun refuses root without these (containers run tests so) */
    setenv("OMPI_ALLOW_RUN_AS_ROOT", "1", 1);
    setenv("OMPI_ALLOW_RUN_AS_ROOT_CONFIRM", "1", 1);
}

static void check_page(const char *path) {
    Page p = parse_page(path);
    char prefix[80];
    make_workdir();
    snprintf(prefix, sizeof prefix, "%s/", workdir);
    int checked = 0;
    for (int i = 0; i < p.n; i++)
        if (p.shown[i].mode != MODE_SKIP) {
            check_shown(&p, &p.shown[i], workdir, prefix);
            checked++;
        }
    cr_expect_gt(checked, 0, "%s shows no checked command", path);
    remove_workdir();
    cr_expect_eq(workdir[0], 0, "cannot remove the page's temporary directory");
    page_free(&p);
}

/* The pages; every .md file in docs/ must be one of them, and linked from README.md. */
static const char *const pages[] = {
    "README.md",           "docs/design.md",          "docs/training.md",
    "docs/run-dir.md",     "docs/language-models.md", "docs/visualizer.md",
    "docs/checkpoints.md", "docs/memory.md",          "docs/plan.md",
    "docs/gpus.md",        "docs/lessons.md",         "docs/mpi.md",
};
enum { NPAGES = sizeof pages / sizeof pages[0] };

Test(docs, every_page_is_checked_and_linked_from_the_readme) {
    glob_t g;
    cr_assert_eq(glob("docs/*.md", 0, NULL, &g), 0, "no docs/*.md (run from the repository root)");
    char *readme = slurp("README.md");
    for (size_t i = 0; i < g.gl_pathc; i++) {
        int listed = 0;
        for (int k = 0; k < NPAGES; k++) listed |= !strcmp(pages[k], g.gl_pathv[i]);
        cr_expect(listed, "%s is not in tests/docs/test_docs.c's pages", g.gl_pathv[i]);
        char link[PATH_MAX + 4];
        snprintf(link, sizeof link, "](%s)", g.gl_pathv[i]);
        cr_expect(strstr(readme, link), "README.md does not link to %s", g.gl_pathv[i]);
    }
    for (int k = 0; k < NPAGES; k++)
        cr_expect_eq(access(pages[k], R_OK), 0, "%s is in the list but not there", pages[k]);
    free(readme);
    globfree(&g);
}

/* The words of `list` (separated by spaces, commas and newlines) into words (room for max). */
static int split_words(char *list, char **words, int max) {
    int n = 0;
    for (char *w = strtok(list, " ,\n"); w && n < max; w = strtok(NULL, " ,\n")) words[n++] = w;
    return n;
}

static int has_word(char *const *words, int n, const char *w) {
    for (int i = 0; i < n; i++)
        if (!strcmp(words[i], w)) return 1;
    return 0;
}

/* README's first section names exactly the packages .ci/deps.sh checks and installs, and says
 * what needs PyTorch, which is not among them, and how to install it (Debian's python3-torch);
 * docs/gpus.md says so where its torchrun example imports torch. */
Test(docs, the_readme_lists_the_packages_make_installs) {
    char *deps = slurp(".ci/deps.sh"), *readme = slurp("README.md");
    char *at = strstr(deps, "packages=(");
    cr_assert(at, ".ci/deps.sh has no packages=( ... )");
    at += strlen("packages=(");
    *strchr(at, ')') = 0;
    char *want[32];
    int nwant = split_words(at, want, 32);
    cr_assert_gt(nwant, 5);
    const char *open = "(`.ci/deps.sh`: ";
    char *first = strstr(readme, open), *tour = strstr(readme, "\n## A tour");
    cr_assert(first && tour && first < tour, "README's first section names no .ci/deps.sh list");
    first += strlen(open);
    char *close = strstr(first, "):");
    cr_assert(close && close < tour);
    *close = 0;
    char *got[32];
    int ngot = split_words(first, got, 32);
    for (int i = 0; i < nwant; i++)
        cr_expect(has_word(got, ngot, want[i]), "README.md does not list %s", want[i]);
    for (int i = 0; i < ngot; i++)
        cr_expect(has_word(want, nwant, got[i]), "README.md lists %s, .ci/deps.sh does not",
                  got[i]);
    cr_expect(!has_word(want, nwant, "python3-torch"));
    /* past the list: the PyTorch note, before the tour */
    char *note = strstr(close + 1, "sudo apt-get install python3-torch");
    cr_expect(note && note < tour, "README's first section says nothing of python3-torch");
    free(deps), free(readme);
    char *gpus = slurp("docs/gpus.md");
    char *example = strstr(gpus, "import torch, torch.distributed");
    char *install = strstr(gpus, "`sudo apt-get install python3-torch`");
    cr_expect(example && install && install < example && example - install < 600,
              "docs/gpus.md's torchrun example does not say to install python3-torch first");
    free(gpus);
}

/* The matcher itself: "..." takes any number of lines, masks hide run-dependent figures. */
Test(docs, excerpts_and_masks) {
    char *want[] = {"a", "...", "d"}, *got[] = {"a", "b", "c", "d"}, *short_[] = {"a", "d"};
    cr_expect(lines_match(want, 3, got, 4));
    cr_expect(lines_match(want, 3, short_, 2));
    cr_expect(!lines_match(want, 3, got, 3));
    Lines l = split_lines("step 1  loss 2.3026      64 img/s  eta 1:03:25\n"
                          "accuracy 38.58% (3858/10000), loss 1.8970, 4.8 s\n"
                          "wrote /tmp/x/m.safetensors  \n");
    mask_lines(&l, "/tmp/x/");
    cr_expect_str_eq(l.at[0], "step 1  loss 2.3026 # img/s  eta #");
    cr_expect_str_eq(l.at[1], "accuracy 38.58% (3858/10000), loss 1.8970, # s");
    cr_expect_str_eq(l.at[2], "wrote m.safetensors");
    lines_free(&l);
}

/* Rounding's figures fit within their tolerance, the rest exactly. */
Test(docs, losses_and_accuracies_within_tolerance) {
    const char *page = "validation after epoch 2 (step 3436): accuracy 78.86% (3943/5000), loss "
                       "0.5792 (lowest so far)";
    const struct {
        const char *want, *got;
        int fits;
        const char *why;
    } cases[] = {
        {page, page, 1, "the same line"},
        {page,
         "validation after epoch 2 (step 3436): accuracy 78.88% (3944/5000), loss 0.5801 (lowest "
         "so far)",
         1, "0.02 points, 1 image, 0.16% of the loss"},
        {page,
         "validation after epoch 2 (step 3437): accuracy 78.86% (3943/5000), loss 0.5792 (lowest "
         "so far)",
         0, "a step is exact"},
        {page,
         "validation after epoch 2 (step 3436): accuracy 80.00% (4000/5000), loss 0.5792 (lowest "
         "so far)",
         0, "1.14 points and 57 images are too many"},
        {page,
         "validation after epoch 2 (step 3436): accuracy 78.86% (3943/5000), loss 0.5952 (lowest "
         "so far)",
         0, "2.8% of a loss is too much"},
        {page, "validation after epoch 2 (step 3436): accuracy 78.86% (3943/5000), loss 0.5792", 0,
         "text is exact"},
        {"\"held_out\":1000,\"val_loss\":1.9307299804687501,",
         "\"held_out\":1000,\"val_loss\":1.9307299804687777,", 1, "a loss in JSON"},
        {"\"held_out\":1000,", "\"held_out\":1001,", 0, "a count is exact"},
        {"step     5  epoch   0  loss 3.070615  step 86.0 us (modelled)",
         "step     5  epoch   0  loss 3.070620  step 86.0 us (modelled)", 1, "a step line's loss"},
        {"step 86.0 us (modelled)", "step 86.1 us (modelled)", 0, "a modelled time is exact"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++)
        cr_expect_eq(line_fits(cases[i].want, cases[i].got), cases[i].fits, "%s: %s", cases[i].why,
                     cases[i].got);
}

/* No .timeout: with timed tests running at once (--jobs 2) Debian's Criterion 2.4 runner leaks a
 * 48-byte block, which fails the sanitizer build (see tests/engine/test_levers.c). */
#define PAGE_TEST(name, path)                                                                      \
    Test(docs, name, .fini = remove_workdir) {                                                     \
        check_page(path);                                                                          \
    }
PAGE_TEST(readme, "README.md")
PAGE_TEST(design, "docs/design.md")
PAGE_TEST(training, "docs/training.md")
PAGE_TEST(run_dir, "docs/run-dir.md")
PAGE_TEST(language_models, "docs/language-models.md")
PAGE_TEST(visualizer, "docs/visualizer.md")
PAGE_TEST(checkpoints, "docs/checkpoints.md")
PAGE_TEST(memory, "docs/memory.md")
PAGE_TEST(plan, "docs/plan.md")
PAGE_TEST(gpus, "docs/gpus.md")
PAGE_TEST(lessons, "docs/lessons.md")

/* The MPI page runs mpirun and needs a build with MPI (README's mpirun block too). */
Test(docs, mpi, .fini = remove_workdir) {
    skip_without_mpi();
    check_page("docs/mpi.md");
}
