/* report: what `fsdp train` shows a person: the config, the plan, the ownership table, memory
 * per rank beside DDP's, per-step and evaluation lines (text or JSON), the parameter dump. */
#include "cmd/report.h"

#include <errno.h>
#include <math.h>
#include <string.h>

#include "sim/stream_check.h"

void report_config(FILE *f, const FsdpConfig *c, const char *model, int ranks, const char *where) {
    char wrap[32];
    wrap_format(&c->wrap, wrap, sizeof wrap);
    fprintf(f, "fsdp: %s on %d %s, strategy %s", model, ranks, where, strategy_name(c->strategy));
    if (c->strategy == STRAT_HSDP) fprintf(f, " (%d replicas)", c->replicas);
    fprintf(f, ", wrap %s, reshard_after_forward=%s, param %s, reduce %s", wrap,
            fsdp_reshard_after_forward(c) ? "true" : "false", dtype_name(c->param_dtype),
            dtype_name(c->reduce_dtype));
    if (c->output_dtype >= 0) fprintf(f, ", output %s", dtype_name((DType)c->output_dtype));
    if (c->param_dtype != DTYPE_FP32 && !c->cast_forward_inputs) fprintf(f, ", inputs uncast");
    if (c->offload != OFFLOAD_NONE) fprintf(f, ", offload %s", offload_name(c->offload));
    if (c->grad_accum > 1) fprintf(f, ", grad_accum %d", c->grad_accum);
    fprintf(f, "\n");
}

/* Where the rate goes over the run, in steps as the step lines number them (from 1), and the
 * PyTorch scheduler that gives the same rate at every step (engine/lr_schedule.h). */
void report_lr_schedule(FILE *f, const FsdpConfig *c, long steps) {
    const LrSchedule *s = &c->lr_schedule;
    double lr = c->lr, min = s->min_lr;
    long n = s->warmup_steps, m = steps - n;
    char main[128] = "";
    fprintf(f, "lr: ");
    if (n > 0) fprintf(f, "warm-up to %g over steps 1-%ld (%g x step/%ld), then ", lr, n, lr, n);
    switch (s->kind) {
    case LR_COSINE:
    case LR_LINEAR:
        fprintf(f, "%s to %g over steps %ld-%ld", lr_schedule_name(s->kind), min, n + 1, steps);
        if (s->kind == LR_COSINE)
            snprintf(main, sizeof main, "CosineAnnealingLR(T_max=%ld, eta_min=%g)", m, min);
        else
            snprintf(main, sizeof main, "LinearLR(start_factor=1, end_factor=%g, total_iters=%ld)",
                     lr > 0 ? min / lr : 1.0, m);
        break;
    case LR_STEP:
        fprintf(f, "%g times %g every %ld steps from step %ld", lr, s->gamma, s->step_size, n + 1);
        snprintf(main, sizeof main, "StepLR(step_size=%ld, gamma=%g)", s->step_size, s->gamma);
        break;
    default:
        fprintf(f, "constant %g", lr);
    }
    if (!n)
        fprintf(f, "; PyTorch: %s\n", main);
    else if (!main[0]) /* constant after the warm-up: one LambdaLR */
        fprintf(f, "; PyTorch: LambdaLR(lambda s: min(1, (s + 1) / %ld))\n", n);
    else
        fprintf(f,
                "; PyTorch: SequentialLR([LambdaLR(lambda s: (s + 1) / %ld), %s], "
                "milestones=[%ld])\n",
                n, main, n);
}

static void format_shape(const ParamSpec *ps, char *buf, size_t n) {
    size_t at = (size_t)snprintf(buf, n, "[");
    for (int d = 0; d < ps->ndim && at < n; d++)
        at += (size_t)snprintf(buf + at, n - at, d ? ", %lld" : "%lld", (long long)ps->shape[d]);
    if (at < n) snprintf(buf + at, n - at, "]");
}

void report_plan(FILE *f, const Plan *p) {
    const ModelDesc *m = p->model;
    char num[32];
    fprintf(f, "plan: %d unit%s, %s parameters; each parameter sharded on dim 0 over %d rank%s\n",
            p->nunits, p->nunits == 1 ? "" : "s", with_commas(m->total_numel, num, sizeof num),
            p->shard_size, p->shard_size == 1 ? "" : "s");
    for (int u = 0; u < p->nunits; u++) {
        const Unit *unit = &p->units[u];
        fprintf(f, "  unit %-2d %-16s %12s params:", u, unit->name,
                with_commas(unit->numel, num, sizeof num));
        if (unit->nparams > 4) { /* a transformer block: name its modules, count its tensors */
            for (int i = 0; i < unit->nmodules; i++)
                fprintf(f, "%s %s", i ? "," : "", m->modules[unit->modules[i]].name);
            fprintf(f, " (%d tensors)\n", unit->nparams);
            continue;
        }
        for (int i = 0; i < unit->nparams; i++) {
            const ParamSpec *ps = &m->params[unit->params[i].param];
            char shape[64];
            format_shape(ps, shape, sizeof shape);
            fprintf(f, "%s %s %s", i ? "," : "", ps->name, shape);
        }
        fprintf(f, "\n");
    }
}

/* What rank r keeps of unit u at rest, as symbols (toy) or an element count. */
static void owned_cell(const Plan *p, int u, int r, char *buf, size_t n) {
    int S = p->params_sharded ? p->shard_size : 1;
    int sr = p->params_sharded ? plan_shard_rank(p, r) : 0;
    if (!text_unit_symbols(p, u, S, sr, "", buf, n))
        snprintf(buf, n, "%zu elems", plan_param_numel(p, u, r));
    else if (!buf[0])
        snprintf(buf, n, "-");
}

static void print_padded(FILE *f, const char *s, size_t width) {
    fputs(s, f);
    for (size_t w = text_display_width(s); w < width; w++) fputc(' ', f);
}

static int is_symbolic(const Plan *p) {
    for (int u = 0; u < p->nunits; u++)
        if (!text_unit_is_symbolic(p, u)) return 0;
    return 1;
}

/* The toy: ranks as rows, units as columns, the scalars each rank keeps (the workshop's
 * table). */
static void ownership_by_symbol(FILE *f, const Plan *p) {
    enum { CELL = 160 };
    size_t width = 4;
    char cell[CELL];
    for (int u = 0; u < p->nunits; u++) {
        if (strlen(p->units[u].name) > width) width = strlen(p->units[u].name);
        for (int r = 0; r < p->world; r++) {
            owned_cell(p, u, r, cell, CELL);
            if (text_display_width(cell) > width) width = text_display_width(cell);
        }
    }
    fprintf(f, "         ");
    for (int u = 0; u < p->nunits; u++) print_padded(f, p->units[u].name, width + 3);
    fprintf(f, "\n");
    for (int r = 0; r < p->world; r++) {
        char label[16];
        snprintf(label, sizeof label, "GPU %d", r);
        fprintf(f, "  ");
        print_padded(f, label, 7);
        for (int u = 0; u < p->nunits; u++) {
            owned_cell(p, u, r, cell, CELL);
            print_padded(f, cell, width + 3);
        }
        fprintf(f, "\n");
    }
}

/* A real model: units as rows, ranks as columns (at most 8), elements each rank keeps. */
static void ownership_by_count(FILE *f, const Plan *p) {
    int shown = p->world < 8 ? p->world : 8;
    char num[32];
    fprintf(f, "  %-18s", "elements kept");
    for (int r = 0; r < shown; r++) fprintf(f, "  %11s%-2d", "GPU ", r);
    fprintf(f, "%s\n", shown < p->world ? "  ..." : "");
    for (int u = 0; u < p->nunits; u++) {
        fprintf(f, "  %-18s", p->units[u].name);
        for (int r = 0; r < shown; r++)
            fprintf(f, "  %13s", with_commas(plan_param_numel(p, u, r), num, sizeof num));
        fprintf(f, "\n");
    }
}

void report_ownership(FILE *f, const Plan *p) {
    fprintf(f, "ownership at rest (%s):\n",
            p->params_sharded ? "each rank keeps its dim-0 rows of every parameter"
                              : "every rank keeps a full replica");
    if (is_symbolic(p))
        ownership_by_symbol(f, p);
    else
        ownership_by_count(f, p);
}

/* What DDP would hold at rest: full params, grads and both Adam moments. */
static size_t ddp_rest(const Plan *p, MemCategory c) {
    size_t full = p->model->total_numel * sizeof(float);
    if (c == MEM_PARAM_SHARD || c == MEM_GRAD_SHARD) return full;
    if (c == MEM_OPTIM_STATE) return 2 * full;
    return 0;
}

/* Where each rank ran in a process of its own (--backend mpi), the process's peak resident
 * memory, measured, under its accounted peak: the data set, the program, MPI's buffers and the
 * CPU kernels' fp32 scratch are in it, none of which a GPU's accounting holds. */
static void report_resident_row(FILE *f, const RankMemory *mem, int shown) {
    if (!mem[0].resident_peak) return;
    char b[32];
    fprintf(f, "  %-19s", "process resident");
    for (int r = 0; r < shown; r++)
        fprintf(f, "  %11s %11s", "", format_bytes(mem[r].resident_peak, b, sizeof b));
    fprintf(f, "  (peak RSS, measured)\n");
}

/* Bytes per category for each shown rank, at rest and at a peak, and DDP's at rest. */
typedef struct MemoryRows {
    size_t rest[4], peak[4], ddp;
} MemoryRows;

static void memory_row(FILE *f, const char *label, const MemoryRows *m, int shown) {
    char a[32], b[32];
    fprintf(f, "  %-19s", label);
    for (int r = 0; r < shown; r++)
        fprintf(f, "  %11s %11s", format_bytes(m->rest[r], a, sizeof a),
                format_bytes(m->peak[r], b, sizeof b));
    fprintf(f, "  %12s\n", format_bytes(m->ddp, a, sizeof a));
}

/* The breakdown at a peak that a category's row shows: the GPU's for what the GPU holds (and
 * for the fp32 copies kept out of every total), the host's for what offload keeps off it. */
static const size_t *peak_of(const RankMemory *m, MemCategory c) {
    return mem_category_off_gpu(c) ? m->off_gpu.at_peak : m->on_gpu.at_peak;
}

/* A row per category in [the GPU's, the host's, neither's] that a shown rank or DDP holds, and
 * into *sum the rows' sums; returns how many rows it printed. */
static int category_rows(FILE *f, const Plan *p, const RankMemory *mem, int shown, int place,
                         MemoryRows *sum) {
    int rows = 0;
    for (int cat = 0; cat < MEM_CATEGORY_COUNT; cat++) {
        MemCategory c = (MemCategory)cat;
        int at = mem_category_on_gpu(c) ? 0 : mem_category_off_gpu(c) ? 1 : 2;
        if (at != place) continue;
        MemoryRows row = {.ddp = ddp_rest(p, c)};
        size_t any = row.ddp;
        for (int r = 0; r < shown; r++) {
            row.rest[r] = mem[r].rest[cat];
            row.peak[r] = peak_of(&mem[r], c)[cat];
            any += row.rest[r] + row.peak[r];
            sum->rest[r] += row.rest[r];
        }
        sum->ddp += row.ddp;
        if (!any) continue;
        memory_row(f, mem_category_label(c), &row, shown);
        rows++;
    }
    return rows;
}

/* One table: categories as rows, for each shown rank its bytes at rest and at its peak (the
 * breakdown at the moment the rank's GPU total peaked), then the DDP figure at rest. The GPU's
 * total counts only what the GPU holds: with offload the resting shards, grads and optimizer
 * state are host memory (or NVMe files), on rows and a total of their own below it, at the
 * moment that total peaked, as --memory-compare and fsdp plan keep them apart. */
void report_memory(FILE *f, const Plan *p, const FsdpConfig *c, const RankMemory *mem) {
    int shown = p->world < 4 ? p->world : 4;
    int off_gpu = 0, nvme = 0;
    for (int r = 0; r < shown; r++) {
        off_gpu |= mem[r].off_gpu.peak || mem[r].rest[MEM_HOST_OFFLOAD] || mem[r].rest[MEM_NVME];
        nvme |= mem[r].off_gpu.at_peak[MEM_NVME] || mem[r].rest[MEM_NVME];
    }
    fprintf(f,
            "memory per rank%s (accounted; peak: the breakdown when the rank's GPU total peaked%s; "
            "DDP: a rank at rest under DDP):\n",
            shown < p->world ? ", first 4" : "", off_gpu ? ", host rows when the host's did" : "");
    fprintf(f, "  %-19s", "");
    for (int r = 0; r < shown; r++) fprintf(f, "  %9s%-2d %9s%-2d", "rest GPU ", r, "peak GPU ", r);
    fprintf(f, "  %12s\n", "DDP at rest");
    MemoryRows gpu = {0}, host = {0}, apart = {0};
    category_rows(f, p, mem, shown, 0, &gpu);
    for (int r = 0; r < shown; r++) gpu.peak[r] = mem[r].on_gpu.peak;
    memory_row(f, "GPU total", &gpu, shown);
    if (off_gpu) {
        category_rows(f, p, mem, shown, 1, &host);
        for (int r = 0; r < shown; r++) host.peak[r] = mem[r].off_gpu.peak;
        memory_row(f, nvme ? "host + NVMe total" : "host total", &host, shown);
    }
    int copies = category_rows(f, p, mem, shown, 2, &apart);
    report_resident_row(f, mem, shown);
    if (copies)
        fprintf(f,
                "  (fp32 copies: the kernels here compute in fp32 only, so each gathered %s unit "
                "gets an fp32 copy;\n   left out of the totals, as a GPU computing in %s holds "
                "none)\n",
                dtype_name(c->param_dtype), dtype_name(c->param_dtype));
}

void report_step_text(FILE *f, const StepReport *r, int fp16, int lr, const char *clock) {
    fprintf(f, "step %6ld  epoch %3d  loss %.6f", r->step, r->epoch, r->stats.loss);
    if (lr) fprintf(f, "  lr %.3e", (double)r->lr);
    fprintf(f, "  step %.1f us (%s)", r->step_time * 1e6, clock);
    if (r->stats.grad_norm > 0) fprintf(f, "  grad_norm %.4f", r->stats.grad_norm);
    if (fp16)
        fprintf(f, "  loss_scale %g%s", r->stats.loss_scale, r->stats.skipped ? " (skipped)" : "");
    fprintf(f, "\n");
}

void report_memory_json(FILE *f, const RankMemory *m, int ranks) {
    size_t top = 0;
    for (int r = 0; r < ranks; r++)
        if (m[r].peak > top) top = m[r].peak;
    fprintf(f, "{\"peak_bytes\":%zu,\"rank_peaks\":[", top);
    for (int r = 0; r < ranks; r++) fprintf(f, "%s%zu", r ? "," : "", m[r].peak);
    fputs("]}\n", f);
}

void report_step_json(FILE *f, const StepReport *r) {
    fprintf(f,
            "{\"step\":%ld,\"epoch\":%d,\"loss\":%.9g,\"images_per_s\":%.6g,\"lr\":%.9g,"
            "\"grad_norm\":%.9g,\"loss_scale\":%.9g,\"skipped\":%s,\"step_time_s\":%.9g,"
            "\"wall_s\":%.6g}\n",
            r->step, r->epoch, r->stats.loss, r->images_per_s, r->lr, r->stats.grad_norm,
            r->stats.loss_scale, r->stats.skipped ? "true" : "false", r->step_time, r->wall_time);
}

static void format_duration(double s, char *buf, size_t n) {
    long t = s > 0 ? (long)(s + 0.5) : 0;
    if (t >= 3600)
        snprintf(buf, n, "%ld:%02ld:%02ld", t / 3600, t / 60 % 60, t % 60);
    else
        snprintf(buf, n, "%ld:%02ld", t / 60, t % 60);
}

void step_pace_add(StepPace *p, const StepReport *r) {
    p->seconds += r->wall_time;
    p->images += r->images_per_s * r->wall_time;
    p->steps++;
}

double step_pace_images_per_s(const StepPace *p) {
    return p->seconds > 0 ? p->images / p->seconds : 0.0;
}

/* Seconds left at the average pace so far: the run's steps still to do, each taking what a
 * step seen has taken on average. */
static double eta(const StepReport *r, const StepPace *p) {
    return p->steps ? p->seconds / (double)p->steps * (double)(r->steps - r->step) : 0.0;
}

static int epochs_of(const StepReport *r) {
    return (int)((r->steps + r->steps_per_epoch - 1) / r->steps_per_epoch);
}

/* The step counts the run's steps, as llm.c's "step 200/200" and a --max-steps trainer do: a
 * run of --steps 200 in an epoch of 234 ends at 200/200, not at 200/234; the epoch beside it
 * says where in the data the run is. */
void report_step_vit(FILE *f, const StepReport *r, const StepPace *p, int lr) {
    char left[32];
    format_duration(eta(r, p), left, sizeof left);
    fprintf(f, "epoch %d/%d  step %5ld/%ld  loss %.4f", r->epoch + 1, epochs_of(r), r->step,
            r->steps, r->stats.loss);
    if (lr) fprintf(f, "  lr %.3e", (double)r->lr);
    fprintf(f, "  %6.0f img/s  eta %s\n", step_pace_images_per_s(p), left);
}

void report_progress_bar(FILE *f, const StepReport *r, const StepPace *p) {
    enum { WIDTH = 24 };
    int filled = (int)(WIDTH * r->step / r->steps);
    char bar[WIDTH + 1], left[32];
    for (int i = 0; i < WIDTH; i++) bar[i] = i < filled ? '#' : '.';
    bar[WIDTH] = 0;
    format_duration(eta(r, p), left, sizeof left);
    fprintf(f, "\repoch %d/%d [%s] %5ld/%ld  loss %.4f  %6.0f img/s  eta %s ", r->epoch + 1,
            epochs_of(r), bar, r->step, r->steps, r->stats.loss, step_pace_images_per_s(p), left);
    if (r->step % r->steps_per_epoch == 0 || r->step == r->steps) fputc('\n', f);
}

/* The line of an evaluation: each epoch's (no images held out) as it always was; validation
 * after an epoch or at an --eval-every step, marked when its loss is the lowest so far; the
 * test images once at the end, beside validation. The wall time ends the line. */
void report_eval_text(FILE *f, const EvalReport *r) {
    if (r->kind == EVAL_VALIDATION && r->epoch_end)
        fprintf(f, "validation after epoch %d (step %ld)", r->epoch, r->step);
    else if (r->kind == EVAL_VALIDATION)
        fprintf(f, "validation at step %ld (epoch %d)", r->step, r->epoch);
    else
        fprintf(f, "%s after epoch %d (step %ld)", r->kind == EVAL_TEST ? "test" : "evaluation",
                r->epoch, r->step);
    if (isnan(r->accuracy)) /* a byte-level language model: each token a byte */
        fprintf(f, ": loss %.4f nats/byte, %.4f bits/byte%s, %ld sequences, %.1f s\n", r->loss,
                r->loss / M_LN2, r->best ? " (lowest so far)" : "", r->samples, r->wall_time);
    else
        fprintf(f, ": accuracy %.2f%% (%ld/%ld), loss %.4f%s, %.1f s\n", 100.0 * r->accuracy,
                r->correct, r->samples, r->loss, r->best ? " (lowest so far)" : "", r->wall_time);
}

void report_eval_json(FILE *f, const EvalReport *r) {
    if (r->kind == EVAL_VALIDATION && isnan(r->accuracy)) {
        fprintf(f,
                "{\"eval\":true,\"validation\":true,\"step\":%ld,\"epoch\":%d,"
                "\"val_loss\":%.9g,\"val_bits_per_byte\":%.9g,\"best\":%s,\"samples\":%ld,"
                "\"wall_s\":%.6g}\n",
                r->step, r->epoch, r->loss, r->loss / M_LN2, r->best ? "true" : "false", r->samples,
                r->wall_time);
        return;
    }
    if (r->kind == EVAL_VALIDATION) {
        fprintf(f,
                "{\"eval\":true,\"validation\":true,\"step\":%ld,\"epoch\":%d,"
                "\"val_accuracy\":%.6f,\"val_loss\":%.9g,\"best\":%s,\"correct\":%ld,"
                "\"samples\":%ld,\"wall_s\":%.6g}\n",
                r->step, r->epoch, r->accuracy, r->loss, r->best ? "true" : "false", r->correct,
                r->samples, r->wall_time);
        return;
    }
    fprintf(f,
            "{\"eval\":true,\"step\":%ld,\"epoch\":%d,\"test_accuracy\":%.6f,"
            "\"test_loss\":%.9g,\"correct\":%ld,\"samples\":%ld,\"wall_s\":%.6g}\n",
            r->step, r->epoch, r->accuracy, r->loss, r->correct, r->samples, r->wall_time);
}

void report_epoch_text(FILE *f, const EpochReport *r) {
    fprintf(f, "epoch %d/%d: training loss %.4f, the mean of its %ld step%s\n", r->epoch, r->epochs,
            r->loss, r->steps, r->steps == 1 ? "" : "s");
}

void report_epoch_json(FILE *f, const EpochReport *r) {
    fprintf(f, "{\"epoch_end\":true,\"epoch\":%d,\"step\":%ld,\"steps\":%ld,\"train_loss\":%.9g}\n",
            r->epoch, r->step, r->steps, r->loss);
}

void report_data(FILE *f, const Dataset *train, const char *split, long held_out,
                 const Dataset *eval, const char *eval_name, long steps, int epochs,
                 long global_batch) {
    if (held_out)
        fprintf(f,
                "data: FashionMNIST %s split, %ld images: %ld trained on, the last %ld held out "
                "for validation; tested on %s (%ld images) at the end\n",
                split, train->n, train->n - held_out, held_out, eval_name, eval->n);
    else
        fprintf(f, "data: FashionMNIST %s split, %ld images; evaluated on %s (%ld images)\n", split,
                train->n, eval_name, eval->n);
    if (epochs)
        fprintf(f, "run: %d epoch%s, %ld steps\n", epochs, epochs == 1 ? "" : "s", steps);
    else /* the epoch's length, which the step lines' epoch counts in */
        fprintf(f, "run: %ld steps (an epoch is %ld steps of %ld images)\n", steps,
                (train->n - held_out) / global_batch, global_batch);
}

/* "43 files", "1 file", and the files left out, if any */
static void text_sources(FILE *f, const TextInfo *info) {
    fprintf(f, "%ld file%s", info->files, info->files == 1 ? "" : "s");
    if (info->skipped)
        fprintf(f, "; %ld more hold a 0 byte, not text, and are left out", info->skipped);
}

void report_text(FILE *f, const char *path, const TextInfo *info, const Dataset *text,
                 long held_out, long steps, int epochs, long global_batch) {
    char n[32], b[32];
    fprintf(f, "data: %s (", path);
    text_sources(f, info);
    fprintf(f, "), %s bytes: %s sequences of %zu bytes (each byte predicts the next)\n",
            with_commas((size_t)info->bytes, b, sizeof b),
            with_commas((size_t)text->n, n, sizeof n), text->in_elems);
    if (info->cache[0])
        fprintf(f, "tokens: %s, %s (every rank maps it read-only)\n", info->cache,
                info->from_cache ? "made before" : "made now");
    else
        fprintf(f, "tokens: in memory (%s)\n", info->why_not);
    if (held_out)
        fprintf(f, "validation: the last %s sequences, held out\n",
                with_commas((size_t)held_out, n, sizeof n));
    if (epochs)
        fprintf(f, "run: %d epoch%s, %ld steps\n", epochs, epochs == 1 ? "" : "s", steps);
    else
        fprintf(f, "run: %ld steps (an epoch is %ld steps of %ld sequences)\n", steps,
                (text->n - held_out) / global_batch, global_batch);
}

void report_step_lm(FILE *f, const StepReport *r, const StepPace *p, int seq, int lr) {
    char left[32];
    format_duration(eta(r, p), left, sizeof left);
    fprintf(f, "step %5ld/%ld  epoch %d  loss %.4f", r->step, r->steps, r->epoch + 1,
            r->stats.loss);
    if (lr) fprintf(f, "  lr %.3e", (double)r->lr);
    fprintf(f, "  %7.0f tok/s  eta %s\n", step_pace_images_per_s(p) * seq, left);
}

void report_final_params(FILE *f, const ModelDesc *m, const float *params) {
    size_t at = 0;
    for (int i = 0; i < m->nparams; i++) {
        const ParamSpec *ps = &m->params[i];
        if (ps->numel > 8) {
            at += ps->numel;
            continue;
        }
        fprintf(f, "  %-12s", ps->name);
        for (size_t j = 0; j < ps->numel; j++) {
            char sym[32];
            text_subscript(sym, sizeof sym, ps->symbol[0] ? ps->symbol : "w", j);
            fprintf(f, "  %s = %+.4f", sym, params[at++]);
        }
        fprintf(f, "\n");
    }
}

int report_dump_params(FILE *f, const char *path, const ModelDesc *m, const float *params,
                       Err *err) {
    size_t at = 0;
    int bad = 0;
    /* the first write that fails stops it: errno then says why (a full disk: ENOSPC) */
    for (int i = 0; !bad && i < m->nparams; i++)
        for (size_t j = 0; !bad && j < m->params[i].numel; j++)
            bad = fprintf(f, "%s %zu %.9e\n", m->params[i].name, j, params[at++]) < 0;
    if (bad || fflush(f) || ferror(f))
        return err_set(err, ERR_IO, "could not write the parameters to %s: %s", path,
                       strerror(errno));
    return 0;
}

void report_memory_compare(FILE *f, const CompareRow *rows, int n, size_t gpu_bytes,
                           const char *profile) {
    char b[8][32], cap[32];
    fprintf(f,
            "memory at each setting's peak (the rank with the largest GPU peak; GPU: what the "
            "GPU holds then; host: at its own peak; fits: %s's %s):\n",
            profile, format_bytes(gpu_bytes, cap, sizeof cap));
    fprintf(f, "  %-24s %10s %10s %10s %10s %10s %10s %10s  %s\n", "setting", "params", "grads",
            "Adam", "activations", "comm", "GPU", "host", "fits");
    for (int i = 0; i < n; i++) {
        /* the GPU's columns at the GPU's peak; host memory at its own */
        const size_t *at = rows[i].peak.on_gpu.at_peak;
        size_t gpu = rows[i].peak.on_gpu.peak;
        size_t cols[7] = {at[MEM_PARAM_SHARD] + at[MEM_PARAM_UNSHARDED],
                          at[MEM_GRAD_SHARD] + at[MEM_GRAD_UNSHARDED],
                          at[MEM_OPTIM_STATE],
                          at[MEM_ACTIVATIONS] + at[MEM_AC_INPUT],
                          at[MEM_COMM_BUFFER],
                          gpu,
                          rows[i].peak.off_gpu.peak};
        for (int c = 0; c < 7; c++) format_bytes(cols[c], b[c], sizeof b[c]);
        fprintf(f, "  %-24s %10s %10s %10s %10s %10s %10s %10s  %s\n", rows[i].name, b[0], b[1],
                b[2], b[3], b[4], b[5], b[6], gpu <= gpu_bytes ? "yes" : "no");
    }
    fprintf(f, "settings:\n");
    for (int i = 0; i < n; i++) fprintf(f, "  %-24s %s\n", rows[i].name, rows[i].flags);
}

void report_stream_check(FILE *f, size_t accesses, size_t hazards, int json) {
    if (json) {
        fprintf(f, "{\"stream_check\":{\"accesses\":%zu,\"hazards\":%zu}}\n", accesses, hazards);
        return;
    }
    char line[128];
    stream_check_summary(accesses, hazards, line, sizeof line);
    fprintf(f, "%s\n", line);
}

void report_lr_curve_flags(char *buf, size_t n, const LrCurve *c) {
    const LrSchedule *s = &c->schedule;
    int at = snprintf(buf, n, "--lr-schedule %s --lr %g", lr_schedule_name(s->kind), (double)c->lr);
    if (s->warmup_steps > 0 && at >= 0 && (size_t)at < n)
        at += snprintf(buf + at, n - (size_t)at, " --warmup-steps %ld", s->warmup_steps);
    if (at < 0 || (size_t)at >= n) return;
    if (s->kind == LR_COSINE || s->kind == LR_LINEAR)
        snprintf(buf + at, n - (size_t)at, " --min-lr %g over %ld steps", (double)s->min_lr,
                 c->total_steps);
    else if (s->kind == LR_STEP)
        snprintf(buf + at, n - (size_t)at, " --step-size %ld --gamma %g", s->step_size, s->gamma);
}

const char *report_si_bytes(double b, char *buf, size_t n) {
    static const char *const units[] = {"B", "KB", "MB", "GB", "TB", "PB"};
    int u = 0;
    while (b >= 1000.0 && u < 5) b /= 1000.0, u++;
    snprintf(buf, n, u ? "%.2f %s" : "%.0f %s", b, units[u]);
    return buf;
}

const char *report_seconds(double t, char *buf, size_t n) {
    if (t >= 1.0)
        snprintf(buf, n, "%.3f s", t);
    else
        snprintf(buf, n, "%.3f ms", t * 1e3);
    return buf;
}
