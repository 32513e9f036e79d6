/* ckpt (command): `fsdp ckpt inspect|consolidate` on the sharded checkpoints train writes. */
#include "cmd/ckpt.h"

#include "cmd/commands.h"

#include <errno.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "cmd/report.h"
#include "io/output_path.h"
#include "io/safetensors.h"
#include "jobs/export_hf.h"
#include "models/hf.h"
#include "models/kinds.h"

enum { PATH_MAX_LEN = 4096 };

/* ---------------------------------------------------------------- arguments */

void ckpt_help(FILE *f) {
    fputs("usage: ./fsdp ckpt inspect D\n"
          "       ./fsdp ckpt consolidate D -o FILE\n"
          "       ./fsdp ckpt consolidate D --hf DIR\n"
          "\n"
          "Tools for the sharded checkpoints that train --checkpoint-dir writes. D is one\n"
          "checkpoint (DIR/step-NNNNNNNN, or DIR/best: the lowest validation loss of a run\n"
          "with --val-size) or a --checkpoint-dir, meaning its newest complete checkpoint.\n"
          "\n"
          "  inspect D              the format version, model, strategy, world size and step;\n"
          "                         each tensor's shape, and which ranks hold which rows of its\n"
          "                         parameters and Adam moments (adam_m, adam_v); each rank\n"
          "                         file's totals. Then checks that every tensor's rows are held\n"
          "                         exactly once for each kind and verifies every piece's CRC32.\n"
          "  consolidate D -o FILE  the parameters as one safetensors file (fp32, PyTorch's\n"
          "                         names and shapes, the model in __metadata__) that\n"
          "                         train --init-from FILE loads. Written a tensor at a time (one\n"
          "                         tensor in memory), verifying each piece's CRC32, into a\n"
          "                         temporary file beside FILE renamed into place when complete:\n"
          "                         a damaged checkpoint leaves FILE as it was.\n"
          "  consolidate D --hf DIR a language model (transformer, llama) as a Hugging Face\n"
          "                         folder: config.json and model.safetensors, which\n"
          "                         transformers' from_pretrained loads as LlamaForCausalLM or\n"
          "                         GPT2LMHeadModel (GPT-2's Conv1D weights transposed).\n"
          "  -o, --output FILE      where consolidate writes its safetensors file\n"
          "  --hf DIR               ... or its Hugging Face folder (made if missing)\n"
          "\n"
          "Exit status: 0 when all is well, 2 for a damaged checkpoint or bad arguments.\n"
          "\n"
          "example: ./fsdp ckpt consolidate ck -o model.safetensors\n",
          f);
}

int ckpt_args_parse(CkptArgs *a, int argc, char **argv, Err *err) {
    memset(a, 0, sizeof *a);
    for (int i = 0; i < argc; i++)
        if (!strcmp(argv[i], "--help") || !strcmp(argv[i], "-h")) return 1;
    if (argc < 1)
        return err_set(err, ERR_USAGE,
                       "ckpt needs a tool: inspect or consolidate (see ./fsdp ckpt --help)");
    if (!strcmp(argv[0], "help")) return 1;
    if (!strcmp(argv[0], "inspect"))
        a->tool = CKPT_INSPECT;
    else if (!strcmp(argv[0], "consolidate"))
        a->tool = CKPT_CONSOLIDATE;
    else
        return err_set(err, ERR_USAGE,
                       "unknown ckpt tool '%s': inspect or consolidate (see ./fsdp ckpt --help)",
                       argv[0]);
    const char *tool = argv[0];
    for (int i = 1; i < argc; i++) {
        const char *s = argv[i];
        if (a->tool == CKPT_CONSOLIDATE && (!strcmp(s, "-o") || !strcmp(s, "--output"))) {
            if (i + 1 >= argc || !argv[i + 1][0])
                return err_set(err, ERR_USAGE, "%s needs a file", s);
            a->out = argv[++i];
        } else if (a->tool == CKPT_CONSOLIDATE && !strcmp(s, "--hf")) {
            if (i + 1 >= argc || !argv[i + 1][0])
                return err_set(err, ERR_USAGE, "--hf needs a folder");
            a->hf = argv[++i];
        } else if (s[0] == '-' && s[1]) {
            return err_set(err, ERR_USAGE, "ckpt %s: unknown flag %s (see ./fsdp ckpt --help)",
                           tool, s);
        } else if (a->path) {
            return err_set(err, ERR_USAGE, "ckpt %s takes one checkpoint (got %s and %s)", tool,
                           a->path, s);
        } else {
            a->path = s;
        }
    }
    if (!a->path || !a->path[0])
        return err_set(err, ERR_USAGE,
                       "ckpt %s needs a checkpoint: D/step-NNNNNNNN or a "
                       "--checkpoint-dir",
                       tool);
    if (a->tool == CKPT_CONSOLIDATE && !a->out && !a->hf)
        return err_set(err, ERR_USAGE,
                       "ckpt consolidate needs -o FILE (where to write the safetensors) or --hf "
                       "DIR");
    if (a->out && a->hf)
        return err_set(err, ERR_USAGE, "ckpt consolidate writes -o FILE or --hf DIR, not both");
    return 0;
}

/* ---------------------------------------------------------------- the checkpoint */

int ckpt_resolve(const char *path, char *out, size_t n, Err *err) {
    struct stat sb;
    if (stat(path, &sb) != 0)
        return err_set(err, ERR_USAGE, "no checkpoint at %s: %s", path, strerror(errno));
    if (!S_ISDIR(sb.st_mode))
        return err_set(err, ERR_USAGE, "%s is not a checkpoint: a checkpoint is a directory", path);
    char meta[PATH_MAX_LEN + 16];
    if ((size_t)snprintf(meta, sizeof meta, "%s/meta.json", path) >= sizeof meta ||
        strlen(path) >= n)
        return err_set(err, ERR_USAGE, "checkpoint path is too long: %.200s...", path);
    if (access(meta, F_OK) == 0) {
        snprintf(out, n, "%s", path);
        return 0;
    }
    int rc = checkpoint_latest(path, out, n, err);
    if (!rc && !out[0])
        rc =
            err_set(err, ERR_USAGE,
                    "%s holds no checkpoint: neither meta.json nor a complete step-NNNNNNNN", path);
    return rc;
}

static int ckpt_open(CkptMeta *m, const char *path, Err *err) {
    char dir[PATH_MAX_LEN];
    int rc = ckpt_resolve(path, dir, sizeof dir, err);
    return rc ? rc : ckpt_meta_read(m, dir, &model_kinds, NULL, err);
}

/* The first position at or after `at` of a piece of (tensor, kind) or later. */
static size_t group_start(const CkptMeta *m, const CkptPiece *s, size_t at, int tensor, int kind) {
    while (at < m->npieces &&
           (s[at].tensor < tensor || (s[at].tensor == tensor && (int)s[at].kind < kind)))
        at++;
    return at;
}

static int in_group(const CkptMeta *m, const CkptPiece *s, size_t at, int tensor, int kind) {
    return at < m->npieces && s[at].tensor == tensor && (int)s[at].kind == kind;
}

/* ---------------------------------------------------------------- inspect */

static void file_bytes(char *buf, size_t n, unsigned long long b) {
    if (b < 10 * 1024)
        snprintf(buf, n, "%llu B", b);
    else if (b < 10ull * 1024 * 1024)
        snprintf(buf, n, "%.1f KiB", (double)b / 1024.0);
    else if (b < 10ull * 1024 * 1024 * 1024)
        snprintf(buf, n, "%.1f MiB", (double)b / 1048576.0);
    else
        snprintf(buf, n, "%.1f GiB", (double)b / 1073741824.0);
}

static void print_shape(FILE *f, const CkptTensor *t, int width) {
    char s[96];
    size_t at = (size_t)snprintf(s, sizeof s, "[");
    for (int d = 0; d < t->ndim && at < sizeof s; d++)
        at +=
            (size_t)snprintf(s + at, sizeof s - at, d ? ", %lld" : "%lld", (long long)t->shape[d]);
    if (at < sizeof s) snprintf(s + at, sizeof s - at, "]");
    fprintf(f, "  %-*s", width, s);
}

static void print_header(FILE *f, const CkptMeta *m) {
    fprintf(f, "checkpoint  %s\n", m->path);
    fprintf(f, "format      fsdp-checkpoint version %d\n", m->version);
    fprintf(f, "model       %s\n", m->model[0] ? m->model : "(not recorded)");
    if (m->nconfig) {
        fputs("config     ", f);
        for (int i = 0; i < m->nconfig; i++)
            fprintf(f, "%s %s %s", i ? "," : "", m->config[2 * i], m->config[2 * i + 1]);
        fputc('\n', f);
    }
    fprintf(f, "strategy    %s\n", m->strategy[0] ? m->strategy : "(not recorded)");
    fprintf(f, "world size  %d\n", m->world);
    fprintf(f, "step        %ld (Adam steps %ld, loss scale %g, good steps %d)\n", m->step,
            m->counters.steps, (double)m->counters.loss_scale, m->counters.good_steps);
    if (m->validated)
        fprintf(f, "validation  loss %.6f on the split's last %ld images, held out\n", m->val_loss,
                m->held_out);
    else if (m->held_out)
        fprintf(f, "validation  none at this step (the split's last %ld images held out)\n",
                m->held_out);
    if (m->has_lr_curve) {
        char flags[256];
        report_lr_curve_flags(flags, sizeof flags, &m->lr_curve);
        fprintf(f, "lr schedule %s\n", flags);
    }
}

/* One line per tensor: name, shape, numel, then for each kind the ranks' rows and the bytes. */
static void print_tensors(FILE *f, const CkptMeta *m, const CkptPiece *order) {
    int name_w = 4, shape_w = 5, numel_w = 1;
    size_t numel = 0;
    for (int t = 0; t < m->ntensors; t++) {
        const CkptTensor *ct = &m->tensors[t];
        int len = (int)strlen(ct->name), shape = 2;
        for (int d = 0; d < ct->ndim; d++)
            shape += snprintf(NULL, 0, "%lld", (long long)ct->shape[d]) + (d ? 2 : 0);
        if (len > name_w) name_w = len;
        if (shape > shape_w) shape_w = shape;
        int digits = snprintf(NULL, 0, "%zu", ct->numel);
        if (digits > numel_w) numel_w = digits;
        numel += ct->numel;
    }
    fprintf(f,
            "\n%d tensors, %zu parameters. Rows held by each rank, per kind (rN a-b: rank N "
            "holds rows a to b-1), and bytes:\n",
            m->ntensors, numel);
    size_t at = 0;
    for (int t = 0; t < m->ntensors; t++) {
        const CkptTensor *ct = &m->tensors[t];
        fprintf(f, "  %-*s", name_w, ct->name);
        print_shape(f, ct, shape_w);
        fprintf(f, "  numel %*zu", numel_w, ct->numel);
        for (int k = 0; k < STATE_KIND_COUNT; k++) {
            at = group_start(m, order, at, t, k);
            unsigned long long bytes = 0;
            int any = 0;
            fprintf(f, "  %s", state_kind_name((StateKind)k));
            for (; in_group(m, order, at, t, k); at++) {
                const CkptPiece *p = &order[at];
                bytes += p->bytes;
                if (!p->rows) continue; /* an empty shard holds nothing */
                fprintf(f, " r%d %zu-%zu", p->rank, p->row_begin, p->row_begin + p->rows);
                any = 1;
            }
            char b[32];
            file_bytes(b, sizeof b, bytes);
            fprintf(f, "%s (%s)", any ? "" : " none", b);
        }
        fputc('\n', f);
    }
}

/* What each rank file holds by meta.json: its pieces and their bytes by kind. */
typedef struct RankTotals {
    size_t pieces;
    unsigned long long by_kind[STATE_KIND_COUNT], bytes;
} RankTotals;

static RankTotals *rank_totals(const CkptMeta *m) {
    RankTotals *t = calloc((size_t)m->world, sizeof *t);
    for (size_t i = 0; t && i < m->npieces; i++) {
        const CkptPiece *p = &m->pieces[i];
        RankTotals *r = &t[p->rank];
        r->pieces++;
        r->by_kind[p->kind] += p->bytes;
        r->bytes += p->bytes;
    }
    return t;
}

/* Each rank file: its pieces and their bytes by kind (the reader checked each file has exactly
 * the bytes of its pieces). */
static void print_rank_files(FILE *f, const CkptMeta *m, const RankTotals *t) {
    fputs("\nrank files\n", f);
    size_t total_pieces = 0;
    unsigned long long total = 0;
    for (int r = 0; r < m->world; r++) {
        char b[32];
        file_bytes(b, sizeof b, t[r].bytes);
        fprintf(f, "  rank-%05d.bin  %zu pieces  %s (%llu bytes:", r, t[r].pieces, b, t[r].bytes);
        for (int k = 0; k < STATE_KIND_COUNT; k++) {
            file_bytes(b, sizeof b, t[r].by_kind[k]);
            fprintf(f, "%s %s %s", k ? "," : "", state_kind_name((StateKind)k), b);
        }
        fputs(")\n", f);
        total_pieces += t[r].pieces;
        total += t[r].bytes;
    }
    char b[32];
    file_bytes(b, sizeof b, total);
    fprintf(f, "  total           %zu pieces  %s (%llu bytes)\n", total_pieces, b, total);
}

int ckpt_inspect(FILE *f, const char *path, Err *err) {
    CkptMeta m;
    int rc = ckpt_open(&m, path, err); /* checks meta.json, the coverage, the files' sizes */
    if (rc) return rc;
    /* every piece read first: a damaged checkpoint prints its one line and nothing else */
    for (size_t i = 0; !rc && i < m.npieces; i++) rc = ckpt_piece_verify(&m, &m.pieces[i], err);
    RankTotals *totals = rc ? NULL : rank_totals(&m);
    if (!rc && !totals) rc = err_set(err, ERR_NOMEM, "out of memory inspecting %s", m.path);
    if (!rc) {
        print_header(f, &m);
        print_tensors(f, &m, m.by_rows);
        print_rank_files(f, &m, totals);
    }
    if (!rc)
        fprintf(
            f,
            "\nall %zu pieces verified (CRC32, every value finite); every tensor's rows are held "
            "exactly once for param, adam_m and adam_v\n",
            m.npieces);
    free(totals);
    ckpt_meta_free(&m);
    return rc;
}

/* ---------------------------------------------------------------- consolidate */

/* The file's tensors (names and shapes from meta.json, fp32) and its __metadata__. */
typedef struct Layout {
    StTensorOut *tensors;
    int64_t *shapes; /* MODEL_MAX_NDIM per tensor */
    const char **meta_kv;
    int n_meta;
    char step[32];
} Layout;

static void layout_free(Layout *l) {
    free(l->tensors);
    free(l->shapes);
    free(l->meta_kv);
}

static int layout_make(Layout *l, const CkptMeta *m, Err *err) {
    size_t n = (size_t)m->ntensors + 1;
    l->tensors = calloc(n, sizeof *l->tensors);
    l->shapes = calloc(n * MODEL_MAX_NDIM, sizeof *l->shapes);
    l->meta_kv = calloc(2 * ((size_t)m->nconfig + 2), sizeof *l->meta_kv);
    if (!l->tensors || !l->shapes || !l->meta_kv)
        return err_set(err, ERR_NOMEM, "out of memory consolidating %s", m->path);
    for (int t = 0; t < m->ntensors; t++) {
        const CkptTensor *ct = &m->tensors[t];
        int64_t *shape = l->shapes + (size_t)t * MODEL_MAX_NDIM;
        memcpy(shape, ct->shape, (size_t)ct->ndim * sizeof *shape);
        l->tensors[t] =
            (StTensorOut){.name = ct->name, .dtype = "F32", .ndim = ct->ndim, .shape = shape};
    }
    snprintf(l->step, sizeof l->step, "%ld", m->step);
    const char **kv = l->meta_kv;
    kv[0] = "fsdp_model";
    kv[1] = m->model[0] ? m->model : "unknown";
    kv[2] = "fsdp_step";
    kv[3] = l->step;
    l->n_meta = 2;
    for (int i = 0; i < m->nconfig; i++, l->n_meta++) {
        kv[2 * l->n_meta] = m->config[2 * i];
        kv[2 * l->n_meta + 1] = m->config[2 * i + 1];
    }
    return 0;
}

/* Tensor t's parameters, assembled from its pieces (coverage checked) into full. */
static int read_tensor(const CkptMeta *m, const CkptPiece *order, size_t *at, int t, float *full,
                       Err *err) {
    *at = group_start(m, order, *at, t, STATE_PARAM);
    int rc = 0;
    for (; !rc && in_group(m, order, *at, t, STATE_PARAM); (*at)++) {
        const CkptPiece *p = &order[*at];
        if (p->rows) rc = ckpt_piece_read(m, p, full + p->row_begin * m->tensors[t].row_elems, err);
    }
    return rc;
}

/* -o must name a file (not a directory) outside the checkpoint it is made from. */
static int check_output(const char *out, const CkptMeta *m, Err *err) {
    struct stat sb;
    if (stat(out, &sb) == 0 && S_ISDIR(sb.st_mode))
        return err_set(err, ERR_USAGE, "-o %s is a directory; give a file", out);
    NamedPath o = {"-o", out};
    int rc = output_paths_check(&o, 1, NULL, 0, err); /* a device or a FIFO: never replaced */
    if (rc) return rc;
    char parent[PATH_MAX_LEN];
    path_folder(out, parent, sizeof parent);
    char *a = realpath(parent, NULL), *b = realpath(m->path, NULL);
    int inside = a && b && !strcmp(a, b);
    free(a);
    free(b);
    if (inside)
        return err_set(err, ERR_USAGE, "-o %s is inside the checkpoint %s; write it elsewhere", out,
                       m->path);
    return 0;
}

/* Where each whole tensor goes, in meta.json's order: a safetensors file, a Hugging Face folder. */
typedef int (*TensorSink)(void *sink, const float *full, Err *err);

static int to_safetensors(void *w, const float *full, Err *err) {
    return st_writer_tensor(w, full, err);
}

static int to_hf_folder(void *w, const float *full, Err *err) {
    return hf_writer_next(w, full, err);
}

static int write_tensors(const CkptMeta *m, TensorSink put, void *sink, Err *err) {
    size_t at = 0;
    int rc = 0;
    for (int t = 0; !rc && t < m->ntensors; t++) {
        /* one tensor in memory at a time */
        float *full = malloc(m->tensors[t].numel * sizeof *full + 1);
        if (!full)
            return err_set(err, ERR_NOMEM, "out of memory for %s (%zu parameters)",
                           m->tensors[t].name, m->tensors[t].numel);
        rc = read_tensor(m, m->by_rows, &at, t, full, err);
        if (!rc) rc = put(sink, full, err);
        free(full);
    }
    return rc;
}

int ckpt_consolidate(FILE *f, const char *path, const char *out, Err *err) {
    CkptMeta m;
    int rc = ckpt_open(&m, path, err);
    if (rc) return rc;
    rc = check_output(out, &m, err);
    Layout l = {0};
    StWriter *w = NULL;
    if (!rc) rc = layout_make(&l, &m, err);
    if (!rc) {
        rc = st_writer_open(&w, out, l.tensors, m.ntensors, l.meta_kv, l.n_meta, err);
        if (rc == ERR_IO) rc = ERR_USAGE; /* -o where no file can be made is bad input */
    }
    if (!rc) rc = write_tensors(&m, to_safetensors, w, err);
    if (!rc)
        rc = st_writer_commit(w, err);
    else
        st_writer_abort(w);
    if (!rc) {
        size_t numel = 0;
        for (int t = 0; t < m.ntensors; t++) numel += m.tensors[t].numel;
        char b[32];
        file_bytes(b, sizeof b, (unsigned long long)numel * sizeof(float));
        fprintf(f, "wrote %s: %d tensors, %zu parameters (%s of fp32) from %s (%s, step %ld)\n",
                out, m.ntensors, numel, b, m.path, m.model[0] ? m.model : "model", m.step);
    }
    layout_free(&l);
    ckpt_meta_free(&m);
    return rc;
}

/* ---------------------------------------------------------------- consolidate --hf */

/* The model meta.json describes, built again from its name and sizes (ckpt_meta_read has
 * checked both). */
static int meta_model(const CkptMeta *m, ModelDesc *out, Err *err) {
    const ModelKind *kind = model_kind_named(&model_kinds, m->model);
    if (!kind) return err_set(err, ERR_USAGE, "%s: unknown model '%s'", m->path, m->model);
    long sizes[MODEL_MAX_SIZES] = {0};
    for (int k = 0; k < kind->nsizes; k++)
        for (int i = 0; i < m->nconfig; i++)
            if (!strcmp(m->config[2 * i], kind->sizes[k]))
                sizes[k] = strtol(m->config[2 * i + 1], NULL, 10);
    char described[256];
    return kind->build(m->path, sizes, out, described, sizeof described, err);
}

/* The model's parameter called name (meta.json's tensors are the model's, name for name). */
static int param_named(const ModelDesc *d, const char *name) {
    for (int i = 0; i < d->nparams; i++)
        if (!strcmp(d->params[i].name, name)) return i;
    return -1;
}

int ckpt_consolidate_hf(FILE *f, const char *path, const char *dir, Err *err) {
    CkptMeta m;
    int rc = ckpt_open(&m, path, err);
    if (rc) return rc;
    ModelDesc d = {0};
    int *order = NULL;
    HfWriter *w = NULL;
    rc = meta_model(&m, &d, err);
    if (!rc && !(order = malloc((size_t)m.ntensors * sizeof *order + 1)))
        rc = err_set(err, ERR_NOMEM, "out of memory consolidating %s", m.path);
    for (int t = 0; !rc && t < m.ntensors; t++)
        if ((order[t] = param_named(&d, m.tensors[t].name)) < 0)
            rc = err_set(err, ERR_USAGE, "%s: %s is no parameter of %s", m.path, m.tensors[t].name,
                         m.model);
    if (!rc) rc = hf_writer_open(&w, &d, order, m.ntensors, dir, err);
    if (!rc) rc = write_tensors(&m, to_hf_folder, w, err);
    if (!rc)
        rc = hf_writer_commit(w, err);
    else
        hf_writer_abort(w);
    if (!rc)
        fprintf(f,
                "wrote %s: config.json and model.safetensors (%s, %d tensors) from %s (step %ld)\n",
                dir, hf_class(&d), m.ntensors, m.path, m.step);
    free(order);
    model_desc_free(&d);
    ckpt_meta_free(&m);
    return rc;
}

/* inspect or consolidate, as the command line says */
static int ckpt_run(const CkptArgs *a, Err *err) {
    if (a->tool == CKPT_INSPECT) return ckpt_inspect(stdout, a->path, err);
    if (a->hf) return ckpt_consolidate_hf(stdout, a->path, a->hf, err);
    return ckpt_consolidate(stdout, a->path, a->out, err);
}

CMD_PARSE_AND_RUN(cmd_ckpt, CkptArgs, ckpt_args_parse, ckpt_help, ckpt_run)
