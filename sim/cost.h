/* cost: the simulator's clock. Named hardware profiles (what a GPU's datasheet promises and
 * what it achieves: a large GEMM's share of the peak, flash attention's, memory-bound kernels'
 * share of the bandwidth, a launch's cost; links inside and between nodes) and the formulas
 * that turn a piece of work or a collective into modelled seconds: a GEMM from its shape (its
 * tiles in waves over the SMs), a collective as NCCL runs it (ring, or tree for an all-reduce,
 * each of NCCL's three protocols, the fastest taken; across nodes at the node's NICs together). */
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
    double intra_bw;        /* per-GPU bytes/s each way inside a node (NVLink, or PCIe) */
    int intra_nvlink;       /* 1: the GPUs of a node talk over NVLink (NCCL's latencies differ) */
    double inter_bw;        /* per-GPU bytes/s each way between nodes: its NIC's (one a GPU) */
    double pcie_bw;         /* host<->device bytes/s */
    double host_flops;      /* CPU FLOP/s for offloaded optimizer steps */
    double host_mem_bw;     /* CPU memory bytes/s, for offloaded optimizer steps */
    double disk_bw;         /* bytes/s to local NVMe */
    double launch_overhead; /* seconds a kernel or copy costs however small it is */
    /* What the GPU achieves of its datasheet (sim/cost.c gives each its source): */
    int sms; /* streaming multiprocessors: a GEMM's output tiles run in waves of this many */
    double gemm_eff; /* a large GEMM's share of the dtype's peak (sustained, best shape) */
    double attn_eff; /* flash attention's share of the peak, forward and backward */
    double mem_eff;  /* memory-bound kernels' share of mem_bw */
    double bus_eff;  /* NCCL's bus bandwidth as a share of the slowest link's (nccl-tests) */
    /* What every real job holds on a GPU beside its tensors: the CUDA context, cuBLAS's
     * workspaces, NCCL's buffers for each communicator, and room for the caching allocator's
     * fragmentation as a share of the tensors' peak (cost_overhead). */
    double context_bytes, workspace_bytes, nccl_bytes, fragmentation;
} Profile;

/* The bytes beside the tensors on a GPU at a tensor peak of `peak` with `communicators` NCCL
 * communicators (0 on one GPU, 2 under hsdp), by row: context, workspaces, NCCL, fragmentation;
 * returns their sum. */
enum { OVERHEAD_CONTEXT, OVERHEAD_WORKSPACE, OVERHEAD_NCCL, OVERHEAD_FRAGMENTATION, OVERHEAD_ROWS };
double cost_overhead(const Profile *p, int communicators, double peak, double rows[OVERHEAD_ROWS]);
/* The largest tensor peak that fits the GPU with its overhead: what "fits" compares with. */
double cost_usable_bytes(const Profile *p, int communicators);

/* NULL if name is unknown. */
const Profile *profile_find(const char *name);
/* Comma-separated names, for help and error messages: "h100-nvlink, a100-nvlink, l4-pcie". */
const char *profile_names(void);
const Profile *profile_default(void); /* h100-nvlink */
/* The i-th profile, NULL past the last: for listing them. */
const Profile *profile_at(int i);

/* Modelled seconds of compute/copy work on a stream (roofline: max of math and memory). */
double cost_work(const Profile *p, const Work *w, int offloaded_to_host);

/* Modelled seconds of one GEMM of that shape at `rate` FLOP/s of peak (flops_low or
 * flops_fp32): its [m x n] output in 128 x 128 tiles, each tile's 2 x 128 x 128 x k flops on
 * one SM at its share of the peak times gemm_eff, the tiles in waves of p->sms; a shape that
 * leaves a wave part empty, or a tile part full, pays for the whole. Fewer tiles than SMs (a
 * weight's gradient: a small output, a long k) split k over as many SMs as they can, as
 * cuBLAS's split-K kernels do, each slice at least 128 deep. */
double cost_gemm(const Profile *p, double rate, double m, double n, double k);

/* The bus bandwidth NCCL reaches over `nnodes` nodes (however many ranks): the slowest link's
 * times bus_eff, the link being a GPU's NVLink inside one node and, across nodes, the lesser of
 * that and the node's NICs together (NCCL runs one ring a NIC, each crossing every node
 * boundary once: nccl-tests' busbw). */
double cost_bus_bw(const Profile *p, int nnodes);

/* Modelled seconds of a collective among `nranks` ranks whose ranks span `nnodes` nodes;
 * bytes is each rank's full buffer: the gathered output for all-gather, the input for
 * reduce-scatter, the buffer for all-reduce and broadcast. The fastest of NCCL's algorithms
 * and protocols (its tuning model's latencies): a ring pass is (N-1)/N of the bytes at the bus
 * bandwidth plus its steps' latencies, an all-reduce two passes or a tree. One rank copies its
 * buffer (NCCL's send to its own receive buffer), as a kernel does. */
double cost_collective(const Profile *p, CollKind k, double bytes, int nranks, int nnodes);
/* The bytes one rank sends in that collective (same `bytes`): (N-1)/N of it for a ring
 * all-gather or reduce-scatter, twice that for an all-reduce, (N-1)/N for a pipelined
 * broadcast on average, nothing for a barrier or one rank. */
double cost_sent_bytes(CollKind k, double bytes, int nranks);

#endif
