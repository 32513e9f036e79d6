/* Memory over time: the Chrome trace's counters replay the run exactly, a step's timeline agrees
 * with the plan and the device's accounting, and the SVG and text timelines draw it. */
#include <cjson/cJSON.h>
#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <zlib.h>

#include "io/trace_file.h"
#include "sim/viz/memory_timeline.h"
#include "tests/util.h"

/* The SVG renders in a real renderer (rsvg-convert, Debian's librsvg2-bin), and the text timeline
 * of a trace built by hand is exactly the rows worked out by hand. */

/* ---- the Chrome trace's counters ---------------------------------------------------------- */

static cJSON *chrome_json(const Trace *t) {
    FILE *f = tmpfile();
    cr_assert_not_null(f);
    Err err = {0};
    cr_assert_eq(trace_file_write(t, NULL, f, &err), 0, "%s", err.msg);
    long size = ftell(f);
    char *text = malloc((size_t)size + 1);
    cr_assert_not_null(text);
    rewind(f);
    cr_assert_eq(fread(text, 1, (size_t)size, f), (size_t)size);
    text[size] = 0;
    fclose(f);
    cJSON *root = cJSON_Parse(text);
    cr_assert_not_null(root, "the trace is not JSON");
    free(text);
    return root;
}

static int is_counter(const cJSON *e) {
    const cJSON *ph = cJSON_GetObjectItemCaseSensitive(e, "ph");
    return cJSON_IsString(ph) && strcmp(ph->valuestring, "C") == 0;
}

/* Every "C" event, in file order, against the alloc/free events of the trace in order: its
 * rank and time, one arg per category equal to an independent replay, the args summing to the
 * event's mem_total. Returns how many categories were ever non-zero. */
static int check_counters(const Trace *t) {
    cJSON *root = chrome_json(t);
    const cJSON *events = cJSON_GetObjectItemCaseSensitive(root, "traceEvents");
    cr_assert(cJSON_IsArray(events));
    unsigned long long held[16][MEM_CATEGORY_COUNT] = {{0}};
    int ever[MEM_CATEGORY_COUNT] = {0};
    cr_assert_leq(t->nranks, 16);
    size_t next = 0, counters = 0;
    const cJSON *c;
    cJSON_ArrayForEach(c, events) {
        if (!is_counter(c)) continue;
        while (next < t->n && t->ev[next].kind != EV_ALLOC && t->ev[next].kind != EV_FREE) next++;
        cr_assert_lt(next, t->n, "more counter events than allocs and frees");
        const TraceEvent *e = &t->ev[next++];
        counters++;
        unsigned long long *row = held[e->rank];
        if (e->kind == EV_ALLOC)
            row[e->category] += e->bytes;
        else
            row[e->category] -= e->bytes;
        cr_assert_str_eq(cJSON_GetObjectItemCaseSensitive(c, "name")->valuestring, "memory");
        cr_assert_eq(cJSON_GetObjectItemCaseSensitive(c, "pid")->valueint, e->rank);
        cr_assert_float_eq(cJSON_GetObjectItemCaseSensitive(c, "ts")->valuedouble, e->start * 1e6,
                           1e-3);
        const cJSON *args = cJSON_GetObjectItemCaseSensitive(c, "args");
        cr_assert_eq(cJSON_GetArraySize(args), MEM_CATEGORY_COUNT);
        double sum = 0;
        for (int k = 0; k < MEM_CATEGORY_COUNT; k++) {
            const char *name = mem_category_name((MemCategory)k);
            const cJSON *v = cJSON_GetObjectItemCaseSensitive(args, name);
            cr_assert(cJSON_IsNumber(v), "counter %zu has no %s", counters, name);
            cr_assert_eq(v->valuedouble, (double)row[k],
                         "counter %zu (GPU %d) %s: %.0f, replay %llu", counters, e->rank, name,
                         v->valuedouble, row[k]);
            sum += v->valuedouble;
            ever[k] |= row[k] != 0;
        }
        cr_assert_eq(sum, (double)e->mem_total, "counter %zu (GPU %d) sums to %.0f, not %llu",
                     counters, e->rank, sum, e->mem_total);
    }
    while (next < t->n && t->ev[next].kind != EV_ALLOC && t->ev[next].kind != EV_FREE) next++;
    cr_assert_eq(next, t->n, "an alloc or free without its counter");
    cr_assert_gt(counters, 50);
    cJSON_Delete(root);
    int n = 0;
    for (int k = 0; k < MEM_CATEGORY_COUNT; k++) n += ever[k];
    return n;
}

Test(memory_timeline, chrome_counters_replay_every_category) {
    ToyRun run;
    FsdpConfig c = toy_config(STRAT_ZERO3, 4);
    toy_train(&run, &c, 3, 2, 1);
    /* shards, gathered params, both kinds of grads, Adam, activations, comm buffers */
    cr_expect_geq(check_counters(&run.trace), 6);
    toy_run_free(&run);

    FsdpConfig off = toy_config(STRAT_ZERO3, 4);
    off.offload = OFFLOAD_CPU;
    toy_train(&run, &off, 3, 2, 1);
    cr_expect_geq(check_counters(&run.trace), 5);
    toy_run_free(&run);
}

/* The memory timeline of `step` of trace t (-1: the last), asserted to build. */
static void timeline_of(MemoryTimeline *mt, const Trace *t, int step) {
    Err err = {0};
    cr_assert_eq(memory_timeline_build(mt, t, step, &err), 0, "%s", err.msg);
}

/* ---- the model of a real run -------------------------------------------------------------- */

static void check_step_of_run(FsdpConfig c) {
    ToyRun run;
    toy_train(&run, &c, 3, 1, 1);
    MemoryTimeline mt;
    timeline_of(&mt, &run.trace, -1);
    cr_assert_eq(mt.step, 0, "the last (only) step");
    cr_assert_eq(mt.nranks, 3);
    cr_assert_gt(mt.end, mt.start);
    for (int r = 0; r < 3; r++) {
        const MemoryRank *m = &mt.ranks[r];
        cr_assert_gt(m->n, 10, "GPU %d allocates and frees in the step", r);
        /* it enters the step holding its shards at rest, as the plan says */
        RestBytes want = plan_rest_bytes(&run.plan, r, c.offload);
        const MemorySample *first = &m->samples[0];
        cr_expect_eq(first->time, mt.start);
        cr_expect_eq(first->bytes[MEM_PARAM_SHARD], want.param, "GPU %d", r);
        cr_expect_eq(first->bytes[MEM_HOST_OFFLOAD] > 0, want.host > 0, "GPU %d", r);
        /* nothing gathered or unreduced survives the last step (the batch it is about to
         * train on was loaded before, as activations) */
        const MemCategory transient[] = {MEM_PARAM_UNSHARDED, MEM_GRAD_UNSHARDED, MEM_COMM_BUFFER};
        for (int k = 0; k < 3; k++)
            cr_expect_eq(first->bytes[transient[k]], 0, "GPU %d enters with %s", r,
                         mem_category_name(transient[k]));
        /* and leaves it as the device says it rests after the step */
        const MemorySample *last = &m->samples[m->n - 1];
        for (int k = 0; k < MEM_CATEGORY_COUNT; k++)
            cr_expect_eq(last->bytes[k], run.memory[r].rest[k], "GPU %d leaves with %s", r,
                         mem_category_name((MemCategory)k));
        /* the peak is the device's accounted GPU peak (one step: nothing before it peaks
         * higher), what offload keeps on the host apart, as the memory table shows it */
        cr_expect_eq(m->peak, run.memory[r].on_gpu.peak, "GPU %d peak %zu, device %zu", r, m->peak,
                     run.memory[r].on_gpu.peak);
        for (int k = 0; k < MEM_CATEGORY_COUNT; k++) {
            cr_expect_eq(m->at_peak[k], run.memory[r].on_gpu.at_peak[k], "GPU %d %s at the peak", r,
                         mem_category_name((MemCategory)k));
            cr_expect_geq(m->max[k], m->at_peak[k]);
        }
        cr_expect(m->peak_time >= mt.start && m->peak_time <= mt.end);
        /* the GPU's own peak and the host's are each the largest of their bytes in the step,
         * whenever the other peaked: the memory table shows them apart */
        size_t gpu_peak = 0, host_peak = 0;
        for (size_t i = 0; i < m->n; i++) {
            size_t gpu = 0, host = 0;
            for (int k = 0; k < MEM_CATEGORY_COUNT; k++) {
                if (mem_category_on_gpu((MemCategory)k)) gpu += m->samples[i].bytes[k];
                if (mem_category_off_gpu((MemCategory)k)) host += m->samples[i].bytes[k];
            }
            if (gpu > gpu_peak) gpu_peak = gpu;
            if (host > host_peak) host_peak = host;
        }
        cr_expect_eq(run.memory[r].on_gpu.peak, gpu_peak, "GPU %d: %zu, replayed %zu", r,
                     run.memory[r].on_gpu.peak, gpu_peak);
        cr_expect_eq(run.memory[r].off_gpu.peak, host_peak, "GPU %d host: %zu, replayed %zu", r,
                     run.memory[r].off_gpu.peak, host_peak);
        size_t sum = 0;
        for (int k = 0; k < MEM_CATEGORY_COUNT; k++)
            if (mem_category_on_gpu((MemCategory)k)) sum += run.memory[r].on_gpu.at_peak[k];
        cr_expect_eq(sum, gpu_peak, "GPU %d: the breakdown at the GPU's peak adds up", r);
        cr_expect_eq(host_peak > 0, c.offload != OFFLOAD_NONE, "GPU %d", r);
        /* samples are in time order and each one's total is the trace's mem_total */
        for (size_t i = 1; i < m->n; i++) cr_assert_geq(m->samples[i].time, m->samples[i - 1].time);
    }
    memory_timeline_free(&mt);
    toy_run_free(&run);
}

Test(memory_timeline, a_step_enters_at_the_plan_and_peaks_at_the_device_peak) {
    check_step_of_run(toy_config(STRAT_ZERO3, 4));
    FsdpConfig off = toy_config(STRAT_ZERO3, 4);
    off.offload = OFFLOAD_CPU;
    check_step_of_run(off);
    /* the NVMe tier's host buffers come and go unit by unit: the host peaks apart from the GPU */
    off.offload = OFFLOAD_NVME;
    off.nvme_dir = "/tmp";
    check_step_of_run(off);
}

/* Sample totals equal the mem_total the device traced, step by step of a longer run. */
Test(memory_timeline, samples_equal_the_traced_totals) {
    ToyRun run;
    FsdpConfig c = toy_config(STRAT_ZERO2, 4);
    toy_train(&run, &c, 3, 3, 1);
    for (int step = 0; step < 3; step++) {
        MemoryTimeline mt;
        timeline_of(&mt, &run.trace, step);
        cr_assert_eq(mt.step, step);
        size_t seen[3] = {0};
        for (size_t i = 0; i < run.trace.n; i++) {
            const TraceEvent *e = &run.trace.ev[i];
            if ((e->kind != EV_ALLOC && e->kind != EV_FREE) || e->step != step ||
                e->phase == PHASE_NONE)
                continue;
            const MemorySample *s = &mt.ranks[e->rank].samples[++seen[e->rank]];
            size_t total = 0;
            for (int k = 0; k < MEM_CATEGORY_COUNT; k++) total += s->bytes[k];
            cr_assert_eq(total, e->mem_total, "step %d event %zu", step, i);
            cr_assert_eq(s->time, e->start);
        }
        for (int r = 0; r < 3; r++) cr_assert_eq(mt.ranks[r].n, seen[r] + 1);
        memory_timeline_free(&mt);
    }
    MemoryTimeline mt;
    timeline_of(&mt, &run.trace, -1);
    cr_expect_eq(mt.step, 2, "-1 is the last step");
    memory_timeline_free(&mt);
    Err err = {0};
    cr_assert_eq(memory_timeline_build(&mt, &run.trace, 7, &err), ERR_USAGE);
    cr_expect_str_eq(err.msg, "the trace has no events of step 8 (counting from 1)");
    memory_timeline_free(&mt);
    cr_assert_eq(memory_timeline_build(&mt, &run.trace, -2, &err), ERR_USAGE);
    memory_timeline_free(&mt);
    toy_run_free(&run);
}

/* ---- a trace by hand ---------------------------------------------------------------------- */

static void put(TraceBuf *b, Phase phase, int step, EventKind kind, int cat, double us,
                unsigned long long bytes) {
    b->phase = phase;
    b->step = step;
    TraceEvent e = {.start = us * 1e-6,
                    .end = us * 1e-6,
                    .kind = kind,
                    .bytes = bytes,
                    .unit = 0,
                    .stream = STREAM_COMPUTE,
                    .category = cat};
    cr_assert_eq(tracebuf_append(b, e), 0);
}

/* Two ranks, one step from 0 to 8 us (rank 0's forward spans it). Times sit mid-column at
 * 8 columns of 1 us, so no column boundary depends on rounding.
 *   GPU 0: holds a 1 KiB shard; gathers 3 KiB at 1.5, keeps 2 KiB of activations at 2.5,
 *          frees the gathered copy at 3.5, gathers it again at 5.5 and frees both at 6.5;
 *          after the step (step 2's setup) it allocates more, which is not this step.
 *   GPU 1: holds a 2 KiB shard; a 512 B comm buffer comes and goes at 4.5; Adam's 4 KiB of
 *          state appear at 7.5. */
static void hand_trace(Trace *t, int nranks) {
    TraceBuf b[32];
    cr_assert_leq(nranks, 32);
    for (int r = 0; r < nranks; r++) tracebuf_init(&b[r], r, 1);
    put(&b[0], PHASE_NONE, 0, EV_ALLOC, MEM_PARAM_SHARD, 0, 1024);
    put(&b[0], PHASE_FORWARD, 0, EV_FORWARD, -1, 0, 0);
    b[0].ev[b[0].n - 1].end = 8e-6;
    put(&b[0], PHASE_FORWARD, 0, EV_ALLOC, MEM_PARAM_UNSHARDED, 1.5, 3072);
    put(&b[0], PHASE_FORWARD, 0, EV_ALLOC, MEM_ACTIVATIONS, 2.5, 2048);
    put(&b[0], PHASE_FORWARD, 0, EV_FREE, MEM_PARAM_UNSHARDED, 3.5, 3072);
    put(&b[0], PHASE_BACKWARD, 0, EV_ALLOC, MEM_PARAM_UNSHARDED, 5.5, 3072);
    put(&b[0], PHASE_BACKWARD, 0, EV_FREE, MEM_ACTIVATIONS, 6.5, 2048);
    put(&b[0], PHASE_BACKWARD, 0, EV_FREE, MEM_PARAM_UNSHARDED, 6.5, 3072);
    put(&b[0], PHASE_NONE, 1, EV_ALLOC, MEM_ACTIVATIONS, 9, 100);
    put(&b[1], PHASE_NONE, 0, EV_ALLOC, MEM_PARAM_SHARD, 0, 2048);
    put(&b[1], PHASE_FORWARD, 0, EV_ALLOC, MEM_COMM_BUFFER, 4.5, 512);
    put(&b[1], PHASE_FORWARD, 0, EV_FREE, MEM_COMM_BUFFER, 4.5, 512);
    put(&b[1], PHASE_OPTIMIZER, 0, EV_ALLOC, MEM_OPTIM_STATE, 7.5, 4096);
    for (int r = 2; r < nranks; r++) put(&b[r], PHASE_NONE, 0, EV_ALLOC, MEM_PARAM_SHARD, 0, 64);
    Err err = {0};
    cr_assert_eq(trace_merge(t, b, nranks, &err), 0, "%s", err.msg);
    for (int r = 0; r < nranks; r++) tracebuf_free(&b[r]);
}

static char *text_of(const MemoryTimeline *mt, int width) {
    char *buf = NULL;
    size_t n = 0;
    FILE *f = open_memstream(&buf, &n);
    cr_assert_not_null(f);
    Err err = {0};
    cr_assert_eq(memory_text_write(mt, width, f, &err), 0, "%s", err.msg);
    fclose(f);
    return buf;
}

/* Each column shows the most a row held at any moment of its 1 us, as ceil(8 * bytes / peak)
 * eighths of the GPU's peak (6 KiB on both): 1 KiB -> 2/8 ▂, 2 KiB -> 3/8 ▃ (2.67), 3 KiB ->
 * 4/8 ▄, 4 KiB -> 6/8 ▆ (5.33), 512 B -> 1/8 ▁ (0.67), 2.5 KiB -> 4/8 ▄ (3.33), 6 KiB -> █.
 * GPU 0's gathered copy is there in columns 1-3 (1.5 to 3.5) and 5-6 (5.5 to 6.5, the column
 * of its free), its activations in 2-6; GPU 1's comm buffer lives for no time at 4.5 and still
 * shows in column 4. */
Test(memory_timeline, text_rows_of_a_trace_by_hand) {
    Trace t;
    hand_trace(&t, 2);
    MemoryTimeline mt;
    timeline_of(&mt, &t, -1);
    cr_assert_eq(mt.step, 0);
    cr_assert_eq(mt.ranks[0].peak, 6144);
    cr_assert_float_eq(mt.ranks[0].peak_time, 2.5e-6, 1e-15, "the first time it peaks");
    cr_assert_eq(mt.ranks[1].peak, 6144);
    cr_assert_eq(mt.ranks[0].n, 7);
    cr_assert_eq(mt.ranks[1].n, 4);
    char *text = text_of(&mt, 8);
    const char *want =
        "memory over step 1: 8.00 µs modelled, 8 columns of 1.00 µs; bars scaled to each GPU's "
        "peak\n"
        "GPU 0  peak 6.00 KiB at 2.50 µs\n"
        "  param shard      ▂▂▂▂▂▂▂▂  1.00 KiB\n"
        "  unsharded params  ▄▄▄ ▄▄   3.00 KiB\n"
        "  activations        ▃▃▃▃▃   2.00 KiB\n"
        "  total            ▂▆██▄██▂  6.00 KiB\n"
        "GPU 1  peak 6.00 KiB at 7.50 µs\n"
        "  param shard      ▃▃▃▃▃▃▃▃  2.00 KiB\n"
        "  optim state             ▆  4.00 KiB\n"
        "  comm buffers         ▁     512 B\n"
        "  total            ▃▃▃▃▄▃▃█  6.00 KiB\n";
    cr_expect_str_eq(text, want);
    free(text);
    Err err = {0};
    cr_assert_eq(memory_text_write(&mt, 7, stdout, &err), ERR_USAGE);
    memory_timeline_free(&mt);
    trace_free(&t);
}

/* What offload keeps off the GPU is no part of a GPU's peak or total: its row comes after the
 * total, scaled to its own largest. GPU 0 rests 8 KiB on the host (more than it ever holds
 * itself), gathers 3 KiB at 1.5 us (until 3.5) and keeps 2 KiB of activations from 2.5 (until
 * 6.5): its peak is 5 KiB, 3 KiB -> ceil(4.8) ▅, 2 KiB -> ceil(3.2) ▄. */
Test(memory_timeline, text_keeps_what_offload_holds_off_the_gpu_after_the_total) {
    TraceBuf b;
    tracebuf_init(&b, 0, 1);
    put(&b, PHASE_NONE, 0, EV_ALLOC, MEM_HOST_OFFLOAD, 0, 8192);
    put(&b, PHASE_FORWARD, 0, EV_FORWARD, -1, 0, 0);
    b.ev[b.n - 1].end = 8e-6;
    put(&b, PHASE_FORWARD, 0, EV_ALLOC, MEM_PARAM_UNSHARDED, 1.5, 3072);
    put(&b, PHASE_FORWARD, 0, EV_ALLOC, MEM_ACTIVATIONS, 2.5, 2048);
    put(&b, PHASE_FORWARD, 0, EV_FREE, MEM_PARAM_UNSHARDED, 3.5, 3072);
    put(&b, PHASE_BACKWARD, 0, EV_FREE, MEM_ACTIVATIONS, 6.5, 2048);
    Trace t;
    Err err = {0};
    cr_assert_eq(trace_merge(&t, &b, 1, &err), 0, "%s", err.msg);
    tracebuf_free(&b);
    MemoryTimeline mt;
    timeline_of(&mt, &t, -1);
    cr_expect_eq(mt.ranks[0].peak, 5120, "the GPU's own");
    cr_expect_eq(mt.ranks[0].at_peak[MEM_HOST_OFFLOAD], 8192, "the breakdown keeps the host's");
    char *text = text_of(&mt, 8);
    const char *want =
        "memory over step 1: 8.00 µs modelled, 8 columns of 1.00 µs; bars scaled to each GPU's "
        "peak (what offload keeps off the GPU: to its own largest)\n"
        "GPU 0  peak 5.00 KiB at 2.50 µs\n"
        "  unsharded params  ▅▅▅      3.00 KiB\n"
        "  activations        ▄▄▄▄▄   2.00 KiB\n"
        "  total             ▅██▄▄▄   5.00 KiB\n"
        "  host (offload)   ████████  8.00 KiB\n";
    cr_expect_str_eq(text, want);
    free(text);
    memory_timeline_free(&mt);
    trace_free(&t);
}

Test(memory_timeline, bad_traces_are_one_clear_line) {
    Trace t;
    hand_trace(&t, 2);
    MemoryTimeline mt;
    Err err = {0};
    /* GPU 1's comm buffer freed twice over */
    for (size_t i = 0; i < t.n; i++)
        if (t.ev[i].kind == EV_FREE && t.ev[i].category == MEM_COMM_BUFFER) t.ev[i].bytes = 1024;
    cr_assert_eq(memory_timeline_build(&mt, &t, 0, &err), ERR_USAGE);
    cr_expect_neq(strstr(err.msg, "frees 1024 bytes of comm_buffer, which holds only 512"), NULL,
                  "%s", err.msg);
    memory_timeline_free(&mt);
    for (size_t i = 0; i < t.n; i++) t.ev[i].phase = PHASE_NONE;
    cr_assert_eq(memory_timeline_build(&mt, &t, -1, &err), ERR_USAGE);
    cr_expect_neq(strstr(err.msg, "no training step"), NULL, "%s", err.msg);
    memory_timeline_free(&mt);
    trace_free(&t);
}

/* ---- the SVG in a real renderer ----------------------------------------------------------- */

typedef struct Png {
    unsigned width, height;
    unsigned char *rgb; /* width * height * 3 */
} Png;

static unsigned be32(const unsigned char *p) {
    return (unsigned)p[0] << 24 | (unsigned)p[1] << 16 | (unsigned)p[2] << 8 | p[3];
}

static int paeth(int a, int b, int c) {
    int p = a + b - c, pa = abs(p - a), pb = abs(p - b), pc = abs(p - c);
    return pa <= pb && pa <= pc ? a : pb <= pc ? b : c;
}

/* Decodes an 8-bit RGB or RGBA, non-interlaced PNG (what rsvg-convert writes) to RGB. */
static void png_read(const char *path, Png *png) {
    FILE *f = fopen(path, "rb");
    cr_assert_not_null(f, "no PNG at %s", path);
    fseek(f, 0, SEEK_END);
    size_t n = (size_t)ftell(f);
    rewind(f);
    unsigned char *file = malloc(n);
    cr_assert_eq(fread(file, 1, n, f), n);
    fclose(f);
    cr_assert(n > 33 && memcmp(file, "\x89PNG\r\n\x1a\n", 8) == 0, "not a PNG");
    cr_assert_eq(memcmp(file + 12, "IHDR", 4), 0);
    png->width = be32(file + 16);
    png->height = be32(file + 20);
    int depth = file[24], colour = file[25], interlace = file[28];
    cr_assert(depth == 8 && (colour == 2 || colour == 6) && interlace == 0,
              "unexpected PNG format: depth %d colour type %d interlace %d", depth, colour,
              interlace);
    size_t bpp = colour == 6 ? 4 : 3, stride = png->width * bpp;
    unsigned char *idat = malloc(n);
    size_t idat_n = 0;
    for (size_t at = 8; at + 12 <= n;) {
        size_t len = be32(file + at);
        cr_assert_leq(at + 12 + len, n);
        if (memcmp(file + at + 4, "IDAT", 4) == 0) {
            memcpy(idat + idat_n, file + at + 8, len);
            idat_n += len;
        }
        at += 12 + len;
    }
    uLongf raw_n = (uLongf)(png->height * (1 + stride));
    unsigned char *raw = malloc(raw_n);
    cr_assert_eq(uncompress(raw, &raw_n, idat, idat_n), Z_OK);
    cr_assert_eq(raw_n, png->height * (1 + stride));
    unsigned char *px = calloc(png->height * stride, 1);
    for (size_t y = 0; y < png->height; y++) {
        const unsigned char *in = raw + y * (1 + stride) + 1;
        unsigned char *row = px + y * stride, *up = y ? row - stride : NULL;
        int filter = in[-1];
        for (size_t x = 0; x < stride; x++) {
            int a = x >= bpp ? row[x - bpp] : 0, b = up ? up[x] : 0;
            int c = up && x >= bpp ? up[x - bpp] : 0;
            int pred = filter == 0   ? 0
                       : filter == 1 ? a
                       : filter == 2 ? b
                       : filter == 3 ? (a + b) / 2
                                     : paeth(a, b, c);
            cr_assert_leq(filter, 4);
            row[x] = (unsigned char)(in[x] + pred);
        }
    }
    png->rgb = malloc(png->width * png->height * 3);
    for (size_t i = 0; i < (size_t)png->width * png->height; i++)
        memcpy(png->rgb + 3 * i, px + bpp * i, 3);
    free(px);
    free(raw);
    free(idat);
    free(file);
}

static size_t pixels_of(const Png *png, unsigned colour) {
    size_t n = 0;
    for (size_t i = 0; i < (size_t)png->width * png->height; i++) {
        const unsigned char *p = png->rgb + 3 * i;
        n += ((unsigned)p[0] << 16 | (unsigned)p[1] << 8 | p[2]) == colour;
    }
    return n;
}

static size_t count_of(const char *s, const char *what) {
    size_t n = 0;
    for (const char *at = s; (at = strstr(at, what)); at += strlen(what)) n++;
    return n;
}

/* Writes mt's SVG to a temporary file, renders it with rsvg-convert and decodes the PNG;
 * returns the SVG's text. A missing renderer fails: CI installs it. */
static char *render(const MemoryTimeline *mt, const MemorySvgOptions *o, const char *tag,
                    Png *png) {
    if (system("command -v rsvg-convert >/dev/null 2>&1") != 0)
        cr_assert_fail("rsvg-convert not found: install Debian's librsvg2-bin "
                       "(apt-get install librsvg2-bin; .ci/deps.sh lists it)");
    char svg[256], out[256], cmd[700];
    snprintf(svg, sizeof svg, "/tmp/fsdp_test_memory_%ld_%s.svg", (long)getpid(), tag);
    snprintf(out, sizeof out, "/tmp/fsdp_test_memory_%ld_%s.png", (long)getpid(), tag);
    FILE *f = fopen(svg, "w");
    cr_assert_not_null(f);
    Err err = {0};
    cr_assert_eq(memory_svg_write(mt, o, f, &err), 0, "%s", err.msg);
    fclose(f);
    unlink(out);
    snprintf(cmd, sizeof cmd, "rsvg-convert -o %s %s 2>&1", out, svg);
    cr_assert_eq(system(cmd), 0, "rsvg-convert refused %s", svg);
    png_read(out, png);
    char *text = read_text_file(svg, NULL);
    unlink(svg);
    unlink(out);
    return text;
}

/* The SVG's own size: the first width="..." and height="..." are the <svg> element's. */
static void svg_size(const char *text, unsigned *w, unsigned *h) {
    const char *at = strstr(text, "<svg ");
    cr_assert_not_null(at);
    cr_assert_eq(sscanf(strstr(at, "width=\"") + 7, "%u", w), 1);
    cr_assert_eq(sscanf(strstr(at, "height=\"") + 8, "%u", h), 1);
}

Test(memory_timeline, svg_of_a_run_renders_in_rsvg) {
    ToyRun run;
    FsdpConfig c = toy_config(STRAT_ZERO3, 4);
    toy_train(&run, &c, 3, 1, 1);
    MemoryTimeline mt;
    timeline_of(&mt, &run.trace, -1);
    /* DDP: full params, grads and two Adam moments */
    MemorySvgOptions o = {.title = "toy <zero3> & \"3 GPUs\" \x01 bad\xff",
                          .ddp_bytes = 4 * 9 * sizeof(float)};
    Png png;
    char *svg = render(&mt, &o, "run", &png);
    unsigned w, h;
    svg_size(svg, &w, &h);
    cr_expect_eq(png.width, w);
    cr_expect_eq(png.height, h);
    cr_expect_eq(w, 960);
    cr_expect_gt(h, 3 * 150, "three panels");
    cr_expect_neq(strstr(svg, "toy &lt;zero3&gt; &amp; &quot;3 GPUs&quot;   bad&#xFFFD;"), NULL,
                  "the title escaped");
    cr_expect_eq(count_of(svg, ">GPU "), 3);
    cr_expect_eq(count_of(svg, ">peak "), 3, "a peak label per GPU");
    cr_expect_eq(count_of(svg, ">DDP "), 1 + 3, "in the legend and by each GPU's line");
    cr_expect_eq(count_of(svg, "more GPUs"), 0);
    /* the stacked areas were drawn: the resting shard and what zero3 gathers and keeps */
    const unsigned shard = 0x4e79a7, gathered = 0xa0cbe8, activations = 0xe15759;
    cr_expect_gt(pixels_of(&png, shard), 1000, "param shard's blue");
    cr_expect_gt(pixels_of(&png, gathered), 1000, "unsharded params' light blue");
    cr_expect_gt(pixels_of(&png, activations), 100, "activations' red");
    cr_expect_lt(pixels_of(&png, 0xffffff), (size_t)w * h * 95 / 100, "not blank");
    free(svg);
    free(png.rgb);
    memory_timeline_free(&mt);
    toy_run_free(&run);
}

/* More ranks than panels: 16 drawn, the rest counted, in both renderers. */
Test(memory_timeline, past_sixteen_ranks_the_rest_are_counted) {
    Trace t;
    hand_trace(&t, 19);
    MemoryTimeline mt;
    timeline_of(&mt, &t, 0);
    cr_assert_eq(mt.nranks, 19);
    cr_assert_eq(mt.ranks[18].n, 1, "a rank with no events in the step holds what it had");
    cr_assert_eq(mt.ranks[18].samples[0].bytes[MEM_PARAM_SHARD], 64);
    Png png;
    char *svg = render(&mt, NULL, "many", &png);
    cr_expect_eq(count_of(svg, ">GPU "), 16);
    cr_expect_neq(strstr(svg, "+3 more GPUs not shown"), NULL);
    cr_expect_neq(strstr(svg, ">Memory over step 1<"), NULL, "the default title");
    cr_expect_eq(count_of(svg, ">DDP "), 0, "no DDP line without its bytes");
    unsigned w, h;
    svg_size(svg, &w, &h);
    cr_expect_eq(png.width, w);
    cr_expect_eq(png.height, h);
    cr_expect_gt(pixels_of(&png, 0x4e79a7), 1000);
    free(svg);
    free(png.rgb);
    char *text = text_of(&mt, 8);
    cr_expect_eq(count_of(text, "\nGPU "), 16);
    size_t len = strlen(text);
    cr_expect(len > 23 && strcmp(text + len - 23, "+3 more GPUs not shown\n") == 0, "%s", text);
    free(text);
    memory_timeline_free(&mt);
    trace_free(&t);
}
