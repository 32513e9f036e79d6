/* kinds: each model's ModelKind: the names a checkpoint's "model" may give it, the sizes its
 * "config" records, and the model built back from them with the checks training makes. */
#include "models/kinds.h"

#include <stdio.h>

#include "models/toy.h"
#include "models/transformer.h"
#include "models/vit.h"

/* ---------------------------------------------------------------- the toy: no sizes */

static int toy_build(const char *where, const long *sizes, ModelDesc *out, char *described,
                     size_t n, Err *err) {
    (void)where, (void)sizes;
    snprintf(described, n, "the toy");
    return toy_model_create(out, err);
}

static const char *const toy_names[] = {"toy", NULL};
static const ModelKind toy_kind = {.names = toy_names, .what = "the toy", .build = toy_build};

/* ---------------------------------------------------------------- the ViT */

/* image, patch, layers, heads, hidden, mlp, classes, channels: the names PyTorch's fixture
 * uses; one channel, the only one this ViT takes. */
static const char *const vit_sizes[] = {"image",  "patch", "layers",  "heads",
                                        "hidden", "mlp",   "classes", "channels"};

static int vit_build(const char *where, const long *v, ModelDesc *out, char *described, size_t n,
                     Err *err) {
    if (v[7] != 1)
        return err_set(err, ERR_USAGE, "%s: .config.channels is %ld; this fsdp's ViT takes 1",
                       where, v[7]);
    VitConfig c = {.image = (int)v[0],
                   .patch = (int)v[1],
                   .layers = (int)v[2],
                   .heads = (int)v[3],
                   .hidden = (int)v[4],
                   .mlp = (int)v[5],
                   .classes = (int)v[6]};
    snprintf(described, n,
             "the ViT its .config describes (image %d, patch %d, layers %d, heads %d, hidden %d, "
             "mlp %d, classes %d)",
             c.image, c.patch, c.layers, c.heads, c.hidden, c.mlp, c.classes);
    Err why = {0};
    if (vit_config_check(&c, &why))
        return err_set(err, ERR_USAGE, "%s: .config is no ViT this fsdp builds: %s", where,
                       why.msg);
    return vit_model_create(out, &c, err);
}

static void vit_sizes_of(const ModelDesc *m, long *out) {
    const VitConfig *c = m->config;
    const long v[] = {c->image, c->patch, c->layers, c->heads, c->hidden, c->mlp, c->classes, 1};
    for (int i = 0; i < 8; i++) out[i] = v[i];
}

static const char *const vit_names[] = {"vit", "vit-tiny", "vit-workshop", NULL};
static const ModelKind vit_kind = {
    .names = vit_names,
    .what = "a ViT",
    .sizes = vit_sizes,
    .nsizes = 8,
    .sizes_text = "image, patch, layers, heads, hidden, mlp, classes and channels",
    .max_size = 1 << 20,
    .build = vit_build,
    .sizes_of = vit_sizes_of};

/* ---------------------------------------------------------------- the transformers */

/* The GPT-shaped transformer's six sizes; the Llama-shaped one's seventh, kv_heads. The attention
 * kind is no part of them: eager and flash keep the same parameters. */
static const char *const tf_sizes[] = {"layers", "heads", "hidden",  "mlp",
                                       "seq",    "vocab", "kv_heads"};

/* A shape transformer_config_check takes (a plan's bounds; what a computed run needs more, --seq
 * within attention's and a byte vocabulary, is the run's to refuse). */
static int tf_build_arch(const char *where, const long *v, TransformerArch arch, ModelDesc *out,
                         char *described, size_t n, Err *err) {
    TransformerConfig c = {.layers = (int)v[0],
                           .heads = (int)v[1],
                           .hidden = (int)v[2],
                           .mlp = (int)v[3],
                           .seq = (int)v[4],
                           .vocab = (int)v[5],
                           .arch = arch,
                           .kv_heads = arch == TRANSFORMER_LLAMA ? (int)v[6] : 0};
    snprintf(described, n,
             "the transformer its .config describes (layers %d, heads %d, hidden %d, mlp %d, seq "
             "%d, vocab %d)",
             c.layers, c.heads, c.hidden, c.mlp, c.seq, c.vocab);
    Err why = {0};
    if (transformer_config_check(&c, &why))
        return err_set(err, ERR_USAGE, "%s: .config is no transformer this fsdp builds: %s", where,
                       why.msg);
    return transformer_model_create(out, &c, err);
}

static int gpt_build(const char *where, const long *v, ModelDesc *out, char *described, size_t n,
                     Err *err) {
    return tf_build_arch(where, v, TRANSFORMER_GPT, out, described, n, err);
}

static int llama_build(const char *where, const long *v, ModelDesc *out, char *described, size_t n,
                       Err *err) {
    return tf_build_arch(where, v, TRANSFORMER_LLAMA, out, described, n, err);
}

static void tf_sizes_of(const ModelDesc *m, long *out) {
    const TransformerConfig *t = m->config;
    const long v[] = {t->layers, t->heads, t->hidden, t->mlp, t->seq, t->vocab, t->kv_heads};
    for (int i = 0; i < 7; i++) out[i] = v[i];
}

static const char *const gpt_names[] = {"transformer", NULL};
static const ModelKind gpt_kind = {.names = gpt_names,
                                   .what = "a transformer",
                                   .sizes = tf_sizes,
                                   .nsizes = 6,
                                   .sizes_text = "layers, heads, hidden, mlp, seq and vocab",
                                   .max_size = 1 << 24,
                                   .build = gpt_build,
                                   .sizes_of = tf_sizes_of};

static const char *const llama_names[] = {"llama", NULL};
static const ModelKind llama_kind = {.names = llama_names,
                                     .what = "a transformer",
                                     .sizes = tf_sizes,
                                     .nsizes = 7,
                                     .sizes_text =
                                         "layers, heads, hidden, mlp, seq, vocab and kv_heads",
                                     .max_size = 1 << 24,
                                     .build = llama_build,
                                     .sizes_of = tf_sizes_of};

static const ModelKind *const every_kind[] = {&toy_kind, &vit_kind, &gpt_kind, &llama_kind, NULL};

const ModelKinds model_kinds = {.kinds = every_kind,
                                .names_text =
                                    "toy, vit-tiny, vit-workshop, transformer or llama (or vit)"};
