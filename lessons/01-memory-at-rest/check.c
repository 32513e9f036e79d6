/* Lesson 01's check: the learner's bytes at rest per GPU under DDP and FSDP against the engine's
 * own formula and the workshop's 7B figures. */
#include "lessons/tool/check.h"
#include "engine/plan.h"
#include "exercise.h"
#include "models/toy.h"
#include "models/transformer.h"
#include "models/vit.h"

/* The engine's formula is engine/plan.c's plan_rest_bytes, what every rank's accounted memory must
 * equal, for the toy and the planner's 7B transformer; the workshop's figures are for 7e9
 * parameters: 28 + 28 + 56 = 112 GB per GPU under DDP, 14 GB under FSDP on 8 GPUs. */

static const char *text_of(RestMemory m) {
    return lesson_fmt("params=%zu grads=%zu adam=%zu total=%zu", m.params, m.grads, m.adam,
                      m.total);
}

/* The misconception behind a known wrong answer for `params` parameters on `gpus` GPUs (1 for
 * DDP), in words; NULL for any other. Each is recognised exactly, field by field. */
static const char *rest_why(RestMemory want, RestMemory got, size_t params, int gpus) {
    size_t all = params * 4; /* every parameter, or every gradient, in fp32 */
    if (gpus > 1 && got.params == all && got.grads == all && got.adam == want.adam)
        return "That is ZeRO-1's count: it shards only Adam's state. FSDP (ZeRO-3) shards the "
               "parameters and the gradients too; each GPU keeps its 1/N of all three.";
    if (gpus > 1 && got.params == want.params && got.grads == all && got.adam == want.adam)
        return lesson_fmt("grads=%zu is every gradient, ZeRO-1's count (and DDP's): FSDP keeps a "
                          "gradient only for its own shard of the parameters.",
                          got.grads);
    if (gpus > 1 && got.params == all && got.grads == want.grads && got.adam == want.adam)
        return lesson_fmt("params=%zu is every parameter, as DDP keeps them: between steps an "
                          "FSDP GPU keeps only its shard, and gathers a unit only to compute.",
                          got.params);
    if (got.params == want.params && got.grads == want.grads && 2 * got.adam == want.adam)
        return lesson_fmt("adam=%zu is one moment per parameter: Adam keeps two, m and v, 8 "
                          "bytes per parameter.",
                          got.adam);
    if (got.params == want.params && got.grads == want.grads && 2 * got.adam == 3 * want.adam)
        return lesson_fmt("adam=%zu is 12 bytes per parameter: m, v and an fp32 master copy, "
                          "which mixed precision keeps. Here the parameters are fp32 already: "
                          "they are the master copy.",
                          got.adam);
    if (got.params == want.params && got.grads == want.grads && got.adam == want.adam)
        return "total is params + grads + adam.";
    return NULL;
}

static void expect_rest(int hint, RestMemory want, RestMemory got, size_t params, int gpus) {
    expect_text_why(hint, text_of(want), text_of(got), rest_why(want, got, params, gpus));
}

/* What the engine says rank r holds at rest, in the lesson's terms. */
static RestMemory engine_rest(const ModelDesc *m, Strategy s, int world, int r) {
    Plan p;
    Err err = {0};
    cr_assert_eq(plan_create(&p, m, (WrapPolicy){WRAP_LAYER, 0}, s, world, 1, &err), 0, "%s",
                 err.msg);
    RestBytes b = plan_rest_bytes(&p, r, OFFLOAD_NONE);
    plan_free(&p);
    return (RestMemory){b.param, b.grad, b.optim, b.param + b.grad + b.optim};
}

static void toy_model(ModelDesc *m) {
    Err err = {0};
    cr_assert_eq(toy_model_create(m, &err), 0, "%s", err.msg);
}

static void transformer_7b(ModelDesc *m) {
    TransformerConfig c;
    Err err = {0};
    cr_assert_eq(transformer_config_for_params(7e9, &c, &err), 0, "%s", err.msg);
    cr_assert_eq(transformer_model_create(m, &c, &err), 0, "%s", err.msg);
}

/* Each test says when it ran to its end (check.h): the runner passes nothing less. */
LESSON_CHECK_SUITE(lesson01);

Test(lesson01, t1_ddp_toy) {
    ModelDesc m;
    toy_model(&m);
    for (int r = 0; r < 3; r++) {
        lesson_try("ddp_rest_memory(params=%zu) for the toy, GPU %d of 3", m.total_numel, r);
        RestMemory got = ddp_rest_memory(m.total_numel);
        expect_rest(1, engine_rest(&m, STRAT_DDP, 3, r), got, m.total_numel, 1);
    }
    model_desc_free(&m);
}

Test(lesson01, t2_ddp_workshop_7b) {
    lesson_try("ddp_rest_memory(params=7000000000)");
    RestMemory want = {28000000000, 28000000000, 56000000000, 112000000000}; /* the workshop's */
    expect_rest(2, want, ddp_rest_memory(7000000000), 7000000000, 1);
}

Test(lesson01, t3_ddp_engine_models) {
    ModelDesc m;
    VitConfig c;
    Err err = {0};
    cr_assert_eq(vit_preset("vit-tiny", &c), 0);
    cr_assert_eq(vit_model_create(&m, &c, &err), 0, "%s", err.msg);
    size_t params = m.total_numel;
    RestMemory want = engine_rest(&m, STRAT_DDP, 4, 0);
    model_desc_free(&m);
    lesson_try("ddp_rest_memory(params=%zu) for vit-tiny", params);
    expect_rest(2, want, ddp_rest_memory(params), params, 1);
    transformer_7b(&m);
    params = m.total_numel;
    want = engine_rest(&m, STRAT_DDP, 8, 0);
    model_desc_free(&m);
    lesson_try("ddp_rest_memory(params=%zu) for the planner's 7B transformer", params);
    expect_rest(2, want, ddp_rest_memory(params), params, 1);
}

Test(lesson01, t4_fsdp_toy) {
    ModelDesc m;
    toy_model(&m);
    for (int world = 1; world <= 3; world += 2)
        for (int r = 0; r < world; r++) {
            lesson_try("fsdp_rest_memory(params=%zu, gpus=%d) for the toy, GPU %d", m.total_numel,
                       world, r);
            RestMemory got = fsdp_rest_memory(m.total_numel, world);
            expect_rest(3, engine_rest(&m, STRAT_ZERO3, world, r), got, m.total_numel, world);
        }
    model_desc_free(&m);
}

Test(lesson01, t5_fsdp_workshop_7b) {
    lesson_try("fsdp_rest_memory(params=7000000000, gpus=8)");
    RestMemory want = {3500000000, 3500000000, 7000000000, 14000000000}; /* the workshop's */
    expect_rest(3, want, fsdp_rest_memory(7000000000, 8), 7000000000, 8);
    lesson_try("fsdp_rest_memory(params=7000000000, gpus=1)");
    expect_rest(3, ddp_rest_memory(7000000000), fsdp_rest_memory(7000000000, 1), 7000000000, 1);
}

/* The planner's 7B has 6,999,998,464 parameters, a multiple of 8, but its tensors do not all
 * split evenly: GPU by GPU the engine's shards differ by a few rows. Together the 8 GPUs
 * still hold exactly one copy of everything, which is what 8 x the even share must be. */
Test(lesson01, t6_fsdp_engine_7b_on_8_gpus) {
    ModelDesc m;
    transformer_7b(&m);
    cr_assert_eq(m.total_numel % 8, 0);
    RestMemory sum = {0};
    for (int r = 0; r < 8; r++) {
        RestMemory b = engine_rest(&m, STRAT_ZERO3, 8, r);
        sum.params += b.params, sum.grads += b.grads, sum.adam += b.adam, sum.total += b.total;
    }
    size_t params = m.total_numel;
    model_desc_free(&m);
    lesson_try("8 x fsdp_rest_memory(params=%zu, gpus=8), the planner's 7B summed over its GPUs",
               params);
    RestMemory one = fsdp_rest_memory(params, 8);
    RestMemory got = {8 * one.params, 8 * one.grads, 8 * one.adam, 8 * one.total};
    expect_text(3, text_of(sum), text_of(got));
}
