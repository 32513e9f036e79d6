/* lesson_index: the lessons in order (number, folder, title, the crc32 of the shipped exercise.c)
 * and where their folders are: in the checkout the running binary belongs to. */
#include "lessons/tool/lesson_index.h"

#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "lessons_baked.h"

static const Lesson lessons[] = {
    {1, "01-memory-at-rest", "DDP versus FSDP: memory at rest", 0x62c1a285u},
    {2, "02-shard-ranges", "Shard ranges: torch.chunk on dim 0", 0x6bba012au},
    {3, "03-ring-all-gather", "All-gather as a ring", 0x8d8a4129u},
    {4, "04-reduce-scatter", "Reduce-scatter as a ring; all-reduce", 0x06d84725u},
    {5, "05-forward-schedule", "Forward schedule: gather, compute, free", 0x11364954u},
    {6, "06-backward-schedule", "Backward schedule: gather, reduce, free", 0x2d47f95cu},
    {7, "07-reshard-after-forward", "reshard_after_forward: gathers vs memory", 0x3455151au},
    {8, "08-wrap-policy", "Wrap policy: units, collectives, memory", 0x87cbb3deu},
    {9, "09-mixed-precision", "Mixed precision: bf16 and fp32 sums", 0x2274618cu},
    {10, "10-prefetch-overlap", "Prefetch: exposed communication", 0x942ded85u},
    {11, "11-cpu-offload", "CPU offload: what crosses PCIe", 0xa712a1d2u},
    {12, "12-checkpoint-resharding", "Checkpoint resharding: N to M ranks", 0x2f8ceed5u},
    {13, "13-activation-checkpointing", "Checkpointing: keep or recompute", 0xf6aa35b2u},
    {14, "14-gemm-time", "How slow: GEMM tiles, bytes, launches", 0xf367d0aau},
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

/* Whether dir is a checkout: it has the lessons' own index. */
static int is_checkout(const char *dir) {
    char probe[PATH_MAX + 32];
    snprintf(probe, sizeof probe, "%s/lessons/tool/lesson_index.h", dir);
    return access(probe, R_OK) == 0;
}

/* The nearest folder at or above the running executable's (links resolved) that is a
 * checkout, into root; 0 if none is. */
static int find_checkout(char *root, size_t n) {
    char exe[PATH_MAX];
    if (!realpath("/proc/self/exe", exe)) return 0;
    for (char *slash; (slash = strrchr(exe, '/')) && slash != exe;) {
        *slash = 0; /* the folder above */
        if (is_checkout(exe)) return snprintf(root, n, "%s", exe) < (int)n;
    }
    return 0;
}

/* Looked up once: where the executable is does not change while it runs. */
static struct {
    int looked, found;
    char root[PATH_MAX], archive[PATH_MAX + 64], dir[PATH_MAX + 16];
} home;

const char *lessons_root(void) {
    if (!home.looked) {
        home.looked = 1;
        home.found = find_checkout(home.root, sizeof home.root);
        snprintf(home.archive, sizeof home.archive, "%s/%s", home.root,
                 LESSONS_ARCHIVE_IN_CHECKOUT);
        snprintf(home.dir, sizeof home.dir, "%s/lessons", home.root);
    }
    return home.found ? home.root : NULL;
}

const char *lessons_archive(void) {
    return lessons_root() ? home.archive : NULL;
}

const char *lessons_dir(void) {
    const char *env = getenv("FSDP_LESSONS_DIR");
    if (env && *env) return env;
    return lessons_root() ? home.dir : NULL;
}

const char *lessons_shown_path(const char *path) {
    const char *root = lessons_root();
    size_t n = root ? strlen(root) : 0;
    if (root && !strncmp(path, root, n) && path[n] == '/') return path + n + 1;
    return path;
}

void lesson_path(const Lesson *l, const char *file, char *buf, size_t n) {
    snprintf(buf, n, "%s/%s/%s", lessons_dir(), l->folder, file);
}
