/* train: the training loop every rank runs (train_rank): sampling, engine steps, evaluation,
 * checkpoints and the final gathers; plus the fault-injection hooks tests and demos set. */
#include "jobs/train.h"
#include "base/clock.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "engine/rng.h"
#include "io/checkpoint.h"
#include "io/safetensors.h"
#include "io/weights.h"
#include "jobs/export_hf.h"
#include "models/kinds.h"
#include "models/transformer.h"
#include "models/vit.h"

_Static_assert(TRAIN_MAX_STEPS == CHECKPOINT_MAX_STEP &&
                   TRAIN_MAX_HELD_OUT == CHECKPOINT_MAX_HELD_OUT,
               "a run's limits are those its checkpoints may record");

long train_steps_per_epoch(const TrainJob *job, int world) {
    long global = (long)world * job->cfg->batch_size * job->cfg->grad_accum;
    return global > 0 ? (job->data->n - job->held_out) / global : 0;
}

/* Indices of this rank's samples for every micro-step of `step` (in-epoch position). */
static void rank_indices(const TrainJob *job, const long *perm, long step_in_epoch, int rank,
                         int world, long *out) {
    long B = job->cfg->batch_size, K = job->cfg->grad_accum;
    for (long micro = 0; micro < K; micro++) {
        long base = (step_in_epoch * K + micro) * world * B + rank * B;
        memcpy(out + micro * B, perm + base, (size_t)B * sizeof(long));
    }
}

static void record_memory(const RankEnv *env, RankMemory *m) {
    Device *d = env->dev;
    for (int c = 0; c < MEM_CATEGORY_COUNT; c++) {
        m->rest[c] = d->ops->bytes_in_use(d, (MemCategory)c);
        m->at_peak[c] = d->ops->peak_bytes_by_category(d, (MemCategory)c);
    }
    m->peak = d->ops->peak_bytes(d);
    m->on_gpu = d->memory.on_gpu;
    m->off_gpu = d->memory.off_gpu;
    m->resident_peak = d->ops->resident_peak ? d->ops->resident_peak(d) : 0;
}

/* Every rank's memory record into every process's job->memory. */
static int share_memory_records(const RankEnv *env, TrainJob *job, Err *err) {
    _Static_assert(sizeof(RankMemory) % sizeof(float) == 0, "records travel as 4-byte words");
    RankMemory mine = job->memory[env->rank];
    return comm_all_gather_host(env->world_comm, env->dev, &mine, sizeof mine / sizeof(float),
                                job->memory, err);
}

/* Under one process per rank, each process records only the values its rank owns (the others
 * start as NaN, "not mine"); gathered, rank 0 takes each value from a rank that owns it. */
static void values_unknown(const RankEnv *env, TrainJob *job) {
    size_t n = job->model->total_numel;
    for (size_t i = 0; i < (size_t)(job->steps + 1) * n; i++) job->step_params[i] = NAN;
    for (size_t i = 0; i < (size_t)job->steps * n; i++) job->step_grads[i] = NAN;
    size_t local = job->step_local_grads ? (size_t)job->steps * (size_t)env->world * n : 0;
    for (size_t i = 0; i < local; i++) job->step_local_grads[i] = NAN;
}

static int merge_values(const RankEnv *env, float *values, size_t count, Err *err) {
    float *all = malloc((size_t)env->world * count * sizeof *all + 1);
    if (!all) return err_set(err, ERR_NOMEM, "out of memory gathering the recorded values");
    int rc = comm_all_gather_host(env->world_comm, env->dev, values, count, all, err);
    for (size_t i = 0; !rc && i < count; i++)
        for (int r = 0; r < env->world && isnan(values[i]); r++) values[i] = all[r * count + i];
    free(all);
    return rc;
}

static int share_values(const RankEnv *env, TrainJob *job, Err *err) {
    size_t n = job->model->total_numel;
    int rc = merge_values(env, job->step_params, (size_t)(job->steps + 1) * n, err);
    if (rc || !job->steps) return rc;
    rc = merge_values(env, job->step_grads, (size_t)job->steps * n, err);
    if (rc || !job->step_local_grads) return rc;
    return merge_values(env, job->step_local_grads, (size_t)job->steps * (size_t)env->world * n,
                        err); /* each rank wrote only its own */
}

static double latest_stream_time(Device *d) {
    double t = 0.0;
    for (int s = 0; s < STREAM_COUNT; s++) {
        double v = d->ops->now(d, (StreamId)s);
        if (v > t) t = v;
    }
    return t;
}

/* Rank r evaluates rows [r*chunk, (r+1)*chunk) of ds in batches of the training batch size;
 * every rank runs the same number of batches (the last ones may be short or empty) because
 * each batch gathers parameters collectively. rep comes with its step, epoch, kind and
 * epoch_end; every rank gets the totals (the caller decides on them alike), and rank 0 keeps the
 * report as job->last_eval. */
static int evaluate(const RankEnv *env, TrainJob *job, Engine *e, const Dataset *ds, long *idx,
                    EvalReport *rep, Err *err) {
    long B = job->cfg->batch_size, chunk = (ds->n + env->world - 1) / env->world;
    long first = chunk * env->rank, last = first + chunk < ds->n ? first + chunk : ds->n;
    double t0 = clock_seconds();
    double sums[2] = {0.0, 0.0}; /* correct, loss x samples */
    for (long at = 0; at < chunk; at += B) {
        long n = 0;
        for (long i = first + at; i < last && n < B; i++) idx[n++] = i;
        EvalStats st;
        int rc = engine_evaluate(e, ds, idx, (size_t)n, &st, err);
        if (rc) return rc;
        sums[0] += (double)st.correct;
        sums[1] += st.loss_sum;
    }
    float totals[2] = {(float)sums[0], (float)sums[1]};
    int rc = comm_all_reduce(env->world_comm, totals, totals, 2, DTYPE_FP32, REDUCE_SUM, -1, err);
    if (rc) return rc;
    rep->samples = ds->n;
    rep->correct = (long)totals[0];
    rep->wall_time = clock_seconds() - t0;
    /* a language model predicts a text's bytes: no class to count correct, its loss says it all */
    rep->accuracy = ds->text ? NAN : ds->n ? (double)totals[0] / (double)ds->n : 0.0;
    rep->loss = ds->n ? (double)totals[1] / (double)ds->n : 0.0;
    if (env->rank == 0) job->last_eval = *rep;
    return 0;
}

static void report_eval(const RankEnv *env, const TrainJob *job, const EvalReport *rep) {
    if (env->rank == 0 && job->on_eval) job->on_eval(job->user, rep);
}

/* The values after `done` steps, when the job records them. */
static int record_values(TrainJob *job, Engine *e, long done, Err *err) {
    if (!job->step_params) return 0;
    size_t n = job->model->total_numel;
    float *grads = done ? job->step_grads + (size_t)(done - 1) * n : NULL;
    return engine_own_values(e, job->step_params + (size_t)done * n, grads, err);
}

/* The job's hooks (TrainHooks), where it has them. */
static int step_begins(const RankEnv *env, const TrainJob *job, long step, Err *err) {
    const TrainHooks *h = &job->hooks;
    return h->step_begins ? h->step_begins(h->state, env->rank, step, err) : 0;
}

static int checkpoint_dies_midway(const TrainJob *job, long step) {
    const TrainHooks *h = &job->hooks;
    return h->checkpoint_dies_midway ? h->checkpoint_dies_midway(h->state, step) : 0;
}

/* The line of a run that diverged at `step`: what went non-finite, and the newest checkpoint
 * (saved: its step, -1 when there is none), which is the one to go back to. */
static int diverged(const TrainJob *job, long step, const char *what, long saved, Err *err) {
    char kept[96] = "";
    if (saved >= 0)
        snprintf(kept, sizeof kept, "; the newest checkpoint, step %ld, is intact", saved);
    else if (job->ckpt_dir)
        snprintf(kept, sizeof kept, "; no checkpoint was saved before it");
    return err_set(err, ERR_DIVERGED, "step %ld: %s (training diverged%s)", step, what, kept);
}

/* A checkpoint after step `done` when one is due: every ckpt_every steps and at epoch ends;
 * *saved becomes done once it is saved. val: the validation of this step (NULL: none), whose
 * loss it records; when that is the lowest so far (val->best) the state is also kept as
 * ckpt_dir/best, and saved for that alone when no checkpoint is due. A state that is not finite
 * is not saved (a gradient that overflowed while the loss stayed finite, with no
 * --clip-grad-norm to see it): that ends the run as a divergence. */
static int maybe_checkpoint(const RankEnv *env, TrainJob *job, Engine *e, long done, int epoch_end,
                            const EvalReport *val, long *saved, Err *err) {
    if (!job->ckpt_dir) return 0;
    int due = epoch_end || (job->ckpt_every > 0 && done % job->ckpt_every == 0);
    int best = val && val->best;
    if (!due && !best) return 0;
    LrCurve curve = {
        .schedule = job->cfg->lr_schedule, .lr = job->cfg->lr, .total_steps = job->steps};
    CheckpointInfo info = {.kinds = &model_kinds,
                           .model_name = job->model_name ? job->model_name : job->model->name,
                           .strategy = strategy_name(job->cfg->strategy),
                           .step = done,
                           .keep = job->ckpt_keep,
                           .kill_midway = checkpoint_dies_midway(job, done),
                           .held_out = job->held_out,
                           .validated = val != NULL,
                           .val_loss = val ? val->loss : 0.0,
                           .best = best,
                           .best_only = !due,
                           .lr_curve = &curve};
    int rc = checkpoint_save(env, e, job->model, job->ckpt_dir, &info, err);
    if (rc == ERR_DIVERGED) {
        char what[sizeof err->msg + 40];
        snprintf(what, sizeof what, "%s, so its checkpoint was not saved", err->msg);
        return diverged(job, done, what, *saved, err);
    }
    if (!rc && due) *saved = done; /* best alone is no step --resume auto takes */
    return rc;
}

/* A step whose loss or gradient norm is not a finite number diverged: every step after it would
 * be nan too, so the run stops there, before the step is recorded, reported or checkpointed.
 * fp16's loss scaling skips a step whose scaled gradients overflowed, as GradScaler does; that is
 * expected, not divergence, and such a step has no norm (0). Its loss is not scaled: a loss that
 * is not finite stops the run there too, as it would skip every step after it. The gradient norm
 * is there under --clip-grad-norm. Each rank judges what it has: the loss is all-reduced on
 * logged steps (every step under one process per rank), the norm always; on a step whose loss
 * only this rank saw, the others are stopped as for any failed rank, at their next collective. */
static int step_diverged(const TrainJob *job, const StepStats *st, long step, long saved,
                         Err *err) {
    float bad = !isfinite(st->loss) ? st->loss : st->grad_norm;
    if (isfinite(bad)) return 0;
    char what[64];
    snprintf(what, sizeof what, "the %s is %s", !isfinite(st->loss) ? "loss" : "gradient norm",
             isnan(bad) ? "nan"
             : bad > 0  ? "inf"
                        : "-inf");
    return diverged(job, step, what, saved, err);
}

/* Each epoch's mean loss: every rank adds up its own step losses (a logged step's is already
 * the global batch's mean, an unlogged one the rank's slice's: their average over ranks is the
 * global batch's mean either way), and at the epoch's end one all-reduce averages the sums over
 * the ranks. So no step pays a collective for it, and the mean is every step's, logged or not. */
typedef struct EpochLoss {
    double sum;
    long steps;
} EpochLoss;

static int epoch_mean(const RankEnv *env, TrainJob *job, const EpochLoss *acc, int epoch, long done,
                      Err *err) {
    float sum = (float)acc->sum;
    int rc = comm_all_reduce(env->world_comm, &sum, &sum, 1, DTYPE_FP32, REDUCE_AVG, -1, err);
    if (rc) return rc;
    long per_epoch = train_steps_per_epoch(job, env->world);
    EpochReport rep = {.epoch = epoch + 1,
                       .epochs = (int)((job->steps + per_epoch - 1) / per_epoch),
                       .step = done,
                       .steps = acc->steps,
                       .loss = acc->steps ? (double)sum / (double)acc->steps : 0.0};
    if (env->rank == 0) job->on_epoch(job->user, &rep);
    return 0;
}

/* The lowest validation loss so far, each rank's own copy (the simulator's ranks share the job):
 * every rank updates it alike, from the same all-reduced totals. */
typedef struct BestLoss {
    int known;
    double loss;
} BestLoss;

/* After step `done`: the held-out images at an epoch's end and every eval_every steps, then
 * eval_data after the last step; with none held out, eval_data at an epoch's end. *val becomes
 * the validation's report (its kind EVAL_VALIDATION only when there was one), marked best when
 * it beat *so_far, which it then becomes. */
static int evaluate_step(const RankEnv *env, TrainJob *job, Engine *e, long *idx, long done,
                         int epoch_end, BestLoss *so_far, EvalReport *val, Err *err) {
    long per_epoch = train_steps_per_epoch(job, env->world);
    EvalReport rep = {
        .step = done, .epoch = (int)((done + per_epoch - 1) / per_epoch), .epoch_end = epoch_end};
    if (job->held_out > 0 && (epoch_end || (job->eval_every > 0 && done % job->eval_every == 0))) {
        Dataset held = dataset_tail(job->data, job->held_out);
        rep.kind = EVAL_VALIDATION;
        int rc = evaluate(env, job, e, &held, idx, &rep, err);
        if (rc) return rc;
        /* a nan loss is no better than any */
        rep.best = isfinite(rep.loss) && (!so_far->known || rep.loss < so_far->loss);
        if (rep.best) *so_far = (BestLoss){1, rep.loss};
        report_eval(env, job, &rep);
        *val = rep;
    }
    int test = job->held_out > 0 ? done == job->steps : epoch_end;
    if (job->eval_data && test) {
        rep.kind = job->held_out > 0 ? EVAL_TEST : EVAL_EACH_EPOCH;
        rep.best = 0;
        int rc = evaluate(env, job, e, job->eval_data, idx, &rep, err);
        if (rc) return rc;
        report_eval(env, job, &rep);
    }
    return 0;
}

static int run_steps(const RankEnv *env, TrainJob *job, Engine *e, long first, long *perm,
                     long *idx, Err *err) {
    long per_epoch = train_steps_per_epoch(job, env->world);
    long saved = job->resume_from ? first : -1; /* the newest checkpoint's step */
    long global_batch = (long)env->world * job->cfg->batch_size * job->cfg->grad_accum;
    int epoch = -1;
    EpochLoss epoch_loss = {0};
    BestLoss best_so_far = {job->has_best, job->best_val_loss};
    for (long s = first; s < job->steps; s++) {
        int rc = step_begins(env, job, s + 1, err);
        if (rc) return rc;
        if (s / per_epoch != epoch) { /* a fresh seeded shuffle each epoch, of what it trains on */
            epoch = (int)(s / per_epoch);
            epoch_loss = (EpochLoss){0};
            if (perm)
                rng_permutation(job->cfg->seed, 0x5eed0000ULL + (uint64_t)epoch, perm,
                                job->data->n - job->held_out);
        }
        /* the first step too, so a log always shows where the loss started */
        int log =
            job->log_every > 0 && (s == 0 || (s + 1) % job->log_every == 0 || s + 1 == job->steps);
        if (perm) rank_indices(job, perm, s % per_epoch, env->rank, env->world, idx);
        /* the schedule's position is the step itself, so a resumed run continues its curve */
        float lr = (float)lr_schedule_rate(&job->cfg->lr_schedule, job->cfg->lr, s, job->steps);
        engine_set_lr(e, lr);
        double t0 = latest_stream_time(env->dev), w0 = clock_seconds();
        StepReport rep = {.step = s + 1,
                          .steps = job->steps,
                          .epoch = epoch,
                          .steps_per_epoch = per_epoch,
                          .lr = lr};
        size_t n = job->model->total_numel; /* this rank's own gradients, when recorded */
        engine_record_local_grads(e, job->step_local_grads
                                         ? job->step_local_grads +
                                               ((size_t)s * env->world + env->rank) * n
                                         : NULL);
        if ((rc = engine_step(e, job->data, idx, log, &rep.stats, err))) return rc;
        engine_record_local_grads(e, NULL);
        if ((rc = step_diverged(job, &rep.stats, s + 1, saved, err))) return rc;
        rep.step_time = latest_stream_time(env->dev) - t0;
        rep.wall_time = clock_seconds() - w0;
        rep.images_per_s = rep.wall_time > 0 ? (double)global_batch / rep.wall_time : 0.0;
        rep.peak_bytes = env->dev->memory.on_gpu.peak;
        if (log && env->rank == 0 && job->on_step) job->on_step(job->user, &rep);
        epoch_loss.sum += rep.stats.loss;
        epoch_loss.steps++;
        if ((rc = record_values(job, e, s + 1, err))) return rc;
        int epoch_end = (s + 1) % per_epoch == 0 || s + 1 == job->steps;
        if (epoch_end && job->on_epoch &&
            (rc = epoch_mean(env, job, &epoch_loss, epoch, s + 1, err)))
            return rc;
        EvalReport val = {.kind = EVAL_EACH_EPOCH}; /* none, unless it becomes a validation's */
        if ((rc = evaluate_step(env, job, e, idx, s + 1, epoch_end, &best_so_far, &val, err)))
            return rc;
        if ((rc = maybe_checkpoint(env, job, e, s + 1, epoch_end,
                                   val.kind == EVAL_VALIDATION ? &val : NULL, &saved, err)))
            return rc;
    }
    return 0;
}

/* --init-from, sharded: a piece of this rank's state from the weights file. The parameters'
 * rows come from the file; Adam's moments start at zero, as for a fresh run. */
static int fill_from_weights(void *user, const StatePiece *p, Err *err) {
    size_t n = p->rows * p->row_elems;
    if (p->kind != STATE_PARAM) {
        memset(p->data, 0, n * sizeof(float));
        return 0;
    }
    return weights_read(user, p->param, p->row_begin * p->row_elems, n, p->data, err);
}

int train_load_weights(Engine *e, const ModelDesc *m, const char *path, Err *err) {
    WeightsFile *w;
    int rc = weights_open(&w, m, path, err);
    if (!rc) rc = engine_load_state(e, fill_from_weights, w, err);
    weights_close(w);
    return rc;
}

/* ---- --save-full: the trained model as one safetensors file, gathered unit by unit; rank 0
 * writes each unit's tensors as they arrive, so it never holds more than its shards and one
 * unit. PyTorch's names and shapes; the ViT's or the transformer's configuration in
 * __metadata__. */

typedef struct FullSave {
    const TrainJob *job;
    StWriter *w; /* rank 0's; NULL elsewhere */
    StTensorOut *tensors;
    char text[9][32]; /* metadata values */
    const char *kv[18];
    int nkv;
} FullSave;

static void full_save_metadata(FullSave *s, long step) {
    const ModelDesc *m = s->job->model;
    s->kv[0] = "fsdp_model";
    s->kv[1] = s->job->model_name ? s->job->model_name : m->name;
    snprintf(s->text[0], sizeof s->text[0], "%ld", step);
    s->kv[2] = "fsdp_step";
    s->kv[3] = s->text[0];
    s->nkv = 2;
    int vals[7], nvals = 0;
    const char *const *keys = NULL;
    if (!strcmp(m->name, "vit") && m->config) {
        static const char *const vit_keys[] = {"image",  "patch", "layers", "heads",
                                               "hidden", "mlp",   "classes"};
        const VitConfig *c = m->config;
        int v[] = {c->image, c->patch, c->layers, c->heads, c->hidden, c->mlp, c->classes};
        memcpy(vals, v, sizeof v);
        keys = vit_keys, nvals = 7;
    } else if ((!strcmp(m->name, "transformer") || !strcmp(m->name, "llama")) && m->config) {
        static const char *const tf_keys[] = {"layers", "heads", "hidden",  "mlp",
                                              "seq",    "vocab", "kv_heads"};
        const TransformerConfig *c = m->config;
        int v[] = {c->layers, c->heads, c->hidden, c->mlp, c->seq, c->vocab, c->kv_heads};
        memcpy(vals, v, sizeof v);
        keys = tf_keys, nvals = c->arch == TRANSFORMER_LLAMA ? 7 : 6; /* a Llama's K,V heads */
    }
    for (int i = 0; i < nvals; i++, s->nkv++) {
        snprintf(s->text[1 + i], sizeof s->text[1 + i], "%d", vals[i]);
        s->kv[2 * s->nkv] = keys[i];
        s->kv[2 * s->nkv + 1] = s->text[1 + i];
    }
}

/* The file's tensors in the order the units arrive: unit by unit, each unit's in its order. */
static int full_save_open(FullSave *s, long step, Err *err) {
    const ModelDesc *m = s->job->model;
    const Plan *p = s->job->plan;
    if (!(s->tensors = calloc((size_t)m->nparams + 1, sizeof *s->tensors)))
        return err_set(err, ERR_NOMEM, "out of memory writing %s", s->job->save_full);
    int n = 0;
    for (int u = 0; u < p->nunits; u++)
        for (int i = 0; i < p->units[u].nparams; i++) {
            const ParamSpec *ps = &m->params[p->units[u].params[i].param];
            s->tensors[n++] = (StTensorOut){
                .name = ps->name, .dtype = "F32", .ndim = ps->ndim, .shape = ps->shape};
        }
    full_save_metadata(s, step);
    return st_writer_open(&s->w, s->job->save_full, s->tensors, n, s->kv, s->nkv, err);
}

/* Rank 0's destination of the parameters engine_gather_units hands it, a tensor at a time in unit
 * order: --save-full's safetensors file or --save-hf's folder (w NULL on the other ranks). */
typedef struct GatherSink {
    const Plan *plan;
    int (*put)(void *w, const float *tensor, Err *err);
    void *w;
} GatherSink;

static int gather_unit(void *user, int u, const float *full, Err *err) {
    GatherSink *s = user;
    const Unit *unit = &s->plan->units[u];
    int rc = 0;
    for (int i = 0; s->w && !rc && i < unit->nparams; i++)
        rc = s->put(s->w, full + unit->params[i].offset, err);
    return rc;
}

static int to_safetensors(void *w, const float *tensor, Err *err) {
    return st_writer_tensor(w, tensor, err);
}

static int to_hf_folder(void *w, const float *tensor, Err *err) {
    return hf_writer_next(w, tensor, err);
}

/* --save-hf: the parameters in unit order, into a Hugging Face folder. */
static int save_hf(const RankEnv *env, TrainJob *job, Engine *e, Err *err) {
    const Plan *p = job->plan;
    HfWriter *w = NULL;
    int *order = malloc((size_t)job->model->nparams * sizeof *order), n = 0;
    if (!order) return err_set(err, ERR_NOMEM, "out of memory writing %s", job->save_hf);
    for (int u = 0; u < p->nunits; u++)
        for (int i = 0; i < p->units[u].nparams; i++) order[n++] = p->units[u].params[i].param;
    int rc = env->rank == 0 ? hf_writer_open(&w, job->model, order, n, job->save_hf, err) : 0;
    free(order);
    GatherSink sink = {p, to_hf_folder, w};
    if (!rc) rc = engine_gather_units(e, gather_unit, &sink, err);
    if (w && rc)
        hf_writer_abort(w);
    else if (w)
        rc = hf_writer_commit(w, err);
    return rc;
}

static int save_full(const RankEnv *env, TrainJob *job, Engine *e, Err *err) {
    FullSave s = {.job = job};
    int rc = env->rank == 0 ? full_save_open(&s, engine_steps_done(e), err) : 0;
    GatherSink sink = {job->plan, to_safetensors, s.w};
    if (!rc) rc = engine_gather_units(e, gather_unit, &sink, err);
    if (s.w && rc)
        st_writer_abort(s.w);
    else if (s.w)
        rc = st_writer_commit(s.w, err);
    free(s.tensors);
    return rc;
}

int train_rank(const RankEnv *env, void *arg, Err *err) {
    TrainJob *job = arg;
    if (train_steps_per_epoch(job, env->world) < 1 && job->steps > 0)
        return err_set(err, ERR_USAGE,
                       "a global batch of %d ranks x %d samples x %d micro-steps is larger than "
                       "the %ld samples trained on",
                       env->world, job->cfg->batch_size, job->cfg->grad_accum,
                       job->data->n - job->held_out);
    Engine *e = NULL;
    long *perm = job->no_sampler ? NULL : malloc((size_t)job->data->n * sizeof(long));
    long *idx = calloc((size_t)job->cfg->batch_size * job->cfg->grad_accum, sizeof(long));
    int rc = ((!perm && !job->no_sampler) || !idx)
                 ? err_set(err, ERR_NOMEM, "out of memory for the sampler")
                 : 0;
    if (!rc) rc = engine_create(&e, job->cfg, job->plan, job->model, *env, err);
    if (!rc && job->init_params) rc = engine_set_full_params(e, job->init_params, err);
    if (!rc && job->init_from) rc = train_load_weights(e, job->model, job->init_from, err);
    long first = 0;
    if (job->step_params && job->rank_per_process) values_unknown(env, job);
    if (!rc && job->resume_from)
        rc = checkpoint_load(e, job->model, &model_kinds, job->resume_from, &first, err);
    if (!rc && env->rank == 0) job->resumed_step = first;
    if (!rc) rc = record_values(job, e, 0, err);
    if (!rc) rc = run_steps(env, job, e, first, perm, idx, err);
    if (!rc && job->memory)
        record_memory(env,
                      &job->memory[job->memory_slot ? job->memory_slot[env->rank] : env->rank]);
    if (!rc && job->memory && job->rank_per_process && env->world > 1)
        rc = share_memory_records(env, job, err);
    if (!rc && job->step_params && job->rank_per_process && env->world > 1)
        rc = share_values(env, job, err);
    if (!rc && job->save_full) rc = save_full(env, job, e, err);
    if (!rc && job->save_hf) rc = save_hf(env, job, e, err);
    if (!rc && job->final_params) {
        float *full = malloc(job->model->total_numel * sizeof(float) + 1);
        rc = full ? engine_full_params(e, full, err)
                  : err_set(err, ERR_NOMEM, "out of memory gathering parameters");
        if (!rc && env->rank == 0)
            memcpy(job->final_params, full, job->model->total_numel * sizeof(float));
        free(full);
    }
    engine_destroy(e);
    free(perm);
    free(idx);
    return rc;
}

/* ---- fault injection */

/* Only rank fail_at_rank reads or clears fail_at_step, so its disarming races with nobody; a
 * restart runs after every rank thread of the failed run has been joined. */
static int fail_at_step_begins(void *state, int rank, long step, Err *err) {
    TrainFaults *f = state;
    if (rank != f->fail_at_rank || step != f->fail_at_step) return 0;
    f->fail_at_step = 0; /* once */
    return err_set(err, ERR_INTERNAL, "rank %d failed at step %ld (injected by --fail-at)", rank,
                   step);
}

/* Where the save of `step` dies: CKPT_KILL_* */
static int kill_in_save(void *state, long step) {
    const TrainFaults *f = state;
    return step == f->kill_in_save_step    ? CKPT_KILL_IN_RANK_FILES
           : step == f->kill_in_prune_step ? CKPT_KILL_IN_PRUNE
                                           : CKPT_KILL_NONE;
}

TrainHooks train_fault_hooks(TrainFaults *faults) {
    return (TrainHooks){.step_begins = fail_at_step_begins,
                        .checkpoint_dies_midway = kill_in_save,
                        .state = faults};
}
