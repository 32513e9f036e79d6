/* plan: who owns what. From a model, a wrap policy, a strategy and a world size, the plan
 * groups modules into FSDP units, shards every parameter on dim 0 with torch.chunk
 * semantics (rank r of a group of S owns rows [r*ceil(d0/S), ...), the last shard may be
 * short or empty) and lays out each unit's packed wire block. It also gives the at-rest
 * memory formula every rank must match. Pure arithmetic: no memory is allocated for data. */
#ifndef FSDP_PLAN_H
#define FSDP_PLAN_H

#include <stddef.h>

#include "base/err.h"
#include "engine/model.h"
#include "kernels/dtype.h"

typedef enum {
    STRAT_DDP = 0,
    STRAT_ZERO1,
    STRAT_ZERO2,
    STRAT_ZERO3,
    STRAT_HSDP,
    STRAT_COUNT
} Strategy;
typedef enum { WRAP_LAYER = 0, WRAP_BLOCK, WRAP_SIZE, WRAP_NONE } WrapKind;
/* Where resting state lives: all on the device; FSDP2's CPUOffloadPolicy (shards, grads and
 * optimizer state in host memory); ZeRO-Offload (only the optimizer state and its step on
 * the host). */
typedef enum { OFFLOAD_NONE = 0, OFFLOAD_CPU, OFFLOAD_OPTIMIZER, OFFLOAD_NVME } OffloadKind;

const char *offload_name(OffloadKind k); /* "none", "cpu", "optimizer", "nvme" */
int offload_parse(const char *s, OffloadKind *out);
typedef enum { OPTIM_ADAM = 0, OPTIM_ADAMW } OptimKind;
/* How a rank stores its model state at rest. FSDP2's: a rank's parameter rows are the fp32
 * master and its gradients rest in fp32; param_dtype is only what a gather sends. DeepSpeed's
 * mixed precision (the ZeRO paper's K = 12): parameters rest in param_dtype and gradients in
 * reduce_dtype, and the optimizer keeps an fp32 master copy of its rows beside Adam's moments;
 * its zero2 keeps the parameters whole on every rank, where FSDP's shards them at rest. */
typedef enum { LAYOUT_FSDP = 0, LAYOUT_DEEPSPEED } StoreLayout;

const char *layout_name(StoreLayout l); /* "fsdp", "deepspeed" */
int layout_parse(const char *s, StoreLayout *out);

const char *strategy_name(Strategy s);
int strategy_parse(const char *s, Strategy *out);
const char *strategy_names(void); /* "ddp, zero1, zero2, zero3, hsdp" */

typedef struct WrapPolicy {
    WrapKind kind;
    long arg; /* block:K -> K blocks per unit; size:N -> N parameters per unit */
} WrapPolicy;

/* Parses "layer", "block:K", "size:N", "none". */
int wrap_parse(const char *s, WrapPolicy *out);
void wrap_format(const WrapPolicy *w, char *buf, size_t n);

/* Rows [begin, begin+rows) of a dim-0 size d0 that rank r of S owns (torch.chunk). */
void shard_rows(size_t d0, int S, int r, size_t *begin, size_t *rows);

typedef struct UnitParam {
    int param;          /* index into ModelDesc.params */
    size_t offset;      /* in the unit's unsharded flat buffer (elements) */
    size_t wire_offset; /* in one rank's padded wire block (elements) */
    size_t chunk_rows;  /* ceil(d0 / S): rows every wire block reserves */
} UnitParam;

typedef struct Unit {
    char name[136]; /* "La", "root", or "first..last" module names */
    int nmodules;
    int *modules; /* in forward order */
    int nparams;
    UnitParam *params;
    size_t numel;      /* unsharded elements */
    size_t wire_numel; /* padded elements per rank on the wire */
    int is_root;       /* FSDP2 keeps the root gathered between forward and backward */
} Unit;

typedef struct Plan {
    Strategy strategy;
    int world;      /* N */
    int shard_size; /* S: ranks a parameter is sharded over (1 under ddp) */
    int replicas;   /* R = N / S for hsdp, N for ddp, 1 otherwise */
    int params_sharded, grads_sharded, optim_sharded;
    StoreLayout layout;
    DType param_store, grad_store; /* what resting parameters and gradients are kept in */
    int master;                    /* the optimizer keeps an fp32 master copy of its rows */
    int nunits;
    Unit *units;
    int *module_unit; /* module -> unit */
    const ModelDesc *model;
} Plan;

int plan_create(Plan *p, const ModelDesc *m, WrapPolicy wrap, Strategy s, int world, int replicas,
                Err *err);
void plan_free(Plan *p);
/* Switches a plan made by plan_create (FSDP's layout) to `layout` for a run whose gathers send
 * param_dtype and whose reductions run in reduce_dtype. */
void plan_use_layout(Plan *p, StoreLayout layout, DType param_dtype, DType reduce_dtype);

/* The group rank used for sharding: rank within the shard group (hsdp) or world. */
int plan_shard_rank(const Plan *p, int world_rank);
/* Rank used to split optimizer state (zero1 splits over the world). */
int plan_optim_rank(const Plan *p, int world_rank);
int plan_optim_size(const Plan *p);

/* Elements of unit u's parameters this rank keeps at rest (its rows, or everything). */
size_t plan_param_numel(const Plan *p, int u, int world_rank);
size_t plan_grad_numel(const Plan *p, int u, int world_rank);
size_t plan_optim_numel(const Plan *p, int u, int world_rank); /* per moment */
/* Bytes of one fp32 tensor the optimizer keeps per element it updates: Adam's m and v, and
 * the master copy when the layout has one. */
size_t plan_optim_bytes_per_elem(const Plan *p);

/* At-rest bytes of one rank by category: the formula the accounting must equal. */
typedef struct RestBytes {
    size_t param, grad, optim, host; /* host: what offload moved to host memory */
    size_t nvme;                     /* what the NVMe tier keeps in its file */
} RestBytes;
RestBytes plan_rest_bytes(const Plan *p, int world_rank, OffloadKind offload);

#endif
