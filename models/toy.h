/* toy: the workshop's toy model. Three layers La, Lb, Lc, each holding exactly three
 * scalars (a₀ a₁ a₂, ...), each computing y = w₀·tanh(w₁·x + w₂) on a batch of scalars,
 * trained with MSE to match a fixed "teacher" toy model on 256 points of [-2, 2]. At three
 * ranks GPU k owns a_k, b_k and c_k, exactly the workshop's table. */
#ifndef FSDP_TOY_H
#define FSDP_TOY_H

#include "engine/model.h"

#define TOY_DATASET_SIZE 256

int toy_model_create(ModelDesc *out, Err *err);
/* The teacher's parameters (La, Lb, Lc) that generate the targets. */
extern const float toy_teacher[3][3];
int toy_dataset_create(Dataset *out, Err *err);

#endif
