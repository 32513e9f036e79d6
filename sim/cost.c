/* cost: the simulator's clock: the named hardware profiles, and the formulas that turn a piece of
 * work or a collective into modelled seconds. */
#include "sim/cost.h"

#include <string.h>

/* Figures are vendor datasheet numbers for dense math (no sparsity) and per-direction link
 * bandwidth, rounded; latencies are typical small-message figures. They are a model, good
 * for comparing schedules, not a promise about any one machine. */
static const Profile profiles[] = {
    {
        .name = "h100-nvlink",
        .description = "8x H100 SXM 80 GB per node, NVLink 4 inside, 400 Gb/s InfiniBand per GPU",
        .flops_fp32 = 67e12,
        .flops_low = 989e12,
        .mem_bw = 3.35e12,
        .mem_bytes = 80e9,
        .gpus_per_node = 8,
        .intra_bw = 450e9,
        .intra_lat = 3e-6,
        .inter_bw = 50e9,
        .inter_lat = 8e-6,
        .pcie_bw = 55e9,
        .host_flops = 2e12,
        .host_mem_bw = 200e9,
        .disk_bw = 6e9,
        .launch_overhead = 4e-6,
    },
    {
        .name = "a100-nvlink",
        .description = "8x A100 SXM 80 GB per node, NVLink 3 inside, 200 Gb/s InfiniBand per GPU",
        .flops_fp32 = 19.5e12,
        .flops_low = 312e12,
        .mem_bw = 2.04e12,
        .mem_bytes = 80e9,
        .gpus_per_node = 8,
        .intra_bw = 300e9,
        .intra_lat = 4e-6,
        .inter_bw = 25e9,
        .inter_lat = 10e-6,
        .pcie_bw = 25e9,
        .host_flops = 1e12,
        .host_mem_bw = 150e9,
        .disk_bw = 4e9,
        .launch_overhead = 5e-6,
    },
    {
        /* The live workshop's cluster: two nodes with one L4 (sm_89) each, joined by a
         * 25 Gb/s network. There is no NVLink: every collective crosses the network. */
        .name = "l4-pcie",
        .description = "1x L4 24 GB per node (sm_89), nodes joined by 25 Gb/s Ethernet",
        .flops_fp32 = 30.3e12,
        .flops_low = 121e12,
        .mem_bw = 300e9,
        .mem_bytes = 24e9,
        .gpus_per_node = 1,
        .intra_bw = 25e9,
        .intra_lat = 5e-6,
        .inter_bw = 3.1e9,
        .inter_lat = 30e-6,
        .pcie_bw = 25e9,
        .host_flops = 0.5e12,
        .host_mem_bw = 50e9,
        .disk_bw = 2e9,
        .launch_overhead = 5e-6,
    },
};

enum { NPROFILES = sizeof profiles / sizeof *profiles };

const Profile *profile_find(const char *name) {
    for (int i = 0; i < NPROFILES; i++)
        if (strcmp(profiles[i].name, name) == 0) return &profiles[i];
    return NULL;
}

const char *profile_names(void) {
    return "h100-nvlink, a100-nvlink, l4-pcie";
}

const Profile *profile_default(void) {
    return &profiles[0];
}

const Profile *profile_at(int i) {
    return i >= 0 && i < NPROFILES ? &profiles[i] : NULL;
}

static double max2(double a, double b) {
    return a > b ? a : b;
}

double cost_work(const Profile *p, const Work *w, int offloaded_to_host) {
    switch (w->kind) {
    case WORK_COPY_H2D:
    case WORK_COPY_D2H:
        return p->launch_overhead + w->bytes / p->pcie_bw;
    case WORK_NVME_READ:
    case WORK_NVME_WRITE:
        return p->launch_overhead + w->bytes / p->disk_bw;
    default:
        break;
    }
    if (offloaded_to_host) return max2(w->flops / p->host_flops, w->bytes / p->host_mem_bw);
    double rate = w->low_precision ? p->flops_low : p->flops_fp32;
    /* roofline: a kernel is bound by its math or by its memory traffic */
    return p->launch_overhead + max2(w->flops / rate, w->bytes / p->mem_bw);
}

double cost_sent_bytes(CollKind k, double bytes, int nranks) {
    if (nranks <= 1) return 0.0;
    double share = (double)(nranks - 1) / nranks * bytes;
    switch (k) {
    case COLL_ALL_GATHER:
    case COLL_REDUCE_SCATTER:
    case COLL_BROADCAST:
        return share;
    case COLL_ALL_REDUCE:
        return 2.0 * share;
    default:
        return 0.0;
    }
}

/* A ring's latency: NCCL's own tuning model (src/graph/tuning.cc). A ring of N ranks over M
 * nodes takes N-1 steps a pass; M-1 of them cross from one node to the next and pay the
 * network's latency, the other N-M stay inside a node and pay NVLink's (PCIe's). */
static double ring_latency(const Profile *p, int nranks, int nnodes) {
    int inter_hops = nnodes > 1 ? nnodes - 1 : 0;
    int intra_hops = nranks - 1 - inter_hops;
    return (double)intra_hops * p->intra_lat + (double)inter_hops * p->inter_lat;
}

double cost_collective(const Profile *p, CollKind k, double bytes, int nranks, int nnodes) {
    if (nranks <= 1) return 0.0; /* one rank talks to nobody */
    /* every link of a ring carries the same bytes at once, so the slowest one sets the pace:
     * a ring that leaves its node runs at the network's per-GPU bandwidth */
    double bw = nnodes > 1 ? p->inter_bw : p->intra_bw;
    double lat = ring_latency(p, nranks, nnodes);
    double ring = (double)(nranks - 1) / nranks * bytes / bw + lat; /* one pass around */
    switch (k) {
    case COLL_ALL_GATHER:
    case COLL_REDUCE_SCATTER:
        return ring;
    case COLL_ALL_REDUCE:
        return 2.0 * ring; /* reduce-scatter, then all-gather */
    case COLL_BROADCAST:
        return bytes / bw + lat; /* pipelined along the ring */
    case COLL_BARRIER:
        return 2.0 * lat;
    case COLL_KIND_COUNT:
        break;
    }
    return 0.0;
}
