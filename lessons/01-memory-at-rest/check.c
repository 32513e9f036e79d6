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
        expect_text(1, text_of(engine_rest(&m, STRAT_DDP, 3, r)), text_of(got));
    }
    model_desc_free(&m);
}

Test(lesson01, t2_ddp_workshop_7b) {
    lesson_try("ddp_rest_memory(params=7000000000)");
    RestMemory want = {28000000000, 28000000000, 56000000000, 112000000000}; /* the workshop's */
    expect_text(2, text_of(want), text_of(ddp_rest_memory(7000000000)));
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
    expect_text(2, text_of(want), text_of(ddp_rest_memory(params)));
    transformer_7b(&m);
    params = m.total_numel;
    want = engine_rest(&m, STRAT_DDP, 8, 0);
    model_desc_free(&m);
    lesson_try("ddp_rest_memory(params=%zu) for the planner's 7B transformer", params);
    expect_text(2, text_of(want), text_of(ddp_rest_memory(params)));
}

Test(lesson01, t4_fsdp_toy) {
    ModelDesc m;
    toy_model(&m);
    for (int world = 1; world <= 3; world += 2)
        for (int r = 0; r < world; r++) {
            lesson_try("fsdp_rest_memory(params=%zu, gpus=%d) for the toy, GPU %d", m.total_numel,
                       world, r);
            RestMemory got = fsdp_rest_memory(m.total_numel, world);
            expect_text(3, text_of(engine_rest(&m, STRAT_ZERO3, world, r)), text_of(got));
        }
    model_desc_free(&m);
}

Test(lesson01, t5_fsdp_workshop_7b) {
    lesson_try("fsdp_rest_memory(params=7000000000, gpus=8)");
    RestMemory want = {3500000000, 3500000000, 7000000000, 14000000000}; /* the workshop's */
    expect_text(3, text_of(want), text_of(fsdp_rest_memory(7000000000, 8)));
    lesson_try("fsdp_rest_memory(params=7000000000, gpus=1)");
    expect_text(3, text_of(ddp_rest_memory(7000000000)), text_of(fsdp_rest_memory(7000000000, 1)));
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
