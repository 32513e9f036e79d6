/* Held-out validation in the training loop, in-process on the toy: the sampler never draws a
 * held-out sample (they are poisoned: one drawn would make its step's loss nan), validation reads
 * exactly them, the lowest loss is marked best, and each epoch's mean is the mean of its steps'
 * losses whether or not a step's loss was all-reduced. */
#include <criterion/criterion.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "models/toy.h"
#include "tests/util.h"

#define HELD 56 /* of the toy's 256 points: 200 left to train on */

typedef struct Recorded {
    StepReport steps[128];
    int nsteps;
    EvalReport evals[64];
    int nevals;
    EpochReport epochs[32];
    int nepochs;
    float params[9];
} Recorded;

static void on_step(void *user, const StepReport *r) {
    Recorded *rec = user;
    cr_assert_lt(rec->nsteps, 128);
    rec->steps[rec->nsteps++] = *r;
}

static void on_eval(void *user, const EvalReport *r) {
    Recorded *rec = user;
    cr_assert_lt(rec->nevals, 64);
    rec->evals[rec->nevals++] = *r;
}

static void on_epoch(void *user, const EpochReport *r) {
    Recorded *rec = user;
    cr_assert_lt(rec->nepochs, 32);
    rec->epochs[rec->nepochs++] = *r;
}

/* Trains the toy on a copy of its data whose last HELD targets are nan when `poison`, holding
 * out the last held_out points (validated every eval_every steps and at epoch ends). Returns
 * the run's code; err says why it failed. */
static int toy_run(Recorded *rec, FsdpConfig cfg, int ranks, long steps, long held_out,
                   long eval_every, int poison, int log_every, Err *err) {
    memset(rec, 0, sizeof *rec);
    ModelDesc model;
    Dataset toy, data;
    Plan plan;
    cr_assert_eq(toy_model_create(&model, err), 0);
    cr_assert_eq(toy_dataset_create(&toy, err), 0);
    float *copy = malloc(2 * TOY_DATASET_SIZE * sizeof(float));
    cr_assert_not_null(copy);
    memcpy(copy, toy.inputs, TOY_DATASET_SIZE * sizeof(float));
    memcpy(copy + TOY_DATASET_SIZE, toy.targets, TOY_DATASET_SIZE * sizeof(float));
    for (int i = TOY_DATASET_SIZE - HELD; poison && i < TOY_DATASET_SIZE; i++)
        copy[TOY_DATASET_SIZE + i] = NAN;
    data = toy;
    data.inputs = copy;
    data.targets = copy + TOY_DATASET_SIZE;
    data.owned = copy;
    cr_assert_eq(fsdp_plan_create(&plan, &model, &cfg, ranks, err), 0, "%s", err->msg);
    TrainJob job = {.model = &model,
                    .data = &data,
                    .plan = &plan,
                    .cfg = &cfg,
                    .steps = steps,
                    .log_every = log_every,
                    .on_step = on_step,
                    .on_eval = on_eval,
                    .on_epoch = on_epoch,
                    .user = rec,
                    .held_out = held_out,
                    .eval_every = eval_every,
                    .final_params = rec->params};
    ClusterOptions opt = {.ranks = ranks, .profile = profile_default()};
    ClusterResult res;
    int rc = cluster_run(&opt, train_rank, &job, &res, err);
    cluster_result_free(&res);
    plan_free(&plan);
    model_desc_free(&model);
    dataset_free(&data);
    dataset_free(&toy);
    return rc;
}

/* Several epochs at several world sizes, with accumulation too: no step's loss is nan, so no
 * global batch held a poisoned point, while every validation's is, so it read them. */
Test(validation, held_out_samples_are_never_trained_on) {
    const struct {
        int ranks, batch, accum;
    } cases[] = {{1, 8, 1}, {2, 8, 1}, {3, 8, 1}, {2, 4, 3}, {4, 5, 1}};
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        FsdpConfig cfg = toy_config(STRAT_ZERO3, cases[i].batch);
        cfg.grad_accum = cases[i].accum;
        long global = (long)cases[i].ranks * cases[i].batch * cases[i].accum;
        long per_epoch = (TOY_DATASET_SIZE - HELD) / global, steps = 4 * per_epoch + 1;
        Recorded rec;
        Err err = {0};
        int rc = toy_run(&rec, cfg, cases[i].ranks, steps, HELD, 0, 1, 1, &err);
        cr_assert_eq(rc, 0, "%d ranks x %d x %d: %s", cases[i].ranks, cases[i].batch,
                     cases[i].accum, err.msg);
        cr_assert_eq(rec.nsteps, steps);
        for (int s = 0; s < rec.nsteps; s++) {
            cr_expect(isfinite(rec.steps[s].stats.loss), "step %d's loss is %g", s + 1,
                      (double)rec.steps[s].stats.loss);
            cr_expect_eq(rec.steps[s].steps_per_epoch, per_epoch);
        }
        /* validation after each of the 5 epochs (the last one step long) */
        cr_assert_eq(rec.nevals, 5, "%d ranks: %d validations", cases[i].ranks, rec.nevals);
        for (int v = 0; v < rec.nevals; v++) {
            cr_expect_eq(rec.evals[v].kind, EVAL_VALIDATION);
            cr_expect_eq(rec.evals[v].samples, HELD);
            cr_expect(isnan(rec.evals[v].loss), "validation %d's loss is %g", v, rec.evals[v].loss);
            cr_expect_eq(rec.evals[v].best, 0, "a nan loss is no best");
        }
    }
    /* the poison is seen: with nothing held out, the first epoch draws a poisoned point */
    Recorded rec;
    Err err = {0};
    FsdpConfig cfg = toy_config(STRAT_ZERO3, 8);
    cr_expect_eq(toy_run(&rec, cfg, 3, 20, 0, 0, 1, 1, &err), ERR_DIVERGED, "%s", err.msg);
}

/* Holding out changes which points an epoch permutes, not invariant 1: three ranks of 8 train
 * to one rank of 24's parameters. */
Test(validation, held_out_runs_still_equal_one_rank_on_the_global_batch) {
    Recorded one, three;
    Err err = {0};
    cr_assert_eq(toy_run(&one, toy_config(STRAT_ZERO3, 24), 1, 20, HELD, 0, 0, 0, &err), 0, "%s",
                 err.msg);
    cr_assert_eq(toy_run(&three, toy_config(STRAT_ZERO3, 8), 3, 20, HELD, 0, 0, 0, &err), 0, "%s",
                 err.msg);
    double d = rel_l2(three.params, one.params, 9);
    cr_expect_leq(d, 1e-5, "rel L2 %.3g", d);
    Recorded all;
    cr_assert_eq(toy_run(&all, toy_config(STRAT_ZERO3, 24), 1, 20, 0, 0, 0, 0, &err), 0);
    cr_expect_gt(rel_l2(all.params, one.params, 9), 1e-6, "holding out changed nothing");
}

/* Validation every 3 steps and at each epoch's end; each is marked best exactly when its loss is
 * below every earlier one. */
Test(validation, best_is_each_loss_below_all_before_it) {
    Recorded rec;
    Err err = {0};
    FsdpConfig cfg = toy_config(STRAT_ZERO3, 8);
    cfg.lr = 0.2f; /* a loss that goes up as well as down */
    cr_assert_eq(toy_run(&rec, cfg, 3, 40, HELD, 3, 0, 1, &err), 0, "%s", err.msg);
    /* steps 3, 6, ..., 39 and the epoch ends 8, 16, 24 (once), 32, 40 */
    cr_assert_eq(rec.nevals, 13 + 5 - 1);
    double lowest = INFINITY;
    int improved = 0, not_improved = 0;
    for (int v = 0; v < rec.nevals; v++) {
        const EvalReport *r = &rec.evals[v];
        int epoch_end = r->step % 8 == 0;
        cr_expect(r->step % 3 == 0 || epoch_end, "a validation at step %ld", r->step);
        cr_expect_eq(r->epoch_end, epoch_end, "step %ld", r->step);
        cr_expect_eq(r->best, r->loss < lowest, "step %ld: loss %.9g, lowest before %.9g", r->step,
                     r->loss, lowest);
        improved += r->best;
        not_improved += !r->best;
        if (r->loss < lowest) lowest = r->loss;
    }
    cr_expect(improved > 1 && not_improved > 0, "the case shows both (%d best, %d not)", improved,
              not_improved);
}

/* 25 steps of 10 an epoch: epochs of 10, 10 and 5 steps, each reported with the mean of its
 * steps' losses. Logged at every step, those are the losses the steps reported; logged at none
 * (no collective at any step), the means are the same. */
Test(validation, an_epochs_mean_is_the_mean_of_its_steps_losses) {
    Recorded every, none;
    Err err = {0};
    FsdpConfig cfg = toy_config(STRAT_ZERO3, 8);
    cr_assert_eq(toy_run(&every, cfg, 3, 25, 0, 0, 0, 1, &err), 0, "%s", err.msg);
    cr_assert_eq(toy_run(&none, cfg, 3, 25, 0, 0, 0, 0, &err), 0, "%s", err.msg);
    cr_assert_eq(every.nsteps, 25);
    cr_assert_eq(none.nsteps, 0);
    cr_assert_eq(every.nepochs, 3);
    cr_assert_eq(none.nepochs, 3);
    const long ends[] = {10, 20, 25};
    for (int ep = 0; ep < 3; ep++) {
        const EpochReport *r = &every.epochs[ep];
        long first = ep * 10, n = ends[ep] - first;
        double sum = 0.0;
        for (long s = first; s < ends[ep]; s++) sum += every.steps[s].stats.loss;
        cr_expect_eq(r->epoch, ep + 1);
        cr_expect_eq(r->epochs, 3);
        cr_expect_eq(r->step, ends[ep]);
        cr_expect_eq(r->steps, n);
        double mean = sum / (double)n;
        cr_expect_leq(fabs(r->loss - mean), 1e-6 * mean, "epoch %d: %.9g, its steps' mean %.9g",
                      ep + 1, r->loss, mean);
        cr_expect_leq(fabs(none.epochs[ep].loss - r->loss), 1e-6 * mean,
                      "epoch %d unlogged: %.9g, logged %.9g", ep + 1, none.epochs[ep].loss,
                      r->loss);
    }
    /* the means differ epoch to epoch: each is its own epoch's */
    cr_expect_neq(every.epochs[0].loss, every.epochs[1].loss);
}
