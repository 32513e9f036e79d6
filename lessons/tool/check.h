/* check: what a lesson's check (lessons/NN-topic/check.c, Criterion) uses to say what it
 * tried, what it expected and what the learner's code gave, as lines the runner
 * (lessons/tool/lesson_check.c) finds in the check's output and turns into plain words. */
#ifndef FSDP_LESSONS_CHECK_H
#define FSDP_LESSONS_CHECK_H

#include <criterion/criterion.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* The lines, one per event, tab-separated:
 *   @lesson-test     TEST                           a test begins (its name: t1_two_ranks)
 *   @lesson-try      INPUT                          a call about to be made
 *   @lesson-expect   HINT INPUT EXPECTED GOT [WHY]  the first expectation that failed, and
 *                                                   the misconception, when the wrong value is
 *                                                   a known one
 *   @lesson-problem  HINT INPUT MESSAGE             a failure that is not a value (a deadlock) */
#define LESSON_TEST_TAG "@lesson-test"
#define LESSON_TRY_TAG "@lesson-try"
#define LESSON_EXPECT_TAG "@lesson-expect"
#define LESSON_PROBLEM_TAG "@lesson-problem"
#define LESSON_TEXT_MAX 512

/* Whether the check ran to its end is not read from what it prints, which the learner's code
 * could print too (a summary line, then _exit(0)), nor from Criterion's verdict, which takes a
 * test whose code calls exit(0) for a pass. The runner names a file and a token made for this
 * run in the environment; each test, once its body has returned (or failed an expectation),
 * appends "TOKEN<tab>TEST" to that file from its suite's .fini, which exit() never reaches.
 * Every check.c opens its tests with LESSON_CHECK_SUITE(lessonNN); the runner counts the tests
 * in check.c and passes a check only when each of them wrote its line. This guards against an
 * exercise that ends the process or prints a verdict; code written to read the harness's token
 * out of its environment could still forge one. */
#define LESSON_RESULTS_ENV "FSDP_LESSON_RESULTS"
#define LESSON_TOKEN_ENV "FSDP_LESSON_TOKEN"

static inline void lesson_test_started(void) {
    fprintf(stderr, LESSON_TEST_TAG "\t%s\n", criterion_current_test->name);
    fflush(stderr);
}

static inline void lesson_test_finished(void) {
    const char *path = getenv(LESSON_RESULTS_ENV), *token = getenv(LESSON_TOKEN_ENV);
    if (!path || !token) return; /* run by hand, not by the runner */
    char line[LESSON_TEXT_MAX];
    int n = snprintf(line, sizeof line, "%s\t%s\n", token, criterion_current_test->name);
    int fd = open(path, O_WRONLY | O_APPEND | O_CLOEXEC); /* the runner made it */
    if (fd < 0) return;
    if (n > 0 && (size_t)n < sizeof line) (void)!write(fd, line, (size_t)n); /* one append */
    close(fd);
}

#define LESSON_CHECK_SUITE(suite)                                                                  \
    TestSuite(suite, .init = lesson_test_started, .fini = lesson_test_finished)

/* The call being checked, as a learner would write it: "shard_range(d0=3, S=4, r=3)". */
static inline char *lesson_input(void) {
    static char input[LESSON_TEXT_MAX];
    return input;
}

/* printf into one of a few rotating buffers, so one expression can format both sides. */
static inline const char *lesson_fmt(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static inline const char *lesson_fmt(const char *fmt, ...) {
    static char texts[4][LESSON_TEXT_MAX];
    static int next;
    char *t = texts[next++ % 4];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(t, LESSON_TEXT_MAX, fmt, ap);
    va_end(ap);
    return t;
}

/* Names the call about to be made. Printed before the call, so that if the learner's code
 * crashes or never returns, the runner can still say which input it was. */
static inline void lesson_try(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static inline void lesson_try(const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(lesson_input(), LESSON_TEXT_MAX, fmt, ap);
    va_end(ap);
    fprintf(stderr, LESSON_TRY_TAG "\t%s\n", lesson_input());
    fflush(stderr);
}

/* Fails the test: the input of the last lesson_try, what was expected and what came back,
 * the number of the hint that explains this case, and, when `why` is not NULL, the
 * misconception the wrong value is known to come from, in one sentence ("that is ZeRO-1's
 * count: ..."). A check says `why` only when it recognises the value exactly. */
static inline void lesson_fail_why(int hint, const char *expected, const char *got,
                                   const char *why) {
    fprintf(stderr, LESSON_EXPECT_TAG "\t%d\t%s\t%s\t%s%s%s\n", hint, lesson_input(), expected, got,
            why ? "\t" : "", why ? why : "");
    fflush(stderr);
    cr_assert_fail("%s: expected %s, got %s (hint %d)%s%s", lesson_input(), expected, got, hint,
                   why ? ": " : "", why ? why : "");
}

static inline void lesson_fail(int hint, const char *expected, const char *got) {
    lesson_fail_why(hint, expected, got, NULL);
}

/* `why`: as lesson_fail_why's, looked at only when the two differ. */
static inline void expect_text_why(int hint, const char *expected, const char *got,
                                   const char *why) {
    if (strcmp(expected, got) != 0) lesson_fail_why(hint, expected, got, why);
}

static inline void expect_text(int hint, const char *expected, const char *got) {
    expect_text_why(hint, expected, got, NULL);
}

/* A learner's size_t as a message says it: "rows=3", or, for a count that went below zero and
 * wrapped around (end - begin with begin past end: 18446744073709551615 is -1), the signed
 * value computed and why it printed so large: "rows=-1 (a size_t below zero wraps around to
 * 18446744073709551615)". Counts in the lessons never come near 2^63. */
static inline const char *lesson_size_text(const char *name, size_t v) {
    if (v <= (size_t)PTRDIFF_MAX) return lesson_fmt("%s=%zu", name, v);
    return lesson_fmt("%s=%td (a size_t below zero wraps around to %zu)", name, (ptrdiff_t)v, v);
}

/* `name` labels the value in the message: "rows=0"; `why` as lesson_fail_why's. */
static inline void expect_size_why(int hint, const char *name, size_t expected, size_t got,
                                   const char *why) {
    if (expected != got)
        lesson_fail_why(hint, lesson_fmt("%s=%zu", name, expected), lesson_size_text(name, got),
                        why);
}

static inline void expect_size(int hint, const char *name, size_t expected, size_t got) {
    expect_size_why(hint, name, expected, got, NULL);
}

/* Bit for bit, element by element; the message names the first element that differs. A
 * check fills outputs with NaN first, so an element never written shows as "nan". */
static inline void expect_floats(int hint, const char *name, const float *expected,
                                 const float *got, size_t n) {
    for (size_t i = 0; i < n; i++)
        if (memcmp(&expected[i], &got[i], sizeof(float)) != 0)
            lesson_fail(hint, lesson_fmt("%s[%zu]=%.9g", name, i, (double)expected[i]),
                        lesson_fmt("%s[%zu]=%.9g%s", name, i, (double)got[i],
                                   got[i] != got[i] ? " (never written)" : ""));
}

/* Fails with `problem` in words unless it is empty. */
static inline void expect_no_problem(int hint, const char *problem) {
    if (!problem[0]) return;
    fprintf(stderr, LESSON_PROBLEM_TAG "\t%d\t%s\t%s\n", hint, lesson_input(), problem);
    fflush(stderr);
    cr_assert_fail("%s: %s (hint %d)", lesson_input(), problem, hint);
}

#endif
