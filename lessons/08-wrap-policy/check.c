/* Lesson 08's check: the learner's wrap_units against the engine's plan under every kind of wrap
 * policy, then collectives_per_step and peak_gathered_bytes against a traced step. */
#include "exercise.h"
#include "lessons/tool/engine_run.h"

/* The plan is engine/plan.c's plan_create (its module_unit and root), for the toy and vit-tiny. The
 * step is one zero3 training step on 3 simulated ranks with the trace on
 * (lessons/tool/engine_run.h): every rank's all_gather and reduce_scatter events, and the most
 * bytes of unsharded parameters it held, as the memory timeline of `fsdp train --memory` replays
 * the trace. */

#define MAX_MODULES 64

static Policy policy_of(WrapPolicy w) {
    static const PolicyKind kinds[] = {[WRAP_LAYER] = POLICY_LAYER,
                                       [WRAP_BLOCK] = POLICY_BLOCK,
                                       [WRAP_SIZE] = POLICY_SIZE,
                                       [WRAP_NONE] = POLICY_NONE};
    return (Policy){kinds[w.kind], w.arg};
}

/* The model's modules in the lesson's terms, and as text: "La 3 block, Lb 3 block, ...",
 * runs of equal modules said once. */
static int module_sizes(const ModelDesc *m, ModuleSize *out, char *text, size_t n) {
    cr_assert_leq(m->nmodules, MAX_MODULES);
    for (int i = 0; i < m->nmodules; i++) {
        const ModuleSpec *mod = &m->modules[i];
        out[i] = (ModuleSize){0, mod->is_block};
        for (int j = 0; j < mod->nparams; j++)
            out[i].numel += m->params[mod->first_param + j].numel;
    }
    size_t at = 0;
    text[0] = 0;
    for (int i = 0; i < m->nmodules && at < n; i++) {
        int k = i;
        while (k + 1 < m->nmodules && out[k + 1].numel == out[i].numel &&
               out[k + 1].is_block == out[i].is_block)
            k++;
        const char *kind = out[i].is_block ? "block" : "not a block";
        if (k > i)
            at += (size_t)snprintf(text + at, n - at, "%s%s..%s %zu each, %s", i ? "; " : "",
                                   m->modules[i].name, m->modules[k].name, out[i].numel, kind);
        else
            at += (size_t)snprintf(text + at, n - at, "%s%s %zu, %s", i ? "; " : "",
                                   m->modules[i].name, out[i].numel, kind);
        i = k;
    }
    return m->nmodules;
}

static const char *grouping_text(int nunits, int root, const int *module_unit, int nmodules) {
    static char text[LESSON_TEXT_MAX / 2];
    size_t at = (size_t)snprintf(text, sizeof text, "units=%d root=%d module_unit=", nunits, root);
    for (int i = 0; i < nmodules && at < sizeof text; i++)
        at += (size_t)snprintf(text + at, sizeof text - at, "%s%d", i ? " " : "", module_unit[i]);
    return text;
}

static void expect_grouping(const char *model, const char *wrap) {
    ModelDesc m;
    engine_model(&m, model);
    WrapPolicy w;
    cr_assert_eq(wrap_parse(wrap, &w), 0);
    Plan p;
    Err err = {0};
    cr_assert_eq(plan_create(&p, &m, w, STRAT_ZERO3, ENGINE_RANKS, 1, &err), 0, "%s", err.msg);
    int root = -1;
    for (int u = 0; u < p.nunits; u++)
        if (p.units[u].is_root) root = u;
    ModuleSize modules[MAX_MODULES];
    char sizes[LESSON_TEXT_MAX / 2];
    int n = module_sizes(&m, modules, sizes, sizeof sizes);
    int module_unit[MAX_MODULES], got_root = -7;
    for (int i = 0; i < MAX_MODULES; i++) module_unit[i] = -1;
    lesson_try("wrap_units(%s's modules: %s; policy %s)", model, sizes, wrap);
    int got = wrap_units(modules, n, policy_of(w), module_unit, &got_root);
    const char *want_text = lesson_fmt("%s", grouping_text(p.nunits, root, p.module_unit, n));
    const char *got_text = lesson_fmt("%s", grouping_text(got, got_root, module_unit, n));
    int hint = w.kind == WRAP_BLOCK ? 2 : w.kind == WRAP_SIZE ? 3 : 1;
    plan_free(&p);
    model_desc_free(&m);
    expect_text(hint, want_text, got_text);
}

/* Each test says when it ran to its end (check.h): the runner passes nothing less. */
LESSON_CHECK_SUITE(lesson08);

Test(lesson08, t1_layer_and_none) {
    expect_grouping("toy", "layer");
    expect_grouping("toy", "none");
    expect_grouping("vit-tiny", "layer");
    expect_grouping("vit-tiny", "none");
}

Test(lesson08, t2_block) {
    static const char *const wraps[] = {"block:1", "block:2",  "block:3",
                                        "block:4", "block:10", "block:11"};
    expect_grouping("toy", "block:2");
    for (size_t i = 0; i < sizeof wraps / sizeof wraps[0]; i++)
        expect_grouping("vit-tiny", wraps[i]);
}

Test(lesson08, t3_size) {
    static const char *const wraps[] = {"size:1",      "size:50000",   "size:99584",
                                        "size:99585",  "size:150000",  "size:200000",
                                        "size:500000", "size:10000000"};
    expect_grouping("toy", "size:3");
    expect_grouping("toy", "size:4");
    for (size_t i = 0; i < sizeof wraps / sizeof wraps[0]; i++)
        expect_grouping("vit-tiny", wraps[i]);
}

static const char *const traced_wraps[] = {"layer", "block:2", "block:5", "none", "size:200000"};

/* A check of the learner's function on a traced run of vit-tiny (its modules and root unit in
 * the lesson's terms). It frees the run before a failure ends the test: nothing leaks. */
typedef void (*TracedCheck)(EngineRun *r, const ModuleSize *mods, int root);

/* `check` on a traced run under each of traced_wraps. */
static void on_traced_runs(TracedCheck check) {
    for (size_t i = 0; i < sizeof traced_wraps / sizeof traced_wraps[0]; i++) {
        EngineRun r;
        engine_run(&r, "vit-tiny", engine_config(traced_wraps[i], 1, 1));
        ModuleSize mods[MAX_MODULES];
        char sizes[LESSON_TEXT_MAX / 2];
        module_sizes(&r.model, mods, sizes, sizeof sizes);
        int root = -1;
        for (int u = 0; u < r.plan.nunits; u++)
            if (r.plan.units[u].is_root) root = u;
        check(&r, mods, root);
    }
}

/* Each rank's all-gathers and reduce-scatters against the learner's count. */
static void expect_collectives(EngineRun *r, const ModuleSize *mods, int root) {
    (void)mods;
    lesson_try("collectives_per_step(nunits=%d, has_root=%d) for vit-tiny under wrap %s",
               r->plan.nunits, root >= 0, r->wrap);
    int nunits = r->plan.nunits;
    int got = collectives_per_step(nunits, root >= 0), want[ENGINE_RANKS];
    for (int rank = 0; rank < ENGINE_RANKS; rank++)
        want[rank] =
            engine_count(r, rank, EV_ALL_GATHER) + engine_count(r, rank, EV_REDUCE_SCATTER);
    engine_run_free(r);
    const char *why = NULL;
    if (root >= 0 && got == 3 * nunits)
        why = "The root is gathered once a step: FSDP2 never frees it after forward (backward "
              "starts with it), so it takes one all-gather and one reduce-scatter, the other "
              "units two all-gathers each.";
    else if (got == 2 * nunits)
        why = "Under zero3 forward frees every unit but the root, and backward gathers each "
              "again: count backward's all-gathers beside forward's and the reduce-scatters.";
    for (int rank = 0; rank < ENGINE_RANKS; rank++)
        expect_text_why(4, lesson_fmt("collectives=%d", want[rank]),
                        lesson_fmt("collectives=%d", got), why);
}

/* Each rank's most bytes of unsharded parameters against the learner's peak. */
static void expect_peak(EngineRun *r, const ModuleSize *mods, int root) {
    lesson_try("peak_gathered_bytes(vit-tiny's modules under wrap %s: units=%d root=%d)", r->wrap,
               r->plan.nunits, root);
    size_t got =
        peak_gathered_bytes(mods, r->model.nmodules, r->plan.module_unit, r->plan.nunits, root);
    size_t want[ENGINE_RANKS], bytes[MAX_MODULES] = {0};
    int is_root[MAX_MODULES] = {0}, nunits = r->plan.nunits;
    for (int rank = 0; rank < ENGINE_RANKS; rank++)
        want[rank] = engine_peak(r, rank, MEM_PARAM_UNSHARDED);
    for (int i = 0; i < r->model.nmodules; i++) {
        bytes[r->plan.module_unit[i]] += mods[i].numel * sizeof(float);
        is_root[r->plan.module_unit[i]] = r->plan.module_unit[i] == root;
    }
    engine_run_free(r);
    for (int rank = 0; rank < ENGINE_RANKS; rank++)
        expect_size_why(5, "bytes", want[rank], got,
                        engine_prefetch_counted(want[rank], got, bytes, is_root, nunits));
}

Test(lesson08, t4_collectives_per_step) {
    on_traced_runs(expect_collectives);
}

Test(lesson08, t5_peak_gathered_bytes) {
    on_traced_runs(expect_peak);
}
