/* fsdp plan: the planner's bytes are the simulator's, its traffic what the engine issues, and the
 * command line gives the workshop's arithmetic and one line for bad input. */
#include <criterion/criterion.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/wait.h>

#include "models/toy.h"
#include "models/transformer.h"
#include "models/vit.h"
#include "sim/planner.h"
#include "tests/util.h"

/* For every configuration the simulator can run here, each rank's bytes by category at rest and at
 * peak equal a real run's exactly, for every strategy, with only the representative ranks run. */

static void plan_run(const ModelDesc *m, const Plan *p, FsdpConfig cfg, long steps,
                     PlannerResult *out) {
    PlannerJob job = {
        .model = m, .plan = p, .cfg = cfg, .profile = profile_default(), .steps = steps};
    Err err = {0};
    cr_assert_eq(planner_run(&job, out, &err), 0, "%s", err.msg);
}

Test(planner, the_toy_plan_equals_a_real_run_for_every_strategy) {
    static const WorldCase cases[] = {{STRAT_DDP, 3, 1},   {STRAT_ZERO1, 3, 1}, {STRAT_ZERO2, 3, 1},
                                      {STRAT_ZERO3, 3, 1}, {STRAT_ZERO3, 4, 1}, {STRAT_HSDP, 4, 2}};
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        FsdpConfig cfg = toy_config(cases[i].strategy, 8);
        cfg.replicas = cases[i].replicas;
        ToyRun real;
        toy_train(&real, &cfg, cases[i].ranks, 2, 0);
        PlannerResult planned;
        plan_run(&real.model, &real.plan, cfg, 2, &planned);
        expect_planned_memory(real.memory, &planned, cases[i].ranks,
                              strategy_name(cases[i].strategy));
        planner_result_free(&planned);
        toy_run_free(&real);
    }
}

/* Each case trained 2 steps (on data; NULL: the ViT's images) against its plan run by the
 * planner: every rank's memory the same. */
static void expect_plans_equal_runs(const ModelDesc *m, const Dataset *data,
                                    const ConfigCase *cases, size_t n) {
    for (size_t i = 0; i < n; i++) {
        VitRun real;
        if (data)
            model_train(&real, m, data, cases[i].cfg, cases[i].ranks, 2, 0);
        else
            vit_train(&real, m, cases[i].cfg, cases[i].ranks, 2, 0);
        cr_expect(real.last_loss > 0, "%s computed a loss", cases[i].name);
        Plan p;
        Err err = {0};
        cr_assert_eq(fsdp_plan_create(&p, m, &cases[i].cfg, cases[i].ranks, &err), 0, "%s",
                     err.msg);
        PlannerResult planned;
        plan_run(m, &p, cases[i].cfg, 2, &planned);
        expect_planned_memory(real.memory, &planned, cases[i].ranks, cases[i].name);
        planner_result_free(&planned);
        plan_free(&p);
        vit_run_free(&real);
    }
}

/* Every strategy and each memory lever at batch `batch`: ddp, zero1, zero2 and zero3 (at
 * zero3_ranks ranks, the others at 3), hsdp (2 replicas of 2), bf16, CPU offload and activation
 * checkpointing; returns how many it wrote (room for 8). */
static int lever_cases(ConfigCase *c, int batch, int zero3_ranks) {
    const ConfigCase each[] = {{"ddp", vit_config(STRAT_DDP, batch), 3},
                               {"zero1", vit_config(STRAT_ZERO1, batch), 3},
                               {"zero2", vit_config(STRAT_ZERO2, batch), 3},
                               {"zero3", vit_config(STRAT_ZERO3, batch), zero3_ranks},
                               {"hsdp", vit_config(STRAT_HSDP, batch), 4},
                               {"bf16", vit_config(STRAT_ZERO3, batch), 3},
                               {"offload", vit_config(STRAT_ZERO3, batch), 3},
                               {"ac", vit_config(STRAT_ZERO3, batch), 3}};
    memcpy(c, each, sizeof each);
    c[4].cfg.replicas = 2;
    c[5].cfg.param_dtype = DTYPE_BF16;
    c[6].cfg.offload = OFFLOAD_CPU;
    c[7].cfg.ac_every = 1;
    return 8;
}

Test(planner, the_vit_plan_equals_a_real_run_for_every_strategy_and_lever) {
    ModelDesc m;
    vit_small_create(&m, 2);
    ConfigCase cases[12];
    lever_cases(cases, 4, 3);
    cases[8] = (ConfigCase){"deepspeed ddp", vit_config(STRAT_DDP, 4), 3};
    cases[9] = (ConfigCase){"deepspeed zero1", vit_config(STRAT_ZERO1, 4), 3};
    cases[10] = (ConfigCase){"deepspeed zero2", vit_config(STRAT_ZERO2, 4), 3};
    cases[11] = (ConfigCase){"deepspeed zero3 offload", vit_config(STRAT_ZERO3, 4), 3};
    for (int i = 8; i < 12; i++) {
        cases[i].cfg.layout = LAYOUT_DEEPSPEED;
        cases[i].cfg.param_dtype = cases[i].cfg.reduce_dtype = DTYPE_BF16;
    }
    cases[11].cfg.offload = OFFLOAD_OPTIMIZER;
    expect_plans_equal_runs(&m, NULL, cases, sizeof cases / sizeof *cases);
    model_desc_free(&m);
}

/* The transformer computed on a text, as `fsdp train --model transformer` runs it, against its
 * plan (the planner charges the same buffers on a device that holds nothing), for every
 * strategy and lever. */
Test(planner, the_transformer_plan_equals_a_real_run_for_every_strategy_and_lever) {
    TransformerConfig c = lm_small_config();
    ModelDesc m;
    Err err = {0};
    cr_assert_eq(transformer_model_create(&m, &c, &err), 0, "%s", err.msg);
    Dataset text;
    text_test_data(&text, c.seq);
    ConfigCase cases[10];
    lever_cases(cases, 2, 4);
    cases[8] = (ConfigCase){"grad accum", vit_config(STRAT_ZERO3, 2), 2};
    cases[9] = (ConfigCase){"deepspeed zero3 offload", vit_config(STRAT_ZERO3, 2), 3};
    cases[8].cfg.grad_accum = 2;
    cases[9].cfg.layout = LAYOUT_DEEPSPEED;
    cases[9].cfg.param_dtype = cases[9].cfg.reduce_dtype = DTYPE_BF16;
    cases[9].cfg.offload = OFFLOAD_OPTIMIZER;
    expect_plans_equal_runs(&m, &text, cases, sizeof cases / sizeof *cases);
    model_desc_free(&m);
}

/* The same with every job computing in bf16 (activations and gathered parameters at 2 bytes):
 * the plan charges what the real run holds, byte for byte, under every strategy and lever. */
Test(planner, bf16_plans_equal_real_runs_for_every_strategy_and_lever) {
    ModelDesc vit, tf;
    vit_small_create(&vit, 2);
    TransformerConfig c = lm_small_config();
    Err err = {0};
    cr_assert_eq(transformer_model_create(&tf, &c, &err), 0, "%s", err.msg);
    Dataset text;
    text_test_data(&text, c.seq);
    ConfigCase cases[8];
    int n = lever_cases(cases, 4, 3);
    for (int i = 0; i < n; i++) cases[i].cfg.param_dtype = DTYPE_BF16;
    expect_plans_equal_runs(&vit, NULL, cases, n);
    for (int i = 0; i < n; i++) cases[i].cfg.batch_size = 2;
    expect_plans_equal_runs(&tf, &text, cases, n);
    model_desc_free(&vit);
    model_desc_free(&tf);
}

/* The language-model presets with their heads (flash's T x T work tile among what is charged),
 * cut to 2 layers of 8 (gpt2-small) and 4 (llama-125m) columns a head at 512 tokens so a real
 * run is quick: their plans equal real runs at 2 ranks, fp32 and bf16 (the full presets are the
 * same buffers, more, wider and longer). */
Test(planner, the_lm_presets_plan_as_they_run) {
    static uint8_t bytes[4 * 512 + 1];
    for (size_t i = 0; i < sizeof bytes; i++) bytes[i] = (uint8_t)('a' + (i * 7) % 26);
    const char *presets[] = {"gpt2-small", "llama-125m"};
    for (int i = 0; i < 2; i++) {
        TransformerConfig c;
        cr_assert_eq(transformer_lm_preset(presets[i], &c), 0);
        c.layers = 2, c.seq = 512;
        c.hidden = c.heads * (i == 0 ? 8 : 4);
        c.mlp = 2 * c.hidden;
        ModelDesc m;
        Err err = {0};
        cr_assert_eq(transformer_model_create(&m, &c, &err), 0, "%s", err.msg);
        Dataset text = {
            .n = 4, .in_elems = 512, .target_elems = 512, .text = bytes, .classes = 256};
        ConfigCase cases[2] = {{"fp32", vit_config(STRAT_ZERO3, 1), 2},
                               {"bf16", vit_config(STRAT_ZERO3, 1), 2}};
        cases[1].cfg.param_dtype = DTYPE_BF16;
        expect_plans_equal_runs(&m, &text, cases, 2);
        model_desc_free(&m);
    }
}

/* A preset ViT and its zero3 plan (wrapped by layer, the default) at `ranks` ranks. */
static void preset_zero3_plan(ModelDesc *m, Plan *p, const char *preset, int ranks) {
    vit_preset_create(m, preset);
    Err err = {0};
    cr_assert_eq(plan_create(p, m, (WrapPolicy){.kind = WRAP_LAYER}, STRAT_ZERO3, ranks, 1, &err),
                 0, "%s", err.msg);
}

/* vit-tiny as `fsdp train --model vit-tiny` builds it (10 blocks), at 4 ranks. */
Test(planner, the_whole_vit_tiny_plan_equals_a_real_run) {
    ModelDesc m;
    Plan p;
    preset_zero3_plan(&m, &p, "vit-tiny", 4);
    FsdpConfig cfg = vit_config(STRAT_ZERO3, 8);
    cr_assert_eq(cfg.wrap.kind, WRAP_LAYER);
    VitRun real;
    vit_train(&real, &m, cfg, 4, 2, 0);
    PlannerResult planned;
    plan_run(&m, &p, cfg, 2, &planned);
    expect_planned_memory(real.memory, &planned, 4, "vit-tiny");
    planner_result_free(&planned);
    plan_free(&p);
    vit_run_free(&real);
    model_desc_free(&m);
}

/* The representatives stand in exactly for the ranks they replace: an accounting-only run of
 * every rank of vit-workshop gives each rank the same bytes as the planner's few. */
Test(planner, representatives_stand_in_for_every_rank_of_vit_workshop) {
    ModelDesc m;
    Plan p;
    preset_zero3_plan(&m, &p, "vit-workshop", 6);
    FsdpConfig cfg = vit_config(STRAT_ZERO3, 2);
    PlannerResult planned;
    plan_run(&m, &p, cfg, 2, &planned);
    cr_expect_lt(planned.representatives, 6, "some ranks were stood in for");
    /* every rank, accounting only, through the same training loop */
    RankMemory all[6] = {0};
    Dataset data = {0};
    data.n = 6 * 2;
    data.in_elems = 28 * 28;
    data.rows = data.cols = 28;
    data.classes = 10;
    uint8_t *pix = calloc((size_t)data.n * (data.in_elems + 1), 1);
    data.pixels = pix;
    data.labels = pix + (size_t)data.n * data.in_elems;
    TrainJob job = {.model = &m,
                    .data = &data,
                    .plan = &p,
                    .cfg = &cfg,
                    .steps = 2,
                    .log_every = 1,
                    .memory = all};
    ClusterOptions opt = {
        .ranks = 6, .replicas = 1, .profile = profile_default(), .accounting_only = 1};
    ClusterResult res;
    Err err = {0};
    cr_assert_eq(cluster_run(&opt, train_rank, &job, &res, &err), 0, "%s", err.msg);
    expect_planned_memory(all, &planned, 6, "vit-workshop");
    cluster_result_free(&res);
    free(pix);
    planner_result_free(&planned);
    plan_free(&p);
    model_desc_free(&m);
}

Test(planner, a_handful_of_ranks_stand_for_1024) {
    ModelDesc m;
    Plan p;
    preset_zero3_plan(&m, &p, "vit-workshop", 1024);
    Err err = {0};
    int *rep = malloc(1024 * sizeof *rep);
    int n = planner_representatives(&p, rep, &err);
    cr_expect_gt(n, 1);
    cr_expect_lt(n, 16, "%d representatives", n);
    cr_expect_eq(rep[0], 0);
    /* each rank keeps exactly what its representative keeps */
    for (int r = 0; r < 1024; r++)
        for (int u = 0; u < p.nunits; u++) {
            cr_expect_eq(plan_param_numel(&p, u, r), plan_param_numel(&p, u, rep[r]));
            cr_expect_eq(plan_optim_numel(&p, u, r), plan_optim_numel(&p, u, rep[r]));
        }
    free(rep);
    plan_free(&p);
    model_desc_free(&m);
}

/* The representatives by their definition, rank by rank: rank 0 alone, and every other rank
 * the first rank other than 0 that keeps the same elements of every unit. */
static int representatives_by_definition(const Plan *p, int *rep) {
    int running = 1;
    rep[0] = 0;
    for (int r = 1; r < p->world; r++) {
        rep[r] = r;
        for (int q = 1; q < r && rep[r] == r; q++) {
            int same = rep[q] == q;
            for (int u = 0; same && u < p->nunits; u++)
                same = plan_param_numel(p, u, q) == plan_param_numel(p, u, r) &&
                       plan_grad_numel(p, u, q) == plan_grad_numel(p, u, r) &&
                       plan_optim_numel(p, u, q) == plan_optim_numel(p, u, r);
            if (same) rep[r] = q;
        }
        running += rep[r] == r;
    }
    return running;
}

/* The planner finds the representatives from where parameters' rows change, not rank by rank:
 * the same ones as the definition for every strategy, at world sizes that split rows evenly
 * and unevenly, and where rank 0's class has no other member in its shard group. */
Test(planner, representatives_are_those_of_the_definition) {
    ModelDesc m;
    vit_preset_create(&m, "vit-workshop");
    static const WorldCase cases[] = {
        {STRAT_ZERO3, 1000, 1}, {STRAT_ZERO3, 1024, 1}, {STRAT_ZERO3, 7, 1}, {STRAT_ZERO1, 96, 1},
        {STRAT_ZERO2, 40, 1},   {STRAT_DDP, 16, 1},     {STRAT_HSDP, 64, 8}, {STRAT_HSDP, 24, 12},
        {STRAT_ZERO3, 1, 1},    {STRAT_HSDP, 6, 6}};
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        const WorldCase *c = &cases[i];
        Plan p;
        Err err = {0};
        cr_assert_eq(plan_create(&p, &m, (WrapPolicy){.kind = WRAP_LAYER}, c->strategy, c->ranks,
                                 c->replicas, &err),
                     0, "%s", err.msg);
        int *got = malloc((size_t)c->ranks * sizeof *got);
        int *want = malloc((size_t)c->ranks * sizeof *want);
        int n = planner_representatives(&p, got, &err);
        cr_expect_eq(n, representatives_by_definition(&p, want), "%s at %d",
                     strategy_name(c->strategy), c->ranks);
        for (int r = 0; r < c->ranks; r++)
            cr_expect_eq(got[r], want[r], "%s at %d: rank %d stands for %d, not %d",
                         strategy_name(c->strategy), c->ranks, r, got[r], want[r]);
        free(got);
        free(want);
        plan_free(&p);
    }
    model_desc_free(&m);
}

/* 131,072 GPUs (16,384 nodes of 8) plan with a handful of ranks run and an int kept per GPU:
 * every rank's resting bytes are still its own formula's, under zero3 and under hsdp with a
 * replica a node. */
Test(planner, a_plan_of_131072_gpus_runs_a_handful_of_ranks) {
    ModelDesc m;
    vit_preset_create(&m, "vit-workshop");
    static const WorldCase cases[] = {{STRAT_ZERO3, 131072, 1}, {STRAT_HSDP, 131072, 16384}};
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        FsdpConfig cfg = vit_config(cases[i].strategy, 1);
        cfg.replicas = cases[i].replicas;
        Plan p;
        Err err = {0};
        cr_assert_eq(fsdp_plan_create(&p, &m, &cfg, cases[i].ranks, &err), 0, "%s", err.msg);
        PlannerResult r;
        plan_run(&m, &p, cfg, 2, &r);
        cr_expect_lt(r.representatives, 8, "%d ranks run", r.representatives);
        for (int q = 0; q < r.gpus; q += 4093) { /* a prime stride: every shard position */
            RestBytes want = plan_rest_bytes(&p, q, OFFLOAD_NONE);
            const RankMemory *got = planner_memory(&r, q);
            cr_expect_eq(got->rest[MEM_PARAM_SHARD], want.param, "rank %d", q);
            cr_expect_eq(got->rest[MEM_OPTIM_STATE], want.optim, "rank %d", q);
        }
        const RankMemory *last = planner_memory(&r, r.gpus - 1);
        cr_expect_eq(last->rest[MEM_PARAM_SHARD], plan_rest_bytes(&p, r.gpus - 1, 0).param);
        cr_expect_gt(r.step_time, 0);
        planner_result_free(&r);
        plan_free(&p);
    }
    model_desc_free(&m);
}

/* Traffic as the engine issues it: under zero3 every unit's gradient is reduce-scattered once
 * a step, a padded block per rank; under ddp every gradient is all-reduced once. */
Test(planner, traffic_is_what_the_engine_sends) {
    ModelDesc m;
    vit_small_create(&m, 2);
    Err err = {0};
    Plan p;
    FsdpConfig cfg = vit_config(STRAT_ZERO3, 4);
    cr_assert_eq(plan_create(&p, &m, cfg.wrap, STRAT_ZERO3, 4, 1, &err), 0);
    PlannerResult r;
    plan_run(&m, &p, cfg, 2, &r);
    double rs = 0;
    for (int u = 0; u < p.nunits; u++) rs += (double)p.units[u].wire_numel * 4 * 4;
    const PlannerTraffic *t = &r.traffic[COLL_REDUCE_SCATTER];
    cr_expect_eq(t->calls, p.nunits);
    cr_expect_eq(t->buffer_bytes, rs);
    cr_expect_eq(t->sent_bytes, rs * 3 / 4, "a ring sends (N-1)/N");
    cr_expect_eq(t->total_sent, rs * 3 / 4 * 4);
    cr_expect_gt(r.traffic[COLL_ALL_GATHER].calls, p.nunits, "backward gathers again");
    cr_expect_gt(r.step_time, 0);
    cr_expect_leq(r.waiting, r.step_time);
    planner_result_free(&r);
    plan_free(&p);

    cfg = vit_config(STRAT_DDP, 4);
    cr_assert_eq(plan_create(&p, &m, cfg.wrap, STRAT_DDP, 4, 1, &err), 0);
    plan_run(&m, &p, cfg, 2, &r);
    double grads = 4.0 * (double)m.total_numel;
    double ar = r.traffic[COLL_ALL_REDUCE].buffer_bytes;
    cr_expect_geq(ar, grads);
    cr_expect_lt(ar - grads, 64, "gradients plus the loss: %.0f bytes over", ar - grads);
    cr_expect_eq(r.traffic[COLL_ALL_GATHER].calls, 0);
    planner_result_free(&r);
    plan_free(&p);
    model_desc_free(&m);
}

/* ---------------------------------------------------------------- the command line */

/* The rest bytes of one category inside "rest":{...}. */
static double rest_of(const char *json, const char *category) {
    const char *rest = strstr(json, "\"rest\":{");
    cr_assert_not_null(rest);
    return json_number(rest, category);
}

Test(plan_cli, the_workshops_7b_arithmetic) {
    int status;
    /* on 200 GB GPUs, so that DDP fits at all and the plan is an answer, not a refusal */
    char *out = fsdp_output("plan --params 7e9 --gpus 8 --gpu-mem 200 --strategy ddp --json",
                            "2>&1", &status);
    cr_assert_eq(status, 0, "%s", out);
    double n = json_number(out, "parameters");
    cr_expect(fabs(n - 7e9) < 7e6, "%.0f parameters", n);
    /* 28 GB weights + 28 GB gradients + 56 GB Adam = 112 GB per GPU under DDP */
    cr_expect_eq(round(rest_of(out, "param_shard") / 1e8), 280);
    cr_expect_eq(round(rest_of(out, "grad_shard") / 1e8), 280);
    cr_expect_eq(round(rest_of(out, "optim_state") / 1e8), 560);
    cr_expect_eq(round(json_number(out, "gpu_rest") / 1e8), 1120);
    free(out);
    /* and 14 GB per GPU with FSDP on 8 GPUs */
    out = fsdp_output("plan --params 7e9 --gpus 8 --strategy zero3 --json", "2>&1", &status);
    cr_assert_eq(status, 0, "%s", out);
    cr_expect_eq(round(json_number(out, "gpu_rest") / 1e8), 140, "%.0f",
                 json_number(out, "gpu_rest"));
    free(out);
}

/* The ZeRO paper's figure 1: 7.5B parameters on 64 GPUs with mixed-precision Adam (2 bytes of
 * fp16 parameters, 2 of fp16 gradients and K = 12 of fp32 master, momentum and variance):
 * 120 GB per GPU for plain data parallel, 31.4 GB sharding the optimizer state, 16.6 GB adding
 * the gradients, 1.9 GB adding the parameters. DeepSpeed's layout is what gives them. */
Test(plan_cli, the_zero_papers_figure) {
    int status;
    char *out = fsdp_output("plan --params 7.5e9 --gpus 64 --param-dtype fp16 --reduce-dtype fp16 "
                            "--layout deepspeed --compare --json",
                            "2>&1", &status);
    cr_assert_eq(status, 0, "%s", out);
    double psi = json_number(out, "parameters");
    cr_expect(fabs(psi - 7.5e9) < 7.5e6, "%.0f parameters", psi);
    struct {
        const char *strategy;
        double gb;                 /* the figure's */
        double param, grad, optim; /* bytes per parameter, by ZeRO's formulas */
    } stages[] = {{"ddp", 120.0, 2, 2, 12},
                  {"zero1", 31.4, 2, 2, 12.0 / 64},
                  {"zero2", 16.6, 2, 2.0 / 64, 12.0 / 64},
                  {"zero3", 1.9, 2.0 / 64, 2.0 / 64, 12.0 / 64}};
    for (size_t i = 0; i < sizeof stages / sizeof *stages; i++) {
        char key[64];
        snprintf(key, sizeof key, "\"strategy\":\"%s\",\"layout\":\"deepspeed\"",
                 stages[i].strategy);
        const char *row = strstr(out, key);
        cr_assert_not_null(row, "no %s row in %.300s", stages[i].strategy, out);
        double rest = json_number(row, "gpu_rest");
        cr_expect_eq(round(rest / 1e8), round(stages[i].gb * 10),
                     "%s: %.2f GB, the figure says %.1f", stages[i].strategy, rest / 1e9,
                     stages[i].gb);
        /* and by category, within the shards' padding (a few rows of the largest parameter) */
        double want[] = {stages[i].param * psi, stages[i].grad * psi, stages[i].optim * psi};
        const char *cats[] = {"param_shard", "grad_shard", "optim_state"};
        for (int c = 0; c < 3; c++) {
            double got = rest_of(row, cats[c]);
            cr_expect(fabs(got - want[c]) <= 1e-3 * want[c], "%s %s: %.0f bytes, ZeRO says %.0f",
                      stages[i].strategy, cats[c], got, want[c]);
        }
    }
    free(out);
}

Test(plan_cli, prints_the_true_size_of_the_workshop_vit) {
    int status;
    char *out = fsdp_output("plan --model vit-workshop --gpus 2 --batch-size 2", "2>&1", &status);
    cr_assert_eq(status, 0, "%s", out);
    cr_expect_neq(strstr(out, "779,298,826 parameters"), NULL, "%.500s", out);
    cr_expect_neq(strstr(out, "~180M"), NULL);
    cr_expect_neq(strstr(out, "largest batch per GPU that fits:"), NULL);
    cr_expect_neq(strstr(out, "reduce_scatter"), NULL);
    free(out);
    out = fsdp_output("plan --model vit-tiny --gpus 4 --compare", "2>&1", &status);
    cr_assert_eq(status, 0, "%s", out);
    const char *rows[] = {"ddp ", "zero1 ", "zero2 ", "zero3 ", "hsdp x2 "};
    for (int i = 0; i < 5; i++)
        cr_expect_neq(strstr(out, rows[i]), NULL, "%s in %.600s", rows[i], out);
    free(out);
}

/* The parameter count on the plan's first line, "fsdp plan: transformer, 70,000,001,024 ...". */
static size_t plan_params(const char *out) {
    const char *at = strstr(out, "transformer, ");
    cr_assert(at, "%.300s", out);
    size_t n = 0;
    for (at += strlen("transformer, "); *at == ',' || (*at >= '0' && *at <= '9'); at++)
        if (*at != ',') n = n * 10 + (size_t)(*at - '0');
    return n;
}

/* The shape a plan shows is the shape it planned: rebuilt from the "shape:" line, it has the
 * parameters the first line says. --params 70e9 is 86 layers of LLaMA-65B's width at sequence
 * 2048; --seq 1024 keeps that shape and shortens the sequence (the position embedding's
 * 1024 x 8192 rows fewer); the ViT and the toy say theirs. */
Test(plan_cli, shows_the_shape_it_assumed) {
    const char *runs[] = {"plan --params 70e9 --gpus 1024 --activation-checkpointing",
                          "plan --params 70e9 --seq 1024 --gpus 1024 --activation-checkpointing",
                          "plan --layers 2 --hidden 64 --heads 4 --mlp 100 --seq 16 --vocab 300"};
    const int seqs[] = {2048, 1024, 16};
    size_t counts[3];
    for (int i = 0; i < 3; i++) {
        char *out = fsdp_ok("%s", runs[i]);
        const char *line = strstr(out, "\nshape: ");
        cr_assert(line, "%s", out);
        TransformerConfig c = {0};
        char vocab[32];
        cr_assert_eq(sscanf(line,
                            "\nshape: %d layers, hidden %d, %d heads, MLP %d, sequence %d, "
                            "vocabulary %31[0-9,]",
                            &c.layers, &c.hidden, &c.heads, &c.mlp, &c.seq, vocab),
                     6, "%.200s", line);
        size_t v = 0;
        for (const char *d = vocab; *d; d++)
            if (*d != ',') v = v * 10 + (size_t)(*d - '0');
        c.vocab = (int)v;
        cr_expect_eq(c.seq, seqs[i]);
        counts[i] = plan_params(out);
        cr_expect_eq(transformer_param_count(&c), counts[i], "%s: the shape has %zu, the plan %zu",
                     runs[i], transformer_param_count(&c), counts[i]);
        cr_expect_eq(strstr(line, "(chosen for --params") != NULL, i < 2, "%.200s", line);
        free(out);
    }
    char *out = fsdp_ok("%s", runs[0]);
    cr_expect(strstr(out, "\nshape: 86 layers, hidden 8192, 64 heads, MLP 32768, sequence 2048, "
                          "vocabulary 43,805, flash attention (chosen for --params from published "
                          "widths; --seq sets the sequence)\n"),
              "%s", out);
    free(out);
    cr_expect_eq(counts[0] - counts[1], (size_t)1024 * 8192);
    out = fsdp_ok("plan --model vit-tiny");
    cr_expect(strstr(out, "\nshape: 10 layers, hidden 128, 2 heads, MLP 128, sequence 17 tokens "
                          "(28x28 images in 7x7 patches, and the class token), 10 classes\n"),
              "%s", out);
    free(out);
    out = fsdp_ok("plan --model toy");
    cr_expect(strstr(out, "\nshape: the workshop's toy, 3 layers (La, Lb, Lc) of 3 scalars each\n"),
              "%s", out);
    free(out);
}

/* `plan ARGS --json`'s GPU total at its peak (its tensors and what is beside them), in decimal GB
 * as the text shows it ("28.25"). */
static char *gpu_peak_text(const char *args) {
    int status;
    char *json = fsdp_output(fmt_text("%s --json", args), "2>/dev/null", &status);
    static char text[4][32];
    static int next;
    char *t = text[next++ % 4];
    snprintf(t, 32, "%.2f GB", json_number(json, "gpu_total") / 1e9);
    free(json);
    return t;
}

/* The workshop's 70B on 1,024 GPUs: "no" everywhere, and now why. At batch 1 the activations
 * (86 layers' attention probabilities at sequence 2048) fill 183 of zero3's 203 GB and more GPUs
 * cannot shrink them; activation checkpointing can, and the figure it quotes is that plan's. On
 * 8 GPUs the resting state is big too: each lever alone stays over, and all of them together
 * fit, again the figure of that plan. Where something fits, nothing is explained. */
Test(plan_cli, where_nothing_fits_it_says_what_dominates_and_what_would_change_it) {
    char *out = fsdp_ok("plan --params 70e9 --gpus 1024 --compare --attention eager");
    cr_expect(strstr(out, "\nnothing fits at batch 1 per GPU: the closest, zero3, peaks at "
                          "214.27 GB, of which\n"
                          "  activations       183.14 GB  1 sequence of 2048 tokens per GPU "
                          "through 86 layers of hidden 8192, the attention keeping 64 heads' "
                          "2048x2048 probabilities a layer\n"),
              "%s", out);
    const char *ac = "plan --params 70e9 --gpus 1024 --activation-checkpointing --attention eager";
    cr_expect(strstr(out, fmt_text("\n  --activation-checkpointing   zero3 would peak at %s: "
                                   "fits in 80.00 GB\n",
                                   gpu_peak_text(ac))),
              "%s", out);
    cr_expect(strstr(out, "\n  a shorter --seq              activations grow with the sequence"));
    cr_expect(strstr(out, "\n  more --gpus                  no help: each GPU holds the "
                          "activations of its own batch"));
    free(out);

    int code;
    out = fsdp_run(&code, "2>/dev/null", "plan --params 70e9 --gpus 8 --attention eager");
    cr_expect_eq(code, 2, "%s", out);
    cr_expect(
        strstr(out, "\nnothing fits at batch 1 per GPU: zero3 peaks at 360.96 GB, of which\n"),
        "%s", out);
    cr_expect(strstr(out, "\n  resting state     140.00 GB  parameters, gradients and optimizer "
                          "state kept between steps"),
              "%s", out);
    const char *levers[][2] = {
        {"--activation-checkpointing  ",
         "plan --params 70e9 --gpus 8 --activation-checkpointing --attention eager"},
        {"--gpus 16                   ", "plan --params 70e9 --gpus 16 --attention eager"},
        {"--offload cpu               ",
         "plan --params 70e9 --gpus 8 --offload cpu --attention eager"}};
    for (int i = 0; i < 3; i++)
        cr_expect(strstr(out, fmt_text("\n  %s zero3 would peak at %s: still over 80.00 GB\n",
                                       levers[i][0], gpu_peak_text(levers[i][1]))),
                  "%s: %s", levers[i][0], out);
    const char *all =
        "plan --params 70e9 --gpus 16 --activation-checkpointing --offload cpu --attention eager";
    cr_expect(strstr(out, fmt_text("\n  --activation-checkpointing --gpus 16 --offload cpu zero3 "
                                   "would peak at %s: fits in 80.00 GB\n",
                                   gpu_peak_text(all))),
              "%s", out);
    cr_expect(!strstr(out, "no help"), "more GPUs do shrink the resting state: %s", out);
    free(out);

    out = fsdp_ok("plan --params 7e9 --gpus 8 --compare");
    cr_expect(!strstr(out, "nothing fits") && !strstr(out, "what would change it"), "%s", out);
    free(out);
}

Test(plan_cli, bad_input_is_one_line_and_exit_2) {
    static const UsageCase cases[] = {
        {"plan --gpus 0", "--gpus must be a whole number from 1 to 1048576 (got '0')"},
        {"plan --gpus -3", "--gpus must be a whole number from 1 to 1048576 (got '-3')"},
        {"plan --gpus 2e6", "--gpus must be a whole number from 1 to 1048576 (got '2e6')"},
        {"plan --gpus 12",
         "--gpus 12 is not a whole number of nodes of 8 GPUs (--gpus-per-node 8)"},
        {"plan --gpus 131076 --gpus-per-node 8", "--gpus 131076 is not a whole number of nodes"},
        {"plan --gpus 24 --gpus-per-node 16", "--gpus 24 is not a whole number of nodes of 16"},
        {"plan --gpus 131072 --strategy hsdp --replicas 3", "--replicas 3 does not divide --gpus "
                                                            "131072"},
        {"plan --gpus 16 --replicas 2", "--replicas applies only to --strategy hsdp (got 2)"},
        {"plan --gpus 16 --strategy hsdp --replicas 0", "--replicas must be a whole number from 1 "
                                                        "to 1048576"},
        {"plan --params -1", "--params must be a number above 0"},
        {"plan --params 1e30", "--params must be a number above 0 and at most 1e+13"},
        {"plan --strategy hsdp --replicas 3 --gpus 8", "--replicas 3 does not divide"},
        {"plan --model gpt", "--model must be toy, vit-tiny, vit-workshop, transformer, llama"},
        {"plan --params 7e9 --layers 3", "give --params or the shape"},
        {"plan --params 7e9 --vocab 3000", "give --params or the shape"},
        {"plan --checkpoint-dir x", "plan does not take --checkpoint-dir"},
        {"plan --batch-size 0", "--batch-size"},
        {"plan --model toy --hidden 8", "the toy has a fixed shape"},
        {"plan --gpu-mem nan", "--gpu-mem must be a number above 0"},
        {"plan --params 70e9 --gpus 8", "transformer does not fit on 8 GPUs of 80.00 GB even at "
                                        "batch 1 per GPU"},
        {"plan --model vit-tiny --batch-size 1e12", "--batch-size must be"},
        {"plan --model transformer --hidden 100 --heads 3", "--hidden"},
        {"plan --model vit-tiny --batch-size 1048576 --grad-accum 4096",
         "--batch-size 1048576 x --grad-accum 4096 = 4294967296 samples per GPU a step; a plan "
         "holds at most 16777216"},
    };
    expect_usage_errors(cases, sizeof cases / sizeof *cases);
}

/* A planned global batch of a billion samples keeps no per-sample index (the planner's runs
 * read no data): vit-workshop at 1,024 GPUs of 1,048,576 samples each grew to 24 GB and was
 * killed; now its largest resident size stays under 1 GiB (measured with getrusage rather
 * than limited with ulimit -v, which the sanitizer build's shadow memory cannot live under). */
/* `fsdp ARGS`'s output (stderr too), once it has exited 0 with a resident size that peaked under
 * 1 GiB (the largest of this test's children, measured with getrusage). */
static char *planned_in_little_memory(const char *args) {
    int status;
    char *out = fsdp_output(args, "2>&1", &status);
    cr_expect(WIFEXITED(status) && WEXITSTATUS(status) == 0, "status %d: %s", status, out);
    struct rusage ru;
    cr_assert_eq(getrusage(RUSAGE_CHILDREN, &ru), 0);
    cr_expect_lt(ru.ru_maxrss, 1L << 20, "the plan's resident size peaked at %ld KiB",
                 ru.ru_maxrss);
    return out;
}

Test(plan_cli, a_billion_sample_batch_plans_in_little_memory) {
    char *out =
        planned_in_little_memory("plan --model vit-workshop --gpus 1024 --batch-size 1048576");
    cr_expect(strstr(out, "largest batch per GPU that fits:"), "%s", out);
    free(out);
}

/* A million GPUs plan in little memory: what a plan keeps per GPU is an int (its
 * representative), so 1,048,576 GPUs cost 4 MiB of it. Before, a rank-by-rank table of row
 * counts, a memory record and a simulated slot per GPU, and a collective's arrays per member,
 * came to gigabytes. */
Test(plan_cli, a_million_gpus_plan_in_little_memory) {
    char *out = planned_in_little_memory("plan --params 405e9 --seq 8192 --gpus 1048576 "
                                         "--param-dtype bf16 --activation-checkpointing --compare");
    cr_expect(strstr(out, "cluster: 1048576 GPUs, h100-nvlink (8 per node"), "%s", out);
    cr_expect(strstr(out, "\nhsdp x131072 "), "one replica a node: %s", out);
    free(out);
}

/* "Fits" means fits: a GPU holds beside its tensors the CUDA context, cuBLAS's workspaces,
 * NCCL's buffers for each communicator (none alone, hsdp's two) and room for fragmentation, each
 * its own row and each a flag; a job whose tensors fit but whose total does not is refused. */
Test(plan_cli, the_gpu_total_is_its_tensors_and_what_is_beside_them) {
    const Profile *h = profile_find("h100-nvlink");
    const char *jobs[][2] = {{"plan --params 7e9 --gpus 8", "1"},
                             {"plan --params 7e9 --gpus 8 --strategy hsdp --replicas 2", "2"},
                             {"plan --params 1e9 --gpus 1", "0"}};
    for (int i = 0; i < 3; i++) {
        int status, comms = atoi(jobs[i][1]);
        char *json = fsdp_output(fmt_text("%s --json", jobs[i][0]), "2>/dev/null", &status);
        double peak = json_number(json, "gpu_peak"), total = json_number(json, "gpu_total");
        double want = peak + h->context_bytes + h->workspace_bytes + comms * h->nccl_bytes +
                      h->fragmentation * peak;
        cr_expect(fabs(total - want) < 1, "%s: %.0f against %.0f", jobs[i][0], total, want);
        cr_expect_eq(json_number(json, "communicators"), comms, "%s", jobs[i][0]);
        free(json);
    }
    char *out = fsdp_ok("plan --params 7e9 --gpus 8 --param-dtype bf16");
    cr_expect(strstr(out, "\n  CUDA context                                      500.00 MB\n"),
              "%s", out);
    cr_expect(strstr(out, "\n  cuBLAS workspaces                                  67.11 MB\n"),
              "%s", out);
    cr_expect(strstr(out, "\n  NCCL buffers, 1 communicator                      550.00 MB\n"),
              "%s", out);
    cr_expect(strstr(out, "\n  allocator fragmentation, 5%"), "%s", out);
    free(out);
    out = fsdp_ok("plan --params 7e9 --gpus 8 --context-mem 0 --fragmentation 0");
    cr_expect(!strstr(out, "CUDA context") && !strstr(out, "fragmentation"), "%s", out);
    free(out);
    /* a GPU just over the tensors' peak but under the total: the job does not fit */
    int status;
    char *json = fsdp_output("plan --params 7e9 --gpus 8 --json", "2>/dev/null", &status);
    double peak = json_number(json, "gpu_peak");
    free(json);
    out =
        fsdp_run(&status, "2>&1", "plan --params 7e9 --gpus 8 --gpu-mem %.3f", (peak + 1e8) / 1e9);
    cr_expect_eq(status, 2, "%s", out);
    cr_expect(strstr(out, "does NOT fit in"), "%s", out);
    free(out);
}

/* ZeRO-Offload's layout: under --offload optimizer a sharded gradient streams to the host as its
 * reduction completes, so the GPU keeps no gradient shard at rest (13B parameters on one GPU in
 * fp16 rest as their 26 GB of parameters alone, the ZeRO-Offload paper's case), while ddp's whole
 * gradients stay on the GPU and only the optimizer's rows cross at its step. */
Test(plan_cli, zero_offload_streams_sharded_gradients_to_the_host) {
    int status;
    char *json = fsdp_output("plan --params 13e9 --gpus 1 --offload optimizer --param-dtype fp16 "
                             "--reduce-dtype fp16 --layout deepspeed --activation-checkpointing "
                             "--json",
                             "2>/dev/null", &status);
    cr_expect_eq(rest_of(json, "grad_shard"), 0, "%s", json);
    cr_expect_float_eq(json_number(json, "gpu_rest"), rest_of(json, "param_shard"), 0.5);
    cr_expect_float_eq(rest_of(json, "param_shard"), 2.0 * 12999997440.0, 0.5, "fp16");
    /* on the host: fp16 gradients, fp32 master and both moments, 2 + 12 bytes a parameter */
    cr_expect_float_eq(rest_of(json, "host_offload"), 14.0 * 12999997440.0, 0.5, "%s", json);
    free(json);
    json = fsdp_output("plan --model vit-tiny --gpus 3 --strategy ddp --offload optimizer --json",
                       "2>/dev/null", &status);
    cr_expect_gt(rest_of(json, "grad_shard"), 0, "ddp keeps its gradients: %s", json);
    free(json);
}
