/* weights: full model parameters read from a safetensors file with PyTorch's state-dict names and
 * shapes, every name, shape and dtype checked first, as a strict load_state_dict does. */
#include "io/weights.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "io/safetensors.h"
#include "kernels/dtype.h"

static int shape_matches(const StTensor *t, const ParamSpec *p) {
    if (t->ndim != p->ndim) return 0;
    for (int d = 0; d < p->ndim; d++)
        if (t->shape[d] != p->shape[d]) return 0;
    return 1;
}

static void format_shape(char *buf, size_t n, int ndim, const int64_t *shape) {
    size_t at = (size_t)snprintf(buf, n, "[");
    for (int d = 0; d < ndim && at < n; d++)
        at += (size_t)snprintf(buf + at, n - at, d ? ", %lld" : "%lld", (long long)shape[d]);
    if (at < n) snprintf(buf + at, n - at, "]");
}

/* Checks one parameter's tensor; returns its dtype or -1 after setting err. */
static int check_tensor(const SafeTensors *st, const ParamSpec *p, const char *path, Err *err) {
    const StTensor *t = st_find(st, p->name);
    if (!t) return err_set(err, ERR_USAGE, "%s: no tensor %s", path, p->name), -1;
    if (!shape_matches(t, p)) {
        char got[96], want[96];
        format_shape(got, sizeof got, t->ndim, t->shape);
        format_shape(want, sizeof want, p->ndim, p->shape);
        return err_set(err, ERR_USAGE, "%s: %s has shape %s, the model's is %s", path, p->name, got,
                       want),
               -1;
    }
    if (!strcmp(t->dtype, "F32")) return DTYPE_FP32;
    if (!strcmp(t->dtype, "BF16")) return DTYPE_BF16;
    if (!strcmp(t->dtype, "F16")) return DTYPE_FP16;
    return err_set(err, ERR_USAGE, "%s: %s is %s, not a float type (F32, BF16, F16)", path, p->name,
                   t->dtype),
           -1;
}

/* A tensor the model has no parameter for is an error, as in a strict load_state_dict. */
static int check_unexpected(const SafeTensors *st, const ModelDesc *m, const char *path, Err *err) {
    for (int i = 0; i < st->n; i++) {
        int known = 0;
        for (int j = 0; j < m->nparams && !known; j++)
            known = !strcmp(st->tensors[i].name, m->params[j].name);
        if (!known)
            return err_set(err, ERR_USAGE, "%s: tensor %s is not a parameter of this model", path,
                           st->tensors[i].name);
    }
    return 0;
}

/* The file's bytes to fp32, one element at a time through memcpy: no alignment assumed. */
static void widen(float *dst, const unsigned char *src, DType t, size_t n) {
    for (size_t i = 0; i < n; i++) {
        if (t == DTYPE_FP32) {
            memcpy(&dst[i], src + 4 * i, 4);
        } else {
            uint16_t h;
            memcpy(&h, src + 2 * i, 2);
            dst[i] = t == DTYPE_BF16 ? bf16_to_fp32(h) : fp16_to_fp32(h);
        }
    }
}

/* "nan", "inf" or "-inf": how a message names a value that is not a finite number. */
static const char *nonfinite_name(float v) {
    return isnan(v) ? "nan" : v > 0 ? "inf" : "-inf";
}

/* Weights that are not finite numbers would train or predict nothing but nan (and take the kernels
 * where no finite input goes), so they are refused as they are read, after widening: a bf16 or
 * fp16 nan or inf widens to an fp32 one. first: x[0]'s flat index in the tensor. */
static int check_finite(const float *x, size_t n, size_t first, const char *path, const char *name,
                        Err *err) {
    for (size_t i = 0; i < n; i++)
        if (!isfinite(x[i]))
            return err_set(err, ERR_USAGE,
                           "%s: %s holds %s at flat index %zu (weights must be finite)", path, name,
                           nonfinite_name(x[i]), first + i);
    return 0;
}

struct WeightsFile {
    SafeTensors st;
    const ModelDesc *m;
    int *dtypes;              /* per model parameter */
    const StTensor **tensors; /* per model parameter */
};

void weights_close(WeightsFile *w) {
    if (!w) return;
    st_free(&w->st);
    free(w->dtypes);
    free(w->tensors);
    free(w);
}

/* Every parameter present with its shape and a float dtype, and nothing else. */
static int check_file(WeightsFile *w, const char *path, Err *err) {
    const ModelDesc *m = w->m;
    for (int i = 0; i < m->nparams; i++) {
        if ((w->dtypes[i] = check_tensor(&w->st, &m->params[i], path, err)) < 0) return ERR_USAGE;
        w->tensors[i] = st_find(&w->st, m->params[i].name);
    }
    return check_unexpected(&w->st, m, path, err);
}

static int weights_begin(WeightsFile **out, const ModelDesc *m, const char *path, int load_data,
                         Err *err) {
    WeightsFile *w = calloc(1, sizeof *w);
    *out = NULL;
    if (w) {
        w->m = m;
        w->dtypes = calloc((size_t)m->nparams + 1, sizeof *w->dtypes);
        w->tensors = calloc((size_t)m->nparams + 1, sizeof *w->tensors);
    }
    if (!w || !w->dtypes || !w->tensors) {
        weights_close(w);
        return err_set(err, ERR_NOMEM, "out of memory loading %s", path);
    }
    int rc = load_data ? st_read(&w->st, path, err) : st_open(&w->st, path, err);
    if (rc == ERR_IO) rc = ERR_USAGE; /* a bad file is bad input */
    if (!rc) rc = check_file(w, path, err);
    if (rc) {
        weights_close(w);
        return rc;
    }
    *out = w;
    return 0;
}

int weights_open(WeightsFile **out, const ModelDesc *m, const char *path, Err *err) {
    return weights_begin(out, m, path, 0, err);
}

/* Reads through a bounded bounce buffer, so a rank's rows of a huge tensor never need a second
 * copy of their own size. */
int weights_read(const WeightsFile *w, int param, size_t first, size_t n, float *dst, Err *err) {
    DType t = (DType)w->dtypes[param];
    size_t es = dtype_size(t);
    enum { CHUNK = 1 << 16 };
    unsigned char *buf = malloc(CHUNK * 4);
    if (!buf) return err_set(err, ERR_NOMEM, "out of memory reading %s", w->st.path);
    int rc = 0;
    for (size_t done = 0; !rc && done < n;) {
        size_t k = n - done < CHUNK ? n - done : CHUNK;
        rc = st_read_bytes(&w->st, w->tensors[param], (first + done) * es, k * es, buf, err);
        if (rc == ERR_IO) rc = ERR_USAGE;
        if (!rc) widen(dst + done, buf, t, k);
        if (!rc)
            rc =
                check_finite(dst + done, k, first + done, w->st.path, w->tensors[param]->name, err);
        done += k;
    }
    free(buf);
    return rc;
}

int weights_load(const ModelDesc *m, const char *path, float *full, Err *err) {
    WeightsFile *w;
    int rc = weights_begin(&w, m, path, 1, err);
    size_t at = 0;
    for (int i = 0; !rc && i < m->nparams; at += m->params[i++].numel)
        rc = weights_read(w, i, 0, m->params[i].numel, full + at, err);
    weights_close(w);
    return rc;
}
