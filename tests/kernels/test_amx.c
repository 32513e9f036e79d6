/* amx_bf16: the AMX tiles' products against exact sums, in every operand layout the Linears hand
 * them, across edges of every tile size; the same bits for any pool; and the bf16 Linears on them
 * within a rounding of the widening path. Skipped where the CPU has no AMX-BF16. */
#include <criterion/criterion.h>
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/cpu/amx_bf16.h"
#include "kernels/cpu/cpu_ops.h"
#include "kernels/cpu/pool.h"
#include "kernels/dtype.h"
#include "kernels/kernels.h"

static void need_amx(void) {
    if (!amx_bf16_available()) cr_skip_test("this CPU has no AMX-BF16 (or FSDP_CPU_AMX=0)");
}

/* n bf16 draws in [-1, 1), from a fixed seed. */
static uint16_t *draws(size_t n, unsigned seed) {
    uint16_t *p = malloc((n ? n : 1) * sizeof *p);
    cr_assert(p);
    srand(seed);
    for (size_t i = 0; i < n; i++) {
        float f = 2.0f * (float)rand() / (float)RAND_MAX - 1.0f;
        p[i] = fp32_to_bf16(f);
    }
    return p;
}

static double at(const AmxMatrix *m, size_t r, size_t c) {
    return bf16_to_fp32(m->p[r * m->row_stride + c * m->col_stride]);
}

/* C = c0 + A B against the sum in double: an fp32 sum of K exact products is within
 * K 2^-24 of the sum of their magnitudes (and the start's). */
static void expect_product(const AmxMatrix *a, const AmxMatrix *b, size_t M, size_t N, size_t K,
                           int accumulate, const char *what) {
    const size_t n = M * N > 0 ? M * N : 1;
    float *c = malloc(n * sizeof *c), *c0 = malloc(n * sizeof *c0);
    cr_assert(c && c0);
    for (size_t i = 0; i < M * N; i++) c0[i] = c[i] = accumulate ? (float)(i % 7) - 3.0f : 99.0f;
    amx_bf16_gemm(c, N, a, b, M, N, K, accumulate);
    for (size_t i = 0; i < M; i++)
        for (size_t j = 0; j < N; j++) {
            double sum = accumulate ? c0[i * N + j] : 0, mag = fabs(sum);
            for (size_t k = 0; k < K; k++) {
                double p = at(a, i, k) * at(b, k, j);
                sum += p, mag += fabs(p);
            }
            double bound = (double)(K + 1) * ldexp(mag, -24);
            cr_assert_leq(fabs(c[i * N + j] - sum), bound,
                          "%s %zux%zux%zu (%zu, %zu): %.9g, not %.9g", what, M, N, K, i, j,
                          c[i * N + j], sum);
        }
    free(c), free(c0);
}

/* Shapes across the tiles' 16 rows and columns, 32 of k and the 32 x 32 blocks. */
static const size_t shapes[][3] = {{1, 1, 1},    {17, 33, 45},  {100, 7, 64}, {33, 17, 1},
                                   {64, 64, 32}, {65, 97, 130}, {32, 48, 31}};

Test(amx, products_are_fp32_sums_of_bf16_products_in_every_layout) {
    need_amx();
    for (size_t s = 0; s < sizeof shapes / sizeof *shapes; s++) {
        const size_t M = shapes[s][0], N = shapes[s][1], K = shapes[s][2];
        uint16_t *x = draws(M * K, 1), *y = draws(K * N, 2);
        /* out = in w^T: A rows of in, B w transposed; din = dout w: both rows; dw = dout^T in */
        AmxMatrix a_rows = {x, K, 1}, a_cols = {x, 1, M};
        AmxMatrix b_rows = {y, N, 1}, b_cols = {y, 1, K};
        for (int acc = 0; acc < 2; acc++) {
            expect_product(&a_rows, &b_cols, M, N, K, acc, "forward");
            expect_product(&a_rows, &b_rows, M, N, K, acc, "input grad");
            expect_product(&a_cols, &b_rows, M, N, K, acc, "weight grad");
        }
        free(x), free(y);
    }
}

/* Every element sums its k in the same order whoever computes its rows: a pool of 1, 2 or 3
 * threads gives the same bits. */
Test(amx, the_same_bits_for_any_pool) {
    need_amx();
    const size_t M = 200, N = 96, K = 160;
    uint16_t *x = draws(M * K, 3), *y = draws(N * K, 4);
    AmxMatrix a = {x, K, 1}, b = {y, 1, K};
    float *first = calloc(M * N, sizeof *first), *c = calloc(M * N, sizeof *c);
    cr_assert(first && c);
    for (int threads = 1; threads <= 3; threads++) {
        CpuPool *pool = threads > 1 ? cpu_pool_create(threads) : NULL;
        kernels_cpu_use_pool(pool);
        amx_bf16_gemm(threads == 1 ? first : c, N, &a, &b, M, N, K, 0);
        kernels_cpu_use_pool(NULL);
        if (pool) cpu_pool_destroy(pool);
        if (threads > 1)
            cr_expect(memcmp(first, c, M * N * sizeof *c) == 0, "a pool of %d differs", threads);
    }
    free(x), free(y), free(first), free(c);
}

/* The table's bf16 Linears at a size that takes the tiles: out and din within one bf16 rounding
 * (2^-8 relative, and what the fp32 sum's order moves) of fp32 on the same bf16 inputs, dw and
 * db (fp32) within 1e-5. */
Test(amx, the_bf16_linears_on_tiles_are_the_widening_paths_within_a_rounding) {
    need_amx();
    const size_t M = 96, K = 64, N = 80; /* 491,520 multiply-adds: past AMX_MIN_MACS */
    uint16_t *in = draws(M * K, 5), *w = draws(N * K, 6), *b = draws(N, 7), *dout = draws(M * N, 8);
    float *fin = malloc(M * K * 4), *fw = malloc(N * K * 4), *fb = malloc(N * 4),
          *fdout = malloc(M * N * 4);
    cr_assert(fin && fw && fb && fdout);
    for (size_t i = 0; i < M * K; i++) fin[i] = bf16_to_fp32(in[i]);
    for (size_t i = 0; i < N * K; i++) fw[i] = bf16_to_fp32(w[i]);
    for (size_t i = 0; i < N; i++) fb[i] = bf16_to_fp32(b[i]);
    for (size_t i = 0; i < M * N; i++) fdout[i] = bf16_to_fp32(dout[i]);
    const Kernels *k = &kernels_cpu;
    uint16_t *out = malloc(M * N * 2), *din = malloc(M * K * 2);
    float *ref_out = malloc(M * N * 4), *ref_din = malloc(M * K * 4);
    float *dw = calloc(N * K, 4), *db = calloc(N, 4), *ref_dw = calloc(N * K, 4),
          *ref_db = calloc(N, 4);
    cr_assert(out && din && ref_out && ref_din && dw && db && ref_dw && ref_db);
    k->linear_forward(DTYPE_BF16, out, in, w, b, M, K, N);
    k->linear_forward(DTYPE_FP32, ref_out, fin, fw, fb, M, K, N);
    k->linear_backward(DTYPE_BF16, din, dw, db, dout, in, w, M, K, N);
    k->linear_backward(DTYPE_FP32, ref_din, ref_dw, ref_db, fdout, fin, fw, M, K, N);
    for (size_t i = 0; i < M * N; i++)
        cr_assert_leq(fabsf(bf16_to_fp32(out[i]) - ref_out[i]), 0x1p-8f * fabsf(ref_out[i]) + 1e-6f,
                      "out[%zu]: %g, fp32 %g", i, bf16_to_fp32(out[i]), ref_out[i]);
    for (size_t i = 0; i < M * K; i++)
        cr_assert_leq(fabsf(bf16_to_fp32(din[i]) - ref_din[i]), 0x1p-8f * fabsf(ref_din[i]) + 1e-6f,
                      "din[%zu]: %g, fp32 %g", i, bf16_to_fp32(din[i]), ref_din[i]);
    for (size_t i = 0; i < N * K; i++)
        cr_assert_leq(fabsf(dw[i] - ref_dw[i]), 1e-5f * (fabsf(ref_dw[i]) + 1), "dw[%zu]", i);
    for (size_t i = 0; i < N; i++)
        cr_assert_leq(fabsf(db[i] - ref_db[i]), 1e-5f * (fabsf(ref_db[i]) + 1), "db[%zu]", i);
    free(in), free(w), free(b), free(dout), free(fin), free(fw), free(fb), free(fdout);
    free(out), free(din), free(ref_out), free(ref_din), free(dw), free(db), free(ref_dw),
        free(ref_db);
}
