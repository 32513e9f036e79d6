/* `fsdp viz --html` in a real browser: Debian's headless chromium at 1400x900, driven over the
 * DevTools protocol, opens the page, is sent key presses and reads back the frame the page shows,
 * which must be the plain frame (`viz --frames K`, or `--events N` after e) of where the key leads
 * in the terminal viewer (moments_move, nav_move), with the grid's column of the unit in play on
 * screen, DDP's memory at the same point (compare.h) and the chart's cursor at the frame's
 * event. Skipped only where no chromium exists. */
#include <cjson/cJSON.h>
#include <criterion/criterion.h>
#include <dirent.h>
#include <fcntl.h>
#include <math.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "io/trace_file.h"
#include "sim/viz/compare.h"
#include "sim/viz/html_chart.h"
#include "sim/viz/memory_timeline.h"
#include "sim/viz/moments.h"
#include "sim/viz/nav.h"
#include "sim/viz/text.h"
#include "tests/util.h"

/* ---------------------------------------------------------------- chromium on a pipe */

/* $FSDP_CHROMIUM, else the first of Debian's chromium builds on PATH; NULL: none. */
static const char *find_chromium(void) {
    const char *given = getenv("FSDP_CHROMIUM");
    if (given && *given) return given;
    static const char *const names[] = {"chromium-headless-shell", "chromium",
                                        "chrome-headless-shell"};
    static char path[4096];
    const char *dirs = getenv("PATH") ? getenv("PATH") : "/usr/bin:/bin";
    for (size_t i = 0; i < sizeof names / sizeof *names; i++)
        for (const char *d = dirs; *d;) {
            size_t len = strcspn(d, ":");
            snprintf(path, sizeof path, "%.*s/%s", (int)len, d, names[i]);
            if (len && access(path, X_OK) == 0) return path;
            d += len + (d[len] == ':');
        }
    return NULL;
}

/* A browser started with --remote-debugging-pipe: it reads the protocol's commands on its fd 3
 * and writes replies and events on its fd 4, each message JSON ending in a NUL byte. */
typedef struct Browser {
    pid_t pid;
    int to, from; /* our ends of its fd 3 and fd 4 */
    char *in;     /* bytes read, not yet a whole message */
    size_t n, cap;
    int next_id;
    char session[128]; /* the page's session (Target.attachToTarget, flatten) */
    char log[300];     /* its stderr, for a failure's message */
} Browser;

static void browser_start(Browser *b, const char *exe, const char *dir) {
    memset(b, 0, sizeof *b);
    int cmd[2], reply[2];
    cr_assert(pipe(cmd) == 0 && pipe(reply) == 0);
    signal(SIGPIPE, SIG_IGN); /* a browser that died is a failed write, not a killed test */
    snprintf(b->log, sizeof b->log, "%s/chromium.log", dir);
    char profile[300];
    snprintf(profile, sizeof profile, "--user-data-dir=%s/profile", dir);
    pid_t pid = fork();
    cr_assert(pid >= 0);
    if (pid == 0) {
        prctl(PR_SET_PDEATHSIG, SIGKILL); /* a failed assert ends the test: the browser too */
        /* fds 3 and 4 are the protocol's: move the pipes' ends out of their way first */
        int in = fcntl(cmd[0], F_DUPFD, 10), out = fcntl(reply[1], F_DUPFD, 10);
        int null = open("/dev/null", O_RDONLY), log = open(b->log, O_WRONLY | O_CREAT, 0644);
        if (in < 0 || out < 0 || null < 0 || log < 0 || dup2(in, 3) < 0 || dup2(out, 4) < 0 ||
            dup2(null, 0) < 0 || dup2(log, 1) < 0 || dup2(log, 2) < 0)
            _exit(126);
        close_range(5, ~0u, 0);
        /* --no-sandbox: tests run as root in containers, where chromium's sandbox cannot start;
         * the page is this test's own file */
        execl(exe, exe, "--headless", "--no-sandbox", "--disable-gpu", "--no-first-run",
              "--window-size=1400,900", "--remote-debugging-pipe", profile, "about:blank",
              (char *)NULL);
        _exit(127);
    }
    close(cmd[0]);
    close(reply[1]);
    b->pid = pid;
    b->to = cmd[1];
    b->from = reply[0];
}

/* The next message within `seconds`; asserts it comes. */
static cJSON *browser_read(Browser *b, int seconds, const char *waiting_for) {
    for (;;) {
        char *end = b->n ? memchr(b->in, 0, b->n) : NULL;
        if (end) {
            cJSON *msg = cJSON_Parse(b->in);
            size_t used = (size_t)(end - b->in) + 1;
            memmove(b->in, end + 1, b->n - used);
            b->n -= used;
            cr_assert(msg, "chromium sent a message that is not JSON while %s", waiting_for);
            return msg;
        }
        struct pollfd p = {.fd = b->from, .events = POLLIN};
        cr_assert(poll(&p, 1, seconds * 1000) > 0, "chromium said nothing for %d s while %s (%s)",
                  seconds, waiting_for, b->log);
        if (b->cap - b->n < 65536) {
            b->cap = b->cap ? 2 * b->cap : 1 << 17;
            b->in = realloc(b->in, b->cap);
            cr_assert(b->in);
        }
        ssize_t got = read(b->from, b->in + b->n, b->cap - b->n);
        cr_assert(got > 0, "chromium closed its pipe while %s (%s)", waiting_for, b->log);
        b->n += (size_t)got;
    }
}

/* Calls a protocol method (on the page's session when in_page) and returns its result (free
 * it); asserts it succeeded. Takes params. */
static cJSON *cdp(Browser *b, int in_page, const char *method, cJSON *params) {
    int id = ++b->next_id;
    cJSON *msg = cJSON_CreateObject();
    cJSON_AddNumberToObject(msg, "id", id);
    cJSON_AddStringToObject(msg, "method", method);
    cJSON_AddItemToObject(msg, "params", params ? params : cJSON_CreateObject());
    if (in_page) cJSON_AddStringToObject(msg, "sessionId", b->session);
    char *text = cJSON_PrintUnformatted(msg);
    cJSON_Delete(msg);
    size_t len = strlen(text) + 1, sent = 0; /* with its NUL: the end of a message */
    while (sent < len) {
        ssize_t w = write(b->to, text + sent, len - sent);
        cr_assert(w > 0, "chromium stopped reading (%s: %s)", method, b->log);
        sent += (size_t)w;
    }
    free(text);
    for (;;) {
        cJSON *reply = browser_read(b, 30, method);
        const cJSON *rid = cJSON_GetObjectItem(reply, "id");
        if (!cJSON_IsNumber(rid) || rid->valueint != id) { /* an event */
            cJSON_Delete(reply);
            continue;
        }
        const cJSON *error = cJSON_GetObjectItem(reply, "error");
        cr_assert(!error, "%s failed: %s", method, cJSON_PrintUnformatted(error));
        cJSON *result = cJSON_DetachItemFromObject(reply, "result");
        cJSON_Delete(reply);
        return result;
    }
}

static const char *json_string(const cJSON *o, const char *name) {
    const cJSON *s = cJSON_GetObjectItem(o, name);
    cr_assert(cJSON_IsString(s), "no string '%s' in %s", name, cJSON_PrintUnformatted(o));
    return s->valuestring;
}

/* Starts chromium and attaches to a new page of it. */
static void browser_open(Browser *b, const char *exe, const char *dir) {
    browser_start(b, exe, dir);
    cJSON *params = cJSON_CreateObject();
    cJSON_AddStringToObject(params, "url", "about:blank");
    cJSON *target = cdp(b, 0, "Target.createTarget", params);
    params = cJSON_CreateObject();
    cJSON_AddStringToObject(params, "targetId", json_string(target, "targetId"));
    cJSON_AddTrueToObject(params, "flatten");
    cJSON *session = cdp(b, 0, "Target.attachToTarget", params);
    snprintf(b->session, sizeof b->session, "%s", json_string(session, "sessionId"));
    cJSON_Delete(target);
    cJSON_Delete(session);
    /* the instructor's screen: 1400x900 CSS pixels */
    params = cJSON_CreateObject();
    cJSON_AddNumberToObject(params, "width", 1400);
    cJSON_AddNumberToObject(params, "height", 900);
    cJSON_AddNumberToObject(params, "deviceScaleFactor", 1);
    cJSON_AddFalseToObject(params, "mobile");
    cJSON_Delete(cdp(b, 1, "Emulation.setDeviceMetricsOverride", params));
}

/* Asks chromium to quit (its reply may not come: it quits), then makes sure it has. */
static void browser_close(Browser *b) {
    static const char quit[] = "{\"id\":999999,\"method\":\"Browser.close\"}";
    if (write(b->to, quit, sizeof quit) != (ssize_t)sizeof quit) /* with its NUL */
        cr_log_warn("chromium was gone before Browser.close");
    close(b->to);
    close(b->from);
    for (int i = 0; i < 100 && waitpid(b->pid, NULL, WNOHANG) == 0; i++) usleep(50000);
    if (waitpid(b->pid, NULL, WNOHANG) == 0) {
        kill(b->pid, SIGKILL);
        waitpid(b->pid, NULL, 0);
    }
    free(b->in);
}

/* The value of a JavaScript expression in the page, as a string (JSON for what is not one). */
static char *page_eval(Browser *b, const char *expression) {
    cJSON *params = cJSON_CreateObject();
    cJSON_AddStringToObject(params, "expression", expression);
    cJSON_AddTrueToObject(params, "returnByValue");
    cJSON *result = cdp(b, 1, "Runtime.evaluate", params);
    const cJSON *thrown = cJSON_GetObjectItem(result, "exceptionDetails");
    cr_assert(!thrown, "the page threw: %s", cJSON_PrintUnformatted(thrown));
    const cJSON *value = cJSON_GetObjectItem(cJSON_GetObjectItem(result, "result"), "value");
    char *text = cJSON_IsString(value) ? strdup(value->valuestring) : cJSON_PrintUnformatted(value);
    cJSON_Delete(result);
    return text;
}

/* Navigates to url and waits for the page's script to have drawn its first frame. */
static void page_go(Browser *b, const char *url) {
    cJSON *params = cJSON_CreateObject();
    cJSON_AddStringToObject(params, "url", url);
    cJSON *nav = cdp(b, 1, "Page.navigate", params);
    const cJSON *failed = cJSON_GetObjectItem(nav, "errorText");
    cr_assert(!failed, "%s did not open: %s", url, cJSON_PrintUnformatted(failed));
    cJSON_Delete(nav);
    for (int tries = 0;; tries++) {
        char *ready = page_eval(b, "document.readyState === 'complete' && "
                                   "document.body.dataset.ready === '1'");
        int done = !strcmp(ready, "true");
        free(ready);
        if (done) return;
        cr_assert(tries < 600, "%s did not draw a frame within 30 s", url);
        usleep(50000);
    }
}

/* Leaves the page for an empty one, so that the next page_go loads the page afresh. */
static void page_blank(Browser *b) {
    cJSON *params = cJSON_CreateObject();
    cJSON_AddStringToObject(params, "url", "about:blank");
    cJSON_Delete(cdp(b, 1, "Page.navigate", params));
    for (int tries = 0;; tries++) {
        char *url = page_eval(b, "location.href");
        int blank = !strcmp(url, "about:blank");
        free(url);
        if (blank) return;
        cr_assert(tries < 100, "about:blank did not open within 5 s");
        usleep(50000);
    }
}

typedef struct Key {
    const char *name, *key, *code, *text; /* text NULL: a key that types nothing */
    int vk, shift;
} Key;

static const Key keys[] = {
    {"n", "n", "KeyN", "n", 78, 0},
    {"space", " ", "Space", " ", 32, 0},
    {"ArrowRight", "ArrowRight", "ArrowRight", NULL, 39, 0},
    {"p", "p", "KeyP", "p", 80, 0},
    {"ArrowLeft", "ArrowLeft", "ArrowLeft", NULL, 37, 0},
    {"c", "c", "KeyC", "c", 67, 0},
    {"C", "C", "KeyC", "C", 67, 1},
    {"k", "k", "KeyK", "k", 75, 0},
    {"K", "K", "KeyK", "K", 75, 1},
    {"f", "f", "KeyF", "f", 70, 0},
    {"b", "b", "KeyB", "b", 66, 0},
    {"o", "o", "KeyO", "o", 79, 0},
    {"Home", "Home", "Home", NULL, 36, 0},
    {"End", "End", "End", NULL, 35, 0},
    {"r", "r", "KeyR", "r", 82, 0},
    {"e", "e", "KeyE", "e", 69, 0},
};

/* Presses and releases a key as a keyboard would (keydown, keypress for a typing key, keyup). */
static void press(Browser *b, const char *name) {
    const Key *k = NULL;
    for (size_t i = 0; i < sizeof keys / sizeof *keys; i++)
        if (!strcmp(keys[i].name, name)) k = &keys[i];
    cr_assert(k, "no key '%s' in the test's table", name);
    for (int up = 0; up < 2; up++) {
        cJSON *params = cJSON_CreateObject();
        cJSON_AddStringToObject(params, "type", up ? "keyUp" : k->text ? "keyDown" : "rawKeyDown");
        cJSON_AddStringToObject(params, "key", k->key);
        cJSON_AddStringToObject(params, "code", k->code);
        cJSON_AddNumberToObject(params, "windowsVirtualKeyCode", k->vk);
        cJSON_AddNumberToObject(params, "modifiers", k->shift ? 8 : 0);
        if (k->text && !up) {
            cJSON_AddStringToObject(params, "text", k->text);
            cJSON_AddStringToObject(params, "unmodifiedText", k->text);
        }
        cJSON_Delete(cdp(b, 1, "Input.dispatchKeyEvent", params));
    }
}

/* ---------------------------------------------------------------- what the page should show */

/* The frame the page shows, as text: header, narration, flow, each rank's grid cells joined by
 * " | ", each rank's memory line, the timeline. */
static const char frame_js[] =
    "(() => {"
    "  const text = (id) => document.getElementById(id).textContent;"
    "  const rows = [...document.querySelectorAll('#grid tbody tr')].map((tr) =>"
    "    [...tr.querySelectorAll('td')].map((td) => td.textContent).join(' | '));"
    "  const memory = [...document.querySelectorAll('#bars .mem')].map((m) => m.textContent);"
    "  return [text('header'), text('narration'), text('flow'), ...rows, ...memory,"
    "          text('timeline').replace(/\\n$/, '')].join('\\n');"
    "})()";

/* Appends s (len bytes) and a newline to the string at *out. */
static void add_line(char **out, size_t *len, const char *s, size_t n) {
    *out = realloc(*out, *len + n + 2);
    cr_assert(*out);
    memcpy(*out + *len, s, n);
    *len += n;
    (*out)[(*len)++] = '\n';
    (*out)[*len] = 0;
}

/* One plain frame (its lines from "-- event" or "-- frame" to before the blank line) as frame_js
 * reads the page: the grid's rows split at the runs of two or more spaces that pad its columns. */
static char *plain_frame_as_page(char **lines, int n, int nranks) {
    char *out = NULL, *memory = NULL;
    size_t len = 0, mlen = 0;
    int at = 0;
    const char *header = lines[at++];
    cr_assert(strncmp(header, "-- ", 3) == 0 && strlen(header) > 6, "%s", header);
    add_line(&out, &len, header + 3, strlen(header) - 6);
    add_line(&out, &len, lines[at], strlen(lines[at]));
    at++;
    if (!strncmp(lines[at], "collective: ", 12)) {
        add_line(&out, &len, lines[at], strlen(lines[at]));
        at++;
    } else {
        add_line(&out, &len, "", 0);
    }
    at++; /* the units' names */
    for (int r = 0; r < nranks; r++, at++) {
        cr_assert(at < n && !strncmp(lines[at], "  GPU ", 6), "no row of GPU %d", r);
        char row[2048] = "", *token[64];
        int ntokens = 0;
        for (char *c = lines[at] + 9; *c && ntokens < 64;) {
            char *end = strstr(c, "  ");
            size_t tlen = end ? (size_t)(end - c) : strlen(c);
            token[ntokens] = strndup(c, tlen);
            ntokens++;
            c += tlen;
            while (*c == ' ') c++;
        }
        cr_assert(ntokens >= 2, "%s", lines[at]);
        for (int i = 0; i < ntokens - 1; i++)
            snprintf(row + strlen(row), sizeof row - strlen(row), "%s%s", i ? " | " : "", token[i]);
        add_line(&out, &len, row, strlen(row));
        add_line(&memory, &mlen, token[ntokens - 1], strlen(token[ntokens - 1]));
        for (int i = 0; i < ntokens; i++) free(token[i]);
    }
    out = realloc(out, len + mlen + 1);
    memcpy(out + len, memory, mlen + 1);
    len += mlen;
    free(memory);
    for (; at < n; at++) add_line(&out, &len, lines[at] + 2, strlen(lines[at] + 2));
    out[len - 1] = 0; /* no newline after the last line */
    return out;
}

/* Every frame `fsdp viz --trace FILE ARGS` prints (--plain: every event's; --frames 1-K: the
 * presenter's) as the page should show it; *count of them. */
static char **plain_frames(const char *trace, const char *args, int nranks, size_t *count) {
    char *text = fsdp_ok("viz --trace %s %s", trace, args);
    size_t cap = 1024, n = 0, nlines = 0, lines_cap = 64;
    char **frames = malloc(cap * sizeof *frames), **lines = malloc(lines_cap * sizeof *lines);
    cr_assert(frames && lines);
    for (char *line = strtok(text, "\n");; line = strtok(NULL, "\n")) {
        /* a frame ends where the next starts */
        if (!line || !strncmp(line, "-- event ", 9) || !strncmp(line, "-- frame ", 9)) {
            if (nlines) {
                if (n == cap) frames = realloc(frames, (cap *= 2) * sizeof *frames);
                frames[n++] = plain_frame_as_page(lines, (int)nlines, nranks);
            }
            nlines = 0;
        }
        if (!line) break;
        if (nlines == lines_cap) lines = realloc(lines, (lines_cap *= 2) * sizeof *lines);
        lines[nlines++] = line;
    }
    free(lines);
    free(text);
    *count = n;
    return frames;
}

static void free_frames(char **frames, size_t n) {
    for (size_t i = 0; i < n; i++) free(frames[i]);
    free(frames);
}

/* Line k (0-based) of a frame as plain_frame_as_page has it (the header, narration, flow, the
 * grid's rows, then each rank's memory), into buf. */
static void frame_line(const char *frame, int k, char *buf, size_t n) {
    const char *line = frame;
    for (int i = 0; line && i < k; i++) line = strchr(line, '\n') ? strchr(line, '\n') + 1 : NULL;
    cr_assert(line, "no line %d in\n%s", k, frame);
    snprintf(buf, n, "%.*s", (int)strcspn(line, "\n"), line);
}

/* What the page should show, made from the run's trace without the page. */
typedef struct Expected {
    Trace t, ddp;
    Moments ms;
    char **events, **frames, **ddp_frames; /* plain frames, as the page shows them */
    size_t nevents, nframes, nddp;
    MemoryTimeline *mt; /* [nsteps]: each step's, where mt_ok */
    char *mt_ok;
    int nsteps, nranks;
    TraceMeta ddp_meta; /* the DDP trace file's: its units' names */
} Expected;

/* What the page's DDP side says at the same point as event `index` of the run, as the viewer's
 * key d shows it: the DDP event compare_match puts beside it, then each GPU's memory at its own
 * point (compare_points), which is that GPU's line in DDP's plain frame of the last event it has
 * run by then ("0 B (peak 0 B)" before any). */
static char *ddp_as_page(const Expected *x, size_t index) {
    size_t j, ends[64];
    Err err = {0};
    cr_assert_leq(x->nranks, 64);
    cr_assert_eq(compare_match(&x->t, index, &x->ddp, &j, &err), 0, "%s", err.msg);
    cr_assert_eq(compare_points(&x->t, index, &x->ddp, ends, &err), 0, "%s", err.msg);
    const TraceEvent *e = &x->ddp.ev[j];
    char line[600];
    snprintf(line, sizeof line,
             "DDP at the same point, each GPU at its own: event %zu of %zu, GPU %d %s%s%s", j + 1,
             x->ddp.n, e->rank, event_kind_name((EventKind)e->kind), e->unit >= 0 ? " " : "",
             e->unit >= 0 ? x->ddp_meta.units[e->unit] : "");
    char *out = NULL;
    size_t len = 0;
    add_line(&out, &len, line, strlen(line));
    for (int r = 0; r < x->nranks; r++) {
        if (ends[r])
            frame_line(x->ddp_frames[ends[r] - 1], 3 + x->nranks + r, line, sizeof line);
        else
            snprintf(line, sizeof line, "0 B (peak 0 B)");
        add_line(&out, &len, line, strlen(line));
    }
    out[len - 1] = 0;
    return out;
}

/* The page's DDP side as text: its line, then the memory of each rank under DDP. */
static const char ddp_js[] =
    "(() => [document.getElementById('ddpline').textContent,"
    "        ...[...document.querySelectorAll('#bars .ddpmem')].map((m) => m.textContent)]"
    "  .join('\\n'))()";

/* The charts on show and where their cursors are: "chart0 123.4". */
static const char chart_js[] =
    "[...document.querySelectorAll('svg.chart')].filter((s) => s.style.display !== 'none')"
    "  .map((s) => s.id + ' ' + s.querySelector('.now').getAttribute('x1')).join(';')";

/* Where the terminal viewer is: on the presenter's frames, or (key e) on every event. */
typedef struct Where {
    int by_event;
    size_t event, frame;
} Where;

static const struct {
    const char *key;
    NavMove move;
} moves[] = {
    {"n", NAV_NEXT},
    {"space", NAV_NEXT},
    {"ArrowRight", NAV_NEXT},
    {"p", NAV_PREV},
    {"ArrowLeft", NAV_PREV},
    {"c", NAV_NEXT_COLLECTIVE},
    {"C", NAV_PREV_COLLECTIVE},
    {"k", NAV_NEXT_COMPUTE},
    {"K", NAV_PREV_COMPUTE},
    {"f", NAV_FORWARD},
    {"b", NAV_BACKWARD},
    {"o", NAV_OPTIMIZER},
};

/* Where a key leads from w in the terminal viewer (tui.c): nav_move among events and
 * moments_move among the presenter's frames; e switches between the two at the same place (the
 * frame's collective or compute, or the frame that holds the event); Home and End the first and
 * the last. */
static Where expected_after(const Trace *t, const Moments *ms, Where w, const char *key) {
    size_t *at = w.by_event ? &w.event : &w.frame, last = w.by_event ? t->n - 1 : ms->n - 1;
    if (!strcmp(key, "e")) {
        const Moment *m = &ms->m[w.frame];
        if (w.by_event)
            w.frame = moments_find(ms, w.event);
        else
            w.event = m->anchor != MOMENT_NO_ANCHOR ? m->anchor : m->last;
        w.by_event = !w.by_event;
        return w;
    }
    if (!strcmp(key, "Home") || !strcmp(key, "End")) {
        *at = key[0] == 'H' ? 0 : last;
        return w;
    }
    for (size_t i = 0; i < sizeof moves / sizeof *moves; i++) {
        if (strcmp(moves[i].key, key)) continue;
        size_t to;
        if (w.by_event)
            nav_move(t, *at, moves[i].move, &to);
        else
            moments_move(ms, t, *at, moves[i].move, &to);
        *at = to;
        return w;
    }
    cr_assert_fail("no rule for key '%s'", key);
    return w;
}

/* The event whose state a place shows (a frame's last), and the event it is about (a frame's
 * collective or compute, or its last event when it has none): DDP is matched to the first, the
 * grid follows the second's unit and the chart's cursor is at its start. */
static size_t state_event(const Moments *ms, Where w) {
    return w.by_event ? w.event : ms->m[w.frame].last;
}

static size_t focus_event(const Moments *ms, Where w) {
    const Moment *m = &ms->m[w.frame];
    return w.by_event ? w.event : m->anchor != MOMENT_NO_ANCHOR ? m->anchor : m->last;
}

/* The page's value of `js` is `want` (asked again for up to 2 s: a key's effect, or a hash's,
 * may land after the protocol's reply). */
static void expect_eval(Browser *b, const char *js, const char *want, const char *what,
                        const char *after) {
    char *got = NULL;
    for (int tries = 0; tries < 40; tries++) {
        free(got);
        got = page_eval(b, js);
        if (!strcmp(got, want)) break;
        usleep(50000);
    }
    cr_expect_str_eq(got, want, "after %s the page shows as %s\n%s\n\nnot\n%s", after, what, got,
                     want);
    free(got);
}

/* The grid's column of unit u, from its name to the last GPU's cell, lies on screen: right of
 * the GPUs' labels, inside the grid's box and the 1400x900 viewport. */
static void expect_unit_on_screen(Browser *b, int u, const char *after) {
    char js[1200];
    snprintf(
        js, sizeof js,
        "(() => {"
        "  const t = document.getElementById('grid'), box = document.getElementById('gridbox');"
        "  const rows = t.tBodies[0].rows, name = t.tHead.rows[0].cells[%d];"
        "  const h = name.getBoundingClientRect();"
        "  const c = rows[rows.length - 1].cells[%d].getBoundingClientRect();"
        "  const label = rows[0].cells[0].getBoundingClientRect().right;"
        "  const inside = box.getBoundingClientRect().left + box.clientWidth;"
        "  return [h.left, h.top, c.right, c.bottom, label, inside, innerWidth, innerHeight,"
        "          name.textContent].join(' ');"
        "})()",
        u + 1, u + 1);
    char *got = page_eval(b, js), unit[128] = "";
    double left, top, right, bottom, label, inside, width, height;
    cr_assert_eq(sscanf(got, "%lf %lf %lf %lf %lf %lf %lf %lf %127s", &left, &top, &right, &bottom,
                        &label, &inside, &width, &height, unit),
                 9, "%s", got);
    cr_expect(left >= label - 1 && right <= inside + 1 && right <= width && top >= 0 &&
                  bottom <= height,
              "after %s unit %s's column is off screen: left %.0f right %.0f top %.0f bottom "
              "%.0f; labels end at %.0f, the grid's box at %.0f, the viewport is %.0fx%.0f",
              after, unit, left, right, top, bottom, label, inside, width, height);
    free(got);
}

/* After `after`, the page shows place w as the terminal's plain frame of it, with DDP's memory
 * at the same point, the grid's column of the unit in play on screen and the step's chart with
 * its cursor at the frame's event. */
static void expect_page(Browser *b, const Expected *x, Where w, const char *after) {
    expect_eval(b, frame_js, w.by_event ? x->events[w.event] : x->frames[w.frame], "its frame",
                after);
    char *ddp = ddp_as_page(x, state_event(&x->ms, w));
    expect_eval(b, ddp_js, ddp, "DDP", after);
    free(ddp);
    const TraceEvent *e = &x->t.ev[focus_event(&x->ms, w)];
    if (e->unit >= 0) expect_unit_on_screen(b, e->unit, after);
    char *chart = page_eval(b, chart_js);
    if (e->step >= 0 && e->step < x->nsteps && x->mt_ok[e->step]) {
        int id = -1;
        double at = -1, want = html_chart_x(&x->mt[e->step], e->start);
        cr_expect(sscanf(chart, "chart%d %lf", &id, &at) == 2 && id == e->step &&
                      fabs(at - want) < 0.051 && !strchr(chart, ';'),
                  "after %s the chart shown is '%s', not step %d's with its cursor at %.1f", after,
                  chart, e->step, want);
    } else {
        cr_expect_str_eq(chart, "", "after %s a chart is shown for a step without one", after);
    }
    free(chart);
}

/* The number after `word` in the page's header ("frame 3 of 70 | ...", "event 55 of 339"). */
static size_t shown_number(Browser *b, const char *word) {
    char *header = page_eval(b, "document.getElementById('header').textContent"), format[32];
    size_t at = 0;
    snprintf(format, sizeof format, "%s %%zu of", word);
    cr_assert_eq(sscanf(header, format, &at), 1, "%s", header);
    free(header);
    return at;
}

/* r plays (from the number shown, `word`s one by one) until r again. */
static void expect_play(Browser *b, const char *word, size_t from) {
    press(b, "r");
    for (int tries = 0; shown_number(b, word) < from + 2; tries++) {
        cr_assert(tries < 100, "r did not play: still at %s %zu", word, shown_number(b, word));
        usleep(100000);
    }
    press(b, "r");
    size_t paused = shown_number(b, word);
    usleep(1300000);
    cr_expect_eq(shown_number(b, word), paused, "r did not pause");
}

static void expected_load(Expected *x, const char *trace, const char *ddp_trace, int nranks) {
    memset(x, 0, sizeof *x);
    x->nranks = nranks;
    TraceMeta meta;
    Err err = {0};
    cr_assert_eq(trace_file_read(trace, &x->t, &meta, &err), 0, "%s", err.msg);
    trace_meta_free(&meta);
    cr_assert_eq(trace_file_read(ddp_trace, &x->ddp, &x->ddp_meta, &err), 0, "%s", err.msg);
    cr_assert_eq(moments_build(&x->ms, &x->t, &err), 0, "%s", err.msg);
    char frames[64];
    snprintf(frames, sizeof frames, "--frames 1-%zu", x->ms.n);
    x->events = plain_frames(trace, "--plain", nranks, &x->nevents);
    x->frames = plain_frames(trace, frames, nranks, &x->nframes);
    x->ddp_frames = plain_frames(ddp_trace, "--plain", nranks, &x->nddp);
    cr_assert_eq(x->nevents, x->t.n, "plain printed %zu frames of %zu events", x->nevents, x->t.n);
    cr_assert_eq(x->nframes, x->ms.n, "--frames printed %zu of %zu", x->nframes, x->ms.n);
    cr_assert_eq(x->nddp, x->ddp.n, "DDP's plain printed %zu frames of %zu", x->nddp, x->ddp.n);
    x->nsteps = trace_last_step(&x->t) + 1;
    x->mt = calloc((size_t)x->nsteps + 1, sizeof *x->mt);
    x->mt_ok = calloc((size_t)x->nsteps + 1, 1);
    for (int s = 0; s < x->nsteps; s++) {
        Err why = {0};
        x->mt_ok[s] = memory_timeline_build(&x->mt[s], &x->t, s, &why) == 0;
    }
}

static void expected_free(Expected *x) {
    for (int s = 0; s < x->nsteps; s++) memory_timeline_free(&x->mt[s]);
    free(x->mt);
    free(x->mt_ok);
    free_frames(x->events, x->nevents);
    free_frames(x->frames, x->nframes);
    free_frames(x->ddp_frames, x->nddp);
    moments_free(&x->ms);
    trace_free(&x->t);
    trace_free(&x->ddp);
    trace_meta_free(&x->ddp_meta);
}

/* ---------------------------------------------------------------- the cases */

typedef struct Visit {
    size_t page_bytes;
    int distinct; /* places (frames and events) the keys went to */
} Visit;

/* Writes the run's page and trace, replays the trace into a second page (the same bytes), runs
 * the same steps under DDP for what the page's DDP side should show, then in chromium opens the
 * page (on the presenter's first frame), presses each key and checks the page against where the
 * terminal viewer's key leads (expect_page); then the page's links (#N, #fK) and r. */
static Visit drive(const char *name, const char *flags, const char *keys, int nranks) {
    Visit visit = {0};
    const char *exe = find_chromium();
    if (!exe)
        cr_skip_test("no chromium on PATH or in $FSDP_CHROMIUM (Debian: apt-get install "
                     "chromium-headless-shell; make test installs it as root)");
    char dir[256], page[320], trace[320], replayed[320], ddp_trace[320], url[400];
    fresh_test_dir(dir, sizeof dir, "viz_html", name);
    snprintf(page, sizeof page, "%s/page.html", dir);
    snprintf(trace, sizeof trace, "%s/run.json", dir);
    snprintf(replayed, sizeof replayed, "%s/replayed.html", dir);
    snprintf(ddp_trace, sizeof ddp_trace, "%s/ddp.json", dir);
    char *said = fsdp_ok("viz %s --trace-out %s --html %s", flags, trace, page);
    size_t bytes;
    char *html = read_text_file(page, &bytes), *again = NULL;
    visit.page_bytes = bytes;
    /* the page's DDP side: the same steps under DDP, accounting-only */
    free(fsdp_ok("viz %s --strategy ddp --accounting-only --trace-out %s --events 1", flags,
                 ddp_trace));
    Expected x;
    expected_load(&x, trace, ddp_trace, nranks);
    char want[512], size[32];
    snprintf(want, sizeof want, "wrote %s: %zu events, %s\n", page, x.t.n,
             format_bytes(bytes, size, sizeof size));
    cr_expect_str_eq(said, want);
    free(said);
    /* self-contained: nothing fetched from a network or another file */
    static const char *const outside[] = {
        "http:", "https:", "src=", "href=", "url(", "@import", "file:"};
    for (size_t i = 0; i < sizeof outside / sizeof *outside; i++)
        cr_expect(!strstr(html, outside[i]), "the page has '%s'", outside[i]);
    free(fsdp_ok("viz --trace %s --html %s", trace, replayed));
    again = read_text_file(replayed, NULL);
    cr_expect(!strcmp(html, again), "the replayed trace's page differs from the run's");
    free(again);
    free(html);

    Browser b;
    browser_open(&b, exe, dir);
    snprintf(url, sizeof url, "file://%s", page);
    page_go(&b, url);
    char *viewport = page_eval(&b, "innerWidth + 'x' + innerHeight");
    cr_expect_str_eq(viewport, "1400x900");
    free(viewport);
    Where w = {0};
    char *seen = calloc(x.t.n + x.ms.n, 1);
    expect_page(&b, &x, w, "opening the page");
    char *seq = strdup(keys), *save = NULL;
    size_t i = 0;
    for (char *key = strtok_r(seq, " ", &save); key; key = strtok_r(NULL, " ", &save), i++) {
        press(&b, key);
        w = expected_after(&x.t, &x.ms, w, key);
        size_t place = w.by_event ? w.event : x.t.n + w.frame;
        visit.distinct += !seen[place];
        seen[place] = 1;
        char after[160];
        snprintf(after, sizeof after, "key %zu (%s, %s)", i + 1, key,
                 w.by_event ? "every event" : "frames");
        expect_page(&b, &x, w, after);
    }
    free(seq);
    /* #55 after the page's name opens it at event 55 (every event), #f2 at frame 2: opened
     * afresh, and changed in an open page */
    size_t linked = x.t.n / 3, frame = x.ms.n / 2;
    page_blank(&b);
    snprintf(url, sizeof url, "file://%s#%zu", page, linked + 1);
    page_go(&b, url);
    expect_page(&b, &x, (Where){.by_event = 1, .event = linked}, "opening the page at its #N");
    snprintf(url, sizeof url, "file://%s#f%zu", page, frame + 1);
    page_go(&b, url);
    expect_page(&b, &x, (Where){.frame = frame}, "changing its # to #fK");
    expect_play(&b, "frame", frame + 1); /* a frame a second */
    snprintf(url, sizeof url, "file://%s#%zu", page, linked + 1);
    page_go(&b, url);
    expect_page(&b, &x, (Where){.by_event = 1, .event = linked}, "changing its # to #N");
    expect_play(&b, "event", linked + 1); /* an event every 400 ms */
    browser_close(&b);

    free(seen);
    expected_free(&x);
    remove_test_dir(dir);
    return visit;
}

/* The toy at 3 ranks (zero3) for two steps, so that f, b and o also go on to the next step, on
 * the presenter's frames and, after e, on every event. */
Test(viz_html, toy_keys_in_chromium_show_the_viewers_frames) {
    static const char keys[] = "n n space ArrowRight p ArrowLeft c c C k k K "
                               "b "       /* frame 9: step 1's backward's first all-gather */
                               "f "       /* back to step 1's forward: the step is not over */
                               "o b "     /* step 1's optimizer, then its backward again */
                               "o n n n " /* frame 21: between the steps */
                               "b "       /* its step's work is done: step 2's backward */
                               "o n n n " /* frame 41: the teardown */
                               "f "       /* no step 3: stays */
                               "C K End Home p " /* at the first: stays */
                               "c e "            /* the frame's collective, event by event */
                               "n n space p c C k K b f o o "
                               "e "         /* back to the frame that holds the event */
                               "o n n n e " /* frame 21's last event, between the steps */
                               "b "         /* step 2's backward's first event */
                               "End f "     /* the last event: no step 3 */
                               "n "         /* the last event: stays */
                               "e End n "   /* the last frame: stays */
                               "Home e Home p e";
    Visit v = drive("toy", "--model toy --ranks 3 --strategy zero3 --steps 2", keys, 3);
    cr_expect_gt(v.distinct, 25, "the keys went to only %d places", v.distinct);
    cr_log_info("toy page: %zu bytes", v.page_bytes);
}

/* vit-tiny at 4 ranks: the workshop's model, its 11 units wider than the screen, under 5 MB. */
Test(viz_html, vit_tiny_keys_in_chromium_show_the_viewers_frames) {
    static const char keys[] = "c c C k k K n p "
                               "End "   /* the optimizer's last unit: far right */
                               "b "     /* the backward's first: the last layer's */
                               "k c C " /* along the backward */
                               "o "     /* the optimizer's first */
                               "K f "   /* back to the forward: the step is not over */
                               "End K C o Home space ArrowRight ArrowLeft "
                               "b e " /* every event of the backward's first frame */
                               "c c k K n p f b o End Home "
                               "e End e C e";
    Visit v = drive("vit", "--model vit-tiny --ranks 4", keys, 4);
    cr_expect_gt(v.distinct, 20, "the keys went to only %d places", v.distinct);
    cr_expect_lt(v.page_bytes, 5u << 20, "the vit-tiny page is %zu bytes", v.page_bytes);
    cr_log_info("vit-tiny page at 4 ranks: %zu bytes", v.page_bytes);
}

/* Bad --html input: one line, exit 2, checked before the run, and nothing that existed touched
 * (no page, no temporary file beside it). */
Test(viz_html, bad_paths_exit_2_with_one_line_and_keep_what_exists) {
    char dir[256], args[1000];
    fresh_test_dir(dir, sizeof dir, "viz_html", "bad");
    const UsageCase cases[] = {
        {"viz --html /nonexistent_fsdp_dir/page.html", "directory '/nonexistent_fsdp_dir' does "
                                                       "not exist"},
        {"viz --html /tmp", "--html '/tmp' is a directory"},
        {"viz --html README.md/page.html", "'README.md' is not a directory"},
        {"viz --html ''", "--html needs a file name"},
        {"viz --html", "--html needs a file"},
        {"viz --html page.html --events 3", "--events is for text frames"},
        {"viz --html page.html --plain", "--plain is for text frames"},
    };
    expect_usage_errors(cases, sizeof cases / sizeof *cases);
    /* a page that exists stays as it is when the run fails: a bad train flag, a bad trace */
    char page[320];
    snprintf(page, sizeof page, "%s/page.html", dir);
    FILE *f = fopen(page, "w");
    cr_assert(f);
    fputs("the old page\n", f);
    fclose(f);
    snprintf(args, sizeof args, "viz --html %s --strategy zro3", page);
    expect_usage_error(args, "zro3");
    snprintf(args, sizeof args, "viz --trace %s/missing.json --html %s", dir, page);
    expect_usage_error(args, "missing.json");
    char *kept = read_text_file(page, NULL);
    cr_expect_str_eq(kept, "the old page\n");
    free(kept);
    int entries = 0;
    DIR *d = opendir(dir);
    cr_assert(d);
    for (struct dirent *e; (e = readdir(d));) entries += e->d_name[0] != '.';
    closedir(d);
    cr_expect_eq(entries, 1, "a temporary file was left in %s", dir);
    remove_test_dir(dir);
}
