/* lesson_hints: reads a lesson's hints.md, graded from a nudge to nearly the answer. Each
 * hint starts with a line "## Hint K" (K = 1, 2, ...) and runs to the next such line. */
#ifndef FSDP_LESSON_HINTS_H
#define FSDP_LESSON_HINTS_H

#include "base/err.h"
#include "lessons/tool/lesson_index.h"

#define HINTS_MAX 16

typedef struct Hints {
    int count;
    char *text[HINTS_MAX]; /* hint K is text[K - 1], without its heading or edge blank lines */
} Hints;

int hints_load(const Lesson *l, Hints *h, Err *err);
void hints_free(Hints *h);

#endif
