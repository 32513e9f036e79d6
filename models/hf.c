/* hf: names, shapes and config.json of the GPT-shaped transformer and the Llama as Hugging Face's
 * GPT2LMHeadModel and LlamaForCausalLM hold them. The Llama's names are already Hugging Face's;
 * GPT-2's sit under "transformer." with their Conv1D weights transposed. */
#include "models/hf.h"

#include <stdio.h>
#include <string.h>

#include "models/tblock.h"
#include "models/transformer.h"

static const TransformerConfig *lm_config(const ModelDesc *m) {
    if (!m->config || (strcmp(m->name, "transformer") && strcmp(m->name, "llama"))) return NULL;
    return m->config;
}

const char *hf_class(const ModelDesc *m) {
    const TransformerConfig *c = lm_config(m);
    if (!c) return NULL;
    return c->arch == TRANSFORMER_LLAMA ? "LlamaForCausalLM" : "GPT2LMHeadModel";
}

/* A GPT block's parameter that GPT-2 keeps in a Conv1D, whose weight is [in, out]. */
static int is_conv1d_weight(const char *name) {
    static const char *const conv[] = {".attn.c_attn.weight", ".attn.c_proj.weight",
                                       ".mlp.c_fc.weight", ".mlp.c_proj.weight"};
    size_t n = strlen(name);
    for (size_t i = 0; i < sizeof conv / sizeof *conv; i++) {
        size_t k = strlen(conv[i]);
        if (n > k && !strcmp(name + n - k, conv[i])) return 1;
    }
    return 0;
}

int hf_tensors(const ModelDesc *m, HfTensor *out, Err *err) {
    const TransformerConfig *c = lm_config(m);
    if (!c)
        return err_set(err, ERR_USAGE,
                       "%s has no Hugging Face form: only the language models (transformer, llama) "
                       "export one",
                       m->name);
    int gpt = c->arch == TRANSFORMER_GPT;
    for (int i = 0; i < m->nparams; i++) {
        const ParamSpec *p = &m->params[i];
        HfTensor *t = &out[i];
        memset(t, 0, sizeof *t);
        /* GPT2LMHeadModel: the body is GPT2Model under "transformer.", the head beside it */
        int body = gpt && strcmp(p->name, "lm_head.weight") != 0;
        snprintf(t->name, sizeof t->name, "%s%s", body ? "transformer." : "", p->name);
        t->ndim = p->ndim;
        t->transposed = gpt && p->ndim == 2 && is_conv1d_weight(p->name);
        for (int d = 0; d < p->ndim; d++)
            t->shape[d] = p->shape[t->transposed ? p->ndim - 1 - d : d];
    }
    return 0;
}

static int llama_config(const TransformerConfig *c, char *buf, size_t cap) {
    return snprintf(buf, cap,
                    "{\n"
                    "  \"architectures\": [\"LlamaForCausalLM\"],\n"
                    "  \"model_type\": \"llama\",\n"
                    "  \"vocab_size\": %d,\n"
                    "  \"hidden_size\": %d,\n"
                    "  \"intermediate_size\": %d,\n"
                    "  \"num_hidden_layers\": %d,\n"
                    "  \"num_attention_heads\": %d,\n"
                    "  \"num_key_value_heads\": %d,\n"
                    "  \"head_dim\": %d,\n"
                    "  \"max_position_embeddings\": %d,\n"
                    "  \"hidden_act\": \"silu\",\n"
                    "  \"rms_norm_eps\": %g,\n"
                    "  \"rope_theta\": %.1f,\n"
                    "  \"rope_parameters\": {\"rope_type\": \"default\", \"rope_theta\": %.1f},\n"
                    "  \"attention_bias\": false,\n"
                    "  \"mlp_bias\": false,\n"
                    "  \"tie_word_embeddings\": false,\n"
                    "  \"bos_token_id\": null,\n"
                    "  \"eos_token_id\": null,\n"
                    "  \"torch_dtype\": \"float32\"\n"
                    "}\n",
                    c->vocab, c->hidden, c->mlp, c->layers, c->heads, c->kv_heads,
                    c->hidden / c->heads, c->seq, (double)TRANSFORMER_NORM_EPS,
                    (double)TBLOCK_ROPE_THETA, (double)TBLOCK_ROPE_THETA);
}

/* GELU here is the exact (erf) one: Hugging Face's "gelu", not GPT-2's tanh "gelu_new". */
static int gpt2_config(const TransformerConfig *c, char *buf, size_t cap) {
    return snprintf(buf, cap,
                    "{\n"
                    "  \"architectures\": [\"GPT2LMHeadModel\"],\n"
                    "  \"model_type\": \"gpt2\",\n"
                    "  \"vocab_size\": %d,\n"
                    "  \"n_embd\": %d,\n"
                    "  \"n_inner\": %d,\n"
                    "  \"n_layer\": %d,\n"
                    "  \"n_head\": %d,\n"
                    "  \"n_positions\": %d,\n"
                    "  \"activation_function\": \"gelu\",\n"
                    "  \"layer_norm_epsilon\": %g,\n"
                    "  \"resid_pdrop\": 0.0,\n"
                    "  \"embd_pdrop\": 0.0,\n"
                    "  \"attn_pdrop\": 0.0,\n"
                    "  \"scale_attn_weights\": true,\n"
                    "  \"tie_word_embeddings\": false,\n"
                    "  \"bos_token_id\": null,\n"
                    "  \"eos_token_id\": null,\n"
                    "  \"torch_dtype\": \"float32\"\n"
                    "}\n",
                    c->vocab, c->hidden, c->mlp, c->layers, c->heads, c->seq,
                    (double)TRANSFORMER_NORM_EPS);
}

int hf_config_json(const ModelDesc *m, char *buf, size_t cap, Err *err) {
    const TransformerConfig *c = lm_config(m);
    if (!c) return err_set(err, ERR_USAGE, "%s has no Hugging Face form (no config.json)", m->name);
    int n = c->arch == TRANSFORMER_LLAMA ? llama_config(c, buf, cap) : gpt2_config(c, buf, cap);
    if (n < 0 || (size_t)n >= cap)
        return err_set(err, ERR_INTERNAL, "config.json does not fit %zu bytes", cap);
    return 0;
}

void hf_transpose(float *dst, const float *src, size_t rows, size_t cols) {
    for (size_t r = 0; r < rows; r++)
        for (size_t c = 0; c < cols; c++) dst[c * rows + r] = src[r * cols + c];
}
