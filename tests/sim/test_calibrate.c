/* plan --calibrate's fit, round trip: steps "measured" under a profile whose efficiencies are
 * known (the simulator's own, so every figure is exact) are fitted from the default profile;
 * the fitted profile must give back each kind of work's seconds, and the efficiencies the
 * steps were made with. */
#include <criterion/criterion.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "models/vit.h"
#include "sim/calibrate.h"
#include "tests/util.h"

/* A job of model m at `gpus` GPUs: its plan (freed by the caller) and its step's seconds of
 * each kind under truth. */
static CalibrateJob measured_job(const ModelDesc *m, Plan *p, int gpus, int batch,
                                 const Profile *truth) {
    FsdpConfig cfg = vit_config(STRAT_ZERO3, batch);
    Err err = {0};
    cr_assert_eq(fsdp_plan_create(p, m, &cfg, gpus, &err), 0, "%s", err.msg);
    PlannerJob pj = {.model = m, .plan = p, .cfg = cfg, .profile = truth, .steps = 2};
    PlannerResult r;
    cr_assert_eq(planner_run(&pj, &r, &err), 0, "%s", err.msg);
    CalibrateJob j = {.model = m, .plan = p, .cfg = cfg, .measured = r.kinds};
    planner_result_free(&r);
    return j;
}

Test(calibrate, a_fit_gives_back_the_efficiencies_the_steps_were_made_with) {
    Profile truth = *profile_find("h200-nvlink");
    truth.gemm_eff = 0.45, truth.attn_eff = 0.2, truth.mem_eff = 0.6;
    truth.launch_overhead = 9e-6, truth.bus_eff = 0.5;
    ModelDesc tiny, big;
    vit_small_create(&tiny, 2);
    vit_preset_create(&big, "vit-workshop");
    Plan plans[3];
    CalibrateJob jobs[3] = {measured_job(&tiny, &plans[0], 1, 512, &truth),
                            measured_job(&big, &plans[1], 1, 32, &truth),
                            measured_job(&big, &plans[2], 4, 8, &truth)};
    CalibrateResult res;
    Err err = {0};
    cr_assert_eq(calibrate_fit(jobs, 3, profile_find("h200-nvlink"), &res, &err), 0, "%s", err.msg);
    int compared = 0;
    for (int j = 0; j < 3; j++)
        for (int k = 0; k < EV_KIND_COUNT; k++) {
            if (!calibrate_kind_fitted(k) || res.measured[j][k] <= 0) continue;
            compared++;
            cr_expect(fabs(res.after[j][k] / res.measured[j][k] - 1) < 0.01,
                      "job %d %s: %.6g s fitted, %.6g measured (%.6g before)", j,
                      event_kind_name((EventKind)k), res.after[j][k], res.measured[j][k],
                      res.before[j][k]);
        }
    cr_expect_geq(compared, 12, "forward, backward, optimizer, collectives of three jobs");
    const Profile *f = &res.fitted;
    double got[FIT_COUNT] = {f->gemm_eff, f->attn_eff, f->mem_eff, f->launch_overhead, f->bus_eff};
    double want[FIT_COUNT] = {0.45, 0.2, 0.6, 9e-6, 0.5};
    for (int t = 0; t < FIT_COUNT; t++) {
        cr_expect(res.moved[t], "%s was fitted", fit_term_name((FitTerm)t));
        cr_expect(fabs(got[t] / want[t] - 1) < 0.05, "%s: %.4g fitted, %.4g true",
                  fit_term_name((FitTerm)t), got[t], want[t]);
    }
    for (int i = 0; i < 3; i++) plan_free(&plans[i]);
    model_desc_free(&tiny);
    model_desc_free(&big);
}

Test(calibrate, one_to_eight_traces) {
    CalibrateResult res;
    Err err = {0};
    cr_expect_neq(calibrate_fit(NULL, 0, profile_default(), &res, &err), 0);
    cr_expect(strstr(err.msg, "1 to 8 traces"), "%s", err.msg);
}

/* The command on a simulated run's trace: the simulator's own profile fits itself, so every
 * kind of work comes back at 1.00 and every term as it was; bad traces are one line, exit 2. */
Test(calibrate, the_command_fits_a_simulated_trace_to_itself) {
    char path[64];
    snprintf(path, sizeof path, "/tmp/fsdp_test_calibrate_%ld.json", (long)getpid());
    free(fsdp_ok("train --model vit-tiny --ranks 2 --steps 2 --eval false --trace-out %s", path));
    char *out = fsdp_ok("plan --calibrate %s", path);
    cr_expect(strstr(out, "fsdp plan --calibrate: h100-nvlink fitted to 1 trace\n"), "%s", out);
    cr_expect(strstr(out, ": step 2 of vit-tiny on 2 GPUs\n"), "%s", out);
    int rows = 0;
    for (const char *c = strstr(out, "fitted/measured\n"); c && (c = strstr(c, "  1.00\n")); c++)
        rows++;
    cr_expect_eq(rows, 5, "forward, backward, optimizer and two collectives: %s", out);
    cr_expect(strstr(out, "\n  gemm_eff              0.711      0.711\n"), "%s", out);
    cr_expect(strstr(out, "--gemm-eff 0.711 --attn-eff 0.35 --mem-eff 0.9 --launch-us 4 "
                          "--bus-eff 0.8\n"),
              "%s", out);
    free(out);
    char nine[1024] = "plan";
    for (int i = 0; i < 9; i++)
        snprintf(nine + strlen(nine), sizeof nine - strlen(nine), " --calibrate %s", path);
    const UsageCase bad[] = {
        {"plan --calibrate /nonexistent.json", "/nonexistent.json"},
        {nine, "--calibrate takes at most 8 traces"},
        {"plan --calibrate x.json --gpus 8", "give only the profile's flags with it (got --gpus)"},
        {"plan --calibrate x.json --search", "(got --search)"},
    };
    expect_usage_errors(bad, sizeof bad / sizeof *bad);
    remove(path);
}
