/* Sharding with torch.chunk semantics, wrap policies and the strategies' shapes. */
#include <criterion/criterion.h>
#include <string.h>

#include "engine/plan.h"
#include "models/toy.h"

static void expect_rows(size_t d0, int S, const size_t *want_rows) {
    size_t next = 0;
    for (int r = 0; r < S; r++) {
        size_t begin, rows;
        shard_rows(d0, S, r, &begin, &rows);
        cr_expect_eq(rows, want_rows[r], "d0 %zu S %d rank %d: rows %zu", d0, S, r, rows);
        if (rows) cr_expect_eq(begin, next, "d0 %zu S %d rank %d begins at %zu", d0, S, r, begin);
        next = begin + rows;
    }
}

Test(plan, shard_rows_follow_torch_chunk) {
    expect_rows(3, 3, (size_t[]){1, 1, 1});
    expect_rows(3, 4, (size_t[]){1, 1, 1, 0}); /* 3 scalars on 4 GPUs: one is empty */
    expect_rows(5, 4, (size_t[]){2, 2, 1, 0}); /* chunk = ceil(5/4) = 2 */
    expect_rows(10, 3, (size_t[]){4, 4, 2});
    expect_rows(1, 4, (size_t[]){1, 0, 0, 0}); /* the class token */
    expect_rows(6, 4, (size_t[]){2, 2, 2, 0}); /* torch.chunk gives 3 chunks, not 4 */
    expect_rows(0, 2, (size_t[]){0, 0});
}

static void toy_plan(Plan *p, ModelDesc *m, const char *wrap, Strategy s, int world, int R) {
    Err err;
    WrapPolicy w;
    cr_assert_eq(toy_model_create(m, &err), 0);
    cr_assert_eq(wrap_parse(wrap, &w), 0);
    cr_assert_eq(plan_create(p, m, w, s, world, R, &err), 0, "%s", err.msg);
}

Test(plan, wrap_policies_group_modules) {
    const char *wraps[] = {"layer", "none", "block:2", "size:4", "size:1", "block:5"};
    int want_units[] = {3, 1, 2, 2, 3, 1};
    for (int i = 0; i < 6; i++) {
        Plan p;
        ModelDesc m;
        toy_plan(&p, &m, wraps[i], STRAT_ZERO3, 3, 1);
        cr_expect_eq(p.nunits, want_units[i], "%s: %d units", wraps[i], p.nunits);
        size_t total = 0;
        for (int u = 0; u < p.nunits; u++) total += p.units[u].numel;
        cr_expect_eq(total, 9);
        plan_free(&p);
        model_desc_free(&m);
    }
    Plan p;
    ModelDesc m;
    toy_plan(&p, &m, "layer", STRAT_ZERO3, 3, 1);
    cr_expect_str_eq(p.units[0].name, "La");
    cr_expect_str_eq(p.units[2].name, "Lc");
    cr_expect_eq(p.units[1].wire_numel, 1);
    plan_free(&p);
    model_desc_free(&m);
    toy_plan(&p, &m, "none", STRAT_ZERO3, 4, 1);
    cr_expect(p.units[0].is_root);
    cr_expect_eq(p.units[0].wire_numel, 3, "one padded row per parameter on the wire");
    plan_free(&p);
    model_desc_free(&m);
}

Test(plan, strategies_shape_the_groups) {
    Plan p;
    ModelDesc m;
    toy_plan(&p, &m, "layer", STRAT_HSDP, 6, 2);
    cr_expect_eq(p.shard_size, 3);
    cr_expect_eq(plan_shard_rank(&p, 4), 1);
    cr_expect_eq(plan_param_numel(&p, 0, 4), 1);
    plan_free(&p);
    model_desc_free(&m);
    toy_plan(&p, &m, "layer", STRAT_DDP, 4, 1);
    cr_expect_eq(plan_param_numel(&p, 0, 3), 3);
    cr_expect_eq(plan_optim_numel(&p, 0, 3), 3);
    plan_free(&p);
    model_desc_free(&m);
    toy_plan(&p, &m, "layer", STRAT_ZERO1, 3, 1);
    cr_expect_eq(plan_param_numel(&p, 0, 2), 3);
    cr_expect_eq(plan_grad_numel(&p, 0, 2), 3);
    cr_expect_eq(plan_optim_numel(&p, 0, 2), 1);
    RestBytes b = plan_rest_bytes(&p, 0, OFFLOAD_NONE);
    cr_expect_eq(b.param, 36);
    cr_expect_eq(b.optim, 24);
    plan_free(&p);
    Err err;
    WrapPolicy w = {WRAP_LAYER, 0};
    cr_expect_eq(plan_create(&p, &m, w, STRAT_HSDP, 5, 2, &err), ERR_USAGE);
    model_desc_free(&m);
}

Test(plan, parsing_names) {
    Strategy s;
    WrapPolicy w;
    cr_expect_eq(strategy_parse("zero3", &s), 0);
    cr_expect_eq(s, STRAT_ZERO3);
    cr_expect_eq(strategy_parse("zro3", &s), -1);
    cr_expect_eq(wrap_parse("block:3", &w), 0);
    cr_expect_eq(w.arg, 3);
    cr_expect_eq(wrap_parse("block:0", &w), -1);
    cr_expect_eq(wrap_parse("size:x", &w), -1);
    cr_expect_eq(wrap_parse("layers", &w), -1);
}
