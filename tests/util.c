/* Test helpers: train the toy, the ViT and the transformer in-process on the simulated cluster,
 * compare their results and memory, and run the fsdp binary for the CLI cases. */
#include "tests/util.h"

#include <criterion/criterion.h>
#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>
#include <zlib.h>

#include "io/mnist.h"
#include "io/safetensors.h"
#include "kernels/cpu/cpu_ops.h"
#include "models/toy.h"
#include "models/transformer.h"
#include "models/vit.h"

static void record_step(void *user, const StepReport *r) {
    ToyRun *t = user;
    if (t->nsteps < 64) t->steps[t->nsteps++] = *r;
}

FsdpConfig toy_config(Strategy s, int batch) {
    FsdpConfig c;
    fsdp_config_defaults(&c);
    c.strategy = s;
    c.batch_size = batch;
    c.lr = 0.05f;
    return c;
}

void toy_train(ToyRun *t, const FsdpConfig *cfg, int ranks, long steps, int trace) {
    toy_train_recording(t, cfg, ranks, steps, trace, NULL);
}

static void toy_train_run(ToyRun *t, const FsdpConfig *cfg, int ranks, long steps, int trace,
                          float *local_grads, const Profile *profile) {
    memset(t, 0, sizeof *t);
    Err err = {0};
    Dataset data;
    cr_assert_eq(toy_model_create(&t->model, &err), 0);
    cr_assert_eq(toy_dataset_create(&data, &err), 0);
    cr_assert_eq(fsdp_plan_create(&t->plan, &t->model, cfg, ranks, &err), 0, "%s", err.msg);
    TrainJob job = {.model = &t->model,
                    .data = &data,
                    .plan = &t->plan,
                    .cfg = cfg,
                    .steps = steps,
                    .log_every = 1,
                    .on_step = record_step,
                    .user = t,
                    .memory = t->memory,
                    .final_params = t->params,
                    .step_params = t->step_params,
                    .step_grads = t->step_grads,
                    .step_local_grads = local_grads};
    cr_assert_leq(steps, 64);
    ClusterOptions opt = {.ranks = ranks,
                          .replicas = cfg->strategy == STRAT_HSDP ? cfg->replicas : 1,
                          .profile = profile,
                          .trace = trace};
    ClusterResult res;
    int rc = cluster_run(&opt, train_rank, &job, &res, &err);
    cr_assert_eq(rc, 0, "training failed: %s", err.msg);
    t->trace = res.trace;
    dataset_free(&data);
}

void toy_train_recording(ToyRun *t, const FsdpConfig *cfg, int ranks, long steps, int trace,
                         float *local_grads) {
    toy_train_run(t, cfg, ranks, steps, trace, local_grads, profile_default());
}

void toy_train_on(ToyRun *t, const FsdpConfig *cfg, int ranks, long steps, const Profile *p) {
    toy_train_run(t, cfg, ranks, steps, 0, NULL, p);
}

int run_on_ranks(int ranks, RankMain fn, void *arg, Err *err) {
    ClusterOptions opt = {.ranks = ranks, .profile = profile_default()};
    ClusterResult res;
    int rc = cluster_run(&opt, fn, arg, &res, err);
    cluster_result_free(&res);
    return rc;
}

void run_on_ranks_ok(int ranks, RankMain fn, void *arg) {
    Err err = {0};
    cr_assert_eq(run_on_ranks(ranks, fn, arg, &err), 0, "%s", err.msg);
}

void toy_run_free(ToyRun *t) {
    trace_free(&t->trace);
    plan_free(&t->plan);
    model_desc_free(&t->model);
}

static void record_vit_step(void *user, const StepReport *r) {
    VitRun *v = user;
    if (r->step == 1) v->first_loss = r->stats.loss;
    v->last_loss = r->stats.loss;
    v->nsteps = r->step;
}

const Dataset *vit_test_split(void) {
    static Dataset d; /* loaded once per test process: every test reads it, none writes */
    static int loaded;
    if (!loaded) {
        Err err = {0};
        cr_assert_eq(mnist_load(&d, mnist_dir(NULL), "test", &err), 0, "%s", err.msg);
        loaded = 1;
    }
    return &d;
}

void vit_train(VitRun *out, const ModelDesc *m, FsdpConfig cfg, int ranks, long steps, int trace) {
    model_train(out, m, vit_test_split(), cfg, ranks, steps, trace);
}

void model_train(VitRun *out, const ModelDesc *m, const Dataset *data, FsdpConfig cfg, int ranks,
                 long steps, int trace) {
    Plan plan;
    Err err = {0};
    cr_assert_leq(ranks, 16);
    cr_assert_eq(fsdp_plan_create(&plan, m, &cfg, ranks, &err), 0, "%s", err.msg);
    memset(out, 0, sizeof *out);
    out->params = calloc(m->total_numel, sizeof(float));
    TrainJob job = {.model = m,
                    .data = data,
                    .plan = &plan,
                    .cfg = &cfg,
                    .steps = steps,
                    .log_every = 1,
                    .on_step = record_vit_step,
                    .user = out,
                    .memory = out->memory,
                    .final_params = out->params};
    ClusterOptions opt = {.ranks = ranks,
                          .replicas = cfg.strategy == STRAT_HSDP ? cfg.replicas : 1,
                          .profile = profile_default(),
                          .trace = trace};
    ClusterResult res;
    cr_assert_eq(cluster_run(&opt, train_rank, &job, &res, &err), 0, "%s", err.msg);
    out->trace = res.trace;
    plan_free(&plan);
}

/* A few sentences that repeat with changes, so that a small model has something to learn. */
static const char lm_text[] =
    "Fully sharded data parallel training keeps on each rank only its shard of every parameter, "
    "gathers a unit's parameters just before it computes, and frees them just after. The "
    "gradients are reduced and scattered, so each rank keeps the shard it owns, and the "
    "optimizer steps on that shard alone. Every rank starts from the same parameters, so one "
    "rank on the global batch and many ranks on its slices train to the same model. A rank "
    "keeps its shard of the parameters, of the gradients and of the optimizer's state, and "
    "nothing else at rest. A unit is gathered, computed and freed; the next one is prefetched "
    "while this one computes, so the network and the GPU work at once.";

void text_test_data(Dataset *d, int seq) {
    size_t n = sizeof lm_text - 1;
    cr_assert_lt((size_t)seq, n);
    *d = (Dataset){.n = (long)((n - 1) / (size_t)seq),
                   .in_elems = (size_t)seq,
                   .target_elems = (size_t)seq,
                   .text = (const uint8_t *)lm_text,
                   .classes = 256};
}

TransformerConfig lm_small_config(void) {
    return (TransformerConfig){
        .layers = 2, .hidden = 32, .heads = 4, .mlp = 64, .seq = 16, .vocab = 256};
}

void vit_run_free(VitRun *r) {
    free(r->params);
    trace_free(&r->trace);
    r->params = NULL;
}

VitConfig vit_preset_create(ModelDesc *m, const char *preset) {
    VitConfig c;
    cr_assert_eq(vit_preset(preset, &c), 0, "%s", preset);
    Err err = {0};
    cr_assert_eq(vit_model_create(m, &c, &err), 0, "%s", err.msg);
    return c;
}

FsdpConfig vit_config(Strategy s, int batch) {
    FsdpConfig c;
    fsdp_config_defaults(&c);
    c.strategy = s;
    c.batch_size = batch;
    return c;
}

void expect_same_memory(const RankMemory *want, const RankMemory *got, int ranks,
                        const char *what) {
    for (int r = 0; r < ranks; r++) {
        cr_expect_eq(got[r].peak, want[r].peak, "%s rank %d peak", what, r);
        for (int c = 0; c < MEM_CATEGORY_COUNT; c++) {
            const char *name = mem_category_name((MemCategory)c);
            cr_expect_eq(got[r].rest[c], want[r].rest[c], "%s rank %d %s at rest: %zu vs %zu", what,
                         r, name, got[r].rest[c], want[r].rest[c]);
            cr_expect_eq(got[r].at_peak[c], want[r].at_peak[c], "%s rank %d %s at peak: %zu vs %zu",
                         what, r, name, got[r].at_peak[c], want[r].at_peak[c]);
        }
    }
}

void expect_planned_memory(const RankMemory *want, const PlannerResult *planned, int ranks,
                           const char *what) {
    cr_assert_eq(planned->gpus, ranks, "%s: %d GPUs planned, %d run", what, planned->gpus, ranks);
    RankMemory *all = calloc((size_t)ranks, sizeof *all);
    cr_assert_not_null(all);
    for (int q = 0; q < ranks; q++) all[q] = *planner_memory(planned, q);
    expect_same_memory(want, all, ranks, what);
    free(all);
}

void vit_small_create(ModelDesc *m, int layers) {
    VitConfig c;
    vit_preset("vit-tiny", &c);
    c.layers = layers;
    Err err = {0};
    cr_assert_eq(vit_model_create(m, &c, &err), 0, "%s", err.msg);
}

double rel_l2(const float *a, const float *b, size_t n) {
    double num = 0, den = 0;
    for (size_t i = 0; i < n; i++) {
        double d = (double)a[i] - b[i];
        num += d * d;
        den += (double)b[i] * b[i];
    }
    return sqrt(num) / sqrt(den);
}

const char *fmt_text(const char *fmt, ...) {
    static char texts[FMT_TEXT_BUFFERS][512];
    static int next;
    char *t = texts[next++ % FMT_TEXT_BUFFERS];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(t, sizeof texts[0], fmt, ap);
    va_end(ap);
    return t;
}

double json_number(const char *json, const char *key) {
    char pat[64];
    snprintf(pat, sizeof pat, "\"%s\":", key);
    const char *at = strstr(json, pat);
    cr_assert_not_null(at, "no %s in %.300s", key, json);
    return strtod(at + strlen(pat), NULL);
}

const char *fsdp_bin(void) {
    const char *b = getenv("FSDP_BIN");
    return b ? b : "./fsdp";
}

char *shell_output(const char *cmd, int *status) {
    FILE *p = popen(cmd, "r");
    cr_assert(p, "cannot run %s", cmd);
    size_t cap = 1 << 16, n = 0;
    char *buf = malloc(cap);
    cr_assert(buf);
    for (size_t got; (got = fread(buf + n, 1, cap - 1 - n, p)) > 0;) {
        n += got;
        if (n + 1 == cap) cr_assert(buf = realloc(buf, cap *= 2));
    }
    buf[n] = 0;
    *status = pclose(p);
    return buf;
}

char *fsdp_output(const char *args, const char *redirect, int *status) {
    char cmd[4096];
    snprintf(cmd, sizeof cmd, "%s %s %s", fsdp_bin(), args, redirect);
    return shell_output(cmd, status);
}

/* Open MPI keeps each job's session files under one folder a user, /tmp/ompi.HOST.UID, and an
 * mpirun that ends removes it when empty: another starting at that moment fails to make its own
 * folder in it ("ORTE_ERROR_LOG: Error in file ../../../orte/util/session_dir.c", seen with two
 * tests' mpiruns at once). Each test process gives its mpiruns a base of its own, removed as it
 * exits. */
static char mpi_tmpdir[64];

static void remove_mpi_tmpdir(void) {
    if (mpi_tmpdir[0]) remove_test_dir(mpi_tmpdir);
}

void mpi_private_session_dir(const char *base) {
    if (base) {
        setenv("OMPI_MCA_orte_tmpdir_base", base, 1);
        return;
    }
    if (mpi_tmpdir[0]) return;
    snprintf(mpi_tmpdir, sizeof mpi_tmpdir, "/tmp/fsdp_ompi_%ld", (long)getpid());
    cr_assert(mkdir(mpi_tmpdir, 0700) == 0 || errno == EEXIST, "cannot make %s", mpi_tmpdir);
    setenv("OMPI_MCA_orte_tmpdir_base", mpi_tmpdir, 1);
    atexit(remove_mpi_tmpdir);
}

void skip_without_mpi(void) {
    const char *check = getenv("FSDP_MPI_CHECK");
    if (!check || !*check)
        cr_skip_test("MPI not built (no mpicc when make ran): nothing to run under mpirun");
    mpi_private_session_dir(NULL);
}

char *mpi_fsdp_run(int *code, int ranks, const char *fmt, ...) {
    char args[2048], cmd[3072];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(args, sizeof args, fmt, ap);
    va_end(ap);
    snprintf(cmd, sizeof cmd, "%s -np %d %s %s 2>&1", MPIRUN, ranks, fsdp_bin(), args);
    int status;
    char *out = shell_output(cmd, &status);
    *code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
    return out;
}

void fresh_test_dir(char *dir, size_t size, const char *name, const char *tag) {
    snprintf(dir, size, "/tmp/fsdp_%s_%ld_%s", name, (long)getpid(), tag);
    char cmd[512];
    snprintf(cmd, sizeof cmd, "rm -rf %s && mkdir -p %s", dir, dir);
    cr_assert_eq(system(cmd), 0, "%s", cmd);
}

void remove_test_dir(const char *dir) {
    char cmd[512];
    snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
    if (system(cmd) != 0) cr_log_warn("could not remove %s", dir);
}

char *expect_usage_error_text(const char *args, const char *mention) {
    int status;
    char *err = fsdp_output(args, "2>&1 >/dev/null", &status);
    cr_expect(WIFEXITED(status) && WEXITSTATUS(status) == 2, "`fsdp %s` exited with status %d",
              args, status);
    cr_expect(strstr(err, mention), "`fsdp %s` said '%s', not '%s'", args, err, mention);
    cr_expect(strchr(err, '\n') == err + strlen(err) - 1,
              "`fsdp %s` said more or less than one "
              "line: '%s'",
              args, err);
    return err;
}

void expect_usage_error(const char *args, const char *mention) {
    free(expect_usage_error_text(args, mention));
}

void expect_usage_errors(const UsageCase *cases, size_t n) {
    for (size_t i = 0; i < n; i++) expect_usage_error(cases[i].args, cases[i].mention);
}

static char *run_args(const char *args, const char *redirect, int *code) {
    int status;
    char *out = fsdp_output(args, redirect, &status);
    *code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
    return out;
}

char *fsdp_run(int *code, const char *redirect, const char *fmt, ...) {
    char args[2048];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(args, sizeof args, fmt, ap);
    va_end(ap);
    return run_args(args, redirect, code);
}

char *fsdp_ok(const char *fmt, ...) {
    char args[2048];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(args, sizeof args, fmt, ap);
    va_end(ap);
    int code;
    char *out = run_args(args, "2>&1", &code);
    cr_assert_eq(code, 0, "`fsdp %s` exited with status %d: %.600s", args, code, out);
    return out;
}

char *read_text_file(const char *path, size_t *len) {
    FILE *f = fopen(path, "rb");
    cr_assert_not_null(f, "cannot read %s", path);
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    rewind(f);
    char *text = malloc((size_t)n + 1);
    cr_assert_not_null(text);
    cr_assert_eq(fread(text, 1, (size_t)n, f), (size_t)n, "%s", path);
    fclose(f);
    text[n] = 0;
    if (len) *len = (size_t)n;
    return text;
}

void ckpt_meta_reseal(const char *meta_json) {
    size_t len;
    char *text = read_text_file(meta_json, &len);
    cr_assert(len >= 2 && text[len - 1] == '\n', "%s does not end with a line", meta_json);
    size_t body = len - 1;
    while (body > 0 && text[body - 1] != '\n') body--;
    cr_assert_gt(body, 0, "%s has one line", meta_json);
    uLong crc = crc32(crc32(0L, Z_NULL, 0), (const Bytef *)text, (uInt)body);
    FILE *f = fopen(meta_json, "wb");
    cr_assert_not_null(f, "cannot write %s", meta_json);
    cr_assert_eq(fwrite(text, 1, body, f), body);
    fprintf(f, "\"crc32\":%lu}\n", (unsigned long)crc);
    cr_assert_eq(fclose(f), 0);
    free(text);
}

void make_temp_file(char *path) {
    int fd = mkstemp(path);
    cr_assert_geq(fd, 0, "cannot make %s", path);
    close(fd);
}

double *dump_read(const char *path, size_t *n) {
    FILE *f = fopen(path, "r");
    cr_assert_not_null(f, "%s", path);
    size_t cap = 1024;
    double *v = malloc(cap * sizeof *v);
    cr_assert_not_null(v);
    char name[128];
    long idx;
    *n = 0;
    while (fscanf(f, "%127s %ld %lf", name, &idx, &v[*n]) == 3)
        if (++*n == cap) {
            cap *= 2;
            v = realloc(v, cap * sizeof *v);
            cr_assert_not_null(v);
        }
    fclose(f);
    return v;
}

double dump_rel_diff(const char *a, const char *b) {
    size_t na, nb;
    double *va = dump_read(a, &na), *vb = dump_read(b, &nb);
    cr_assert_eq(na, nb, "%s has %zu values, %s %zu", a, na, b, nb);
    cr_assert_gt(na, 0);
    double num = 0, den = 0;
    for (size_t i = 0; i < na; i++) {
        num += (va[i] - vb[i]) * (va[i] - vb[i]);
        den += vb[i] * vb[i];
    }
    free(va);
    free(vb);
    return sqrt(num / den);
}

float *host_floats(size_t n) {
    float *h = malloc((n ? n : 1) * sizeof *h);
    cr_assert_not_null(h, "out of host memory for %zu floats", n);
    return h;
}

float *host_zeros(size_t n) {
    float *h = calloc(n ? n : 1, sizeof *h);
    cr_assert_not_null(h, "out of host memory for %zu floats", n);
    return h;
}

float *host_nans(size_t n) {
    float *h = host_floats(n);
    for (size_t i = 0; i < n; i++) h[i] = NAN;
    return h;
}

float *host_copy(const float *src, size_t n) {
    float *h = host_floats(n);
    if (n) memcpy(h, src, n * sizeof *h);
    return h;
}

float *host_biased(const float *pre, const float *b, size_t M, size_t N) {
    float *x = host_floats(M * N);
    for (size_t i = 0; i < M; i++)
        for (size_t j = 0; j < N; j++) x[i * N + j] = pre[i * N + j] + b[j];
    return x;
}

uint32_t xorshift32(uint32_t *state) {
    *state ^= *state << 13;
    *state ^= *state >> 17;
    *state ^= *state << 5;
    return *state;
}

void fill_uniform(float *x, size_t n, float lo, float hi, uint32_t seed) {
    uint32_t s = seed * 2654435761u + 1u;
    for (size_t i = 0; i < n; i++)
        x[i] = lo + (hi - lo) * (float)((xorshift32(&s) >> 8) * (1.0 / 16777216.0));
}

float *host_uniform(size_t n, float lo, float hi, uint32_t seed) {
    float *h = host_floats(n);
    fill_uniform(h, n, lo, hi, seed);
    return h;
}

void free_floats(float *const *arrays, size_t n) {
    for (size_t i = 0; i < n; i++) free(arrays[i]);
}

void assert_same_floats(const float *got, const float *want, size_t n, const char *what) {
    for (size_t i = 0; i < n; i++)
        if (memcmp(&got[i], &want[i], sizeof(float)))
            cr_assert_fail("%s: element %zu is %.9g, want %.9g", what, i, (double)got[i],
                           (double)want[i]);
}

void assert_close_floats(const float *got, const float *want, size_t n, double rel,
                         const char *what) {
    double diff = 0.0, norm = 0.0;
    for (size_t i = 0; i < n; i++) {
        cr_assert(isfinite(got[i]), "%s: element %zu is %g", what, i, (double)got[i]);
        const double d = (double)got[i] - (double)want[i];
        diff += d * d;
        norm += (double)want[i] * (double)want[i];
    }
    cr_assert_leq(sqrt(diff), rel * sqrt(norm), "%s: relative difference %g", what,
                  norm > 0 ? sqrt(diff / norm) : sqrt(diff));
}

CpuPool *bind_pool(int threads) {
    CpuPool *p = cpu_pool_create(threads);
    cr_assert_not_null(p);
    kernels_cpu_use_pool(p);
    return p;
}

void unbind_pool(CpuPool *p) {
    kernels_cpu_use_pool(NULL);
    cpu_pool_destroy(p);
}

void expect_finite_differences(const char *what, double (*loss)(void *ctx), void *ctx, float *x,
                               const float *grad, size_t n, FdTolerance tol) {
    int bad = 0;
    for (size_t i = 0; i < n; i++) {
        const float saved = x[i], xp = saved + tol.step, xm = saved - tol.step;
        x[i] = xp;
        const double lp = loss(ctx);
        x[i] = xm;
        const double lm = loss(ctx);
        x[i] = saved;
        const double fd = (lp - lm) / ((double)xp - (double)xm), g = grad[i];
        if (!(fabs(fd - g) <= tol.rtol * fabs(g) + tol.atol) && bad++ < 5)
            cr_log_error("%s[%zu]: analytic %.7g, finite difference %.7g", what, i, g, fd);
    }
    cr_expect_eq(bad, 0, "%s: %d of %zu gradients differ from finite differences", what, bad, n);
}

double dot_out_r(const float *out, const float *r, size_t n) {
    double s = 0.0;
    for (size_t i = 0; i < n; i++) s += (double)out[i] * (double)r[i];
    return s;
}

void write_overflowing_toy(const char *path) {
    const float a[3] = {1, 1, 0}, b[3] = {3e38f, 1, 0}, c[3] = {1000, 1e-37f, 0};
    const int64_t shape[1] = {3};
    StTensorOut t[3] = {{"La.weight", "F32", 1, shape, a},
                        {"Lb.weight", "F32", 1, shape, b},
                        {"Lc.weight", "F32", 1, shape, c}};
    Err err = {0};
    cr_assert_eq(st_write(path, t, 3, NULL, 0, &err), 0, "%s", err.msg);
}

int trace_event_is_collective(const TraceEvent *e) {
    return e->kind == EV_ALL_GATHER || e->kind == EV_REDUCE_SCATTER || e->kind == EV_ALL_REDUCE ||
           e->kind == EV_BROADCAST || e->kind == EV_BARRIER;
}

int trace_event_is_compute(const TraceEvent *e) {
    return e->kind == EV_FORWARD || e->kind == EV_BACKWARD || e->kind == EV_RECOMPUTE ||
           e->kind == EV_OPTIMIZER;
}

size_t trace_seek(const Trace *t, size_t from, int dir, int (*is)(const TraceEvent *)) {
    for (long i = (long)from + dir; i >= 0 && i < (long)t->n; i += dir)
        if (is(&t->ev[i])) return (size_t)i;
    return from;
}

void expect_fsdp_refused(const char *args, const char *want) {
    int code;
    char *out = fsdp_run(&code, "2>&1 >/dev/null", "%s", args);
    cr_expect_eq(code, 2, "%s: exit %d\n%s", args, code, out);
    cr_expect(strstr(out, want), "%s says '%s':\n%s", args, want, out);
    cr_expect_eq(strchr(out, '\n'), strrchr(out, '\n'), "%s: one line\n%s", args, out);
    free(out);
}
