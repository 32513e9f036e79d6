/* cli: the flags of `fsdp train` (and of viz and plan, which take train's) as one table that
 * the parser and the help both read, and what every command does with an error: one line on
 * stderr, exit 2 for bad input, 1 for a failure. */
#include "cmd/cli.h"

#include "cmd/commands.h"

#include <stddef.h>
#include <stdlib.h>
#include <string.h>

#include "engine/train.h"
#include "io/text.h"

void train_args_defaults(TrainArgs *a) {
    memset(a, 0, sizeof *a);
    fsdp_config_defaults(&a->fsdp);
    a->fsdp.lr = 0.05f;
    snprintf(a->model, sizeof a->model, "toy");
    snprintf(a->profile, sizeof a->profile, "h100-nvlink");
    snprintf(a->split, sizeof a->split, "train");
    a->eval = 1;
    a->ranks = 3;
    a->steps = 100;
    a->keep = 3;
    a->timeout = 600;
}

/* ---------------------------------------------------------------- the odd flags' setters */

static int not_one_of(const char *flag, const char *accepted, const char *v, Err *err) {
    return err_set(err, ERR_USAGE, "%s must be %s (got '%s')", flag, accepted, v);
}

static int set_seed(void *args, const char *flag, const char *v, Err *err) {
    long s;
    int rc = cli_parse_long(flag, v, 0, 0x7fffffffffffffffL, &s, err);
    if (!rc) ((TrainArgs *)args)->fsdp.seed = (uint64_t)s;
    return rc;
}

static int set_strategy(void *args, const char *flag, const char *v, Err *err) {
    if (!strategy_parse(v, &((TrainArgs *)args)->fsdp.strategy)) return 0;
    return err_set(err, ERR_USAGE, "%s must be one of %s (got '%s')", flag, strategy_names(), v);
}

static int set_wrap(void *args, const char *flag, const char *v, Err *err) {
    if (!wrap_parse(v, &((TrainArgs *)args)->fsdp.wrap)) return 0;
    return not_one_of(flag, "layer, block:K, size:N or none", v, err);
}

static int set_layout(void *args, const char *flag, const char *v, Err *err) {
    if (!layout_parse(v, &((TrainArgs *)args)->fsdp.layout)) return 0;
    return not_one_of(flag, "fsdp or deepspeed", v, err);
}

static int set_offload(void *args, const char *flag, const char *v, Err *err) {
    if (!offload_parse(v, &((TrainArgs *)args)->fsdp.offload)) return 0;
    return not_one_of(flag, "none, optimizer, cpu or nvme", v, err);
}

static int set_optim(void *args, const char *flag, const char *v, Err *err) {
    OptimKind *optim = &((TrainArgs *)args)->fsdp.optim;
    if (!strcmp(v, "adam"))
        *optim = OPTIM_ADAM;
    else if (!strcmp(v, "adamw"))
        *optim = OPTIM_ADAMW;
    else
        return not_one_of(flag, "adam or adamw", v, err);
    return 0;
}

/* output_dtype is an int: -1 (its default) leaves each unit's output as computed. */
static int set_output_dtype(void *args, const char *flag, const char *v, Err *err) {
    DType t;
    if (dtype_parse(v, &t)) return not_one_of(flag, "fp32, bf16 or fp16", v, err);
    ((TrainArgs *)args)->fsdp.output_dtype = (int)t;
    return 0;
}

static int set_split(void *args, const char *flag, const char *v, Err *err) {
    TrainArgs *a = args;
    if (strcmp(v, "train") && strcmp(v, "test")) return not_one_of(flag, "train or test", v, err);
    snprintf(a->split, sizeof a->split, "%s", v);
    return 0;
}

static int set_scenario(void *args, const char *flag, const char *v, Err *err) {
    if (strcmp(v, "workshop")) return not_one_of(flag, "workshop", v, err);
    ((TrainArgs *)args)->scenario_workshop = 1;
    return 0;
}

static int set_backend(void *args, const char *flag, const char *v, Err *err) {
    static const char *const names[] = {"sim", "cuda", "mpi", "auto"}; /* in Backend's order */
    for (int i = 0; i < 4; i++)
        if (!strcmp(v, names[i])) {
            ((TrainArgs *)args)->backend = (Backend)i;
            return 0;
        }
    return not_one_of(flag, "sim, cuda, mpi or auto", v, err);
}

static int set_lr_schedule(void *args, const char *flag, const char *v, Err *err) {
    if (!lr_schedule_parse(v, &((TrainArgs *)args)->fsdp.lr_schedule.kind)) return 0;
    return not_one_of(flag, "constant, cosine, linear or step", v, err);
}

/* "STEP" or "STEP:RANK" (rank 0 by default). */
static int set_fail_at(void *args, const char *flag, const char *v, Err *err) {
    TrainArgs *a = args;
    char *end;
    long step = strtol(v, &end, 10), rank = 0;
    if (end != v && *end == ':') {
        const char *r = end + 1;
        rank = strtol(r, &end, 10);
        if (end == r) step = 0;
    }
    if (end == v || *end || step < 1 || rank < 0 || rank >= CLI_MAX_RANKS)
        return err_set(err, ERR_USAGE, "%s must be STEP or STEP:RANK, STEP >= 1 (got '%s')", flag,
                       v);
    a->fail_at_step = step;
    a->fail_at_rank = (int)rank;
    return 0;
}

/* ---------------------------------------------------------------- the table */

#define ARG(field) offsetof(TrainArgs, field)

/* In the order --help lists them. A row without help is described on an earlier row's line. */
static const Flag train_rows[] = {
    {.kind = FLAG_SECTION, .help = "model and data"},
    {"--model", FLAG_WORD, ARG(model), .size = sizeof((TrainArgs *)0)->model, .arg = "M",
     .help = "toy (default), vit-tiny, vit-workshop, transformer"},
    {"--layers", FLAG_INT, ARG(layers), 1, 1000, .usage = "--layers/--heads/--hidden/--mlp N",
     .help = "ViT: override the preset's sizes\n"
             "transformer: its shape (default 2 layers, 4 heads,\n"
             "hidden 128, mlp 512)"},
    {"--heads", FLAG_INT, ARG(heads), 1, 4096, .arg = "N"},
    {"--hidden", FLAG_INT, ARG(hidden), 1, 65536, .arg = "N"},
    {"--mlp", FLAG_INT, ARG(mlp), 1, 262144, .arg = "N"},
    {"--data", FLAG_STRING, ARG(data), .arg = "DIR",
     .help = "FashionMNIST's .gz files (default $FSDP_DATA, else\n"
             "/usr/share/datasets/fashion-mnist)"},
    {"--text", FLAG_STRING, ARG(text), .arg = "FILE",
     .help = "transformer: the text it learns to continue, byte\n"
             "by byte (a .gz is read decompressed; default\n" TEXT_DEFAULT_PATH ")"},
    {"--seq", FLAG_INT, ARG(seq), 1, KERNELS_MAX_TOKENS, .arg = "N",
     .help = "transformer: bytes a sequence, 1 to 256 (default 64)"},
    {"--split", FLAG_SET, .set = set_split, .arg = "train|test",
     .help = "ViT: the split to train on (default train)"},
    {"--epochs", FLAG_INT, ARG(epochs), 1, 100000, .arg = "E",
     .help = "ViT (default 1), transformer: epochs to train"},
    {"--eval", FLAG_BOOL, ARG(eval), .arg = "true|false",
     .help = "ViT: evaluate after each epoch and at the end"},
    {"--steps", FLAG_LONG, ARG(steps), 0, TRAIN_MAX_STEPS, .given = ARG(steps_given), .arg = "K",
     .help = "optimizer steps (toy default 100, transformer 600)"},
    {"--batch-size", FLAG_INT, ARG(fsdp.batch_size), 1, 1 << 20, .given = ARG(batch_given),
     .arg = "B",
     .help = "samples per rank per micro-step (toy 8, ViT 64,\n"
             "transformer 16 sequences)"},
    {"--seed", FLAG_SET, .set = set_seed, .arg = "S",
     .help = "initialization and shuffling seed (default 1234)"},
    {"--init-from", FLAG_STRING, ARG(init_from), .arg = "FILE",
     .help = "start from these weights (safetensors with PyTorch's\n"
             "state-dict names, e.g. exported from torchvision)"},
    {.kind = FLAG_SECTION, .help = "cluster"},
    {"--save-full", FLAG_STRING, ARG(save_full), .arg = "FILE",
     .help = "at the end, the trained model as one safetensors\n"
             "file with PyTorch's names (gathered unit by unit)"},
    {"--ranks", FLAG_INT, ARG(ranks), 1, CLI_MAX_RANKS, .arg = "N",
     .help = "simulated GPUs, 1 to 1024 (default 3)"},
    {"--profile", FLAG_WORD, ARG(profile), .size = sizeof((TrainArgs *)0)->profile, .arg = "P",
     .help = "cost model: h100-nvlink, a100-nvlink, l4-pcie"},
    {"--checkpoint-dir", FLAG_STRING, ARG(ckpt_dir), .arg = "D",
     .help = "save sharded checkpoints into D (each epoch's end)"},
    {"--checkpoint-every", FLAG_LONG, ARG(ckpt_every), 1, 1L << 40, .arg = "N",
     .help = "... and every N steps"},
    {"--keep", FLAG_INT, ARG(keep), 0, 1 << 20, .arg = "K",
     .help = "keep the newest K checkpoints (default 3; 0: all)"},
    {"--resume", FLAG_STRING, ARG(resume), .arg = "auto|DIR",
     .help = "continue from the newest checkpoint in\n"
             "--checkpoint-dir, or from DIR (any world size and\n"
             "strategy); --steps counts every step"},
    {"--max-restarts", FLAG_INT, ARG(max_restarts), 0, 1000, .arg = "R",
     .help = "when a rank fails, restart from the newest\n"
             "checkpoint up to R times"},
    {"--fail-at", FLAG_SET, .set = set_fail_at, .arg = "STEP[:RANK]",
     .help = "make RANK (default 0) fail as STEP begins, once"},
    {"--kill-in-save", FLAG_LONG, ARG(kill_in_save_step), 1, 1000000000L, .arg = "STEP",
     .help = "SIGKILL this process half-way through saving the\n"
             "checkpoint of STEP (the previous one survives)"},
    {"--backend", FLAG_SET, .set = set_backend, .arg = "B",
     .help = "sim (default: the simulated cluster), cuda (this\n"
             "machine's GPU, --ranks 1; or one process per GPU\n"
             "under ./fsdp launch, --ranks WORLD_SIZE), mpi (one\n"
             "process per rank on CPUs under mpirun -np N), auto\n"
             "(cuda if there is a GPU, else sim)"},
    {"--timeout", FLAG_INT, ARG(timeout), 1, 86400, .arg = "S",
     .help = "cuda, mpi: a collective that takes longer than S seconds\n"
             "aborts the job, naming rank, unit, collective (600)"},
    {"--check-streams", FLAG_SWITCH, ARG(check_streams),
     .help = "sim: check every access to device memory against\n"
             "the streams' events, as a GPU orders them; a hazard\n"
             "fails the run naming both operations"},
    {.kind = FLAG_SECTION, .help = "FSDP"},
    {"--strategy", FLAG_SET, .set = set_strategy, .arg = "S",
     .help = "ddp, zero1, zero2, zero3 (default), hsdp"},
    {"--replicas", FLAG_INT, ARG(fsdp.replicas), 1, CLI_MAX_RANKS, .arg = "R",
     .help = "hsdp: replica groups; must divide --ranks"},
    {"--wrap", FLAG_SET, .set = set_wrap, .arg = "W",
     .help = "layer (default), block:K, size:N, none"},
    {"--reshard-after-forward", FLAG_BOOL, ARG(fsdp.reshard_after_forward), .arg = "B",
     .help = "true|false (default: true for zero3/hsdp)"},
    {"--prefetch-forward", FLAG_INT, ARG(fsdp.prefetch_forward), 0, 16, .arg = "N",
     .help = "units gathered ahead in forward (default 1)"},
    {"--prefetch-backward", FLAG_INT, ARG(fsdp.prefetch_backward), 0, 16, .arg = "N",
     .help = "units gathered ahead in backward (default 1)"},
    {"--grad-accum", FLAG_INT, ARG(fsdp.grad_accum), 1, 4096, .arg = "K",
     .help = "micro-steps per step, gradient sync off between"},
    {"--param-dtype", FLAG_DTYPE, ARG(fsdp.param_dtype), .arg = "T",
     .help = "fp32 (default), bf16, fp16: gathered params"},
    {"--reduce-dtype", FLAG_DTYPE, ARG(fsdp.reduce_dtype), .arg = "T",
     .help = "fp32 (default), bf16, fp16: gradient reduction"},
    {"--output-dtype", FLAG_SET, .set = set_output_dtype, .arg = "T",
     .help = "cast each unit's forward output to T (default:\n"
             "as computed)"},
    {"--cast-forward-inputs", FLAG_BOOL, ARG(fsdp.cast_forward_inputs), .arg = "B",
     .help = "cast each unit's inputs to --param-dtype\n"
             "(default true; FSDP2's MixedPrecisionPolicy)"},
    {"--layout", FLAG_SET, .set = set_layout, .arg = "L",
     .help = "how parameters and gradients rest: fsdp (default:\n"
             "fp32 rows, the master itself); deepspeed: in\n"
             "--param-dtype and --reduce-dtype, with an fp32\n"
             "master beside Adam's state, and zero2 keeping the\n"
             "parameters whole (ZeRO's paper, K = 12)"},
    {"--offload", FLAG_SET, .set = set_offload, .arg = "T",
     .help = "none (default); optimizer: Adam's state and step on\n"
             "the host (ZeRO-Offload); cpu: shards, grads and\n"
             "Adam's state in host memory (FSDP2 CPUOffload);\n"
             "nvme: shards and Adam's state in a file per rank\n"
             "under --nvme-dir, grads in host memory\n"
             "(ZeRO-Infinity), loaded unit by unit"},
    {"--nvme-dir", FLAG_STRING, ARG(fsdp.nvme_dir), .arg = "D",
     .help = "where --offload nvme's files go (removed at exit)"},
    {"--activation-checkpointing", FLAG_SWITCH, ARG(activation_checkpointing),
     .help = "ViT, transformer: keep only each block's input in\n"
             "forward and recompute the block before its backward"},
    {"--ac-every", FLAG_INT, ARG(fsdp.ac_every), 1, 1000000, .arg = "K",
     .help = "... only every K-th block (implies the above)"},
    {.kind = FLAG_SECTION, .help = "optimizer"},
    {"--optim", FLAG_SET, .set = set_optim, .arg = "adam|adamw", .help = "(default adam)"},
    {"--lr", FLAG_FLOAT, ARG(fsdp.lr), 0.0, 1e3, .given = ARG(lr_given), .arg = "X",
     .help = "learning rate (toy 0.05, ViT 1e-3, transformer 3e-3)"},
    {"--lr-schedule", FLAG_SET, .set = set_lr_schedule, .arg = "S",
     .help = "constant (default), cosine or linear (from --lr to\n"
             "--min-lr after the warm-up), step (--step-size):\n"
             "PyTorch's schedulers, rate for rate"},
    {"--warmup-steps", FLAG_LONG, ARG(fsdp.lr_schedule.warmup_steps), 0, TRAIN_MAX_STEPS,
     .arg = "N", .help = "the first N steps at lr x (step+1)/N (default 0)"},
    {"--min-lr", FLAG_FLOAT, ARG(fsdp.lr_schedule.min_lr), 0.0, 1e3, .given = ARG(min_lr_given),
     .arg = "X", .help = "cosine, linear: where they end (default 0)"},
    {"--step-size", FLAG_LONG, ARG(fsdp.lr_schedule.step_size), 1, TRAIN_MAX_STEPS,
     .given = ARG(step_size_given), .usage = "--step-size N --gamma G",
     .help = "step: the rate times G every N steps (G 0.1)"},
    {"--gamma", FLAG_POSITIVE, ARG(fsdp.lr_schedule.gamma), .hi = 1.0, .given = ARG(gamma_given),
     .arg = "G"},
    {"--weight-decay", FLAG_FLOAT, ARG(fsdp.weight_decay), 0.0, 1e3, .arg = "X",
     .help = "(default 0)"},
    {"--clip-grad-norm", FLAG_FLOAT, ARG(fsdp.clip_grad_norm), 0.0, 1e30, .arg = "X",
     .help = "clip by global norm; 0 = off (default)"},
    {.kind = FLAG_SECTION, .help = "output"},
    {"--print-plan", FLAG_SWITCH, ARG(print_plan),
     .help = "print units and who owns which elements, then exit"},
    {"--memory", FLAG_SWITCH, ARG(memory),
     .help = "per rank: at-rest and peak bytes by category, and\n"
             "the last step's memory over time by category"},
    {"--memory-svg", FLAG_STRING, ARG(memory_svg), .arg = "FILE",
     .help = "that timeline as an SVG picture, with the DDP\n"
             "level and each rank's peak marked"},
    {"--memory-compare", FLAG_SWITCH, ARG(memory_compare),
     .help = "run the job (one step unless --steps) under the\n"
             "workshop's settings (default, CPU offload, reshard\n"
             "after forward, bf16, all combined, + activation\n"
             "checkpointing) and compare their peaks"},
    {"--accounting-only", FLAG_SWITCH, ARG(accounting_only),
     .help = "... charging memory and modelled time without\n"
             "computing or holding data (any model size)"},
    {"--scenario", FLAG_SET, .set = set_scenario, .arg = "workshop",
     .help = "... on the live workshop's cluster: two nodes with\n"
             "one 24 GB L4 each, vit-workshop at hidden 3840 and\n"
             "7680 (accounting only)"},
    {"--json", FLAG_SWITCH, ARG(json), .help = "one JSON object per step on stdout"},
    {"--print-every", FLAG_INT, ARG(print_every), 1, 1000000000L, .arg = "N",
     .help = "log every N steps (default: ten lines a run)"},
    {"--dump-params", FLAG_STRING, ARG(dump_params), .arg = "FILE",
     .help = "final parameters: `name index value` lines"},
    {"--trace-out", FLAG_STRING, ARG(trace_out), .arg = "FILE.json",
     .help = "Chrome Trace Event JSON (open in Perfetto)"},
};

static const FlagTable train_table = FLAG_TABLE("train", train_rows, 33);

const FlagTable *train_flags(void) {
    return &train_table;
}

/* The flags that only one kind of model takes. */
static int check_model_flags(const TrainArgs *a, Err *err) {
    int vit = train_args_is_vit(a), tf = train_args_is_transformer(a);
    if (!vit && !tf && strcmp(a->model, "toy") != 0)
        return err_set(err, ERR_USAGE,
                       "--model must be toy, vit-tiny, vit-workshop or transformer (got '%s')",
                       a->model);
    if (!vit && !tf && (a->layers || a->heads || a->hidden || a->mlp || a->epochs))
        return err_set(err, ERR_USAGE,
                       "--layers, --heads, --hidden, --mlp and --epochs apply to the ViT models "
                       "and the transformer, not the toy");
    if (!vit && (a->data || strcmp(a->split, "train") != 0))
        return err_set(err, ERR_USAGE, "--data and --split apply to the ViT models, not %s",
                       a->model);
    if (!tf && (a->text || a->seq))
        return err_set(err, ERR_USAGE, "--text and --seq apply to the transformer, not %s",
                       a->model);
    return 0;
}

/* Checks that need several flags at once. */
static int check_combination(const TrainArgs *a, Err *err) {
    const FsdpConfig *c = &a->fsdp;
    int blocks = train_args_is_vit(a) || train_args_is_transformer(a);
    int rc = check_model_flags(a, err);
    if (rc) return rc;
    if (!blocks && c->ac_every)
        return err_set(err, ERR_USAGE,
                       "--activation-checkpointing and --ac-every apply to blocks (the ViT's, "
                       "the transformer's); "
                       "the toy saves only each layer's input, so there is nothing to drop");
    if (a->steps_given && a->epochs)
        return err_set(err, ERR_USAGE, "give --steps or --epochs, not both");
    if (c->strategy == STRAT_HSDP && a->ranks % c->replicas != 0)
        return err_set(err, ERR_USAGE, "--replicas %d does not divide --ranks %d", c->replicas,
                       a->ranks);
    if (c->strategy != STRAT_HSDP && c->replicas != 1)
        return err_set(err, ERR_USAGE, "--replicas applies only to --strategy hsdp (got %d)",
                       c->replicas);
    if (a->fail_at_step && a->fail_at_rank >= a->ranks)
        return err_set(err, ERR_USAGE, "--fail-at names rank %d but there are %d ranks",
                       a->fail_at_rank, a->ranks);
    if (a->kill_in_save_step && !a->ckpt_dir)
        return err_set(err, ERR_USAGE, "--kill-in-save needs --checkpoint-dir");
    if (a->ckpt_every && !a->ckpt_dir)
        return err_set(err, ERR_USAGE, "--checkpoint-every needs --checkpoint-dir");
    if (a->resume && !strcmp(a->resume, "auto") && !a->ckpt_dir)
        return err_set(err, ERR_USAGE, "--resume auto needs --checkpoint-dir (where to look)");
    if (a->max_restarts && a->backend == BACKEND_MPI)
        return err_set(err, ERR_USAGE,
                       "--max-restarts: under --backend mpi a failed rank ends the whole job; run "
                       "the same command again with --resume auto");
    if (c->offload != OFFLOAD_NONE && a->backend != BACKEND_SIM && a->backend != BACKEND_MPI)
        return err_set(err, ERR_USAGE,
                       "--offload %s runs on the simulator and on MPI's CPUs only for now "
                       "(--backend sim or mpi)",
                       offload_name(c->offload));
    if ((c->offload == OFFLOAD_CPU || c->offload == OFFLOAD_NVME) &&
        (c->strategy == STRAT_DDP || c->strategy == STRAT_ZERO1))
        return err_set(err, ERR_USAGE,
                       "--offload %s needs a sharded strategy (zero2, zero3 or hsdp), not %s",
                       offload_name(c->offload), strategy_name(c->strategy));
    if (c->layout == LAYOUT_DEEPSPEED && (c->offload == OFFLOAD_CPU || c->offload == OFFLOAD_NVME))
        return err_set(err, ERR_USAGE,
                       "--offload %s is FSDP2's; --layout deepspeed offloads DeepSpeed's way: "
                       "--offload optimizer (ZeRO-Offload)",
                       offload_name(c->offload));
    if (c->offload == OFFLOAD_NVME && !c->nvme_dir)
        return err_set(err, ERR_USAGE, "--offload nvme needs --nvme-dir DIR (where its files go)");
    if (a->memory_compare && (c->strategy == STRAT_DDP || c->strategy == STRAT_ZERO1))
        return err_set(err, ERR_USAGE,
                       "--memory-compare compares FSDP settings: use zero2, zero3 or hsdp, not %s",
                       strategy_name(c->strategy));
    if ((a->accounting_only || a->scenario_workshop) && !a->memory_compare)
        return err_set(err, ERR_USAGE, "--accounting-only and --scenario go with --memory-compare");
    if (a->memory_compare && a->backend != BACKEND_SIM)
        return err_set(err, ERR_USAGE, "--memory-compare runs on the simulator (--backend sim)");
    if (c->nvme_dir && c->offload != OFFLOAD_NVME)
        return err_set(err, ERR_USAGE, "--nvme-dir applies only to --offload nvme");
    return 0;
}

int train_args_check_lr_schedule(const TrainArgs *a, long steps, Err *err) {
    const LrSchedule *s = &a->fsdp.lr_schedule;
    const char *name = lr_schedule_name(s->kind);
    int to_min = s->kind == LR_COSINE || s->kind == LR_LINEAR;
    if (a->min_lr_given && !to_min)
        return err_set(err, ERR_USAGE,
                       "--min-lr applies only to --lr-schedule cosine or linear (got %s)", name);
    if ((a->step_size_given || a->gamma_given) && s->kind != LR_STEP)
        return err_set(err, ERR_USAGE,
                       "--step-size and --gamma apply only to --lr-schedule step (got %s)", name);
    if (s->kind == LR_STEP && !s->step_size)
        return err_set(err, ERR_USAGE,
                       "--lr-schedule step needs --step-size N, the steps between two decays");
    if (to_min && s->min_lr > a->fsdp.lr)
        return err_set(err, ERR_USAGE,
                       "--min-lr %g is above --lr %g: --lr-schedule %s goes down from --lr to "
                       "--min-lr",
                       (double)s->min_lr, (double)a->fsdp.lr, name);
    /* cosine and linear spread their decay over the steps after the warm-up: there must be one */
    if (to_min && steps > 0 && s->warmup_steps >= steps)
        return err_set(err, ERR_USAGE,
                       "--warmup-steps %ld leaves none of the run's %ld steps to --lr-schedule %s, "
                       "which decays over the steps after the warm-up",
                       s->warmup_steps, steps, name);
    return 0;
}

int train_args_is_vit(const TrainArgs *a) {
    return !strcmp(a->model, "vit-tiny") || !strcmp(a->model, "vit-workshop");
}

int train_args_is_transformer(const TrainArgs *a) {
    return !strcmp(a->model, "transformer");
}

/* What a flag left unset means depends on the model: the ViT trains one epoch at batch 64
 * per rank with Adam at 1e-3 (the workshop's settings); the toy 100 steps of 8 at 0.05; the
 * transformer 600 steps of 16 sequences of 64 bytes at 3e-3 (from 5.55 = ln 256 to under 2.5
 * at 3 ranks: bench/RESULTS.md). */
static void apply_model_defaults(TrainArgs *a) {
    if (a->memory_compare && !a->steps_given && !a->epochs) { /* one step shows the peaks */
        a->steps = 1;
        a->steps_given = 1;
    }
    if (train_args_is_transformer(a)) {
        if (!a->batch_given) a->fsdp.batch_size = 16;
        if (!a->lr_given) a->fsdp.lr = 3e-3f;
        if (!a->steps_given && !a->epochs) a->steps = 600;
        if (!a->seq) a->seq = 64;
        return;
    }
    if (!train_args_is_vit(a)) return;
    if (!a->batch_given) a->fsdp.batch_size = 64;
    if (!a->lr_given) a->fsdp.lr = 1e-3f;
    if (!a->steps_given && !a->epochs) a->epochs = 1;
}

int train_args_parse(TrainArgs *a, int argc, char **argv, Err *err) {
    int rc = flags_parse(&train_table, a, argc, argv, err);
    if (rc) return rc;
    /* every block, unless --ac-every chose every K-th */
    if (a->activation_checkpointing && !a->fsdp.ac_every) a->fsdp.ac_every = 1;
    rc = check_combination(a, err);
    if (!rc) apply_model_defaults(a);
    /* the run's length is known here unless --epochs gives it (run_prepare checks again) */
    if (!rc) rc = train_args_check_lr_schedule(a, a->epochs ? 0 : a->steps, err);
    return rc;
}

void train_args_help(FILE *f) {
    fputs("usage: ./fsdp train [flags]\n"
          "\n"
          "Trains a model with FSDP on a simulated cluster of --ranks ranks (threads).\n"
          "\n",
          f);
    flags_help(&train_table, f);
}

int cmd_fail(int code, const char *msg) {
    fprintf(stderr, "fsdp: %s\n", msg);
    return code == ERR_USAGE ? 2 : 1;
}

int cmd_help_asked(int parsed, void (*help)(FILE *f)) {
    if (parsed != 1) return 0;
    help(stdout);
    return 1;
}

int cmd_exit(int rc, const Err *err) {
    fflush(stdout);
    return rc ? cmd_fail(rc, err->msg) : 0;
}
