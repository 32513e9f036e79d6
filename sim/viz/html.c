/* html: a whole trace as one self-contained HTML page: every event's frame (frame_at, as plain.c
 * draws one) and every presenter's frame (moments_frame) as compact data, DDP's memory at the
 * same point of the same step (compare.h: each GPU at its own, as the viewer's key d shows it),
 * each step's streams and memory over time as an SVG (html_chart.c), and a small script that
 * draws one frame and moves between frames on the viewer's keys. Nothing in it is loaded from
 * elsewhere. */
#include "sim/viz/html.h"

#include <stdarg.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "sim/viz/compare.h"
#include "sim/viz/frame.h"
#include "sim/viz/html_chart.h"
#include "sim/viz/memory_timeline.h"
#include "sim/viz/moments.h"
#include "sim/viz/nav.h"
#include "sim/viz/plain.h"
#include "sim/viz/text.h"

/* ---------------------------------------------------------------- text being built */

/* A growable string; `nomem` remembers a failed allocation so callers check once at the end. */
typedef struct Buf {
    char *s;
    size_t n, cap;
    int nomem;
} Buf;

static int buf_reserve(Buf *b, size_t more) {
    if (b->nomem) return 0;
    if (b->n + more + 1 <= b->cap) return 1;
    size_t cap = b->cap ? b->cap : 256;
    while (cap < b->n + more + 1) cap *= 2;
    char *s = realloc(b->s, cap);
    if (!s) {
        b->nomem = 1;
        return 0;
    }
    b->s = s;
    b->cap = cap;
    return 1;
}

/* Appends len bytes of s. */
static void buf_put(Buf *b, const char *s, size_t len) {
    if (!buf_reserve(b, len)) return;
    memcpy(b->s + b->n, s, len);
    b->n += len;
    b->s[b->n] = 0;
}

/* Formats into the room left, once, and again only when it did not fit (a page is millions of
 * these: formatting twice each time was a third of writing it). */
__attribute__((format(printf, 2, 3))) static void buf_add(Buf *b, const char *fmt, ...) {
    if (!buf_reserve(b, 64)) return;
    va_list ap;
    va_start(ap, fmt);
    int len = vsnprintf(b->s + b->n, b->cap - b->n, fmt, ap);
    va_end(ap);
    if (len < 0) return;
    if ((size_t)len >= b->cap - b->n) {
        if (!buf_reserve(b, (size_t)len)) return;
        va_start(ap, fmt);
        vsnprintf(b->s + b->n, b->cap - b->n, fmt, ap);
        va_end(ap);
    }
    b->n += (size_t)len;
}

/* s as a JSON string that is also safe inside a <script> element: '<' is escaped, so no text
 * can end the script ("</script>") or open a comment in it. UTF-8 is kept as it is. */
static int json_escaped(unsigned char c) {
    return c == '"' || c == '\\' || c < 0x20 || c == '<';
}

static void buf_json(Buf *b, const char *s) {
    buf_put(b, "\"", 1);
    while (*s) {
        size_t plain = 0; /* the run of characters kept as they are, appended at once */
        while (s[plain] && !json_escaped((unsigned char)s[plain])) plain++;
        buf_put(b, s, plain);
        s += plain;
        if (!*s) break;
        unsigned char c = (unsigned char)*s++;
        if (c == '"' || c == '\\')
            buf_add(b, "\\%c", c);
        else
            buf_add(b, "\\u%04x", c);
    }
    buf_put(b, "\"", 1);
}

/* ---------------------------------------------------------------- tables of shared values */

/* Distinct JSON values in the order first seen, each with its index: what many frames share
 * (a narration, a grid, a rank's memory, a step's timeline) is written once and referred to. */
typedef struct Table {
    char **at;
    size_t n, cap;
    size_t *slot; /* open addressing over the values' hashes: index + 1, 0 empty */
    size_t nslot; /* a power of two, at least twice n */
} Table;

static uint64_t hash_text(const char *s) {
    uint64_t h = 1469598103934665603ull; /* FNV-1a */
    for (; *s; s++) h = (h ^ (unsigned char)*s) * 1099511628211ull;
    return h;
}

static int table_rehash(Table *t, size_t nslot) {
    size_t *slot = calloc(nslot, sizeof *slot);
    if (!slot) return 0;
    for (size_t i = 0; i < t->n; i++) {
        size_t at = hash_text(t->at[i]) & (nslot - 1);
        while (slot[at]) at = (at + 1) & (nslot - 1);
        slot[at] = i + 1;
    }
    free(t->slot);
    t->slot = slot;
    t->nslot = nslot;
    return 1;
}

/* The index of value (a copy is kept when it is new); -1 out of memory. */
static long table_index(Table *t, const char *value) {
    if (2 * (t->n + 1) > t->nslot && !table_rehash(t, t->nslot ? 2 * t->nslot : 64)) return -1;
    size_t at = hash_text(value) & (t->nslot - 1);
    for (; t->slot[at]; at = (at + 1) & (t->nslot - 1))
        if (!strcmp(t->at[t->slot[at] - 1], value)) return (long)(t->slot[at] - 1);
    if (t->n == t->cap) {
        size_t cap = t->cap ? 2 * t->cap : 64;
        char **grown = realloc(t->at, cap * sizeof *grown);
        if (!grown) return -1;
        t->at = grown;
        t->cap = cap;
    }
    char *copy = strdup(value);
    if (!copy) return -1;
    t->at[t->n] = copy;
    t->slot[at] = ++t->n;
    return (long)(t->n - 1);
}

static void table_free(Table *t) {
    for (size_t i = 0; i < t->n; i++) free(t->at[i]);
    free(t->at);
    free(t->slot);
    memset(t, 0, sizeof *t);
}

/* "const NAME=[v0,\nv1,...];" */
static void table_write(FILE *out, const char *name, const Table *t) {
    fprintf(out, "const %s=[", name);
    for (size_t i = 0; i < t->n; i++) fprintf(out, "%s%s", i ? ",\n" : "", t->at[i]);
    fprintf(out, "];\n");
}

/* ---------------------------------------------------------------- the rows */

/* What the page's keys jump between: c/C the collectives, k/K the computation. */
enum { KIND_OTHER = 0, KIND_COLLECTIVE = 1, KIND_COMPUTE = 2 };

/* The same classes as the terminal viewer's keys (sim/viz/nav.h). */
static int kind_class(const TraceEvent *e) {
    return nav_is_collective(e) ? KIND_COLLECTIVE : nav_is_compute(e) ? KIND_COMPUTE : KIND_OTHER;
}

/* A grid cell is the index of its text shifted left by CELL_SHIFT, or'ed with the bits of its
 * state, which the page colours. */
enum { CELL_GATHERED = 1, CELL_GRADS_FULL = 2, CELL_REDUCED = 4, CELL_STEPPED = 8, CELL_SHIFT = 4 };

typedef struct Tables {
    Table strings, grids, memory, timelines, ddp; /* the page's S, G, M, T and P */
    Buf json, value, row;                         /* scratch */
} Tables;

static long string_index(Tables *tb, const char *text) {
    tb->json.n = 0;
    buf_json(&tb->json, text);
    return tb->json.nomem ? -1 : table_index(&tb->strings, tb->json.s);
}

/* A value built in tb->value, entered into table. */
static long value_index(Tables *tb, Table *table) {
    return tb->value.nomem ? -1 : table_index(table, tb->value.s);
}

/* [cell, ...], rank-major: each cell's text as plain.c draws it, and its state. */
static long grid_index(Tables *tb, const Frame *f, const Plan *p) {
    Buf *v = &tb->value;
    v->n = 0;
    buf_add(v, "[");
    size_t width = 0; /* found by the first cell that needs it */
    for (int r = 0; r < f->nranks; r++)
        for (int u = 0; u < f->nunits; u++) {
            char text[200];
            plain_cell_text(f, p, r, u, &width, text, sizeof text);
            long s = string_index(tb, text);
            if (s < 0) return -1;
            const FrameCell *c = frame_cell(f, r, u);
            long bits = (c->gathered ? CELL_GATHERED : 0) | (c->grads_full ? CELL_GRADS_FULL : 0) |
                        (c->reduced ? CELL_REDUCED : 0) | (c->stepped ? CELL_STEPPED : 0);
            buf_add(v, "%s%ld", r || u ? "," : "", s << CELL_SHIFT | bits);
        }
    buf_add(v, "]");
    return value_index(tb, &tb->grids);
}

/* ["232 B (peak 312 B)", bytes of each category...]: rank r's memory as the bars draw it, a GPU's
 * own (what offload keeps off it is 0 there, and in the text after the GPU's figures). */
static long memory_index(Tables *tb, const Frame *f, int r) {
    char text[128];
    plain_memory_text(f, r, text, sizeof text);
    Buf *v = &tb->value;
    v->n = 0;
    buf_add(v, "[");
    buf_json(v, text);
    for (int c = 0; c < MEM_CATEGORY_COUNT; c++)
        buf_add(v, ",%zu", frame_gpu_mem(f, r, (MemCategory)c));
    buf_add(v, "]");
    return value_index(tb, &tb->memory);
}

/* ["timeline of step 1 (...)", [row of each rank's each stream...], phases' row, time axis,
 * "time (us)"]: the same for every event of a step, so written once per step. */
static long timeline_index(Tables *tb, const Frame *f) {
    char title[96], phases[FRAME_TIMELINE_MAX + 1], axis[FRAME_TIMELINE_MAX + 1], unit[24];
    plain_timeline_title(f, title, sizeof title);
    plain_timeline_phases(f, -1, phases, sizeof phases);
    plain_timeline_axis(f, axis, sizeof axis);
    snprintf(unit, sizeof unit, "time (%s)", plain_timeline_unit(f));
    Buf *v = &tb->value;
    v->n = 0;
    buf_add(v, "[");
    buf_json(v, title);
    buf_add(v, ",[");
    for (int row = 0; row < f->nranks * STREAM_COUNT; row++) {
        if (row) buf_add(v, ",");
        buf_json(v, f->timeline[row]);
    }
    buf_add(v, "],");
    buf_json(v, phases);
    buf_add(v, ",");
    buf_json(v, axis);
    buf_add(v, ",");
    buf_json(v, unit);
    buf_add(v, "]");
    return value_index(tb, &tb->timelines);
}

/* Each step's chart (html_chart.h): built where the step has events to draw. */
typedef struct Charts {
    MemoryTimeline *mt; /* [nsteps] */
    char *ok;           /* [nsteps]: mt[s] was built */
    int nsteps;
} Charts;

static int charts_build(Charts *c, const Trace *t, Err *err) {
    c->nsteps = trace_last_step(t) + 1;
    c->mt = calloc((size_t)c->nsteps + 1, sizeof *c->mt);
    c->ok = calloc((size_t)c->nsteps + 1, 1);
    if (!c->mt || !c->ok) return err_set(err, ERR_NOMEM, "out of memory for the page's charts");
    for (int s = 0; s < c->nsteps; s++) {
        Err why = {0}; /* a step without work (events of setup alone) has no chart */
        c->ok[s] = memory_timeline_build(&c->mt[s], t, s, &why) == 0;
        if (!c->ok[s]) memory_timeline_free(&c->mt[s]);
        if (why.code == ERR_NOMEM) return err_set(err, ERR_NOMEM, "%s", why.msg);
    }
    return 0;
}

static void charts_free(Charts *c) {
    for (int s = 0; c->ok && s < c->nsteps; s++)
        if (c->ok[s]) memory_timeline_free(&c->mt[s]);
    free(c->mt);
    free(c->ok);
}

/* The DDP side as the viewer's key d shows it: each GPU at its own point of the same computation
 * (compare_points, frame_at_points), named by the event compare_match puts beside the run's; the
 * page asks at every event in order, so both walk on from the event before. */
typedef struct DdpSide {
    const Trace *t; /* NULL: none */
    const Plan *p;
    Frame f;
    CompareWalk walk;
    size_t *ends, *last_ends; /* [ranks]: each GPU's point, now and at the previous call */
    size_t last_j;
    long last_state; /* the previous call's entry of P; -1 none yet */
} DdpSide;

/* The entry of P for DDP at the same point as event `index` of t, ["event J of N, GPU r kind
 * unit", [memory of each rank at its point]] (*state -1 without a DDP side). Neighbouring
 * events often leave every GPU where it was (what folds into a frame, the steps of a compute):
 * then the entry is the previous one, without a frame made again. */
static int ddp_state(Tables *tb, DdpSide *d, size_t index, long *memory, long *state, Err *err) {
    *state = -1;
    if (!d->t) return 0;
    size_t j, nranks = (size_t)d->t->nranks;
    int rc = compare_walk_match(&d->walk, index, &j, err);
    if (!rc) rc = compare_walk_points(&d->walk, index, d->ends, err);
    if (rc) return rc;
    if (d->last_state >= 0 && j == d->last_j &&
        !memcmp(d->ends, d->last_ends, nranks * sizeof *d->ends)) {
        *state = d->last_state;
        return 0;
    }
    if ((rc = frame_at_points(&d->f, d->t, d->p, j, d->ends, err))) return rc;
    for (int r = 0; r < d->f.nranks; r++)
        if ((memory[r] = memory_index(tb, &d->f, r)) < 0) return ERR_NOMEM;
    const TraceEvent *e = &d->t->ev[j];
    char title[256];
    int unit = e->unit >= 0 && e->unit < d->p->nunits;
    snprintf(title, sizeof title, "event %zu of %zu, GPU %d %s%s%s", j + 1, d->t->n, e->rank,
             event_kind_name((EventKind)e->kind), unit ? " " : "",
             unit ? d->p->units[e->unit].name : "");
    long named = string_index(tb, title);
    if (named < 0) return ERR_NOMEM;
    Buf *v = &tb->value;
    v->n = 0;
    buf_add(v, "[%ld,[", named);
    for (int r = 0; r < d->f.nranks; r++) buf_add(v, "%s%ld", r ? "," : "", memory[r]);
    buf_add(v, "]]");
    if ((d->last_state = value_index(tb, &tb->ddp)) < 0) return ERR_NOMEM;
    d->last_j = j;
    memcpy(d->last_ends, d->ends, nranks * sizeof *d->ends);
    *state = d->last_state;
    return 0;
}

/* A row into tb->row, open for what its kind adds: [header, narration, flow, timeline, cursor,
 * kind, grid, [memory of each rank], unit, chart, chart's x, ddp. The unit and the cursor are
 * those of the frame's event (a presenter's frame: its collective or compute). */
static int build_row(Tables *tb, const Frame *f, const Plan *p, const Charts *ch, long ddp,
                     long *memory) {
    const TraceEvent *e = f->event;
    long narration = string_index(tb, f->narration), flow = string_index(tb, f->flow);
    long grid = grid_index(tb, f, p), timeline = timeline_index(tb, f);
    if (narration < 0 || flow < 0 || grid < 0 || timeline < 0) return ERR_NOMEM;
    for (int r = 0; r < f->nranks; r++)
        if ((memory[r] = memory_index(tb, f, r)) < 0) return ERR_NOMEM;
    tb->json.n = 0;
    buf_json(&tb->json, f->header);
    int chart = e->step >= 0 && e->step < ch->nsteps && ch->ok[e->step] ? e->step : -1;
    double x = chart >= 0 ? html_chart_x(&ch->mt[chart], e->start) : 0;
    Buf *b = &tb->row;
    b->n = 0;
    buf_add(b, "[%s,%ld,%ld,%ld,%d,%d,%ld,[", tb->json.s ? tb->json.s : "\"\"", narration, flow,
            timeline, f->cursor, kind_class(e), grid);
    for (int r = 0; r < f->nranks; r++) buf_add(b, "%s%ld", r ? "," : "", memory[r]);
    buf_add(b, "],%d,%d,%.1f,%ld", e->unit >= 0 && e->unit < p->nunits ? e->unit : -1, chart, x,
            ddp);
    return tb->json.nomem || b->nomem ? ERR_NOMEM : 0;
}

/* D: what every row shares. The bars' scale is the largest peak of any rank of either run (the
 * last frames' peaks are the largest so far) or the DDP figure at rest, whichever is larger. */
static int write_shared(FILE *out, Tables *tb, const Frame *last, const Plan *p, const DdpSide *d,
                        const HtmlPage *page, size_t cell_width) {
    /* DDP: every parameter, its gradient and Adam's two moments, in fp32 (as the viewer's) */
    size_t ddp = p->model->total_numel * 4 * sizeof(float), scale = ddp;
    for (int r = 0; r < last->nranks; r++)
        if (last->peak[r] > scale) scale = last->peak[r];
    for (int r = 0; d->t && r < d->f.nranks; r++)
        if (d->f.peak[r] > scale) scale = d->f.peak[r];
    char bytes[32], ddp_text[160];
    snprintf(ddp_text, sizeof ddp_text,
             "DDP: %s per GPU at rest (every parameter, its gradient and Adam's two moments)",
             format_bytes(ddp, bytes, sizeof bytes));
    Buf *b = &tb->value;
    b->n = 0;
    buf_add(b, "const D={title:");
    buf_json(b, page->title);
    buf_add(b, ",units:[");
    for (int u = 0; u < p->nunits; u++) {
        if (u) buf_add(b, ",");
        buf_json(b, p->units[u].name);
    }
    buf_add(b, "],ranks:%d,streams:%d,cellWidth:%zu,strategy:", p->world, STREAM_COUNT, cell_width);
    buf_json(b, strategy_name(p->strategy));
    buf_add(b, ",cats:[");
    for (int c = 0; c < MEM_CATEGORY_COUNT; c++) {
        if (c) buf_add(b, ",");
        buf_json(b, mem_category_label((MemCategory)c));
    }
    buf_add(b, "],colours:[");
    for (int c = 0; c < MEM_CATEGORY_COUNT; c++) {
        if (c) buf_add(b, ",");
        buf_json(b, memory_category_colour((MemCategory)c));
    }
    buf_add(b, "],ddp:%zu,ddpText:", ddp);
    buf_json(b, ddp_text);
    buf_add(b, ",ddpRanks:%d,noDdp:", d->t ? d->f.nranks : 0);
    buf_json(b, d->t ? "" : page->no_ddp ? page->no_ddp : "no DDP run to compare with");
    buf_add(b, ",scale:%zu,phases:{f:%d,b:%d,o:%d}};\n", scale ? scale : 1, PHASE_FORWARD,
            PHASE_BACKWARD, PHASE_OPTIMIZER);
    if (b->nomem) return ERR_NOMEM;
    fputs(b->s, out);
    return 0;
}

/* ---------------------------------------------------------------- the page */

static void html_text(FILE *out, const char *s) {
    for (; *s; s++) {
        if (*s == '&')
            fputs("&amp;", out);
        else if (*s == '<')
            fputs("&lt;", out);
        else if (*s == '>')
            fputs("&gt;", out);
        else if (*s == '"')
            fputs("&quot;", out);
        else
            fputc(*s, out);
    }
}

static const char page_style[] =
    "body{font:16px/1.45 system-ui,sans-serif;margin:1.2em 2em;color:#222;background:#fff}\n"
    "h1{font-size:1.2em;margin:0 0 .5em}h2{font-size:1em;margin:1.1em 0 .4em;color:#555}\n"
    "#header,#flow,#grid,#timeline,#keys td:first-child{font-family:ui-monospace,monospace}\n"
    "#header{font-size:1.15em;font-weight:bold;padding:.35em .6em;background:#e8eefc;"
    "border-radius:4px}\n"
    "#narration{font-size:1.1em;margin:.6em 0 .2em}#flow{color:#333;margin:.2em 0}\n"
    "#mode{color:#555;font-size:.9em;margin:.2em 0}\n"
    ".scroll{overflow-x:auto}#grid{border-collapse:separate;border-spacing:0}\n"
    "#grid th,#grid td{border:1px solid #ccc;border-width:0 1px 1px 0;padding:.2em .6em;"
    "text-align:left;white-space:nowrap}\n"
    "#grid tr:first-child th{border-top-width:1px}\n"
    "#grid th:first-child{position:sticky;left:0;z-index:1;background:#fff;border-left-width:1px}"
    "\n"
    ".row{display:flex;align-items:center;gap:.7em;margin:.2em 0}.who{width:4.5em}\n"
    ".tag{width:4em;color:#555;font-size:.9em}.ddprow{margin-bottom:.6em}\n"
    ".bar{position:relative;flex:0 0 55%;height:1.1em;background:#f4f4f4;border:1px solid #bbb}\n"
    ".seg{position:absolute;top:0;bottom:0;width:0}\n"
    ".ddp{position:absolute;top:-4px;bottom:-4px;border-left:2px dashed #222}\n"
    "#legend{font-size:.9em;margin-top:.4em}.key{margin-right:1.2em;white-space:nowrap}\n"
    ".swatch{display:inline-block;width:.9em;height:.9em;margin-right:.3em;"
    "vertical-align:-.1em}\n"
    ".ddpkey{display:inline-block;width:0;height:1em;margin-right:.4em;vertical-align:-.15em;"
    "border-left:2px dashed #222}\n"
    "#ddpline{margin:.2em 0 .5em}\n"
    ".chart{width:100%;max-width:1100px;height:auto;display:block}\n"
    "#timeline{line-height:1.2}#timeline .c{color:#1f7a3a}#timeline .m{color:#2457c5}\n"
    "#timeline .y{color:#c26a00}#timeline .i{color:#aaa}#timeline b{outline:2px solid #c00}\n"
    "#keys td{padding:.1em 1em .1em 0}#playing{color:#c00}\n";

/* The grid's states in the colours memory.svg gives what they hold: gathered parameters,
 * full gradients, the gradient shard once reduced, the optimizer's state once stepped. */
static void grid_style(FILE *out) {
    const char *gathered = memory_category_colour(MEM_PARAM_UNSHARDED),
               *grads = memory_category_colour(MEM_GRAD_UNSHARDED),
               *shard = memory_category_colour(MEM_GRAD_SHARD),
               *optim = memory_category_colour(MEM_OPTIM_STATE);
    fprintf(out,
            "#grid td.gathered,.cellkey.gathered{background:%s}\n"
            "#grid td.grads,.cellkey.grads{background:%s}\n"
            "#grid td.gathered.grads{background:linear-gradient(90deg,%s 50%%,%s 50%%)}\n"
            "#grid td.reduced,.cellkey.reduced{box-shadow:inset 5px 0 0 %s}\n"
            "#grid td.stepped,.cellkey.stepped{font-weight:bold;box-shadow:inset 0 -3px 0 %s}\n"
            "#grid td.reduced.stepped{box-shadow:inset 5px 0 0 %s,inset 0 -3px 0 %s}\n"
            ".cellkey{padding:0 .4em;margin-right:.3em;white-space:nowrap}\n",
            gathered, grads, gathered, grads, shard, optim, shard, optim);
}

/* The page around the data: what a frame shows, in the order the terminal shows it, then the
 * step over time. */
static const char page_body[] =
    "<div id=\"header\"></div>\n"
    "<p id=\"narration\"></p>\n"
    "<p id=\"flow\"></p>\n"
    "<p id=\"mode\"></p>\n"
    "<h2>Who holds what</h2>\n"
    "<div class=\"scroll\" id=\"gridbox\"><table id=\"grid\"></table></div>\n"
    "<p>A cell is what the GPU keeps of the unit at rest (its shard), then <i>+all</i> (or the "
    "other GPUs' shards) while the unit is gathered, <i>+&part;all</i> while its full gradients "
    "exist and, once they are reduced, the GPU's gradient shard. <span class=\"cellkey "
    "gathered\">gathered</span><span class=\"cellkey grads\">full gradients</span><span "
    "class=\"cellkey reduced\">reduced</span><span class=\"cellkey stepped\">stepped</span> "
    "(memory.svg's colours for what they hold). The grid follows the unit in play.</p>\n"
    "<h2>Memory of each GPU, and DDP's at the same point of the same step</h2>\n"
    "<p id=\"ddpline\"></p>\n"
    "<div id=\"bars\"></div>\n"
    "<div id=\"legend\"></div>\n"
    "<h2>The step over time: each GPU's streams and memory (red: now)</h2>\n";

static const char page_after_charts[] =
    "<h2>Timeline</h2>\n"
    "<pre id=\"timeline\"></pre>\n"
    "<h2>Keys</h2>\n"
    "<p>The page opens on the presenter's frames: one per collective or compute across all GPUs, "
    "the allocations and frees around it folded in. <i>e</i> switches to every event and "
    "back.</p>\n"
    "<table id=\"keys\">\n"
    "<tr><td>n, space, &rarr;</td><td>next frame (with e: next event)</td></tr>\n"
    "<tr><td>p, &larr;</td><td>previous frame (with e: previous event)</td></tr>\n"
    "<tr><td>c / C</td><td>next / previous collective (all_gather, reduce_scatter, all_reduce, "
    "broadcast, barrier)</td></tr>\n"
    "<tr><td>k / K</td><td>next / previous compute (forward, backward, recompute, "
    "optimizer)</td></tr>\n"
    "<tr><td>f / b / o</td><td>the first collective or compute of this step's forward / "
    "backward / optimizer (with e: its first event); once the step's work is done, the next "
    "step's</td></tr>\n"
    "<tr><td>e</td><td>every event (each allocation, free and GPU on its own) / the presenter's "
    "frames</td></tr>\n"
    "<tr><td>Home / End</td><td>first / last</td></tr>\n"
    "<tr><td>r</td><td>play / pause (a frame a second, an event every 0.4 s)</td></tr>\n"
    "</table>\n"
    "<p>Open the page at frame 2 with <i>#f2</i> after its name, at event 55 (every event) with "
    "<i>#55</i>. <span id=\"playing\"></span></p>\n";

static const char page_script[] =
    "// F: a row per event, R: a row per presenter's frame (moments.h), both [header, narration,\n"
    "// flow, timeline, cursor, kind, grid, memory of each rank, unit, chart, chart's x, ddp],\n"
    "// then an event's [phase, step] or a frame's [first, last, anchor] event (anchor -1: a\n"
    "// frame of allocations and frees alone); S, G, M, T, P: the strings, grids, memory states,\n"
    "// step timelines and DDP states those index (each written once, however many rows share\n"
    "// it); D: what every row shares.\n"
    "const HEADER = 0, NARRATION = 1, FLOW = 2, TIMELINE = 3, CURSOR = 4, KIND = 5, GRID = 6;\n"
    "const MEMORY = 7, UNIT = 8, CHART = 9, X = 10, DDP = 11;\n"
    "const PHASE = 12, STEP = 13, FIRST = 12, LAST = 13, ANCHOR = 14;\n"
    "const COLLECTIVE = 1, COMPUTE = 2, NU = D.units.length;\n"
    "const FLAGS = [[1, 'gathered'], [2, 'grads'], [4, 'reduced'], [8, 'stepped']];\n"
    "const $ = (id) => document.getElementById(id);\n"
    "let byEvent = false, cur = 0, timer = null, chartShown = null;\n"
    "const rows = () => (byEvent ? F : R);\n"
    "function el(tag, cls, text) {\n"
    "  const e = document.createElement(tag);\n"
    "  if (cls) e.className = cls;\n"
    "  if (text !== undefined) e.textContent = text;\n"
    "  return e;\n"
    "}\n"
    "// A bar stacked by category, with the DDP level at rest marked.\n"
    "function bar() {\n"
    "  const b = el('div', 'bar');\n"
    "  D.cats.forEach((name, c) => {\n"
    "    const seg = el('div', 'seg');\n"
    "    seg.style.background = D.colours[c];\n"
    "    seg.title = name;\n"
    "    b.appendChild(seg);\n"
    "  });\n"
    "  const ddp = el('div', 'ddp');\n"
    "  ddp.style.left = (100 * D.ddp / D.scale) + '%';\n"
    "  b.appendChild(ddp);\n"
    "  return b;\n"
    "}\n"
    "// The parts every frame has: the grid's rows and columns, two bars per rank (this run's\n"
    "// and DDP's), the legend.\n"
    "function build() {\n"
    "  const head = $('grid').createTHead().insertRow();\n"
    "  head.appendChild(el('th', '', ''));\n"
    "  for (const u of D.units) head.appendChild(el('th', '', u));\n"
    "  const body = $('grid').createTBody();\n"
    "  for (let r = 0; r < D.ranks; r++) {\n"
    "    const row = body.insertRow();\n"
    "    row.appendChild(el('th', '', 'GPU ' + r));\n"
    "    for (let u = 0; u < NU; u++) row.insertCell().style.minWidth = D.cellWidth + 'ch';\n"
    "  }\n"
    "  for (let r = 0; r < D.ranks; r++) {\n"
    "    const row = el('div', 'row');\n"
    "    row.appendChild(el('span', 'who', 'GPU ' + r));\n"
    "    row.appendChild(el('span', 'tag', D.strategy));\n"
    "    row.appendChild(bar());\n"
    "    row.appendChild(el('span', 'mem'));\n"
    "    $('bars').appendChild(row);\n"
    "    if (r >= D.ddpRanks) continue;\n"
    "    const ddp = el('div', 'row ddprow');\n"
    "    ddp.appendChild(el('span', 'who', ''));\n"
    "    ddp.appendChild(el('span', 'tag', 'DDP'));\n"
    "    ddp.appendChild(bar());\n"
    "    ddp.appendChild(el('span', 'ddpmem'));\n"
    "    $('bars').appendChild(ddp);\n"
    "  }\n"
    "  if (!D.ddpRanks) $('ddpline').textContent = 'No DDP beside it: ' + D.noDdp + '.';\n"
    "  const used = D.cats.map((_, c) => M.some((m) => m[1 + c] > 0));\n"
    "  D.cats.forEach((name, c) => {\n"
    "    if (!used[c]) return;\n"
    "    const key = el('span', 'key');\n"
    "    key.appendChild(el('span', 'swatch')).style.background = D.colours[c];\n"
    "    key.appendChild(document.createTextNode(name));\n"
    "    $('legend').appendChild(key);\n"
    "  });\n"
    "  const ddp = el('span', 'key');\n"
    "  ddp.appendChild(el('span', 'ddpkey'));\n"
    "  ddp.appendChild(document.createTextNode(D.ddpText));\n"
    "  $('legend').appendChild(ddp);\n"
    "}\n"
    "function fill(row, m) {\n"
    "  const segs = row.children[2].children;\n"
    "  let at = 0;\n"
    "  for (let c = 0; c < D.cats.length; c++) {\n"
    "    const w = 100 * m[1 + c] / D.scale;\n"
    "    segs[c].style.left = at + '%';\n"
    "    segs[c].style.width = w + '%';\n"
    "    at += w;\n"
    "  }\n"
    "  row.children[3].textContent = m[0];\n"
    "}\n"
    "function esc(s) {\n"
    "  return s.replace(/&/g, '&amp;').replace(/</g, '&lt;').replace(/>/g, '&gt;');\n"
    "}\n"
    "// A stream's row, one span per column so the current event's column can be marked.\n"
    "function paint(row, cursor) {\n"
    "  let html = '';\n"
    "  for (let i = 0; i < row.length; i++) {\n"
    "    const c = row[i], cls = {'#': 'c', '=': 'm', '~': 'y'}[c] || 'i';\n"
    "    const span = '<span class=' + cls + '>' + c + '</span>';\n"
    "    html += i === cursor ? '<b>' + span + '</b>' : span;\n"
    "  }\n"
    "  return html;\n"
    "}\n"
    "// As the text frames draw it: [title, rows, phases, axis, unit] (timeline_index).\n"
    "function drawTimeline(t, cursor) {\n"
    "  const names = ['compute', 'comm', 'copy'];\n"
    "  let html = esc(t[0]) + '  <span class=c>#</span> compute  <span class=m>=</span> comm' +\n"
    "             '  <span class=y>~</span> copy\\n' + 'phases'.padEnd(16) + esc(t[2]) + '\\n' +\n"
    "             ' '.repeat(16 + cursor) + 'v\\n';\n"
    "  for (let r = 0; r < D.ranks; r++) {\n"
    "    for (let s = 0; s < D.streams; s++) {\n"
    "      const row = t[1][r * D.streams + s];\n"
    "      if (s === 2 && row.indexOf('~') < 0) continue; // no offload: no copies\n"
    "      const label = (s === 0 ? 'GPU ' + r : '').padEnd(8) + names[s].padEnd(8);\n"
    "      html += label + paint(row, cursor) + '\\n';\n"
    "    }\n"
    "  }\n"
    "  $('timeline').innerHTML = html + esc(t[4]).padEnd(16) + esc(t[3]);\n"
    "}\n"
    "// The step's chart, its cursor at the frame's event.\n"
    "function drawChart(f) {\n"
    "  if (chartShown !== f[CHART]) {\n"
    "    for (const svg of document.querySelectorAll('svg.chart'))\n"
    "      svg.style.display = svg.id === 'chart' + f[CHART] ? '' : 'none';\n"
    "    chartShown = f[CHART];\n"
    "  }\n"
    "  const now = f[CHART] >= 0 ? $('chart' + f[CHART]).querySelector('.now') : null;\n"
    "  if (now) for (const a of ['x1', 'x2']) now.setAttribute(a, f[X]);\n"
    "}\n"
    "// Keeps the unit in play in view, as the terminal's grid follows it: the grid scrolls just\n"
    "// enough to show its column beside the GPUs' labels (to a column's edge, so that no unit\n"
    "// shows half), and the page just enough to show the grid.\n"
    "function follow(unit) {\n"
    "  const box = $('gridbox'), head = $('grid').tHead.rows[0].cells;\n"
    "  const label = head[0].offsetWidth, th = head[unit + 1];\n"
    "  const left = th.offsetLeft - label, right = th.offsetLeft + th.offsetWidth;\n"
    "  let to = box.scrollLeft;\n"
    "  if (left < to) to = left;\n"
    "  if (right > to + box.clientWidth) {\n"
    "    to = right - box.clientWidth;\n"
    "    for (let u = 1; u < head.length; u++) {\n"
    "      if (head[u].offsetLeft - label >= to) {\n"
    "        to = Math.min(head[u].offsetLeft - label, left);\n"
    "        break;\n"
    "      }\n"
    "    }\n"
    "  }\n"
    "  box.scrollLeft = to;\n"
    "  const r = box.getBoundingClientRect();\n"
    "  if (r.top < 0 || r.bottom > window.innerHeight) box.scrollIntoView({block: 'nearest'});\n"
    "}\n"
    "function show(i) {\n"
    "  const list = rows();\n"
    "  if (!list.length) return;\n"
    "  cur = Math.max(0, Math.min(list.length - 1, i));\n"
    "  const f = list[cur], cells = G[f[GRID]], grid = $('grid').tBodies[0].rows;\n"
    "  $('header').textContent = f[HEADER];\n"
    "  $('narration').textContent = S[f[NARRATION]];\n"
    "  $('flow').textContent = S[f[FLOW]] ? 'collective: ' + S[f[FLOW]] : '';\n"
    "  $('mode').textContent = byEvent\n"
    "    ? 'Every event: each allocation, free and GPU on its own (e: the presenter\\'s frames)'\n"
    "    : 'Presenter\\'s frames: one per collective or compute across all GPUs (e: every "
    "event)';\n"
    "  for (let r = 0; r < D.ranks; r++) {\n"
    "    for (let u = 0; u < NU; u++) {\n"
    "      const v = cells[r * NU + u], td = grid[r].cells[u + 1];\n"
    "      td.textContent = S[v >> 4];\n"
    "      td.className = FLAGS.filter(([bit]) => v & bit).map(([, name]) => name).join(' ');\n"
    "    }\n"
    "  }\n"
    "  const bars = $('bars').children, per = D.ddpRanks ? 2 : 1;\n"
    "  for (let r = 0; r < D.ranks; r++) fill(bars[r * per], M[f[MEMORY][r]]);\n"
    "  if (D.ddpRanks && f[DDP] >= 0) {\n"
    "    const d = P[f[DDP]];\n"
    "    $('ddpline').textContent = 'DDP at the same point, each GPU at its own: ' + S[d[0]];\n"
    "    for (let r = 0; r < D.ddpRanks; r++) fill(bars[r * 2 + 1], M[d[1][r]]);\n"
    "  }\n"
    "  drawTimeline(T[f[TIMELINE]], f[CURSOR]);\n"
    "  drawChart(f);\n"
    "  if (f[UNIT] >= 0) follow(f[UNIT]);\n"
    "  try {\n"
    "    history.replaceState(null, '', (byEvent ? '#' : '#f') + (cur + 1)); // a reload opens "
    "here\n"
    "  } catch (e) {\n"
    "    // some browsers refuse it for local files; the page works the same without\n"
    "  }\n"
    "}\n"
    "// The next (dir 1) or previous (dir -1) row of this kind; none: stay.\n"
    "function seek(dir, kind) {\n"
    "  const list = rows();\n"
    "  for (let j = cur + dir; j >= 0 && j < list.length; j += dir) if (list[j][KIND] === kind) "
    "return j;\n"
    "  return cur;\n"
    "}\n"
    "// nav.c's phase keys: the first event of the phase in this step, or, once the step has no\n"
    "// phased event left from `from` on, in the first later step that has the phase; -1: none.\n"
    "function phaseEvent(from, phase) {\n"
    "  let step = F[from][STEP], over = true;\n"
    "  for (let i = from; i < F.length && over; i++)\n"
    "    if (F[i][STEP] === step && F[i][PHASE] !== 0) over = false;\n"
    "  if (over) step++;\n"
    "  let found = -1;\n"
    "  for (let i = 0; i < F.length; i++) {\n"
    "    if (F[i][PHASE] !== phase || F[i][STEP] < step) continue;\n"
    "    if (found < 0 || F[i][STEP] < F[found][STEP]) found = i;\n"
    "  }\n"
    "  return found;\n"
    "}\n"
    "// The frame that holds event i (moments_find).\n"
    "function frameOf(i) {\n"
    "  let lo = 0, hi = R.length;\n"
    "  while (hi - lo > 1) {\n"
    "    const mid = (lo + hi) >> 1;\n"
    "    if (R[mid][FIRST] <= i) lo = mid; else hi = mid;\n"
    "  }\n"
    "  return lo;\n"
    "}\n"
    "// moments.c's phase keys: the frame of the first collective or compute of the phase that\n"
    "// nav's phase key finds from the frame's first event.\n"
    "function phaseFrame(from, phase) {\n"
    "  const event = phaseEvent(R[from][FIRST], phase);\n"
    "  if (event < 0) return from;\n"
    "  for (let k = frameOf(event); k < R.length; k++) {\n"
    "    const a = R[k][ANCHOR];\n"
    "    if (a < 0) continue;\n"
    "    if (F[a][STEP] !== F[event][STEP] || F[a][PHASE] !== F[event][PHASE]) break;\n"
    "    return k;\n"
    "  }\n"
    "  return frameOf(event);\n"
    "}\n"
    "function phaseKey(phase) {\n"
    "  if (!byEvent) return phaseFrame(cur, phase);\n"
    "  const to = phaseEvent(cur, phase);\n"
    "  return to < 0 ? cur : to;\n"
    "}\n"
    "function pace() {\n"
    "  return byEvent ? 400 : 1000; // a frame a second: time to read its sentence\n"
    "}\n"
    "function play() {\n"
    "  if (timer) {\n"
    "    clearInterval(timer);\n"
    "    timer = null;\n"
    "  } else {\n"
    "    timer = setInterval(() => (cur + 1 < rows().length ? show(cur + 1) : play()), pace());\n"
    "  }\n"
    "  $('playing').textContent = timer ? 'playing (r: pause)' : '';\n"
    "}\n"
    "// e: every event, or the presenter's frames; the same place in the step either way (the\n"
    "// frame's collective or compute, or the frame that holds the event).\n"
    "function switchMode() {\n"
    "  if (byEvent) {\n"
    "    cur = frameOf(cur);\n"
    "  } else {\n"
    "    const m = R[cur];\n"
    "    cur = m[ANCHOR] >= 0 ? m[ANCHOR] : m[LAST];\n"
    "  }\n"
    "  byEvent = !byEvent;\n"
    "  if (timer) {\n"
    "    play();\n"
    "    play(); // at the new mode's pace\n"
    "  }\n"
    "}\n"
    "function target(key) {\n"
    "  switch (key) {\n"
    "  case 'n': case ' ': case 'ArrowRight': return cur + 1;\n"
    "  case 'p': case 'ArrowLeft': return cur - 1;\n"
    "  case 'c': return seek(1, COLLECTIVE);\n"
    "  case 'C': return seek(-1, COLLECTIVE);\n"
    "  case 'k': return seek(1, COMPUTE);\n"
    "  case 'K': return seek(-1, COMPUTE);\n"
    "  case 'f': case 'b': case 'o': return phaseKey(D.phases[key]);\n"
    "  case 'Home': return 0;\n"
    "  case 'End': return rows().length - 1;\n"
    "  }\n"
    "  return null;\n"
    "}\n"
    "document.addEventListener('keydown', (e) => {\n"
    "  if (e.ctrlKey || e.altKey || e.metaKey || !F.length) return;\n"
    "  if (e.key === 'r') {\n"
    "    play();\n"
    "  } else if (e.key === 'e') {\n"
    "    switchMode();\n"
    "    show(cur);\n"
    "  } else {\n"
    "    const to = target(e.key);\n"
    "    if (to === null) return;\n"
    "    show(to);\n"
    "  }\n"
    "  e.preventDefault();\n"
    "});\n"
    "// page.html#f2 opens at frame 2, page.html#55 at event 55 (every event); a changed # goes\n"
    "// there\n"
    "function linked() {\n"
    "  const m = /^#(f?)([0-9]+)$/.exec(location.hash);\n"
    "  if (!m) return null;\n"
    "  const list = m[1] ? R : F, at = parseInt(m[2], 10);\n"
    "  return at >= 1 && at <= list.length ? {byEvent: !m[1], at: at - 1} : null;\n"
    "}\n"
    "window.addEventListener('hashchange', () => {\n"
    "  const l = linked();\n"
    "  if (!l || (l.byEvent === byEvent && l.at === cur)) return;\n"
    "  byEvent = l.byEvent;\n"
    "  show(l.at);\n"
    "});\n"
    "if (F.length) {\n"
    "  build();\n"
    "  const l = linked();\n"
    "  if (l) byEvent = l.byEvent;\n"
    "  show(l ? l.at : 0);\n"
    "} else {\n"
    "  $('header').textContent = '(the trace is empty)';\n"
    "}\n"
    "document.body.dataset.ready = '1';\n";

/* The page's rows: F as they are made, R (fewer) kept in `frames` until F is done. */
typedef struct Writer {
    FILE *out;
    const Trace *t;
    const Plan *p;
    Tables tb;
    Charts charts;
    DdpSide ddp;
    Moments ms;
    Frame f, fm; /* an event's frame, a presenter's */
    Buf frames;
    long *memory; /* scratch: a row's memory indices */
    size_t cell_width;
} Writer;

static int write_rows(Writer *w, Err *err) {
    const Trace *t = w->t;
    size_t k = 0; /* the next presenter's frame: the one whose last event comes next */
    for (size_t i = 0; i < t->n; i++) {
        long ddp;
        int rc = frame_at(&w->f, t, w->p, i, err);
        if (!rc) rc = ddp_state(&w->tb, &w->ddp, i, w->memory, &ddp, err);
        if (!rc) rc = build_row(&w->tb, &w->f, w->p, &w->charts, ddp, w->memory);
        if (rc == ERR_NOMEM) return err_set(err, ERR_NOMEM, "out of memory for the page's frames");
        if (rc) return rc;
        const TraceEvent *e = &t->ev[i];
        fprintf(w->out, "%s%s,%d,%d]", i ? ",\n" : "", w->tb.row.s, e->phase, e->step);
        for (; k < w->ms.n && w->ms.m[k].last == i; k++) { /* its state is event i's */
            const Moment *m = &w->ms.m[k];
            rc = moments_frame(&w->fm, t, w->p, &w->ms, k, err);
            if (!rc) rc = build_row(&w->tb, &w->fm, w->p, &w->charts, ddp, w->memory);
            if (rc == ERR_NOMEM)
                return err_set(err, ERR_NOMEM, "out of memory for the page's frames");
            if (rc) return rc;
            size_t width = plain_cell_width(&w->fm, w->p);
            if (width > w->cell_width) w->cell_width = width;
            buf_add(&w->frames, "%s%s,%zu,%zu,%ld]", k ? ",\n" : "", w->tb.row.s, m->first, m->last,
                    m->anchor == MOMENT_NO_ANCHOR ? -1L : (long)m->anchor);
            if (w->frames.nomem) return err_set(err, ERR_NOMEM, "out of memory for the frames");
        }
    }
    return 0;
}

/* Each step's chart, one shown at a time. */
static int write_charts(Writer *w, Err *err) {
    size_t ddp = w->p->model->total_numel * 4 * sizeof(float);
    fputs("<div id=\"charts\">\n", w->out);
    for (int s = 0; s < w->charts.nsteps; s++) {
        if (!w->charts.ok[s]) continue;
        int rc = html_chart_write(w->out, &w->charts.mt[s], w->t, ddp, s, err);
        if (rc) return rc;
    }
    fputs("</div>\n", w->out);
    return 0;
}

static int writer_open(Writer *w, const Trace *t, const Plan *p, const HtmlPage *page, Err *err) {
    w->ddp = (DdpSide){
        .t = page->ddp && page->ddp->n ? page->ddp : NULL, .p = page->ddp_plan, .last_state = -1};
    int rc = frame_init(&w->f, p, err);
    if (!rc) rc = frame_init(&w->fm, p, err);
    if (!rc && w->ddp.t) rc = frame_init(&w->ddp.f, w->ddp.p, err);
    if (!rc && w->ddp.t) rc = compare_walk_init(&w->ddp.walk, t, w->ddp.t, err);
    size_t ddp_ranks = w->ddp.t ? (size_t)w->ddp.t->nranks + 1 : 1;
    w->ddp.ends = calloc(ddp_ranks, sizeof *w->ddp.ends);
    w->ddp.last_ends = calloc(ddp_ranks, sizeof *w->ddp.last_ends);
    if (!rc && (!w->ddp.ends || !w->ddp.last_ends))
        rc = err_set(err, ERR_NOMEM, "out of memory for the page's DDP side");
    if (!rc) rc = moments_build(&w->ms, t, err);
    if (!rc) rc = charts_build(&w->charts, t, err);
    int ranks = p->world;
    if (w->ddp.t && w->ddp.p->world > ranks) ranks = w->ddp.p->world;
    if (!rc && !(w->memory = calloc((size_t)ranks + 1, sizeof *w->memory)))
        rc = err_set(err, ERR_NOMEM, "out of memory for the page");
    return rc;
}

static void writer_close(Writer *w) {
    table_free(&w->tb.strings);
    table_free(&w->tb.grids);
    table_free(&w->tb.memory);
    table_free(&w->tb.timelines);
    table_free(&w->tb.ddp);
    free(w->tb.json.s);
    free(w->tb.value.s);
    free(w->tb.row.s);
    free(w->frames.s);
    free(w->memory);
    charts_free(&w->charts);
    moments_free(&w->ms);
    frame_free(&w->f);
    frame_free(&w->fm);
    if (w->ddp.t) frame_free(&w->ddp.f);
    compare_walk_free(&w->ddp.walk);
    free(w->ddp.ends);
    free(w->ddp.last_ends);
}

int html_write(FILE *out, const Trace *t, const Plan *p, const HtmlPage *page, Err *err) {
    Writer w = {.out = out, .t = t, .p = p};
    int rc = writer_open(&w, t, p, page, err);
    fputs("<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n<title>", out);
    html_text(out, page->title);
    fprintf(out, "</title>\n<style>\n%s", page_style);
    grid_style(out);
    fputs("</style>\n</head>\n<body>\n<h1>", out);
    html_text(out, page->title);
    fprintf(out, "</h1>\n%s", page_body);
    if (!rc) rc = write_charts(&w, err);
    if (!rc) fprintf(out, "%s<script>\n'use strict';\nconst F=[", page_after_charts);
    if (!rc) rc = write_rows(&w, err);
    if (!rc) {
        fprintf(out, "];\nconst R=[%s];\n", w.frames.s ? w.frames.s : "");
        table_write(out, "S", &w.tb.strings);
        table_write(out, "G", &w.tb.grids);
        table_write(out, "M", &w.tb.memory);
        table_write(out, "T", &w.tb.timelines);
        table_write(out, "P", &w.tb.ddp);
        if (w.ddp.t) rc = frame_at(&w.ddp.f, w.ddp.t, w.ddp.p, w.ddp.t->n - 1, err); /* peaks */
    }
    if (!rc && write_shared(out, &w.tb, &w.f, p, &w.ddp, page, w.cell_width))
        rc = err_set(err, ERR_NOMEM, "out of memory for the page");
    if (!rc) fprintf(out, "%s</script>\n</body>\n</html>\n", page_script);
    writer_close(&w);
    return rc;
}
