/* nccl_check: the NCCL communicator (runtime/comm_nccl.c) on real GPUs, one process per rank under
 * `fsdp launch` (tests/gpu/test_nccl.c runs it at 2 and 4 ranks). */
#include <cuda_runtime_api.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "kernels/dtype.h"
#include "runtime/comm_nccl.h"
#include "runtime/dist_env.h"
#include "runtime/rendezvous.h"

/* NCCL refuses two ranks on one GPU ("Duplicate GPU detected") unless they look like different
 * hosts, so each process takes its own NCCL_HOSTID and the ranks talk over sockets on lo. Each
 * collective runs on small integers, then on a million random values whose count no world size
 * divides, checked element by element. `--hang`, `--hang-device`, `--hang-init`: the last rank
 * skips a collective (hang_forever), and the others' watchdog must abort. */

static int failures;

static void expect(int ok, int rank, const char *what) {
    if (ok) return;
    fprintf(stderr, "nccl_check: rank %d: %s\n", rank, what);
    failures++;
}

/* n values of type t in device memory from host floats, and back. */
static void *to_device(const float *v, size_t n, DType t) {
    char *host = malloc(n * dtype_size(t) + 1), *dev = NULL;
    for (size_t i = 0; i < n; i++) dtype_store(host, t, i, v[i]);
    cudaMalloc((void **)&dev, n * dtype_size(t) + 1);
    cudaMemcpy(dev, host, n * dtype_size(t), cudaMemcpyHostToDevice);
    free(host);
    return dev;
}

static void from_device(float *v, const void *dev, size_t n, DType t) {
    char *host = malloc(n * dtype_size(t) + 1);
    cudaMemcpy(host, dev, n * dtype_size(t), cudaMemcpyDeviceToHost);
    for (size_t i = 0; i < n; i++) v[i] = dtype_load(host, t, i);
    free(host);
}

/* Whether a sum NCCL reduced agrees with the host's (want, of terms whose magnitudes add to
 * abs_sum). fp32: exactly, for the inputs here are integers whose partial sums stay far below
 * 2^24, exact in whatever order NCCL adds. bf16: NCCL's ring rounds each partial sum to bf16 at
 * every hop (engine/comm.h), up to size - 1 roundings of at most 2^-8 of the partial sum, each
 * at most abs_sum; one more for slack, against a host sum in double. */
static int sum_close(DType t, float got, double want, double abs_sum, int size) {
    if (t == DTYPE_FP32) return (double)got == want;
    return fabs((double)got - want) <= (double)size * ldexp(abs_sum, -8);
}

/* Rank q's i-th input element: exact in bf16 and in every sum of up to 8 ranks. */
static float input(int q, size_t i) {
    return (float)((q + 1) * 4 + (int)(i % 5));
}

static void check_collectives(NcclComm *c, DType t, int rank, int size) {
    enum { N = 37 };
    float in[N * 8] = {0}, out[N * 8] = {0};
    Err err = {0};
    if (size > 8) {
        expect(0, rank, "nccl_check runs at most 8 ranks");
        return;
    }
    for (size_t i = 0; i < (size_t)N * size; i++) in[i] = input(rank, i);
    void *send = to_device(in, (size_t)N * size, t), *recv = to_device(in, (size_t)N * size, t);
    char what[160];
    /* all-gather: rank q's block at q*N */
    expect(!comm_all_gather(&c->base, send, recv, N, t, 0, &err), rank, err.msg);
    cudaDeviceSynchronize();
    from_device(out, recv, (size_t)N * size, t);
    for (int q = 0; q < size; q++)
        for (size_t i = 0; i < N; i++) {
            snprintf(what, sizeof what, "%s all_gather: block %d element %zu is %g, not %g",
                     dtype_name(t), q, i, out[q * N + i], input(q, i));
            expect(out[q * N + i] == input(q, i), rank, what);
        }
    /* reduce-scatter (sum): this rank's block of the sum over ranks */
    expect(!comm_reduce_scatter(&c->base, send, recv, N, t, REDUCE_SUM, 1, &err), rank, err.msg);
    cudaDeviceSynchronize();
    from_device(out, recv, N, t);
    for (size_t i = 0; i < N; i++) {
        double want = 0, abs_sum = 0;
        for (int q = 0; q < size; q++) {
            want += input(q, (size_t)rank * N + i);
            abs_sum += fabs(input(q, (size_t)rank * N + i));
        }
        snprintf(what, sizeof what, "%s reduce_scatter: element %zu is %g, not %g", dtype_name(t),
                 i, out[i], want);
        expect(sum_close(t, out[i], want, abs_sum, size), rank, what);
    }
    /* all-reduce (average) in place, on a host scalar too */
    float scalar = (float)(rank + 1), want_avg = (float)(size + 1) / 2.0f;
    expect(!comm_all_reduce(&c->base, &scalar, &scalar, 1, DTYPE_FP32, REDUCE_AVG, -1, &err), rank,
           err.msg);
    snprintf(what, sizeof what, "host all_reduce avg is %g, not %g", scalar, want_avg);
    expect(scalar == want_avg, rank, what);
    /* broadcast from the last rank: every rank ends with the root's block */
    for (size_t i = 0; i < N; i++) in[i] = input(rank, i);
    void *block = to_device(in, N, t);
    expect(!comm_broadcast(&c->base, block, N, t, size - 1, 2, &err), rank, err.msg);
    cudaDeviceSynchronize();
    from_device(out, block, N, t);
    for (size_t i = 0; i < N; i++) {
        snprintf(what, sizeof what, "%s broadcast: element %zu is %g, not %g", dtype_name(t), i,
                 out[i], input(size - 1, i));
        expect(out[i] == input(size - 1, i), rank, what);
    }
    cudaFree(block);
    cudaFree(send);
    cudaFree(recv);
}

/* ------------------------------------------------ a million values, padded as the engine pads */

/* LARGE values no world size here divides (a prime); each rank's block is ceil(LARGE / size),
 * the tail of the last blocks zero padding, as the plan's wire blocks (torch.chunk's rows). */
enum { LARGE = 1000003 };

/* Rank q's value at global index i, the same on every rank: in fp32 an integer in [-1000, 1000]
 * (sums of up to 8 exact in any order: sum_close compares them exactly); in bf16 a random value
 * in [-1, 1) rounded to bf16 (sums within sum_close's per-hop bound). */
static float large_value(DType t, int q, size_t i) {
    uint64_t h = (uint64_t)i * 0x9E3779B97F4A7C15ull + (uint64_t)(q + 1) * 0xBF58476D1CE4E5B9ull;
    h ^= h >> 31;
    h *= 0x94D049BB133111EBull;
    h ^= h >> 29;
    if (t == DTYPE_FP32) return (float)((int)(h % 2001) - 1000);
    return dtype_round(t, (float)((double)(h >> 11) / 4503599627370496.0 - 1.0));
}

/* Rank q's padded send of size blocks of `per` (reduce-scatter's input), or with whole 0 only
 * its own block (all-gather's), from global index 0. */
static float *large_input(DType t, int q, int size, size_t per, int whole) {
    float *v = calloc((size_t)size * per, sizeof(float));
    size_t from = whole ? 0 : (size_t)q * per, n = whole ? (size_t)size * per : per;
    for (size_t j = 0; j < n && from + j < LARGE; j++)
        v[j] = large_value(t, whole ? q : 0, from + j);
    return v;
}

/* Counts the elements of got[0..n) (global indices from `from`) that miss the sum over ranks
 * (or, with one 1, rank 0's value alone); padding past LARGE must be exactly zero. */
static void expect_large(const float *got, size_t n, size_t from, DType t, int rank, int size,
                         int one, const char *coll) {
    size_t bad = 0, first = 0;
    for (size_t j = 0; j < n; j++) {
        double want = 0, abs_sum = 0;
        for (int q = 0; q < (one ? 1 : size) && from + j < LARGE; q++) {
            want += large_value(t, q, from + j);
            abs_sum += fabs(large_value(t, q, from + j));
        }
        int ok = one || from + j >= LARGE ? (double)got[j] == want
                                          : sum_close(t, got[j], want, abs_sum, size);
        if (!ok && bad++ == 0) first = j;
    }
    char what[200];
    snprintf(what, sizeof what, "%s %s of %d values: %zu of %zu wrong, first at %zu: %g",
             dtype_name(t), coll, LARGE, bad, n, from + first, bad ? (double)got[first] : 0.0);
    expect(!bad, rank, what);
}

/* All-gather, reduce-scatter (sum) and in-place all-reduce (sum) of LARGE values. */
static void check_large(NcclComm *c, DType t, int rank, int size) {
    size_t per = (LARGE + (size_t)size - 1) / (size_t)size, all = per * (size_t)size;
    Err err = {0};
    float *in = large_input(t, rank, size, per, 0), *out = malloc(all * sizeof(float));
    void *send = to_device(in, per, t), *recv = to_device(in, all, t);
    expect(!comm_all_gather(&c->base, send, recv, per, t, 0, &err), rank, err.msg);
    cudaDeviceSynchronize();
    from_device(out, recv, all, t);
    expect_large(out, all, 0, t, rank, size, 1, "all_gather");
    free(in);
    cudaFree(send);
    in = large_input(t, rank, size, per, 1);
    send = to_device(in, all, t);
    expect(!comm_reduce_scatter(&c->base, send, recv, per, t, REDUCE_SUM, 1, &err), rank, err.msg);
    cudaDeviceSynchronize();
    from_device(out, recv, per, t);
    expect_large(out, per, (size_t)rank * per, t, rank, size, 0, "reduce_scatter");
    expect(!comm_all_reduce(&c->base, send, send, LARGE, t, REDUCE_SUM, 2, &err), rank, err.msg);
    cudaDeviceSynchronize();
    from_device(out, send, LARGE, t);
    expect_large(out, LARGE, 0, t, rank, size, 0, "all_reduce");
    free(in);
    free(out);
    cudaFree(send);
    cudaFree(recv);
}

/* Every rank but the last waits on what the last never joins, each case a different host wait:
 * `--hang`, a host scalar as the communicator's first collective (NCCL may connect to the peers
 * inside the call, and the copy back to pageable memory blocks until the all-reduce ends);
 * `--hang-device`, a device buffer once a first all-reduce has connected the ranks, so only its
 * stream event is left to catch it; `--hang-init`, a communicator the last rank never creates. */
static int hang_forever(NcclComm *world, const DistEnv *env, const char *mode) {
    Err err = {0};
    float one = 1, *x = NULL;
    if (!strcmp(mode, "--hang-device")) { /* every rank takes part in this one */
        x = to_device(&one, 1, DTYPE_FP32);
        comm_all_reduce(&world->base, x, x, 1, DTYPE_FP32, REDUCE_SUM, 6, &err);
        cudaDeviceSynchronize();
    }
    if (env->rank == env->world_size - 1) {
        sleep(30);
    } else if (x) {
        comm_all_reduce(&world->base, x, x, 1, DTYPE_FP32, REDUCE_SUM, 8, &err);
        cudaDeviceSynchronize();
    } else if (strcmp(mode, "--hang-init")) {
        comm_all_reduce(&world->base, &one, &one, 1, DTYPE_FP32, REDUCE_SUM, 7, &err);
    }
    /* The watchdog's abort can release the hung call a moment before its thread ends the
     * process (seen on an H100: this line won that race): give it its grace before calling
     * the hang unanswered. */
    sleep(10);
    fprintf(stderr, "nccl_check: rank %d: the watchdog never fired\n", env->rank);
    return 3;
}

int main(int argc, char **argv) {
    const char *mode = argc > 1 ? argv[1] : "";
    int hang = !strncmp(mode, "--hang", 6);
    DistEnv env;
    Err err = {0};
    if (dist_env_from_process(&env, &err)) {
        fprintf(stderr, "nccl_check: %s\n", err.msg);
        return 2;
    }
    char host[64];
    snprintf(host, sizeof host, "fsdp-nccl-check-%d", env.rank);
    setenv("NCCL_HOSTID", host, 1);
    setenv("NCCL_SOCKET_IFNAME", "lo", 0);
    int ndev = 0;
    if (cudaGetDeviceCount(&ndev) != cudaSuccess || ndev == 0) {
        fprintf(stderr, "nccl_check: rank %d: no GPU\n", env.rank);
        return 2;
    }
    int device = env.local_rank % ndev;
    cudaSetDevice(device);
    ncclUniqueId id;
    memset(&id, 0, sizeof id);
    if (env.rank == 0) ncclGetUniqueId(&id);
    CudaDevice *dev = NULL;
    Watchdog *w = NULL;
    NcclComm world = {0};
    int rc = rendezvous_exchange(&env, &id, sizeof id, 30.0, &err);
    if (!rc) rc = device_cuda_create(&dev, env.rank, NULL, &err);
    if (!rc) rc = watchdog_start(&w, env.rank, device, hang ? 3.0 : 120.0, &err);
    int no_comm = hang && !strcmp(mode, "--hang-init") && env.rank == env.world_size - 1;
    if (!rc && !no_comm) rc = comm_nccl_create(&world, dev, w, &id, env.rank, env.world_size, &err);
    if (rc) {
        fprintf(stderr, "nccl_check: rank %d: %s\n", env.rank, err.msg);
        return 1;
    }
    if (hang) return hang_forever(&world, &env, mode);
    check_collectives(&world, DTYPE_FP32, env.rank, env.world_size);
    check_collectives(&world, DTYPE_BF16, env.rank, env.world_size);
    check_large(&world, DTYPE_FP32, env.rank, env.world_size);
    check_large(&world, DTYPE_BF16, env.rank, env.world_size);
    NcclComm halves = {0};
    if (env.world_size % 2 == 0) { /* hsdp's groups: two halves of the world */
        rc = comm_nccl_split(&halves, &world, env.rank / (env.world_size / 2), env.rank, &err);
        expect(!rc, env.rank, err.msg);
        if (!rc) {
            expect(halves.base.size == env.world_size / 2, env.rank, "a half has the wrong size");
            check_collectives(&halves, DTYPE_FP32, halves.base.rank, halves.base.size);
            comm_nccl_destroy(&halves);
        }
    }
    watchdog_stop(w);
    comm_nccl_destroy(&world);
    device_cuda_destroy(dev);
    if (!failures)
        printf("nccl_check: rank %d of %d: every collective agrees\n", env.rank, env.world_size);
    return failures ? 1 : 0;
}
