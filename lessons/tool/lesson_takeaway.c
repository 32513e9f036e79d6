/* lesson_takeaway: a lesson README's "## Take-away" section, read into the two lines and the
 * command a passed check prints after its verdict. */
#include "lessons/tool/lesson_takeaway.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>

/* The section, as the README holds it (its lines run to the next "## " heading or the end):
 *
 *   ## Take-away
 *
 *   A ring all-gather sends (N-1)/N of the gathered buffer from every GPU, whatever N is:
 *   one more GPU adds a step to the ring, not bytes to a link.
 *
 *   See it live: `./fsdp viz --model toy --ranks 3 --events 55`
 *
 * One place for it: the learner reads it in the README, and the runner prints it on a pass. */

static int is_live_command(const char *cmd) {
    static const char *const commands[] = {"./fsdp viz ", "./fsdp train ", "./fsdp plan "};
    for (size_t i = 0; i < sizeof commands / sizeof commands[0]; i++)
        if (!strncmp(cmd, commands[i], strlen(commands[i]))) return 1;
    return 0;
}

/* One line of the section (its newline gone) into t; `lines` counts the text lines so far. */
static int take_line(const char *line, const char *path, Takeaway *t, int *lines, Err *err) {
    if (!line[0]) return 0;
    if (!strncmp(line, TAKEAWAY_LIVE, strlen(TAKEAWAY_LIVE))) {
        const char *cmd = line + strlen(TAKEAWAY_LIVE);
        size_t len = strcspn(cmd, "`");
        if (!cmd[len] || len >= sizeof t->command)
            return err_set(err, ERR_INTERNAL, "%s: the See it live line has no `command`", path);
        snprintf(t->command, sizeof t->command, "%.*s", (int)len, cmd);
        if (!is_live_command(t->command))
            return err_set(err, ERR_INTERNAL,
                           "%s: See it live is not a ./fsdp viz, train or plan command: %s", path,
                           t->command);
        return 0;
    }
    if (*lines == 2 || t->command[0])
        return err_set(err, ERR_INTERNAL,
                       "%s: the take-away is two lines of text, then the See it live line", path);
    if (strlen(line) >= TAKEAWAY_LINE_MAX)
        return err_set(err, ERR_INTERNAL, "%s: a take-away line is longer than %d characters", path,
                       TAKEAWAY_LINE_MAX - 1);
    memcpy(t->line[(*lines)++], line, strlen(line) + 1);
    return 0;
}

int takeaway_load(const Lesson *l, Takeaway *t, Err *err) {
    memset(t, 0, sizeof *t);
    char path[4096], line[1024];
    lesson_path(l, "README.md", path, sizeof path);
    FILE *f = fopen(path, "r");
    if (!f) return err_set(err, ERR_IO, "cannot read %s: %s", path, strerror(errno));
    int in_section = 0, found = 0, lines = 0, rc = 0;
    while (!rc && fgets(line, sizeof line, f)) {
        line[strcspn(line, "\n")] = 0;
        if (!strncmp(line, "## ", 3)) {
            in_section = !strcmp(line, TAKEAWAY_HEADING);
            found |= in_section;
        } else if (in_section) {
            rc = take_line(line, path, t, &lines, err);
        }
    }
    fclose(f);
    if (rc) return rc;
    if (!found) return err_set(err, ERR_INTERNAL, "%s has no '%s'", path, TAKEAWAY_HEADING);
    if (lines != 2 || !t->command[0])
        return err_set(err, ERR_INTERNAL,
                       "%s: the take-away is two lines of text, then the See it live line", path);
    return 0;
}
