/* fsdp plan --search: the largest batches it finds are the largest that fit, its ranking holds,
 * every configuration it lists fits when planned alone with its printed flags (and the train
 * flags run), and what cannot fit is never listed. */
#include <cjson/cJSON.h>
#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "models/vit.h"
#include "sim/plan_search.h"
#include "tests/util.h"

/* ---------------------------------------------------------------- the planner's memory-only run */

static PlannerResult run_planner(const ModelDesc *m, const FsdpConfig *cfg, int gpus,
                                 const Profile *prof, int memory_only) {
    Plan p;
    Err err = {0};
    cr_assert_eq(fsdp_plan_create(&p, m, cfg, gpus, &err), 0, "%s", err.msg);
    PlannerJob job = {
        .model = m, .plan = &p, .cfg = *cfg, .profile = prof, .memory_only = memory_only};
    PlannerResult r;
    cr_assert_eq(planner_run(&job, &r, &err), 0, "%s", err.msg);
    plan_free(&p);
    return r;
}

/* Rank 0 alone gives the fullest GPU's peak, byte for byte, where ranks keep different rows:
 * 1,000 GPUs split vit-workshop's rows unevenly, under every strategy and the offload tiers. */
Test(plan_search, rank_0_alone_has_the_fullest_gpus_peak) {
    ModelDesc m;
    vit_preset_create(&m, "vit-workshop");
    FsdpConfig cases[6];
    for (int i = 0; i < 6; i++)
        cases[i] = vit_config(i < STRAT_COUNT ? (Strategy)i : STRAT_ZERO3, 2);
    cases[STRAT_HSDP].replicas = 125;
    cases[5].offload = OFFLOAD_CPU;
    cases[5].ac_every = 1;
    cases[5].param_dtype = DTYPE_BF16;
    for (int i = 0; i < 6; i++) {
        PlannerResult all = run_planner(&m, &cases[i], 1000, profile_default(), 0);
        PlannerResult one = run_planner(&m, &cases[i], 1000, profile_default(), 1);
        cr_expect_gt(all.representatives, 1, "case %d: ranks keep different rows", i);
        cr_expect_eq(one.representatives, 1);
        cr_expect_eq(planner_top_memory(&one)->on_gpu.peak, planner_top_memory(&all)->on_gpu.peak,
                     "case %d (%s): %zu vs %zu", i, strategy_name(cases[i].strategy),
                     planner_top_memory(&one)->on_gpu.peak, planner_top_memory(&all)->on_gpu.peak);
        planner_result_free(&all);
        planner_result_free(&one);
    }
    model_desc_free(&m);
}

/* ---------------------------------------------------------------- the hsdp replica counts */

static void expect_replicas(int gpus, int per_node, const int *want, int nwant) {
    int got[16];
    int n = plan_search_replicas(gpus, per_node, got, 16);
    cr_expect_eq(n, nwant, "%d GPUs of %d a node: %d counts", gpus, per_node, n);
    for (int i = 0; i < n && i < nwant; i++)
        cr_expect_eq(got[i], want[i], "%d GPUs: count %d is %d, not %d", gpus, i, got[i], want[i]);
}

Test(plan_search, hsdp_shards_over_whole_nodes) {
    /* 2,048 nodes: shard groups of 1, 4, 16, 64, 256 and 1,024 nodes (every other power of 2) */
    expect_replicas(16384, 8, (const int[]){2048, 512, 128, 32, 8, 2}, 6);
    /* 128 nodes: 1 to 64 nodes, each power of two */
    expect_replicas(1024, 8, (const int[]){128, 64, 32, 16, 8, 4, 2}, 7);
    /* 3 nodes: groups of 1 node only (3 is no power of two) */
    expect_replicas(24, 8, (const int[]){3}, 1);
    /* one node: every divisor */
    expect_replicas(4, 8, (const int[]){2}, 1);
    expect_replicas(6, 8, (const int[]){3, 2}, 2);
    expect_replicas(3, 8, NULL, 0);
}

/* ---------------------------------------------------------------- the search, in process */

/* vit-tiny with 2 layers on 4 GPUs of `mem_mb` MB, all of it for tensors (no CUDA context,
 * workspaces, NCCL buffers or fragmentation beside them: more than the whole GPU here). */
static PlanSearchResult search_small(ModelDesc *m, Profile *prof, double mem_mb, int top) {
    vit_small_create(m, 2);
    *prof = *profile_default();
    prof->mem_bytes = mem_mb * 1e6;
    prof->context_bytes = prof->workspace_bytes = prof->nccl_bytes = prof->fragmentation = 0;
    FsdpConfig base;
    fsdp_config_defaults(&base);
    PlanSearchJob job = {
        .model = m, .profile = prof, .gpus = 4, .base = base, .tokens_per_sample = 1, .top = top};
    PlanSearchResult r;
    Err err = {0};
    cr_assert_eq(plan_search_run(&job, &r, &err), 0, "%s", err.msg);
    return r;
}

/* Each listed configuration, planned alone: it fits, with the peak and step time the search
 * showed; the batch after its own does not fit; and the list is fastest first. */
Test(plan_search, each_listed_configuration_fits_at_the_largest_batch_and_ranks_in_order) {
    ModelDesc m;
    Profile prof;
    PlanSearchResult r = search_small(&m, &prof, 20, 50);
    cr_assert_gt(r.nbest, 5, "%d listed", r.nbest);
    cr_expect_gt(r.configs, r.timed, "some were never timed");
    for (int i = 0; i < r.nbest; i++) {
        const PlanSearchEntry *e = &r.best[i];
        if (i) cr_expect_geq(r.best[i - 1].throughput, e->throughput, "row %d", i + 1);
        cr_expect_geq(r.best[0].throughput, e->throughput);
        PlannerResult alone = run_planner(&m, &e->cfg, 4, &prof, 0);
        size_t peak = planner_top_memory(&alone)->on_gpu.peak;
        cr_expect_eq(peak, e->peak, "row %d: peak %zu planned alone, %zu listed", i + 1, peak,
                     e->peak);
        cr_expect_leq((double)peak, prof.mem_bytes, "row %d fits", i + 1);
        cr_expect_float_eq(alone.step_time, e->step_time, 1e-12, "row %d", i + 1);
        planner_result_free(&alone);
        FsdpConfig next = e->cfg;
        next.batch_size++;
        PlannerResult over = run_planner(&m, &next, 4, &prof, 0);
        cr_expect_gt((double)planner_top_memory(&over)->on_gpu.peak, prof.mem_bytes,
                     "row %d: batch %d fits too", i + 1, next.batch_size);
        planner_result_free(&over);
    }
    plan_search_result_free(&r);
    model_desc_free(&m);
}

/* ddp keeps 8 bytes of every parameter on every GPU whatever it offloads (its fp32 parameter and
 * gradient; only Adam's moments may go to the host): on a GPU smaller than that no ddp
 * configuration is listed, however many are. */
Test(plan_search, a_configuration_that_cannot_fit_is_absent) {
    ModelDesc m;
    Profile prof;
    vit_small_create(&m, 2);
    double ddp_rest_mb = 8.0 * (double)m.total_numel / 1e6;
    model_desc_free(&m);
    PlanSearchResult r = search_small(&m, &prof, ddp_rest_mb * 0.9, 1000);
    cr_assert_gt(r.nbest, 0);
    for (int i = 0; i < r.nbest; i++)
        cr_expect_neq(r.best[i].cfg.strategy, STRAT_DDP, "row %d is ddp", i + 1);
    plan_search_result_free(&r);
    model_desc_free(&m);

    /* and where nothing fits, nothing is listed */
    r = search_small(&m, &prof, 0.5, 5);
    cr_expect_eq(r.nbest, 0);
    cr_expect_eq(r.fitting, 0);
    plan_search_result_free(&r);
    model_desc_free(&m);
}

/* ---------------------------------------------------------------- the command line */

/* The command's JSON, parsed (asserted). */
static cJSON *search_json(const char *args) {
    char *out = fsdp_ok("%s --json", args);
    cJSON *doc = cJSON_Parse(out);
    cr_assert_not_null(doc, "not JSON: %s", out);
    free(out);
    return doc;
}

/* A GPU of a few MB holds nothing beside its tensors (the defaults take over a GB). */
#define NO_OVERHEAD "--context-mem 0 --workspace-mem 0 --nccl-mem 0 --fragmentation 0"

/* The ranked rows of a search's JSON ("search": {"best": [...]}). */
static const cJSON *search_rows(const cJSON *doc) {
    return cJSON_GetObjectItemCaseSensitive(cJSON_GetObjectItemCaseSensitive(doc, "search"),
                                            "best");
}

static double number(const cJSON *o, const char *key) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, key);
    cr_assert(cJSON_IsNumber(v), "no %s", key);
    return v->valuedouble;
}

static const char *text(const cJSON *o, const char *key) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, key);
    cr_assert(cJSON_IsString(v), "no %s", key);
    return v->valuestring;
}

/* Each row's printed command, run: `./fsdp plan ...` plans that job alone with the same peak and
 * step time, fits, and says its largest batch is the row's. */
Test(plan_cli, each_searched_row_plans_alone_with_its_printed_flags) {
    cJSON *doc = search_json("plan --model vit-tiny --gpus 4 --gpu-mem 0.05 " NO_OVERHEAD
                             " --search --top 6");
    const cJSON *best = search_rows(doc);
    cr_assert_eq(cJSON_GetArraySize(best), 6);
    double first = 0;
    const cJSON *row;
    cJSON_ArrayForEach(row, best) {
        const char *cmd = text(row, "command");
        cr_assert(!strncmp(cmd, "./fsdp plan ", 12), "%s", cmd);
        double rate = number(row, "throughput");
        if (!first) first = rate;
        cr_expect_geq(first, rate);
        char *alone = fsdp_ok("%s --json", cmd + strlen("./fsdp "));
        cJSON *plan = cJSON_Parse(alone);
        cr_assert_not_null(plan, "%s: %s", cmd, alone);
        cr_expect(cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(plan, "fits")), "%s", cmd);
        cr_expect_eq(number(plan, "gpu_peak"), number(row, "gpu_peak"), "%s", cmd);
        cr_expect_float_eq(number(plan, "step_time_s"), number(row, "step_time_s"), 1e-9, "%s",
                           cmd);
        cr_expect_eq(number(plan, "max_batch"), number(row, "batch"), "%s", cmd);
        cJSON_Delete(plan);
        free(alone);
    }
    cJSON_Delete(doc);
}

/* For a model ./fsdp train builds, the rows are train's command lines: each trains a step. */
Test(plan_cli, searched_train_flags_run) {
    cJSON *doc = search_json("plan --model vit-tiny --gpus 4 --search --global-batch 64 --top 2");
    const cJSON *best = search_rows(doc);
    cr_assert_eq(cJSON_GetArraySize(best), 2);
    const cJSON *row;
    cJSON_ArrayForEach(row, best) {
        cr_expect_eq(number(row, "batch") * number(row, "grad_accum"), 16, "64 over 4 GPUs");
        const char *cmd = text(row, "command");
        cr_assert(!strncmp(cmd, "./fsdp train --model vit-tiny --ranks 4 ", 40), "%s", cmd);
        char *out = fsdp_ok("%s --steps 1 --eval false", cmd + strlen("./fsdp "));
        cr_expect(strstr(out, "the mean of its 1 step"), "%s: %s", cmd, out);
        free(out);
    }
    cJSON_Delete(doc);
}

/* Knobs given are kept: the search varies only the others. */
Test(plan_cli, given_knobs_are_kept) {
    cJSON *doc =
        search_json("plan --model vit-tiny --gpus 8 --gpu-mem 0.05 " NO_OVERHEAD
                    " --search --top 50 --strategy hsdp --offload none --param-dtype bf16");
    const cJSON *best = search_rows(doc);
    cr_assert_gt(cJSON_GetArraySize(best), 2);
    const cJSON *row;
    int replicas_seen = 0;
    cJSON_ArrayForEach(row, best) {
        cr_expect_str_eq(text(row, "strategy"), "hsdp");
        cr_expect_str_eq(text(row, "offload"), "none");
        cr_expect_str_eq(text(row, "param_dtype"), "bf16");
        replicas_seen |= 1 << (int)number(row, "replicas");
    }
    cr_expect_eq(replicas_seen, (1 << 2) | (1 << 4), "hsdp x2 and x4 on one node of 8");
    cJSON_Delete(doc);
}

/* The toy checkpoints nothing (its layers keep only their inputs anyway), and it fits any batch
 * train takes: the search stops at train's bound, 2^20 a GPU. */
Test(plan_cli, the_toy_is_searched_without_checkpointing_up_to_trains_batch_bound) {
    cJSON *doc = search_json("plan --model toy --gpus 3 --search --top 100");
    const cJSON *best = search_rows(doc);
    cr_assert_gt(cJSON_GetArraySize(best), 0);
    const cJSON *row;
    cJSON_ArrayForEach(row, best) {
        cr_expect_eq(number(row, "ac_every"), 0);
        cr_expect_eq(number(row, "batch"), 1 << 20);
    }
    cJSON_Delete(doc);
}

Test(plan_cli, search_bad_input_is_one_line_and_exit_2) {
    static const UsageCase cases[] = {
        {"plan --top 3", "--top and --global-batch go with --search"},
        {"plan --global-batch 64", "--top and --global-batch go with --search"},
        {"plan --search --compare", "give --search or --compare, not both"},
        {"plan --model vit-tiny --gpus 4 --search --global-batch 10",
         "--global-batch 10 is not a whole number per GPU on 4 GPUs"},
        {"plan --model vit-tiny --gpus 4 --search --global-batch 64 --batch-size 8",
         "give --global-batch or --batch-size, not both"},
        {"plan --model vit-tiny --gpus 4 --search --top 0", "--top must be a whole number"},
        {"plan --model vit-tiny --gpus 4 --gpu-mem 0.0001 --search",
         "no configuration searched fits on 4 GPUs of 100.00 KB"},
    };
    expect_usage_errors(cases, sizeof cases / sizeof *cases);
}
