/* The file, one line per lesson that has any progress:
 *   NN passed=0x1234abcd hints=2      (passed=- when no check of the file passed yet) */
#include "lessons/tool/lesson_progress.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <zlib.h>

#include "io/atomic_file.h"

static const char *const state_names[] = {"not started", "in progress", "done", "missing"};

const char *lesson_state_name(LessonState s) {
    return state_names[s];
}

const char *progress_path(char *buf, size_t n) {
    const char *env = getenv("FSDP_LESSONS_STATE");
    if (env && *env)
        snprintf(buf, n, "%s", env);
    else
        snprintf(buf, n, "%s/.progress", lessons_dir());
    return buf;
}

static void parse_line(Progress *p, const char *line) {
    int number, hints;
    char passed[32];
    if (sscanf(line, "%d passed=%31s hints=%d", &number, passed, &hints) != 3) return;
    if (number < 1 || number > LESSONS_MAX || hints < 0) return;
    LessonProgress *lp = &p->of[number];
    lp->hints_shown = hints;
    lp->passed = 0;
    char *end;
    unsigned long crc = strtoul(passed, &end, 16);
    if (strcmp(passed, "-") != 0 && *end == 0 && crc <= 0xffffffffUL) {
        lp->passed = 1;
        lp->passed_crc = (uint32_t)crc;
    }
}

int progress_load(Progress *p, Err *err) {
    memset(p, 0, sizeof *p);
    char path[4096];
    FILE *f = fopen(progress_path(path, sizeof path), "r");
    if (!f) {
        if (errno == ENOENT) return 0;
        return err_set(err, ERR_IO, "cannot read %s: %s", path, strerror(errno));
    }
    char line[256];
    while (fgets(line, sizeof line, f))
        if (line[0] != '#') parse_line(p, line);
    fclose(f);
    return 0;
}

int progress_save(const Progress *p, Err *err) {
    char path[4096];
    progress_path(path, sizeof path);
    AtomicFile out;
    if (atomic_create(&out, path) != ATOMIC_OK)
        return err_set(err, ERR_IO, "cannot write %s: %s", out.tmp, strerror(errno));
    FILE *f = out.f;
    fputs("# ./fsdp lessons: what passed and how many hints were shown (delete to start over)\n",
          f);
    for (int n = 1; n <= LESSONS_MAX; n++) {
        const LessonProgress *lp = &p->of[n];
        if (!lp->passed && !lp->hints_shown) continue;
        if (lp->passed)
            fprintf(f, "%02d passed=0x%08x hints=%d\n", n, (unsigned)lp->passed_crc,
                    lp->hints_shown);
        else
            fprintf(f, "%02d passed=- hints=%d\n", n, lp->hints_shown);
    }
    if (atomic_finish(&out, 0) != ATOMIC_OK)
        return err_set(err, ERR_IO, "cannot write %s: %s", path, strerror(errno));
    return 0;
}

int file_crc32(const char *path, uint32_t *out, Err *err) {
    FILE *f = fopen(path, "rb");
    if (!f) return err_set(err, ERR_IO, "cannot read %s: %s", path, strerror(errno));
    uLong crc = crc32(0L, Z_NULL, 0);
    unsigned char buf[8192];
    size_t n;
    while ((n = fread(buf, 1, sizeof buf, f)) > 0) crc = crc32(crc, buf, (uInt)n);
    int bad = ferror(f);
    fclose(f);
    if (bad) return err_set(err, ERR_IO, "cannot read %s", path);
    *out = (uint32_t)crc;
    return 0;
}

LessonState lesson_state(const Lesson *l, const Progress *p) {
    char path[4096];
    lesson_path(l, "exercise.c", path, sizeof path);
    uint32_t crc;
    if (file_crc32(path, &crc, NULL)) return STATE_MISSING;
    if (crc == l->shipped_crc) return STATE_NOT_STARTED;
    const LessonProgress *lp = &p->of[l->number];
    if (lp->passed && lp->passed_crc == crc) return STATE_DONE;
    return STATE_IN_PROGRESS;
}
