/* cli: the command line of `fsdp train`. Parses flags into a TrainArgs from train's flag
 * table, checking every value against what is allowed, and writes the help text from the same
 * table; --config FILE reads a JSON config through the same table first (flags given win). A
 * bad flag is one line naming the flag and what it accepts (the caller exits 2); nothing is
 * written while parsing (a config is read). */
#ifndef FSDP_CLI_H
#define FSDP_CLI_H

#include <stdio.h>

#include "cmd/flags.h"
#include "engine/fsdp.h"
#include "io/output_path.h"

/* config.json holds every setting, resolved (`train --config DIR/config.json` runs the same job
 * again); metrics.jsonl a line per logged step and per evaluation (io/metrics_log.h); curves.svg
 * is redrawn at each evaluation and at the end. The files of a run directory. The first four are
 * the defaults --run-dir gives the flags that name them (cli.c, in this order); a flag given names
 * its own file instead. */
#define RUN_DIR_CHECKPOINTS "checkpoints"
#define RUN_DIR_MODEL "model.safetensors"
#define RUN_DIR_MEMORY_SVG "memory.svg"
#define RUN_DIR_TRACE "trace.json"
#define RUN_DIR_PATHS 4
#define RUN_DIR_CONFIG "config.json"
#define RUN_DIR_METRICS "metrics.jsonl"
#define RUN_DIR_CURVES "curves.svg"

#define CLI_MAX_RANKS 1024
/* The longest --seq: 64 Ki tokens (the planner sizes longer ones with --seq on its own) */
#define CLI_MAX_SEQ 65536

/* Where a run's ranks execute: the simulated cluster, this machine's GPU, or the GPU when
 * there is one. */
typedef enum { BACKEND_SIM = 0, BACKEND_CUDA, BACKEND_MPI, BACKEND_AUTO } Backend;

/* What --config and --run-dir allocated for a TrainArgs: train_args_free. */
typedef struct TrainArgsOwned TrainArgsOwned;

typedef struct TrainArgs {
    FsdpConfig fsdp;
    Backend backend;
    char model[32];
    char profile[32];
    int layers, heads, hidden, mlp; /* ViT overrides of the preset; 0: the preset's */
    const char *data;               /* --data DIR; NULL: $FSDP_DATA or Debian's path */
    const char *text;               /* transformer: --text FILE; NULL: io/text.h's default */
    int seq;                        /* transformer: --seq N tokens a sequence; 0: the default */
    int kv_heads;                   /* llama: --kv-heads N; 0: the default */
    char attention[8];              /* transformer, llama: eager|flash; "": flash */
    char loss[8];                   /* transformer, llama: fused|eager; "": fused */
    char elementwise[8];            /* llama: fused|eager; "": fused */
    char split[8];                  /* training split: train or test */
    int ranks;
    long steps;
    int epochs;      /* 0: use steps */
    int print_every; /* 0: about ten lines per run */
    int print_plan, memory, json;
    int activation_checkpointing; /* --activation-checkpointing: every block unless --ac-every */
    int memory_compare;    /* --memory-compare: the job under the workshop's memory settings */
    int accounting_only;   /* --accounting-only: memory and modelled time, nothing computed */
    int scenario_workshop; /* --scenario workshop: the live workshop's cluster and models */
    int eval;        /* ViT: evaluate at each epoch's end and after the last step (default 1) */
    long val_size;   /* --val-size N: the split's last N images held out (0: none) */
    long eval_every; /* --eval-every K: ... evaluated every K steps too (0: epoch ends only) */
    int steps_given, batch_given, lr_given; /* model defaults fill what was not given */
    int reshard_given; /* --reshard-after-forward given: a strategy that fixes it must agree */
    const char *dump_params; /* NULL: none */
    const char *init_from;   /* safetensors to start from; NULL: seeded init */
    const char *save_full;   /* --save-full FILE at the end; NULL: none */
    const char *save_hf;     /* --save-hf DIR at the end; NULL: none */
    const char *trace_out;
    const char *memory_svg; /* --memory-svg FILE: each rank's memory over the last step */
    const char *ckpt_dir;   /* --checkpoint-dir; NULL: no checkpoints */
    long ckpt_every;        /* --checkpoint-every N; 0: epoch ends only */
    int keep;               /* --keep K newest checkpoints (0: all) */
    const char *resume;     /* --resume auto|DIR; NULL: from the start */
    int max_restarts;       /* --max-restarts R after a rank fails */
    long fail_at_step;      /* --fail-at STEP[:RANK]; 0: no injected failure */
    int fail_at_rank;
    long kill_in_save_step;  /* --kill-in-save STEP; 0: none */
    long kill_in_prune_step; /* --kill-in-prune STEP; 0: none */
    int timeout;             /* --timeout S: GPUs' watchdog (seconds a collective may take) */
    int check_streams;       /* --check-streams: the simulator's stream checker */
    int tf32;                /* --tf32: fp32 GEMMs on a GPU's TF32 tensor cores */
    /* --min-lr, --step-size, --gamma given: each applies to some --lr-schedule only */
    int min_lr_given, step_size_given, gamma_given;
    const char *run_dir;   /* --run-dir DIR: the run's files in one place (cmd/run_dir.h) */
    int trace;             /* --trace: with --run-dir, the Chrome trace as DIR/trace.json */
    const char *config;    /* --config FILE: the settings of a run's config.json */
    TrainArgsOwned *owned; /* the config's text, the run directory's paths; NULL: none */
} TrainArgs;

/* --lr-schedule's flags against each other, the rate and the run's `steps` (0: not known yet,
 * as under --epochs before the data set is read): one line naming the flag (ERR_USAGE). */
int train_args_check_lr_schedule(const TrainArgs *a, long steps, Err *err);

/* 1 if the args name an image model (a ViT) rather than the toy. */
int train_args_is_vit(const TrainArgs *a);
/* 1 if they name a transformer that models a text's bytes: GPT-2-shaped (transformer) or
 * Llama-shaped (llama). */
int train_args_is_transformer(const TrainArgs *a);
/* 1 if they name the Llama-shaped one. */
int train_args_is_llama(const TrainArgs *a);

/* train's flags, one row each: what the parser and the help read (plan hands it its
 * training knobs, viz every flag that is not its own). */
const FlagTable *train_flags(void);

void train_args_defaults(TrainArgs *a);
/* argv[0] is the first flag (after "train"). Returns 0, 1 for --help, or ERR_USAGE. With
 * --config FILE the file's settings come first and the flags given replace them (--steps and
 * --epochs, one setting, replace each other). With --run-dir DIR, the paths not given become
 * DIR's: --checkpoint-dir DIR/checkpoints, --save-full DIR/model.safetensors, with --memory
 * --memory-svg DIR/memory.svg, with --trace --trace-out DIR/trace.json. */
int train_args_parse(TrainArgs *a, int argc, char **argv, Err *err);

/* The files a training run writes (--save-full, --dump-params, --trace-out, --memory-svg) and
 * those it reads (--init-from, --config, --text, --resume DIR), with their flags, for
 * output_paths_check: *n of each, at most TRAIN_PATHS. */
#define TRAIN_PATHS 8
void train_args_outputs(const TrainArgs *a, NamedPath *out, size_t *n);
void train_args_inputs(const TrainArgs *a, NamedPath *in, size_t *n);
/* Frees what parsing allocated (a config, the run directory's paths); the args' strings from
 * them are gone. A copy of the args shares them: only one is freed. */
void train_args_free(TrainArgs *a);
/* 1 if the path is one that --run-dir chose (not given, so a config keeps it as null). */
int train_args_run_dir_path(const TrainArgs *a, const char *path);
void train_args_help(FILE *f);

#endif
