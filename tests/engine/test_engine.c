/* The engine's invariants on the toy: every strategy equals one rank on the global batch,
 * runs are bit-identical, memory at rest is the plan's formula, accumulation equals a big
 * batch, and fp16 loss scaling skips an overflowing step. */
#include <criterion/criterion.h>
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "models/toy.h"
#include "tests/util.h"

#define STEPS 20
#define BATCH 4

/* One rank on the global batch (ranks x BATCH): the reference every strategy must meet. */
static void reference(ToyRun *ref, int ranks, int grad_accum) {
    FsdpConfig c = toy_config(STRAT_ZERO3, BATCH * ranks);
    c.grad_accum = grad_accum;
    toy_train(ref, &c, 1, STEPS, 0);
}

static void check_equals_one_rank(FsdpConfig c, int ranks) {
    ToyRun ref, run;
    reference(&ref, ranks, c.grad_accum);
    c.batch_size = BATCH;
    toy_train(&run, &c, ranks, STEPS, 0);
    double d = rel_l2(run.params, ref.params, 9);
    cr_expect_leq(d, 1e-5, "%s at %d ranks (replicas %d, reshard %d): rel L2 %.3g",
                  strategy_name(c.strategy), ranks, c.replicas, c.reshard_after_forward, d);
    /* and it must have trained: the parameters moved away from the start */
    ToyRun init;
    FsdpConfig c0 = toy_config(STRAT_ZERO3, BATCH);
    toy_train(&init, &c0, 1, 0, 0);
    cr_expect_gt(rel_l2(run.params, init.params, 9), 1e-2);
    toy_run_free(&ref);
    toy_run_free(&run);
    toy_run_free(&init);
}

Test(engine, every_strategy_equals_one_rank_on_the_global_batch) {
    Strategy all[] = {STRAT_DDP, STRAT_ZERO1, STRAT_ZERO2, STRAT_ZERO3};
    for (int s = 0; s < 4; s++)
        for (int ranks = 1; ranks <= 5; ranks++)
            check_equals_one_rank(toy_config(all[s], BATCH), ranks);
}

Test(engine, hsdp_equals_one_rank) {
    int cases[][2] = {{2, 2}, {4, 2}, {4, 4}, {3, 3}, {5, 1}, {4, 1}};
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        FsdpConfig c = toy_config(STRAT_HSDP, BATCH);
        c.replicas = cases[i][1];
        check_equals_one_rank(c, cases[i][0]);
    }
}

Test(engine, knobs_do_not_change_the_math) {
    const char *wraps[] = {"layer", "none", "block:2", "size:4"};
    for (int w = 0; w < 4; w++)
        for (int reshard = 0; reshard <= 1; reshard++)
            for (int pf = 0; pf <= 2; pf += 2) {
                FsdpConfig c = toy_config(STRAT_ZERO3, BATCH);
                cr_assert_eq(wrap_parse(wraps[w], &c.wrap), 0);
                c.reshard_after_forward = reshard;
                c.prefetch_forward = c.prefetch_backward = pf;
                check_equals_one_rank(c, 4);
            }
    FsdpConfig off = toy_config(STRAT_ZERO3, BATCH);
    off.offload = OFFLOAD_CPU;
    check_equals_one_rank(off, 3);
    off.offload = OFFLOAD_OPTIMIZER;
    check_equals_one_rank(off, 3);
    FsdpConfig clip = toy_config(STRAT_ZERO2, BATCH);
    clip.clip_grad_norm = 0.1f;
    FsdpConfig clip1 = clip;
    ToyRun a, b;
    clip1.batch_size = BATCH * 3;
    toy_train(&a, &clip, 3, STEPS, 0);
    toy_train(&b, &clip1, 1, STEPS, 0);
    cr_expect_leq(rel_l2(a.params, b.params, 9), 1e-5);
    cr_expect_gt(a.steps[0].stats.grad_norm, 0.1f, "the first step must have been clipped");
    toy_run_free(&a);
    toy_run_free(&b);
}

/* Every field of two events equal (their padding bytes may differ: an event copied by value
 * need not carry them). */
static int same_event(const TraceEvent *a, const TraceEvent *b) {
    _Static_assert(sizeof(TraceEvent) == 80, "TraceEvent changed: compare its new fields here");
    return !memcmp(&a->start, &b->start, sizeof a->start) &&
           !memcmp(&a->end, &b->end, sizeof a->end) && a->seq == b->seq && a->bytes == b->bytes &&
           a->mem_total == b->mem_total && a->rank == b->rank && a->kind == b->kind &&
           a->unit == b->unit && a->stream == b->stream && a->category == b->category &&
           a->phase == b->phase && a->step == b->step && a->micro == b->micro &&
           a->peers == b->peers && a->flags == b->flags;
}

Test(engine, the_same_command_gives_identical_bits) {
    FsdpConfig c = toy_config(STRAT_ZERO3, BATCH);
    c.param_dtype = DTYPE_BF16;
    ToyRun a, b;
    toy_train(&a, &c, 3, STEPS, 1);
    toy_train(&b, &c, 3, STEPS, 1);
    cr_assert_eq(memcmp(a.params, b.params, sizeof a.params), 0);
    cr_assert_gt(a.trace.n, 100);
    cr_assert_eq(a.trace.n, b.trace.n);
    for (size_t i = 0; i < a.trace.n; i++)
        cr_assert(same_event(&a.trace.ev[i], &b.trace.ev[i]), "event %zu differs", i);
    toy_run_free(&a);
    toy_run_free(&b);
}

static void check_rest_bytes(FsdpConfig c, int ranks) {
    ToyRun run;
    toy_train(&run, &c, ranks, 3, 0);
    for (int r = 0; r < ranks; r++) {
        RestBytes want = plan_rest_bytes(&run.plan, r, c.offload);
        const size_t *got = run.memory[r].rest;
        cr_expect_eq(got[MEM_PARAM_SHARD], want.param, "%s rank %d/%d params",
                     strategy_name(c.strategy), r, ranks);
        cr_expect_eq(got[MEM_GRAD_SHARD], want.grad, "%s rank %d/%d grads",
                     strategy_name(c.strategy), r, ranks);
        cr_expect_eq(got[MEM_OPTIM_STATE], want.optim, "%s rank %d/%d optim",
                     strategy_name(c.strategy), r, ranks);
        cr_expect_eq(got[MEM_HOST_OFFLOAD], want.host);
        cr_expect_eq(got[MEM_NVME], want.nvme);
        size_t transient = got[MEM_PARAM_UNSHARDED] + got[MEM_GRAD_UNSHARDED] +
                           got[MEM_ACTIVATIONS] + got[MEM_COMM_BUFFER];
        cr_expect_eq(transient, 0, "nothing transient survives a step");
    }
    toy_run_free(&run);
}

Test(engine, memory_at_rest_is_the_plan_formula) {
    for (int s = 0; s < STRAT_COUNT; s++)
        for (int ranks = 1; ranks <= 5; ranks++) {
            FsdpConfig c = toy_config((Strategy)s, BATCH);
            if (s == STRAT_HSDP) c.replicas = ranks % 2 == 0 ? 2 : 1;
            check_rest_bytes(c, ranks);
        }
    FsdpConfig off = toy_config(STRAT_ZERO3, BATCH);
    off.offload = OFFLOAD_CPU;
    check_rest_bytes(off, 3);
    off.offload = OFFLOAD_OPTIMIZER;
    check_rest_bytes(off, 3);
    off.strategy = STRAT_DDP;
    check_rest_bytes(off, 2);
    off.strategy = STRAT_ZERO3;
    off.offload = OFFLOAD_NVME;
    off.nvme_dir = "/tmp";
    check_rest_bytes(off, 3);
}

Test(engine, formula_values_by_hand) {
    /* zero3 at 3 ranks: one scalar of each of La, Lb, Lc; at 4 ranks GPU 3 owns nothing */
    ToyRun z3, z4, ddp;
    FsdpConfig c = toy_config(STRAT_ZERO3, BATCH);
    toy_train(&z3, &c, 3, 1, 0);
    toy_train(&z4, &c, 4, 1, 0);
    FsdpConfig d = toy_config(STRAT_DDP, BATCH);
    toy_train(&ddp, &d, 3, 1, 0);
    for (int r = 0; r < 3; r++) {
        cr_expect_eq(z3.memory[r].rest[MEM_PARAM_SHARD], 3 * 4);
        cr_expect_eq(z3.memory[r].rest[MEM_GRAD_SHARD], 3 * 4);
        cr_expect_eq(z3.memory[r].rest[MEM_OPTIM_STATE], 3 * 8);
        cr_expect_eq(ddp.memory[r].rest[MEM_PARAM_SHARD], 9 * 4);
        cr_expect_eq(ddp.memory[r].rest[MEM_OPTIM_STATE], 9 * 8);
        cr_expect_eq(z4.memory[r].rest[MEM_PARAM_SHARD], 3 * 4);
    }
    cr_expect_eq(z4.memory[3].rest[MEM_PARAM_SHARD], 0);
    cr_expect_eq(z4.memory[3].rest[MEM_OPTIM_STATE], 0);
    /* a gathered unit is at the peak: zero3 peaks above its rest, DDP holds more at rest */
    cr_expect_gt(z3.memory[0].peak, 48);
    cr_expect_gt(z3.memory[0].at_peak[MEM_PARAM_UNSHARDED], 0);
    toy_run_free(&z3);
    toy_run_free(&z4);
    toy_run_free(&ddp);
}

Test(engine, grad_accumulation_equals_one_big_step) {
    for (int ranks = 1; ranks <= 3; ranks++) {
        Strategy ss[] = {STRAT_ZERO3, STRAT_DDP, STRAT_ZERO2};
        for (int s = 0; s < 3; s++) {
            FsdpConfig acc = toy_config(ss[s], 2);
            acc.grad_accum = 4;
            FsdpConfig big = toy_config(ss[s], 8);
            ToyRun a, b;
            toy_train(&a, &acc, ranks, STEPS, 0);
            toy_train(&b, &big, ranks, STEPS, 0);
            double d = rel_l2(a.params, b.params, 9);
            cr_expect_leq(d, 1e-5, "%s at %d ranks: %.3g", strategy_name(ss[s]), ranks, d);
            toy_run_free(&a);
            toy_run_free(&b);
        }
    }
}

Test(engine, gathered_params_match_the_initializer_at_every_world_size) {
    /* all-gather of uneven and empty shards against a plain loop over the initializer */
    FsdpConfig c = toy_config(STRAT_ZERO3, BATCH);
    for (int ranks = 1; ranks <= 5; ranks++) {
        ToyRun run;
        toy_train(&run, &c, ranks, 0, 0);
        for (int p = 0; p < 3; p++)
            for (int i = 0; i < 3; i++)
                cr_expect_eq(run.params[p * 3 + i],
                             param_init_value(&run.model.params[p], c.seed, (size_t)i),
                             "ranks %d param %d elem %d", ranks, p, i);
        toy_run_free(&run);
    }
}

Test(engine, fp16_loss_scaling_skips_an_overflowing_step) {
    /* the toy's gradients times the initial scale 65536 overflow fp16 on the wire */
    FsdpConfig c = toy_config(STRAT_ZERO3, BATCH);
    c.reduce_dtype = DTYPE_FP16;
    ToyRun run, init;
    toy_train(&init, &c, 2, 0, 0);
    toy_train(&run, &c, 2, 1, 0);
    cr_assert_eq(run.nsteps, 1);
    cr_expect_eq(run.steps[0].stats.skipped, 1);
    cr_expect_eq(memcmp(run.params, init.params, 9 * sizeof(float)), 0,
                 "a skipped step changes nothing");
    ToyRun longer;
    toy_train(&longer, &c, 2, STEPS, 0);
    cr_expect_eq(longer.steps[1].stats.loss_scale, 32768.0f, "the scale halves after a skip");
    int applied = 0;
    for (int i = 0; i < longer.nsteps; i++) applied += !longer.steps[i].stats.skipped;
    cr_expect_gt(applied, STEPS / 2);
    cr_expect_lt(longer.steps[STEPS - 1].stats.loss, longer.steps[0].stats.loss);
    toy_run_free(&run);
    toy_run_free(&init);
    toy_run_free(&longer);
}

Test(engine, bf16_params_train_close_to_fp32) {
    FsdpConfig c = toy_config(STRAT_ZERO3, BATCH);
    FsdpConfig lo = c;
    lo.param_dtype = DTYPE_BF16;
    lo.reduce_dtype = DTYPE_BF16;
    ToyRun a, b;
    toy_train(&a, &c, 3, STEPS, 0);
    toy_train(&b, &lo, 3, STEPS, 0);
    double d = rel_l2(b.params, a.params, 9);
    cr_expect_gt(d, 0.0, "bf16 must actually round something");
    cr_expect_lt(d, 2e-2);
    toy_run_free(&a);
    toy_run_free(&b);
}

Test(engine, the_toy_learns) {
    FsdpConfig c = toy_config(STRAT_ZERO3, 8);
    ToyRun run;
    toy_train(&run, &c, 3, 60, 0);
    cr_expect_lt(run.steps[59].stats.loss, 0.2f * run.steps[0].stats.loss, "loss %g -> %g",
                 run.steps[0].stats.loss, run.steps[59].stats.loss);
    toy_run_free(&run);
}

/* The values recorded each step for the visualizer (each rank writing only what it owns)
 * assemble into the same numbers one rank computes on the global batch, and the last
 * snapshot is exactly the final gathered parameters. */
static void check_recorded_values(FsdpConfig c, int ranks) {
    enum { N = 3 };
    ToyRun ref, run;
    FsdpConfig one = toy_config(STRAT_ZERO3, BATCH * ranks);
    toy_train(&ref, &one, 1, N, 0);
    c.batch_size = BATCH;
    toy_train(&run, &c, ranks, N, 0);
    const char *s = strategy_name(c.strategy);
    for (int k = 0; k <= N; k++) {
        double d = rel_l2(run.step_params + k * 9, ref.step_params + k * 9, 9);
        cr_expect_leq(d, 1e-5, "%s at %d ranks: parameters after %d steps off by %.3g", s, ranks, k,
                      d);
    }
    for (int k = 0; k < N; k++) {
        double d = rel_l2(run.step_grads + k * 9, ref.step_grads + k * 9, 9);
        cr_expect_leq(d, 1e-5, "%s at %d ranks: gradients of step %d off by %.3g", s, ranks, k + 1,
                      d);
    }
    cr_expect_eq(memcmp(run.step_params + N * 9, run.params, sizeof run.params[0] * 9), 0,
                 "%s at %d ranks: the last snapshot is the final parameters", s, ranks);
    float zero[9] = {0};
    cr_expect_gt(rel_l2(zero, ref.step_grads, 9), 0.99, "gradients were recorded");
    cr_expect_gt(rel_l2(ref.step_params + 9, ref.step_params, 9), 1e-3, "the step moved them");
    toy_run_free(&ref);
    toy_run_free(&run);
}

Test(engine, recorded_step_values_are_the_whole_model) {
    Strategy all[] = {STRAT_DDP, STRAT_ZERO1, STRAT_ZERO2, STRAT_ZERO3};
    for (int s = 0; s < 4; s++)
        for (int ranks = 1; ranks <= 5; ranks += 2)
            check_recorded_values(toy_config(all[s], BATCH), ranks);
    FsdpConfig h = toy_config(STRAT_HSDP, BATCH);
    h.replicas = 2;
    check_recorded_values(h, 4);
}

/* ---- the seed's order (FsdpConfig.free_after_reduce, fsdp viz --seed-order) */

/* free_after_reduce moves when memory is freed, never a value: the same bits after STEPS steps
 * with it and without, under each strategy (and with prefetch off, as --seed-order runs it). */
Test(engine, free_after_reduce_changes_no_value) {
    const struct {
        Strategy s;
        int ranks, replicas, prefetch;
        DType param;
    } cases[] = {{STRAT_ZERO3, 3, 1, 0, DTYPE_FP32}, {STRAT_ZERO3, 3, 1, 1, DTYPE_FP32},
                 {STRAT_ZERO3, 4, 1, 0, DTYPE_BF16}, {STRAT_ZERO2, 3, 1, 0, DTYPE_FP32},
                 {STRAT_HSDP, 4, 2, 0, DTYPE_FP32},  {STRAT_DDP, 3, 1, 0, DTYPE_FP32},
                 {STRAT_ZERO1, 2, 1, 1, DTYPE_FP32}};
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        FsdpConfig c = toy_config(cases[i].s, BATCH);
        c.replicas = cases[i].replicas;
        c.prefetch_forward = c.prefetch_backward = cases[i].prefetch;
        c.param_dtype = cases[i].param;
        FsdpConfig seed = c;
        seed.free_after_reduce = 1;
        ToyRun a, b;
        toy_train(&a, &c, cases[i].ranks, STEPS, 0);
        toy_train(&b, &seed, cases[i].ranks, STEPS, 0);
        cr_expect_eq(memcmp(a.params, b.params, sizeof a.params), 0,
                     "%s at %d ranks (prefetch %d): free_after_reduce changed the parameters",
                     strategy_name(cases[i].s), cases[i].ranks, cases[i].prefetch);
        cr_expect_eq(memcmp(a.step_grads, b.step_grads, sizeof a.step_grads), 0,
                     "and the gradients the optimizer saw");
        toy_run_free(&a);
        toy_run_free(&b);
    }
}

/* What the seed's list names, one letter each: all-gather, forward, backward, reduce-scatter, and
 * the free of a unit's gathered parameters; other events are not in it. */
static char seed_letter(const TraceEvent *e) {
    if (e->unit < 0) return 0;
    switch (e->kind) {
    case EV_ALL_GATHER:
        return 'G';
    case EV_FORWARD:
        return 'F';
    case EV_BACKWARD:
        return 'B';
    case EV_REDUCE_SCATTER:
        return 'R';
    case EV_FREE:
        return e->category == MEM_PARAM_UNSHARDED ? 'X' : 0;
    default:
        return 0;
    }
}

/* Rank r's events of step 1's forward and backward as "G0 F0 X0 ..." (letter, unit). */
static void seed_sequence(const Trace *t, int r, char *out, size_t n) {
    size_t at = 0;
    out[0] = 0;
    for (size_t i = 0; i < t->n && at + 4 < n; i++) {
        const TraceEvent *e = &t->ev[i];
        char c = seed_letter(e);
        if (e->rank != r || e->step != 0 || !c ||
            (e->phase != PHASE_FORWARD && e->phase != PHASE_BACKWARD))
            continue;
        at += (size_t)snprintf(out + at, n - at, "%s%c%d", at ? " " : "", c, e->unit);
    }
}

/* The workshop seed's strict order for La, Lb, Lc at 3 ranks: per unit in forward all-gather,
 * forward, free; in backward all-gather, backward, reduce-scatter, free; on every GPU. The
 * default (FSDP2's) order is not that: prefetch gathers the next unit before this one is freed,
 * and backward frees a unit before its reduce-scatter. */
Test(engine, the_seed_order_is_gather_compute_reduce_free) {
    const char *seed = "G0 F0 X0 G1 F1 X1 G2 F2 X2 "          /* forward */
                       "G2 B2 R2 X2 G1 B1 R1 X1 G0 B0 R0 X0"; /* backward */
    FsdpConfig c = toy_config(STRAT_ZERO3, BATCH);
    c.prefetch_forward = c.prefetch_backward = 0;
    c.free_after_reduce = 1;
    ToyRun run;
    toy_train(&run, &c, 3, 1, 1);
    char got[256];
    for (int r = 0; r < 3; r++) {
        seed_sequence(&run.trace, r, got, sizeof got);
        cr_expect_str_eq(got, seed, "GPU %d", r);
    }
    toy_run_free(&run);
    FsdpConfig fsdp2 = toy_config(STRAT_ZERO3, BATCH);
    toy_train(&run, &fsdp2, 3, 1, 1);
    seed_sequence(&run.trace, 0, got, sizeof got);
    cr_expect_str_eq(got,
                     "G0 F0 G1 X0 F1 G2 X1 F2 X2 " /* the next unit gathered ahead */
                     "G2 B2 G1 X2 R2 B1 G0 X1 B0 R1 X0 R0",
                     "FSDP2's: a unit freed before its reduce-scatter, which starts once its "
                     "gradients are packed, before the next unit's backward (which waits for the "
                     "rows of the unit after it to be packed for their all-gather)");
    toy_run_free(&run);
}

/* A GPU on which every kernel launch takes a second and nothing else takes any time to speak
 * of: a step's modelled seconds count the launches on its compute stream. */
static Profile launch_bound(void) {
    Profile p = *profile_default();
    p.flops_fp32 = p.flops_low = p.mem_bw = p.intra_bw = p.inter_bw = 1e30;
    p.launch_overhead = 1.0;
    return p;
}

static long launches_a_step(Strategy s) {
    Profile p = launch_bound();
    FsdpConfig c = toy_config(s, BATCH);
    ToyRun run;
    toy_train_on(&run, &c, 3, 2, &p);
    cr_assert_eq(run.nsteps, 2);
    long n = lround(run.steps[1].step_time);
    cr_expect_lt(fabs(run.steps[1].step_time - (double)n), 1e-3, "%s: %.6f s", strategy_name(s),
                 run.steps[1].step_time);
    toy_run_free(&run);
    return n;
}

/* The kernels the engine launches between the model's own are paid for: beside the toy's 10
 * (3 forwards, the loss, 3 backwards, 3 Adam steps), zero3 copies each unit's rows into and out
 * of its all-gather's buffers twice (forward, and backward after resharding), zeroes its
 * unsharded gradients, and copies them into the reduce-scatter's buffer and the result out:
 * 7 a unit. zero2 gathers once (5 a unit). ddp copies nothing, but its backward sums into the
 * resting gradients, which start each step at zero: 1 a unit. */
Test(engine, every_launch_the_engine_makes_is_charged) {
    cr_expect_eq(launches_a_step(STRAT_ZERO3), 10 + 3 * 7);
    cr_expect_eq(launches_a_step(STRAT_ZERO2), 10 + 3 * 5);
    cr_expect_eq(launches_a_step(STRAT_DDP), 10 + 3 * 1);
}

/* Each rank's own gradients before the reduction (TrainJob.step_local_grads): their mean over
 * the ranks is the averaged gradient the optimizer used, within float rounding; the ranks'
 * differ (each saw its own samples); under every strategy, and with accumulation. */
static void check_local_grads(FsdpConfig c, int ranks) {
    enum { N = 2 };
    static float local[N * 8 * 9];
    for (size_t i = 0; i < sizeof local / sizeof *local; i++) local[i] = NAN;
    ToyRun run;
    toy_train_recording(&run, &c, ranks, N, 0, local);
    const char *s = strategy_name(c.strategy);
    for (int k = 0; k < N; k++) {
        int differ = 0;
        for (int i = 0; i < 9; i++) {
            double mean = 0.0;
            for (int r = 0; r < ranks; r++) {
                float g = local[((size_t)k * ranks + r) * 9 + i];
                cr_assert(isfinite(g), "%s: rank %d's gradient %d of step %d was recorded", s, r, i,
                          k + 1);
                mean += g;
                differ |= g != local[(size_t)k * ranks * 9 + i];
            }
            mean /= ranks;
            double want = run.step_grads[k * 9 + i];
            cr_expect_leq(fabs(mean - want), 1e-6 * fabs(want) + 1e-7,
                          "%s at %d ranks, step %d, element %d: mean %.9g, averaged %.9g", s, ranks,
                          k + 1, i, mean, want);
        }
        cr_expect(ranks == 1 || differ, "%s: the ranks' own gradients differ", s);
    }
    toy_run_free(&run);
}

Test(engine, local_gradients_average_to_the_reduced_ones) {
    Strategy all[] = {STRAT_ZERO3, STRAT_ZERO2, STRAT_ZERO1, STRAT_DDP};
    for (int s = 0; s < 4; s++) check_local_grads(toy_config(all[s], BATCH), 3);
    FsdpConfig h = toy_config(STRAT_HSDP, BATCH);
    h.replicas = 2;
    check_local_grads(h, 4);
    FsdpConfig accum = toy_config(STRAT_ZERO3, BATCH);
    accum.grad_accum = 2;
    check_local_grads(accum, 3);
    FsdpConfig seed = toy_config(STRAT_ZERO3, BATCH);
    seed.free_after_reduce = 1;
    check_local_grads(seed, 3);
}
