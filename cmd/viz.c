/* viz (command): `fsdp viz`: records one step's trace on the simulated cluster (or reads one a
 * run wrote) and shows it event by event, in the full-screen viewer or as text frames, with
 * the same step under DDP beside it on request, or writes it as one HTML page. */
#include <errno.h>
#include <libgen.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "cmd/commands.h"
#include "cmd/run.h"
#include "io/trace_file.h"
#include "sim/viz/frame.h"
#include "sim/viz/html.h"
#include "sim/viz/moments.h"
#include "sim/viz/plain.h"
#include "sim/viz/text.h"
#include "sim/viz/tui.h"

typedef struct VizArgs {
    const char *trace;              /* --trace FILE: replay it instead of running */
    size_t first, last;             /* --events: 1-based; last 0: to the end */
    size_t frame_first, frame_last; /* --frames: the presenter's frames, 1-based, inclusive */
    int by_event;                   /* --by-event: the viewer steps event by event */
    int plain;                      /* text frames even on a terminal */
    const char *html;               /* --html FILE: write the page instead of showing frames */
    int times;           /* --times: where the last step's time went, instead of frames */
    const char *against; /* --against FILE: another trace's times beside them */
    int accounting_only; /* --accounting-only: the step's bytes and modelled times, no values */
    int seed_order;      /* --seed-order: the workshop seed's strict order (seed_order_apply) */
    char **rest;         /* train's flags */
    int nrest;
} VizArgs;

/* "A-B" or "A", 1-based and inclusive. */
static int parse_range(const char *flag, const char *v, size_t *a_out, size_t *b_out, Err *err) {
    char *end;
    unsigned long first = strtoul(v, &end, 10), last = first;
    if (end != v && *end == '-') {
        const char *rest = end + 1;
        last = strtoul(rest, &end, 10);
        if (end == rest) first = 0;
    }
    if (end == v || *end || first < 1 || last < first || v[0] == '-')
        return err_set(err, ERR_USAGE, "%s must be A-B or A with 1 <= A <= B (got '%s')", flag, v);
    *a_out = first;
    *b_out = last;
    return 0;
}

static int set_events(void *args, const char *flag, const char *v, Err *err) {
    VizArgs *a = args;
    return parse_range(flag, v, &a->first, &a->last, err);
}

static int set_frames(void *args, const char *flag, const char *v, Err *err) {
    VizArgs *a = args;
    return parse_range(flag, v, &a->frame_first, &a->frame_last, err);
}

/* viz's own flags; the others are train's, parsed by train's table. */
static const Flag viz_rows[] = {
    {"--events", FLAG_SET, .set = set_events, .arg = "A-B",
     .missing = "--events needs a value (A-B)",
     .help = "text frames of events A to B (1-based, inclusive); A for one"},
    {"--frames", FLAG_SET, .set = set_frames, .arg = "A-B",
     .missing = "--frames needs a value (A-B)",
     .help = "text frames of the presenter's frames A to B: one a collective or\n"
             "compute across all GPUs, the allocations and frees around it folded\n"
             "in (what the viewer steps by)"},
    {"--by-event", FLAG_SWITCH, offsetof(VizArgs, by_event),
     .help = "the viewer steps event by event (every allocation and free, each\n"
             "GPU's part of a collective) instead of by presenter's frames; key e\n"
             "switches between the two"},
    {"--html", FLAG_STRING, offsetof(VizArgs, html), .arg = "FILE",
     .missing = "--html needs a file",
     .help = "write the step as one self-contained HTML page instead of showing\n"
             "it: the presenter's frames and every event (the viewer's keys work\n"
             "in it), DDP's memory at the same point, the step over time"},
    {"--plain", FLAG_SWITCH, offsetof(VizArgs, plain),
     .help = "text frames even on a terminal (they are the default when stdout\n"
             "is not one)"},
    {"--times", FLAG_SWITCH, offsetof(VizArgs, times),
     .help = "where the last step's time went, per rank: the step's span and the\n"
             "seconds of each kind of work (forward, backward, optimizer, each\n"
             "collective, copies), instead of frames"},
    {"--against", FLAG_STRING, offsetof(VizArgs, against), .arg = "FILE",
     .missing = "--against needs a trace file",
     .help = "with --times: rank 0's figures beside those of FILE, another trace\n"
             "(a GPU run's measured times beside the simulator's modelled ones)"},
    {"--accounting-only", FLAG_SWITCH, offsetof(VizArgs, accounting_only),
     .help = "\n" /* the name is wider than the column: the text goes below it */
             "the same events, bytes and modelled times with no tensor held\n"
             "and nothing computed, so a model of any size fits this machine\n"
             "(vit-workshop at 8 ranks); the values a computed run shows (the\n"
             "toy's numbers) say they were not computed"},
    {"--seed-order", FLAG_SWITCH, offsetof(VizArgs, seed_order),
     .help = "the workshop seed's strict order: per unit all-gather, compute,\n"
             "free, and in backward its reduce-scatter before the free of its\n"
             "unsharded parameters and gradients. It sets --prefetch-forward 0\n"
             "--prefetch-backward 0 and frees a unit only after its reduction;\n"
             "without it the order is FSDP2's: one unit gathered ahead, and in\n"
             "backward the unit freed before its reduce-scatter runs"},
    {"--trace", FLAG_STRING, offsetof(VizArgs, trace), .arg = "FILE",
     .missing = "--trace needs a file",
     .help = "replay a trace that train --trace-out (or viz --trace-out) wrote,\n"
             "instead of running; the run's flags come from the file"},
};

static const FlagTable viz_table = FLAG_TABLE("viz", viz_rows, 18);

static void viz_help(FILE *f) {
    fputs("usage: ./fsdp viz [--frames A-B | --events A-B] [--plain] [--html FILE]\n"
          "                  [--by-event] [--accounting-only] [--seed-order] [train flags]\n"
          "       ./fsdp viz --trace FILE [--frames A-B | --events A-B] [--plain]\n"
          "                  [--html FILE]\n"
          "       ./fsdp viz --trace FILE --times [--against OTHER]\n"
          "\n"
          "Runs one training step (or --steps K) on the simulated cluster, records its trace and\n"
          "prints it event by event: who holds which shard, what is gathered and reduced, each\n"
          "rank's memory, and one sentence on what happens. Every train flag works (model,\n"
          "ranks, strategy, reshard, wrap, dtypes, offload, prefetch, profile). With\n"
          "--accounting-only nothing is held or computed, so the workshop's own model fits:\n"
          "./fsdp viz --model vit-workshop --ranks 8 --accounting-only\n"
          "\n",
          f);
    flags_help(&viz_table, f);
    fputs("\n"
          "On a terminal the full-screen viewer opens on the presenter's frames, one per\n"
          "collective or compute across all GPUs with the allocations and frees around it\n"
          "folded in: n/space/right next frame, p/left previous, c/C next/previous\n"
          "collective, k/K next/previous compute, f/b/o the first collective or compute of the\n"
          "step's forward/backward/optimizer phase, e every event (the same keys step event\n"
          "by event) and back, </> the grid's units, g go to a frame, or an event, d the same\n"
          "step under DDP beside it, r play/pause, +/- speed, h help, q quit. The grid\n"
          "follows the unit in play. NO_COLOR=1 turns colour off.\n"
          "\n"
          "examples: ./fsdp viz --model toy --ranks 3 --strategy zero3 --frames 2-4\n"
          "          ./fsdp viz --model toy --ranks 3 --strategy zero3 --events 19-23\n",
          f);
}

/* Takes viz's own flags out (as "--flag value", wherever they are) and leaves the rest, in
 * order, for train's parser; returns 1 for --help. */
static int viz_args_parse(VizArgs *v, int argc, char **argv, Err *err) {
    v->rest = malloc(((size_t)argc + 1) * sizeof *v->rest);
    if (!v->rest) return err_set(err, ERR_NOMEM, "out of memory");
    for (int i = 0; i < argc; i++) {
        if (!strcmp(argv[i], "--help") || !strcmp(argv[i], "-h")) return 1;
        const Flag *row = flag_find(&viz_table, argv[i]);
        int rc = 0;
        if (!row)
            v->rest[v->nrest++] = argv[i];
        else if (row->kind == FLAG_SWITCH)
            flag_set(row, v, NULL, err);
        else if (i + 1 >= argc)
            rc = flag_missing_value(&viz_table, row, argv[i], err);
        else
            rc = flag_set(row, v, argv[++i], err);
        if (rc) return rc;
    }
    if (v->trace && v->seed_order)
        return err_set(err, ERR_USAGE,
                       "--seed-order runs a step in the seed's order; --trace replays one, whose "
                       "order is in the file");
    if (v->trace && v->accounting_only)
        return err_set(err, ERR_USAGE,
                       "--accounting-only is for running a step; --trace replays one (the file "
                       "says whether it was computed)");
    if (v->trace && v->nrest)
        return err_set(err, ERR_USAGE,
                       "--trace replays a recorded run, whose flags come from the file (got %s)",
                       v->rest[0]);
    if (v->first && v->frame_first)
        return err_set(err, ERR_USAGE,
                       "--events picks events and --frames presenter's frames; give one");
    if (v->html && (v->first || v->frame_first || v->plain))
        return err_set(err, ERR_USAGE, "--html writes every event; %s is for text frames",
                       v->first         ? "--events"
                       : v->frame_first ? "--frames"
                                        : "--plain");
    if (v->against && !v->times)
        return err_set(err, ERR_USAGE, "--against sets another trace beside --times; give --times");
    if (v->times && (v->html || v->first || v->frame_first || v->plain))
        return err_set(err, ERR_USAGE,
                       "--times prints the step's times instead of frames; %s is "
                       "for frames",
                       v->html          ? "--html"
                       : v->first       ? "--events"
                       : v->frame_first ? "--frames"
                                        : "--plain");
    return 0;
}

/* --html's file: a file in a directory that exists (an existing file is replaced), checked
 * before anything runs. */
static int check_html_path(const char *path, Err *err) {
    struct stat st;
    if (!path[0]) return err_set(err, ERR_USAGE, "--html needs a file name");
    if (stat(path, &st) == 0 && S_ISDIR(st.st_mode))
        return err_set(err, ERR_USAGE, "--html '%s' is a directory; name the page's file", path);
    char copy[4096];
    if (snprintf(copy, sizeof copy, "%s", path) >= (int)sizeof copy)
        return err_set(err, ERR_USAGE, "--html path is too long: %s", path);
    const char *dir = dirname(copy);
    if (stat(dir, &st) != 0)
        return err_set(err, ERR_USAGE, "--html '%s': directory '%s' %s", path, dir,
                       errno == ENOENT ? "does not exist" : strerror(errno));
    if (!S_ISDIR(st.st_mode))
        return err_set(err, ERR_USAGE, "--html '%s': '%s' is not a directory", path, dir);
    return 0;
}

/* --frames A-B: the presenter's frames, as the viewer steps by them. */
static int viz_print_frames(const TrainRun *t, const Trace *trace, const VizArgs *v, Err *err) {
    Moments ms;
    int rc = moments_build(&ms, trace, err);
    if (rc) return rc;
    size_t first = v->frame_first - 1, last = v->frame_last < ms.n ? v->frame_last : ms.n;
    if (first >= ms.n)
        rc = err_set(err, ERR_USAGE, "--frames starts at %zu but the trace has %zu frames",
                     v->frame_first, ms.n);
    Frame f = {0};
    if (!rc) rc = frame_init(&f, &t->plan, err);
    for (size_t k = first; !rc && k < last; k++) {
        rc = moments_frame(&f, trace, &t->plan, &ms, k, err);
        if (!rc) plain_render(stdout, &f, &t->plan);
        if (!rc && k + 1 < last) fputc('\n', stdout);
    }
    frame_free(&f);
    moments_free(&ms);
    return rc;
}

static int viz_print(const TrainRun *t, const Trace *trace, const VizArgs *v, Err *err) {
    if (v->frame_first) return viz_print_frames(t, trace, v, err);
    size_t first = v->first ? v->first - 1 : 0;
    size_t last = v->last && v->last <= trace->n ? v->last : trace->n;
    if (v->first && first >= trace->n)
        return err_set(err, ERR_USAGE, "--events starts at %zu but the trace has %zu events",
                       v->first, trace->n);
    Frame f;
    int rc = frame_init(&f, &t->plan, err);
    for (size_t i = first; !rc && i < last; i++) {
        rc = frame_at(&f, trace, &t->plan, i, err);
        if (!rc) plain_render(stdout, &f, &t->plan);
        if (!rc && i + 1 < last) fputc('\n', stdout);
    }
    frame_free(&f);
    return rc;
}

/* ---- --times: where a step's time went */

/* Seconds as "12.345 ms" (or us, s), right-aligned in 12 columns. */
static void print_seconds(double s) {
    char buf[32];
    if (s < 1e-3)
        snprintf(buf, sizeof buf, "%.3f us", s * 1e6);
    else if (s < 1)
        snprintf(buf, sizeof buf, "%.3f ms", s * 1e3);
    else
        snprintf(buf, sizeof buf, "%.3f s", s);
    printf("%12s", buf);
}

/* The kinds of work a step's time is made of, in the order of a step (allocations and frees take
 * no time and are left out). */
static const EventKind timed_kinds[] = {
    EV_FORWARD,        EV_RECOMPUTE,  EV_BACKWARD,  EV_OPTIMIZER, EV_ALL_GATHER,
    EV_REDUCE_SCATTER, EV_ALL_REDUCE, EV_BROADCAST, EV_BARRIER,   EV_PACK,
    EV_COPY_H2D,       EV_COPY_D2H,   EV_NVME_READ, EV_NVME_WRITE};
enum { TIMED_KINDS = sizeof timed_kinds / sizeof *timed_kinds, TIMES_MAX_RANKS = 8 };

/* Whether any of the n columns spent time on kind k (a row of zeros is left out). */
static int kind_shown(const StepTimes *cols, int n, EventKind k) {
    for (int c = 0; c < n; c++)
        if (cols[c].busy[k] > 0) return 1;
    return 0;
}

/* One row per kind of work any column did, then the span; with ratio, a last column of the
 * second column over the first. */
static void print_time_rows(const StepTimes *cols, int n, int ratio) {
    for (int i = 0; i <= TIMED_KINDS; i++) {
        EventKind k = i < TIMED_KINDS ? timed_kinds[i] : EV_KIND_COUNT;
        if (k != EV_KIND_COUNT && !kind_shown(cols, n, k)) continue;
        printf("  %-16s", k == EV_KIND_COUNT ? "step (span)" : event_kind_name(k));
        for (int c = 0; c < n; c++)
            print_seconds(k == EV_KIND_COUNT ? cols[c].span : cols[c].busy[k]);
        if (ratio) {
            double a = k == EV_KIND_COUNT ? cols[0].span : cols[0].busy[k];
            double b = k == EV_KIND_COUNT ? cols[1].span : cols[1].busy[k];
            if (a > 0 && b > 0) /* two decimals, or three digits where those would show 0.00 */
                printf(b / a >= 0.1 && b / a < 1e5 ? "  %8.2f" : "  %8.2e", b / a);
            else
                printf("  %8s", "-");
        }
        putchar('\n');
    }
}

/* The last step of trace, rank by rank (the first TIMES_MAX_RANKS). */
static int print_times(const Trace *trace, const char *what, Err *err) {
    int step = trace_last_step(trace);
    if (step < 0) return err_set(err, ERR_USAGE, "%s has no events", what);
    int n = trace->nranks < TIMES_MAX_RANKS ? trace->nranks : TIMES_MAX_RANKS;
    StepTimes cols[TIMES_MAX_RANKS];
    for (int r = 0; r < n; r++) trace_step_times(trace, r, step, &cols[r]);
    printf("step %d of %s, %s: seconds of each kind of work (summed; one stream runs one at a "
           "time) and the step's span\n",
           step + 1, what, trace_clock(trace));
    printf("  %-16s", "");
    for (int r = 0; r < n; r++) {
        char head[24];
        snprintf(head, sizeof head, "rank %d", r);
        printf("%12s", head);
    }
    putchar('\n');
    print_time_rows(cols, n, 0);
    if (n < trace->nranks) printf("  (the first %d of %d ranks)\n", n, trace->nranks);
    return 0;
}

/* Rank 0's last step of trace beside that of the trace in `other`, and their ratio. */
static int print_times_against(const Trace *trace, const char *what, const char *other, Err *err) {
    Trace peer;
    TraceMeta meta;
    int rc = trace_file_read(other, &peer, &meta, err);
    if (rc) return rc;
    int a = trace_last_step(trace), b = trace_last_step(&peer);
    if (a < 0 || b < 0) {
        rc = err_set(err, ERR_USAGE, "%s has no events", a < 0 ? what : other);
    } else {
        StepTimes cols[2];
        trace_step_times(trace, 0, a, &cols[0]);
        trace_step_times(&peer, 0, b, &cols[1]);
        printf("rank 0, seconds of each kind of work (summed) and the step's span:\n"
               "  step %d of %s (%s) beside step %d of %s (%s)\n",
               a + 1, what, trace_clock(trace), b + 1, other, trace_clock(&peer));
        printf("  %-16s%12s%12s  %8s\n", "", trace_clock(trace), trace_clock(&peer), "ratio");
        print_time_rows(cols, 2, 1);
    }
    trace_free(&peer);
    trace_meta_free(&meta);
    return rc;
}

static int viz_times(const Trace *trace, const VizArgs *v, Err *err) {
    const char *what = v->trace ? v->trace : "this run";
    return v->against ? print_times_against(trace, what, v->against, err)
                      : print_times(trace, what, err);
}

/* Runs the job's steps on the simulated cluster with the trace on. */
static int viz_record(TrainRun *t, ClusterResult *res, Err *err) {
    TrainJob job = run_job(t, JOB_STEPS_ONLY);
    ClusterOptions opt = run_cluster_options(t, 1);
    /* an accounting-only run has no values to record: its frames say so instead */
    int rc = t->args.accounting_only ? 0 : run_values_alloc(t, &job, err);
    if (!rc) rc = run_ranks(t, &opt, &job, res, err);
    if (!rc) run_values_to_trace(&job, t->model.total_numel, &res->trace);
    run_values_free(&job);
    return rc;
}

/* The side-by-side view's peer: the same flags under DDP, run the first time it is asked for;
 * accounting only, for the memory bars' marks and the page's DDP side. */
typedef struct DdpPeer {
    const TrainArgs *args; /* the viewed run's */
    int accounting_only;   /* run it accounting only, whatever the viewed run is */
    long steps;            /* this many steps (0: the run's): the page's, from its trace */
    int seed_order;        /* in the seed's order (the page's, from its trace; else the run's) */
    TrainRun run;
    ClusterResult res;
    int state; /* 0 not run, 1 ready, -1 failed (msg says why) */
    char msg[512];
} DdpPeer;

/* DDP keeps every parameter, gradient and both Adam moments on every rank: refuse a run this
 * machine cannot hold rather than swap it to a halt. */
static int ddp_peer_fits(const TrainRun *t, Err *err) {
    if (t->args.accounting_only) return 0; /* it holds nothing either */
    double need = (double)t->args.ranks * (double)t->model.total_numel * 16.0;
    double ram = (double)sysconf(_SC_PHYS_PAGES) * (double)sysconf(_SC_PAGE_SIZE);
    if (need > 0.5 * ram)
        return err_set(err, ERR_USAGE,
                       "DDP of this model at %d ranks needs %.1f GiB, more than half of this "
                       "machine's %.1f GiB",
                       t->args.ranks, need / 1073741824.0, ram / 1073741824.0);
    return 0;
}

static int ddp_peer_run(DdpPeer *d, Err *err) {
    memset(&d->run, 0, sizeof d->run);
    d->run.args = *d->args;
    FsdpConfig *c = &d->run.args.fsdp;
    c->strategy = STRAT_DDP;
    c->replicas = 1;
    c->reshard_after_forward = -1;
    c->offload = OFFLOAD_NONE;
    d->run.args.backend = BACKEND_SIM; /* the peer is always simulated: DDP's memory, modelled */
    d->run.args.trace_out = d->run.args.dump_params = d->run.args.memory_svg = NULL;
    d->run.args.owned = NULL; /* the viewed run's args own what a --config allocated */
    if (d->accounting_only) { /* what needs values goes (accounting_only_fits) */
        d->run.args.accounting_only = 1;
        d->run.args.init_from = NULL;
        d->run.args.check_streams = 0;
    }
    if (d->steps) {
        d->run.args.steps = d->steps;
        d->run.args.epochs = 0;
    }
    if (d->seed_order) { /* as seed_order_apply sets it */
        c->prefetch_forward = c->prefetch_backward = 0;
        c->free_after_reduce = 1;
    }
    int rc = run_prepare(&d->run, err);
    if (!rc) rc = ddp_peer_fits(&d->run, err);
    if (!rc) rc = viz_record(&d->run, &d->res, err);
    return rc;
}

static int ddp_peer_get(DdpPeer *d, const Trace **t, const Plan **p, Err *err) {
    if (d->state == 0) {
        Err mine = {0};
        d->state = ddp_peer_run(d, &mine) ? -1 : 1;
        snprintf(d->msg, sizeof d->msg, "%s", mine.msg);
    }
    if (d->state < 0) return err_set(err, ERR_USAGE, "%s", d->msg);
    *t = &d->res.trace;
    *p = &d->run.plan;
    return 0;
}

/* The viewer's two: the DDP run beside it (key d) and the accounting-only one for the marks
 * (the same run when the viewed one is accounting only). */
typedef struct DdpPeers {
    DdpPeer view, marks;
} DdpPeers;

static int ddp_peer_load(void *user, const Trace **t, const Plan **p, Err *err) {
    DdpPeers *d = user;
    return ddp_peer_get(&d->view, t, p, err);
}

static int ddp_marks_load(void *user, const Trace **t, const Plan **p, Err *err) {
    DdpPeers *d = user;
    return ddp_peer_get(d->view.args->accounting_only ? &d->view : &d->marks, t, p, err);
}

static void ddp_peer_free(DdpPeer *d) {
    if (d->state == 0) return;
    cluster_result_free(&d->res);
    run_cleanup(&d->run);
}

/* Whether t ran in the workshop seed's order (--seed-order): a unit's unsharded parameters or
 * gradients freed in backward after its reduction, where FSDP2 frees them before. The flag is
 * viz's own, not among the flags a trace file keeps, so the page's DDP run takes the order from
 * the events, alike for a run and for its replay. */
static int trace_in_seed_order(const Trace *t) {
    for (size_t i = 0; i < t->n; i++) {
        const TraceEvent *e = &t->ev[i];
        if (e->kind == EV_FREE && e->phase == PHASE_BACKWARD &&
            (e->category == MEM_PARAM_UNSHARDED || e->category == MEM_GRAD_UNSHARDED) &&
            frame_after_reduction(t, i))
            return 1;
    }
    return 0;
}

/* The page of every event into the file opened before the run, renamed into place when whole;
 * one line says where and how big. Beside the run's memory the page shows DDP's at the same
 * point: the same flags, steps and order under DDP, accounting-only (the same bytes, nothing
 * computed, so it costs little and fits wherever the run did), made the same way from a run's
 * flags or a replayed file's, so that both pages are the same. */
static int viz_write_html(const TrainRun *t, const Trace *trace, AtomicFile *page, Err *err) {
    char title[200], why[600] = "";
    snprintf(title, sizeof title, "fsdp viz: %s, %s, %d ranks%s", t->args.model,
             strategy_name(t->args.fsdp.strategy), t->args.ranks,
             trace->accounting_only ? ", accounting only" : ""); /* a replay's too */
    DdpPeer peer = {.args = &t->args,
                    .accounting_only = 1,
                    .steps = trace_last_trained_step(trace) + 1, /* its training steps */
                    .seed_order = trace_in_seed_order(trace)};
    const Trace *ddp = NULL;
    const Plan *ddp_plan = NULL;
    Err failed = {0};
    if (t->plan.strategy == STRAT_DDP)
        snprintf(why, sizeof why, "this run is DDP");
    else if (!trace->n || peer.steps < 1)
        snprintf(why, sizeof why, "the trace has no training step");
    else if (ddp_peer_get(&peer, &ddp, &ddp_plan, &failed))
        snprintf(why, sizeof why, "running it failed: %s", failed.msg);
    HtmlPage opts = {.title = title, .ddp = ddp, .ddp_plan = ddp_plan, .no_ddp = why};
    int rc = html_write(page->f, trace, &t->plan, &opts, err);
    ddp_peer_free(&peer);
    if (rc) return rc;
    fflush(page->f);
    long size = ftell(page->f);
    if ((rc = atomic_commit(page, err))) return rc;
    char bytes[32];
    printf("wrote %s: %zu events, %s\n", page->path, trace->n,
           format_bytes(size > 0 ? (size_t)size : 0, bytes, sizeof bytes));
    return 0;
}

/* --accounting-only runs the step on devices that hold nothing, so flags that read, write or
 * check values cannot go with it: one line each, before anything runs. */
static int accounting_only_fits(const TrainArgs *a, Err *err) {
    if (a->backend != BACKEND_SIM)
        return err_set(err, ERR_USAGE, "--accounting-only runs on the simulator (--backend sim)");
    if (a->dump_params)
        return err_set(err, ERR_USAGE,
                       "--dump-params writes parameter values; --accounting-only computes none");
    if (a->init_from)
        return err_set(err, ERR_USAGE,
                       "--init-from loads parameter values; --accounting-only holds none");
    if (a->check_streams)
        return err_set(err, ERR_USAGE,
                       "--check-streams checks the bytes a run reads and writes; "
                       "--accounting-only moves none");
    return 0;
}

/* --seed-order's prefetch depths before train's flags are parsed: "not given", so that a flag
 * (or a --config file) that asks for a prefetch is seen, and refused, after. */
enum { SEED_ORDER_UNSET = -1 };

static void seed_order_prepare(TrainArgs *a) {
    a->fsdp.prefetch_forward = a->fsdp.prefetch_backward = SEED_ORDER_UNSET;
}

/* The workshop seed's strict order: per unit all-gather, compute and free, nothing gathered
 * ahead, and in backward the reduce-scatter before the frees (FsdpConfig.free_after_reduce).
 * A prefetch asked for contradicts it: one line. */
static int seed_order_apply(TrainArgs *a, Err *err) {
    const char *flag[2] = {"--prefetch-forward", "--prefetch-backward"};
    int *depth[2] = {&a->fsdp.prefetch_forward, &a->fsdp.prefetch_backward};
    for (int i = 0; i < 2; i++) {
        if (*depth[i] > 0)
            return err_set(err, ERR_USAGE,
                           "--seed-order gathers no unit ahead (the seed's order has no "
                           "prefetch); %s %d asks for one",
                           flag[i], *depth[i]);
        *depth[i] = 0;
    }
    a->fsdp.free_after_reduce = 1;
    return 0;
}

/* The viewer on a terminal; text frames when piped, asked for, or a range was given. */
static int viz_wants_viewer(const VizArgs *v) {
    return !v->plain && !v->first && !v->frame_first && isatty(STDOUT_FILENO) &&
           isatty(STDIN_FILENO);
}

/* A trace's events must name the ranks and units of the plan its flags rebuild, or the frames
 * would draw one run's events on another's grid. */
static int trace_matches_plan(const TrainRun *t, const Trace *trace, const TraceMeta *meta,
                              const char *path, Err *err) {
    const Plan *p = &t->plan;
    if (trace->nranks != p->world || meta->nunits != p->nunits)
        return err_set(err, ERR_USAGE,
                       "trace '%s' has %d ranks and %d units but its flags make %d and %d", path,
                       trace->nranks, meta->nunits, p->world, p->nunits);
    for (int u = 0; u < p->nunits; u++)
        if (strcmp(meta->units[u], p->units[u].name))
            return err_set(err, ERR_USAGE, "trace '%s' names unit %d '%s' but its flags make '%s'",
                           path, u, meta->units[u], p->units[u].name);
    if (trace->params && trace->numel != t->model.total_numel)
        return err_set(err, ERR_USAGE, "trace '%s' holds values of %zu parameters, the model %zu",
                       path, trace->numel, t->model.total_numel);
    return 0;
}

/* Rebuilds the recorded run's model and plan from the flags the file keeps. */
static int replay_prepare(TrainRun *t, const Trace *trace, const TraceMeta *meta, const char *path,
                          Err *err) {
    Err why = {0};
    int rc = train_args_parse(&t->args, meta->nargs, meta->args, &why);
    if (rc)
        return err_set(err, ERR_USAGE, "trace '%s' records flags this fsdp rejects: %s", path,
                       rc == 1 ? "--help" : why.msg);
    rc = run_plan_only(t, err);
    return rc ? rc : trace_matches_plan(t, trace, meta, path, err);
}

static int viz_replay(TrainRun *t, const VizArgs *v, AtomicFile *page, Err *err) {
    Trace trace;
    TraceMeta meta;
    int rc = trace_file_read(v->trace, &trace, &meta, err);
    if (!rc) rc = replay_prepare(t, &trace, &meta, v->trace, err);
    if (!rc && v->times)
        rc = viz_times(&trace, v, err);
    else if (!rc && page->f)
        rc = viz_write_html(t, &trace, page, err);
    else if (!rc)
        rc = viz_wants_viewer(v) ? tui_run(&trace, &t->plan, NULL, v->by_event, err)
                                 : viz_print(t, &trace, v, err);
    trace_free(&trace);
    trace_meta_free(&meta);
    return rc;
}

static int viz_execute(TrainRun *t, const VizArgs *v, AtomicFile *page, Err *err) {
    ClusterResult res;
    int rc = viz_record(t, &res, err);
    if (!rc) rc = run_write_outputs(t, &res, err);
    int viewer = viz_wants_viewer(v);
    DdpPeers peers = {.view = {.args = &t->args},
                      .marks = {.args = &t->args, .accounting_only = 1}};
    TuiCompare ddp = {.load = ddp_peer_load, .load_marks = ddp_marks_load, .user = &peers};
    if (!rc && v->times)
        rc = viz_times(&res.trace, v, err);
    else if (!rc && page->f)
        rc = viz_write_html(t, &res.trace, page, err);
    else if (!rc)
        rc = viewer ? tui_run(&res.trace, &t->plan, &ddp, v->by_event, err)
                    : viz_print(t, &res.trace, v, err);
    ddp_peer_free(&peers.view);
    ddp_peer_free(&peers.marks);
    cluster_result_free(&res);
    return rc;
}

/* --html beside what the command reads (--trace, --against, train's inputs) and train's other
 * outputs: never one of them (issue 39: `--trace tr.json --html tr.json` overwrote its input).
 * a: train's flags once parsed, NULL before. */
static int viz_check_paths(const VizArgs *v, const TrainArgs *a, Err *err) {
    NamedPath out[TRAIN_PATHS + 1] = {{"--html", v->html}}, in[TRAIN_PATHS + 2];
    size_t nout = 0, nin = 0;
    if (a) train_args_outputs(a, out + 1, &nout);
    if (a) train_args_inputs(a, in, &nin);
    in[nin++] = (NamedPath){"--trace", v->trace};
    in[nin++] = (NamedPath){"--against", v->against};
    return output_paths_check(out, nout + 1, in, nin, err);
}

int cmd_viz(int argc, char **argv) {
    TrainRun t;
    VizArgs v = {0};
    memset(&t, 0, sizeof t);
    train_args_defaults(&t.args);
    Err err = {0};
    int rc = viz_args_parse(&v, argc, argv, &err);
    if (rc == 1) {
        viz_help(stdout);
        free(v.rest);
        return 0;
    }
    t.nflags = v.nrest;
    t.flags = v.rest;
    AtomicFile page = {0};
    if (!rc && v.html) rc = check_html_path(v.html, &err);
    if (!rc) rc = viz_check_paths(&v, NULL, &err);
    if (!rc && v.html) rc = atomic_open(&page, v.html, &err);
    if (!rc && v.trace) {
        rc = viz_replay(&t, &v, &page, &err);
    } else {
        if (v.seed_order) seed_order_prepare(&t.args);
        if (!rc) rc = train_args_parse(&t.args, v.nrest, v.rest, &err); /* viz took --help */
        if (!rc && v.seed_order) rc = seed_order_apply(&t.args, &err);
        if (!rc) rc = viz_check_paths(&v, &t.args, &err);
        if (!rc && t.args.run_dir)
            rc = err_set(&err, ERR_USAGE,
                         "--run-dir is train's: viz shows its steps and keeps no run directory");
        if (!rc && v.accounting_only) rc = accounting_only_fits(&t.args, &err);
        t.args.accounting_only =
            v.accounting_only;            /* viz's own flag: train's asks --memory-compare */
        if (!rc && !t.args.steps_given) { /* one step unless asked for more */
            t.args.epochs = 0;
            t.args.steps = 1;
        }
        if (!rc) rc = run_prepare(&t, &err);
        if (!rc) rc = viz_execute(&t, &v, &page, &err);
    }
    atomic_discard(&page);
    run_cleanup(&t);
    free(v.rest);
    return rc ? cmd_fail(rc, err.msg) : 0;
}
