/* model: a ModelDesc's storage, and every parameter element's initial value as a pure function of
 * (seed, parameter name, index), so a rank can draw exactly its own rows. */
#include "engine/model.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/rng.h"

static const char *const ac_policy_names[] = {"block", "ops", "torchtitan"};

const char *ac_policy_name(AcPolicy p) {
    return ac_policy_names[p];
}

int ac_policy_from_name(const char *name) {
    for (int p = 0; p < (int)(sizeof ac_policy_names / sizeof *ac_policy_names); p++)
        if (!strcmp(name, ac_policy_names[p])) return p;
    return -1;
}

int model_desc_alloc(ModelDesc *m, const char *name, int nparams, int nmodules, const void *config,
                     size_t config_size, Err *err) {
    memset(m, 0, sizeof *m);
    m->params = calloc((size_t)nparams + 1, sizeof *m->params);
    m->modules = calloc((size_t)nmodules + 1, sizeof *m->modules);
    m->config = malloc(config_size + 1);
    if (!m->params || !m->modules || !m->config) {
        model_desc_free(m);
        return err_set(err, ERR_NOMEM, "out of memory describing a %s of %d parameters", name,
                       nparams);
    }
    memcpy(m->config, config, config_size);
    snprintf(m->name, sizeof m->name, "%s", name);
    return 0;
}

void model_desc_free(ModelDesc *m) {
    free(m->params);
    free(m->modules);
    free(m->config);
    m->params = NULL;
    m->modules = NULL;
    m->config = NULL;
}

void dataset_free(Dataset *d) {
    if (d->release)
        d->release(d->owned);
    else
        free(d->owned);
    d->owned = NULL;
}

Dataset dataset_tail(const Dataset *d, long n) {
    Dataset v = *d;
    size_t first = (size_t)(d->n - n);
    v.n = n;
    v.owned = NULL;
    v.release = NULL;
    if (d->inputs) v.inputs = d->inputs + first * d->in_elems;
    if (d->targets) v.targets = d->targets + first * d->target_elems;
    if (d->pixels) v.pixels = d->pixels + first * d->in_elems;
    if (d->labels) v.labels = d->labels + first;
    if (d->text) v.text = d->text + first * d->in_elems;
    return v;
}

static float init_draw(const ParamSpec *p, uint64_t seed, uint64_t stream, size_t index) {
    switch (p->init) {
    case INIT_ZERO:
        return 0.0f;
    case INIT_ONE:
        return 1.0f;
    case INIT_UNIFORM:
        return p->init_a + (p->init_b - p->init_a) * rng_uniform(seed, stream, index);
    case INIT_NORMAL:
        return p->init_a + p->init_b * rng_normal(seed, stream, index);
    case INIT_TRUNC_NORMAL:
        /* redraw from further streams until inside the bounds: still a pure function of
         * (seed, name, index); 64 misses in a row cannot happen for any sane std */
        for (uint64_t attempt = 0; attempt < 64; attempt++) {
            float v = p->init_a +
                      p->init_b * rng_normal(seed, stream + attempt * 0x9e3779b97f4a7c15ULL, index);
            if (v >= -2.0f && v <= 2.0f) return v;
        }
        return p->init_a;
    }
    return 0.0f;
}

float param_init_value(const ParamSpec *p, uint64_t seed, size_t index) {
    return init_draw(p, seed, rng_hash_string(p->name), index);
}

void param_init_fill(const ParamSpec *p, uint64_t seed, size_t first, size_t n, float *out) {
    uint64_t stream = rng_hash_string(p->name); /* once, not per element */
    for (size_t j = 0; j < n; j++) out[j] = init_draw(p, seed, stream, first + j);
}

const ModelKind *model_kind_named(const ModelKinds *kinds, const char *name) {
    for (const ModelKind *const *k = kinds->kinds; *k; k++)
        for (const char *const *n = (*k)->names; *n; n++)
            if (!strcmp(*n, name)) return *k;
    return NULL;
}
