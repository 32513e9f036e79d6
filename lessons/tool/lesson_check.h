/* lesson_check: builds one lesson's check against an exercise file and runs it, exactly as
 * this build of fsdp was built (compiler, flags, sanitizers, libraries), and boils what the
 * compiler and the check printed down to the one thing a learner should read first. */
#ifndef FSDP_LESSON_CHECK_H
#define FSDP_LESSON_CHECK_H

#include "base/err.h"
#include "lessons/tool/lesson_index.h"

typedef enum {
    CHECK_PASSED = 0,
    CHECK_FAILED,     /* an expectation failed (expected/got) or the ring saw a problem */
    CHECK_NO_COMPILE, /* the exercise file does not compile */
    CHECK_NO_LINK,    /* ... or does not link */
    CHECK_CRASHED,    /* the check died of a signal or a sanitizer report */
    CHECK_TIMED_OUT,  /* the check ran past its time */
    CHECK_INTERRUPTED /* Ctrl-C */
} CheckOutcome;

#define CHECK_TEXT_MAX 512

typedef struct CheckResult {
    CheckOutcome outcome;
    int tests;                  /* the tests in the lesson's check.c */
    int tests_finished;         /* of those, the ones that ran to their end (check.h) */
    int hint;                   /* the hint that explains the failure; 0: none */
    char input[CHECK_TEXT_MAX]; /* the call that failed, crashed or never returned */
    char expected[CHECK_TEXT_MAX], got[CHECK_TEXT_MAX];
    char why[CHECK_TEXT_MAX]; /* the misconception a known wrong value comes from; "" if none */
    /* otherwise the failure in words: the compiler's first error with its source line, the
     * linker's complaint, the ring's problem, the sanitizer's report line */
    char detail[2 * CHECK_TEXT_MAX];
    char *log; /* everything the compiler and the check printed, for --verbose; free() */
} CheckResult;

/* Checks `file` (the learner's exercise.c, or another with the same functions) against
 * lesson l. Returns 0 whatever the outcome, or an error when no check could be attempted
 * (the library archive is missing, the lesson's own check.c does not build). */
int lesson_check_run(const Lesson *l, const char *file, CheckResult *out, Err *err);
void check_result_free(CheckResult *r);

#endif
