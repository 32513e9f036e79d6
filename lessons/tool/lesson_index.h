/* lesson_index: the list of lessons, in order. A lesson is a folder lessons/NN-topic/ with
 * README.md, exercise.h, exercise.c, check.c and hints.md, plus its reference solution in
 * lessons/solutions/NN-topic.c; adding one is that folder and one line in lesson_index.c. */
#ifndef FSDP_LESSON_INDEX_H
#define FSDP_LESSON_INDEX_H

#include <stddef.h>
#include <stdint.h>

typedef struct Lesson {
    int number;         /* what the learner types: 2 or 02 */
    const char *folder; /* "02-shard-ranges", under lessons/ */
    const char *title;
    /* crc32 (zlib) of exercise.c as shipped: the lesson is "not started" while the file
     * still has it. Change it with the file (the tests say the new value). */
    uint32_t shipped_crc;
} Lesson;

int lesson_count(void);
const Lesson *lesson_at(int i); /* 0 <= i < lesson_count() */
/* "2", "02" or "02-shard-ranges"; NULL for anything else. */
const Lesson *lesson_find(const char *name);

/* The checkout this binary belongs to: the nearest folder at or above the executable's own
 * (./fsdp, build/asan/fsdp, build/test_fsdp) that has lessons/; NULL if there is none (a binary
 * copied out of its checkout). Checks include its headers and link its archive. */
const char *lessons_root(void);
/* That checkout's libfsdp.a, of the build this binary is (build/ or build/asan/); NULL with no
 * checkout. */
const char *lessons_archive(void);
/* Where the lesson folders are: $FSDP_LESSONS_DIR (a copy, for the tests), else
 * lessons_root()/lessons; NULL with neither. */
const char *lessons_dir(void);
/* A path as the learner would type it: relative to lessons_root() when inside it. */
const char *lessons_shown_path(const char *path);
/* lessons_dir()/<folder>/<file> into buf. */
void lesson_path(const Lesson *l, const char *file, char *buf, size_t n);

#endif
