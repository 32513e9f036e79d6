/* Lesson 02's check: the learner's shard_range, wire_rows and rank_numel against the engine's
 * own sharding (engine/plan.c: shard_rows, each parameter's padded chunk_rows, and the elements
 * plan_param_numel says a rank keeps) for the toy and vit-tiny at several world sizes. */
#include "lessons/tool/check.h"
#include "engine/plan.h"
#include "exercise.h"
#include "models/toy.h"
#include "models/vit.h"

#include <stdlib.h>

/* Known wrong ranges, recognised exactly: numpy.array_split's (the first d0 % S pieces one row
 * longer) and floor division with the rest on the last GPU. NULL for any other. */
static const char *range_why(size_t d0, int S, int r, size_t begin, size_t rows) {
    size_t q = d0 / (size_t)S, rem = d0 % (size_t)S, k = (size_t)r;
    if (begin == k * q + (k < rem ? k : rem) && rows == q + (k < rem))
        return "That is numpy.array_split's split (the first d0 % S pieces one row longer): "
               "torch.chunk gives every piece ceil(d0/S) rows and leaves the shortfall at the end.";
    if (begin == k * q && rows == (r == S - 1 ? d0 - k * q : q))
        return "That is d0 / S rounded down, with the rest on the last GPU: torch.chunk rounds "
               "the piece up, ceil(d0/S) rows, and the last GPUs get what is left, or nothing.";
    return NULL;
}

/* Each rank's range against the engine's. The message says an empty shard's rule beside what
 * was expected, and a count that went below zero as the negative number computed (rows=-1,
 * not 18446744073709551615). */
static void expect_range(int hint, size_t d0, int S) {
    for (int r = 0; r < S; r++) {
        size_t want_begin, want_rows, begin = 12345, rows = 12345;
        shard_rows(d0, S, r, &want_begin, &want_rows);
        lesson_try("shard_range(d0=%zu, S=%d, r=%d)", d0, S, r);
        shard_range(d0, S, r, &begin, &rows);
        if (begin == want_begin && rows == want_rows) continue;
        char want[128], got[2 * LESSON_TEXT_MAX];
        snprintf(want, sizeof want, "begin=%zu rows=%zu%s", want_begin, want_rows,
                 want_rows ? "" : " (nothing left for this rank: an empty shard begins at d0)");
        snprintf(got, sizeof got, "%s ", lesson_size_text("begin", begin));
        snprintf(got + strlen(got), sizeof got - strlen(got), "%s", lesson_size_text("rows", rows));
        lesson_fail_why(hint, want, got, range_why(d0, S, r, begin, rows));
    }
}

/* Each test says when it ran to its end (check.h): the runner passes nothing less. */
LESSON_CHECK_SUITE(lesson02);

Test(lesson02, t1_even_split) {
    expect_range(1, 6, 3);
    expect_range(1, 3, 3); /* the toy's La at 3 GPUs: one scalar each */
    expect_range(1, 12, 4);
    expect_range(1, 5, 1);
}

Test(lesson02, t2_last_shard_short) {
    expect_range(2, 10, 4); /* 3, 3, 3, 1 */
    expect_range(2, 7, 2);
    expect_range(2, 1000, 8);
    expect_range(2, 3, 2); /* the toy at 2 GPUs: 2 and 1 */
}

Test(lesson02, t3_empty_shards) {
    expect_range(3, 3, 4); /* the toy's 3 scalars on 4 GPUs: GPU 3 keeps nothing */
    expect_range(3, 1, 4); /* the ViT's class token [1, 1, 128]: all of it on GPU 0 */
    expect_range(3, 5, 4); /* 2, 2, 1, 0: torch.chunk makes only 3 pieces */
    expect_range(3, 2, 8);
    expect_range(3, 0, 2);
}

/* A zero3 plan of a model at S ranks, for the engine's side of the comparison. */
static void make_plan(Plan *p, const ModelDesc *m, int S) {
    Err err = {0};
    cr_assert_eq(plan_create(p, m, (WrapPolicy){WRAP_LAYER, 0}, STRAT_ZERO3, S, 1, &err), 0, "%s",
                 err.msg);
}

static void make_model(ModelDesc *m, const char *name) {
    Err err = {0};
    if (!strcmp(name, "toy")) {
        cr_assert_eq(toy_model_create(m, &err), 0, "%s", err.msg);
        return;
    }
    VitConfig c;
    cr_assert_eq(vit_preset(name, &c), 0);
    cr_assert_eq(vit_model_create(m, &c, &err), 0, "%s", err.msg);
}

static void expect_wire_rows(const char *model, int S) {
    ModelDesc m;
    Plan p;
    make_model(&m, model);
    make_plan(&p, &m, S);
    for (int u = 0; u < p.nunits; u++)
        for (int i = 0; i < p.units[u].nparams; i++) {
            const UnitParam *up = &p.units[u].params[i];
            size_t d0 = (size_t)m.params[up->param].shape[0];
            lesson_try("wire_rows(d0=%zu, S=%d) for %s's %s", d0, S, model,
                       m.params[up->param].name);
            size_t got = wire_rows(d0, S);
            expect_size_why(4, "rows", up->chunk_rows, got,
                            got == d0 / (size_t)S
                                ? "d0 / S rounds down: every GPU's block on the wire has "
                                  "ceil(d0/S) rows, the longest shard's, the short ones padded."
                                : NULL);
        }
    plan_free(&p);
    model_desc_free(&m);
}

Test(lesson02, t4_wire_rows) {
    for (int S = 1; S <= 4; S++) expect_wire_rows("toy", S);
    expect_wire_rows("vit-tiny", 4);
    expect_wire_rows("vit-tiny", 8);
}

static void expect_rank_numel(const char *model, int S) {
    ModelDesc m;
    Plan p;
    make_model(&m, model);
    make_plan(&p, &m, S);
    TensorShape *shapes = calloc((size_t)m.nparams, sizeof *shapes);
    cr_assert(shapes);
    for (int i = 0; i < m.nparams; i++)
        shapes[i] = (TensorShape){(size_t)m.params[i].shape[0], m.params[i].row_elems};
    size_t padded = 0; /* what a rank would keep if it kept its padded rows */
    for (int i = 0; i < m.nparams; i++)
        padded += (shapes[i].d0 + (size_t)S - 1) / (size_t)S * shapes[i].row_elems;
    for (int r = 0; r < S; r++) {
        size_t want = 0;
        for (int u = 0; u < p.nunits; u++) want += plan_param_numel(&p, u, r);
        lesson_try("rank_numel(%s's %d tensors, S=%d, r=%d)", model, m.nparams, S, r);
        size_t got = rank_numel(shapes, m.nparams, S, r);
        if (got != want) {
            size_t all = m.total_numel;
            free(shapes);
            plan_free(&p);
            model_desc_free(&m);
            const char *why = NULL;
            if (got == padded)
                why = "You counted the padded rows the wire carries: a GPU keeps only its real "
                      "rows of each tensor (shard_range's rows); padding lives only in the "
                      "collectives' buffers.";
            else if (got == all / (size_t)S)
                why = "That is the model's elements split evenly: each tensor is split on its "
                      "own, by rows, so the GPUs' shares differ.";
            expect_size_why(4, "elements", want, got, why);
        }
    }
    free(shapes);
    plan_free(&p);
    model_desc_free(&m);
}

Test(lesson02, t5_rank_numel) {
    for (int S = 1; S <= 4; S++) expect_rank_numel("toy", S);
    expect_rank_numel("vit-tiny", 1);
    expect_rank_numel("vit-tiny", 4); /* GPU 0 keeps the class token and more of the head */
    expect_rank_numel("vit-tiny", 8);
}
