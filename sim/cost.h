/* cost: the simulator's clock. Named hardware profiles (GPU FLOP/s per dtype, memory
 * bandwidth and size, NVLink/PCIe/network links) and the formulas that turn a piece of work
 * or a collective into modelled seconds. Ring all-gather and reduce-scatter move
 * (N-1)/N of the bytes over the slowest link the group spans (the network's per-GPU bandwidth
 * once it spans nodes), plus N-1 latency steps: M-1 between the M nodes it spans at the
 * network's latency, the rest inside nodes at NVLink's (NCCL's ring model). */
#ifndef FSDP_COST_H
#define FSDP_COST_H

#include <stddef.h>

#include "engine/comm.h"
#include "engine/device.h"

typedef struct Profile {
    const char *name;
    const char *description;
    double flops_fp32; /* dense FLOP/s the GPU sustains in fp32 (tf32 off) */
    double flops_low;  /* bf16/fp16 tensor-core FLOP/s */
    double mem_bw;     /* device memory bytes/s */
    double mem_bytes;  /* device memory capacity */
    int gpus_per_node;
    double intra_bw, intra_lat; /* per-GPU bytes/s and seconds per hop inside a node */
    double inter_bw, inter_lat; /* between nodes */
    double pcie_bw;             /* host<->device bytes/s */
    double host_flops;          /* CPU FLOP/s for offloaded optimizer steps */
    double host_mem_bw;         /* CPU memory bytes/s, for offloaded optimizer steps */
    double disk_bw;             /* bytes/s to local NVMe */
    double launch_overhead;     /* seconds a kernel or copy costs however small it is */
} Profile;

/* NULL if name is unknown. */
const Profile *profile_find(const char *name);
/* Comma-separated names, for help and error messages: "h100-nvlink, a100-nvlink, l4-pcie". */
const char *profile_names(void);
const Profile *profile_default(void); /* h100-nvlink */
/* The i-th profile, NULL past the last: for listing them. */
const Profile *profile_at(int i);

/* Modelled seconds of compute/copy work on a stream (roofline: max of math and memory). */
double cost_work(const Profile *p, const Work *w, int offloaded_to_host);

/* Modelled seconds of a collective among `nranks` ranks whose ranks span `nnodes` nodes;
 * bytes is each rank's full buffer: the gathered output for all-gather, the input for
 * reduce-scatter, the buffer for all-reduce and broadcast. */
double cost_collective(const Profile *p, CollKind k, double bytes, int nranks, int nnodes);
/* The bytes one rank sends in that collective (same `bytes`): (N-1)/N of it for a ring
 * all-gather or reduce-scatter, twice that for an all-reduce, (N-1)/N for a pipelined
 * broadcast on average, nothing for a barrier or one rank. */
double cost_sent_bytes(CollKind k, double bytes, int nranks);

#endif
