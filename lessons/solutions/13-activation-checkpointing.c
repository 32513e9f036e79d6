/* Lesson 13: activation checkpointing. What does a Llama block keep between its forward and its
 * backward, and what must it compute again before its backward, under each policy?
 * The reference solution: ./fsdp lessons check 13 --file
 * lessons/solutions/13-activation-checkpointing.c */
#include "exercise.h"

/* Attention's scores: flash's log-sum-exp a (sequence, head, query) row in fp32, or eager's
 * probabilities, a row of seq for each. */
static size_t score_bytes(const BlockShape *s) {
    size_t rows = s->batch * s->heads * s->seq;
    return s->flash ? rows * 4 : rows * s->seq * s->elem_bytes;
}

/* The bytes one block holds for its backward from the end of its forward to the start of its
 * backward, its input included (whoever computed it, the block reads it again in backward or
 * to recompute): every tensor the README's table lists under `keep`. */
size_t kept_bytes(const BlockShape *s, Keep keep) {
    size_t M = s->batch * s->seq, H = s->hidden, KV = s->kv, F = s->mlp, e = s->elem_bytes;
    switch (keep) {
    case KEEP_EVERYTHING: /* x, ln1, q, attn, mid, ln2; k, v; gate, up, SwiGLU; two rstd */
        return M * (e * (6 * H + 2 * KV + 3 * F) + 2 * 4) + score_bytes(s);
    case KEEP_INPUT:
        return M * e * H;
    case KEEP_GEMM_OUTPUTS: /* x, q, attn; v; gate; the scores */
        return M * e * (3 * H + KV + F) + score_bytes(s);
    }
    return 0;
}

/* The FLOPs of the GEMMs the block runs again right before its backward (2 x m x n x k for an
 * [m, k] by [k, n] product), attention's own products left out: 0 when it keeps everything. */
double recompute_gemm_flops(const BlockShape *s, Keep keep) {
    double M = (double)(s->batch * s->seq), H = (double)s->hidden, KV = (double)s->kv,
           F = (double)s->mlp;
    switch (keep) {
    case KEEP_EVERYTHING:
        return 0;
    case KEEP_INPUT: /* q, k, v, o; gate, up, down */
        return 2 * M * (H * H + 2 * H * KV + H * H + 3 * H * F);
    case KEEP_GEMM_OUTPUTS: /* k, o, up */
        return 2 * M * (H * KV + H * H + H * F);
    }
    return 0;
}
