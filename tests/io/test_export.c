/* Exporting the whole model (--save-full, and the gathers behind engine_full_params): units
 * are gathered one at a time onto every rank, so a rank never holds more than its resting
 * state plus one gathered unit, and what arrives is the parameters themselves. */
#include <criterion/criterion.h>
#include <stdlib.h>
#include <string.h>

#include "engine/fsdp.h"
#include "models/vit.h"
#include "tests/util.h"

typedef struct Export {
    const ModelDesc *m;
    const Plan *plan;
    FsdpConfig cfg;
    float *owned;    /* [total_numel] every rank's own rows, as engine_own_values gives them */
    float *gathered; /* [total_numel] what rank 0's sink received */
    size_t *flat;    /* [nparams] each parameter's offset in model order */
    size_t rest[8], peak[8];
} Export;

static int keep_unit(void *user, int u, const float *full, Err *err) {
    (void)err;
    Export *x = user;
    const Unit *unit = &x->plan->units[u];
    for (int i = 0; x->gathered && i < unit->nparams; i++) {
        const UnitParam *up = &unit->params[i];
        memcpy(x->gathered + x->flat[up->param], full + up->offset,
               x->m->params[up->param].numel * sizeof(float));
    }
    return 0;
}

static size_t bytes_in_use(Device *d) {
    size_t total = 0;
    for (int c = 0; c < MEM_CATEGORY_COUNT; c++) total += d->ops->bytes_in_use(d, (MemCategory)c);
    return total;
}

static int export_rank(const RankEnv *env, void *arg, Err *err) {
    Export *x = arg;
    Engine *e = NULL;
    int rc = engine_create(&e, &x->cfg, x->plan, x->m, *env, err);
    if (!rc && x->owned) rc = engine_own_values(e, x->owned, NULL, err);
    if (!rc) {
        x->rest[env->rank] = bytes_in_use(env->dev);
        env->dev->ops->reset_peak(env->dev);
        Export mine = *x;
        if (env->rank != 0) mine.gathered = NULL;
        rc = engine_gather_units(e, keep_unit, &mine, err);
        x->peak[env->rank] = env->dev->ops->peak_bytes(env->dev);
    }
    engine_destroy(e);
    return rc;
}

/* The largest unit as the all-gather receives it: every rank's block, padded to whole chunks. */
static size_t largest_gathered_unit(const Plan *p) {
    size_t most = 0;
    for (int u = 0; u < p->nunits; u++) {
        size_t b = p->units[u].wire_numel * (size_t)p->shard_size * sizeof(float);
        if (b > most) most = b;
    }
    return most;
}

static void run_export(Export *x, const ModelDesc *m, int ranks, int accounting_only) {
    static Plan plan;
    Err err = {0};
    fsdp_config_defaults(&x->cfg);
    cr_assert_eq(plan_create(&plan, m, x->cfg.wrap, STRAT_ZERO3, ranks, 1, &err), 0, "%s", err.msg);
    x->m = m;
    x->plan = &plan;
    ClusterOptions opt = {.ranks = ranks,
                          .replicas = 1,
                          .profile = profile_default(),
                          .accounting_only = accounting_only};
    ClusterResult res;
    cr_assert_eq(cluster_run(&opt, export_rank, x, &res, &err), 0, "%s", err.msg);
    size_t unit = largest_gathered_unit(&plan);
    cr_log_info("%d ranks: rank 0 peaks at %zu B = its resting %zu B + the largest unit %zu B",
                ranks, x->peak[0], x->rest[0], unit);
    for (int r = 0; r < ranks; r++)
        cr_expect_eq(x->peak[r], x->rest[r] + unit,
                     "rank %d: peak %zu, resting %zu + the largest unit %zu", r, x->peak[r],
                     x->rest[r], unit);
    cluster_result_free(&res);
    plan_free(&plan);
}

Test(export, gathers_the_parameters_holding_its_state_plus_one_unit) {
    ModelDesc m;
    vit_small_create(&m, 3);
    Export x = {.owned = calloc(m.total_numel, sizeof(float)),
                .gathered = calloc(m.total_numel, sizeof(float)),
                .flat = calloc((size_t)m.nparams, sizeof(size_t))};
    cr_assert(x.owned && x.gathered && x.flat);
    for (int i = 1; i < m.nparams; i++) x.flat[i] = x.flat[i - 1] + m.params[i - 1].numel;
    run_export(&x, &m, 3, 0);
    cr_expect_eq(memcmp(x.owned, x.gathered, m.total_numel * sizeof(float)), 0,
                 "rank 0 received every parameter exactly");
    size_t nonzero = 0;
    for (size_t i = 0; i < m.total_numel; i++) nonzero += x.gathered[i] != 0.0f;
    cr_expect_gt(nonzero, m.total_numel / 2, "the values are the initialised parameters");
    free(x.owned);
    free(x.gathered);
    free(x.flat);
    model_desc_free(&m);
}

/* The target at the workshop's size: vit-workshop (779M parameters) at 4 ranks, in an
 * accounting-only run (the bytes a real run charges, with nothing stored). */
Test(export, vit_workshop_at_4_ranks_holds_its_state_plus_one_unit) {
    ModelDesc m;
    vit_preset_create(&m, "vit-workshop");
    Export x = {0};
    run_export(&x, &m, 4, 1);
    model_desc_free(&m);
}
