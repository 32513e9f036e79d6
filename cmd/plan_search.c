/* plan_search (command): `fsdp plan --search`'s output: the fastest configurations that fit as a
 * table, each with the flags that run it, or one JSON object. */
#include "cmd/plan_search.h"

#include <string.h>

#include "cmd/report.h"

/* ---------------------------------------------------------------- which knobs were given */

/* A knob flag of train's that the search sets, and the SEARCH_FIX_* bit it fixes when given;
 * `value`: it takes one. */
typedef struct KnobFlag {
    const char *name;
    unsigned fixes;
    int value;
} KnobFlag;

static const KnobFlag knob_flags[] = {
    {"--strategy", SEARCH_FIX_STRATEGY, 1},
    {"--replicas", SEARCH_FIX_REPLICAS, 1},
    {"--wrap", SEARCH_FIX_WRAP, 1},
    {"--reshard-after-forward", SEARCH_FIX_RESHARD, 1},
    {"--activation-checkpointing", SEARCH_FIX_AC, 0},
    {"--ac-every", SEARCH_FIX_AC, 1},
    {"--ac-policy", SEARCH_FIX_AC, 1},
    {"--offload", SEARCH_FIX_OFFLOAD, 1},
    {"--param-dtype", SEARCH_FIX_DTYPE, 1},
    {"--reduce-dtype", SEARCH_FIX_DTYPE, 1},
    /* the batch is the search's too (given, the search keeps it: PlanSearchJob.batch) */
    {"--batch-size", 0, 1},
    {"--grad-accum", 0, 1},
    /* --search's own, which a row's flags leave out */
    {"--search", 0, 0},
    {"--top", 0, 1},
    {"--global-batch", 0, 1},
    {"--json", 0, 0},
};

static const KnobFlag *knob_flag(const char *arg) {
    for (size_t i = 0; i < sizeof knob_flags / sizeof *knob_flags; i++)
        if (!strcmp(arg, knob_flags[i].name)) return &knob_flags[i];
    return NULL;
}

unsigned plan_search_fixed(int argc, char **argv) {
    unsigned fixed = 0;
    for (int i = 0; i < argc; i++) {
        const KnobFlag *k = knob_flag(argv[i]);
        if (!k) continue;
        fixed |= k->fixes;
        i += k->value;
    }
    return fixed;
}

/* ---------------------------------------------------------------- a row */

static void strategy_label(const FsdpConfig *c, char *buf, size_t n) {
    if (c->strategy == STRAT_HSDP)
        snprintf(buf, n, "hsdp x%d", c->replicas);
    else
        snprintf(buf, n, "%s", strategy_name(c->strategy));
}

static const char *reshard_label(const FsdpConfig *c) {
    if (c->strategy == STRAT_DDP || c->strategy == STRAT_ZERO1) return "-";
    return fsdp_reshard_after_forward(c) ? "yes" : "no";
}

static void ac_label(const FsdpConfig *c, char *buf, size_t n) {
    if (!c->ac_every)
        snprintf(buf, n, "off");
    else if (c->ac_policy == AC_BLOCK)
        snprintf(buf, n, "every %d", c->ac_every);
    else
        snprintf(buf, n, "every %d, %s", c->ac_every, ac_policy_name(c->ac_policy));
}

/* The knobs of a row as train's flags (plan takes the same ones). */
static void knob_flags_of(const FsdpConfig *c, char *buf, size_t n) {
    char wrap[32];
    wrap_format(&c->wrap, wrap, sizeof wrap);
    int at = snprintf(buf, n, "--strategy %s", strategy_name(c->strategy));
#define PUT(...) at += snprintf(buf + at, at < (int)n ? n - (size_t)at : 0, __VA_ARGS__)
    if (c->strategy == STRAT_HSDP) PUT(" --replicas %d", c->replicas);
    PUT(" --wrap %s", wrap);
    if (c->reshard_after_forward >= 0 && c->strategy != STRAT_DDP && c->strategy != STRAT_ZERO1)
        PUT(" --reshard-after-forward %s", c->reshard_after_forward ? "true" : "false");
    if (c->ac_every) PUT(" --activation-checkpointing");
    if (c->ac_every > 1) PUT(" --ac-every %d", c->ac_every);
    if (c->ac_every && c->ac_policy != AC_BLOCK)
        PUT(" --ac-policy %s", ac_policy_name(c->ac_policy));
    if (c->offload != OFFLOAD_NONE) PUT(" --offload %s", offload_name(c->offload));
    PUT(" --param-dtype %s", dtype_name(c->param_dtype));
    if (c->reduce_dtype != DTYPE_FP32) PUT(" --reduce-dtype %s", dtype_name(c->reduce_dtype));
    PUT(" --batch-size %d", c->batch_size);
    if (c->grad_accum > 1) PUT(" --grad-accum %d", c->grad_accum);
#undef PUT
}

/* The command that runs a row: ./fsdp train where it builds the same model, else the ./fsdp
 * plan of plan's own arguments without the knobs, then the row's knobs. */
static void command_of(const PlanSearchCommand *c, const FsdpConfig *cfg, char *buf, size_t n) {
    char knobs[512];
    knob_flags_of(cfg, knobs, sizeof knobs);
    int at;
    if (c->train_model) {
        at = snprintf(buf, n, "./fsdp train %s --ranks %d", c->train_model, c->job.gpus);
        if (c->profile) at += snprintf(buf + at, n - (size_t)at, " --profile %s", c->profile);
        if (cfg->offload == OFFLOAD_NVME)
            at += snprintf(buf + at, n - (size_t)at, " --nvme-dir DIR");
        snprintf(buf + at, n - (size_t)at, " %s", knobs);
        return;
    }
    at = snprintf(buf, n, "./fsdp plan");
    for (int i = 0; i < c->argc && at < (int)n; i++) {
        const KnobFlag *k = knob_flag(c->argv[i]);
        if (k) {
            i += k->value;
            continue;
        }
        at += snprintf(buf + at, n - (size_t)at, " %s", c->argv[i]);
    }
    if (at < (int)n) snprintf(buf + at, n - (size_t)at, " %s", knobs);
}

/* ---------------------------------------------------------------- text and JSON */

static const char *rate_unit(const PlanSearchCommand *c) {
    return c->job.tokens_per_sample > 1 ? "tokens/s/GPU" : "samples/s/GPU";
}

static void print_table(FILE *f, const PlanSearchCommand *c, const PlanSearchResult *r) {
    char mem[32];
    const char *at = c->job.global_batch ? "with the global batch"
                     : c->job.batch      ? "at the batch given"
                                         : "at batch 1";
    fprintf(f,
            "\nsearched %d configurations, %d of which fit %s; %ld memory-only plans found\n"
            "their batches; %d timed (the others fit no larger a batch than a cheaper one of "
            "theirs)\n",
            r->configs, r->fitting, at, r->probes, r->timed);
    if (!r->nbest) {
        fprintf(f, "none fits in %s\n",
                report_si_bytes(c->job.profile->mem_bytes, mem, sizeof mem));
        return;
    }
    fprintf(f, "\n%-3s %-11s %-8s %-7s %-12s %-9s %-6s %9s %10s %11s %14s\n", "#", "strategy",
            "wrap", "reshard", "AC", "offload", "params", "batch", "peak", "step", rate_unit(c));
    for (int i = 0; i < r->nbest; i++) {
        const PlanSearchEntry *e = &r->best[i];
        const FsdpConfig *cfg = &e->cfg;
        char st[32], wrap[32], ac[32], batch[32], peak[32], step[32];
        strategy_label(cfg, st, sizeof st);
        wrap_format(&cfg->wrap, wrap, sizeof wrap);
        ac_label(cfg, ac, sizeof ac);
        if (cfg->grad_accum > 1)
            snprintf(batch, sizeof batch, "%dx%d", cfg->batch_size, cfg->grad_accum);
        else
            snprintf(batch, sizeof batch, "%d", cfg->batch_size);
        fprintf(f, "%-3d %-11s %-8s %-7s %-12s %-9s %-6s %9s %10s %11s %14.1f\n", i + 1, st, wrap,
                reshard_label(cfg), ac, offload_name(cfg->offload), dtype_name(cfg->param_dtype),
                batch, report_si_bytes((double)e->peak, peak, sizeof peak),
                report_seconds(e->step_time, step, sizeof step), e->throughput);
    }
    fprintf(f, "\n%s:\n",
            c->train_model
                ? "to run one (./fsdp plan takes the same flags)"
                : "to plan one alone (./fsdp train takes the same flags from --strategy on)");
    for (int i = 0; i < r->nbest; i++) {
        char cmd[2048];
        command_of(c, &r->best[i].cfg, cmd, sizeof cmd);
        fprintf(f, "%-3d %s\n", i + 1, cmd);
    }
}

/* s as a JSON string's contents (the flags hold no control characters). */
static void json_text(FILE *f, const char *s) {
    for (; *s; s++) {
        if (*s == '"' || *s == '\\') fputc('\\', f);
        fputc(*s, f);
    }
}

static void print_json(FILE *f, const PlanSearchCommand *c, const PlanSearchResult *r) {
    fprintf(f,
            "{\"search\":{\"gpus\":%d,\"configs\":%d,\"fitting\":%d,\"timed\":%d,\"probes\":%ld,"
            "\"unit\":\"%s\",\"best\":[",
            c->job.gpus, r->configs, r->fitting, r->timed, r->probes, rate_unit(c));
    for (int i = 0; i < r->nbest; i++) {
        const PlanSearchEntry *e = &r->best[i];
        const FsdpConfig *cfg = &e->cfg;
        char wrap[32], cmd[2048], knobs[512];
        wrap_format(&cfg->wrap, wrap, sizeof wrap);
        knob_flags_of(cfg, knobs, sizeof knobs);
        command_of(c, cfg, cmd, sizeof cmd);
        fprintf(f,
                "%s{\"rank\":%d,\"strategy\":\"%s\",\"replicas\":%d,\"wrap\":\"%s\","
                "\"reshard_after_forward\":%s,\"ac_every\":%d,\"ac_policy\":\"%s\","
                "\"offload\":\"%s\","
                "\"param_dtype\":\"%s\",\"reduce_dtype\":\"%s\",\"batch\":%d,\"grad_accum\":%d,"
                "\"gpu_peak\":%zu,\"step_time_s\":%.9g,\"waiting_s\":%.9g,\"throughput\":%.9g,"
                "\"flags\":\"",
                i ? "," : "", i + 1, strategy_name(cfg->strategy), cfg->replicas, wrap,
                fsdp_reshard_after_forward(cfg) ? "true" : "false", cfg->ac_every,
                ac_policy_name(cfg->ac_policy), offload_name(cfg->offload),
                dtype_name(cfg->param_dtype), dtype_name(cfg->reduce_dtype), cfg->batch_size,
                cfg->grad_accum, e->peak, e->step_time, e->waiting, e->throughput);
        json_text(f, knobs);
        fputs("\",\"command\":\"", f);
        json_text(f, cmd);
        fputs("\"}", f);
    }
    fputs("]}}\n", f);
}

int plan_search_print(FILE *f, const PlanSearchCommand *c, const PlanSearchResult *r, Err *err) {
    if (c->json)
        print_json(f, c, r);
    else
        print_table(f, c, r);
    if (r->nbest) return 0;
    char mem[32];
    return err_set(err, ERR_USAGE, "no configuration searched fits on %d GPUs of %s", c->job.gpus,
                   report_si_bytes(c->job.profile->mem_bytes, mem, sizeof mem));
}
