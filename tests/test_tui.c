/* The terminal viewer for real: `fsdp viz` in a tmux session, driven with send-keys and read
 * back with capture-pane. Skipped where tmux is not installed. */
#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "util.h"

#define SESSION "fsdp_tui_test"

static int sh(const char *cmd) {
    return system(cmd);
}

/* The visible screen, as text. */
static void capture(char *buf, size_t n) {
    FILE *p = popen("tmux capture-pane -p -t " SESSION " 2>/dev/null", "r");
    size_t got = p ? fread(buf, 1, n - 1, p) : 0;
    buf[got] = 0;
    if (p) pclose(p);
}

/* Waits up to 5 s for `text` on the screen. */
static int shows(const char *text) {
    static char screen[1 << 16];
    for (int i = 0; i < 100; i++) {
        capture(screen, sizeof screen);
        if (strstr(screen, text)) return 1;
        usleep(50 * 1000);
    }
    fprintf(stderr, "screen without '%s':\n%s\n", text, screen);
    return 0;
}

static void keys(const char *k) {
    char cmd[256];
    snprintf(cmd, sizeof cmd, "tmux send-keys -t " SESSION " %s", k);
    cr_assert_eq(sh(cmd), 0);
}

Test(tui, keys_move_through_the_frames, .timeout = 60) {
    if (sh("command -v tmux >/dev/null 2>&1") != 0) cr_skip_test("tmux is not installed");
    const char *bin = fsdp_bin();
    char cmd[512];
    sh("tmux kill-session -t " SESSION " 2>/dev/null");
    snprintf(cmd, sizeof cmd,
             "tmux new-session -d -s " SESSION " -x 100 -y 30 'NO_COLOR=1 %s viz --ranks 3'", bin);
    cr_assert_eq(sh(cmd), 0);
    cr_expect(shows("event 1/339"));
    cr_expect(shows("GPU 0 allocates 4 B of param shard for La"));
    cr_expect(shows("|DDP"), "the memory legend with the DDP marker");
    keys("n n n");
    cr_expect(shows("event 4/339"));
    keys("p");
    cr_expect(shows("event 3/339"));
    keys("g 5 5 Enter");
    cr_expect(shows("event 55/339"));
    cr_expect(
        shows("GPU 0 needs a₀ a₁ a₂ for La, has a₀, gathers a₁ from GPU 1 and a₂ from GPU 2"));
    keys("b");
    cr_expect(shows("backward"));
    keys("h");
    cr_expect(shows("this help"));
    keys("x");
    cr_expect(shows("memory"));
    sh("tmux resize-window -t " SESSION " -x 40 -y 10 2>/dev/null");
    cr_expect(shows("too small: 40x10, needs 60x12"));
    sh("tmux resize-window -t " SESSION " -x 100 -y 30 2>/dev/null");
    cr_expect(shows("memory"));
    keys("q");
    for (int i = 0; i < 100 && sh("tmux has-session -t " SESSION " 2>/dev/null") == 0; i++)
        usleep(50 * 1000);
    cr_expect_neq(sh("tmux has-session -t " SESSION " 2>/dev/null"), 0, "q quits");
    sh("tmux kill-session -t " SESSION " 2>/dev/null");
}
