/* export_hf: the Hugging Face folder: model.safetensors streamed through io's writer with
 * models/hf's names and shapes (a Conv1D weight transposed on the way), config.json beside it. */
#include "jobs/export_hf.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "io/atomic_file.h"
#include "io/safetensors.h"
#include "models/hf.h"

struct HfWriter {
    const ModelDesc *m;
    HfTensor *tensors; /* by parameter */
    int *order;
    int n, next;
    StWriter *st;
    float *scratch; /* a transposed tensor */
    size_t scratch_n;
    char config_path[4200];
    char config[4096];
};

static void writer_free(HfWriter *w) {
    free(w->tensors);
    free(w->order);
    free(w->scratch);
    free(w);
}

/* dir, made if missing (one level: its parent must be there). */
static int make_dir(const char *dir, Err *err) {
    struct stat sb;
    if (stat(dir, &sb) == 0)
        return S_ISDIR(sb.st_mode) ? 0
                                   : err_set(err, ERR_USAGE, "%s is a file; give a folder", dir);
    if (mkdir(dir, 0755) != 0)
        return err_set(err, ERR_USAGE, "cannot make the folder %s: %s", dir, strerror(errno));
    return 0;
}

/* The safetensors header's tensors, in the order they will come. */
static int open_safetensors(HfWriter *w, const char *dir, Err *err) {
    StTensorOut *out = calloc((size_t)w->n, sizeof *out);
    if (!out) return err_set(err, ERR_NOMEM, "out of memory writing %s", dir);
    for (int i = 0; i < w->n; i++) {
        const HfTensor *t = &w->tensors[w->order[i]];
        out[i] = (StTensorOut){.name = t->name, .dtype = "F32", .ndim = t->ndim, .shape = t->shape};
    }
    char path[4200];
    snprintf(path, sizeof path, "%s/model.safetensors", dir);
    const char *meta[] = {"format", "pt"}; /* what transformers' loader looks for */
    int rc = st_writer_open(&w->st, path, out, w->n, meta, 1, err);
    free(out);
    return rc == ERR_IO ? ERR_USAGE : rc; /* a folder where no file can be made is bad input */
}

int hf_writer_open(HfWriter **out, const ModelDesc *m, const int *order, int n, const char *dir,
                   Err *err) {
    *out = NULL;
    if (n != m->nparams) return err_set(err, ERR_INTERNAL, "%d of %d tensors", n, m->nparams);
    if (strlen(dir) > 4000) return err_set(err, ERR_USAGE, "the folder's path is too long");
    HfWriter *w = calloc(1, sizeof *w);
    if (w) {
        w->tensors = calloc((size_t)n, sizeof *w->tensors);
        w->order = malloc((size_t)n * sizeof *w->order);
    }
    if (!w || !w->tensors || !w->order) {
        if (w) writer_free(w);
        return err_set(err, ERR_NOMEM, "out of memory writing %s", dir);
    }
    w->m = m, w->n = n;
    memcpy(w->order, order, (size_t)n * sizeof *order);
    snprintf(w->config_path, sizeof w->config_path, "%s/config.json", dir);
    int rc = hf_tensors(m, w->tensors, err);
    if (!rc) rc = hf_config_json(m, w->config, sizeof w->config, err);
    if (!rc) rc = make_dir(dir, err);
    if (!rc) rc = open_safetensors(w, dir, err);
    if (rc) {
        writer_free(w);
        return rc;
    }
    *out = w;
    return 0;
}

int hf_writer_next(HfWriter *w, const float *values, Err *err) {
    if (w->next >= w->n) return err_set(err, ERR_INTERNAL, "more tensors than the model's");
    int param = w->order[w->next++];
    const ParamSpec *p = &w->m->params[param];
    if (!w->tensors[param].transposed) return st_writer_tensor(w->st, values, err);
    if (p->numel > w->scratch_n) {
        float *more = realloc(w->scratch, p->numel * sizeof *more);
        if (!more) return err_set(err, ERR_NOMEM, "out of memory transposing %s", p->name);
        w->scratch = more, w->scratch_n = p->numel;
    }
    hf_transpose(w->scratch, values, (size_t)p->shape[0], (size_t)p->shape[1]);
    return st_writer_tensor(w->st, w->scratch, err);
}

static int write_config(const HfWriter *w, Err *err) {
    AtomicFile o;
    int rc = atomic_open(&o, w->config_path, err);
    if (rc) return rc;
    if (fputs(w->config, o.f) < 0) {
        atomic_discard(&o);
        return err_set(err, ERR_IO, "cannot write %s", w->config_path);
    }
    return atomic_commit(&o, err);
}

int hf_writer_commit(HfWriter *w, Err *err) {
    int rc =
        w->next == w->n ? 0 : err_set(err, ERR_INTERNAL, "%d of %d tensors written", w->next, w->n);
    if (rc)
        st_writer_abort(w->st);
    else
        rc = st_writer_commit(w->st, err);
    if (!rc) rc = write_config(w, err);
    writer_free(w);
    return rc;
}

void hf_writer_abort(HfWriter *w) {
    if (!w) return;
    st_writer_abort(w->st);
    writer_free(w);
}
