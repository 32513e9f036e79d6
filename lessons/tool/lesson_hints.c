/* lesson_hints: a lesson's hints.md read one hint at a time ("## Hint K" to the next such line), so
 * the runner can show them graded, a nudge first. */
#include "lessons/tool/lesson_hints.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Drops blank lines at both ends of a hint's text. */
static void trim_blank_lines(char *s) {
    size_t start = strspn(s, "\n");
    memmove(s, s + start, strlen(s + start) + 1);
    size_t n = strlen(s);
    while (n > 0 && (s[n - 1] == '\n' || s[n - 1] == ' ')) s[--n] = 0;
}

static int append(char **text, const char *line) {
    size_t have = *text ? strlen(*text) : 0, add = strlen(line);
    char *grown = realloc(*text, have + add + 1);
    if (!grown) return -1;
    memcpy(grown + have, line, add + 1);
    *text = grown;
    return 0;
}

int hints_load(const Lesson *l, Hints *h, Err *err) {
    memset(h, 0, sizeof *h);
    char path[4096];
    lesson_path(l, "hints.md", path, sizeof path);
    FILE *f = fopen(path, "r");
    if (!f) return err_set(err, ERR_IO, "cannot read %s: %s", path, strerror(errno));
    char line[1024];
    int rc = 0;
    while (fgets(line, sizeof line, f)) {
        int k;
        if (sscanf(line, "## Hint %d", &k) == 1) {
            if (k != h->count + 1 || h->count == HINTS_MAX) {
                rc = err_set(err, ERR_INTERNAL, "%s: hint %d is out of order", path, k);
                break;
            }
            h->count++;
            line[0] = 0; /* the heading is not part of the text */
        }
        if (h->count > 0 && append(&h->text[h->count - 1], line)) {
            rc = err_set(err, ERR_NOMEM, "out of memory");
            break;
        }
    }
    fclose(f);
    if (!rc && h->count == 0) rc = err_set(err, ERR_INTERNAL, "%s has no '## Hint 1'", path);
    if (rc) {
        hints_free(h);
        return rc;
    }
    for (int k = 0; k < h->count; k++) trim_blank_lines(h->text[k]);
    return 0;
}

void hints_free(Hints *h) {
    for (int k = 0; k < h->count; k++) free(h->text[k]);
    h->count = 0;
}
