/* planner: the engine behind `fsdp plan`: the engine's own schedule run accounting-only on the
 * simulated cluster, ranks that would do exactly the same run once. */
#include "sim/planner.h"

#include <stdlib.h>
#include <string.h>

#include "engine/trace.h"
#include "sim/cluster.h"

/* ---------------------------------------------------------------- representatives */

/* What decides everything a rank does in an accounting-only run: the elements of each unit's
 * parameters, gradients and optimizer moments it keeps. Rank 0 also reports values, so it is
 * always its own representative. */
static void signature(const Plan *p, int r, size_t *sig) {
    for (int u = 0; u < p->nunits; u++) {
        sig[3 * u] = plan_param_numel(p, u, r);
        sig[3 * u + 1] = plan_grad_numel(p, u, r);
        sig[3 * u + 2] = plan_optim_numel(p, u, r);
    }
}

int planner_representatives(const Plan *p, int *rep, Err *err) {
    size_t len = 3 * (size_t)p->nunits;
    /* the distinct signatures found so far, and the rank that showed each first */
    size_t *sigs = malloc((size_t)p->world * len * sizeof *sigs + 1);
    size_t *mine = malloc(len * sizeof *mine + 1);
    int *owner = malloc((size_t)p->world * sizeof *owner);
    if (!sigs || !mine || !owner) {
        free(sigs), free(mine), free(owner);
        return err_set(err, ERR_NOMEM, "out of memory planning %d GPUs", p->world);
    }
    int distinct = 0, running = 0;
    for (int r = 0; r < p->world; r++) {
        signature(p, r, mine);
        int found = -1;
        for (int d = 0; r > 0 && d < distinct && found < 0; d++)
            if (owner[d] != 0 && !memcmp(sigs + (size_t)d * len, mine, len * sizeof *mine))
                found = owner[d];
        if (found >= 0) {
            rep[r] = found;
            continue;
        }
        memcpy(sigs + (size_t)distinct * len, mine, len * sizeof *mine);
        owner[distinct++] = r;
        rep[r] = r;
        running++;
    }
    free(sigs), free(mine), free(owner);
    return running;
}

size_t planner_rest_total(const RankMemory *m) {
    size_t total = 0;
    for (int c = 0; c < MEM_CATEGORY_COUNT; c++)
        if (c != MEM_COMPUTE_COPY) total += m->rest[c];
    return total;
}

/* ---------------------------------------------------------------- the run */

/* A data set of `n` samples of the model's input shape: accounting-only runs read none of
 * it (the ViT stages nothing onto a device that stores nothing) and name only sample 0 (no
 * sampler), so every image is one blank image's bytes and the toy's scalars are one zero
 * input and one zero target, whatever n is. */
int planner_blank_dataset(Dataset *d, const ModelDesc *m, long n, Err *err) {
    static const uint8_t blank[28 * 28 + 1];
    memset(d, 0, sizeof *d);
    d->n = n;
    d->in_elems = d->target_elems = 1;
    if (!strcmp(m->name, "vit")) {
        d->in_elems = 28 * 28; /* FashionMNIST's */
        d->rows = d->cols = 28;
        d->classes = 10;
        d->pixels = blank;
        d->labels = blank;
        return 0;
    }
    float *zeros = calloc(2, sizeof(float));
    if (!zeros) return err_set(err, ERR_NOMEM, "out of memory for a blank sample");
    d->owned = zeros;
    d->inputs = zeros;
    d->targets = zeros + 1;
    return 0;
}

/* The top rank's last step from its trace: busy time per stream and each kind of
 * collective's calls and bytes. */
static void read_step(const Trace *t, int rank, int step, PlannerResult *out) {
    double first = -1, last = 0;
    for (size_t i = 0; i < t->n; i++) {
        const TraceEvent *e = &t->ev[i];
        if (e->rank != rank || e->step != step) continue;
        if (e->kind == EV_ALLOC || e->kind == EV_FREE) continue;
        if (first < 0 || e->start < first) first = e->start;
        if (e->end > last) last = e->end;
        double busy = e->end - e->start;
        if (e->stream == STREAM_COMPUTE) out->compute_time += busy;
        if (e->stream == STREAM_COMM) out->comm_time += busy;
        if (e->stream == STREAM_COPY) out->copy_time += busy;
        if (e->kind < EV_ALL_GATHER || e->kind > EV_BARRIER) continue;
        CollKind k = (CollKind)(e->kind - EV_ALL_GATHER);
        PlannerTraffic *tr = &out->traffic[k];
        tr->calls += 1;
        tr->buffer_bytes += (double)e->bytes;
        tr->sent_bytes += cost_sent_bytes(k, (double)e->bytes, e->peers);
    }
    out->step_time = first < 0 ? 0 : last - first;
    double waiting = out->step_time - out->compute_time;
    out->waiting = waiting > 0 ? waiting : 0;
    for (int k = 0; k < COLL_KIND_COUNT; k++)
        out->traffic[k].total_sent = out->traffic[k].sent_bytes * out->gpus;
}

static int top_rank(const PlannerResult *r) {
    int top = 0;
    for (int q = 1; q < r->gpus; q++)
        if (r->memory[q].on_gpu.peak > r->memory[top].on_gpu.peak) top = q;
    return top;
}

int planner_run(const PlannerJob *job, PlannerResult *out, Err *err) {
    memset(out, 0, sizeof *out);
    long samples = (long)job->cfg.batch_size * job->cfg.grad_accum;
    if (samples > PLANNER_MAX_GPU_SAMPLES)
        return err_set(err, ERR_USAGE,
                       "--batch-size %d x --grad-accum %d = %ld samples per GPU a step; a plan "
                       "holds at most %ld",
                       job->cfg.batch_size, job->cfg.grad_accum, samples, PLANNER_MAX_GPU_SAMPLES);
    const Plan *p = job->plan;
    int n = p->world;
    long steps = job->steps > 0 ? job->steps : 2;
    out->gpus = n;
    int *rep = malloc((size_t)n * sizeof *rep);
    unsigned char *runs = calloc((size_t)n, 1);
    out->memory = calloc((size_t)n, sizeof *out->memory);
    if (!rep || !runs || !out->memory) {
        free(rep), free(runs);
        return err_set(err, ERR_NOMEM, "out of memory planning %d GPUs", n);
    }
    int rc = 0;
    int count = planner_representatives(p, rep, err);
    if (count < 0) rc = err->code;
    for (int r = 0; !rc && r < n; r++) runs[r] = rep[r] == r;
    out->representatives = count;
    Dataset data = {0};
    long global = (long)n * job->cfg.batch_size * job->cfg.grad_accum;
    if (!rc) rc = planner_blank_dataset(&data, job->model, global, err);
    ClusterOptions opt = {.ranks = n,
                          .replicas = p->strategy == STRAT_HSDP ? p->replicas : 1,
                          .profile = job->profile,
                          .trace = 1,
                          .accounting_only = 1,
                          .run_rank = runs};
    TrainJob tj = {.model = job->model,
                   .data = &data,
                   .plan = p,
                   .cfg = &job->cfg,
                   .steps = steps,
                   .log_every = 1, /* the loss all-reduce a training run does each step */
                   .no_sampler = 1,
                   .memory = out->memory};
    ClusterResult res = {0};
    if (!rc) rc = cluster_run(&opt, train_rank, &tj, &res, err);
    if (!rc) {
        for (int r = 0; r < n; r++) out->memory[r] = out->memory[rep[r]];
        out->top = top_rank(out);
        read_step(&res.trace, rep[out->top], (int)steps - 1, out);
    }
    cluster_result_free(&res);
    if (data.owned) dataset_free(&data);
    free(rep);
    free(runs);
    if (rc) planner_result_free(out);
    return rc;
}

void planner_result_free(PlannerResult *r) {
    free(r->memory);
    r->memory = NULL;
}
