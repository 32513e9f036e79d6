/* cli: the flags of `fsdp train` (and of viz and plan, which take train's), and what every
 * command does with an error: one line on stderr, exit 2 for bad input, 1 for a failure. */
#include "cmd/cli.h"

#include "cmd/commands.h"

#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

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

int cli_parse_long(const char *flag, const char *v, long lo, long hi, long *out, Err *err) {
    char *end;
    errno = 0;
    long x = strtol(v, &end, 10);
    if (end == v || *end || errno || x < lo || x > hi)
        return err_set(err, ERR_USAGE, "%s must be an integer from %ld to %ld (got '%s')", flag, lo,
                       hi, v);
    *out = x;
    return 0;
}

int cli_parse_int(const char *flag, const char *v, long lo, long hi, int *out, Err *err) {
    long x;
    int rc = cli_parse_long(flag, v, lo, hi, &x, err);
    if (!rc) *out = (int)x;
    return rc;
}

static int parse_float(const char *flag, const char *v, double lo, double hi, float *out,
                       Err *err) {
    char *end;
    errno = 0;
    double x = strtod(v, &end);
    if (end == v || *end || errno || !isfinite(x) || x < lo || x > hi)
        return err_set(err, ERR_USAGE, "%s must be a number from %g to %g (got '%s')", flag, lo, hi,
                       v);
    *out = (float)x;
    return 0;
}

static int parse_bool(const char *flag, const char *v, int *out, Err *err) {
    if (!strcmp(v, "true") || !strcmp(v, "1"))
        *out = 1;
    else if (!strcmp(v, "false") || !strcmp(v, "0"))
        *out = 0;
    else
        return err_set(err, ERR_USAGE, "%s must be true or false (got '%s')", flag, v);
    return 0;
}

static int parse_dtype(const char *flag, const char *v, DType *out, Err *err) {
    if (dtype_parse(v, out))
        return err_set(err, ERR_USAGE, "%s must be fp32, bf16 or fp16 (got '%s')", flag, v);
    return 0;
}

static int copy_word(const char *flag, const char *v, char *dst, size_t n, Err *err) {
    if (strlen(v) >= n) return err_set(err, ERR_USAGE, "%s value is too long (got '%s')", flag, v);
    snprintf(dst, n, "%s", v);
    return 0;
}

/* One flag with its value. Returns 0, or ERR_USAGE naming the flag. */
/* "STEP" or "STEP:RANK" (rank 0 by default). */
static int parse_fail_at(const char *v, TrainArgs *a, Err *err) {
    char *end;
    long step = strtol(v, &end, 10), rank = 0;
    if (end != v && *end == ':') {
        const char *r = end + 1;
        rank = strtol(r, &end, 10);
        if (end == r) step = 0;
    }
    if (end == v || *end || step < 1 || rank < 0 || rank >= CLI_MAX_RANKS)
        return err_set(err, ERR_USAGE, "--fail-at must be STEP or STEP:RANK, STEP >= 1 (got '%s')",
                       v);
    a->fail_at_step = step;
    a->fail_at_rank = (int)rank;
    return 0;
}

static int parse_flag(TrainArgs *a, const char *f, const char *v, Err *err) {
    FsdpConfig *c = &a->fsdp;
    if (!strcmp(f, "--model")) return copy_word(f, v, a->model, sizeof a->model, err);
    if (!strcmp(f, "--profile")) return copy_word(f, v, a->profile, sizeof a->profile, err);
    if (!strcmp(f, "--ranks")) return cli_parse_int(f, v, 1, CLI_MAX_RANKS, &a->ranks, err);
    if (!strcmp(f, "--steps")) {
        a->steps_given = 1;
        return cli_parse_long(f, v, 0, 1000000000L, &a->steps, err);
    }
    if (!strcmp(f, "--epochs")) return cli_parse_int(f, v, 1, 100000, &a->epochs, err);
    if (!strcmp(f, "--layers")) return cli_parse_int(f, v, 1, 1000, &a->layers, err);
    if (!strcmp(f, "--heads")) return cli_parse_int(f, v, 1, 4096, &a->heads, err);
    if (!strcmp(f, "--hidden")) return cli_parse_int(f, v, 1, 65536, &a->hidden, err);
    if (!strcmp(f, "--mlp")) return cli_parse_int(f, v, 1, 262144, &a->mlp, err);
    if (!strcmp(f, "--split")) {
        if (strcmp(v, "train") && strcmp(v, "test"))
            return err_set(err, ERR_USAGE, "--split must be train or test (got '%s')", v);
        return copy_word(f, v, a->split, sizeof a->split, err);
    }
    if (!strcmp(f, "--data")) {
        a->data = v;
        return 0;
    }
    if (!strcmp(f, "--print-every"))
        return cli_parse_int(f, v, 1, 1000000000L, &a->print_every, err);
    if (!strcmp(f, "--batch-size")) {
        a->batch_given = 1;
        return cli_parse_int(f, v, 1, 1 << 20, &c->batch_size, err);
    }
    if (!strcmp(f, "--grad-accum")) return cli_parse_int(f, v, 1, 4096, &c->grad_accum, err);
    if (!strcmp(f, "--ac-every")) return cli_parse_int(f, v, 1, 1000000, &c->ac_every, err);
    if (!strcmp(f, "--replicas")) return cli_parse_int(f, v, 1, CLI_MAX_RANKS, &c->replicas, err);
    if (!strcmp(f, "--prefetch-forward"))
        return cli_parse_int(f, v, 0, 16, &c->prefetch_forward, err);
    if (!strcmp(f, "--prefetch-backward"))
        return cli_parse_int(f, v, 0, 16, &c->prefetch_backward, err);
    if (!strcmp(f, "--lr")) {
        a->lr_given = 1;
        return parse_float(f, v, 0.0, 1e3, &c->lr, err);
    }
    if (!strcmp(f, "--weight-decay")) return parse_float(f, v, 0.0, 1e3, &c->weight_decay, err);
    if (!strcmp(f, "--clip-grad-norm"))
        return parse_float(f, v, 0.0, 1e30, &c->clip_grad_norm, err);
    if (!strcmp(f, "--param-dtype")) return parse_dtype(f, v, &c->param_dtype, err);
    if (!strcmp(f, "--reduce-dtype")) return parse_dtype(f, v, &c->reduce_dtype, err);
    if (!strcmp(f, "--output-dtype")) {
        DType t;
        int rc = parse_dtype(f, v, &t, err);
        if (!rc) c->output_dtype = (int)t;
        return rc;
    }
    if (!strcmp(f, "--cast-forward-inputs")) return parse_bool(f, v, &c->cast_forward_inputs, err);
    if (!strcmp(f, "--eval")) return parse_bool(f, v, &a->eval, err);
    if (!strcmp(f, "--reshard-after-forward"))
        return parse_bool(f, v, &c->reshard_after_forward, err);
    if (!strcmp(f, "--seed")) {
        long s;
        int rc = cli_parse_long(f, v, 0, 0x7fffffffffffffffL, &s, err);
        c->seed = (uint64_t)s;
        return rc;
    }
    if (!strcmp(f, "--strategy")) {
        if (strategy_parse(v, &c->strategy))
            return err_set(err, ERR_USAGE, "--strategy must be one of %s (got '%s')",
                           strategy_names(), v);
        return 0;
    }
    if (!strcmp(f, "--wrap")) {
        if (wrap_parse(v, &c->wrap))
            return err_set(err, ERR_USAGE,
                           "--wrap must be layer, block:K, size:N or none (got '%s')", v);
        return 0;
    }
    if (!strcmp(f, "--optim")) {
        if (!strcmp(v, "adam"))
            c->optim = OPTIM_ADAM;
        else if (!strcmp(v, "adamw"))
            c->optim = OPTIM_ADAMW;
        else
            return err_set(err, ERR_USAGE, "--optim must be adam or adamw (got '%s')", v);
        return 0;
    }
    if (!strcmp(f, "--layout")) {
        if (layout_parse(v, &c->layout))
            return err_set(err, ERR_USAGE, "--layout must be fsdp or deepspeed (got '%s')", v);
        return 0;
    }
    if (!strcmp(f, "--offload")) {
        if (offload_parse(v, &c->offload))
            return err_set(err, ERR_USAGE,
                           "--offload must be none, optimizer, cpu or nvme (got '%s')", v);
        return 0;
    }
    if (!strcmp(f, "--dump-params")) {
        a->dump_params = v;
        return 0;
    }
    if (!strcmp(f, "--save-full")) {
        a->save_full = v;
        return 0;
    }
    if (!strcmp(f, "--init-from")) {
        a->init_from = v;
        return 0;
    }
    if (!strcmp(f, "--scenario")) {
        if (strcmp(v, "workshop"))
            return err_set(err, ERR_USAGE, "--scenario must be workshop (got '%s')", v);
        a->scenario_workshop = 1;
        return 0;
    }
    if (!strcmp(f, "--nvme-dir")) {
        c->nvme_dir = v;
        return 0;
    }
    if (!strcmp(f, "--memory-svg")) {
        a->memory_svg = v;
        return 0;
    }
    if (!strcmp(f, "--trace-out")) {
        a->trace_out = v;
        return 0;
    }
    if (!strcmp(f, "--checkpoint-dir")) {
        a->ckpt_dir = v;
        return 0;
    }
    if (!strcmp(f, "--checkpoint-every"))
        return cli_parse_long(f, v, 1, 1L << 40, &a->ckpt_every, err);
    if (!strcmp(f, "--keep")) return cli_parse_int(f, v, 0, 1 << 20, &a->keep, err);
    if (!strcmp(f, "--max-restarts")) return cli_parse_int(f, v, 0, 1000, &a->max_restarts, err);
    if (!strcmp(f, "--fail-at")) return parse_fail_at(v, a, err);
    if (!strcmp(f, "--timeout")) return cli_parse_int(f, v, 1, 86400, &a->timeout, err);
    if (!strcmp(f, "--kill-in-save"))
        return cli_parse_long(f, v, 1, 1000000000L, &a->kill_in_save_step, err);
    if (!strcmp(f, "--resume")) {
        a->resume = v;
        return 0;
    }
    if (!strcmp(f, "--backend")) {
        static const char *const names[] = {"sim", "cuda", "auto"};
        for (int i = 0; i < 3; i++)
            if (!strcmp(v, names[i])) {
                a->backend = (Backend)i;
                return 0;
            }
        return err_set(err, ERR_USAGE, "--backend must be sim, cuda or auto (got '%s')", v);
    }
    return err_set(err, ERR_USAGE, "unknown flag %s (see ./fsdp train --help)", f);
}

/* Checks that need several flags at once. */
static int check_combination(const TrainArgs *a, Err *err) {
    const FsdpConfig *c = &a->fsdp;
    int vit = train_args_is_vit(a);
    if (!vit && strcmp(a->model, "toy") != 0)
        return err_set(err, ERR_USAGE, "--model must be toy, vit-tiny or vit-workshop (got '%s')",
                       a->model);
    if (!vit && (a->layers || a->heads || a->hidden || a->mlp || a->data || a->epochs ||
                 strcmp(a->split, "train") != 0))
        return err_set(err, ERR_USAGE,
                       "--layers, --heads, --hidden, --mlp, --data, --split and "
                       "--epochs apply to the ViT models, not the toy");
    if (!vit && c->ac_every)
        return err_set(err, ERR_USAGE,
                       "--activation-checkpointing and --ac-every apply to the ViT's blocks; "
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
    if (c->offload != OFFLOAD_NONE && a->backend != BACKEND_SIM)
        return err_set(err, ERR_USAGE,
                       "--offload %s runs on the simulator only for now "
                       "(--backend sim)",
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

static int is_bool_flag(const char *f) {
    return !strcmp(f, "--print-plan") || !strcmp(f, "--memory") || !strcmp(f, "--json") ||
           !strcmp(f, "--activation-checkpointing") || !strcmp(f, "--memory-compare") ||
           !strcmp(f, "--accounting-only");
}

static void set_bool_flag(TrainArgs *a, const char *f) {
    if (!strcmp(f, "--print-plan")) a->print_plan = 1;
    if (!strcmp(f, "--memory")) a->memory = 1;
    if (!strcmp(f, "--json")) a->json = 1;
    if (!strcmp(f, "--memory-compare")) a->memory_compare = 1;
    if (!strcmp(f, "--accounting-only")) a->accounting_only = 1;
    /* every block, unless --ac-every chose every K-th */
    if (!strcmp(f, "--activation-checkpointing") && !a->fsdp.ac_every) a->fsdp.ac_every = 1;
}

int train_args_is_vit(const TrainArgs *a) {
    return !strcmp(a->model, "vit-tiny") || !strcmp(a->model, "vit-workshop");
}

/* What a flag left unset means depends on the model: the ViT trains one epoch at batch 64
 * per rank with Adam at 1e-3 (the workshop's settings); the toy 100 steps of 8 at 0.05. */
static void apply_model_defaults(TrainArgs *a) {
    if (a->memory_compare && !a->steps_given && !a->epochs) { /* one step shows the peaks */
        a->steps = 1;
        a->steps_given = 1;
    }
    if (!train_args_is_vit(a)) return;
    if (!a->batch_given) a->fsdp.batch_size = 64;
    if (!a->lr_given) a->fsdp.lr = 1e-3f;
    if (!a->steps_given && !a->epochs) a->epochs = 1;
}

int train_args_parse(TrainArgs *a, int argc, char **argv, Err *err) {
    for (int i = 0; i < argc; i++) {
        const char *f = argv[i];
        if (!strcmp(f, "--help") || !strcmp(f, "-h")) return 1;
        if (is_bool_flag(f)) {
            set_bool_flag(a, f);
            continue;
        }
        if (strncmp(f, "--", 2) != 0)
            return err_set(err, ERR_USAGE, "unexpected argument '%s' (flags start with --)", f);
        const char *eq = strchr(f, '=');
        char name[64];
        const char *v;
        if (eq) { /* --flag=value */
            snprintf(name, sizeof name, "%.*s", (int)(eq - f < 63 ? eq - f : 63), f);
            v = eq + 1;
        } else {
            snprintf(name, sizeof name, "%.63s", f);
            if (i + 1 >= argc) {
                err_set(err, ERR_USAGE, "%s needs a value (see ./fsdp train --help)", name);
                /* an unknown flag is the better message when both apply */
                parse_flag(a, name, "", err);
                return ERR_USAGE;
            }
            v = argv[++i];
        }
        int rc = parse_flag(a, name, v, err);
        if (rc) return rc;
    }
    int rc = check_combination(a, err);
    if (!rc) apply_model_defaults(a);
    return rc;
}

void train_args_help(FILE *f) {
    fputs("usage: ./fsdp train [flags]\n"
          "\n"
          "Trains a model with FSDP on a simulated cluster of --ranks ranks (threads).\n"
          "\n"
          "model and data\n"
          "  --model M                      toy (default), vit-tiny, vit-workshop\n"
          "  --layers/--heads/--hidden/--mlp N   ViT: override the preset's sizes\n"
          "  --data DIR                     FashionMNIST's .gz files (default $FSDP_DATA, else\n"
          "                                 /usr/share/datasets/fashion-mnist)\n"
          "  --split train|test             ViT: the split to train on (default train)\n"
          "  --epochs E                     ViT: epochs to train (default 1)\n"
          "  --eval true|false              ViT: evaluate after each epoch and at the end\n"
          "  --steps K                      optimizer steps (toy default 100)\n"
          "  --batch-size B                 samples per rank per micro-step (toy 8, ViT 64)\n"
          "  --seed S                       initialization and shuffling seed (default 1234)\n"
          "  --init-from FILE               start from these weights (safetensors with PyTorch's\n"
          "                                 state-dict names, e.g. exported from torchvision)\n"
          "cluster\n"
          "  --save-full FILE               at the end, the trained model as one safetensors\n"
          "                                 file with PyTorch's names (gathered unit by unit)\n"
          "  --ranks N                      simulated GPUs, 1 to 1024 (default 3)\n"
          "  --profile P                    cost model: h100-nvlink, a100-nvlink, l4-pcie\n"
          "  --checkpoint-dir D             save sharded checkpoints into D (each epoch's end)\n"
          "  --checkpoint-every N           ... and every N steps\n"
          "  --keep K                       keep the newest K checkpoints (default 3; 0: all)\n"
          "  --resume auto|DIR              continue from the newest checkpoint in\n"
          "                                 --checkpoint-dir, or from DIR (any world size and\n"
          "                                 strategy); --steps counts every step\n"
          "  --max-restarts R               when a rank fails, restart from the newest\n"
          "                                 checkpoint up to R times\n"
          "  --fail-at STEP[:RANK]          make RANK (default 0) fail as STEP begins, once\n"
          "  --kill-in-save STEP            SIGKILL this process half-way through saving the\n"
          "                                 checkpoint of STEP (the previous one survives)\n"
          "  --backend B                    sim (default: the simulated cluster), cuda (this\n"
          "                                 machine's GPU, --ranks 1; or one process per GPU\n"
          "                                 under ./fsdp launch, --ranks WORLD_SIZE), auto\n"
          "                                 (cuda if there is a GPU, else sim)\n"
          "  --timeout S                    cuda: a collective that takes longer than S seconds\n"
          "                                 aborts the job, naming rank, unit, collective (600)\n"
          "FSDP\n"
          "  --strategy S                   ddp, zero1, zero2, zero3 (default), hsdp\n"
          "  --replicas R                   hsdp: replica groups; must divide --ranks\n"
          "  --wrap W                       layer (default), block:K, size:N, none\n"
          "  --reshard-after-forward B      true|false (default: true for zero3/hsdp)\n"
          "  --prefetch-forward N           units gathered ahead in forward (default 1)\n"
          "  --prefetch-backward N          units gathered ahead in backward (default 1)\n"
          "  --grad-accum K                 micro-steps per step, gradient sync off between\n"
          "  --param-dtype T                fp32 (default), bf16, fp16: gathered params\n"
          "  --reduce-dtype T               fp32 (default), bf16, fp16: gradient reduction\n"
          "  --output-dtype T               cast each unit's forward output to T (default:\n"
          "                                 as computed)\n"
          "  --cast-forward-inputs B        cast each unit's inputs to --param-dtype\n"
          "                                 (default true; FSDP2's MixedPrecisionPolicy)\n"
          "  --layout L                     how parameters and gradients rest: fsdp (default:\n"
          "                                 fp32 rows, the master itself); deepspeed: in\n"
          "                                 --param-dtype and --reduce-dtype, with an fp32\n"
          "                                 master beside Adam's state, and zero2 keeping the\n"
          "                                 parameters whole (ZeRO's paper, K = 12)\n"
          "  --offload T                    none (default); optimizer: Adam's state and step on\n"
          "                                 the host (ZeRO-Offload); cpu: shards, grads and\n"
          "                                 Adam's state in host memory (FSDP2 CPUOffload);\n"
          "                                 nvme: shards and Adam's state in a file per rank\n"
          "                                 under --nvme-dir, grads in host memory\n"
          "                                 (ZeRO-Infinity), loaded unit by unit\n"
          "  --nvme-dir D                   where --offload nvme's files go (removed at exit)\n"
          "  --activation-checkpointing     ViT: keep only each block's input in forward and\n"
          "                                 recompute the block before its backward\n"
          "  --ac-every K                   ... only every K-th block (implies the above)\n"
          "optimizer\n"
          "  --optim adam|adamw             (default adam)\n"
          "  --lr X                         learning rate (toy 0.05, ViT 1e-3)\n"
          "  --weight-decay X               (default 0)\n"
          "  --clip-grad-norm X             clip by global norm; 0 = off (default)\n"
          "output\n"
          "  --print-plan                   print units and who owns which elements, then exit\n"
          "  --memory                       per rank: at-rest and peak bytes by category, and\n"
          "                                 the last step's memory over time by category\n"
          "  --memory-svg FILE              that timeline as an SVG picture, with the DDP\n"
          "                                 level and each rank's peak marked\n"
          "  --memory-compare               run the job (one step unless --steps) under the\n"
          "                                 workshop's settings (default, CPU offload, reshard\n"
          "                                 after forward, bf16, all combined, + activation\n"
          "                                 checkpointing) and compare their peaks\n"
          "  --accounting-only              ... charging memory and modelled time without\n"
          "                                 computing or holding data (any model size)\n"
          "  --scenario workshop            ... on the live workshop's cluster: two nodes with\n"
          "                                 one 24 GB L4 each, vit-workshop at hidden 3840 and\n"
          "                                 7680 (accounting only)\n"
          "  --json                         one JSON object per step on stdout\n"
          "  --print-every N                log every N steps (default: ten lines a run)\n"
          "  --dump-params FILE             final parameters: `name index value` lines\n"
          "  --trace-out FILE.json          Chrome Trace Event JSON (open in Perfetto)\n",
          f);
}

int cmd_fail(int code, const char *msg) {
    fprintf(stderr, "fsdp: %s\n", msg);
    return code == ERR_USAGE ? 2 : 1;
}
