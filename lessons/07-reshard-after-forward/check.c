/* Lesson 07's check: the learner's all-gathers per step and peak of gathered parameters, with and
 * without reshard_after_forward, against the engine. */
#include "exercise.h"
#include "lessons/tool/engine_run.h"

/* For each case it trains one step of the toy (or vit-tiny, accounting-only) on 3 simulated ranks
 * with the trace on (lessons/tool/engine_run.h) and takes every rank's all_gather events of the
 * step and the most bytes of unsharded parameters it held, as the memory timeline of `fsdp train
 * --memory` replays the trace. */

/* The last of the units from u on that have unit u's size and are not the root. */
static int same_size_until(const Plan *p, int u) {
    int v = u;
    while (v + 1 < p->nunits && !p->units[u].is_root && !p->units[v + 1].is_root &&
           p->units[v + 1].numel == p->units[u].numel)
        v++;
    return v;
}

/* The plan's units in the lesson's terms, and their sizes as text, runs of equal units said
 * once: "root 10250 (root), encoder_layer_0..encoder_layer_9 99584 each". */
static int unit_sizes(const EngineRun *r, UnitSize *out, char *text, size_t n) {
    size_t at = 0;
    text[0] = 0;
    for (int u = 0; u < r->plan.nunits; u++)
        out[u] = (UnitSize){r->plan.units[u].numel, r->plan.units[u].is_root};
    for (int u = 0; u < r->plan.nunits && at < n; u++) {
        const Unit *first = &r->plan.units[u];
        int v = same_size_until(&r->plan, u);
        if (v > u)
            at += (size_t)snprintf(text + at, n - at, "%s%s..%s %zu each", u ? ", " : "",
                                   first->name, r->plan.units[v].name, first->numel);
        else
            at += (size_t)snprintf(text + at, n - at, "%s%s %zu%s", u ? ", " : "", first->name,
                                   first->numel, first->is_root ? " (root)" : "");
        u = v;
    }
    return r->plan.nunits; /* a text cut short ends where the buffer does */
}

/* One step of `model` under `wrap`, and the learner's units of it named in lesson_try. */
static int run_and_try(EngineRun *r, const char *fn, const char *model, const char *wrap,
                       int reshard, UnitSize *units) {
    engine_run(r, model, engine_config(wrap, reshard, 1));
    char sizes[LESSON_TEXT_MAX / 2];
    int n = unit_sizes(r, units, sizes, sizeof sizes);
    lesson_try("%s(%s under wrap %s: %s; reshard_after_forward=%d)", fn, model, r->wrap, sizes,
               reshard);
    return n;
}

/* Each rank's all_gather events against the learner's count. The run is freed before a
 * failure ends the test, so nothing leaks under SANITIZE=1. */
static void expect_gathers(int hint, const char *model, const char *wrap, int reshard) {
    EngineRun r;
    UnitSize units[64];
    int n = run_and_try(&r, "all_gathers_per_step", model, wrap, reshard, units);
    int want[ENGINE_RANKS], got = all_gathers_per_step(units, n, reshard);
    for (int rank = 0; rank < ENGINE_RANKS; rank++)
        want[rank] = engine_count(&r, rank, EV_ALL_GATHER);
    engine_run_free(&r);
    for (int rank = 0; rank < ENGINE_RANKS; rank++)
        expect_text(hint, lesson_fmt("all-gathers=%d", want[rank]),
                    lesson_fmt("all-gathers=%d", got));
}

/* Each rank's most bytes of unsharded parameters against the learner's peak. */
static void expect_peak(int hint, const char *model, const char *wrap, int reshard) {
    EngineRun r;
    UnitSize units[64];
    int n = run_and_try(&r, "peak_gathered_bytes", model, wrap, reshard, units);
    size_t want[ENGINE_RANKS], got = peak_gathered_bytes(units, n, reshard);
    for (int rank = 0; rank < ENGINE_RANKS; rank++)
        want[rank] = engine_peak(&r, rank, MEM_PARAM_UNSHARDED);
    engine_run_free(&r);
    for (int rank = 0; rank < ENGINE_RANKS; rank++) expect_size(hint, "bytes", want[rank], got);
}

Test(lesson07, t1_gathers_toy) {
    expect_gathers(1, "toy", "layer", 1);
    expect_gathers(1, "toy", "layer", 0);
    expect_gathers(1, "toy", "block:2", 1);
}

Test(lesson07, t2_gathers_with_a_root) {
    expect_gathers(2, "toy", "none", 1);
    expect_gathers(2, "vit-tiny", "layer", 1);
    expect_gathers(2, "vit-tiny", "layer", 0);
    expect_gathers(2, "vit-tiny", "block:4", 1);
}

Test(lesson07, t3_peak_toy) {
    expect_peak(3, "toy", "layer", 0);
    expect_peak(3, "toy", "layer", 1);
    expect_peak(3, "toy", "block:2", 1);
}

Test(lesson07, t4_peak_with_a_root) {
    expect_peak(4, "toy", "none", 1);
    expect_peak(4, "vit-tiny", "layer", 0);
    expect_peak(4, "vit-tiny", "layer", 1);
    expect_peak(4, "vit-tiny", "block:4", 1);
    expect_peak(4, "vit-tiny", "size:150000", 1);
}
