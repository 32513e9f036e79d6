// column_sums: how a bias gradient's column sums run, for elementwise.cu's bias_grad and
// fused.cu's bias + GELU backward alike: the grid, one block's part and the groups' finishing
// sum, in a fixed order so db is bit-identical run to run. Internal to kernels/cuda.
#pragma once

#include "kernels/cuda/cuda_common.cuh"

// Blocks of COLUMN_TILE adjacent columns (coalesced rows) x COLUMN_LANES row lanes, on a grid of
// column tiles x row groups. Lane y of a block sums every COLUMN_LANES-th row of its group for
// column j, in double; the lanes' sums are added in lane order. With one group the block adds
// the total into db[j] itself; otherwise each group's goes to partials[group * cols + j] and
// column_sums_finish adds the groups' to db in group order. The grid depends only on the
// shape (no atomics).
constexpr unsigned COLUMN_TILE = 32, COLUMN_LANES = 8;

// The grid of a column sum over rows x cols and the rows of each group.
struct ColumnSumGrid {
    dim3 grid, block;
    unsigned groups; // > 1: the groups' sums go through partials
    size_t group_rows;
};

// Enough row groups to fill the GPU when there are few column tiles: at most max_groups, each
// of at least min_group_rows rows, and their partials (groups x cols doubles) within
// partial_doubles; one group (no partials) when even two groups' would not fit.
static inline ColumnSumGrid column_sum_grid(size_t rows, size_t cols, size_t max_groups,
                                            size_t min_group_rows, size_t partial_doubles) {
    const size_t tiles = (cols + COLUMN_TILE - 1) / COLUMN_TILE;
    const unsigned grid_x = (unsigned)(tiles < 65535 ? tiles : 65535);
    size_t groups = (rows + min_group_rows - 1) / min_group_rows;
    if (groups > max_groups) groups = max_groups;
    if (groups > partial_doubles / cols) groups = partial_doubles / cols;
    if (groups < 1) groups = 1;
    ColumnSumGrid g;
    g.grid = dim3(grid_x, (unsigned)groups);
    g.block = dim3(COLUMN_TILE, COLUMN_LANES);
    g.groups = (unsigned)groups;
    g.group_rows = (rows + groups - 1) / groups;
    return g;
}

// One block's part of a column sum: for each of its column tiles, lane threadIdx.y's sum of
// column j (< cols) over rows first, first + COLUMN_LANES, ... below end, as the kernel's
// sum_rows(j, first, end) returns it; then the lanes' sums added in lane order and the total
// written for the block's group. Every thread of the block calls it: it synchronises.
template <class SumRows>
static __device__ __forceinline__ void column_sums_block(float *db, double *partials, size_t rows,
                                                         size_t cols, size_t group_rows,
                                                         SumRows sum_rows) {
    __shared__ double lane_sums[COLUMN_LANES][COLUMN_TILE + 1];
    const size_t r0 = (size_t)blockIdx.y * group_rows;
    const size_t r1 = r0 + group_rows < rows ? r0 + group_rows : rows;
    for (size_t tile = blockIdx.x; tile * COLUMN_TILE < cols; tile += gridDim.x) {
        const size_t j = tile * COLUMN_TILE + threadIdx.x;
        lane_sums[threadIdx.y][threadIdx.x] = j < cols ? sum_rows(j, r0 + threadIdx.y, r1) : 0.0;
        __syncthreads();
        if (threadIdx.y == 0 && j < cols) {
            double total = 0.0;
            for (unsigned l = 0; l < COLUMN_LANES; l++) total += lane_sums[l][threadIdx.x];
            if (partials)
                partials[(size_t)blockIdx.y * cols + j] = total;
            else
                db[j] = (float)((double)db[j] + total);
        }
        __syncthreads(); // lane_sums is reused by the next tile
    }
}

// db[j] += the groups' partials of column j, in group order, on stream (elementwise.cu). The
// caller checks the launch (CUDA_LAUNCHED) under its own op's name.
void column_sums_finish(float *db, const double *partials, size_t cols, unsigned groups,
                        cudaStream_t stream);
