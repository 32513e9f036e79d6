/* planner: the engine behind `fsdp plan`: the engine's own schedule run accounting-only on the
 * simulated cluster, ranks that would do exactly the same run once. */
#include "sim/planner.h"

#include <stdlib.h>
#include <string.h>

#include "engine/trace.h"
#include "sim/cluster.h"

/* ---------------------------------------------------------------- representatives
 *
 * Everything a rank does in an accounting-only run follows from the elements of each unit's
 * parameters, gradients and optimizer moments it keeps, and those from its shard rank alone
 * (world rank mod the shard group's size S; S is 1 where nothing is sharded). A parameter of
 * d0 rows in chunks of c = ceil(d0 / S) gives shard ranks below q = d0 / c whole chunks, rank q
 * a short one or none, and the ranks after it none: its rows change only at q and q + 1. So
 * the shard ranks fall into intervals between the change points of all parameters, each
 * keeping the same rows of everything, and only one rank per interval needs looking at: the
 * cost grows with the parameters, not with the GPUs (131,072 GPUs take as long as 8). */

static int compare_ints(const void *a, const void *b) {
    int x = *(const int *)a, y = *(const int *)b;
    return (x > y) - (x < y);
}

/* The shard ranks where some parameter's rows change, with 0, sorted and distinct; returns how
 * many. points has room for 1 + 2 x the model's parameters. */
static int change_points(const Plan *p, int *points) {
    int S = p->shard_size, n = 0;
    points[n++] = 0;
    for (int i = 0; S > 1 && i < p->model->nparams; i++) {
        size_t d0 = (size_t)p->model->params[i].shape[0];
        size_t chunk = (d0 + (size_t)S - 1) / (size_t)S;
        size_t q = chunk ? d0 / chunk : 0;
        if (q < (size_t)S) points[n++] = (int)q;
        if (q + 1 < (size_t)S) points[n++] = (int)q + 1;
    }
    qsort(points, (size_t)n, sizeof *points, compare_ints);
    int distinct = 0;
    for (int i = 0; i < n; i++)
        if (!distinct || points[i] != points[distinct - 1]) points[distinct++] = points[i];
    return distinct;
}

/* The elements of each unit's parameters, gradients and optimizer moments world rank r keeps. */
static void signature(const Plan *p, int r, size_t *sig) {
    for (int u = 0; u < p->nunits; u++) {
        sig[3 * u] = plan_param_numel(p, u, r);
        sig[3 * u + 1] = plan_grad_numel(p, u, r);
        sig[3 * u + 2] = plan_optim_numel(p, u, r);
    }
}

/* The intervals of shard ranks (starting at points[i], ending where the next starts or at S)
 * grouped by what they keep: class[i] for each, and for each class the first world rank other
 * than 0 that keeps it (first[c]; -1: rank 0 alone does). Rank 0 also reports values, so it
 * is always its own representative and stands in for nobody. Returns the classes. */
static int classify(const Plan *p, const int *points, int npoints, int *class, int *first,
                    size_t *sigs) {
    size_t len = 3 * (size_t)p->nunits;
    int S = p->shard_size, classes = 0;
    for (int i = 0; i < npoints; i++) {
        size_t *mine = sigs + (size_t)classes * len;
        signature(p, points[i], mine);
        int c = 0;
        while (c < classes && memcmp(sigs + (size_t)c * len, mine, len * sizeof *mine)) c++;
        class[i] = c;
        int end = i + 1 < npoints ? points[i + 1] : S;
        /* the interval's first rank other than 0, if the class has none yet */
        int other = points[i] ? points[i] : end > 1 ? 1 : -1;
        if (c == classes)
            first[classes++] = other;
        else if (first[c] < 0)
            first[c] = other;
    }
    /* a class only rank 0 keeps in its shard group: replica 1's rank 0 keeps it too */
    for (int c = 0; c < classes; c++)
        if (first[c] < 0 && p->world > S) first[c] = S;
    return classes;
}

int planner_representatives(const Plan *p, int *rep, Err *err) {
    size_t len = 3 * (size_t)p->nunits;
    int cap = 1 + 2 * p->model->nparams, S = p->shard_size;
    int *points = malloc((size_t)cap * sizeof *points);
    int npoints = points ? change_points(p, points) : 0;
    int *class = malloc((size_t)npoints * sizeof *class + 1);
    int *first = malloc((size_t)npoints * sizeof *first + 1);
    size_t *sigs = malloc((size_t)npoints * len * sizeof *sigs + 1); /* a class an interval */
    if (!points || !class || !first || !sigs) {
        free(points), free(class), free(first), free(sigs);
        return err_set(err, ERR_NOMEM, "out of memory planning %d GPUs", p->world);
    }
    int classes = classify(p, points, npoints, class, first, sigs);
    for (int g = 0; g < p->world / S; g++)
        for (int i = 0; i < npoints; i++) {
            int end = i + 1 < npoints ? points[i + 1] : S;
            for (int s = points[i]; s < end; s++) rep[g * S + s] = first[class[i]];
        }
    rep[0] = 0;
    int running = 1;
    for (int c = 0; c < classes; c++) running += first[c] > 0;
    free(points), free(class), free(first), free(sigs);
    return running;
}

size_t planner_rest_total(const RankMemory *m) {
    size_t total = 0;
    for (int c = 0; c < MEM_CATEGORY_COUNT; c++) total += m->rest[c];
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

/* The lowest rank with the highest GPU peak. */
static int top_rank(const PlannerResult *r) {
    int top = 0;
    for (int q = 1; q < r->gpus; q++)
        if (planner_memory(r, q)->on_gpu.peak > planner_memory(r, top)->on_gpu.peak) top = q;
    return top;
}

/* rep[r] is the rank whose figures r shares; memory_of[r] becomes the index of rep[r] among the
 * ranks that run, which record there (runs[r]: r runs). */
static void index_representatives(const int *rep, int n, int *memory_of, unsigned char *runs) {
    int next = 0;
    for (int r = 0; r < n; r++)
        if (rep[r] == r) {
            runs[r] = 1;
            memory_of[r] = next++;
        }
    for (int r = 0; r < n; r++) memory_of[r] = memory_of[rep[r]];
}

int planner_communicators(const Plan *p) {
    if (p->world <= 1) return 0;
    return p->strategy == STRAT_HSDP && p->replicas > 1 && p->shard_size > 1 ? 2 : 1;
}

int planner_run(const PlannerJob *job, PlannerResult *out, Err *err) {
    memset(out, 0, sizeof *out);
    out->communicators = planner_communicators(job->plan);
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
    out->memory_of = job->memory_only ? NULL : malloc((size_t)n * sizeof *out->memory_of);
    if (!rep || !runs || (!job->memory_only && !out->memory_of)) {
        free(rep), free(runs), free(out->memory_of);
        out->memory_of = NULL;
        return err_set(err, ERR_NOMEM, "out of memory planning %d GPUs", n);
    }
    int rc = 0;
    int count = job->memory_only ? 1 : planner_representatives(p, rep, err);
    if (count < 0) rc = err->code;
    if (!rc && job->memory_only) {
        runs[0] = 1; /* which records into memory[0], its own rank's place */
    } else if (!rc) {
        index_representatives(rep, n, out->memory_of, runs);
    }
    out->representatives = count;
    out->memory = rc ? NULL : calloc((size_t)count, sizeof *out->memory);
    if (!rc && !out->memory) rc = err_set(err, ERR_NOMEM, "out of memory planning %d GPUs", n);
    Dataset data = {0};
    long global = (long)n * job->cfg.batch_size * job->cfg.grad_accum;
    if (!rc) rc = planner_blank_dataset(&data, job->model, global, err);
    ClusterOptions opt = {.ranks = n,
                          .replicas = p->strategy == STRAT_HSDP ? p->replicas : 1,
                          .profile = job->profile,
                          .trace = !job->memory_only,
                          .accounting_only = 1,
                          .run_rank = runs};
    TrainJob tj = {.model = job->model,
                   .data = &data,
                   .plan = p,
                   .cfg = &job->cfg,
                   .steps = steps,
                   .log_every = 1, /* the loss all-reduce a training run does each step */
                   .no_sampler = 1,
                   .memory = out->memory,
                   .memory_slot = out->memory_of};
    ClusterResult res = {0};
    if (!rc) rc = cluster_run(&opt, train_rank, &tj, &res, err);
    if (!rc && !job->memory_only) {
        out->top = top_rank(out);
        read_step(&res.trace, rep[out->top], (int)steps - 1, out);
        trace_step_times(&res.trace, rep[out->top], (int)steps - 1, &out->kinds);
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
    free(r->memory_of);
    r->memory = NULL;
    r->memory_of = NULL;
}

const RankMemory *planner_memory(const PlannerResult *res, int r) {
    return &res->memory[res->memory_of ? res->memory_of[r] : 0];
}

const RankMemory *planner_top_memory(const PlannerResult *res) {
    return planner_memory(res, res->top);
}
