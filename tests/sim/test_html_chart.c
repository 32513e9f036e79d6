/* The page's chart of a step (sim/viz/html_chart.c): its x axis is the step's time, its memory
 * bands are memory.svg's colours, its lanes are the streams' busy time, and its size does not
 * grow with the step's events. */
#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "sim/viz/html_chart.h"
#include "sim/viz/memory_timeline.h"

static void put(TraceBuf *b, Phase phase, EventKind kind, int stream, int cat, double us,
                double end_us, unsigned long long bytes) {
    b->phase = phase;
    b->step = 0;
    TraceEvent e = {.start = us * 1e-6,
                    .end = end_us * 1e-6,
                    .kind = kind,
                    .bytes = bytes,
                    .unit = 0,
                    .stream = stream,
                    .category = cat};
    cr_assert_eq(tracebuf_append(b, e), 0);
}

/* Two GPUs, one step from 0 to 8 us. GPU 0 computes all of it and keeps a shard, a gathered
 * copy from 2 to 4 us and `churn` activations allocated and freed in the second half; GPU 1
 * keeps a shard, gathers on the comm stream from 1 to 3 us and allocates Adam's state at 7 us. */
static void hand_trace(Trace *t, int churn) {
    TraceBuf b[2];
    for (int r = 0; r < 2; r++) tracebuf_init(&b[r], r, 1);
    put(&b[0], PHASE_NONE, EV_ALLOC, STREAM_COMPUTE, MEM_PARAM_SHARD, 0, 0, 1024);
    put(&b[0], PHASE_FORWARD, EV_FORWARD, STREAM_COMPUTE, -1, 0, 8, 0);
    put(&b[0], PHASE_FORWARD, EV_ALLOC, STREAM_COMPUTE, MEM_PARAM_UNSHARDED, 2, 2, 3072);
    put(&b[0], PHASE_FORWARD, EV_FREE, STREAM_COMPUTE, MEM_PARAM_UNSHARDED, 4, 4, 3072);
    for (int k = 0; k < churn; k++) {
        double at = 4 + 4.0 * k / churn;
        put(&b[0], PHASE_BACKWARD, EV_ALLOC, STREAM_COMPUTE, MEM_ACTIVATIONS, at, at, 256 + k % 7);
        put(&b[0], PHASE_BACKWARD, EV_FREE, STREAM_COMPUTE, MEM_ACTIVATIONS, at, at, 256 + k % 7);
    }
    put(&b[1], PHASE_NONE, EV_ALLOC, STREAM_COMPUTE, MEM_PARAM_SHARD, 0, 0, 2048);
    put(&b[1], PHASE_FORWARD, EV_ALL_GATHER, STREAM_COMM, -1, 1, 3, 3072);
    put(&b[1], PHASE_OPTIMIZER, EV_ALLOC, STREAM_COMPUTE, MEM_OPTIM_STATE, 7, 7, 4096);
    Err err = {0};
    cr_assert_eq(trace_merge(t, b, 2, &err), 0, "%s", err.msg);
    for (int r = 0; r < 2; r++) tracebuf_free(&b[r]);
}

static char *chart_of(const MemoryTimeline *mt, const Trace *t, size_t ddp, size_t *len) {
    char *buf = NULL;
    FILE *f = open_memstream(&buf, len);
    cr_assert_not_null(f);
    Err err = {0};
    cr_assert_eq(html_chart_write(f, mt, t, ddp, 7, &err), 0, "%s", err.msg);
    fclose(f);
    return buf;
}

static int count_of(const char *text, const char *what) {
    int n = 0;
    for (const char *at = text; (at = strstr(at, what)); at += strlen(what)) n++;
    return n;
}

static char *fill_of(MemCategory c) {
    static char fill[64];
    snprintf(fill, sizeof fill, "<polygon fill=\"%s\"", memory_category_colour(c));
    return fill;
}

Test(html_chart, the_step_in_memory_svgs_colours_and_the_streams_lanes) {
    Trace t;
    hand_trace(&t, 10);
    MemoryTimeline mt;
    Err err = {0};
    cr_assert_eq(memory_timeline_build(&mt, &t, 0, &err), 0, "%s", err.msg);
    /* the step's time spans the plot, 72 to 992; before and after it, its edges */
    cr_expect_float_eq(html_chart_x(&mt, 0), 72, 1e-9);
    cr_expect_float_eq(html_chart_x(&mt, 4e-6), 532, 1e-9);
    cr_expect_float_eq(html_chart_x(&mt, 8e-6), 992, 1e-9);
    cr_expect_float_eq(html_chart_x(&mt, -1), 72, 1e-9);
    cr_expect_float_eq(html_chart_x(&mt, 1), 992, 1e-9);
    size_t len;
    char *svg = chart_of(&mt, &t, 5000, &len);
    const char *head = "<svg id=\"chart7\" class=\"chart\" viewBox=\"0 0 1000 ";
    cr_expect(!strncmp(svg, head, strlen(head)), "%.60s", svg);
    cr_expect_eq(count_of(svg, "</svg>"), 1);
    cr_expect_eq(count_of(svg, ">GPU "), 2);
    /* a band per category a GPU holds, in memory.svg's colour (GPU 0: shard, gathered,
     * activations; GPU 1: shard, Adam's state), and each GPU's total outlined */
    cr_expect_eq(count_of(svg, fill_of(MEM_PARAM_SHARD)), 2);
    cr_expect_eq(count_of(svg, fill_of(MEM_PARAM_UNSHARDED)), 1);
    cr_expect_eq(count_of(svg, fill_of(MEM_ACTIVATIONS)), 1);
    cr_expect_eq(count_of(svg, fill_of(MEM_OPTIM_STATE)), 1);
    cr_expect_eq(count_of(svg, fill_of(MEM_COMM_BUFFER)), 0);
    cr_expect_eq(count_of(svg, "<polyline fill=\"none\""), 2);
    cr_expect_eq(count_of(svg, "stroke-dasharray"), 2, "DDP at rest in each panel");
    /* GPU 0 computes the whole step; GPU 1's all-gather is 1 to 3 us: columns 57 to 172 */
    cr_expect_neq(strstr(svg, "<rect x=\"72\" y=\"39.0\" width=\"920\" height=\"6\" "
                              "fill=\"#1f7a3a\"/>"),
                  NULL, "%s", svg);
    cr_expect_neq(strstr(svg, "width=\"232\" height=\"6\" fill=\"#2457c5\"/>"), NULL, "%s", svg);
    cr_expect_eq(count_of(svg, "fill=\"#2457c5\"/>"), 1, "one comm span");
    cr_expect_eq(count_of(svg, "fill=\"#c26a00\""), 0, "no copy lane without copies");
    /* the cursor the page moves, once, at the step's start */
    cr_expect_eq(count_of(svg, "<line class=\"now\" x1=\"72\""), 1);
    free(svg);
    memory_timeline_free(&mt);
    trace_free(&t);
}

/* The chart is drawn in columns: a step of 40,000 allocations and frees is no bigger than one of
 * 200 (within the few points where the bands change height). */
Test(html_chart, its_size_does_not_grow_with_the_events) {
    size_t lens[2];
    for (int k = 0; k < 2; k++) {
        Trace t;
        hand_trace(&t, k ? 20000 : 100);
        MemoryTimeline mt;
        Err err = {0};
        cr_assert_eq(memory_timeline_build(&mt, &t, 0, &err), 0, "%s", err.msg);
        free(chart_of(&mt, &t, 0, &lens[k]));
        memory_timeline_free(&mt);
        trace_free(&t);
    }
    cr_expect_lt(lens[1], lens[0] + lens[0] / 4, "%zu bytes for 40,000 events, %zu for 200",
                 lens[1], lens[0]);
    cr_expect_lt(lens[1], 20000u, "%zu bytes", lens[1]);
}
