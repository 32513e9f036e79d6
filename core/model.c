#include "model.h"

#include <stdlib.h>

#include "rng.h"

void model_desc_free(ModelDesc *m) {
    free(m->params);
    free(m->modules);
    free(m->config);
    m->params = NULL;
    m->modules = NULL;
    m->config = NULL;
}

void dataset_free(Dataset *d) {
    free(d->owned);
    d->owned = NULL;
}

float param_init_value(const ParamSpec *p, uint64_t seed, size_t index) {
    uint64_t stream = rng_hash_string(p->name);
    switch (p->init) {
    case INIT_ZERO:
        return 0.0f;
    case INIT_ONE:
        return 1.0f;
    case INIT_UNIFORM:
        return p->init_a + (p->init_b - p->init_a) * rng_uniform(seed, stream, index);
    case INIT_NORMAL:
        return p->init_a + p->init_b * rng_normal(seed, stream, index);
    }
    return 0.0f;
}
