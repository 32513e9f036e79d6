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

/* A case: one step of `model` under `wrap`, with or without reshard_after_forward. */
typedef struct Case {
    const char *model, *wrap;
    int reshard;
} Case;

/* Plans without a root unit: the toy by layer and by blocks, with and without resharding. */
static const Case TOY[] = {{"toy", "layer", 1}, {"toy", "layer", 0}, {"toy", "block:2", 1}};
#define NTOY (sizeof TOY / sizeof TOY[0])

/* Plans with a root unit: the toy wrapped whole, and vit-tiny (the root holds the patch
 * embedding and the head) under several policies. */
static const Case WITH_ROOT[] = {{"toy", "none", 1},
                                 {"vit-tiny", "layer", 1},
                                 {"vit-tiny", "layer", 0},
                                 {"vit-tiny", "block:4", 1},
                                 {"vit-tiny", "size:150000", 1}};
#define NWITH_ROOT (sizeof WITH_ROOT / sizeof WITH_ROOT[0])

/* What a test compares with the engine: the learner's all-gathers per step, or its peak of
 * gathered bytes. */
typedef enum { GATHERS, PEAK } Measure;

/* Known wrong counts: the root gathered again in backward (nunits more, not nunits - 1), or
 * every unit gathered again where nothing was freed. NULL for any other. */
static const char *gathers_why(const UnitSize *units, int n, int reshard, long long want,
                               long long got) {
    int root = 0;
    for (int u = 0; u < n; u++) root |= units[u].is_root;
    if (reshard && root && got == 2LL * n && want == 2LL * n - 1)
        return "The root is gathered once a step: FSDP2 never frees it after forward (backward "
               "starts with it), so backward gathers again every unit but the root.";
    if (!reshard && got == 2LL * n)
        return "With reshard_after_forward=False (zero2) forward frees nothing, so backward "
               "finds every unit whole and gathers none again.";
    return NULL;
}

/* Known wrong peaks: the prefetched unit counted (engine_run.h), or with resharding the whole
 * model counted as if nothing were freed. */
static const char *peak_why(const UnitSize *units, int n, int reshard, long long want,
                            long long got) {
    size_t bytes[64], all = 0;
    int is_root[64];
    for (int u = 0; u < n && u < 64; u++) {
        bytes[u] = units[u].numel * sizeof(float);
        is_root[u] = units[u].is_root;
        all += bytes[u];
    }
    if (reshard && n > 1 && (size_t)got == all && (size_t)want != all)
        return "That is the peak without resharding: with reshard_after_forward=True each unit "
               "is freed after its forward, so only the root and one other unit are whole at a "
               "time.";
    return engine_prefetch_counted((size_t)want, (size_t)got, bytes, is_root, n < 64 ? n : 64);
}

/* One step of the case against the learner, on every rank: its all_gather events, or the most
 * bytes of unsharded parameters it held. The run is freed before a failure ends the test, so
 * nothing leaks under SANITIZE=1. */
static void expect_case(Measure what, int hint, const Case *c) {
    const int gathers = what == GATHERS;
    EngineRun r;
    UnitSize units[64];
    int n = run_and_try(&r, gathers ? "all_gathers_per_step" : "peak_gathered_bytes", c->model,
                        c->wrap, c->reshard, units);
    long long got = gathers ? all_gathers_per_step(units, n, c->reshard)
                            : (long long)peak_gathered_bytes(units, n, c->reshard);
    long long want[ENGINE_RANKS];
    for (int rank = 0; rank < ENGINE_RANKS; rank++)
        want[rank] = gathers ? engine_count(&r, rank, EV_ALL_GATHER)
                             : (long long)engine_peak(&r, rank, MEM_PARAM_UNSHARDED);
    engine_run_free(&r);
    const char *name = gathers ? "all-gathers" : "bytes";
    for (int rank = 0; rank < ENGINE_RANKS; rank++)
        expect_text_why(hint, lesson_fmt("%s=%lld", name, want[rank]),
                        lesson_fmt("%s=%lld", name, got),
                        gathers ? gathers_why(units, n, c->reshard, want[rank], got)
                                : peak_why(units, n, c->reshard, want[rank], got));
}

/* expect_case for each of the n cases. */
static void each_case(Measure what, int hint, const Case *cases, size_t n) {
    for (size_t i = 0; i < n; i++) expect_case(what, hint, &cases[i]);
}

/* Each test says when it ran to its end (check.h): the runner passes nothing less. */
LESSON_CHECK_SUITE(lesson07);

Test(lesson07, t1_gathers_toy) {
    each_case(GATHERS, 1, TOY, NTOY);
}

Test(lesson07, t2_gathers_with_a_root) {
    each_case(GATHERS, 2, WITH_ROOT, NWITH_ROOT);
}

Test(lesson07, t3_peak_toy) {
    each_case(PEAK, 3, TOY, NTOY);
}

Test(lesson07, t4_peak_with_a_root) {
    each_case(PEAK, 4, WITH_ROOT, NWITH_ROOT);
}
