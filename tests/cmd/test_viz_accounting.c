/* `fsdp viz --accounting-only` against the computed run of the same flags: the same events and
 * the same memory per category at every event (an invariant, whatever the figures are), frames
 * that say where values were not computed, the seed's model within this machine's memory, and
 * the flags that need values refused in one line. */
#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <unistd.h>

#include "io/trace_file.h"
#include "tests/util.h"

/* `viz FLAGS` (accounting-only or computed) with its trace written to path; one frame printed. */
static void record(const char *flags, int accounting_only, const char *path) {
    free(fsdp_ok("viz %s%s --events 1 --trace-out %s", flags,
                 accounting_only ? " --accounting-only" : "", path));
}

static void read_trace(const char *path, Trace *t) {
    TraceMeta meta;
    Err err = {0};
    cr_assert_eq(trace_file_read(path, t, &meta, &err), 0, "%s", err.msg);
    trace_meta_free(&meta);
}

/* Event i of the two runs: every field a frame is drawn from. */
static void expect_same_event(const TraceEvent *a, const TraceEvent *c, size_t i,
                              const char *flags) {
    cr_assert(a->kind == c->kind && a->unit == c->unit && a->rank == c->rank &&
                  a->bytes == c->bytes && a->category == c->category && a->stream == c->stream &&
                  a->phase == c->phase && a->step == c->step && a->micro == c->micro &&
                  a->flags == c->flags && a->mem_total == c->mem_total,
              "%s: event %zu differs: accounting-only %s of unit %d on rank %d (%llu B), "
              "computed %s of unit %d on rank %d (%llu B)",
              flags, i + 1, event_kind_name((EventKind)a->kind), a->unit, a->rank, a->bytes,
              event_kind_name((EventKind)c->kind), c->unit, c->rank, c->bytes);
    /* the modelled clock reads the same work, so the same times (the order follows them) */
    cr_assert(a->start == c->start && a->end == c->end, "%s: event %zu at %.9g-%.9g, not %.9g-%.9g",
              flags, i + 1, a->start, a->end, c->start, c->end);
}

/* The run of `flags` computed and accounting-only: the same event list, and each trace replayed
 * on its own gives every rank the same bytes of every category after every event. */
static void expect_same_run(const char *flags) {
    char computed[128], accounted[128];
    snprintf(computed, sizeof computed, "/tmp/fsdp_test_vizacc_c_%ld.json", (long)getpid());
    snprintf(accounted, sizeof accounted, "/tmp/fsdp_test_vizacc_a_%ld.json", (long)getpid());
    record(flags, 0, computed);
    record(flags, 1, accounted);
    Trace c, a;
    read_trace(computed, &c);
    read_trace(accounted, &a);
    cr_expect_eq(c.accounting_only, 0, "%s: the computed run's file says it computed", flags);
    cr_expect_eq(a.accounting_only, 1, "%s: the file says nothing was computed", flags);
    cr_expect_null(a.params, "%s: no values recorded", flags);
    cr_assert_eq(a.n, c.n, "%s: %zu events accounting-only, %zu computed", flags, a.n, c.n);
    cr_assert_eq(a.nranks, c.nranks);
    size_t row = MEM_CATEGORY_COUNT, cells = (size_t)c.nranks * row;
    size_t *mem_c = calloc(cells, sizeof *mem_c), *mem_a = calloc(cells, sizeof *mem_a);
    cr_assert(mem_c && mem_a);
    size_t seen[EV_KIND_COUNT] = {0};
    for (size_t i = 0; i < c.n; i++) {
        const TraceEvent *ec = &c.ev[i], *ea = &a.ev[i];
        expect_same_event(ea, ec, i, flags);
        seen[ec->kind]++;
        if (ec->kind != EV_ALLOC && ec->kind != EV_FREE) continue;
        Err err = {0};
        size_t *rc = mem_c + (size_t)ec->rank * row, *ra = mem_a + (size_t)ea->rank * row;
        cr_assert_eq(trace_memory_apply(rc, ec, i, ERR_USAGE, &err), 0, "%s", err.msg);
        cr_assert_eq(trace_memory_apply(ra, ea, i, ERR_USAGE, &err), 0, "%s", err.msg);
        for (int k = 0; k < MEM_CATEGORY_COUNT; k++)
            cr_assert_eq(ra[k], rc[k], "%s: after event %zu rank %d holds %zu B of %s, not %zu",
                         flags, i + 1, ec->rank, ra[k], mem_category_name((MemCategory)k), rc[k]);
    }
    /* the list was a whole step's: allocations, collectives and compute all compared */
    cr_expect(seen[EV_ALLOC] && seen[EV_FREE] && seen[EV_FORWARD] && seen[EV_BACKWARD] &&
                  seen[EV_OPTIMIZER] && (seen[EV_ALL_GATHER] || seen[EV_ALL_REDUCE]),
              "%s: a whole step", flags);
    free(mem_c);
    free(mem_a);
    trace_free(&c);
    trace_free(&a);
    remove(computed);
    remove(accounted);
}

Test(viz_accounting, the_toy_has_the_computed_runs_events_and_memory) {
    expect_same_run("--model toy --ranks 3 --strategy zero3");
    expect_same_run("--model toy --ranks 4 --strategy hsdp --replicas 2 --param-dtype bf16 "
                    "--steps 2");
    expect_same_run("--model toy --ranks 3 --strategy zero2 --offload cpu");
    expect_same_run("--model toy --ranks 2 --strategy ddp");
}

Test(viz_accounting, vit_tiny_has_the_computed_runs_events_and_memory) {
    expect_same_run("--model vit-tiny --ranks 4");
    expect_same_run("--model vit-tiny --ranks 2 --activation-checkpointing --strategy zero2");
}

/* The frames' text: a computed run's, with " | accounting only" in each header. vit-tiny shows
 * no values, so every line else is the same: narration, grid, memory, timeline. */
Test(viz_accounting, vit_tiny_frames_are_the_computed_frames) {
    char *c = fsdp_ok("viz --model vit-tiny --ranks 4 --strategy zero3");
    char *a = fsdp_ok("viz --model vit-tiny --ranks 4 --strategy zero3 --accounting-only");
    const char *tag = " | accounting only";
    size_t frames = 0, at = 0;
    for (char *p = a; (p = strstr(p, tag)); frames++) {
        memmove(p, p + strlen(tag), strlen(p + strlen(tag)) + 1);
        cr_assert_eq(strncmp(p, " --\n", 4), 0, "the tag ends the header: %.80s", p);
    }
    for (const char *p = c; (p = strstr(p, "\n-- event ")); p++) at++;
    cr_expect_eq(frames, at + 1, "every frame's header says accounting only");
    cr_expect(strcmp(a, c) == 0, "the accounting-only frames differ from the computed ones");
    free(a);
    free(c);
}

/* The toy's frames show its numbers only when they were computed: accounting-only, the symbols
 * alone, and the narration says why wherever a computed frame has a value. A replayed trace file
 * keeps that. */
Test(viz_accounting, toy_frames_say_values_are_not_computed) {
    char *all = fsdp_ok("viz --model toy --ranks 3 --strategy zero3 --accounting-only");
    cr_expect_null(strstr(all, "=+"), "no value in any frame");
    cr_expect_null(strstr(all, "=-"), "no value in any frame");
    free(all);
    char *adam = fsdp_ok("viz --model toy --ranks 3 --strategy zero3 --accounting-only --events "
                         "295");
    cr_expect_neq(strstr(adam, "-- event 295 of 339 | step 1 | optimizer | GPU 0 | optimizer La "
                               "| accounting only --\n"
                               "GPU 0 steps Adam on its a₀ of La with ∂a₀. No values: "
                               "--accounting-only computes nothing\n"),
                  NULL, "%s", adam);
    /* after the reduce-scatters, each GPU's gradient shard is shown, without its value */
    cr_expect_neq(strstr(adam, "  GPU 2  a₂ ∂a₂ "), NULL, "%s", adam);
    free(adam);
    char path[128];
    snprintf(path, sizeof path, "/tmp/fsdp_test_vizacc_toy_%ld.json", (long)getpid());
    char *gather =
        fsdp_ok("viz --model toy --ranks 3 --accounting-only --events 55 --trace-out %s", path);
    cr_expect_neq(strstr(gather, "has a₀, gathers a₁ from GPU 1 and a₂ from GPU 2 (DDP keeps all "
                                 "of La on every GPU and gathers nothing). No values: "
                                 "--accounting-only computes nothing\n"),
                  NULL, "%s", gather);
    char *replayed = fsdp_ok("viz --trace %s --events 55", path);
    cr_expect_str_eq(replayed, gather, "the replay of the file is the run's frame");
    free(replayed);
    free(gather);
    /* and its page is the run's, title included */
    char ran[160], again[160];
    snprintf(ran, sizeof ran, "%s.ran.html", path);
    snprintf(again, sizeof again, "%s.replayed.html", path);
    free(fsdp_ok("viz --model toy --ranks 3 --accounting-only --html %s", ran));
    free(fsdp_ok("viz --trace %s --html %s", path, again));
    char *a = read_text_file(ran, NULL), *b = read_text_file(again, NULL);
    cr_expect_neq(strstr(a, "<title>fsdp viz: toy, zero3, 3 ranks, accounting only</title>"), NULL,
                  "%.400s", a);
    cr_expect(strcmp(a, b) == 0, "the replayed page differs from the run's");
    free(a);
    free(b);
    remove(ran);
    remove(again);
    remove(path);
}

/* The seed's model, 779M parameters on 8 ranks, which a computed run cannot hold here (it grew
 * past 21.8 GB): accounting-only, its first 50 frames in well under 2 GiB of resident memory. */
Test(viz_accounting, the_seeds_model_at_8_ranks_fits_this_machine) {
    char *out = fsdp_ok("viz --model vit-workshop --ranks 8 --accounting-only --events 1-50");
    int frames = 0;
    for (const char *p = out; (p = strstr(p, "-- event ")); p++) frames++;
    cr_expect_eq(frames, 50, "%.300s", out);
    cr_expect_neq(strstr(out, "-- event 50 of "), NULL, "%.300s", out);
    free(out);
    struct rusage ru;
    cr_assert_eq(getrusage(RUSAGE_CHILDREN, &ru), 0);
    cr_expect(ru.ru_maxrss > 1024 && ru.ru_maxrss < 2L * 1024 * 1024,
              "peak resident %ld KiB (the run's, measured)", ru.ru_maxrss);
}

/* Flags that read, write or check values do not go with a run that holds none; --trace replays
 * a run whose file says whether it computed. */
Test(viz_accounting, flags_that_need_values_are_one_line_and_exit_2) {
    const UsageCase bad[] = {
        {"viz --accounting-only --trace run.json", "--trace replays one"},
        {"viz --accounting-only --dump-params /tmp/p.txt", "--dump-params writes parameter values"},
        {"viz --accounting-only --init-from w.safetensors", "--init-from loads parameter values"},
        {"viz --accounting-only --check-streams", "--accounting-only moves none"},
        {"viz --accounting-only --backend mpi", "runs on the simulator (--backend sim)"},
        {"train --accounting-only", "viz takes --accounting-only"},
    };
    expect_usage_errors(bad, sizeof bad / sizeof *bad);
}
