/* The memory levers beyond sharding: activation checkpointing and sharded initialization train to
 * the same bits while holding less. */
#include <criterion/criterion.h>
#include <dirent.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "engine/fsdp.h"
#include "io/safetensors.h"
#include "models/vit.h"
#include "tests/util.h"

/* Activation checkpointing trains to the same bits while holding less, recomputes each checkpointed
 * block once per backward on parameters it gathers anyway, and keeps its inputs in their own
 * category. Sharded initialization gives the same bits at any world size, never holds more than a
 * rank's shards, and follows torchvision's distributions; --init-from reads each rank's rows. The
 * tests set no .timeout: with several timed tests running at once (--jobs 2) Debian's Criterion 2.4
 * runner leaks a 48-byte block, which fails the sanitizer build. */

static size_t count_events(const Trace *t, EventKind kind) {
    size_t n = 0;
    for (size_t i = 0; i < t->n; i++) n += t->ev[i].kind == (int)kind;
    return n;
}

/* `fsdp ARGS` exits 2 having printed exactly `want` on stderr and nothing on stdout. */
static void expect_refused(const char *args, const char *want) {
    char *out = expect_usage_error_text(args, want);
    cr_expect_str_eq(out, want, "%s", args);
    free(out);
}

/* Bit-identical parameters with and without checkpointing, for several strategies, every
 * block or every second one, with gradient accumulation, whole blocks or by operator. */
Test(activation_checkpointing, trains_to_the_same_bits) {
    ModelDesc m;
    vit_small_create(&m, 3);
    struct {
        Strategy s;
        int ranks, ac_every, grad_accum;
        AcPolicy policy;
    } cases[] = {{STRAT_ZERO3, 2, 1, 1, AC_BLOCK},
                 {STRAT_ZERO2, 3, 2, 2, AC_BLOCK},
                 {STRAT_DDP, 2, 1, 1, AC_BLOCK},
                 {STRAT_ZERO3, 2, 1, 2, AC_OPS},
                 {STRAT_HSDP, 4, 2, 1, AC_OPS}};
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        FsdpConfig off = vit_config(cases[i].s, 4), on;
        off.grad_accum = cases[i].grad_accum;
        if (cases[i].s == STRAT_HSDP) off.replicas = 2;
        on = off;
        on.ac_every = cases[i].ac_every;
        on.ac_policy = cases[i].policy;
        VitRun a, b;
        vit_train(&a, &m, off, cases[i].ranks, 4, 0);
        vit_train(&b, &m, on, cases[i].ranks, 4, 0);
        cr_expect(memcmp(a.params, b.params, m.total_numel * sizeof(float)) == 0,
                  "%s, every %d-th block (%s): parameters differ", strategy_name(cases[i].s),
                  cases[i].ac_every, ac_policy_name(cases[i].policy));
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
Test(activation_checkpointing, recomputes_without_gathering_and_holds_less) {
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
    static const UsageCase cases[] = {
        {"train --model vit-tiny --ac-every 0", "--ac-every must be"},
        {"train --model toy --activation-checkpointing", "nothing to drop"},
        {"train --model vit-tiny --ac-every x", "--ac-every must be"},
    };
    expect_usage_errors(cases, sizeof cases / sizeof *cases);
}

/* ---- sharded initialization */

static void initial_params(const ModelDesc *m, int ranks, Strategy s, VitRun *run) {
    vit_train(run, m, vit_config(s, 2), ranks, 0, 0);
}

/* Every rank draws only its own rows, keyed by (seed, name, index): the starting point is the
 * same bits at 1 to 5 ranks. */
Test(sharded_init, the_same_bits_at_every_world_size) {
    ModelDesc m;
    vit_small_create(&m, 2);
    VitRun one;
    initial_params(&m, 1, STRAT_ZERO3, &one);
    for (int ranks = 2; ranks <= 5; ranks++) {
        VitRun run;
        initial_params(&m, ranks, ranks == 4 ? STRAT_ZERO2 : STRAT_ZERO3, &run);
        cr_expect(memcmp(run.params, one.params, m.total_numel * sizeof(float)) == 0,
                  "%d ranks start elsewhere", ranks);
        vit_run_free(&run);
    }
    vit_run_free(&one);
    model_desc_free(&m);
}

/* `--steps 0 --dump-params F` writes the initial parameters, the same bytes at 1 and 3 ranks. */
Test(sharded_init, steps_0_dumps_the_initial_parameters) {
    const char *paths[2] = {"/tmp/fsdp-init-1.txt", "/tmp/fsdp-init-3.txt"};
    int ranks[2] = {1, 3};
    for (int i = 0; i < 2; i++) {
        char args[256];
        snprintf(args, sizeof args,
                 "train --model vit-tiny --layers 1 --ranks %d --steps 0 --eval false "
                 "--dump-params %s",
                 ranks[i], paths[i]);
        int status;
        char *out = fsdp_output(args, "2>&1", &status);
        cr_assert_eq(status, 0, "%s", out);
        free(out);
    }
    FILE *f = fopen(paths[0], "r");
    cr_assert(f);
    char line[256];
    cr_assert(fgets(line, sizeof line, f));
    fclose(f);
    cr_expect(strncmp(line, "class_token 0 0", 15) == 0, "the zero class token first: %s", line);
    char cmd[256];
    snprintf(cmd, sizeof cmd, "cmp -s %s %s", paths[0], paths[1]);
    cr_expect_eq(system(cmd), 0, "1 and 3 ranks start from different parameters");
    unlink(paths[0]);
    unlink(paths[1]);
}

/* Engine creation alone on every rank: the accounted peak it reached. */
typedef struct CreateOnly {
    const ModelDesc *m;
    const Plan *plan;
    FsdpConfig cfg;
    size_t peak[8];
} CreateOnly;

static int create_only(const RankEnv *env, void *arg, Err *err) {
    CreateOnly *c = arg;
    Engine *e = NULL;
    int rc = engine_create(&e, &c->cfg, c->plan, c->m, *env, err);
    if (!rc) c->peak[env->rank] = env->dev->ops->peak_bytes(env->dev);
    engine_destroy(e);
    return rc;
}

/* While the engine is created and initialised, no rank's accounted bytes ever exceed its
 * shards: it never holds the whole model, not even for a moment. A 3-layer vit-tiny for real,
 * and vit-workshop (779M parameters) at 4 ranks in an accounting-only run. */
static void expect_creation_within_shards(const ModelDesc *m, int ranks, int accounting_only) {
    CreateOnly c = {.m = m, .cfg = vit_config(STRAT_ZERO3, 2)};
    Plan plan;
    Err err = {0};
    cr_assert_eq(plan_create(&plan, m, c.cfg.wrap, STRAT_ZERO3, ranks, 1, &err), 0);
    c.plan = &plan;
    ClusterOptions opt = {.ranks = ranks,
                          .replicas = 1,
                          .profile = profile_default(),
                          .accounting_only = accounting_only};
    ClusterResult res;
    cr_assert_eq(cluster_run(&opt, create_only, &c, &res, &err), 0, "%s", err.msg);
    for (int r = 0; r < ranks; r++) {
        RestBytes want = plan_rest_bytes(&plan, r, OFFLOAD_NONE);
        cr_expect_eq(c.peak[r], want.param + want.grad + want.optim, "rank %d: %zu bytes", r,
                     c.peak[r]);
        cr_expect_lt(want.param, m->total_numel * sizeof(float) / 2, "rank %d shards", r);
    }
    cluster_result_free(&res);
    plan_free(&plan);
}

Test(sharded_init, no_rank_holds_more_than_its_shards) {
    ModelDesc m;
    vit_small_create(&m, 3);
    expect_creation_within_shards(&m, 4, 0);
    model_desc_free(&m);
    vit_preset_create(&m, "vit-workshop");
    expect_creation_within_shards(&m, 4, 1);
    model_desc_free(&m);
}

/* A parameter's initial values against the formula's mean and spread: the sample mean within
 * 5 standard errors, the sample standard deviation within 5 of its own (sd(s)/sigma is about
 * 0.71/sqrt(n) for a normal and 0.45/sqrt(n) for a uniform; 0.71 covers both). */
static void expect_distribution(const ParamSpec *p, double mean, double std) {
    size_t n = p->numel < 400000 ? p->numel : 400000;
    float *v = malloc(n * sizeof *v);
    param_init_fill(p, 1234, 0, n, v);
    double sum = 0, sq = 0;
    for (size_t i = 0; i < n; i++) sum += v[i];
    double mu = sum / (double)n;
    for (size_t i = 0; i < n; i++) sq += (v[i] - mu) * (v[i] - mu);
    double sd = sqrt(sq / (double)(n - 1));
    if (std == 0) {
        for (size_t i = 0; i < n; i++) cr_expect_eq(v[i], (float)mean, "%s[%zu]", p->name, i);
    } else {
        cr_expect_leq(fabs(mu - mean), 5 * std / sqrt((double)n), "%s: mean %g, want %g", p->name,
                      mu, mean);
        cr_expect_leq(fabs(sd / std - 1), 5 * 0.71 / sqrt((double)n), "%s: std %g, want %g",
                      p->name, sd, std);
    }
    free(v);
}

static const ParamSpec *param_named(const ModelDesc *m, const char *name) {
    for (int i = 0; i < m->nparams; i++)
        if (!strcmp(m->params[i].name, name)) return &m->params[i];
    cr_assert_fail("no parameter %s", name);
    return NULL;
}

/* torchvision's scheme, with every formula written out here from its definition. */
Test(sharded_init, follows_torchvision_distributions) {
    ModelDesc m;
    VitConfig c = vit_preset_create(&m, "vit-workshop");
    double H = c.hidden, F = c.mlp, P = c.patch;
    double uniform_std = 1.0 / sqrt(3.0); /* U(-b, b) has std b / sqrt(3) */
    const char *block = "encoder.layers.encoder_layer_5.";
    char name[128];
    struct {
        const char *suffix;
        double mean, std;
    } want[] = {
        {"ln_1.weight", 1, 0},
        {"ln_1.bias", 0, 0},
        {"self_attention.in_proj_weight", 0, sqrt(6.0 / (H + 3 * H)) * uniform_std},
        {"self_attention.in_proj_bias", 0, 0},
        {"self_attention.out_proj.weight", 0, 1.0 / sqrt(H) * uniform_std},
        {"self_attention.out_proj.bias", 0, 0},
        {"mlp.0.weight", 0, sqrt(6.0 / (H + F)) * uniform_std},
        {"mlp.0.bias", 0, 1e-6},
        {"mlp.3.weight", 0, sqrt(6.0 / (F + H)) * uniform_std},
        {"mlp.3.bias", 0, 1e-6},
    };
    for (size_t i = 0; i < sizeof want / sizeof *want; i++) {
        snprintf(name, sizeof name, "%s%s", block, want[i].suffix);
        expect_distribution(param_named(&m, name), want[i].mean, want[i].std);
    }
    expect_distribution(param_named(&m, "conv_proj.weight"), 0, sqrt(1.0 / (P * P)));
    expect_distribution(param_named(&m, "conv_proj.bias"), 0, 0);
    expect_distribution(param_named(&m, "class_token"), 0, 0);
    expect_distribution(param_named(&m, "encoder.pos_embedding"), 0, 0.02);
    expect_distribution(param_named(&m, "heads.head.weight"), 0, 0);
    expect_distribution(param_named(&m, "heads.head.bias"), 0, 0);
    expect_distribution(param_named(&m, "encoder.ln.weight"), 1, 0);
    model_desc_free(&m);
}

/* trunc_normal_ keeps every draw inside [-2, 2]: a std of 1 puts 4.6% of a normal outside. */
Test(sharded_init, truncated_normal_stays_inside_its_bounds) {
    ParamSpec p = {
        .name = "t", .numel = 100000, .init = INIT_TRUNC_NORMAL, .init_a = 0, .init_b = 1};
    float *v = malloc(p.numel * sizeof *v);
    param_init_fill(&p, 7, 0, p.numel, v);
    size_t beyond_one = 0;
    for (size_t i = 0; i < p.numel; i++) {
        cr_assert(v[i] >= -2.0f && v[i] <= 2.0f, "v[%zu] = %g", i, v[i]);
        beyond_one += fabsf(v[i]) > 1.0f;
    }
    /* a normal truncated at 2 sigma has (95.45% - 68.27%) / 95.45% = 28.48% of its mass
     * beyond 1 sigma; the standard error at n = 100,000 is 0.14% */
    cr_expect_leq(fabs((double)beyond_one / (double)p.numel - 0.2848), 0.006);
    free(v);
}

/* --init-from reads each rank's rows straight from the file: a model written from one run
 * starts another, at another world size, exactly there. */
Test(sharded_init, init_from_reads_each_ranks_rows) {
    ModelDesc m;
    vit_small_create(&m, 2);
    VitRun a;
    vit_train(&a, &m, vit_config(STRAT_ZERO3, 2), 1, 3, 0); /* somewhere away from the init */
    StTensorOut *t = calloc((size_t)m.nparams, sizeof *t);
    size_t at = 0;
    for (int i = 0; i < m.nparams; at += m.params[i++].numel)
        t[i] = (StTensorOut){m.params[i].name, "F32", m.params[i].ndim, m.params[i].shape,
                             a.params + at};
    char path[] = "/tmp/fsdp-init-from-XXXXXX";
    make_temp_file(path);
    Err err = {0};
    cr_assert_eq(st_write(path, t, m.nparams, NULL, 0, &err), 0, "%s", err.msg);
    for (int ranks = 1; ranks <= 3; ranks += 2) {
        Plan plan;
        FsdpConfig cfg = vit_config(STRAT_ZERO3, 2);
        cr_assert_eq(plan_create(&plan, &m, cfg.wrap, cfg.strategy, ranks, 1, &err), 0);
        float *got = calloc(m.total_numel, sizeof *got);
        TrainJob job = {.model = &m,
                        .data = vit_test_split(),
                        .plan = &plan,
                        .cfg = &cfg,
                        .init_from = path,
                        .final_params = got};
        ClusterOptions opt = {.ranks = ranks, .replicas = 1, .profile = profile_default()};
        ClusterResult res;
        cr_assert_eq(cluster_run(&opt, train_rank, &job, &res, &err), 0, "%s", err.msg);
        cr_expect(memcmp(got, a.params, m.total_numel * sizeof(float)) == 0, "%d ranks", ranks);
        cluster_result_free(&res);
        free(got);
        plan_free(&plan);
    }
    unlink(path);
    free(t);
    vit_run_free(&a);
    model_desc_free(&m);
}

/* ---- offload tiers */

/* Where state rests changes no arithmetic: every tier trains a ViT to the same bits as none,
 * and ZeRO-Offload's trace shows each unit's gradient rows going to the host's Adam and the
 * updated rows coming back. */
static int dir_is_empty(const char *path) {
    DIR *d = opendir(path);
    cr_assert(d, "cannot open %s", path);
    int n = 0;
    for (struct dirent *de; (de = readdir(d));) n += de->d_name[0] != '.';
    closedir(d);
    return n == 0;
}

Test(offload, every_tier_trains_to_the_same_bits) {
    ModelDesc m;
    vit_small_create(&m, 2);
    VitRun none;
    vit_train(&none, &m, vit_config(STRAT_ZERO3, 4), 2, 3, 0);
    char dir[] = "/tmp/fsdp-nvme-test-XXXXXX";
    cr_assert(mkdtemp(dir));
    OffloadKind tiers[] = {OFFLOAD_CPU, OFFLOAD_OPTIMIZER, OFFLOAD_NVME};
    for (size_t i = 0; i < sizeof tiers / sizeof *tiers; i++) {
        FsdpConfig c = vit_config(STRAT_ZERO3, 4);
        c.offload = tiers[i];
        c.nvme_dir = dir;
        VitRun run;
        vit_train(&run, &m, c, 2, 3, 1);
        cr_expect(memcmp(run.params, none.params, m.total_numel * sizeof(float)) == 0,
                  "--offload %s changed the parameters", offload_name(tiers[i]));
        size_t optim_steps = count_events(&run.trace, EV_OPTIMIZER);
        if (tiers[i] == OFFLOAD_OPTIMIZER) {
            cr_expect_eq(count_events(&run.trace, EV_COPY_D2H), optim_steps);
            cr_expect_eq(count_events(&run.trace, EV_COPY_H2D), optim_steps);
            cr_expect_eq(run.memory[0].rest[MEM_OPTIM_STATE], 0);
            cr_expect_gt(run.memory[0].rest[MEM_HOST_OFFLOAD], 0);
            cr_expect_gt(run.memory[0].rest[MEM_PARAM_SHARD], 0, "the shards stay on the GPU");
        }
        if (tiers[i] == OFFLOAD_NVME) {
            /* every unit's rows read to be gathered (forward and backward) and, with Adam's
             * state, read for its step; written back after each of the 3 steps' optimizer
             * steps and once when the engine is created */
            cr_expect_geq(count_events(&run.trace, EV_NVME_READ), 3 * optim_steps);
            cr_expect_eq(count_events(&run.trace, EV_NVME_WRITE), optim_steps + optim_steps / 3);
            cr_expect(dir_is_empty(dir), "the tier's files are removed at exit");
        }
        vit_run_free(&run);
    }
    rmdir(dir);
    vit_run_free(&none);
    model_desc_free(&m);
}

Test(offload, an_unknown_tier_is_one_line) {
    expect_refused("train --offload disk",
                   "fsdp: --offload must be none, optimizer, cpu or nvme (got 'disk')\n");
}

/* A directory the NVMe tier cannot use is one line, exit 2, before anything runs: no
 * parameters dumped, nothing left in the directory. */
Test(offload, a_bad_nvme_dir_is_one_line_and_writes_nothing) {
    struct {
        const char *args, *want;
    } cases[] = {
        {"--offload nvme", "fsdp: --offload nvme needs --nvme-dir DIR (where its files go)\n"},
        {"--nvme-dir /tmp", "fsdp: --nvme-dir applies only to --offload nvme\n"},
        {"--offload nvme --nvme-dir /nonexistent-fsdp-dir",
         "fsdp: --nvme-dir /nonexistent-fsdp-dir: not usable: No such file or directory\n"},
        {"--offload nvme --nvme-dir /etc/hostname", "fsdp: --nvme-dir /etc/hostname: not a"},
        {"--offload nvme --nvme-dir /tmp --strategy ddp",
         "fsdp: --offload nvme needs a sharded strategy (zero2, zero3 or hsdp), not ddp\n"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        char args[256];
        snprintf(args, sizeof args, "train --steps 1 --dump-params /tmp/fsdp-nvme-bad.txt %s",
                 cases[i].args);
        char *out = expect_usage_error_text(args, cases[i].want);
        cr_expect(strncmp(out, cases[i].want, strlen(cases[i].want)) == 0, "%s: got '%s'",
                  cases[i].args, out);
        cr_expect_neq(access("/tmp/fsdp-nvme-bad.txt", F_OK), 0, "nothing written");
        free(out);
    }
}

/* Checkpoints read and write the NVMe tier's state through the same path: a resumed run ends
 * on the bits of an uninterrupted one. */
Test(offload, nvme_state_checkpoints_and_resumes) {
    char dir[] = "/tmp/fsdp-nvme-ckpt-XXXXXX";
    cr_assert(mkdtemp(dir));
    const char *common = "train --model vit-tiny --layers 1 --ranks 2 --batch-size 4 --eval false "
                         "--offload nvme";
    char args[1024];
    int status;
    snprintf(args, sizeof args, "%s --nvme-dir %s --steps 4 --dump-params %s/whole.txt", common,
             dir, dir);
    free(fsdp_output(args, "2>&1", &status));
    cr_assert_eq(status, 0, "%s", args);
    snprintf(args, sizeof args,
             "%s --nvme-dir %s --steps 2 --checkpoint-dir %s/ck --checkpoint-every 2", common, dir,
             dir);
    free(fsdp_output(args, "2>&1", &status));
    cr_assert_eq(status, 0, "%s", args);
    snprintf(args, sizeof args,
             "%s --nvme-dir %s --steps 4 --checkpoint-dir %s/ck --resume auto --dump-params "
             "%s/resumed.txt",
             common, dir, dir, dir);
    free(fsdp_output(args, "2>&1", &status));
    cr_assert_eq(status, 0, "%s", args);
    char cmd[512];
    snprintf(cmd, sizeof cmd, "cmp -s %s/whole.txt %s/resumed.txt", dir, dir);
    cr_expect_eq(system(cmd), 0, "a resumed nvme run differs from an uninterrupted one");
    snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
    cr_expect_eq(system(cmd), 0);
}

/* ---- memory over time, from the command line */

Test(memory_over_time, train_writes_the_svg_and_prints_the_timeline) {
    char path[] = "/tmp/fsdp-memory-XXXXXX";
    make_temp_file(path);
    char args[256];
    snprintf(args, sizeof args, "train --model toy --ranks 2 --steps 2 --memory --memory-svg %s",
             path);
    int status;
    char *out = fsdp_output(args, "2>&1", &status);
    cr_expect(WIFEXITED(status) && WEXITSTATUS(status) == 0, "%s", out);
    cr_expect(strstr(out, "memory over the last step") != NULL, "%s", out);
    cr_expect(strstr(out, "GPU 1  peak") != NULL, "both ranks are drawn: %s", out);
    FILE *f = fopen(path, "r");
    char head[256] = {0};
    cr_assert(f);
    cr_expect_gt(fread(head, 1, sizeof head - 1, f), 0);
    fclose(f);
    cr_expect(strstr(head, "<svg") != NULL, "an SVG: %s", head);
    free(out);
    unlink(path);
}

Test(memory_over_time, an_unwritable_svg_is_one_line) {
    expect_refused(
        "train --model toy --steps 1 --memory-svg /nonexistent-dir/m.svg",
        "fsdp: --memory-svg /nonexistent-dir/m.svg: cannot write in /nonexistent-dir: No "
        "such file or directory\n");
}

/* ---- the mixed-precision policy */

static void train_policy(VitRun *run, const ModelDesc *m, DType param, int output, int cast_inputs,
                         int ac_every) {
    FsdpConfig c = vit_config(STRAT_ZERO3, 4);
    c.param_dtype = param;
    c.output_dtype = output;
    c.cast_forward_inputs = cast_inputs;
    c.ac_every = ac_every;
    vit_train(run, m, c, 2, 4, 0);
}

static int same_bits(const VitRun *a, const VitRun *b, const ModelDesc *m) {
    return memcmp(a->params, b->params, m->total_numel * sizeof(float)) == 0;
}

/* Casting to fp32 is no cast: an all-fp32 policy spelled out trains to the default's bits. */
Test(mixed_precision, an_fp32_policy_changes_nothing) {
    ModelDesc m;
    vit_small_create(&m, 2);
    VitRun plain, spelled;
    train_policy(&plain, &m, DTYPE_FP32, -1, 1, 0);
    train_policy(&spelled, &m, DTYPE_FP32, DTYPE_FP32, 0, 0);
    cr_expect(same_bits(&plain, &spelled, &m));
    vit_run_free(&plain);
    vit_run_free(&spelled);
    model_desc_free(&m);
}

/* bf16 compute and bf16 outputs each round something: both land near fp32 but not on its bits.
 * The rounding is the same in a recomputed block, so checkpointing still changes nothing, and
 * an fp32 output cast of a bf16 unit (a widening) changes nothing either. */
Test(mixed_precision, each_cast_rounds_and_stays_close) {
    ModelDesc m;
    vit_small_create(&m, 2);
    VitRun fp32, bf16, out_bf16, bf16_ac, bf16_out32;
    train_policy(&fp32, &m, DTYPE_FP32, -1, 1, 0);
    train_policy(&bf16, &m, DTYPE_BF16, -1, 1, 0);
    train_policy(&out_bf16, &m, DTYPE_FP32, DTYPE_BF16, 1, 0);
    train_policy(&bf16_ac, &m, DTYPE_BF16, -1, 1, 1);
    train_policy(&bf16_out32, &m, DTYPE_BF16, DTYPE_FP32, 1, 0);
    VitRun *close[] = {&bf16, &out_bf16};
    for (size_t i = 0; i < 2; i++) {
        double d = rel_l2(close[i]->params, fp32.params, m.total_numel);
        cr_expect_leq(d, 1e-2, "case %zu: relative L2 %.3g from fp32", i, d);
        cr_expect_gt(d, 0.0, "case %zu rounded nothing", i);
    }
    cr_expect(same_bits(&bf16, &bf16_ac, &m), "checkpointing changed a bf16 run");
    cr_expect(same_bits(&bf16, &bf16_out32, &m), "widening a bf16 unit's outputs changed it");
    VitRun *all[] = {&fp32, &bf16, &out_bf16, &bf16_ac, &bf16_out32};
    for (size_t i = 0; i < 5; i++) vit_run_free(all[i]);
    model_desc_free(&m);
}

/* Invariant 1 in bf16 (DESIGN.md): every strategy at 4 ranks trains to one rank's parameters on
 * the global batch within BF16_RANKS_REL_L2 after 20 steps; and the same job twice gives the
 * same bits. In bf16 the ranks' fp32 differences (a batch summed in another order) can tip an
 * activation's rounding to the next bf16 value, 2^-8 apart, so the bound is bf16's, not fp32's
 * 1e-5. */
#define BF16_RANKS_REL_L2 5e-3
Test(mixed_precision, bf16_at_4_ranks_trains_as_one_rank_and_repeats_bit_for_bit) {
    ModelDesc m;
    vit_small_create(&m, 2);
    FsdpConfig one = vit_config(STRAT_ZERO3, 8);
    one.param_dtype = DTYPE_BF16;
    VitRun base, again;
    vit_train(&base, &m, one, 1, 20, 0);
    vit_train(&again, &m, one, 1, 20, 0);
    cr_expect(same_bits(&base, &again, &m), "the same bf16 job twice differs");
    const Strategy ss[] = {STRAT_DDP, STRAT_ZERO1, STRAT_ZERO2, STRAT_ZERO3};
    for (int s = 0; s < 4; s++) {
        FsdpConfig four = vit_config(ss[s], 2);
        four.param_dtype = DTYPE_BF16;
        VitRun r;
        vit_train(&r, &m, four, 4, 20, 0);
        double d = rel_l2(r.params, base.params, m.total_numel);
        cr_expect_leq(d, BF16_RANKS_REL_L2, "%s at 4 ranks: relative L2 %.3g from one rank",
                      strategy_name(ss[s]), d);
        vit_run_free(&r);
    }
    vit_run_free(&base);
    vit_run_free(&again);
    model_desc_free(&m);
}

Test(mixed_precision, bad_policy_flags_are_one_line) {
    expect_refused("train --output-dtype fp8",
                   "fsdp: --output-dtype must be fp32, bf16 or fp16 (got 'fp8')\n");
    expect_refused("train --param-dtype bf16 --cast-forward-inputs false",
                   "fsdp: --cast-forward-inputs false: every unit computes in bf16 and takes its "
                   "inputs in it (an FSDP2 unit in bf16 fails on fp32 inputs); it needs "
                   "--param-dtype fp32\n");
    expect_refused("train --model toy --backend sim --tf32",
                   "fsdp: --tf32 is the GPU's: --backend sim computes fp32 products in fp32\n");
    expect_refused("train --cast-forward-inputs maybe",
                   "fsdp: --cast-forward-inputs must be true or false (got 'maybe')\n");
}

/* ---- --memory-compare */

/* A table's cell of `width` characters at `at` ("48 B", "1.93 MiB"), in bytes. */
static double bytes_cell(const char *at, int width) {
    char cell[16] = {0};
    memcpy(cell, at, (size_t)width);
    double v = 0;
    char unit[8] = {0};
    cr_assert_eq(sscanf(cell, "%lf %7s", &v, unit), 2, "cell '%s'", cell);
    const char *units[] = {"B", "KiB", "MiB", "GiB"};
    for (int i = 0; i < 4; i++, v *= 1024)
        if (!strcmp(unit, units[i])) return v;
    cr_assert_fail("unit '%s'", unit);
    return 0;
}

/* Column k (0: params ... 6: host) of a row of the compare table, in bytes. */
static double compare_column(const char *row, int k) {
    return bytes_cell(row + 2 + 24 + k * 11 + 1, 10);
}

/* The row of a table in out whose label, `width` wide after two spaces, is `label`. */
static const char *table_row(const char *out, const char *label, int width) {
    char key[64];
    snprintf(key, sizeof key, "\n  %-*s", width, label);
    const char *row = strstr(out, key);
    cr_assert(row, "no row '%s' in:\n%s", label, out);
    return row + 1;
}

static const char *compare_row(const char *out, const char *name) {
    return table_row(out, name, 24);
}

/* Each setting moves the memory where it should: CPU offload empties the GPU of Adam's state
 * into host memory, reshard after forward and bf16 shrink the parameters held, bf16 halves the
 * activations (but for the norms' fp32 statistics and the int32 labels), combining them shrinks
 * the GPU total further, and checkpointing cuts the activations. At batch 32 the activations
 * are most of every peak, so the peaks' breakdowns compare. */
Test(memory_compare, each_setting_moves_memory_where_it_should) {
    int status;
    char *out =
        fsdp_output("train --model vit-tiny --layers 2 --ranks 2 --batch-size 32 --memory-compare",
                    "2>&1", &status);
    cr_assert_eq(status, 0, "%s", out);
    const char *def = compare_row(out, "default"), *cpu = compare_row(out, "CPU offload");
    const char *rs = compare_row(out, "reshard after forward");
    const char *mp = compare_row(out, "mixed precision"), *all = compare_row(out, "all combined");
    const char *ac = compare_row(out, "+ activation ckpt");
    enum { PARAMS = 0, ADAM = 2, ACTS = 3, GPU = 5, HOST = 6 };
    cr_expect_gt(compare_column(def, ADAM), 0);
    cr_expect_eq(compare_column(cpu, ADAM), 0);
    cr_expect_gt(compare_column(cpu, HOST), compare_column(def, ADAM));
    cr_expect_eq(compare_column(def, HOST), 0);
    cr_expect_lt(compare_column(rs, PARAMS), compare_column(def, PARAMS));
    cr_expect_lt(compare_column(mp, PARAMS), compare_column(def, PARAMS));
    const double half = compare_column(mp, ACTS) / compare_column(def, ACTS);
    cr_expect(half > 0.5 && half < 0.51, "bf16 keeps %.4f of fp32's activations", half);
    cr_expect_lt(compare_column(all, GPU), compare_column(rs, GPU));
    cr_expect_lt(compare_column(all, GPU), compare_column(cpu, GPU));
    cr_expect_lt(compare_column(ac, ACTS), 0.75 * compare_column(all, ACTS));
    free(out);
}

/* ---- the memory table of --memory */

/* The row `label` of `fsdp train --memory`'s table, asserted to be there. */
static const char *memory_row(const char *out, const char *label) {
    return table_row(out, label, 21);
}

/* Rank r's bytes at rest (peak 0) or at its peak (1) in a row of the memory table. */
static double memory_cell(const char *row, int r, int peak) {
    return bytes_cell(row + 2 + 19 + 25 * r + 2 + 12 * peak, 11);
}

/* With --offload cpu the sharded parameters, gradients and Adam's state rest in host memory:
 * the GPU's total at rest is 0 B and its peak only what the GPU holds (the gathered unit, its
 * gradients, activations, buffers), while the host's rows hold exactly each rank's shards:
 * at 3 ranks each rank keeps one of La's, Lb's and Lc's 3 rows (3 floats of params, 3 of grads,
 * 6 of Adam: 48 B); at 2 ranks rank 0 keeps rows 0-1 of each (96 B) and rank 1 row 2 (48 B). */
Test(memory_table, offload_keeps_host_memory_out_of_the_gpu_total) {
    const double host_want[2][3] = {{96, 48, 0}, {48, 48, 48}};
    for (int ranks = 2; ranks <= 3; ranks++) {
        char *out = fsdp_ok("train --model toy --ranks %d --steps 3 --offload cpu --memory", ranks);
        char *plain = fsdp_ok("train --model toy --ranks %d --steps 3 --memory", ranks);
        const char *gpu = memory_row(out, "GPU total"), *host = memory_row(out, "host total");
        const char *offload = memory_row(out, "host (offload)");
        const char *acts = memory_row(out, "activations");
        for (int r = 0; r < ranks; r++) {
            const double want = host_want[ranks - 2][r];
            cr_expect_eq(memory_cell(gpu, r, 0), 0, "%d ranks, GPU %d at rest", ranks, r);
            cr_expect_eq(memory_cell(host, r, 0), want, "%d ranks, GPU %d's host at rest", ranks,
                         r);
            cr_expect_eq(memory_cell(host, r, 1), want, "%d ranks, GPU %d's host peak", ranks, r);
            cr_expect_eq(memory_cell(offload, r, 0), want);
            /* the GPU peaks with a unit's gathered rows, grads and the activations, not the
             * shards: above the activations, below what the same run holds without offload */
            cr_expect_gt(memory_cell(gpu, r, 1), memory_cell(acts, r, 1));
            cr_expect_lt(memory_cell(gpu, r, 1), memory_cell(memory_row(plain, "GPU total"), r, 1),
                         "%d ranks, GPU %d", ranks, r);
            /* without offload the GPU holds the shards at rest, and no host row is shown */
            cr_expect_eq(memory_cell(memory_row(plain, "GPU total"), r, 0), want, "%d ranks",
                         ranks);
        }
        cr_expect(strstr(out, "host rows when the host's did"), "%s", out);
        cr_expect(!strstr(plain, "host"), "%s", plain);
        free(out), free(plain);
    }
}

/* ---- accounting-only runs and the workshop's scenario */

/* A training job on the simulated cluster, accounting only or for real; its ranks' memory. */
static void run_accounting(const ModelDesc *m, FsdpConfig cfg, int ranks, int accounting_only,
                           RankMemory *memory, size_t *events) {
    Plan plan;
    Err err = {0};
    cr_assert_eq(plan_create(&plan, m, cfg.wrap, cfg.strategy, ranks, 1, &err), 0);
    TrainJob job = {.model = m,
                    .data = vit_test_split(),
                    .plan = &plan,
                    .cfg = &cfg,
                    .steps = 2,
                    .memory = memory};
    ClusterOptions opt = {.ranks = ranks,
                          .replicas = 1,
                          .profile = profile_default(),
                          .trace = 1,
                          .accounting_only = accounting_only};
    ClusterResult res;
    cr_assert_eq(cluster_run(&opt, train_rank, &job, &res, &err), 0, "%s", err.msg);
    *events = res.trace.n;
    cluster_result_free(&res);
    plan_free(&plan);
}

/* Accounting only runs the same schedule through the same accounting: every rank's bytes at
 * rest and at its peak, by category, and the number of events equal a real run's, whatever
 * the levers. */
Test(accounting_only, charges_exactly_what_a_real_run_charges) {
    ModelDesc m;
    vit_small_create(&m, 2);
    FsdpConfig cases[4];
    for (int i = 0; i < 4; i++) cases[i] = vit_config(STRAT_ZERO3, 4);
    cases[1].strategy = STRAT_ZERO2;
    cases[1].offload = OFFLOAD_CPU;
    cases[2].param_dtype = DTYPE_BF16;
    cases[2].ac_every = 1;
    cases[3].offload = OFFLOAD_NVME;
    cases[3].nvme_dir = "/nonexistent-dir"; /* never opened: accounting only holds no data */
    for (int i = 0; i < 3 + 1; i++) {
        RankMemory real[3], counted[3];
        size_t real_events = 0, counted_events;
        if (i < 3) run_accounting(&m, cases[i], 3, 0, real, &real_events);
        run_accounting(&m, cases[i], 3, 1, counted, &counted_events);
        if (i == 3) { /* no real run without a directory: compare with the plan at rest */
            for (int r = 0; r < 3; r++) cr_expect_gt(counted[r].rest[MEM_NVME], 0, "rank %d", r);
            continue;
        }
        cr_expect_eq(counted_events, real_events, "case %d", i);
        char what[32];
        snprintf(what, sizeof what, "case %d", i);
        expect_same_memory(real, counted, 3, what);
    }
    model_desc_free(&m);
}

/* The workshop's cluster, two 24 GB L4s: the hidden-3840 model (779,298,826 parameters, not
 * "~180M") fits in every setting, the hidden-7680 one (about 2.97B) only with its state
 * offloaded to the host. */
Test(accounting_only, the_workshop_scenario_says_which_settings_fit) {
    int status;
    char *out = fsdp_output("train --memory-compare --scenario workshop", "2>&1", &status);
    cr_assert_eq(status, 0, "%s", out);
    const char *small = strstr(out, "hidden 3840: 779,298,826 parameters");
    const char *big = strstr(out, "hidden 7680: 2,974,166,026 parameters");
    cr_assert(small && big && small < big, "%s", out);
    const char *row = compare_row(small, "default");
    cr_expect(strstr(row, "yes") && strstr(row, "yes") < strchr(row, '\n'), "%.120s", row);
    row = compare_row(big, "default");
    cr_expect(strstr(row, " no") && strstr(row, " no") < strchr(row, '\n'), "%.120s", row);
    row = compare_row(big, "all combined");
    cr_expect(strstr(row, "yes") && strstr(row, "yes") < strchr(row, '\n'), "%.120s", row);
    free(out);
}

Test(accounting_only, bad_flags_are_one_line) {
    expect_refused("train --memory-compare --scenario lab",
                   "fsdp: --scenario must be workshop (got 'lab')\n");
    expect_refused("train --accounting-only",
                   "fsdp: --accounting-only and --scenario go with --memory-compare (viz takes "
                   "--accounting-only on its own)\n");
}
