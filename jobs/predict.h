/* predict: inference with trained weights, as the workshop does after training: the class the
 * model gives one test image ("Predicted: 4 (Coat), Actual: 9 (Ankle Boot)"), or its accuracy
 * on a whole data set. Runs the engine's forward on simulated ranks; reads only the weights
 * file and the data set it is given. */
#ifndef FSDP_PREDICT_H
#define FSDP_PREDICT_H

#include "jobs/train.h"

typedef struct PredictJob {
    const ModelDesc *model; /* a ViT */
    const Plan *plan;
    const Dataset *data;
    const char *weights; /* safetensors with PyTorch's names */
    long image;          /* the sample to classify; -1: evaluate every sample instead */
    /* filled by rank 0 */
    int predicted; /* image's class */
    long correct;  /* evaluation: samples classified right */
    double loss;   /* evaluation: mean loss */
} PredictJob;

/* FashionMNIST's class names, "T-shirt/Top" ... "Ankle Boot"; "?" out of range. */
const char *fashion_class_name(int label);

/* Rank-main for a cluster; arg is a PredictJob. */
int predict_rank(const RankEnv *env, void *arg, Err *err);

#endif
