/* Includes run one way, as docs/design.md's layers say: a file may include its own folder's
 * headers and those of the layers below its own, never one beside it or above it, and no module
 * (a .c with its .h) reaches itself again through what it includes. */
#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* The product's folders, lowest first; folders on one line are siblings, which may not include
 * each other (models/ and io/: io knows no model). main.c is the top. bench/, tests/ and gpu/
 * are not layers: they may include anything. */
static const struct {
    const char *folder;
    int level;
} layers[] = {
    {"base", 0}, {"kernels", 1}, {"engine", 2},  {"models", 3}, {"io", 3},     {"jobs", 4},
    {"sim", 5},  {"runtime", 6}, {"lessons", 7}, {"cmd", 8},    {"main.c", 9},
};
enum { NLAYERS = sizeof layers / sizeof layers[0], MAX_FILES = 1024, MAX_INCLUDES = 64 };

/* The layer of a path (by its first component); -1: not a layer. */
static int level_of(const char *path, const char **folder) {
    size_t n = strcspn(path, "/");
    for (int i = 0; i < NLAYERS; i++)
        if (strlen(layers[i].folder) == n && !strncmp(path, layers[i].folder, n)) {
            *folder = layers[i].folder;
            return layers[i].level;
        }
    return -1;
}

typedef struct Source {
    char path[256];
    char module[256]; /* x.c, x.h and x_internal.h are one module, x */
    char includes[MAX_INCLUDES][256];
    int nincludes;
} Source;

static Source sources[MAX_FILES];
static int nsources;

/* A file's module: its path without the extension, and without "_internal" (x_internal.h is
 * the private half of module x, the header x.c and its siblings share). */
static void strip_extension(char *path) {
    char *dot = strrchr(path, '.');
    if (dot && !strchr(dot, '/')) *dot = 0;
    size_t n = strlen(path), k = strlen("_internal");
    if (n > k && !strcmp(path + n - k, "_internal")) path[n - k] = 0;
}

/* Every tracked C, header and CUDA file and the project headers it includes ("dir/x.h"; a bare
 * "x.h" is a lesson's own or a generated header, not a layer's). */
static void read_sources(void) {
    FILE *list = popen("git ls-files '*.c' '*.h' '*.cu' 2>/dev/null || "
                       "find . -path ./build -prune -o \\( -name '*.c' -o -name '*.h' -o -name "
                       "'*.cu' \\) -print | sed 's|^\\./||'",
                       "r");
    cr_assert(list);
    char line[200];
    while (fgets(line, sizeof line, list)) {
        line[strcspn(line, "\n")] = 0;
        cr_assert_lt(nsources, MAX_FILES, "more files than this test has room for");
        Source *s = &sources[nsources++];
        snprintf(s->path, sizeof s->path, "%s", line);
        snprintf(s->module, sizeof s->module, "%s", line);
        strip_extension(s->module);
        FILE *f = fopen(line, "r");
        cr_assert(f, "cannot read %s", line);
        char text[1024], target[256];
        while (fgets(text, sizeof text, f))
            if (sscanf(text, " #include \"%255[^\"]\"", target) == 1 && strchr(target, '/')) {
                cr_assert_lt(s->nincludes, MAX_INCLUDES, "%s includes too many", line);
                snprintf(s->includes[s->nincludes++], sizeof s->includes[0], "%s", target);
            }
        fclose(f);
    }
    pclose(list);
    cr_assert_gt(nsources, 100, "no sources found (run the tests from the repository root)");
}

Test(layers, each_file_includes_only_its_own_folder_and_the_layers_below) {
    read_sources();
    int checked = 0;
    for (int i = 0; i < nsources; i++) {
        const char *from_folder, *to_folder;
        int from = level_of(sources[i].path, &from_folder);
        if (from < 0) continue;
        for (int k = 0; k < sources[i].nincludes; k++) {
            const char *target = sources[i].includes[k];
            int to = level_of(target, &to_folder);
            cr_expect_geq(to, 0, "%s includes %s, which is in no layer", sources[i].path, target);
            if (to < 0 || to_folder == from_folder) continue;
            cr_expect_lt(to, from, "%s (%s) includes %s (%s): an arrow %s", sources[i].path,
                         from_folder, target, to_folder, to == from ? "sideways" : "up");
            checked++;
        }
    }
    cr_expect_gt(checked, 100, "only %d includes across layers were checked", checked);
}

/* The modules a module includes, as indices into sources (-1 for a header with no module). */
static int module_index(const char *module) {
    for (int i = 0; i < nsources; i++)
        if (!strcmp(sources[i].module, module)) return i;
    return -1;
}

enum { WHITE, GREY, BLACK };

/* Depth-first from module m; a grey module met again closes a circle, written into path. */
static int find_circle(int m, int *colour, char *path, size_t n) {
    colour[m] = GREY;
    for (int i = 0; i < nsources; i++) {
        if (strcmp(sources[i].module, sources[m].module)) continue;
        for (int k = 0; k < sources[i].nincludes; k++) {
            char target[256];
            snprintf(target, sizeof target, "%s", sources[i].includes[k]);
            strip_extension(target);
            int t = module_index(target);
            if (t < 0 || t == m) continue;
            if (colour[t] == GREY || (colour[t] == WHITE && find_circle(t, colour, path, n))) {
                size_t at = strlen(path);
                snprintf(path + at, n - at, " <- %s", sources[i].path);
                return 1;
            }
        }
    }
    colour[m] = BLACK;
    return 0;
}

Test(layers, no_module_reaches_itself_through_its_includes) {
    read_sources();
    int *colour = calloc((size_t)nsources, sizeof *colour);
    cr_assert(colour);
    char path[4096] = "";
    for (int m = 0; m < nsources && !path[0]; m++)
        if (module_index(sources[m].module) == m && colour[m] == WHITE)
            find_circle(m, colour, path, sizeof path);
    cr_expect_str_empty(path, "a circle of includes:%s", path);
    free(colour);
}
