/* Lesson 05's check: the learner's unit_entries and forward_steps against what the engine did in
 * one traced training step on 3 simulated ranks. */
#include "exercise.h"
#include "lessons/tool/engine_run.h"

/* For each case it trains one step of the toy (or vit-tiny, accounting-only) on 3 simulated ranks
 * with the trace on (engine_run.h), reads every rank's forward back as steps in the order its code
 * issued them (an all-gather starts where its wire buffers are allocated and is waited for at its
 * all_gather event; forward events; frees of gathered parameters), and compares them one by one
 * with the learner's list for the same units. */

static const char *step_op_name(StepOp op) {
    static const char *const names[] = {"gather", "wait-gather", "forward", "free"};
    return op >= STEP_GATHER && op <= STEP_FREE ? names[op] : lesson_fmt("op %d", (int)op);
}

static const char *entries_text(const EngineRun *r, const int *entry_unit, int n) {
    return n ? lesson_fmt("%d entries: %s", n, engine_entry_names(r, entry_unit, n)) : "0 entries";
}

/* Each test says when it ran to its end (check.h): the runner passes nothing less. */
LESSON_CHECK_SUITE(lesson05);

Test(lesson05, t1_entries) {
    static const char *const cases[][2] = {{"toy", "layer"},        {"toy", "block:2"},
                                           {"toy", "none"},         {"vit-tiny", "layer"},
                                           {"vit-tiny", "block:3"}, {"vit-tiny", "size:200000"}};
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        EngineRun r;
        engine_run(&r, cases[c][0], engine_config(cases[c][1], 1, 1));
        int want[64], got[64], nm = r.model.nmodules;
        int nwant = engine_entries(&r, want, 64);
        for (int i = 0; i < 64; i++) got[i] = -1;
        lesson_try("unit_entries(module_unit = {%s}, nmodules=%d) for %s under wrap %s",
                   engine_entry_names(&r, r.plan.module_unit, nm), nm, r.name, r.wrap);
        int ngot = unit_entries(r.plan.module_unit, nm, got);
        const char *want_text = entries_text(&r, want, nwant);
        const char *got_text = ngot < 0 || ngot > nm
                                   ? lesson_fmt("%d entries (of %d modules)", ngot, nm)
                                   : entries_text(&r, got, ngot);
        engine_run_free(&r);
        expect_text(1, want_text, got_text);
    }
}

/* forward_steps on the engine's schedule */
static int learner_forward(const EngineRun *r, const EngineSchedule *e, EngineStepText *got) {
    ForwardSetup s = {e->nentries, e->entry_unit, e->nunits, e->is_root, e->reshard_after_forward,
                      e->prefetch};
    Step steps[ENGINE_MAX_STEPS];
    for (int i = 0; i < ENGINE_MAX_STEPS; i++) steps[i] = (Step){(StepOp)-1, -1};
    lesson_try("forward_steps(%s: entries %s)", r->label,
               engine_entry_names(r, e->entry_unit, e->nentries));
    int said = forward_steps(&s, steps, ENGINE_MAX_STEPS);
    for (int i = 0; i < said && i < ENGINE_MAX_STEPS; i++)
        snprintf(got[i], sizeof got[i], "%s %s", step_op_name(steps[i].op),
                 engine_unit_name(r, steps[i].unit));
    return said;
}

/* Known mistakes in a forward: the root freed, a unit freed where nothing is, a prefetch
 * started after the wait it should overlap. */
static const char *forward_why(const EngineRun *r, const EngineSchedule *s, const char *want,
                               const char *got) {
    if (!strncmp(got, "free ", 5) && !s->reshard_after_forward)
        return "With reshard_after_forward=False (zero2) forward frees nothing: each unit stays "
               "whole until its backward.";
    if (engine_step_on_root(r, got, "free"))
        return "FSDP2 never frees the root after forward: backward starts with it.";
    if (s->prefetch > 0 && !strncmp(want, "gather ", 7) && !strncmp(got, "wait-gather ", 12))
        return "With prefetch the next unit's all-gather starts before the GPU waits for this "
               "one's, so the two transfers overlap the computation.";
    return NULL;
}

/* The learner's forward, against every rank's. */
static void expect_forward(int hint, const char *model, const char *wrap, int reshard,
                           int prefetch) {
    engine_expect_steps(hint, model, engine_config(wrap, reshard, prefetch), PHASE_FORWARD,
                        learner_forward, forward_why);
}

Test(lesson05, t2_no_prefetch) {
    expect_forward(2, "toy", "layer", 1, 0);
}

Test(lesson05, t3_prefetch) {
    expect_forward(3, "toy", "layer", 1, 1); /* what ./fsdp viz --model toy --ranks 3 runs */
    expect_forward(3, "toy", "layer", 1, 2);
    expect_forward(3, "toy", "block:2", 1, 1);
}

Test(lesson05, t4_units_that_stay_gathered) {
    expect_forward(4, "toy", "layer", 0, 1); /* zero2: nothing is freed until backward */
    expect_forward(4, "toy", "none", 1, 1);  /* one unit, the root: kept for backward */
}

Test(lesson05, t5_vit_root_entered_twice) {
    expect_forward(5, "vit-tiny", "layer", 1, 1);
    expect_forward(5, "vit-tiny", "layer", 1, 2);
    expect_forward(5, "vit-tiny", "block:3", 1, 1);
    expect_forward(5, "vit-tiny", "layer", 0, 1);
    expect_forward(5, "vit-tiny", "size:200000", 1, 1);
}
