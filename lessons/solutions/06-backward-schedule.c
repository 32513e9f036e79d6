/* Lesson 06: the backward schedule. What does one GPU do, in order, to run backward, and why
 * does its optimizer step need nobody else? The reference solution:
 *   ./fsdp lessons check 06 --file lessons/solutions/06-backward-schedule.c */
#include "exercise.h"

#include <stdlib.h>

/* Where a unit's parameters are on this GPU. */
enum { SHARDED, GATHERING, WHOLE };

/* The steps written so far, and the collectives started and not yet waited for, oldest
 * first: one comm stream finishes them in the order they were started. */
typedef struct Backward {
    Step *out;
    int n, max;
    int *state;    /* per unit */
    Step *pending; /* STEP_GATHER or STEP_REDUCE, with its unit */
    int npending;
} Backward;

static void emit(Backward *b, StepOp op, int unit) {
    if (b->n < b->max) b->out[b->n] = (Step){op, unit};
    b->n++;
}

static void start(Backward *b, StepOp op, int unit) {
    emit(b, op, unit);
    b->pending[b->npending++] = (Step){op, unit};
    if (op == STEP_GATHER) b->state[unit] = GATHERING;
}

/* Waits for the oldest collective in flight. */
static void wait_oldest(Backward *b) {
    Step oldest = b->pending[0];
    for (int i = 1; i < b->npending; i++) b->pending[i - 1] = b->pending[i];
    b->npending--;
    if (oldest.op == STEP_GATHER) {
        emit(b, STEP_WAIT_GATHER, oldest.unit);
        b->state[oldest.unit] = WHOLE;
    } else {
        emit(b, STEP_WAIT_REDUCE, oldest.unit);
    }
}

/* Waits, oldest first, until no collective of kind op on unit (-1: any unit) is in flight. */
static void wait_for(Backward *b, StepOp op, int unit) {
    for (;;) {
        int found = 0;
        for (int i = 0; i < b->npending; i++)
            found |= b->pending[i].op == op && (unit < 0 || b->pending[i].unit == unit);
        if (!found) return;
        wait_oldest(b);
    }
}

/* 1 if entry i (in backward order) is unit u's last in backward: its backward is complete. */
static int last_entry_of(const BackwardSetup *s, int i, int u) {
    for (int j = i + 1; j < s->nentries; j++)
        if (s->entry_unit[s->nentries - 1 - j] == u) return 0;
    return 1;
}

/* One GPU's backward, step by step: writes the steps to out (room for max) and returns how
 * many it wrote. */
int backward_steps(const BackwardSetup *s, Step *out, int max) {
    Backward b = {.out = out, .max = max};
    b.state = calloc((size_t)s->nunits + 1, sizeof *b.state);
    b.pending = calloc((size_t)s->nunits + 2, sizeof *b.pending);
    if (!b.state || !b.pending) {
        free(b.state), free(b.pending);
        return 0;
    }
    /* what forward left whole: the root, or everything without reshard_after_forward */
    for (int u = 0; u < s->nunits; u++)
        b.state[u] = s->reshard_after_forward && !s->is_root[u] ? SHARDED : WHOLE;
    for (int i = 0; i < s->nentries; i++) {
        int u = s->entry_unit[s->nentries - 1 - i];
        if (b.state[u] == SHARDED) start(&b, STEP_GATHER, u);
        for (int j = i + 1; j <= i + s->prefetch && j < s->nentries; j++) {
            int next = s->entry_unit[s->nentries - 1 - j];
            if (b.state[next] == SHARDED) start(&b, STEP_GATHER, next);
        }
        wait_for(&b, STEP_GATHER, u);
        emit(&b, STEP_BACKWARD, u);
        if (!last_entry_of(s, i, u)) continue;
        /* the unit's gradients are complete: one reduce-scatter in flight at a time */
        wait_for(&b, STEP_REDUCE, -1);
        start(&b, STEP_REDUCE, u);
        emit(&b, STEP_FREE, u);
        b.state[u] = SHARDED;
    }
    while (b.npending) wait_oldest(&b); /* the optimizer needs every gradient shard */
    free(b.state);
    free(b.pending);
    return b.n < max ? b.n : max;
}

/* Collectives one GPU runs in the optimizer step of a model of nunits units; clip_grad_norm:
 * 1 when gradients are clipped by their global norm. */
int optimizer_collectives(Sharding sharding, int nunits, int clip_grad_norm) {
    switch (sharding) {
    case SHARDING_DDP: /* whole gradients, already averaged: every GPU steps everything */
        return 0;
    case SHARDING_ZERO1: /* each GPU steps its rows of replicated parameters, then every
                            GPU needs everybody's: one all-gather per unit */
        return nunits;
    case SHARDING_ZERO2:
    case SHARDING_ZERO3: /* each GPU steps its own rows with its own gradient shard; only the
                            global norm needs every GPU's sum of squares */
        return clip_grad_norm ? 1 : 0;
    }
    return 0;
}
