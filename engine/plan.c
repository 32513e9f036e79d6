/* plan: who owns what. Units from the wrap policy, each parameter's dim-0 shard (torch.chunk's
 * rows), the strategy's groups, the at-rest bytes each rank must match; the flags' names. */
#include "engine/plan.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char *const strategy_names_table[STRAT_COUNT] = {"ddp", "zero1", "zero2", "zero3",
                                                              "hsdp"};

const char *strategy_name(Strategy s) {
    return (s >= 0 && s < STRAT_COUNT) ? strategy_names_table[s] : "?";
}

int strategy_parse(const char *s, Strategy *out) {
    for (int i = 0; i < STRAT_COUNT; i++)
        if (strcmp(s, strategy_names_table[i]) == 0) {
            *out = (Strategy)i;
            return 0;
        }
    return -1;
}

const char *strategy_names(void) {
    return "ddp, zero1, zero2, zero3, hsdp";
}

static int parse_positive_long(const char *s, long *out) {
    char *end;
    long v = strtol(s, &end, 10);
    if (end == s || *end || v <= 0) return -1;
    *out = v;
    return 0;
}

int wrap_parse(const char *s, WrapPolicy *out) {
    memset(out, 0, sizeof *out);
    if (strcmp(s, "layer") == 0)
        out->kind = WRAP_LAYER;
    else if (strcmp(s, "none") == 0)
        out->kind = WRAP_NONE;
    else if (strncmp(s, "block:", 6) == 0) {
        out->kind = WRAP_BLOCK;
        return parse_positive_long(s + 6, &out->arg);
    } else if (strncmp(s, "size:", 5) == 0) {
        out->kind = WRAP_SIZE;
        return parse_positive_long(s + 5, &out->arg);
    } else
        return -1;
    return 0;
}

void wrap_format(const WrapPolicy *w, char *buf, size_t n) {
    switch (w->kind) {
    case WRAP_LAYER:
        snprintf(buf, n, "layer");
        break;
    case WRAP_NONE:
        snprintf(buf, n, "none");
        break;
    case WRAP_BLOCK:
        snprintf(buf, n, "block:%ld", w->arg);
        break;
    case WRAP_SIZE:
        snprintf(buf, n, "size:%ld", w->arg);
        break;
    }
}

void shard_rows(size_t d0, int S, int r, size_t *begin, size_t *rows) {
    size_t chunk = (d0 + (size_t)S - 1) / (size_t)S;
    size_t b = chunk * (size_t)r;
    if (b > d0) b = d0;
    size_t e = b + chunk > d0 ? d0 : b + chunk;
    *begin = b;
    *rows = e - b;
}

/* Assigns each module a unit id following the wrap policy; returns the unit count.
 * Unit ids follow first use in forward, so unit order is execution order. */
static int assign_units(const ModelDesc *m, WrapPolicy w, int *module_unit, int *root_unit) {
    int n = 0;
    long acc = 0;
    int blocks_in_unit = 0;
    *root_unit = -1;
    for (int i = 0; i < m->nmodules; i++) {
        const ModuleSpec *mod = &m->modules[i];
        size_t numel = 0;
        for (int j = 0; j < mod->nparams; j++) numel += m->params[mod->first_param + j].numel;
        int wrapped = (w.kind == WRAP_LAYER || w.kind == WRAP_BLOCK) && mod->is_block;
        if (w.kind == WRAP_NONE || (!wrapped && w.kind != WRAP_SIZE)) {
            if (*root_unit < 0) *root_unit = n++;
            module_unit[i] = *root_unit;
            continue;
        }
        if (w.kind == WRAP_LAYER) {
            module_unit[i] = n++;
        } else if (w.kind == WRAP_BLOCK) {
            /* K consecutive blocks share a unit */
            int follows_block = i > 0 && m->modules[i - 1].is_block && blocks_in_unit > 0;
            if (!follows_block || blocks_in_unit == w.arg) {
                n++;
                blocks_in_unit = 0;
            }
            module_unit[i] = n - 1;
            blocks_in_unit++;
        } else { /* size: consecutive modules until the unit reaches N parameters */
            if (i == 0 || acc >= w.arg) {
                n++;
                acc = 0;
            }
            module_unit[i] = n - 1;
            acc += (long)numel;
        }
    }
    return n;
}

static int build_unit(Plan *p, int u, int root_unit, Err *err) {
    const ModelDesc *m = p->model;
    Unit *unit = &p->units[u];
    unit->is_root = (u == root_unit);
    for (int i = 0; i < m->nmodules; i++)
        if (p->module_unit[i] == u) {
            unit->nmodules++;
            unit->nparams += m->modules[i].nparams;
        }
    unit->modules = calloc((size_t)unit->nmodules + 1, sizeof *unit->modules);
    unit->params = calloc((size_t)unit->nparams + 1, sizeof *unit->params);
    if (!unit->modules || !unit->params) return err_set(err, ERR_NOMEM, "out of memory in plan");
    int nm = 0, np = 0;
    for (int i = 0; i < m->nmodules; i++) {
        if (p->module_unit[i] != u) continue;
        unit->modules[nm++] = i;
        for (int j = 0; j < m->modules[i].nparams; j++) {
            const ParamSpec *ps = &m->params[m->modules[i].first_param + j];
            UnitParam *up = &unit->params[np++];
            up->param = m->modules[i].first_param + j;
            up->offset = unit->numel;
            up->wire_offset = unit->wire_numel;
            up->chunk_rows =
                ((size_t)ps->shape[0] + (size_t)p->shard_size - 1) / (size_t)p->shard_size;
            unit->numel += ps->numel;
            unit->wire_numel += up->chunk_rows * ps->row_elems;
        }
    }
    if (unit->is_root)
        snprintf(unit->name, sizeof unit->name, "root");
    else if (unit->nmodules == 1)
        snprintf(unit->name, sizeof unit->name, "%s", m->modules[unit->modules[0]].name);
    else
        snprintf(unit->name, sizeof unit->name, "%s..%s", m->modules[unit->modules[0]].name,
                 m->modules[unit->modules[unit->nmodules - 1]].name);
    return 0;
}

static void set_strategy_shape(Plan *p, Strategy s, int world, int replicas) {
    p->strategy = s;
    p->world = world;
    p->shard_size = world;
    p->replicas = 1;
    p->params_sharded = p->grads_sharded = p->optim_sharded = 1;
    if (s == STRAT_DDP) {
        p->shard_size = 1;
        p->replicas = world;
        p->params_sharded = p->grads_sharded = p->optim_sharded = 0;
    } else if (s == STRAT_ZERO1) {
        p->params_sharded = p->grads_sharded = 0;
    } else if (s == STRAT_HSDP) {
        p->replicas = replicas;
        p->shard_size = world / replicas;
    }
}

int plan_create(Plan *p, const ModelDesc *m, WrapPolicy wrap, Strategy s, int world, int replicas,
                Err *err) {
    memset(p, 0, sizeof *p);
    if (world < 1) return err_set(err, ERR_USAGE, "world size must be at least 1");
    if (s == STRAT_HSDP && (replicas < 1 || world % replicas != 0))
        return err_set(err, ERR_USAGE, "hsdp needs replicas (%d) that divide the ranks (%d)",
                       replicas, world);
    p->model = m;
    set_strategy_shape(p, s, world, replicas);
    plan_use_layout(p, LAYOUT_FSDP, DTYPE_FP32, DTYPE_FP32);
    p->module_unit = calloc((size_t)m->nmodules + 1, sizeof *p->module_unit);
    if (!p->module_unit) return err_set(err, ERR_NOMEM, "out of memory in plan");
    int root_unit;
    p->nunits = assign_units(m, wrap, p->module_unit, &root_unit);
    p->units = calloc((size_t)p->nunits + 1, sizeof *p->units);
    if (!p->units) return err_set(err, ERR_NOMEM, "out of memory in plan");
    for (int u = 0; u < p->nunits; u++) {
        int rc = build_unit(p, u, root_unit, err);
        if (rc) {
            plan_free(p);
            return rc;
        }
    }
    return 0;
}

void plan_use_layout(Plan *p, StoreLayout layout, DType param_dtype, DType reduce_dtype) {
    p->layout = layout;
    p->param_store = p->grad_store = DTYPE_FP32;
    p->master = 0;
    if (layout != LAYOUT_DEEPSPEED) return;
    p->param_store = param_dtype;
    p->grad_store = reduce_dtype;
    p->master = param_dtype != DTYPE_FP32;
    /* DeepSpeed's stage 2: gradients and optimizer state partitioned, parameters whole */
    if (p->strategy == STRAT_ZERO2) p->params_sharded = 0;
}

static const char *const layout_names[] = {"fsdp", "deepspeed"};

const char *layout_name(StoreLayout l) {
    return l == LAYOUT_FSDP || l == LAYOUT_DEEPSPEED ? layout_names[l] : "unknown";
}

int layout_parse(const char *s, StoreLayout *out) {
    for (int l = LAYOUT_FSDP; l <= LAYOUT_DEEPSPEED; l++)
        if (!strcmp(s, layout_names[l])) {
            *out = (StoreLayout)l;
            return 0;
        }
    return -1;
}

void plan_free(Plan *p) {
    for (int u = 0; p->units && u < p->nunits; u++) {
        free(p->units[u].modules);
        free(p->units[u].params);
    }
    free(p->units);
    free(p->module_unit);
    p->units = NULL;
    p->module_unit = NULL;
}

int plan_shard_rank(const Plan *p, int world_rank) {
    return world_rank % p->shard_size;
}

int plan_optim_rank(const Plan *p, int world_rank) {
    return p->optim_sharded ? world_rank % p->shard_size : 0;
}

int plan_optim_size(const Plan *p) {
    return p->optim_sharded ? p->shard_size : 1;
}

/* Elements of unit u in the rows a rank of a group of `size` owns. */
static size_t owned_numel(const Plan *p, int u, int size, int rank) {
    const Unit *unit = &p->units[u];
    size_t total = 0;
    for (int i = 0; i < unit->nparams; i++) {
        const ParamSpec *ps = &p->model->params[unit->params[i].param];
        size_t begin, rows;
        shard_rows((size_t)ps->shape[0], size, rank, &begin, &rows);
        total += rows * ps->row_elems;
    }
    return total;
}

size_t plan_param_numel(const Plan *p, int u, int world_rank) {
    if (!p->params_sharded) return p->units[u].numel;
    return owned_numel(p, u, p->shard_size, plan_shard_rank(p, world_rank));
}

size_t plan_grad_numel(const Plan *p, int u, int world_rank) {
    if (!p->grads_sharded) return p->units[u].numel;
    return owned_numel(p, u, p->shard_size, plan_shard_rank(p, world_rank));
}

size_t plan_optim_numel(const Plan *p, int u, int world_rank) {
    return owned_numel(p, u, plan_optim_size(p), plan_optim_rank(p, world_rank));
}

size_t plan_optim_bytes_per_elem(const Plan *p) {
    return (size_t)(2 + p->master) * sizeof(float);
}

RestBytes plan_rest_bytes(const Plan *p, int world_rank, OffloadKind offload) {
    RestBytes b = {0};
    for (int u = 0; u < p->nunits; u++) {
        b.param += plan_param_numel(p, u, world_rank) * dtype_size(p->param_store);
        b.grad += plan_grad_numel(p, u, world_rank) * dtype_size(p->grad_store);
        b.optim += plan_optim_numel(p, u, world_rank) * plan_optim_bytes_per_elem(p);
    }
    if (offload == OFFLOAD_CPU) {
        b.host = b.param + b.grad + b.optim;
        b.param = b.grad = b.optim = 0;
    } else if (offload == OFFLOAD_OPTIMIZER) { /* ZeRO-Offload: sharded gradients rest there too */
        b.host = b.optim + (p->grads_sharded ? b.grad : 0);
        b.optim = 0;
        if (p->grads_sharded) b.grad = 0;
    } else if (offload == OFFLOAD_NVME) { /* params and Adam on disk, grads in host memory */
        b.nvme = b.param + b.optim;
        b.host = b.grad;
        b.param = b.grad = b.optim = 0;
    }
    return b;
}

static const char *const offload_names[] = {"none", "cpu", "optimizer", "nvme"};

const char *offload_name(OffloadKind k) {
    return k >= OFFLOAD_NONE && k <= OFFLOAD_NVME ? offload_names[k] : "unknown";
}

int offload_parse(const char *s, OffloadKind *out) {
    for (int k = OFFLOAD_NONE; k <= OFFLOAD_NVME; k++)
        if (!strcmp(s, offload_names[k])) {
            *out = (OffloadKind)k;
            return 0;
        }
    return -1;
}
