/* Learning-rate schedules: every step's rate against the closed forms, against PyTorch's own
 * step-by-step scheduler arithmetic and against the rates PyTorch gave (a fixture) over 200-step
 * runs, the rate the engine's Adam really used, a run resumed in the middle of its warm-up, and
 * each bad schedule refused with one line. No test sets a .timeout (see test_levers.c: timed tests
 * side by side leak in Criterion's runner under the sanitizers); each takes seconds. */
#include <criterion/criterion.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "engine/lr_schedule.h"
#include "tests/util.h"

#define RUN 200

/* A schedule of a test: the base rate, the run's length and what LrSchedule holds. */
typedef struct Case {
    const char *name;
    LrScheduleKind kind;
    double lr;
    long warmup;
    double min_lr;
    long step_size;
    double gamma;
} Case;

static const Case cases[] = {
    {"constant", LR_CONSTANT, 0.05, 0, 0, 0, 0.1},
    {"constant, warm-up 10", LR_CONSTANT, 0.05, 10, 0, 0, 0.1},
    {"constant, warm-up longer than the run", LR_CONSTANT, 0.05, 250, 0, 0, 0.1},
    {"cosine", LR_COSINE, 1e-3, 0, 0, 0, 0.1},
    {"cosine, warm-up 10, min 1e-4", LR_COSINE, 1e-3, 10, 1e-4, 0, 0.1},
    {"cosine, warm-up 199", LR_COSINE, 1e-3, 199, 0, 0, 0.1},
    {"linear", LR_LINEAR, 0.05, 0, 0, 0, 0.1},
    {"linear, warm-up 20, min 5e-3", LR_LINEAR, 0.05, 20, 5e-3, 0, 0.1},
    {"step 30 x 0.5", LR_STEP, 0.05, 0, 0, 30, 0.5},
    {"step 7 x 0.1, warm-up 10", LR_STEP, 1e-3, 10, 0, 7, 0.1},
};
enum { NCASES = sizeof cases / sizeof *cases };

static LrSchedule schedule_of(const Case *c) {
    return (LrSchedule){.kind = c->kind,
                        .warmup_steps = c->warmup,
                        .min_lr = (float)c->min_lr,
                        .step_size = c->step_size,
                        .gamma = c->gamma};
}

/* The closed forms, written out here as docs/training.md gives them: step s (0-based) of a run
 * of `total`, N warm-up steps, t = s - N, M = total - N. */
static double closed_form(const Case *c, long s, long total) {
    double lr = c->lr, min = (float)c->min_lr; /* the flag's value is a float */
    long n = c->warmup, t = s - n, m = total - n;
    if (s < n) return lr * (double)(s + 1) / (double)n;
    switch (c->kind) {
    case LR_COSINE:
        return min + (lr - min) * (1.0 + cos(M_PI * (double)t / (double)m)) / 2.0;
    case LR_LINEAR:
        return lr * (1.0 + (min / lr - 1.0) * (double)t / (double)m); /* LinearLR's factor */
    case LR_STEP:
        return lr * pow(c->gamma, floor((double)t / (double)c->step_size));
    default:
        return lr;
    }
}

/* What PyTorch computes, step by step, for SequentialLR([LambdaLR(lambda s: (s + 1) / N), MAIN],
 * milestones=[N]) with scheduler.step() after each optimizer.step(): LambdaLR's rate until the
 * milestone, MAIN.step(0) there (its closed form at 0: the base rate), then MAIN's recursive
 * get_lr from the group's current rate (torch/optim/lr_scheduler.py), not the closed form. With
 * N = 0, MAIN alone. rates[s] is the rate optimizer.step() uses at step s. */
static void torch_rates(const Case *c, long total, double *rates) {
    double base = c->lr, min = (float)c->min_lr, lr;
    long n = c->warmup, m = total - n;
    lr = n > 0 ? base * 1.0 / (double)n : base; /* each scheduler's initial step */
    for (long s = 0; s < total; s++) {
        rates[s] = lr;
        long e = s + 1; /* SequentialLR's last_epoch after this scheduler.step() */
        if (e < n) {
            lr = base * (double)(e + 1) / (double)n; /* LambdaLR: base_lr * lambda(last_epoch) */
            continue;
        }
        if (e == n) { /* the milestone: MAIN.step(0), its closed form at 0 */
            lr = base;
            continue;
        }
        long t = e - n; /* MAIN's last_epoch */
        if (c->kind == LR_COSINE) {
            if ((t - 1 - m) % (2 * m) == 0)
                lr = lr + (base - min) * (1.0 - cos(M_PI / (double)m)) / 2.0;
            else
                lr = (1.0 + cos(M_PI * (double)t / (double)m)) /
                         (1.0 + cos(M_PI * (double)(t - 1) / (double)m)) * (lr - min) +
                     min;
        } else if (c->kind == LR_LINEAR) { /* start_factor 1, end_factor min / base */
            double start = 1.0, end = min / base;
            if (t <= m)
                lr = lr *
                     (1.0 + (end - start) / ((double)m * start + (double)(t - 1) * (end - start)));
        } else if (c->kind == LR_STEP) {
            if (t % c->step_size == 0) lr = lr * c->gamma;
        } else {
            lr = base; /* LambdaLR(lambda s: min(1, (s + 1) / N)) past the warm-up */
        }
    }
}

static int close_to(double got, double want, double rel) {
    return fabs(got - want) <= rel * fabs(want) + 1e-300;
}

Test(lr_schedule, every_step_of_a_200_step_run_is_pytorchs_rate) {
    double torch[RUN];
    for (int i = 0; i < NCASES; i++) {
        const Case *c = &cases[i];
        LrSchedule s = schedule_of(c);
        torch_rates(c, RUN, torch);
        for (long step = 0; step < RUN; step++) {
            double got = lr_schedule_rate(&s, c->lr, step, RUN);
            double want = closed_form(c, step, RUN);
            cr_expect(close_to(got, want, 1e-12), "%s, step %ld: %.17g, the closed form %.17g",
                      c->name, step, got, want);
            /* PyTorch's recursion drifts from the closed form by a few units of the last place */
            cr_expect(close_to(got, torch[step], 1e-9), "%s, step %ld: %.17g, PyTorch %.17g",
                      c->name, step, got, torch[step]);
        }
    }
}

/* tests/fixtures/lr_torch.txt: the rates PyTorch 2.11's own schedulers gave, step by step
 * (`python3 tests/lr_vs_torch.py torch`, its CASES in this order), one line of 200 per case. */
static const Case torch_cases[] = {
    {"cosine", LR_COSINE, 0.001, 0, 0, 0, 0},
    {"cosine, warm-up 10, min 1e-4", LR_COSINE, 0.001, 10, 1e-4, 0, 0},
    {"cosine, warm-up 199", LR_COSINE, 0.001, 199, 0, 0, 0},
    {"linear", LR_LINEAR, 0.05, 0, 0, 0, 0},
    {"linear, warm-up 20, min 5e-3", LR_LINEAR, 0.05, 20, 0.005, 0, 0},
    {"step 30 x 0.5", LR_STEP, 0.05, 0, 0, 30, 0.5},
    {"step 7 x 0.1, warm-up 10", LR_STEP, 0.001, 10, 0, 7, 0.1},
    {"constant, warm-up 10", LR_CONSTANT, 0.05, 10, 0, 0, 0},
};

Test(lr_schedule, every_step_is_the_fp32_rate_pytorchs_schedulers_gave) {
    FILE *f = fopen("tests/fixtures/lr_torch.txt", "r");
    cr_assert(f, "cannot open tests/fixtures/lr_torch.txt");
    char version[64];
    cr_assert_eq(fscanf(f, "torch %63s", version), 1);
    for (size_t i = 0; i < sizeof torch_cases / sizeof *torch_cases; i++) {
        const Case *c = &torch_cases[i];
        LrSchedule s = schedule_of(c);
        for (long step = 0; step < RUN; step++) {
            double torch;
            cr_assert_eq(fscanf(f, "%lf", &torch), 1, "%s: step %ld missing", c->name, step);
            /* fsdp reads --lr as a float and hands Adam the rate as one */
            float got = (float)lr_schedule_rate(&s, (float)c->lr, step, RUN);
            cr_expect_eq(got, (float)torch, "%s, step %ld: %.9g, PyTorch %s's %.17g", c->name, step,
                         (double)got, version, torch);
        }
    }
    double more;
    cr_expect_eq(fscanf(f, "%lf", &more), EOF, "the fixture has more rates than the cases");
    fclose(f);
}

/* Values a person can check by hand. */
Test(lr_schedule, landmarks) {
    LrSchedule warm = {.kind = LR_COSINE, .warmup_steps = 8};
    cr_expect_eq(lr_schedule_rate(&warm, 0.08, 0, 108), 0.01); /* 0.08 x 1/8 */
    cr_expect_eq(lr_schedule_rate(&warm, 0.08, 7, 108), 0.08); /* the warm-up's last */
    cr_expect_eq(lr_schedule_rate(&warm, 0.08, 8, 108), 0.08); /* the cosine's first */
    cr_expect(close_to(lr_schedule_rate(&warm, 0.08, 58, 108), 0.04, 1e-15)); /* half-way */
    LrSchedule lin = {.kind = LR_LINEAR, .min_lr = 0.25f};
    cr_expect_eq(lr_schedule_rate(&lin, 1.0, 50, 100), 0.625); /* half-way from 1 to 0.25 */
    LrSchedule step = {.kind = LR_STEP, .step_size = 10, .gamma = 0.5};
    cr_expect_eq(lr_schedule_rate(&step, 1.0, 9, 100), 1.0);
    cr_expect_eq(lr_schedule_rate(&step, 1.0, 10, 100), 0.5);
    cr_expect_eq(lr_schedule_rate(&step, 1.0, 35, 100), 0.125);
    LrSchedule constant = {.kind = LR_CONSTANT};
    cr_expect_eq(lr_schedule_rate(&constant, 0.05, 99, 100), 0.05);
    cr_expect_not(lr_schedule_varies(&constant));
    cr_expect(lr_schedule_varies(&warm));
    LrScheduleKind k;
    cr_expect_eq(lr_schedule_parse("cosine", &k), 0);
    cr_expect_eq(k, LR_COSINE);
    cr_expect_str_eq(lr_schedule_name(LR_STEP), "step");
    cr_expect_eq(lr_schedule_parse("cos", &k), -1);
}

/* The engine's Adam used each step's rate: the toy's recorded gradients replayed through
 * torch.optim.Adam's formula at the schedule's rate give every step's recorded parameters. A
 * rate off by one step of the warm-up (1/8 of the base rate) moves a parameter by about 6e-3. */
Test(lr_schedule, the_engine_steps_adam_at_each_steps_rate) {
    enum { STEPS = 40, NUMEL = 9 };
    FsdpConfig cfg = toy_config(STRAT_ZERO3, 8);
    cfg.lr_schedule = (LrSchedule){.kind = LR_COSINE, .warmup_steps = 8, .min_lr = 1e-3f};
    Case c = {"cosine", LR_COSINE, cfg.lr, 8, 1e-3, 0, 0.1};
    ToyRun run;
    toy_train(&run, &cfg, 3, STEPS, 0);
    cr_assert_eq(run.nsteps, STEPS);
    double m[NUMEL] = {0}, v[NUMEL] = {0};
    for (int s = 0; s < STEPS; s++) {
        float lr = (float)closed_form(&c, s, STEPS);
        cr_expect_eq(run.steps[s].lr, lr, "step %d reported lr %.9g, the schedule's %.9g", s + 1,
                     (double)run.steps[s].lr, (double)lr);
        double bc1 = 1.0 - pow(0.9, s + 1), bc2 = 1.0 - pow(0.999, s + 1);
        for (int i = 0; i < NUMEL; i++) {
            double g = run.step_grads[s * NUMEL + i];
            m[i] = 0.9 * m[i] + 0.1 * g;
            v[i] = 0.999 * v[i] + 0.001 * g * g;
            double before = run.step_params[s * NUMEL + i];
            double want = before - lr / bc1 * m[i] / (sqrt(v[i]) / sqrt(bc2) + 1e-8);
            double got = run.step_params[(s + 1) * NUMEL + i];
            cr_expect(fabs(got - want) <= 2e-6, "step %d, element %d: %.9g, Adam at lr %.6g: %.9g",
                      s + 1, i, got, (double)lr, want);
        }
    }
    toy_run_free(&run);
}

/* ---- through the command line */

/* The "lr" of step `step` in a --json run's output, as printed; "" when the step is not there. */
static void json_lr(const char *out, long step, char *lr, size_t n) {
    char key[48];
    snprintf(key, sizeof key, "{\"step\":%ld,", step);
    const char *at = strstr(out, key), *v = at ? strstr(at, "\"lr\":") : NULL;
    snprintf(lr, n, "%.*s", v ? (int)strcspn(v + 5, ",") : 0, v ? v + 5 : "");
}

static int same_file(const char *a, const char *b) {
    char cmd[1024];
    snprintf(cmd, sizeof cmd, "cmp -s %s %s", a, b);
    return system(cmd) == 0;
}

/* The whole path, flags to --json: each step of 200-step runs reports the schedule's rate (the
 * float Adam is handed), for every kind of schedule. */
Test(lr_schedule, a_200_step_run_reports_the_schedules_rate_at_every_step) {
    const struct {
        const char *flags;
        Case c;
    } runs[] = {
        {"--lr 0.001 --lr-schedule cosine --warmup-steps 10 --min-lr 0.0001", cases[4]},
        {"--lr-schedule linear --warmup-steps 20 --min-lr 0.005", cases[7]},
        {"--lr 0.001 --lr-schedule step --step-size 7 --gamma 0.1 --warmup-steps 10", cases[9]},
        {"--warmup-steps 10", cases[1]},
    };
    for (size_t r = 0; r < sizeof runs / sizeof *runs; r++) {
        char *out = fsdp_ok("train --steps %d --json %s", RUN, runs[r].flags);
        Case c = runs[r].c;
        c.lr = (float)c.lr; /* --lr is a float */
        for (long step = 1; step <= RUN; step++) {
            char got[32];
            json_lr(out, step, got, sizeof got);
            float want = (float)closed_form(&c, step - 1, RUN);
            cr_expect_eq(strtof(got, NULL), want, "%s, step %ld: lr '%s', the schedule's %.9g",
                         runs[r].flags, step, got, (double)want);
        }
        free(out);
    }
}

#define WARMUP_RUN "train --steps 10 --lr-schedule cosine --warmup-steps 8 --min-lr 0.001 --json"

/* A run of 10 steps with 8 of warm-up, interrupted after its checkpoint of step 4 (rank 0 fails
 * as step 5 begins) and resumed: every step reports the rate of the run never interrupted, the
 * schedule's, and the parameters end the same bit for bit. */
Test(lr_schedule, a_run_resumed_in_its_warm_up_continues_the_same_rates) {
    char dir[128], full[256], resumed[256];
    fresh_test_dir(dir, sizeof dir, "lr", "resume");
    snprintf(full, sizeof full, "%s/full.txt", dir);
    snprintf(resumed, sizeof resumed, "%s/resumed.txt", dir);
    char *whole = fsdp_ok(WARMUP_RUN " --dump-params %s", full);
    int code;
    char *first = fsdp_run(&code, "2>&1",
                           WARMUP_RUN " --checkpoint-dir %s/ck --checkpoint-every 4 "
                                      "--fail-at 5",
                           dir);
    cr_expect_eq(code, 1, "the injected failure ends the first run: %s", first);
    char *rest =
        fsdp_ok(WARMUP_RUN " --checkpoint-dir %s/ck --resume auto --dump-params %s", dir, resumed);
    Case c = {"cosine", LR_COSINE, 0.05, 8, 1e-3, 0, 0.1};
    for (long step = 1; step <= 10; step++) {
        char want[32], got[32];
        json_lr(whole, step, want, sizeof want);
        json_lr(step <= 4 ? first : rest, step, got, sizeof got);
        cr_expect_str_eq(got, want, "step %ld: lr %s, uninterrupted %s", step, got, want);
        float schedule = (float)closed_form(&c, step - 1, 10);
        cr_expect_eq(strtof(want, NULL), schedule, "step %ld: lr %s, the schedule's %.9g", step,
                     want, (double)schedule);
    }
    char none[32];
    json_lr(rest, 4, none, sizeof none);
    cr_expect_str_eq(none, "", "the resumed run starts at step 5");
    cr_expect(same_file(full, resumed), "the resumed run's parameters differ");
    free(whole);
    free(first);
    free(rest);
    remove_test_dir(dir);
}

/* The checkpoint carries the run's curve, and a resume that asks for another one (another
 * warm-up, another length of a cosine run, no schedule, a schedule where none was) is refused with
 * the flags of both, exit 2, the checkpoint left as it was. A step schedule reads no length, so
 * it resumes for longer on the same rates. */
Test(lr_schedule, a_resume_is_held_to_the_checkpoints_curve) {
    char dir[128], ck[200];
    fresh_test_dir(dir, sizeof dir, "lr", "curve");
    snprintf(ck, sizeof ck, "%s/ck", dir);
    free(fsdp_ok(WARMUP_RUN " --checkpoint-dir %s", ck));
    char *info = fsdp_ok("ckpt inspect %s/step-00000010", ck);
    cr_expect_neq(strstr(info, "lr schedule --lr-schedule cosine --lr 0.05 --warmup-steps 8 "
                               "--min-lr 0.001 over 10 steps\n"),
                  NULL, "%s", info);
    free(info);
    char meta[256];
    snprintf(meta, sizeof meta, "%s/step-00000010/meta.json", ck);
    char *before = read_text_file(meta, NULL);
    const char *was = "was trained with --lr-schedule cosine --lr 0.05 --warmup-steps 8 --min-lr "
                      "0.001 over 10 steps; this run asks for ";
    const struct {
        const char *flags, *asks;
    } other[] = {
        {"--steps 10 --lr-schedule cosine --warmup-steps 7 --min-lr 0.001",
         "--lr-schedule cosine --lr 0.05 --warmup-steps 7 --min-lr 0.001 over 10 steps"},
        {"--steps 12 --lr-schedule cosine --warmup-steps 8 --min-lr 0.001",
         "--lr-schedule cosine --lr 0.05 --warmup-steps 8 --min-lr 0.001 over 12 steps"},
        {"--steps 10 --lr-schedule cosine --warmup-steps 8 --min-lr 0.002",
         "--lr-schedule cosine --lr 0.05 --warmup-steps 8 --min-lr 0.002 over 10 steps"},
        {"--steps 10", "--lr-schedule constant --lr 0.05: resume it with the same"},
    };
    for (size_t i = 0; i < sizeof other / sizeof *other; i++) {
        char args[512], want[512];
        snprintf(args, sizeof args, "train %s --checkpoint-dir %s --resume auto", other[i].flags,
                 ck);
        snprintf(want, sizeof want, "%s%s", was, other[i].asks);
        expect_usage_error(args, want);
    }
    char *after = read_text_file(meta, NULL);
    cr_assert(before && after, "%s is gone", meta);
    cr_expect_str_eq(after, before, "a refused resume changed %s", meta);
    free(before);
    free(after);
    /* a constant run's checkpoint records no curve: a schedule added on resuming is refused */
    snprintf(ck, sizeof ck, "%s/flat", dir);
    free(fsdp_ok("train --steps 4 --checkpoint-dir %s", ck));
    char args[512];
    snprintf(args, sizeof args,
             "train --steps 8 --lr-schedule step --step-size 2 --checkpoint-dir %s --resume auto",
             ck);
    expect_usage_error(args, "was trained with a constant rate (no schedule recorded); this run "
                             "asks for --lr-schedule step --lr 0.05 --step-size 2 --gamma 0.1");
    /* a step schedule resumed for longer: the first run's rates, then the schedule's */
    snprintf(ck, sizeof ck, "%s/step", dir);
#define STEP_RUN "train --lr-schedule step --step-size 3 --gamma 0.5 --json"
    free(fsdp_ok(STEP_RUN " --steps 6 --checkpoint-dir %s", ck));
    char *longer = fsdp_ok(STEP_RUN " --steps 9 --checkpoint-dir %s --resume auto", ck);
    char *whole = fsdp_ok(STEP_RUN " --steps 9");
    for (long step = 7; step <= 9; step++) {
        char want[32], got[32];
        json_lr(whole, step, want, sizeof want);
        json_lr(longer, step, got, sizeof got);
        cr_expect_str_eq(got, want, "step %ld: lr %s, uninterrupted %s", step, got, want);
        cr_expect_eq(strtof(got, NULL), 0.05f * 0.25f, "step %ld: %s", step, got);
    }
#undef STEP_RUN
    free(longer);
    free(whole);
    remove_test_dir(dir);
}

/* The text lines show the rate when a schedule moves it, and a line says the schedule with the
 * PyTorch schedulers that give it. */
Test(lr_schedule, the_run_says_its_schedule) {
    char *out = fsdp_ok("train --steps 20 --print-every 10 --lr-schedule step --step-size 10 "
                        "--gamma 0.5 --warmup-steps 4");
    cr_expect_neq(strstr(out, "lr: warm-up to 0.05 over steps 1-4 (0.05 x step/4), then 0.05 "
                              "times 0.5 every 10 steps from step 5; PyTorch: "
                              "SequentialLR([LambdaLR(lambda s: (s + 1) / 4), StepLR(step_size=10, "
                              "gamma=0.5)], milestones=[4])\n"),
                  NULL, "%s", out);
    cr_expect_neq(strstr(out, "step      1  epoch   0  loss 3.152367  lr 1.250e-02  step"), NULL,
                  "%s", out);
    cr_expect_neq(strstr(out, "step     20  epoch   1  loss"), NULL, "%s", out);
    cr_expect_neq(strstr(out, "lr 2.500e-02  step"), NULL, "step 20: 0.05 x 0.5: %s", out);
    free(out);
    out = fsdp_ok("train --steps 2");
    cr_expect_eq(strstr(out, "lr"), NULL, "no schedule, no lr in the lines: %s", out);
    free(out);
}

Test(lr_schedule, bad_schedules_are_one_line_and_exit_2) {
    const UsageCase bad[] = {
        {"train --lr-schedule cosinus", "--lr-schedule must be constant, cosine, linear or step"},
        {"train --lr-schedule step", "--lr-schedule step needs --step-size N"},
        {"train --lr-schedule step --step-size 0", "--step-size must be an integer from 1"},
        {"train --lr-schedule step --step-size 5 --gamma 0", "--gamma must be a number above 0"},
        {"train --lr-schedule step --step-size 5 --gamma 1.5", "and at most 1"},
        {"train --lr-schedule step --step-size 5 --gamma nan", "--gamma must be a number"},
        {"train --lr-schedule cosine --step-size 5", "--step-size and --gamma apply only to "
                                                     "--lr-schedule step (got cosine)"},
        {"train --gamma 0.5", "apply only to --lr-schedule step (got constant)"},
        {"train --lr-schedule step --step-size 5 --min-lr 0.01",
         "--min-lr applies only to --lr-schedule cosine or linear (got step)"},
        {"train --min-lr 0.01", "(got constant)"},
        {"train --lr-schedule cosine --min-lr 0.1", "--min-lr 0.1 is above --lr 0.05"},
        {"train --lr-schedule linear --lr 0.01 --min-lr -1", "--min-lr must be a number from 0"},
        {"train --warmup-steps -1", "--warmup-steps must be an integer from 0"},
        {"train --warmup-steps 2.5", "--warmup-steps must be an integer"},
        {"train --steps 50 --lr-schedule cosine --warmup-steps 50",
         "--warmup-steps 50 leaves none of the run's 50 steps to --lr-schedule cosine"},
        {"train --steps 50 --lr-schedule linear --warmup-steps 80", "the run's 50 steps"},
        /* the ViT's epoch is known once the data set is read: 234 steps at 4 x 64 */
        {"train --model vit-tiny --ranks 4 --epochs 1 --lr-schedule cosine --warmup-steps 234",
         "--warmup-steps 234 leaves none of the run's 234 steps"},
        {"train --model vit-tiny --lr-schedule cosine --min-lr 0.01",
         "--min-lr 0.01 is above --lr 0.001"},
    };
    expect_usage_errors(bad, sizeof bad / sizeof *bad);
}

/* A refused schedule leaves what existed alone: the dump file a good run wrote is intact. */
Test(lr_schedule, a_refused_schedule_loses_nothing) {
    char dir[128], dump[256];
    fresh_test_dir(dir, sizeof dir, "lr", "keep");
    snprintf(dump, sizeof dump, "%s/p.txt", dir);
    free(fsdp_ok("train --steps 3 --dump-params %s", dump));
    char *before = read_text_file(dump, NULL);
    char args[512];
    snprintf(args, sizeof args,
             "train --model vit-tiny --ranks 4 --epochs 1 --lr-schedule linear --warmup-steps 300 "
             "--dump-params %s --checkpoint-dir %s/ck",
             dump, dir);
    expect_usage_error(args, "--warmup-steps 300 leaves none of the run's 234 steps");
    char *after = read_text_file(dump, NULL);
    cr_expect_str_eq(after, before, "the dump file changed");
    char ck[300];
    snprintf(ck, sizeof ck, "%s/ck", dir);
    cr_expect_neq(access(ck, F_OK), 0, "a refused run made its checkpoint directory");
    free(before);
    free(after);
    remove_test_dir(dir);
}
