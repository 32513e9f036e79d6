/* train (command): `fsdp train`: the flags, what the run shows a person (plan, ownership, a
 * line per step or a progress bar, evaluations, memory), --memory-compare and --scenario
 * workshop. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <unistd.h>

#include "cmd/commands.h"
#include "cmd/report.h"
#include "cmd/run.h"
#include "io/text.h"

/* How steps and evaluations reach the person: JSON lines, a progress bar on a terminal, or
 * a line every few steps. */
typedef struct Printer {
    int json;
    int fp16;
    int lr;  /* a schedule moves the rate: the lines show it */
    int bar; /* redraw one line per step (stdout is a terminal, ViT) */
    int vit; /* the lines show images/s and the run's progress */
    int seq; /* the transformer's: the lines show tokens/s (seq of them a sample) */
    long every;
    const char *clock; /* "modelled" or "measured" step times */
    StepPace pace;     /* of the steps seen, for images/s and the time left */
    RunDir *run_dir;   /* --run-dir: each logged step and evaluation into its files too */
} Printer;

static void print_step(void *user, const StepReport *r) {
    Printer *p = user;
    run_dir_step(p->run_dir, r);
    step_pace_add(&p->pace, r);
    if (p->json)
        report_step_json(stdout, r);
    else if (p->bar)
        report_progress_bar(stdout, r, &p->pace);
    else if (r->step == 1 || r->step % p->every == 0 || r->step == r->steps) {
        if (p->seq)
            report_step_lm(stdout, r, &p->pace, p->seq, p->lr);
        else if (p->vit)
            report_step_vit(stdout, r, &p->pace, p->lr);
        else
            report_step_text(stdout, r, p->fp16, p->lr, p->clock);
    }
    fflush(stdout);
}

/* The toy's epochs are ten steps of its 256 points: a person sees its loss in the step lines,
 * and a line per epoch would drown them, so only JSON has them. */
static void print_epoch(void *user, const EpochReport *r) {
    Printer *p = user;
    if (p->json)
        report_epoch_json(stdout, r);
    else if (p->vit || p->seq)
        report_epoch_text(stdout, r);
    fflush(stdout);
}

static void print_eval(void *user, const EvalReport *r) {
    Printer *p = user;
    run_dir_eval(p->run_dir, r);
    if (p->json)
        report_eval_json(stdout, r);
    else
        report_eval_text(stdout, r);
    fflush(stdout);
}

/* The simulator's own footprint against what it accounted: the process's peak resident
 * memory is the ranks' accounted peaks plus the data sets plus what nobody accounted (the
 * program, thread stacks, allocator slack, hidden copies). */
static void report_resident(FILE *f, const TrainRun *t) {
    struct rusage ru;
    if (getrusage(RUSAGE_SELF, &ru) != 0) return;
    double rss = (double)ru.ru_maxrss * 1024.0, accounted = 0.0;
    for (int r = 0; r < t->args.ranks; r++) accounted += (double)t->memory[r].peak;
    double data = (double)(t->data.n + t->eval_loaded) * (double)(t->data.in_elems + 1);
    double other = rss - accounted - data;
    fprintf(f,
            "process: peak resident %.1f MiB = accounted rank peaks %.1f MiB + data sets %.1f MiB "
            "+ %.1f MiB unaccounted (%.1f%% of the accounted peaks)\n",
            rss / 1048576.0, accounted / 1048576.0, data / 1048576.0, other / 1048576.0,
            accounted > 0 ? 100.0 * other / accounted : 0.0);
}

/* --memory-compare's settings, as the workshop's memory profiles name them; each starts from
 * the job's own flags. */
typedef struct CompareSetting {
    const char *name, *flags;
    int reshard, bf16, ac;
    OffloadKind offload;
} CompareSetting;

static const CompareSetting compare_settings[] = {
    {"default", "--reshard-after-forward false", 0, 0, 0, OFFLOAD_NONE},
    {"CPU offload", "--reshard-after-forward false --offload cpu", 0, 0, 0, OFFLOAD_CPU},
    {"reshard after forward", "--reshard-after-forward true", 1, 0, 0, OFFLOAD_NONE},
    {"mixed precision", "--reshard-after-forward false --param-dtype bf16", 0, 1, 0, OFFLOAD_NONE},
    {"all combined", "--reshard-after-forward true --offload cpu --param-dtype bf16", 1, 1, 0,
     OFFLOAD_CPU},
    {"+ activation ckpt", "all combined + --activation-checkpointing", 1, 1, 1, OFFLOAD_CPU},
};

static int memory_compare(TrainRun *t, Err *err) {
    const TrainArgs *a = &t->args;
    int n = (int)(sizeof compare_settings / sizeof *compare_settings);
    if (!train_args_is_vit(a) && !train_args_is_transformer(a))
        n--; /* the toy has no blocks to checkpoint */
    CompareRow rows[sizeof compare_settings / sizeof *compare_settings];
    int rc = 0;
    for (int i = 0; i < n && !rc; i++) {
        const CompareSetting *s = &compare_settings[i];
        FsdpConfig c = a->fsdp;
        c.reshard_after_forward = s->reshard;
        c.offload = s->offload;
        c.param_dtype = s->bf16 ? DTYPE_BF16 : c.param_dtype;
        c.ac_every = s->ac ? 1 : c.ac_every;
        memset(t->memory, 0, (size_t)a->ranks * sizeof *t->memory);
        TrainJob job = run_job(t, JOB_STEPS_ONLY);
        job.cfg = &c;
        ClusterOptions opt = run_cluster_options(t, 0); /* --accounting-only's too */
        ClusterResult res;
        rc = run_ranks(t, &opt, &job, &res, err);
        cluster_result_free(&res);
        int top = 0;
        for (int r = 1; r < a->ranks; r++)
            if (t->memory[r].on_gpu.peak > t->memory[top].on_gpu.peak) top = r;
        rows[i] = (CompareRow){.name = s->name, .flags = s->flags, .peak = t->memory[top]};
    }
    if (!rc)
        report_memory_compare(stdout, rows, n, (size_t)t->profile->mem_bytes, t->profile->name);
    return rc;
}

static int train_execute(TrainRun *t, Err *err) {
    TrainArgs *a = &t->args;
    if (a->memory_compare) return memory_compare(t, err);
    int vit = train_args_is_vit(a), tf = train_args_is_transformer(a);
    Printer printer = {.json = a->json,
                       .clock = a->backend == BACKEND_SIM ? "modelled" : "measured",
                       .fp16 = fsdp_uses_loss_scaling(&a->fsdp),
                       .lr = lr_schedule_varies(&a->fsdp.lr_schedule),
                       .bar = vit && !a->json && !a->print_every && isatty(STDOUT_FILENO),
                       .vit = vit,
                       .seq = tf ? a->seq : 0,
                       .run_dir = &t->run_dir};
    printer.every = a->print_every ? a->print_every : (a->steps >= 10 ? a->steps / 10 : 1);
    /* The loss is all-reduced only on steps someone will see. Every rank must take part alike,
     * and a process of its own cannot know whether rank 0's stdout is a terminal (the bar): it
     * reduces the loss at every step (one float). */
    long log_every = a->json || printer.bar || t->rank_per_process ? 1 : printer.every;
    if (a->run_dir && !a->print_every) log_every = 1; /* metrics.jsonl has every step */
    TrainJob job = run_job(t, JOB_WHOLE_RUN);
    job.log_every = (int)log_every;
    job.on_step = print_step;
    job.on_eval = print_eval;
    if (vit || tf || a->json) job.on_epoch = print_epoch;
    job.user = &printer;
    /* the memory timeline is drawn from the trace */
    ClusterOptions opt = run_cluster_options(t, a->trace_out || a->memory_svg || a->memory);
    ClusterResult res;
    int rc = a->trace_out ? run_values_alloc(t, &job, err) : 0;
    if (!rc) rc = run_with_restarts(t, &opt, &job, &res, err);
    if (!rc) run_values_to_trace(&job, t->model.total_numel, &res.trace);
    res.trace.measured = a->backend != BACKEND_SIM;
    run_values_free(&job);
    if (!rc) rc = run_write_outputs(t, &res, err);
    Err drawn = {0}; /* curves.svg, also of a run that failed: what it logged */
    int drc = run_dir_finish(&t->run_dir, &drawn);
    if (!rc && drc) rc = err_set(err, drc, "%s", drawn.msg);
    if (!rc && a->check_streams && res.checked)
        report_stream_check(stdout, res.stream_accesses, res.stream_hazards, a->json);
    if (!rc && a->json) report_memory_json(stdout, t->memory, a->ranks);
    if (!rc && !a->json) {
        if (!vit && !tf) {
            printf("final parameters:\n");
            report_final_params(stdout, &t->model, t->params);
        }
        if (a->memory || vit || tf) report_memory(stdout, &t->plan, &a->fsdp, t->memory);
        if (a->memory) rc = run_memory_timeline(t, &res.trace, NULL, 1, err);
        if ((vit || tf) && a->backend == BACKEND_SIM)
            report_resident(stdout, t); /* GPU memory is not RSS */
    }
    cluster_result_free(&res);
    return rc;
}

/* --scenario workshop: the workshop's own cluster (two nodes, one 24 GB L4 each, joined by
 * Ethernet: the l4-pcie profile at 2 ranks) and its two models, vit-workshop at hidden 3840
 * and 7680, compared setting by setting in accounting-only runs (the 7680 model does not fit
 * this machine's memory, let alone compute). */
static int workshop_scenario(const TrainArgs *given, Err *err) {
    static const int hidden[] = {3840, 7680};
    int rc = 0;
    for (int i = 0; i < 2 && !rc; i++) {
        TrainRun t;
        memset(&t, 0, sizeof t);
        t.args = *given;
        t.args.owned = NULL; /* given's: its caller frees them */
        snprintf(t.args.model, sizeof t.args.model, "vit-workshop");
        snprintf(t.args.profile, sizeof t.args.profile, "l4-pcie");
        t.args.hidden = hidden[i];
        t.args.ranks = 2;
        t.args.accounting_only = 1;
        if (!t.args.batch_given) t.args.fsdp.batch_size = 64; /* the ViT's default */
        rc = run_prepare(&t, err);
        if (!rc) {
            char count[32];
            printf("%sworkshop cluster: %s; vit-workshop at hidden %d: %s parameters, batch %d "
                   "per GPU\n",
                   i ? "\n" : "", t.profile->description, hidden[i],
                   with_commas(t.model.total_numel, count, sizeof count), t.args.fsdp.batch_size);
            rc = memory_compare(&t, err);
        }
        run_cleanup(&t);
    }
    return rc;
}

/* What the ranks are, for the first line. */
static const char *ranks_are(const TrainRun *t) {
    static char where[96];
    int one = t->args.ranks == 1;
    if (t->args.backend == BACKEND_MPI)
        return one ? "MPI rank (a process on CPUs)" : "MPI ranks (a process each, on CPUs)";
    if (t->args.backend == BACKEND_CUDA) return one ? "GPU" : "GPUs (a process each)";
    snprintf(where, sizeof where, "simulated rank%s (%s)", one ? "" : "s", t->profile->name);
    return where;
}

int cmd_train(int argc, char **argv) {
    TrainRun t;
    memset(&t, 0, sizeof t);
    train_args_defaults(&t.args);
    Err err = {0};
    t.nflags = argc;
    t.flags = argv;
    int rc = train_args_parse(&t.args, argc, argv, &err);
    if (cmd_help_asked(rc, train_args_help)) return 0;
    if (!rc && t.args.scenario_workshop) {
        rc = workshop_scenario(&t.args, &err);
        train_args_free(&t.args);
        return rc ? cmd_fail(rc, err.msg) : 0;
    }
    if (!rc) rc = run_prepare(&t, &err);
    if (!rc && !t.args.json && t.backend_note[0]) printf("%s\n", t.backend_note);
    if (!rc && !t.args.json && t.args.resume)
        printf("resume: %s\n", t.resume[0] ? t.resume : "no checkpoint yet, from the start");
    if (!rc && !t.args.json) {
        report_config(stdout, &t.args.fsdp, t.args.model, t.args.ranks, ranks_are(&t));
        long global = (long)t.args.ranks * t.args.fsdp.batch_size * t.args.fsdp.grad_accum;
        if (train_args_is_vit(&t.args))
            report_data(stdout, &t.data, t.args.split, t.args.val_size, &t.eval, t.eval_name,
                        t.args.steps, t.args.epochs, global);
        if (train_args_is_transformer(&t.args))
            report_text(stdout, text_path(t.args.text), &t.text, &t.data, t.args.val_size,
                        t.args.steps, t.args.epochs, global);
        if (lr_schedule_varies(&t.args.fsdp.lr_schedule))
            report_lr_schedule(stdout, &t.args.fsdp, t.args.steps);
        report_plan(stdout, &t.plan);
        report_ownership(stdout, &t.plan);
    }
    if (!rc && !t.args.print_plan) rc = train_execute(&t, &err);
    run_cleanup(&t);
    if (rc == ERR_USAGE && (t.quiet_rank || run_not_rank_0())) return 2; /* rank 0 says it */
    if (rc == ERR_DIVERGED && t.quiet_rank) return 1; /* every rank saw it; rank 0 says it */
    return rc ? cmd_fail(rc, err.msg) : 0;
}
