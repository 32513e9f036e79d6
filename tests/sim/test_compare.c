/* Matching events between two strategies (the viewer's FSDP-beside-DDP view and its DDP marks)
 * on real traces of the toy: computes and the activations they save correspond one to one, rank
 * by rank, and compare_rank_point and compare_match land where their definition says, from the
 * first event to the last, on the same GPU (issue 38's two moments among them). */
#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "io/trace_file.h"
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
 * same order (kind, unit, step) and save and free the same activations (kind, category,
 * bytes), and only the other events differ. */
static void expect_same_computes(const Trace *a, const Trace *b) {
    cr_assert_eq(a->nranks, b->nranks);
    for (int q = 0; q < a->nranks; q++) {
        size_t i = 0, j = 0, n = 0, computed = 0;
        for (;; i++, j++, n++) {
            while (i < a->n && !(a->ev[i].rank == q && compare_is_shared(&a->ev[i]))) i++;
            while (j < b->n && !(b->ev[j].rank == q && compare_is_shared(&b->ev[j]))) j++;
            if (i == a->n || j == b->n) break;
            cr_assert_eq(a->ev[i].kind, b->ev[j].kind, "rank %d shared event %zu", q, n);
            cr_assert_eq(a->ev[i].unit, b->ev[j].unit, "rank %d shared event %zu", q, n);
            cr_assert_eq(a->ev[i].step, b->ev[j].step, "rank %d shared event %zu", q, n);
            cr_assert_eq(a->ev[i].category, b->ev[j].category, "rank %d shared event %zu", q, n);
            if (!compare_is_compute(&a->ev[i]))
                cr_assert_eq(a->ev[i].bytes, b->ev[j].bytes, "rank %d shared event %zu", q, n);
            computed += (size_t)compare_is_compute(&a->ev[i]);
        }
        cr_assert(i == a->n && j == b->n, "rank %d: one run has more shared events (%zu alike)", q,
                  n);
        cr_assert_gt(computed, 9, "rank %d has the toy's forwards, backwards and Adam steps", q);
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

/* The events of rank q in t before index `end`, and how many of them are shared. */
static size_t shared_before(const Trace *t, int q, size_t end) {
    size_t k = 0;
    for (size_t i = 0; i < end && i < t->n; i++)
        if (t->ev[i].rank == q && compare_is_shared(&t->ev[i])) k++;
    return k;
}

/* Bytes of `category` rank q holds after its events of t before index `end`: a replay of its
 * allocs and frees. */
static size_t held_before(const Trace *t, int q, size_t end, MemCategory category) {
    size_t held = 0;
    for (size_t i = 0; i < end && i < t->n; i++) {
        const TraceEvent *e = &t->ev[i];
        if (e->rank != q || e->category != (int)category) continue;
        held = e->kind == EV_ALLOC ? held + e->bytes : held - e->bytes;
    }
    return held;
}

/* All of rank q's bytes after its events of t before index `end`. */
static size_t total_before(const Trace *t, int q, size_t end) {
    size_t sum = 0;
    for (int c = 0; c < MEM_CATEGORY_COUNT; c++) sum += held_before(t, q, end, (MemCategory)c);
    return sum;
}

/* Index just past rank q's last event of t at or before `index`, 0 when it has none. */
static size_t rank_end(const Trace *t, int q, size_t index) {
    size_t end = 0;
    for (size_t i = 0; i <= index && i < t->n; i++)
        if (t->ev[i].rank == q) end = i + 1;
    return end;
}

static size_t point(const Trace *a, size_t index, const Trace *b, int rank) {
    size_t end = 0;
    Err err = {0};
    cr_assert_eq(compare_rank_point(a, index, b, rank, &end, &err), 0, "%s", err.msg);
    cr_assert_leq(end, b->n);
    return end;
}

/* Checks the definition at every event of a, for every rank q: b's rank has run as many shared
 * events as a's, so both hold the same activations; where a's rank stands on a shared event,
 * b's last event run is that same event, else b's next event of the rank is its next shared
 * one (or it has none left); rank by rank the point never goes back; and compare_match gives
 * the last event run by the rank of a's event, on that rank. */
static void expect_definition_everywhere(const Trace *a, const Trace *b) {
    size_t last[64] = {0};
    cr_assert_leq(a->nranks, 64);
    for (size_t i = 0; i < a->n; i++) {
        for (int q = 0; q < a->nranks; q++) {
            size_t end = point(a, i, b, q), mine = rank_end(a, q, i);
            cr_assert_eq(shared_before(b, q, end), shared_before(a, q, mine),
                         "event %zu, rank %d: b has run other shared events", i, q);
            cr_assert_eq(held_before(b, q, end, MEM_ACTIVATIONS),
                         held_before(a, q, mine, MEM_ACTIVATIONS),
                         "event %zu, rank %d: the two hold other activations", i, q);
            if (mine && compare_is_shared(&a->ev[mine - 1])) {
                cr_assert(end && b->ev[end - 1].rank == q && compare_is_shared(&b->ev[end - 1]) &&
                              b->ev[end - 1].kind == a->ev[mine - 1].kind &&
                              b->ev[end - 1].unit == a->ev[mine - 1].unit,
                          "event %zu, rank %d: b is not on the same shared event", i, q);
            } else {
                size_t next = end;
                while (next < b->n && b->ev[next].rank != q) next++;
                cr_assert(next == b->n || compare_is_shared(&b->ev[next]),
                          "event %zu, rank %d: b could go further, to event %zu", i, q, next);
            }
            cr_assert_geq(end, last[q], "event %zu, rank %d: the point goes back", i, q);
            last[q] = end;
        }
        size_t j = match(a, i, b), end = point(a, i, b, a->ev[i].rank);
        cr_assert_eq(b->ev[j].rank, a->ev[i].rank, "event %zu -> %zu: another GPU", i, j);
        if (end) cr_assert_eq(j, end - 1, "event %zu: the rank's last event run", i);
    }
}

Test(compare, every_event_of_zero3_and_ddp_both_ways) {
    Pair p;
    train_pair(&p, STRAT_ZERO3, 2);
    expect_definition_everywhere(&p.fsdp.trace, &p.ddp.trace);
    expect_definition_everywhere(&p.ddp.trace, &p.fsdp.trace);
    free_pair(&p);
}

Test(compare, every_event_of_zero2_and_hsdp_too) {
    Pair p;
    train_pair(&p, STRAT_ZERO2, 1);
    expect_definition_everywhere(&p.fsdp.trace, &p.ddp.trace);
    free_pair(&p);
    FsdpConfig h = toy_config(STRAT_HSDP, 4), d = toy_config(STRAT_DDP, 4);
    h.replicas = 2;
    ToyRun hsdp, ddp;
    toy_train(&hsdp, &h, 4, 1, 1);
    toy_train(&ddp, &d, 4, 1, 1);
    expect_definition_everywhere(&hsdp.trace, &ddp.trace);
    toy_run_free(&hsdp);
    toy_run_free(&ddp);
}

Test(compare, landmarks_of_the_toy_step) {
    Pair p;
    train_pair(&p, STRAT_ZERO3, 1);
    const Trace *z = &p.fsdp.trace, *d = &p.ddp.trace;
    /* the first event: GPU 0's setup done in DDP, about to save its first activation */
    size_t first_shared = 0;
    while (!(d->ev[first_shared].rank == 0 && compare_is_shared(&d->ev[first_shared])))
        first_shared++;
    size_t j = match(z, 0, d);
    cr_expect_eq(d->ev[j].rank, 0);
    cr_expect_eq(rank_end(d, 0, j), rank_end(d, 0, first_shared - 1), "setup done");
    cr_expect_eq(d->ev[j].kind, EV_ALLOC);
    /* zero3's all-gather of La before La's forward: DDP not past its own first forward */
    size_t gather = find_from(z, 0, EV_ALL_GATHER, 0, 0);
    cr_assert_lt(gather, find_from(z, 0, EV_FORWARD, 0, 0));
    j = match(z, gather, d);
    cr_expect_eq(computes(d, 0, j), 0);
    cr_expect_lt(j, find_from(d, 0, EV_FORWARD, 0, 0));
    /* zero3's forward of Lb on GPU 0: DDP's forward of Lb on GPU 0 */
    cr_expect_eq(match(z, find_from(z, 0, EV_FORWARD, 0, 1), d), find_from(d, 0, EV_FORWARD, 0, 1));
    /* zero3's backward of Lc on GPU 1: DDP's on GPU 1 */
    cr_expect_eq(match(z, find_from(z, 0, EV_BACKWARD, 1, 2), d),
                 find_from(d, 0, EV_BACKWARD, 1, 2));
    /* the last event (GPU 2's last free): DDP's GPU 2 torn down too, its last event */
    cr_expect_eq(match(z, z->n - 1, d), rank_end(d, z->ev[z->n - 1].rank, d->n - 1) - 1);
    cr_expect_eq(total_before(d, z->ev[z->n - 1].rank, d->n), 0);
    free_pair(&p);
}

/* The trace `fsdp viz ARGS` shows, as its --trace-out file records it (the simulator is
 * deterministic: the viewer shows the same events). */
static void viz_trace(const char *args, Trace *t) {
    char path[96];
    snprintf(path, sizeof path, "/tmp/fsdp_compare_trace_%d.json", (int)getpid());
    int code = 0;
    free(fsdp_run(&code, ">/dev/null 2>&1", "viz %s --events 1 --trace-out %s", args, path));
    cr_assert_eq(code, 0, "viz %s --trace-out %s", args, path);
    TraceMeta meta;
    Err err = {0};
    cr_assert_eq(trace_file_read(path, t, &meta, &err), 0, "%s", err.msg);
    trace_meta_free(&meta);
    unlink(path);
}

/* What the viewer of `fsdp viz --model toy --ranks 3 --strategy zero3` shows, and the run its
 * key d puts beside it. */
typedef struct VizPair {
    Trace fsdp, ddp;
} VizPair;

static void viz_pair(VizPair *p) {
    viz_trace("--model toy --ranks 3 --strategy zero3", &p->fsdp);
    viz_trace("--model toy --ranks 3 --strategy ddp", &p->ddp);
    cr_assert_eq(p->fsdp.n, 339, "the viewer's 339 events, not %zu", p->fsdp.n);
    cr_assert_eq(p->ddp.n, 159, "%zu", p->ddp.n);
}

static void viz_pair_free(VizPair *p) {
    trace_free(&p->fsdp);
    trace_free(&p->ddp);
}

/* Issue 38: at GPU 0's reduce-scatter of Lc (event 208 then, after Lb's backward, before the
 * frees of what it read), d showed DDP at its event 93, GPU 2 past the frees of its activations
 * (272 B beside zero3's 296 B). The engine's own kernels take time now, and Lc's reduce-scatter
 * (event 190) starts before Lb's backward: d shows DDP's GPU 0 just past the frees of what Lc's
 * backward read, holding the same activations and, with all of its parameters, gradients and
 * Adam's moments, more bytes. */
Test(compare, zero3_reduce_scatter_of_lc_beside_ddp_after_lc_backward_on_gpu_0) {
    VizPair p;
    viz_pair(&p);
    const Trace *z = &p.fsdp, *d = &p.ddp;
    const TraceEvent *e = &z->ev[189];
    cr_assert(e->kind == EV_REDUCE_SCATTER && e->rank == 0 && e->unit == 2, "event 190");
    size_t j = match(z, 189, d);
    cr_expect_eq(d->ev[j].rank, 0, "the same GPU, not GPU %d", d->ev[j].rank);
    cr_expect(d->ev[j].kind == EV_FREE && d->ev[j].category == MEM_ACTIVATIONS,
              "DDP's counterpart frees activations: %s", event_kind_name((EventKind)d->ev[j].kind));
    size_t lc = find_from(d, 0, EV_BACKWARD, 0, 2), lb = find_from(d, 0, EV_BACKWARD, 0, 1);
    cr_expect(lc < j && j < lb, "after Lc's backward (%zu), before Lb's (%zu): %zu", lc, lb, j);
    size_t end = point(z, 189, d, 0);
    cr_expect_eq(held_before(d, 0, end, MEM_ACTIVATIONS), held_before(z, 0, 190, MEM_ACTIVATIONS));
    cr_expect_eq(total_before(z, 0, 190), 256);
    cr_expect_eq(total_before(d, 0, end), 304, "DDP holds more than zero3 beside it");
    viz_pair_free(&p);
}

/* Issue 38: at event 76, GPU 0's free of La's gathered parameters after La's forward, d showed
 * DDP at its event 51 (GPU 2). Now: DDP's GPU 0 at its forward of La, which zero3 has just
 * run. */
Test(compare, zero3_free_after_forward_of_la_beside_ddp_forward_of_la_on_gpu_0) {
    VizPair p;
    viz_pair(&p);
    const Trace *z = &p.fsdp, *d = &p.ddp;
    const TraceEvent *e = &z->ev[75];
    cr_assert(e->kind == EV_FREE && e->rank == 0 && e->unit == 0 &&
                  e->category == MEM_PARAM_UNSHARDED,
              "event 76");
    size_t j = match(z, 75, d);
    cr_expect_eq(j, find_from(d, 0, EV_FORWARD, 0, 0), "DDP's GPU 0 at La's forward, not %zu", j);
    for (int q = 0; q < 3; q++)
        cr_expect_eq(held_before(d, q, point(z, 75, d, q), MEM_ACTIVATIONS),
                     held_before(z, q, 76, MEM_ACTIVATIONS), "GPU %d's activations", q);
    viz_pair_free(&p);
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
    size_t end = 5;
    cr_expect_neq(compare_rank_point(&p.fsdp.trace, 0, &p.ddp.trace, 3, &end, &err), 0);
    cr_expect(strstr(err.msg, "rank 3"), "%s", err.msg);
    cr_expect_eq(end, 5, "untouched on failure");
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

/* The walk the HTML page asks at every event carries its counts on from the event before; asked
 * in any order (on, back to an earlier event, again at the same one), it gives what the one-shot
 * functions give at that event. */
static void expect_walk_as_one_shot(const Trace *a, const Trace *b) {
    CompareWalk w;
    Err err = {0};
    cr_assert_eq(compare_walk_init(&w, a, b, &err), 0, "%s", err.msg);
    size_t ends[64], fresh[64];
    cr_assert_leq(a->nranks, 64);
    size_t order[] = {0, 1, 2, a->n / 2, a->n / 2, a->n / 3, a->n - 1, 5, a->n - 1};
    for (size_t k = 0; k < a->n + sizeof order / sizeof *order; k++) {
        size_t i = k < a->n ? k : order[k - a->n];
        size_t j = 0;
        cr_assert_eq(compare_walk_points(&w, i, ends, &err), 0, "%s", err.msg);
        cr_assert_eq(compare_points(a, i, b, fresh, &err), 0, "%s", err.msg);
        for (int q = 0; q < a->nranks; q++)
            cr_assert_eq(ends[q], fresh[q], "event %zu, rank %d: walked %zu, fresh %zu", i, q,
                         ends[q], fresh[q]);
        cr_assert_eq(compare_walk_match(&w, i, &j, &err), 0, "%s", err.msg);
        cr_assert_eq(j, match(a, i, b), "event %zu", i);
    }
    cr_expect_neq(compare_walk_points(&w, a->n, ends, &err), 0);
    compare_walk_free(&w);
}

Test(compare, a_walk_carried_on_gives_what_each_event_alone_gives) {
    Pair p;
    train_pair(&p, STRAT_ZERO3, 2);
    expect_walk_as_one_shot(&p.fsdp.trace, &p.ddp.trace);
    expect_walk_as_one_shot(&p.ddp.trace, &p.fsdp.trace);
    free_pair(&p);
}
