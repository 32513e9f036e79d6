/* lesson_progress: where a learner is. A lesson is done when its check passed on exactly the
 * exercise.c that is there now, not started while exercise.c is still as shipped, and in
 * progress otherwise. What passed and how many hints were shown is kept in a small text file
 * (lessons/.progress, or $FSDP_LESSONS_STATE), rewritten whole and renamed into place. */
#ifndef FSDP_LESSON_PROGRESS_H
#define FSDP_LESSON_PROGRESS_H

#include <stdint.h>

#include "base/err.h"
#include "lessons/tool/lesson_index.h"

#define LESSONS_MAX 99

typedef struct LessonProgress {
    int passed;          /* a check of the learner's file passed ... */
    uint32_t passed_crc; /* ... when the file had this crc32 */
    int hints_shown;     /* hints 1..hints_shown have been printed */
} LessonProgress;

typedef struct Progress {
    LessonProgress of[LESSONS_MAX + 1]; /* by lesson number */
} Progress;

typedef enum { STATE_NOT_STARTED = 0, STATE_IN_PROGRESS, STATE_DONE, STATE_MISSING } LessonState;

const char *lesson_state_name(LessonState s); /* "not started", "in progress", "done", ... */

/* The progress file's path: $FSDP_LESSONS_STATE, else .progress in lessons_dir(). */
const char *progress_path(char *buf, size_t n);
/* A missing file is no progress; lines it cannot read are skipped. */
int progress_load(Progress *p, Err *err);
int progress_save(const Progress *p, Err *err);

/* crc32 of a whole file; an error if it cannot be read. */
int file_crc32(const char *path, uint32_t *out, Err *err);
LessonState lesson_state(const Lesson *l, const Progress *p);

#endif
