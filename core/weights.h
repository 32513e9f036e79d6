/* weights: full model parameters in a safetensors file with PyTorch's state-dict names and
 * shapes, the format weights travel in between this project and PyTorch. Loading checks
 * every name, shape and dtype against the model before anything is used, as PyTorch's
 * strict load_state_dict does. */
#ifndef FSDP_WEIGHTS_H
#define FSDP_WEIGHTS_H

#include "err.h"
#include "model.h"

/* Reads path into full (model->total_numel floats, parameters in model order). F32, BF16 and
 * F16 tensors are accepted (widened to fp32). A missing or unexpected tensor, a wrong shape
 * or dtype is one line naming the file and the tensor; full is untouched on failure. */
int weights_load(const ModelDesc *m, const char *path, float *full, Err *err);

#endif
