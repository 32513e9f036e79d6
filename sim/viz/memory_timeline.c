/* memory_timeline: each rank's memory over one step by category, replayed from a trace's allocs and
 * frees, drawn as a standalone SVG or a compact text timeline. */
#include "sim/viz/memory_timeline.h"

#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "sim/viz/svg.h"
#include "sim/viz/text.h"

/* ---- the model ---------------------------------------------------------------------------- */

static int is_memory_event(const TraceEvent *e) {
    return e->kind == EV_ALLOC || e->kind == EV_FREE;
}

static int in_step(const TraceEvent *e, int step) {
    return e->step == step && e->phase != PHASE_NONE;
}

/* Setup, data loading and earlier steps: what a rank brings into the step. */
static int before_step(const TraceEvent *e, int step) {
    return e->step < step || (e->step == step && e->phase == PHASE_NONE);
}

/* -1 becomes the last step that reached its optimizer: an evaluation after the last step runs
 * forward tagged with the next step's number, and is not a training step. Without optimizer
 * events (a trace cut short), the last step with any work. */
static int resolve_step(const Trace *t, int *step, Err *err) {
    if (*step < -1)
        return err_set(err, ERR_USAGE, "step %d is not a step (0-based, or -1 for the last)",
                       *step);
    if (*step >= 0) return 0;
    *step = trace_last_trained_step(t);
    if (*step < 0)
        return err_set(err, ERR_USAGE,
                       "the trace has no training step (no forward, backward or optimizer work)");
    return 0;
}

/* The step's span over all its events on all ranks, and how many ranks the trace has. */
static int step_span(MemoryTimeline *mt, const Trace *t, Err *err) {
    int found = 0, nranks = t->nranks;
    for (size_t i = 0; i < t->n; i++) {
        const TraceEvent *e = &t->ev[i];
        if (e->rank < 0)
            return err_set(err, ERR_USAGE, "trace event %zu has a negative rank (%d)", i, e->rank);
        if (e->rank >= nranks) nranks = e->rank + 1;
        if (!in_step(e, mt->step)) continue;
        if (!found || e->start < mt->start) mt->start = e->start;
        if (!found || e->end > mt->end) mt->end = e->end;
        found = 1;
    }
    if (!found)
        return err_set(err, ERR_USAGE, "the trace has no events of step %d (counting from 1)",
                       mt->step + 1);
    if (mt->end < mt->start) mt->end = mt->start;
    mt->nranks = nranks;
    return 0;
}

static int push_sample(MemoryRank *r, double time, const size_t *bytes, Err *err) {
    if (r->n == r->cap) {
        size_t cap = r->cap ? 2 * r->cap : 64;
        MemorySample *s = realloc(r->samples, cap * sizeof *s);
        if (!s)
            return err_set(err, ERR_NOMEM, "out of memory for %zu memory timeline samples", cap);
        r->samples = s;
        r->cap = cap;
    }
    MemorySample *s = &r->samples[r->n++];
    s->time = time;
    memcpy(s->bytes, bytes, sizeof s->bytes);
    return 0;
}

size_t memory_sample_stacked(const MemorySample *s, int upto) {
    size_t sum = 0;
    for (int c = 0; c < upto; c++)
        if (!mem_category_off_gpu((MemCategory)c)) sum += s->bytes[c];
    return sum;
}

static size_t sample_total(const MemorySample *s) {
    return memory_sample_stacked(s, MEM_CATEGORY_COUNT);
}

static void summarize(MemoryRank *r) {
    for (size_t i = 0; i < r->n; i++) {
        const MemorySample *s = &r->samples[i];
        size_t total = sample_total(s);
        if (i == 0 || total > r->peak) {
            r->peak = total;
            r->peak_time = s->time;
            memcpy(r->at_peak, s->bytes, sizeof r->at_peak);
        }
        for (int c = 0; c < MEM_CATEGORY_COUNT; c++)
            if (s->bytes[c] > r->max[c]) r->max[c] = s->bytes[c];
    }
}

static int replay(MemoryTimeline *mt, const Trace *t, size_t *held, Err *err) {
    for (size_t i = 0; i < t->n; i++) {
        const TraceEvent *e = &t->ev[i];
        if (!is_memory_event(e)) continue;
        int in = in_step(e, mt->step);
        if (!in && !before_step(e, mt->step)) continue;
        MemoryRank *r = &mt->ranks[e->rank];
        size_t *row = &held[(size_t)e->rank * MEM_CATEGORY_COUNT];
        int rc = 0;
        if (in && r->n == 0) rc = push_sample(r, mt->start, row, err);
        if (!rc) rc = trace_memory_apply(row, e, i, ERR_USAGE, err);
        if (!rc && in) rc = push_sample(r, e->start, row, err);
        if (rc) return rc;
    }
    /* ranks that neither allocate nor free in the step hold what they came in with */
    for (int q = 0; q < mt->nranks; q++) {
        MemoryRank *r = &mt->ranks[q];
        int rc = r->n ? 0 : push_sample(r, mt->start, &held[(size_t)q * MEM_CATEGORY_COUNT], err);
        if (rc) return rc;
        summarize(r);
    }
    return 0;
}

int memory_timeline_build(MemoryTimeline *mt, const Trace *t, int step, Err *err) {
    *mt = (MemoryTimeline){.clock = trace_clock(t)};
    int rc = resolve_step(t, &step, err);
    if (rc) return rc;
    mt->step = step;
    if ((rc = step_span(mt, t, err))) return rc;
    size_t *held = calloc((size_t)mt->nranks * MEM_CATEGORY_COUNT, sizeof *held);
    mt->ranks = calloc((size_t)mt->nranks, sizeof *mt->ranks);
    if (!held || !mt->ranks)
        rc = err_set(err, ERR_NOMEM, "out of memory for the memory timeline of %d ranks",
                     mt->nranks);
    if (!rc) rc = replay(mt, t, held, err);
    free(held);
    return rc;
}

void memory_timeline_free(MemoryTimeline *mt) {
    for (int q = 0; mt->ranks && q < mt->nranks; q++) free(mt->ranks[q].samples);
    free(mt->ranks);
    *mt = (MemoryTimeline){0};
}

/* ---- shared by both renderers ------------------------------------------------------------- */

static int shown_ranks(const MemoryTimeline *mt) {
    return mt->nranks < MEMORY_TIMELINE_MAX_RANKS ? mt->nranks : MEMORY_TIMELINE_MAX_RANKS;
}

/* Time is shown in the unit that suits the step's span, with about three significant digits
 * of the span. */
typedef struct TimeUnit {
    const char *name;
    double per_second;
    int decimals;
} TimeUnit;

static TimeUnit time_unit_for(double span) {
    TimeUnit u = span < 1e-3 ? (TimeUnit){"\u00b5s", 1e6, 0}
                 : span < 10 ? (TimeUnit){"ms", 1e3, 0}
                             : (TimeUnit){"s", 1.0, 0};
    double v = span * u.per_second;
    int d = v > 0 ? 2 - (int)floor(log10(v)) : 2;
    u.decimals = d < 0 ? 0 : d > 6 ? 6 : d;
    return u;
}

static const char *format_time(double seconds, TimeUnit u, char *buf, size_t n) {
    snprintf(buf, n, "%.*f %s", u.decimals, seconds * u.per_second, u.name);
    return buf;
}

static int finish_output(FILE *f, const char *what, Err *err) {
    if (fflush(f) != 0 || ferror(f)) return err_set(err, ERR_IO, "writing the %s failed", what);
    return 0;
}

/* ---- the terminal's timeline -------------------------------------------------------------- */

/* The columns sample i of r is in force during: from the column holding its time to the last
 * column that starts before the next sample (at least its own column, so an alloc freed at the
 * same instant still shows). */
static void sample_columns(const MemoryTimeline *mt, const MemoryRank *r, size_t i, int width,
                           int *lo, int *hi) {
    double span = mt->end - mt->start;
    if (span <= 0) {
        *lo = 0, *hi = width - 1;
        return;
    }
    double until = i + 1 < r->n ? r->samples[i + 1].time : mt->end;
    double a = floor((r->samples[i].time - mt->start) / span * width);
    double b = ceil((until - mt->start) / span * width) - 1;
    *lo = a < 0 ? 0 : a > width - 1 ? width - 1 : (int)a;
    *hi = b < *lo ? *lo : b > width - 1 ? width - 1 : (int)b;
}

/* cols[j]: the most category c (or the total, c < 0) held during column j. */
static void column_max(const MemoryTimeline *mt, const MemoryRank *r, int c, int width,
                       size_t *cols) {
    memset(cols, 0, (size_t)width * sizeof *cols);
    for (size_t i = 0; i < r->n; i++) {
        size_t v = c < 0 ? sample_total(&r->samples[i]) : r->samples[i].bytes[c];
        int lo, hi;
        sample_columns(mt, r, i, width, &lo, &hi);
        for (int j = lo; j <= hi; j++)
            if (v > cols[j]) cols[j] = v;
    }
}

/* One of 8 block heights for v of peak, rounded up; a space for nothing. */
static const char *block_for(size_t v, size_t peak) {
    static const char *const blocks[] = {" ",      "\u2581", "\u2582", "\u2583", "\u2584",
                                         "\u2585", "\u2586", "\u2587", "\u2588"};
    if (!v || !peak) return blocks[0];
    while (peak > SIZE_MAX / 16) peak >>= 1, v >>= 1; /* keep v * 8 in range */
    size_t level = (v * 8 + peak - 1) / peak;
    return blocks[level < 1 ? 1 : level > 8 ? 8 : level];
}

static void text_row(FILE *f, const char *label, int label_width, const size_t *cols, int width,
                     size_t peak, size_t max) {
    char bytes[32];
    fprintf(f, "  %-*s ", label_width, label);
    for (int j = 0; j < width; j++) fputs(block_for(cols[j], peak), f);
    fprintf(f, "  %s\n", format_bytes(max, bytes, sizeof bytes));
}

/* Whether any of the first `shown` ranks keeps memory off its GPU in the step (offload). */
static int holds_off_gpu(const MemoryTimeline *mt, int shown) {
    for (int q = 0; q < shown; q++)
        for (int c = 0; c < MEM_CATEGORY_COUNT; c++)
            if (mt->ranks[q].max[c] && mem_category_off_gpu((MemCategory)c)) return 1;
    return 0;
}

int memory_text_write(const MemoryTimeline *mt, int width, FILE *f, Err *err) {
    if (width < 8 || width > 1000)
        return err_set(err, ERR_USAGE, "the memory timeline is 8 to 1000 columns wide, not %d",
                       width);
    size_t *cols = malloc((size_t)width * sizeof *cols);
    if (!cols) return err_set(err, ERR_NOMEM, "out of memory for a %d-column timeline", width);
    int shown = shown_ranks(mt);
    int label_width = (int)strlen("total");
    for (int q = 0; q < shown; q++)
        for (int c = 0; c < MEM_CATEGORY_COUNT; c++) {
            int w = (int)strlen(mem_category_label((MemCategory)c));
            if (mt->ranks[q].max[c] && w > label_width) label_width = w;
        }
    double span = mt->end - mt->start;
    TimeUnit u = time_unit_for(span);
    char a[32], b[32];
    fprintf(f, "memory over step %d: %s %s, %d columns of %s; bars scaled to each GPU's peak%s\n",
            mt->step + 1, format_time(span, u, a, sizeof a), mt->clock, width,
            format_time(span / width, u, b, sizeof b),
            holds_off_gpu(mt, shown) ? " (what offload keeps off the GPU: to its own largest)"
                                     : "");
    for (int q = 0; q < shown; q++) {
        const MemoryRank *r = &mt->ranks[q];
        fprintf(f, "GPU %d  peak %s at %s\n", q, format_bytes(r->peak, a, sizeof a),
                format_time(r->peak_time - mt->start, u, b, sizeof b));
        for (int off = 0; off < 2; off++) { /* the GPU's rows, its total, then what is off it */
            for (int c = 0; c < MEM_CATEGORY_COUNT; c++) {
                if (!r->max[c] || mem_category_off_gpu((MemCategory)c) != off) continue;
                column_max(mt, r, c, width, cols);
                text_row(f, mem_category_label((MemCategory)c), label_width, cols, width,
                         off ? r->max[c] : r->peak, r->max[c]);
            }
            if (off) continue;
            column_max(mt, r, -1, width, cols);
            text_row(f, "total", label_width, cols, width, r->peak, r->peak);
        }
    }
    if (mt->nranks > shown) fprintf(f, "+%d more GPUs not shown\n", mt->nranks - shown);
    free(cols);
    return finish_output(f, "memory timeline", err);
}

/* ---- the SVG ------------------------------------------------------------------------------ */

/* A fixed colour per category (Tableau 10), so the same thing looks the same in every chart. */
static const char *const category_colour[] = {
    "#4e79a7", /* param shard: blue */
    "#a0cbe8", /* unsharded params: light blue */
    "#f28e2b", /* grad shard: orange */
    "#ffbe7d", /* unsharded grads: light orange */
    "#59a14f", /* optim state: green */
    "#e15759", /* activations: red */
    "#b07aa1", /* comm buffers: purple */
    "#9c755f", /* host (offload): brown */
    "#edc948", /* checkpointed inputs: yellow */
    "#bab0ac", /* NVMe (offload): grey */
    "#ff9da7", /* fp32 copies (a GPU computing fp32 on bf16 units; never simulated): pink */
};
_Static_assert(sizeof category_colour / sizeof *category_colour == MEM_CATEGORY_COUNT,
               "every memory category needs a colour");

const char *memory_category_colour(MemCategory c) {
    return (int)c >= 0 && (int)c < MEM_CATEGORY_COUNT ? category_colour[c] : "#999";
}

/* Layout in px. */
enum {
    SVG_WIDTH = 960,
    SVG_LEFT = 90, /* room for the byte ticks */
    SVG_RIGHT = 30,
    SVG_PLOT_WIDTH = SVG_WIDTH - SVG_LEFT - SVG_RIGHT,
    SVG_LEGEND_TOP = 62,
    SVG_LEGEND_ROW = 20,
    SVG_PANEL_LABEL = 24, /* "GPU r" above the plot */
    SVG_PLOT_HEIGHT = 140,
    SVG_PANEL_BELOW = 32, /* the time ticks under the plot */
    SVG_PANEL = SVG_PANEL_LABEL + SVG_PLOT_HEIGHT + SVG_PANEL_BELOW,
};

/* The byte axis every panel shares: ticks of `step` units (B, KiB, ...) up to `top`. */
typedef struct ByteAxis {
    const char *unit;
    double unit_bytes, step, top; /* step and top in units */
} ByteAxis;

static ByteAxis byte_axis(size_t most) {
    static const char *const units[] = {"B", "KiB", "MiB", "GiB", "TiB"};
    ByteAxis a = {.unit = units[0], .unit_bytes = 1};
    double v = most ? (double)most : 1024.0;
    for (int k = 1; k < 5 && v >= 1024 * a.unit_bytes; k++) a.unit = units[k], a.unit_bytes *= 1024;
    double in_units = v / a.unit_bytes;
    a.step = svg_nice_step(in_units / 4);
    if (a.unit_bytes == 1 && a.step < 1) a.step = 1;
    /* headroom above the highest value for the peak's label */
    a.top = ceil(in_units * 1.15 / a.step) * a.step;
    return a;
}

typedef struct Panel {
    double top; /* of the plot area */
    double start, span;
    double max_bytes;
} Panel;

static double px_x(const Panel *p, double t) {
    return SVG_LEFT + (p->span > 0 ? (t - p->start) / p->span : 0) * SVG_PLOT_WIDTH;
}

static double px_y(const Panel *p, double bytes) {
    return p->top + SVG_PLOT_HEIGHT - bytes / p->max_bytes * SVG_PLOT_HEIGHT;
}

/* Writes polygon/polyline points, dropping a point that repeats the last one at 0.01 px:
 * a long step has many events per pixel. */
typedef struct Points {
    FILE *f;
    long x, y;
    int any;
} Points;

static void point(Points *pt, double x, double y) {
    long ix = lround(x * 100), iy = lround(y * 100);
    if (pt->any && ix == pt->x && iy == pt->y) return;
    fprintf(pt->f, "%s%.2f,%.2f", pt->any ? " " : "", ix / 100.0, iy / 100.0);
    pt->x = ix, pt->y = iy, pt->any = 1;
}

static double sample_end(const MemoryTimeline *mt, const MemoryRank *r, size_t i) {
    return i + 1 < r->n ? r->samples[i + 1].time : mt->end;
}

/* The step-shaped top edge of the stack up to category `upto`, left to right. */
static void step_edge(Points *pt, const MemoryTimeline *mt, const MemoryRank *r, const Panel *p,
                      int upto) {
    for (size_t i = 0; i < r->n; i++) {
        double y = px_y(p, (double)memory_sample_stacked(&r->samples[i], upto));
        point(pt, px_x(p, r->samples[i].time), y);
        point(pt, px_x(p, sample_end(mt, r, i)), y);
    }
}

/* Category c's band: its top edge left to right, then the stack below it right to left. */
static void category_area(FILE *f, const MemoryTimeline *mt, const MemoryRank *r, const Panel *p,
                          int c) {
    Points pt = {.f = f};
    fprintf(f, "<polygon fill=\"%s\" points=\"", category_colour[c]);
    step_edge(&pt, mt, r, p, c + 1);
    for (size_t i = r->n; i-- > 0;) {
        double y = px_y(p, (double)memory_sample_stacked(&r->samples[i], c));
        point(&pt, px_x(p, sample_end(mt, r, i)), y);
        point(&pt, px_x(p, r->samples[i].time), y);
    }
    fputs("\"/>\n", f);
}

static void byte_ticks(FILE *f, const Panel *p, const ByteAxis *a) {
    int decimals = svg_decimals_for(a->step);
    int n = (int)lround(a->top / a->step);
    for (int k = 0; k <= n; k++) {
        double v = k * a->step, y = px_y(p, v * a->unit_bytes);
        fprintf(f,
                "<line x1=\"%d\" y1=\"%.2f\" x2=\"%d\" y2=\"%.2f\" stroke=\"#e6e6e6\"/>\n"
                "<text x=\"%d\" y=\"%.2f\" text-anchor=\"end\" font-size=\"11\">%.*f %s</text>\n",
                SVG_LEFT, y, SVG_LEFT + SVG_PLOT_WIDTH, y, SVG_LEFT - 6, y + 4, decimals, v,
                a->unit);
    }
}

static void time_ticks(FILE *f, const Panel *p, TimeUnit u) {
    double span = p->span * u.per_second;
    double step = svg_nice_step(span / 6);
    int decimals = svg_decimals_for(step);
    double bottom = p->top + SVG_PLOT_HEIGHT;
    for (int k = 0; span > 0 && k * step <= span * (1 + 1e-9); k++) {
        double x = px_x(p, p->start + k * step / u.per_second);
        fprintf(f,
                "<line x1=\"%.2f\" y1=\"%.2f\" x2=\"%.2f\" y2=\"%.2f\" stroke=\"#666\"/>\n"
                "<text x=\"%.2f\" y=\"%.2f\" text-anchor=\"middle\" font-size=\"11\">%.*f</text>\n",
                x, bottom, x, bottom + 4, x, bottom + 16, decimals, k * step);
    }
}

/* "host 48 B, NVMe 96 B off the GPU": the most of each that offload keeps off rank r's GPU in
 * the step; 0 (and "") where it keeps nothing there. */
static int off_gpu_text(const MemoryRank *r, char *out, size_t n) {
    char a[32], b[32];
    size_t host = r->max[MEM_HOST_OFFLOAD], nvme = r->max[MEM_NVME];
    out[0] = 0;
    if (!host && !nvme) return 0;
    snprintf(out, n, "%s%s%s%s%s off the GPU", host ? "host " : "",
             host ? format_bytes(host, a, sizeof a) : "", host && nvme ? ", " : "",
             nvme ? "NVMe " : "", nvme ? format_bytes(nvme, b, sizeof b) : "");
    return 1;
}

static void rank_panel(FILE *f, const MemoryTimeline *mt, int q, const Panel *p, const ByteAxis *a,
                       TimeUnit u, size_t ddp_bytes) {
    const MemoryRank *r = &mt->ranks[q];
    double bottom = p->top + SVG_PLOT_HEIGHT;
    fprintf(f, "<g id=\"gpu%d\">\n", q);
    fprintf(f, "<text x=\"%d\" y=\"%.2f\" font-size=\"13\" font-weight=\"bold\">GPU %d</text>\n",
            SVG_LEFT, p->top - 8, q);
    char off[96];
    if (off_gpu_text(r, off, sizeof off))
        fprintf(f, "<text x=\"%d\" y=\"%.2f\" font-size=\"11\" fill=\"#555\">%s</text>\n",
                SVG_LEFT + 52, p->top - 8, off);
    byte_ticks(f, p, a);
    for (int c = 0; c < MEM_CATEGORY_COUNT; c++)
        if (r->max[c] && !mem_category_off_gpu((MemCategory)c)) category_area(f, mt, r, p, c);
    /* the total as an outline: it also shows a block allocated and freed at one instant,
     * which has no width to fill */
    Points pt = {.f = f};
    fputs("<polyline fill=\"none\" stroke=\"#333\" stroke-width=\"1\" points=\"", f);
    step_edge(&pt, mt, r, p, MEM_CATEGORY_COUNT);
    fputs("\"/>\n", f);
    fprintf(f,
            "<rect x=\"%d\" y=\"%.2f\" width=\"%d\" height=\"%d\" fill=\"none\" "
            "stroke=\"#999\"/>\n",
            SVG_LEFT, p->top, SVG_PLOT_WIDTH, SVG_PLOT_HEIGHT);
    time_ticks(f, p, u);
    char bytes[32], when[32];
    if (ddp_bytes) {
        double y = px_y(p, (double)ddp_bytes);
        fprintf(f,
                "<line x1=\"%d\" y1=\"%.2f\" x2=\"%d\" y2=\"%.2f\" stroke=\"#222\" "
                "stroke-width=\"1.5\" stroke-dasharray=\"6 4\"/>\n"
                "<text x=\"%d\" y=\"%.2f\" text-anchor=\"end\" font-size=\"11\">DDP %s</text>\n",
                SVG_LEFT, y, SVG_LEFT + SVG_PLOT_WIDTH, y, SVG_LEFT + SVG_PLOT_WIDTH - 4, y - 4,
                format_bytes(ddp_bytes, bytes, sizeof bytes));
    }
    double x = px_x(p, r->peak_time), y = px_y(p, (double)r->peak);
    int left_half = x < SVG_LEFT + SVG_PLOT_WIDTH * 0.6;
    fprintf(
        f,
        "<circle cx=\"%.2f\" cy=\"%.2f\" r=\"4\" fill=\"#000\" stroke=\"#fff\"/>\n"
        "<text x=\"%.2f\" y=\"%.2f\" text-anchor=\"%s\" font-size=\"11\">peak %s at %s</text>\n",
        x, y, x + (left_half ? 7 : -7), y - 6, left_half ? "start" : "end",
        format_bytes(r->peak, bytes, sizeof bytes),
        format_time(r->peak_time - mt->start, u, when, sizeof when));
    fprintf(f, "<text x=\"%d\" y=\"%.2f\" font-size=\"11\" fill=\"#555\">", SVG_LEFT, bottom + 28);
    fprintf(f, "time in step (%s)</text>\n</g>\n", u.name);
}

/* One legend entry at (x, y): a category's colour, the DDP line or the peak's marker. */
static void legend_item(FILE *f, int item, double x, double y, const char *label) {
    if (item < MEM_CATEGORY_COUNT)
        fprintf(f, "<rect x=\"%.1f\" y=\"%.1f\" width=\"14\" height=\"12\" fill=\"%s\"/>\n", x,
                y - 10, category_colour[item]);
    else if (item == MEM_CATEGORY_COUNT)
        fprintf(f,
                "<line x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\" stroke=\"#222\" "
                "stroke-width=\"1.5\" stroke-dasharray=\"6 4\"/>\n",
                x, y - 4, x + 14, y - 4);
    else
        fprintf(f, "<circle cx=\"%.1f\" cy=\"%.1f\" r=\"4\" fill=\"#000\"/>\n", x + 7, y - 4);
    fprintf(f, "<text x=\"%.1f\" y=\"%.1f\" font-size=\"12\">%s</text>\n", x + 20, y, label);
}

/* Swatches for the categories some shown rank ever holds, the DDP level and the peak, wrapped
 * into rows; returns the number of rows. f NULL: only lays it out (the height comes first). */
static int legend(FILE *f, const MemoryTimeline *mt, int shown, size_t ddp_bytes) {
    const double right = SVG_WIDTH - SVG_RIGHT;
    double x = SVG_LEFT, y = SVG_LEGEND_TOP;
    int rows = 1;
    for (int item = 0; item < MEM_CATEGORY_COUNT + 2; item++) {
        const char *label;
        if (item < MEM_CATEGORY_COUNT) {
            int any = 0;
            for (int q = 0; q < shown; q++) any |= mt->ranks[q].max[item] != 0;
            if (!any || mem_category_off_gpu((MemCategory)item)) continue;
            label = mem_category_label((MemCategory)item);
        } else if (item == MEM_CATEGORY_COUNT) {
            if (!ddp_bytes) continue;
            label = "DDP at rest";
        } else {
            label = "peak";
        }
        double w = 22 + 6.5 * (double)strlen(label) + 16; /* swatch, text, gap */
        if (x + w > right && x > SVG_LEFT) x = SVG_LEFT, y += SVG_LEGEND_ROW, rows++;
        if (f) legend_item(f, item, x, y, label);
        x += w;
    }
    return rows;
}

int memory_svg_write(const MemoryTimeline *mt, const MemorySvgOptions *o, FILE *f, Err *err) {
    MemorySvgOptions none = {0};
    if (!o) o = &none;
    int shown = shown_ranks(mt);
    size_t most = o->ddp_bytes;
    for (int q = 0; q < shown; q++)
        if (mt->ranks[q].peak > most) most = mt->ranks[q].peak;
    ByteAxis axis = byte_axis(most);
    TimeUnit u = time_unit_for(mt->end - mt->start);

    int legend_rows = legend(NULL, mt, shown, o->ddp_bytes);
    double panels_top = SVG_LEGEND_TOP + legend_rows * SVG_LEGEND_ROW + 8;
    int more = mt->nranks - shown;
    int height = (int)panels_top + shown * SVG_PANEL + (more > 0 ? 24 : 0) + 8;

    svg_begin(f, SVG_WIDTH, height);
    fprintf(f, "<text x=\"%d\" y=\"26\" font-size=\"17\" font-weight=\"bold\">", SVG_LEFT);
    if (o->title)
        svg_text(f, o->title);
    else
        fprintf(f, "Memory over step %d", mt->step + 1);
    char span[32];
    fprintf(f,
            "</text>\n<text x=\"%d\" y=\"44\" font-size=\"12\" fill=\"#555\">step %d, %s "
            "%s; bytes by category, stacked; every GPU on one scale</text>\n",
            SVG_LEFT, mt->step + 1, format_time(mt->end - mt->start, u, span, sizeof span),
            mt->clock);
    legend(f, mt, shown, o->ddp_bytes);
    for (int q = 0; q < shown; q++) {
        Panel p = {.top = panels_top + q * SVG_PANEL + SVG_PANEL_LABEL,
                   .start = mt->start,
                   .span = mt->end - mt->start,
                   .max_bytes = axis.top * axis.unit_bytes};
        rank_panel(f, mt, q, &p, &axis, u, o->ddp_bytes);
    }
    if (more > 0)
        fprintf(f, "<text x=\"%d\" y=\"%.1f\" font-size=\"13\">+%d more GPUs not shown</text>\n",
                SVG_LEFT, panels_top + shown * SVG_PANEL + 14, more);
    fputs("</svg>\n", f);
    return finish_output(f, "memory SVG", err);
}
