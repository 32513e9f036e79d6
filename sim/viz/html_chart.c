/* html_chart: the page's picture of one step over time: per GPU its streams' busy lanes and its
 * memory stacked by category (memory.svg's colours), sampled into columns so that a step of any
 * number of events draws in the same few kilobytes. */
#include "sim/viz/html_chart.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "sim/viz/svg.h"
#include "sim/viz/text.h"

/* Layout, in the SVG's own units (the page scales it to its width). */
enum {
    CHART_WIDTH = 1000,
    CHART_LEFT = 72, /* room for the lanes' names and the byte scale */
    CHART_RIGHT = 8,
    CHART_PLOT = CHART_WIDTH - CHART_LEFT - CHART_RIGHT,
    CHART_COLS = CHART_PLOT / 2, /* a column is 2 units wide */
    CHART_TOP = 24,              /* the title */
    CHART_LABEL = 15,            /* "GPU r  peak ..." above a panel */
    CHART_LANE = 6,              /* a stream's lane */
    CHART_LANE_GAP = 2,
    CHART_AREA = 44, /* the memory area */
    CHART_PANEL_GAP = 8,
    CHART_AXIS = 30, /* the time ticks under the last panel */
};

/* The lanes' colours: the text timeline's (compute '#', comm '=', copy '~'). */
static const char *const lane_colour[STREAM_COUNT] = {"#1f7a3a", "#2457c5", "#c26a00"};
static const char *const lane_name[STREAM_COUNT] = {"compute", "comm", "copy"};

double html_chart_x(const MemoryTimeline *mt, double t) {
    double span = mt->end - mt->start, at = span > 0 ? (t - mt->start) / span : 0;
    at = !(at > 0) ? 0 : at > 1 ? 1 : at;
    return CHART_LEFT + at * CHART_PLOT;
}

/* The column (0..CHART_COLS) of time t. */
static int column_of(const MemoryTimeline *mt, double t, int round_up) {
    double span = mt->end - mt->start;
    if (!(span > 0)) return round_up ? CHART_COLS : 0;
    double c = (t - mt->start) / span * CHART_COLS;
    c = round_up ? ceil(c) : floor(c);
    return !(c > 0) ? 0 : c > CHART_COLS ? CHART_COLS : (int)c;
}

/* best[j]: the sample of r with the largest total while column j lasts (its peak shows). */
static void column_samples(const MemoryTimeline *mt, const MemoryRank *r, size_t *best) {
    for (int j = 0; j < CHART_COLS; j++) best[j] = SIZE_MAX;
    for (size_t i = 0; i < r->n; i++) {
        double until = i + 1 < r->n ? r->samples[i + 1].time : mt->end;
        int lo = column_of(mt, r->samples[i].time, 0), hi = column_of(mt, until, 1) - 1;
        if (lo > CHART_COLS - 1) lo = CHART_COLS - 1;
        if (hi < lo) hi = lo;
        size_t total = memory_sample_stacked(&r->samples[i], MEM_CATEGORY_COUNT);
        for (int j = lo; j <= hi; j++)
            if (best[j] == SIZE_MAX ||
                total > memory_sample_stacked(&r->samples[best[j]], MEM_CATEGORY_COUNT))
                best[j] = i;
    }
    /* a column no sample starts in holds what the one before it held */
    for (int j = 0; j < CHART_COLS; j++)
        if (best[j] == SIZE_MAX) best[j] = j ? best[j - 1] : 0;
}

/* A step-shaped edge: one point where its height changes, so a flat stretch costs nothing. */
typedef struct Edge {
    FILE *f;
    int any;
} Edge;

static void edge_point(Edge *e, double x, double y) {
    fprintf(e->f, "%s%.0f,%.1f", e->any ? " " : "", x, y);
    e->any = 1;
}

/* The stack of categories [0, upto) over the columns, from the area's bottom: painted tallest
 * first, each lower stack over it, so the bands show in their colours. */
static void stack_polygon(FILE *f, const MemoryRank *r, const size_t *best, int upto, double bottom,
                          double per_byte, const char *fill, int outline) {
    if (outline)
        fputs("<polyline fill=\"none\" stroke=\"#333\" stroke-width=\"0.8\" points=\"", f);
    else
        fprintf(f, "<polygon fill=\"%s\" points=\"", fill);
    Edge e = {.f = f};
    if (!outline) edge_point(&e, CHART_LEFT, bottom);
    double last = 0;
    for (int j = 0; j < CHART_COLS; j++) {
        double y = bottom - (double)memory_sample_stacked(&r->samples[best[j]], upto) * per_byte;
        y = round(y * 10) / 10;
        if (j == 0 || y != last) {
            if (j) edge_point(&e, CHART_LEFT + 2.0 * j, last);
            edge_point(&e, CHART_LEFT + 2.0 * j, y);
        }
        last = y;
    }
    edge_point(&e, CHART_LEFT + CHART_PLOT, last);
    if (!outline) edge_point(&e, CHART_LEFT + CHART_PLOT, bottom);
    fputs("\"/>\n", f);
}

/* busy[(q * STREAM_COUNT + s) * CHART_COLS + j]: stream s of rank q works during column j of
 * the step, for the first `shown` ranks. */
static void lanes_of(const MemoryTimeline *mt, const Trace *t, int shown, char *busy) {
    memset(busy, 0, (size_t)shown * STREAM_COUNT * CHART_COLS);
    for (size_t i = 0; i < t->n; i++) {
        const TraceEvent *e = &t->ev[i];
        if (e->rank < 0 || e->rank >= shown || e->step != mt->step || e->kind == EV_ALLOC ||
            e->kind == EV_FREE || !(e->end > e->start) || e->stream < 0 ||
            e->stream >= STREAM_COUNT)
            continue;
        int a = column_of(mt, e->start, 0), b = column_of(mt, e->end, 1);
        if (a > CHART_COLS - 1) a = CHART_COLS - 1;
        if (b <= a) b = a + 1;
        memset(busy + ((size_t)e->rank * STREAM_COUNT + (size_t)e->stream) * CHART_COLS + a, 1,
               (size_t)(b - a));
    }
}

static void lane(FILE *f, const char *busy, int s, double y) {
    fprintf(f,
            "<text x=\"%d\" y=\"%.1f\" text-anchor=\"end\" font-size=\"8\" fill=\"#555\">%s"
            "</text>\n<rect x=\"%d\" y=\"%.1f\" width=\"%d\" height=\"%d\" fill=\"#f2f2f2\"/>\n",
            CHART_LEFT - 4, y + CHART_LANE, lane_name[s], CHART_LEFT, y, CHART_PLOT, CHART_LANE);
    for (int j = 0; j < CHART_COLS;) {
        if (!busy[j]) {
            j++;
            continue;
        }
        int k = j;
        while (k < CHART_COLS && busy[k]) k++;
        fprintf(f, "<rect x=\"%d\" y=\"%.1f\" width=\"%d\" height=\"%d\" fill=\"%s\"/>\n",
                CHART_LEFT + 2 * j, y, 2 * (k - j), CHART_LANE, lane_colour[s]);
        j = k;
    }
}

/* The unit that suits a step of `span` seconds, and how many of it a second is. */
static const char *time_unit(double span, double *per_second) {
    *per_second = span < 1e-3 ? 1e6 : span < 10 ? 1e3 : 1;
    return span < 1e-3 ? "\u00b5s" : span < 10 ? "ms" : "s";
}

/* Time ticks under the last panel. */
static void time_ticks(FILE *f, const MemoryTimeline *mt, double y) {
    double span = mt->end - mt->start, per_second;
    const char *unit = time_unit(span, &per_second);
    double step = svg_nice_step(span * per_second / 8);
    int decimals = svg_decimals_for(step);
    for (int k = 0; span > 0 && k * step <= span * per_second * (1 + 1e-9); k++) {
        double x = html_chart_x(mt, mt->start + k * step / per_second);
        fprintf(f,
                "<line x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\" stroke=\"#666\"/>\n"
                "<text x=\"%.1f\" y=\"%.1f\" text-anchor=\"middle\" font-size=\"9\">%.*f</text>\n",
                x, y, x, y + 4, x, y + 14, decimals, k * step);
    }
    fprintf(f, "<text x=\"%d\" y=\"%.1f\" text-anchor=\"end\" font-size=\"9\">%s</text>\n",
            CHART_LEFT - 4, y + 14, unit);
}

int html_chart_write(FILE *out, const MemoryTimeline *mt, const Trace *t, size_t ddp_bytes, int id,
                     Err *err) {
    int shown = mt->nranks < MEMORY_TIMELINE_MAX_RANKS ? mt->nranks : MEMORY_TIMELINE_MAX_RANKS;
    size_t *best = malloc(CHART_COLS * sizeof *best);
    char *busy = malloc(((size_t)shown + 1) * STREAM_COUNT * CHART_COLS);
    if (!best || !busy) {
        free(best);
        free(busy);
        return err_set(err, ERR_NOMEM, "out of memory for the page's chart");
    }
    int lanes = 2; /* compute and comm; copy too where the step copies (offload) */
    for (size_t i = 0; i < t->n; i++)
        if (t->ev[i].step == mt->step && t->ev[i].stream == STREAM_COPY &&
            t->ev[i].kind != EV_ALLOC && t->ev[i].kind != EV_FREE && t->ev[i].end > t->ev[i].start)
            lanes = 3;
    size_t most = ddp_bytes;
    for (int q = 0; q < shown; q++)
        if (mt->ranks[q].peak > most) most = mt->ranks[q].peak;
    double scale = most ? (double)most * 1.05 : 1.0, per_byte = CHART_AREA / scale;
    int panel = CHART_LABEL + lanes * (CHART_LANE + CHART_LANE_GAP) + CHART_AREA + CHART_PANEL_GAP;
    int more = mt->nranks > shown, bottom = CHART_TOP + shown * panel;
    int height = bottom + CHART_AXIS + (more ? 14 : 0);
    char a[32], b[32];
    double per_second, span = mt->end - mt->start;
    const char *unit = time_unit(span, &per_second);
    fprintf(out,
            "<svg id=\"chart%d\" class=\"chart\" viewBox=\"0 0 %d %d\" font-family=\"sans-serif\" "
            "role=\"img\">\n<text x=\"%d\" y=\"14\" font-size=\"12\" font-weight=\"bold\">step %d"
            "</text>\n<text x=\"%d\" y=\"14\" font-size=\"11\" fill=\"#555\">%.4g %s %s: "
            "each GPU's streams, and its memory stacked by category, every GPU on one scale (%s "
            "full)",
            id, CHART_WIDTH, height, CHART_LEFT, mt->step + 1, CHART_LEFT + 50, span * per_second,
            unit, mt->clock, format_bytes((size_t)scale, a, sizeof a));
    if (ddp_bytes) fprintf(out, "; dashed: DDP at rest");
    fputs("</text>\n", out);
    lanes_of(mt, t, shown, busy);
    for (int q = 0; q < shown; q++) {
        const MemoryRank *r = &mt->ranks[q];
        double y = CHART_TOP + q * panel;
        fprintf(out,
                "<text x=\"%d\" y=\"%.1f\" font-size=\"11\" font-weight=\"bold\">GPU %d</text>\n"
                "<text x=\"%d\" y=\"%.1f\" font-size=\"10\" fill=\"#555\">peak %s</text>\n",
                CHART_LEFT, y + 10, q, CHART_LEFT + 44, y + 10, format_bytes(r->peak, a, sizeof a));
        y += CHART_LABEL;
        for (int s = 0; s < lanes; s++, y += CHART_LANE + CHART_LANE_GAP)
            lane(out, busy + ((size_t)q * STREAM_COUNT + (size_t)s) * CHART_COLS, s, y);
        double area_bottom = y + CHART_AREA;
        fprintf(out,
                "<rect x=\"%d\" y=\"%.1f\" width=\"%d\" height=\"%d\" fill=\"#fafafa\" "
                "stroke=\"#ccc\"/>\n<text x=\"%d\" y=\"%.1f\" text-anchor=\"end\" "
                "font-size=\"8\" fill=\"#555\">%s</text>\n<text x=\"%d\" y=\"%.1f\" "
                "text-anchor=\"end\" font-size=\"8\" fill=\"#555\">0</text>\n",
                CHART_LEFT, y, CHART_PLOT, CHART_AREA, CHART_LEFT - 4, y + 8,
                format_bytes((size_t)scale, b, sizeof b), CHART_LEFT - 4, area_bottom);
        column_samples(mt, r, best);
        for (int c = MEM_CATEGORY_COUNT - 1; c >= 0; c--)
            if (r->max[c] && !mem_category_off_gpu((MemCategory)c))
                stack_polygon(out, r, best, c + 1, area_bottom, per_byte,
                              memory_category_colour((MemCategory)c), 0);
        stack_polygon(out, r, best, MEM_CATEGORY_COUNT, area_bottom, per_byte, NULL, 1);
        if (ddp_bytes)
            fprintf(out,
                    "<line x1=\"%d\" y1=\"%.1f\" x2=\"%d\" y2=\"%.1f\" stroke=\"#222\" "
                    "stroke-dasharray=\"5 3\"/>\n",
                    CHART_LEFT, area_bottom - (double)ddp_bytes * per_byte, CHART_LEFT + CHART_PLOT,
                    area_bottom - (double)ddp_bytes * per_byte);
    }
    time_ticks(out, mt, bottom - CHART_PANEL_GAP + 2);
    if (more)
        fprintf(out, "<text x=\"%d\" y=\"%d\" font-size=\"11\">+%d more GPUs not shown</text>\n",
                CHART_LEFT, height - 2, mt->nranks - shown);
    fprintf(out,
            "<line class=\"now\" x1=\"%d\" y1=\"%d\" x2=\"%d\" y2=\"%d\" stroke=\"#c00\" "
            "stroke-width=\"2\"/>\n</svg>\n",
            CHART_LEFT, CHART_TOP - 4, CHART_LEFT, bottom - CHART_PANEL_GAP + 2);
    free(best);
    free(busy);
    return 0;
}
