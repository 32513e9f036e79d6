/* Values that are not finite numbers (nan, inf) are refused where they enter: a weights file
 * (--init-from, predict, in F32, BF16 or F16) is one line naming the file, the tensor, the first
 * bad flat index and the value, exit 2, and no file that existed before is changed. */
#include <cjson/cJSON.h>
#include <criterion/criterion.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zlib.h>

#include "io/safetensors.h"
#include "io/weights.h"
#include "kernels/dtype.h"
#include "tests/util.h"

static char dir[128];

/* A file that must come through a failed run byte for byte. */
static void write_keep(const char *path) {
    FILE *f = fopen(path, "w");
    cr_assert_not_null(f, "%s", path);
    fputs("keep me\n", f);
    fclose(f);
}

static void expect_kept(const char *path) {
    char *text = read_text_file(path, NULL);
    cr_expect_str_eq(text, "keep me\n", "%s was changed", path);
    free(text);
}

/* `fsdp ARGS` exits `code` having said exactly `line` on stderr. */
static void expect_line(int code, const char *line, const char *args) {
    int got;
    char *said = fsdp_run(&got, "2>&1 >/dev/null", "%s", args);
    cr_expect_eq(got, code, "`fsdp %s` exited %d: %s", args, got, said);
    cr_expect_str_eq(said, line, "`fsdp %s`", args);
    free(said);
}

/* ---------------------------------------------------------------- weights files */

/* A 2-layer vit-tiny's weights (seeded values) with __metadata__, every tensor in `dtype`, and
 * element `index` of tensor `bad` (NULL: none) set to `value`. */
static void write_vit_weights(const char *path, const ModelDesc *m, const char *dtype,
                              const char *bad, size_t index, float value) {
    DType t = !strcmp(dtype, "F32") ? DTYPE_FP32 : !strcmp(dtype, "BF16") ? DTYPE_BF16 : DTYPE_FP16;
    unsigned char *data = malloc(m->total_numel * dtype_size(t));
    StTensorOut *out = calloc((size_t)m->nparams, sizeof *out);
    float *values = malloc(m->total_numel * sizeof *values);
    size_t at = 0;
    for (int i = 0; i < m->nparams; at += m->params[i++].numel) {
        const ParamSpec *p = &m->params[i];
        param_init_fill(p, 7, 0, p->numel, values + at);
        if (bad && !strcmp(p->name, bad)) values[at + index] = value;
        for (size_t j = 0; j < p->numel; j++) dtype_store(data, t, at + j, values[at + j]);
        out[i] = (StTensorOut){p->name, dtype, p->ndim, p->shape, data + at * dtype_size(t)};
    }
    const char *meta[] = {"image", "28",     "patch", "7",   "layers", "2",       "heads",
                          "2",     "hidden", "128",   "mlp", "128",    "classes", "10"};
    Err err = {0};
    cr_assert_eq(st_write(path, out, m->nparams, meta, 7, &err), 0, "%s", err.msg);
    free(values);
    free(out);
    free(data);
}

Test(nonfinite, weights_with_a_nan_are_refused_by_init_from_and_predict) {
    fresh_test_dir(dir, sizeof dir, "nonfinite", "weights");
    ModelDesc m;
    vit_small_create(&m, 2);
    char weights[256], keep[256], args[1024], line[512];
    snprintf(weights, sizeof weights, "%s/w.safetensors", dir);
    snprintf(keep, sizeof keep, "%s/params.txt", dir);
    write_keep(keep);
    const char *vit =
        "--model vit-tiny --layers 2 --batch-size 4 --steps 2 --split test --eval false";
    /* conv_proj.weight is [128, 1, 7, 7]: index 37 is in rank 0's rows at 3 ranks, 4905 in rank
     * 2's; either is named by its index in the whole tensor, whichever rank reads it */
    const size_t where[] = {37, 4905};
    for (int k = 0; k < 2; k++) {
        write_vit_weights(weights, &m, "F32", "conv_proj.weight", where[k], NAN);
        snprintf(line, sizeof line,
                 "fsdp: %s: conv_proj.weight holds nan at flat index %zu (weights must be "
                 "finite)\n",
                 weights, where[k]);
        for (int ranks = 1; ranks <= 3; ranks += 2) {
            snprintf(args, sizeof args, "train %s --ranks %d --init-from %s --dump-params %s", vit,
                     ranks, weights, keep);
            expect_line(2, line, args);
        }
        snprintf(args, sizeof args, "predict --weights %s --image 0", weights);
        expect_line(2, line, args);
    }
    expect_kept(keep);
    /* the same file with every value finite is taken */
    write_vit_weights(weights, &m, "F32", NULL, 0, 0.0f);
    char *out = fsdp_ok("predict --weights %s --image 0", weights);
    cr_expect(strncmp(out, "Predicted: ", 11) == 0, "%s", out);
    free(out);
    model_desc_free(&m);
    remove_test_dir(dir);
}

/* BF16 and F16 files widen to fp32 as they are read: their inf and nan are refused as F32's. */
Test(nonfinite, bf16_and_f16_weights_are_checked_too) {
    fresh_test_dir(dir, sizeof dir, "nonfinite", "dtypes");
    ModelDesc m;
    vit_small_create(&m, 2);
    char path[256];
    snprintf(path, sizeof path, "%s/w.safetensors", dir);
    float *full = malloc(m.total_numel * sizeof *full);
    const struct {
        const char *dtype, *tensor;
        size_t index;
        float value;
        const char *said;
    } cases[] = {
        {"BF16", "heads.head.bias", 3, INFINITY, "heads.head.bias holds inf at flat index 3"},
        {"F16", "encoder.layers.encoder_layer_1.mlp.0.weight", 10000, -INFINITY,
         "encoder.layers.encoder_layer_1.mlp.0.weight holds -inf at flat index 10000"},
        {"F16", "encoder.ln.weight", 127, NAN, "encoder.ln.weight holds nan at flat index 127"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        write_vit_weights(path, &m, cases[i].dtype, cases[i].tensor, cases[i].index,
                          cases[i].value);
        Err err = {0};
        cr_expect_eq(weights_load(&m, path, full, &err), ERR_USAGE, "%s", cases[i].said);
        char want[512];
        snprintf(want, sizeof want, "%s: %s (weights must be finite)", path, cases[i].said);
        cr_expect_str_eq(err.msg, want);
        /* and all finite, the same dtype loads */
        write_vit_weights(path, &m, cases[i].dtype, NULL, 0, 0.0f);
        cr_expect_eq(weights_load(&m, path, full, &err), 0, "%s: %s", cases[i].dtype, err.msg);
    }
    free(full);
    model_desc_free(&m);
    remove_test_dir(dir);
}
