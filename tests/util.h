/* Test helpers: train the toy in-process on the simulated cluster and compare results; host
 * float arrays and their comparisons for the kernel tests (CPU and GPU). */
#ifndef FSDP_TESTS_UTIL_H
#define FSDP_TESTS_UTIL_H

#include <stdint.h>

#include "jobs/train.h"
#include "kernels/cpu/pool.h"
#include "models/transformer.h"
#include "models/vit.h"
#include "sim/cluster.h"
#include "sim/planner.h"

typedef struct ToyRun {
    float params[64]; /* final full parameters */
    /* the values recorded each step (TrainJob.step_params/step_grads) */
    float step_params[65 * 9], step_grads[64 * 9];
    RankMemory memory[16];
    StepReport steps[64]; /* rank 0's report of every step */
    int nsteps;
    Trace trace; /* when traced */
    Plan plan;
    ModelDesc model;
} ToyRun;

/* Trains the toy for `steps` (at most 64) steps; asserts success. Free with toy_run_free. */
void toy_train(ToyRun *out, const FsdpConfig *cfg, int ranks, long steps, int trace);
/* The same, recording each rank's own gradients of each step before their average into
 * local_grads ([steps * ranks * 9], TrainJob.step_local_grads) unless it is NULL. */
void toy_train_recording(ToyRun *out, const FsdpConfig *cfg, int ranks, long steps, int trace,
                         float *local_grads);
/* The same on a GPU of profile p, untraced. */
void toy_train_on(ToyRun *out, const FsdpConfig *cfg, int ranks, long steps, const Profile *p);
void toy_run_free(ToyRun *r);
/* ||a - b|| / ||b|| */
double rel_l2(const float *a, const float *b, size_t n);
FsdpConfig toy_config(Strategy s, int batch);

/* Runs fn(arg) on `ranks` simulated ranks with the default profile: returns cluster_run's
 * code and message (err); run_on_ranks_ok asserts it succeeded. */
int run_on_ranks(int ranks, RankMain fn, void *arg, Err *err);
void run_on_ranks_ok(int ranks, RankMain fn, void *arg);

/* A ViT trained on the test split in-process (the split is loaded once per test process). */
typedef struct VitRun {
    float *params; /* final full parameters; free with vit_run_free */
    long nsteps;
    float first_loss, last_loss;
    RankMemory memory[16];
    Trace trace; /* when traced */
} VitRun;

const Dataset *vit_test_split(void);
/* Trains model m (a ViT) for `steps` on `ranks` simulated ranks; asserts success. */
void vit_train(VitRun *out, const ModelDesc *m, FsdpConfig cfg, int ranks, long steps, int trace);
/* The same for any model and data set (a transformer on text_test_data). */
void model_train(VitRun *out, const ModelDesc *m, const Dataset *data, FsdpConfig cfg, int ranks,
                 long steps, int trace);
/* A text of 672 bytes in memory (nothing owned: no dataset_free needed) as a transformer's data
 * set of sequences of `seq` bytes. */
void text_test_data(Dataset *d, int seq);
/* The transformer the tests train: 2 layers of width 32 (4 heads, mlp 64) over sequences of
 * 16 bytes (vocabulary 256). */
TransformerConfig lm_small_config(void);
void vit_run_free(VitRun *r);
/* A 2-layer vit-tiny, the size the engine's ViT tests train. */
void vit_small_create(ModelDesc *m, int layers);
/* A preset ViT ("vit-tiny", "vit-workshop") as `fsdp train --model` builds it; returns the
 * preset's configuration. */
VitConfig vit_preset_create(ModelDesc *m, const char *preset);
/* The engine's defaults with this strategy and per-rank batch. */
FsdpConfig vit_config(Strategy s, int batch);
/* A case of the tests that run one model under several setups: a name for messages, the
 * configuration and the world size. */
typedef struct ConfigCase {
    const char *name;
    FsdpConfig cfg;
    int ranks;
} ConfigCase;
/* A strategy at a world size (replicas: HSDP's replica groups, else 1). */
typedef struct WorldCase {
    Strategy strategy;
    int ranks, replicas;
} WorldCase;

/* Every rank's bytes by category at rest and at peak, and its peak, are the same in got as in
 * want; `what` names the case in a failure. */
void expect_same_memory(const RankMemory *want, const RankMemory *got, int ranks, const char *what);
/* The same for a plan of `ranks` GPUs, each read as the planner gives it (its representative's). */
void expect_planned_memory(const RankMemory *want, const PlannerResult *planned, int ranks,
                           const char *what);

/* Finite differences for a kernel's backward: loss(ctx) is L = sum(out * R) for a fixed random R
 * after a forward on x; every x[i] is moved by +-step (the float values actually stored, so the
 * quotient is exact up to the loss's rounding) and the central difference must be within
 * rtol * |grad[i]| + atol of the analytic grad[i]. The first five misses are logged. */
typedef struct FdTolerance {
    float step;
    double rtol, atol;
} FdTolerance;
void expect_finite_differences(const char *what, double (*loss)(void *ctx), void *ctx, float *x,
                               const float *grad, size_t n, FdTolerance tol);
/* sum(out * r) in double: the loss the finite differences take. */
double dot_out_r(const float *out, const float *r, size_t n);

/* ||a - b|| / ||b|| over the values of two --dump-params files (`name index value` lines);
 * asserts both hold the same number of values, at least one. */
double dump_rel_diff(const char *a, const char *b);
/* The values of a --dump-params file and how many there are (asserted; caller frees). */
double *dump_read(const char *path, size_t *n);

/* printf into one of FMT_TEXT_BUFFERS rotating buffers (512 bytes), so that a call can name its
 * case: expect_x(..., fmt_text("out (M %zu)", M)). A case's name stays valid for that many calls
 * after it: the layernorm checks of tests/gpu/test_cuda_dtypes.c make 15 with one name. */
#define FMT_TEXT_BUFFERS 32
const char *fmt_text(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

/* The number after the first "key": in a JSON text (asserted to be there). */
double json_number(const char *json, const char *key);

/* The fsdp binary the CLI tests run: $FSDP_BIN, else ./fsdp. */
const char *fsdp_bin(void);
/* Runs `fsdp ARGS` through the shell with `redirect` appended ("2>/dev/null", "2>&1"), and
 * returns what it printed (caller frees); *status is pclose's status. */
char *fsdp_output(const char *args, const char *redirect, int *status);
/* `fsdp ARGS` (printf-style) with `redirect`: what it printed (caller frees); *code is its exit
 * status, -1 when a signal ended it. */
char *fsdp_run(int *code, const char *redirect, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
/* `fsdp ARGS` (printf-style) with stderr folded into stdout, asserted to succeed: what it
 * printed (caller frees). */
char *fsdp_ok(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
/* mpirun as the MPI tests start ranks: allowed as root (containers run tests so), quiet (the
 * ranks' own lines only), oversubscribed and unbound (this machine may have fewer cores than
 * ranks), over shared memory, never a network; LeakSanitizer off in the ranks (Open MPI keeps
 * allocations until exit by design); and ended after 120 s whatever happens. */
#define MPIRUN                                                                                     \
    "OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 ASAN_OPTIONS=detect_leaks=0 "       \
    "timeout 120 mpirun -q --oversubscribe --bind-to none --mca btl self,vader"
/* Skips the test where this build has no MPI (make test sets FSDP_MPI_CHECK only when it
 * built it); else gives this process's mpiruns their own session folder (as below, NULL). */
void skip_without_mpi(void);
/* The folder under which this process's mpiruns keep their session files: `base`, or with NULL
 * one of the process's own, removed at its exit (Open MPI's shared one races between jobs). */
void mpi_private_session_dir(const char *base);
/* `mpirun -np RANKS fsdp ARGS` (printf-style), stderr folded into stdout: what the ranks printed
 * (caller frees); *code is mpirun's exit status, -1 when a signal ended it. */
char *mpi_fsdp_run(int *code, int ranks, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
/* `fsdp ARGS` refused as bad input: exit 2 and one line (stderr) holding `want`. */
void expect_fsdp_refused(const char *args, const char *want);
/* The whole file at path, NUL-terminated (asserted to open; free it); *len, when given, its
 * size. */
char *read_text_file(const char *path, size_t *len);
/* Recomputes the checksum a checkpoint's meta.json ends with, its last line `"crc32":N}`, by
 * the rule docs/checkpoints.md gives a person (N: zlib's CRC32 of every byte before that line),
 * not by the code under test: a test edits a field, reseals, and what the reader then refuses
 * is the field itself. Asserts. */
void ckpt_meta_reseal(const char *meta_json);
/* Creates an empty file from the mkstemp template `path` (its XXXXXX replaced); asserts. */
void make_temp_file(char *path);

/* Host float arrays (asserted; free them): uninitialised, zeros, NaNs (an overwritten output's
 * start: an element a kernel forgets stays NaN), a copy of src, and n floats uniform in
 * [lo, hi) from xorshift32 (the same seed, the same numbers). */
float *host_floats(size_t n);
float *host_zeros(size_t n);
float *host_nans(size_t n);
float *host_copy(const float *src, size_t n);
float *host_uniform(size_t n, float lo, float hi, uint32_t seed);
void fill_uniform(float *x, size_t n, float lo, float hi, uint32_t seed);
/* pre + b row by row (M rows of N): the pre-activation that unfused bias + GELU ops see. */
float *host_biased(const float *pre, const float *b, size_t M, size_t N);
/* The next number of the xorshift32 sequence in *state (never 0). */
uint32_t xorshift32(uint32_t *state);
/* Frees each of the n arrays. */
void free_floats(float *const *arrays, size_t n);
/* Asserts got is want's n floats bit for bit; the message names `what` and the first element
 * that differs. */
void assert_same_floats(const float *got, const float *want, size_t n, const char *what);
/* Asserts every got[i] is finite and ||got - want|| <= rel ||want|| (L2). */
void assert_close_floats(const float *got, const float *want, size_t n, double rel,
                         const char *what);

/* A CPU worker pool of `threads` bound to this thread's kernels_cpu; unbind_pool unbinds and
 * destroys it. */
CpuPool *bind_pool(int threads);
void unbind_pool(CpuPool *p);

/* Makes `dir` (room for size) a fresh empty directory /tmp/fsdp_NAME_PID_TAG, removing what a
 * run before left there; remove_test_dir removes it and what is in it. */
void fresh_test_dir(char *dir, size_t size, const char *name, const char *tag);
void remove_test_dir(const char *dir);

/* `fsdp ARGS` exits 2, a usage error, having said on stderr one line that contains `mention`;
 * expect_usage_error_text returns what it said (free it) for any further check. */
void expect_usage_error(const char *args, const char *mention);
/* expect_usage_error for each of n cases. */
typedef struct UsageCase {
    const char *args, *mention;
} UsageCase;
void expect_usage_errors(const UsageCase *cases, size_t n);
char *expect_usage_error_text(const char *args, const char *mention);

/* The viewer's keys read literally from a trace, for the tests of its terminal and HTML views:
 * whether an event is a collective (c, C) or a computation (k, K), and the nearest event after
 * (dir 1) or before (dir -1) `from` that `is` accepts, `from` itself when there is none. */
int trace_event_is_collective(const TraceEvent *e);
int trace_event_is_compute(const TraceEvent *e);
size_t trace_seek(const Trace *t, size_t from, int dir, int (*is)(const TraceEvent *));

/* What the shell command printed, stdout only unless it redirects (caller frees); *status is
 * pclose's status. */
char *shell_output(const char *cmd, int *status);

/* Writes the toy's weights to path so that its gradient overflows while the loss stays finite:
 * Lb's output near 3e38 makes Lc's second weight's gradient inf. Asserts. */
void write_overflowing_toy(const char *path);

#endif
