/* plain: a frame as text, for a terminal without the full-screen viewer, for golden-file tests and
 * for slides. */
#include "sim/viz/plain.h"

#include <string.h>

#include "sim/viz/svg.h"
#include "sim/viz/text.h"

static void pad(FILE *out, const char *s, size_t width) {
    fputs(s, out);
    for (size_t w = text_display_width(s); w < width; w++) fputc(' ', out);
}

/* The symbols of unit u that the other members of rank sr's group of S keep ("a₁ a₂" for
 * GPU 0 of 3): what a gather brings in. "" when the unit has no symbols or nobody else keeps
 * any (a replicated unit). */
static void others_symbols(const Plan *p, int u, int S, int sr, char *buf, size_t n) {
    size_t at = 0;
    buf[0] = 0;
    for (int q = 0; q < S && at < n; q++) {
        char part[160];
        if (q == sr || !text_unit_symbols(p, u, S, q, "", part, sizeof part) || !part[0]) continue;
        at += (size_t)snprintf(buf + at, n - at, "%s%s", at ? " " : "", part);
    }
}

/* What a rank holds of a unit: its shard (symbols, with values when the trace has them and
 * the parameters are sharded, or a count), then while the unit is gathered "+a₁ a₂" (the
 * other ranks' shards it holds a temporary copy of; "+all" for a unit without symbols), and
 * "+∂all" while its unsharded gradients exist; once those are reduced and freed, its gradient
 * shard with values ("∂a₀=+0.004") until the step ends. grads NULL: no gradient values, and no
 * gradient shard unless `no_values` (an accounting-only run: its symbol, "∂a₀"). */
static void cell_state(const Plan *p, int r, int u, FrameCell c, const float *values,
                       const float *grads, int no_values, char *buf, size_t n) {
    int S = p->params_sharded ? p->shard_size : 1;
    int sr = p->params_sharded ? plan_shard_rank(p, r) : 0;
    char mine[160], others[160] = "", shard[160] = "";
    /* Replicated parameters are the same everywhere: their values would only widen the grid
     * (the narration of Adam's step still shows them). */
    if (!p->params_sharded) values = NULL;
    if (!text_unit_values(p, u, S, sr, "", values, mine, sizeof mine))
        snprintf(mine, sizeof mine, "%zu", c.kept);
    else if (!mine[0])
        snprintf(mine, sizeof mine, "-");
    if (c.gathered) others_symbols(p, u, S, sr, others, sizeof others);
    if ((grads || no_values) && p->grads_sharded && c.reduced && !c.grads_full) {
        int gr = plan_shard_rank(p, r);
        text_unit_values(p, u, p->shard_size, gr, "\u2202", grads, shard + 1, sizeof shard - 1);
        if (shard[1]) shard[0] = ' ';
    }
    snprintf(buf, n, "%s%s%s%s%s", mine, c.gathered ? " +" : "",
             c.gathered && !others[0] ? "all" : others, c.grads_full ? " +\u2202all" : "", shard);
}

void plain_cell_text(const Frame *f, const Plan *p, int r, int u, char *buf, size_t n) {
    cell_state(p, r, u, *frame_cell(f, r, u), frame_values(f, r, u), f->grads, f->accounting_only,
               buf, n);
}

/* The widest a cell can get in this trace (gathered, with full gradients, where the trace ever
 * does either), so columns stay put from one frame to the next. */
size_t plain_cell_width(const Frame *f, const Plan *p) {
    char text[200];
    size_t width = 4;
    for (int u = 0; u < p->nunits; u++) {
        size_t w = text_display_width(p->units[u].name);
        if (w > width) width = w;
        for (int r = 0; r < f->nranks; r++) {
            /* busiest in backward (gathered, full gradients), or at rest with a gradient
             * shard after its reduce-scatter */
            FrameCell busy = *frame_cell(f, r, u), reduced = busy;
            busy.gathered = f->ever_gathered;
            busy.grads_full = f->ever_grads_full;
            busy.reduced = reduced.gathered = reduced.grads_full = 0;
            reduced.reduced = 1;
            cell_state(p, r, u, busy, frame_values(f, r, u), f->grads, f->accounting_only, text,
                       sizeof text);
            if (text_display_width(text) > width) width = text_display_width(text);
            cell_state(p, r, u, reduced, frame_values(f, r, u), f->grads, f->accounting_only, text,
                       sizeof text);
            if (text_display_width(text) > width) width = text_display_width(text);
        }
    }
    return width;
}

static void header(FILE *out, const Frame *f) {
    fprintf(out, "-- %s --\n", f->header);
}

void plain_memory_text(const Frame *f, int r, char *buf, size_t n) {
    char total[32], peak[32];
    size_t sum = 0;
    for (int c = 0; c < MEM_CATEGORY_COUNT; c++) sum += frame_mem(f, r, (MemCategory)c);
    snprintf(buf, n, "%s (peak %s)", format_bytes(sum, total, sizeof total),
             format_bytes(f->peak[r], peak, sizeof peak));
}

static void grid(FILE *out, const Frame *f, const Plan *p) {
    enum { CELL = 200 };
    char text[CELL];
    size_t width = plain_cell_width(f, p);
    fprintf(out, "         ");
    for (int u = 0; u < p->nunits; u++) pad(out, p->units[u].name, width + 2);
    fprintf(out, "memory\n");
    for (int r = 0; r < f->nranks; r++) {
        char label[16], memory[80];
        snprintf(label, sizeof label, "GPU %d", r);
        fprintf(out, "  %-7s", label);
        for (int u = 0; u < p->nunits; u++) {
            plain_cell_text(f, p, r, u, text, CELL);
            pad(out, text, width + 2);
        }
        plain_memory_text(f, r, memory, sizeof memory);
        fprintf(out, "%s\n", memory);
    }
}

void plain_timeline_title(const Frame *f, char *buf, size_t n) {
    snprintf(buf, n, "timeline of step %d (%.1f us %s)", f->event->step + 1,
             (f->step_end - f->step_start) * 1e6,
             f->scanned ? trace_clock(f->scanned) : "modelled");
}

/* Seconds a unit of the axis: us below a millisecond, ms below a second. */
static double unit_seconds(const Frame *f) {
    double span = f->step_end - f->step_start;
    return span < 1e-3 ? 1e-6 : span < 1 ? 1e-3 : 1;
}

const char *plain_timeline_unit(const Frame *f) {
    double u = unit_seconds(f);
    return u == 1e-6 ? "us" : u == 1e-3 ? "ms" : "s";
}

void plain_timeline_axis(const Frame *f, char *buf, size_t n) {
    int cols = f->timeline_cols;
    if (n == 0) return;
    size_t len = (size_t)cols < n - 1 ? (size_t)cols : n - 1;
    memset(buf, ' ', len);
    buf[len] = 0;
    double span = (f->step_end - f->step_start) / unit_seconds(f);
    if (!(span > 0)) return;
    /* about one tick every 10 columns, at round numbers */
    double step = svg_nice_step(span / (cols / 10 > 1 ? cols / 10 : 1));
    int decimals = svg_decimals_for(step), free_from = 0;
    for (int k = 0; k * step <= span * (1 + 1e-9); k++) {
        int at = (int)((double)k * step / span * (double)cols + 1e-9);
        char label[32];
        int w = snprintf(label, sizeof label, "%.*f", decimals, (double)k * step);
        if (at < free_from || at + w > (int)len) continue;
        memcpy(buf + at, label, (size_t)w);
        free_from = at + w + 1;
    }
    while (len > 0 && buf[len - 1] == ' ') buf[--len] = 0; /* no trailing blanks */
}

/* A phase's names, the longest first. */
static const char *const phase_names[3][3] = {
    {"forward", "fwd", "f"}, {"backward", "bwd", "b"}, {"optimizer", "opt", "o"}};

void plain_timeline_phases(const Frame *f, int cursor, char *buf, size_t n) {
    int cols = f->timeline_cols;
    if (n == 0) return;
    if ((size_t)cols > n - 1) cols = (int)(n - 1);
    for (int a = 0, b; a < cols; a = b) {
        char ph = f->phases[a];
        for (b = a + 1; b < cols && f->phases[b] == ph; b++) continue;
        if (ph == ' ' || !ph) {
            memset(buf + a, ' ', (size_t)(b - a));
            continue;
        }
        memset(buf + a, '-', (size_t)(b - a));
        buf[a] = b - a == 1 ? ph : '|'; /* a phase of one column: its letter */
        int which = ph == 'f' ? 0 : ph == 'b' ? 1 : 2;
        for (int k = 0; k < 3; k++) { /* the longest name that fits, clear of the cursor */
            int w = (int)strlen(phase_names[which][k]), at = a + 1;
            if (cursor >= at && cursor < at + w) at = cursor + 1;
            if (at + w > b) continue;
            memcpy(buf + at, phase_names[which][k], (size_t)w);
            break;
        }
    }
    buf[cols] = 0;
    if (cursor >= 0 && cursor < cols) buf[cursor] = 'v';
}

/* The step's phases, a 'v' over the current event's start, the streams per rank and the time
 * axis under them. */
static void timeline(FILE *out, const Frame *f) {
    char title[96], row[FRAME_TIMELINE_MAX + 1];
    plain_timeline_title(f, title, sizeof title);
    fprintf(out, "  %s  # compute  = comm  ~ copy\n", title);
    plain_timeline_phases(f, -1, row, sizeof row);
    fprintf(out, "  %-15s %s\n", "phases", row);
    fprintf(out, "  %-15s %*s\n", "", f->cursor + 1, "v");
    static const char *const names[STREAM_COUNT] = {"compute", "comm", "copy"};
    for (int r = 0; r < f->nranks; r++)
        for (int s = 0; s < STREAM_COUNT; s++) {
            const char *line = f->timeline[r * STREAM_COUNT + s];
            if (s == STREAM_COPY && !strpbrk(line, "~")) continue; /* no offload: no copies */
            char label[24] = "";
            if (s == 0) snprintf(label, sizeof label, "GPU %d", r);
            fprintf(out, "  %-7s %-7s %s\n", label, names[s], line);
        }
    char unit[24];
    snprintf(unit, sizeof unit, "time (%s)", plain_timeline_unit(f));
    plain_timeline_axis(f, row, sizeof row);
    fprintf(out, "  %-15s %s\n", unit, row);
}

void plain_render(FILE *out, const Frame *f, const Plan *p) {
    if (!f->event) {
        fprintf(out, "(the trace is empty)\n");
        return;
    }
    header(out, f);
    fprintf(out, "%s\n", f->narration);
    if (f->flow[0]) fprintf(out, "collective: %s\n", f->flow);
    grid(out, f, p);
    timeline(out, f);
}
