/* Lesson 11's check: the learner's PCIe bytes against the host copies the engine records in traced,
 * accounting-only training steps of a 2-layer vit-tiny. */
#include <stdlib.h>

#include "exercise.h"
#include "jobs/train.h"
#include "lessons/tool/check.h"
#include "models/vit.h"
#include "sim/cluster.h"
#include "sim/planner.h"

/* The copies: engine/fsdp.c's gather_start copies a shard host to device before each all-gather and
 * complete_reduce copies each reduced gradient shard back under --offload cpu; adam_unit copies the
 * optimizer's gradient rows out and the updated rows back under --offload optimizer. The steps run
 * on 2 to 4 simulated GPUs under zero3 and zero2, FSDP's and DeepSpeed's layouts, fp32 and bf16. */

#define MAX_UNITS 8
#define MAX_UNIT_PARAMS 64

/* A run's job and what the engine recorded of its one step. */
typedef struct OffloadRun {
    ModelDesc model;
    FsdpConfig cfg;
    Plan plan;
    Trace trace;
    TensorShape shapes[MAX_UNITS][MAX_UNIT_PARAMS];
    char what[160]; /* the flags, for messages */
} OffloadRun;

static void run_step(OffloadRun *r, int ranks, OffloadKind offload, Strategy strategy,
                     StoreLayout layout, DType dtype) {
    memset(r, 0, sizeof *r);
    VitConfig c;
    Err err = {0};
    cr_assert_eq(vit_preset("vit-tiny", &c), 0);
    c.layers = 2;
    cr_assert_eq(vit_model_create(&r->model, &c, &err), 0, "%s", err.msg);
    fsdp_config_defaults(&r->cfg);
    r->cfg.batch_size = 2;
    r->cfg.offload = offload;
    r->cfg.strategy = strategy;
    r->cfg.layout = layout;
    r->cfg.param_dtype = r->cfg.reduce_dtype = dtype;
    cr_assert_eq(fsdp_plan_create(&r->plan, &r->model, &r->cfg, ranks, &err), 0, "%s", err.msg);
    cr_assert_leq(r->plan.nunits, MAX_UNITS);
    for (int u = 0; u < r->plan.nunits; u++) {
        const Unit *unit = &r->plan.units[u];
        cr_assert_leq(unit->nparams, MAX_UNIT_PARAMS);
        for (int k = 0; k < unit->nparams; k++) {
            const ParamSpec *ps = &r->model.params[unit->params[k].param];
            r->shapes[u][k] = (TensorShape){(size_t)ps->shape[0], ps->row_elems};
        }
    }
    Dataset data;
    cr_assert_eq(planner_blank_dataset(&data, &r->model, (long)ranks * r->cfg.batch_size, &err), 0,
                 "%s", err.msg);
    TrainJob job = {.model = &r->model,
                    .data = &data,
                    .plan = &r->plan,
                    .cfg = &r->cfg,
                    .steps = 1,
                    .no_sampler = 1};
    ClusterOptions opt = {
        .ranks = ranks, .profile = profile_default(), .trace = 1, .accounting_only = 1};
    ClusterResult res;
    cr_assert_eq(cluster_run(&opt, train_rank, &job, &res, &err), 0, "%s", err.msg);
    r->trace = res.trace;
    dataset_free(&data);
    snprintf(r->what, sizeof r->what, "--offload %s --strategy %s%s --param-dtype %s",
             offload == OFFLOAD_CPU ? "cpu" : "optimizer", strategy_name(strategy),
             layout == LAYOUT_DEEPSPEED ? " --layout deepspeed" : "", dtype_name(dtype));
}

static void run_free(OffloadRun *r) {
    trace_free(&r->trace);
    plan_free(&r->plan);
    model_desc_free(&r->model);
}

/* The units as the learner sees them, with the all-gathers `rank` did of each in forward
 * and backward (the re-gathers after the optimizer step of DeepSpeed's zero2 start from rows
 * on the GPU and cross nothing). */
static void units_of(const OffloadRun *r, int rank, UnitInfo *units) {
    for (int u = 0; u < r->plan.nunits; u++)
        units[u] = (UnitInfo){r->shapes[u], r->plan.units[u].nparams, 0};
    for (size_t i = 0; i < r->trace.n; i++) {
        const TraceEvent *e = &r->trace.ev[i];
        if (e->rank == rank && e->kind == EV_ALL_GATHER && e->unit >= 0 &&
            (e->phase == PHASE_FORWARD || e->phase == PHASE_BACKWARD))
            units[e->unit].gathers++;
    }
}

static PcieBytes recorded(const OffloadRun *r, int rank) {
    PcieBytes b = {0, 0};
    for (size_t i = 0; i < r->trace.n; i++) {
        const TraceEvent *e = &r->trace.ev[i];
        if (e->rank != rank) continue;
        if (e->kind == EV_COPY_H2D) b.h2d += (size_t)e->bytes;
        if (e->kind == EV_COPY_D2H) b.d2h += (size_t)e->bytes;
    }
    return b;
}

static const char *traffic_text(PcieBytes b) {
    return lesson_fmt("h2d=%zu d2h=%zu", b.h2d, b.d2h);
}

static size_t param_bytes(const OffloadRun *r) {
    return dtype_size(r->plan.param_store);
}

static size_t grad_bytes(const OffloadRun *r) {
    return dtype_size(r->plan.grad_store);
}

/* ---------------------------------------------------------------- one copy, one shard */

static void expect_each_copy(int ranks) {
    OffloadRun r;
    run_step(&r, ranks, OFFLOAD_CPU, STRAT_ZERO3, LAYOUT_FSDP, DTYPE_FP32);
    for (size_t i = 0; i < r.trace.n; i++) {
        const TraceEvent *e = &r.trace.ev[i];
        if (e->kind != EV_COPY_H2D && e->kind != EV_COPY_D2H) continue;
        const Unit *unit = &r.plan.units[e->unit];
        int h2d = e->kind == EV_COPY_H2D;
        size_t dtype_bytes = h2d ? param_bytes(&r) : grad_bytes(&r);
        lesson_try("shard_bytes(%s's %d tensors, world=%d, rank=%d, dtype_bytes=%zu): GPU %d's "
                   "%s copy of %s under %s",
                   unit->name, unit->nparams, ranks, e->rank, dtype_bytes, e->rank,
                   h2d ? "host-to-device" : "device-to-host", unit->name, r.what);
        size_t want = (size_t)e->bytes;
        size_t got = shard_bytes(r.shapes[e->unit], unit->nparams, ranks, e->rank, dtype_bytes);
        size_t padded = unit->wire_numel * dtype_bytes, whole = unit->numel * dtype_bytes;
        const char *why = NULL;
        if (got == padded && padded != want)
            why = "You counted the padded rows of the wire block: a GPU keeps, offloads and "
                  "copies only its real rows; the padding is made on the GPU for the collective.";
        else if (got == whole && whole != want)
            why = "That is the whole unit: a GPU copies only its own shard over PCIe.";
        if (got != want) run_free(&r);
        expect_size_why(1, "bytes", want, got, why);
    }
    run_free(&r);
}

/* Each test says when it ran to its end (check.h): the runner passes nothing less. */
LESSON_CHECK_SUITE(lesson11);

Test(lesson11, t1_each_copy_is_one_shard) {
    for (int ranks = 2; ranks <= 4; ranks++) expect_each_copy(ranks);
}

/* ---------------------------------------------------------------- one step */

typedef PcieBytes (*TrafficFn)(const UnitInfo *, int, int, int, size_t, size_t);

static void expect_step(int hint, const char *fn_name, TrafficFn fn, int ranks, OffloadKind offload,
                        Strategy strategy, StoreLayout layout, DType dtype) {
    OffloadRun r;
    run_step(&r, ranks, offload, strategy, layout, dtype);
    for (int rank = 0; rank < ranks; rank++) {
        UnitInfo units[MAX_UNITS];
        units_of(&r, rank, units);
        char gathers[64] = "";
        for (int u = 0, at = 0; u < r.plan.nunits; u++)
            at += snprintf(gathers + at, sizeof gathers - (size_t)at, "%s%d", u ? "," : "",
                           units[u].gathers);
        lesson_try("%s(vit-tiny's %d units gathered %s times, world=%d, rank=%d, "
                   "param_bytes=%zu, grad_bytes=%zu): one step under %s",
                   fn_name, r.plan.nunits, gathers, ranks, rank, param_bytes(&r), grad_bytes(&r),
                   r.what);
        PcieBytes got = fn(units, r.plan.nunits, ranks, rank, param_bytes(&r), grad_bytes(&r));
        PcieBytes rec = recorded(&r, rank);
        const char *want = traffic_text(rec), *have = traffic_text(got), *why = NULL;
        if (fn == cpu_offload_bytes && got.d2h == rec.d2h && got.h2d != rec.h2d) {
            size_t once = 0; /* each unit's shard copied once, however often it is gathered */
            for (int u = 0; u < r.plan.nunits; u++)
                once += plan_param_numel(&r.plan, u, rank) * param_bytes(&r);
            if (got.h2d == once)
                why = "Each all-gather copies the shard host to device again: a unit that "
                      "forward freed crosses PCIe again for backward's all-gather (count "
                      "gathers, not units).";
        }
        if (strcmp(want, have)) run_free(&r);
        expect_text_why(hint, want, have, why);
    }
    run_free(&r);
}

Test(lesson11, t2_cpu_offload_step) {
    for (int ranks = 2; ranks <= 4; ranks++)
        expect_step(2, "cpu_offload_bytes", cpu_offload_bytes, ranks, OFFLOAD_CPU, STRAT_ZERO3,
                    LAYOUT_FSDP, DTYPE_FP32);
    /* zero2 keeps units gathered from forward to backward: one gather each */
    expect_step(3, "cpu_offload_bytes", cpu_offload_bytes, 3, OFFLOAD_CPU, STRAT_ZERO2, LAYOUT_FSDP,
                DTYPE_FP32);
    /* bf16 parameters still rest, and cross, in fp32; DeepSpeed's layout rests them in bf16 */
    expect_step(3, "cpu_offload_bytes", cpu_offload_bytes, 3, OFFLOAD_CPU, STRAT_ZERO3, LAYOUT_FSDP,
                DTYPE_BF16);
    expect_step(3, "cpu_offload_bytes", cpu_offload_bytes, 4, OFFLOAD_CPU, STRAT_ZERO3,
                LAYOUT_DEEPSPEED, DTYPE_BF16);
}

Test(lesson11, t3_optimizer_offload_step) {
    for (int ranks = 2; ranks <= 4; ranks++)
        expect_step(4, "optimizer_offload_bytes", optimizer_offload_bytes, ranks, OFFLOAD_OPTIMIZER,
                    STRAT_ZERO3, LAYOUT_FSDP, DTYPE_FP32);
    expect_step(4, "optimizer_offload_bytes", optimizer_offload_bytes, 3, OFFLOAD_OPTIMIZER,
                STRAT_ZERO3, LAYOUT_FSDP, DTYPE_BF16);
    /* ZeRO-Offload's own setting: zero2, 16-bit gradients out, 16-bit parameters back */
    expect_step(4, "optimizer_offload_bytes", optimizer_offload_bytes, 3, OFFLOAD_OPTIMIZER,
                STRAT_ZERO2, LAYOUT_DEEPSPEED, DTYPE_BF16);
    expect_step(4, "optimizer_offload_bytes", optimizer_offload_bytes, 4, OFFLOAD_OPTIMIZER,
                STRAT_ZERO3, LAYOUT_DEEPSPEED, DTYPE_BF16);
}
