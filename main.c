/* main: the `fsdp` command. Parses the subcommand, wires the engine (core/) to a backend
 * (the simulated cluster in sim/; the GPUs in runtime/ in a later issue), prints what the
 * user asked for and maps errors to exit codes: 2 for bad input, 1 for failures. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

#include "cmd/ckpt.h"
#include "cmd/cli.h"
#include "cmd/launch.h"
#include "cmd/lessons.h"
#include "cmd/plan.h"
#include "cmd/report.h"
#include "engine/predict.h"
#include "engine/train.h"
#include "io/checkpoint.h"
#include "io/mnist.h"
#include "io/nvme_tier.h"
#include "io/safetensors.h"
#include "io/trace_file.h"
#include "io/weights.h"
#include "models/toy.h"
#include "models/vit.h"
#include "runtime/dist_env.h"
#include "runtime/gpu_backend.h"
#include "sim/cluster.h"
#include "sim/cost.h"
#include "sim/viz/frame.h"
#include "sim/viz/memory_timeline.h"
#include "sim/viz/plain.h"
#include "sim/viz/tui.h"

static void usage(FILE *f) {
    fputs("usage: ./fsdp <command> [flags]\n"
          "\n"
          "commands\n"
          "  train     train a model with FSDP on a simulated cluster (./fsdp train --help)\n"
          "  viz       step through one training step event by event (./fsdp viz --help)\n"
          "  ckpt      inspect a sharded checkpoint, or consolidate it into one safetensors file\n"
          "            (./fsdp ckpt --help)\n"
          "  predict   classify a test image, or measure test accuracy, with trained weights\n"
          "            (./fsdp predict --help)\n"
          "  plan      memory, communication and step time of any model on any cluster, without\n"
          "            the cluster (./fsdp plan --help)\n"
          "  lessons   exercises: write a piece of FSDP yourself, checked against the engine\n"
          "            (./fsdp lessons help)\n"
          "  launch    run a command once per GPU with torchrun's variables, and restart it\n"
          "            when one fails (./fsdp launch --help)\n"
          "  help      this text\n"
          "\n"
          "example: ./fsdp train --model toy --ranks 3 --strategy zero3 --steps 200\n",
          f);
}

static int fail(int code, const char *msg) {
    fprintf(stderr, "fsdp: %s\n", msg);
    return code == ERR_USAGE ? 2 : 1;
}

/* An output file is written beside its final name and renamed into place only when
 * complete, so an error never leaves a partial file or clobbers an old one. */
typedef struct OutFile {
    const char *path;
    char tmp[4096];
    FILE *f;
} OutFile;

static int out_open(OutFile *o, const char *path, Err *err) {
    o->path = path;
    o->f = NULL;
    if (!path) return 0;
    if (snprintf(o->tmp, sizeof o->tmp, "%s.tmp.%ld", path, (long)getpid()) >= (int)sizeof o->tmp)
        return err_set(err, ERR_USAGE, "output path is too long: %s", path);
    o->f = fopen(o->tmp, "w");
    if (!o->f) return err_set(err, ERR_USAGE, "cannot write %s", path);
    return 0;
}

static int out_commit(OutFile *o, Err *err) {
    if (!o->f) return 0;
    int bad = fclose(o->f) != 0;
    o->f = NULL;
    if (bad || rename(o->tmp, o->path) != 0) {
        unlink(o->tmp);
        return err_set(err, ERR_IO, "could not write %s", o->path);
    }
    return 0;
}

static void out_discard(OutFile *o) {
    if (!o->f) return;
    fclose(o->f);
    o->f = NULL;
    unlink(o->tmp);
}

/* How steps and evaluations reach the person: JSON lines, a progress bar on a terminal, or
 * a line every few steps. */
typedef struct Printer {
    int json;
    int fp16;
    int bar; /* redraw one line per step (stdout is a terminal, ViT) */
    int vit; /* the lines show images/s and the epoch's progress */
    long every;
    double elapsed; /* wall seconds of the steps so far, for the ETA */
    double images;  /* images trained on so far */
} Printer;

static void print_step(void *user, const StepReport *r) {
    Printer *p = user;
    p->elapsed += r->wall_time;
    p->images += r->images_per_s * r->wall_time;
    double rate = p->elapsed > 0 ? p->images / p->elapsed : 0.0;
    if (p->json)
        report_step_json(stdout, r);
    else if (p->bar)
        report_progress_bar(stdout, r, p->elapsed, rate);
    else if (r->step == 1 || r->step % p->every == 0 || r->step == r->steps) {
        if (p->vit)
            report_step_vit(stdout, r, p->elapsed, rate);
        else
            report_step_text(stdout, r, p->fp16);
    }
    fflush(stdout);
}

static void print_eval(void *user, const EvalReport *r) {
    Printer *p = user;
    if (p->json)
        report_eval_json(stdout, r);
    else
        report_eval_text(stdout, r);
    fflush(stdout);
}

typedef struct TrainRun {
    TrainArgs args;
    int nflags;
    char **flags; /* the train flags as given, for the trace file */
    const Profile *profile;
    ModelDesc model;
    Dataset data, eval;
    long eval_loaded;   /* images read for evaluation (more than eval.n when it is a slice) */
    char eval_name[96]; /* what the evaluation set is, for people */
    Plan plan;
    OutFile dump, trace, svg;
    char backend_note[192]; /* what --backend auto chose, and why ("" otherwise) */
    char resume[4096];      /* the checkpoint --resume resolved to ("" for none) */
    RankMemory *memory;
    float *params;
    int rank_per_process; /* one of many processes on GPUs (join_processes) */
} TrainRun;

/* The training split and the data it is evaluated on. Evaluating on data the model trained on
 * measures nothing, so training on the test split (the live workshop does, for speed) is
 * evaluated on the first 10,000 images of the train split instead. */
static int load_images(TrainRun *t, Err *err) {
    const char *dir = mnist_dir(t->args.data);
    int on_test = !strcmp(t->args.split, "test");
    int rc = mnist_load(&t->data, dir, t->args.split, err);
    if (!rc) rc = mnist_load(&t->eval, dir, on_test ? "train" : "test", err);
    if (rc) return rc;
    t->eval_loaded = t->eval.n;
    if (on_test && t->eval.n > 10000) t->eval.n = 10000;
    snprintf(t->eval_name, sizeof t->eval_name, "%s",
             on_test ? "the first 10000 images of the train split (held out: training uses the "
                       "test split)"
                     : "the test split");
    return 0;
}

/* The model the flags describe, without its data. */
static int create_model_desc(TrainRun *t, Err *err) {
    TrainArgs *a = &t->args;
    if (!train_args_is_vit(a)) return toy_model_create(&t->model, err);
    VitConfig c;
    vit_preset_with(a->model, a->layers, a->heads, a->hidden, a->mlp, &c); /* a known preset */
    return vit_model_create(&t->model, &c, err);
}

static int create_model(TrainRun *t, Err *err) {
    int rc = create_model_desc(t, err);
    if (rc) return rc;
    return train_args_is_vit(&t->args) ? load_images(t, err) : toy_dataset_create(&t->data, err);
}

/* The model and plan of a run, as a trace's replay needs them: no data, no parameters. */
static int plan_prepare(TrainRun *t, Err *err) {
    TrainArgs *a = &t->args;
    int rc = create_model_desc(t, err);
    return rc ? rc : fsdp_plan_create(&t->plan, &t->model, &a->fsdp, a->ranks, err);
}

/* Resolves --backend auto, and refuses cuda where this build or this machine cannot run it. */
static int choose_backend(TrainRun *t, Err *err) {
    TrainArgs *a = &t->args;
    if (a->backend == BACKEND_SIM) return 0; /* the CUDA backend is not even loaded */
    char why[160];
    int gpu = gpu_backend_available(why, sizeof why);
    if (a->backend == BACKEND_AUTO) {
        a->backend = gpu ? BACKEND_CUDA : BACKEND_SIM;
        snprintf(t->backend_note, sizeof t->backend_note, "backend: %s (auto: %s)",
                 gpu ? "cuda" : "sim", why);
    } else if (a->backend == BACKEND_CUDA && !gpu) {
        return err_set(err, ERR_USAGE, "--backend cuda: no GPU to run on (%s)", why);
    }
    return 0;
}

/* The job on every rank: simulated ranks, or this machine's GPU. */
static int run_ranks(const TrainRun *t, const ClusterOptions *opt, TrainJob *job,
                     ClusterResult *res, Err *err) {
    if (t->args.backend == BACKEND_CUDA) return gpu_backend_run(opt, train_rank, job, res, err);
    return cluster_run(opt, train_rank, job, res, err);
}

/* --resume auto: the newest complete checkpoint in --checkpoint-dir (none yet: the start). */
static int resolve_resume(TrainRun *t, Err *err) {
    const char *r = t->args.resume;
    if (!r) return 0;
    if (strcmp(r, "auto") != 0) {
        snprintf(t->resume, sizeof t->resume, "%s", r);
        return 0;
    }
    return checkpoint_latest(t->args.ckpt_dir, t->resume, sizeof t->resume, err);
}

/* --offload nvme: the directory must take every rank's file; tried before anything runs (one
 * file of the whole size, removed at once) so a bad directory is one line and exit 2. */
static int check_nvme_dir(const TrainRun *t, Err *err) {
    const FsdpConfig *c = &t->args.fsdp;
    if (c->offload != OFFLOAD_NVME) return 0;
    size_t bytes = 0;
    for (int r = 0; r < t->args.ranks; r++)
        bytes += plan_rest_bytes(&t->plan, r, OFFLOAD_NVME).nvme +
                 3 * (size_t)t->plan.nunits * NVME_TIER_ALIGN; /* each piece 4 KiB aligned */
    NvmeTier *probe;
    int rc = nvme_tier_open(&probe, c->nvme_dir, 0, bytes, err);
    nvme_tier_close(probe);
    return rc == ERR_IO ? ERR_USAGE : rc;
}

/* --save-full writes at the very end: a path that cannot take the file is refused before any
 * training, not after it. */
static int check_save_full(const char *path, Err *err) {
    if (!path) return 0;
    struct stat sb;
    if (stat(path, &sb) == 0 && S_ISDIR(sb.st_mode))
        return err_set(err, ERR_USAGE, "--save-full %s is a directory; give a file", path);
    char dir[4096];
    const char *slash = strrchr(path, '/');
    snprintf(dir, sizeof dir, "%.*s", slash ? (int)(slash - path + (slash == path)) : 1,
             slash ? path : ".");
    if (access(dir, W_OK) != 0)
        return err_set(err, ERR_USAGE, "--save-full %s: cannot write in %s: %s", path, dir,
                       strerror(errno));
    return 0;
}

/* Started as one of many processes (torchrun, fsdp launch, srun, mpirun) for the GPU: this
 * process runs one rank, --ranks must be the world, and only rank 0 prints and writes files
 * (the others' stdout goes nowhere; their errors still reach stderr). The simulator makes its
 * own ranks and ignores these variables. */
static int join_processes(TrainRun *t, Err *err) {
    TrainArgs *a = &t->args;
    DistEnv env;
    if (a->backend != BACKEND_CUDA) return 0;
    int rc = dist_env_from_process(&env, err);
    if (rc || env.world_size == 1) return rc;
    if (a->ranks != env.world_size)
        return err_set(
            err, ERR_USAGE, "--ranks %d: this is rank %d of %d processes (%s); pass --ranks %d",
            a->ranks, env.rank, env.world_size, launcher_name(env.launcher), env.world_size);
    t->rank_per_process = 1;
    if (env.rank != 0) {
        a->dump_params = a->memory_svg = a->trace_out = NULL;
        if (!freopen("/dev/null", "w", stdout))
            return err_set(err, ERR_IO, "rank %d: cannot silence stdout", env.rank);
    }
    return 0;
}

static int train_prepare(TrainRun *t, Err *err) {
    TrainArgs *a = &t->args;
    int brc = join_processes(t, err);
    if (!brc && a->backend == BACKEND_AUTO) {
        brc = choose_backend(t, err);
        if (!brc) brc = join_processes(t, err); /* auto may have chosen cuda */
    } else if (!brc) {
        brc = choose_backend(t, err);
    }
    if (brc) return brc;
    t->profile = profile_find(a->profile);
    if (!t->profile)
        return err_set(err, ERR_USAGE, "--profile must be one of %s (got '%s')", profile_names(),
                       a->profile);
    int rc = create_model(t, err);
    if (!rc) rc = fsdp_plan_create(&t->plan, &t->model, &a->fsdp, a->ranks, err);
    if (rc) return rc;
    long global = (long)a->ranks * a->fsdp.batch_size * a->fsdp.grad_accum;
    if (global > t->data.n)
        return err_set(err, ERR_USAGE,
                       "--batch-size %d x --ranks %d x --grad-accum %d = %ld samples a step, "
                       "more than the data set's %ld",
                       a->fsdp.batch_size, a->ranks, a->fsdp.grad_accum, global, t->data.n);
    if (a->epochs) a->steps = (long)a->epochs * (t->data.n / global);
    t->memory = calloc((size_t)a->ranks, sizeof *t->memory);
    t->params = calloc(t->model.total_numel + 1, sizeof(float));
    if (!t->memory || !t->params) return err_set(err, ERR_NOMEM, "out of memory");
    if (a->init_from) { /* checked here, one line and exit 2 if bad; ranks read their rows */
        WeightsFile *w;
        if ((rc = weights_open(&w, &t->model, a->init_from, err))) return rc;
        weights_close(w);
    }
    if ((rc = check_nvme_dir(t, err))) return rc;
    if ((rc = check_save_full(a->save_full, err))) return rc;
    if ((rc = resolve_resume(t, err))) return rc;
    if ((rc = out_open(&t->dump, a->dump_params, err))) return rc;
    if ((rc = out_open(&t->svg, a->memory_svg, err))) return rc;
    return out_open(&t->trace, a->trace_out, err);
}

/* Flags that name files the run writes: a replay has no business with them. */
static int is_output_flag(const char *flag) {
    return !strcmp(flag, "--trace-out") || !strcmp(flag, "--dump-params") ||
           !strcmp(flag, "--memory-svg");
}

static int write_trace(const TrainRun *t, const Trace *trace, Err *err) {
    char *args[t->nflags + 1], *units[t->plan.nunits + 1];
    TraceMeta meta = {.args = args, .units = units, .nunits = t->plan.nunits};
    for (int i = 0; i < t->nflags; i++) {
        if (is_output_flag(t->flags[i]))
            i++; /* and its value */
        else
            args[meta.nargs++] = t->flags[i];
    }
    /* the writer only reads them */
    for (int u = 0; u < t->plan.nunits; u++) units[u] = (char *)t->plan.units[u].name;
    return trace_file_write(trace, &meta, t->trace.f, err);
}

/* Memory over the last step, from the trace: as an SVG picture into svg (NULL: none) and, with
 * text, as the terminal's timeline on stdout. */
static int write_memory_timeline(const TrainRun *t, const Trace *trace, FILE *svg, int text,
                                 Err *err) {
    MemoryTimeline mt;
    int rc = memory_timeline_build(&mt, trace, -1, err);
    if (!rc && svg) {
        char title[160];
        snprintf(title, sizeof title, "fsdp memory: %s, %s, %d ranks", t->args.model,
                 strategy_name(t->args.fsdp.strategy), t->args.ranks);
        /* DDP: every parameter, its gradient and Adam's two moments, in fp32 */
        MemorySvgOptions o = {.title = title,
                              .ddp_bytes = 4 * t->model.total_numel * sizeof(float)};
        rc = memory_svg_write(&mt, &o, svg, err);
    }
    if (!rc && text) {
        printf("memory over the last step (each row scaled to the rank's peak):\n");
        rc = memory_text_write(&mt, 48, stdout, err);
    }
    memory_timeline_free(&mt);
    return rc;
}

static int train_write_outputs(TrainRun *t, const ClusterResult *res, Err *err) {
    int rc = 0;
    if (t->dump.f) rc = report_dump_params(t->dump.f, &t->model, t->params, err);
    if (!rc && t->trace.f) rc = write_trace(t, &res->trace, err);
    if (!rc && t->svg.f) rc = write_memory_timeline(t, &res->trace, t->svg.f, 0, err);
    if (!rc) rc = out_commit(&t->dump, err);
    if (!rc) rc = out_commit(&t->svg, err);
    if (!rc) rc = out_commit(&t->trace, err);
    return rc;
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

/* The simulated cluster a run asks for: its ranks, hsdp's replica groups, the cost profile. */
static ClusterOptions cluster_options(const TrainRun *t, int trace) {
    const TrainArgs *a = &t->args;
    return (ClusterOptions){.ranks = a->ranks,
                            .replicas = a->fsdp.strategy == STRAT_HSDP ? a->fsdp.replicas : 1,
                            .profile = t->profile,
                            .trace = trace,
                            .timeout = a->timeout};
}

/* Models this small (the toy) have their numbers recorded with the trace, for the viewer. */
enum { VALUES_MAX_NUMEL = 64 };

static int values_alloc(const TrainRun *t, TrainJob *job, Err *err) {
    size_t n = t->model.total_numel;
    if (n > VALUES_MAX_NUMEL) return 0;
    job->step_params = calloc((size_t)(job->steps + 1) * n, sizeof(float));
    job->step_grads = calloc((size_t)job->steps * n + 1, sizeof(float));
    if (!job->step_params || !job->step_grads)
        return err_set(err, ERR_NOMEM, "out of memory for the values of %ld steps", job->steps);
    return 0;
}

/* Hands the recorded values to the trace, which frees them with its events. */
static void values_to_trace(TrainJob *job, size_t numel, Trace *trace) {
    if (!job->step_params) return;
    trace->params = job->step_params;
    trace->grads = job->step_grads;
    trace->steps = (int)job->steps;
    trace->numel = numel;
    job->step_params = job->step_grads = NULL;
}

/* Runs the job; when a rank fails and --max-restarts allows, starts again from the newest
 * complete checkpoint (or from the beginning when there is none yet), as torchrun and Ray do.
 * An injected failure (--fail-at) happens once: the restarted run goes past it. */
static int run_with_restarts(TrainRun *t, const ClusterOptions *opt, TrainJob *job,
                             ClusterResult *res, Err *err) {
    int rc = run_ranks(t, opt, job, res, err);
    for (int restart = 1; rc && restart <= t->args.max_restarts; restart++) {
        cluster_result_free(res);
        fprintf(stderr, "fsdp: %s\n", err->msg);
        Err latest = {0};
        t->resume[0] = 0;
        if (t->args.ckpt_dir &&
            checkpoint_latest(t->args.ckpt_dir, t->resume, sizeof t->resume, &latest))
            return err_set(err, latest.code, "%s", latest.msg);
        fprintf(stderr, "fsdp: restart %d of %d from %s\n", restart, t->args.max_restarts,
                t->resume[0] ? t->resume : "the beginning (no checkpoint yet)");
        job->resume_from = t->resume[0] ? t->resume : NULL;
        job->fail_at_step = 0;
        memset(t->memory, 0, (size_t)t->args.ranks * sizeof *t->memory);
        *err = (Err){0};
        rc = run_ranks(t, opt, job, res, err);
    }
    return rc;
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
    if (!train_args_is_vit(a)) n--; /* the toy has no blocks to checkpoint */
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
        TrainJob job = {.model = &t->model,
                        .data = &t->data,
                        .plan = &t->plan,
                        .cfg = &c,
                        .steps = a->steps,
                        .memory = t->memory,
                        .init_from = a->init_from};
        ClusterOptions opt = cluster_options(t, 0);
        opt.accounting_only = a->accounting_only;
        ClusterResult res;
        rc = run_ranks(t, &opt, &job, &res, err);
        cluster_result_free(&res);
        int top = 0;
        for (int r = 1; r < a->ranks; r++)
            if (t->memory[r].peak > t->memory[top].peak) top = r;
        rows[i] = (CompareRow){.name = s->name, .flags = s->flags, .peak = t->memory[top]};
    }
    if (!rc)
        report_memory_compare(stdout, rows, n, (size_t)t->profile->mem_bytes, t->profile->name);
    return rc;
}

static int train_execute(TrainRun *t, Err *err) {
    TrainArgs *a = &t->args;
    if (a->memory_compare) return memory_compare(t, err);
    int vit = train_args_is_vit(a);
    Printer printer = {.json = a->json,
                       .fp16 = fsdp_uses_loss_scaling(&a->fsdp),
                       .bar = vit && !a->json && !a->print_every && isatty(STDOUT_FILENO),
                       .vit = vit};
    printer.every = a->print_every ? a->print_every : (a->steps >= 10 ? a->steps / 10 : 1);
    /* the loss is all-reduced only on steps someone will see */
    long log_every = a->json || printer.bar ? 1 : printer.every;
    TrainJob job = {.model = &t->model,
                    .data = &t->data,
                    .plan = &t->plan,
                    .cfg = &a->fsdp,
                    .steps = a->steps,
                    .log_every = (int)log_every,
                    .on_step = print_step,
                    .eval_data = vit && a->eval ? &t->eval : NULL,
                    .on_eval = print_eval,
                    .user = &printer,
                    .memory = t->memory,
                    .init_from = a->init_from,
                    .save_full = a->save_full,
                    .ckpt_dir = a->ckpt_dir,
                    .ckpt_every = a->ckpt_every,
                    .ckpt_keep = a->keep,
                    .resume_from = t->resume[0] ? t->resume : NULL,
                    .model_name = a->model,
                    .fail_at_step = a->fail_at_step,
                    .fail_at_rank = a->fail_at_rank,
                    .kill_in_save_step = a->kill_in_save_step,
                    .rank_per_process = t->rank_per_process,
                    /* gathering a ViT's parameters onto one rank is only worth it to dump them */
                    .final_params = !vit || t->dump.f ? t->params : NULL};
    /* the memory timeline is drawn from the trace */
    ClusterOptions opt = cluster_options(t, a->trace_out || a->memory_svg || a->memory);
    ClusterResult res;
    int rc = a->trace_out ? values_alloc(t, &job, err) : 0;
    if (!rc) rc = run_with_restarts(t, &opt, &job, &res, err);
    if (!rc) values_to_trace(&job, t->model.total_numel, &res.trace);
    free(job.step_params);
    free(job.step_grads);
    if (!rc) rc = train_write_outputs(t, &res, err);
    if (!rc && a->json) report_memory_json(stdout, t->memory, a->ranks);
    if (!rc && !a->json) {
        if (!vit) {
            printf("final parameters:\n");
            report_final_params(stdout, &t->model, t->params);
        }
        if (a->memory || vit) report_memory(stdout, &t->plan, &a->fsdp, t->memory);
        if (a->memory) rc = write_memory_timeline(t, &res.trace, NULL, 1, err);
        if (vit && a->backend == BACKEND_SIM)
            report_resident(stdout, t); /* GPU memory is not RSS */
    }
    cluster_result_free(&res);
    return rc;
}

static void train_cleanup(TrainRun *t) {
    out_discard(&t->dump);
    out_discard(&t->svg);
    out_discard(&t->trace);
    plan_free(&t->plan);
    model_desc_free(&t->model);
    dataset_free(&t->data);
    dataset_free(&t->eval);
    free(t->memory);
    free(t->params);
}

/* ---------------------------------------------------------------- fsdp viz */

static void viz_help(FILE *f) {
    fputs("usage: ./fsdp viz [--events A-B] [--plain] [train flags]\n"
          "       ./fsdp viz --trace FILE [--events A-B] [--plain]\n"
          "\n"
          "Runs one training step (or --steps K) on the simulated cluster, records its trace and\n"
          "prints it event by event: who holds which shard, what is gathered and reduced, each\n"
          "rank's memory, and one sentence on what happens. Every train flag works (model,\n"
          "ranks, strategy, reshard, wrap, dtypes, offload, prefetch, profile).\n"
          "\n"
          "  --events A-B    text frames of events A to B (1-based, inclusive); A for one\n"
          "  --plain         text frames even on a terminal (they are the default when stdout\n"
          "                  is not one)\n"
          "  --trace FILE    replay a trace that train --trace-out (or viz --trace-out) wrote,\n"
          "                  instead of running; the run's flags come from the file\n"
          "\n"
          "On a terminal the full-screen viewer opens: n/space/right next, p/left previous,\n"
          "f/b next forward/backward event, g go to event, d the same step under DDP beside\n"
          "it, r play/pause, +/- speed, h help, q quit. NO_COLOR=1 turns colour off.\n"
          "\n"
          "example: ./fsdp viz --model toy --ranks 3 --strategy zero3 --events 19-23\n",
          f);
}

/* "A-B" or "A", 1-based and inclusive. */
static int parse_events(const char *v, size_t *first, size_t *last, Err *err) {
    char *end;
    unsigned long a = strtoul(v, &end, 10), b = a;
    if (end != v && *end == '-') {
        const char *rest = end + 1;
        b = strtoul(rest, &end, 10);
        if (end == rest) a = 0;
    }
    if (end == v || *end || a < 1 || b < a || v[0] == '-')
        return err_set(err, ERR_USAGE, "--events must be A-B or A with 1 <= A <= B (got '%s')", v);
    *first = a;
    *last = b;
    return 0;
}

typedef struct VizArgs {
    const char *trace;  /* --trace FILE: replay it instead of running */
    size_t first, last; /* 1-based; last 0: to the end */
    int plain;          /* text frames even on a terminal */
    char **rest;        /* train's flags */
    int nrest;
} VizArgs;

/* Takes viz's own flags out; returns 1 for --help. */
static int viz_args_parse(VizArgs *v, int argc, char **argv, Err *err) {
    v->rest = malloc(((size_t)argc + 1) * sizeof *v->rest);
    if (!v->rest) return err_set(err, ERR_NOMEM, "out of memory");
    for (int i = 0; i < argc; i++) {
        if (!strcmp(argv[i], "--help") || !strcmp(argv[i], "-h")) return 1;
        if (!strcmp(argv[i], "--plain")) {
            v->plain = 1;
            continue;
        }
        if (!strcmp(argv[i], "--trace")) {
            if (i + 1 >= argc) return err_set(err, ERR_USAGE, "--trace needs a file");
            v->trace = argv[++i];
            continue;
        }
        if (!strcmp(argv[i], "--events")) {
            if (i + 1 >= argc) return err_set(err, ERR_USAGE, "--events needs a value (A-B)");
            int rc = parse_events(argv[++i], &v->first, &v->last, err);
            if (rc) return rc;
            continue;
        }
        v->rest[v->nrest++] = argv[i];
    }
    if (v->trace && v->nrest)
        return err_set(err, ERR_USAGE,
                       "--trace replays a recorded run, whose flags come from the file (got %s)",
                       v->rest[0]);
    return 0;
}

static int viz_print(const TrainRun *t, const Trace *trace, const VizArgs *v, Err *err) {
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

/* Runs the job's steps on the simulated cluster with the trace on. */
static int viz_record(TrainRun *t, ClusterResult *res, Err *err) {
    TrainArgs *a = &t->args;
    TrainJob job = {.model = &t->model,
                    .data = &t->data,
                    .plan = &t->plan,
                    .cfg = &a->fsdp,
                    .steps = a->steps,
                    .memory = t->memory,
                    .init_from = t->args.init_from};
    ClusterOptions opt = cluster_options(t, 1);
    int rc = values_alloc(t, &job, err);
    if (!rc) rc = run_ranks(t, &opt, &job, res, err);
    if (!rc) values_to_trace(&job, t->model.total_numel, &res->trace);
    free(job.step_params);
    free(job.step_grads);
    return rc;
}

/* The side-by-side view's peer: the same flags under DDP, run the first time it is asked for. */
typedef struct DdpPeer {
    const TrainArgs *args; /* the viewed run's */
    TrainRun run;
    ClusterResult res;
    int state; /* 0 not run, 1 ready, -1 failed (msg says why) */
    char msg[512];
} DdpPeer;

/* DDP keeps every parameter, gradient and both Adam moments on every rank: refuse a run this
 * machine cannot hold rather than swap it to a halt. */
static int ddp_peer_fits(const TrainRun *t, Err *err) {
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
    d->run.args.trace_out = d->run.args.dump_params = NULL;
    int rc = train_prepare(&d->run, err);
    if (!rc) rc = ddp_peer_fits(&d->run, err);
    if (!rc) rc = viz_record(&d->run, &d->res, err);
    return rc;
}

static int ddp_peer_load(void *user, const Trace **t, const Plan **p, Err *err) {
    DdpPeer *d = user;
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

static void ddp_peer_free(DdpPeer *d) {
    if (d->state == 0) return;
    cluster_result_free(&d->res);
    train_cleanup(&d->run);
}

/* The viewer on a terminal; text frames when piped, asked for, or a range was given. */
static int viz_wants_viewer(const VizArgs *v) {
    return !v->plain && !v->first && isatty(STDOUT_FILENO) && isatty(STDIN_FILENO);
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
    rc = plan_prepare(t, err);
    return rc ? rc : trace_matches_plan(t, trace, meta, path, err);
}

static int viz_replay(TrainRun *t, const VizArgs *v, Err *err) {
    Trace trace;
    TraceMeta meta;
    int rc = trace_file_read(v->trace, &trace, &meta, err);
    if (!rc) rc = replay_prepare(t, &trace, &meta, v->trace, err);
    if (!rc)
        rc = viz_wants_viewer(v) ? tui_run(&trace, &t->plan, NULL, err)
                                 : viz_print(t, &trace, v, err);
    trace_free(&trace);
    trace_meta_free(&meta);
    return rc;
}

static int viz_execute(TrainRun *t, const VizArgs *v, Err *err) {
    ClusterResult res;
    int rc = viz_record(t, &res, err);
    if (!rc) rc = train_write_outputs(t, &res, err);
    int viewer = viz_wants_viewer(v);
    DdpPeer peer = {.args = &t->args};
    TuiCompare ddp = {.load = ddp_peer_load, .user = &peer};
    if (!rc)
        rc = viewer ? tui_run(&res.trace, &t->plan, &ddp, err) : viz_print(t, &res.trace, v, err);
    ddp_peer_free(&peer);
    cluster_result_free(&res);
    return rc;
}

static int cmd_viz(int argc, char **argv) {
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
    if (!rc && v.trace) {
        rc = viz_replay(&t, &v, &err);
    } else {
        if (!rc) rc = train_args_parse(&t.args, v.nrest, v.rest, &err); /* viz took --help */
        if (!rc && !t.args.steps_given) { /* one step unless asked for more */
            t.args.epochs = 0;
            t.args.steps = 1;
        }
        if (!rc) rc = train_prepare(&t, &err);
        if (!rc) rc = viz_execute(&t, &v, &err);
    }
    train_cleanup(&t);
    free(v.rest);
    return rc ? fail(rc, err.msg) : 0;
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
        snprintf(t.args.model, sizeof t.args.model, "vit-workshop");
        snprintf(t.args.profile, sizeof t.args.profile, "l4-pcie");
        t.args.hidden = hidden[i];
        t.args.ranks = 2;
        t.args.accounting_only = 1;
        if (!t.args.batch_given) t.args.fsdp.batch_size = 64; /* the ViT's default */
        rc = train_prepare(&t, err);
        if (!rc) {
            char count[32];
            printf("%sworkshop cluster: %s; vit-workshop at hidden %d: %s parameters, batch %d "
                   "per GPU\n",
                   i ? "\n" : "", t.profile->description, hidden[i],
                   with_commas(t.model.total_numel, count, sizeof count), t.args.fsdp.batch_size);
            rc = memory_compare(&t, err);
        }
        train_cleanup(&t);
    }
    return rc;
}

static int cmd_train(int argc, char **argv) {
    TrainRun t;
    memset(&t, 0, sizeof t);
    train_args_defaults(&t.args);
    Err err = {0};
    t.nflags = argc;
    t.flags = argv;
    int rc = train_args_parse(&t.args, argc, argv, &err);
    if (rc == 1) {
        train_args_help(stdout);
        return 0;
    }
    if (!rc && t.args.scenario_workshop) {
        rc = workshop_scenario(&t.args, &err);
        return rc ? fail(rc, err.msg) : 0;
    }
    if (!rc) rc = train_prepare(&t, &err);
    if (!rc && !t.args.json && t.backend_note[0]) printf("%s\n", t.backend_note);
    if (!rc && !t.args.json && t.args.resume)
        printf("resume: %s\n", t.resume[0] ? t.resume : "no checkpoint yet, from the start");
    if (!rc && !t.args.json) {
        report_config(stdout, &t.args.fsdp, t.args.model, t.args.ranks, t.profile->name);
        if (train_args_is_vit(&t.args))
            report_data(stdout, &t.data, t.args.split, &t.eval, t.eval_name, t.args.steps,
                        t.args.epochs);
        report_plan(stdout, &t.plan);
        report_ownership(stdout, &t.plan);
    }
    if (!rc && !t.args.print_plan) rc = train_execute(&t, &err);
    train_cleanup(&t);
    return rc ? fail(rc, err.msg) : 0;
}

/* ---------------------------------------------------------------- fsdp ckpt */

static int cmd_ckpt(int argc, char **argv) {
    CkptArgs a;
    Err err = {0};
    int rc = ckpt_args_parse(&a, argc, argv, &err);
    if (rc == 1) {
        ckpt_help(stdout);
        return 0;
    }
    if (!rc)
        rc = a.tool == CKPT_INSPECT ? ckpt_inspect(stdout, a.path, &err)
                                    : ckpt_consolidate(stdout, a.path, a.out, &err);
    fflush(stdout);
    return rc ? fail(rc, err.msg) : 0;
}

/* ---------------------------------------------------------------- fsdp predict */

typedef struct PredictArgs {
    const char *weights, *model, *data;
    long image; /* -1: --eval */
    int eval;
} PredictArgs;

static void predict_help(FILE *f) {
    fputs("usage: ./fsdp predict --weights FILE.safetensors (--image N | --eval) [--model M]\n"
          "                      [--data DIR]\n"
          "Classifies FashionMNIST test image N (0 to 9999) with trained weights, or reports\n"
          "the accuracy on all 10,000 test images. The architecture comes from the file's\n"
          "__metadata__ (written by train --save-full and ckpt consolidate), or from --model\n"
          "vit-tiny|vit-workshop for a file without one (one exported from PyTorch).\n",
          f);
}

static int predict_args_parse(PredictArgs *a, int argc, char **argv, Err *err) {
    *a = (PredictArgs){.image = -1};
    for (int i = 0; i < argc; i++) {
        const char *f = argv[i];
        if (!strcmp(f, "--help") || !strcmp(f, "-h")) return 1;
        if (!strcmp(f, "--eval")) {
            a->eval = 1;
            continue;
        }
        if (i + 1 >= argc)
            return err_set(err, ERR_USAGE, "%s needs a value (see ./fsdp predict --help)", f);
        const char *v = argv[++i];
        char *end;
        if (!strcmp(f, "--weights")) {
            a->weights = v;
        } else if (!strcmp(f, "--model")) {
            a->model = v;
        } else if (!strcmp(f, "--data")) {
            a->data = v;
        } else if (!strcmp(f, "--image")) {
            a->image = strtol(v, &end, 10);
            if (end == v || *end || a->image < 0)
                return err_set(err, ERR_USAGE, "--image must be a test image number (got '%s')", v);
        } else {
            return err_set(err, ERR_USAGE, "unknown flag %s (see ./fsdp predict --help)", f);
        }
    }
    if (!a->weights) return err_set(err, ERR_USAGE, "predict needs --weights FILE.safetensors");
    if ((a->image >= 0) == a->eval)
        return err_set(err, ERR_USAGE, "predict needs --image N or --eval (one of them)");
    return 0;
}

/* The ViT's shape: --model's preset, else the file's __metadata__. */
static int predict_config(const PredictArgs *a, VitConfig *c, Err *err) {
    if (a->model) {
        if (vit_preset(a->model, c))
            return err_set(err, ERR_USAGE, "--model must be vit-tiny or vit-workshop (got '%s')",
                           a->model);
        return 0;
    }
    SafeTensors st;
    int rc = st_open(&st, a->weights, err);
    if (rc) return rc == ERR_IO ? ERR_USAGE : rc;
    const char *keys[] = {"image", "patch", "layers", "heads", "hidden", "mlp", "classes"};
    int *fields[] = {&c->image, &c->patch, &c->layers, &c->heads, &c->hidden, &c->mlp, &c->classes};
    for (int i = 0; !rc && i < 7; i++) {
        const char *v = st_metadata(&st, keys[i]);
        char *end;
        long x = v ? strtol(v, &end, 10) : 0;
        if (!v)
            rc = err_set(err, ERR_USAGE,
                         "%s has no model configuration in __metadata__ (a file from PyTorch?): "
                         "give --model",
                         a->weights);
        else if (end == v || *end || x < 1 || x > 1 << 20)
            rc = err_set(err, ERR_USAGE, "%s: __metadata__ %s is not a size (got '%s')", a->weights,
                         keys[i], v);
        else
            *fields[i] = (int)x;
    }
    st_free(&st);
    return rc;
}

static int predict_run(const PredictArgs *a, Err *err) {
    VitConfig c;
    ModelDesc m = {0};
    Dataset data = {0};
    Plan plan = {0};
    int rc = predict_config(a, &c, err);
    if (!rc) rc = vit_model_create(&m, &c, err);
    if (!rc) { /* checks every name and shape before any rank starts */
        WeightsFile *w;
        if (!(rc = weights_open(&w, &m, a->weights, err))) weights_close(w);
    }
    if (!rc) rc = mnist_load(&data, a->data ? a->data : MNIST_DEFAULT_DIR, "test", err);
    if (!rc && a->image >= data.n)
        rc = err_set(err, ERR_USAGE, "--image %ld: the test split has images 0 to %ld", a->image,
                     data.n - 1);
    if (!rc) rc = plan_create(&plan, &m, (WrapPolicy){WRAP_LAYER, 0}, STRAT_ZERO3, 1, 1, err);
    PredictJob job = {
        .model = &m, .plan = &plan, .data = &data, .weights = a->weights, .image = a->image};
    ClusterOptions opt = {.ranks = 1, .replicas = 1, .profile = profile_default()};
    ClusterResult res = {0};
    if (!rc) rc = cluster_run(&opt, predict_rank, &job, &res, err);
    if (!rc && a->image >= 0)
        printf("Predicted: %d (%s), Actual: %d (%s)\n", job.predicted,
               fashion_class_name(job.predicted), data.labels[a->image],
               fashion_class_name(data.labels[a->image]));
    if (!rc && a->eval)
        printf("test accuracy: %.2f%% (%ld/%ld), loss %.4f\n",
               100.0 * (double)job.correct / (double)data.n, job.correct, data.n, job.loss);
    cluster_result_free(&res);
    plan_free(&plan);
    dataset_free(&data);
    model_desc_free(&m);
    return rc;
}

static int cmd_predict(int argc, char **argv) {
    PredictArgs a;
    Err err = {0};
    int rc = predict_args_parse(&a, argc, argv, &err);
    if (rc == 1) {
        predict_help(stdout);
        return 0;
    }
    if (!rc) rc = predict_run(&a, &err);
    fflush(stdout);
    return rc ? fail(rc, err.msg) : 0;
}

int main(int argc, char **argv) {
    if (argc < 2) {
        usage(stderr);
        return 2;
    }
    const char *cmd = argv[1];
    if (!strcmp(cmd, "--help") || !strcmp(cmd, "-h") || !strcmp(cmd, "help")) {
        usage(stdout);
        return 0;
    }
    if (!strcmp(cmd, "train")) return cmd_train(argc - 2, argv + 2);
    if (!strcmp(cmd, "viz")) return cmd_viz(argc - 2, argv + 2);
    if (!strcmp(cmd, "ckpt")) return cmd_ckpt(argc - 2, argv + 2);
    if (!strcmp(cmd, "predict")) return cmd_predict(argc - 2, argv + 2);
    if (!strcmp(cmd, "plan")) return plan_command(argc - 2, argv + 2);
    if (!strcmp(cmd, "lessons")) return lessons_command(argc - 2, argv + 2);
    if (!strcmp(cmd, "launch")) return launch_command(argc - 2, argv + 2);
    fprintf(stderr, "fsdp: unknown command '%s' (see ./fsdp --help)\n", cmd);
    return 2;
}
