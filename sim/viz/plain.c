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

/* How much of a GPU's own gradients a cell spells out, richest first; a cell takes the first
 * that fits the trace's column (plain_cell_width), which is as wide as the cells without them
 * need, so that a toy's three units still fit 80 columns. */
typedef enum {
    GRADS_ALL,      /* every element's value, after "packed" when they wait in a send buffer */
    GRADS_OWN,      /* the values of the GPU's shard of them (what it keeps once reduced), "⋯"
                     * for the others it sends, the shard's parameters by symbol only */
    GRADS_UNMARKED, /* the same without "packed" */
    GRADS_NONE,     /* "+∂all" */
} GradsForm;

/* The gradient part of a cell whose unsharded gradients exist (or wait, packed, for their
 * reduction): " ∂a₀=+0.012⋯" and so on, as `form` says, or " +∂all" where there are no values. */
static void grads_text(const Plan *p, int r, int u, FrameCell c, const float *local, GradsForm form,
                       char *buf, size_t n) {
    buf[0] = 0;
    if (!c.grads_full && !c.grads_packed) return;
    if (!local || !c.grads_computed || form == GRADS_NONE || !text_unit_is_symbolic(p, u)) {
        snprintf(buf, n, " +\u2202all");
        return;
    }
    int packed = c.grads_packed && form != GRADS_UNMARKED;
    int at = snprintf(buf, n, " %s", packed ? "packed " : "");
    if (form == GRADS_ALL) {
        text_unit_values(p, u, 1, 0, "\u2202", local, buf + at, n - (size_t)at);
        return;
    }
    int S = p->grads_sharded ? p->shard_size : 1, q = p->grads_sharded ? plan_shard_rank(p, r) : 0;
    char mine[160], own[200], all[240];
    text_unit_values(p, u, S, q, "\u2202", local, mine, sizeof mine);
    text_unit_symbols(p, u, S, q, "", own, sizeof own);
    text_unit_symbols(p, u, 1, 0, "", all, sizeof all);
    int sends = strcmp(own, all) != 0; /* elements it sends on: "⋯" for them ("…" is a cut text) */
    snprintf(buf + at, n - (size_t)at, "%s%s", mine[0] ? mine : "\u2202", sends ? "\u22ef" : "");
}

/* Whether a cell in this state spells out a GPU's own gradients (so its form depends on the
 * column's width). */
static int shows_own_grads(const Plan *p, int u, FrameCell c, const float *local) {
    return (c.grads_full || c.grads_packed) && c.grads_computed && local &&
           text_unit_is_symbolic(p, u);
}

/* What a rank holds of a unit: "·" until its shard is allocated there (and after it is freed;
 * "-" is a shard with no rows); then the shard
 * (symbols, with values when the trace has them and the parameters are sharded, or a count),
 * while the unit is gathered "+a₁ a₂" (the other ranks' shards it holds a temporary copy of;
 * "+all" for a unit without symbols), while its unsharded gradients exist the GPU's own values of
 * them once its backward has computed them, before any averaging, as much as `form` spells out
 * (grads_text; "+∂all" without values or before the backward), "packed" where they wait in the
 * send buffer of a reduction still to come; once reduced, its gradient shard with values
 * ("∂a₀=+0.004") until the step ends. grads NULL: no gradient values, and no gradient shard
 * unless `no_values` (an accounting-only run: its symbol, "∂a₀"). local: the rank's own
 * gradients, NULL for none. */
static void cell_state(const Plan *p, int r, int u, FrameCell c, const float *values,
                       const float *grads, const float *local, int no_values, GradsForm form,
                       char *buf, size_t n) {
    int S = p->params_sharded ? p->shard_size : 1;
    int sr = p->params_sharded ? plan_shard_rank(p, r) : 0;
    char mine[160], others[160] = "", shard[160] = "", full[320];
    /* Replicated parameters are the same everywhere: their values would only widen the grid
     * (the narration of Adam's step still shows them). */
    if (!p->params_sharded) values = NULL;
    if (!c.resident && !c.gathered) { /* its shard is not on the GPU yet (or any more) */
        snprintf(buf, n, "\u00b7");
        return;
    }
    grads_text(p, r, u, c, local, form, full, sizeof full);
    /* a GPU's own gradients beside its shard's name: the parameters' values are the step's
     * start, in every other frame, and the gradients are what is new here */
    if ((form == GRADS_OWN || form == GRADS_UNMARKED) && shows_own_grads(p, u, c, local))
        values = NULL;
    if (!text_unit_values(p, u, S, sr, "", values, mine, sizeof mine))
        snprintf(mine, sizeof mine, "%zu", c.kept);
    else if (!mine[0])
        snprintf(mine, sizeof mine, "-");
    if (c.gathered) others_symbols(p, u, S, sr, others, sizeof others);
    if ((grads || no_values) && p->grads_sharded && c.reduced && !c.grads_full) {
        int gr = plan_shard_rank(p, r);
        text_unit_values(p, u, p->shard_size, gr, "\u2202", grads, shard + 1, sizeof shard - 1);
        if (shard[1]) shard[0] = ' ';
    } else if (p->grads_sharded && c.group_reduced && !c.grads_full) {
        /* hsdp between its two reductions: the shard group's average, not yet the final one,
         * which the trace holds alone: the symbols, no values */
        text_unit_symbols(p, u, p->shard_size, plan_shard_rank(p, r), "\u2202", shard + 1,
                          sizeof shard - 1);
        if (shard[1]) shard[0] = ' ';
    }
    snprintf(buf, n, "%s%s%s%s%s", mine, c.gathered ? " +" : "",
             c.gathered && !others[0] ? "all" : others, full, shard);
}

void plain_cell_text(const Frame *f, const Plan *p, int r, int u, size_t *width, char *buf,
                     size_t n) {
    FrameCell c = *frame_cell(f, r, u);
    const float *local = frame_local_grads(f, r);
    if (!shows_own_grads(p, u, c, local)) {
        cell_state(p, r, u, c, frame_values(f, r, u), f->grads, local, f->accounting_only,
                   GRADS_NONE, buf, n);
        return;
    }
    for (GradsForm form = GRADS_ALL; form <= GRADS_NONE; form++) {
        cell_state(p, r, u, c, frame_values(f, r, u), f->grads, local, f->accounting_only, form,
                   buf, n);
        if (!*width) *width = plain_cell_width(f, p); /* the richest form the column holds */
        if (text_display_width(buf) <= *width) return;
    }
}

/* The widest a cell gets in this trace, so that columns stay put from one frame to the next:
 * gathered with full gradients (where the trace ever has either) before its backward and after
 * it with the GPU's own gradients of its shard, those packed while no longer gathered, or at
 * rest with a gradient shard after its reduce-scatter. A cell that could say more (every
 * element's value, "packed" while still gathered) says it only where this width holds it. */
size_t plain_cell_width(const Frame *f, const Plan *p) {
    char text[400];
    size_t width = 4;
    for (int u = 0; u < p->nunits; u++) {
        size_t w = text_display_width(p->units[u].name);
        if (w > width) width = w;
        for (int r = 0; r < f->nranks; r++) {
            FrameCell busy = *frame_cell(f, r, u);
            busy.resident = 1;
            busy.gathered = f->ever_gathered;
            busy.grads_full = f->ever_grads_full;
            busy.grads_packed = busy.reduced = busy.grads_computed = 0;
            FrameCell computed = busy, packed = busy, reduced = busy;
            computed.grads_computed = 1;
            packed.grads_computed = packed.grads_packed = f->ever_packed;
            packed.gathered = packed.grads_full = 0;
            reduced.reduced = 1;
            reduced.gathered = reduced.grads_full = 0;
            const FrameCell states[4] = {busy, computed, packed, reduced};
            const GradsForm forms[4] = {GRADS_NONE, GRADS_OWN, GRADS_OWN, GRADS_NONE};
            for (int i = 0; i < 4; i++) {
                cell_state(p, r, u, states[i], frame_values(f, r, u), f->grads,
                           frame_local_grads(f, r), f->accounting_only, forms[i], text,
                           sizeof text);
                if (text_display_width(text) > width) width = text_display_width(text);
            }
        }
    }
    return width;
}

static void header(FILE *out, const Frame *f) {
    fprintf(out, "-- %s --\n", f->header);
}

void plain_off_gpu_text(const Frame *f, int r, char *buf, size_t n) {
    char host[32], nvme[32];
    size_t on_host = frame_mem(f, r, MEM_HOST_OFFLOAD), in_file = frame_mem(f, r, MEM_NVME);
    int at = 0;
    buf[0] = 0;
    if (on_host) at = snprintf(buf, n, " + host %s", format_bytes(on_host, host, sizeof host));
    if (in_file && at >= 0 && (size_t)at < n)
        snprintf(buf + at, n - (size_t)at, " + NVMe %s", format_bytes(in_file, nvme, sizeof nvme));
}

void plain_memory_text(const Frame *f, int r, char *buf, size_t n) {
    char total[32], peak[32], off[80];
    plain_off_gpu_text(f, r, off, sizeof off);
    snprintf(buf, n, "%s (peak %s)%s", format_bytes(frame_gpu_bytes(f, r), total, sizeof total),
             format_bytes(f->peak[r], peak, sizeof peak), off);
}

static void grid(FILE *out, const Frame *f, const Plan *p) {
    enum { CELL = 400 };
    char text[CELL];
    size_t width = plain_cell_width(f, p);
    fprintf(out, "         ");
    for (int u = 0; u < p->nunits; u++) pad(out, p->units[u].name, width + 2);
    fprintf(out, "memory\n");
    for (int r = 0; r < f->nranks; r++) {
        char label[16], memory[128];
        snprintf(label, sizeof label, "GPU %d", r);
        fprintf(out, "  %-7s", label);
        for (int u = 0; u < p->nunits; u++) {
            plain_cell_text(f, p, r, u, &width, text, CELL);
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
