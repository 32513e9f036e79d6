/* html: a whole trace as one self-contained HTML page: every event's frame (frame_at, as plain.c
 * draws one) as compact data, and a small script that draws one frame and moves between frames
 * on the viewer's keys. Nothing in it is loaded from elsewhere. */
#include "sim/viz/html.h"

#include <stdarg.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "sim/viz/frame.h"
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

__attribute__((format(printf, 2, 3))) static void buf_add(Buf *b, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    int len = vsnprintf(NULL, 0, fmt, ap);
    va_end(ap);
    if (len < 0 || !buf_reserve(b, (size_t)len)) return;
    va_start(ap, fmt);
    vsnprintf(b->s + b->n, b->cap - b->n, fmt, ap);
    va_end(ap);
    b->n += (size_t)len;
}

/* s as a JSON string that is also safe inside a <script> element: '<' is escaped, so no text
 * can end the script ("</script>") or open a comment in it. UTF-8 is kept as it is. */
static void buf_json(Buf *b, const char *s) {
    buf_add(b, "\"");
    for (; *s; s++) {
        unsigned char c = (unsigned char)*s;
        if (c == '"' || c == '\\')
            buf_add(b, "\\%c", c);
        else if (c < 0x20 || c == '<')
            buf_add(b, "\\u%04x", c);
        else if (buf_reserve(b, 1))
            b->s[b->n++] = (char)c;
    }
    buf_add(b, "\"");
    if (b->s) b->s[b->n] = 0;
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

/* ---------------------------------------------------------------- the frames */

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
    Table strings, grids, memory, timelines; /* the page's S, G, M and T */
    Buf json, value;                         /* scratch */
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
    for (int r = 0; r < f->nranks; r++)
        for (int u = 0; u < f->nunits; u++) {
            char text[200];
            plain_cell_text(f, p, r, u, text, sizeof text);
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

/* ["232 B (peak 312 B)", bytes of each category...]: rank r's memory as the bars draw it. */
static long memory_index(Tables *tb, const Frame *f, int r) {
    char text[80];
    plain_memory_text(f, r, text, sizeof text);
    Buf *v = &tb->value;
    v->n = 0;
    buf_add(v, "[");
    buf_json(v, text);
    for (int c = 0; c < MEM_CATEGORY_COUNT; c++)
        buf_add(v, ",%zu", frame_mem(f, r, (MemCategory)c));
    buf_add(v, "]");
    return value_index(tb, &tb->memory);
}

/* ["timeline of step 1 (...)", [row of each rank's each stream...]]: the same for every event
 * of a step, so written once per step. */
static long timeline_index(Tables *tb, const Frame *f) {
    char title[96];
    plain_timeline_title(f, title, sizeof title);
    Buf *v = &tb->value;
    v->n = 0;
    buf_add(v, "[");
    buf_json(v, title);
    buf_add(v, ",[");
    for (int row = 0; row < f->nranks * STREAM_COUNT; row++) {
        if (row) buf_add(v, ",");
        buf_json(v, f->timeline[row]);
    }
    buf_add(v, "]]");
    return value_index(tb, &tb->timelines);
}

/* One row of F: [header, narration, flow, timeline, cursor, kind, phase, step, grid, [memory of
 * each rank]]; -1 out of memory. */
static int write_frame(FILE *out, Tables *tb, const Frame *f, const Plan *p, long *memory) {
    const TraceEvent *e = f->event;
    long narration = string_index(tb, f->narration), flow = string_index(tb, f->flow);
    long grid = grid_index(tb, f, p), timeline = timeline_index(tb, f);
    if (narration < 0 || flow < 0 || grid < 0 || timeline < 0) return -1;
    for (int r = 0; r < f->nranks; r++)
        if ((memory[r] = memory_index(tb, f, r)) < 0) return -1;
    tb->json.n = 0;
    buf_json(&tb->json, f->header);
    if (tb->json.nomem) return -1;
    fprintf(out, "%s[%s,%ld,%ld,%ld,%d,%d,%d,%d,%ld,[", f->index ? ",\n" : "", tb->json.s,
            narration, flow, timeline, f->cursor, kind_class(e), e->phase, e->step, grid);
    for (int r = 0; r < f->nranks; r++) fprintf(out, "%s%ld", r ? "," : "", memory[r]);
    fputs("]]", out);
    return 0;
}

/* D: what every frame shares. The bars' scale is the largest peak of any rank (the last
 * frame's peaks are the largest so far) or the DDP figure, whichever is larger. */
static int write_shared(FILE *out, Tables *tb, const Frame *last, const Plan *p,
                        const char *title) {
    /* DDP: every parameter, its gradient and Adam's two moments, in fp32 (as the viewer's) */
    size_t ddp = p->model->total_numel * 4 * sizeof(float), scale = ddp;
    for (int r = 0; r < last->nranks; r++)
        if (last->peak[r] > scale) scale = last->peak[r];
    char bytes[32], ddp_text[160];
    snprintf(ddp_text, sizeof ddp_text,
             "DDP: %s per GPU at rest (every parameter, its gradient and Adam's two moments)",
             format_bytes(ddp, bytes, sizeof bytes));
    Buf *b = &tb->value;
    b->n = 0;
    buf_add(b, "const D={title:");
    buf_json(b, title);
    buf_add(b, ",units:[");
    for (int u = 0; u < p->nunits; u++) {
        if (u) buf_add(b, ",");
        buf_json(b, p->units[u].name);
    }
    buf_add(b, "],ranks:%d,streams:%d,cats:[", p->world, STREAM_COUNT);
    for (int c = 0; c < MEM_CATEGORY_COUNT; c++) {
        if (c) buf_add(b, ",");
        buf_json(b, mem_category_label((MemCategory)c));
    }
    buf_add(b, "],ddp:%zu,ddpText:", ddp);
    buf_json(b, ddp_text);
    buf_add(b, ",scale:%zu,phases:{f:%d,b:%d,o:%d}};\n", scale ? scale : 1, PHASE_FORWARD,
            PHASE_BACKWARD, PHASE_OPTIMIZER);
    if (b->nomem) return -1;
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
    "h1{font-size:1.3em;margin:0 0 .6em}h2{font-size:1em;margin:1.2em 0 .4em;color:#555}\n"
    "#header,#flow,#grid,#timeline,#keys td:first-child{font-family:ui-monospace,monospace}\n"
    "#header{font-size:1.15em;font-weight:bold;padding:.35em .6em;background:#e8eefc;"
    "border-radius:4px}\n"
    "#narration{font-size:1.1em;margin:.6em 0 .2em}#flow{color:#333;margin:.2em 0}\n"
    ".scroll{overflow-x:auto}#grid{border-collapse:collapse}\n"
    "#grid th,#grid td{border:1px solid #ccc;padding:.2em .6em;text-align:left;"
    "white-space:nowrap}\n"
    "#grid td.gathered{background:#d7e5ff}#grid td.grads{background:#ffe0bd}\n"
    "#grid td.reduced{color:#17692c}#grid td.stepped{font-weight:bold}\n"
    ".row{display:flex;align-items:center;gap:.7em;margin:.25em 0}.who{width:4.5em}\n"
    ".bar{position:relative;flex:0 0 55%;height:1.2em;background:#f4f4f4;border:1px solid #bbb}\n"
    ".seg{position:absolute;top:0;bottom:0;width:0}\n"
    ".ddp{position:absolute;top:-4px;bottom:-4px;border-left:2px dashed #c00}\n"
    "#legend{font-size:.9em;margin-top:.4em}.key{margin-right:1.2em;white-space:nowrap}\n"
    ".swatch{display:inline-block;width:.9em;height:.9em;margin-right:.3em;"
    "vertical-align:-.1em}\n"
    ".ddpkey{display:inline-block;width:0;height:1em;margin-right:.4em;vertical-align:-.15em;"
    "border-left:2px dashed #c00}\n"
    "#timeline{line-height:1.2}#timeline .c{color:#1f7a3a}#timeline .m{color:#2457c5}\n"
    "#timeline .y{color:#c26a00}#timeline .i{color:#aaa}#timeline b{outline:2px solid #c00}\n"
    "#keys td{padding:.1em 1em .1em 0}#playing{color:#c00}\n";

/* The page around the data: what a frame shows, in the order the terminal shows it. */
static const char page_body[] =
    "<div id=\"header\"></div>\n"
    "<p id=\"narration\"></p>\n"
    "<p id=\"flow\"></p>\n"
    "<h2>Who holds what</h2>\n"
    "<div class=\"scroll\"><table id=\"grid\"></table></div>\n"
    "<p>A cell is what the GPU keeps of the unit at rest (its shard), then <i>+all</i> (or the "
    "other GPUs' shards) while the unit is gathered, <i>+&part;all</i> while its full gradients "
    "exist and, once they are reduced, the GPU's gradient shard. Blue: gathered; orange: full "
    "gradients; green: reduced; bold: stepped.</p>\n"
    "<h2>Memory of each GPU</h2>\n"
    "<div id=\"bars\"></div>\n"
    "<div id=\"legend\"></div>\n"
    "<h2>Timeline</h2>\n"
    "<pre id=\"timeline\"></pre>\n"
    "<h2>Keys</h2>\n"
    "<table id=\"keys\">\n"
    "<tr><td>n, space, &rarr;</td><td>next event</td></tr>\n"
    "<tr><td>p, &larr;</td><td>previous event</td></tr>\n"
    "<tr><td>c / C</td><td>next / previous collective (all_gather, reduce_scatter, all_reduce, "
    "broadcast, barrier)</td></tr>\n"
    "<tr><td>k / K</td><td>next / previous compute (forward, backward, recompute, "
    "optimizer)</td></tr>\n"
    "<tr><td>f / b / o</td><td>first event of this step's forward / backward / optimizer (once "
    "past it: the next step's)</td></tr>\n"
    "<tr><td>Home / End</td><td>first / last event</td></tr>\n"
    "<tr><td>r</td><td>play / pause</td></tr>\n"
    "</table>\n"
    "<p>Open the page at event 55 with <i>#55</i> after its name. <span "
    "id=\"playing\"></span></p>\n";

static const char page_script[] =
    "// F: a row per event: [header, narration, flow, timeline, cursor, kind, phase, step,\n"
    "// grid, memory of each rank]; S, G, M, T: the strings, grids, memory states and step\n"
    "// timelines those index (each written once, however many frames share it); D: what every\n"
    "// frame shares.\n"
    "const COLLECTIVE = 1, COMPUTE = 2, KIND = 5, PHASE = 6, STEP = 7;\n"
    "const N = F.length, NU = D.units.length;\n"
    "const FLAGS = [[1, 'gathered'], [2, 'grads'], [4, 'reduced'], [8, 'stepped']];\n"
    "const COLOURS = ['#4c78a8', '#9ecae9', '#54a24b', '#f58518', '#b279a2', '#e45756',\n"
    "                 '#72b7b2', '#9d755d', '#eeca3b', '#bab0ac', '#d3d3d3'];\n"
    "const $ = (id) => document.getElementById(id);\n"
    "let cur = 0, timer = null;\n"
    "function el(tag, cls, text) {\n"
    "  const e = document.createElement(tag);\n"
    "  if (cls) e.className = cls;\n"
    "  if (text !== undefined) e.textContent = text;\n"
    "  return e;\n"
    "}\n"
    "// The parts every frame has: the grid's rows and columns, a bar per rank, the legend.\n"
    "function build() {\n"
    "  const head = $('grid').createTHead().insertRow();\n"
    "  head.appendChild(el('th', '', ''));\n"
    "  for (const u of D.units) head.appendChild(el('th', '', u));\n"
    "  const body = $('grid').createTBody();\n"
    "  for (let r = 0; r < D.ranks; r++) {\n"
    "    const row = body.insertRow();\n"
    "    row.appendChild(el('th', '', 'GPU ' + r));\n"
    "    for (let u = 0; u < NU; u++) row.insertCell();\n"
    "  }\n"
    "  const used = D.cats.map((_, c) => M.some((m) => m[1 + c] > 0));\n"
    "  for (let r = 0; r < D.ranks; r++) {\n"
    "    const row = el('div', 'row'), bar = el('div', 'bar');\n"
    "    row.appendChild(el('span', 'who', 'GPU ' + r));\n"
    "    D.cats.forEach((name, c) => {\n"
    "      const seg = el('div', 'seg');\n"
    "      seg.style.background = COLOURS[c % COLOURS.length];\n"
    "      seg.title = name;\n"
    "      bar.appendChild(seg);\n"
    "    });\n"
    "    const ddp = el('div', 'ddp');\n"
    "    ddp.style.left = (100 * D.ddp / D.scale) + '%';\n"
    "    bar.appendChild(ddp);\n"
    "    row.appendChild(bar);\n"
    "    row.appendChild(el('span', 'mem'));\n"
    "    $('bars').appendChild(row);\n"
    "  }\n"
    "  D.cats.forEach((name, c) => {\n"
    "    if (!used[c]) return;\n"
    "    const key = el('span', 'key');\n"
    "    const swatch = key.appendChild(el('span', 'swatch'));\n"
    "    swatch.style.background = COLOURS[c % COLOURS.length];\n"
    "    key.appendChild(document.createTextNode(name));\n"
    "    $('legend').appendChild(key);\n"
    "  });\n"
    "  const ddp = el('span', 'key');\n"
    "  ddp.appendChild(el('span', 'ddpkey'));\n"
    "  ddp.appendChild(document.createTextNode(D.ddpText));\n"
    "  $('legend').appendChild(ddp);\n"
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
    "function drawTimeline(t, cursor) {\n"
    "  const names = ['compute', 'comm', 'copy'];\n"
    "  let html = esc(t[0]) + '  <span class=c>#</span> compute  <span class=m>=</span> comm' +\n"
    "             '  <span class=y>~</span> copy\\n' + ' '.repeat(16 + cursor) + 'v\\n';\n"
    "  for (let r = 0; r < D.ranks; r++) {\n"
    "    for (let s = 0; s < D.streams; s++) {\n"
    "      const row = t[1][r * D.streams + s];\n"
    "      if (s === 2 && row.indexOf('~') < 0) continue; // no offload: no copies\n"
    "      const label = (s === 0 ? 'GPU ' + r : '').padEnd(8) + names[s].padEnd(8);\n"
    "      html += label + paint(row, cursor) + '\\n';\n"
    "    }\n"
    "  }\n"
    "  $('timeline').innerHTML = html;\n"
    "}\n"
    "function show(i) {\n"
    "  if (!N) return;\n"
    "  cur = Math.max(0, Math.min(N - 1, i));\n"
    "  const f = F[cur], cells = G[f[8]], rows = $('grid').tBodies[0].rows;\n"
    "  $('header').textContent = f[0];\n"
    "  $('narration').textContent = S[f[1]];\n"
    "  $('flow').textContent = S[f[2]] ? 'collective: ' + S[f[2]] : '';\n"
    "  for (let r = 0; r < D.ranks; r++) {\n"
    "    for (let u = 0; u < NU; u++) {\n"
    "      const v = cells[r * NU + u], td = rows[r].cells[u + 1];\n"
    "      td.textContent = S[v >> 4];\n"
    "      td.className = FLAGS.filter(([bit]) => v & bit).map(([, name]) => name).join(' ');\n"
    "    }\n"
    "  }\n"
    "  const bars = $('bars').children;\n"
    "  for (let r = 0; r < D.ranks; r++) {\n"
    "    const m = M[f[9][r]], segs = bars[r].children[1].children;\n"
    "    let at = 0;\n"
    "    for (let c = 0; c < D.cats.length; c++) {\n"
    "      const w = 100 * m[1 + c] / D.scale;\n"
    "      segs[c].style.left = at + '%';\n"
    "      segs[c].style.width = w + '%';\n"
    "      at += w;\n"
    "    }\n"
    "    bars[r].children[2].textContent = m[0];\n"
    "  }\n"
    "  drawTimeline(T[f[3]], f[4]);\n"
    "  try {\n"
    "    history.replaceState(null, '', '#' + (cur + 1)); // a reload, or a link, opens here\n"
    "  } catch (e) {\n"
    "    // some browsers refuse it for local files; the page works the same without\n"
    "  }\n"
    "}\n"
    "// The next (dir 1) or previous (dir -1) event that pred accepts; none: stay.\n"
    "function seek(dir, pred) {\n"
    "  for (let j = cur + dir; j >= 0 && j < N; j += dir) if (pred(F[j])) return j;\n"
    "  return cur;\n"
    "}\n"
    "// The first event of the current step's phase; once past that phase's last event (or where\n"
    "// the step has none), the first of a later step's; none: stay.\n"
    "function phaseStart(phase) {\n"
    "  const step = F[cur][STEP];\n"
    "  let first = -1, last = -1;\n"
    "  for (let j = 0; j < N; j++) {\n"
    "    if (F[j][STEP] !== step || F[j][PHASE] !== phase) continue;\n"
    "    if (first < 0) first = j;\n"
    "    last = j;\n"
    "  }\n"
    "  if (first >= 0 && cur <= last) return first;\n"
    "  for (let j = 0; j < N; j++) if (F[j][STEP] > step && F[j][PHASE] === phase) return j;\n"
    "  return cur;\n"
    "}\n"
    "function play() {\n"
    "  if (timer) {\n"
    "    clearInterval(timer);\n"
    "    timer = null;\n"
    "  } else {\n"
    "    timer = setInterval(() => (cur + 1 < N ? show(cur + 1) : play()), 400);\n"
    "  }\n"
    "  $('playing').textContent = timer ? 'playing (r: pause)' : '';\n"
    "}\n"
    "function target(key) {\n"
    "  switch (key) {\n"
    "  case 'n': case ' ': case 'ArrowRight': return cur + 1;\n"
    "  case 'p': case 'ArrowLeft': return cur - 1;\n"
    "  case 'c': return seek(1, (f) => f[KIND] === COLLECTIVE);\n"
    "  case 'C': return seek(-1, (f) => f[KIND] === COLLECTIVE);\n"
    "  case 'k': return seek(1, (f) => f[KIND] === COMPUTE);\n"
    "  case 'K': return seek(-1, (f) => f[KIND] === COMPUTE);\n"
    "  case 'f': case 'b': case 'o': return phaseStart(D.phases[key]);\n"
    "  case 'Home': return 0;\n"
    "  case 'End': return N - 1;\n"
    "  }\n"
    "  return null;\n"
    "}\n"
    "document.addEventListener('keydown', (e) => {\n"
    "  if (e.ctrlKey || e.altKey || e.metaKey || !N) return;\n"
    "  if (e.key === 'r') {\n"
    "    play();\n"
    "  } else {\n"
    "    const to = target(e.key);\n"
    "    if (to === null) return;\n"
    "    show(to);\n"
    "  }\n"
    "  e.preventDefault();\n"
    "});\n"
    "// page.html#55 opens at event 55, and a changed # goes there\n"
    "function linked() {\n"
    "  const at = parseInt(location.hash.slice(1), 10);\n"
    "  return at >= 1 && at <= N ? at - 1 : null;\n"
    "}\n"
    "window.addEventListener('hashchange', () => {\n"
    "  const at = linked();\n"
    "  if (at !== null && at !== cur) show(at);\n"
    "});\n"
    "if (N) {\n"
    "  build();\n"
    "  show(linked() ?? 0);\n"
    "} else {\n"
    "  $('header').textContent = '(the trace is empty)';\n"
    "}\n"
    "document.body.dataset.ready = '1';\n";

int html_write(FILE *out, const Trace *t, const Plan *p, const char *title, Err *err) {
    Frame f;
    int rc = frame_init(&f, p, err);
    if (rc) return rc;
    Tables tb = {0};
    long *memory = calloc((size_t)p->world, sizeof *memory);
    if (!memory) rc = err_set(err, ERR_NOMEM, "out of memory for the page");
    fputs("<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n<title>", out);
    html_text(out, title);
    fprintf(out, "</title>\n<style>\n%s</style>\n</head>\n<body>\n<h1>", page_style);
    html_text(out, title);
    fprintf(out, "</h1>\n%s<script>\n'use strict';\nconst F=[", page_body);
    for (size_t i = 0; !rc && i < t->n; i++) {
        rc = frame_at(&f, t, p, i, err);
        if (!rc && write_frame(out, &tb, &f, p, memory))
            rc = err_set(err, ERR_NOMEM, "out of memory for the page's frames");
    }
    if (!rc) {
        fputs("];\n", out);
        table_write(out, "S", &tb.strings);
        table_write(out, "G", &tb.grids);
        table_write(out, "M", &tb.memory);
        table_write(out, "T", &tb.timelines);
        if (write_shared(out, &tb, &f, p, title))
            rc = err_set(err, ERR_NOMEM, "out of memory for the page");
    }
    if (!rc) fprintf(out, "%s</script>\n</body>\n</html>\n", page_script);
    table_free(&tb.strings);
    table_free(&tb.grids);
    table_free(&tb.memory);
    table_free(&tb.timelines);
    free(tb.json.s);
    free(tb.value.s);
    free(memory);
    frame_free(&f);
    return rc;
}
