/* vit: torchvision's VisionTransformer as the workshop configures it for FashionMNIST (one
 * input channel, image 28, patch 7, class token, learned position embedding, pre-norm
 * encoder blocks, exact GELU, LayerNorm eps 1e-6, no dropout), with torchvision's parameter
 * names and shapes so weights move to and from PyTorch unchanged. Modules, in order: the
 * embedding, one module per encoder block (the `layer` wrap policy's units), the head. */
#ifndef FSDP_VIT_H
#define FSDP_VIT_H

#include "engine/model.h"

typedef struct VitConfig {
    int image;   /* side of the square input image */
    int patch;   /* side of a patch; image % patch == 0 */
    int layers;  /* encoder blocks */
    int heads;   /* attention heads; hidden % heads == 0 */
    int hidden;  /* width of the residual stream */
    int mlp;     /* width of the MLP's hidden layer */
    int classes; /* outputs of the head */
    int flash;   /* 1: flash attention (--attention flash); 0: eager, the default */
} VitConfig;

/* "vit-tiny" (10 layers, 2 heads, hidden 128, mlp 128) or "vit-workshop" (12 layers,
 * 8 heads, hidden 3840, mlp 768). Returns 0, or -1 for another name. */
int vit_preset(const char *name, VitConfig *out);
/* The preset with each of layers, heads, hidden and mlp that is > 0 in place of its own (the
 * command line's overrides); -1 for an unknown preset. vit_model_create checks the result. */
int vit_preset_with(const char *name, int layers, int heads, int hidden, int mlp, VitConfig *out);
/* Checks the dimensions fit together; one line naming the bad one. */
int vit_config_check(const VitConfig *c, Err *err);
/* Tokens per image: one per patch plus the class token. */
int vit_tokens(const VitConfig *c);
/* Parameters of the whole model, computed from the config alone. */
size_t vit_param_count(const VitConfig *c);

int vit_model_create(ModelDesc *out, const VitConfig *c, Err *err);

#endif
