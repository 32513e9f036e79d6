/* text: how the visualizer and the reports write things down: a byte count, a number with
 * thousands separators, a unit's shard as the toy's symbols or values, and the columns a UTF-8
 * string takes on a terminal. Pure functions into caller buffers. */
#include "sim/viz/text.h"

#include <stdio.h>

const char *format_bytes(size_t b, char *buf, size_t n) {
    static const char *const units[] = {"B", "KiB", "MiB", "GiB", "TiB"};
    double v = (double)b;
    int u = 0;
    while (v >= 1024.0 && u < 4) {
        v /= 1024.0;
        u++;
    }
    if (u == 0)
        snprintf(buf, n, "%zu B", b);
    else
        snprintf(buf, n, "%.2f %s", v, units[u]);
    return buf;
}

/* 779298826 -> "779,298,826" */
const char *with_commas(size_t v, char *buf, size_t n) {
    char digits[32];
    int len = snprintf(digits, sizeof digits, "%zu", v), at = 0;
    for (int i = 0; i < len && (size_t)at + 2 < n; i++) {
        if (i && (len - i) % 3 == 0) buf[at++] = ',';
        buf[at++] = digits[i];
    }
    buf[at] = 0;
    return buf;
}

/* UTF-8 subscript digits so element 1 of `a` prints as a₁, like the workshop's slides. */
void text_subscript(char *buf, size_t n, const char *sym, size_t index) {
    char digits[24];
    snprintf(digits, sizeof digits, "%zu", index);
    size_t at = (size_t)snprintf(buf, n, "%s", sym);
    for (const char *d = digits; *d && at + 3 < n; d++) {
        buf[at++] = (char)0xE2;
        buf[at++] = (char)0x82;
        buf[at++] = (char)(0x80 + (*d - '0'));
    }
    buf[at] = 0;
}

void text_event_header(const Plan *p, const TraceEvent *e, size_t index, size_t count, char *buf,
                       size_t n) {
    int at = snprintf(buf, n, "event %zu of %zu | step %d | %s | GPU %d | %s", index + 1, count,
                      e->step + 1, phase_name((Phase)e->phase), e->rank,
                      event_kind_name((EventKind)e->kind));
    if (at >= 0 && (size_t)at < n && e->unit >= 0 && e->unit < p->nunits)
        snprintf(buf + at, n - (size_t)at, " %s", p->units[e->unit].name);
}

size_t text_display_width(const char *s) {
    size_t w = 0;
    for (; *s; s++) w += ((unsigned char)*s & 0xC0) != 0x80;
    return w;
}

int text_unit_is_symbolic(const Plan *p, int u) {
    const Unit *unit = &p->units[u];
    for (int i = 0; i < unit->nparams; i++)
        if (!p->model->params[unit->params[i].param].symbol[0]) return 0;
    return 1;
}

/* Where parameter `param` starts in the model-order vector of all parameters. */
static size_t param_offset(const ModelDesc *m, int param) {
    size_t at = 0;
    for (int i = 0; i < param; i++) at += m->params[i].numel;
    return at;
}

int text_unit_values(const Plan *p, int u, int size, int rank, const char *prefix,
                     const float *values, char *buf, size_t n) {
    const Unit *unit = &p->units[u];
    size_t at = 0;
    buf[0] = 0;
    if (!text_unit_is_symbolic(p, u)) return 0;
    for (int i = 0; i < unit->nparams; i++) {
        const ParamSpec *ps = &p->model->params[unit->params[i].param];
        size_t begin, rows, base = param_offset(p->model, unit->params[i].param);
        shard_rows((size_t)ps->shape[0], size, rank, &begin, &rows);
        for (size_t e = begin * ps->row_elems; e < (begin + rows) * ps->row_elems && at < n; e++) {
            char one[32];
            text_subscript(one, sizeof one, ps->symbol, e);
            at += (size_t)snprintf(buf + at, n - at, "%s%s%s", at ? " " : "", prefix, one);
            if (values && at < n)
                at += (size_t)snprintf(buf + at, n - at, "=%+.3f", (double)values[base + e]);
        }
    }
    return 1;
}

int text_unit_symbols(const Plan *p, int u, int size, int rank, const char *prefix, char *buf,
                      size_t n) {
    return text_unit_values(p, u, size, rank, prefix, NULL, buf, n);
}
