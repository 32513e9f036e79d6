/* plan (command): `fsdp plan`. It reads the model (a preset, a Llama 3 shape, a generic GPT- or
 * Llama-shaped transformer by shape, or a GPT-shaped one by parameter count), the cluster (a
 * profile with overrides) and train's knobs, runs the planner (sim/planner.c), and prints memory
 * per GPU, traffic, step time, the largest batch. */
#include "cmd/commands.h"

#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cmd/cli.h"
#include "cmd/plan_search.h"
#include "cmd/report.h"
#include "cmd/run.h"
#include "io/trace_file.h"
#include "models/toy.h"
#include "models/transformer.h"
#include "models/vit.h"
#include "sim/calibrate.h"
#include "sim/planner.h"

typedef enum { MODEL_TOY = 0, MODEL_VIT, MODEL_TRANSFORMER } PlanModel;

typedef struct PlanArgs {
    TrainArgs train; /* the knobs of `fsdp train` (strategy, wrap, dtypes, offload, batch...) */
    PlanModel kind;
    char model[32];
    int model_given; /* --model was given (model is the toy's or the transformer's else) */
    double params;   /* --params; 0: none */
    int layers, hidden, heads, mlp, seq, vocab; /* shape overrides; 0: not given */
    int kv_heads;                               /* --kv-heads (Llama-shaped); 0: not given */
    int llama;                                  /* a Llama-shaped transformer */
    char attention[8];                          /* --attention; "": flash */
    char loss[8];                               /* --loss; "": fused */
    char elementwise[8];                        /* --elementwise; "": fused */
    int gpus, gpus_per_node;
    int replicas;                                     /* --replicas (hsdp); 0: not given */
    double gpu_mem_gb, tflops, link_gbps, inter_gbps; /* profile overrides; 0: not given */
    /* what a GPU holds beside its tensors (decimal GB; a share of the peak); -1: not given */
    float context_gb, workspace_gb, nccl_gb, fragmentation;
    int activation_checkpointing; /* --activation-checkpointing: every block unless --ac-every */
    int compare, json;
    int search, top, global_batch; /* --search, its --top N and --global-batch G */
    /* the profile's achieved efficiencies (-1: the profile's), and --calibrate's traces */
    float gemm_eff, attn_eff, mem_eff, launch_us, bus_eff;
    const char *calibrate[CALIBRATE_MAX_JOBS];
    int ncalibrate;
} PlanArgs;

/* ---------------------------------------------------------------- flags */

/* plan's own message for a name too long to keep. */
static int set_model(void *args, const char *flag, const char *v, Err *err) {
    PlanArgs *a = args;
    if (strlen(v) >= sizeof a->model)
        return err_set(err, ERR_USAGE, "%s is too long (got '%s')", flag, v);
    snprintf(a->model, sizeof a->model, "%s", v);
    a->model_given = 1;
    return 0;
}

static int add_calibrate(void *args, const char *flag, const char *v, Err *err) {
    PlanArgs *a = args;
    if (a->ncalibrate == CALIBRATE_MAX_JOBS)
        return err_set(err, ERR_USAGE, "%s takes at most %d traces", flag, CALIBRATE_MAX_JOBS);
    a->calibrate[a->ncalibrate++] = v;
    return 0;
}

static int set_attention(void *args, const char *flag, const char *v, Err *err) {
    PlanArgs *a = args;
    if (attention_from_name(v) < 0)
        return err_set(err, ERR_USAGE, "%s must be eager or flash (got '%s')", flag, v);
    snprintf(a->attention, sizeof a->attention, "%s", v);
    return 0;
}

static int set_loss(void *args, const char *flag, const char *v, Err *err) {
    PlanArgs *a = args;
    if (loss_from_name(v) < 0)
        return err_set(err, ERR_USAGE, "%s must be fused or eager (got '%s')", flag, v);
    snprintf(a->loss, sizeof a->loss, "%s", v);
    return 0;
}

static int set_elementwise(void *args, const char *flag, const char *v, Err *err) {
    PlanArgs *a = args;
    if (elementwise_from_name(v) < 0)
        return err_set(err, ERR_USAGE, "%s must be fused or eager (got '%s')", flag, v);
    snprintf(a->elementwise, sizeof a->elementwise, "%s", v);
    return 0;
}

static int set_ac_policy(void *args, const char *flag, const char *v, Err *err) {
    int p = ac_policy_from_name(v);
    if (p < 0)
        return err_set(err, ERR_USAGE, "%s must be block, ops or torchtitan (got '%s')", flag, v);
    ((PlanArgs *)args)->train.fsdp.ac_policy = (AcPolicy)p;
    return 0;
}

#define ARG(field) offsetof(PlanArgs, field)

/* plan's flags in the order --help lists them. A training knob is train's own row: plan hands
 * it to train's parser (FLAG_FORWARD), so it means and checks exactly what it does there. */
static const Flag plan_rows[] = {
    {.kind = FLAG_SECTION, .help = "model (default: the toy)"},
    {"--model", FLAG_SET, .set = set_model, .arg = "M",
     .help = "toy, vit-tiny, vit-workshop, transformer, llama,\n"
             "gpt2-small, llama-125m, llama3-8b, llama3-70b,\n"
             "llama3-405b"},
    {"--params", FLAG_POSITIVE, ARG(params), .hi = 1e13, .arg = "P",
     .help = "a generic transformer of about P parameters (7e9)"},
    {"--layers", FLAG_COUNT, ARG(layers), 1, 1 << 24, .usage = "--layers --hidden --heads --mlp",
     .help = "shape of the ViT or the transformer"},
    {"--hidden", FLAG_COUNT, ARG(hidden), 1, 1 << 24, .arg = "N"},
    {"--heads", FLAG_COUNT, ARG(heads), 1, 1 << 24, .arg = "N"},
    {"--mlp", FLAG_COUNT, ARG(mlp), 1, 1 << 24, .arg = "N"},
    {"--kv-heads", FLAG_COUNT, ARG(kv_heads), 1, 1 << 24, .arg = "N",
     .help = "Llama-shaped: K,V heads, dividing --heads"},
    {"--seq", FLAG_COUNT, ARG(seq), 1, 1 << 24, .usage = "--seq --vocab",
     .help = "the transformer's sequence length and vocabulary\n(--seq also goes with --params)"},
    {"--vocab", FLAG_COUNT, ARG(vocab), 1, 1 << 24, .arg = "N"},
    {"--attention", FLAG_SET, .set = set_attention, .arg = "eager|flash",
     .help = "keep attention's probabilities (eager: the ViT's\n"
             "default) or only each row's log-sum-exp (flash:\n"
             "the transformers')"},
    {"--loss", FLAG_SET, .set = set_loss, .arg = "fused|eager",
     .help = "the transformers' loss in one pass (fused) or as\n"
             "PyTorch's cross_entropy over fp32 logits, each\n"
             "step's fp32 tensor kept (eager: torchtitan's)"},
    {"--elementwise", FLAG_SET, .set = set_elementwise, .arg = "fused|eager",
     .help = "Llama: charge the norms, RoPE, adds and SwiGLU as\n"
             "fsdp's fused kernels (fused) or as eager PyTorch's\n"
             "kernel per operator through fp32 temporaries\n"
             "(eager: torchtitan's model without torch.compile)"},
    {.kind = FLAG_SECTION, .help = "cluster"},
    {"--gpus", FLAG_COUNT, ARG(gpus), 1, PLANNER_MAX_GPUS, .arg = "N",
     .help = "GPUs, 1 to 1,048,576 (default 3); above one node,\na whole number of nodes"},
    {"--gpus-per-node", FLAG_COUNT, ARG(gpus_per_node), 1, PLANNER_MAX_GPUS, .arg = "G",
     .help = "default: the profile's"},
    {"--profile", FLAG_FORWARD, .arg = "P",
     .help = "h100-nvlink (default), h200-nvlink, h100-gt,\n"
             "a100-nvlink, v100-nvlink, l4-pcie"},
    {"--gpu-mem", FLAG_POSITIVE, ARG(gpu_mem_gb), .hi = 1e6,
     .usage = "--gpu-mem GB --flops TFLOPS --link-bw GBPS --inter-node-bw GBPS",
     .help = "\noverride the profile (decimal GB, bf16 TFLOP/s)"},
    {"--flops", FLAG_POSITIVE, ARG(tflops), .hi = 1e6, .arg = "TFLOPS"},
    {"--link-bw", FLAG_POSITIVE, ARG(link_gbps), .hi = 1e6, .arg = "GBPS"},
    {"--inter-node-bw", FLAG_POSITIVE, ARG(inter_gbps), .hi = 1e6, .arg = "GBPS"},
    {"--context-mem", FLAG_FLOAT, ARG(context_gb), 0, 1e6,
     .usage = "--context-mem GB --workspace-mem GB --nccl-mem GB",
     .help = "\nwhat a GPU holds beside its tensors: the CUDA\ncontext, cuBLAS's workspaces, "
             "NCCL's buffers a\ncommunicator (0 drops a row; default: the profile's)"},
    {"--workspace-mem", FLAG_FLOAT, ARG(workspace_gb), 0, 1e6, .arg = "GB"},
    {"--nccl-mem", FLAG_FLOAT, ARG(nccl_gb), 0, 1e6, .arg = "GB"},
    {"--fragmentation", FLAG_FLOAT, ARG(fragmentation), 0, 1, .arg = "F",
     .help = "room for the caching allocator's fragmentation, a\nshare of the tensors' peak "
             "(default 0.05)"},
    {"--gemm-eff", FLAG_FLOAT, ARG(gemm_eff), 0.001f, 1,
     .usage = "--gemm-eff F --attn-eff F --mem-eff F --bus-eff F",
     .help = "\nwhat the GPU achieves of its peaks: a large GEMM's,\nflash attention's, "
             "memory-bound kernels', NCCL's\nshares (--calibrate prints them)"},
    {"--attn-eff", FLAG_FLOAT, ARG(attn_eff), 0.001f, 1, .arg = "F"},
    {"--mem-eff", FLAG_FLOAT, ARG(mem_eff), 0.001f, 1, .arg = "F"},
    {"--bus-eff", FLAG_FLOAT, ARG(bus_eff), 0.001f, 1, .arg = "F"},
    {"--launch-us", FLAG_FLOAT, ARG(launch_us), 0, 1e6, .arg = "US",
     .help = "what a kernel costs however small, microseconds"},
    {"--calibrate", FLAG_SET, .set = add_calibrate, .arg = "TRACE",
     .help = "fit the efficiencies above to a GPU run's trace\n(train --trace-out; up to 8, each "
             "its own flag)\nand print the fitted profile"},
    {.kind = FLAG_NAMES, .help = "training (as ./fsdp train)"},
    {.name = "--strategy", .kind = FLAG_FORWARD},
    /* plan's own: train's bound is the threads a simulated run can take */
    {"--replicas", FLAG_COUNT, ARG(replicas), 1, PLANNER_MAX_GPUS, .arg = "R"},
    {.name = "--wrap", .kind = FLAG_FORWARD},
    {.name = "--reshard-after-forward", .kind = FLAG_FORWARD},
    {.name = "--prefetch-forward", .kind = FLAG_FORWARD},
    {.name = "--prefetch-backward", .kind = FLAG_FORWARD},
    {.name = "--param-dtype", .kind = FLAG_FORWARD},
    {.name = "--reduce-dtype", .kind = FLAG_FORWARD},
    {.name = "--output-dtype", .kind = FLAG_FORWARD},
    {.name = "--layout", .kind = FLAG_FORWARD},
    {.name = "--cast-forward-inputs", .kind = FLAG_FORWARD},
    {.name = "--offload", .kind = FLAG_FORWARD},
    {.name = "--batch-size", .kind = FLAG_FORWARD},
    {.name = "--grad-accum", .kind = FLAG_FORWARD},
    {.name = "--optim", .kind = FLAG_FORWARD},
    /* plan's own: train's refuses them for the toy, which is train's model while plan's is
     * still unknown */
    {.name = "--activation-checkpointing",
     .kind = FLAG_SWITCH,
     .field = ARG(activation_checkpointing)},
    {"--ac-every", FLAG_COUNT, ARG(train.fsdp.ac_every), 1, 1 << 20, .arg = "K"},
    {"--ac-policy", FLAG_SET, .set = set_ac_policy, .arg = "block|ops|torchtitan"},
    {.kind = FLAG_SECTION, .help = "output"},
    {"--compare", FLAG_SWITCH, ARG(compare),
     .help = "one table across ddp, zero1, zero2, zero3 and hsdp"},
    {"--json", FLAG_SWITCH, ARG(json), .help = "one JSON object"},
    {"--search", FLAG_SWITCH, ARG(search),
     .help = "the configurations that fit, fastest first, each\nwith the flags that run it"},
    {"--top", FLAG_COUNT, ARG(top), 1, 1000, .arg = "N", .help = "--search: how many (default 5)"},
    {"--global-batch", FLAG_COUNT, ARG(global_batch), 1, 1 << 30, .arg = "G",
     .help = "--search: G samples a step over all GPUs\n(default: each configuration's largest)"},
};

static const FlagTable plan_table = FLAG_TABLE("plan", plan_rows, 28);

static void plan_help(FILE *f) {
    fputs("usage: ./fsdp plan [flags]\n"
          "\n"
          "Will it fit, and how slow will it be? Runs the engine's schedule with accounting\n"
          "only (no tensors) for any model and cluster: memory per GPU at rest and at peak,\n"
          "what each collective moves, the modelled step time and the largest batch that fits.\n"
          "\n",
          f);
    flags_help(&plan_table, f);
    fputs("\n"
          "example: ./fsdp plan --params 7e9 --gpus 8 --param-dtype bf16\n"
          "ZeRO's figure: ./fsdp plan --params 7.5e9 --gpus 64 --param-dtype fp16\n"
          "               --reduce-dtype fp16 --layout deepspeed --compare\n"
          "the fastest that fit: ./fsdp plan --params 70e9 --gpus 1024 --search\n",
          f);
}

/* ---------------------------------------------------------------- parsing */

static int choose_model(PlanArgs *a, Err *err) {
    TransformerConfig lm;
    int shape = a->layers || a->hidden || a->heads || a->mlp;
    int text = a->seq || a->vocab;
    if (!a->model[0])
        snprintf(a->model, sizeof a->model, "%s", a->params || text ? "transformer" : "toy");
    if (!strcmp(a->model, "toy"))
        a->kind = MODEL_TOY;
    else if (!strcmp(a->model, "vit-tiny") || !strcmp(a->model, "vit-workshop"))
        a->kind = MODEL_VIT;
    else if (!strcmp(a->model, "transformer"))
        a->kind = MODEL_TRANSFORMER;
    else if (!strcmp(a->model, "llama") ||
             !transformer_llama_preset(a->model, &(TransformerConfig){0}))
        a->kind = MODEL_TRANSFORMER, a->llama = 1;
    else if (!transformer_lm_preset(a->model, &lm))
        a->kind = MODEL_TRANSFORMER, a->llama = lm.arch == TRANSFORMER_LLAMA;
    else
        return err_set(err, ERR_USAGE,
                       "--model must be toy, vit-tiny, vit-workshop, transformer, llama, %s, %s "
                       "(got '%s')",
                       transformer_lm_preset_names(), transformer_llama_preset_names(), a->model);
    if (a->kv_heads && !a->llama)
        return err_set(err, ERR_USAGE,
                       "--kv-heads applies to Llama-shaped models; %s has one K,V head per head",
                       a->model);
    if (a->attention[0] && a->kind == MODEL_TOY)
        return err_set(err, ERR_USAGE,
                       "--attention applies to the transformers and the ViT; the toy has no "
                       "attention");
    if (a->loss[0] && a->kind != MODEL_TRANSFORMER)
        return err_set(err, ERR_USAGE, "--loss applies to the transformers; the %s's loss is fused",
                       a->kind == MODEL_VIT ? "ViT" : "toy");
    if (a->elementwise[0] && !a->llama)
        return err_set(err, ERR_USAGE,
                       "--elementwise applies to Llama-shaped models (llama, llama-125m, "
                       "llama3-*); not --model %s",
                       a->model);
    if (a->params && (a->kind != MODEL_TRANSFORMER || a->llama))
        return err_set(err, ERR_USAGE, "--params sizes a generic transformer, not --model %s",
                       a->model);
    /* --seq stays free: activations grow with it, and --params's shape is chosen around it */
    if (a->params && (shape || a->vocab))
        return err_set(err, ERR_USAGE,
                       "give --params or the shape (--layers, --hidden, --heads, --mlp, --vocab), "
                       "not both (--seq goes with either)");
    if (text && a->kind != MODEL_TRANSFORMER)
        return err_set(err, ERR_USAGE, "--seq and --vocab apply to the transformer, not %s",
                       a->model);
    if (shape && a->kind == MODEL_TOY)
        return err_set(err, ERR_USAGE,
                       "the toy has a fixed shape: --layers, --hidden, --heads "
                       "and --mlp apply to the ViT and the transformer");
    if (a->train.fsdp.ac_every && a->kind == MODEL_TOY)
        return err_set(err, ERR_USAGE,
                       "--activation-checkpointing and --ac-every apply to "
                       "blocks; the toy saves only each layer's input");
    return 0;
}

static int asks_nvme(char **fwd, int n) {
    for (int i = 0; i + 1 < n; i += 2)
        if (!strcmp(fwd[i], "--offload") && !strcmp(fwd[i + 1], "nvme")) return 1;
    return 0;
}

enum { WANTS_HELP = 1000 }; /* apart from 0, 1 and the (negative) error codes */

/* Plan flags are taken here; the training knobs go through train's own parser (with --gpus
 * as its --ranks), so they mean and check exactly what they do there. */
static int plan_args_parse(PlanArgs *a, int argc, char **argv, Err *err) {
    memset(a, 0, sizeof *a);
    train_args_defaults(&a->train);
    a->gpus = 3;
    a->context_gb = a->workspace_gb = a->nccl_gb = a->fragmentation = -1;
    a->gemm_eff = a->attn_eff = a->mem_eff = a->launch_us = a->bus_eff = -1;
    char **fwd = calloc((size_t)argc + 4, sizeof *fwd);
    if (!fwd) return err_set(err, ERR_NOMEM, "out of memory reading the flags");
    int n = 0, rc = 0;
    for (int i = 0; rc == 0 && i < argc; i++) {
        const char *f = argv[i];
        const Flag *row = flag_find(&plan_table, f);
        if (!strcmp(f, "--help") || !strcmp(f, "-h"))
            rc = WANTS_HELP;
        else if (row && row->kind == FLAG_SWITCH)
            flag_set(row, a, NULL, err);
        else if (strncmp(f, "--", 2) != 0)
            rc = err_set(err, ERR_USAGE, "unexpected argument '%s' (flags start with --)", f);
        else if (i + 1 >= argc)
            rc = flag_missing_value(&plan_table, row, f, err);
        else if (!row)
            rc = err_set(err, ERR_USAGE, "plan does not take %s (see ./fsdp plan --help)", f);
        else if (row->kind != FLAG_FORWARD)
            rc = flag_set(row, a, argv[++i], err);
        else {
            fwd[n++] = argv[i];
            fwd[n++] = argv[++i];
        }
    }
    /* every block, unless --ac-every chose every K-th */
    if (a->activation_checkpointing && !a->train.fsdp.ac_every) a->train.fsdp.ac_every = 1;
    if (!rc) rc = choose_model(a, err);
    /* --gpus and --replicas stay plan's: train's --ranks is bounded by the threads a simulated
     * run can take, a plan's GPUs by a cluster's size */
    int nvme = asks_nvme(fwd, n);
    if (nvme) { /* training needs a directory for the tier's files; a plan opens none */
        fwd[n++] = "--nvme-dir";
        fwd[n++] = "(none)";
    }
    int ac_every = a->train.fsdp.ac_every;
    AcPolicy ac_policy = a->train.fsdp.ac_policy;
    a->train.fsdp.ac_every = 0; /* train's parser takes the model for the toy and refuses it */
    a->train.fsdp.ac_policy = AC_BLOCK;
    if (!rc) rc = train_args_parse(&a->train, n, fwd, err);
    a->train.fsdp.ac_every = ac_every;
    a->train.fsdp.ac_policy = ac_policy;
    free(fwd);
    if (rc == WANTS_HELP || rc == 1) return 1; /* 1: train's parser saw --help */
    if (rc) return rc;
    rc = ac_policy_check(&a->train.fsdp, err);
    if (rc) return rc;
    if (a->replicas) a->train.fsdp.replicas = a->replicas;
    if (!a->train.batch_given)
        a->train.fsdp.batch_size = a->kind == MODEL_VIT ? 64 : a->kind == MODEL_TOY ? 8 : 1;
    return 0;
}

/* ---------------------------------------------------------------- the job */

typedef struct PlanSetup {
    ModelDesc model;
    Profile profile;
    char profile_name[64];
} PlanSetup;

static int make_profile(const PlanArgs *a, PlanSetup *s, Err *err) {
    const Profile *base = a->train.profile[0] ? profile_find(a->train.profile) : profile_default();
    if (!base)
        return err_set(err, ERR_USAGE, "--profile must be one of %s (got '%s')", profile_names(),
                       a->train.profile);
    s->profile = *base;
    int custom = a->gpu_mem_gb || a->tflops || a->link_gbps || a->inter_gbps ||
                 a->context_gb >= 0 || a->workspace_gb >= 0 || a->nccl_gb >= 0 ||
                 a->fragmentation >= 0 || a->gemm_eff > 0 || a->attn_eff > 0 || a->mem_eff > 0 ||
                 a->bus_eff > 0 || a->launch_us >= 0;
    snprintf(s->profile_name, sizeof s->profile_name, "%s%s", base->name,
             custom ? " with overrides" : "");
    s->profile.name = s->profile_name;
    if (a->gpus_per_node) s->profile.gpus_per_node = a->gpus_per_node;
    if (a->gpu_mem_gb) s->profile.mem_bytes = a->gpu_mem_gb * 1e9;
    if (a->tflops) { /* bf16 as given; fp32 keeps the profile's ratio to it */
        s->profile.flops_fp32 *= a->tflops * 1e12 / s->profile.flops_low;
        s->profile.flops_low = a->tflops * 1e12;
    }
    if (a->link_gbps) s->profile.intra_bw = a->link_gbps * 1e9;
    if (a->inter_gbps) s->profile.inter_bw = a->inter_gbps * 1e9;
    if (a->context_gb >= 0) s->profile.context_bytes = a->context_gb * 1e9;
    if (a->workspace_gb >= 0) s->profile.workspace_bytes = a->workspace_gb * 1e9;
    if (a->nccl_gb >= 0) s->profile.nccl_bytes = a->nccl_gb * 1e9;
    if (a->fragmentation >= 0) s->profile.fragmentation = a->fragmentation;
    if (a->gemm_eff > 0) s->profile.gemm_eff = a->gemm_eff;
    if (a->attn_eff > 0) s->profile.attn_eff = a->attn_eff;
    if (a->mem_eff > 0) s->profile.mem_eff = a->mem_eff;
    if (a->bus_eff > 0) s->profile.bus_eff = a->bus_eff;
    if (a->launch_us >= 0) s->profile.launch_overhead = a->launch_us * 1e-6;
    return 0;
}

/* GPT-2-shaped: GPT-2 small's shape (gpt2-small's: over bytes) with the flags' overrides, or
 * one for --params. */
static int gpt_config(const PlanArgs *a, TransformerConfig *c, Err *err) {
    TransformerConfig p = {.layers = 12, .hidden = 768, .heads = 12, .seq = 1024, .vocab = 50257};
    int preset = !transformer_lm_preset(a->model, &p);
    *c = (TransformerConfig){.layers = a->layers ? a->layers : p.layers,
                             .hidden = a->hidden ? a->hidden : p.hidden,
                             .heads = a->heads ? a->heads : p.heads,
                             .seq = a->seq ? a->seq : p.seq,
                             .vocab = a->vocab ? a->vocab : p.vocab};
    c->mlp = a->mlp ? a->mlp : preset ? p.mlp : 4 * c->hidden;
    if (!a->params) return 0;
    int rc = transformer_config_for_params(a->params, c, err);
    if (!rc && a->seq) c->seq = a->seq; /* the position embedding's seq x hidden moves the */
    return rc;                          /* count a hair (8M of 70B from 2048 to 1024) */
}

/* Llama-shaped: the preset's published shape (--model llama: llama3-8b's) with the flags'
 * overrides. */
static int llama_config(const PlanArgs *a, TransformerConfig *c) {
    if (transformer_llama_preset(a->model, c) && transformer_lm_preset(a->model, c))
        transformer_llama_preset("llama3-8b", c);
    int *fields[] = {&c->layers, &c->hidden, &c->heads, &c->kv_heads, &c->mlp, &c->seq, &c->vocab};
    const int given[] = {a->layers, a->hidden, a->heads, a->kv_heads, a->mlp, a->seq, a->vocab};
    for (int i = 0; i < 7; i++)
        if (given[i]) *fields[i] = given[i];
    return 0;
}

/* The cluster the flags describe must be one: whole nodes once there are several, hsdp's
 * replicas dividing the GPUs. */
static int check_cluster(const PlanArgs *a, const PlanSetup *s, Err *err) {
    int per_node = s->profile.gpus_per_node;
    const FsdpConfig *c = &a->train.fsdp;
    if (a->gpus > per_node && a->gpus % per_node != 0)
        return err_set(err, ERR_USAGE,
                       "--gpus %d is not a whole number of nodes of %d GPUs (--gpus-per-node %d)",
                       a->gpus, per_node, per_node);
    if (a->replicas && c->strategy != STRAT_HSDP)
        return err_set(err, ERR_USAGE, "--replicas applies only to --strategy hsdp (got %d)",
                       a->replicas);
    if (c->strategy == STRAT_HSDP && a->gpus % c->replicas != 0)
        return err_set(err, ERR_USAGE, "--replicas %d does not divide --gpus %d", c->replicas,
                       a->gpus);
    return 0;
}

/* --search's flags go with it alone; it chooses the batch unless --batch-size fixes it. */
static int check_search(const PlanArgs *a, Err *err) {
    if (!a->search && (a->top || a->global_batch))
        return err_set(err, ERR_USAGE, "--top and --global-batch go with --search");
    if (a->search && a->compare)
        return err_set(err, ERR_USAGE, "give --search or --compare, not both");
    /* a trace's job is its own flags': plan's would go unused */
    const char *job_flag = a->search                                      ? "--search"
                           : a->compare                                   ? "--compare"
                           : a->json                                      ? "--json"
                           : a->model_given                               ? "--model"
                           : a->params                                    ? "--params"
                           : a->layers || a->hidden || a->heads || a->mlp ? "a shape flag"
                           : a->gpus != 3                                 ? "--gpus"
                           : a->train.batch_given                         ? "--batch-size"
                                                                          : NULL;
    if (a->ncalibrate && job_flag)
        return err_set(err, ERR_USAGE,
                       "--calibrate plans each trace's job from the flags it records; give only "
                       "the profile's flags with it (got %s)",
                       job_flag);
    if (a->search && a->global_batch && a->train.batch_given)
        return err_set(err, ERR_USAGE,
                       "give --global-batch or --batch-size, not both (the search splits a global "
                       "batch into micro-batches itself)");
    return 0;
}

static int make_model(const PlanArgs *a, PlanSetup *s, Err *err) {
    if (a->kind == MODEL_TOY) return toy_model_create(&s->model, err);
    if (a->kind == MODEL_VIT) {
        VitConfig c;
        vit_preset_with(a->model, a->layers, a->heads, a->hidden, a->mlp, &c); /* a known preset */
        c.flash = !strcmp(a->attention, "flash"); /* eager unless asked, as train's */
        return vit_model_create(&s->model, &c, err);
    }
    TransformerConfig c;
    int rc = a->llama ? llama_config(a, &c) : gpt_config(a, &c, err);
    c.attention =
        a->attention[0] ? (AttentionKind)attention_from_name(a->attention) : ATTENTION_FLASH;
    c.loss = a->loss[0] ? (LossKind)loss_from_name(a->loss) : LOSS_FUSED;
    c.elementwise = a->elementwise[0] ? (ElementwiseKind)elementwise_from_name(a->elementwise)
                                      : ELEMENTWISE_FUSED;
    if (!rc) rc = transformer_config_check(&c, err);
    return rc ? rc : transformer_model_create(&s->model, &c, err);
}

/* Plans the job under strategy s (replicas for hsdp) at the given batch. */
static int plan_once(const PlanArgs *a, const PlanSetup *setup, Strategy s, int replicas, int batch,
                     PlannerResult *out, Err *err) {
    PlannerJob job = {.model = &setup->model, .profile = &setup->profile};
    job.cfg = a->train.fsdp;
    job.cfg.strategy = s;
    job.cfg.replicas = replicas;
    job.cfg.batch_size = batch;
    Plan plan;
    int rc = fsdp_plan_create(&plan, &setup->model, &job.cfg, a->gpus, err);
    if (rc) return rc;
    job.plan = &plan;
    rc = planner_run(&job, out, err);
    plan_free(&plan);
    return rc;
}

/* ---------------------------------------------------------------- figures */

static size_t gpu_bytes(const size_t *by_category) {
    size_t b = 0;
    for (int c = 0; c < MEM_CATEGORY_COUNT; c++)
        if (mem_category_on_gpu((MemCategory)c)) b += by_category[c];
    return b;
}

static size_t off_gpu_bytes(const size_t *by_category) {
    return by_category[MEM_HOST_OFFLOAD] + by_category[MEM_NVME];
}

/* The fullest GPU's own peak. */
static size_t gpu_peak(const PlannerResult *r) {
    return planner_top_memory(r)->on_gpu.peak;
}

/* What the fullest GPU holds at its peak: its tensors and, beside them, what every real job
 * pays (cost_overhead; rows by OVERHEAD_*, where rows is not NULL). */
static double gpu_total(const PlanSetup *s, const PlannerResult *r, double *rows) {
    double scratch[OVERHEAD_ROWS], peak = (double)gpu_peak(r);
    return peak + cost_overhead(&s->profile, r->communicators, peak, rows ? rows : scratch);
}

static int fits(const PlanSetup *s, const PlannerResult *r) {
    return gpu_total(s, r, NULL) <= s->profile.mem_bytes;
}

/* Plans batch b: the fullest GPU's bytes at its peak at *peak (gpu_total), and whether they
 * fit the GPU. */
static int probe(const PlanArgs *a, const PlanSetup *s, Strategy st, int replicas, int b, int *fit,
                 double *peak, Err *err) {
    PlannerResult r;
    int rc = plan_once(a, s, st, replicas, b, &r, err);
    if (rc) return rc;
    *fit = fits(s, &r);
    *peak = gpu_total(s, &r, NULL);
    planner_result_free(&r);
    return 0;
}

/* The largest batch per GPU whose peak fits the GPU: doubling, then bisecting. 0 when even
 * one sample does not fit; *peak1 is the GPU peak at batch 1 (the first batch tried). */
static int max_batch(const PlanArgs *a, const PlanSetup *s, Strategy st, int replicas, int *out,
                     double *peak1, Err *err) {
    /* the flag's bound, and the planner's per GPU at this --grad-accum */
    long planner_cap = PLANNER_MAX_GPU_SAMPLES / a->train.fsdp.grad_accum;
    int CAP = planner_cap < (1 << 20) ? (int)planner_cap : 1 << 20;
    int good = 0, bad = 0, fit;
    double peak;
    for (int b = 1; !bad && b <= CAP; b *= 2) {
        int rc = probe(a, s, st, replicas, b, &fit, &peak, err);
        if (rc) return rc;
        if (b == 1) *peak1 = peak;
        *(fit ? &good : &bad) = b;
    }
    while (bad && bad - good > 1) {
        int mid = good + (bad - good) / 2;
        int rc = probe(a, s, st, replicas, mid, &fit, &peak, err);
        if (rc) return rc;
        *(fit ? &good : &bad) = mid;
    }
    *out = good;
    return 0;
}

/* ---------------------------------------------------------------- text */

/* The shape the plan assumed: what activations grow with (layers, hidden, heads, the sequence)
 * and, for --params, which shape that size was given. */
static void print_shape(FILE *f, const PlanArgs *a, const PlanSetup *s) {
    char v[32];
    if (a->kind == MODEL_TRANSFORMER) {
        const TransformerConfig *c = s->model.config;
        char kv[32] = "";
        if (c->arch == TRANSFORMER_LLAMA) snprintf(kv, sizeof kv, " and %d KV heads", c->kv_heads);
        fprintf(f,
                "shape: %d layers, hidden %d, %d heads%s, %sMLP %d, sequence %d, vocabulary %s, "
                "%s attention%s%s%s\n",
                c->layers, c->hidden, c->heads, kv, c->arch == TRANSFORMER_LLAMA ? "SwiGLU " : "",
                c->mlp, c->seq, with_commas((size_t)c->vocab, v, sizeof v),
                attention_name(c->attention),
                c->loss == LOSS_EAGER ? ", eager loss (fp32 log-probabilities)" : "",
                c->elementwise == ELEMENTWISE_EAGER ? ", eager PyTorch's elementwise kernels" : "",
                a->params ? " (chosen for --params from published widths; --seq sets the sequence)"
                          : "");
    } else if (a->kind == MODEL_VIT) {
        const VitConfig *c = s->model.config;
        fprintf(f,
                "shape: %d layers, hidden %d, %d heads, MLP %d, sequence %d tokens (%dx%d images "
                "in %dx%d patches, and the class token), %d classes\n",
                c->layers, c->hidden, c->heads, c->mlp, vit_tokens(c), c->image, c->image, c->patch,
                c->patch, c->classes);
    } else {
        fprintf(f, "shape: the workshop's toy, 3 layers (La, Lb, Lc) of 3 scalars each\n");
    }
}

static void print_header(FILE *f, const PlanArgs *a, const PlanSetup *s) {
    char n[32], mem[32];
    const FsdpConfig *c = &a->train.fsdp;
    fprintf(f, "fsdp plan: %s, %s parameters (%s in fp32)\n", a->model,
            with_commas(s->model.total_numel, n, sizeof n),
            report_si_bytes(4.0 * (double)s->model.total_numel, mem, sizeof mem));
    VitConfig workshop;
    vit_preset("vit-workshop", &workshop);
    if (a->kind == MODEL_VIT && !memcmp(s->model.config, &workshop, sizeof workshop))
        fprintf(f, "  (the workshop's notes say ~180M for this hidden-3840 ViT; it has %s)\n", n);
    print_shape(f, a, s);
    char wrap[32];
    wrap_format(&c->wrap, wrap, sizeof wrap);
    fprintf(f, "cluster: %d GPUs, %s (%d per node, %s each)\n", a->gpus, s->profile.name,
            s->profile.gpus_per_node, report_si_bytes(s->profile.mem_bytes, mem, sizeof mem));
    if (a->search) return; /* the job is what the search chooses */
    fprintf(f,
            "job: batch %d per GPU x %d micro-step%s, wrap %s, params %s, reduce %s, layout %s, "
            "offload %s",
            c->batch_size, c->grad_accum, c->grad_accum == 1 ? "" : "s", wrap,
            dtype_name(c->param_dtype), dtype_name(c->reduce_dtype), layout_name(c->layout),
            offload_name(c->offload));
    if (c->ac_every) fprintf(f, ", activation checkpointing every %d block(s)", c->ac_every);
    if (c->ac_every && c->ac_policy == AC_OPS) fprintf(f, " keeping GEMM outputs (ops)");
    if (c->ac_every && c->ac_policy == AC_TORCHTITAN)
        fprintf(f, " keeping every other GEMM output (torchtitan)");
    fputc('\n', f);
}

/* "NCCL buffers, 2 communicators": the row of what a GPU holds beside its tensors. */
static void overhead_label(const PlanSetup *s, const PlannerResult *r, int row, char *out,
                           size_t n) {
    switch (row) {
    case OVERHEAD_CONTEXT:
        snprintf(out, n, "CUDA context");
        return;
    case OVERHEAD_WORKSPACE:
        snprintf(out, n, "cuBLAS workspaces");
        return;
    case OVERHEAD_NCCL:
        snprintf(out, n, "NCCL buffers, %d communicator%s", r->communicators,
                 r->communicators == 1 ? "" : "s");
        return;
    default:
        snprintf(out, n, "allocator fragmentation, %.0f%%", 100 * s->profile.fragmentation);
    }
}

static void print_memory(FILE *f, const PlanSetup *s, const PlannerResult *r) {
    const RankMemory *m = planner_top_memory(r);
    const size_t *gpu = m->on_gpu.at_peak; /* the breakdown at the GPU's own peak */
    char a[32], b[32];
    fprintf(f, "\nmemory per GPU (rank %d, the fullest)    at rest      at peak\n", r->top);
    for (int c = 0; c < MEM_CATEGORY_COUNT; c++) {
        if (!mem_category_on_gpu((MemCategory)c) || (!m->rest[c] && !gpu[c])) continue;
        fprintf(f, "  %-34s %11s  %11s\n", mem_category_label((MemCategory)c),
                report_si_bytes((double)m->rest[c], a, sizeof a),
                report_si_bytes((double)gpu[c], b, sizeof b));
    }
    size_t peak = m->on_gpu.peak;
    char cap[32], label[48];
    fprintf(f, "  %-34s %11s  %11s\n", "tensors",
            report_si_bytes((double)gpu_bytes(m->rest), a, sizeof a),
            report_si_bytes((double)peak, b, sizeof b));
    double rows[OVERHEAD_ROWS], total = gpu_total(s, r, rows);
    for (int i = 0; i < OVERHEAD_ROWS; i++) {
        if (!rows[i]) continue;
        overhead_label(s, r, i, label, sizeof label);
        fprintf(f, "  %-34s %11s  %11s\n", label, "", report_si_bytes(rows[i], b, sizeof b));
    }
    fprintf(f, "  %-34s %11s  %11s  %s %s\n", "GPU total",
            report_si_bytes((double)gpu_bytes(m->rest), a, sizeof a),
            report_si_bytes(total, b, sizeof b), fits(s, r) ? "fits in" : "does NOT fit in",
            report_si_bytes(s->profile.mem_bytes, cap, sizeof cap));
    if (off_gpu_bytes(m->rest) || m->off_gpu.peak)
        fprintf(f, "  %-34s %11s  %11s\n", "off the GPU (host memory, NVMe)",
                report_si_bytes((double)off_gpu_bytes(m->rest), a, sizeof a),
                report_si_bytes((double)m->off_gpu.peak, b, sizeof b));
}

static void print_traffic(FILE *f, const PlannerResult *r) {
    char a[32], b[32], c[32];
    fprintf(f, "\ncommunication per step  calls/GPU   buffers/GPU    sent/GPU   sent, all GPUs\n");
    for (int k = 0; k < COLL_KIND_COUNT; k++) {
        const PlannerTraffic *t = &r->traffic[k];
        if (!t->calls || k == COLL_BARRIER) continue;
        fprintf(f, "  %-20s %10.0f %13s %11s %16s\n", coll_kind_name((CollKind)k), t->calls,
                report_si_bytes(t->buffer_bytes, a, sizeof a),
                report_si_bytes(t->sent_bytes, b, sizeof b),
                report_si_bytes(t->total_sent, c, sizeof c));
    }
}

static void print_time(FILE *f, const PlannerResult *r) {
    char a[32], b[32], c[32], d[32];
    fprintf(f, "\nstep time (modelled): %s = compute %s + waiting %s\n",
            report_seconds(r->step_time, a, sizeof a), report_seconds(r->compute_time, b, sizeof b),
            report_seconds(r->waiting, c, sizeof c));
    double moving = r->comm_time + r->copy_time;
    double hidden = moving > 0 ? 1.0 - r->waiting / moving : 1.0;
    fprintf(f, "  (communication busy %s", report_seconds(r->comm_time, d, sizeof d));
    if (r->copy_time > 0)
        fprintf(f, ", host copies and NVMe %s", report_seconds(r->copy_time, d, sizeof d));
    fprintf(f, "; %.0f%% of it hidden behind compute)\n", 100.0 * (hidden > 0 ? hidden : 0));
}

/* ---------------------------------------------------------------- when nothing fits */

/* What fills a GPU at its peak, grouped by the levers that shrink it. */
typedef enum { FILL_ACTIVATIONS = 0, FILL_STATE, FILL_GATHERED, FILL_COUNT } Fill;

static const char *const fill_names[FILL_COUNT] = {"activations", "resting state",
                                                   "gathered units"};
static const char *const fill_meaning[FILL_COUNT] = {
    "", "parameters, gradients and optimizer state kept between steps (its rows where sharded)",
    "whole parameters and gradients of the units being computed, and their buffers"};

static void fill_bytes(const size_t *at, double *by) {
    by[FILL_ACTIVATIONS] = (double)(at[MEM_ACTIVATIONS] + at[MEM_AC_INPUT]);
    by[FILL_STATE] = (double)(at[MEM_PARAM_SHARD] + at[MEM_GRAD_SHARD] + at[MEM_OPTIM_STATE]);
    by[FILL_GATHERED] =
        (double)(at[MEM_PARAM_UNSHARDED] + at[MEM_GRAD_UNSHARDED] + at[MEM_COMM_BUFFER]);
}

/* What activations are made of, from the shape: they grow with the batch and the sequence and
 * do not shrink with more GPUs. */
static void activations_because(const PlanArgs *a, const PlanSetup *s, int batch, char *buf,
                                size_t n) {
    buf[0] = 0;
    if (a->kind == MODEL_TRANSFORMER) {
        const TransformerConfig *c = s->model.config;
        char kept[96];
        if (c->attention == ATTENTION_FLASH)
            snprintf(kept, sizeof kept, "flash attention keeping %d heads' %d row statistics",
                     c->heads, c->seq);
        else
            snprintf(kept, sizeof kept, "the attention keeping %d heads' %dx%d probabilities",
                     c->heads, c->seq, c->seq);
        char loss[96] = "", vocab[32];
        if (c->loss == LOSS_EAGER)
            snprintf(loss, sizeof loss, ", and the eager loss's three fp32 [%d, %s] at the loss",
                     batch * c->seq, with_commas((size_t)c->vocab, vocab, sizeof vocab));
        snprintf(buf, n,
                 "%d sequence%s of %d tokens per GPU through %d layers of hidden %d, %s a layer%s",
                 batch, batch == 1 ? "" : "s", c->seq, c->layers, c->hidden, kept, loss);
    } else if (a->kind == MODEL_VIT) {
        const VitConfig *c = s->model.config;
        snprintf(buf, n, "%d image%s of %d tokens per GPU through %d layers of hidden %d", batch,
                 batch == 1 ? "" : "s", vit_tokens(c), c->layers, c->hidden);
    } else {
        snprintf(buf, n, "%d sample%s per GPU through the toy's 3 layers", batch,
                 batch == 1 ? "" : "s");
    }
}

/* One thing to try: the flags as typed and the job with them (strategy and replicas apart, as
 * plan_once takes them), or words only where it is not one flag to plan. */
typedef struct Lever {
    char flags[128];
    const char *words;
    int together;  /* the planned ones at once: shown only when none fits alone */
    int new_model; /* args describe another model (--loss): planned on one made for them */
    int lesser;    /* a milder form of a later lever, left out of "all at once" */
    PlanArgs args;
    Strategy strategy;
    int replicas;
} Lever;

enum { MAX_LEVERS = 12 }; /* levers_for makes at most ten, with "all of them at once" */

/* The levers on what fills a fifth of the peak or more (big[fill]), each a change to the job
 * as given: activation checkpointing, a smaller batch, a shorter sequence for activations;
 * zero3, more GPUs, offload for the resting shards; bf16 for gathered units (and for resting
 * ones in DeepSpeed's layout, where parameters rest in --param-dtype). */
static int levers_for(const int *big, const PlanArgs *a, Strategy st, int replicas, int compare,
                      int per_node, Lever *out) {
    int n = 0;
    const FsdpConfig *c = &a->train.fsdp;
    const Lever base = {.args = *a, .strategy = st, .replicas = replicas};
#define LEVER(...) (out[n] = base, snprintf(out[n].flags, sizeof out[n].flags, __VA_ARGS__))
    if (big[FILL_ACTIVATIONS] && a->kind != MODEL_TOY && c->ac_every != 1) {
        LEVER("%s", c->ac_every ? "--ac-every 1" : "--activation-checkpointing");
        out[n++].args.train.fsdp.ac_every = 1;
    }
    if (big[FILL_ACTIVATIONS] && c->ac_every && c->ac_policy == AC_TORCHTITAN) {
        LEVER("--ac-policy ops");
        out[n].lesser = 1;
        out[n++].args.train.fsdp.ac_policy = AC_OPS;
    }
    if (big[FILL_ACTIVATIONS] && c->ac_every && c->ac_policy != AC_BLOCK) {
        LEVER("--ac-policy block");
        out[n++].args.train.fsdp.ac_policy = AC_BLOCK;
    }
    if (big[FILL_ACTIVATIONS] && a->kind == MODEL_TRANSFORMER && !strcmp(a->loss, "eager")) {
        LEVER("--loss fused");
        snprintf(out[n].args.loss, sizeof out[n].args.loss, "fused");
        out[n++].new_model = 1;
    }
    if (big[FILL_ACTIVATIONS] && c->batch_size > 1) {
        LEVER("--batch-size 1");
        out[n++].args.train.fsdp.batch_size = 1;
    }
    if (big[FILL_STATE] && !compare && st != STRAT_ZERO3 && st != STRAT_HSDP) {
        LEVER("--strategy zero3");
        out[n++].strategy = STRAT_ZERO3;
    }
    int shards = st == STRAT_ZERO3 || st == STRAT_ZERO2 || st == STRAT_ZERO1;
    /* twice the GPUs, in whole nodes once past one */
    int more =
        2 * a->gpus > per_node ? (2 * a->gpus + per_node - 1) / per_node * per_node : 2 * a->gpus;
    if (big[FILL_STATE] && shards && more <= PLANNER_MAX_GPUS) {
        LEVER("--gpus %d", more);
        out[n++].args.gpus = more;
    }
    if (big[FILL_STATE] && c->offload == OFFLOAD_NONE) {
        int cpu = c->layout == LAYOUT_FSDP && st != STRAT_DDP && st != STRAT_ZERO1;
        LEVER("--offload %s", cpu ? "cpu" : "optimizer");
        out[n++].args.train.fsdp.offload = cpu ? OFFLOAD_CPU : OFFLOAD_OPTIMIZER;
    }
    if (c->param_dtype == DTYPE_FP32 &&
        (big[FILL_GATHERED] || (big[FILL_STATE] && c->layout == LAYOUT_DEEPSPEED))) {
        LEVER("--param-dtype bf16");
        out[n++].args.train.fsdp.param_dtype = DTYPE_BF16;
    }
#undef LEVER
    /* all of them at once, when there are several: what the job would need together */
    int planned = n;
    if (planned > 1) {
        out[n] = base;
        out[n].together = 1;
        /* joined apart from out[n], which gcc cannot tell from the out[i] it reads */
        char joined[sizeof out[n].flags] = "";
        for (int i = 0, at = 0; i < planned && at < (int)sizeof joined; i++)
            if (!out[i].lesser)
                at += snprintf(joined + at, sizeof joined - (size_t)at, "%s%s", at ? " " : "",
                               out[i].flags);
        memcpy(out[n].flags, joined, sizeof joined);
        for (int i = 0; i < planned; i++) {
            if (out[i].lesser) continue;
            const FsdpConfig *l = &out[i].args.train.fsdp;
            FsdpConfig *all = &out[n].args.train.fsdp;
            if (l->ac_every != c->ac_every) all->ac_every = l->ac_every;
            if (l->ac_policy != c->ac_policy) all->ac_policy = l->ac_policy;
            if (out[i].new_model) {
                memcpy(out[n].args.loss, out[i].args.loss, sizeof out[n].args.loss);
                out[n].new_model = 1;
            }
            if (l->batch_size != c->batch_size) all->batch_size = l->batch_size;
            if (l->offload != c->offload) all->offload = l->offload;
            if (l->param_dtype != c->param_dtype) all->param_dtype = l->param_dtype;
            if (out[i].args.gpus != a->gpus) out[n].args.gpus = out[i].args.gpus;
            if (out[i].strategy != st) out[n].strategy = out[i].strategy;
        }
        n++;
    }
    if (big[FILL_ACTIVATIONS] && a->kind == MODEL_TRANSFORMER)
        out[n++] = (Lever){.flags = "a shorter --seq",
                           .words = !strcmp(a->attention, "eager")
                                        ? "activations grow with the sequence, the attention's "
                                          "probabilities with its square"
                                        : "activations grow with the sequence"};
    if (big[FILL_ACTIVATIONS] && !big[FILL_STATE])
        out[n++] = (Lever){.flags = "more --gpus",
                           .words = "no help: each GPU holds the activations of its own batch; "
                                    "more GPUs shard only parameters, gradients and optimizer "
                                    "state"};
    return n;
}

/* Where nothing fits: what fills the GPU at the peak of the plan that comes closest (r,
 * strategy `name`), what the activations are made of, and the flags that would change it,
 * each planned: "--activation-checkpointing  zero3 would peak at 28.25 GB: fits in 80.00 GB". */
static int print_why_not(FILE *f, const PlanArgs *a, const PlanSetup *s, const char *name,
                         Strategy st, int replicas, const PlannerResult *r, int compare, Err *err) {
    const RankMemory *m = planner_top_memory(r);
    double by[FILL_COUNT];
    fill_bytes(m->on_gpu.at_peak, by);
    int order[FILL_COUNT] = {0, 1, 2}, big[FILL_COUNT];
    for (int i = 1; i < FILL_COUNT; i++) /* largest first */
        for (int k = i; k > 0 && by[order[k]] > by[order[k - 1]]; k--) {
            int t = order[k];
            order[k] = order[k - 1], order[k - 1] = t;
        }
    char peak[32], part[32], why[512];
    fprintf(f, "\nnothing fits at batch %d per GPU: %s%s%s peaks at %s, of which\n",
            a->train.fsdp.batch_size, compare ? "the closest, " : "", name, compare ? "," : "",
            report_si_bytes(gpu_total(s, r, NULL), peak, sizeof peak));
    for (int i = 0; i < FILL_COUNT; i++) {
        int k = order[i];
        big[k] = by[k] >= 0.2 * (double)m->on_gpu.peak;
        if (!by[k]) continue;
        if (k == FILL_ACTIVATIONS)
            activations_because(a, s, a->train.fsdp.batch_size, why, sizeof why);
        fprintf(f, "  %-16s %10s  %s\n", fill_names[k], report_si_bytes(by[k], part, sizeof part),
                k == FILL_ACTIVATIONS ? why : fill_meaning[k]);
    }
    double beside = gpu_total(s, r, NULL) - (double)m->on_gpu.peak;
    if (beside > 0)
        fprintf(f, "  %-16s %10s  %s\n", "beside them", report_si_bytes(beside, part, sizeof part),
                "the CUDA context, cuBLAS's workspaces, NCCL's buffers, the allocator's "
                "fragmentation");
    Lever levers[MAX_LEVERS];
    int n = levers_for(big, a, st, replicas, compare, s->profile.gpus_per_node, levers);
    if (n) fprintf(f, "what would change it:\n");
    int one_fits = 0;
    for (int i = 0; i < n; i++) {
        const Lever *l = &levers[i];
        if (l->words) {
            fprintf(f, "  %-28s %s\n", l->flags, l->words);
            continue;
        }
        if (l->together && one_fits) continue;
        PlanSetup other = *s; /* the profile; the model too unless the lever makes another */
        int rc = l->new_model ? make_model(&l->args, &other, err) : 0;
        PlannerResult with;
        if (!rc)
            rc = plan_once(&l->args, &other, l->strategy, l->replicas,
                           l->args.train.fsdp.batch_size, &with, err);
        if (l->new_model && !rc) model_desc_free(&other.model);
        if (rc) return rc;
        char cap[32], who[32];
        snprintf(who, sizeof who, "%s", l->strategy == st ? name : strategy_name(l->strategy));
        one_fits |= fits(s, &with);
        fprintf(f, "  %-28s %s would peak at %s: %s %s\n", l->flags, who,
                report_si_bytes(gpu_total(s, &with, NULL), peak, sizeof peak),
                fits(s, &with) ? "fits in" : "still over",
                report_si_bytes(s->profile.mem_bytes, cap, sizeof cap));
        planner_result_free(&with);
    }
    return 0;
}

/* ---------------------------------------------------------------- JSON */

static void json_categories(FILE *f, const char *key, const size_t *by) {
    fprintf(f, "\"%s\":{", key);
    for (int c = 0, first = 1; c < MEM_CATEGORY_COUNT; c++) {
        if (c == MEM_COMPUTE_COPY) continue;
        fprintf(f, "%s\"%s\":%zu", first ? "" : ",", mem_category_name((MemCategory)c), by[c]);
        first = 0;
    }
    fputc('}', f);
}

static void json_result(FILE *f, const PlanArgs *a, const PlanSetup *s, Strategy st,
                        const PlannerResult *r, int best_batch) {
    const RankMemory *m = planner_top_memory(r);
    fprintf(f,
            "{\"model\":\"%s\",\"parameters\":%zu,\"gpus\":%d,\"profile\":\"%s\","
            "\"strategy\":\"%s\",\"layout\":\"%s\",\"batch\":%d,\"grad_accum\":%d,"
            "\"gpu_memory\":%.0f,\"top_rank\":%d,\"gpu_rest\":%zu,\"gpu_peak\":%zu,\"fits\":%s,",
            a->model, s->model.total_numel, a->gpus, s->profile.name, strategy_name(st),
            layout_name(a->train.fsdp.layout), a->train.fsdp.batch_size, a->train.fsdp.grad_accum,
            s->profile.mem_bytes, r->top, gpu_bytes(m->rest), m->on_gpu.peak,
            fits(s, r) ? "true" : "false");
    double rows[OVERHEAD_ROWS], total = gpu_total(s, r, rows);
    fprintf(f,
            "\"gpu_total\":%.0f,\"beside_tensors\":{\"cuda_context\":%.0f,\"workspaces\":%.0f,"
            "\"nccl\":%.0f,\"communicators\":%d,\"fragmentation\":%.0f},",
            total, rows[OVERHEAD_CONTEXT], rows[OVERHEAD_WORKSPACE], rows[OVERHEAD_NCCL],
            r->communicators, rows[OVERHEAD_FRAGMENTATION]);
    json_categories(f, "rest", m->rest);
    fputc(',', f);
    json_categories(f, "at_peak", m->on_gpu.at_peak);
    fputs(",\"collectives\":{", f);
    for (int k = 0; k < COLL_KIND_COUNT; k++) {
        const PlannerTraffic *t = &r->traffic[k];
        fprintf(f,
                "%s\"%s\":{\"calls\":%.0f,\"buffer_bytes\":%.0f,\"sent_bytes\":%.0f,"
                "\"total_sent_bytes\":%.0f}",
                k ? "," : "", coll_kind_name((CollKind)k), t->calls, t->buffer_bytes, t->sent_bytes,
                t->total_sent);
    }
    fprintf(f,
            "},\"step_time_s\":%.9g,\"compute_s\":%.9g,\"waiting_s\":%.9g,\"comm_s\":%.9g,"
            "\"copy_s\":%.9g,"
            "\"max_batch\":%d,\"ranks_run\":%d}",
            r->step_time, r->compute_time, r->waiting, r->comm_time, r->copy_time, best_batch,
            r->representatives);
}

/* ---------------------------------------------------------------- the command */

/* hsdp in --compare: the --replicas given, else one replica per node when there are several
 * nodes, else two replicas; 0 when the GPUs cannot be split. */
static int compare_replicas(const PlanArgs *a, const PlanSetup *s) {
    if (a->train.fsdp.strategy == STRAT_HSDP) return a->train.fsdp.replicas;
    int per_node = s->profile.gpus_per_node;
    if (per_node > 0 && a->gpus > per_node && a->gpus % per_node == 0) return a->gpus / per_node;
    return a->gpus >= 2 && a->gpus % 2 == 0 ? 2 : 0;
}

typedef struct CompareRowPlan {
    Strategy strategy;
    int replicas;
    PlannerResult result;
} CompareRowPlan;

static void compare_row_name(const CompareRowPlan *row, char *name, size_t n) {
    if (row->strategy == STRAT_HSDP)
        snprintf(name, n, "hsdp x%d", row->replicas);
    else
        snprintf(name, n, "%s", strategy_name(row->strategy));
}

static void print_compare_row(const PlanSetup *s, const CompareRowPlan *row) {
    const PlannerResult *r = &row->result;
    const size_t *at = planner_top_memory(r)->on_gpu.at_peak;
    char name[32], b[6][32], rest[32], t1[32], t2[32];
    compare_row_name(row, name, sizeof name);
    double cols[6] = {(double)(at[MEM_PARAM_SHARD] + at[MEM_PARAM_UNSHARDED]),
                      (double)(at[MEM_GRAD_SHARD] + at[MEM_GRAD_UNSHARDED]),
                      (double)at[MEM_OPTIM_STATE],
                      (double)(at[MEM_ACTIVATIONS] + at[MEM_AC_INPUT]),
                      (double)at[MEM_COMM_BUFFER],
                      gpu_total(s, r, NULL)};
    for (int c = 0; c < 6; c++) report_si_bytes(cols[c], b[c], sizeof b[c]);
    report_si_bytes((double)gpu_bytes(planner_top_memory(r)->rest), rest, sizeof rest);
    printf("%-12s %10s %10s %10s %11s %10s %10s %10s %5s %11s %11s\n", name, b[0], b[1], b[2], b[3],
           b[4], b[5], rest, fits(s, r) ? "yes" : "no", report_seconds(r->step_time, t1, sizeof t1),
           report_seconds(r->waiting, t2, sizeof t2));
}

/* Every strategy planned first, then printed: a failure prints nothing but its line. */
static int run_compare(const PlanArgs *a, const PlanSetup *s, Err *err) {
    CompareRowPlan rows[STRAT_COUNT];
    int n = 0, rc = 0;
    for (int st = 0; !rc && st < STRAT_COUNT; st++) {
        int replicas = st == STRAT_HSDP ? compare_replicas(a, s) : 1;
        if (!replicas) continue; /* one GPU, or an odd count on one node: no hsdp */
        rows[n] = (CompareRowPlan){.strategy = (Strategy)st, .replicas = replicas};
        rc =
            plan_once(a, s, (Strategy)st, replicas, a->train.fsdp.batch_size, &rows[n].result, err);
        if (!rc) n++;
    }
    if (!rc && a->json) {
        fputs("{\"compare\":[", stdout);
        for (int i = 0; i < n; i++) {
            fputs(i ? "," : "", stdout);
            json_result(stdout, a, s, rows[i].strategy, &rows[i].result, -1);
        }
        fputs("]}\n", stdout);
    } else if (!rc) {
        print_header(stdout, a, s);
        printf("\nper GPU (the fullest): at peak, by category, and the GPU's total at rest\n"
               "%-12s %10s %10s %10s %11s %10s %10s %10s %5s %11s %11s\n",
               "strategy", "params", "grads", "optimizer", "activations", "buffers", "GPU total",
               "at rest", "fits", "step", "waiting");
        for (int i = 0; i < n; i++) print_compare_row(s, &rows[i]);
        /* when no strategy fits: why, on the one whose GPU peak comes closest */
        int closest = 0, any_fits = 0;
        for (int i = 0; i < n; i++) {
            any_fits |= fits(s, &rows[i].result);
            if (gpu_peak(&rows[i].result) < gpu_peak(&rows[closest].result)) closest = i;
        }
        if (n && !any_fits) {
            const CompareRowPlan *row = &rows[closest];
            char name[32];
            compare_row_name(row, name, sizeof name);
            rc = print_why_not(stdout, a, s, name, row->strategy, row->replicas, &row->result, 1,
                               err);
        }
    }
    for (int i = 0; i < n; i++) planner_result_free(&rows[i].result);
    return rc;
}

static int run_single(const PlanArgs *a, const PlanSetup *s, Err *err) {
    const FsdpConfig *c = &a->train.fsdp;
    PlannerResult r;
    int rc = plan_once(a, s, c->strategy, c->replicas, c->batch_size, &r, err);
    if (rc) return rc;
    int best = 0;
    double peak1 = 0;
    rc = max_batch(a, s, c->strategy, c->replicas, &best, &peak1, err);
    if (!rc && a->json) {
        json_result(stdout, a, s, c->strategy, &r, best);
        fputc('\n', stdout);
    } else if (!rc) {
        print_header(stdout, a, s);
        print_memory(stdout, s, &r);
        print_traffic(stdout, &r);
        print_time(stdout, &r);
        if (best) printf("largest batch per GPU that fits: %d\n", best);
        printf("(%d of %d GPUs' schedules run: the others keep the same rows as one of them)\n",
               r.representatives, r.gpus);
    }
    planner_result_free(&r);
    if (!rc && !best && !a->json) { /* why, at the batch that comes closest: 1 */
        PlanArgs one = *a;
        one.train.fsdp.batch_size = 1;
        rc = plan_once(&one, s, c->strategy, c->replicas, 1, &r, err);
        char name[32];
        snprintf(name, sizeof name, "%s", strategy_name(c->strategy));
        if (!rc) rc = print_why_not(stdout, &one, s, name, c->strategy, c->replicas, &r, 0, err);
        if (!rc) planner_result_free(&r);
    }
    /* the figures above show by how much; the exit status says it cannot run at all */
    if (!rc && !best) {
        char need[32], have[32];
        rc = err_set(err, ERR_USAGE,
                     "%s does not fit on %d GPU%s of %s even at batch 1 per GPU (peak %s)",
                     a->model, a->gpus, a->gpus == 1 ? "" : "s",
                     report_si_bytes(s->profile.mem_bytes, have, sizeof have),
                     report_si_bytes(peak1, need, sizeof need));
    }
    return rc;
}

/* The model as ./fsdp train's flags, where train builds the very same one on these GPUs (the
 * toy and the ViTs; its transformer reads a text's bytes, a vocabulary of 256): NULL else. */
static const char *train_model_flags(const PlanArgs *a, char *buf, size_t n) {
    int custom = a->gpu_mem_gb || a->tflops || a->link_gbps || a->inter_gbps || a->gpus_per_node;
    if ((a->kind != MODEL_TOY && a->kind != MODEL_VIT) || a->gpus > CLI_MAX_RANKS || custom)
        return NULL;
    int at = snprintf(buf, n, "--model %s", a->model);
    const int shape[] = {a->layers, a->hidden, a->heads, a->mlp};
    const char *const names[] = {"--layers", "--hidden", "--heads", "--mlp"};
    for (int i = 0; i < 4; i++)
        if (shape[i]) at += snprintf(buf + at, n - (size_t)at, " %s %d", names[i], shape[i]);
    return buf;
}

/* --search: sim/plan_search.c finds them, cmd/plan_search.c prints them under the header. */
static int run_search(const PlanArgs *a, const PlanSetup *s, int argc, char **argv, Err *err) {
    char model[128];
    PlanSearchCommand c = {
        .job = {.model = &s->model,
                .profile = &s->profile,
                .gpus = a->gpus,
                .base = a->train.fsdp,
                .tokens_per_sample = 1,
                .top = a->top,
                .batch = a->train.batch_given ? a->train.fsdp.batch_size : 0,
                .global_batch = a->global_batch,
                .with_nvme = a->train.fsdp.offload == OFFLOAD_NVME,
                .fixed = plan_search_fixed(argc, argv)},
        .train_model = train_model_flags(a, model, sizeof model),
        .profile = strcmp(a->train.profile, profile_default()->name) ? a->train.profile : NULL,
        .argc = argc,
        .argv = argv,
        .json = a->json};
    if (a->kind == MODEL_TRANSFORMER)
        c.job.tokens_per_sample = ((const TransformerConfig *)s->model.config)->seq;
    PlanSearchResult r;
    int rc = plan_search_run(&c.job, &r, err);
    if (rc) return rc;
    if (!a->json) print_header(stdout, a, s);
    rc = plan_search_print(stdout, &c, &r, err);
    plan_search_result_free(&r);
    return rc;
}

/* ---------------------------------------------------------------- --calibrate */

/* A trace's job: its model and plan rebuilt from the flags the file keeps (as viz --trace does),
 * and the seconds of each kind of work rank 0 spent on its last training step. */
static int calibrate_job(const char *path, TrainRun *t, CalibrateJob *job, int *step, Err *err) {
    Trace trace;
    TraceMeta meta;
    int rc = trace_file_read(path, &trace, &meta, err);
    if (rc) return rc;
    Err why = {0};
    train_args_defaults(&t->args);
    if (train_args_parse(&t->args, meta.nargs, meta.args, &why))
        rc = err_set(err, ERR_USAGE, "trace '%s' records flags this fsdp rejects: %s", path,
                     why.msg);
    if (!rc) rc = run_plan_only(t, err);
    if (!rc && trace.nranks != t->plan.world)
        rc = err_set(err, ERR_USAGE, "trace '%s' has %d ranks but its flags make %d", path,
                     trace.nranks, t->plan.world);
    *step = trace_last_trained_step(&trace);
    if (!rc && *step < 0)
        rc = err_set(err, ERR_USAGE, "trace '%s' has no training step to fit", path);
    if (!rc) {
        *job = (CalibrateJob){.model = &t->model, .plan = &t->plan, .cfg = t->args.fsdp};
        trace_step_times(&trace, 0, *step, &job->measured);
    }
    trace_free(&trace);
    trace_meta_free(&meta);
    return rc;
}

static void print_fitted_terms(const Profile *base, const CalibrateResult *r) {
    const Profile *f = &r->fitted;
    double was[FIT_COUNT] = {base->gemm_eff, base->attn_eff, base->mem_eff,
                             base->launch_overhead * 1e6, base->bus_eff};
    double now[FIT_COUNT] = {f->gemm_eff, f->attn_eff, f->mem_eff, f->launch_overhead * 1e6,
                             f->bus_eff};
    printf("\n%-18s %10s %10s\n", "term", "profile", "fitted");
    for (int t = 0; t < FIT_COUNT; t++) {
        printf("  %-16s %10.4g ", t == FIT_LAUNCH ? "launch (us)" : fit_term_name((FitTerm)t),
               was[t]);
        if (r->moved[t])
            printf("%10.4g\n", now[t]);
        else
            printf("%10s  (no work of these steps depends on it)\n", "-");
    }
}

static void print_fitted_kinds(const char *const *paths, int n, const CalibrateResult *r) {
    char m[32], b[32], a[32];
    printf("\n%-34s %11s %11s %11s  %s\n", "trace, kind of work", "measured", "modelled", "fitted",
           "fitted/measured");
    for (int j = 0; j < n; j++)
        for (int k = 0; k < EV_KIND_COUNT; k++) {
            if (!calibrate_kind_fitted(k) || (!r->measured[j][k] && !r->before[j][k])) continue;
            char label[64];
            const char *base = strrchr(paths[j], '/');
            snprintf(label, sizeof label, "%s %s", base ? base + 1 : paths[j],
                     event_kind_name((EventKind)k));
            printf("  %-32s %11s %11s %11s", label, report_seconds(r->measured[j][k], m, sizeof m),
                   report_seconds(r->before[j][k], b, sizeof b),
                   report_seconds(r->after[j][k], a, sizeof a));
            if (r->measured[j][k] > 0) printf("  %.2f", r->after[j][k] / r->measured[j][k]);
            putchar('\n');
        }
}

/* --calibrate: the profile fitted to each trace's last training step, the terms before and
 * after, each kind of work measured beside the model's before and after, and the flags that
 * plan with the fitted profile. */
static int run_calibrate(const PlanArgs *a, const PlanSetup *s, Err *err) {
    TrainRun runs[CALIBRATE_MAX_JOBS];
    CalibrateJob jobs[CALIBRATE_MAX_JOBS];
    int steps[CALIBRATE_MAX_JOBS], made = 0, rc = 0;
    memset(runs, 0, sizeof runs);
    for (; !rc && made < a->ncalibrate; made++)
        rc = calibrate_job(a->calibrate[made], &runs[made], &jobs[made], &steps[made], err);
    CalibrateResult *r = rc ? NULL : malloc(sizeof *r);
    if (!rc && !r) rc = err_set(err, ERR_NOMEM, "out of memory for the fit");
    if (!rc) rc = calibrate_fit(jobs, a->ncalibrate, &s->profile, r, err);
    if (!rc) {
        printf("fsdp plan --calibrate: %s fitted to %d trace%s\n", s->profile.name, a->ncalibrate,
               a->ncalibrate == 1 ? "" : "s");
        for (int j = 0; j < a->ncalibrate; j++)
            printf("  %s: step %d of %s on %d GPU%s\n", a->calibrate[j], steps[j] + 1,
                   runs[j].args.model, runs[j].plan.world, runs[j].plan.world == 1 ? "" : "s");
        print_fitted_terms(&s->profile, r);
        print_fitted_kinds(a->calibrate, a->ncalibrate, r);
        const Profile *f = &r->fitted;
        printf("\nplan with it: ./fsdp plan --profile %s --gemm-eff %.4g --attn-eff %.4g "
               "--mem-eff %.4g --launch-us %.4g --bus-eff %.4g\n",
               a->train.profile[0] ? a->train.profile : profile_default()->name, f->gemm_eff,
               f->attn_eff, f->mem_eff, f->launch_overhead * 1e6, f->bus_eff);
    }
    free(r);
    for (int j = 0; j < made; j++) run_cleanup(&runs[j]);
    return rc;
}

int cmd_plan(int argc, char **argv) {
    PlanArgs a;
    Err err = {0};
    int rc = plan_args_parse(&a, argc, argv, &err);
    if (cmd_help_asked(rc, plan_help)) return 0;
    PlanSetup s;
    memset(&s, 0, sizeof s);
    if (!rc) rc = make_profile(&a, &s, &err);
    if (!rc) rc = check_cluster(&a, &s, &err);
    if (!rc) rc = check_search(&a, &err);
    if (!rc) rc = make_model(&a, &s, &err);
    if (!rc && a.ncalibrate)
        rc = run_calibrate(&a, &s, &err);
    else if (!rc && a.search)
        rc = run_search(&a, &s, argc, argv, &err);
    else if (!rc)
        rc = a.compare ? run_compare(&a, &s, &err) : run_single(&a, &s, &err);
    if (s.model.params) model_desc_free(&s.model);
    if (!rc) return 0;
    fflush(stdout); /* the figures, then the line that says why it exits 2, in that order */
    fprintf(stderr, "fsdp: %s\n", err.msg);
    return err.code == ERR_USAGE ? 2 : 1;
}
