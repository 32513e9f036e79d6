/* curves: a run's loss and accuracy against steps as a standalone SVG, in memory.svg's style
 * (the same page width, margins, fonts, tick rules and XML text). */
#include "sim/viz/curves.h"

#include <math.h>
#include <string.h>

#include "sim/viz/svg.h"

/* Layout in px. */
enum {
    CURVES_WIDTH = 960,
    CURVES_LEFT = 90, /* room for the value ticks */
    CURVES_RIGHT = 30,
    CURVES_PANELS_TOP = 62,
    CURVES_PANEL_LABEL = 26, /* the panel's name and legend above the plot */
    CURVES_PLOT_HEIGHT = 220,
    CURVES_PANEL_BELOW = 40, /* the step ticks and their label under the plot */
    CURVES_PANEL = CURVES_PANEL_LABEL + CURVES_PLOT_HEIGHT + CURVES_PANEL_BELOW,
};
_Static_assert(CURVES_WIDTH - CURVES_LEFT - CURVES_RIGHT == CURVES_PLOT_WIDTH,
               "the header's plot width is the layout's");

/* A panel's plot area and the values its y axis spans, ticked every `tick`. */
typedef struct Panel {
    double top;
    double lo, hi, tick;
    long last_step;
    int percent; /* values are fractions, labelled as % */
} Panel;

static double px_x(const Panel *p, double step) {
    return CURVES_LEFT + step / (double)p->last_step * CURVES_PLOT_WIDTH;
}

static double px_y(const Panel *p, double v) {
    return p->top + CURVES_PLOT_HEIGHT - (v - p->lo) / (p->hi - p->lo) * CURVES_PLOT_HEIGHT;
}

/* The extreme finite value of the series (largest, or smallest when `smallest`); fallback
 * when they hold none. */
static double extreme(const CurveSeries *s, int n, int smallest, double fallback) {
    double v = fallback;
    int any = 0;
    for (int i = 0; i < n; i++)
        for (size_t k = 0; k < s[i].n; k++) {
            double x = s[i].values[k];
            if (!isfinite(x)) continue;
            if (!any || (smallest ? x < v : x > v)) v = x;
            any = 1;
        }
    return v;
}

/* Loss from 0 to a round number above the largest loss, with headroom. */
static void loss_axis(Panel *p, const CurvesSvg *c) {
    double most = extreme(c->loss, c->nloss, 0, 1.0);
    if (!(most > 0)) most = 1.0;
    p->lo = 0;
    p->tick = svg_nice_step(most / 4);
    p->hi = ceil(most * 1.1 / p->tick) * p->tick;
}

/* Accuracy up to 100%, from a round number of tens below the lowest accuracy: a run's
 * accuracies differ by a few points, which a 0-100 axis would flatten. */
static void accuracy_axis(Panel *p, const CurvesSvg *c) {
    double least = extreme(c->accuracy, c->naccuracy, 1, 0.0) * 100;
    double lo = floor((least - 5) / 10) * 10;
    p->lo = lo > 0 ? lo / 100 : 0;
    p->hi = 1;
    p->tick = svg_nice_step((p->hi - p->lo) / 5);
    p->percent = 1;
}

static void value_ticks(FILE *f, const Panel *p) {
    double tick = p->percent ? p->tick * 100 : p->tick;
    int decimals = svg_decimals_for(tick);
    int n = (int)lround((p->hi - p->lo) / p->tick);
    for (int k = 0; k <= n; k++) {
        double v = p->lo + k * p->tick, y = px_y(p, v);
        fprintf(f,
                "<line x1=\"%d\" y1=\"%.2f\" x2=\"%d\" y2=\"%.2f\" stroke=\"#e6e6e6\"/>\n"
                "<text x=\"%d\" y=\"%.2f\" text-anchor=\"end\" font-size=\"11\">%.*f%s</text>\n",
                CURVES_LEFT, y, CURVES_LEFT + CURVES_PLOT_WIDTH, y, CURVES_LEFT - 6, y + 4,
                decimals, p->percent ? v * 100 : v, p->percent ? "%" : "");
    }
}

static void step_ticks(FILE *f, const Panel *p) {
    double tick = svg_nice_step((double)p->last_step / 8);
    if (tick < 1) tick = 1; /* steps are whole */
    double bottom = p->top + CURVES_PLOT_HEIGHT;
    for (int k = 0; k * tick <= (double)p->last_step * (1 + 1e-9); k++) {
        double x = px_x(p, k * tick);
        fprintf(f,
                "<line x1=\"%.2f\" y1=\"%.2f\" x2=\"%.2f\" y2=\"%.2f\" stroke=\"#666\"/>\n"
                "<text x=\"%.2f\" y=\"%.2f\" text-anchor=\"middle\" font-size=\"11\">%.0f</text>\n",
                x, bottom, x, bottom + 4, x, bottom + 16, k * tick);
    }
    fprintf(f, "<text x=\"%d\" y=\"%.2f\" font-size=\"11\" fill=\"#555\">step</text>\n",
            CURVES_LEFT, bottom + 32);
}

/* The series' points, x and y in px, one per pixel column at most: a column's points become
 * their mean. Writes "x,y" pairs separated by spaces; returns how many. */
static size_t series_points(FILE *f, const Panel *p, const CurveSeries *s) {
    size_t written = 0, count = 0;
    long column = -1;
    double sum_x = 0, sum_y = 0;
    for (size_t k = 0; k <= s->n; k++) {
        long col = -2; /* past the end: flushes the last column */
        double x = 0, y = 0;
        if (k < s->n) {
            if (!isfinite(s->values[k])) continue;
            x = px_x(p, (double)s->steps[k]);
            y = px_y(p, s->values[k]);
            col = s->n > CURVES_PLOT_WIDTH ? lround(floor(x)) : (long)k;
        }
        if (col != column && count) {
            fprintf(f, "%s%.2f,%.2f", written ? " " : "", sum_x / count, sum_y / count);
            written++;
            count = 0;
            sum_x = sum_y = 0;
        }
        column = col;
        sum_x += x;
        sum_y += y;
        count++;
    }
    return written;
}

static void draw_series(FILE *f, const Panel *p, const CurveSeries *s) {
    fprintf(f, "<polyline fill=\"none\" stroke=\"%s\" stroke-width=\"1.5\" points=\"", s->colour);
    series_points(f, p, s);
    fputs("\"/>\n", f);
    for (size_t k = 0; s->dots && k < s->n; k++)
        if (isfinite(s->values[k]))
            fprintf(f, "<circle cx=\"%.2f\" cy=\"%.2f\" r=\"3.5\" fill=\"%s\" stroke=\"#fff\"/>\n",
                    px_x(p, (double)s->steps[k]), px_y(p, s->values[k]), s->colour);
}

/* The panel's name, then an entry per series: its colour, label and last value. */
static void panel_legend(FILE *f, const Panel *p, const char *name, const CurveSeries *s, int n) {
    double y = p->top - 9, x = CURVES_LEFT;
    fprintf(f, "<text x=\"%.1f\" y=\"%.1f\" font-size=\"13\" font-weight=\"bold\">%s</text>\n", x,
            y, name);
    x += 8.5 * (double)strlen(name) + 24;
    for (int i = 0; i < n; i++) {
        char last[48] = "";
        for (size_t k = s[i].n; k-- > 0;)
            if (isfinite(s[i].values[k])) {
                if (p->percent)
                    snprintf(last, sizeof last, " %.2f%% (step %ld)", 100 * s[i].values[k],
                             s[i].steps[k]);
                else
                    snprintf(last, sizeof last, " %.4f (step %ld)", s[i].values[k], s[i].steps[k]);
                break;
            }
        fprintf(f,
                "<line x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\" stroke=\"%s\" "
                "stroke-width=\"3\"/>\n<text x=\"%.1f\" y=\"%.1f\" font-size=\"12\">",
                x, y - 4, x + 16, y - 4, s[i].colour, x + 22, y);
        svg_text(f, s[i].label);
        fprintf(f, "%s</text>\n", last);
        x += 22 + 6.5 * (double)(strlen(s[i].label) + strlen(last)) + 18;
    }
}

static void panel(FILE *f, const Panel *p, const char *id, const char *name, const CurveSeries *s,
                  int n) {
    fprintf(f, "<g id=\"%s\">\n", id);
    panel_legend(f, p, name, s, n);
    value_ticks(f, p);
    fprintf(f,
            "<rect x=\"%d\" y=\"%.2f\" width=\"%d\" height=\"%d\" fill=\"none\" "
            "stroke=\"#999\"/>\n",
            CURVES_LEFT, p->top, CURVES_PLOT_WIDTH, CURVES_PLOT_HEIGHT);
    step_ticks(f, p);
    for (int i = 0; i < n; i++) draw_series(f, p, &s[i]);
    fputs("</g>\n", f);
}

/* The x axis's end: the run's last step, or a later step some series reached. */
static long axis_end(const CurvesSvg *c) {
    long last = c->last_step > 0 ? c->last_step : 1;
    for (int i = 0; i < c->nloss; i++)
        if (c->loss[i].n && c->loss[i].steps[c->loss[i].n - 1] > last)
            last = c->loss[i].steps[c->loss[i].n - 1];
    for (int i = 0; i < c->naccuracy; i++)
        if (c->accuracy[i].n && c->accuracy[i].steps[c->accuracy[i].n - 1] > last)
            last = c->accuracy[i].steps[c->accuracy[i].n - 1];
    return last;
}

int curves_svg_write(const CurvesSvg *c, FILE *f, Err *err) {
    int panels = c->naccuracy > 0 ? 2 : 1;
    int height = CURVES_PANELS_TOP + panels * CURVES_PANEL + 8;
    long last_step = axis_end(c);
    svg_begin(f, CURVES_WIDTH, height);
    fprintf(f, "<text x=\"%d\" y=\"26\" font-size=\"17\" font-weight=\"bold\">", CURVES_LEFT);
    svg_text(f, c->title ? c->title : "training curves");
    fprintf(f,
            "</text>\n<text x=\"%d\" y=\"44\" font-size=\"12\" fill=\"#555\">against the steps "
            "done, of %ld; training loss: the global batch's, at each logged step; "
            "evaluations: dots</text>\n",
            CURVES_LEFT, last_step);
    Panel loss = {.top = CURVES_PANELS_TOP + CURVES_PANEL_LABEL, .last_step = last_step};
    loss_axis(&loss, c);
    panel(f, &loss, "loss", "loss", c->loss, c->nloss);
    if (c->naccuracy > 0) {
        Panel acc = {.top = loss.top + CURVES_PANEL, .last_step = last_step};
        accuracy_axis(&acc, c);
        panel(f, &acc, "accuracy", "accuracy", c->accuracy, c->naccuracy);
    }
    fputs("</svg>\n", f);
    if (fflush(f) != 0 || ferror(f)) return err_set(err, ERR_IO, "writing the curves SVG failed");
    return 0;
}
