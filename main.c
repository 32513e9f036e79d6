/* main: the `fsdp` command. Parses the subcommand, wires the engine (core/) to a backend
 * (the simulated cluster in sim/; the GPUs in runtime/ in a later issue), prints what the
 * user asked for and maps errors to exit codes: 2 for bad input, 1 for failures. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "core/cli.h"
#include "core/report.h"
#include "core/toy.h"
#include "core/train.h"
#include "sim/cluster.h"
#include "sim/cost.h"

static void usage(FILE *f) {
    fputs("usage: ./fsdp <command> [flags]\n"
          "\n"
          "commands\n"
          "  train     train a model with FSDP on a simulated cluster (./fsdp train --help)\n"
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

typedef struct Printer {
    int json;
    int fp16;
} Printer;

static void print_step(void *user, const StepReport *r) {
    Printer *p = user;
    if (p->json)
        report_step_json(stdout, r);
    else
        report_step_text(stdout, r, p->fp16);
    fflush(stdout);
}

typedef struct TrainRun {
    TrainArgs args;
    const Profile *profile;
    ModelDesc model;
    Dataset data;
    Plan plan;
    OutFile dump, trace;
    RankMemory *memory;
    float *params;
} TrainRun;

static int train_prepare(TrainRun *t, Err *err) {
    TrainArgs *a = &t->args;
    t->profile = profile_find(a->profile);
    if (!t->profile)
        return err_set(err, ERR_USAGE, "--profile must be one of %s (got '%s')", profile_names(),
                       a->profile);
    int rc = toy_model_create(&t->model, err);
    if (!rc) rc = toy_dataset_create(&t->data, err);
    if (!rc)
        rc = plan_create(&t->plan, &t->model, a->fsdp.wrap, a->fsdp.strategy, a->ranks,
                         a->fsdp.replicas, err);
    if (rc) return rc;
    long global = (long)a->ranks * a->fsdp.batch_size * a->fsdp.grad_accum;
    if (global > t->data.n)
        return err_set(err, ERR_USAGE,
                       "--batch-size %d x --ranks %d x --grad-accum %d = %ld samples a step, "
                       "more than the data set's %ld",
                       a->fsdp.batch_size, a->ranks, a->fsdp.grad_accum, global, t->data.n);
    t->memory = calloc((size_t)a->ranks, sizeof *t->memory);
    t->params = calloc(t->model.total_numel + 1, sizeof(float));
    if (!t->memory || !t->params) return err_set(err, ERR_NOMEM, "out of memory");
    if ((rc = out_open(&t->dump, a->dump_params, err))) return rc;
    return out_open(&t->trace, a->trace_out, err);
}

static int train_write_outputs(TrainRun *t, const ClusterResult *res, Err *err) {
    int rc = 0;
    if (t->dump.f) rc = report_dump_params(t->dump.f, &t->model, t->params, err);
    if (!rc && t->trace.f) {
        const char *names[t->plan.nunits + 1];
        for (int u = 0; u < t->plan.nunits; u++) names[u] = t->plan.units[u].name;
        rc = trace_write_chrome(&res->trace, names, t->plan.nunits, t->trace.f, err);
    }
    if (!rc) rc = out_commit(&t->dump, err);
    if (!rc) rc = out_commit(&t->trace, err);
    return rc;
}

static int train_execute(TrainRun *t, Err *err) {
    TrainArgs *a = &t->args;
    Printer printer = {.json = a->json, .fp16 = fsdp_uses_loss_scaling(&a->fsdp)};
    long every = a->json          ? 1
                 : a->print_every ? a->print_every
                                  : (a->steps >= 10 ? a->steps / 10 : 1);
    TrainJob job = {.model = &t->model,
                    .data = &t->data,
                    .plan = &t->plan,
                    .cfg = &a->fsdp,
                    .steps = a->steps,
                    .log_every = (int)every,
                    .on_step = print_step,
                    .user = &printer,
                    .memory = t->memory,
                    .final_params = t->params};
    ClusterOptions opt = {.ranks = a->ranks,
                          .replicas = a->fsdp.strategy == STRAT_HSDP ? a->fsdp.replicas : 1,
                          .profile = t->profile,
                          .trace = a->trace_out != NULL};
    ClusterResult res;
    int rc = cluster_run(&opt, train_rank, &job, &res, err);
    if (!rc) rc = train_write_outputs(t, &res, err);
    cluster_result_free(&res);
    if (rc || a->json) return rc;
    printf("final parameters:\n");
    report_final_params(stdout, &t->model, t->params);
    if (a->memory) report_memory(stdout, &t->plan, &a->fsdp, t->memory);
    return 0;
}

static void train_cleanup(TrainRun *t) {
    out_discard(&t->dump);
    out_discard(&t->trace);
    plan_free(&t->plan);
    model_desc_free(&t->model);
    dataset_free(&t->data);
    free(t->memory);
    free(t->params);
}

static int cmd_train(int argc, char **argv) {
    TrainRun t;
    memset(&t, 0, sizeof t);
    train_args_defaults(&t.args);
    Err err = {0};
    int rc = train_args_parse(&t.args, argc, argv, &err);
    if (rc == 1) {
        train_args_help(stdout);
        return 0;
    }
    if (!rc) rc = train_prepare(&t, &err);
    if (!rc && !t.args.json) {
        report_config(stdout, &t.args.fsdp, t.args.model, t.args.ranks, t.profile->name);
        report_plan(stdout, &t.plan);
        report_ownership(stdout, &t.plan);
    }
    if (!rc && !t.args.print_plan) rc = train_execute(&t, &err);
    train_cleanup(&t);
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
    fprintf(stderr, "fsdp: unknown command '%s' (see ./fsdp --help)\n", cmd);
    return 2;
}
