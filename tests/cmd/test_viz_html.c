/* `fsdp viz --html` in a real browser: Debian's headless chromium, driven over the DevTools
 * protocol, opens the page, is sent key presses and reads back the frame the page shows, which must
 * be the plain frame of the event the key leads to. Skipped only where no chromium exists. */
#include <cjson/cJSON.h>
#include <criterion/criterion.h>
#include <dirent.h>
#include <fcntl.h>
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
              "--remote-debugging-pipe", profile, "about:blank", (char *)NULL);
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

/* One plain frame (its lines from "-- event" to before the blank line) as frame_js reads the
 * page: the grid's rows split at the runs of two or more spaces that pad its columns. */
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
    for (; at < n; at++) /* the page has no phases' row or time axis (yet) */
        if (strncmp(lines[at], "  phases ", 9) && strncmp(lines[at], "  time (", 8))
            add_line(&out, &len, lines[at] + 2, strlen(lines[at] + 2));
    out[len - 1] = 0; /* no newline after the last line */
    return out;
}

/* Every frame of `fsdp viz --trace FILE --plain` as the page should show it; *count of them. */
static char **plain_frames(const char *trace, int nranks, size_t *count) {
    char *text = fsdp_ok("viz --trace %s --plain", trace);
    size_t cap = 1024, n = 0, nlines = 0, lines_cap = 64;
    char **frames = malloc(cap * sizeof *frames), **lines = malloc(lines_cap * sizeof *lines);
    cr_assert(frames && lines);
    for (char *line = strtok(text, "\n");; line = strtok(NULL, "\n")) {
        if (!line || !strncmp(line, "-- event ", 9)) { /* a frame ends where the next starts */
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

/* The first event of phase ph in the current event's step, unless the step has none or the
 * current event is past its last one: then the first of phase ph in a later step; else stay. */
static size_t phase_start(const Trace *t, size_t at, int ph) {
    int step = t->ev[at].step;
    size_t last = t->n;
    for (size_t j = 0; j < t->n; j++)
        if (t->ev[j].step == step && t->ev[j].phase == ph) last = j;
    if (last < t->n && at <= last)
        for (size_t j = 0; j <= last; j++)
            if (t->ev[j].step == step && t->ev[j].phase == ph) return j;
    for (size_t j = 0; j < t->n; j++)
        if (t->ev[j].step > step && t->ev[j].phase == ph) return j;
    return at;
}

/* The event a key leads to from event `at` of t, as the issue words the keys. */
static size_t expected_after(const Trace *t, size_t at, const char *key) {
    if (!strcmp(key, "n") || !strcmp(key, "space") || !strcmp(key, "ArrowRight"))
        return at + 1 < t->n ? at + 1 : at;
    if (!strcmp(key, "p") || !strcmp(key, "ArrowLeft")) return at ? at - 1 : 0;
    if (!strcmp(key, "c")) return trace_seek(t, at, 1, trace_event_is_collective);
    if (!strcmp(key, "C")) return trace_seek(t, at, -1, trace_event_is_collective);
    if (!strcmp(key, "k")) return trace_seek(t, at, 1, trace_event_is_compute);
    if (!strcmp(key, "K")) return trace_seek(t, at, -1, trace_event_is_compute);
    if (!strcmp(key, "f")) return phase_start(t, at, PHASE_FORWARD);
    if (!strcmp(key, "b")) return phase_start(t, at, PHASE_BACKWARD);
    if (!strcmp(key, "o")) return phase_start(t, at, PHASE_OPTIMIZER);
    if (!strcmp(key, "Home")) return 0;
    if (!strcmp(key, "End")) return t->n - 1;
    cr_assert_fail("no rule for key '%s'", key);
    return at;
}

/* The page shows event `index`'s plain frame (asked again for up to 2 s: a key's effect, or a
 * hash's, may land after the protocol's reply). */
static void expect_frame(Browser *b, char **frames, size_t index, const char *after) {
    char *got = NULL;
    for (int tries = 0; tries < 40; tries++) {
        free(got);
        got = page_eval(b, frame_js);
        if (!strcmp(got, frames[index])) break;
        usleep(50000);
    }
    cr_expect_str_eq(got, frames[index], "after %s the page shows\n%s\n\nnot event %zu:\n%s", after,
                     got, index + 1, frames[index]);
    free(got);
}

/* The event number in the page's header ("event 55 of 339 | ..."). */
static size_t shown_event(Browser *b) {
    char *header = page_eval(b, "document.getElementById('header').textContent");
    size_t event = 0;
    cr_assert_eq(sscanf(header, "event %zu of", &event), 1, "%s", header);
    free(header);
    return event;
}

/* ---------------------------------------------------------------- the cases */

typedef struct Visit {
    size_t page_bytes;
    int distinct; /* events the keys went to */
} Visit;

/* Writes the run's page and trace, replays the trace into a second page (the same bytes), then
 * in chromium presses each key and compares the page's frame with the plain frame of the event
 * the trace says the key leads to. */
static Visit drive(const char *name, const char *flags, const char *const *seq, size_t nseq,
                   int nranks) {
    Visit visit = {0};
    const char *exe = find_chromium();
    if (!exe)
        cr_skip_test("no chromium on PATH or in $FSDP_CHROMIUM (Debian: apt-get install "
                     "chromium-headless-shell; make test installs it as root)");
    char dir[256], page[320], trace[320], replayed[320], url[400];
    fresh_test_dir(dir, sizeof dir, "viz_html", name);
    snprintf(page, sizeof page, "%s/page.html", dir);
    snprintf(trace, sizeof trace, "%s/run.json", dir);
    snprintf(replayed, sizeof replayed, "%s/replayed.html", dir);
    char *said = fsdp_ok("viz %s --trace-out %s --html %s", flags, trace, page);
    size_t bytes;
    char *html = read_text_file(page, &bytes), *again = NULL;
    visit.page_bytes = bytes;
    Trace t;
    TraceMeta meta;
    Err err = {0};
    cr_assert_eq(trace_file_read(trace, &t, &meta, &err), 0, "%s", err.msg);
    char want[512], size[32];
    snprintf(want, sizeof want, "wrote %s: %zu events, %s\n", page, t.n,
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

    size_t nframes;
    char **frames = plain_frames(trace, nranks, &nframes);
    cr_assert_eq(nframes, t.n, "plain printed %zu frames of %zu events", nframes, t.n);

    Browser b;
    browser_open(&b, exe, dir);
    snprintf(url, sizeof url, "file://%s", page);
    page_go(&b, url);
    size_t at = 0;
    char *seen = calloc(t.n, 1);
    expect_frame(&b, frames, at, "opening the page");
    for (size_t i = 0; i < nseq; i++) {
        press(&b, seq[i]);
        at = expected_after(&t, at, seq[i]);
        visit.distinct += !seen[at];
        seen[at] = 1;
        char after[160];
        snprintf(after, sizeof after, "key %zu (%s)", i + 1, seq[i]);
        expect_frame(&b, frames, at, after);
    }
    /* #55 after the page's name opens it at event 55 */
    size_t linked = t.n / 3;
    snprintf(url, sizeof url, "file://%s#%zu", page, linked + 1);
    page_go(&b, url);
    expect_frame(&b, frames, linked, "opening the page at its #");
    /* r plays (an event every 400 ms) until r again */
    press(&b, "r");
    for (int tries = 0; shown_event(&b) < linked + 3; tries++) {
        cr_assert(tries < 100, "r did not play: still at event %zu", shown_event(&b));
        usleep(100000);
    }
    press(&b, "r");
    size_t paused = shown_event(&b);
    usleep(1000000);
    cr_expect_eq(shown_event(&b), paused, "r did not pause");
    browser_close(&b);

    for (size_t i = 0; i < nframes; i++) free(frames[i]);
    free(frames);
    free(seen);
    trace_free(&t);
    trace_meta_free(&meta);
    remove_test_dir(dir);
    return visit;
}

/* The toy at 3 ranks (zero3) for two steps, so that f, b and o also go on to the next step. */
Test(viz_html, toy_keys_in_chromium_show_the_plain_frames) {
    static const char *const seq[] = {
        "n",    "n",    "space", "ArrowRight", "p", "ArrowLeft", "c",
        "c",    "c",    "C",     "k",          "k", "K",         "b", /* step 1's backward */
        "f",         /* past step 1's forward: step 2's */
        "o",    "b", /* step 2's optimizer, then past its backward: no step 3, stay */
        "f",    "End",  "C",     "K", /* the last collective and computation */
        "p",    "Home", "o",          /* step 1's optimizer */
        "f",    "k",    "End",   "n", /* at the last event: stays */
        "Home", "p",                  /* at the first: stays */
    };
    Visit v = drive("toy", "--model toy --ranks 3 --strategy zero3 --steps 2", seq,
                    sizeof seq / sizeof *seq, 3);
    cr_expect_gt(v.distinct, 18, "the keys went to only %d events", v.distinct);
    cr_log_info("toy page: %zu bytes", v.page_bytes);
}

/* vit-tiny at 4 ranks: the page for the workshop's model, under 5 MB. */
Test(viz_html, vit_tiny_keys_in_chromium_show_the_plain_frames) {
    static const char *const seq[] = {
        "c",   "c", "C", "k", "k",    "K",     "n",          "p",
        "b",                  /* the backward's first event */
        "k",   "c", "C", "o", /* the optimizer's first */
        "K",   "f",           /* past the forward, and no next step: stays */
        "End", "K", "C", "o", "Home", "space", "ArrowRight", "ArrowLeft",
    };
    Visit v = drive("vit", "--model vit-tiny --ranks 4", seq, sizeof seq / sizeof *seq, 4);
    cr_expect_gt(v.distinct, 12, "the keys went to only %d events", v.distinct);
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
