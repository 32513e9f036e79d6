/* Lesson 06's functions: exercise.c defines them, check.c calls them. Do not edit. */
#ifndef LESSON_06_EXERCISE_H
#define LESSON_06_EXERCISE_H

/* What one GPU's code does in backward, one step at a time. */
typedef enum {
    STEP_GATHER,      /* starts the all-gather of a unit's shards; it runs on the comm stream */
    STEP_WAIT_GATHER, /* waits until that all-gather is done: the unit is whole on this GPU */
    STEP_BACKWARD,    /* runs the unit's backward (all the unit's modules of one entry) */
    STEP_REDUCE,      /* starts the reduce-scatter of the unit's gradients */
    STEP_WAIT_REDUCE, /* waits until that reduce-scatter is done: the averaged gradient shard
                         is in place */
    STEP_FREE,        /* frees the unit's gathered parameters: only its shard is left */
} StepOp;

typedef struct Step {
    StepOp op;
    int unit;
} Step;

/* The same units as lesson 05's forward: the entries in forward order (backward walks them
 * from the last), which unit is the root, and what forward left whole. */
typedef struct BackwardSetup {
    int nentries;
    const int *entry_unit; /* [nentries]: the unit of each entry, in FORWARD order */
    int nunits;
    const int *is_root;        /* [nunits]: 1 for the root unit */
    int reshard_after_forward; /* forward freed every unit but the root */
    int prefetch;              /* entries ahead (in backward order) gathered early */
} BackwardSetup;

/* One GPU's backward, step by step: writes the steps to out (room for max) and returns how
 * many it wrote. */
int backward_steps(const BackwardSetup *s, Step *out, int max);

/* How the model state is split over the GPUs (lesson 01): ddp keeps everything whole on every
 * GPU; zero1 shards Adam's moments; zero2 also the gradients; zero3 also the parameters. */
typedef enum { SHARDING_DDP, SHARDING_ZERO1, SHARDING_ZERO2, SHARDING_ZERO3 } Sharding;

/* Collectives one GPU runs in the optimizer step of a model of nunits units; clip_grad_norm:
 * 1 when gradients are clipped by their global norm. */
int optimizer_collectives(Sharding sharding, int nunits, int clip_grad_norm);

#endif
