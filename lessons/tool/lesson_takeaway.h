/* lesson_takeaway: what a pass prints, read from the lesson's README.md: the two lines under
 * its "## Take-away" heading (what the piece teaches) and the `./fsdp viz`, `train` or `plan`
 * command on its "See it live: `...`" line, which shows the piece happening in the engine. */
#ifndef FSDP_LESSON_TAKEAWAY_H
#define FSDP_LESSON_TAKEAWAY_H

#include "base/err.h"
#include "lessons/tool/lesson_index.h"

#define TAKEAWAY_HEADING "## Take-away"
#define TAKEAWAY_LIVE "See it live: `"
#define TAKEAWAY_LINE_MAX 200

typedef struct Takeaway {
    char line[2][TAKEAWAY_LINE_MAX]; /* the two lines, as the README wraps them */
    char command[TAKEAWAY_LINE_MAX]; /* "./fsdp viz --model toy --ranks 3 --events 55" */
} Takeaway;

/* An error names what the section lacks: a heading, two lines of text (no more), a command
 * that is ./fsdp viz, train or plan. */
int takeaway_load(const Lesson *l, Takeaway *t, Err *err);

#endif
