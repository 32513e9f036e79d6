/* The clock's formulas against what they stand for: a GEMM's time from its shape (tiles in waves
 * over the SMs), a piece of work as its parts' times added, and a collective as NCCL runs it,
 * held to nccl-tests' bus-bandwidth formula at 1, 2 and 16 nodes; and the GPU probe that
 * measures a step's products against the products the plan charges. */
#include <cjson/cJSON.h>
#include <criterion/criterion.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>

#include "models/lblock.h"
#include "models/tblock.h"
#include "sim/cost.h"
#include "tests/util.h"

static const Profile *h100(void) {
    const Profile *h = profile_find("h100-nvlink");
    cr_assert_not_null(h);
    return h;
}

/* One full wave of 128 x 128 tiles is one tile's time; a tile more takes a second wave; a row
 * or a column short of a tile pays for the whole tile; fewer tiles than SMs split k. */
Test(cost, a_gemm_runs_in_tiles_and_waves) {
    const Profile *p = h100();
    double k = 4096, rate = p->flops_low;
    double tile = 2.0 * 128 * 128 * k / (rate / p->sms * p->gemm_eff);
    cr_expect_float_eq(cost_gemm(p, rate, 128 * 12, 128 * 11, k), tile, 1e-15,
                       "132 tiles, one wave");
    cr_expect_float_eq(cost_gemm(p, rate, 128 * 12, 128 * 11 + 1, k), 2 * tile, 1e-15,
                       "144 tiles: two waves");
    /* one tile splits its k over min(132 SMs, 4096 / 128 = 32) slices: a 32nd of a tile's time */
    cr_expect_float_eq(cost_gemm(p, rate, 1, 1, k), tile / 32, 1e-15, "one element, split-K");
    /* a weight's gradient, 128 x 128 over k = 65536: 132 slices of 496.5 deep, one wave */
    double wk = 65536, slices = 132;
    cr_expect_float_eq(cost_gemm(p, rate, 128, 128, wk),
                       2.0 * 128 * 128 * (wk / slices) / (rate / p->sms * p->gemm_eff), 1e-15);
    /* 66 tiles split 2 ways fill the 132 SMs */
    cr_expect_float_eq(cost_gemm(p, rate, 128 * 6, 128 * 11, k), tile / 2, 1e-15);
    cr_expect_eq(cost_gemm(p, rate, 0, 4096, k), 0.0);
    /* a large GEMM reaches gemm_eff of the peak, less its last wave's empty share */
    double m = 16384, n = 4096, ideal = 2 * m * n * k / (rate * p->gemm_eff);
    double waves = ceil(128.0 * 32 / p->sms); /* 4096 tiles */
    cr_expect_float_eq(cost_gemm(p, rate, m, n, k), ideal * waves * p->sms / 4096, 1e-12);
    cr_expect_gt(cost_gemm(p, rate, m, n, k), ideal);
    cr_expect_lt(cost_gemm(p, rate, m, n, k), 1.04 * ideal);
}

/* A piece of work's parts run one after another: its GEMMs, attention at flash's rate, the
 * memory-bound kernels at the achieved bandwidth, a launch for each kernel. */
Test(cost, work_adds_its_gemms_attention_memory_and_launches) {
    const Profile *p = h100();
    Work w = {.kind = WORK_FORWARD, .low_precision = 1, .bytes = 3e9, .kernels = 15};
    work_linear(&w, WORK_FORWARD, 16384, 4096, 14336);
    cr_expect_eq(w.ngemms, 1);
    cr_expect_float_eq(w.flops, 2.0 * 16384 * 4096 * 14336, 1);
    w.attention_flops = 1e12;
    w.flops += w.attention_flops;
    double want = 15 * p->launch_overhead + cost_gemm(p, p->flops_low, 16384, 14336, 4096) +
                  1e12 / (p->flops_low * p->attn_eff) + 3e9 / (p->mem_bw * p->mem_eff);
    cr_expect_float_eq(cost_work(p, &w, 0), want, 1e-12);
    /* backward: the input's gradient and the weight's, two GEMMs of the same flops each */
    Work b = {.kind = WORK_BACKWARD, .low_precision = 1};
    work_linear(&b, WORK_BACKWARD, 16384, 4096, 14336);
    cr_expect_eq(b.ngemms, 2);
    cr_expect_float_eq(b.flops, 2 * 2.0 * 16384 * 4096 * 14336, 1);
    cr_expect_float_eq(b.gemm[1].m, 14336, 0);
    cr_expect_float_eq(b.gemm[1].k, 16384, 0);
    /* work without GEMMs is bound by its memory or its flops, whichever is slower */
    Work adam = {.kind = WORK_OPTIMIZER, .flops = 14e9, .bytes = 28e9};
    cr_expect_float_eq(cost_work(p, &adam, 0), p->launch_overhead + 28e9 / (p->mem_bw * p->mem_eff),
                       1e-12);
}

/* nccl-tests reports busbw = algbw x (n-1)/n for all-gather, algbw being bytes / time: a
 * large all-gather's must come out as the bus bandwidth the profile says, inside a node
 * NVLink's times bus_eff (360 GB/s on H100) and across 2 or 16 nodes the node's 8 NICs
 * together (8 x 50 GB/s, times bus_eff), not one GPU's share of the network (50 GB/s). */
static double nccl_tests_busbw(const Profile *p, double bytes, int n, int nodes) {
    double t = cost_collective(p, COLL_ALL_GATHER, bytes, n, nodes);
    return bytes / t * (n - 1) / n;
}

Test(cost, a_ring_at_2_and_16_nodes_is_nccl_tests_bus_bandwidth) {
    const Profile *p = h100();
    double bytes = 8e9;
    cr_expect_float_eq(cost_bus_bw(p, 1), 450e9 * p->bus_eff, 1);
    cr_expect_float_eq(cost_bus_bw(p, 2), 8 * 50e9 * p->bus_eff, 1);
    cr_expect_float_eq(cost_bus_bw(p, 16), 8 * 50e9 * p->bus_eff, 1);
    int shapes[][2] = {{8, 1}, {16, 2}, {128, 16}};
    for (int i = 0; i < 3; i++) {
        int n = shapes[i][0], m = shapes[i][1];
        double bus = nccl_tests_busbw(p, bytes, n, m);
        /* within the latencies' share: 127 steps of them at 128 GPUs are 2% of 8 GB's time */
        cr_expect(fabs(bus / cost_bus_bw(p, m) - 1) < 0.025, "%d GPUs: busbw %.1f GB/s", n,
                  bus / 1e9);
        /* the Simple protocol's: (N-1)/N of the bytes plus NCCL's latencies, M-1 steps of them
         * over the network */
        double lat = (8.4 + (n - 1 - (m - 1)) * 3.4 + (m - 1) * 9.6) * 1e-6;
        cr_expect_float_eq(cost_collective(p, COLL_ALL_GATHER, bytes, n, m),
                           lat + (n - 1.0) / n * bytes / cost_bus_bw(p, m), 1e-12);
    }
    /* an all-reduce is two passes: reduce-scatter, then all-gather */
    double ar = cost_collective(p, COLL_ALL_REDUCE, bytes, 16, 2);
    cr_expect(fabs(ar / (2 * 15.0 / 16 * bytes / cost_bus_bw(p, 2)) - 1) < 0.01);
    /* one GPU a node (the L4s): the network is the node's only link */
    const Profile *l4 = profile_find("l4-pcie");
    cr_expect_float_eq(cost_bus_bw(l4, 2), 3.1e9 * l4->bus_eff, 1);
}

/* Small buffers go in NCCL's low-latency protocol, and a large all-reduce over thousands of GPUs
 * in a tree, whose latency grows with log2 of the nodes, not with the GPUs. */
Test(cost, small_buffers_take_ll_and_many_nodes_a_tree) {
    const Profile *p = h100();
    double small = 8192;
    double ll = (3.6 + 7 * 0.47) * 1e-6 + 7.0 / 8 * small / (cost_bus_bw(p, 1) * 0.25);
    cr_expect_float_eq(cost_collective(p, COLL_ALL_GATHER, small, 8, 1), ll, 1e-12);
    double word = cost_collective(p, COLL_ALL_REDUCE, 4, 16384, 2048);
    double ring_latency = (3.6 + 2 * (16383 - 2047) * 0.47 * 1.8 + 2 * 2047 * 2.7) * 1e-6;
    cr_expect_lt(word, ring_latency / 10, "a tree: %.1f us", word * 1e6);
    double tree = (4.4 + 2 * (7 * 0.52 + 11 * 5.0)) * 1e-6; /* log2(2048) = 11 levels */
    cr_expect(fabs(word / tree - 1) < 0.01, "%.2f us against %.2f", word * 1e6, tree * 1e6);
}

/* One rank has no one to talk to, but NCCL still copies the send buffer into the receive one:
 * the device's memory read and written, not nothing (FSDP2's all-gathers on one H200). */
Test(cost, one_rank_copies_its_buffer) {
    const Profile *p = h100();
    double bytes = 1e9;
    cr_expect_float_eq(cost_collective(p, COLL_ALL_GATHER, bytes, 1, 1),
                       p->launch_overhead + 2 * bytes / (p->mem_bw * p->mem_eff), 1e-12);
    cr_expect_float_eq(cost_collective(p, COLL_BARRIER, 0, 1, 1), p->launch_overhead, 1e-15);
    cr_expect_null(profile_find("tpu"));
    cr_expect_not_null(profile_find("h200-nvlink"));
}

/* The usable bytes are the largest tensor peak whose total with the overhead is the GPU. */
Test(cost, the_usable_bytes_leave_room_for_what_is_beside_the_tensors) {
    const Profile *p = h100();
    for (int comms = 0; comms <= 2; comms++) {
        double usable = cost_usable_bytes(p, comms), rows[OVERHEAD_ROWS];
        double total = usable + cost_overhead(p, comms, usable, rows);
        cr_expect_float_eq(total, p->mem_bytes, 1, "%d communicators", comms);
        cr_expect_float_eq(rows[OVERHEAD_NCCL], comms * p->nccl_bytes, 1e-6);
        cr_expect_float_eq(rows[OVERHEAD_FRAGMENTATION], p->fragmentation * usable, 1e-3);
    }
    cr_expect_float_eq(p->workspace_bytes, 2 * 32 * 1048576.0, 0, "cuBLAS's Hopper workspaces");
}

/* bench/gemm_rate_gpu.py measures, on a GPU, what a step's products sustain: they must be the
 * products the plan charges. Its 21 shapes are a Llama 3 8B block's GEMMs at batch 2 x 8,192
 * tokens, forward and backward, as tblock_work lists them (in any order), and its attention
 * FLOPs are the block's. */
static int gemm_order(const void *a, const void *b) {
    const WorkGemm *x = a, *y = b;
    double d = x->m != y->m ? x->m - y->m : x->n != y->n ? x->n - y->n : x->k - y->k;
    return (d > 0) - (d < 0);
}

Test(cost, the_gpu_gemm_probe_times_the_products_the_plan_charges) {
    int status;
    char *out = shell_output("python3 bench/gemm_rate_gpu.py --list --json 2>&1", &status);
    if (WIFEXITED(status) && WEXITSTATUS(status) == 127) cr_skip_test("no python3 here");
    cr_assert_eq(status, 0, "bench/gemm_rate_gpu.py --list: %s", out);
    cJSON *root = cJSON_Parse(out);
    cr_assert_not_null(root, "not JSON: %s", out);
    TBlock t = {.B = 2,
                .T = 8192,
                .H = 4096,
                .F = 14336,
                .heads = 32,
                .kv_heads = 8,
                .causal = 1,
                .flash = 1,
                .kind = &llama_block,
                .dtype = DTYPE_BF16};
    Work fwd, bwd;
    tblock_work(&t, &fwd, WORK_FORWARD);
    tblock_work(&t, &bwd, WORK_BACKWARD);
    WorkGemm planned[3 * 7], probed[3 * 7];
    cr_assert_eq(fwd.ngemms + bwd.ngemms, 21);
    memcpy(planned, fwd.gemm, 7 * sizeof *planned);
    memcpy(planned + 7, bwd.gemm, 14 * sizeof *planned);
    const cJSON *products = cJSON_GetObjectItem(root, "products");
    cr_assert_eq(cJSON_GetArraySize(products), 21);
    int i = 0;
    for (const cJSON *p = products->child; p; p = p->next, i++)
        probed[i] = (WorkGemm){cJSON_GetObjectItem(p, "m")->valuedouble,
                               cJSON_GetObjectItem(p, "n")->valuedouble,
                               cJSON_GetObjectItem(p, "k")->valuedouble};
    qsort(planned, 21, sizeof *planned, gemm_order);
    qsort(probed, 21, sizeof *probed, gemm_order);
    for (i = 0; i < 21; i++)
        cr_expect(!gemm_order(&planned[i], &probed[i]),
                  "product %d: planned %g x %g x %g, probed %g x %g x %g", i, planned[i].m,
                  planned[i].n, planned[i].k, probed[i].m, probed[i].n, probed[i].k);
    const cJSON *attn = cJSON_GetObjectItem(root, "attention");
    cr_expect_eq(cJSON_GetObjectItem(attn, "forward")->valuedouble, fwd.attention_flops);
    cr_expect_eq(cJSON_GetObjectItem(attn, "backward")->valuedouble, bwd.attention_flops);
    cJSON_Delete(root);
    free(out);
}
