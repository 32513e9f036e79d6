/* hf: the language models in Hugging Face's form, what `from_pretrained` reads: the class
 * (LlamaForCausalLM, GPT2LMHeadModel), config.json with the sizes, RoPE base and norm eps the
 * model used, and each parameter's name and shape in that class's state dict. */
#ifndef FSDP_MODELS_HF_H
#define FSDP_MODELS_HF_H

#include <stddef.h>
#include <stdint.h>

#include "base/err.h"
#include "engine/model.h"

/* One parameter as Hugging Face stores it. GPT-2's Conv1D layers (c_attn, c_proj, c_fc) keep
 * their weight as [in, out], the transpose of the [out, in] nn.Linear layout used here. */
typedef struct HfTensor {
    char name[128];
    int ndim;
    int64_t shape[2];
    int transposed; /* stored as the parameter's transpose */
} HfTensor;

/* The class Hugging Face builds for m ("LlamaForCausalLM", "GPT2LMHeadModel"), or NULL when m
 * has no Hugging Face form (the toy, the ViT). */
const char *hf_class(const ModelDesc *m);

/* out[i]: parameter i of m as Hugging Face names and shapes it (m->nparams entries). ERR_USAGE
 * naming the model when it has no Hugging Face form. */
int hf_tensors(const ModelDesc *m, HfTensor *out, Err *err);

/* config.json's text for m into buf (cap bytes), its tensors stored in fp32. */
int hf_config_json(const ModelDesc *m, char *buf, size_t cap, Err *err);

/* dst[c, r] = src[r, c] for src [rows, cols]. */
void hf_transpose(float *dst, const float *src, size_t rows, size_t cols);

#endif
