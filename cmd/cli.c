/* cli: the flags of `fsdp train` (and of viz and plan, which take train's) as one table that
 * the parser, the help and config files (--config, --run-dir's config.json) all read, and what
 * every command does with an error: one line on stderr, exit 2 for bad input, 1 for a
 * failure. */
#include "cmd/cli.h"

#include "cmd/commands.h"

#include <errno.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>

#include "io/mnist.h"
#include "io/text.h"
#include "jobs/train.h"
#include "models/transformer.h"

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

static int set_ac_policy(void *args, const char *flag, const char *v, Err *err) {
    int p = ac_policy_from_name(v);
    if (p < 0) return not_one_of(flag, "block, ops or torchtitan", v, err);
    ((TrainArgs *)args)->fsdp.ac_policy = (AcPolicy)p;
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

/* ---------------------------------------------------------------- values for a config
 *
 * What the setters above set, read back as the text each flag takes (flags_write_json); and
 * the values whose config entry depends on other flags. */

static FlagValue text_value(char *buf, size_t n, const char *v) {
    snprintf(buf, n, "%s", v);
    return FLAG_VALUE_TEXT;
}

#define ARGS(args) ((const TrainArgs *)(args))

static FlagValue get_split(const Flag *row, const void *args, char *buf, size_t n) {
    (void)row;
    return text_value(buf, n, ARGS(args)->split);
}

/* A seed past 2^53 is no exact JSON number for most readers (a double): it is a string. */
static FlagValue get_seed(const Flag *row, const void *args, char *buf, size_t n) {
    (void)row;
    unsigned long long seed = ARGS(args)->fsdp.seed;
    snprintf(buf, n, "%llu", seed);
    return seed <= (1ULL << 53) ? FLAG_VALUE_NUMBER : FLAG_VALUE_TEXT;
}

static FlagValue get_strategy(const Flag *row, const void *args, char *buf, size_t n) {
    (void)row;
    return text_value(buf, n, strategy_name(ARGS(args)->fsdp.strategy));
}

static FlagValue get_wrap(const Flag *row, const void *args, char *buf, size_t n) {
    (void)row;
    wrap_format(&ARGS(args)->fsdp.wrap, buf, n);
    return FLAG_VALUE_TEXT;
}

static FlagValue get_layout(const Flag *row, const void *args, char *buf, size_t n) {
    (void)row;
    return text_value(buf, n, layout_name(ARGS(args)->fsdp.layout));
}

static FlagValue get_offload(const Flag *row, const void *args, char *buf, size_t n) {
    (void)row;
    return text_value(buf, n, offload_name(ARGS(args)->fsdp.offload));
}

static FlagValue get_optim(const Flag *row, const void *args, char *buf, size_t n) {
    (void)row;
    return text_value(buf, n, ARGS(args)->fsdp.optim == OPTIM_ADAMW ? "adamw" : "adam");
}

static FlagValue get_ac_policy(const Flag *row, const void *args, char *buf, size_t n) {
    (void)row;
    return text_value(buf, n, ac_policy_name(ARGS(args)->fsdp.ac_policy));
}

static FlagValue get_output_dtype(const Flag *row, const void *args, char *buf, size_t n) {
    (void)row;
    int t = ARGS(args)->fsdp.output_dtype;
    return t < 0 ? FLAG_VALUE_NONE : text_value(buf, n, dtype_name((DType)t));
}

static FlagValue get_scenario(const Flag *row, const void *args, char *buf, size_t n) {
    (void)row;
    return ARGS(args)->scenario_workshop ? text_value(buf, n, "workshop") : FLAG_VALUE_NONE;
}

static FlagValue get_backend(const Flag *row, const void *args, char *buf, size_t n) {
    static const char *const names[] = {"sim", "cuda", "mpi", "auto"}; /* in Backend's order */
    (void)row;
    return text_value(buf, n, names[ARGS(args)->backend]);
}

static FlagValue get_lr_schedule(const Flag *row, const void *args, char *buf, size_t n) {
    (void)row;
    return text_value(buf, n, lr_schedule_name(ARGS(args)->fsdp.lr_schedule.kind));
}

/* The row's value read as its kind reads it (for a getter that decides only when). */
static FlagValue by_kind(const Flag *row, const void *args, char *buf, size_t n) {
    const Flag plain = {.kind = row->kind, .field = row->field, .lo = row->lo, .hi = row->hi};
    return flag_value(&plain, args, buf, n);
}

/* --steps and --epochs are one setting: a run of epochs has no steps of its own. */
static FlagValue get_steps(const Flag *row, const void *args, char *buf, size_t n) {
    return ARGS(args)->epochs ? FLAG_VALUE_NONE : by_kind(row, args, buf, n);
}

/* A flag that applies to some --lr-schedule only (--min-lr, --step-size, --gamma) is refused
 * with another one: a config holds it only when it was given. */
static FlagValue get_if_given(const Flag *row, const void *args, char *buf, size_t n) {
    int given = *(const int *)((const char *)args + row->given);
    return given ? by_kind(row, args, buf, n) : FLAG_VALUE_NONE;
}

/* The data a ViT read, wherever it was found ($FSDP_DATA, Debian's path), so that the config
 * runs on the same files. */
static FlagValue get_data(const Flag *row, const void *args, char *buf, size_t n) {
    (void)row;
    const TrainArgs *a = args;
    if (!a->data && !train_args_is_vit(a)) return FLAG_VALUE_NONE;
    return text_value(buf, n, mnist_dir(a->data));
}

/* A file --run-dir placed is the run directory's, not a setting: null, so the config run
 * again into another directory writes there. */
static FlagValue get_output_path(const Flag *row, const void *args, char *buf, size_t n) {
    const char *path = *(const char *const *)((const char *)args + row->field);
    if (!path || train_args_run_dir_path(args, path)) return FLAG_VALUE_NONE;
    return text_value(buf, n, path);
}

/* ---------------------------------------------------------------- the table */

#define ARG(field) offsetof(TrainArgs, field)

/* In the order --help lists them. A row without help is described on an earlier row's line. */
static const Flag train_rows[] = {
    {.kind = FLAG_SECTION, .help = "model and data"},
    {"--model", FLAG_WORD, ARG(model), .size = sizeof((TrainArgs *)0)->model, .arg = "M",
     .help = "toy (default), vit-tiny, vit-workshop, transformer,\n"
             "llama; gpt2-small, llama-125m (their shapes, over\n"
             "bytes: docs/language-models.md)"},
    {"--layers", FLAG_INT, ARG(layers), 1, 1000, .usage = "--layers/--heads/--hidden/--mlp N",
     .help = "ViT: override the preset's sizes\n"
             "transformer: its shape (default 2 layers, 4 heads,\n"
             "hidden 128, mlp 512; llama's mlp 384)"},
    {"--heads", FLAG_INT, ARG(heads), 1, 4096, .arg = "N"},
    {"--hidden", FLAG_INT, ARG(hidden), 1, 65536, .arg = "N"},
    {"--mlp", FLAG_INT, ARG(mlp), 1, 262144, .arg = "N"},
    {"--kv-heads", FLAG_INT, ARG(kv_heads), 1, 4096, .arg = "N",
     .help = "llama: K,V heads, dividing --heads (default half)"},
    {"--attention", FLAG_WORD, ARG(attention), .size = sizeof((TrainArgs *)0)->attention,
     .arg = "eager|flash",
     .help = "keep attention's probabilities (eager: the ViT's\n"
             "default) or only each row's log-sum-exp (flash:\n"
             "the transformer's and llama's)"},
    {"--loss", FLAG_WORD, ARG(loss), .size = sizeof((TrainArgs *)0)->loss, .arg = "fused|eager",
     .help = "transformer: the loss in one pass (fused, the\n"
             "default) or as PyTorch's cross_entropy over fp32\n"
             "logits, keeping each step's fp32 tensor (eager)"},
    {"--elementwise", FLAG_WORD, ARG(elementwise), .size = sizeof((TrainArgs *)0)->elementwise,
     .arg = "fused|eager",
     .help = "llama: time the norms, RoPE, adds and SwiGLU as\n"
             "fsdp's fused kernels (fused, the default) or as\n"
             "eager PyTorch's kernel per operator (eager); the\n"
             "same values are computed either way"},
    {"--data", FLAG_STRING, ARG(data), .arg = "DIR",
     .help = "FashionMNIST's .gz files (default $FSDP_DATA, else\n"
             "/usr/share/datasets/fashion-mnist)",
     .get = get_data},
    {"--text", FLAG_STRING, ARG(text), .arg = "FILE|DIR",
     .help = "transformer: the text it learns to continue, byte\n"
             "by byte: a file, or a folder's text files (a .gz is\n"
             "read decompressed), made once into a token file in\n"
             "$FSDP_CACHE or ~/.cache/fsdp that ranks map (default\n"
             "$FSDP_TEXT, else " TEXT_DEFAULT_PATH ")"},
    {"--seq", FLAG_INT, ARG(seq), 1, CLI_MAX_SEQ, .arg = "N",
     .help = "transformer: bytes a sequence (default 64); the\n"
             "CPU's attention takes any length, a GPU's 256 so far"},
    {"--split", FLAG_SET, .set = set_split, .arg = "train|test",
     .help = "ViT: the split to train on (default train)", .get = get_split},
    {"--epochs", FLAG_INT, ARG(epochs), 1, 100000, .arg = "E",
     .help = "ViT (default 1), transformer: epochs to train"},
    {"--eval", FLAG_BOOL, ARG(eval), .arg = "true|false",
     .help = "ViT: evaluate after each epoch and at the end\n"
             "(with --val-size: the test images once, at the end)"},
    {"--val-size", FLAG_LONG, ARG(val_size), 1, TRAIN_MAX_HELD_OUT, .arg = "N",
     .help = "hold out the last N images (ViT: of the split) or\n"
             "sequences (transformer: of the text), never\n"
             "trained on, and evaluate them after each epoch;\n"
             "with --checkpoint-dir, keep the lowest loss's\n"
             "state as D/best"},
    {"--eval-every", FLAG_LONG, ARG(eval_every), 1, TRAIN_MAX_STEPS, .arg = "K",
     .help = "... and every K steps"},
    {"--steps", FLAG_LONG, ARG(steps), 0, TRAIN_MAX_STEPS, .given = ARG(steps_given), .arg = "K",
     .help = "optimizer steps (toy default 100, transformer 600)", .get = get_steps},
    {"--batch-size", FLAG_INT, ARG(fsdp.batch_size), 1, 1 << 20, .given = ARG(batch_given),
     .arg = "B",
     .help = "samples per rank per micro-step (toy 8, ViT 64,\n"
             "transformer 16 sequences)"},
    {"--seed", FLAG_SET, .set = set_seed, .arg = "S",
     .help = "initialization and shuffling seed (default 1234)", .get = get_seed},
    {"--init-from", FLAG_STRING, ARG(init_from), .arg = "FILE",
     .help = "start from these weights (safetensors with PyTorch's\n"
             "state-dict names, e.g. exported from torchvision)"},
    {.kind = FLAG_SECTION, .help = "cluster"},
    {"--save-full", FLAG_STRING, ARG(save_full), .arg = "FILE",
     .help = "at the end, the trained model as one safetensors\n"
             "file with PyTorch's names (gathered unit by unit)",
     .get = get_output_path},
    {"--save-hf", FLAG_STRING, ARG(save_hf), .arg = "DIR",
     .help = "transformer: ... and as a Hugging Face folder\n"
             "(config.json, model.safetensors) that\n"
             "from_pretrained loads: LlamaForCausalLM,\n"
             "GPT2LMHeadModel"},
    {"--ranks", FLAG_INT, ARG(ranks), 1, CLI_MAX_RANKS, .arg = "N",
     .help = "simulated GPUs, 1 to 1024 (default 3)"},
    {"--profile", FLAG_WORD, ARG(profile), .size = sizeof((TrainArgs *)0)->profile, .arg = "P",
     .help = "cost model: h100-nvlink, h200-nvlink, h100-gt,\n"
             "a100-nvlink, v100-nvlink, l4-pcie"},
    {"--checkpoint-dir", FLAG_STRING, ARG(ckpt_dir), .arg = "D",
     .help = "save sharded checkpoints into D (each epoch's end)", .get = get_output_path},
    {"--checkpoint-every", FLAG_LONG, ARG(ckpt_every), 1, 1L << 40, .arg = "N",
     .help = "... and every N steps"},
    {"--keep", FLAG_INT, ARG(keep), 0, 1 << 20, .arg = "K",
     .help = "keep the newest K checkpoints (default 3; 0: all)"},
    {"--resume", FLAG_STRING, ARG(resume), .arg = "auto|DIR",
     .help = "continue from the newest checkpoint in\n"
             "--checkpoint-dir, or from DIR (any world size and\n"
             "strategy); --steps counts every step",
     .not_in_config = 1},
    {"--max-restarts", FLAG_INT, ARG(max_restarts), 0, 1000, .arg = "R",
     .help = "when a rank fails, restart from the newest\n"
             "checkpoint up to R times"},
    {"--fail-at", FLAG_SET, .set = set_fail_at, .arg = "STEP[:RANK]",
     .help = "make RANK (default 0) fail as STEP begins, once", .not_in_config = 1},
    {"--kill-in-save", FLAG_LONG, ARG(kill_in_save_step), 1, 1000000000L, .arg = "STEP",
     .help = "SIGKILL this process half-way through saving the\n"
             "checkpoint of STEP (the previous one survives)",
     .not_in_config = 1},
    {"--kill-in-prune", FLAG_LONG, ARG(kill_in_prune_step), 1, 1000000000L, .arg = "STEP",
     .help = "SIGKILL this process half-way through removing the\n"
             "checkpoint --keep drops after saving STEP",
     .not_in_config = 1},
    {"--backend", FLAG_SET, .set = set_backend, .arg = "B",
     .help = "sim (default: the simulated cluster), cuda (this\n"
             "machine's GPU, --ranks 1; or one process per GPU\n"
             "under ./fsdp launch, --ranks WORLD_SIZE), mpi (one\n"
             "process per rank on CPUs under mpirun -np N), auto\n"
             "(cuda if there is a GPU, else sim)",
     .get = get_backend},
    {"--timeout", FLAG_INT, ARG(timeout), 1, 86400, .arg = "S",
     .help = "cuda, mpi: a collective that takes longer than S seconds\n"
             "aborts the job, naming rank, unit, collective (600)"},
    {"--tf32", FLAG_SWITCH, ARG(tf32),
     .help = "cuda: fp32 matrix products on TF32 tensor cores\n"
             "(PyTorch's allow_tf32; --param-dtype bf16 needs none)"},
    {"--check-streams", FLAG_SWITCH, ARG(check_streams),
     .help = "sim: check every access to device memory against\n"
             "the streams' events, as a GPU orders them; a hazard\n"
             "fails the run naming both operations"},
    {.kind = FLAG_SECTION, .help = "FSDP"},
    {"--strategy", FLAG_SET, .set = set_strategy, .arg = "S",
     .help = "ddp, zero1, zero2, zero3 (default), hsdp", .get = get_strategy},
    {"--replicas", FLAG_INT, ARG(fsdp.replicas), 1, CLI_MAX_RANKS, .arg = "R",
     .help = "hsdp: replica groups; must divide --ranks"},
    {"--wrap", FLAG_SET, .set = set_wrap, .arg = "W",
     .help = "layer (default), block:K, size:N, none", .get = get_wrap},
    {"--reshard-after-forward", FLAG_BOOL, ARG(fsdp.reshard_after_forward),
     .given = ARG(reshard_given), .arg = "B", .help = "true|false (default: true for zero3/hsdp)"},
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
             "as computed)",
     .get = get_output_dtype},
    {"--cast-forward-inputs", FLAG_BOOL, ARG(fsdp.cast_forward_inputs), .arg = "B",
     .help = "cast each unit's inputs to --param-dtype\n"
             "(default true; FSDP2's MixedPrecisionPolicy)"},
    {"--layout", FLAG_SET, .set = set_layout, .arg = "L",
     .help = "how parameters and gradients rest: fsdp (default:\n"
             "fp32 rows, the master itself); deepspeed: in\n"
             "--param-dtype and --reduce-dtype, with an fp32\n"
             "master beside Adam's state, and zero2 keeping the\n"
             "parameters whole (ZeRO's paper, K = 12)",
     .get = get_layout},
    {"--offload", FLAG_SET, .set = set_offload, .arg = "T",
     .help = "none (default); optimizer: Adam's state and step on\n"
             "the host (ZeRO-Offload); cpu: shards, grads and\n"
             "Adam's state in host memory (FSDP2 CPUOffload);\n"
             "nvme: shards and Adam's state in a file per rank\n"
             "under --nvme-dir, grads in host memory\n"
             "(ZeRO-Infinity), loaded unit by unit",
     .get = get_offload},
    {"--nvme-dir", FLAG_STRING, ARG(fsdp.nvme_dir), .arg = "D",
     .help = "where --offload nvme's files go (removed at exit)"},
    {"--activation-checkpointing", FLAG_SWITCH, ARG(activation_checkpointing),
     .help = "ViT, transformer: keep only each block's input in\n"
             "forward and recompute the block before its backward"},
    {"--ac-every", FLAG_INT, ARG(fsdp.ac_every), 1, 1000000, .arg = "K",
     .help = "... only every K-th block (implies the above)"},
    {"--ac-policy", FLAG_SET, .set = set_ac_policy, .arg = "P",
     .help = "what a checkpointed block keeps: its input (block,\n"
             "the default) or also every other GEMM's output and\n"
             "attention's (ops: torchtitan's selective op\n"
             "checkpointing; torchtitan: all it keeps, a Llama\n"
             "block's last GEMM output too, which nothing reads)",
     .get = get_ac_policy},
    {.kind = FLAG_SECTION, .help = "optimizer"},
    {"--optim", FLAG_SET, .set = set_optim, .arg = "adam|adamw", .help = "(default adam)",
     .get = get_optim},
    {"--lr", FLAG_FLOAT, ARG(fsdp.lr), 0.0, 1e3, .given = ARG(lr_given), .arg = "X",
     .help = "learning rate (toy 0.05, ViT 1e-3, transformer 3e-3)"},
    {"--lr-schedule", FLAG_SET, .set = set_lr_schedule, .arg = "S",
     .help = "constant (default), cosine or linear (from --lr to\n"
             "--min-lr after the warm-up), step (--step-size):\n"
             "PyTorch's schedulers, rate for rate",
     .get = get_lr_schedule},
    {"--warmup-steps", FLAG_LONG, ARG(fsdp.lr_schedule.warmup_steps), 0, TRAIN_MAX_STEPS,
     .arg = "N", .help = "the first N steps at lr x (step+1)/N (default 0)"},
    {"--min-lr", FLAG_FLOAT, ARG(fsdp.lr_schedule.min_lr), 0.0, 1e3, .given = ARG(min_lr_given),
     .arg = "X", .help = "cosine, linear: where they end (default 0)", .get = get_if_given},
    {"--step-size", FLAG_LONG, ARG(fsdp.lr_schedule.step_size), 1, TRAIN_MAX_STEPS,
     .given = ARG(step_size_given), .usage = "--step-size N --gamma G",
     .help = "step: the rate times G every N steps (G 0.1)", .get = get_if_given},
    {"--gamma", FLAG_POSITIVE, ARG(fsdp.lr_schedule.gamma), .hi = 1.0, .given = ARG(gamma_given),
     .arg = "G", .get = get_if_given},
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
             "level and each rank's peak marked",
     .get = get_output_path},
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
             "7680 (accounting only)",
     .get = get_scenario},
    {"--json", FLAG_SWITCH, ARG(json), .help = "one JSON object per step on stdout"},
    {"--print-every", FLAG_INT, ARG(print_every), 1, 1000000000L, .arg = "N",
     .help = "log every N steps (default: ten lines a run)"},
    {"--dump-params", FLAG_STRING, ARG(dump_params), .arg = "FILE",
     .help = "final parameters: `name index value` lines"},
    {"--trace-out", FLAG_STRING, ARG(trace_out), .arg = "FILE.json",
     .help = "Chrome Trace Event JSON (open in Perfetto)", .get = get_output_path},
    {"--run-dir", FLAG_STRING, ARG(run_dir), .arg = "DIR",
     .help = "the run's files in DIR: config.json (every setting),\n"
             "metrics.jsonl (a line per step and evaluation),\n"
             "curves.svg, checkpoints/, model.safetensors, and\n"
             "memory.svg, trace.json with --memory, --trace; a\n"
             "DIR that holds a run needs --resume"},
    {"--trace", FLAG_SWITCH, ARG(trace),
     .help = "with --run-dir: the Chrome trace as DIR/trace.json"},
    {"--config", FLAG_STRING, ARG(config), .arg = "FILE", .not_in_config = 1,
     .help = "the settings of a run's config.json (flags given\n"
             "too replace its values)"},
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
                       "--model must be toy, vit-tiny, vit-workshop, transformer, llama, %s (got "
                       "'%s')",
                       transformer_lm_preset_names(), a->model);
    if (a->attention[0] && attention_from_name(a->attention) < 0)
        return err_set(err, ERR_USAGE, "--attention must be eager or flash (got '%s')",
                       a->attention);
    if (a->attention[0] && !tf && !vit)
        return err_set(err, ERR_USAGE,
                       "--attention applies to the transformer, llama and the ViT; the toy has "
                       "no attention");
    if (a->loss[0] && loss_from_name(a->loss) < 0)
        return err_set(err, ERR_USAGE, "--loss must be fused or eager (got '%s')", a->loss);
    if (a->loss[0] && !tf)
        return err_set(err, ERR_USAGE,
                       "--loss applies to the transformer and llama; the %s's loss is fused",
                       vit ? "ViT" : "toy");
    if (a->elementwise[0] && elementwise_from_name(a->elementwise) < 0)
        return err_set(err, ERR_USAGE, "--elementwise must be fused or eager (got '%s')",
                       a->elementwise);
    if (a->elementwise[0] && !train_args_is_llama(a))
        return err_set(err, ERR_USAGE, "--elementwise applies to --model llama and llama-125m");
    if (a->kv_heads && !train_args_is_llama(a))
        return err_set(err, ERR_USAGE,
                       "--kv-heads applies to --model llama; %s has one K,V head per head",
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
    if (!tf && a->save_hf)
        return err_set(err, ERR_USAGE,
                       "--save-hf writes a language model (transformer, llama) for Hugging Face; "
                       "%s has no such form (--save-full writes its weights)",
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
    if ((rc = ac_policy_check(c, err))) return rc;
    if (a->steps_given && a->epochs)
        return err_set(err, ERR_USAGE, "give --steps or --epochs, not both");
    if (a->reshard_given && c->reshard_after_forward &&
        (c->strategy == STRAT_DDP || c->strategy == STRAT_ZERO1 || c->strategy == STRAT_ZERO2))
        return err_set(err, ERR_USAGE,
                       "--reshard-after-forward true frees a unit's gathered parameters after its "
                       "forward; --strategy %s %s (zero3 and hsdp reshard)",
                       strategy_name(c->strategy),
                       c->strategy == STRAT_ZERO2 ? "keeps them until backward"
                                                  : "keeps every parameter whole");
    if (!train_args_is_vit(a) && !train_args_is_transformer(a) && a->val_size)
        return err_set(err, ERR_USAGE,
                       "--val-size holds out images or sequences: it applies to the ViT "
                       "models and the transformers, not the toy");
    if (a->eval_every && !a->val_size)
        return err_set(err, ERR_USAGE,
                       "--eval-every needs --val-size N (the held-out samples it evaluates)");
    if (a->val_size && !a->eval)
        return err_set(err, ERR_USAGE,
                       "--val-size evaluates the samples it holds out; it cannot go with --eval "
                       "false");
    if ((rc = fsdp_check_casts(c, c->param_dtype, err))) return rc;
    if (a->tf32 && (a->backend == BACKEND_SIM || a->backend == BACKEND_MPI))
        return err_set(err, ERR_USAGE,
                       "--tf32 is the GPU's: --backend %s computes fp32 products in fp32",
                       a->backend == BACKEND_SIM ? "sim" : "mpi");
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
    if (a->kill_in_prune_step && (!a->ckpt_dir || !a->keep))
        return err_set(err, ERR_USAGE, "--kill-in-prune needs --checkpoint-dir and --keep");
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
        return err_set(err, ERR_USAGE,
                       "--accounting-only and --scenario go with --memory-compare (viz takes "
                       "--accounting-only on its own)");
    if (a->memory_compare && a->backend != BACKEND_SIM)
        return err_set(err, ERR_USAGE, "--memory-compare runs on the simulator (--backend sim)");
    if (c->nvme_dir && c->offload != OFFLOAD_NVME)
        return err_set(err, ERR_USAGE, "--nvme-dir applies only to --offload nvme");
    if (a->trace && !a->run_dir)
        return err_set(err, ERR_USAGE,
                       "--trace writes trace.json into --run-dir DIR; without one, give "
                       "--trace-out FILE");
    if (a->run_dir && (a->print_plan || a->memory_compare))
        return err_set(err, ERR_USAGE,
                       "--run-dir keeps a training run's files; --%s trains nothing",
                       a->print_plan ? "print-plan" : "memory-compare");
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
    TransformerConfig preset;
    return !strcmp(a->model, "transformer") || train_args_is_llama(a) ||
           !transformer_lm_preset(a->model, &preset);
}

int train_args_is_llama(const TrainArgs *a) {
    TransformerConfig preset;
    return !strcmp(a->model, "llama") ||
           (!transformer_lm_preset(a->model, &preset) && preset.arch == TRANSFORMER_LLAMA);
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
        TransformerConfig preset;
        if (!a->seq) a->seq = transformer_lm_preset(a->model, &preset) ? 64 : preset.seq;
        return;
    }
    if (!train_args_is_vit(a)) return;
    if (!a->batch_given) a->fsdp.batch_size = 64;
    if (!a->lr_given) a->fsdp.lr = 1e-3f;
    if (!a->steps_given && !a->epochs) a->epochs = 1;
}

/* ---------------------------------------------------------------- --config and --run-dir */

struct TrainArgsOwned {
    void *config;               /* the config's JSON document, which string fields point into */
    char *paths[RUN_DIR_PATHS]; /* what --run-dir chose, each a path of its own */
};

static int own(TrainArgs *a, Err *err) {
    if (!a->owned && !(a->owned = calloc(1, sizeof *a->owned)))
        return err_set(err, ERR_NOMEM, "out of memory reading the flags");
    return 0;
}

void train_args_free(TrainArgs *a) {
    if (!a->owned) return;
    flags_json_free(a->owned->config);
    for (int i = 0; i < RUN_DIR_PATHS; i++) free(a->owned->paths[i]);
    free(a->owned);
    a->owned = NULL;
}

int train_args_run_dir_path(const TrainArgs *a, const char *path) {
    for (int i = 0; path && a->owned && i < RUN_DIR_PATHS; i++)
        if (path == a->owned->paths[i]) return 1;
    return 0;
}

/* A config is a page of settings, not a data set. */
enum { CONFIG_MAX_BYTES = 1 << 20 };

static int read_config(TrainArgs *a, const char *path, Err *err) {
    const char *obstacle = output_path_obstacle(path); /* a FIFO's open would block */
    if (obstacle && strcmp(obstacle, "a directory"))
        return err_set(err, ERR_USAGE, "--config %s is %s; give a file", path, obstacle);
    FILE *f = fopen(path, "r");
    char *text = malloc(CONFIG_MAX_BYTES + 1);
    size_t n = f && text ? fread(text, 1, CONFIG_MAX_BYTES + 1, f) : 0;
    int why = errno, bad = !f || !text || ferror(f);
    if (f) fclose(f);
    int rc = 0;
    if (bad)
        rc = err_set(err, text ? ERR_USAGE : ERR_NOMEM, "--config %s: cannot read it: %s", path,
                     strerror(why));
    else if (n > CONFIG_MAX_BYTES)
        rc = err_set(err, ERR_USAGE, "--config %s: larger than %d bytes, not a config", path,
                     CONFIG_MAX_BYTES);
    else if (memchr(text, 0, n))
        rc = err_set(err, ERR_USAGE, "--config %s: not a config (it holds NUL bytes)", path);
    if (!rc) {
        text[n] = 0;
        rc = own(a, err);
    }
    if (!rc) rc = flags_read_json(&train_table, a, text, path, &a->owned->config, err);
    free(text);
    return rc;
}

/* The flags given; with --config FILE, over the file's settings. The flags are read twice:
 * once to find --config (and any bad flag, or --help, before a file is read), then over the
 * config. */
static int parse_with_config(TrainArgs *a, int argc, char **argv, Err *err) {
    TrainArgs defaults = *a;
    int rc = flags_parse(&train_table, a, argc, argv, err);
    if (rc || !a->config) return rc;
    const char *path = a->config;
    *a = defaults;
    if ((rc = read_config(a, path, err))) return rc;
    /* --steps and --epochs are one setting: given either, the config's other one goes */
    int epochs = a->epochs, steps_given = a->steps_given;
    long steps = a->steps;
    a->epochs = 0;
    a->steps_given = 0;
    rc = flags_parse(&train_table, a, argc, argv, err);
    if (!rc && !a->epochs && !a->steps_given) {
        a->epochs = epochs;
        a->steps_given = steps_given;
        a->steps = steps;
    }
    return rc;
}

/* DIR/name into *field, unless the flag was given (it wins). */
static int place_in_run_dir(TrainArgs *a, const char **field, int slot, const char *name,
                            Err *err) {
    if (*field) return 0;
    if (asprintf(&a->owned->paths[slot], "%s/%s", a->run_dir, name) < 0) {
        a->owned->paths[slot] = NULL;
        return err_set(err, ERR_NOMEM, "out of memory reading the flags");
    }
    *field = a->owned->paths[slot];
    return 0;
}

static int apply_run_dir(TrainArgs *a, Err *err) {
    if (!a->run_dir) return 0;
    if (!a->run_dir[0]) return err_set(err, ERR_USAGE, "--run-dir needs a directory (got '')");
    int rc = own(a, err);
    if (!rc) rc = place_in_run_dir(a, &a->ckpt_dir, 0, RUN_DIR_CHECKPOINTS, err);
    if (!rc) rc = place_in_run_dir(a, &a->save_full, 1, RUN_DIR_MODEL, err);
    if (!rc && a->memory) rc = place_in_run_dir(a, &a->memory_svg, 2, RUN_DIR_MEMORY_SVG, err);
    if (!rc && a->trace) rc = place_in_run_dir(a, &a->trace_out, 3, RUN_DIR_TRACE, err);
    return rc;
}

void train_args_outputs(const TrainArgs *a, NamedPath *out, size_t *n) {
    *n = 0;
    out[(*n)++] = (NamedPath){"--save-full", a->save_full};
    out[(*n)++] = (NamedPath){"--dump-params", a->dump_params};
    out[(*n)++] = (NamedPath){"--trace-out", a->trace_out};
    out[(*n)++] = (NamedPath){"--memory-svg", a->memory_svg};
}

void train_args_inputs(const TrainArgs *a, NamedPath *in, size_t *n) {
    *n = 0;
    in[(*n)++] = (NamedPath){"--init-from", a->init_from};
    in[(*n)++] = (NamedPath){"--config", a->config};
    in[(*n)++] = (NamedPath){"--text", a->text};
    in[(*n)++] = (NamedPath){"--resume", a->resume && strcmp(a->resume, "auto") ? a->resume : NULL};
}

/* Outputs only over regular files, never over an input or another output (issue 39). */
static int check_paths(const TrainArgs *a, Err *err) {
    NamedPath out[TRAIN_PATHS], in[TRAIN_PATHS];
    size_t nout, nin;
    train_args_outputs(a, out, &nout);
    train_args_inputs(a, in, &nin);
    const NamedPath *empty = NULL; /* "": it would mean the default, or nothing, silently */
    for (size_t i = 0; i < nout && !empty; i++)
        empty = out[i].path && !out[i].path[0] ? &out[i] : NULL;
    for (size_t i = 0; i < nin && !empty; i++) empty = in[i].path && !in[i].path[0] ? &in[i] : NULL;
    static const NamedPath resume_empty = {"--resume", ""};
    if (a->resume && !a->resume[0]) empty = &resume_empty;
    if (empty) return err_set(err, ERR_USAGE, "%s needs a path (got '')", empty->flag);
    return output_paths_check(out, nout, in, nin, err);
}

int train_args_parse(TrainArgs *a, int argc, char **argv, Err *err) {
    int rc = parse_with_config(a, argc, argv, err);
    if (rc) return rc;
    /* every block, unless --ac-every chose every K-th */
    if (a->activation_checkpointing && !a->fsdp.ac_every) a->fsdp.ac_every = 1;
    rc = apply_run_dir(a, err);
    if (!rc) rc = check_combination(a, err);
    if (!rc) rc = check_paths(a, err);
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
