#include "report.h"

#include <string.h>

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

void report_config(FILE *f, const FsdpConfig *c, const char *model, int ranks,
                   const char *profile) {
    char wrap[32];
    wrap_format(&c->wrap, wrap, sizeof wrap);
    fprintf(f, "fsdp: %s on %d simulated rank%s (%s), strategy %s", model, ranks,
            ranks == 1 ? "" : "s", profile, strategy_name(c->strategy));
    if (c->strategy == STRAT_HSDP) fprintf(f, " (%d replicas)", c->replicas);
    fprintf(f, ", wrap %s, reshard_after_forward=%s, param %s, reduce %s", wrap,
            fsdp_reshard_after_forward(c) ? "true" : "false", dtype_name(c->param_dtype),
            dtype_name(c->reduce_dtype));
    if (c->offload == OFFLOAD_CPU) fprintf(f, ", offload cpu");
    if (c->grad_accum > 1) fprintf(f, ", grad_accum %d", c->grad_accum);
    fprintf(f, "\n");
}

static void format_shape(const ParamSpec *ps, char *buf, size_t n) {
    size_t at = (size_t)snprintf(buf, n, "[");
    for (int d = 0; d < ps->ndim && at < n; d++)
        at += (size_t)snprintf(buf + at, n - at, d ? ", %lld" : "%lld", (long long)ps->shape[d]);
    if (at < n) snprintf(buf + at, n - at, "]");
}

void report_plan(FILE *f, const Plan *p) {
    const ModelDesc *m = p->model;
    fprintf(f, "plan: %d unit%s, %zu parameters; each parameter sharded on dim 0 over %d rank%s\n",
            p->nunits, p->nunits == 1 ? "" : "s", m->total_numel, p->shard_size,
            p->shard_size == 1 ? "" : "s");
    for (int u = 0; u < p->nunits; u++) {
        const Unit *unit = &p->units[u];
        fprintf(f, "  unit %d %-8s %zu params:", u, unit->name, unit->numel);
        for (int i = 0; i < unit->nparams; i++) {
            const ParamSpec *ps = &m->params[unit->params[i].param];
            char shape[64];
            format_shape(ps, shape, sizeof shape);
            fprintf(f, "%s %s %s", i ? "," : "", ps->name, shape);
        }
        fprintf(f, "\n");
    }
}

/* UTF-8 subscript digits so element 1 of `a` prints as a₁, like the workshop's slides. */
static void subscript(char *buf, size_t n, const char *sym, size_t index) {
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

static size_t display_width(const char *s) {
    size_t w = 0;
    for (; *s; s++) w += ((unsigned char)*s & 0xC0) != 0x80;
    return w;
}

/* What rank r keeps of unit u at rest, as symbols (toy) or an element count. */
static void owned_cell(const Plan *p, int u, int r, char *buf, size_t n) {
    const Unit *unit = &p->units[u];
    size_t at = 0;
    buf[0] = 0;
    int symbolic = 1;
    for (int i = 0; i < unit->nparams; i++)
        if (!p->model->params[unit->params[i].param].symbol[0]) symbolic = 0;
    if (!symbolic) {
        snprintf(buf, n, "%zu elems", plan_param_numel(p, u, r));
        return;
    }
    int S = p->params_sharded ? p->shard_size : 1;
    int sr = p->params_sharded ? plan_shard_rank(p, r) : 0;
    for (int i = 0; i < unit->nparams; i++) {
        const ParamSpec *ps = &p->model->params[unit->params[i].param];
        size_t begin, rows;
        shard_rows((size_t)ps->shape[0], S, sr, &begin, &rows);
        for (size_t e = begin * ps->row_elems; e < (begin + rows) * ps->row_elems && at < n; e++) {
            char one[32];
            subscript(one, sizeof one, ps->symbol, e);
            at += (size_t)snprintf(buf + at, n - at, "%s%s", at ? " " : "", one);
        }
    }
    if (!buf[0]) snprintf(buf, n, "-");
}

static void print_padded(FILE *f, const char *s, size_t width) {
    fputs(s, f);
    for (size_t w = display_width(s); w < width; w++) fputc(' ', f);
}

void report_ownership(FILE *f, const Plan *p) {
    enum { CELL = 160 };
    size_t width = 4;
    char cell[CELL];
    for (int u = 0; u < p->nunits; u++) {
        if (strlen(p->units[u].name) > width) width = strlen(p->units[u].name);
        for (int r = 0; r < p->world; r++) {
            owned_cell(p, u, r, cell, CELL);
            if (display_width(cell) > width) width = display_width(cell);
        }
    }
    fprintf(f, "ownership at rest (%s):\n",
            p->params_sharded ? "each rank keeps its dim-0 rows of every parameter"
                              : "every rank keeps a full replica");
    fprintf(f, "         ");
    for (int u = 0; u < p->nunits; u++) {
        print_padded(f, p->units[u].name, width + 3);
    }
    fprintf(f, "\n");
    for (int r = 0; r < p->world; r++) {
        char label[16];
        snprintf(label, sizeof label, "GPU %d", r);
        fprintf(f, "  ");
        print_padded(f, label, 7);
        for (int u = 0; u < p->nunits; u++) {
            owned_cell(p, u, r, cell, CELL);
            print_padded(f, cell, width + 3);
        }
        fprintf(f, "\n");
    }
}

/* What DDP would hold at rest: full params, grads and both Adam moments. */
static size_t ddp_rest(const Plan *p, MemCategory c) {
    size_t full = p->model->total_numel * sizeof(float);
    if (c == MEM_PARAM_SHARD || c == MEM_GRAD_SHARD) return full;
    if (c == MEM_OPTIM_STATE) return 2 * full;
    return 0;
}

void report_memory(FILE *f, const Plan *p, const FsdpConfig *c, const RankMemory *mem) {
    (void)c;
    char a[32], b[32], d[32];
    fprintf(f, "memory per rank (accounted; DDP = what each rank would hold under DDP):\n");
    for (int r = 0; r < p->world; r++) {
        fprintf(f, "  GPU %-3d %-18s %12s %12s %12s\n", r, "", "at rest", "at peak", "DDP at rest");
        size_t rest = 0, ddp = 0;
        for (int cat = 0; cat < MEM_CATEGORY_COUNT; cat++) {
            const RankMemory *m = &mem[r];
            size_t dd = ddp_rest(p, (MemCategory)cat);
            rest += m->rest[cat];
            ddp += dd;
            if (!m->rest[cat] && !m->at_peak[cat] && !dd) continue;
            fprintf(f, "          %-18s %12s %12s %12s\n", mem_category_label((MemCategory)cat),
                    format_bytes(m->rest[cat], a, sizeof a),
                    format_bytes(m->at_peak[cat], b, sizeof b), format_bytes(dd, d, sizeof d));
        }
        fprintf(f, "          %-18s %12s %12s %12s\n", "total", format_bytes(rest, a, sizeof a),
                format_bytes(mem[r].peak, b, sizeof b), format_bytes(ddp, d, sizeof d));
    }
}

void report_step_text(FILE *f, const StepReport *r, int fp16) {
    fprintf(f, "step %6ld  epoch %3d  loss %.6f  step %.1f us (modelled)", r->step, r->epoch,
            r->stats.loss, r->step_time * 1e6);
    if (r->stats.grad_norm > 0) fprintf(f, "  grad_norm %.4f", r->stats.grad_norm);
    if (fp16)
        fprintf(f, "  loss_scale %g%s", r->stats.loss_scale, r->stats.skipped ? " (skipped)" : "");
    fprintf(f, "\n");
}

void report_step_json(FILE *f, const StepReport *r) {
    fprintf(f,
            "{\"step\":%ld,\"epoch\":%d,\"loss\":%.9g,\"grad_norm\":%.9g,\"loss_scale\":%.9g,"
            "\"skipped\":%s,\"step_time_s\":%.9g}\n",
            r->step, r->epoch, r->stats.loss, r->stats.grad_norm, r->stats.loss_scale,
            r->stats.skipped ? "true" : "false", r->step_time);
}

void report_final_params(FILE *f, const ModelDesc *m, const float *params) {
    size_t at = 0;
    for (int i = 0; i < m->nparams; i++) {
        const ParamSpec *ps = &m->params[i];
        if (ps->numel > 8) {
            at += ps->numel;
            continue;
        }
        fprintf(f, "  %-12s", ps->name);
        for (size_t j = 0; j < ps->numel; j++) {
            char sym[32];
            subscript(sym, sizeof sym, ps->symbol[0] ? ps->symbol : "w", j);
            fprintf(f, "  %s = %+.4f", sym, params[at++]);
        }
        fprintf(f, "\n");
    }
}

int report_dump_params(FILE *f, const ModelDesc *m, const float *params, Err *err) {
    size_t at = 0;
    for (int i = 0; i < m->nparams; i++)
        for (size_t j = 0; j < m->params[i].numel; j++)
            fprintf(f, "%s %zu %.9e\n", m->params[i].name, j, params[at++]);
    if (fflush(f) || ferror(f)) return err_set(err, ERR_IO, "could not write the parameters");
    return 0;
}
