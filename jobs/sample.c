/* sample: a transformer's continuation of a prompt on simulated ranks: one forward of the context
 * per byte added, the byte picked from the logits of its last position. */
#include "jobs/sample.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "engine/rng.h"
#include "models/transformer.h"

#define SAMPLE_STREAM 0x5a3b1e00ULL /* the draws' stream of the seeded generator */

int sample_pick(const float *z, int V, float t, float u) {
    int best = 0;
    for (int v = 1; v < V; v++)
        if (z[v] > z[best]) best = v;
    if (t <= 0) return best;
    /* softmax(z / t) in double, the largest subtracted; the byte whose cumulative share first
     * passes u (rounding can leave the total a hair under u: the last byte with any share) */
    double total = 0, at = 0;
    for (int v = 0; v < V; v++) total += exp(((double)z[v] - z[best]) / t);
    int last = best;
    for (int v = 0; v < V; v++) {
        double p = exp(((double)z[v] - z[best]) / t) / total;
        if (p > 0) last = v;
        at += p;
        if (at > u) return v;
    }
    return last;
}

/* The context's last seq bytes at positions 0.., zeros after them (no position sees a later
 * one), as a data set of one sequence; returns how many bytes it holds. */
static size_t window_of(const uint8_t *context, size_t len, size_t T, uint8_t *window) {
    size_t w = len < T ? len : T;
    memset(window, 0, T + 1);
    memcpy(window, context + len - w, w);
    return w;
}

int sample_rank(const RankEnv *env, void *arg, Err *err) {
    SampleJob *job = arg;
    const TransformerConfig *c = job->model->config;
    size_t T = (size_t)c->seq, V = (size_t)c->vocab, len = job->prompt_len;
    FsdpConfig cfg;
    fsdp_config_defaults(&cfg);
    cfg.batch_size = 1;
    uint8_t *context = malloc(len + (size_t)job->tokens), *window = malloc(T + 1);
    float *logits = malloc(T * V * sizeof *logits);
    Engine *e = NULL;
    int rc = context && window && logits
                 ? engine_create(&e, &cfg, job->plan, job->model, *env, err)
                 : err_set(err, ERR_NOMEM, "out of memory for a context of %zu bytes", len);
    if (!rc) rc = train_load_weights(e, job->model, job->weights, err);
    if (!rc) memcpy(context, job->prompt, len);
    for (int k = 0; !rc && k < job->tokens; k++) {
        size_t w = window_of(context, len, T, window);
        Dataset one = {.n = 1, .in_elems = T, .target_elems = T, .text = window, .classes = (int)V};
        long first = 0;
        rc = engine_forward_outputs(e, &one, &first, 1, logits, T * V, err);
        if (rc) break;
        float u = rng_uniform(job->seed, SAMPLE_STREAM, (uint64_t)k);
        context[len++] = (uint8_t)sample_pick(logits + (w - 1) * V, (int)V, job->temperature, u);
    }
    if (!rc && env->rank == 0) memcpy(job->out, context + job->prompt_len, (size_t)job->tokens);
    engine_destroy(e);
    free(context);
    free(window);
    free(logits);
    return rc;
}
