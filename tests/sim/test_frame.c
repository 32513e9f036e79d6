/* The visualizer's frame model on real traces of the toy at 3 ranks: what each rank holds at a
 * given event, and memory replayed against the ranks' accounting. */
#include <criterion/criterion.h>
#include <string.h>

#include "sim/viz/frame.h"
#include "tests/util.h"

/* What each rank holds under zero3 (parameters freed after each unit's forward), zero2 (kept until
 * backward) and DDP (never gathered); memory replayed from the trace against the accounting the
 * ranks reported. */

enum { ANY_CATEGORY = -2 };

/* Index of the first event of `kind` on `rank` for `unit` in `phase` whose memory category is
 * `category` (ANY_CATEGORY: whatever it is). */
static size_t find_memory(const Trace *t, EventKind kind, int rank, int unit, Phase phase,
                          int category) {
    for (size_t i = 0; i < t->n; i++)
        if (t->ev[i].kind == (int)kind && t->ev[i].rank == rank && t->ev[i].unit == unit &&
            t->ev[i].phase == (int)phase &&
            (category == ANY_CATEGORY || t->ev[i].category == category))
            return i;
    cr_assert_fail("no %s (category %d) of unit %d on rank %d", event_kind_name(kind), category,
                   unit, rank);
    return 0;
}

/* Index of the first event of `kind` on `rank` for `unit`, in `phase`. */
static size_t find(const Trace *t, EventKind kind, int rank, int unit, Phase phase) {
    return find_memory(t, kind, rank, unit, phase, ANY_CATEGORY);
}

static void frame_of(Frame *f, const ToyRun *run, size_t index) {
    Err err = {0};
    cr_assert_eq(frame_at(f, &run->trace, &run->plan, index, &err), 0, "%s", err.msg);
    cr_assert_eq(f->index, index);
    cr_assert_eq(f->event, &run->trace.ev[index]);
}

/* A traced run of the toy under c at `ranks` ranks for `steps` steps, and a frame of its
 * plan; toy_frame_free frees both. */
static void toy_frame(ToyRun *run, Frame *f, FsdpConfig c, int ranks, long steps) {
    toy_train(run, &c, ranks, steps, 1);
    Err err = {0};
    cr_assert_eq(frame_init(f, &run->plan, &err), 0, "%s", err.msg);
}

static void toy_frame_free(ToyRun *run, Frame *f) {
    frame_free(f);
    toy_run_free(run);
}

static void check_strategy(Strategy s, int gathered_after_forward) {
    FsdpConfig c = toy_config(s, 4);
    ToyRun run;
    Frame f;
    toy_frame(&run, &f, c, 3, 1);
    int sharded = s != STRAT_DDP;
    /* during La's forward, every rank has La's parameters in full */
    frame_of(&f, &run, find(&run.trace, EV_FORWARD, 0, 0, PHASE_FORWARD));
    cr_expect_eq(frame_cell(&f, 0, 0)->gathered, sharded, "%s: La gathered", strategy_name(s));
    cr_expect_eq(frame_cell(&f, 0, 0)->kept, sharded ? 1 : 3, "GPU 0 keeps a0 (or all of La)");
    cr_expect_eq(frame_cell(&f, 0, 2)->gathered, 0, "Lc is not needed yet");
    /* during Lb's forward: zero3 has freed La again, zero2 keeps it for backward */
    frame_of(&f, &run, find(&run.trace, EV_FORWARD, 0, 1, PHASE_FORWARD));
    cr_expect_eq(frame_cell(&f, 0, 0)->gathered, gathered_after_forward, "%s: La after forward",
                 strategy_name(s));
    cr_expect_eq(frame_cell(&f, 0, 1)->gathered, sharded);
    /* Lc's backward writes full gradients that the reduce-scatter then shards */
    frame_of(&f, &run, find(&run.trace, EV_BACKWARD, 0, 2, PHASE_BACKWARD));
    cr_expect_eq(frame_cell(&f, 0, 2)->grads_full, sharded, "%s: Lc's unsharded grads",
                 strategy_name(s));
    cr_expect_eq(frame_cell(&f, 0, 2)->gathered, sharded);
    /* the shards at rest: after the engine is gone every byte has been freed, and the peak
     * replayed from the trace is the peak each rank accounted */
    frame_of(&f, &run, run.trace.n - 1);
    for (int r = 0; r < 3; r++) {
        for (int cat = 0; cat < MEM_CATEGORY_COUNT; cat++)
            cr_expect_eq(frame_mem(&f, r, (MemCategory)cat), 0, "rank %d %s", r,
                         mem_category_name((MemCategory)cat));
        cr_expect_eq(f.peak[r], run.memory[r].peak, "rank %d peak %zu vs %zu", r, f.peak[r],
                     run.memory[r].peak);
    }
    toy_frame_free(&run, &f);
}

Test(frame, zero3_frees_each_unit_after_its_forward) {
    check_strategy(STRAT_ZERO3, 0);
}

Test(frame, zero2_keeps_units_gathered_until_backward) {
    check_strategy(STRAT_ZERO2, 1);
}

Test(frame, ddp_never_gathers) {
    check_strategy(STRAT_DDP, 0);
}

Test(frame, memory_at_an_event_matches_a_plain_replay) {
    ToyRun run;
    Frame f;
    toy_frame(&run, &f, toy_config(STRAT_ZERO3, 4), 3, 2);
    size_t mid = run.trace.n / 2;
    frame_of(&f, &run, mid);
    /* mem_total on each alloc/free is the rank's total right after it: the frame's sum over
     * categories must agree with the last such figure of every rank */
    for (int r = 0; r < 3; r++) {
        unsigned long long want = 0;
        for (size_t i = 0; i <= mid; i++)
            if (run.trace.ev[i].rank == r &&
                (run.trace.ev[i].kind == EV_ALLOC || run.trace.ev[i].kind == EV_FREE))
                want = run.trace.ev[i].mem_total;
        size_t got = 0;
        for (int cat = 0; cat < MEM_CATEGORY_COUNT; cat++)
            got += frame_mem(&f, r, (MemCategory)cat);
        cr_expect_eq(got, want, "rank %d at event %zu", r, mid);
    }
    Err err = {0};
    cr_expect_neq(frame_at(&f, &run.trace, &run.plan, run.trace.n, &err), 0, "past the end");
    toy_frame_free(&run, &f);
}

/* frame_at_points: each rank at its own point. Every rank's ends one past the event is
 * frame_at; a rank whose end is 0 holds nothing and has gathered nothing, whatever the others
 * have done, and one whose end lies past the event has run its events up to there. */
Test(frame, at_points_puts_each_rank_where_it_is_told) {
    ToyRun run;
    Frame f, g;
    toy_frame(&run, &f, toy_config(STRAT_ZERO3, 4), 3, 1);
    Err err = {0};
    cr_assert_eq(frame_init(&g, &run.plan, &err), 0);
    size_t at = find(&run.trace, EV_FORWARD, 0, 0, PHASE_FORWARD);
    size_t ends[3] = {at + 1, at + 1, at + 1};
    frame_of(&f, &run, at);
    cr_assert_eq(frame_at_points(&g, &run.trace, &run.plan, at, ends, &err), 0, "%s", err.msg);
    for (int r = 0; r < 3; r++) {
        for (int c = 0; c < MEM_CATEGORY_COUNT; c++)
            cr_expect_eq(frame_mem(&g, r, (MemCategory)c), frame_mem(&f, r, (MemCategory)c));
        cr_expect_eq(g.peak[r], f.peak[r]);
    }
    cr_expect_str_eq(g.narration, f.narration);
    size_t later = find(&run.trace, EV_FORWARD, 2, 1, PHASE_FORWARD);
    ends[1] = 0;
    ends[2] = later + 1;
    cr_assert_eq(frame_at_points(&g, &run.trace, &run.plan, at, ends, &err), 0, "%s", err.msg);
    for (int c = 0; c < MEM_CATEGORY_COUNT; c++)
        cr_expect_eq(frame_mem(&g, 1, (MemCategory)c), 0, "GPU 1 has run nothing");
    cr_expect_eq(frame_cell(&g, 1, 0)->gathered, 0);
    cr_expect_eq(frame_cell(&g, 2, 1)->gathered, 1, "GPU 2 at Lb's forward holds Lb gathered");
    cr_expect_eq(frame_cell(&g, 0, 0)->gathered, 1, "GPU 0 as before, at La's forward");
    cr_expect_eq(frame_cell(&g, 0, 1)->gathered, 0);
    frame_free(&g);
    toy_frame_free(&run, &f);
}

/* The narration in the workshop's words, for the toy. */
Test(frame, narration_names_who_sends_what) {
    ToyRun run;
    Frame f;
    toy_frame(&run, &f, toy_config(STRAT_ZERO3, 4), 3, 1);
    frame_of(&f, &run, find(&run.trace, EV_ALL_GATHER, 0, 0, PHASE_FORWARD));
    cr_expect_str_eq(f.narration,
                     "GPU 0 needs a₀ a₁ a₂ for La, has a₀, gathers a₁ from GPU 1 and a₂ from GPU "
                     "2 (DDP keeps all of La on every GPU and gathers nothing)");
    cr_expect_str_eq(f.flow, "a₀ from GPU 0, a₁ from GPU 1 and a₂ from GPU 2 -> every GPU has "
                             "a₀ a₁ a₂");
    frame_of(&f, &run, find(&run.trace, EV_REDUCE_SCATTER, 2, 2, PHASE_BACKWARD));
    cr_expect_str_eq(f.narration,
                     "∂c₀ ∂c₁ ∂c₂ of Lc are summed over the 3 GPUs and divided by 3: averaged, so "
                     "the step equals one GPU's on the global batch; GPU 2 keeps ∂c₂ (DDP "
                     "all-reduces instead: every GPU keeps all of them)");
    cr_expect_str_eq(f.flow, "∂c₀ ∂c₁ ∂c₂ summed over GPUs 0-2 and averaged; GPU 0 keeps ∂c₀, "
                             "GPU 1 ∂c₁, GPU 2 ∂c₂");
    frame_of(&f, &run, find(&run.trace, EV_FORWARD, 1, 1, PHASE_FORWARD));
    cr_expect_str_eq(f.flow, "", "compute is not a collective");
    toy_frame_free(&run, &f);
    /* at 4 ranks GPU 3's shards are empty: it receives everything and keeps nothing */
    toy_frame(&run, &f, toy_config(STRAT_ZERO3, 4), 4, 1);
    frame_of(&f, &run, find(&run.trace, EV_ALL_GATHER, 3, 1, PHASE_FORWARD));
    cr_expect_str_eq(f.narration,
                     "Prefetch: Lb's all-gather is issued ahead, before Lb's forward needs it, so "
                     "it runs while La's forward computes. GPU 3 needs b₀ b₁ b₂ for Lb, has none "
                     "of them, gathers b₀ from GPU 0, b₁ from GPU 1 and b₂ from GPU 2 (DDP keeps "
                     "all of Lb on every GPU and gathers nothing)");
    cr_expect_str_eq(f.flow,
                     "b₀ from GPU 0, b₁ from GPU 1 and b₂ from GPU 2 -> every GPU has "
                     "b₀ b₁ b₂",
                     "GPU 3 sends nothing: its shard is empty");
    frame_of(&f, &run, find(&run.trace, EV_REDUCE_SCATTER, 3, 0, PHASE_BACKWARD));
    cr_expect(strstr(f.narration, "summed over the 4 GPUs and divided by 4: averaged") &&
                  strstr(f.narration, "GPU 3 keeps nothing (its shard is empty)"),
              "%s", f.narration);
    toy_frame_free(&run, &f);
}

/* The step's timeline: the current all-gather sits on the comm row under the cursor, compute
 * runs elsewhere, and only offload puts copies on the copy stream. */
Test(frame, timeline_marks_streams_and_the_current_event) {
    FsdpConfig c = toy_config(STRAT_ZERO3, 4);
    c.offload = OFFLOAD_CPU;
    ToyRun run;
    Frame f;
    toy_frame(&run, &f, c, 3, 1);
    frame_of(&f, &run, find(&run.trace, EV_ALL_GATHER, 1, 1, PHASE_FORWARD));
    const char *comm = f.timeline[1 * STREAM_COUNT + STREAM_COMM];
    const char *compute = f.timeline[1 * STREAM_COUNT + STREAM_COMPUTE];
    const char *copy = f.timeline[1 * STREAM_COUNT + STREAM_COPY];
    cr_expect_eq(comm[f.cursor], '=', "the gather is on the comm stream: %s", comm);
    cr_expect_neq(strchr(compute, '#'), NULL, "%s", compute);
    cr_expect_neq(strchr(copy, '~'), NULL, "offload copies shards to and from the host: %s", copy);
    cr_expect_eq(strlen(comm), FRAME_TIMELINE_COLS);
    cr_expect_gt(f.step_end, f.step_start);
    toy_frame_free(&run, &f);
}

/* The timeline at any width a renderer asks for (clamped to 8..FRAME_TIMELINE_MAX), kept by the
 * next frame_at: rows of that many columns, and the phases' row runs forward, backward, then
 * optimizer, with the cursor of a backward compute in backward. */
Test(frame, timeline_spans_the_width_asked_for_with_the_phases) {
    ToyRun run;
    Frame f;
    toy_frame(&run, &f, toy_config(STRAT_ZERO3, 4), 3, 1);
    size_t at = find(&run.trace, EV_BACKWARD, 0, 1, PHASE_BACKWARD);
    frame_of(&f, &run, at);
    frame_timeline(&f, &run.trace, 100);
    cr_expect_eq(strlen(f.timeline[STREAM_COMPUTE]), 100);
    cr_expect_eq(strlen(f.phases), 100);
    char runs[16] = "";
    for (int c = 0, n = 0; c < 100 && n < 15; c++)
        if (!c || f.phases[c] != f.phases[c - 1]) runs[n++] = f.phases[c];
    cr_expect_str_eq(runs, "fbo", "the phases' order: %s", f.phases);
    cr_expect_eq(f.phases[f.cursor], 'b', "Lb's backward in backward: %s", f.phases);
    cr_expect_eq(f.timeline[STREAM_COMPUTE][f.cursor], '#');
    frame_of(&f, &run, at + 1);
    cr_expect_eq(strlen(f.timeline[2 * STREAM_COUNT + STREAM_COMM]), 100, "frame_at keeps it");
    frame_timeline(&f, &run.trace, 3);
    cr_expect_eq(f.timeline_cols, 8);
    frame_timeline(&f, &run.trace, 100000);
    cr_expect_eq(f.timeline_cols, FRAME_TIMELINE_MAX);
    cr_expect_eq(strlen(f.phases), FRAME_TIMELINE_MAX);
    toy_frame_free(&run, &f);
}

/* With the step's values in the trace, a rank's parameters are the step's starting values
 * until it steps Adam on the unit and the result after, each rank on its own schedule, and
 * its gradients count as reduced from its reduce-scatter of the unit on. */
Test(frame, values_follow_each_ranks_progress_through_the_step) {
    ToyRun run;
    Frame f;
    toy_frame(&run, &f, toy_config(STRAT_ZERO3, 4), 3, 2);
    Trace *t = &run.trace;
    t->params = run.step_params;
    t->grads = run.step_grads;
    t->steps = 2;
    t->numel = 9;
    /* step 2 (index 1): rank 0 has just stepped Adam on La, rank 1 has not yet */
    size_t adam = 0;
    for (size_t i = 0; i < t->n; i++)
        if (t->ev[i].kind == EV_OPTIMIZER && t->ev[i].rank == 0 && t->ev[i].unit == 0 &&
            t->ev[i].step == 1)
            adam = i;
    cr_assert_gt(adam, 0);
    frame_of(&f, &run, adam);
    cr_expect_eq(f.before, run.step_params + 9, "step 2 starts from the values after step 1");
    cr_expect_eq(f.after, run.step_params + 18);
    cr_expect_eq(f.grads, run.step_grads + 9);
    cr_expect_eq(frame_values(&f, 0, 0), f.after, "rank 0 has stepped La");
    cr_expect_eq(frame_values(&f, 1, 0), f.before, "rank 1 has not yet");
    cr_expect_eq(frame_values(&f, 0, 1), f.before, "nor has rank 0 stepped Lb");
    cr_expect(frame_cell(&f, 1, 0)->reduced && frame_cell(&f, 0, 2)->reduced,
              "every reduce-scatter of the step came before the optimizer");
    /* before the step's first reduce-scatter nothing is reduced, and nothing at all is
     * stepped at its first forward */
    frame_of(&f, &run, find(t, EV_FORWARD, 0, 0, PHASE_FORWARD));
    cr_expect_eq(f.before, run.step_params, "step 1 starts from the initial values");
    for (int r = 0; r < 3; r++)
        for (int u = 0; u < 3; u++) {
            cr_expect(!frame_cell(&f, r, u)->reduced && !frame_cell(&f, r, u)->stepped);
            cr_expect_eq(frame_values(&f, r, u), f.before);
        }
    t->params = t->grads = NULL; /* the run owns them */
    toy_frame_free(&run, &f);
}

/* The narration says why: a prefetch names itself and what it overlaps; zero3's free after
 * forward is reshard_after_forward; in backward the unit is gathered again because of it; under
 * zero2 the units stay gathered after forward, and why; the first gather is no prefetch. */
Test(frame, narration_says_prefetch_and_reshard) {
    ToyRun run;
    Frame f;
    toy_frame(&run, &f, toy_config(STRAT_ZERO3, 4), 3, 1);
    frame_of(&f, &run, find(&run.trace, EV_ALL_GATHER, 0, 0, PHASE_FORWARD));
    cr_expect(!strstr(f.narration, "refetch"), "La's forward gather is on demand: %s", f.narration);
    frame_of(&f, &run, find(&run.trace, EV_ALL_GATHER, 1, 2, PHASE_FORWARD));
    cr_expect(strstr(f.narration, "Prefetch: Lc's all-gather is issued ahead, before Lc's forward "
                                  "needs it, so it runs while Lb's forward computes."),
              "%s", f.narration);
    frame_of(&f, &run, find_memory(&run.trace, EV_FREE, 0, 0, PHASE_FORWARD, MEM_PARAM_UNSHARDED));
    cr_expect_str_eq(f.narration,
                     "GPU 0 frees La's unsharded parameters (12 B) right after its forward: "
                     "reshard_after_forward keeps only its shard until backward gathers La again "
                     "(DDP keeps them all)");
    frame_of(&f, &run, find(&run.trace, EV_ALL_GATHER, 0, 2, PHASE_BACKWARD));
    cr_expect(strstr(f.narration, "Lc was resharded after forward, so backward gathers it again"),
              "%s", f.narration);
    frame_of(&f, &run, find(&run.trace, EV_FORWARD, 0, 0, PHASE_FORWARD));
    cr_expect_str_eq(f.narration, "GPU 0 runs La's forward", "zero3 says it at the free");
    toy_frame_free(&run, &f);

    toy_frame(&run, &f, toy_config(STRAT_ZERO2, 4), 3, 1);
    frame_of(&f, &run, find(&run.trace, EV_FORWARD, 2, 1, PHASE_FORWARD));
    cr_expect_str_eq(f.narration,
                     "GPU 2 runs Lb's forward; Lb stays gathered after forward "
                     "(reshard_after_forward=false, as zero2 does): backward uses it without a "
                     "second all-gather, at the cost of holding it until then");
    toy_frame_free(&run, &f);
}

/* Every all-gather in either pass comes before the allocation its unit's unsharded
 * parameters are unpacked into (one order for a gather and its buffer), and that allocation
 * before the unit's compute. */
Test(frame, a_gather_comes_before_its_buffer_in_both_passes) {
    ToyRun run;
    static const Strategy strategies[] = {STRAT_ZERO3, STRAT_ZERO2};
    for (int s = 0; s < 2; s++) {
        FsdpConfig c = toy_config(strategies[s], 4);
        toy_train(&run, &c, 3, 1, 1);
        const Trace *t = &run.trace;
        size_t gathers = 0;
        for (size_t i = 0; i < t->n; i++) {
            const TraceEvent *g = &t->ev[i];
            /* (after the step the harness gathers the parameters to read them: no unit's) */
            if (g->kind != EV_ALL_GATHER || g->phase == PHASE_NONE) continue;
            gathers++;
            size_t alloc = t->n, compute = t->n;
            for (size_t j = 0; j < t->n; j++) {
                const TraceEvent *e = &t->ev[j];
                if (e->rank != g->rank || e->unit != g->unit || e->phase != g->phase) continue;
                if (alloc == t->n && e->kind == EV_ALLOC && e->category == MEM_PARAM_UNSHARDED)
                    alloc = j;
                if (compute == t->n && (e->kind == EV_FORWARD || e->kind == EV_BACKWARD))
                    compute = j;
            }
            cr_expect(alloc < t->n && alloc > i && alloc < compute,
                      "%s: GPU %d's %s all-gather of unit %d is event %zu, its buffer's "
                      "allocation %zu, its compute %zu",
                      strategy_name(strategies[s]), g->rank, phase_name((Phase)g->phase), g->unit,
                      i + 1, alloc + 1, compute + 1);
        }
        cr_expect_geq(gathers, 9, "%s: the toy's gathers", strategy_name(strategies[s]));
        toy_run_free(&run);
    }
}

/* The header names the phase as a person reads it: the allocations before the first forward
 * are the setup of step 1, the frees after the last optimizer its teardown (not "step 2"). */
Test(frame, header_says_setup_and_teardown) {
    ToyRun run;
    Frame f;
    toy_frame(&run, &f, toy_config(STRAT_ZERO3, 4), 3, 1);
    frame_of(&f, &run, 0);
    cr_expect_str_eq(f.header,
                     fmt_text("event 1 of %zu | step 1 | setup | GPU 0 | alloc La", run.trace.n));
    frame_of(&f, &run, run.trace.n - 1);
    cr_expect_str_eq(f.phase, "teardown");
    cr_expect_eq(f.event->step, 0, "the teardown of the run's only step");
    frame_of(&f, &run, find(&run.trace, EV_ALL_GATHER, 0, 0, PHASE_FORWARD));
    cr_expect_str_eq(f.header,
                     fmt_text("event %zu of %zu | step 1 | forward | GPU 0 | all_gather La",
                              f.index + 1, run.trace.n));
    toy_frame_free(&run, &f);
}

/* An event of the step far from its spans (a replayed file may say anything finite): the
 * cursor stays on the timeline, computed without casting 1e46 to an int (fuzz_trace found it;
 * the sanitizer build holds the cast). */
Test(frame, an_event_far_from_its_step_keeps_the_cursor_on_the_timeline) {
    ToyRun run;
    Frame f;
    toy_frame(&run, &f, toy_config(STRAT_ZERO3, 4), 3, 1);
    size_t i = find(&run.trace, EV_ALLOC, 0, 0, PHASE_FORWARD);
    run.trace.ev[i].start = run.trace.ev[i].end = 7.65e46;
    frame_of(&f, &run, i);
    cr_expect_eq(f.cursor, FRAME_TIMELINE_COLS - 1);
    run.trace.ev[i].start = run.trace.ev[i].end = -7.65e46;
    frame_of(&f, &run, i);
    cr_expect_eq(f.cursor, 0);
    toy_frame_free(&run, &f);
}

/* Mixed precision says what it keeps in which dtype: under --param-dtype bf16 a unit's gathered
 * parameters and its activations are 16-bit and the shard stays the fp32 master; fp32 runs say
 * nothing of it. */
Test(frame, narration_says_what_bf16_keeps_in_16_bits) {
    for (int bf16 = 0; bf16 <= 1; bf16++) {
        FsdpConfig c = toy_config(STRAT_ZERO3, 4);
        c.param_dtype = bf16 ? DTYPE_BF16 : DTYPE_FP32;
        ToyRun run;
        Frame f;
        toy_frame(&run, &f, c, 3, 1);
        frame_of(&f, &run,
                 find_memory(&run.trace, EV_ALLOC, 0, 1, PHASE_FORWARD, MEM_PARAM_UNSHARDED));
        cr_expect_eq(f.compute_bytes, bf16 ? 2 : 4);
        cr_expect_eq(strstr(f.narration,
                            "in 16 bits (--param-dtype): mixed precision gathers and "
                            "computes in it, while the fp32 shard stays the master") != NULL,
                     bf16, "%s", f.narration);
        size_t act = 0; /* the first activations rank 0 takes, whichever unit they count to */
        while (act < run.trace.n &&
               !(run.trace.ev[act].kind == EV_ALLOC &&
                 run.trace.ev[act].category == MEM_ACTIVATIONS && run.trace.ev[act].rank == 0))
            act++;
        cr_assert_lt(act, run.trace.n);
        frame_of(&f, &run, act);
        cr_expect_eq(strstr(f.narration, "in 16 bits as the unit computes") != NULL, bf16, "%s",
                     f.narration);
        toy_frame_free(&run, &f);
    }
}
