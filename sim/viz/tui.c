/* tui: the full-screen ncurses viewer an instructor drives in front of a room: it draws frames and
 * moves between them on keys, at 80x24, over ssh, with or without colour. */
#include "sim/viz/tui.h"

#include <curses.h>
#include <locale.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "sim/viz/compare.h"
#include "sim/viz/moments.h"
#include "sim/viz/nav.h"
#include "sim/viz/plain.h"
#include "sim/viz/text.h"

enum {
    MIN_COLS = 60,
    MIN_ROWS = 12,
    CELL = 200,
    SIDE_MIN_COLS = 60,                          /* a column of the side-by-side view */
    GRID_LABEL = 9,                              /* " GPU n   " before the grid's first unit */
    TIMELINE_MIN_COLS = 40,                      /* fewer: too coarse to read */
    TIMELINE_WIDTH = 16 + TIMELINE_MIN_COLS + 1, /* "GPU n  compute " and the row */
    TIMELINE_ROWS = 2, /* the timeline's rows besides its GPUs': phases, time axis */
    GRID_SIDE = 16,    /* right of the grid: "NN more units →", "← params kept" */
    COMPACT_STEP = 1,  /* where the stacked DDP view starts shrinking */
    LAST_STEP = 11,
};

/* A rectangle of the screen that one side's panels draw in; rows and columns count from its
 * top left corner. */
typedef struct Region {
    int x, y, w, h;
} Region;

/* One run on screen: the viewed one, or the same step under DDP beside it. */
typedef struct Side {
    const Trace *t;
    const Plan *p;
    Frame f;
    size_t index;
    size_t top; /* the largest rank peak of the whole trace */
    int open;   /* f is sized for p */
    /* The grid's window of units: it shows units [grid_first, grid_first + grid_shown). It
     * follows the current event's unit when the event or the width changes (grid_for and
     * grid_shown say for which it last did); keys < and > move it in between. */
    int grid_first, grid_shown;
    size_t grid_for;
    unsigned categories; /* bit c: the trace charges memory to category c (the bars' legend) */
    size_t *ends;        /* a DDP side: where each rank stands at the run's event (compare.c) */
    /* Rows the trace's longest narration takes at width need_width, which the layout keeps for
     * the narration at every event, so that no "why" is cut and the panels stay put. */
    int narration_rows, need_width, need_by_event;
    /* The presenter's frames of t (moments.h): the run's side steps by them unless by_event,
     * and `moment` is the one shown, whose last event is `index`. */
    Moments moments;
    size_t moment;
} Side;

typedef struct Viewer {
    Side run, ddp;
    /* The same step under DDP, accounting only, from the start: at the run's every event, what
     * each DDP GPU holds at the same point (the bars' marks); not open: no marks */
    Side marks;
    const TuiCompare *peer; /* NULL: no DDP run to compare with */
    int compare;            /* the DDP view is on */
    char ddp_error[512];    /* why loading the DDP run failed ("" while it has not) */
    int playing, delay_ms, help, colour;
    int by_event;     /* key e: every event, or (0) the presenter's frames */
    char status[600]; /* a message in the key line's place, until the next key */
} Viewer;

static void side_close(Side *s);

/* ---------------------------------------------------------------- text in a region */

/* Bytes of the longest prefix of s that takes at most `cols` columns (one per code point, as
 * text_display_width counts them). */
static int prefix_bytes(const char *s, int cols) {
    int bytes = 0, used = 0;
    for (; s[bytes]; bytes++) {
        int starts = ((unsigned char)s[bytes] & 0xC0) != 0x80;
        if (starts && used++ == cols) break;
    }
    return bytes;
}

/* Prints s at row y, column x of the region, cut at the region's right edge. */
static void put(const Region *r, int y, int x, const char *s) {
    if (y < 0 || y >= r->h || x >= r->w) return;
    mvaddnstr(r->y + y, r->x + x, s, prefix_bytes(s, r->w - x));
}

static Region whole_screen(void) {
    return (Region){0, 0, COLS, LINES};
}

/* The bytes of s that go on one row of `width` columns: up to the last space that fits, if
 * there is one, else as many as fit. */
static int row_cut(const char *s, int width) {
    int fits = prefix_bytes(s, width);
    if (s[fits])
        for (int i = fits; i > 0; i--)
            if (s[i] == ' ') return i;
    return fits;
}

/* Rows s takes wrapped at `width` columns, as wrapped() draws it with room enough. */
static int rows_needed(const char *s, int width) {
    int rows = 0;
    while (*s && width > 1) {
        s += row_cut(s, width);
        while (*s == ' ') s++;
        rows++;
    }
    return rows;
}

/* s wrapped at word boundaries over the `rows` rows from row y (indented one column); when it
 * needs more, the last row ends in "…". */
static void wrapped(const Region *r, int y, const char *s, int rows) {
    int width = r->w - 2;
    for (int used = 0; *s && used < rows && width > 1; used++) {
        int cut = row_cut(s, width);
        char line[600];
        if (used == rows - 1 && s[cut])
            snprintf(line, sizeof line, "%.*s\u2026", prefix_bytes(s, width - 1), s);
        else
            snprintf(line, sizeof line, "%.*s", cut, s);
        put(r, y + used, 1, line);
        s += cut;
        while (*s == ' ') s++;
    }
}

/* ---------------------------------------------------------------- layout */

/* How much of each panel a side shows. The narration has the rows the trace's longest takes
 * (Side.narration_rows), so that the "why" is not cut while there is room for it. The timeline
 * shows as many GPUs as the full panels leave rows for (all GPUs run the same schedule, so the
 * first few say most of it); where they leave too few for GPU 0's, the collective's flow beyond
 * one row, the blank rows between panels and then the note on activations give way to it, and
 * only then does the timeline go. A side that does not fit its region then gives up, in this
 * order: the collective's flow beyond one row; the blank rows between panels; the note on
 * activations; the narration beyond three rows, then two; the memory bars, for one summary line;
 * the flow;
 * the narration beyond one row; the narration and the memory line. Only then does the grid
 * lose rank rows, with a row saying how many are not shown: which GPU holds what is what the
 * view is about. Where the timeline is hidden, the single view says so in one row (the notice)
 * instead of leaving people to wonder. The rows reserved for the texts do not follow their
 * length, so that panels stay put while one steps through events. */
typedef struct Layout {
    int gap;            /* blank rows between panels */
    int narration;      /* rows for the narration */
    int flow;           /* rows for the collective's flow */
    int grid_rows;      /* rank rows of the grid; fewer than the ranks adds a "+K more GPUs" row */
    int bars;           /* 1 a bar per rank, 0 one summary line, -1 no memory */
    int note;           /* a row under the bars on activations, which FSDP does not shard */
    int timeline;       /* GPUs the timeline shows, from GPU 0 (0: hidden) */
    int notice;         /* a row saying that (and why) the timeline is hidden */
    int narration_need; /* rows the longest narration takes: what spare rows give back */
} Layout;

static Layout layout_step(int step, int nranks, int narration, int note) {
    Layout l = {.gap = 1,
                .narration = narration,
                .flow = 2,
                .grid_rows = nranks,
                .bars = 1,
                .note = note,
                .narration_need = narration};
    if (step >= 1) l.flow = 1;
    if (step >= 2) l.gap = 0;
    if (step >= 3) l.note = 0;
    for (int rows = 3; rows >= 2; rows--) /* steps 4, 5: from here a long "why" ends in "…" */
        if (step >= 7 - rows && l.narration > rows) l.narration = rows;
    if (step >= 6) l.bars = 0;
    if (step >= 7) l.flow = 0;
    if (step >= 8 && l.narration > 1) l.narration = 1;
    if (step >= 9) l.narration = 0;
    if (step >= 10) l.bars = -1;
    return l;
}

static int layout_rows(const Layout *l, int nranks, int titled) {
    int rows = titled + l->gap + l->narration + l->flow + l->gap;
    rows += 1 + l->grid_rows + (l->grid_rows < nranks);
    if (l->bars >= 0) rows += l->gap + (l->bars ? 1 + nranks + l->note : 1);
    if (l->timeline) rows += l->gap + TIMELINE_ROWS + 2 * l->timeline;
    if (l->notice) rows += l->gap + 1;
    return rows;
}

/* The layouts that keep the timeline, steps 0 to 3, the richest first: the full panels, then
 * without the flow's second row, without the blank rows, and without the note on activations
 * (before any narration row goes). */
enum { TIMELINE_TRIES = 4 };

/* Rows more than the region has that showing the timeline of `ranks` GPUs needs: with the
 * panels that give way to it for one GPU, with the full panels for more. */
static int timeline_shortfall(int nranks, const Region *r, int titled, int ranks, int narration,
                              int note) {
    Layout l = layout_step(ranks == 1 ? TIMELINE_TRIES - 1 : 0, nranks, narration, note);
    l.timeline = ranks;
    return layout_rows(&l, nranks, titled) - r->h;
}

/* Rows a shrunk layout leaves over go back to the texts it cut: the flow's second, then the
 * narration's, up to what the longest takes. They depend on the region and the trace only, not
 * on the current text, so the panels stay put from one event to the next. */
static void texts_take_spare_rows(Layout *l, int spare) {
    if (spare > 0 && l->flow == 1) l->flow = 2, spare--;
    for (; spare > 0 && l->narration > 0 && l->narration < l->narration_need; spare--)
        l->narration++;
}

/* The richest layout from step `first` on that fits h rows; `notice`: say so where the
 * timeline is hidden (the single view; beside DDP the timeline gives way to the comparison);
 * `note`: the side has a note on activations under its bars. */
static Layout layout_fit(int nranks, const Region *r, int titled, int first, int notice,
                         int narration, int note) {
    Layout l;
    for (int try = 0; first == 0 && r->w >= TIMELINE_WIDTH && try < TIMELINE_TRIES; try++) {
        l = layout_step(try, nranks, narration, note);
        int gpus = (r->h - layout_rows(&l, nranks, titled) - l.gap - TIMELINE_ROWS) / 2;
        if (gpus >= 1) {
            l.timeline = gpus < nranks ? gpus : nranks;
            texts_take_spare_rows(&l, r->h - layout_rows(&l, nranks, titled));
            return l;
        }
    }
    l = layout_step(first, nranks, narration, note);
    l.notice = notice;
    for (int step = first + 1; step < LAST_STEP && layout_rows(&l, nranks, titled) > r->h; step++) {
        l = layout_step(step, nranks, narration, note);
        l.notice = notice;
    }
    if (layout_rows(&l, nranks, titled) > r->h) l.notice = 0; /* before any grid row */
    if (layout_rows(&l, nranks, titled) > r->h) { /* the grid's rows, one marker row for the rest */
        int spare = r->h - (layout_rows(&l, nranks, titled) - nranks);
        l.grid_rows = spare - 1 > 1 ? spare - 1 : 1;
    }
    texts_take_spare_rows(&l, r->h - layout_rows(&l, nranks, titled));
    return l;
}

/* ---------------------------------------------------------------- panels */

static void draw_header(const Viewer *v) {
    const Side *s = &v->run;
    const TraceEvent *e = s->f.event;
    const Moment *m = &s->moments.m[s->moment];
    char line[512], where[96], who[32];
    int work = v->by_event || m->anchor != MOMENT_NO_ANCHOR;
    if (v->by_event)
        snprintf(where, sizeof where, "event %zu/%zu", s->index + 1, s->t->n);
    else if (m->first == m->last)
        snprintf(where, sizeof where, "frame %zu/%zu (event %zu)", s->moment + 1, s->moments.n,
                 m->first + 1);
    else
        snprintf(where, sizeof where, "frame %zu/%zu (events %zu-%zu)", s->moment + 1, s->moments.n,
                 m->first + 1, m->last + 1);
    if (v->by_event)
        snprintf(who, sizeof who, "GPU %d  ", e->rank);
    else if (work && m->anchors >= s->t->nranks)
        snprintf(who, sizeof who, "all GPUs  ");
    else if (work)
        snprintf(who, sizeof who, "%d GPUs  ", m->anchors);
    else
        who[0] = 0;
    snprintf(line, sizeof line, " %s  step %d  %s  %s%s %s%s%s ", where, e->step + 1, s->f.phase,
             who, work ? event_kind_name((EventKind)e->kind) : "allocations and frees",
             work && e->unit >= 0 && e->unit < s->p->nunits ? s->p->units[e->unit].name : "",
             s->f.accounting_only ? "  accounting only" : "", v->playing ? "  [playing]" : "");
    Region screen = whole_screen();
    attron(A_REVERSE);
    put(&screen, 0, 0, line);
    attroff(A_REVERSE);
}

/* Whether some unit's cells are numbers (a unit without symbols: the count of its parameters
 * a GPU keeps at rest), which need a label beside the grid; the toy's symbols say it. */
static int grid_has_numbers(const Plan *p) {
    for (int u = 0; u < p->nunits; u++)
        if (!text_unit_is_symbolic(p, u)) return 1;
    return 0;
}

/* How many units' columns fit in w columns, leaving GRID_SIDE to their right for the "NN more
 * units →" marker when not all do and for the numbers' label when `numbers` (at least one: a
 * lone column is cut at the edge instead). */
static int units_shown(int w, int col, int nunits, int numbers) {
    int shown = nunits;
    while (shown > 1 && GRID_LABEL + col * shown + (shown < nunits || numbers ? GRID_SIDE : -2) > w)
        shown--;
    return shown;
}

/* Keeps the grid's window of `shown` units on the current event's unit: when the event (or
 * the width) has changed since it last looked, the window moves just enough to show that unit;
 * an event without a unit shows `fallback` (the run's unit, for the DDP side; -1 none) or
 * leaves the window where it was. Between events, keys < and > move it. */
static void grid_follow(Side *s, int shown, int fallback) {
    int n = s->p->nunits;
    const TraceEvent *e = s->f.event;
    if (s->grid_for != s->index || s->grid_shown != shown) {
        s->grid_for = s->index;
        s->grid_shown = shown;
        int unit = e && e->unit >= 0 && e->unit < n ? e->unit : fallback < n ? fallback : -1;
        if (unit >= 0 && unit < s->grid_first) s->grid_first = unit;
        if (unit >= 0 && unit >= s->grid_first + shown) s->grid_first = unit - shown + 1;
    }
    if (s->grid_first > n - shown) s->grid_first = n - shown;
    if (s->grid_first < 0) s->grid_first = 0;
}

/* The ownership grid: unit names, then a row per rank; returns the rows used. Units that do not
 * fit are counted on the side they are on: "←3 units" in the corner above the GPU labels,
 * "5 more units →" after the last column. */
static int draw_grid(const Viewer *v, Side *s, const Region *r, int y, int rows) {
    int col = (int)plain_cell_width(&s->f, s->p) + 2, n = s->p->nunits;
    int numbers = grid_has_numbers(s->p);
    int shown = units_shown(r->w, col, n, numbers);
    grid_follow(s, shown, s == &v->ddp ? v->run.f.event->unit : -1);
    int first = s->grid_first, after = n - first - shown;
    char text[CELL];
    for (int i = 0; i < shown; i++) put(r, y, GRID_LABEL + col * i, s->p->units[first + i].name);
    if (first > 0) {
        snprintf(text, sizeof text, "\u2190%d unit%s", first, first == 1 ? "" : "s");
        if (text_display_width(text) >= GRID_LABEL) snprintf(text, sizeof text, "\u2190%d", first);
        put(r, y, 0, text);
    }
    if (after > 0) {
        snprintf(text, sizeof text, "%d more unit%s \u2192", after, after == 1 ? "" : "s");
        put(r, y, GRID_LABEL + col * shown, text);
    }
    for (int rank = 0; rank < rows && rank < s->f.nranks; rank++) {
        snprintf(text, sizeof text, " GPU %d", rank);
        put(r, y + 1 + rank, 0, text);
        for (int i = 0; i < shown; i++) {
            size_t width = (size_t)col - 2;
            plain_cell_text(&s->f, s->p, rank, first + i, &width, text, CELL);
            int gathered = frame_cell(&s->f, rank, first + i)->gathered;
            if (gathered) attron(v->colour ? COLOR_PAIR(1) : A_BOLD);
            put(r, y + 1 + rank, GRID_LABEL + col * i, text);
            if (gathered) attroff(v->colour ? COLOR_PAIR(1) : A_BOLD);
        }
    }
    if (numbers) { /* what the numbers are, beside the first row of them */
        attron(A_DIM);
        put(r, y + 1, GRID_LABEL + col * shown, "\u2190 params kept");
        attroff(A_DIM);
    }
    if (rows >= s->f.nranks) return 1 + s->f.nranks;
    int more = s->f.nranks - rows;
    snprintf(text, sizeof text, " +%d more GPU%s (a taller terminal shows them)", more,
             more == 1 ? "" : "s");
    put(r, y + 1 + rows, 0, text);
    return 2 + rows;
}

/* One letter per memory category in the stacked bars, in MemCategory order, and the word the
 * legend gives it. */
static const char bar_letter[MEM_CATEGORY_COUNT] = {'P', 'U', 'G', 'g', 'O', 'A',
                                                    'C', 'H', 'K', 'N', 'F'};
static const char *const bar_word[MEM_CATEGORY_COUNT] = {"shard", "gathered", "grad", "full grad",
                                                         "optim", "act",      "comm", "host",
                                                         "ckpt",  "nvme",     "copy"};

/* Whether the bars mark what DDP holds beside them: the run's bars, when the DDP run for the
 * marks is there. */
static int has_marks(const Viewer *v, const Side *s) {
    return s == &v->run && v->marks.open;
}

/* What DDP holds on GPU r at the same point as the run's (Viewer.marks). */
static size_t mark_bytes(const Viewer *v, int r) {
    return frame_gpu_bytes(&v->marks.f, r);
}

/* "memory: P shard U gathered ... |DDP here": the letters this run's bars can show (the help
 * lists them all) and, with the marks, what the '|' marks. */
static void bars_legend(const Viewer *v, const Side *s, char *line, size_t n) {
    size_t at = (size_t)snprintf(line, n, "memory:");
    for (int c = 0; c < MEM_CATEGORY_COUNT && at < n; c++)
        if (s->categories & (1u << c) && !mem_category_off_gpu((MemCategory)c))
            at += (size_t)snprintf(line + at, n - at, " %c %s", bar_letter[c], bar_word[c]);
    if (at < n && has_marks(v, s)) snprintf(line + at, n - at, " |DDP here");
}

/* The bars' full scale: the largest peak of the runs on screen and of DDP's, the same for both
 * sides so that their bars compare. */
static size_t memory_scale(const Viewer *v) {
    size_t top = v->run.top;
    if (v->marks.open && v->marks.top > top) top = v->marks.top;
    if (v->compare && v->ddp.top > top) top = v->ddp.top;
    return top ? top : 1;
}

/* Cells of a bar of `bar` cells, `top` bytes in all, for each category of `bytes`: every
 * category that holds anything gets one at least and the rest are shared out in proportion
 * (largest remainders first), so a shard of kilobytes beside megabytes of activations still
 * shows. The bar fills as far as the total's proportion, or as far as one cell a category
 * needs. Returns the cells filled. */
static int bar_cells(const size_t *bytes, size_t top, int bar, int *cells) {
    size_t used = 0;
    int held = 0;
    for (int c = 0; c < MEM_CATEGORY_COUNT; c++) {
        used += bytes[c];
        held += bytes[c] > 0;
        cells[c] = 0;
    }
    if (!used) return 0;
    int total = (int)((double)bar * (double)used / (double)top + 0.5);
    if (total < held) total = held;
    if (total > bar) total = bar;
    double want[MEM_CATEGORY_COUNT];
    int sum = 0;
    for (int c = 0; c < MEM_CATEGORY_COUNT; c++) {
        want[c] = (double)total * (double)bytes[c] / (double)used;
        cells[c] = bytes[c] ? (int)want[c] : 0;
        if (bytes[c] && cells[c] < 1) cells[c] = 1;
        sum += cells[c];
    }
    while (sum > total) { /* the minimum cells came from the largest; past `bar`, a category goes */
        int most = -1;
        for (int c = 0; c < MEM_CATEGORY_COUNT; c++)
            if (cells[c] > 0 &&
                (most < 0 || cells[c] > cells[most] ||
                 (cells[c] == cells[most] && cells[most] == 1 && bytes[c] < bytes[most])))
                most = c;
        cells[most]--;
        sum--;
    }
    while (sum < total) {
        int best = -1;
        for (int c = 0; c < MEM_CATEGORY_COUNT; c++)
            if (bytes[c] && (best < 0 || want[c] - cells[c] > want[best] - cells[best])) best = c;
        cells[best]++;
        sum++;
    }
    return total;
}

/* One GPU's bar: its categories' letters in MemCategory order, then '.', and where `mark` >= 0
 * a '|' in cell `mark`, or beside it where that cell is the only one of its category. */
static void bar_text(const size_t *bytes, size_t top, int bar, int mark, char *out) {
    int cells[MEM_CATEGORY_COUNT], at = 0;
    bar_cells(bytes, top, bar, cells);
    for (int c = 0; c < MEM_CATEGORY_COUNT; c++)
        for (int k = 0; k < cells[c]; k++) out[at++] = bar_letter[c];
    while (at < bar) out[at++] = '.';
    out[bar] = 0;
    if (mark < 0) return;
    if (mark >= bar) mark = bar - 1;
    for (int shift = 0; shift < 3; shift++) { /* mark, mark + 1, mark - 1 */
        int cell = mark + (shift == 1) - (shift == 2);
        if (cell < 0 || cell >= bar) continue;
        char ch = out[cell];
        int alone = ch != '.' && (cell == 0 || out[cell - 1] != ch) &&
                    (cell + 1 >= bar || out[cell + 1] != ch);
        if (!alone) {
            out[cell] = '|';
            return;
        }
    }
}

/* One bar per rank, stacked by category (a letter each; bar_cells), with a '|' where DDP's
 * bytes on that GPU at the same point reach and those bytes after the run's; the bar's length
 * leaves room for the widest "] used (peak p) DDP d" the scale allows, so it is the same on both
 * sides. Returns the rows used. */
static int draw_bars(const Viewer *v, const Side *s, const Region *r, int y) {
    size_t top = memory_scale(v);
    char a[32], b[32], c[32], line[600], bar_line[420];
    int marks = has_marks(v, s);
    int tail = 2 * (int)strlen(format_bytes(top, a, sizeof a)) + 10;
    if (v->marks.open) tail += 5 + (int)strlen(a); /* both sides: the same length */
    /* room for what offload keeps off the GPU, the same in every frame and on both sides
     * ("1023.99 MiB" at most) */
    unsigned held = v->run.categories | (v->compare ? v->ddp.categories : 0);
    if (held & (1u << MEM_HOST_OFFLOAD)) tail += (int)strlen(" + host ") + 11;
    if (held & (1u << MEM_NVME)) tail += (int)strlen(" + NVMe ") + 11;
    int bar = r->w - GRID_LABEL - tail;
    bar = bar < 8 ? 8 : bar > 400 ? 400 : bar;
    bars_legend(v, s, line, sizeof line);
    put(r, y, 1,
        text_display_width(line) + 1 <= (size_t)r->w ? line
        : marks                                      ? "memory (letters: see h)  |DDP here"
                                                     : "memory (letters: see h)");
    for (int rank = 0; rank < s->f.nranks; rank++) {
        size_t bytes[MEM_CATEGORY_COUNT]; /* the bar's; plain_off_gpu_text says the rest after it */
        for (int c = 0; c < MEM_CATEGORY_COUNT; c++)
            bytes[c] = frame_gpu_mem(&s->f, rank, (MemCategory)c);
        int mark =
            marks ? (int)((double)bar * (double)mark_bytes(v, rank) / (double)top + 0.5) : -1;
        bar_text(bytes, top, bar, mark, bar_line);
        char off[80];
        plain_off_gpu_text(&s->f, rank, off, sizeof off);
        int at = snprintf(line, sizeof line, " GPU %-2d [%s] %s (peak %s)%s", rank, bar_line,
                          format_bytes(frame_gpu_bytes(&s->f, rank), a, sizeof a),
                          format_bytes(s->f.peak[rank], b, sizeof b), off);
        if (marks && at > 0 && (size_t)at < sizeof line)
            snprintf(line + at, sizeof line - (size_t)at, " DDP %s",
                     format_bytes(mark_bytes(v, rank), c, sizeof c));
        put(r, y + 1 + rank, 0, line);
    }
    return 1 + s->f.nranks;
}

/* Activations (and checkpointed inputs) over half of GPU r's bytes: their percentage, else 0. */
static int activation_share(const Frame *f, int r) {
    size_t used = frame_gpu_bytes(f, r);
    size_t act = frame_mem(f, r, MEM_ACTIVATIONS) + frame_mem(f, r, MEM_AC_INPUT);
    return used && 2 * act > used ? (int)(100.0 * (double)act / (double)used + 0.5) : 0;
}

/* The note under the bars: where activations are most of a GPU's bytes (the current event's
 * GPU, else the one where they are the most), that FSDP does not shard them; the longest
 * wording that fits the width. Nothing while activations are not most of any GPU's bytes. */
static void draw_note(const Side *s, const Region *r, int y) {
    int gpu = s->f.event ? s->f.event->rank : 0, share = activation_share(&s->f, gpu);
    for (int q = 0; !share && q < s->f.nranks; q++)
        if (activation_share(&s->f, q) > share) share = activation_share(&s->f, q), gpu = q;
    if (!share) return;
    char used[32], line[4][200];
    format_bytes(frame_gpu_bytes(&s->f, gpu), used, sizeof used);
    snprintf(line[0], sizeof line[0],
             "activations are %d%% of GPU %d's %s: FSDP shards parameters, gradients and "
             "optimizer state across the GPUs, not activations (each keeps its own batch's)",
             share, gpu, used);
    snprintf(line[1], sizeof line[1],
             "activations are %d%% of GPU %d's %s: FSDP shards parameters, gradients and "
             "optimizer state, not activations",
             share, gpu, used);
    snprintf(line[2], sizeof line[2],
             "%d%% of GPU %d is activations: FSDP shards params, grads, optim state, not these",
             share, gpu);
    snprintf(line[3], sizeof line[3], "GPU %d: %d%% activations, which FSDP does not shard", gpu,
             share);
    int pick = 0;
    while (pick < 3 && (int)text_display_width(line[pick]) > r->w - 2) pick++;
    attron(A_DIM);
    put(r, y, 1, line[pick]);
    attroff(A_DIM);
}

/* The bars in one line, when they do not fit: the rank using the most now (the larger peak
 * among equals) and, with the marks, what DDP holds there at the same point. */
static int draw_memory_line(const Viewer *v, const Side *s, const Region *r, int y) {
    int most = 0;
    for (int rank = 1; rank < s->f.nranks; rank++) {
        size_t used = frame_gpu_bytes(&s->f, rank), best = frame_gpu_bytes(&s->f, most);
        if (used > best || (used == best && s->f.peak[rank] > s->f.peak[most])) most = rank;
    }
    char a[32], b[32], c[32], off[80], line[240];
    plain_off_gpu_text(&s->f, most, off, sizeof off);
    int at = snprintf(line, sizeof line, "memory max GPU %d: %s (peak %s)%s", most,
                      format_bytes(frame_gpu_bytes(&s->f, most), a, sizeof a),
                      format_bytes(s->f.peak[most], b, sizeof b), off);
    if (has_marks(v, s) && at > 0 && (size_t)at < sizeof line)
        snprintf(line + at, sizeof line - (size_t)at, ", DDP here %s",
                 format_bytes(mark_bytes(v, most), c, sizeof c));
    put(r, y, 1, line);
    return 1;
}

/* The step's phases with a 'v' over the current event, the compute and comm streams of GPUs 0
 * to gpus-1 and the time axis, across the region's width (16 columns of labels); the phases'
 * label says which GPUs when not all fit. */
static void draw_timeline(Side *s, const Region *r, int y, int gpus) {
    char line[FRAME_TIMELINE_MAX + 64], row[FRAME_TIMELINE_MAX + 1], label[48];
    int n = s->f.nranks;
    frame_timeline(&s->f, s->t, r->w - 16 - 1);
    snprintf(label, sizeof label, "timeline");
    if (gpus < n && gpus > 1 &&
        snprintf(label, sizeof label, "GPUs 0-%d of %d", gpus - 1, n) > 14) /* the 16 columns */
        snprintf(label, sizeof label, "GPUs 0-%d/%d", gpus - 1, n);
    if (gpus < n && gpus == 1) snprintf(label, sizeof label, "GPU 0 of %d", n);
    plain_timeline_phases(&s->f, s->f.cursor, row, sizeof row);
    snprintf(line, sizeof line, " %-14.14s %s", label, row);
    put(r, y, 0, line);
    for (int rank = 0; rank < gpus && rank < n; rank++) {
        snprintf(line, sizeof line, " GPU %-2d compute %s", rank,
                 s->f.timeline[rank * STREAM_COUNT + STREAM_COMPUTE]);
        put(r, y + 1 + 2 * rank, 0, line);
        snprintf(line, sizeof line, "        comm    %s",
                 s->f.timeline[rank * STREAM_COUNT + STREAM_COMM]);
        put(r, y + 2 + 2 * rank, 0, line);
    }
    snprintf(label, sizeof label, "%s, %s", plain_timeline_unit(&s->f),
             s->f.scanned ? trace_clock(s->f.scanned) : "modelled");
    plain_timeline_axis(&s->f, row, sizeof row);
    snprintf(line, sizeof line, " %-14.14s %s", label, row);
    attron(A_DIM);
    put(r, y + 1 + 2 * (gpus < n ? gpus : n), 0, line);
    attroff(A_DIM);
}

/* Rows the trace's longest narration takes in region width w (cached per width): every event's
 * narration made in a scratch frame filled once, without replaying the trace for each. */
static int narration_rows(Side *s, int w, int by_event) {
    if (s->need_width == w && s->need_by_event == by_event) return s->narration_rows;
    Frame scratch;
    Err err = {0};
    int most = 1;
    if (frame_init(&scratch, s->p, &err) == 0) {
        int filled = frame_at(&scratch, s->t, s->p, 0, &err) == 0; /* what each rank keeps */
        for (size_t i = 0; filled && by_event && i < s->t->n; i++) {
            frame_narrate(&scratch, s->t, s->p, i);
            int rows = rows_needed(scratch.narration, w - 2);
            if (rows > most) most = rows;
        }
        for (size_t k = 0; filled && !by_event && k < s->moments.n; k++) {
            moments_narrate(&scratch, s->t, s->p, &s->moments, k);
            int rows = rows_needed(scratch.narration, w - 2);
            if (rows > most) most = rows;
        }
        frame_free(&scratch);
    }
    s->need_width = w;
    s->need_by_event = by_event;
    s->narration_rows = most;
    return most;
}

/* In the timeline's place when it is hidden: what it would take to show it. */
static void draw_timeline_notice(const Side *s, const Region *r, int y, int titled, int note) {
    char line[160];
    int n = s->f.nranks;
    if (r->w < TIMELINE_WIDTH) {
        snprintf(line, sizeof line, "timeline hidden: needs %d columns, has %d", TIMELINE_WIDTH,
                 r->w);
    } else {
        int one = timeline_shortfall(n, r, titled, 1, s->narration_rows, note),
            all = timeline_shortfall(n, r, titled, n, s->narration_rows, note);
        int at = snprintf(line, sizeof line, "timeline hidden: needs %d more row%s", one,
                          one == 1 ? "" : "s");
        if (n > 1) snprintf(line + at, sizeof line - (size_t)at, " (%d for all %d GPUs)", all, n);
    }
    attron(A_DIM);
    put(r, y, 1, line);
    attroff(A_DIM);
}

/* One side's panels in its region, top to bottom, as many as fit (see Layout); `title` (NULL
 * for none) heads the region, and the layout shrinks from step `first`. */
static void draw_side(const Viewer *v, Side *s, const Region *r, const char *title, int first) {
    int nranks = s->f.nranks;
    int by_event = s != &v->run || v->by_event; /* the DDP side shows the matched event */
    /* the note on activations is the run's: it says what FSDP shards */
    int note = s == &v->run && (s->categories & (1u << MEM_ACTIVATIONS | 1u << MEM_AC_INPUT));
    Layout l = layout_fit(nranks, r, title != NULL, first, title == NULL,
                          narration_rows(s, r->w, by_event), note);
    int y = 0;
    if (title) {
        attron(A_BOLD | A_UNDERLINE);
        put(r, y++, 0, title);
        attroff(A_BOLD | A_UNDERLINE);
    }
    y += l.gap;
    wrapped(r, y, s->f.narration, l.narration);
    y += l.narration;
    attron(A_BOLD);
    wrapped(r, y, s->f.flow, l.flow);
    attroff(A_BOLD);
    y += l.flow + l.gap;
    y += draw_grid(v, s, r, y, l.grid_rows);
    if (l.bars >= 0)
        y +=
            l.gap + (l.bars ? draw_bars(v, s, r, y + l.gap) : draw_memory_line(v, s, r, y + l.gap));
    if (l.note) draw_note(s, r, y++);
    if (l.timeline) draw_timeline(s, r, y + l.gap, l.timeline);
    if (l.notice) draw_timeline_notice(s, r, y + l.gap, title != NULL, note);
}

static void draw_help(void) {
    static const char *const lines[] = {
        "keys",
        "  n, space, right  next frame: a collective or compute across all GPUs, the",
        "                   allocations and frees around it folded in (with e: event)",
        "  p, left          previous frame (with e: event)",
        "  c / C            next / previous collective: all_gather, reduce_scatter,",
        "                   all_reduce, broadcast, barrier",
        "  k / K            next / previous compute: forward, backward, recompute,",
        "                   optimizer",
        "  f / b / o        first collective or compute of this step's forward / backward /",
        "                   optimizer (with e: its first event)",
        "  < / >            move the grid's units left / right (it follows the event)",
        "  g                go to a frame (with e: an event; type its number, Enter)",
        "  e                every event (allocations, frees, each GPU) / frames",
        "  d                DDP beside this run, at the same point (d again: off)",
        "  r                play / pause;  + / -  faster / slower",
        "  h                this help (any key closes it)",
        "  q                quit",
        "grid: what each GPU keeps of a unit: the toy's shards by name, else how many",
        "  parameters (\u2190 params kept); +all gathered, +\u2202all full gradients;",
        "  \u21903 units and 5 more units \u2192: units off the screen on that side",
        "memory bars: P shard  U gathered  G grad  g full grad  O optimizer",
        "  A activations  C comm buffers  H host  K checkpointed inputs  N NVMe",
        "  F compute copy;  | where DDP's bytes reach on that GPU at the same point",
        "timeline: the step's phases (v: this event), # compute, = comm, time axis",
    };
    Region screen = whole_screen();
    for (size_t i = 0; i < sizeof lines / sizeof *lines; i++) put(&screen, 2 + (int)i, 2, lines[i]);
}

/* Units of a side's grid that w columns show. */
static int grid_units_in(const Side *s, int w) {
    return units_shown(w, (int)plain_cell_width(&s->f, s->p) + 2, s->p->nunits,
                       grid_has_numbers(s->p));
}

/* Side by side needs SIDE_MIN_COLS for each column (the same width, so that both sides' bars
 * have the same length) and must not cut grid columns that the full width would show: the
 * grid is what the view is about (the toy with its values needs about 2x75). */
static int side_by_side(const Viewer *v) {
    int w = (COLS - 1) / 2;
    return w >= SIDE_MIN_COLS && grid_units_in(&v->run, w) == grid_units_in(&v->run, COLS) &&
           grid_units_in(&v->ddp, w) == grid_units_in(&v->ddp, COLS);
}

/* The run and DDP, side by side when they fit (above), else stacked with the compact panels. */
static void draw_compare(Viewer *v) {
    char left[256], right[256];
    const TraceEvent *e = v->ddp.f.event;
    if (v->by_event)
        snprintf(left, sizeof left, "%s, this run: event %zu/%zu",
                 strategy_name(v->run.p->strategy), v->run.index + 1, v->run.t->n);
    else /* the frame's state is after its last event, where DDP is put beside it */
        snprintf(left, sizeof left, "%s, this run: frame %zu/%zu, after event %zu",
                 strategy_name(v->run.p->strategy), v->run.moment + 1, v->run.moments.n,
                 v->run.index + 1);
    snprintf(right, sizeof right, "DDP at the same point: event %zu/%zu, GPU %d %s %s",
             v->ddp.index + 1, v->ddp.t->n, e->rank, event_kind_name((EventKind)e->kind),
             e->unit >= 0 && e->unit < v->ddp.p->nunits ? v->ddp.p->units[e->unit].name : "");
    int h = LINES - 2;
    if (side_by_side(v)) {
        int w = (COLS - 1) / 2;
        Region a = {0, 1, w, h}, b = {w + 1, 1, w, h};
        mvvline(1, w, ACS_VLINE, h);
        draw_side(v, &v->run, &a, left, 0);
        draw_side(v, &v->ddp, &b, right, 0);
        return;
    }
    Region a = {0, 1, COLS, h / 2}, b = {0, 1 + h / 2, COLS, h - h / 2};
    draw_side(v, &v->run, &a, left, COMPACT_STEP);
    draw_side(v, &v->ddp, &b, right, COMPACT_STEP);
}

/* A DDP side at the same point as the run's current event, each GPU at its own point of the
 * same computation (compare.c): its frame and the event its title names. */
static int side_follow(const Viewer *v, Side *s, Err *e) {
    size_t j = 0;
    int rc = compare_match(v->run.t, v->run.index, s->t, &j, e);
    if (!rc) rc = compare_points(v->run.t, v->run.index, s->t, s->ends, e);
    if (!rc) rc = frame_at_points(&s->f, s->t, s->p, j, s->ends, e);
    if (!rc) s->index = j;
    return rc;
}

/* The DDP sides follow the run; on failure a view closes with a message instead of ending the
 * viewer. */
static void sync_ddp(Viewer *v) {
    Err e = {0};
    if (v->marks.open && side_follow(v, &v->marks, &e)) {
        side_close(&v->marks);
        snprintf(v->status, sizeof v->status, " DDP marks off: %s", e.msg);
    }
    e = (Err){0};
    if (v->compare && side_follow(v, &v->ddp, &e)) {
        v->compare = 0;
        snprintf(v->status, sizeof v->status, " DDP view closed: %s", e.msg);
    }
}

/* The key line, from the fullest to the shortest: the first that fits the width is drawn (short
 * of the last column: curses scrolls on a write to the bottom right corner). The help screen
 * says what each key does in full. */
static const char *const key_lines[] = {
    " n/space next  p prev  c/C collective  k/K compute  f/b/o forward/backward/optimizer  "
    "</> units  g go  e events  d DDP  r play  +/- speed  h help  q quit",
    " n next  p prev  c/C collective  k/K compute  f/b/o phase  </> units  g go  e events  d DDP  "
    "r play  +/- speed  h help  q quit",
    " n/p next/prev  c/C collective  k/K compute  f/b/o phase  g go  e events  d DDP  r play  "
    "+/- speed  h help  q quit",
    " n/p step  c/C comm  k/K compute  f/b/o phase  g go  e events  d DDP  r play  +/- speed  "
    "h help  q quit",
    " n/p  c/C comm  k/K compute  f/b/o phase  g go  e events  d DDP  r +/-  h help  q quit",
    " n/p c/C k/K f/b/o g e  d DDP  r +/-  h help  q quit",
};

static const char *key_line(int cols) {
    size_t n = sizeof key_lines / sizeof *key_lines;
    for (size_t i = 0; i < n; i++)
        if ((int)text_display_width(key_lines[i]) < cols) return key_lines[i];
    return key_lines[n - 1];
}

/* The keys, or a message in their place (bold: it answers a key just pressed). */
static void draw_key_line(const Viewer *v) {
    Region screen = whole_screen();
    int attr = v->status[0] ? A_BOLD : A_DIM;
    move(LINES - 1, 0);
    clrtoeol();
    attron(attr);
    put(&screen, LINES - 1, 0, v->status[0] ? v->status : key_line(COLS));
    attroff(attr);
}

static void draw(Viewer *v, Err *err) {
    erase();
    Region screen = whole_screen();
    if (COLS < MIN_COLS || LINES < MIN_ROWS) {
        char msg[128];
        snprintf(msg, sizeof msg, "too small: %dx%d, needs %dx%d", COLS, LINES, MIN_COLS, MIN_ROWS);
        put(&screen, 0, 0, msg);
        refresh();
        return;
    }
    if (v->by_event
            ? frame_at(&v->run.f, v->run.t, v->run.p, v->run.index, err)
            : moments_frame(&v->run.f, v->run.t, v->run.p, &v->run.moments, v->run.moment, err))
        return;
    if (!v->by_event) v->run.index = v->run.moments.m[v->run.moment].last;
    sync_ddp(v);
    draw_header(v);
    if (v->help) {
        draw_help();
    } else if (v->compare) {
        draw_compare(v);
    } else {
        Region body = {0, 1, COLS, LINES - 2};
        draw_side(v, &v->run, &body, NULL, 0);
    }
    draw_key_line(v);
    refresh();
}

/* ---------------------------------------------------------------- keys */

/* A movement key: the event nav.c says it leads to (the presenter's frame moments.c says), or
 * a line saying why there is none. */
static void nav_key(Viewer *v, NavMove m) {
    size_t to;
    Side *s = &v->run;
    if (v->by_event ? nav_move(s->t, s->index, m, &to)
                    : moments_move(&s->moments, s->t, s->moment, m, &to)) {
        *(v->by_event ? &s->index : &s->moment) = to;
        return;
    }
    const char *why = nav_nowhere(m);
    if (!v->by_event && (m == NAV_NEXT || m == NAV_PREV))
        why = m == NAV_NEXT ? "this is the last frame" : "this is the first frame";
    snprintf(v->status, sizeof v->status, " %s", why);
}

/* Key e: every event, or the presenter's frames; the same place in the step either way (the
 * frame's collective or compute, or the frame that holds the event). */
static void toggle_by_event(Viewer *v) {
    Side *s = &v->run;
    const Moment *m = &s->moments.m[s->moment];
    if (v->by_event)
        s->moment = moments_find(&s->moments, s->index);
    else
        s->index = m->anchor != MOMENT_NO_ANCHOR ? m->anchor : m->last;
    v->by_event = !v->by_event;
    snprintf(v->status, sizeof v->status, " %s",
             v->by_event ? "every event: each allocation, free and GPU on its own (e: frames)"
                         : "presenter's frames: one per collective or compute (e: every event)");
}

/* Keys < and >: the grids' windows of units one unit left or right (draw_grid keeps them in
 * range; the next event brings its unit back into view). */
static void scroll_units(Viewer *v, int by) {
    v->run.grid_first += by;
    v->ddp.grid_first += by;
}

/* A line typed after `prompt` on the bottom row. A resize ends ncurses' getnstr early
 * (KEY_RESIZE) with what was typed so far: the frame is drawn at the new size, the prompt again
 * with it, and reading goes on, so that a terminal resized while a number is typed loses none of
 * it. */
static void read_line(Viewer *v, const char *prompt, char *buf, size_t cap) {
    size_t n = 0;
    buf[0] = 0;
    for (;;) {
        move(LINES - 1, 0);
        clrtoeol();
        mvaddstr(LINES - 1, 0, prompt);
        addstr(buf);
        if (getnstr(buf + n, (int)(cap - 1 - n)) != KEY_RESIZE) return;
        n = strlen(buf);
        Err ignored = {0}; /* the main loop draws again after the line and reports a failure */
        draw(v, &ignored);
    }
}

static void go_to(Viewer *v) {
    char buf[32];
    echo();
    curs_set(1);
    timeout(-1);
    read_line(v, v->by_event ? " go to event: " : " go to frame: ", buf, sizeof buf);
    noecho();
    curs_set(0);
    unsigned long k = strtoul(buf, NULL, 10);
    if (v->by_event && k >= 1 && k <= v->run.t->n) v->run.index = k - 1;
    if (!v->by_event && k >= 1 && k <= v->run.moments.n) v->run.moment = k - 1;
}

/* Sizes a side's frame for its plan and finds its trace's largest peak. */
static int side_open(Side *s, const Trace *t, const Plan *p, Err *err) {
    if (!t->n) return err_set(err, ERR_USAGE, "the trace has no events");
    *s = (Side){.t = t, .p = p, .grid_for = (size_t)-1};
    for (size_t i = 0; i < t->n; i++)
        if (t->ev[i].kind == EV_ALLOC && t->ev[i].category >= 0 &&
            t->ev[i].category < MEM_CATEGORY_COUNT)
            s->categories |= 1u << t->ev[i].category;
    int rc = frame_init(&s->f, p, err);
    if (rc) return rc;
    s->open = 1;
    if ((rc = moments_build(&s->moments, t, err))) return rc;
    s->ends = calloc((size_t)p->world, sizeof *s->ends);
    if (!s->ends) return err_set(err, ERR_NOMEM, "out of memory for %d ranks", p->world);
    rc = frame_at(&s->f, t, p, t->n - 1, err);
    for (int r = 0; !rc && r < s->f.nranks; r++)
        if (s->f.peak[r] > s->top) s->top = s->f.peak[r];
    return rc;
}

static void side_close(Side *s) {
    if (s->open) frame_free(&s->f);
    moments_free(&s->moments);
    free(s->ends);
    s->ends = NULL;
    s->open = 0;
}

/* The DDP run for the bars' marks, when the viewer opens (accounting only: quick at any size);
 * none for a DDP run (its bars are DDP's) or a replay. Failing leaves the bars unmarked and
 * says why. */
static void load_marks(Viewer *v) {
    if (!v->peer || !v->peer->load_marks || v->run.p->strategy == STRAT_DDP) return;
    Err e = {0};
    const Trace *t = NULL;
    const Plan *p = NULL;
    int rc = v->peer->load_marks(v->peer->user, &t, &p, &e);
    if (!rc) rc = side_open(&v->marks, t, p, &e);
    if (!rc && p->world != v->run.p->world)
        rc = err_set(&e, ERR_INTERNAL, "DDP ran %d ranks, the run %d", p->world, v->run.p->world);
    if (rc) {
        side_close(&v->marks);
        snprintf(v->status, sizeof v->status, " no DDP marks on the bars: %s", e.msg);
    }
}

/* Runs the DDP step the first time (it can take a while: say so first). */
static int load_ddp(Viewer *v) {
    if (v->ddp.open) return 0;
    snprintf(v->status, sizeof v->status, " running the same step under DDP...");
    draw_key_line(v);
    refresh();
    Err e = {0};
    const Trace *t = NULL;
    const Plan *p = NULL;
    int rc = v->peer->load(v->peer->user, &t, &p, &e);
    if (!rc) rc = side_open(&v->ddp, t, p, &e);
    if (rc) {
        side_close(&v->ddp);
        snprintf(v->ddp_error, sizeof v->ddp_error, "%s", e.msg);
        snprintf(v->status, sizeof v->status, " no DDP view: %s", e.msg);
        return rc;
    }
    v->status[0] = 0;
    return 0;
}

/* Key d: the DDP view on or off, or a line saying why there is none. */
static void toggle_ddp(Viewer *v) {
    if (v->compare) {
        v->compare = 0;
    } else if (v->run.p->strategy == STRAT_DDP) {
        snprintf(v->status, sizeof v->status,
                 " this run is DDP: d shows DDP beside a zero1/2/3 or hsdp run");
    } else if (!v->peer) {
        snprintf(v->status, sizeof v->status,
                 " no DDP run to compare with (a replayed trace: run fsdp viz instead)");
    } else if (v->ddp_error[0]) { /* failed once: it would fail again */
        snprintf(v->status, sizeof v->status, " no DDP view: %s", v->ddp_error);
    } else if (!load_ddp(v)) {
        v->compare = 1;
    }
}

/* Handles one key; returns 0 to quit. */
static int on_key(Viewer *v, int key) {
    if (key != ERR) v->status[0] = 0;
    if (v->help && key != ERR) {
        v->help = 0;
        return 1;
    }
    size_t last = v->run.t->n - 1, last_moment = v->run.moments.n - 1;
    switch (key) {
    case 'q':
        return 0;
    case 'n':
    case ' ':
    case KEY_RIGHT:
        nav_key(v, NAV_NEXT);
        break;
    case 'p':
    case KEY_LEFT:
        nav_key(v, NAV_PREV);
        break;
    case 'c':
        nav_key(v, NAV_NEXT_COLLECTIVE);
        break;
    case 'C':
        nav_key(v, NAV_PREV_COLLECTIVE);
        break;
    case 'k':
        nav_key(v, NAV_NEXT_COMPUTE);
        break;
    case 'K':
        nav_key(v, NAV_PREV_COMPUTE);
        break;
    case 'f':
        nav_key(v, NAV_FORWARD);
        break;
    case 'b':
        nav_key(v, NAV_BACKWARD);
        break;
    case 'o':
        nav_key(v, NAV_OPTIMIZER);
        break;
    case '<':
    case '>':
        scroll_units(v, key == '<' ? -1 : 1);
        break;
    case 'g':
        go_to(v);
        break;
    case 'd':
        toggle_ddp(v);
        break;
    case 'e':
        toggle_by_event(v);
        break;
    case 'r':
        v->playing = !v->playing;
        break;
    case '+':
        v->delay_ms = v->delay_ms > 50 ? v->delay_ms / 2 : 25;
        break;
    case '-':
        v->delay_ms = v->delay_ms < 4000 ? v->delay_ms * 2 : 8000;
        break;
    case 'h':
        v->help = 1;
        break;
    case ERR: /* the play timer */
        if (v->playing && v->by_event && v->run.index < last)
            v->run.index++;
        else if (v->playing && !v->by_event && v->run.moment < last_moment)
            v->run.moment++;
        else
            v->playing = 0;
        break;
    default:
        break;
    }
    return 1;
}

int tui_run(const Trace *t, const Plan *p, const TuiCompare *ddp, int by_event, Err *err) {
    if (!isatty(STDOUT_FILENO) || !isatty(STDIN_FILENO))
        return err_set(err, ERR_USAGE, "the viewer needs a terminal (use --plain)");
    /* a frame a second: time to read its sentence; events, many of them, go faster */
    Viewer v = {.peer = ddp, .delay_ms = by_event ? 400 : 1000, .by_event = by_event};
    int rc = side_open(&v.run, t, p, err);
    if (rc) {
        side_close(&v.run);
        return rc;
    }
    setlocale(LC_ALL, "");
    /* newterm, not initscr: initscr prints its own message and exits on a TERM it cannot use */
    SCREEN *term = newterm(NULL, stdout, stdin);
    if (!term) {
        side_close(&v.run);
        const char *name = getenv("TERM");
        return err_set(err, ERR_USAGE,
                       "the viewer cannot drive this terminal (TERM=%s); set another TERM or "
                       "use --plain",
                       name ? name : "");
    }
    cbreak();
    noecho();
    keypad(stdscr, TRUE);
    curs_set(0);
    v.colour = has_colors() && !getenv("NO_COLOR");
    if (v.colour) {
        start_color();
        use_default_colors();
        init_pair(1, COLOR_YELLOW, -1);
    }
    if (v.peer && v.peer->load_marks && p->strategy != STRAT_DDP) {
        mvaddstr(0, 0, " running the same step under DDP (accounting only) for the memory bars...");
        refresh();
        load_marks(&v);
    }
    for (;;) {
        draw(&v, err);
        if (err->code) break;
        timeout(v.playing ? v.delay_ms : -1);
        if (!on_key(&v, getch())) break;
    }
    endwin();
    delscreen(term);
    side_close(&v.run);
    side_close(&v.ddp);
    side_close(&v.marks);
    return err->code ? err->code : 0;
}
