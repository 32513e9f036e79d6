/* Where the viewer's movement keys lead (sim/viz/nav.c): on a hand-made trace whose answers
 * are known by construction (a step without an optimizer phase, events between steps, the
 * teardown), and on real toy traces against a brute-force reading of the key map. */
#include <criterion/criterion.h>
#include <string.h>

#include "sim/viz/nav.h"
#include "tests/util.h"

/* Where move m leads from `from`; where it says there is nowhere to go, it stays. */
static size_t go(const Trace *t, size_t from, NavMove m) {
    size_t to = 12345;
    if (!nav_move(t, from, m, &to)) cr_assert_eq(to, from, "nowhere to go stays at %zu", from);
    return to;
}

/* Two steps as a trace lists them: step 0 has no optimizer phase (a gradient accumulation
 * step), the allocations before step 1 still count as step 0 with no phase, and the teardown
 * after the last step is step 2. */
static const TraceEvent synthetic[] = {
    /* 0 */ {.step = 0, .phase = PHASE_NONE, .kind = EV_ALLOC, .unit = 0},
    /* 1 */ {.step = 0, .phase = PHASE_FORWARD, .kind = EV_ALL_GATHER, .unit = 0},
    /* 2 */ {.step = 0, .phase = PHASE_FORWARD, .kind = EV_FORWARD, .unit = 0},
    /* 3 */ {.step = 0, .phase = PHASE_FORWARD, .kind = EV_FREE, .unit = 0},
    /* 4 */ {.step = 0, .phase = PHASE_BACKWARD, .kind = EV_RECOMPUTE, .unit = 0},
    /* 5 */ {.step = 0, .phase = PHASE_BACKWARD, .kind = EV_BACKWARD, .unit = 0},
    /* 6 */ {.step = 0, .phase = PHASE_BACKWARD, .kind = EV_REDUCE_SCATTER, .unit = 0},
    /* 7 */ {.step = 0, .phase = PHASE_NONE, .kind = EV_ALLOC, .unit = -1},
    /* 8 */ {.step = 1, .phase = PHASE_NONE, .kind = EV_BARRIER, .unit = -1},
    /* 9 */ {.step = 1, .phase = PHASE_FORWARD, .kind = EV_FORWARD, .unit = 0},
    /* 10 */ {.step = 1, .phase = PHASE_BACKWARD, .kind = EV_BACKWARD, .unit = 0},
    /* 11 */ {.step = 1, .phase = PHASE_BACKWARD, .kind = EV_ALL_REDUCE, .unit = 0},
    /* 12 */ {.step = 1, .phase = PHASE_OPTIMIZER, .kind = EV_OPTIMIZER, .unit = 0},
    /* 13 */ {.step = 1, .phase = PHASE_OPTIMIZER, .kind = EV_BROADCAST, .unit = 0},
    /* 14 */ {.step = 2, .phase = PHASE_NONE, .kind = EV_FREE, .unit = 0},
};

static Trace synthetic_trace(void) {
    return (Trace){
        .ev = (TraceEvent *)synthetic, .n = sizeof synthetic / sizeof *synthetic, .nranks = 1};
}

Test(nav, steps_by_event_collective_and_compute) {
    Trace t = synthetic_trace();
    cr_expect_eq(go(&t, 0, NAV_NEXT), 1);
    cr_expect_eq(go(&t, 14, NAV_NEXT), 14, "the last event stays");
    cr_expect_eq(go(&t, 5, NAV_PREV), 4);
    cr_expect_eq(go(&t, 0, NAV_PREV), 0, "the first event stays");
    /* c: all_gather 1, reduce_scatter 6, barrier 8, all_reduce 11, broadcast 13 */
    size_t hops[] = {1, 6, 8, 11, 13}, at = 0;
    for (size_t i = 0; i < 5; i++) {
        at = go(&t, at, NAV_NEXT_COLLECTIVE);
        cr_expect_eq(at, hops[i], "collective %zu", i);
    }
    cr_expect_eq(go(&t, 13, NAV_NEXT_COLLECTIVE), 13, "none after the broadcast");
    cr_expect_eq(go(&t, 14, NAV_PREV_COLLECTIVE), 13);
    cr_expect_eq(go(&t, 8, NAV_PREV_COLLECTIVE), 6);
    cr_expect_eq(go(&t, 1, NAV_PREV_COLLECTIVE), 1, "none before the first");
    /* k: forward 2, recompute 4, backward 5, forward 9, backward 10, optimizer 12 */
    size_t computes[] = {2, 4, 5, 9, 10, 12};
    at = 0;
    for (size_t i = 0; i < 6; i++) {
        at = go(&t, at, NAV_NEXT_COMPUTE);
        cr_expect_eq(at, computes[i], "compute %zu", i);
    }
    cr_expect_eq(go(&t, 12, NAV_NEXT_COMPUTE), 12);
    cr_expect_eq(go(&t, 9, NAV_PREV_COMPUTE), 5);
    cr_expect_eq(go(&t, 2, NAV_PREV_COMPUTE), 2);
}

Test(nav, phase_keys_go_to_the_start_of_this_step_or_the_next) {
    Trace t = synthetic_trace();
    /* in step 0, before, inside and after its forward: its forward starts at 1 */
    for (size_t i = 0; i <= 6; i++) {
        cr_expect_eq(go(&t, i, NAV_FORWARD), 1, "f from %zu", i);
        cr_expect_eq(go(&t, i, NAV_BACKWARD), 4, "b from %zu", i);
        /* step 0 has no optimizer phase: step 1's */
        cr_expect_eq(go(&t, i, NAV_OPTIMIZER), 12, "o from %zu", i);
    }
    /* 7 is after step 0's last phase: step 1's phases */
    cr_expect_eq(go(&t, 7, NAV_FORWARD), 9);
    cr_expect_eq(go(&t, 7, NAV_BACKWARD), 10);
    cr_expect_eq(go(&t, 7, NAV_OPTIMIZER), 12);
    /* in step 1, the keys go back to the start of its phases too */
    cr_expect_eq(go(&t, 13, NAV_FORWARD), 9);
    cr_expect_eq(go(&t, 13, NAV_BACKWARD), 10);
    cr_expect_eq(go(&t, 13, NAV_OPTIMIZER), 12);
    cr_expect_eq(go(&t, 8, NAV_OPTIMIZER), 12);
    /* the teardown: no step after it, so the keys stay and say why */
    cr_expect_eq(go(&t, 14, NAV_FORWARD), 14);
    cr_expect_eq(go(&t, 14, NAV_OPTIMIZER), 14);
    cr_expect_str_eq(nav_nowhere(NAV_FORWARD), "no forward phase in this step or after it");
    cr_expect_str_eq(nav_nowhere(NAV_NEXT_COLLECTIVE), "no collective after this event");
}

/* The key map read literally, one event at a time. */
static int oracle_collective(const TraceEvent *e) {
    switch ((EventKind)e->kind) {
    case EV_ALL_GATHER:
    case EV_REDUCE_SCATTER:
    case EV_ALL_REDUCE:
    case EV_BROADCAST:
    case EV_BARRIER:
        return 1;
    default:
        return 0;
    }
}

static int oracle_compute(const TraceEvent *e) {
    return e->kind == EV_FORWARD || e->kind == EV_BACKWARD || e->kind == EV_RECOMPUTE ||
           e->kind == EV_OPTIMIZER;
}

static size_t oracle_seek(const Trace *t, size_t from, int dir, int (*is)(const TraceEvent *)) {
    for (long i = (long)from + dir; i >= 0 && i < (long)t->n; i += dir)
        if (is(&t->ev[i])) return (size_t)i;
    return from;
}

/* The first event of `phase` in step s, or t->n. */
static size_t first_of(const Trace *t, int s, Phase phase) {
    for (size_t i = 0; i < t->n; i++)
        if (t->ev[i].step == s && t->ev[i].phase == (int)phase) return i;
    return t->n;
}

static size_t oracle_phase(const Trace *t, size_t from, Phase phase) {
    int s = t->ev[from].step, last_step = 0, rest_of_step_has_phase = 0;
    for (size_t i = 0; i < t->n; i++)
        if (t->ev[i].step > last_step) last_step = t->ev[i].step;
    for (size_t i = from; i < t->n; i++)
        if (t->ev[i].step == s && t->ev[i].phase != PHASE_NONE) rest_of_step_has_phase = 1;
    for (int step = rest_of_step_has_phase ? s : s + 1; step <= last_step; step++)
        if (first_of(t, step, phase) < t->n) return first_of(t, step, phase);
    return from;
}

static void expect_keys_match_the_map(const Trace *t, const char *what) {
    cr_assert_gt(t->n, 100, "%s: a real trace", what);
    for (size_t i = 0; i < t->n; i++) {
        cr_assert_eq(go(t, i, NAV_NEXT), i + 1 < t->n ? i + 1 : i, "%s n from %zu", what, i);
        cr_assert_eq(go(t, i, NAV_PREV), i ? i - 1 : 0, "%s p from %zu", what, i);
        cr_assert_eq(go(t, i, NAV_NEXT_COLLECTIVE), oracle_seek(t, i, 1, oracle_collective),
                     "%s c from %zu", what, i);
        cr_assert_eq(go(t, i, NAV_PREV_COLLECTIVE), oracle_seek(t, i, -1, oracle_collective),
                     "%s C from %zu", what, i);
        cr_assert_eq(go(t, i, NAV_NEXT_COMPUTE), oracle_seek(t, i, 1, oracle_compute),
                     "%s k from %zu", what, i);
        cr_assert_eq(go(t, i, NAV_PREV_COMPUTE), oracle_seek(t, i, -1, oracle_compute),
                     "%s K from %zu", what, i);
        cr_assert_eq(go(t, i, NAV_FORWARD), oracle_phase(t, i, PHASE_FORWARD), "%s f from %zu",
                     what, i);
        cr_assert_eq(go(t, i, NAV_BACKWARD), oracle_phase(t, i, PHASE_BACKWARD), "%s b from %zu",
                     what, i);
        cr_assert_eq(go(t, i, NAV_OPTIMIZER), oracle_phase(t, i, PHASE_OPTIMIZER), "%s o from %zu",
                     what, i);
    }
}

/* The toy under zero3 for two steps at 3 ranks: every key from every event, and where the
 * phase keys land said in the trace's own terms. */
Test(nav, toy_zero3_two_steps_every_key_from_every_event) {
    FsdpConfig c = toy_config(STRAT_ZERO3, 4);
    ToyRun run;
    toy_train(&run, &c, 3, 2, 1);
    const Trace *t = &run.trace;
    expect_keys_match_the_map(t, "zero3");
    /* from the first event, f is step 0's first forward-phase event, b and o likewise, and
     * each is the first of its phase (the event before it is in another phase) */
    size_t f = go(t, 0, NAV_FORWARD), b = go(t, 0, NAV_BACKWARD), o = go(t, 0, NAV_OPTIMIZER);
    cr_expect(f > 0 && f < b && b < o, "f %zu < b %zu < o %zu", f, b, o);
    cr_expect_eq(t->ev[f].phase, PHASE_FORWARD);
    cr_expect_neq(t->ev[f - 1].phase, PHASE_FORWARD);
    cr_expect_eq(t->ev[b].phase, PHASE_BACKWARD);
    cr_expect_eq(t->ev[b].step, 0);
    cr_expect_eq(t->ev[o].phase, PHASE_OPTIMIZER);
    /* after step 0's last Adam update, f is step 1's forward; from the teardown it stays */
    size_t after = o;
    while (t->ev[after].phase == PHASE_OPTIMIZER) after++;
    cr_assert_eq(t->ev[after].phase, PHASE_NONE, "events between the two steps");
    size_t f1 = go(t, after, NAV_FORWARD);
    cr_expect_eq(t->ev[f1].step, 1);
    cr_expect_eq(t->ev[f1].phase, PHASE_FORWARD);
    cr_expect_gt(f1, after);
    cr_expect_eq(go(t, t->n - 1, NAV_FORWARD), t->n - 1, "the teardown has no step after it");
    /* the first collective is GPU 0's all-gather of the first unit, in forward */
    size_t c0 = go(t, 0, NAV_NEXT_COLLECTIVE);
    cr_expect_eq(t->ev[c0].kind, EV_ALL_GATHER);
    cr_expect_eq(t->ev[c0].unit, 0);
    cr_expect_eq(t->ev[c0].rank, 0);
    toy_run_free(&run);
}

/* DDP's all-reduces and the toy at one step: the same reading of the map. */
Test(nav, toy_ddp_every_key_from_every_event) {
    FsdpConfig c = toy_config(STRAT_DDP, 4);
    ToyRun run;
    toy_train(&run, &c, 2, 1, 1);
    expect_keys_match_the_map(&run.trace, "ddp");
    size_t c0 = go(&run.trace, 0, NAV_NEXT_COLLECTIVE);
    cr_expect(run.trace.ev[c0].kind == EV_ALL_REDUCE || run.trace.ev[c0].kind == EV_BROADCAST,
              "DDP's first collective: %s", event_kind_name((EventKind)run.trace.ev[c0].kind));
    toy_run_free(&run);
}
