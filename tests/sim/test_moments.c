/* The presenter's step (sim/viz/moments.c): every event in exactly one moment, one moment per
 * collective or compute across all GPUs, the keys landing on work rather than on an allocation,
 * and a moment's frame telling its work with the state after its last event. */
#include <criterion/criterion.h>
#include <stdio.h>
#include <string.h>

#include "sim/viz/moments.h"
#include "tests/util.h"

static void build(Moments *ms, const Trace *t) {
    Err err = {0};
    cr_assert_eq(moments_build(ms, t, &err), 0, "%s", err.msg);
}

/* The toy's one step under zero3 at 3 GPUs, traced, and its moments. */
static void toy_zero3_moments(ToyRun *run, Moments *ms) {
    FsdpConfig c = toy_config(STRAT_ZERO3, 4);
    toy_train(run, &c, 3, 1, 1);
    build(ms, &run->trace);
}

/* The moments tile the trace: contiguous, in order, each event in one, each anchor inside its
 * moment and a collective or compute. */
static void expect_tiling(const Moments *ms, const Trace *t) {
    cr_assert_gt(ms->n, 0);
    cr_expect_eq(ms->m[0].first, 0);
    cr_expect_eq(ms->m[ms->n - 1].last, t->n - 1);
    for (size_t k = 0; k < ms->n; k++) {
        const Moment *m = &ms->m[k];
        cr_assert_leq(m->first, m->last, "moment %zu", k);
        if (k) cr_assert_eq(m->first, ms->m[k - 1].last + 1, "moment %zu follows on", k);
        if (m->anchor == MOMENT_NO_ANCHOR) continue;
        cr_assert(m->anchor >= m->first && m->anchor <= m->last, "anchor of %zu inside", k);
        const TraceEvent *a = &t->ev[m->anchor];
        cr_assert(nav_is_collective(a) || nav_is_compute(a), "moment %zu anchors on work", k);
        for (size_t i = m->first; i < m->anchor; i++)
            cr_assert(!nav_is_collective(&t->ev[i]) && !nav_is_compute(&t->ev[i]),
                      "no work before the anchor of %zu", k);
    }
    for (size_t i = 0; i < t->n; i++) {
        const Moment *m = &ms->m[moments_find(ms, i)];
        cr_assert(i >= m->first && i <= m->last, "moments_find(%zu)", i);
    }
}

/* Where key `move` leads from moment `from` (staying where it says there is nowhere). */
static size_t go(const Moments *ms, const Trace *t, size_t from, NavMove move) {
    size_t to = 12345;
    if (!moments_move(ms, t, from, move, &to)) cr_assert_eq(to, from);
    return to;
}

static const char *work_name(const Trace *t, const Plan *p, const Moment *m) {
    static char buf[160];
    if (m->anchor == MOMENT_NO_ANCHOR) return "-";
    const TraceEvent *a = &t->ev[m->anchor];
    snprintf(buf, sizeof buf, "%s %s", event_kind_name((EventKind)a->kind),
             a->unit >= 0 ? p->units[a->unit].name : "model");
    return buf;
}

/* The toy's step under zero3 at 3 GPUs is the workshop's list, each entry one frame on every
 * GPU: the setup, 3 all-gathers and forwards (prefetch issues the next all-gather right after a
 * forward), the loss, backward's gathers, computes and reduce-scatters (Lc's starts before Lb's
 * backward, which waits for La's rows to be packed for their prefetched all-gather), then 3 Adam
 * updates; every allocation and free is folded into one of them. */
Test(moments, toy_zero3_is_the_workshop_list_one_frame_each) {
    ToyRun run;
    Moments ms;
    toy_zero3_moments(&run, &ms);
    const Trace *t = &run.trace;
    expect_tiling(&ms, t);
    static const char *const want[] = {
        "-",
        "all_gather La",
        "forward La",
        "all_gather Lb",
        "forward Lb",
        "all_gather Lc",
        "forward Lc",
        "forward model",
        "all_gather Lc",
        "backward Lc",
        "all_gather Lb",
        "reduce_scatter Lc",
        "backward Lb",
        "all_gather La",
        "backward La",
        "reduce_scatter Lb",
        "reduce_scatter La",
        "optimizer La",
        "optimizer Lb",
        "optimizer Lc",
    };
    size_t n = sizeof want / sizeof *want;
    cr_assert_gt(ms.n, n, "%zu frames for the toy's step, the workshop's list has %zu", ms.n, n);
    for (size_t k = n; k < ms.n; k++) { /* the loss's all-reduce, the final parameters' gather */
        const TraceEvent *a = &t->ev[ms.m[k].anchor != MOMENT_NO_ANCHOR ? ms.m[k].anchor : 0];
        cr_expect(a->unit < 0 || a->phase == PHASE_NONE, "frame %zu after the step", k + 1);
    }
    for (size_t k = 0; k < n; k++) {
        cr_expect_str_eq(work_name(t, &run.plan, &ms.m[k]), want[k], "frame %zu", k + 1);
        if (ms.m[k].anchor != MOMENT_NO_ANCHOR)
            cr_expect_eq(ms.m[k].anchors, 3, "frame %zu is all 3 GPUs' work", k + 1);
    }
    /* f lands on the first all-gather's frame, not on the comm buffer allocated before it */
    size_t f = go(&ms, t, 0, NAV_FORWARD), o = go(&ms, t, 0, NAV_OPTIMIZER);
    cr_expect_str_eq(work_name(t, &run.plan, &ms.m[f]), "all_gather La");
    cr_expect_eq(t->ev[ms.m[f].first].kind, EV_ALLOC, "its comm buffers are folded in");
    cr_expect_str_eq(work_name(t, &run.plan, &ms.m[go(&ms, t, 0, NAV_BACKWARD)]), "all_gather Lc");
    cr_expect_str_eq(work_name(t, &run.plan, &ms.m[o]), "optimizer La");
    cr_expect_leq(o - f + 1, 40, "the first all-gather to the optimizer in at most 40 frames");
    /* c and k step over the other kind; n and p by one; the ends stay */
    cr_expect_str_eq(work_name(t, &run.plan, &ms.m[go(&ms, t, f, NAV_NEXT_COLLECTIVE)]),
                     "all_gather Lb");
    cr_expect_str_eq(work_name(t, &run.plan, &ms.m[go(&ms, t, f, NAV_NEXT_COMPUTE)]), "forward La");
    cr_expect_eq(go(&ms, t, f, NAV_NEXT), f + 1);
    cr_expect_eq(go(&ms, t, 0, NAV_PREV), 0);
    cr_expect_eq(go(&ms, t, ms.n - 1, NAV_NEXT), ms.n - 1);
    moments_free(&ms);
    toy_run_free(&run);
}

/* Under mixed precision the frame says what a gather unpacks is 16-bit: La's 3 parameters, 6 B
 * where fp32's are 12 B. */
Test(moments, a_16_bit_gather_says_so) {
    ToyRun run;
    FsdpConfig c = toy_config(STRAT_ZERO3, 4);
    c.param_dtype = DTYPE_BF16;
    toy_train(&run, &c, 3, 1, 1);
    Moments ms;
    build(&ms, &run.trace);
    Frame f;
    Err err = {0};
    cr_assert_eq(frame_init(&f, &run.plan, &err), 0);
    size_t k = go(&ms, &run.trace, 0, NAV_FORWARD);
    cr_assert_eq(moments_frame(&f, &run.trace, &run.plan, &ms, k, &err), 0, "%s", err.msg);
    cr_expect(strstr(f.narration, "unpacks La into 6 B of unsharded parameters in 16 bits "
                                  "(mixed precision: half of fp32's)"),
              "%s", f.narration);
    frame_free(&f);
    moments_free(&ms);
    toy_run_free(&run);
}

/* A moment's frame: the state after its last event, its work's narration first, then what was
 * folded in (here La's unpacking after its all-gather), and a header naming both. */
Test(moments, frame_tells_the_work_and_what_was_folded_in) {
    ToyRun run;
    Moments ms;
    toy_zero3_moments(&run, &ms);
    const Trace *t = &run.trace;
    Frame f, g;
    Err err = {0};
    cr_assert_eq(frame_init(&f, &run.plan, &err), 0);
    cr_assert_eq(frame_init(&g, &run.plan, &err), 0);
    size_t k = go(&ms, t, 0, NAV_FORWARD);
    const Moment *m = &ms.m[k];
    cr_assert_eq(moments_frame(&f, t, &run.plan, &ms, k, &err), 0, "%s", err.msg);
    cr_assert_eq(frame_at(&g, t, &run.plan, m->anchor, &err), 0);
    cr_expect(strstr(f.narration, g.narration) == f.narration, "starts with the all-gather's: %s",
              f.narration);
    cr_expect(strstr(f.narration, "unpacks La into 12 B of unsharded parameters."), "%s",
              f.narration);
    cr_expect(strstr(f.header, fmt_text("frame %zu of %zu | events %zu-%zu of %zu", k + 1, ms.n,
                                        m->first + 1, m->last + 1, t->n)),
              "%s", f.header);
    cr_expect(strstr(f.header, "all GPUs | all_gather La"), "%s", f.header);
    cr_assert_eq(frame_at(&g, t, &run.plan, m->last, &err), 0);
    for (int r = 0; r < 3; r++) {
        cr_expect(frame_cell(&f, r, 0)->gathered, "GPU %d holds La gathered", r);
        for (int cat = 0; cat < MEM_CATEGORY_COUNT; cat++)
            cr_expect_eq(frame_mem(&f, r, cat), frame_mem(&g, r, cat), "GPU %d category %d", r,
                         cat);
    }
    /* the setup frame has no work: it sums the shards each GPU allocates */
    cr_assert_eq(moments_frame(&f, t, &run.plan, &ms, 0, &err), 0);
    cr_expect(strstr(f.narration, "Each GPU allocates 12 B of param shard"), "%s", f.narration);
    cr_expect(strstr(f.header, "allocations and frees"), "%s", f.header);
    cr_expect_neq(moments_frame(&f, t, &run.plan, &ms, ms.n, &err), 0, "past the last frame");
    frame_free(&f);
    frame_free(&g);
    moments_free(&ms);
    toy_run_free(&run);
}

/* HSDP: the reduce-scatter inside each shard group is one frame of all 4 GPUs, the all-reduce
 * across the replicas the next; two steps keep their frames apart. */
Test(moments, hsdp_groups_and_two_steps) {
    FsdpConfig c = toy_config(STRAT_HSDP, 4);
    c.replicas = 2;
    ToyRun run;
    toy_train(&run, &c, 4, 2, 1);
    const Trace *t = &run.trace;
    Moments ms;
    build(&ms, t);
    expect_tiling(&ms, t);
    int reduce_scatters = 0, all_reduces = 0;
    for (size_t k = 0; k < ms.n; k++) {
        const Moment *m = &ms.m[k];
        if (m->anchor == MOMENT_NO_ANCHOR) continue;
        const TraceEvent *a = &t->ev[m->anchor];
        if (a->kind == EV_REDUCE_SCATTER) reduce_scatters++;
        if (a->kind == EV_ALL_REDUCE && a->unit >= 0) all_reduces++; /* not the loss's */
        if (a->kind == EV_REDUCE_SCATTER || a->kind == EV_ALL_REDUCE)
            cr_expect_eq(m->anchors, 4, "frame %zu: every GPU's part", k + 1);
        for (size_t i = m->first; i <= m->last; i++)
            cr_assert_eq(t->ev[i].step, a->step, "frame %zu stays in its step", k + 1);
    }
    cr_expect_eq(reduce_scatters, 2 * 3, "one per unit and step");
    cr_expect_eq(all_reduces, 2 * 3);
    moments_free(&ms);
    toy_run_free(&run);
}
