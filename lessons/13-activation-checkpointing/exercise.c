/* Lesson 13: activation checkpointing. What does a Llama block keep between its forward and its
 * backward, and what must it compute again before its backward, under each policy? */
#include "exercise.h"

/* Read lessons/13-activation-checkpointing/README.md, fill in the two TODOs, then run
 *   ./fsdp lessons check 13
 * Helpers you add should be `static`. */

/* The bytes one block holds for its backward from the end of its forward to the start of its
 * backward, its input included (whoever computed it, the block reads it again in backward or
 * to recompute): every tensor the README's table lists under `keep`. */
size_t kept_bytes(const BlockShape *s, Keep keep) {
    /* TODO: delete the next line when you use them */
    (void)s, (void)keep;
    return 0; /* TODO */
}

/* The FLOPs of the GEMMs the block runs again right before its backward (2 x m x n x k for an
 * [m, k] by [k, n] product), attention's own products left out: 0 when it keeps everything. */
double recompute_gemm_flops(const BlockShape *s, Keep keep) {
    /* TODO: delete the next line when you use them */
    (void)s, (void)keep;
    return 0; /* TODO */
}
