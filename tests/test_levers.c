/* The memory levers beyond sharding: activation checkpointing trains to the same bits while
 * holding less, recomputes each checkpointed block once per backward on parameters it
 * gathers anyway, and keeps its inputs in their own category. */
#include <criterion/criterion.h>
#include <string.h>

#include "../core/fsdp.h"
#include "../core/vit.h"
#include "util.h"

static FsdpConfig vit_config(Strategy s, int batch) {
    FsdpConfig c;
    fsdp_config_defaults(&c);
    c.strategy = s;
    c.batch_size = batch;
    return c;
}

static size_t count_events(const Trace *t, EventKind kind) {
    size_t n = 0;
    for (size_t i = 0; i < t->n; i++) n += t->ev[i].kind == (int)kind;
    return n;
}

/* Bit-identical parameters with and without checkpointing, for several strategies, every
 * block or every second one, and with gradient accumulation. */
Test(activation_checkpointing, trains_to_the_same_bits, .timeout = 120) {
    ModelDesc m;
    vit_small_create(&m, 3);
    struct {
        Strategy s;
        int ranks, ac_every, grad_accum;
    } cases[] = {{STRAT_ZERO3, 2, 1, 1}, {STRAT_ZERO2, 3, 2, 2}, {STRAT_DDP, 2, 1, 1}};
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        FsdpConfig off = vit_config(cases[i].s, 4), on;
        off.grad_accum = cases[i].grad_accum;
        on = off;
        on.ac_every = cases[i].ac_every;
        VitRun a, b;
        vit_train(&a, &m, off, cases[i].ranks, 4, 0);
        vit_train(&b, &m, on, cases[i].ranks, 4, 0);
        cr_expect(memcmp(a.params, b.params, m.total_numel * sizeof(float)) == 0,
                  "%s, every %d-th block: parameters differ", strategy_name(cases[i].s),
                  cases[i].ac_every);
        cr_expect_eq(a.last_loss, b.last_loss);
        vit_run_free(&a);
        vit_run_free(&b);
    }
    model_desc_free(&m);
}

/* Which blocks: the K-th, 2K-th, ... counting from 1; the embedding and the head never. */
Test(activation_checkpointing, every_kth_block) {
    ModelDesc m;
    vit_small_create(&m, 5); /* modules: embed, 5 blocks, head */
    FsdpConfig c = vit_config(STRAT_ZERO3, 4);
    c.ac_every = 2;
    int want[] = {0, 0, 1, 0, 1, 0, 0};
    for (int i = 0; i < m.nmodules; i++)
        cr_expect_eq(fsdp_module_checkpointed(&c, &m, i), want[i], "module %d", i);
    c.ac_every = 1;
    for (int i = 0; i < m.nmodules; i++)
        cr_expect_eq(fsdp_module_checkpointed(&c, &m, i), i >= 1 && i <= 5, "module %d", i);
    c.ac_every = 0;
    for (int i = 0; i < m.nmodules; i++) cr_expect_eq(fsdp_module_checkpointed(&c, &m, i), 0);
    model_desc_free(&m);
}

/* One recompute per checkpointed block, rank and step, and not one all-gather more: the
 * recompute runs on the parameters backward gathers anyway. The peak holds less, and what
 * forward keeps of a checkpointed block is its input: one [B, T, H] tensor per block. */
Test(activation_checkpointing, recomputes_without_gathering_and_holds_less, .timeout = 60) {
    ModelDesc m;
    vit_small_create(&m, 4);
    const VitConfig *vc = m.config;
    enum { RANKS = 2, STEPS = 2, B = 4 };
    FsdpConfig off = vit_config(STRAT_ZERO3, B), on = off;
    on.ac_every = 1;
    VitRun a, b;
    vit_train(&a, &m, off, RANKS, STEPS, 1);
    vit_train(&b, &m, on, RANKS, STEPS, 1);
    cr_expect_eq(count_events(&a.trace, EV_RECOMPUTE), 0);
    cr_expect_eq(count_events(&b.trace, EV_RECOMPUTE), (size_t)(vc->layers * RANKS * STEPS));
    cr_expect_eq(count_events(&b.trace, EV_ALL_GATHER), count_events(&a.trace, EV_ALL_GATHER));
    size_t input_bytes = (size_t)B * (size_t)vit_tokens(vc) * (size_t)vc->hidden * sizeof(float);
    size_t most_inputs = 0;
    for (size_t i = 0, held = 0; i < b.trace.n; i++) { /* rank 0's checkpointed inputs */
        const TraceEvent *e = &b.trace.ev[i];
        if (e->rank != 0 || e->category != MEM_AC_INPUT) continue;
        held = e->kind == EV_ALLOC ? held + e->bytes : held - e->bytes;
        if (held > most_inputs) most_inputs = held;
    }
    cr_expect_eq(most_inputs, (size_t)vc->layers * input_bytes,
                 "forward keeps one input per block: %zu bytes", most_inputs);
    for (int r = 0; r < RANKS; r++) {
        cr_expect_lt(b.memory[r].peak, a.memory[r].peak, "rank %d: %zu vs %zu", r, b.memory[r].peak,
                     a.memory[r].peak);
        cr_expect_eq(b.memory[r].rest[MEM_AC_INPUT], 0, "nothing is left after the step");
    }
    vit_run_free(&a);
    vit_run_free(&b);
    model_desc_free(&m);
}

Test(activation_checkpointing, bad_flags_are_one_line) {
    struct {
        const char *args, *want;
    } cases[] = {
        {"train --model vit-tiny --ac-every 0", "--ac-every must be"},
        {"train --model toy --activation-checkpointing", "nothing to drop"},
        {"train --model vit-tiny --ac-every x", "--ac-every must be"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        int status;
        char *out = fsdp_output(cases[i].args, "2>&1 >/dev/null", &status);
        cr_expect(WIFEXITED(status) && WEXITSTATUS(status) == 2, "%s: status %d", cases[i].args,
                  status);
        cr_expect(strstr(out, cases[i].want) != NULL, "%s: got '%s'", cases[i].args, out);
        cr_expect_eq(strchr(out, '\n'), strrchr(out, '\n'), "one line: '%s'", out);
        free(out);
    }
}
