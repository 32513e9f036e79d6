#include "weights.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../kernels/dtype.h"
#include "safetensors.h"

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

int weights_load(const ModelDesc *m, const char *path, float *full, Err *err) {
    SafeTensors st;
    int rc = st_read(&st, path, err);
    if (rc) return rc == ERR_IO ? ERR_USAGE : rc; /* a bad file is bad input */
    int *dtypes = calloc((size_t)m->nparams + 1, sizeof *dtypes);
    if (!dtypes) rc = err_set(err, ERR_NOMEM, "out of memory loading %s", path);
    for (int i = 0; !rc && i < m->nparams; i++)
        if ((dtypes[i] = check_tensor(&st, &m->params[i], path, err)) < 0) rc = ERR_USAGE;
    if (!rc) rc = check_unexpected(&st, m, path, err);
    size_t at = 0;
    for (int i = 0; !rc && i < m->nparams; at += m->params[i++].numel) {
        const StTensor *t = st_find(&st, m->params[i].name);
        widen(full + at, st_data(&st, t), (DType)dtypes[i], m->params[i].numel);
    }
    free(dtypes);
    st_free(&st);
    return rc;
}
