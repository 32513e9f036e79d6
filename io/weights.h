/* weights: full model parameters in a safetensors file with PyTorch's state-dict names and
 * shapes, the format weights travel in between this project and PyTorch. Loading checks
 * every name, shape and dtype against the model before anything is used, as PyTorch's
 * strict load_state_dict does. */
#ifndef FSDP_WEIGHTS_H
#define FSDP_WEIGHTS_H

#include "base/err.h"
#include "engine/model.h"

/* Reads path into full (model->total_numel floats, parameters in model order). F32, BF16 and
 * F16 tensors are accepted (widened to fp32). A missing or unexpected tensor, a wrong shape
 * or dtype is one line naming the file and the tensor, found before full is written; a value
 * that is not a finite number (nan, inf) is one line naming the file, the tensor and the
 * value's flat index (ERR_USAGE), found as the values are read. */
int weights_load(const ModelDesc *m, const char *path, float *full, Err *err);

/* A weights file checked against the model with its data left on disk, so each rank reads
 * only its own rows (FSDP2's sharded load: no rank ever holds the whole model). */
typedef struct WeightsFile WeightsFile;

/* Checks the header as weights_load does; reads no tensor data. */
int weights_open(WeightsFile **out, const ModelDesc *m, const char *path, Err *err);
/* Elements [first, first + n) (flat, row-major) of model parameter `param`, widened to fp32;
 * the first that is not finite fails the read, named by its flat index in the tensor. */
int weights_read(const WeightsFile *w, int param, size_t first, size_t n, float *dst, Err *err);
void weights_close(WeightsFile *w);

#endif
