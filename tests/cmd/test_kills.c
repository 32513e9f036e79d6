/* Checkpoints killed while --keep prunes them (issue 39, case 6): pruning deleted a step's rank
 * files before its meta.json, so a kill between left a step that looked whole and was not (3
 * SIGTERMs in 20 found one). Now a step is renamed out of the step-N names first; the kill comes
 * where it hurt, through --kill-in-prune. */
#include <criterion/criterion.h>
#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "tests/util.h"

static char dir[256];

static void setup_dir(void) {
    fresh_test_dir(dir, sizeof dir, "kills", "t");
}

static void teardown_dir(void) {
    remove_test_dir(dir);
}

/* Every step-N in dir/ck passes ckpt inspect; returns how many there are. */
static int expect_every_step_whole(void) {
    DIR *d = opendir(fmt_text("%s/ck", dir));
    cr_assert(d);
    int steps = 0;
    struct dirent *e;
    while ((e = readdir(d))) {
        if (strncmp(e->d_name, "step-", 5)) continue;
        steps++;
        int code;
        char *out = fsdp_run(&code, "2>&1", "ckpt inspect %s/ck/%s", dir, e->d_name);
        cr_expect_eq(code, 0, "%s is not whole:\n%s", e->d_name, out);
        free(out);
    }
    closedir(d);
    return steps;
}

/* Killed half-way through removing step 3 (after its first file) once step 4 is saved: step 4
 * is whole, step 3 is out of the names readers take, and --resume auto goes on from step 4 to
 * the parameters of a run never killed, the next prune clearing what the kill left. */
Test(kills, a_kill_in_pruning_leaves_only_whole_steps, .init = setup_dir, .fini = teardown_dir,
     .timeout = 120) {
    const char *run = "train --model toy --ranks 3 --steps 8 --checkpoint-every 1 --keep 1";
    int code;
    char *out = fsdp_run(&code, "2>&1", "%s --checkpoint-dir %s/ck --kill-in-prune 4", run, dir);
    cr_expect(code == -1 || code == 128 + 9, "the process was killed (%d): %s", code, out);
    free(out);
    cr_expect_eq(expect_every_step_whole(), 1, "step 4 alone is a checkpoint");
    cr_expect_eq(access(fmt_text("%s/ck/.step-00000003.removing", dir), F_OK), 0,
                 "step 3 was retired before its files went");
    free(fsdp_ok("%s --checkpoint-dir %s/ck --resume auto --dump-params %s/resumed.txt", run, dir,
                 dir));
    free(fsdp_ok("%s --checkpoint-dir %s/ck2 --dump-params %s/whole.txt", run, dir, dir));
    cr_expect_leq(dump_rel_diff(fmt_text("%s/resumed.txt", dir), fmt_text("%s/whole.txt", dir)),
                  1e-6, "the resumed run ends where the uninterrupted one does");
    cr_expect_neq(access(fmt_text("%s/ck/.step-00000003.removing", dir), F_OK), 0,
                  "the next prune finished the removal");
    cr_expect_eq(expect_every_step_whole(), 1);
}
