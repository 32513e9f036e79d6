/* cost: the simulator's clock: the named hardware profiles, and the formulas that turn a piece of
 * work or a collective into modelled seconds. */
#include "sim/cost.h"

#include <math.h>
#include <string.h>

/* Peaks are vendor datasheet numbers for dense math (no sparsity) and per-direction link
 * bandwidth, rounded. What a GPU achieves of them, each with its source:
 * - gemm_eff: the best GEMM shape's share of the bf16 peak, measured with torch.matmul
 *   (stas00/ml-engineering, compute/accelerator/README.md, "Maximum Achievable Matmul FLOPS
 *   comparison table": A100 SXM 271.2 of 312 TFLOPS), taken for fp32 too. On Hopper, the rate
 *   a GPU sustains at its power limit, as training runs, not the burst after an idle start:
 *   the same benchmark's later "Maximum Sustainable Matmul FLOPS" (its accelerator benchmarks'
 *   README, "alone vs all-8 concurrent"): H200 SXM 702.9 of 989 sustained at about 1.45 GHz,
 *   against a 828.0 burst (the H200 lent to this project, 2026-10-28, ran an 8192^3 product
 *   through PyTorch at 788 TFLOP/s, the mean of ten after three warm-ups: a burst too); the H100
 *   SXM is the same chip at the same 700 W. h100-gt's 500 W limit clocks lower still, by an
 *   amount no one has published: there it is an upper bound;
 * - attn_eff: flash attention's share of the peak in training (FlashAttention-2's paper: 50 to
 *   73% of an A100's; FlashAttention-3's: FlashAttention-2 reaches 35% of an H100's);
 * - bus_eff: NCCL's bus bandwidth as a share of a link's (NVIDIA/nccl-tests issue 326, NCCL's
 *   maintainer: "360 GB/s is exactly what we'd expect on H100", of NVLink's 450; NCCL's tuning
 *   model caps an A100's at 235 GB/s of 300);
 * - mem_eff: a memory-bound kernel's share of the bandwidth, 0.9: an assumption (no
 *   measurement here yet) that `fsdp plan --calibrate` replaces from a GPU trace;
 * - launch_overhead: what a kernel costs however small, 4 to 5 us (a launch from eager code);
 * - workspace_bytes: cuBLAS's and cuBLASLt's, one each, at the size the cuBLAS reference
 *   recommends (cublasSetWorkspace: 32 MiB on Hopper, 4 MiB before), as PyTorch sizes them
 *   (pytorch/pytorch#120925);
 * - context_bytes and nccl_bytes: 0.5 GB and 0.55 GB a communicator on Hopper, from a user's 8
 *   H100s holding 1.06 GB before their first collective but after the communicator's setup
 *   (NVIDIA/nccl#1685); NCCL's buffers grow with its channels (NVIDIA/nccl#986), fewer on
 *   Ampere (24 of Hopper's 32) and over PCIe. Assumptions until a GPU session reads them;
 * - fragmentation: 5% of the tensors' peak for the caching allocator's rounding and its
 *   blocks freed but not yet reused: an assumption (a trace of reserved against allocated
 *   bytes sets it).
 * The L4's and the V100's figures beyond their datasheets are the A100's: nothing measured
 * one. h100-gt is the H100 torchtitan's benchmarks ran on (pytorch/torchtitan,
 * benchmarks/llama3_h100_202412_torchtitan.md, "Hardware" and footnote 2): Meta's Grand Teton,
 * 96 GB of HBM2e at 2.4 TB/s, the default 500 W power limit, 400 Gb/s of RDMA a GPU, and a
 * bf16 peak "between SXM and NVL" whose exact value its authors do not know: taken as the
 * midpoint of the SXM's 989 and the NVL's 835 TFLOPS (NVIDIA's H100 datasheet), the SXM's
 * share of it achieved and the fp32 peak scaled with it. */
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
        .intra_nvlink = 1,
        .inter_bw = 50e9,
        .pcie_bw = 55e9,
        .host_flops = 2e12,
        .host_mem_bw = 200e9,
        .disk_bw = 6e9,
        .launch_overhead = 4e-6,
        .sms = 132,
        .gemm_eff = 0.711,
        .attn_eff = 0.35,
        .mem_eff = 0.9,
        .bus_eff = 0.8,
        .context_bytes = 0.5e9,
        .workspace_bytes = 2 * 32 * 1048576.0,
        .nccl_bytes = 0.55e9,
        .fragmentation = 0.05,
    },
    {
        .name = "h200-nvlink",
        .description = "8x H200 SXM 141 GB per node, NVLink 4 inside, 400 Gb/s InfiniBand per GPU",
        .flops_fp32 = 67e12,
        .flops_low = 989e12,
        .mem_bw = 4.8e12,
        .mem_bytes = 141e9,
        .gpus_per_node = 8,
        .intra_bw = 450e9,
        .intra_nvlink = 1,
        .inter_bw = 50e9,
        .pcie_bw = 55e9,
        .host_flops = 2e12,
        .host_mem_bw = 200e9,
        .disk_bw = 6e9,
        .launch_overhead = 4e-6,
        .sms = 132,
        .gemm_eff = 0.711,
        .attn_eff = 0.35,
        .mem_eff = 0.9,
        .bus_eff = 0.8,
        .context_bytes = 0.5e9,
        .workspace_bytes = 2 * 32 * 1048576.0,
        .nccl_bytes = 0.55e9,
        .fragmentation = 0.05,
    },
    {
        .name = "h100-gt",
        .description = "8x H100 96 GB HBM2e at 500 W per node (Grand Teton: torchtitan's "
                       "benchmarks), NVLink 4 inside, 400 Gb/s RDMA per GPU",
        .flops_fp32 = 61e12,
        .flops_low = 912e12,
        .mem_bw = 2.4e12,
        .mem_bytes = 96e9,
        .gpus_per_node = 8,
        .intra_bw = 450e9,
        .intra_nvlink = 1,
        .inter_bw = 50e9,
        .pcie_bw = 55e9,
        .host_flops = 2e12,
        .host_mem_bw = 200e9,
        .disk_bw = 6e9,
        .launch_overhead = 4e-6,
        .sms = 132,
        .gemm_eff = 0.711,
        .attn_eff = 0.35,
        .mem_eff = 0.9,
        .bus_eff = 0.8,
        .context_bytes = 0.5e9,
        .workspace_bytes = 2 * 32 * 1048576.0,
        .nccl_bytes = 0.55e9,
        .fragmentation = 0.05,
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
        .intra_nvlink = 1,
        .inter_bw = 25e9,
        .pcie_bw = 25e9,
        .host_flops = 1e12,
        .host_mem_bw = 150e9,
        .disk_bw = 4e9,
        .launch_overhead = 5e-6,
        .sms = 108,
        .gemm_eff = 0.869,
        .attn_eff = 0.6,
        .mem_eff = 0.9,
        .bus_eff = 0.78,
        .context_bytes = 0.5e9,
        .workspace_bytes = 2 * 4 * 1048576.0,
        .nccl_bytes = 0.41e9,
        .fragmentation = 0.05,
    },
    {
        /* DGX-2's GPU, where the ZeRO papers measured: no bf16 (flops_low is fp16's tensor
         * cores), NVLink 2 at 150 GB/s each way, PCIe 3 to the host. */
        .name = "v100-nvlink",
        .description = "8x V100 SXM2 32 GB per node, NVLink 2 inside, 100 Gb/s InfiniBand per GPU",
        .flops_fp32 = 15.7e12,
        .flops_low = 125e12,
        .mem_bw = 0.9e12,
        .mem_bytes = 32e9,
        .gpus_per_node = 8,
        .intra_bw = 150e9,
        .intra_nvlink = 1,
        .inter_bw = 12.5e9,
        .pcie_bw = 16e9,
        .host_flops = 1e12,
        .host_mem_bw = 150e9,
        .disk_bw = 3e9,
        .launch_overhead = 5e-6,
        .sms = 80,
        .gemm_eff = 0.869,
        .attn_eff = 0.6,
        .mem_eff = 0.9,
        .bus_eff = 0.78,
        .context_bytes = 0.5e9,
        .workspace_bytes = 2 * 4 * 1048576.0,
        .nccl_bytes = 0.41e9,
        .fragmentation = 0.05,
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
        .intra_nvlink = 0,
        .inter_bw = 3.1e9,
        .pcie_bw = 25e9,
        .host_flops = 0.5e12,
        .host_mem_bw = 50e9,
        .disk_bw = 2e9,
        .launch_overhead = 5e-6,
        .sms = 58,
        .gemm_eff = 0.869,
        .attn_eff = 0.6,
        .mem_eff = 0.9,
        .bus_eff = 0.78,
        .context_bytes = 0.5e9,
        .workspace_bytes = 2 * 4 * 1048576.0,
        .nccl_bytes = 0.1e9,
        .fragmentation = 0.05,
    },
};

enum { NPROFILES = sizeof profiles / sizeof *profiles };

const Profile *profile_find(const char *name) {
    for (int i = 0; i < NPROFILES; i++)
        if (strcmp(profiles[i].name, name) == 0) return &profiles[i];
    return NULL;
}

const char *profile_names(void) {
    return "h100-nvlink, h200-nvlink, h100-gt, a100-nvlink, v100-nvlink, l4-pcie";
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

enum { TILE = 128 }; /* a GEMM's output tile, rows and columns (cuBLAS's on Ampere and Hopper) */

double cost_gemm(const Profile *p, double rate, double m, double n, double k) {
    if (m <= 0 || n <= 0 || k <= 0) return 0.0;
    double tiles = ceil(m / TILE) * ceil(n / TILE);
    /* split-K: fewer tiles than SMs share the depth out, in slices of at least a tile's */
    double splits = tiles >= p->sms ? 1 : fmin(floor(p->sms / tiles), ceil(k / TILE));
    double waves = ceil(tiles * splits / p->sms);
    double tile_seconds = 2.0 * TILE * TILE * (k / splits) / (rate / p->sms * p->gemm_eff);
    return waves * tile_seconds;
}

/* A kernel's math and memory: its GEMMs by shape, attention's products at flash attention's
 * rate, and the memory-bound kernels (norms, activations, adds, casts, Adam) at the achieved
 * bandwidth or their own flops, whichever binds. They run one after another on the stream, so
 * their times add. */
static double compute_seconds(const Profile *p, const Work *w) {
    double rate = w->low_precision ? p->flops_low : p->flops_fp32;
    double t = 0.0, gemm_flops = 0.0;
    for (int i = 0; i < w->ngemms; i++) {
        const WorkGemm *g = &w->gemm[i];
        t += cost_gemm(p, rate, g->m, g->n, g->k);
        gemm_flops += 2.0 * g->m * g->n * g->k;
    }
    t += w->attention_flops / (rate * p->attn_eff);
    double rest = w->flops - gemm_flops - w->attention_flops;
    return t + max2(rest > 0 ? rest / rate : 0.0, w->bytes / (p->mem_bw * p->mem_eff));
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
    int kernels = w->kernels > 0 ? w->kernels : 1;
    return kernels * p->launch_overhead + compute_seconds(p, w);
}

double cost_overhead(const Profile *p, int communicators, double peak, double rows[OVERHEAD_ROWS]) {
    rows[OVERHEAD_CONTEXT] = p->context_bytes;
    rows[OVERHEAD_WORKSPACE] = p->workspace_bytes;
    rows[OVERHEAD_NCCL] = communicators * p->nccl_bytes;
    rows[OVERHEAD_FRAGMENTATION] = p->fragmentation * peak;
    double sum = 0;
    for (int i = 0; i < OVERHEAD_ROWS; i++) sum += rows[i];
    return sum;
}

double cost_usable_bytes(const Profile *p, int communicators) {
    double fixed = p->context_bytes + p->workspace_bytes + communicators * p->nccl_bytes;
    return (p->mem_bytes - fixed) / (1.0 + p->fragmentation);
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

double cost_bus_bw(const Profile *p, int nnodes) {
    double link = p->intra_bw;
    double nics = p->gpus_per_node * p->inter_bw; /* a node's NICs, one ring each */
    if (nnodes > 1 && nics < link) link = nics;
    return link * p->bus_eff;
}

/* NCCL's tuning model (src/graph/tuning.cc in NVIDIA/nccl): for each protocol, the latency of
 * a collective and of each of its steps over NVLink, PCIe and the network, in microseconds, and
 * the share of the bus bandwidth it moves data at (LL sends half of each 8-byte word as a flag,
 * and its model takes a quarter; LL128 loses 8 bytes of each 128). Small buffers go fastest in
 * LL, large ones in Simple. */
typedef struct Protocol {
    double base, nvlink, pcie, net; /* us */
    double share;
} Protocol;

enum { PROTOCOLS = 3 };
static const Protocol ring_protocols[PROTOCOLS] = {
    {3.6, 0.47, 1.0, 2.7, 0.25}, /* LL */
    {10.0, 1.9, 2.5, 4.0, 0.92}, /* LL128 */
    {8.4, 3.4, 5.7, 9.6, 1.0},   /* Simple */
};
/* A tree's (all-reduce only): its chunks' latencies, and 0.9 of the bus bandwidth (LL: of that
 * again 1/3.8); data goes up the tree and back down, so at half the rate a ring moves it. */
static const Protocol tree_protocols[PROTOCOLS] = {
    {4.4, 0.52, 1.0, 5.0, 0.9 / 3.8},
    {4.4, 1.2, 1.9, 8.5, 0.9 * 7.0 / 9.0},
    {0.0, 28.0, 28.0, 50.0, 0.9},
};

static double hop_latency(const Profile *p, const Protocol *pr) {
    return (p->intra_nvlink ? pr->nvlink : pr->pcie) * 1e-6;
}

/* A ring of `steps` steps, `inter` of them crossing between nodes, moving bytes x steps / N. */
static double ring_seconds(const Profile *p, double bytes, int nranks, int nnodes, int steps,
                           int inter) {
    double busbw = cost_bus_bw(p, nnodes), best = -1;
    for (int i = 0; i < PROTOCOLS; i++) {
        const Protocol *pr = &ring_protocols[i];
        double intra_hop = hop_latency(p, pr) * (nnodes > 1 && i == 0 ? 1.8 : 1.0);
        double lat = pr->base * 1e-6 + (steps - inter) * intra_hop + inter * pr->net * 1e-6;
        double t = lat + bytes * steps / nranks / (busbw * pr->share);
        if (best < 0 || t < best) best = t;
    }
    return best;
}

/* An all-reduce as NCCL's tree: up to the root and back, inside each node along its GPUs and
 * between nodes in log2 of them. */
static double tree_seconds(const Profile *p, double bytes, int nranks, int nnodes) {
    double busbw = cost_bus_bw(p, nnodes), best = -1;
    double per_node = (double)nranks / nnodes - 1, levels = floor(log2(nnodes));
    for (int i = 0; i < PROTOCOLS; i++) {
        const Protocol *pr = &tree_protocols[i];
        double lat =
            pr->base * 1e-6 + 2 * (per_node * hop_latency(p, pr) + levels * pr->net * 1e-6);
        double t = lat + bytes / (0.5 * busbw * pr->share);
        if (best < 0 || t < best) best = t;
    }
    return best;
}

double cost_collective(const Profile *p, CollKind k, double bytes, int nranks, int nnodes) {
    if (nranks <= 1) /* one rank: NCCL copies the send buffer into the receive buffer */
        return p->launch_overhead +
               (k == COLL_BARRIER ? 0.0 : 2.0 * bytes / (p->mem_bw * p->mem_eff));
    if (nnodes < 1) nnodes = 1;
    int n = nranks, m = nnodes;
    switch (k) {
    case COLL_ALL_GATHER:
    case COLL_REDUCE_SCATTER:
        return ring_seconds(p, bytes, n, m, n - 1, m - 1);
    case COLL_ALL_REDUCE: {
        double ring = ring_seconds(p, bytes, n, m, 2 * (n - 1), 2 * (m - 1));
        double tree = tree_seconds(p, bytes, n, m);
        return tree < ring ? tree : ring;
    }
    case COLL_BROADCAST: /* pipelined along the ring: each byte crosses every link once */
        return ring_seconds(p, bytes, n, m, n, m);
    case COLL_BARRIER: /* NCCL has none: an all-reduce of one word */
        return cost_collective(p, COLL_ALL_REDUCE, 4.0, n, m);
    case COLL_KIND_COUNT:
        break;
    }
    return 0.0;
}
