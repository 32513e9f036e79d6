/* The terminal viewer for real: `fsdp viz` in a tmux session, driven with send-keys and read
 * back with capture-pane. Skipped where tmux is not installed. Each test has its own tmux
 * server (-L): they run in parallel, and a server whose last session ends exits. */
#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "tests/util.h"

static char session[32];

static int sh(const char *cmd) {
    return system(cmd);
}

/* The visible screen, as text. */
static const char *screen(void) {
    static char buf[1 << 16];
    char cmd[256];
    snprintf(cmd, sizeof cmd, "tmux -L %s capture-pane -p -t %s 2>/dev/null", session, session);
    FILE *p = popen(cmd, "r");
    size_t got = p ? fread(buf, 1, sizeof buf - 1, p) : 0;
    buf[got] = 0;
    if (p) pclose(p);
    return buf;
}

/* The screen once two captures 50 ms apart agree (not halfway through a redraw). */
static const char *settled(void) {
    static char last[1 << 16];
    snprintf(last, sizeof last, "%s", screen());
    for (int i = 0; i < 40; i++) {
        usleep(50 * 1000);
        const char *now = screen();
        if (!strcmp(now, last)) break;
        snprintf(last, sizeof last, "%s", now);
    }
    return last;
}

/* Waits up to `seconds` for `text` on the screen (vit-tiny's step takes a few under the
 * sanitizers). */
static int shows_within(const char *text, int seconds) {
    const char *s = "";
    for (int i = 0; i < seconds * 20; i++) {
        s = screen();
        if (strstr(s, text)) return 1;
        usleep(50 * 1000);
    }
    fprintf(stderr, "screen without '%s':\n%s\n", text, s);
    return 0;
}

static int shows(const char *text) {
    return shows_within(text, 5);
}

/* Waits up to 5 s for `text` to leave the screen. */
static int hides(const char *text) {
    const char *s = "";
    for (int i = 0; i < 100; i++) {
        s = screen();
        if (!strstr(s, text)) return 1;
        usleep(50 * 1000);
    }
    fprintf(stderr, "screen still with '%s':\n%s\n", text, s);
    return 0;
}

static int count(const char *s, const char *text) {
    int n = 0;
    for (const char *at = s; (at = strstr(at, text)); at += strlen(text)) n++;
    return n;
}

/* The row of screen s that holds `text`, or "" when none does. */
static const char *row_of(const char *s, const char *text) {
    static char row[1024];
    const char *at = strstr(s, text);
    row[0] = 0;
    if (!at) return row;
    while (at > s && at[-1] != '\n') at--;
    const char *end = strchr(at, '\n');
    snprintf(row, sizeof row, "%.*s", (int)(end ? end - at : (long)strlen(at)), at);
    return row;
}

static void keys(const char *k) {
    char cmd[256];
    snprintf(cmd, sizeof cmd, "tmux -L %s send-keys -t %s %s", session, session, k);
    cr_assert_eq(sh(cmd), 0);
}

/* Presses `k`, then whether the screen shows `text` within 5 s. */
static int shows_after(const char *k, const char *text) {
    keys(k);
    return shows(text);
}

/* `fsdp viz ARGS` in a new w x h session named after the test. The pane outlives the viewer
 * and says how it exited: its error message stays readable, and tmux does not fail the start
 * when a viewer exits at once. */
static void start(const char *name, int w, int h, const char *args) {
    if (sh("command -v tmux >/dev/null 2>&1") != 0) cr_skip_test("tmux is not installed");
    snprintf(session, sizeof session, "fsdp_tui_%s", name);
    char cmd[512];
    snprintf(cmd, sizeof cmd, "tmux -L %s kill-server 2>/dev/null", session);
    sh(cmd);
    snprintf(cmd, sizeof cmd,
             "tmux -L %s new-session -d -s %s -x %d -y %d "
             "'NO_COLOR=1 %s viz %s; echo \"fsdp exited with $?\"; sleep 60'",
             session, session, w, h, fsdp_bin(), args);
    cr_assert_eq(sh(cmd), 0);
}

static void resize(int w, int h) {
    char cmd[256];
    snprintf(cmd, sizeof cmd, "tmux -L %s resize-window -t %s -x %d -y %d 2>/dev/null", session,
             session, w, h);
    sh(cmd);
}

/* q ends the viewer, with status 0. */
static void quit(void) {
    cr_expect(shows_after("q", "fsdp exited with 0"), "q quits");
}

/* Every test's .fini, failed or not: no viewer is left behind. */
static void stop(void) {
    char kill[256];
    snprintf(kill, sizeof kill, "tmux -L %s kill-server 2>/dev/null", session);
    if (session[0]) sh(kill);
}

/* Bytes in use on the first " GPU 0  [" memory bar after `heading` ("...] 144 B (peak"), or
 * -1: the toy's figures are all under 1 KiB. */
static long bar_bytes(const char *s, const char *heading) {
    const char *at = strstr(s, heading);
    at = at ? strstr(at, " GPU 0  [") : NULL;
    at = at ? strstr(at, "] ") : NULL;
    long bytes;
    char unit[8];
    if (!at || sscanf(at, "] %ld %7s", &bytes, unit) != 2 || strcmp(unit, "B")) return -1;
    return bytes;
}

Test(tui, keys_move_through_the_frames, .timeout = 60, .fini = stop) {
    start("keys", 100, 30, "--ranks 3");
    cr_expect(shows("event 1/339"));
    cr_expect(shows("GPU 0 allocates 4 B of param shard for La"));
    cr_expect(shows("|DDP"), "the memory legend with the DDP marker");
    cr_expect(shows_after("n n n", "event 4/339"));
    cr_expect(shows_after("p", "event 3/339"));
    cr_expect(shows_after("g 5 5 Enter", "event 55/339"));
    cr_expect(shows("GPU 0 needs a₀ a₁ a₂ for La, has a₀"));
    cr_expect(shows_after("b", "backward"));
    cr_expect(shows_after("h", "this help"));
    cr_expect(shows("DDP beside this run"), "the help names key d");
    cr_expect(shows_after("x", "memory"));
    resize(40, 10);
    cr_expect(shows("too small: 40x10, needs 60x12"));
    resize(100, 30);
    cr_expect(shows("memory"));
    quit();
}

/* Key d at zero3's all-gather of La: DDP's side at the same point, where every GPU holds all
 * of La, Lb and Lc and uses more memory than zero3's shards; stacked below the run at 100
 * columns, beside it at 200; d again closes it. */
Test(tui, d_shows_ddp_at_the_same_point, .timeout = 60, .fini = stop) {
    start("ddp", 100, 30, "--ranks 3 --strategy zero3");
    cr_expect(shows("event 1/339"));
    cr_expect(shows(" d DDP "), "the key line names d");
    cr_expect(shows_after("g 5 5 Enter", "event 55/339"));
    keys("d");
    cr_assert(shows("DDP at the same point: event "));
    const char *s = settled();
    const char *ddp = strstr(s, "DDP at the same point"), *run = strstr(s, "zero3, this run");
    cr_assert(ddp);
    cr_expect(run && run < ddp, "the run on top, DDP below:\n%s", s);
    cr_expect(strstr(row_of(s, "zero3, this run"), "event 55/339"), "%s", s);
    cr_expect_eq(count(ddp, "a₀ a₁ a₂"), 3, "every DDP GPU holds all of La:\n%s", s);
    cr_expect_eq(count(ddp, "\n GPU 2  "), 2, "DDP's grid row and memory bar of GPU 2:\n%s", s);
    long fsdp_bytes = bar_bytes(s, "zero3, this run"), ddp_bytes = bar_bytes(s, "DDP at the same");
    cr_expect_gt(fsdp_bytes, 0, "zero3's GPU 0 memory bar:\n%s", s);
    cr_expect_gt(ddp_bytes, fsdp_bytes, "DDP holds more than zero3 at the same point:\n%s", s);
    /* the DDP side follows the run: at zero3's forward of La on GPU 0, DDP's */
    cr_expect(shows_after("g 7 0 Enter", "event 70/339  step 1  forward  GPU 0  forward La"));
    s = settled();
    cr_expect(strstr(row_of(s, "DDP at the same point"), "GPU 0 forward La"),
              "DDP's title names the same forward:\n%s", s);
    resize(200, 30);
    cr_expect(shows("│DDP at the same point"), "DDP in a column of its own");
    s = settled();
    cr_expect(strstr(row_of(s, "zero3, this run"), "DDP at the same point"),
              "both titles on one row:\n%s", s);
    keys("d");
    cr_expect(hides("DDP at the same point"), "d again closes the DDP view");
    cr_expect(shows("memory"));
    quit();
}

Test(tui, d_on_a_ddp_run_says_so, .timeout = 60, .fini = stop) {
    start("ddp_run", 100, 30, "--ranks 3 --strategy ddp");
    cr_expect(shows("event 1/159"));
    cr_expect(shows_after("d", "this run is DDP"));
    cr_expect(!strstr(screen(), "DDP at the same point"), "no DDP view");
    keys("n");
    cr_expect(hides("this run is DDP"), "the message goes with the next key");
    cr_expect(shows("event 2/159"));
    quit();
}

/* A replayed trace has no DDP run beside it: d says so in one line and the viewer goes on. */
Test(tui, d_on_a_replayed_trace_says_so, .timeout = 60, .fini = stop) {
    char path[64], args[128];
    snprintf(path, sizeof path, "/tmp/fsdp_tui_replay_%d.json", (int)getpid());
    snprintf(args, sizeof args, "train --ranks 3 --steps 1 --trace-out %s", path);
    int status = 0;
    free(fsdp_output(args, ">/dev/null 2>&1", &status));
    cr_assert_eq(status, 0, "train --trace-out %s", path);
    snprintf(args, sizeof args, "--trace %s", path);
    start("replay", 100, 30, args);
    cr_expect(shows("event 1/"));
    cr_expect(shows_after("d", "no DDP run to compare with"));
    cr_expect(shows_after("n", "event 2/"));
    quit();
    unlink(path);
}

/* 80x24 with 8 ranks and 11 units, at an all-gather (narration and the collective's flow
 * take two rows each): the timeline and the blank rows give way so that every rank keeps its
 * grid row and its memory bar, and the units that do not fit are counted. With d, each half
 * keeps every grid row and one memory line. */
Test(tui, vit_tiny_at_8_ranks_fits_80x24, .timeout = 60, .fini = stop) {
    start("vit8", 80, 24, "--model vit-tiny --ranks 8");
    cr_assert(shows_within("event 1/", 20));
    keys("g 4 0 1 Enter");
    cr_assert(shows("event 401/"));
    cr_expect(shows("GPU 0  all_gather root"), "the first all-gather");
    cr_expect(shows("more units"));
    const char *s = settled();
    cr_expect(!strstr(s, "too small"), "%s", s);
    cr_expect(strstr(s, "GPU 0 gathers root"), "the narration:\n%s", s);
    cr_expect_eq(count(s, "\n GPU 7  "), 2, "GPU 7's grid row and memory bar:\n%s", s);
    cr_expect(strstr(s, "q quit"), "the key line at the bottom:\n%s", s);
    keys("d");
    cr_assert(shows_within("DDP at the same point", 20));
    s = settled();
    cr_expect_eq(count(s, "\n GPU 7  "), 2, "GPU 7's grid row on both sides:\n%s", s);
    cr_expect_eq(count(s, "memory max GPU"), 2, "a memory line on both sides:\n%s", s);
    cr_expect(strstr(s, "q quit"), "%s", s);
    quit();
}
