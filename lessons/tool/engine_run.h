/* engine_run: the engine's side of the checks of lessons 05 to 08 (their check.c files
 * include it; a learner's exercise never does). It trains one step on a simulated cluster of
 * 3 ranks with the trace on (the toy with its real numbers; a ViT accounting-only, the same
 * schedule and bytes without the arithmetic, as `fsdp plan` runs it) and reads the trace
 * back in the lessons' terms: one rank's schedule in the order its code issued it (each
 * event's seq), its collectives, and the peak of one memory category. */
#ifndef LESSONS_ENGINE_RUN_H
#define LESSONS_ENGINE_RUN_H

#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "jobs/train.h"
#include "lessons/tool/check.h"
#include "models/toy.h"
#include "models/vit.h"
#include "sim/cluster.h"
#include "sim/viz/memory_timeline.h"

#define ENGINE_RANKS 3
#define ENGINE_MAX_STEPS 256 /* schedule steps of one phase: vit-tiny's backward has 65 */

typedef struct EngineRun {
    ModelDesc model;
    Plan plan;
    FsdpConfig cfg;
    Dataset data;
    Trace trace;
    RankMemory memory[ENGINE_RANKS];
    char name[32], wrap[64]; /* "toy", "layer" */
    char label[160];         /* "toy, wrap layer, reshard_after_forward=1, prefetch=1" */
} EngineRun;

/* zero3 in fp32 with the wrap policy ("layer", "block:2", "none", "size:N"), the
 * reshard_after_forward and the prefetch depth (forward and backward) given. */
static inline FsdpConfig engine_config(const char *wrap, int reshard, int prefetch) {
    FsdpConfig c;
    fsdp_config_defaults(&c);
    cr_assert_eq(wrap_parse(wrap, &c.wrap), 0, "bad wrap policy %s", wrap);
    c.reshard_after_forward = reshard;
    c.prefetch_forward = c.prefetch_backward = prefetch;
    return c;
}

static inline void engine_model(ModelDesc *m, const char *name) {
    Err err = {0};
    if (!strcmp(name, "toy")) {
        cr_assert_eq(toy_model_create(m, &err), 0, "%s", err.msg);
        return;
    }
    VitConfig c;
    cr_assert_eq(vit_preset(name, &c), 0, "no preset %s", name);
    cr_assert_eq(vit_model_create(m, &c, &err), 0, "%s", err.msg);
}

/* The toy's own data set; for a ViT, blank images (accounting-only runs read none of them). */
static inline void engine_data(EngineRun *r, const char *name) {
    Err err = {0};
    if (!strcmp(name, "toy")) {
        cr_assert_eq(toy_dataset_create(&r->data, &err), 0, "%s", err.msg);
        return;
    }
    long n = (long)ENGINE_RANKS * r->cfg.batch_size;
    uint8_t *bytes = calloc((size_t)n * (28 * 28 + 1), 1);
    cr_assert(bytes);
    r->data = (Dataset){.n = n,
                        .in_elems = 28 * 28,
                        .target_elems = 1,
                        .pixels = bytes,
                        .labels = bytes + (size_t)n * 28 * 28,
                        .rows = 28,
                        .cols = 28,
                        .classes = 10,
                        .owned = bytes};
}

/* One training step of `model` ("toy", "vit-tiny") under cfg on 3 simulated ranks. */
static inline void engine_run(EngineRun *r, const char *model, FsdpConfig cfg) {
    memset(r, 0, sizeof *r);
    r->cfg = cfg;
    snprintf(r->name, sizeof r->name, "%s", model);
    wrap_format(&cfg.wrap, r->wrap, sizeof r->wrap);
    snprintf(r->label, sizeof r->label, "%s, wrap %s, reshard_after_forward=%d, prefetch=%d", model,
             r->wrap, cfg.reshard_after_forward, cfg.prefetch_forward);
    engine_model(&r->model, model);
    engine_data(r, model);
    Err err = {0};
    cr_assert_eq(fsdp_plan_create(&r->plan, &r->model, &r->cfg, ENGINE_RANKS, &err), 0, "%s",
                 err.msg);
    TrainJob job = {.model = &r->model,
                    .data = &r->data,
                    .plan = &r->plan,
                    .cfg = &r->cfg,
                    .steps = 1,
                    .log_every = 0, /* no loss all-reduce: only the schedule's collectives */
                    .memory = r->memory};
    ClusterOptions opt = {.ranks = ENGINE_RANKS,
                          .profile = profile_default(),
                          .trace = 1,
                          .accounting_only = strcmp(model, "toy") != 0};
    ClusterResult res;
    cr_assert_eq(cluster_run(&opt, train_rank, &job, &res, &err), 0, "the engine failed: %s",
                 err.msg);
    r->trace = res.trace;
}

static inline void engine_run_free(EngineRun *r) {
    trace_free(&r->trace);
    plan_free(&r->plan);
    model_desc_free(&r->model);
    dataset_free(&r->data);
}

static inline int engine_by_seq(const void *a, const void *b) {
    long x = ((const TraceEvent *)a)->seq, y = ((const TraceEvent *)b)->seq;
    return (x > y) - (x < y);
}

/* The events of rank `rank` in phase `phase` of the first step, in the order the rank's code
 * issued them (the merged trace orders them by modelled time instead). Caller frees. */
static inline TraceEvent *engine_issued(const EngineRun *r, int rank, Phase phase, size_t *n) {
    TraceEvent *ev = malloc((r->trace.n + 1) * sizeof *ev);
    cr_assert(ev);
    *n = 0;
    for (size_t i = 0; i < r->trace.n; i++) {
        const TraceEvent *e = &r->trace.ev[i];
        if (e->rank == rank && e->step == 0 && e->phase == (int)phase) ev[(*n)++] = *e;
    }
    qsort(ev, *n, sizeof *ev, engine_by_seq);
    return ev;
}

/* The schedule's steps, as lessons 05 and 06 name them. */
typedef enum {
    ENGINE_GATHER,      /* an all-gather is started: its wire buffers are allocated */
    ENGINE_WAIT_GATHER, /* the rank waits for it: the trace's all_gather event */
    ENGINE_FORWARD,     /* the unit's forward: its modules' forward events, one entry */
    ENGINE_BACKWARD,
    ENGINE_REDUCE,      /* a reduce-scatter is started: its wire buffers are allocated */
    ENGINE_WAIT_REDUCE, /* the rank waits for it: the trace's reduce_scatter event */
    ENGINE_FREE         /* the unit's gathered parameters are freed */
} EngineOp;

typedef struct EngineStep {
    EngineOp op;
    int unit;
} EngineStep;

static inline const char *engine_op_name(EngineOp op) {
    static const char *const names[] = {"gather", "wait-gather", "forward", "backward",
                                        "reduce", "wait-reduce", "free"};
    return op >= ENGINE_GATHER && op <= ENGINE_FREE ? names[op] : "?";
}

/* A collective allocates its two wire buffers back to back: an all-gather its send block
 * first (one rank's padded block), a reduce-scatter its send buffer first (every rank's
 * blocks). The first of the pair says which it is. */
static inline EngineOp engine_started(const EngineRun *r, const TraceEvent *e) {
    size_t block = r->plan.units[e->unit].wire_numel * sizeof(float); /* fp32 on the wire */
    if (e->bytes == block) return ENGINE_GATHER;
    cr_assert_eq(e->bytes, block * (size_t)r->plan.shard_size,
                 "unit %d's comm buffer of %llu bytes is neither an all-gather's nor a "
                 "reduce-scatter's: has the engine changed?",
                 e->unit, e->bytes);
    return ENGINE_REDUCE;
}

/* What rank `rank` did in `phase` (forward or backward) of the first step, as schedule
 * steps; a unit's consecutive forward (backward) events are one step. Returns the count. */
static inline int engine_steps(const EngineRun *r, int rank, Phase phase, EngineStep *out,
                               int max) {
    size_t n;
    TraceEvent *ev = engine_issued(r, rank, phase, &n);
    int count = 0, pair_open = 0;
    for (size_t i = 0; i < n; i++) {
        const TraceEvent *e = &ev[i];
        EngineStep s = {ENGINE_FREE, e->unit};
        if (e->kind == EV_ALLOC && e->category == MEM_COMM_BUFFER) {
            pair_open = !pair_open;
            if (!pair_open) continue; /* the second buffer of the pair */
            s.op = engine_started(r, e);
        } else if (e->kind == EV_ALL_GATHER) {
            s.op = ENGINE_WAIT_GATHER;
        } else if (e->kind == EV_REDUCE_SCATTER) {
            s.op = ENGINE_WAIT_REDUCE;
        } else if ((e->kind == EV_FORWARD || e->kind == EV_BACKWARD) && e->unit >= 0) {
            s.op = e->kind == EV_FORWARD ? ENGINE_FORWARD : ENGINE_BACKWARD;
            if (count > 0 && out[count - 1].op == s.op && out[count - 1].unit == s.unit)
                continue; /* the same entry's next module */
        } else if (!(e->kind == EV_FREE && e->category == MEM_PARAM_UNSHARDED)) {
            continue;
        }
        cr_assert_lt(count, max, "more schedule steps than the check expected");
        out[count++] = s;
    }
    free(ev);
    return count;
}

/* The units forward enters, in order (a unit whose modules are not adjacent, the ViT's root,
 * is entered twice), read from the forward events of rank 0. Returns the count. */
static inline int engine_entries(const EngineRun *r, int *entry_unit, int max) {
    EngineStep steps[ENGINE_MAX_STEPS];
    int n = engine_steps(r, 0, PHASE_FORWARD, steps, ENGINE_MAX_STEPS), count = 0;
    for (int i = 0; i < n; i++)
        if (steps[i].op == ENGINE_FORWARD) {
            cr_assert_lt(count, max);
            entry_unit[count++] = steps[i].unit;
        }
    return count;
}

/* Collectives of kind `kind` (EV_ALL_GATHER, ...) rank `rank` ran in the first step, in
 * every phase. */
static inline int engine_count(const EngineRun *r, int rank, EventKind kind) {
    int n = 0;
    for (size_t i = 0; i < r->trace.n; i++) {
        const TraceEvent *e = &r->trace.ev[i];
        n += e->rank == rank && e->step == 0 && e->kind == (int)kind;
    }
    return n;
}

/* The most bytes of category `cat` rank `rank` held during the first step, as the memory
 * timeline of `fsdp train --memory` replays the trace's allocations and frees. */
static inline size_t engine_peak(const EngineRun *r, int rank, MemCategory cat) {
    MemoryTimeline mt;
    Err err = {0};
    int rc = memory_timeline_build(&mt, &r->trace, 0, &err);
    size_t peak = rc ? 0 : mt.ranks[rank].max[cat];
    memory_timeline_free(&mt);
    cr_assert_eq(rc, 0, "%s", err.msg);
    return peak;
}

/* Lessons 07 and 08's known wrong peak: a learner who counts the unit being prefetched as
 * gathered parameters beside the one computing (the toy: La's 12 B and Lb's 12 B, 24 B). The
 * engine books a prefetched all-gather in its receive buffer, a comm buffer, until the GPU
 * waits for it; only then are its parameters unsharded params. `bytes[u]`, `is_root[u]`: the
 * plan's units in the order forward first uses them. The misconception in words when `got` is
 * the root plus two neighbouring units, or plus twice the largest; else NULL. */
static inline const char *engine_prefetch_counted(size_t want, size_t got, const size_t *bytes,
                                                  const int *is_root, int n) {
    size_t root = 0, largest = 0, pair = 0, next = 0;
    for (int u = 0; u < n; u++) {
        if (is_root[u]) {
            root += bytes[u];
            continue;
        }
        largest = bytes[u] > largest ? bytes[u] : largest;
        for (int v = u + 1; v < n; v++) /* the next unit forward gathers that is not the root */
            if (!is_root[v]) {
                if (bytes[u] + bytes[v] > pair) pair = bytes[u] + bytes[v], next = bytes[v];
                break;
            }
    }
    if (got == want || !pair || (got != root + pair && got != root + 2 * largest)) return NULL;
    return lesson_fmt("You counted the prefetched unit (%zu B) as gathered parameters: until the "
                      "GPU waits for a prefetched all-gather, its bytes are in the all-gather's "
                      "receive buffer, which the engine books as comm buffers, not unsharded "
                      "params. Prefetch does cost memory, one receive buffer per all-gather in "
                      "flight: the comm buffers row of --memory.",
                      got == root + pair ? next : largest);
}

/* The unit's name in the plan ("La", "root", "encoder_layer_3"), or its number when it has
 * none. */
static inline const char *engine_unit_name(const EngineRun *r, int u) {
    return u >= 0 && u < r->plan.nunits ? r->plan.units[u].name : lesson_fmt("unit %d", u);
}

/* The plan's units of `n` entries, "La Lb Lc", cut short with "..." past a few hundred
 * characters. */
static inline const char *engine_entry_names(const EngineRun *r, const int *entry_unit, int n) {
    static char text[LESSON_TEXT_MAX / 2];
    const size_t room = sizeof text - 4; /* for " ..." */
    size_t at = 0;
    text[0] = 0;
    for (int i = 0; i < n; i++) {
        const char *name = engine_unit_name(r, entry_unit[i]);
        if (at + 1 + strlen(name) >= room) {
            strcpy(text + at, " ...");
            break;
        }
        at += (size_t)sprintf(text + at, "%s%s", i ? " " : "", name);
    }
    return text;
}

typedef char EngineStepText[160];

/* 0 when the engine's steps and the learner's, as "gather La", agree one by one; else 1, and
 * *expected and *got_text name the first step where they differ, counting from 1, with how
 * many steps each side has: the learner's function said `nsaid`, of which the first `ngot`
 * (those in range) are in got. The check frees its run before failing, so that nothing leaks
 * under SANITIZE=1. */
static inline int steps_differ(const EngineStepText *want, int nwant, const EngineStepText *got,
                               int ngot, int nsaid, const char **expected, const char **got_text,
                               int *at) {
    for (int i = 0; i < nwant || i < ngot || (i == ngot && nsaid != ngot); i++) {
        const char *w = i < nwant ? want[i] : "nothing";
        const char *g = i < ngot ? got[i] : "nothing";
        if (strcmp(w, g) != 0 || (i == ngot && nsaid != ngot)) {
            *expected = lesson_fmt("step %d of %d: %s", i + 1, nwant, w);
            *got_text = lesson_fmt("step %d of %d: %s", i + 1, nsaid, g);
            *at = i;
            return 1;
        }
    }
    return 0;
}

/* Rank `rank`'s steps in `phase` as text. Returns the count. */
static inline int engine_step_texts(const EngineRun *r, int rank, Phase phase,
                                    EngineStepText *out) {
    EngineStep steps[ENGINE_MAX_STEPS];
    int n = engine_steps(r, rank, phase, steps, ENGINE_MAX_STEPS);
    for (int i = 0; i < n; i++)
        snprintf(out[i], sizeof out[i], "%s %s", engine_op_name(steps[i].op),
                 engine_unit_name(r, steps[i].unit));
    return n;
}

/* What lessons 05 and 06 give the learner's schedule function (each copies it into its own
 * Setup): the units forward enters in order, which unit is the root, and the config's
 * reshard_after_forward and prefetch. */
typedef struct EngineSchedule {
    int nentries, entry_unit[64];
    int nunits, is_root[64];
    int reshard_after_forward, prefetch;
} EngineSchedule;

/* Runs a lesson's schedule function on the run's schedule: writes the steps it returned as
 * text ("gather La"; the first ENGINE_MAX_STEPS at most) to got, and returns how many it said. */
typedef int (*EngineLearnerSteps)(const EngineRun *r, const EngineSchedule *s, EngineStepText *got);

/* The misconception behind the first step where the learner's list differs, `want` and `got`
 * being the two steps as text ("free root"; "nothing" past an end); NULL when it is no known
 * one. */
typedef const char *(*EngineStepWhy)(const EngineRun *r, const EngineSchedule *s, const char *want,
                                     const char *got);

/* Whether step text `step` is `op` of the run's root unit: "free root". */
static inline int engine_step_on_root(const EngineRun *r, const char *step, const char *op) {
    for (int u = 0; u < r->plan.nunits; u++) {
        char text[sizeof(EngineStepText)];
        if (!r->plan.units[u].is_root) continue;
        snprintf(text, sizeof text, "%s %s", op, r->plan.units[u].name);
        if (!strcmp(step, text)) return 1;
    }
    return 0;
}

/* The learner's steps of `phase` in one step of `model` under cfg, against every rank's:
 * fails with `hint` at the first step where they differ, and with why's words when it knows
 * the mistake (`why` may be NULL). */
static inline void engine_expect_steps(int hint, const char *model, FsdpConfig cfg, Phase phase,
                                       EngineLearnerSteps learner, EngineStepWhy why) {
    EngineRun r;
    engine_run(&r, model, cfg);
    EngineSchedule s = {.nunits = r.plan.nunits,
                        .reshard_after_forward = cfg.reshard_after_forward,
                        .prefetch = cfg.prefetch_forward};
    s.nentries = engine_entries(&r, s.entry_unit, 64);
    cr_assert_leq(s.nunits, 64);
    for (int u = 0; u < s.nunits; u++) s.is_root[u] = r.plan.units[u].is_root;
    EngineStepText got[ENGINE_MAX_STEPS], want[ENGINE_MAX_STEPS];
    int said = learner(&r, &s, got);
    int n = said < 0 ? 0 : said > ENGINE_MAX_STEPS ? ENGINE_MAX_STEPS : said;
    const char *expected = NULL, *differs = NULL, *words = NULL;
    char because[LESSON_TEXT_MAX] = "";
    for (int rank = 0; rank < ENGINE_RANKS && !expected; rank++) {
        int nwant = engine_step_texts(&r, rank, phase, want), at;
        if (steps_differ(want, nwant, got, n, said, &expected, &differs, &at) && why &&
            (words = why(&r, &s, at < nwant ? want[at] : "nothing", at < n ? got[at] : "nothing")))
            snprintf(because, sizeof because, "%s", words);
    }
    engine_run_free(&r);
    if (expected) lesson_fail_why(hint, expected, differs, because[0] ? because : NULL);
}

#endif
