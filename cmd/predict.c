/* predict (command): `fsdp predict`: the class trained weights give one test image, or their
 * accuracy on the whole test split, with the architecture from the file's __metadata__. */
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cmd/commands.h"
#include "cmd/flags.h"
#include "io/mnist.h"
#include "io/safetensors.h"
#include "io/weights.h"
#include "jobs/predict.h"
#include "models/vit.h"
#include "sim/cluster.h"
#include "sim/cost.h"

typedef struct PredictArgs {
    const char *weights, *model, *data;
    long image; /* -1: --eval */
    int eval;
} PredictArgs;

static void predict_help(FILE *f) {
    fputs("usage: ./fsdp predict --weights FILE.safetensors (--image N | --eval) [--model M]\n"
          "                      [--data DIR]\n"
          "Classifies FashionMNIST test image N (0 to 9999) with trained weights, or reports\n"
          "the accuracy on all 10,000 test images. The architecture comes from the file's\n"
          "__metadata__ (written by train --save-full and ckpt consolidate), or from --model\n"
          "vit-tiny|vit-workshop for a file without one (one exported from PyTorch).\n",
          f);
}

static int set_image(void *args, const char *flag, const char *v, Err *err) {
    PredictArgs *a = args;
    char *end;
    a->image = strtol(v, &end, 10);
    if (end == v || *end || a->image < 0)
        return err_set(err, ERR_USAGE, "%s must be a test image number (got '%s')", flag, v);
    return 0;
}

#define ARG(field) offsetof(PredictArgs, field)

/* predict's flags; predict_help describes them in prose. */
static const Flag predict_rows[] = {
    {"--weights", FLAG_STRING, ARG(weights), .arg = "FILE.safetensors"},
    {"--image", FLAG_SET, .set = set_image, .arg = "N"},
    {.name = "--eval", .kind = FLAG_SWITCH, .field = ARG(eval)},
    {"--model", FLAG_STRING, ARG(model), .arg = "M"},
    {"--data", FLAG_STRING, ARG(data), .arg = "DIR"},
};

static const FlagTable predict_table = FLAG_TABLE("predict", predict_rows, 0);

static int predict_args_parse(PredictArgs *a, int argc, char **argv, Err *err) {
    *a = (PredictArgs){.image = -1};
    for (int i = 0; i < argc; i++) {
        const char *f = argv[i];
        if (!strcmp(f, "--help") || !strcmp(f, "-h")) return 1;
        const Flag *row = flag_find(&predict_table, f);
        if (row && row->kind == FLAG_SWITCH) {
            flag_set(row, a, NULL, err);
            continue;
        }
        if (i + 1 >= argc) return flag_missing_value(&predict_table, row, f, err);
        const char *v = argv[++i];
        int rc = row ? flag_set(row, a, v, err) : flag_unknown(&predict_table, f, err);
        if (rc) return rc;
    }
    if (!a->weights) return err_set(err, ERR_USAGE, "predict needs --weights FILE.safetensors");
    if ((a->image >= 0) == a->eval)
        return err_set(err, ERR_USAGE, "predict needs --image N or --eval (one of them)");
    return 0;
}

/* A ViT shape read from path's __metadata__ is checked here, so that a bad one is named by its
 * file and fields (vit_config_check's lines name the flags that set them in train). */
static int metadata_config_check(const char *path, const VitConfig *c, Err *err) {
    if (c->image % c->patch != 0)
        return err_set(err, ERR_USAGE, "%s: __metadata__ patch %d does not divide image %d", path,
                       c->patch, c->image);
    if (c->hidden % c->heads != 0)
        return err_set(err, ERR_USAGE, "%s: __metadata__ heads %d does not divide hidden %d", path,
                       c->heads, c->hidden);
    Err why = {0};
    if (vit_config_check(c, &why))
        return err_set(err, ERR_USAGE, "%s: __metadata__ holds a ViT this fsdp cannot build: %s",
                       path, why.msg);
    return 0;
}

/* The ViT's shape: --model's preset, else the file's __metadata__. */
static int predict_config(const PredictArgs *a, VitConfig *c, Err *err) {
    if (a->model) {
        if (vit_preset(a->model, c))
            return err_set(err, ERR_USAGE, "--model must be vit-tiny or vit-workshop (got '%s')",
                           a->model);
        return 0;
    }
    SafeTensors st;
    int rc = st_open(&st, a->weights, err);
    if (rc) return rc == ERR_IO ? ERR_USAGE : rc;
    const char *kind = st_metadata(&st, "fsdp_model");
    if (kind && (!strcmp(kind, "transformer") || !strcmp(kind, "llama")))
        rc = err_set(err, ERR_USAGE,
                     "%s holds a %s, a language model: predict classifies images with a ViT's "
                     "weights; continue a prompt with ./fsdp sample --weights %s",
                     a->weights, kind, a->weights);
    const char *keys[] = {"image", "patch", "layers", "heads", "hidden", "mlp", "classes"};
    int *fields[] = {&c->image, &c->patch, &c->layers, &c->heads, &c->hidden, &c->mlp, &c->classes};
    for (int i = 0; !rc && i < 7; i++) { /* a ViT's sizes */
        const char *v = st_metadata(&st, keys[i]);
        char *end;
        long x = v ? strtol(v, &end, 10) : 0;
        if (!v)
            rc = err_set(err, ERR_USAGE,
                         "%s has no model configuration in __metadata__ (a file from PyTorch?): "
                         "give --model",
                         a->weights);
        else if (end == v || *end || x < 1 || x > 1 << 20)
            rc = err_set(err, ERR_USAGE, "%s: __metadata__ %s is not a size (got '%s')", a->weights,
                         keys[i], v);
        else
            *fields[i] = (int)x;
    }
    st_free(&st);
    return rc ? rc : metadata_config_check(a->weights, c, err);
}

static int predict_run(const PredictArgs *a, Err *err) {
    VitConfig c;
    ModelDesc m = {0};
    Dataset data = {0};
    Plan plan = {0};
    int rc = predict_config(a, &c, err);
    if (!rc) rc = mnist_load(&data, a->data ? a->data : MNIST_DEFAULT_DIR, "test", err);
    /* the presets' images are FashionMNIST's; a file's __metadata__ may say another size */
    if (!rc && (c.image != data.rows || c.image != data.cols))
        rc = err_set(err, ERR_USAGE,
                     "%s: __metadata__ image %d does not fit the data set's %dx%d images",
                     a->weights, c.image, data.rows, data.cols);
    if (!rc) rc = vit_model_create(&m, &c, err);
    if (!rc) { /* checks every name and shape before any rank starts */
        WeightsFile *w;
        if (!(rc = weights_open(&w, &m, a->weights, err))) weights_close(w);
    }
    if (!rc && a->image >= data.n)
        rc = err_set(err, ERR_USAGE, "--image %ld: the test split has images 0 to %ld", a->image,
                     data.n - 1);
    if (!rc) rc = plan_create(&plan, &m, (WrapPolicy){WRAP_LAYER, 0}, STRAT_ZERO3, 1, 1, err);
    PredictJob job = {
        .model = &m, .plan = &plan, .data = &data, .weights = a->weights, .image = a->image};
    ClusterOptions opt = {.ranks = 1, .replicas = 1, .profile = profile_default()};
    ClusterResult res = {0};
    if (!rc) rc = cluster_run(&opt, predict_rank, &job, &res, err);
    if (!rc && a->image >= 0)
        printf("Predicted: %d (%s), Actual: %d (%s)\n", job.predicted,
               fashion_class_name(job.predicted), data.labels[a->image],
               fashion_class_name(data.labels[a->image]));
    if (!rc && a->eval)
        printf("test accuracy: %.2f%% (%ld/%ld), loss %.4f\n",
               100.0 * (double)job.correct / (double)data.n, job.correct, data.n, job.loss);
    cluster_result_free(&res);
    plan_free(&plan);
    dataset_free(&data);
    model_desc_free(&m);
    return rc;
}

CMD_PARSE_AND_RUN(cmd_predict, PredictArgs, predict_args_parse, predict_help, predict_run)
