/* kinds: every model as a checkpoint records it (its names, its sizes and how to build it from
 * them), the list io/ reads and writes checkpoints with (engine/model.h's ModelKind). */
#ifndef FSDP_KINDS_H
#define FSDP_KINDS_H

#include "engine/model.h"

/* The toy, the ViT (vit, vit-tiny, vit-workshop), the GPT-shaped transformer and the Llama. */
extern const ModelKinds model_kinds;

#endif
