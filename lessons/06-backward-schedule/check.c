/* Lesson 06's check: the learner's backward_steps and optimizer_collectives against what the engine
 * did in one traced training step on 3 simulated ranks. */
#include "exercise.h"
#include "lessons/tool/engine_run.h"

/* For each case it trains one step of the toy (or vit-tiny, accounting-only) on 3 simulated ranks
 * with the trace on (lessons/tool/engine_run.h), reads every rank's backward back as steps in the
 * order its code issued them (a collective starts where its wire buffers are allocated and is
 * waited for at its all_gather or reduce_scatter event; backward events; frees of gathered
 * parameters), and compares them one by one with the learner's list for the same units; and it
 * counts the collectives of the optimizer phase under each strategy. */

static const char *step_op_name(StepOp op) {
    static const char *const names[] = {"gather", "wait-gather", "backward",
                                        "reduce", "wait-reduce", "free"};
    return op >= STEP_GATHER && op <= STEP_FREE ? names[op] : lesson_fmt("op %d", (int)op);
}

/* backward_steps on the engine's schedule */
static int learner_backward(const EngineRun *r, const EngineSchedule *e, EngineStepText *got) {
    BackwardSetup s = {e->nentries, e->entry_unit, e->nunits, e->is_root, e->reshard_after_forward,
                       e->prefetch};
    Step steps[ENGINE_MAX_STEPS];
    for (int i = 0; i < ENGINE_MAX_STEPS; i++) steps[i] = (Step){(StepOp)-1, -1};
    lesson_try("backward_steps(%s: forward's entries %s)", r->label,
               engine_entry_names(r, e->entry_unit, e->nentries));
    int said = backward_steps(&s, steps, ENGINE_MAX_STEPS);
    for (int i = 0; i < said && i < ENGINE_MAX_STEPS; i++)
        snprintf(got[i], sizeof got[i], "%s %s", step_op_name(steps[i].op),
                 engine_unit_name(r, steps[i].unit));
    return said;
}

/* Known mistakes in a backward: a unit gathered that forward left whole (the root, or every
 * unit under zero2). */
static const char *backward_why(const EngineRun *r, const EngineSchedule *s, const char *want,
                                const char *got) {
    (void)want;
    int gathers = !strncmp(got, "gather ", 7) || !strncmp(got, "wait-gather ", 12);
    if (gathers && !s->reshard_after_forward)
        return "With reshard_after_forward=False forward left every unit whole: backward gathers "
               "nothing.";
    if (engine_step_on_root(r, got, "gather") || engine_step_on_root(r, got, "wait-gather"))
        return "Forward never freed the root (backward starts with it): backward finds it whole "
               "and gathers it no more.";
    return NULL;
}

/* The learner's backward, against every rank's. */
static void expect_backward(int hint, const char *model, const char *wrap, int reshard,
                            int prefetch) {
    engine_expect_steps(hint, model, engine_config(wrap, reshard, prefetch), PHASE_BACKWARD,
                        learner_backward, backward_why);
}

/* Each test says when it ran to its end (check.h): the runner passes nothing less. */
LESSON_CHECK_SUITE(lesson06);

Test(lesson06, t1_nothing_to_gather) {
    expect_backward(1, "toy", "none", 1, 1);  /* the root is still whole from forward */
    expect_backward(1, "toy", "layer", 0, 1); /* zero2: every unit is */
}

Test(lesson06, t2_gather_what_forward_freed) {
    expect_backward(2, "toy", "layer", 1, 0);
}

Test(lesson06, t3_prefetch) {
    expect_backward(3, "toy", "layer", 1, 1); /* what ./fsdp viz --model toy --ranks 3 runs */
    expect_backward(3, "toy", "layer", 1, 2);
    expect_backward(3, "toy", "block:2", 1, 1);
}

Test(lesson06, t4_vit_root_entered_twice) {
    expect_backward(4, "vit-tiny", "layer", 1, 1);
    expect_backward(4, "vit-tiny", "layer", 1, 2);
    expect_backward(4, "vit-tiny", "block:3", 1, 0);
    expect_backward(4, "vit-tiny", "layer", 0, 1);
    expect_backward(4, "vit-tiny", "size:200000", 1, 1);
}

/* Collectives of any kind rank 0 ran in the optimizer phase of the first step. */
static int optimizer_phase_collectives(const EngineRun *r) {
    size_t n;
    TraceEvent *ev = engine_issued(r, 0, PHASE_OPTIMIZER, &n);
    int count = 0;
    for (size_t i = 0; i < n; i++) count += ev[i].kind >= EV_ALL_GATHER && ev[i].kind <= EV_BARRIER;
    free(ev);
    return count;
}

static void expect_optimizer(const char *model, Sharding sharding, int clip) {
    static const Strategy strategies[] = {STRAT_DDP, STRAT_ZERO1, STRAT_ZERO2, STRAT_ZERO3};
    FsdpConfig cfg = engine_config("layer", -1, 1); /* each strategy's own resharding */
    cfg.strategy = strategies[sharding];
    cfg.clip_grad_norm = clip ? 1.0f : 0.0f;
    EngineRun r;
    engine_run(&r, model, cfg);
    int want = optimizer_phase_collectives(&r);
    lesson_try("optimizer_collectives(%s, nunits=%d, clip_grad_norm=%d) for %s",
               strategy_name(cfg.strategy), r.plan.nunits, clip, model);
    int nunits = r.plan.nunits;
    int got = optimizer_collectives(sharding, nunits, clip);
    engine_run_free(&r);
    const char *why = NULL;
    if (sharding >= SHARDING_ZERO2 && got == want + nunits)
        why = "That is ZeRO-1's all-gather of the updated parameters after the step: under "
              "zero2 and zero3 parameters stay sharded until the next forward gathers them.";
    else if (sharding <= SHARDING_ZERO1 && clip && got == want + 1)
        why = "Under ddp and zero1 every GPU holds every gradient after backward's all-reduce: "
              "the global norm needs no collective.";
    expect_text_why(5, lesson_fmt("collectives=%d", want), lesson_fmt("collectives=%d", got), why);
}

Test(lesson06, t5_optimizer_step_is_local) {
    for (int s = SHARDING_ZERO3; s >= SHARDING_DDP; s--)
        for (int clip = 0; clip <= 1; clip++) expect_optimizer("toy", (Sharding)s, clip);
    expect_optimizer("vit-tiny", SHARDING_ZERO3, 0);
    expect_optimizer("vit-tiny", SHARDING_ZERO1, 0);
}
