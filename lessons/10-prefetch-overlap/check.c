/* Lesson 10's check: the learner's busy, step, waiting and exposed-communication times, on
 * timelines made by hand and on traced steps of a 2-layer vit-tiny. */
#include <math.h>
#include <stdlib.h>

#include "exercise.h"
#include "jobs/train.h"
#include "lessons/tool/check.h"
#include "models/vit.h"
#include "sim/cluster.h"
#include "sim/planner.h"

/* The real timelines are every span of one GPU's training step of a 2-layer vit-tiny, traced on the
 * simulated cluster with prefetch 0 and 1 on 2 to 4 GPUs, and are compared with the figures the
 * engine's planner reads from the same job (sim/planner.c: the step's span, the compute and comm
 * streams' busy time, and `waiting`, what `fsdp plan` prints). Hand-made timelines are compared
 * with a sweep over their span boundaries done here. */

/* Times agree when they differ by less than a picosecond: the sums may be added in another
 * order than the engine's, which moves the last bits of a double, never a picosecond. */
static int same_seconds(double a, double b) {
    return fabs(a - b) <= 1e-12;
}

/* `why`, when not NULL, names the known mistake the learner's time is. */
static void expect_seconds_why(int hint, const char *name, double want, double got,
                               const char *why) {
    if (same_seconds(want, got)) return;
    lesson_fail_why(hint, lesson_fmt("%s=%.6f us", name, want * 1e6),
                    lesson_fmt("%s=%.6f us", name, got * 1e6), why);
}

static void expect_seconds(int hint, const char *name, double want, double got) {
    expect_seconds_why(hint, name, want, got, NULL);
}

/* The spans' lengths added up, whatever their streams. */
static double total_length(const Span *spans, int n) {
    double total = 0;
    for (int i = 0; i < n; i++) total += spans[i].end - spans[i].start;
    return total;
}

static const char *const STEP_SUMMED =
    "You added the spans' lengths: the streams run side by side, so the step runs from the "
    "first start to the last end.";
static const char *const ALL_COMM =
    "That is all of the comm stream's time: only what runs while compute does not is exposed; "
    "the rest is hidden behind compute.";

static const char *stream_name(int s) {
    return s == SPAN_COMPUTE ? "compute" : s == SPAN_COMM ? "comm" : "copy";
}

/* ---------------------------------------------------------------- timelines made by hand */

typedef struct Timeline {
    const char *what;
    Span spans[8];
    int n;
} Timeline;

#define US 1e-6
static const Timeline hand_made[] = {
    {"a collective under a kernel", {{0, 4 * US, SPAN_COMPUTE}, {1 * US, 3 * US, SPAN_COMM}}, 2},
    {"no prefetch: gather, compute, gather, compute",
     {{0, 2 * US, SPAN_COMM},
      {2 * US, 5 * US, SPAN_COMPUTE},
      {5 * US, 6 * US, SPAN_COMM},
      {6 * US, 8 * US, SPAN_COMPUTE}},
     4},
    {"a collective across the gap between two kernels",
     {{0, 2 * US, SPAN_COMPUTE}, {1 * US, 5 * US, SPAN_COMM}, {4 * US, 6 * US, SPAN_COMPUTE}},
     3},
    {"a collective, then a host copy, then a kernel",
     {{0, 3 * US, SPAN_COMM}, {3 * US, 5 * US, SPAN_COPY}, {5 * US, 6 * US, SPAN_COMPUTE}},
     3},
    {"10 us into the run: a kernel, a moment of nothing, a collective",
     {{10 * US, 11 * US, SPAN_COMPUTE}, {12 * US, 13 * US, SPAN_COMM}},
     2},
    {"nothing at all", {{0, 0, 0}}, 0},
};
#define HAND_MADE (int)(sizeof hand_made / sizeof hand_made[0])

static const char *describe(const Timeline *t) {
    char text[LESSON_TEXT_MAX] = "";
    size_t at = 0;
    for (int i = 0; i < t->n && at < sizeof text; i++)
        at += (size_t)snprintf(text + at, sizeof text - at, "%s%s %g-%g us", i ? ", " : "",
                               stream_name(t->spans[i].stream), t->spans[i].start / US,
                               t->spans[i].end / US);
    return lesson_fmt("%s: [%s]", t->what, text);
}

static int running(const Timeline *t, int stream, double at) {
    for (int i = 0; i < t->n; i++)
        if (t->spans[i].stream == stream && t->spans[i].start <= at && at < t->spans[i].end)
            return 1;
    return 0;
}

static int by_value(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

/* For sweep: any stream or none. */
#define ANY_OR_NONE (-1)
typedef enum { WHEN_RUNS, WHEN_COMPUTE_IDLE } When;

/* The time in which `stream` runs (WHEN_RUNS), or runs while compute does not
 * (WHEN_COMPUTE_IDLE; with ANY_OR_NONE: all the time compute does not run). Between two
 * consecutive span boundaries nothing starts or ends, so one look at the middle of each
 * piece says what runs in all of it. */
static double sweep(const Timeline *t, int stream, When when) {
    double edges[16];
    int k = 0;
    for (int i = 0; i < t->n; i++) {
        edges[k++] = t->spans[i].start;
        edges[k++] = t->spans[i].end;
    }
    qsort(edges, (size_t)k, sizeof edges[0], by_value);
    double total = 0;
    for (int j = 0; j + 1 < k; j++) {
        double mid = (edges[j] + edges[j + 1]) / 2;
        int counts;
        if (when == WHEN_RUNS)
            counts = running(t, stream, mid);
        else
            counts = !running(t, SPAN_COMPUTE, mid) &&
                     (stream == ANY_OR_NONE || running(t, stream, mid));
        if (counts) total += edges[j + 1] - edges[j];
    }
    return total;
}

/* Each test says when it ran to its end (check.h): the runner passes nothing less. */
LESSON_CHECK_SUITE(lesson10);

Test(lesson10, t1_busy_time) {
    for (int i = 0; i < HAND_MADE; i++)
        for (int s = SPAN_COMPUTE; s <= SPAN_COPY; s++) {
            lesson_try("stream_busy(%s, stream=%s)", describe(&hand_made[i]), stream_name(s));
            double got = stream_busy(hand_made[i].spans, hand_made[i].n, s);
            expect_seconds(1, "busy", sweep(&hand_made[i], s, WHEN_RUNS), got);
        }
}

Test(lesson10, t2_step_and_waiting) {
    for (int i = 0; i < HAND_MADE; i++) {
        const Timeline *t = &hand_made[i];
        double first = t->n ? t->spans[0].start : 0, last = first;
        for (int k = 0; k < t->n; k++) last = t->spans[k].end > last ? t->spans[k].end : last;
        lesson_try("step_time(%s)", describe(t));
        double step = step_time(t->spans, t->n);
        expect_seconds_why(2, "step", last - first, step,
                           same_seconds(step, total_length(t->spans, t->n)) ? STEP_SUMMED : NULL);
        lesson_try("compute_waiting(%s)", describe(t));
        expect_seconds(2, "waiting", sweep(t, ANY_OR_NONE, WHEN_COMPUTE_IDLE),
                       compute_waiting(t->spans, t->n));
    }
}

Test(lesson10, t3_exposed_comm) {
    for (int i = 0; i < HAND_MADE; i++) {
        lesson_try("exposed_comm(%s)", describe(&hand_made[i]));
        double got = exposed_comm(hand_made[i].spans, hand_made[i].n);
        expect_seconds_why(3, "exposed", sweep(&hand_made[i], SPAN_COMM, WHEN_COMPUTE_IDLE), got,
                           same_seconds(got, sweep(&hand_made[i], SPAN_COMM, WHEN_RUNS)) ? ALL_COMM
                                                                                         : NULL);
    }
}

/* ---------------------------------------------------------------- the engine's timelines */

#define STEPS 2 /* the planner's default: the second step is the one it reads */

typedef struct EngineStep {
    PlannerResult figures; /* the planner's, for the GPU it reports on (figures.top) */
    Span *spans;           /* that GPU's spans of the same step of the same job, traced */
    int n;
    char what[160];
} EngineStep;

/* The spans of `rank`'s step `step`: every event but allocations and frees, which take no
 * time on any stream (the events the planner reads). */
static void spans_of(EngineStep *s, const Trace *t, int rank, int step) {
    s->spans = calloc(t->n + 1, sizeof *s->spans);
    cr_assert(s->spans);
    s->n = 0;
    for (size_t i = 0; i < t->n; i++) {
        const TraceEvent *e = &t->ev[i];
        if (e->rank != rank || e->step != step || e->kind == EV_ALLOC || e->kind == EV_FREE)
            continue;
        s->spans[s->n++] = (Span){e->start, e->end, e->stream};
    }
}

/* vit-tiny with 2 layers, batch 8 a GPU, on `ranks` GPUs with this prefetch depth: the
 * planner's figures, and the same job traced on the simulated cluster. */
static void traced_engine_step(EngineStep *s, int ranks, int prefetch) {
    VitConfig c;
    ModelDesc m;
    Err err = {0};
    cr_assert_eq(vit_preset("vit-tiny", &c), 0);
    c.layers = 2;
    cr_assert_eq(vit_model_create(&m, &c, &err), 0, "%s", err.msg);
    FsdpConfig cfg;
    fsdp_config_defaults(&cfg);
    cfg.batch_size = 8;
    cfg.prefetch_forward = cfg.prefetch_backward = prefetch;
    Plan p;
    cr_assert_eq(fsdp_plan_create(&p, &m, &cfg, ranks, &err), 0, "%s", err.msg);
    PlannerJob job = {
        .model = &m, .plan = &p, .cfg = cfg, .profile = profile_default(), .steps = STEPS};
    cr_assert_eq(planner_run(&job, &s->figures, &err), 0, "%s", err.msg);

    Dataset data;
    cr_assert_eq(planner_blank_dataset(&data, &m, (long)ranks * cfg.batch_size, &err), 0, "%s",
                 err.msg);
    /* log_every 1: the loss all-reduce of every step, as the planner runs it */
    TrainJob train = {.model = &m,
                      .data = &data,
                      .plan = &p,
                      .cfg = &cfg,
                      .steps = STEPS,
                      .log_every = 1,
                      .no_sampler = 1};
    ClusterOptions opt = {
        .ranks = ranks, .profile = profile_default(), .trace = 1, .accounting_only = 1};
    ClusterResult res;
    cr_assert_eq(cluster_run(&opt, train_rank, &train, &res, &err), 0, "%s", err.msg);
    dataset_free(&data);
    /* The planner reads the trace of top's representative, the lowest rank with top's
     * figures; top is the lowest rank with the highest peak, so that is top itself. */
    spans_of(s, &res.trace, s->figures.top, STEPS - 1);
    snprintf(s->what, sizeof s->what,
             "GPU %d's %d spans of step %d, vit-tiny (2 layers) on %d GPUs, prefetch %d",
             s->figures.top, s->n, STEPS, ranks, prefetch);
    cluster_result_free(&res);
    plan_free(&p);
    model_desc_free(&m);
}

static void traced_step_free(EngineStep *s) {
    planner_result_free(&s->figures);
    free(s->spans);
}

static void expect_engine_figures(int ranks, int prefetch) {
    EngineStep s;
    traced_engine_step(&s, ranks, prefetch);
    const PlannerResult *f = &s.figures;
    lesson_try("stream_busy(%s, stream=compute)", s.what);
    expect_seconds(1, "busy", f->compute_time, stream_busy(s.spans, s.n, SPAN_COMPUTE));
    lesson_try("stream_busy(%s, stream=comm)", s.what);
    expect_seconds(1, "busy", f->comm_time, stream_busy(s.spans, s.n, SPAN_COMM));
    lesson_try("step_time(%s)", s.what);
    double step = step_time(s.spans, s.n);
    expect_seconds_why(2, "step", f->step_time, step,
                       same_seconds(step, total_length(s.spans, s.n)) ? STEP_SUMMED : NULL);
    lesson_try("compute_waiting(%s)", s.what);
    expect_seconds(2, "waiting", f->waiting, compute_waiting(s.spans, s.n));
    /* No host copies here, and the compute stream of the simulator only ever waits for a
     * collective: every moment compute waits, one runs. */
    lesson_try("exposed_comm(%s)", s.what);
    double exposed = exposed_comm(s.spans, s.n);
    expect_seconds_why(4, "exposed", f->waiting, exposed,
                       same_seconds(exposed, f->comm_time) ? ALL_COMM : NULL);
    traced_step_free(&s);
}

Test(lesson10, t4_the_engine_with_and_without_prefetch) {
    for (int ranks = 2; ranks <= 4; ranks++) {
        expect_engine_figures(ranks, 0);
        expect_engine_figures(ranks, 1);
    }
}
