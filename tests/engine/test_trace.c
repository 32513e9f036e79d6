/* Trace buffers, the merged order, and the Chrome Trace Event JSON Perfetto opens. */
#include <cjson/cJSON.h>
#include <criterion/criterion.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "engine/device.h"
#include "engine/trace.h"
#include "io/trace_file.h"

static TraceEvent span(EventKind kind, double start, double end, int unit, int stream) {
    return (TraceEvent){
        .start = start, .end = end, .kind = kind, .unit = unit, .stream = stream, .category = -1};
}

static TraceEvent memory_event(EventKind kind, double at, unsigned long long bytes,
                               unsigned long long total) {
    return (TraceEvent){.start = at,
                        .end = at,
                        .kind = kind,
                        .bytes = bytes,
                        .mem_total = total,
                        .unit = 0,
                        .stream = STREAM_COMPUTE,
                        .category = MEM_PARAM_UNSHARDED};
}

Test(trace, append_grows_and_stamps_context) {
    TraceBuf b;
    tracebuf_init(&b, 2, 1);
    const int count = 1000; /* well past the initial capacity: several doublings */
    for (int i = 0; i < count; i++) {
        b.phase = i < 500 ? PHASE_FORWARD : PHASE_BACKWARD;
        b.step = i / 100;
        b.micro = i % 3;
        TraceEvent e = span(EV_FORWARD, i * 0.5, i * 0.5 + 0.25, i % 7, STREAM_COMPUTE);
        e.rank = 99; /* must be overwritten by the buffer's rank */
        e.seq = -5;  /* and the seq by the buffer's counter */
        cr_assert_eq(tracebuf_append(&b, e), 0);
    }
    cr_assert_eq(b.n, (size_t)count);
    cr_assert_geq(b.cap, b.n);
    cr_assert_eq(b.next_seq, count);
    for (int i = 0; i < count; i++) {
        const TraceEvent *e = &b.ev[i];
        cr_assert_eq(e->seq, i);
        cr_assert_eq(e->rank, 2);
        cr_assert_eq(e->phase, i < 500 ? PHASE_FORWARD : PHASE_BACKWARD);
        cr_assert_eq(e->step, i / 100);
        cr_assert_eq(e->micro, i % 3);
        cr_assert_eq(e->unit, i % 7);
        cr_assert_float_eq(e->start, i * 0.5, 1e-12);
        cr_assert_float_eq(e->end, i * 0.5 + 0.25, 1e-12);
    }
    tracebuf_free(&b);
    cr_assert_null(b.ev);
    cr_assert_eq(b.n, 0);
}

/* A compute call frees its inputs before its span is recorded: held frees come after the span,
 * at its end, in the order they were freed; allocations are not held. */
Test(trace, held_frees_follow_the_compute_span) {
    TraceBuf b;
    tracebuf_init(&b, 0, 1);
    tracebuf_hold(&b);
    TraceEvent f = {.start = 1.0, .end = 1.0, .kind = EV_FREE, .bytes = 32, .category = 5};
    TraceEvent a = {.start = 1.0, .end = 1.0, .kind = EV_ALLOC, .bytes = 8, .category = 5};
    cr_assert_eq(tracebuf_append(&b, f), 0);
    f.bytes = 16;
    cr_assert_eq(tracebuf_append(&b, f), 0);
    cr_assert_eq(tracebuf_append(&b, a), 0);
    cr_assert_eq(b.n, 1, "the allocation goes in at once, the frees wait");
    cr_assert_eq(tracebuf_append(&b, span(EV_BACKWARD, 1.0, 1.5, 0, STREAM_COMPUTE)), 0);
    cr_assert_eq(tracebuf_release(&b), 0);
    cr_assert_eq(b.n, 4);
    cr_assert_eq(b.ev[1].kind, EV_BACKWARD);
    for (int i = 2; i < 4; i++) {
        cr_assert_eq(b.ev[i].kind, EV_FREE);
        cr_assert_float_eq(b.ev[i].start, 1.5, 1e-12, "at the span's end");
        cr_assert_gt(b.ev[i].seq, b.ev[1].seq);
    }
    cr_assert_eq(b.ev[2].bytes, 32, "in the order they were freed");
    cr_assert_eq(b.ev[3].bytes, 16);
    cr_assert_eq(tracebuf_append(&b, f), 0);
    cr_assert_eq(b.n, 5, "released: frees go in at once again");
    tracebuf_free(&b);
}

Test(trace, disabled_buffer_stores_nothing) {
    TraceBuf b;
    tracebuf_init(&b, 1, 0);
    for (int i = 0; i < 10000; i++)
        cr_assert_eq(tracebuf_append(&b, span(EV_FORWARD, i, i, 0, 0)), 0);
    cr_assert_eq(b.n, 0);
    cr_assert_null(b.ev);
    cr_assert_eq(b.next_seq, 0);
    tracebuf_free(&b);
}

Test(trace, kind_and_phase_names) {
    const char *kinds[] = {"alloc",      "free",      "all_gather", "reduce_scatter",
                           "all_reduce", "broadcast", "barrier",    "forward",
                           "backward",   "optimizer", "copy_h2d",   "copy_d2h",
                           "pack",       "recompute", "nvme_read",  "nvme_write"};
    cr_assert_eq(sizeof kinds / sizeof *kinds, (size_t)EV_KIND_COUNT);
    for (int k = 0; k < EV_KIND_COUNT; k++)
        cr_assert_str_eq(event_kind_name((EventKind)k), kinds[k]);
    cr_assert_str_eq(phase_name(PHASE_NONE), "none");
    cr_assert_str_eq(phase_name(PHASE_FORWARD), "forward");
    cr_assert_str_eq(phase_name(PHASE_BACKWARD), "backward");
    cr_assert_str_eq(phase_name(PHASE_OPTIMIZER), "optimizer");
    cr_assert_str_eq(event_kind_name(EV_KIND_COUNT), "unknown");
}

/* Appends events with the given start times to a fresh enabled buffer of `rank`. */
static void fill(TraceBuf *b, int rank, const double *starts, int n) {
    tracebuf_init(b, rank, 1);
    for (int i = 0; i < n; i++)
        cr_assert_eq(tracebuf_append(b, span(EV_FORWARD, starts[i], starts[i] + 1, i, 0)), 0);
}

Test(trace, merge_orders_by_start_seq_rank) {
    /* Interleaved times, out-of-order starts within a rank (overlapping streams) and ties
     * both across ranks and within one rank. */
    const double r0[] = {0.0, 1.0, 1.0, 3.0};
    const double r1[] = {1.0, 0.5, 1.0};
    const double r2[] = {1.0, 2.0, 0.0};
    TraceBuf bufs[3];
    fill(&bufs[0], 0, r0, 4);
    fill(&bufs[1], 1, r1, 3);
    fill(&bufs[2], 2, r2, 3);
    Trace t;
    Err err = {0};
    cr_assert_eq(trace_merge(&t, bufs, 3, &err), 0, "%s", err.msg);
    cr_assert_eq(t.nranks, 3);
    cr_assert_eq(t.n, (size_t)10);
    /* expected (start, rank, seq): at 1.0 the ranks take turns by seq */
    const struct {
        double start;
        int rank;
        long seq;
    } want[] = {{0.0, 0, 0}, {0.0, 2, 2}, {0.5, 1, 1}, {1.0, 1, 0}, {1.0, 2, 0},
                {1.0, 0, 1}, {1.0, 0, 2}, {1.0, 1, 2}, {2.0, 2, 1}, {3.0, 0, 3}};
    for (size_t i = 0; i < t.n; i++) {
        cr_assert_float_eq(t.ev[i].start, want[i].start, 1e-12, "event %zu", i);
        cr_assert_eq(t.ev[i].rank, want[i].rank, "event %zu", i);
        cr_assert_eq(t.ev[i].seq, want[i].seq, "event %zu", i);
        cr_assert_eq(t.ev[i].unit, (int)want[i].seq, "event %zu payload moved with it", i);
    }
    trace_free(&t);
    cr_assert_null(t.ev);
    for (int r = 0; r < 3; r++) tracebuf_free(&bufs[r]);
}

/* A step's figures: each kind's spans summed on the rank and step asked for only, the span from
 * the first event's start to the last one's end, memory events taking no time. */
Test(trace, step_times_sum_each_kind_of_one_rank_and_step) {
    TraceEvent ev[] = {
        span(EV_FORWARD, 1.0, 1.5, 0, STREAM_COMPUTE),   span(EV_ALL_GATHER, 0.75, 1.0, 0, 1),
        span(EV_FORWARD, 1.5, 2.25, 1, STREAM_COMPUTE),  span(EV_BACKWARD, 2.25, 4.0, 1, 0),
        span(EV_REDUCE_SCATTER, 3.0, 4.5, 1, 1),         memory_event(EV_ALLOC, 0.5, 8, 8),
        span(EV_FORWARD, 10.0, 17.0, 0, STREAM_COMPUTE), /* step 1 */
        span(EV_FORWARD, 1.0, 9.0, 0, STREAM_COMPUTE),   /* rank 1 */
    };
    enum { N = sizeof ev / sizeof *ev };
    for (int i = 0; i < N; i++) ev[i].step = i == 6;
    ev[7].rank = 1;
    Trace t = {.ev = ev, .n = N, .nranks = 2};
    StepTimes st;
    trace_step_times(&t, 0, 0, &st);
    cr_expect_eq(st.events, 6);
    cr_expect_eq(st.span, 4.0, "from the alloc at 0.5 to the reduce-scatter's end at 4.5: %g",
                 st.span);
    cr_expect_eq(st.busy[EV_FORWARD], 1.25);
    cr_expect_eq(st.busy[EV_BACKWARD], 1.75);
    cr_expect_eq(st.busy[EV_ALL_GATHER], 0.25);
    cr_expect_eq(st.busy[EV_REDUCE_SCATTER], 1.5);
    cr_expect_eq(st.busy[EV_ALLOC], 0.0);
    trace_step_times(&t, 0, 1, &st);
    cr_expect(st.events == 1 && st.span == 7.0 && st.busy[EV_FORWARD] == 7.0);
    trace_step_times(&t, 1, 0, &st);
    cr_expect(st.events == 1 && st.span == 8.0 && st.busy[EV_FORWARD] == 8.0);
    trace_step_times(&t, 1, 1, &st);
    cr_expect(st.events == 0 && st.span == 0.0);
    cr_expect_eq(trace_last_step(&t), 1);
    t.n = 0;
    cr_expect_eq(trace_last_step(&t), -1);
}

Test(trace, merge_of_empty_buffers) {
    TraceBuf bufs[2];
    tracebuf_init(&bufs[0], 0, 1);
    tracebuf_init(&bufs[1], 1, 0);
    Trace t;
    Err err = {0};
    cr_assert_eq(trace_merge(&t, bufs, 2, &err), 0);
    cr_assert_eq(t.n, 0);
    cr_assert_eq(t.nranks, 2);
    trace_free(&t);
    cr_assert_lt(trace_merge(&t, NULL, -1, &err), 0);
    cr_assert_eq(err.code, ERR_USAGE);
}

/* ---- Chrome JSON ---------------------------------------------------------------------- */

/* Writes t to a temporary file and returns its parsed JSON (asserting it parses). */
static cJSON *write_and_parse(const Trace *t, const char *const *names, int nunits) {
    FILE *f = tmpfile();
    cr_assert_not_null(f);
    Err err = {0};
    char *units[8];
    for (int u = 0; u < nunits && u < 8; u++) units[u] = (char *)names[u];
    TraceMeta meta = {.nunits = nunits, .units = units};
    cr_assert_eq(trace_file_write(t, names ? &meta : NULL, f, &err), 0, "%s", err.msg);
    long size = ftell(f);
    cr_assert_gt(size, 0);
    char *text = malloc((size_t)size + 1);
    cr_assert_not_null(text);
    rewind(f);
    cr_assert_eq(fread(text, 1, (size_t)size, f), (size_t)size);
    text[size] = '\0';
    fclose(f);
    cJSON *root = cJSON_Parse(text);
    cr_assert_not_null(root, "not JSON: %.200s", text);
    free(text);
    return root;
}

static int count_phase(const cJSON *events, const char *ph) {
    int n = 0;
    const cJSON *e;
    cJSON_ArrayForEach(e, events) {
        const cJSON *p = cJSON_GetObjectItemCaseSensitive(e, "ph");
        if (cJSON_IsString(p) && strcmp(p->valuestring, ph) == 0) n++;
    }
    return n;
}

/* The metadata event `meta` ("process_name"/"thread_name") for (pid, tid), or NULL. */
static const char *metadata_name(const cJSON *events, const char *meta, int pid, int tid) {
    const cJSON *e;
    cJSON_ArrayForEach(e, events) {
        const cJSON *name = cJSON_GetObjectItemCaseSensitive(e, "name");
        const cJSON *ph = cJSON_GetObjectItemCaseSensitive(e, "ph");
        if (!cJSON_IsString(ph) || strcmp(ph->valuestring, "M") != 0) continue;
        if (strcmp(name->valuestring, meta) != 0) continue;
        if (cJSON_GetObjectItemCaseSensitive(e, "pid")->valueint != pid) continue;
        if (tid >= 0 && cJSON_GetObjectItemCaseSensitive(e, "tid")->valueint != tid) continue;
        const cJSON *args = cJSON_GetObjectItemCaseSensitive(e, "args");
        return cJSON_GetObjectItemCaseSensitive(args, "name")->valuestring;
    }
    return NULL;
}

/* The i-th event with phase `ph` in file order. */
static const cJSON *nth_phase(const cJSON *events, const char *ph, int i) {
    const cJSON *e;
    cJSON_ArrayForEach(e, events) {
        const cJSON *p = cJSON_GetObjectItemCaseSensitive(e, "ph");
        if (cJSON_IsString(p) && strcmp(p->valuestring, ph) == 0 && i-- == 0) return e;
    }
    return NULL;
}

static double number(const cJSON *obj, const char *key) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(obj, key);
    cr_assert(cJSON_IsNumber(v), "missing number %s", key);
    return v->valuedouble;
}

static const char *string(const cJSON *obj, const char *key) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(obj, key);
    cr_assert(cJSON_IsString(v), "missing string %s", key);
    return v->valuestring;
}

/* Two ranks: a gather on comm, a forward on compute, an alloc and a free each. */
static void build_two_rank_trace(Trace *t) {
    TraceBuf bufs[2];
    for (int r = 0; r < 2; r++) {
        tracebuf_init(&bufs[r], r, 1);
        bufs[r].phase = PHASE_FORWARD;
        bufs[r].step = 3;
        TraceEvent gather = span(EV_ALL_GATHER, 0.0015 + r, 0.00275 + r, 0, STREAM_COMM);
        gather.bytes = 123456789ULL;
        cr_assert_eq(tracebuf_append(&bufs[r], memory_event(EV_ALLOC, 0.001 + r, 4096, 4096)), 0);
        cr_assert_eq(tracebuf_append(&bufs[r], gather), 0);
        cr_assert_eq(
            tracebuf_append(&bufs[r], span(EV_FORWARD, 0.003 + r, 0.0045 + r, 1, STREAM_COMPUTE)),
            0);
        cr_assert_eq(tracebuf_append(&bufs[r], memory_event(EV_FREE, 0.005 + r, 4096, 0)), 0);
    }
    Err err = {0};
    cr_assert_eq(trace_merge(t, bufs, 2, &err), 0, "%s", err.msg);
    for (int r = 0; r < 2; r++) tracebuf_free(&bufs[r]);
}

Test(trace, chrome_json_events_and_metadata) {
    Trace t;
    build_two_rank_trace(&t);
    const char *names[] = {"La", "Lb"};
    cJSON *root = write_and_parse(&t, names, 2);
    const cJSON *events = cJSON_GetObjectItemCaseSensitive(root, "traceEvents");
    cr_assert(cJSON_IsArray(events));
    cr_assert_str_eq(string(root, "displayTimeUnit"), "ms");
    cr_assert(cJSON_IsObject(cJSON_GetObjectItemCaseSensitive(root, "otherData")));
    cr_assert_eq(count_phase(events, "X"), 4);
    cr_assert_eq(count_phase(events, "C"), 4);

    for (int r = 0; r < 2; r++) {
        char want[16];
        snprintf(want, sizeof want, "GPU %d", r);
        const char *process = metadata_name(events, "process_name", r, -1);
        cr_assert_not_null(process);
        cr_assert_str_eq(process, want);
        const char *streams[] = {"compute", "comm", "copy"};
        for (int s = 0; s < 3; s++) {
            const char *thread = metadata_name(events, "thread_name", r, s);
            cr_assert_not_null(thread, "rank %d stream %d", r, s);
            cr_assert_str_eq(thread, streams[s]);
        }
    }

    /* Merged order: rank 0's gather, rank 0's forward, then rank 1's. */
    const cJSON *gather = nth_phase(events, "X", 0);
    cr_assert_str_eq(string(gather, "name"), "all_gather La");
    cr_assert_str_eq(string(gather, "cat"), "all_gather");
    cr_assert_eq(number(gather, "pid"), 0);
    cr_assert_eq(number(gather, "tid"), STREAM_COMM);
    cr_assert_float_eq(number(gather, "ts"), 1500.0, 1e-6);
    cr_assert_float_eq(number(gather, "dur"), 1250.0, 1e-6);
    const cJSON *args = cJSON_GetObjectItemCaseSensitive(gather, "args");
    cr_assert_eq(number(args, "unit"), 0);
    cr_assert_eq(number(args, "bytes"), 123456789.0);
    cr_assert_str_eq(string(args, "phase"), "forward");
    cr_assert_eq(number(args, "step"), 3);

    const cJSON *forward = nth_phase(events, "X", 1);
    cr_assert_str_eq(string(forward, "name"), "forward Lb");
    cr_assert_eq(number(forward, "tid"), STREAM_COMPUTE);
    cr_assert_float_eq(number(forward, "ts"), 3000.0, 1e-6);
    cr_assert_float_eq(number(forward, "dur"), 1500.0, 1e-6);

    const cJSON *late = nth_phase(events, "X", 2);
    cr_assert_eq(number(late, "pid"), 1);
    cr_assert_float_eq(number(late, "ts"), 1001500.0, 1e-6);
    cr_assert_float_eq(number(late, "dur"), 1250.0, 1e-3);

    const cJSON *alloc = nth_phase(events, "C", 0);
    cr_assert_str_eq(string(alloc, "name"), "memory");
    cr_assert_eq(number(alloc, "pid"), 0);
    cr_assert_float_eq(number(alloc, "ts"), 1000.0, 1e-6);
    /* one arg per memory category: the alloc's category holds its bytes, the rest nothing */
    const cJSON *alloc_args = cJSON_GetObjectItemCaseSensitive(alloc, "args");
    cr_assert_eq(cJSON_GetArraySize(alloc_args), MEM_CATEGORY_COUNT);
    for (int c = 0; c < MEM_CATEGORY_COUNT; c++)
        cr_assert_eq(number(alloc_args, mem_category_name((MemCategory)c)),
                     c == MEM_PARAM_UNSHARDED ? 4096 : 0, "%s", mem_category_name((MemCategory)c));
    const cJSON *freed = nth_phase(events, "C", 1);
    cr_assert_eq(number(cJSON_GetObjectItemCaseSensitive(freed, "args"), "param_unsharded"), 0);

    cJSON_Delete(root);
    trace_free(&t);
}

Test(trace, chrome_json_without_unit_names) {
    Trace t;
    build_two_rank_trace(&t);
    cJSON *root = write_and_parse(&t, NULL, 0);
    const cJSON *events = cJSON_GetObjectItemCaseSensitive(root, "traceEvents");
    cr_assert_str_eq(string(nth_phase(events, "X", 0), "name"), "all_gather");
    cr_assert_str_eq(string(nth_phase(events, "X", 1), "name"), "forward");
    cJSON_Delete(root);
    trace_free(&t);
}

Test(trace, chrome_json_escapes_unit_names) {
    TraceEvent e = span(EV_REDUCE_SCATTER, 0.0, 1e-6, 0, STREAM_COMM);
    Trace t = {.ev = &e, .n = 1, .nranks = 1};
    const char *tricky = "La\"b\\c\n\td\x01 é"; /* quote, backslash, controls, UTF-8 */
    const char *names[] = {tricky};
    cJSON *root = write_and_parse(&t, names, 1);
    const cJSON *events = cJSON_GetObjectItemCaseSensitive(root, "traceEvents");
    const cJSON *x = nth_phase(events, "X", 0);
    char want[64];
    snprintf(want, sizeof want, "reduce_scatter %s", tricky);
    cr_assert_str_eq(string(x, "name"), want);
    cr_assert_float_eq(number(x, "dur"), 1.0, 1e-9);
    cJSON_Delete(root);

    /* Bytes that are not UTF-8 still give valid JSON (replaced by U+FFFD). */
    const char *invalid[] = {"bad\xff\xc3"};
    root = write_and_parse(&t, invalid, 1);
    events = cJSON_GetObjectItemCaseSensitive(root, "traceEvents");
    cr_assert_str_eq(string(nth_phase(events, "X", 0), "name"),
                     "reduce_scatter bad\xef\xbf\xbd\xef\xbf\xbd");
    cJSON_Delete(root);
}

Test(trace, chrome_write_error_is_err_io) {
    Trace t;
    build_two_rank_trace(&t);
    FILE *f = fopen("/dev/full", "w");
    cr_assert_not_null(f);
    Err err = {0};
    int rc = trace_file_write(&t, NULL, f, &err);
    fclose(f);
    cr_assert_eq(rc, ERR_IO);
    cr_assert_eq(err.code, ERR_IO);
    cr_assert_neq(strstr(err.msg, "writing the trace failed"), NULL, "%s", err.msg);
    trace_free(&t);
}

Test(trace, chrome_refuses_non_finite_times) {
    TraceEvent e = span(EV_FORWARD, 0.0, NAN, 0, STREAM_COMPUTE);
    Trace t = {.ev = &e, .n = 1, .nranks = 1};
    FILE *f = tmpfile();
    cr_assert_not_null(f);
    Err err = {0};
    cr_assert_eq(trace_file_write(&t, NULL, f, &err), ERR_INTERNAL);
    cr_assert_eq(ftell(f), 0, "nothing written");
    fclose(f);
}

/* Counters that would not add up are refused before anything is written. */
Test(trace, chrome_refuses_memory_that_does_not_replay) {
    TraceEvent ev[2] = {memory_event(EV_ALLOC, 0.0, 100, 100), memory_event(EV_FREE, 1e-6, 200, 0)};
    Trace t = {.ev = ev, .n = 2, .nranks = 1};
    FILE *f = tmpfile();
    cr_assert_not_null(f);
    Err err = {0};
    cr_assert_eq(trace_file_write(&t, NULL, f, &err), ERR_INTERNAL);
    cr_expect_neq(strstr(err.msg, "frees 200 bytes of param_unsharded, which holds only 100"), NULL,
                  "%s", err.msg);
    ev[1] = memory_event(EV_FREE, 1e-6, 100, 0);
    ev[1].category = -1;
    cr_assert_eq(trace_file_write(&t, NULL, f, &err), ERR_INTERNAL);
    cr_expect_neq(strstr(err.msg, "has no memory category"), NULL, "%s", err.msg);
    cr_assert_eq(ftell(f), 0, "nothing written");
    fclose(f);
}
