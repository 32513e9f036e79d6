/* plan_search: the engine behind `fsdp plan --search`. For one model on one cluster it tries
 * strategy (with hsdp's replica counts), wrap, reshard_after_forward, activation checkpointing,
 * offload and parameter dtype, finds each one's largest batch per GPU that fits (or the
 * micro-batch of a given global batch), times the ones that can rank with the planner, and
 * keeps the fastest few by modelled throughput per GPU. Prints nothing. */
#ifndef FSDP_PLAN_SEARCH_H
#define FSDP_PLAN_SEARCH_H

#include "sim/planner.h"

/* Knobs given on the command line, which the search leaves as they are in PlanSearchJob.base. */
enum {
    SEARCH_FIX_STRATEGY = 1 << 0,
    SEARCH_FIX_REPLICAS = 1 << 1,
    SEARCH_FIX_WRAP = 1 << 2,
    SEARCH_FIX_RESHARD = 1 << 3,
    SEARCH_FIX_AC = 1 << 4,
    SEARCH_FIX_OFFLOAD = 1 << 5,
    SEARCH_FIX_DTYPE = 1 << 6, /* param and reduce dtype */
};

typedef struct PlanSearchJob {
    const ModelDesc *model;
    const Profile *profile; /* its gpus_per_node says where nodes end */
    int gpus;
    FsdpConfig base;        /* what the search leaves alone: optimizer, prefetch, layout, ... */
    long tokens_per_sample; /* the transformer's sequence: throughput in tokens; 1: samples */
    int top;                /* how many to keep (0: 5) */
    int batch;              /* > 0: this batch per GPU (with base.grad_accum), not searched */
    long global_batch;      /* > 0: samples a step over all GPUs, micro-batch x accum = G/gpus */
    int with_nvme;          /* also the NVMe tier, which the search leaves out unless asked */
    unsigned fixed;         /* SEARCH_FIX_*: knobs kept as base has them */
} PlanSearchJob;

typedef struct PlanSearchEntry {
    FsdpConfig cfg;    /* the whole job: base with the searched knobs and the batch set */
    double step_time;  /* modelled seconds of one step (grad_accum micro-steps) */
    double waiting;    /* of it, the compute stream idle */
    double throughput; /* samples (tokens) per second per GPU */
    size_t peak;       /* the fullest GPU's bytes at its peak */
} PlanSearchEntry;

typedef struct PlanSearchResult {
    PlanSearchEntry *best; /* [nbest], fastest first */
    int nbest;
    int configs; /* configurations tried */
    int fitting; /* ... that fit at batch 1 (at the given batch) */
    int timed;   /* ... timed: the others were slower than one like it by construction */
    long probes; /* memory-only planner runs, finding batches */
} PlanSearchResult;

/* The search. Failures are the planner's, a global batch the GPUs do not divide, or one whose
 * share of a GPU needs more micro-steps than --grad-accum takes (ERR_USAGE). A result with
 * nbest 0 means nothing fits. */
int plan_search_run(const PlanSearchJob *job, PlanSearchResult *out, Err *err);
void plan_search_result_free(PlanSearchResult *r);

/* The hsdp replica counts the search tries on `gpus` GPUs of `per_node` a node: shard groups of
 * whole nodes (a power of two of them, every other one when there are more than 7 such), or on
 * one node, every divisor between 1 and the node. Writes at most `cap`; returns how many. */
int plan_search_replicas(int gpus, int per_node, int *replicas, int cap);

#endif
