/* libFuzzer target (`make fuzz`): arbitrary bytes as a trace file, through the reader `fsdp viz
 * --trace` uses and, when they read as a trace of the toy's three units, through the frame
 * model and the plain renderer at its first, middle and last event. Every input must give a
 * clean one-line error or frames that draw and free cleanly. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

#include "engine/plan.h"
#include "io/trace_file.h"
#include "models/toy.h"
#include "sim/viz/frame.h"
#include "sim/viz/plain.h"

/* The frames of a trace the toy's plan at its world size can draw; errors are fine, crashes
 * and sanitizer reports are not. */
static void draw_some_frames(const Trace *t, const TraceMeta *m, FILE *sink) {
    static ModelDesc toy;
    static int made;
    Err err = {0};
    if (!made && toy_model_create(&toy, &err) == 0) made = 1;
    if (!made || m->nunits != 3 || t->nranks > 64 || t->n == 0) return;
    WrapPolicy wrap = {0};
    if (wrap_parse("layer", &wrap)) return;
    Plan p;
    if (plan_create(&p, &toy, wrap, STRAT_ZERO3, t->nranks, 1, &err)) return;
    Frame f;
    if (p.nunits == 3 && frame_init(&f, &p, &err) == 0) {
        size_t at[3] = {0, t->n / 2, t->n - 1};
        for (int i = 0; i < 3; i++)
            if (frame_at(&f, t, &p, at[i], &err) == 0) plain_render(sink, &f, &p);
        frame_free(&f);
    }
    plan_free(&p);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    char path[64];
    snprintf(path, sizeof path, "/tmp/fsdp-fuzz-trace-%ld.json", (long)getpid());
    FILE *f = fopen(path, "wb");
    if (!f) abort();
    if (size && fwrite(data, 1, size, f) != size) abort();
    fclose(f);
    static FILE *sink;
    if (!sink) sink = fopen("/dev/null", "w");
    Trace t;
    TraceMeta m;
    Err err = {0};
    if (trace_file_read(path, &t, &m, &err) == 0) draw_some_frames(&t, &m, sink);
    trace_free(&t);
    trace_meta_free(&m);
    unlink(path);
    return 0;
}
