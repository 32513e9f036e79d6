/* lesson_index: the lessons in order (number, folder, title, the crc32 of the shipped exercise.c)
 * and where their folders are. */
#include "lessons/tool/lesson_index.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "lessons_baked.h"

static const Lesson lessons[] = {
    {1, "01-memory-at-rest", "DDP versus FSDP: memory at rest", 0x62c1a285u},
    {2, "02-shard-ranges", "Shard ranges: torch.chunk on dim 0", 0x6bba012au},
    {3, "03-ring-all-gather", "All-gather as a ring", 0x8d8a4129u},
    {4, "04-reduce-scatter", "Reduce-scatter as a ring; all-reduce", 0x06d84725u},
    {5, "05-forward-schedule", "Forward schedule: gather, compute, free", 0x11364954u},
    {6, "06-backward-schedule", "Backward schedule: gather, reduce, free", 0x2d47f95cu},
    {7, "07-reshard-after-forward", "reshard_after_forward: gathers vs memory", 0xd9a4f861u},
    {8, "08-wrap-policy", "Wrap policy: units, collectives, memory", 0x4786d638u},
    {9, "09-mixed-precision", "Mixed precision: bf16 and fp32 sums", 0x2274618cu},
    {10, "10-prefetch-overlap", "Prefetch: exposed communication", 0x942ded85u},
    {11, "11-cpu-offload", "CPU offload: what crosses PCIe", 0x6841c49bu},
    {12, "12-checkpoint-resharding", "Checkpoint resharding: N to M ranks", 0x2f8ceed5u},
};

int lesson_count(void) {
    return (int)(sizeof lessons / sizeof lessons[0]);
}

const Lesson *lesson_at(int i) {
    return i >= 0 && i < lesson_count() ? &lessons[i] : NULL;
}

const Lesson *lesson_find(const char *name) {
    char *end;
    long n = strtol(name, &end, 10);
    if (end == name || n < 1) return NULL;
    for (int i = 0; i < lesson_count(); i++) {
        if (lessons[i].number != n) continue;
        if (*end == 0 || !strcmp(name, lessons[i].folder)) return &lessons[i];
    }
    return NULL;
}

const char *lessons_root(void) {
    return LESSONS_ROOT;
}

const char *lessons_dir(void) {
    const char *env = getenv("FSDP_LESSONS_DIR");
    return env && *env ? env : LESSONS_ROOT "/lessons";
}

const char *lessons_shown_path(const char *path) {
    size_t n = strlen(LESSONS_ROOT);
    if (!strncmp(path, LESSONS_ROOT, n) && path[n] == '/') return path + n + 1;
    return path;
}

void lesson_path(const Lesson *l, const char *file, char *buf, size_t n) {
    snprintf(buf, n, "%s/%s/%s", lessons_dir(), l->folder, file);
}
