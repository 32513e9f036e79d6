/* A ViT run's progress lines: the step counts the run's steps (--steps 200 ends at 200/200, not
 * at the epoch's 200/234), the epoch beside it, and a time left at the pace of the steps seen. */
#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cmd/report.h"
#include "tests/util.h"

/* What report_step_vit (bar: report_progress_bar) prints for step r at pace p. */
static char *progress_text(const StepReport *r, const StepPace *p, int bar) {
    char *text = NULL;
    size_t n = 0;
    FILE *f = open_memstream(&text, &n);
    cr_assert(f);
    if (bar)
        report_progress_bar(f, r, p);
    else
        report_step_vit(f, r, p, 0);
    fclose(f);
    return text;
}

/* A step of a run of `steps` in epochs of `per_epoch`, 256 images taking `wall` seconds. */
static StepReport step_of(long step, long steps, long per_epoch, double wall) {
    return (StepReport){.step = step,
                        .steps = steps,
                        .epoch = (int)((step - 1) / per_epoch),
                        .steps_per_epoch = per_epoch,
                        .wall_time = wall,
                        .images_per_s = 256.0 / wall,
                        .stats = {.loss = 0.5f}};
}

/* The workshop's complaint: --steps 200 in an epoch of 234 steps. Piped, steps 1 and 20 reach
 * the printer (a line every tenth of the run), each taking 1 s: at step 20 the 180 steps left
 * take 3:00 (per step seen; per step number it would say 0:18), and the run ends at 200/200. */
Test(progress, the_step_counts_the_runs_steps_and_the_eta_its_pace) {
    StepPace pace = {0};
    StepReport first = step_of(1, 200, 234, 1.0), twentieth = step_of(20, 200, 234, 1.0);
    step_pace_add(&pace, &first);
    char *a = progress_text(&first, &pace, 0);
    cr_expect_str_eq(a, "epoch 1/1  step     1/200  loss 0.5000     256 img/s  eta 3:19\n");
    step_pace_add(&pace, &twentieth);
    char *b = progress_text(&twentieth, &pace, 0);
    cr_expect_str_eq(b, "epoch 1/1  step    20/200  loss 0.5000     256 img/s  eta 3:00\n");
    StepReport last = step_of(200, 200, 234, 1.0);
    step_pace_add(&pace, &last);
    char *c = progress_text(&last, &pace, 0);
    cr_expect_str_eq(c, "epoch 1/1  step   200/200  loss 0.5000     256 img/s  eta 0:00\n");
    free(a), free(b), free(c);
}

/* Two epochs of 4 steps: the bar fills over the whole run and a line ends with each epoch. */
Test(progress, the_bar_fills_over_the_run_and_ends_a_line_each_epoch) {
    StepPace pace = {0};
    const char *want[] = {
        "\repoch 1/2 [###.....................]     1/8  loss 0.5000     128 img/s  eta 0:14 ",
        "\repoch 1/2 [############............]     4/8  loss 0.5000     128 img/s  eta 0:08 \n",
        "\repoch 2/2 [###############.........]     5/8  loss 0.5000     128 img/s  eta 0:06 ",
        "\repoch 2/2 [########################]     8/8  loss 0.5000     128 img/s  eta 0:00 \n"};
    const long steps[] = {1, 4, 5, 8};
    for (int i = 0; i < 4; i++) {
        StepReport r = step_of(steps[i], 8, 4, 2.0);
        step_pace_add(&pace, &r);
        char *got = progress_text(&r, &pace, 1);
        cr_expect_str_eq(got, want[i], "step %ld", steps[i]);
        free(got);
    }
}

/* The first `n` progress lines ("epoch ...  step ...", not an epoch's mean, "epoch 1/1:
 * training loss ...") of `out`, each up to its "loss", into lines. */
static int progress_lines(char *out, char lines[][32], int n) {
    int got = 0;
    for (char *line = strtok(out, "\n"); line && got < n; line = strtok(NULL, "\n")) {
        if (strncmp(line, "epoch ", 6) || !strstr(line, "  step ")) continue;
        char *loss = strstr(line, "  loss");
        cr_assert(loss, "%s", line);
        snprintf(lines[got++], 32, "%.*s", (int)(loss - line), line);
    }
    return got;
}

/* Piped, a short --steps run of a 1-block vit-tiny: "step k/4" in an epoch of 937 steps; and
 * 3 steps over epochs of 2 (10,000 test images, 4,000 a step): the epoch turns at step 3. */
Test(progress, a_piped_run_counts_to_its_steps) {
    char *out = fsdp_ok("train --model vit-tiny --layers 1 --ranks 2 --batch-size 32 --steps 4 "
                        "--eval false");
    cr_expect(strstr(out, "\nrun: 4 steps (an epoch is 937 steps of 64 images)\n"), "%s", out);
    char lines[8][32];
    cr_assert_eq(progress_lines(out, lines, 8), 4);
    for (int i = 0; i < 4; i++)
        cr_expect_str_eq(lines[i], fmt_text("epoch 1/1  step     %d/4", i + 1));
    free(out);
    out = fsdp_ok("train --model vit-tiny --layers 1 --hidden 16 --heads 2 --mlp 16 --split test "
                  "--ranks 2 --batch-size 2000 --steps 3 --eval false");
    cr_expect(strstr(out, "\nrun: 3 steps (an epoch is 2 steps of 4000 images)\n"), "%s", out);
    cr_assert_eq(progress_lines(out, lines, 8), 3);
    cr_expect_str_eq(lines[0], "epoch 1/2  step     1/3");
    cr_expect_str_eq(lines[1], "epoch 1/2  step     2/3");
    cr_expect_str_eq(lines[2], "epoch 2/2  step     3/3");
    free(out);
}
