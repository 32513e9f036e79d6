/* bench_viz: the visualizer's speed where it is heaviest: vit-workshop's plan at 8 ranks (13 units)
 * and a trace of 100,000 events. Targets: open < 1 s, frame < 5 ms. */
#include <stdio.h>
#include <stdlib.h>
#include <time.h>
#include <unistd.h>

#include "bench/bench_util.h"
#include "io/trace_file.h"
#include "models/vit.h"
#include "sim/viz/frame.h"
#include "sim/viz/html.h"
#include "sim/viz/plain.h"

/* A training step of that model is too big to simulate for a benchmark, so the trace is synthetic
 * but shaped like a real one: per rank and unit, an alloc of the gathered parameters, an
 * all-gather, a forward span, a backward span, a reduce-scatter and the frees, with times that
 * advance. Reports the time to open the trace (merge the ranks' buffers, size a frame, build the
 * first one) and to build and draw one text frame at random events (median of 200), and the time to
 * open the same trace from a file as `fsdp viz --trace` does (read and check the JSON, rebuild the
 * model and plan from the recorded flags, build the first frame). */

enum { RANKS = 8, EVENTS = 100000, SAMPLES = 200 };

static void append(TraceBuf *b, EventKind kind, int unit, int stream, int cat, double t0, double t1,
                   unsigned long long bytes) {
    TraceEvent e = {.start = t0,
                    .end = t1,
                    .kind = kind,
                    .unit = unit,
                    .stream = stream,
                    .category = cat,
                    .bytes = bytes};
    if (tracebuf_append(b, e)) {
        fprintf(stderr, "bench_viz: out of memory\n");
        exit(1);
    }
}

/* Each rank's events for one pass over every unit: 8 events a unit. */
static void one_pass(TraceBuf *b, const Plan *p, double *t) {
    for (int u = 0; u < p->nunits; u++) {
        unsigned long long bytes = p->units[u].numel * sizeof(float);
        b->phase = PHASE_FORWARD;
        append(b, EV_ALLOC, u, STREAM_COMPUTE, MEM_PARAM_UNSHARDED, *t, *t, bytes);
        append(b, EV_ALL_GATHER, u, STREAM_COMM, -1, *t, *t + 1e-3, bytes);
        append(b, EV_FORWARD, u, STREAM_COMPUTE, -1, *t + 1e-3, *t + 2e-3, 0);
        b->phase = PHASE_BACKWARD;
        append(b, EV_ALLOC, u, STREAM_COMPUTE, MEM_GRAD_UNSHARDED, *t + 2e-3, *t + 2e-3, bytes);
        append(b, EV_BACKWARD, u, STREAM_COMPUTE, -1, *t + 2e-3, *t + 4e-3, 0);
        append(b, EV_REDUCE_SCATTER, u, STREAM_COMM, -1, *t + 4e-3, *t + 5e-3, bytes);
        append(b, EV_FREE, u, STREAM_COMPUTE, MEM_GRAD_UNSHARDED, *t + 5e-3, *t + 5e-3, bytes);
        append(b, EV_FREE, u, STREAM_COMPUTE, MEM_PARAM_UNSHARDED, *t + 5e-3, *t + 5e-3, bytes);
        *t += 5e-3;
    }
}

static void die(const char *what, const Err *err) {
    fprintf(stderr, "bench_viz: %s: %s\n", what, err->msg);
    exit(1);
}

/* The trace as `train --trace-out` would write it for this plan. */
static void write_trace_file(const char *path, const Trace *t, const Plan *p, char **args,
                             int nargs) {
    char *units[64];
    for (int u = 0; u < p->nunits && u < 64; u++) units[u] = (char *)p->units[u].name;
    TraceMeta meta = {.nargs = nargs, .args = args, .nunits = p->nunits, .units = units};
    FILE *f = fopen(path, "w");
    Err err = {0};
    if (!f || trace_file_write(t, &meta, f, &err) || fclose(f)) die("writing the trace", &err);
}

/* What `fsdp viz --trace` does before the first frame: read the file, rebuild the model and
 * plan its flags name (here, as the flags say: vit-workshop at 8 ranks), build frame 0. */
static double open_from_file(const char *path) {
    double t0 = clock_seconds();
    Trace t;
    TraceMeta meta;
    Err err = {0};
    if (trace_file_read(path, &t, &meta, &err)) die("reading the trace", &err);
    VitConfig c;
    vit_preset(meta.args[1], &c);
    ModelDesc m;
    Plan p;
    Frame f;
    WrapPolicy wrap = {.kind = WRAP_LAYER};
    if (vit_model_create(&m, &c, &err) || plan_create(&p, &m, wrap, STRAT_ZERO3, RANKS, 1, &err) ||
        frame_init(&f, &p, &err) || frame_at(&f, &t, &p, 0, &err))
        die("opening the trace", &err);
    double s = clock_seconds() - t0;
    frame_free(&f);
    plan_free(&p);
    model_desc_free(&m);
    trace_free(&t);
    trace_meta_free(&meta);
    return s;
}

int main(void) {
    VitConfig c;
    vit_preset("vit-workshop", &c);
    ModelDesc m;
    Plan p;
    Err err = {0};
    WrapPolicy wrap = {.kind = WRAP_LAYER};
    if (vit_model_create(&m, &c, &err) || plan_create(&p, &m, wrap, STRAT_ZERO3, RANKS, 1, &err)) {
        fprintf(stderr, "bench_viz: %s\n", err.msg);
        return 1;
    }
    TraceBuf bufs[RANKS];
    int passes = EVENTS / (RANKS * 8 * p.nunits) + 1;
    for (int r = 0; r < RANKS; r++) {
        tracebuf_init(&bufs[r], r, 1);
        double t = 0.0;
        for (int k = 0; k < passes; k++) {
            bufs[r].step = k;
            one_pass(&bufs[r], &p, &t);
        }
    }
    double t0 = clock_seconds();
    Trace trace;
    Frame f;
    if (trace_merge(&trace, bufs, RANKS, &err) || frame_init(&f, &p, &err) ||
        frame_at(&f, &trace, &p, 0, &err)) {
        fprintf(stderr, "bench_viz: %s\n", err.msg);
        return 1;
    }
    double open_s = clock_seconds() - t0;
    FILE *sink = fopen("/dev/null", "w");
    double each[SAMPLES];
    for (int i = 0; i < SAMPLES; i++) {
        size_t index = (size_t)((unsigned long)(i * 2654435761u) % trace.n);
        double s0 = clock_seconds();
        if (frame_at(&f, &trace, &p, index, &err)) {
            fprintf(stderr, "bench_viz: %s\n", err.msg);
            return 1;
        }
        plain_render(sink, &f, &p);
        each[i] = clock_seconds() - s0;
    }
    qsort(each, SAMPLES, sizeof *each, cmp_double);
    char path[64], *args[] = {"--model", "vit-workshop", "--ranks", "8"};
    snprintf(path, sizeof path, "/tmp/bench_viz_%ld.json", (long)getpid());
    write_trace_file(path, &trace, &p, args, 4);
    double file_s[3];
    for (int i = 0; i < 3; i++) file_s[i] = open_from_file(path);
    qsort(file_s, 3, sizeof *file_s, cmp_double);
    FILE *sized = fopen(path, "r");
    long bytes = sized && !fseek(sized, 0, SEEK_END) ? ftell(sized) : -1;
    if (sized) fclose(sized);
    remove(path);
    printf("bench_viz: vit-workshop plan, %d ranks, %d units, %zu events: open %.1f ms (target "
           "< 1000), frame + text render median %.2f ms, max %.2f ms (target < 5)\n",
           RANKS, p.nunits, trace.n, open_s * 1e3, each[SAMPLES / 2] * 1e3,
           each[SAMPLES - 1] * 1e3);
    printf("bench_viz: the same trace from a %.1f MB file (viz --trace): open %.0f ms, median of "
           "3 (target < 1000)\n",
           (double)bytes / 1e6, file_s[1] * 1e3);
    /* the page of every event, alone and beside a DDP side of as many events (the same trace:
     * compare_match, compare_points and DDP's frames cost what a DDP run's would) */
    for (int side = 0; side < 2; side++) {
        HtmlPage opts = {
            .title = "bench", .ddp = side ? &trace : NULL, .ddp_plan = &p, .no_ddp = "none"};
        FILE *page = fopen(path, "w");
        double h0 = clock_seconds();
        clock_t cpu0 = clock(); /* the machine may be shared: its CPU seconds say more */
        if (!page || html_write(page, &trace, &p, &opts, &err)) die("writing the page", &err);
        double h_s = clock_seconds() - h0, cpu_s = (double)(clock() - cpu0) / CLOCKS_PER_SEC;
        long page_bytes = ftell(page);
        fclose(page);
        remove(path);
        printf("bench_viz: the page of all %zu events (viz --html)%s: %.1f s (%.1f s of CPU), "
               "%.1f MB\n",
               trace.n, side ? " beside DDP's" : "", h_s, cpu_s, (double)page_bytes / 1e6);
    }
    fclose(sink);
    frame_free(&f);
    trace_free(&trace);
    for (int r = 0; r < RANKS; r++) tracebuf_free(&bufs[r]);
    plan_free(&p);
    model_desc_free(&m);
    return 0;
}
