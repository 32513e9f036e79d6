/* fsdp: the engine. One rank's side of FSDP training (SPMD: every rank runs this same
 * code): it keeps the rank's shards, gathers a unit's parameters before its forward and
 * backward, reduce-scatters gradients after backward, frees what is no longer needed, and
 * steps Adam on local rows only. Strategies ddp, zero1, zero2, zero3 and hsdp are knobs of
 * this one schedule. It talks only to the device, comm and kernels interfaces. */
#ifndef FSDP_FSDP_H
#define FSDP_FSDP_H

#include <stdint.h>

#include "engine/comm.h"
#include "engine/device.h"
#include "engine/lr_schedule.h"
#include "engine/model.h"
#include "engine/plan.h"
#include "engine/tier.h"
#include "engine/trace.h"
#include "kernels/kernels.h"

typedef struct FsdpConfig {
    Strategy strategy;
    int replicas; /* hsdp: replica groups */
    WrapPolicy wrap;
    int reshard_after_forward; /* -1: the strategy's default (zero3/hsdp yes, zero2 no) */
    int prefetch_forward;      /* units gathered ahead in forward */
    int prefetch_backward;     /* units gathered ahead in backward */
    /* 1: a unit's backward waits for its gradients' reduction and only then frees its
     * unsharded parameters and gradients: backward, reduce-scatter, free, the strict order the
     * workshop's seed tells (fsdp viz --seed-order). 0 (default): FSDP2's post-backward, which
     * frees the unit at once and lets the reduction run behind the next unit's backward. The
     * same values either way; only when memory is freed, and so the peak and the times, move. */
    int free_after_reduce;
    int grad_accum;       /* micro-steps per optimizer step (sync off between) */
    float clip_grad_norm; /* 0: off */
    OptimKind optim;
    float lr, beta1, beta2, eps, weight_decay;
    /* how lr moves over a run (the training loop sets each step's rate: engine_set_lr) */
    LrSchedule lr_schedule;
    DType param_dtype, reduce_dtype;
    StoreLayout layout; /* how parameters and gradients rest (plan.h): FSDP2's or DeepSpeed's */
    /* FSDP2's MixedPrecisionPolicy: each unit's forward outputs cast to output_dtype (a DType;
     * -1: left as computed, FSDP2's None), and its floating-point inputs cast to param_dtype
     * when cast_forward_inputs (default 1). The simulator computes in fp32 on rounded values,
     * so these casts are where it rounds activations and their gradients. */
    int output_dtype;
    int cast_forward_inputs;
    OffloadKind offload;
    const char *nvme_dir; /* --offload nvme: where each rank's file goes */
    int batch_size;       /* per rank, per micro-step */
    uint64_t seed;
    int ac_every;       /* activation checkpointing of every K-th block (1: all of them; 0: off) */
    AcPolicy ac_policy; /* what a checkpointed block keeps (AC_BLOCK: its input) */
} FsdpConfig;

void fsdp_config_defaults(FsdpConfig *c);
/* The plan this config trains with on `world` ranks: its strategy, wrap and layout. */
int fsdp_plan_create(Plan *p, const ModelDesc *m, const FsdpConfig *c, int world, Err *err);
/* The value reshard_after_forward really takes for this config. */
int fsdp_reshard_after_forward(const FsdpConfig *c);
/* 1 if activation checkpointing applies to module m: it is the K-th, 2K-th, ... block of the
 * model (counting blocks from 1, as torchtitan's ac_freq does). */
int fsdp_module_checkpointed(const FsdpConfig *c, const ModelDesc *m, int module);
/* AC_OPS and AC_TORCHTITAN say what a checkpointed block keeps: they need checkpointing on
 * (one line, ERR_USAGE; else 0). */
int ac_policy_check(const FsdpConfig *c, Err *err);
/* 1 if this config uses fp16 loss scaling. */
int fsdp_uses_loss_scaling(const FsdpConfig *c);
/* The casts a job computing in `compute` can make: a unit computing in bf16 or fp16 takes its
 * inputs in it, so cast_forward_inputs off needs fp32 (one line, ERR_USAGE). */
int fsdp_check_casts(const FsdpConfig *c, DType compute, Err *err);

/* What a rank runs on. shard_comm/replica_comm are the hsdp groups (else shard_comm is
 * world_comm and replica_comm is NULL). */
typedef struct RankEnv {
    int rank, world;
    Device *dev;
    const Kernels *k;
    Comm *world_comm, *shard_comm, *replica_comm;
    TraceBuf *trace;     /* may be NULL */
    const TierOps *tier; /* --offload nvme's storage (io's nvme_tier_ops); NULL: none */
} RankEnv;

typedef struct Engine Engine;

typedef struct StepStats {
    float loss;       /* mean over the global batch (when requested), else this rank's */
    float grad_norm;  /* before clipping (0 if clipping is off and not requested) */
    float loss_scale; /* fp16 only */
    int skipped;      /* fp16: the step had inf/nan gradients and was skipped */
} StepStats;

int engine_create(Engine **out, const FsdpConfig *cfg, const Plan *plan, const ModelDesc *model,
                  RankEnv env, Err *err);
void engine_destroy(Engine *e);

/* One optimizer step: grad_accum micro-steps, each on `batch` samples of ds given by
 * indices[micro * batch ...]. global_loss: all-reduce the loss for reporting. */
int engine_step(Engine *e, const Dataset *ds, const long *indices, int global_loss,
                StepStats *stats, Err *err);

/* What evaluating one batch gave on this rank. */
typedef struct EvalStats {
    double loss_sum; /* loss times samples */
    size_t correct;  /* samples classified right (0 for a model that does not classify) */
} EvalStats;

/* Forward only (no gradients, no optimizer step) on `n` samples of ds; n may be 0, and every
 * rank must call it the same number of times since it gathers parameters. Every unit is
 * resharded afterwards, so the rank is back at rest. */
int engine_evaluate(Engine *e, const Dataset *ds, const long *indices, size_t n, EvalStats *st,
                    Err *err);
/* engine_evaluate's forward, and the model's output for the batch (its last module's forward
 * output, the logits: fp32 under the default config) copied to host memory out, which holds cap
 * floats (more: ERR_INTERNAL). What a language model samples its next token from. */
int engine_forward_outputs(Engine *e, const Dataset *ds, const long *indices, size_t n, float *out,
                           size_t cap, Err *err);

/* Gathers the full fp32 parameters of every unit into out (model->total_numel floats,
 * parameters in model order). Collective: every rank must call it. */
int engine_full_params(Engine *e, float *out, Err *err);
/* Hands sink, unit after unit, each unit's gathered fp32 parameters in host memory (the unit's
 * layout: parameter i of the unit at plan->units[u].params[i].offset), on every rank: a rank
 * never holds more than its shards plus one gathered unit. Collective. */
typedef int (*UnitSink)(void *user, int unit, const float *full, Err *err);
int engine_gather_units(Engine *e, UnitSink sink, void *user, Err *err);

/* Replaces the parameters with `full` (model->total_numel floats, parameters in model order,
 * host memory): each rank copies only its own rows. No communication. */
int engine_set_full_params(Engine *e, const float *full, Err *err);

/* Copies the fp32 parameters and the last step's gradients (as the optimizer used them) that
 * this rank is the one to report into host arrays of model->total_numel floats in model order:
 * its own rows of sharded values, everything on rank 0 for replicated ones, nothing on other
 * replicas. grads may be NULL. Every rank filling the same two arrays assembles the whole
 * model without a write race. No communication; for looking at, not for checkpoints. */
int engine_own_values(Engine *e, float *params, float *grads, Err *err);
/* From the next reduction on, copies each unit's unsharded fp32 gradients as this rank's
 * backward left them, before any averaging (with fp16 loss scaling, still scaled), into host
 * array `out` of model->total_numel floats in model order, as the unit's reduction starts;
 * NULL stops. Only where a rank holds whole unsharded gradients (every strategy but an
 * accounting-only device). For looking at a small model's numbers, not for training. */
void engine_record_local_grads(Engine *e, float *out);

long engine_steps_done(const Engine *e);

/* The learning rate of the steps from now on (the training loop's schedule gives each step its
 * own; the engine starts at cfg->lr). No communication: every rank sets the same rate. */
void engine_set_lr(Engine *e, float lr);

/* ---- state for checkpoints */

/* What a checkpoint holds of each parameter: its fp32 values and Adam's two moments. */
typedef enum { STATE_PARAM = 0, STATE_ADAM_M, STATE_ADAM_V, STATE_KIND_COUNT } StateKind;

const char *state_kind_name(StateKind k); /* "param", "adam_m", "adam_v" */

/* Rows [row_begin, row_begin + rows) of model parameter `param`'s `kind`: rows * row_elems
 * floats in host memory. */
typedef struct StatePiece {
    int param;
    StateKind kind;
    size_t row_begin, rows, row_elems;
    float *data;
} StatePiece;

typedef int (*StateFn)(void *user, const StatePiece *piece, Err *err);

/* Hands fn, one at a time, every piece of state this rank is the one to save: its own rows of
 * sharded state, everything on rank 0 for replicated state, nothing on later replicas (data is
 * valid during the call). No communication. */
int engine_save_state(Engine *e, StateFn fn, void *user, Err *err);
/* Asks fn to fill every piece of state this rank keeps now (its rows at this world size and
 * strategy, whatever saved them) and copies each to the device. No communication. */
int engine_load_state(Engine *e, StateFn fn, void *user, Err *err);

/* fp16's loss scale doubles after this many steps in a row without an overflow (GradScaler's
 * growth interval). */
#define ENGINE_SCALE_GROWTH_INTERVAL 2000

/* What besides tensors a resumed run needs to continue exactly: Adam's step count (bias
 * correction) and fp16's loss scale with its count of good steps. */
typedef struct EngineCounters {
    long steps;
    float loss_scale;
    int good_steps;
} EngineCounters;

EngineCounters engine_counters(const Engine *e);
void engine_set_counters(Engine *e, EngineCounters c);

#endif
