/* amx_bf16: bf16 matrix products on the AMX tiles of Intel's Sapphire Rapids and later, with fp32
 * accumulation, for the CPU table's bf16 Linears where the CPU has them (else dtype_cpu.c widens
 * the operands to fp32 for OpenBLAS's sgemm). */
#include "kernels/cpu/amx_bf16.h"

#include <stdlib.h>

/* AMX is x86-64's: elsewhere (an arm64 laptop's Linux) there are no tiles, and the bf16 Linears
 * take the widening path. */
#if !defined(__x86_64__)
int amx_bf16_available(void) {
    return 0;
}

void amx_bf16_gemm(float *c, size_t ldc, const AmxMatrix *a, const AmxMatrix *b, size_t M, size_t N,
                   size_t K, int accumulate) {
    (void)c, (void)ldc, (void)a, (void)b, (void)M, (void)N, (void)K, (void)accumulate;
    abort(); /* amx_bf16_available() said 0 */
}
#else
#include <cpuid.h>
#include <immintrin.h>
#include <pthread.h>
#include <string.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "kernels/cpu/cpu_ops.h"
#include "kernels/cpu/scratch.h"

/* An AMX tile holds 16 rows of 64 bytes: 16 x 32 bf16 of A (rows by k), 16 pairs of k by 16
 * columns of B in VNNI order (each row k, k+1 interleaved for 16 columns), or 16 x 16 fp32 of C.
 * One TDPBF16PS adds a 16 x 32 by 32 x 16 product into a C tile: 16,384 flops. */
enum { TILE_ROWS = 16, TILE_K = 32, BLOCK = 2 * TILE_ROWS };

/* Linux hands the tiles' state (8 KB a thread) out only on request (arch_prctl, since 5.16). */
#define ARCH_REQ_XCOMP_PERM 0x1023
#define XFEATURE_XTILEDATA 18

/* CPUID leaf 7's EDX: AMX-BF16 and AMX-TILE. Read directly: clang 14's __builtin_cpu_supports
 * knows no "amx-bf16" (and `make fuzz` builds this file with clang). */
#define CPUID7_EDX_AMX_BF16 (1u << 22)
#define CPUID7_EDX_AMX_TILE (1u << 24)

static int cpu_has_amx_bf16(void) {
    unsigned a, b, c, d;
    if (!__get_cpuid_count(7, 0, &a, &b, &c, &d)) return 0;
    const unsigned both = CPUID7_EDX_AMX_BF16 | CPUID7_EDX_AMX_TILE;
    return (d & both) == both;
}

static int amx_ready;
static pthread_once_t amx_once = PTHREAD_ONCE_INIT;

static void amx_probe(void) {
    const char *env = getenv("FSDP_CPU_AMX");
    if (env && !strcmp(env, "0")) return;
    if (!cpu_has_amx_bf16()) return;
    amx_ready = syscall(SYS_arch_prctl, ARCH_REQ_XCOMP_PERM, XFEATURE_XTILEDATA) == 0;
}

int amx_bf16_available(void) {
    pthread_once(&amx_once, amx_probe);
    return amx_ready;
}

static size_t round_up(size_t n, size_t to) {
    return (n + to - 1) / to * to;
}

/* ---- packing: A into tiles of 16 rows x 32 of k, B into VNNI tiles of 16 pairs of k x 16
 * columns; past the matrices' edges, zeros (they add nothing) ---- */

/* A's tile of rows r.., k k0.. (rows and k counted in the part packed). */
static void pack_a_tile(uint16_t *dst, const AmxMatrix *a, size_t r, size_t rows, size_t k0,
                        size_t K) {
    const uint16_t *src = a->p + r * a->row_stride + k0 * a->col_stride;
    if (r + TILE_ROWS <= rows && k0 + TILE_K <= K && a->col_stride == 1) {
        for (size_t i = 0; i < TILE_ROWS; i++)
            memcpy(dst + i * TILE_K, src + i * a->row_stride, TILE_K * sizeof *dst);
        return;
    }
    for (size_t i = 0; i < TILE_ROWS; i++)
        for (size_t k = 0; k < TILE_K; k++)
            dst[i * TILE_K + k] =
                r + i < rows && k0 + k < K ? src[i * a->row_stride + k * a->col_stride] : 0;
}

/* B's tile of k k0.., columns c..: row `pair` holds, for each column j, k0 + 2 pair then
 * k0 + 2 pair + 1. */
static void pack_b_tile(uint16_t *dst, const AmxMatrix *b, size_t k0, size_t K, size_t c,
                        size_t N) {
    const uint16_t *src = b->p + k0 * b->row_stride + c * b->col_stride;
    const int whole = k0 + TILE_K <= K && c + TILE_ROWS <= N;
    if (whole && b->row_stride == 1) { /* a column's k side by side: copy their pairs */
        for (size_t j = 0; j < TILE_ROWS; j++)
            for (size_t pair = 0; pair < TILE_K / 2; pair++)
                memcpy(dst + pair * 2 * TILE_ROWS + 2 * j, src + j * b->col_stride + 2 * pair,
                       2 * sizeof *dst);
        return;
    }
    if (whole && b->col_stride == 1) { /* a row of k: interleave two rows */
        for (size_t pair = 0; pair < TILE_K / 2; pair++) {
            const uint16_t *even = src + 2 * pair * b->row_stride, *odd = even + b->row_stride;
            for (size_t j = 0; j < TILE_ROWS; j++) {
                dst[pair * 2 * TILE_ROWS + 2 * j] = even[j];
                dst[pair * 2 * TILE_ROWS + 2 * j + 1] = odd[j];
            }
        }
        return;
    }
    for (size_t pair = 0; pair < TILE_K / 2; pair++)
        for (size_t j = 0; j < TILE_ROWS; j++)
            for (size_t h = 0; h < 2; h++) {
                const size_t k = 2 * pair + h;
                dst[pair * 2 * TILE_ROWS + 2 * j + h] =
                    k0 + k < K && c + j < N ? src[k * b->row_stride + j * b->col_stride] : 0;
            }
}

/* A's rows [row0, row0 + rows): for each 16 rows, its tiles along k; then zeros to a whole
 * 32-row block. */
static void pack_a(uint16_t *dst, const AmxMatrix *a, size_t row0, size_t rows, size_t K) {
    const size_t kpad = round_up(K, TILE_K), tile = TILE_ROWS * TILE_K;
    const AmxMatrix part = {a->p + row0 * a->row_stride, a->row_stride, a->col_stride};
    for (size_t r = 0; r < round_up(rows, TILE_ROWS); r += TILE_ROWS)
        for (size_t k0 = 0; k0 < kpad; k0 += TILE_K, dst += tile)
            pack_a_tile(dst, &part, r, rows, k0, K);
    memset(dst, 0, (round_up(rows, BLOCK) - round_up(rows, TILE_ROWS)) * kpad * sizeof *dst);
}

/* B's columns [0, N): for each 16 columns, its tiles along k; then zeros to a whole 32. */
static void pack_b(uint16_t *dst, const AmxMatrix *b, size_t K, size_t N) {
    const size_t kpad = round_up(K, TILE_K), tile = TILE_ROWS * TILE_K;
    for (size_t c = 0; c < round_up(N, TILE_ROWS); c += TILE_ROWS)
        for (size_t k0 = 0; k0 < kpad; k0 += TILE_K, dst += tile) pack_b_tile(dst, b, k0, K, c, N);
    memset(dst, 0, (round_up(N, BLOCK) - round_up(N, TILE_ROWS)) * kpad * sizeof *dst);
}

/* The tiles' shapes (palette 1): 0-3 C, 4-5 A, 6-7 B, each 16 rows of 64 bytes. */
typedef struct __attribute__((packed, aligned(64))) TileConfig {
    uint8_t palette, start_row, reserved[14];
    uint16_t colsb[16];
    uint8_t rows[16];
} TileConfig;

__attribute__((target("amx-tile"))) static void tiles_configure(void) {
    TileConfig cfg = {.palette = 1};
    for (int t = 0; t < 8; t++) cfg.colsb[t] = 64, cfg.rows[t] = TILE_ROWS;
    _tile_loadconfig(&cfg);
}

/* One 16 x 16 fp32 tile of C at (i, j): loaded or stored in place when whole, else through
 * `edge` (a 16 x 16 scratch), of which only C's part is copied. */
typedef struct CTile {
    float *c;
    size_t ldc, M, N, i, j;
    float *edge;
} CTile;

static int tile_whole(const CTile *t) {
    return t->i + TILE_ROWS <= t->M && t->j + TILE_ROWS <= t->N;
}

static float *tile_in(const CTile *t, int accumulate) {
    if (tile_whole(t)) return t->c + t->i * t->ldc + t->j;
    memset(t->edge, 0, TILE_ROWS * TILE_ROWS * sizeof(float));
    if (accumulate)
        for (size_t r = 0; r < TILE_ROWS && t->i + r < t->M; r++)
            for (size_t q = 0; q < TILE_ROWS && t->j + q < t->N; q++)
                t->edge[r * TILE_ROWS + q] = t->c[(t->i + r) * t->ldc + t->j + q];
    return t->edge;
}

static void tile_out(const CTile *t) {
    if (tile_whole(t)) return;
    for (size_t r = 0; r < TILE_ROWS && t->i + r < t->M; r++)
        for (size_t q = 0; q < TILE_ROWS && t->j + q < t->N; q++)
            t->c[(t->i + r) * t->ldc + t->j + q] = t->edge[r * TILE_ROWS + q];
}

static size_t tile_stride(const CTile *t) {
    return (tile_whole(t) ? t->ldc : TILE_ROWS) * sizeof(float);
}

/* C's 32 x 32 block at (i, j) from A's packed rows i.. and B's packed columns j..: four C
 * tiles, two of A and two of B a step of k, each C tile summing its k in order. Tiles past C's
 * edges (M or N short of the block) compute on zeros and are not stored. */
__attribute__((target("amx-tile,amx-bf16"))) static void
block_product(float *c, size_t ldc, size_t M, size_t N, size_t i, size_t j, const uint16_t *pa,
              const uint16_t *pb, size_t ksteps, int accumulate,
              float edge[4][TILE_ROWS * TILE_ROWS]) {
    CTile t[4];
    float *at[4];
    for (int q = 0; q < 4; q++) {
        t[q] = (CTile){
            c,      ldc, M, N, i + (size_t)(q / 2) * TILE_ROWS, j + (size_t)(q % 2) * TILE_ROWS,
            edge[q]};
        at[q] = tile_in(&t[q], accumulate);
    }
    const size_t tile = TILE_ROWS * TILE_K, a1 = ksteps * tile;
    if (accumulate) {
        _tile_loadd(0, at[0], tile_stride(&t[0]));
        _tile_loadd(1, at[1], tile_stride(&t[1]));
        _tile_loadd(2, at[2], tile_stride(&t[2]));
        _tile_loadd(3, at[3], tile_stride(&t[3]));
    } else {
        _tile_zero(0);
        _tile_zero(1);
        _tile_zero(2);
        _tile_zero(3);
    }
    for (size_t s = 0; s < ksteps; s++) {
        _tile_loadd(4, pa + s * tile, 64);
        _tile_loadd(5, pa + a1 + s * tile, 64);
        _tile_loadd(6, pb + s * tile, 64);
        _tile_loadd(7, pb + a1 + s * tile, 64);
        _tile_dpbf16ps(0, 4, 6);
        _tile_dpbf16ps(1, 4, 7);
        _tile_dpbf16ps(2, 5, 6);
        _tile_dpbf16ps(3, 5, 7);
    }
    _tile_stored(0, at[0], tile_stride(&t[0]));
    _tile_stored(1, at[1], tile_stride(&t[1]));
    _tile_stored(2, at[2], tile_stride(&t[2]));
    _tile_stored(3, at[3], tile_stride(&t[3]));
    for (int q = 0; q < 4; q++) tile_out(&t[q]);
}

typedef struct GemmArgs {
    float *c;
    size_t ldc, M, N, K;
    AmxMatrix a;
    const uint16_t *pb; /* B packed, round_up(N, BLOCK) columns */
    int accumulate;
} GemmArgs;

/* C's rows [m0, m1), a multiple of 32 from m0: A's rows packed here, then block by block. */
__attribute__((target("amx-tile"))) static void gemm_rows(const void *ctx, size_t m0, size_t m1) {
    const GemmArgs *g = ctx;
    if (m1 <= m0) return;
    const size_t rows = m1 - m0, kpad = round_up(g->K, TILE_K), ksteps = kpad / TILE_K;
    uint16_t *pa = scratch_get(round_up(rows, BLOCK) * kpad * sizeof *pa);
    pack_a(pa, &g->a, m0, rows, g->K);
    float edge[4][TILE_ROWS * TILE_ROWS];
    tiles_configure();
    for (size_t j = 0; j < g->N; j += BLOCK)
        for (size_t i = 0; i < rows; i += BLOCK)
            block_product(g->c + m0 * g->ldc, g->ldc, rows, g->N, i, j, pa + i * kpad,
                          g->pb + j * kpad, ksteps, g->accumulate, edge);
    _tile_release();
    scratch_put(pa);
}

/* Smallest product worth a pool task, as linear's (vit_cpu.c's LINEAR_MIN_MACS). */
#define TASK_MIN_MACS ((size_t)1 << 19)

void amx_bf16_gemm(float *c, size_t ldc, const AmxMatrix *a, const AmxMatrix *b, size_t M, size_t N,
                   size_t K, int accumulate) {
    if (M == 0 || N == 0) return;
    if (K == 0) {
        if (!accumulate)
            for (size_t i = 0; i < M; i++) memset(c + i * ldc, 0, N * sizeof(float));
        return;
    }
    const size_t kpad = round_up(K, TILE_K), npad = round_up(N, BLOCK);
    uint16_t *pb = scratch_get(npad * kpad * sizeof *pb);
    pack_b(pb, b, K, N);
    GemmArgs g = {c, ldc, M, N, K, *a, pb, accumulate};
    cpu_parallel_range(M, BLOCK, M * N * K, TASK_MIN_MACS, gemm_rows, &g);
    scratch_put(pb);
}
#endif
