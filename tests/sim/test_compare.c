/* Matching events between two strategies (the viewer's FSDP-beside-DDP view) on real traces
 * of the toy at 3 ranks: compute events correspond one to one, and compare_match lands where
 * its definition says, from the first event to the last. */
#include <criterion/criterion.h>
#include <string.h>

#include "sim/viz/compare.h"
#include "tests/util.h"

/* Compute events rank q has run in t up to and including event `upto`. */
static size_t computes(const Trace *t, int q, size_t upto) {
    size_t k = 0;
    for (size_t i = 0; i <= upto && i < t->n; i++)
        if (t->ev[i].rank == q && compare_is_compute(&t->ev[i])) k++;
    return k;
}

/* Index of the first event of `kind` on `rank` for `unit` after `from` (inclusive). */
static size_t find_from(const Trace *t, size_t from, EventKind kind, int rank, int unit) {
    for (size_t i = from; i < t->n; i++)
        if (t->ev[i].kind == (int)kind && t->ev[i].rank == rank && t->ev[i].unit == unit) return i;
    cr_assert_fail("no %s of unit %d on rank %d", event_kind_name(kind), unit, rank);
    return 0;
}

static size_t match(const Trace *a, size_t index, const Trace *b) {
    size_t out = 0;
    Err err = {0};
    cr_assert_eq(compare_match(a, index, b, &out, &err), 0, "%s", err.msg);
    cr_assert_lt(out, b->n);
    return out;
}

typedef struct Pair {
    ToyRun fsdp, ddp;
} Pair;

static void train_pair(Pair *p, Strategy s, long steps) {
    FsdpConfig a = toy_config(s, 4), b = toy_config(STRAT_DDP, 4);
    toy_train(&p->fsdp, &a, 3, steps, 1);
    toy_train(&p->ddp, &b, 3, steps, 1);
}

static void free_pair(Pair *p) {
    toy_run_free(&p->fsdp);
    toy_run_free(&p->ddp);
}

/* The claim the matching rests on: rank by rank, the two runs compute the same things in the
 * same order (kind, unit, step), and only the other events differ. */
static void expect_same_computes(const Trace *a, const Trace *b) {
    cr_assert_eq(a->nranks, b->nranks);
    for (int q = 0; q < a->nranks; q++) {
        size_t i = 0, j = 0, n = 0;
        for (;; i++, j++, n++) {
            while (i < a->n && !(a->ev[i].rank == q && compare_is_compute(&a->ev[i]))) i++;
            while (j < b->n && !(b->ev[j].rank == q && compare_is_compute(&b->ev[j]))) j++;
            if (i == a->n || j == b->n) break;
            cr_assert_eq(a->ev[i].kind, b->ev[j].kind, "rank %d compute %zu", q, n);
            cr_assert_eq(a->ev[i].unit, b->ev[j].unit, "rank %d compute %zu", q, n);
            cr_assert_eq(a->ev[i].step, b->ev[j].step, "rank %d compute %zu", q, n);
        }
        cr_assert(i == a->n && j == b->n, "rank %d: one run has more computes (%zu in common)", q,
                  n);
        cr_assert_gt(n, 9, "rank %d has the toy's forwards, backwards and Adam steps", q);
    }
    cr_assert_neq(a->n, b->n, "the strategies differ in everything else");
}

Test(compare, zero3_and_ddp_compute_the_same_things_in_the_same_order) {
    Pair p;
    train_pair(&p, STRAT_ZERO3, 2);
    expect_same_computes(&p.fsdp.trace, &p.ddp.trace);
    free_pair(&p);
}

Test(compare, zero2_and_hsdp_too) {
    Pair p;
    train_pair(&p, STRAT_ZERO2, 1);
    expect_same_computes(&p.fsdp.trace, &p.ddp.trace);
    free_pair(&p);
    FsdpConfig h = toy_config(STRAT_HSDP, 4), d = toy_config(STRAT_DDP, 4);
    h.replicas = 2;
    ToyRun hsdp, ddp;
    toy_train(&hsdp, &h, 4, 1, 1);
    toy_train(&ddp, &d, 4, 1, 1);
    expect_same_computes(&hsdp.trace, &ddp.trace);
    toy_run_free(&hsdp);
    toy_run_free(&ddp);
}

/* Checks the definition at every event of a: at the answer j no rank of b has computed more
 * than in a; a compute event maps to that very compute in b (what it reads alive on both
 * sides); any other event to the last such j (the event after it is b's end or a compute that
 * would put a rank ahead); and j never goes back. */
static void expect_definition_everywhere(const Trace *a, const Trace *b) {
    size_t last = 0;
    for (size_t i = 0; i < a->n; i++) {
        size_t j = match(a, i, b);
        for (int q = 0; q < a->nranks; q++)
            cr_assert_leq(computes(b, q, j), computes(a, q, i), "event %zu -> %zu: rank %d ahead",
                          i, j, q);
        const TraceEvent *at = &a->ev[i];
        if (compare_is_compute(at)) {
            cr_assert(compare_is_compute(&b->ev[j]) && b->ev[j].rank == at->rank &&
                          b->ev[j].kind == at->kind && b->ev[j].unit == at->unit,
                      "compute event %zu -> %zu: not the same compute", i, j);
        } else if (j + 1 < b->n) {
            const TraceEvent *next = &b->ev[j + 1];
            cr_assert(compare_is_compute(next), "event %zu -> %zu: b could go further", i, j);
            cr_assert_eq(computes(b, next->rank, j), computes(a, next->rank, i),
                         "event %zu -> %zu: rank %d could run its next compute", i, j, next->rank);
        }
        if (compare_is_compute(&a->ev[i]))
            cr_assert_eq(computes(b, a->ev[i].rank, j), computes(a, a->ev[i].rank, i),
                         "compute event %zu -> %zu: rank %d has not run it in b", i, j,
                         a->ev[i].rank);
        cr_assert_geq(j, last, "event %zu maps to %zu, before event %zu's %zu", i, j, i - 1, last);
        last = j;
    }
}

Test(compare, every_event_of_zero3_and_ddp_both_ways) {
    Pair p;
    train_pair(&p, STRAT_ZERO3, 2);
    expect_definition_everywhere(&p.fsdp.trace, &p.ddp.trace);
    expect_definition_everywhere(&p.ddp.trace, &p.fsdp.trace);
    free_pair(&p);
}

Test(compare, landmarks_of_the_toy_step) {
    Pair p;
    train_pair(&p, STRAT_ZERO3, 1);
    const Trace *z = &p.fsdp.trace, *d = &p.ddp.trace;
    size_t ddp_first_compute = find_from(d, 0, EV_FORWARD, 0, 0);
    for (size_t i = 0; i < ddp_first_compute; i++)
        cr_assert(!compare_is_compute(&d->ev[i]), "La's forward on GPU 0 is DDP's first compute");
    /* the first event: DDP's setup done, about to run La's forward */
    cr_expect_eq(match(z, 0, d), ddp_first_compute - 1);
    /* zero3's all-gather of La before La's forward: the same place, no forward run yet */
    size_t gather = find_from(z, 0, EV_ALL_GATHER, 0, 0);
    cr_assert_lt(gather, find_from(z, 0, EV_FORWARD, 0, 0));
    size_t j = match(z, gather, d);
    cr_expect_eq(j, ddp_first_compute - 1);
    cr_expect_eq(computes(d, 0, j), 0);
    cr_expect_eq(d->ev[j + 1].kind, EV_FORWARD);
    cr_expect_eq(d->ev[j + 1].unit, 0);
    /* zero3's forward of Lb on GPU 0: DDP has run it too, and not Lc's */
    size_t lb = find_from(z, 0, EV_FORWARD, 0, 1);
    j = match(z, lb, d);
    cr_expect_geq(j, find_from(d, 0, EV_FORWARD, 0, 1));
    cr_expect_lt(j, find_from(d, 0, EV_FORWARD, 0, 2));
    /* zero3's backward of Lc: DDP past its own, before Lb's */
    size_t lc = find_from(z, 0, EV_BACKWARD, 0, 2);
    j = match(z, lc, d);
    cr_expect_geq(j, find_from(d, 0, EV_BACKWARD, 0, 2));
    cr_expect_lt(j, find_from(d, 0, EV_BACKWARD, 0, 1));
    /* the last event: DDP's last event (everything freed on both sides) */
    cr_expect_eq(match(z, z->n - 1, d), d->n - 1);
    cr_expect_eq(match(d, d->n - 1, z), z->n - 1);
    free_pair(&p);
}

Test(compare, refuses_an_index_past_the_end_and_an_empty_trace) {
    Pair p;
    train_pair(&p, STRAT_ZERO3, 1);
    size_t out = 7;
    Err err = {0};
    cr_expect_neq(compare_match(&p.fsdp.trace, p.fsdp.trace.n, &p.ddp.trace, &out, &err), 0);
    cr_expect(strstr(err.msg, "past"), "%s", err.msg);
    Trace empty = {.nranks = 3};
    cr_expect_neq(compare_match(&p.fsdp.trace, 0, &empty, &out, &err), 0);
    cr_expect(strstr(err.msg, "no events"), "%s", err.msg);
    cr_expect_eq(out, 7, "untouched on failure");
    free_pair(&p);
}

/* Activations (MEM_ACTIVATIONS) rank q holds after event `upto`: a replay of its allocs and
 * frees. */
static size_t activations(const Trace *t, int q, size_t upto) {
    size_t held = 0;
    for (size_t i = 0; i <= upto && i < t->n; i++) {
        const TraceEvent *e = &t->ev[i];
        if (e->rank != q || e->category != MEM_ACTIVATIONS) continue;
        held = e->kind == EV_ALLOC ? held + e->bytes : held - e->bytes;
    }
    return held;
}

/* A backward reads the activations its forward saved, so they are alive at its event, under
 * zero3 and DDP alike (the last backward's inputs are the last activations, freed after it:
 * when the frees came first it ran on none); and at every compute event the two runs hold the
 * same activations (the same model on the same batch), which is what the viewer's d shows
 * beside it. */
static void expect_backward_reads_live_activations(const Trace *t, const char *what) {
    size_t seen = 0;
    for (size_t i = 0; i < t->n; i++) {
        if (t->ev[i].kind != EV_BACKWARD) continue;
        seen++;
        cr_assert_gt(activations(t, t->ev[i].rank, i), 0,
                     "%s: event %zu, rank %d's backward of unit %d, runs on no activations", what,
                     i + 1, t->ev[i].rank, t->ev[i].unit);
    }
    cr_assert_geq(seen, 9, "%s: the toy's backwards", what);
}

Test(compare, a_backward_comes_before_the_frees_of_what_it_reads) {
    Pair p;
    train_pair(&p, STRAT_ZERO3, 1);
    expect_backward_reads_live_activations(&p.fsdp.trace, "zero3");
    expect_backward_reads_live_activations(&p.ddp.trace, "ddp");
    for (size_t i = 0; i < p.fsdp.trace.n; i++) {
        const TraceEvent *e = &p.fsdp.trace.ev[i];
        if (!compare_is_compute(e)) continue;
        size_t j = match(&p.fsdp.trace, i, &p.ddp.trace);
        cr_assert_eq(activations(&p.ddp.trace, e->rank, j), activations(&p.fsdp.trace, e->rank, i),
                     "event %zu (%s of unit %d on rank %d): DDP beside it holds other activations",
                     i + 1, event_kind_name((EventKind)e->kind), e->unit, e->rank);
    }
    free_pair(&p);
}
