/* The visualizer's frame model on real traces of the toy at 3 ranks: what each rank holds at a
 * given event, and memory replayed against the ranks' accounting. */
#include <criterion/criterion.h>
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "sim/viz/frame.h"
#include "sim/viz/plain.h"
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
        cr_expect_eq(f.peak[r], run.memory[r].on_gpu.peak, "rank %d peak %zu vs %zu", r, f.peak[r],
                     run.memory[r].on_gpu.peak);
    }
    toy_frame_free(&run, &f);
}

/* The toy's step on 3 GPUs under zero3 with --offload cpu, and a frame of it. */
static void offload_toy_frame(ToyRun *run, Frame *f) {
    FsdpConfig c = toy_config(STRAT_ZERO3, 4);
    c.offload = OFFLOAD_CPU;
    toy_frame(run, f, c, 3, 1);
}

/* Offload keeps the shards, their gradients and Adam's state on the host: a frame's GPU figures
 * are the GPU's own, as the memory table's, and what the host holds is said after them. */
Test(frame, offload_keeps_the_host_out_of_the_gpu_figures) {
    ToyRun run;
    Frame f;
    offload_toy_frame(&run, &f);
    frame_of(&f, &run, find(&run.trace, EV_FORWARD, 0, 1, PHASE_FORWARD));
    char text[128];
    for (int r = 0; r < 3; r++) {
        size_t host = frame_mem(&f, r, MEM_HOST_OFFLOAD), all = 0;
        for (int k = 0; k < MEM_CATEGORY_COUNT; k++) all += frame_mem(&f, r, (MemCategory)k);
        cr_assert_gt(host, 0, "GPU %d's shards rest on the host", r);
        cr_expect_eq(frame_gpu_bytes(&f, r), all - host, "GPU %d", r);
        cr_expect_eq(frame_mem(&f, r, MEM_PARAM_SHARD), 0, "GPU %d keeps no shard", r);
        plain_memory_text(&f, r, text, sizeof text);
        char want[64];
        snprintf(want, sizeof want, " + host %zu B", host);
        cr_expect(strstr(text, want) != NULL, "GPU %d: %s", r, text);
    }
    frame_of(&f, &run, run.trace.n - 1);
    for (int r = 0; r < 3; r++) {
        cr_expect_eq(f.peak[r], run.memory[r].on_gpu.peak, "GPU %d peak %zu vs %zu", r, f.peak[r],
                     run.memory[r].on_gpu.peak);
        cr_expect_lt(f.peak[r], run.memory[r].peak, "GPU %d: the host's bytes are not the GPU's",
                     r);
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
                     "Lc's parameters are freed already (FSDP2 reshards first: the reduce-scatter "
                     "needs only gradients); it runs while Lb's backward computes. ∂c₀ ∂c₁ ∂c₂ of "
                     "Lc are summed over the 3 GPUs and divided by 3: averaged, so the step equals "
                     "one GPU's on the global batch; GPU 2 keeps ∂c₂ (DDP all-reduces instead: "
                     "every GPU keeps all of them)",
                     "without each GPU's own values, the average in symbols");
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
    ToyRun run;
    Frame f;
    offload_toy_frame(&run, &f);
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

/* ---- the order of a unit's frees and its reduce-scatter, and the values around it */

/* A traced toy run at 3 ranks that keeps its values in the trace as fsdp viz records them: the
 * parameters, the averaged gradients and each GPU's own gradients before the average. */
static float local_grads[2 * 3 * 9];
static void toy_frame_with_values(ToyRun *run, Frame *f, FsdpConfig c, long steps) {
    toy_train_recording(run, &c, 3, steps, 1, local_grads);
    Err err = {0};
    cr_assert_eq(frame_init(f, &run->plan, &err), 0, "%s", err.msg);
    run->trace.params = run->step_params;
    run->trace.grads = run->step_grads;
    run->trace.local_grads = local_grads;
    run->trace.steps = (int)steps;
    run->trace.numel = 9;
}

static void toy_frame_with_values_free(ToyRun *run, Frame *f) {
    run->trace.params = run->trace.grads = run->trace.local_grads = NULL; /* not the trace's */
    toy_frame_free(run, f);
}

static const char *cell_text(const Frame *f, const ToyRun *run, int r, int u) {
    static char text[8][400];
    static int next;
    char *out = text[next++ % 8];
    size_t width = 0;
    plain_cell_text(f, &run->plan, r, u, &width, out, 400);
    return out;
}

/* The seed's order of the workshop (--seed-order: no prefetch, free_after_reduce): the frames
 * say it, and the default frames say FSDP2's: a unit's parameters are freed before its
 * reduce-scatter, which needs only the gradients and runs behind the next unit's backward. */
Test(frame, the_frees_and_the_reduce_scatter_say_whose_order) {
    ToyRun run;
    Frame f;
    toy_frame(&run, &f, toy_config(STRAT_ZERO3, 4), 3, 1);
    const Trace *t = &run.trace;
    frame_of(&f, &run, find_memory(t, EV_FREE, 1, 1, PHASE_BACKWARD, MEM_PARAM_UNSHARDED));
    cr_expect_str_eq(f.narration,
                     "GPU 1 frees Lb's unsharded parameters (12 B): its backward is done with "
                     "them, and FSDP2's post-backward reshards the unit before its reduce-scatter, "
                     "which needs only the gradients and runs later on the comm stream; the GPU "
                     "keeps only its shard");
    frame_of(&f, &run, find_memory(t, EV_FREE, 1, 1, PHASE_BACKWARD, MEM_GRAD_UNSHARDED));
    cr_expect(strstr(f.narration, "they are packed into the buffer its reduce-scatter sends, "
                                  "which runs later on the comm stream"),
              "%s", f.narration);
    frame_of(&f, &run, find(t, EV_REDUCE_SCATTER, 1, 1, PHASE_BACKWARD));
    cr_expect(strstr(f.narration, "Lb's parameters are freed already (FSDP2 reshards first") &&
                  strstr(f.narration, "it runs while La's backward computes"),
              "%s", f.narration);
    toy_frame_free(&run, &f);

    FsdpConfig seed = toy_config(STRAT_ZERO3, 4);
    seed.prefetch_forward = seed.prefetch_backward = 0;
    seed.free_after_reduce = 1;
    toy_frame(&run, &f, seed, 3, 1);
    t = &run.trace;
    frame_of(&f, &run, find_memory(t, EV_FREE, 1, 1, PHASE_BACKWARD, MEM_PARAM_UNSHARDED));
    cr_expect_str_eq(f.narration,
                     "GPU 1 frees Lb's unsharded parameters (12 B) after its reduce-scatter, in "
                     "the seed's order (--seed-order): backward, reduce-scatter, free; FSDP2 frees "
                     "them before it, so that it runs behind the next unit's backward. The GPU "
                     "keeps only its shard");
    frame_of(&f, &run, find_memory(t, EV_FREE, 1, 1, PHASE_BACKWARD, MEM_GRAD_UNSHARDED));
    cr_expect(strstr(f.narration, "its reduce-scatter has averaged them"), "%s", f.narration);
    frame_of(&f, &run, find(t, EV_REDUCE_SCATTER, 1, 1, PHASE_BACKWARD));
    cr_expect(strstr(f.narration, "In the seed's order the reduce-scatter comes before Lb's "
                                  "parameters are freed (FSDP2 frees them first). "),
              "%s", f.narration);
    cr_expect(!strstr(f.narration, "runs while"), "nothing computes beside it: %s", f.narration);
    toy_frame_free(&run, &f);
}

/* While a unit's gradients are unsharded each GPU's cell shows its own value of them, before
 * the average, once its backward has computed it: the element of its shard (what it keeps once
 * reduced), "⋯" for those it sends on, in the column's width (a toy's columns stay 22 wide, so
 * 80 columns hold all three units); freed into the reduce-scatter's send buffer (FSDP2's order)
 * they stay, "packed" once the parameters are freed too, until the reduce-scatter, whose
 * narration and flow show each GPU's value, their sum divided by 3, and what each GPU keeps. */
Test(frame, each_gpus_own_gradients_show_until_the_reduce_scatter) {
    ToyRun run;
    Frame f;
    toy_frame_with_values(&run, &f, toy_config(STRAT_ZERO3, 4), 1);
    const Trace *t = &run.trace;
    char want[400];
    const float *own = local_grads + 1 * 9 + 6; /* GPU 1's, c₀ c₁ c₂ */
    /* allocated but not computed yet: no value to show */
    size_t backward = find(t, EV_BACKWARD, 1, 2, PHASE_BACKWARD);
    frame_of(&f, &run, backward - 1);
    cr_expect(frame_cell(&f, 1, 2)->grads_full && !frame_cell(&f, 1, 2)->grads_computed);
    cr_expect_str_eq(cell_text(&f, &run, 1, 2),
                     fmt_text("c₁=%+.3f +c₀ c₂ +∂all", (double)run.step_params[7]));
    /* Lc's backward on GPU 1: its own ∂c₁, and more it sends */
    frame_of(&f, &run, backward);
    cr_expect_str_eq(cell_text(&f, &run, 1, 2), fmt_text("c₁ +c₀ c₂ ∂c₁=%+.3f⋯", (double)own[1]));
    cr_expect_eq(plain_cell_width(&f, &run.plan), 22, "the columns of the toy are as wide as ever");
    /* freed into the send buffer: still there, and packed once the parameters are freed too */
    frame_of(&f, &run, find_memory(t, EV_FREE, 1, 2, PHASE_BACKWARD, MEM_GRAD_UNSHARDED));
    cr_expect(frame_cell(&f, 1, 2)->grads_packed && frame_cell(&f, 1, 2)->gathered);
    cr_expect_str_eq(cell_text(&f, &run, 1, 2), fmt_text("c₁ +c₀ c₂ ∂c₁=%+.3f⋯", (double)own[1]),
                     "no room for \"packed\" beside the gathered parameters");
    frame_of(&f, &run, find_memory(t, EV_FREE, 1, 2, PHASE_BACKWARD, MEM_PARAM_UNSHARDED));
    cr_expect(frame_cell(&f, 1, 2)->grads_packed && !frame_cell(&f, 1, 2)->grads_full);
    snprintf(want, sizeof want, "c₁ packed ∂c₁=%+.3f⋯", (double)own[1]);
    cr_expect_str_eq(cell_text(&f, &run, 1, 2), want);
    /* GPU 1's reduce-scatter: each GPU's ∂c₁ summed and divided, GPU 1 keeps the average */
    size_t rs = find(t, EV_REDUCE_SCATTER, 1, 2, PHASE_BACKWARD);
    frame_of(&f, &run, rs);
    double sum = 0;
    for (int r = 0; r < 3; r++) sum += local_grads[r * 9 + 7];
    cr_expect_leq(fabs(sum / 3 - run.step_grads[7]), 1e-6);
    snprintf(want, sizeof want, "GPU 1 keeps ∂c₁=(%+.3f %+.3f %+.3f)/3=%+.3f",
             (double)local_grads[7], (double)local_grads[9 + 7], (double)local_grads[18 + 7],
             (double)run.step_grads[7]);
    cr_expect(strstr(f.narration, want), "'%s' in: %s", want, f.narration);
    cr_expect(strstr(f.flow, fmt_text("∂c₁=(%+.3f %+.3f %+.3f)/3=%+.3f to GPU 1",
                                      (double)local_grads[7], (double)local_grads[9 + 7],
                                      (double)local_grads[18 + 7], (double)run.step_grads[7])),
              "%s", f.flow);
    cr_expect_str_eq(
        cell_text(&f, &run, 1, 2),
        fmt_text("c₁=%+.3f ∂c₁=%+.3f", (double)run.step_params[7], (double)run.step_grads[7]),
        "reduced: the shard of the average");
    cr_expect(!frame_cell(&f, 1, 2)->grads_packed);
    /* GPU 2's has not run yet at GPU 1's: its gradients are still packed */
    if (find(t, EV_REDUCE_SCATTER, 2, 2, PHASE_BACKWARD) > rs)
        cr_expect(strstr(cell_text(&f, &run, 2, 2), "packed ∂c₂="), "%s",
                  cell_text(&f, &run, 2, 2));
    /* without each GPU's values (a trace from before them) the cell says +∂all, packed or not,
     * so that a ViT's columns stay as narrow as they were */
    run.trace.local_grads = NULL;
    frame_of(&f, &run, find(t, EV_BACKWARD, 1, 2, PHASE_BACKWARD));
    cr_expect(strstr(cell_text(&f, &run, 1, 2), " +∂all"), "%s", cell_text(&f, &run, 1, 2));
    frame_of(&f, &run, find_memory(t, EV_FREE, 1, 2, PHASE_BACKWARD, MEM_PARAM_UNSHARDED));
    cr_expect(frame_cell(&f, 1, 2)->grads_packed);
    cr_expect_str_eq(cell_text(&f, &run, 1, 2),
                     fmt_text("c₁=%+.3f +∂all", (double)run.step_params[7]));
    toy_frame_with_values_free(&run, &f);

    /* in the seed's order the gradients are freed after the reduce-scatter: never packed */
    FsdpConfig seed = toy_config(STRAT_ZERO3, 4);
    seed.prefetch_forward = seed.prefetch_backward = 0;
    seed.free_after_reduce = 1;
    toy_frame_with_values(&run, &f, seed, 1);
    for (size_t i = 0; i < run.trace.n; i++) {
        frame_of(&f, &run, i);
        for (int r = 0; r < 3; r++)
            for (int u = 0; u < 3; u++) cr_assert(!frame_cell(&f, r, u)->grads_packed);
    }
    cr_expect(!f.ever_packed);
    toy_frame_with_values_free(&run, &f);
}

/* A GPU shows a shard (its value, or its symbol) only once the shard is allocated on it: at
 * event 1 only GPU 0 has anything, La's shard, and every cell of a GPU whose memory reads 0 B
 * is "·"; a shard freed at the teardown goes back to "·". */
Test(frame, a_gpu_shows_a_shard_only_once_it_is_allocated) {
    ToyRun run;
    Frame f;
    toy_frame_with_values(&run, &f, toy_config(STRAT_ZERO3, 4), 1);
    frame_of(&f, &run, 0);
    cr_expect_str_eq(cell_text(&f, &run, 0, 0), fmt_text("a₀=%+.3f", (double)run.step_params[0]));
    cr_expect_str_eq(cell_text(&f, &run, 0, 1), "·", "Lb's shard is not allocated yet");
    for (int r = 1; r < 3; r++) {
        size_t bytes = 0;
        for (int c = 0; c < MEM_CATEGORY_COUNT; c++) bytes += frame_mem(&f, r, (MemCategory)c);
        cr_expect_eq(bytes, 0);
        for (int u = 0; u < 3; u++)
            cr_expect_str_eq(cell_text(&f, &run, r, u), "·", "GPU %d has 0 B: no value of unit %d",
                             r, u);
    }
    /* every event of the run: a cell shows a value exactly when its shard is allocated */
    for (size_t i = 0; i < run.trace.n; i++) {
        frame_of(&f, &run, i);
        for (int r = 0; r < 3; r++)
            for (int u = 0; u < 3; u++) {
                size_t held = 0;
                for (size_t j = 0; j <= i; j++) {
                    const TraceEvent *e = &run.trace.ev[j];
                    if (e->rank == r && e->unit == u && e->category == MEM_PARAM_SHARD)
                        held += e->kind == EV_ALLOC ? 1 : e->kind == EV_FREE ? (size_t)-1 : 0;
                }
                cr_assert_eq(frame_cell(&f, r, u)->resident, held != 0, "event %zu", i + 1);
                cr_assert_eq(strchr(cell_text(&f, &run, r, u), '=') != NULL, held != 0,
                             "event %zu, GPU %d, unit %d: '%s'", i + 1, r, u,
                             cell_text(&f, &run, r, u));
            }
    }
    toy_frame_with_values_free(&run, &f);
}

/* What a renderer reads of a frame is the same in a and b: every cell, each rank's bytes and
 * peak, the texts and the timeline. */
static void expect_same_frame(const Frame *a, const Frame *b, size_t index) {
    cr_assert_eq(a->index, b->index);
    for (int r = 0; r < a->nranks; r++) {
        for (int u = 0; u < a->nunits; u++)
            cr_assert(!memcmp(frame_cell(a, r, u), frame_cell(b, r, u), sizeof(FrameCell)),
                      "event %zu: rank %d unit %d differs", index, r, u);
        for (int c = 0; c < MEM_CATEGORY_COUNT; c++)
            cr_assert_eq(frame_mem(a, r, (MemCategory)c), frame_mem(b, r, (MemCategory)c),
                         "event %zu: rank %d %s", index, r, mem_category_name((MemCategory)c));
        cr_assert_eq(a->peak[r], b->peak[r], "event %zu: rank %d's peak", index, r);
        for (int s = 0; s < STREAM_COUNT; s++)
            cr_assert_str_eq(a->timeline[r * STREAM_COUNT + s], b->timeline[r * STREAM_COUNT + s],
                             "event %zu", index);
    }
    cr_assert_str_eq(a->header, b->header);
    cr_assert_str_eq(a->narration, b->narration, "event %zu", index);
    cr_assert_str_eq(a->flow, b->flow);
    cr_assert_str_eq(a->phases, b->phases, "event %zu", index);
    cr_assert_eq(a->cursor, b->cursor, "event %zu", index);
    cr_assert_eq(a->before, b->before);
}

/* A frame filled at one event after another carries its replay on; it must be the frame made
 * fresh at each, walking forward, jumping back and on, and with each rank at its own point. */
static void expect_carried_as_fresh(ToyRun *run) {
    Frame carried, fresh;
    Err err = {0};
    const Trace *t = &run->trace;
    cr_assert_eq(frame_init(&carried, &run->plan, &err), 0, "%s", err.msg);
    size_t jumps[] = {t->n - 1, 3, t->n / 2, t->n / 2, t->n / 3, t->n - 1, 0};
    for (size_t k = 0; k < t->n + sizeof jumps / sizeof *jumps; k++) {
        size_t i = k < t->n ? k : jumps[k - t->n];
        cr_assert_eq(frame_init(&fresh, &run->plan, &err), 0, "%s", err.msg);
        cr_assert_eq(frame_at(&carried, t, &run->plan, i, &err), 0, "%s", err.msg);
        cr_assert_eq(frame_at(&fresh, t, &run->plan, i, &err), 0, "%s", err.msg);
        expect_same_frame(&carried, &fresh, i);
        frame_free(&fresh);
    }
    /* each rank at its own point: rank r behind the others by r events of the trace */
    size_t ends[8];
    cr_assert_leq(run->plan.world, 8);
    for (size_t i = 0; i < t->n; i += 7) {
        for (int r = 0; r < run->plan.world; r++) ends[r] = i > (size_t)r ? i - (size_t)r : 0;
        cr_assert_eq(frame_init(&fresh, &run->plan, &err), 0, "%s", err.msg);
        cr_assert_eq(frame_at_points(&carried, t, &run->plan, i, ends, &err), 0, "%s", err.msg);
        cr_assert_eq(frame_at_points(&fresh, t, &run->plan, i, ends, &err), 0, "%s", err.msg);
        expect_same_frame(&carried, &fresh, i);
        frame_free(&fresh);
    }
    frame_free(&carried);
}

Test(frame, a_frame_carried_on_from_the_last_is_the_frame_made_fresh) {
    FsdpConfig c = toy_config(STRAT_ZERO3, 4);
    c.grad_accum = 2;
    ToyRun run;
    toy_train(&run, &c, 3, 2, 1);
    expect_carried_as_fresh(&run);
    toy_run_free(&run);
    FsdpConfig h = toy_config(STRAT_HSDP, 4);
    h.replicas = 2;
    toy_train(&run, &h, 4, 2, 1);
    expect_carried_as_fresh(&run);
    toy_run_free(&run);
    FsdpConfig seed = toy_config(STRAT_ZERO3, 4);
    seed.prefetch_forward = seed.prefetch_backward = 0;
    seed.free_after_reduce = 1;
    toy_train(&run, &seed, 3, 2, 1);
    expect_carried_as_fresh(&run);
    toy_run_free(&run);
}

/* The HTML page makes a frame at every event in order: that walks each event once, replays each
 * step's progress once and draws each step's timeline once (before, every frame replayed the
 * trace from its first event and painted its step from the whole trace). */
Test(frame, frames_at_every_event_in_order_walk_each_event_once) {
    FsdpConfig c = toy_config(STRAT_ZERO3, 4);
    ToyRun run;
    Frame f;
    toy_frame(&run, &f, c, 3, 3);
    const Trace *t = &run.trace;
    int steps = 0, seen[8] = {0};
    for (size_t i = 0; i < t->n; i++) {
        cr_assert(t->ev[i].step >= 0 && t->ev[i].step < 8);
        steps += !seen[t->ev[i].step];
        seen[t->ev[i].step] = 1;
        if (i) cr_assert_geq(t->ev[i].step, t->ev[i - 1].step, "the engine's steps come in order");
    }
    cr_assert_eq(steps, 3);
    for (size_t i = 0; i < t->n; i++) frame_of(&f, &run, i);
    cr_expect_eq(f.walked, t->n);
    cr_expect_leq(f.progress_replays, (size_t)steps);
    cr_expect_eq(f.timelines_drawn, (size_t)steps);
    /* going back starts over: the replay walks up to that event again */
    size_t before = f.walked;
    frame_of(&f, &run, 10);
    cr_expect_eq(f.walked - before, 11);
    toy_frame_free(&run, &f);
}
