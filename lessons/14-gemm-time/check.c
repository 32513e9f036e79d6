/* Lesson 14's check: the learner's GEMM and memory-bound seconds against the cost model's own
 * (sim/cost.c's cost_gemm and cost_work), on three GPUs' profiles and both dtypes' peaks. */
#include <math.h>

#include "exercise.h"
#include "lessons/tool/check.h"
#include "sim/cost.h"

/* The profiles checked: Hopper's 132 SMs, Ampere's 108, the L4's 58, each its own launch. */
static const char *const gpus[] = {"h100-nvlink", "a100-nvlink", "l4-pcie"};
enum { NGPUS = sizeof gpus / sizeof *gpus };

static Gpu gpu_of(const Profile *p, int low_precision) {
    return (Gpu){.peak_flops = low_precision ? p->flops_low : p->flops_fp32,
                 .sms = p->sms,
                 .gemm_eff = p->gemm_eff,
                 .mem_bw = p->mem_bw,
                 .mem_eff = p->mem_eff,
                 .launch_s = p->launch_overhead};
}

static const char *gpu_text(const Profile *p, int low) {
    return lesson_fmt("%s %s", p->name, low ? "bf16" : "fp32");
}

static int same(double a, double b) {
    return fabs(a - b) <= 1e-9 * fmax(fabs(a), fabs(b));
}

static void expect_seconds(int hint, double want, double got, const char *why) {
    if (!same(want, got))
        lesson_fail_why(hint, lesson_fmt("seconds=%.9g", want), lesson_fmt("seconds=%.9g", got),
                        why);
}

/* What a GEMM's time is when one of the README's steps is left out, for naming the mistake;
 * `want` the right time. The split's cap comes before the waves' rounding: on one tile of a
 * short k, splitting it 132 ways and not rounding the waves give the same time. */
static const char *gemm_mistake(const Gpu *g, double m, double n, double k, double want,
                                double got) {
    double T = 128, tiles = ceil(m / T) * ceil(n / T), sms = g->sms;
    double per_sm = g->peak_flops / sms * g->gemm_eff, flops = 2 * m * n * k;
    double splits = tiles >= sms ? 1 : fmin(floor(sms / tiles), ceil(k / T));
    double uncapped = tiles < sms ? floor(sms / tiles) : 1;
    if (same(got, flops / (g->peak_flops * g->gemm_eff)))
        return "That is its FLOPs at the achieved rate: a GEMM runs in whole 128 x 128 tiles, in "
               "whole waves of them, and a part-filled tile or wave takes as long as a full one.";
    if (same(got, flops / g->peak_flops))
        return "That is its FLOPs at the datasheet's peak: an SM sustains gemm_eff of its share.";
    if (same(got, want * g->gemm_eff))
        return "An SM sustains gemm_eff of its share of the peak, not all of it.";
    if (splits < uncapped &&
        same(got, ceil(tiles * uncapped / sms) * 2 * T * T * (k / uncapped) / per_sm))
        return "Each slice of k is at least 128 deep: no more splits than ceil(k / 128).";
    if (tiles < sms && same(got, 2 * T * T * k / per_sm))
        return "Fewer tiles than SMs: cuBLAS splits k over the idle SMs (split-K), each tile's "
               "depth shared out between them.";
    if (same(got, tiles * splits / sms * 2 * T * T * (k / splits) / per_sm))
        return "A last wave that is part full takes as long as a full one: round the waves up.";
    return NULL;
}

static void expect_gemms(int hint, const double (*shapes)[3], int nshapes) {
    for (int i = 0; i < NGPUS; i++)
        for (int low = 1; low >= 0; low--)
            for (int s = 0; s < nshapes; s++) {
                const Profile *p = profile_find(gpus[i]);
                Gpu g = gpu_of(p, low);
                double m = shapes[s][0], n = shapes[s][1], k = shapes[s][2];
                lesson_try("gemm_seconds(%s, m=%.0f, n=%.0f, k=%.0f)", gpu_text(p, low), m, n, k);
                double got = gemm_seconds(&g, m, n, k);
                double want = cost_gemm(p, g.peak_flops, m, n, k);
                if (!same(want, got))
                    expect_seconds(hint, want, got, gemm_mistake(&g, m, n, k, want, got));
            }
}

static const char *kernels_mistake(const Gpu *g, double flops, double bytes, int kernels,
                                   double got) {
    double math = flops / g->peak_flops, memory = bytes / (g->mem_bw * g->mem_eff);
    if (same(got, fmax(math, memory)))
        return "Every kernel pays its launch, however little it does.";
    if (kernels > 1 && same(got, g->launch_s + fmax(math, memory)))
        return "Each of the kernels pays its own launch.";
    if (same(got, kernels * g->launch_s + math + memory))
        return "A memory-bound kernel's math and its memory traffic overlap: the slower of the "
               "two binds, they do not add.";
    if (same(got, kernels * g->launch_s + fmax(math, bytes / g->mem_bw)))
        return "A kernel reaches mem_eff of the bandwidth, not all of it.";
    return NULL;
}

/* Norms and adds of vit-tiny's size and of Llama 3 8B's, an Adam step, a compute-bound
 * elementwise pass and kernels so small that their launches are all of their time. */
static const double work[][3] = {
    {2.2e6, 8.9e6, 3},  {1.3e9, 1.1e9, 5},  {1.2e10, 9.6e10, 12},
    {4.0e12, 1.0e9, 2}, {1.0e3, 4.0e3, 40}, {0, 2.7e8, 1},
};

static void expect_kernels(int hint) {
    for (int i = 0; i < NGPUS; i++)
        for (int low = 1; low >= 0; low--)
            for (size_t s = 0; s < sizeof work / sizeof *work; s++) {
                const Profile *p = profile_find(gpus[i]);
                Gpu g = gpu_of(p, low);
                double flops = work[s][0], bytes = work[s][1];
                int kernels = (int)work[s][2];
                lesson_try("kernels_seconds(%s, flops=%.3g, bytes=%.3g, kernels=%d)",
                           gpu_text(p, low), flops, bytes, kernels);
                double got = kernels_seconds(&g, flops, bytes, kernels);
                Work w = {.kind = WORK_FORWARD,
                          .unit = -1,
                          .flops = flops,
                          .bytes = bytes,
                          .low_precision = low,
                          .kernels = kernels};
                double want = cost_work(p, &w, 0);
                if (!same(want, got))
                    expect_seconds(hint, want, got,
                                   kernels_mistake(&g, flops, bytes, kernels, got));
            }
}

/* Shapes of at least one wave: a square, Llama 3 8B's projections at 8,192 tokens and a
 * token or a wave past them, its MLP, its output layer, a ViT's small ones. */
static const double waves[][3] = {
    {4096, 4096, 4096}, {8192, 4096, 4096},  {8193, 4096, 4096},  {8448, 4096, 4096},
    {8576, 4096, 4096}, {8192, 14336, 4096}, {8192, 4096, 14336}, {8192, 128256, 4096},
    {8704, 576, 192},   {129, 16384, 1024},
};

/* Fewer tiles than SMs: weights' gradients (small outputs, long k) and a single token. */
static const double split[][3] = {
    {192, 192, 8704}, {128, 128, 65536}, {1024, 1024, 8192}, {1, 4096, 4096},
    {64, 64, 100},    {4096, 512, 300},  {256, 640, 131072},
};

LESSON_CHECK_SUITE(lesson14);

Test(lesson14, t1_tiles_and_waves) {
    expect_gemms(1, waves, sizeof waves / sizeof *waves);
}

Test(lesson14, t2_split_k) {
    expect_gemms(2, split, sizeof split / sizeof *split);
}

Test(lesson14, t3_memory_bound_and_launches) {
    expect_kernels(3);
}
