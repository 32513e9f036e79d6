/* Lesson 06: the backward schedule. What does one GPU do, in order, to run backward, and
 * why does its optimizer step need nobody else? */
#include "exercise.h"

/* Read lessons/06-backward-schedule/README.md, fill in the two TODOs, then run
 *   ./fsdp lessons check 06
 * Helpers you add should be `static`. */

/* One GPU's backward, step by step: writes the steps to out (room for max) and returns how
 * many it wrote. */
int backward_steps(const BackwardSetup *s, Step *out, int max) {
    (void)s, (void)out, (void)max; /* TODO: delete this line when you use them */
    return 0;                      /* TODO */
}

/* Collectives one GPU runs in the optimizer step of a model of nunits units; clip_grad_norm:
 * 1 when gradients are clipped by their global norm. */
int optimizer_collectives(Sharding sharding, int nunits, int clip_grad_norm) {
    (void)sharding, (void)nunits, (void)clip_grad_norm; /* TODO: delete this line */
    return -1;                                          /* TODO */
}
