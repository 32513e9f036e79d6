/* moments: the presenter's step: a trace's events grouped into one moment per collective or
 * compute across all GPUs, with the allocations and frees around it folded in, and the frame
 * that tells one moment. */
#include "sim/viz/moments.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "sim/viz/text.h"

static int is_work(const TraceEvent *e) {
    return nav_is_collective(e) || nav_is_compute(e);
}

static int same_work(const TraceEvent *a, const TraceEvent *b) {
    return a->kind == b->kind && a->unit == b->unit && a->step == b->step && a->micro == b->micro &&
           a->phase == b->phase;
}

/* What the moment being built is, for where the next event goes. */
typedef enum { OPEN_NONE, OPEN_WORK, OPEN_LEADING, OPEN_PHASELESS } Open;

typedef struct Builder {
    Moments *out;
    size_t cap;
    Open open;
    int phase, step, micro; /* of the open moment's events */
    long *joined;           /* [rank]: the moment that rank's work last joined (-1: none) */
    int nranks;
} Builder;

static int start_moment(Builder *b, size_t i, Open kind, const TraceEvent *e, Err *err) {
    if (b->out->n == b->cap) {
        size_t cap = b->cap ? 2 * b->cap : 64;
        Moment *m = realloc(b->out->m, cap * sizeof *m);
        if (!m) return err_set(err, ERR_NOMEM, "out of memory for %zu moments", cap);
        b->out->m = m;
        b->cap = cap;
    }
    b->out->m[b->out->n++] = (Moment){.first = i, .anchor = MOMENT_NO_ANCHOR, .last = i};
    b->open = kind;
    b->phase = e->phase;
    b->step = e->step;
    b->micro = e->micro;
    return 0;
}

static int rank_known(const Builder *b, const TraceEvent *e) {
    return e->rank >= 0 && e->rank < b->nranks;
}

/* Work event i: joins the open moment's work, anchors the leading moment it was prepared in, or
 * anchors a moment of its own. */
static int add_work(Builder *b, const Trace *t, size_t i, Err *err) {
    const TraceEvent *e = &t->ev[i];
    long cur = (long)b->out->n - 1;
    Moment *m = cur >= 0 ? &b->out->m[cur] : NULL;
    int joins = b->open == OPEN_WORK && same_work(&t->ev[m->anchor], e) && rank_known(b, e) &&
                b->joined[e->rank] != cur;
    int anchors_leading = b->open == OPEN_LEADING && e->phase == b->phase && e->step == b->step &&
                          e->micro == b->micro;
    if (!joins && !anchors_leading) {
        int rc = start_moment(b, i, OPEN_WORK, e, err);
        if (rc) return rc;
        m = &b->out->m[b->out->n - 1];
        cur = (long)b->out->n - 1;
    }
    if (m->anchor == MOMENT_NO_ANCHOR) m->anchor = i;
    b->open = OPEN_WORK;
    m->anchors++;
    m->last = i;
    if (rank_known(b, e)) b->joined[e->rank] = cur;
    return 0;
}

/* An allocation, free or copy: after work of its phase it follows that work; a phase-less one
 * belongs with other phase-less ones; else it prepares the work to come. */
static int add_other(Builder *b, size_t i, const TraceEvent *e, Err *err) {
    int follows = (b->open == OPEN_WORK || b->open == OPEN_LEADING) && e->phase != PHASE_NONE &&
                  e->phase == b->phase && e->step == b->step && e->micro == b->micro;
    int phaseless = b->open == OPEN_PHASELESS && e->phase == PHASE_NONE;
    if (follows || phaseless) {
        b->out->m[b->out->n - 1].last = i;
        return 0;
    }
    return start_moment(b, i, e->phase == PHASE_NONE ? OPEN_PHASELESS : OPEN_LEADING, e, err);
}

int moments_build(Moments *out, const Trace *t, Err *err) {
    memset(out, 0, sizeof *out);
    Builder b = {.out = out, .nranks = t->nranks > 0 ? t->nranks : 0};
    b.joined = malloc(((size_t)b.nranks + 1) * sizeof *b.joined);
    if (!b.joined) return err_set(err, ERR_NOMEM, "out of memory for %d ranks", b.nranks);
    for (int r = 0; r < b.nranks; r++) b.joined[r] = -1;
    int rc = 0;
    for (size_t i = 0; !rc && i < t->n; i++)
        rc = is_work(&t->ev[i]) ? add_work(&b, t, i, err) : add_other(&b, i, &t->ev[i], err);
    free(b.joined);
    if (rc) moments_free(out);
    return rc;
}

void moments_free(Moments *ms) {
    free(ms->m);
    memset(ms, 0, sizeof *ms);
}

size_t moments_find(const Moments *ms, size_t index) {
    size_t lo = 0, hi = ms->n;
    while (hi - lo > 1) { /* the last moment whose first event is at or before index */
        size_t mid = lo + (hi - lo) / 2;
        if (ms->m[mid].first <= index)
            lo = mid;
        else
            hi = mid;
    }
    return lo;
}

static int anchored_by(const Moments *ms, const Trace *t, size_t k, int (*is)(const TraceEvent *)) {
    return ms->m[k].anchor != MOMENT_NO_ANCHOR && is(&t->ev[ms->m[k].anchor]);
}

static int seek(const Moments *ms, const Trace *t, size_t from, int dir,
                int (*is)(const TraceEvent *), size_t *to) {
    for (size_t k = from; dir > 0 ? k + 1 < ms->n : k > 0;) {
        k = dir > 0 ? k + 1 : k - 1;
        if (!is || anchored_by(ms, t, k, is)) {
            *to = k;
            return 1;
        }
    }
    return 0;
}

/* The moment of the first work of the phase that nav's phase key finds from moment `from`. */
static int phase_moment(const Moments *ms, const Trace *t, size_t from, NavMove move, size_t *to) {
    size_t event;
    if (!nav_move(t, ms->m[from].first, move, &event)) return 0;
    const TraceEvent *e = &t->ev[event];
    for (size_t k = moments_find(ms, event); k < ms->n; k++) {
        const Moment *m = &ms->m[k];
        if (m->anchor == MOMENT_NO_ANCHOR) continue;
        const TraceEvent *a = &t->ev[m->anchor];
        if (a->step != e->step || a->phase != e->phase) break;
        *to = k;
        return 1;
    }
    *to = moments_find(ms, event); /* a phase of allocations alone */
    return 1;
}

int moments_move(const Moments *ms, const Trace *t, size_t from, NavMove move, size_t *to) {
    *to = from;
    if (from >= ms->n) return 0;
    size_t at = from;
    int moved = 0;
    switch (move) {
    case NAV_NEXT:
    case NAV_PREV:
        moved = seek(ms, t, from, move == NAV_NEXT ? 1 : -1, NULL, &at);
        break;
    case NAV_NEXT_COLLECTIVE:
    case NAV_PREV_COLLECTIVE:
        moved = seek(ms, t, from, move == NAV_NEXT_COLLECTIVE ? 1 : -1, nav_is_collective, &at);
        break;
    case NAV_NEXT_COMPUTE:
    case NAV_PREV_COMPUTE:
        moved = seek(ms, t, from, move == NAV_NEXT_COMPUTE ? 1 : -1, nav_is_compute, &at);
        break;
    case NAV_FORWARD:
    case NAV_BACKWARD:
    case NAV_OPTIMIZER:
        moved = phase_moment(ms, t, from, move, &at);
        break;
    }
    if (moved) *to = at;
    return moved;
}

/* ---------------------------------------------------------------- the moment's frame */

/* Folded events a presenter hears about one by one: what changes what a unit holds (its
 * gathered parameters or its full gradients allocated or freed) and every copy or pack. The rest
 * (comm buffers, activations, shards at setup) is summed in one sentence. */
static int told_alone(const TraceEvent *e) {
    if (e->kind != EV_ALLOC && e->kind != EV_FREE) return 1;
    return e->category == MEM_PARAM_UNSHARDED || e->category == MEM_GRAD_UNSHARDED;
}

/* Appends to buf (n bytes); cut at its end. */
__attribute__((format(printf, 3, 4))) static void add(char *buf, size_t n, const char *fmt, ...) {
    size_t at = strlen(buf);
    if (at + 1 >= n) return;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(buf + at, n - at, fmt, ap);
    va_end(ap);
}

/* Bytes each rank allocated [0] and freed [1] per category over the moment's summed events. */
typedef struct Sums {
    size_t *b; /* [rank][2][MEM_CATEGORY_COUNT] */
    int nranks;
} Sums;

static size_t *sum_at(const Sums *s, int r, int freed, int c) {
    return &s->b[((size_t)r * 2 + (size_t)freed) * MEM_CATEGORY_COUNT + (size_t)c];
}

static int same_sums(const Sums *s, int r, int q) {
    return !memcmp(sum_at(s, r, 0, 0), sum_at(s, q, 0, 0), 2 * MEM_CATEGORY_COUNT * sizeof *s->b);
}

/* "allocates 32 B of comm buffers and 32 B of activations": rank r's sums of one direction. */
static int sums_phrase(const Sums *s, int r, int freed, char *out, size_t n) {
    int parts = 0, total = 0;
    for (int c = 0; c < MEM_CATEGORY_COUNT; c++) total += *sum_at(s, r, freed, c) > 0;
    out[0] = 0;
    for (int c = 0; c < MEM_CATEGORY_COUNT; c++) {
        size_t bytes = *sum_at(s, r, freed, c);
        if (!bytes) continue;
        char amount[32];
        format_bytes(bytes, amount, sizeof amount);
        parts++;
        add(out, n, "%s%s of %s",
            parts == 1       ? (freed ? "frees " : "allocates ")
            : parts == total ? " and "
                             : ", ",
            amount, mem_category_label((MemCategory)c));
    }
    return parts;
}

/* One sentence for the allocations and frees not told one by one: "Each GPU allocates ...;
 * frees ..." (or "GPU 0 ..." where the GPUs differ). */
static void tell_sums(const Trace *t, const Moment *m, int rank, char *text, size_t n) {
    Sums s = {.nranks = t->nranks};
    if (rank < 0 || rank >= s.nranks) return;
    s.b = calloc((size_t)s.nranks * 2 * MEM_CATEGORY_COUNT, sizeof *s.b);
    if (!s.b) return; /* the sentence is a summary; the frame is right without it */
    for (size_t i = m->first; i <= m->last; i++) {
        const TraceEvent *e = &t->ev[i];
        if (told_alone(e) || e->rank < 0 || e->rank >= s.nranks || e->category < 0 ||
            e->category >= MEM_CATEGORY_COUNT)
            continue;
        *sum_at(&s, e->rank, e->kind == EV_FREE, e->category) += (size_t)e->bytes;
    }
    char allocs[400], frees[400];
    int a = sums_phrase(&s, rank, 0, allocs, sizeof allocs);
    int f = sums_phrase(&s, rank, 1, frees, sizeof frees);
    int alike = 1;
    for (int q = 0; q < s.nranks && alike; q++) alike = same_sums(&s, rank, q);
    free(s.b);
    if (!a && !f) return;
    char who[32];
    if (alike && s.nranks > 1)
        snprintf(who, sizeof who, "Each GPU");
    else
        snprintf(who, sizeof who, "GPU %d", rank);
    add(text, n, "%s%s %s%s%s.", text[0] ? " " : "", who, allocs, a && f ? "; " : "", frees);
}

static void write_moment_header(Frame *f, const Trace *t, const Plan *p, const Moments *ms,
                                size_t k) {
    const Moment *m = &ms->m[k];
    char events[64];
    if (m->first == m->last)
        snprintf(events, sizeof events, "event %zu of %zu", m->first + 1, t->n);
    else
        snprintf(events, sizeof events, "events %zu-%zu of %zu", m->first + 1, m->last + 1, t->n);
    const TraceEvent *e = &t->ev[m->anchor != MOMENT_NO_ANCHOR ? m->anchor : m->last];
    char who[32] = "", what[160] = "allocations and frees";
    if (m->anchor != MOMENT_NO_ANCHOR) {
        if (m->anchors >= t->nranks)
            snprintf(who, sizeof who, " | all GPUs");
        else
            snprintf(who, sizeof who, " | %d GPUs", m->anchors);
        snprintf(what, sizeof what, "%s%s%s", event_kind_name((EventKind)e->kind),
                 e->unit >= 0 && e->unit < p->nunits ? " " : "",
                 e->unit >= 0 && e->unit < p->nunits ? p->units[e->unit].name : "");
    }
    snprintf(f->header, sizeof f->header, "frame %zu of %zu | %s | step %d | %s%s | %s%s", k + 1,
             ms->n, events, e->step + 1, f->phase, who, what,
             f->accounting_only ? " | accounting only" : "");
}

/* The short clause a folded change of what a unit holds (event i of t) gets in the moment's
 * sentence ("frees La's unsharded parameters (reshard after forward)"); 0 for an event told in
 * a sentence of its own (a copy, a pack). A free after the unit's reduce-scatter is the seed's
 * order (viz --seed-order) and says so. */
static int change_clause(const Trace *t, size_t i, const Plan *p, int same_unit, char *out,
                         size_t n) {
    const TraceEvent *e = &t->ev[i];
    if ((e->kind != EV_ALLOC && e->kind != EV_FREE) || e->unit < 0 || e->unit >= p->nunits)
        return 0;
    int after = e->kind == EV_FREE && frame_after_reduction(t, i);
    char name[160]; /* "La's", or "its" where the clause before named the same unit */
    snprintf(name, sizeof name, same_unit ? "its" : "%s's", p->units[e->unit].name);
    const char *u = p->units[e->unit].name;
    char bytes[32];
    format_bytes((size_t)e->bytes, bytes, sizeof bytes);
    int alloc = e->kind == EV_ALLOC, fwd = e->phase == PHASE_FORWARD;
    if (e->category == MEM_PARAM_UNSHARDED && alloc)
        snprintf(out, n, "unpacks %s into %s of unsharded parameters%s", u, bytes,
                 e->bytes == 2 * (unsigned long long)p->units[e->unit].numel
                     ? " in 16 bits (mixed precision: half of fp32's)"
                     : "");
    else if (e->category == MEM_PARAM_UNSHARDED)
        snprintf(out, n, "frees %s unsharded parameters (%s)", name,
                 fwd     ? "reshard after forward"
                 : after ? "after its reduce-scatter, in the seed's order"
                         : "its backward is done");
    else if (e->category == MEM_GRAD_UNSHARDED && alloc)
        snprintf(out, n, "allocates %s full gradients (%s)", name, bytes);
    else if (e->category == MEM_GRAD_UNSHARDED)
        snprintf(out, n, "frees %s full gradients (%s)", name,
                 after ? "their reduce-scatter has averaged them"
                       : "packed for their reduce-scatter");
    else
        return 0;
    return 1;
}

/* Whether rank q's folded changes are rank r's, one for one (then "each GPU" says them). */
static int same_changes(const Trace *t, const Moment *m, int r, int q) {
    size_t i = m->first, j = m->first;
    for (;;) {
        while (i <= m->last && (t->ev[i].rank != r || is_work(&t->ev[i]) || !told_alone(&t->ev[i])))
            i++;
        while (j <= m->last && (t->ev[j].rank != q || is_work(&t->ev[j]) || !told_alone(&t->ev[j])))
            j++;
        if (i > m->last || j > m->last) return i > m->last && j > m->last;
        const TraceEvent *a = &t->ev[i++], *b = &t->ev[j++];
        if (a->kind != b->kind || a->category != b->category || a->unit != b->unit) return 0;
    }
}

/* "Then each GPU frees Lc's full gradients (...) and unpacks Lb into ...": rank's folded
 * changes of what a unit holds, in order; copies and packs in sentences of their own. */
static void tell_changes(Frame *f, const Trace *t, const Plan *p, const Moment *m, int rank,
                         char *text, size_t n) {
    char clause[320];
    char kept[32][320];
    int count = 0, before_anchor = 0, alike = 1, last_unit = -2;
    for (int q = 0; q < t->nranks && alike; q++) alike = same_changes(t, m, rank, q);
    for (size_t i = m->first; i <= m->last; i++) {
        const TraceEvent *e = &t->ev[i];
        if (e->rank != rank || is_work(e) || !told_alone(e)) continue;
        if (change_clause(t, i, p, e->unit == last_unit, clause, sizeof clause)) {
            if (count < 32) snprintf(kept[count++], sizeof kept[0], "%s", clause);
            last_unit = e->unit;
            before_anchor |= m->anchor != MOMENT_NO_ANCHOR && i < m->anchor;
            continue;
        }
        frame_narrate(f, t, p, i);
        add(text, n, "%s%s.", text[0] ? " " : "", f->narration);
    }
    if (!count) return;
    char who[32];
    snprintf(who, sizeof who, alike && t->nranks > 1 ? "each GPU" : "GPU %d", rank);
    add(text, n, "%s%s %s ", text[0] ? " " : "",
        m->anchor == MOMENT_NO_ANCHOR ? "Here"
        : before_anchor               ? "Around it"
                                      : "Then",
        who);
    for (int c = 0; c < count; c++)
        add(text, n, "%s%s", c == 0 ? "" : c == count - 1 ? " and " : ", ", kept[c]);
    add(text, n, ".");
}

void moments_narrate(Frame *f, const Trace *t, const Plan *p, const Moments *ms, size_t k) {
    const Moment *m = &ms->m[k];
    int anchored = m->anchor != MOMENT_NO_ANCHOR;
    int rank = t->ev[anchored ? m->anchor : m->first].rank;
    char text[sizeof f->narration] = "", flow[sizeof f->flow] = "";
    if (anchored) {
        frame_narrate(f, t, p, m->anchor);
        add(text, sizeof text, "%s.", f->narration);
        snprintf(flow, sizeof flow, "%s", f->flow);
    }
    tell_changes(f, t, p, m, rank, text, sizeof text);
    if (!anchored) /* a moment of allocations alone: they are what it says (else the bars do) */
        tell_sums(t, m, rank, text, sizeof text);
    snprintf(f->narration, sizeof f->narration, "%s", text);
    snprintf(f->flow, sizeof f->flow, "%s", flow);
    f->index = m->last;
    f->event = &t->ev[anchored ? m->anchor : m->last];
}

int moments_frame(Frame *f, const Trace *t, const Plan *p, const Moments *ms, size_t k, Err *err) {
    if (k >= ms->n)
        return err_set(err, ERR_USAGE, "frame %zu is past the trace's %zu frames", k + 1, ms->n);
    int rc = frame_at(f, t, p, ms->m[k].last, err);
    if (rc) return rc;
    write_moment_header(f, t, p, ms, k);
    moments_narrate(f, t, p, ms, k);
    frame_cursor_at(f, f->event->start);
    return 0;
}
