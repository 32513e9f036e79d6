/* predict: inference with trained weights on simulated ranks: the class the model gives one test
 * image, or its accuracy over a whole data set. */
#include "jobs/predict.h"

#include <stdlib.h>

const char *fashion_class_name(int label) {
    static const char *const names[] = {"T-shirt/Top", "Trouser",   "Pullover", "Dress",
                                        "Coat",        "Sandal",    "Shirt",    "Sneaker",
                                        "Bag",         "Ankle Boot"};
    return label >= 0 && label < 10 ? names[label] : "?";
}

/* The class of one image. The op table has no argmax, but it counts a sample right when its
 * largest logit (the first, on ties) is its label, so asking "is it class c?" of each c in turn
 * finds the same class with no new kernel: ten forwards of one image. */
static int classify(Engine *e, const PredictJob *job, int *out, Err *err) {
    const Dataset *ds = job->data;
    Dataset one = *ds;
    uint8_t label = 0;
    one.n = 1;
    one.pixels = ds->pixels + (size_t)job->image * ds->in_elems;
    one.labels = &label;
    long first = 0;
    *out = -1;
    for (int c = 0; c < ds->classes && *out < 0; c++) {
        label = (uint8_t)c;
        EvalStats st;
        int rc = engine_evaluate(e, &one, &first, 1, &st, err);
        if (rc) return rc;
        if (st.correct) *out = c;
    }
    return *out < 0 ? err_set(err, ERR_INTERNAL, "no class won image %ld", job->image) : 0;
}

/* Every sample, in batches; rank r takes every world-th batch, and the counts are summed. */
static int evaluate_all(const RankEnv *env, Engine *e, PredictJob *job, Err *err) {
    enum { BATCH = 256 };
    long idx[BATCH];
    double sums[2] = {0.0, 0.0};
    for (long at = (long)env->rank * BATCH; at < job->data->n; at += (long)env->world * BATCH) {
        long n = 0;
        for (long i = at; i < job->data->n && n < BATCH; i++) idx[n++] = i;
        EvalStats st;
        int rc = engine_evaluate(e, job->data, idx, (size_t)n, &st, err);
        if (rc) return rc;
        sums[0] += (double)st.correct;
        sums[1] += st.loss_sum;
    }
    float totals[2] = {(float)sums[0], (float)sums[1]};
    int rc = comm_all_reduce(env->world_comm, totals, totals, 2, DTYPE_FP32, REDUCE_SUM, -1, err);
    if (!rc && env->rank == 0) {
        job->correct = (long)totals[0];
        job->loss = job->data->n ? (double)totals[1] / (double)job->data->n : 0.0;
    }
    return rc;
}

int predict_rank(const RankEnv *env, void *arg, Err *err) {
    PredictJob *job = arg;
    FsdpConfig cfg;
    fsdp_config_defaults(&cfg);
    cfg.batch_size = 256;
    Engine *e = NULL;
    int rc = engine_create(&e, &cfg, job->plan, job->model, *env, err);
    if (!rc) rc = train_load_weights(e, job->model, job->weights, err);
    if (!rc && job->image >= 0) {
        int c = -1;
        rc = classify(e, job, &c, err); /* every rank runs it: the forward gathers */
        if (!rc && env->rank == 0) job->predicted = c;
    } else if (!rc) {
        rc = evaluate_all(env, e, job, err);
    }
    engine_destroy(e);
    return rc;
}
