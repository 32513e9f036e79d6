/* curves.svg's drawing: points where the axes put them, a long run drawn a point per pixel
 * column, the accuracy panel only with accuracy, text escaped, and a picture librsvg renders. */
#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "sim/viz/curves.h"
#include "tests/util.h"

/* What a shell command printed (free it); *status: its exit status. */
static char *command_output(const char *cmd, int *status) {
    FILE *p = popen(cmd, "r");
    cr_assert(p, "%s", cmd);
    char *text = NULL;
    size_t n = 0;
    FILE *out = open_memstream(&text, &n);
    int c;
    while ((c = fgetc(p)) != EOF) fputc(c, out);
    fclose(out);
    *status = pclose(p);
    return text;
}

/* The SVG the options draw, as text (free it). */
static char *draw(const CurvesSvg *c) {
    char *text;
    size_t n;
    FILE *f = open_memstream(&text, &n);
    cr_assert(f);
    Err err = {0};
    cr_assert_eq(curves_svg_write(c, f, &err), 0, "%s", err.msg);
    fclose(f);
    return text;
}

/* The points="..." of the first polyline after `after` in svg, as text (free it). */
static char *polyline_points(const char *svg, const char *after) {
    const char *at = strstr(svg, after);
    cr_assert(at, "no %s", after);
    at = strstr(at, "<polyline");
    cr_assert(at, "no polyline after %s", after);
    at = strstr(at, "points=\"") + 8;
    return strndup(at, strcspn(at, "\""));
}

/* A series of n points; dots: drawn as dots (evaluations), else a line. */
static CurveSeries series(const char *label, const char *colour, const long *steps,
                          const double *values, size_t n, int dots) {
    return (CurveSeries){
        .label = label, .colour = colour, .steps = steps, .values = values, .n = n, .dots = dots};
}

/* Loss 2, 1, 0.5 after steps 1, 2, 4 of 4: the loss axis runs from 0 to 2.5 (ticks of 0.5,
 * 10% headroom rounded up), over 220 px from y 88; the steps over 840 px from x 90. */
Test(curves, points_land_where_the_axes_put_them) {
    long steps[] = {1, 2, 4};
    double loss[] = {2.0, 1.0, 0.5};
    CurveSeries s = series("training loss", "#4e79a7", steps, loss, 3, 0);
    CurvesSvg c = {.title = "t", .last_step = 4, .loss = &s, .nloss = 1};
    char *svg = draw(&c);
    char *pts = polyline_points(svg, "<g id=\"loss\">");
    cr_expect_str_eq(pts, "300.00,132.00 510.00,220.00 930.00,264.00");
    free(pts);
    cr_expect(strstr(svg, ">2.5</text>") && strstr(svg, ">0.0</text>"), "loss ticks 0 to 2.5");
    cr_expect(strstr(svg, "training loss 0.5000 (step 4)"), "the legend's last value");
    cr_expect(!strstr(svg, "<g id=\"accuracy\">"), "no accuracy, no panel");
    free(svg);
}

Test(curves, a_long_run_is_drawn_a_point_per_pixel_column) {
    enum { N = 100000 };
    long *steps = malloc(N * sizeof *steps);
    double *loss = malloc(N * sizeof *loss);
    for (long i = 0; i < N; i++) steps[i] = i + 1, loss[i] = 1.0;
    CurveSeries s = series("training loss", "#000", steps, loss, N, 0);
    CurvesSvg c = {.last_step = N, .loss = &s, .nloss = 1};
    char *svg = draw(&c);
    char *pts = polyline_points(svg, "<g id=\"loss\">");
    size_t points = 1;
    for (const char *p = pts; *p; p++) points += *p == ' ';
    cr_expect_leq(points, CURVES_PLOT_WIDTH + 1, "%zu points", points);
    cr_expect_geq(points, CURVES_PLOT_WIDTH - 1, "%zu points", points);
    free(pts);
    free(svg);
    free(steps);
    free(loss);
}

/* Accuracy 47% and 63% at steps 78 and 156: the axis starts at 40% (ten below the lowest,
 * rounded down to tens) and ends at 100%; each evaluation is a dot. */
Test(curves, accuracy_gets_a_panel_of_its_own_in_percent) {
    long steps[] = {78, 156};
    double loss[] = {1.77, 1.27}, acc[] = {0.47, 0.63};
    CurveSeries l = series("test loss", "#e15759", steps, loss, 2, 1);
    CurveSeries a = series("test accuracy", "#e15759", steps, acc, 2, 1);
    CurvesSvg c = {
        .title = "<a&b>", .last_step = 156, .loss = &l, .nloss = 1, .accuracy = &a, .naccuracy = 1};
    char *svg = draw(&c);
    const char *panel = strstr(svg, "<g id=\"accuracy\">");
    cr_assert(panel, "an accuracy panel");
    cr_expect(strstr(panel, ">40%</text>") && strstr(panel, ">100%</text>"), "40%% to 100%%");
    cr_expect(!strstr(panel, ">20%</text>"));
    cr_expect(strstr(panel, "test accuracy 63.00% (step 156)"));
    /* 63% on a 40-100% axis over 220 px from its top */
    double top = 62 + (26 + 220 + 40) + 26;
    char dot[96];
    snprintf(dot, sizeof dot, "<circle cx=\"930.00\" cy=\"%.2f\"",
             top + 220 - (63.0 - 40) / 60 * 220);
    cr_expect(strstr(panel, dot), "%s", dot);
    cr_expect(strstr(svg, "&lt;a&amp;b&gt;"), "the title escaped");
    free(svg);
}

/* What a person opens: librsvg (rsvg-convert, in .ci/deps.sh) renders it without a word. */
Test(curves, librsvg_renders_it) {
    if (system("command -v rsvg-convert >/dev/null 2>&1") != 0)
        cr_skip_test("rsvg-convert is not installed (librsvg2-bin, in .ci/deps.sh)");
    long steps[] = {1, 2, 3};
    double loss[] = {2.3, 2.1, 1.9}, acc[] = {0.1, 0.2, 0.3};
    CurveSeries l = series("training loss", "#4e79a7", steps, loss, 3, 0);
    CurveSeries a = series("test accuracy", "#e15759", steps, acc, 3, 1);
    CurvesSvg c = {.title = "fsdp: toy",
                   .last_step = 3,
                   .loss = &l,
                   .nloss = 1,
                   .accuracy = &a,
                   .naccuracy = 1};
    char svg_path[128], png_path[128], cmd[512];
    snprintf(svg_path, sizeof svg_path, "/tmp/fsdp_curves_%ld.svg", (long)getpid());
    snprintf(png_path, sizeof png_path, "/tmp/fsdp_curves_%ld.png", (long)getpid());
    FILE *f = fopen(svg_path, "w");
    cr_assert(f);
    Err err = {0};
    cr_assert_eq(curves_svg_write(&c, f, &err), 0, "%s", err.msg);
    fclose(f);
    snprintf(cmd, sizeof cmd, "rsvg-convert %s -o %s 2>&1", svg_path, png_path);
    int status;
    char *said = command_output(cmd, &status);
    cr_expect_eq(status, 0, "rsvg-convert: %s", said);
    cr_expect_str_eq(said, "", "rsvg-convert said something");
    free(said);
    size_t n;
    char *png = read_text_file(png_path, &n);
    cr_assert_gt(n, 24);
    cr_expect_eq(memcmp(png, "\x89PNG\r\n\x1a\n", 8), 0, "a PNG");
    /* IHDR: width and height, big-endian, at bytes 16 and 20 */
    const unsigned char *u = (const unsigned char *)png;
    unsigned width = (unsigned)u[16] << 24 | u[17] << 16 | u[18] << 8 | u[19];
    unsigned height = (unsigned)u[20] << 24 | u[21] << 16 | u[22] << 8 | u[23];
    cr_expect_eq(width, 960);
    cr_expect_eq(height, 62 + 2 * (26 + 220 + 40) + 8);
    free(png);
    unlink(svg_path);
    unlink(png_path);
}
