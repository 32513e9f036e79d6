/* DeepSpeed's layout (--layout deepspeed) changes only where values rest, not the values: it trains
 * to FSDP's bits under every strategy and rests at the plan's bytes. */
#include <criterion/criterion.h>
#include <string.h>

#include "models/vit.h"
#include "tests/util.h"

/* Under it parameters rest in param_dtype and gradients in reduce_dtype, the optimizer keeps an
 * fp32 master of its rows beside Adam's moments, and zero2 keeps the parameters whole. Its bytes at
 * rest are ZeRO's 2 + 2 + 12 a parameter, and its zero2 gathers parameters only after the optimizer
 * step. */

static FsdpConfig deepspeed(FsdpConfig c) {
    c.layout = LAYOUT_DEEPSPEED;
    return c;
}

static FsdpConfig mixed(Strategy s, DType t) {
    FsdpConfig c = vit_config(s, 4);
    c.param_dtype = c.reduce_dtype = t;
    return c;
}

static size_t all_gathers_in(const Trace *t, Phase phase) {
    size_t n = 0;
    for (size_t i = 0; i < t->n; i++)
        n += t->ev[i].kind == EV_ALL_GATHER && t->ev[i].phase == (int)phase;
    return n;
}

Test(layout, trains_to_fsdps_bits_under_every_strategy, .timeout = 120) {
    ModelDesc m;
    vit_small_create(&m, 2);
    ConfigCase cases[] = {{"ddp", mixed(STRAT_DDP, DTYPE_BF16), 3},
                          {"zero1", mixed(STRAT_ZERO1, DTYPE_BF16), 3},
                          {"zero2", mixed(STRAT_ZERO2, DTYPE_BF16), 3},
                          {"zero3", mixed(STRAT_ZERO3, DTYPE_BF16), 3},
                          {"hsdp", mixed(STRAT_HSDP, DTYPE_BF16), 4},
                          {"zero3 accumulating", mixed(STRAT_ZERO3, DTYPE_BF16), 2},
                          {"zero1 accumulating", mixed(STRAT_ZERO1, DTYPE_BF16), 2},
                          {"zero1 fp16 (loss scaling)", mixed(STRAT_ZERO1, DTYPE_FP16), 3},
                          {"zero2 fp32 reduce", mixed(STRAT_ZERO2, DTYPE_BF16), 3},
                          {"zero2 offload optimizer", mixed(STRAT_ZERO2, DTYPE_BF16), 3}};
    cases[4].cfg.replicas = 2;
    cases[5].cfg.grad_accum = cases[6].cfg.grad_accum = 2;
    cases[8].cfg.reduce_dtype = DTYPE_FP32;
    cases[9].cfg.offload = OFFLOAD_OPTIMIZER;
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        VitRun fsdp, ds;
        vit_train(&fsdp, &m, cases[i].cfg, cases[i].ranks, 3, 0);
        vit_train(&ds, &m, deepspeed(cases[i].cfg), cases[i].ranks, 3, 0);
        cr_expect(memcmp(fsdp.params, ds.params, m.total_numel * sizeof(float)) == 0,
                  "%s: DeepSpeed's layout trained to other values than FSDP's", cases[i].name);
        cr_expect_neq(fsdp.last_loss, fsdp.first_loss, "%s trained", cases[i].name);
        vit_run_free(&fsdp);
        vit_run_free(&ds);
    }
    model_desc_free(&m);
}

/* ZeRO's bytes per parameter, on the vit: 2 of bf16 parameters (whole under ddp, zero1 and
 * DeepSpeed's zero2), 2 of bf16 gradients (whole under ddp and zero1), and 12 for the
 * optimizer (master, m, v) where FSDP keeps 4 + 4 + 8. */
Test(layout, rests_at_zeros_bytes) {
    ModelDesc m;
    vit_small_create(&m, 2);
    const int ranks = 3;
    Strategy strategies[] = {STRAT_DDP, STRAT_ZERO1, STRAT_ZERO2, STRAT_ZERO3};
    for (size_t i = 0; i < sizeof strategies / sizeof *strategies; i++) {
        Strategy s = strategies[i];
        VitRun fsdp, ds;
        vit_train(&fsdp, &m, mixed(s, DTYPE_BF16), ranks, 1, 0);
        vit_train(&ds, &m, deepspeed(mixed(s, DTYPE_BF16)), ranks, 1, 0);
        size_t whole = m.total_numel;
        for (int r = 0; r < ranks; r++) {
            const size_t *f = fsdp.memory[r].rest, *d = ds.memory[r].rest;
            const char *name = strategy_name(s);
            if (s == STRAT_ZERO3) {
                cr_expect_eq(2 * d[MEM_PARAM_SHARD], f[MEM_PARAM_SHARD], "%s r%d", name, r);
            } else {
                cr_expect_eq(d[MEM_PARAM_SHARD], 2 * whole, "%s rank %d: bf16, whole", name, r);
            }
            cr_expect_eq(2 * d[MEM_GRAD_SHARD], f[MEM_GRAD_SHARD], "%s rank %d", name, r);
            cr_expect_eq(2 * d[MEM_OPTIM_STATE], 3 * f[MEM_OPTIM_STATE], "%s rank %d", name, r);
            cr_expect_eq(d[MEM_PARAM_UNSHARDED] + d[MEM_GRAD_UNSHARDED] + d[MEM_COMM_BUFFER], 0,
                         "%s rank %d: nothing transient survives a step", name, r);
        }
        vit_run_free(&fsdp);
        vit_run_free(&ds);
    }
    model_desc_free(&m);
}

/* Accounted bytes at rest equal the plan's formula (invariant 3) under DeepSpeed's layout at
 * every world size, with its ZeRO-Offload as well. */
Test(layout, memory_at_rest_is_the_plan_formula) {
    for (int s = 0; s < STRAT_COUNT; s++)
        for (int ranks = 1; ranks <= 4; ranks++)
            for (int offload = 0; offload < 2; offload++) {
                FsdpConfig c = deepspeed(toy_config((Strategy)s, 8));
                c.param_dtype = c.reduce_dtype = DTYPE_BF16;
                if (s == STRAT_HSDP) c.replicas = ranks % 2 == 0 ? 2 : 1;
                c.offload = offload ? OFFLOAD_OPTIMIZER : OFFLOAD_NONE;
                ToyRun run;
                toy_train(&run, &c, ranks, 3, 0);
                for (int r = 0; r < ranks; r++) {
                    RestBytes want = plan_rest_bytes(&run.plan, r, c.offload);
                    const size_t *got = run.memory[r].rest;
                    const char *name = strategy_name((Strategy)s);
                    cr_expect_eq(got[MEM_PARAM_SHARD], want.param, "%s %d/%d", name, r, ranks);
                    cr_expect_eq(got[MEM_GRAD_SHARD], want.grad, "%s %d/%d", name, r, ranks);
                    cr_expect_eq(got[MEM_OPTIM_STATE], want.optim, "%s %d/%d", name, r, ranks);
                    cr_expect_eq(got[MEM_HOST_OFFLOAD], want.host, "%s %d/%d", name, r, ranks);
                }
                toy_run_free(&run);
            }
}

/* DeepSpeed's zero2 computes on its whole bf16 parameters: no all-gather in forward or backward,
 * one per unit after each optimizer step (each rank's updated rows, in bf16), where FSDP's
 * zero2 gathers before computing. */
Test(layout, deepspeeds_zero2_gathers_only_after_the_step) {
    ModelDesc m;
    vit_small_create(&m, 2);
    const int ranks = 3, steps = 2;
    VitRun fsdp, ds;
    vit_train(&fsdp, &m, mixed(STRAT_ZERO2, DTYPE_BF16), ranks, steps, 1);
    vit_train(&ds, &m, deepspeed(mixed(STRAT_ZERO2, DTYPE_BF16)), ranks, steps, 1);
    Plan p;
    Err err = {0};
    FsdpConfig c = deepspeed(mixed(STRAT_ZERO2, DTYPE_BF16));
    cr_assert_eq(fsdp_plan_create(&p, &m, &c, ranks, &err), 0, "%s", err.msg);
    cr_expect_eq(
        all_gathers_in(&ds.trace, PHASE_FORWARD) + all_gathers_in(&ds.trace, PHASE_BACKWARD), 0);
    cr_expect_eq(all_gathers_in(&ds.trace, PHASE_OPTIMIZER), (size_t)(ranks * steps * p.nunits));
    cr_expect_gt(all_gathers_in(&fsdp.trace, PHASE_FORWARD), 0);
    cr_expect_eq(all_gathers_in(&fsdp.trace, PHASE_OPTIMIZER), 0);
    for (size_t i = 0; i < ds.trace.n; i++) {
        const TraceEvent *ev = &ds.trace.ev[i];
        if (ev->kind != EV_ALL_GATHER || ev->phase != PHASE_OPTIMIZER) continue;
        size_t want = p.units[ev->unit].wire_numel * 2 * ranks; /* every rank's bf16 block */
        cr_expect_eq(ev->bytes, want, "unit %d gathers %llu bytes, not %zu", ev->unit, ev->bytes,
                     want);
    }
    plan_free(&p);
    vit_run_free(&fsdp);
    vit_run_free(&ds);
    model_desc_free(&m);
}

Test(layout, bad_flags_are_one_line) {
    static const UsageCase cases[] = {
        {"train --layout zero", "--layout must be fsdp or deepspeed (got 'zero')"},
        {"train --layout deepspeed --offload cpu", "--offload cpu is FSDP2's"},
        {"train --layout deepspeed --offload nvme --nvme-dir /tmp", "--offload nvme is FSDP2's"},
        {"plan --layout deepspeeed", "--layout must be fsdp or deepspeed"},
    };
    expect_usage_errors(cases, sizeof cases / sizeof *cases);
}
