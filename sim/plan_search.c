/* plan_search: `fsdp plan --search`: every configuration of the knobs it searches, the largest
 * batch each fits, the fastest few by modelled throughput. How it prunes is in docs/plan.md. */
#include "sim/plan_search.h"

#include <stdlib.h>
#include <string.h>

enum {
    MAX_BATCH = 1 << 20, /* train's --batch-size bound */
    MAX_ACCUM = 4096,    /* train's --grad-accum bound */
    MAX_REPLICAS = 16,   /* hsdp replica counts tried */
    ESTIMATES = 3,       /* probes placed by the line before the batch search bisects */
};

/* One configuration: the knobs set, and what the memory phase found. */
typedef struct Candidate {
    FsdpConfig cfg;
    int family; /* strategy, replicas, wrap and resharding: what dominance compares within */
    int fits;   /* at batch 1 (at the given batch) */
    int dominated;
} Candidate;

typedef struct Search {
    const PlanSearchJob *job;
    PlanSearchResult *out;
    Candidate *c;
    int n, cap;
    int top;
} Search;

/* ---------------------------------------------------------------- the configurations */

int plan_search_replicas(int gpus, int per_node, int *replicas, int cap) {
    int n = 0;
    if (per_node < 1) per_node = 1;
    if (gpus <= per_node) { /* one node: shard groups of every size that divides it */
        for (int s = 2; s < gpus && n < cap; s++)
            if (gpus % s == 0) replicas[n++] = gpus / s;
        return n;
    }
    int nodes = gpus / per_node, k = 0;
    int sizes[32]; /* nodes a shard group spans: powers of two that divide the nodes */
    for (int g = 1; g < nodes; g *= 2)
        if (nodes % g == 0) sizes[k++] = g;
    int step = k > 7 ? 2 : 1; /* every other one: 1, 4, 16, ... nodes */
    for (int i = 0; i < k && n < cap; i += step) replicas[n++] = nodes / sizes[i];
    return n;
}

static int model_blocks(const ModelDesc *m) {
    int blocks = 0;
    for (int i = 0; i < m->nmodules; i++) blocks += m->modules[i].is_block != 0;
    return blocks;
}

/* The offload tiers a strategy takes (train refuses cpu and nvme without sharded state, and
 * under DeepSpeed's layout), cheapest first; the given one alone where it is fixed. */
static int offload_tiers(const PlanSearchJob *job, Strategy s, OffloadKind *tiers) {
    int sharded = s == STRAT_ZERO2 || s == STRAT_ZERO3 || s == STRAT_HSDP;
    int host_state = sharded && job->base.layout == LAYOUT_FSDP; /* cpu and nvme allowed */
    if (job->fixed & SEARCH_FIX_OFFLOAD) {
        OffloadKind k = job->base.offload;
        tiers[0] = k;
        return k == OFFLOAD_CPU || k == OFFLOAD_NVME ? host_state : 1;
    }
    int n = 0;
    tiers[n++] = OFFLOAD_NONE;
    tiers[n++] = OFFLOAD_OPTIMIZER;
    if (host_state) tiers[n++] = OFFLOAD_CPU;
    if (host_state && job->with_nvme) tiers[n++] = OFFLOAD_NVME;
    return n;
}

/* A choice of activation checkpointing: which blocks, and what each keeps. */
typedef struct AcChoice {
    int every;
    AcPolicy policy;
} AcChoice;

/* Activation checkpointing (where the model has blocks): off, every 2nd block, every block
 * keeping its GEMMs' outputs, every block. */
static int ac_choices(const PlanSearchJob *job, AcChoice *ac) {
    if (job->fixed & SEARCH_FIX_AC) {
        ac[0] = (AcChoice){job->base.ac_every, job->base.ac_policy};
        return 1;
    }
    /* a model without a checkpointed forward (the toy) keeps its inputs anyway */
    int blocks = job->model->ops && job->model->ops->checkpoint ? model_blocks(job->model) : 0;
    int n = 0;
    ac[n++] = (AcChoice){0, AC_BLOCK};
    if (blocks >= 4) ac[n++] = (AcChoice){2, AC_BLOCK};
    if (blocks) ac[n++] = (AcChoice){1, AC_OPS};
    if (blocks) ac[n++] = (AcChoice){1, AC_BLOCK};
    return n;
}

static int add(Search *s, const FsdpConfig *cfg, int family, Err *err) {
    if (s->n == s->cap) {
        int cap = s->cap ? 2 * s->cap : 256;
        Candidate *c = realloc(s->c, (size_t)cap * sizeof *c);
        if (!c) return err_set(err, ERR_NOMEM, "out of memory listing configurations");
        s->c = c;
        s->cap = cap;
    }
    s->c[s->n++] = (Candidate){.cfg = *cfg, .family = family};
    return 0;
}

/* Every variant of one family (strategy, replicas, wrap, resharding): offload tier x parameter
 * dtype (bf16 or fp32, reducing in fp32) x activation checkpointing. */
static int add_family(Search *s, FsdpConfig cfg, int family, Err *err) {
    const PlanSearchJob *job = s->job;
    OffloadKind tiers[4];
    int ntiers = offload_tiers(job, cfg.strategy, tiers);
    AcChoice ac[4];
    int nac = ac_choices(job, ac);
    int fixed_dtype = (job->fixed & SEARCH_FIX_DTYPE) != 0;
    static const DType dtypes[] = {DTYPE_BF16, DTYPE_FP32};
    int rc = 0;
    for (int t = 0; !rc && t < ntiers; t++)
        for (int d = 0; !rc && d < (fixed_dtype ? 1 : 2); d++)
            for (int a = 0; !rc && a < nac; a++) {
                cfg.offload = tiers[t];
                if (!fixed_dtype) {
                    cfg.param_dtype = dtypes[d];
                    cfg.reduce_dtype = DTYPE_FP32;
                }
                cfg.ac_every = ac[a].every;
                cfg.ac_policy = ac[a].policy;
                rc = add(s, &cfg, family, err);
            }
    return rc;
}

/* The wrap policies: layer, block:2, block:4 (where the model has more blocks than that). */
static int wrap_choices(const PlanSearchJob *job, WrapPolicy *wraps) {
    if (job->fixed & SEARCH_FIX_WRAP) {
        wraps[0] = job->base.wrap;
        return 1;
    }
    int blocks = model_blocks(job->model), n = 0;
    wraps[n++] = (WrapPolicy){.kind = WRAP_LAYER};
    for (int k = 2; k <= 4; k *= 2)
        if (blocks > k) wraps[n++] = (WrapPolicy){WRAP_BLOCK, k};
    return n;
}

/* A strategy's replica counts (1 but for hsdp) and resharding choices. */
static int replica_choices(const PlanSearchJob *job, Strategy st, int *replicas) {
    if (st != STRAT_HSDP) {
        replicas[0] = 1;
        return 1;
    }
    if (job->fixed & SEARCH_FIX_REPLICAS) {
        replicas[0] = job->base.replicas;
        return 1;
    }
    return plan_search_replicas(job->gpus, job->profile->gpus_per_node, replicas, MAX_REPLICAS);
}

static int reshard_choices(const PlanSearchJob *job, Strategy st, int *reshard) {
    if (job->fixed & SEARCH_FIX_RESHARD) {
        reshard[0] = job->base.reshard_after_forward;
        return 1;
    }
    reshard[0] = -1; /* the strategy's own: zero3 reshards (without, it is zero2) */
    if (st != STRAT_HSDP) return 1;
    reshard[0] = 1, reshard[1] = 0; /* hsdp can do either */
    return 2;
}

static int enumerate(Search *s, Err *err) {
    const PlanSearchJob *job = s->job;
    WrapPolicy wraps[3];
    int nwraps = wrap_choices(job, wraps), family = 0, rc = 0;
    for (int st = 0; !rc && st < STRAT_COUNT; st++) {
        int fixed = (job->fixed & SEARCH_FIX_STRATEGY) != 0;
        if (fixed ? st != (int)job->base.strategy : job->gpus == 1 && st != STRAT_DDP)
            continue; /* one GPU shards nothing: ddp alone */
        int replicas[MAX_REPLICAS], reshard[2];
        int nr = replica_choices(job, (Strategy)st, replicas);
        int nre = reshard_choices(job, (Strategy)st, reshard);
        for (int r = 0; !rc && r < nr; r++)
            for (int w = 0; !rc && w < nwraps; w++)
                for (int x = 0; !rc && x < nre; x++) {
                    FsdpConfig cfg = job->base;
                    cfg.strategy = (Strategy)st;
                    cfg.replicas = replicas[r];
                    cfg.wrap = wraps[w];
                    cfg.reshard_after_forward = reshard[x];
                    rc = add_family(s, cfg, family++, err);
                }
    }
    s->out->configs = s->n;
    return rc;
}

/* ---------------------------------------------------------------- memory: the batch */

/* The fullest GPU's peak for cfg at micro-batch b and `accum` micro-steps, memory only. */
static int peak_at(Search *s, const Plan *p, FsdpConfig cfg, int b, int accum, size_t *peak,
                   Err *err) {
    cfg.batch_size = b;
    cfg.grad_accum = accum;
    PlannerJob j = {.model = s->job->model,
                    .plan = p,
                    .cfg = cfg,
                    .profile = s->job->profile,
                    .memory_only = 1};
    PlannerResult r;
    int rc = planner_run(&j, &r, err);
    if (rc) return rc;
    *peak = planner_top_memory(&r)->on_gpu.peak;
    planner_result_free(&r);
    s->out->probes++;
    return 0;
}

/* A tensor peak fits with what the GPU holds beside it (cost_usable_bytes), for a plan of
 * `communicators` (planner_communicators). */
static int fits_with(const Search *s, int communicators, size_t peak) {
    return (double)peak <= cost_usable_bytes(s->job->profile, communicators);
}

static int fits(const Search *s, const Plan *p, size_t peak) {
    return fits_with(s, planner_communicators(p), peak);
}

/* Where the line through (a, pa) and (b, pb) reaches the GPU's size, clamped into (lo, hi). */
static int line_estimate(const Search *s, const Plan *p, int a, size_t pa, int b, size_t pb, int lo,
                         int hi) {
    double slope = ((double)pb - (double)pa) / (double)(b - a);
    double room = cost_usable_bytes(s->job->profile, planner_communicators(p));
    double at = slope > 0 ? b + (room - (double)pb) / slope : 2.0 * hi;
    long est = at < (double)hi ? (long)at : hi - 1;
    if (est <= lo) est = lo + 1;
    if (est >= hi) est = hi - 1;
    return (int)est;
}

/* The largest micro-batch from 1 to cap that fits at `accum` micro-steps (0: none); its peak at
 * *peak. A GPU's peak grows with the batch as the largest of affine functions (each point of the
 * schedule holds fixed bytes plus activations in proportion to the batch): a convex function.
 * So the line through the two largest batches known to fit, extrapolated to the GPU's size, is
 * at or past the answer, and the line between a batch that fits and one that does not is at or
 * under it. Batches 1 and 2, where the first line meets the GPU's size and the batch after it:
 * four probes where doubling and bisecting up to a million would be forty. Where estimates miss
 * (a peak that moves to another point of the schedule), it bisects. */
static int largest_batch(Search *s, const Plan *p, const FsdpConfig *cfg, int accum, int cap,
                         int *out, size_t *peak, Err *err) {
    int lo = 0, hi = cap + 1, a = 0, tries = 0, last_fit = 1, check_next = 0;
    size_t plo = 0, pa = 0, phi = 0, pb;
    *out = 0;
    *peak = 0;
    while (hi - lo > 1) {
        int b;
        if (lo < 2)
            b = lo + 1; /* 1, then 2 */
        else if (check_next)
            b = lo + 1;
        else if (tries++ < ESTIMATES)
            b = last_fit ? line_estimate(s, p, a, pa, lo, plo, lo, hi) /* at or past the answer */
                         : line_estimate(s, p, lo, plo, hi, phi, lo, hi); /* at or under it */
        else
            b = lo + (hi - lo) / 2;
        int rc = peak_at(s, p, *cfg, b, accum, &pb, err);
        if (rc) return rc;
        /* after an estimate from above fits, the batch after it decides */
        check_next = !check_next && lo >= 2 && last_fit && fits(s, p, pb);
        last_fit = fits(s, p, pb);
        if (!last_fit) {
            hi = b, phi = pb;
            continue;
        }
        a = lo, pa = plo;
        lo = b, plo = pb;
    }
    *out = lo;
    *peak = plo;
    return 0;
}

/* The micro-batch of a global batch: the largest divisor of each GPU's share that fits, with
 * the share / it micro-steps (0: none fits within MAX_ACCUM micro-steps). */
static int global_micro_batch(Search *s, const Plan *p, const FsdpConfig *cfg, long share,
                              int *micro, size_t *peak, Err *err) {
    int cap = share < MAX_BATCH ? (int)share : MAX_BATCH, largest;
    int rc = largest_batch(s, p, cfg, 1, cap, &largest, peak, err);
    *micro = 0;
    for (int b = largest; !rc && b >= 1 && share / b <= MAX_ACCUM; b--) {
        if (share % b) continue;
        if (share / b == 1) { /* the peak found is this one's */
            *micro = b;
            break;
        }
        /* accumulating keeps gradients between micro-steps: check the peak with them */
        rc = peak_at(s, p, *cfg, b, (int)(share / b), peak, err);
        if (!rc && fits(s, p, *peak)) {
            *micro = b;
            break;
        }
    }
    return rc;
}

/* The bytes every GPU keeps at rest on the device, from the plan's formula: a configuration
 * over the GPU before a step starts needs no probe. */
static int rest_fits(const Search *s, const Plan *p, const FsdpConfig *cfg) {
    RestBytes b = plan_rest_bytes(p, 0, cfg->offload);
    return fits(s, p, b.param + b.grad + b.optim);
}

/* Sets c's batch (and micro-steps) to the largest that fits, or the given one, or the micro-batch
 * of the global batch; c->fits says whether any does. */
static int size_batch(Search *s, Candidate *c, Err *err) {
    const PlanSearchJob *job = s->job;
    Plan p;
    int rc = fsdp_plan_create(&p, job->model, &c->cfg, job->gpus, err);
    if (rc) return rc;
    int accum = c->cfg.grad_accum > 0 ? c->cfg.grad_accum : 1, batch = 0;
    size_t peak = 0;
    if (!rest_fits(s, &p, &c->cfg)) {
        batch = 0;
    } else if (job->global_batch) {
        rc = global_micro_batch(s, &p, &c->cfg, job->global_batch / job->gpus, &batch, &peak, err);
        if (batch) accum = (int)(job->global_batch / job->gpus / batch);
    } else if (job->batch) {
        rc = peak_at(s, &p, c->cfg, job->batch, accum, &peak, err);
        batch = !rc && fits(s, &p, peak) ? job->batch : 0;
    } else {
        long cap = PLANNER_MAX_GPU_SAMPLES / accum;
        rc = largest_batch(s, &p, &c->cfg, accum, cap < MAX_BATCH ? (int)cap : MAX_BATCH, &batch,
                           &peak, err);
    }
    plan_free(&p);
    c->fits = batch > 0;
    c->cfg.batch_size = batch > 0 ? batch : 1;
    c->cfg.grad_accum = accum;
    return rc;
}

/* ---------------------------------------------------------------- dominance */

/* What a variant costs per sample beyond its family's cheapest, knob by knob: more offload
 * moves more bytes over PCIe, more checkpointing recomputes more, fp32 runs the math at fp32's
 * rate and gathers twice the bytes. */
static int offload_cost(OffloadKind k) {
    return k == OFFLOAD_NONE ? 0 : k == OFFLOAD_OPTIMIZER ? 1 : k == OFFLOAD_CPU ? 2 : 3;
}

/* Every block keeping its GEMMs' outputs recomputes three of seven GEMMs and no attention,
 * every 2nd block all of half: neither is cheaper than the other. */
static int ac_cost(const FsdpConfig *c) {
    if (c->ac_every == 0) return 0;
    return c->ac_every == 1 && c->ac_policy == AC_BLOCK ? 2 : 1;
}

/* 1 if x costs no more than y in every knob and less in one. */
static int cheaper(const FsdpConfig *x, const FsdpConfig *y) {
    int dx[3] = {offload_cost(x->offload), ac_cost(x), x->param_dtype == DTYPE_FP32};
    int dy[3] = {offload_cost(y->offload), ac_cost(y), y->param_dtype == DTYPE_FP32};
    int less = 0;
    for (int i = 0; i < 3; i++) {
        if (dx[i] > dy[i]) return 0;
        less |= dx[i] < dy[i];
    }
    return less;
}

/* A variant that fits no larger a batch (micro-batch) than a cheaper one of its family does the
 * same work with more overhead, so it is slower: it is not timed. */
static void mark_dominated(Search *s) {
    for (int i = 0; i < s->n; i++) {
        Candidate *c = &s->c[i];
        for (int j = 0; c->fits && j < s->n && !c->dominated; j++) {
            const Candidate *o = &s->c[j];
            if (j == i || o->family != c->family || !o->fits) continue;
            c->dominated = cheaper(&o->cfg, &c->cfg) && o->cfg.batch_size >= c->cfg.batch_size;
        }
    }
}

/* ---------------------------------------------------------------- time: the ranking */

/* Inserts e into the best list (fastest first, the smaller peak on a tie) if it ranks. */
static void rank(Search *s, const PlanSearchEntry *e) {
    PlanSearchResult *o = s->out;
    int at = o->nbest;
    while (at > 0 &&
           (o->best[at - 1].throughput < e->throughput ||
            (o->best[at - 1].throughput == e->throughput && o->best[at - 1].peak > e->peak)))
        at--;
    if (at >= s->top) return;
    int last = o->nbest < s->top ? o->nbest : s->top - 1;
    memmove(&o->best[at + 1], &o->best[at], (size_t)(last - at) * sizeof *o->best);
    o->best[at] = *e;
    if (o->nbest < s->top) o->nbest++;
}

static int time_candidate(Search *s, const Candidate *c, Err *err) {
    const PlanSearchJob *job = s->job;
    Plan p;
    int rc = fsdp_plan_create(&p, job->model, &c->cfg, job->gpus, err);
    if (rc) return rc;
    PlannerJob j = {.model = job->model, .plan = &p, .cfg = c->cfg, .profile = job->profile};
    PlannerResult r;
    rc = planner_run(&j, &r, err);
    int communicators = planner_communicators(&p);
    plan_free(&p);
    if (rc) return rc;
    s->out->timed++;
    size_t peak = planner_top_memory(&r)->on_gpu.peak;
    double samples = (double)c->cfg.batch_size * c->cfg.grad_accum;
    PlanSearchEntry e = {
        .cfg = c->cfg,
        .step_time = r.step_time,
        .waiting = r.waiting,
        .peak = peak,
        .throughput = r.step_time > 0 ? samples * (double)job->tokens_per_sample / r.step_time : 0};
    planner_result_free(&r);
    if (fits_with(s, communicators, peak)) rank(s, &e);
    return 0;
}

/* ---------------------------------------------------------------- the search */

static int check_job(const PlanSearchJob *job, Err *err) {
    if (job->global_batch && job->global_batch % job->gpus)
        return err_set(err, ERR_USAGE,
                       "--global-batch %ld is not a whole number per GPU on %d GPUs",
                       job->global_batch, job->gpus);
    if (job->global_batch && job->global_batch / job->gpus > (long)MAX_BATCH * MAX_ACCUM)
        return err_set(err, ERR_USAGE, "--global-batch %ld is more than %ld samples per GPU",
                       job->global_batch, (long)MAX_BATCH * MAX_ACCUM);
    return 0;
}

int plan_search_run(const PlanSearchJob *job, PlanSearchResult *out, Err *err) {
    memset(out, 0, sizeof *out);
    int rc = check_job(job, err);
    if (rc) return rc;
    Search s = {.job = job, .out = out, .top = job->top > 0 ? job->top : 5};
    out->best = calloc((size_t)s.top, sizeof *out->best);
    if (!out->best) return err_set(err, ERR_NOMEM, "out of memory for the search's results");
    rc = enumerate(&s, err);
    for (int i = 0; !rc && i < s.n; i++) {
        rc = size_batch(&s, &s.c[i], err);
        out->fitting += s.c[i].fits;
    }
    if (!rc) mark_dominated(&s);
    for (int i = 0; !rc && i < s.n; i++)
        if (s.c[i].fits && !s.c[i].dominated) rc = time_candidate(&s, &s.c[i], err);
    free(s.c);
    if (rc) plan_search_result_free(out);
    return rc;
}

void plan_search_result_free(PlanSearchResult *r) {
    free(r->best);
    r->best = NULL;
    r->nbest = 0;
}
