/* fsdp_state: the engine's state: creating and destroying it, initial values, and the values
 * handed out for reports, full-parameter gathers and checkpoints. */
#include "engine/fsdp_internal.h"

#include <stdlib.h>
#include <string.h>

/* ---------------------------------------------------------------- gathered values */

/* Unit u's fp32 parameters gathered into `host` (unit->numel floats, host memory), on every
 * rank: the collective every rank joins. The all-gather runs in place (this rank's block packed
 * at its slot of the receive buffer, as NCCL allows) and each rank's rows are copied from it
 * straight to the host, so the device holds the rank's shards plus one gathered unit (padded
 * to whole chunks) and nothing more: no send block, no unsharded copy. */
static int gather_unit(Engine *e, int u, float *host, Err *err) {
    const Unit *unit = &e->plan->units[u];
    Fp32Rows values = fp32_rows(e, u);
    if (!values.sharded) {
        e->dev->ops->copy(e->dev, host, values.base, unit->numel * sizeof(float));
        return 0;
    }
    size_t block = unit->wire_numel * sizeof(float);
    char *recv = NULL;
    int rc =
        dev_alloc(e, (void **)&recv, block * (size_t)e->plan->shard_size, MEM_COMM_BUFFER, u, err);
    if (rc) return rc;
    char *mine = recv + (size_t)e->shard_rank * block;
    pack_rows(e, u, values.base, DTYPE_FP32, values.local, DTYPE_FP32, mine);
    rc = comm_all_gather(e->env.shard_comm, mine, recv, unit->wire_numel, DTYPE_FP32, u, err);
    for (int q = 0; !rc && q < e->plan->shard_size; q++) {
        UnitRows it = unit_rows(e, u, e->plan->shard_size, q);
        for (RowSpan s; unit_rows_next(&it, &s);)
            e->dev->ops->copy(e->dev, host + s.up->offset + s.first,
                              recv + (size_t)q * block + s.up->wire_offset * sizeof(float),
                              s.n * sizeof(float));
    }
    dev_free(e, recv, u);
    return rc;
}

int engine_gather_units(Engine *e, UnitSink sink, void *user, Err *err) {
    for (int u = 0; u < e->plan->nunits; u++) {
        const Unit *unit = &e->plan->units[u];
        float *host = NULL;
        int rc = resident_begin(e, u, err);
        if (!rc && !(host = malloc(unit->numel * sizeof(float) + 1)))
            rc = err_set(err, ERR_NOMEM, "out of memory for unit %s's parameters", unit->name);
        if (!rc) rc = gather_unit(e, u, host, err);
        if (!rc) rc = sink(user, u, host, err);
        free(host);
        int end = resident_end(e, u, 0, err);
        if (rc || end) return rc ? rc : end;
    }
    return 0;
}

/* engine_full_params's sink: each of the unit's parameters to its place in model order. */
typedef struct FullParams {
    const Engine *e;
    float *out;
} FullParams;

static int place_unit(void *user, int u, const float *full, Err *err) {
    (void)err;
    const FullParams *f = user;
    const Unit *unit = &f->e->plan->units[u];
    for (int i = 0; i < unit->nparams; i++) {
        const ParamSpec *ps = unit_param_spec(f->e, u, i);
        memcpy(f->out + f->e->param_flat[unit->params[i].param], full + unit->params[i].offset,
               ps->numel * sizeof(float));
    }
    return 0;
}

int engine_full_params(Engine *e, float *out, Err *err) {
    FullParams f = {e, out};
    return engine_gather_units(e, place_unit, &f, err);
}

/* ---------------------------------------------------------------- creation */

/* Offsets of each parameter's kept rows inside a rank's flat buffer: the rows rank `rank` of
 * a group of `size` owns, packed, when sharded; the unit's own layout when not. */
static void local_offsets(Engine *e, int u, int sharded, int size, int rank, size_t *off) {
    size_t packed = 0;
    UnitRows it = unit_rows(e, u, size, rank);
    for (RowSpan s; unit_rows_next(&it, &s);) {
        off[s.i] = sharded ? packed : s.up->offset;
        packed += s.n;
    }
}

/* n fp32 values from the host into device memory holding type t, rounded on the way. */
static int put_rows(Engine *e, void *dev, DType t, const float *host, size_t n, Err *err) {
    if (t == DTYPE_FP32) {
        e->dev->ops->copy(e->dev, dev, host, n * sizeof(float));
        return 0;
    }
    char *rounded = malloc(n * dtype_size(t) + 1);
    if (!rounded) return err_set(err, ERR_NOMEM, "out of memory setting parameters");
    for (size_t j = 0; j < n; j++) dtype_store(rounded, t, j, host[j]);
    e->dev->ops->copy(e->dev, dev, rounded, n * dtype_size(t));
    free(rounded);
    return 0;
}

/* Elements [first, first + n) of unit u's i-th parameter from `full` (the whole parameter's
 * fp32 values), or drawn from the initialiser when full is NULL, into device memory of type t. */
static int set_range(Engine *e, int u, int i, const float *full, size_t first, size_t n, void *dev,
                     DType t, Err *err) {
    if (!n) return 0;
    if (full) return put_rows(e, dev, t, full + first, n, err);
    float *host = malloc(n * sizeof *host);
    if (!host) return err_set(err, ERR_NOMEM, "out of memory initialising parameters");
    param_init_fill(unit_param_spec(e, u, i), e->cfg.seed, first, n, host);
    int rc = put_rows(e, dev, t, host, n, err);
    free(host);
    return rc;
}

/* Sets the values this rank keeps of unit u's i-th parameter: its resting rows (rounded to
 * param_store) and, under DeepSpeed's layout, the master's rows. Each rank touches exactly its
 * own rows, so the starting point is the same at any world size. */
static int set_param_values(Engine *e, int u, int i, const float *full, Err *err) {
    UnitState *us = &e->units[u];
    RowSpan kept = kept_rows(e, u, i, e->plan->params_sharded);
    int rc = set_range(e, u, i, full, kept.first, kept.n, param_at(e, u, us->param_local[i]),
                       e->plan->param_store, err);
    if (rc || !e->plan->master) return rc;
    RowSpan optim = param_rows(e, u, i, e->optim_size, e->optim_rank);
    return set_range(e, u, i, full, optim.first, optim.n, us->master + us->optim_local[i],
                     DTYPE_FP32, err);
}

static int init_params(Engine *e, int u, Err *err) {
    if (e->dev->accounting_only) return 0; /* nothing to fill */
    for (int i = 0; i < e->plan->units[u].nparams; i++) {
        int rc = set_param_values(e, u, i, NULL, err);
        if (rc) return rc;
    }
    return 0;
}

int engine_set_full_params(Engine *e, const float *full, Err *err) {
    for (int u = 0; u < e->plan->nunits; u++) {
        const Unit *unit = &e->plan->units[u];
        int rc = resident_begin(e, u, err);
        for (int i = 0; !rc && i < unit->nparams; i++)
            rc = set_param_values(e, u, i, full + e->param_flat[unit->params[i].param], err);
        if (!rc) rc = resident_end(e, u, 1, err);
        if (rc) return rc;
    }
    return 0;
}

/* The rank that reports values stored `sharded` or replicated: a shard's owner in the first
 * replica group (whose shard ranks are its world ranks), rank 0 for replicated values. */
static int reports_values(const Engine *e, int sharded) {
    return e->env.rank == (sharded ? e->shard_rank : 0);
}

/* Copies unit u's i-th tensor of a rank's local store (values of type t) to its place in
 * full, widened to fp32. */
static int copy_local_rows(const Engine *e, int u, int i, int sharded, const void *local, DType t,
                           float *full, Err *err) {
    RowSpan kept = kept_rows(e, u, i, sharded);
    if (!kept.rows) return 0; /* an empty shard has no storage to copy from */
    size_t n = kept.n;
    float *dst = full + e->param_flat[kept.up->param] + kept.first;
    if (t == DTYPE_FP32) {
        e->dev->ops->copy(e->dev, dst, local, n * sizeof(float));
        return 0;
    }
    char *raw = malloc(n * dtype_size(t));
    if (!raw) return err_set(err, ERR_NOMEM, "out of memory copying values");
    e->dev->ops->copy(e->dev, raw, local, n * dtype_size(t));
    for (size_t j = 0; j < n; j++) dst[j] = dtype_load(raw, t, j);
    free(raw);
    return 0;
}

int engine_own_values(Engine *e, float *params, float *grads, Err *err) {
    const Plan *p = e->plan;
    for (int u = 0; u < p->nunits; u++) {
        const UnitState *us = &e->units[u];
        int rc = resident_begin(e, u, err); /* the NVMe tier's rows come in here */
        Fp32Rows values = fp32_rows(e, u);
        for (int i = 0; !rc && i < p->units[u].nparams; i++) {
            if (reports_values(e, values.sharded))
                rc = copy_local_rows(e, u, i, values.sharded, values.base + values.local[i],
                                     DTYPE_FP32, params, err);
            if (!rc && grads && reports_values(e, p->grads_sharded))
                rc = copy_local_rows(e, u, i, p->grads_sharded, grad_at(e, u, us->grad_local[i]),
                                     p->grad_store, grads, err);
        }
        if (!rc) rc = resident_end(e, u, 0, err);
        if (rc) return rc;
    }
    return 0;
}

/* ---------------------------------------------------------------- checkpoint state */

const char *state_kind_name(StateKind k) {
    static const char *const names[STATE_KIND_COUNT] = {"param", "adam_m", "adam_v"};
    return k >= 0 && k < STATE_KIND_COUNT ? names[k] : "unknown";
}

EngineCounters engine_counters(const Engine *e) {
    return (EngineCounters){
        .steps = e->steps, .loss_scale = e->loss_scale, .good_steps = e->good_steps};
}

void engine_set_counters(Engine *e, EngineCounters c) {
    e->steps = c.steps;
    e->loss_scale = c.loss_scale;
    e->good_steps = c.good_steps;
}

/* Where unit u's i-th tensor of `kind` lives on this rank: its rows and its device memory. */
static float *state_rows(Engine *e, int u, int i, StateKind kind, RowSpan *rows) {
    UnitState *us = &e->units[u];
    if (kind == STATE_PARAM) { /* the fp32 values: FSDP's resting rows, DeepSpeed's master */
        Fp32Rows values = fp32_rows(e, u);
        *rows = kept_rows(e, u, i, values.sharded);
        return values.base + values.local[i];
    }
    *rows = param_rows(e, u, i, e->optim_size, e->optim_rank);
    return (kind == STATE_ADAM_M ? us->m : us->v) + us->optim_local[i];
}

/* The rank that saves a kind: as engine_own_values decides, with Adam's moments sharded by
 * the optimizer's groups. */
static int saves_state(const Engine *e, StateKind kind) {
    if (kind == STATE_PARAM && !e->plan->master) return reports_values(e, e->plan->params_sharded);
    return e->env.rank == e->optim_rank; /* Adam's moments, and DeepSpeed's master beside them */
}

static int move_unit_state(Engine *e, int u, StateFn fn, void *user, int saving, Err *err);

/* Moves every piece this rank keeps between the device and fn: to fn when saving (only the
 * pieces it saves), from fn when loading. */
static int move_state(Engine *e, StateFn fn, void *user, int saving, Err *err) {
    for (int u = 0; u < e->plan->nunits; u++) {
        int rc = resident_begin(e, u, err);
        if (!rc) rc = move_unit_state(e, u, fn, user, saving, err);
        int end = resident_end(e, u, !saving, err);
        if (rc || end) return rc ? rc : end;
    }
    return 0;
}

/* A piece of device memory the host cannot address goes through a host buffer. */
static int move_staged(Engine *e, float *dev, StatePiece *piece, size_t bytes, StateFn fn,
                       void *user, int saving, Err *err) {
    if (!(piece->data = malloc(bytes)))
        return err_set(err, ERR_NOMEM, "out of memory moving a checkpoint piece");
    if (saving) e->dev->ops->copy(e->dev, piece->data, dev, bytes);
    int rc = fn(user, piece, err);
    if (!rc && !saving) e->dev->ops->copy(e->dev, dev, piece->data, bytes);
    free(piece->data);
    return rc;
}

/* DeepSpeed's layout on load: the resting parameter rows are the checkpoint's fp32 values of
 * those rows, rounded to param_store (as after every optimizer step: round(master)). */
static int load_resting_params(Engine *e, int u, int i, StateFn fn, void *user, Err *err) {
    RowSpan kept = kept_rows(e, u, i, e->plan->params_sharded);
    size_t n = kept.n;
    StatePiece piece = {.param = kept.up->param,
                        .kind = STATE_PARAM,
                        .row_begin = kept.begin,
                        .rows = kept.rows,
                        .row_elems = kept.ps->row_elems};
    if (!n) return 0;
    if (!(piece.data = malloc(n * sizeof(float))))
        return err_set(err, ERR_NOMEM, "out of memory loading parameters");
    int rc = fn(user, &piece, err);
    if (!rc)
        rc = put_rows(e, param_at(e, u, e->units[u].param_local[i]), e->plan->param_store,
                      piece.data, n, err);
    free(piece.data);
    return rc;
}

static int move_unit_state(Engine *e, int u, StateFn fn, void *user, int saving, Err *err) {
    for (int i = 0; i < e->plan->units[u].nparams; i++) {
        for (int k = 0; k < STATE_KIND_COUNT; k++) {
            if (saving && !saves_state(e, (StateKind)k)) continue;
            RowSpan rows;
            float *dev = state_rows(e, u, i, (StateKind)k, &rows);
            StatePiece piece = {.param = rows.up->param,
                                .kind = (StateKind)k,
                                .row_begin = rows.begin,
                                .rows = rows.rows,
                                .row_elems = rows.ps->row_elems};
            size_t bytes = piece.rows * piece.row_elems * sizeof(float);
            if (!bytes) continue;
            int rc;
            if (e->dev->host_addressable) {
                piece.data = dev; /* read or filled in place */
                rc = fn(user, &piece, err);
            } else {
                rc = move_staged(e, dev, &piece, bytes, fn, user, saving, err);
            }
            if (rc) return rc;
        }
        if (!saving && e->plan->master) {
            int rc = load_resting_params(e, u, i, fn, user, err);
            if (rc) return rc;
        }
    }
    return 0;
}

int engine_save_state(Engine *e, StateFn fn, void *user, Err *err) {
    return move_state(e, fn, user, 1, err);
}

int engine_load_state(Engine *e, StateFn fn, void *user, Err *err) {
    return move_state(e, fn, user, 0, err);
}

/* Elements of unit u's param rows, gradient rows and each Adam moment this rank keeps. */
static void unit_sizes(Engine *e, int u) {
    UnitState *us = &e->units[u];
    us->param_n = plan_param_numel(e->plan, u, e->env.rank);
    us->grad_n = plan_grad_numel(e->plan, u, e->env.rank);
    us->optim_n = plan_optim_numel(e->plan, u, e->env.rank);
}

static int create_unit_state(Engine *e, int u, Err *err) {
    UnitState *us = &e->units[u];
    const Unit *unit = &e->plan->units[u];
    size_t np = (size_t)unit->nparams + 1;
    us->param_local = calloc(np, sizeof(size_t));
    us->grad_local = calloc(np, sizeof(size_t));
    us->optim_local = calloc(np, sizeof(size_t));
    us->param_ptrs = calloc(np, sizeof(void *));
    us->grad_ptrs = calloc(np, sizeof(float *));
    if (!us->param_local || !us->grad_local || !us->optim_local || !us->param_ptrs ||
        !us->grad_ptrs)
        return err_set(err, ERR_NOMEM, "out of memory creating the engine");
    const Plan *p = e->plan;
    unit_sizes(e, u);
    local_offsets(e, u, p->params_sharded, p->shard_size, e->shard_rank, us->param_local);
    local_offsets(e, u, p->grads_sharded, p->shard_size, e->shard_rank, us->grad_local);
    local_offsets(e, u, 1, e->optim_size, e->optim_rank, us->optim_local);
    int rc = dev_alloc(e, &us->param, us->param_n * dtype_size(p->param_store),
                       resting(e, MEM_PARAM_SHARD), u, err);
    if (!rc)
        rc = dev_alloc(e, &us->grad, us->grad_n * dtype_size(p->grad_store),
                       resting(e, MEM_GRAD_SHARD), u, err);
    if (!rc && p->master)
        rc = dev_alloc(e, (void **)&us->master, us->optim_n * sizeof(float),
                       resting(e, MEM_OPTIM_STATE), u, err);
    if (!rc)
        rc = dev_alloc(e, (void **)&us->m, us->optim_n * sizeof(float), resting(e, MEM_OPTIM_STATE),
                       u, err);
    if (!rc)
        rc = dev_alloc(e, (void **)&us->v, us->optim_n * sizeof(float), resting(e, MEM_OPTIM_STATE),
                       u, err);
    if (rc) return rc;
    if (us->grad) e->k->zero_bytes(us->grad, us->grad_n * dtype_size(p->grad_store));
    if (us->m) e->k->zero(us->m, us->optim_n);
    if (us->v) e->k->zero(us->v, us->optim_n);
    rc = init_params(e, u, err);
    return rc ? rc : resident_end(e, u, 1, err); /* NVMe: to the file, out of memory */
}

/* Unit entries in module order (forward) and reverse module order (backward). */
static void entry_sequences(Engine *e) {
    int n = 0, nm = e->model->nmodules;
    for (int m = 0; m < nm; m++)
        if (m == 0 || e->plan->module_unit[m] != e->plan->module_unit[m - 1])
            e->fwd_seq[n++] = e->plan->module_unit[m];
    for (int i = 0; i < n; i++) e->bwd_seq[i] = e->fwd_seq[n - 1 - i];
    e->nseq = n;
}

/* The root unit's forward is the whole model's: it takes the model's input and gives its
 * output. Every other unit is entered at its first module and left after its last. */
static void mark_unit_boundaries(Engine *e) {
    int nm = e->model->nmodules;
    e->unit_entry[0] = e->unit_exit[nm - 1] = 1;
    for (int u = 0; u < e->plan->nunits; u++) {
        const Unit *unit = &e->plan->units[u];
        if (unit->is_root || !unit->nmodules) continue;
        e->unit_entry[unit->modules[0]] = 1;
        e->unit_exit[unit->modules[unit->nmodules - 1]] = 1;
    }
}

/* e->spans: one span per parameter and rank of the unit with the most parameters (unpacking
 * every rank's rows is the longest list); accounting-only runs pack their own rows only. */
static int create_span_room(Engine *e, Err *err) {
    size_t most = 1;
    for (int u = 0; u < e->plan->nunits; u++)
        if ((size_t)e->plan->units[u].nparams > most) most = (size_t)e->plan->units[u].nparams;
    e->spans_cap = most * (e->dev->accounting_only ? 1 : (size_t)e->plan->shard_size);
    e->spans = calloc(e->spans_cap, sizeof *e->spans);
    if (!e->spans) return err_set(err, ERR_NOMEM, "out of memory creating the engine");
    return 0;
}

static int create_tables(Engine *e, Err *err) {
    const ModelDesc *m = e->model;
    e->units = calloc((size_t)e->plan->nunits + 1, sizeof *e->units);
    e->fwd_seq = calloc((size_t)m->nmodules + 1, sizeof *e->fwd_seq);
    e->bwd_seq = calloc((size_t)m->nmodules + 1, sizeof *e->bwd_seq);
    e->module_first_up = calloc((size_t)m->nmodules + 1, sizeof *e->module_first_up);
    e->param_flat = calloc((size_t)m->nparams + 1, sizeof *e->param_flat);
    e->checkpointed = calloc((size_t)m->nmodules + 1, 1);
    e->unit_entry = calloc((size_t)m->nmodules + 1, 1);
    e->unit_exit = calloc((size_t)m->nmodules + 1, 1);
    if (!e->units || !e->fwd_seq || !e->bwd_seq || !e->module_first_up || !e->param_flat ||
        !e->checkpointed || !e->unit_entry || !e->unit_exit)
        return err_set(err, ERR_NOMEM, "out of memory creating the engine");
    for (int i = 0; i < m->nmodules; i++)
        e->checkpointed[i] = (char)fsdp_module_checkpointed(&e->cfg, m, i);
    mark_unit_boundaries(e);
    size_t flat = 0;
    for (int i = 0; i < m->nparams; i++) {
        e->param_flat[i] = flat;
        flat += m->params[i].numel;
    }
    for (int u = 0; u < e->plan->nunits; u++) {
        const Unit *unit = &e->plan->units[u];
        for (int i = unit->nparams - 1; i >= 0; i--)
            e->module_first_up[m->params[unit->params[i].param].module] = i;
    }
    entry_sequences(e);
    return create_span_room(e, err);
}

int engine_create(Engine **out, const FsdpConfig *cfg, const Plan *plan, const ModelDesc *model,
                  RankEnv env, Err *err) {
    Engine *e = calloc(1, sizeof *e);
    if (!e) return err_set(err, ERR_NOMEM, "out of memory creating the engine");
    *out = e;
    e->cfg = *cfg;
    e->plan = plan;
    e->model = model;
    e->env = env;
    e->dev = env.dev;
    e->k = env.k;
    e->compute_dtype = kernels_computes_in(env.k, cfg->param_dtype) ? cfg->param_dtype : DTYPE_FP32;
    e->reshard = fsdp_reshard_after_forward(cfg);
    e->shard_rank = plan_shard_rank(plan, env.rank);
    e->optim_rank = plan_optim_rank(plan, env.rank);
    e->optim_size = plan_optim_size(plan);
    e->loss_scale = 65536.0f;
    if (plan->layout != cfg->layout ||
        (cfg->layout == LAYOUT_DEEPSPEED &&
         (plan->param_store != cfg->param_dtype || plan->grad_store != cfg->reduce_dtype)))
        return err_set(err, ERR_INTERNAL,
                       "the plan's layout is not the config's (make it with fsdp_plan_create)");
    if (fsdp_check_casts(cfg, e->compute_dtype, err)) return ERR_USAGE;
    if (cfg->ac_every > 0 && !model->ops->checkpoint)
        return err_set(err, ERR_USAGE,
                       "--activation-checkpointing: the %s model has no blocks to checkpoint "
                       "(it saves only each layer's input); use a ViT",
                       model->name);
    if (ac_policy_check(cfg, err)) return ERR_USAGE;
    int rc = create_tables(e, err);
    if (!rc && nvme_on(e)) { /* the file first: each unit goes there as it is created */
        for (int u = 0; u < plan->nunits; u++) unit_sizes(e, u);
        rc = nvme_open(e, err);
    }
    for (int u = 0; !rc && u < plan->nunits; u++) rc = create_unit_state(e, u, err);
    if (!rc)
        rc = model->ops->run_create(model, env.dev, env.k, e->compute_dtype,
                                    (size_t)cfg->batch_size, &e->run, err);
    return rc;
}

void engine_destroy(Engine *e) {
    if (!e) return;
    if (e->run) e->model->ops->run_destroy(e->run);
    for (int u = 0; e->units && u < e->plan->nunits; u++) {
        UnitState *us = &e->units[u];
        reshard(e, u);
        if (e->tier) {
            Err ignored = {0}; /* teardown: the file goes whatever its last writes did */
            nvme_drop(e, u, &ignored);
        }
        void *on_device[] = {us->nvme_bytes,  us->ugrad_owned ? us->ugrad : NULL,
                             us->gather_send, us->gather_recv,
                             us->reduce_send, us->reduce_buf,
                             us->param,       us->grad,
                             us->m,           us->v,
                             us->master,      us->grad32};
        for (size_t i = 0; i < sizeof on_device / sizeof *on_device; i++) /* in this order */
            dev_free(e, on_device[i], u);
        void *on_host[] = {us->param_local, us->grad_local, us->optim_local, us->param_ptrs,
                           us->grad_ptrs};
        for (size_t i = 0; i < sizeof on_host / sizeof *on_host; i++) free(on_host[i]);
    }
    void *tables[] = {e->units,           e->fwd_seq,    e->bwd_seq,
                      e->module_first_up, e->param_flat, e->checkpointed,
                      e->unit_entry,      e->unit_exit,  e->spans};
    for (size_t i = 0; i < sizeof tables / sizeof *tables; i++) free(tables[i]);
    if (e->tier) e->env.tier->close(e->tier); /* removes the file */
    free(e);
}
