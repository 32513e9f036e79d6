/* The terminal viewer for real: `fsdp viz` in a tmux session, driven with send-keys and read
 * back with capture-pane. Skipped where tmux is not installed. Each test has its own tmux
 * server (-L, named after the test and its process: they run in parallel, here and in other
 * checkouts of the same user), which its .fini kills, removing its socket. */
#include <criterion/criterion.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "base/clock.h"
#include "io/trace_file.h"
#include "tests/util.h"

static char session[48];

static int sh(const char *cmd) {
    return system(cmd);
}

/* tmux -L SESSION ARGS... run without a shell (the tests that step through hundreds of
 * events call it twice an event); what it prints goes to out (n bytes, NUL-terminated) when
 * out is not NULL. Returns its exit status, -1 when it could not run. */
static int tmux(char *out, size_t n, const char *a, const char *b, const char *c, const char *d) {
    char *argv[] = {"tmux", "-L", session, (char *)a, (char *)b, (char *)c, (char *)d, NULL};
    int fd[2];
    if (pipe(fd)) return -1;
    pid_t pid = fork();
    if (pid == 0) {
        int null = open("/dev/null", O_WRONLY);
        dup2(fd[1], STDOUT_FILENO);
        dup2(null, STDERR_FILENO);
        close(fd[0]);
        execvp("tmux", argv);
        _exit(127);
    }
    close(fd[1]);
    size_t got = 0;
    char sink[4096];
    for (ssize_t r = 1; r > 0;) {
        r = out ? read(fd[0], out + got, n - 1 - got) : read(fd[0], sink, sizeof sink);
        if (r > 0 && out) got += (size_t)r;
        if (out && got == n - 1) break;
    }
    close(fd[0]);
    if (out) out[got] = 0;
    int status = 0;
    if (pid < 0 || waitpid(pid, &status, 0) < 0) return -1;
    return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

/* The visible screen, as text. */
static const char *screen(void) {
    static char buf[1 << 16];
    if (tmux(buf, sizeof buf, "capture-pane", "-p", "-t", session)) buf[0] = 0;
    return buf;
}

/* Presses one key (a tmux key name: "c", "Enter"). */
static void key(const char *k) {
    cr_assert_eq(tmux(NULL, 0, "send-keys", "-t", session, k), 0, "send-keys %s", k);
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

/* 20 s: a passing check returns at the first screen that has its text, and a machine busy with
 * other test suites once kept a redraw from a 5 s window. */
static int shows(const char *text) {
    return shows_within(text, 20);
}

/* Waits up to 20 s for `text` to leave the screen. */
static int hides(const char *text) {
    const char *s = "";
    for (int i = 0; i < 400; i++) {
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

/* Whether `early` is on the screen before `late` is (polled every 10 ms for `seconds`). */
static int first_of(const char *early, const char *late, int seconds) {
    const char *s = "";
    for (int i = 0; i < seconds * 100; i++) {
        s = screen();
        if (strstr(s, early)) return 1;
        if (strstr(s, late)) break;
        usleep(10 * 1000);
    }
    fprintf(stderr, "screen without '%s' (before '%s'):\n%s\n", early, late, s);
    return 0;
}

/* Presses `k`, then whether the screen shows `text` within 5 s. */
static int shows_after(const char *k, const char *text) {
    keys(k);
    return shows(text);
}

/* `fsdp viz ARGS` in a new w x h session named after the test. The pane outlives the viewer
 * and says how it exited: its error message stays readable, and tmux does not fail the start
 * when a viewer exits at once. */
static void start_viewer(const char *name, int w, int h, const char *args) {
    if (sh("command -v tmux >/dev/null 2>&1") != 0) cr_skip_test("tmux is not installed");
    snprintf(session, sizeof session, "fsdp_tui_%s_%d", name, (int)getpid());
    char cmd[512];
    snprintf(cmd, sizeof cmd, "tmux -L %s kill-server 2>/dev/null", session);
    sh(cmd);
    snprintf(cmd, sizeof cmd,
             "tmux -L %s new-session -d -s %s -x %d -y %d "
             "'NO_COLOR=1 %s viz %s; echo \"fsdp exited with $?\"; sleep 60'",
             session, session, w, h, fsdp_bin(), args);
    cr_assert_eq(sh(cmd), 0);
}

/* The viewer event by event (--by-event), as most tests here step it. */
static void start(const char *name, int w, int h, const char *args) {
    char by_event[480];
    snprintf(by_event, sizeof by_event, "--by-event %s", args);
    start_viewer(name, w, h, by_event);
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
    if (!session[0]) return;
    char kill[256], socket[512];
    snprintf(kill, sizeof kill, "tmux -L %s kill-server 2>/dev/null", session);
    sh(kill);
    /* tmux leaves the socket file behind; it is where tmux puts it (tmux(1), -L) */
    const char *dir = getenv("TMUX_TMPDIR");
    snprintf(socket, sizeof socket, "%s/tmux-%d/%s", dir && *dir ? dir : "/tmp", (int)getuid(),
             session);
    unlink(socket);
}

/* A TERM ncurses has no entry for: one line of ours and exit 2, not ncurses' own message (its
 * initscr prints and exits 1). */
Test(tui, unknown_term_is_one_line_and_exit_2, .fini = stop) {
    if (sh("command -v tmux >/dev/null 2>&1") != 0) cr_skip_test("tmux is not installed");
    snprintf(session, sizeof session, "fsdp_tui_term_%d", (int)getpid());
    char cmd[512];
    snprintf(cmd, sizeof cmd,
             "tmux -L %s new-session -d -s %s -x 80 -y 24 "
             "'TERM=nosuchterm %s viz --model toy --ranks 2; echo \"fsdp exited with $?\"; "
             "sleep 60'",
             session, session, fsdp_bin());
    cr_assert_eq(sh(cmd), 0);
    cr_assert(shows("fsdp exited with 2"));
    const char *s = settled();
    cr_expect(strstr(s, "fsdp: the viewer cannot drive this terminal (TERM=nosuchterm)"), "%s", s);
    cr_expect(!strstr(s, "Error opening terminal"), "not ncurses' message:\n%s", s);
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
    cr_expect(shows("|DDP here"), "the memory legend labels the DDP mark");
    const char *s = settled();
    cr_expect(!strstr(s, "params kept"), "the toy's cells are symbols, not counts:\n%s", s);
    cr_expect(strstr(s, "\n GPU 2  compute ") && !strstr(s, "timeline hidden"),
              "100x30 has room for the whole timeline:\n%s", s);
    cr_expect(shows_after("n n n", "event 4/339"));
    cr_expect(shows_after("p", "event 3/339"));
    cr_expect(shows_after("g 5 5 Enter", "event 55/339"));
    cr_expect(shows("GPU 0 needs a₀ a₁ a₂ for La, has a₀"));
    cr_expect(shows_after("b", "backward"));
    cr_expect(shows_after("h", "this help"));
    cr_expect(shows("DDP beside this run"), "the help names key d");
    cr_expect(shows_after("x", "memory"));
    resize(62, 30);
    cr_expect(shows("\n GPU 0  compute "), "62 columns have room for a timeline");
    cr_expect_eq(strlen(row_of(settled(), " GPU 0  compute ")), 16 + 45, "across the width");
    resize(40, 10);
    cr_expect(shows("too small: 40x10, needs 60x12"));
    resize(100, 30);
    cr_expect(shows("memory"));
    /* a terminal resized while a number is typed keeps what was typed and what follows */
    keys("g 7");
    cr_expect(shows("go to event: 7"), "g asks for a number");
    resize(110, 30);
    for (int i = 0; i < 100 && strlen(row_of(screen(), " GPU 0  compute ")) < 16 + 90; i++)
        usleep(50 * 1000); /* the frame drawn again at 110 columns */
    cr_expect(strstr(settled(), "\n go to event: 7"), "the prompt outlives the resize:\n%s",
              settled());
    cr_expect(shows_after("0 Enter", "event 70/339"), "g 7 (resize) 0 Enter goes to 70");
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

/* The cells of `letter` in the first " GPU 0  [" bar after `heading` of screen s. */
static int bar_cells_of(const char *s, const char *heading, char letter) {
    const char *at = strstr(s, heading);
    at = at ? strstr(at, " GPU 0  [") : NULL;
    int n = 0;
    for (at = at ? at + strlen(" GPU 0  [") : NULL; at && *at && *at != ']'; at++)
        n += *at == letter;
    return n;
}

/* Issue 38's two moments of d, on the toy under zero3: at 80x24, GPU 0's reduce-scatter of Lc
 * (event 208 then; event 190 since the engine's own kernels take time, before Lb's backward)
 * beside DDP's GPU 0 just past the frees of what Lc's backward read, not GPU 2 past its frees
 * at event 93, DDP holding more (304 B) than zero3 (256 B); at 120x40, event 76 (GPU 0 frees
 * La after its forward) beside DDP's GPU 0 forward of La, not event 51. The run's bars mark the
 * same DDP bytes. */
Test(tui, d_is_at_the_same_computation_on_the_same_gpu, .timeout = 60, .fini = stop) {
    start("ddp_same", 80, 24, "--ranks 3 --strategy zero3");
    cr_assert(shows("event 1/339"));
    keys("g 1 9 0 Enter");
    cr_assert(shows("event 190/339  step 1  backward  GPU 0  reduce_scatter Lc"));
    cr_expect(shows("DDP 304 B"), "GPU 0's bar says what DDP holds there");
    const char *s = settled();
    cr_expect(strstr(row_of(s, " GPU 0  ["), "] 256 B (peak 312 B) DDP 304 B"), "%s", s);
    keys("d");
    cr_assert(shows("DDP at the same point: event 76/159, GPU 0 free"));
    s = settled();
    cr_expect(strstr(s, "memory max GPU 0: 256 B (peak 312 B), DDP here 304 B"), "%s", s);
    cr_expect(strstr(s, "memory max GPU 0: 304 B (peak 368 B)"), "DDP's side:\n%s", s);
    resize(120, 40);
    keys("g 7 6 Enter");
    cr_expect(shows("DDP at the same point: event 46/159, GPU 0 forward La"));
    quit();
}

/* The bars keep every category that holds anything: the toy at rest (event 295: 12 B of shards,
 * 12 B of gradient shards, 24 B of Adam's moments on each GPU) shows P as often as G and O at
 * least as often, beside DDP's 144 B; at Lb's backward all seven categories show, and the
 * note says that activations are most of GPU 0's bytes and FSDP does not shard them. */
Test(tui, bars_show_every_category_and_ddp_at_the_same_point, .timeout = 60, .fini = stop) {
    start("bars", 80, 24, "--ranks 3 --strategy zero3");
    cr_assert(shows("event 1/339"));
    cr_expect(shows("|DDP here"), "the legend names the mark");
    keys("g 2 9 5 Enter");
    cr_assert(shows("event 295/339"));
    cr_expect(shows("48 B (peak 312 B) DDP 144 B"));
    const char *s = settled();
    int p = bar_cells_of(s, "memory:", 'P'), g = bar_cells_of(s, "memory:", 'G'),
        o = bar_cells_of(s, "memory:", 'O');
    cr_expect(p >= 1 && p == g && o >= p, "P %d, G %d, O %d cells:\n%s", p, g, o, s);
    cr_expect(!strstr(s, "is activations"), "no note while activations are few:\n%s", s);
    keys("g 2 0 8 Enter");
    cr_assert(shows("event 208/339"));
    s = settled();
    for (const char *c = "PUGgOAC"; *c; c++)
        cr_expect_geq(bar_cells_of(s, "memory:", *c), 1, "%c in GPU 0's bar:\n%s", *c, s);
    cr_expect(strstr(s, "65% of GPU 0 is activations: FSDP shards params, grads, optim state, "
                        "not these"),
              "%s", s);
    resize(120, 40);
    cr_expect(shows("activations are 65% of GPU 0's 296 B: FSDP shards parameters, gradients "
                    "and optimizer state, not activations"));
    quit();
}

/* Offload keeps each GPU's shards, gradients and Adam's moments on the host: a GPU's bar and its
 * figures are the GPU's own (no H in the bar, nor in the legend), and the host's 48 B are said
 * after them, as the memory table shows them apart. */
Test(tui, offload_keeps_the_host_out_of_the_gpu_bars, .timeout = 60, .fini = stop) {
    start("offload", 100, 30, "--ranks 3 --strategy zero3 --offload cpu");
    cr_assert(shows("event 1/366"));
    keys("g 1 0 0 Enter");
    cr_assert(shows("event 100/366"));
    const char *s = settled();
    cr_expect(strstr(row_of(s, " GPU 0  ["), "] 128 B (peak 128 B) + host 48 B"), "%s", s);
    cr_expect_eq(bar_cells_of(s, "memory:", 'H'), 0, "no host in GPU 0's bar:\n%s", s);
    cr_expect_geq(bar_cells_of(s, "memory:", 'A'), 1, "%s", s);
    cr_expect(!strstr(s, "H host"), "the legend names only what a GPU holds:\n%s", s);
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
    cr_expect(first_of("running the same step under DDP", "DDP at the same point", 20),
              "a line says the DDP run is on its way before it is there");
    cr_assert(shows_within("DDP at the same point", 20));
    s = settled();
    cr_expect_eq(count(s, "\n GPU 7  "), 2, "GPU 7's grid row on both sides:\n%s", s);
    cr_expect_eq(count(s, "memory max GPU"), 2, "a memory line on both sides:\n%s", s);
    cr_expect(strstr(s, "q quit"), "%s", s);
    quit();
}

/* ---------------------------------------------------------------- the key map, step by step */

/* The run `fsdp viz ARGS` shows, as its trace file records it (the simulator is deterministic:
 * the viewer started with the same flags shows the same events), with its unit names. */
static void recorded(const char *args, Trace *t, TraceMeta *meta) {
    char path[96];
    snprintf(path, sizeof path, "/tmp/fsdp_tui_trace_%d.json", (int)getpid());
    int code = 0;
    free(fsdp_run(&code, ">/dev/null 2>&1", "viz %s --events 1 --trace-out %s", args, path));
    cr_assert_eq(code, 0, "viz %s --trace-out %s", args, path);
    Err err = {0};
    cr_assert_eq(trace_file_read(path, t, meta, &err), 0, "%s", err.msg);
    unlink(path);
}

/* The screen once its header reads event n of total (polled every 5 ms for up to 60 s: a loaded
 * machine, with the test suite's other job beside it, can take seconds to redraw), or NULL. */
static const char *at_event(size_t n, size_t total) {
    char want[64];
    snprintf(want, sizeof want, " event %zu/%zu ", n, total);
    const char *s = "";
    for (double until = clock_seconds() + 60.0; clock_seconds() < until;) {
        s = screen();
        if (!strncmp(s, want, strlen(want))) return s;
        usleep(5 * 1000);
    }
    fprintf(stderr, "screen without '%s':\n%s\n", want, s);
    return NULL;
}

/* The key map read literally from the trace, one event at a time (the help screen's words; c, C,
 * k, K: tests/util.h's trace_seek). f/b/o: the first event of `phase` in the current step; from
 * past the step's last phased event, the next step's. */
static size_t phase_start(const Trace *t, size_t from, Phase phase) {
    int step = t->ev[from].step, over = 1;
    for (size_t i = from; i < t->n; i++)
        if (t->ev[i].step == step && t->ev[i].phase != PHASE_NONE) over = 0;
    if (over) step++;
    for (size_t i = 0; i < t->n; i++)
        if (t->ev[i].step == step && t->ev[i].phase == (int)phase) return i;
    return from;
}

/* Presses `key` at event `from` (0-based) and checks that the header then reads event `want`;
 * returns want. */
static size_t press(const Trace *t, size_t from, const char *key, size_t want) {
    keys(key);
    cr_assert_neq(want, from, "'%s' from event %zu: a move the screen shows", key, from + 1);
    cr_assert(at_event(want + 1, t->n), "'%s' from event %zu should land on event %zu", key,
              from + 1, want + 1);
    return want;
}

/* Each key of the map from where the trace makes it interesting, on the toy's two steps:
 * c/C between collectives, k/K between computes, f/b/o to the starts of the phases (back from
 * later in the step, on to the next step from the events between steps, nowhere from the
 * teardown, which the key line then says), n/space/right and p/left one event. */
Test(tui, every_key_lands_where_the_trace_says, .timeout = 90, .fini = stop) {
    const char *args = "--ranks 3 --steps 2";
    Trace t;
    TraceMeta meta;
    recorded(args, &t, &meta);
    start("keymap", 100, 30, args);
    cr_assert(at_event(1, t.n));
    size_t at = 0;
    at = press(&t, at, "c", trace_seek(&t, at, 1, trace_event_is_collective));
    cr_expect_eq(t.ev[at].kind, EV_ALL_GATHER, "the first collective gathers");
    at = press(&t, at, "c", trace_seek(&t, at, 1, trace_event_is_collective));
    at = press(&t, at, "c", trace_seek(&t, at, 1, trace_event_is_collective));
    at = press(&t, at, "C", trace_seek(&t, at, -1, trace_event_is_collective));
    at = press(&t, at, "k", trace_seek(&t, at, 1, trace_event_is_compute));
    at = press(&t, at, "k", trace_seek(&t, at, 1, trace_event_is_compute));
    at = press(&t, at, "K", trace_seek(&t, at, -1, trace_event_is_compute));
    cr_expect(trace_event_is_compute(&t.ev[at]));
    at = press(&t, at, "b", phase_start(&t, at, PHASE_BACKWARD));
    cr_expect_eq(t.ev[at].step, 0);
    at = press(&t, at, "o", phase_start(&t, at, PHASE_OPTIMIZER));
    cr_expect_eq(t.ev[at].phase, PHASE_OPTIMIZER);
    at = press(&t, at, "f", phase_start(&t, at, PHASE_FORWARD));
    cr_expect_eq(t.ev[at].step, 0, "f from step 1's optimizer goes back to its forward");
    at = press(&t, at, "Right", at + 1);
    at = press(&t, at, "Space", at + 1);
    at = press(&t, at, "n", at + 1);
    at = press(&t, at, "Left", at - 1);
    at = press(&t, at, "p", at - 1);
    /* the events between the two steps: f and o go on to step 2's */
    size_t between = phase_start(&t, 0, PHASE_OPTIMIZER);
    while (t.ev[between].phase == PHASE_OPTIMIZER) between++;
    cr_assert_eq(t.ev[between].phase, PHASE_NONE);
    keys(fmt_text("g %zu Enter", between + 1));
    at = between;
    cr_assert(at_event(at + 1, t.n));
    at = press(&t, at, "f", phase_start(&t, at, PHASE_FORWARD));
    cr_expect_eq(t.ev[at].step, 1, "f between the steps: step 2's forward");
    at = press(&t, at, "o", phase_start(&t, at, PHASE_OPTIMIZER));
    cr_expect_eq(t.ev[at].step, 1);
    cr_expect_eq(t.ev[at].phase, PHASE_OPTIMIZER);
    /* the teardown: no step after it */
    keys(fmt_text("g %zu Enter", t.n));
    cr_assert(at_event(t.n, t.n));
    cr_expect(shows_after("f", "no forward phase in this step or after it"));
    cr_expect(at_event(t.n, t.n), "f stayed");
    cr_expect(shows_after("c", "no collective after this event"));
    trace_free(&t);
    trace_meta_free(&meta);
    quit();
}

/* 80x24, the documented minimum: the toy under zero3 keeps the rows its longest narration takes,
 * so every event's "why" is whole (issue 38: at event 165 it ended "gather…"); none is cut. */
Test(tui, toy_narration_is_never_cut_at_80x24, .timeout = 120, .fini = stop) {
    start("wrap", 80, 24, "--ranks 3 --strategy zero3");
    const char *s = at_event(1, 339);
    for (size_t i = 1; s && i <= 339; i++) {
        if (i > 1) {
            key("n");
            s = at_event(i, 339);
        }
        cr_assert(s && !strstr(s, "\u2026"), "event %zu is cut:\n%s", i, s ? s : "");
    }
    s = settled();
    cr_expect(strstr(s, "q quit"), "the key line at the bottom:\n%s", s);
    quit();
}

/* The header of the presenter's frame n of `total`, once the screen shows it. */
static const char *at_frame(size_t n, size_t total) {
    char want[64];
    snprintf(want, sizeof want, " frame %zu/%zu ", n, total);
    const char *s = "";
    for (double until = clock_seconds() + 60.0; clock_seconds() < until;) {
        s = screen();
        if (!strncmp(s, want, strlen(want))) return s;
        usleep(5 * 1000);
    }
    fprintf(stderr, "screen without '%s':\n%s\n", want, s);
    return NULL;
}

/* Whether the toy's narration on screen s is whole: no "…" above the collective's flow, the row
 * just above the grid's unit names (the flow may give its second row to the timeline). */
static int toy_narration_whole(const char *s) {
    const char *grid = strstr(s, "\n         La ");
    if (!grid) return 0;
    const char *flow = grid;
    while (flow > s && flow[-1] != '\n') flow--;
    const char *cut = strstr(s, "\u2026");
    return !cut || cut >= flow;
}

/* The presenter's step, as `make viz` opens it at 80x24: f goes to the first all-gather (not
 * the comm buffer allocated before it), n from there reaches the optimizer within 40 frames,
 * every frame's sentence whole; e shows the same place event by event and back. */
Test(tui, presenter_step_first_all_gather_to_optimizer_at_80x24, .timeout = 120, .fini = stop) {
    start_viewer("present", 80, 24, "--model toy --ranks 3 --strategy zero3");
    const char *s = at_frame(1, 21);
    cr_assert(s, "the viewer opens on the presenter's first frame");
    cr_expect(strstr(s, "setup  allocations and frees"), "%s", s);
    key("f");
    s = at_frame(2, 21);
    cr_assert(s && strstr(row_of(s, " frame 2/21"), "all_gather La"), "f: the first all-gather");
    cr_expect(strstr(s, "all GPUs"), "one frame for every GPU's part:\n%s", s);
    size_t frames = 1;
    for (size_t at = 2; !strstr(row_of(s, " frame "), "optimizer"); at++) {
        cr_assert(toy_narration_whole(s), "frame %zu is cut:\n%s", at, s);
        cr_assert_lt(at, 21, "no optimizer frame");
        key("n");
        s = at_frame(at + 1, 21);
        cr_assert(s);
        frames++;
    }
    cr_expect_leq(frames, 40, "%zu frames from the first all-gather to the optimizer", frames);
    cr_expect(strstr(row_of(s, " frame "), "optimizer La"), "%s", s);
    for (size_t at = 1 + frames + 1; at <= 21; at++) { /* the rest of the step, none cut */
        key("n");
        s = at_frame(at, 21);
        cr_assert(s && toy_narration_whole(s), "frame %zu is cut:\n%s", at, s ? s : "");
    }
    cr_expect(shows_after("n", "this is the last frame"));
    keys("g 2 Enter");
    cr_assert(at_frame(2, 21), "g: go to a frame");
    key("e"); /* the same place, event by event: the all-gather's own event */
    s = at_event(55, 339);
    cr_assert(s && strstr(row_of(s, " event 55/339"), "all_gather La"), "e: the event view");
    key("n");
    cr_assert(at_event(56, 339));
    key("e");
    cr_expect(at_frame(2, 21), "e again: the frame that holds event 56");
    quit();
}

/* ---------------------------------------------------------------- the grid follows the unit */

/* The grid's row of unit names in screen s: the row above its first rank row (" GPU 0   ";
 * narration reads " GPU 0 gathers", the memory bars " GPU 0  ["), or "". */
static const char *grid_units_row(const char *s) {
    static char row[1024];
    const char *end = strstr(s, "\n GPU 0   "), *at = end;
    row[0] = 0;
    if (!end) return row;
    while (at > s && at[-1] != '\n') at--;
    snprintf(row, sizeof row, "%.*s", (int)(end - at), at);
    return row;
}

/* Whether `word` is in row with a space or the row's edge on either side. */
static int has_word(const char *row, const char *word) {
    size_t n = strlen(word);
    for (const char *at = row; (at = strstr(at, word)); at++)
        if ((at == row || at[-1] == ' ') && (at[n] == ' ' || at[n] == 0)) return 1;
    return 0;
}

/* From event 1, key c through every collective of t: at each, the header names the event (its
 * kind and unit) and the grid's row of unit names holds that unit, whichever units the width
 * leaves out; the numbers are labelled and so is the DDP mark. Returns how many collectives
 * of a unit it checked. */
static size_t every_collective_in_view(const Trace *t, const TraceMeta *m, const char *size) {
    keys("g 1 Enter");
    cr_assert(at_event(1, t->n), "%s", size);
    size_t checked = 0;
    for (size_t i = 0; i < t->n; i++) {
        const TraceEvent *e = &t->ev[i];
        if (!trace_event_is_collective(e)) continue;
        key("c");
        const char *s = at_event(i + 1, t->n);
        cr_assert(s, "%s: c should land on event %zu", size, i + 1);
        if (e->unit < 0) continue;
        const char *unit = m->units[e->unit];
        char header[128];
        snprintf(header, sizeof header, "%s %s", event_kind_name((EventKind)e->kind), unit);
        /* a capture can catch a redraw halfway: look again before calling it wrong */
        int ok = 0;
        for (double until = clock_seconds() + 20.0; clock_seconds() < until;) {
            ok = strstr(row_of(s, " event "), header) && has_word(grid_units_row(s), unit);
            if (ok) break;
            usleep(5 * 1000);
            s = screen();
        }
        cr_assert(ok, "%s, event %zu: the header names %s and the grid's units are '%s':\n%s", size,
                  i + 1, header, grid_units_row(s), s);
        if (!checked) {
            cr_expect(strstr(row_of(s, " GPU 0   "), "\u2190 params kept"),
                      "%s: the numbers' label beside GPU 0's row:\n%s", size, s);
            cr_expect(strstr(s, "|DDP here"), "%s: the DDP mark's label:\n%s", size, s);
        }
        checked++;
    }
    cr_expect(shows_after("c", "no collective after this event"), "%s", size);
    return checked;
}

/* `fsdp viz --model vit-tiny --ranks N` at 120x40, its trace, and how many all-gathers and
 * reduce-scatters of a unit its step has, checked against the schedule: forward gathers every
 * unit, backward again all but the root (kept from forward), and every unit's gradients are
 * reduce-scattered, on each rank. */
static size_t vit_tiny_viewer(int ranks, Trace *t, TraceMeta *m) {
    char args[64];
    snprintf(args, sizeof args, "--model vit-tiny --ranks %d", ranks);
    recorded(args, t, m);
    size_t gathers = 0, scatters = 0;
    for (size_t i = 0; i < t->n; i++) {
        gathers += t->ev[i].kind == EV_ALL_GATHER && t->ev[i].unit >= 0;
        scatters += t->ev[i].kind == EV_REDUCE_SCATTER && t->ev[i].unit >= 0;
    }
    cr_assert_eq(m->nunits, 11, "root and 10 encoder layers");
    cr_assert_eq(gathers, (size_t)ranks * (2 * 11 - 1), "%zu all-gathers", gathers);
    cr_assert_eq(scatters, (size_t)ranks * 11, "%zu reduce-scatters", scatters);
    start(fmt_text("grid%d", ranks), 120, 40, args);
    cr_assert(at_event(1, t->n));
    return gathers + scatters;
}

/* Every all-gather and reduce-scatter of every unit at 4 ranks, at 120x40 (5 of the 11 units
 * fit) and 80x24 (3 fit); then keys < and > move the window and the next event brings the
 * unit back. */
Test(tui, vit_tiny_grid_shows_the_unit_of_every_collective_4_ranks, .fini = stop) {
    Trace t;
    TraceMeta m;
    size_t collectives = vit_tiny_viewer(4, &t, &m);
    cr_expect_eq(every_collective_in_view(&t, &m, "120x40"), collectives);
    resize(80, 24);
    cr_expect_eq(every_collective_in_view(&t, &m, "80x24"), collectives);
    /* at GPU 0's all-gather of encoder_layer_7 (unit 8) the window is units 6-8 */
    keys("g 8 2 5 Enter");
    cr_assert(shows("event 825/2792  step 1  forward  GPU 0  all_gather encoder_layer_7"));
    const char *s = settled();
    cr_expect(strstr(grid_units_row(s), "\u21906 units encoder_layer_5 "), "%s", s);
    cr_expect(strstr(grid_units_row(s), "encoder_layer_7   2 more units \u2192"), "%s", s);
    keys("'<'");
    cr_expect(shows("\u21905 units encoder_layer_4 "));
    cr_expect(strstr(grid_units_row(settled()), "encoder_layer_6   3 more units \u2192"));
    keys("'>'");
    cr_expect(shows("\u21906 units encoder_layer_5 "));
    keys("'<' '<'");
    cr_expect(shows("\u21904 units encoder_layer_3 "));
    keys("n");
    cr_expect(shows("event 826/2792"));
    cr_expect(shows("\u21906 units encoder_layer_5 "), "the next event's unit back in view");
    trace_free(&t);
    trace_meta_free(&m);
    quit();
}

/* The same at 8 ranks. At 120x40 the panels (with the row of the note on activations) leave 11
 * rows: the timeline of GPUs 0-2 (2 rows and 2 a GPU after a blank one). At 80x24 it is hidden and
 * a row says what it needs: without what gives way to it the panels take 25 of the 22 rows
 * (narration 6, the longest's, flow 1, grid 9, memory 9), its GPU 0 4 more, so 7 more rows; all 8
 * GPUs with the full panels (the flow's second row, blank rows and the note on activations: 5
 * more) 27. */
Test(tui, vit_tiny_grid_shows_the_unit_of_every_collective_8_ranks, .fini = stop) {
    Trace t;
    TraceMeta m;
    size_t collectives = vit_tiny_viewer(8, &t, &m);
    cr_expect_eq(every_collective_in_view(&t, &m, "120x40"), collectives);
    const char *s = settled();
    cr_expect(strstr(s, "\n GPUs 0-2 of 8  |forward"), "%s", s);
    cr_expect(strstr(s, "\n GPU 2  compute ") && !strstr(s, "\n GPU 3  compute "), "%s", s);
    cr_expect(!strstr(s, "timeline hidden"), "%s", s);
    resize(80, 24);
    cr_expect(shows("timeline hidden: needs 7 more rows (27 for all 8 GPUs)"));
    cr_expect(!strstr(settled(), "|forward"));
    cr_expect_eq(every_collective_in_view(&t, &m, "80x24"), collectives);
    trace_free(&t);
    trace_meta_free(&m);
    quit();
}

/* Issue 38: vit-tiny at 4 ranks on 80x24 hid the timeline, and at key o its bars showed no
 * parameter shard ("[GO..."). Now GPU 0's timeline keeps its rows (the flow's second row, the
 * blank rows and the note on activations give way to it) and the bars show P. */
Test(tui, vit_tiny_at_4_ranks_keeps_gpu_0s_timeline_and_its_shard_at_80x24, .timeout = 60,
     .fini = stop) {
    start("vit4", 80, 24, "--model vit-tiny --ranks 4");
    cr_assert(shows_within("event 1/2792", 20));
    keys("o");
    cr_assert(shows("step 1  optimizer  GPU 0  optimizer root"));
    const char *s = settled();
    cr_expect(strstr(row_of(s, " GPU 0  ["), "[PGO"), "the shard, gradient shard and Adam:\n%s", s);
    cr_expect(strstr(s, "\n GPU 0 of 4     |"), "the phases' row:\n%s", s);
    cr_expect(strstr(s, "\n GPU 0  compute ") && strstr(s, "\n        comm    "), "%s", s);
    cr_expect(strstr(s, "s, modelled   0"), "the time axis:\n%s", s);
    cr_expect(!strstr(s, "timeline hidden"), "%s", s);
    cr_expect(!strstr(s, "\u2026"), "nothing cut:\n%s", s);
    quit();
}

/* The toy at 120x40: the timeline spans the width (103 columns after its 16 of labels and one
 * spare), its phases' row names forward, backward and the optimizer with the 'v' of Lc's
 * reduce-scatter in backward, and its axis ticks the 74 us step. */
Test(tui, timeline_is_labelled_across_the_width, .timeout = 60, .fini = stop) {
    start("axis", 120, 40, "--ranks 3 --strategy zero3");
    cr_assert(shows("event 1/339"));
    keys("g 2 0 8 Enter");
    cr_assert(shows("event 208/339"));
    const char *s = settled();
    const char *phases = row_of(s, " timeline       |forward");
    cr_expect(phases[0], "the phases' row:\n%s", s);
    /* backward's run starts with '|', its name clear of the 'v' */
    const char *f = strstr(phases, "|forward"), *b = strstr(phases, "backward"),
               *o = strstr(phases, "|optimizer"), *v = strchr(phases + 16, 'v');
    const char *run = b ? b : phases;
    while (run > phases && *run != '|') run--;
    cr_expect(f && b && o && v && f < run && run < v && v < o && b < o,
              "the cursor in backward: '%s'", phases);
    cr_expect_eq(strlen(row_of(s, " GPU 2  compute ")), 16 + 103, "%s", s);
    const char *axis = row_of(s, " us, modelled   0 ");
    cr_expect(strstr(axis, " 20 ") && strstr(axis, " 40 ") && strstr(axis, " 60"), "axis '%s'",
              axis);
    quit();
}

/* The seed's model, vit-workshop at 8 ranks, which a computed run cannot hold on this machine:
 * accounting-only, the header says so and the memory bars stack its categories in GiB as for
 * any run (in encoder_layer_0's forward: shards P, the gathered root and layer U, gradient
 * shards G, Adam's moments O, activations A, comm buffers C); d runs DDP accounting-only too. */
Test(tui, vit_workshop_accounting_only_has_memory_by_category, .timeout = 60, .fini = stop) {
    start("vitws", 120, 40, "--model vit-workshop --ranks 8 --accounting-only");
    cr_expect(shows("event 1/6608"));
    cr_expect(shows("accounting only"), "the header says nothing is computed");
    cr_expect(shows_after("g 7 0 0 Enter", "event 700/6608  step 1  forward  GPU 3  forward "
                                           "encoder_layer_0  accounting only"));
    const char *s = settled();
    const char *bar = row_of(s, " GPU 0  [");
    cr_expect(strstr(bar, "[P") && strstr(bar, "U") && strstr(bar, "G") && strstr(bar, "O") &&
                  strstr(bar, "A") && strstr(bar, "C") && strstr(bar, " GiB (peak ") &&
                  strstr(bar, " GiB) DDP 11.76 GiB"),
              "GPU 0's bar by category, and DDP's bytes at the same point:\n%s", s);
    cr_expect(strstr(s, "P shard U gathered"), "the legend:\n%s", s);
    keys("d");
    cr_expect(shows("DDP at the same point: event 588/4584, GPU 3 forward encoder_layer_0"),
              "DDP beside it, accounting-only too");
    /* every parameter, its gradient and Adam's two moments (11.61 GiB), and the activations
     * zero3's GPU 0 holds too */
    cr_expect(shows("DDP here 11.76 GiB"));
    cr_expect(shows("memory max GPU 0: 11.76 GiB"), "DDP's side, the same bytes");
    quit();
}
