/* sample (command): `fsdp sample`: text a trained transformer writes after a prompt, byte by
 * byte, greedily or at a temperature, with the shape from the weights file's __metadata__. */
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cmd/commands.h"
#include "cmd/flags.h"
#include "io/safetensors.h"
#include "io/weights.h"
#include "jobs/sample.h"
#include "models/transformer.h"
#include "sim/cluster.h"
#include "sim/cost.h"

typedef struct SampleArgs {
    const char *weights, *prompt;
    int tokens;
    float temperature;
    long seed;
} SampleArgs;

static void sample_help(FILE *f) {
    fputs("usage: ./fsdp sample --weights FILE.safetensors --prompt TEXT [--tokens N]\n"
          "                     [--temperature T] [--seed S]\n"
          "Prints TEXT and the N bytes (default 200) a trained transformer adds to it, one at a\n"
          "time from the last 'seq' bytes: the likeliest each time, or at --temperature T > 0\n"
          "drawn from softmax(logits / T) with --seed S (default 1234). The shape comes from\n"
          "the file's __metadata__ (train --model transformer or llama --save-full, ckpt\n"
          "consolidate).\n",
          f);
}

/* As train's --seed: any whole number a long holds from 0 up. */
static int set_seed(void *args, const char *flag, const char *v, Err *err) {
    return cli_parse_long(flag, v, 0, 0x7fffffffffffffffL, &((SampleArgs *)args)->seed, err);
}

#define ARG(field) offsetof(SampleArgs, field)

/* sample's flags; sample_help describes them in prose. */
static const Flag sample_rows[] = {
    {"--weights", FLAG_STRING, ARG(weights), .arg = "FILE.safetensors"},
    {"--prompt", FLAG_STRING, ARG(prompt), .arg = "TEXT"},
    {"--tokens", FLAG_INT, ARG(tokens), 1, 100000, .arg = "N"},
    {"--temperature", FLAG_FLOAT, ARG(temperature), 0.0, 100.0, .arg = "T"},
    {"--seed", FLAG_SET, .set = set_seed, .arg = "S"},
};

static const FlagTable sample_table = FLAG_TABLE("sample", sample_rows, 0);

static int sample_args_parse(SampleArgs *a, int argc, char **argv, Err *err) {
    *a = (SampleArgs){.tokens = 200, .seed = 1234};
    int rc = flags_parse(&sample_table, a, argc, argv, err);
    if (rc) return rc;
    if (!a->weights) return err_set(err, ERR_USAGE, "sample needs --weights FILE.safetensors");
    if (!a->prompt || !a->prompt[0])
        return err_set(err, ERR_USAGE, "sample needs --prompt TEXT, at least one byte of it");
    return 0;
}

/* The transformer's shape from path's __metadata__, named by its file and fields; sampling
 * writes bytes, so its vocabulary must be theirs. */
static int sample_config(const char *path, TransformerConfig *c, Err *err) {
    SafeTensors st;
    int rc = st_open(&st, path, err);
    if (rc) return rc == ERR_IO ? ERR_USAGE : rc;
    const char *model = st_metadata(&st, "fsdp_model");
    int llama = model && !strcmp(model, "llama");
    if (!model || (strcmp(model, "transformer") != 0 && !llama))
        rc = err_set(err, ERR_USAGE,
                     "%s is not a transformer's (__metadata__ fsdp_model: %s); sample continues "
                     "text with weights of train --model transformer or llama",
                     path, model ? model : "none");
    c->arch = llama ? TRANSFORMER_LLAMA : TRANSFORMER_GPT;
    const char *keys[] = {"layers", "heads", "hidden", "mlp", "seq", "vocab", "kv_heads"};
    int *fields[] = {&c->layers, &c->heads, &c->hidden, &c->mlp, &c->seq, &c->vocab, &c->kv_heads};
    for (int i = 0; !rc && i < (llama ? 7 : 6); i++) {
        const char *v = st_metadata(&st, keys[i]);
        char *end;
        long x = v ? strtol(v, &end, 10) : 0;
        if (!v || end == v || *end || x < 1 || x > 1 << 24)
            rc = err_set(err, ERR_USAGE, "%s: __metadata__ %s is not a size (got '%s')", path,
                         keys[i], v ? v : "nothing");
        else
            *fields[i] = (int)x;
    }
    st_free(&st);
    Err why = {0};
    if (!rc && transformer_config_check(c, &why))
        rc = err_set(err, ERR_USAGE,
                     "%s: __metadata__ holds a transformer this fsdp cannot "
                     "build: %s",
                     path, why.msg);
    if (!rc && c->vocab != TRANSFORMER_BYTE_VOCAB)
        rc = err_set(err, ERR_USAGE,
                     "%s: __metadata__ vocab is %d; sample reads and writes bytes (256 tokens)",
                     path, c->vocab);
    return rc;
}

static int sample_run(const SampleArgs *a, Err *err) {
    TransformerConfig c = {0}; /* eager attention: the metadata does not say, and generating
                                * needs no backward, so either gives the same tokens */
    ModelDesc m = {0};
    Plan plan = {0};
    uint8_t *out = malloc((size_t)a->tokens);
    int rc = out ? sample_config(a->weights, &c, err)
                 : err_set(err, ERR_NOMEM, "out of memory for %d bytes", a->tokens);
    if (!rc) rc = transformer_model_create(&m, &c, err);
    if (!rc) { /* checks every name and shape before any rank starts */
        WeightsFile *w;
        if (!(rc = weights_open(&w, &m, a->weights, err))) weights_close(w);
    }
    if (!rc) rc = plan_create(&plan, &m, (WrapPolicy){WRAP_LAYER, 0}, STRAT_ZERO3, 1, 1, err);
    SampleJob job = {.model = &m,
                     .plan = &plan,
                     .weights = a->weights,
                     .prompt = (const uint8_t *)a->prompt,
                     .prompt_len = strlen(a->prompt),
                     .tokens = a->tokens,
                     .temperature = a->temperature,
                     .seed = (uint64_t)a->seed,
                     .out = out};
    ClusterOptions opt = {.ranks = 1, .replicas = 1, .profile = profile_default()};
    ClusterResult res = {0};
    if (!rc) rc = cluster_run(&opt, sample_rank, &job, &res, err);
    if (!rc) {
        fputs(a->prompt, stdout);
        fwrite(out, 1, (size_t)a->tokens, stdout);
        fputc('\n', stdout);
    }
    cluster_result_free(&res);
    plan_free(&plan);
    model_desc_free(&m);
    free(out);
    return rc;
}

CMD_PARSE_AND_RUN(cmd_sample, SampleArgs, sample_args_parse, sample_help, sample_run)
