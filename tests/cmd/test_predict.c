/* `fsdp predict`: the accuracy it reports from a --save-full file is the training run's own
 * evaluation of the same parameters; one image's line names the class and the true label; a
 * file without __metadata__ (as PyTorch writes one) needs --model; bad input is one line. */
#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "io/safetensors.h"
#include "models/vit.h"
#include "tests/util.h"

Test(predict, reports_what_training_evaluated_and_classifies_one_image) {
    char path[] = "/tmp/fsdp-predict-XXXXXX";
    make_temp_file(path);
    char *trained =
        fsdp_ok("train --model vit-tiny --layers 2 --ranks 2 --steps 30 --batch-size 16 "
                "--save-full %s",
                path);
    const char *eval = strstr(trained, "accuracy ");
    cr_assert(eval, "%s", trained);
    char want[64];
    cr_assert_eq(sscanf(eval, "accuracy %63[^,]", want), 1);
    char *got = fsdp_ok("predict --weights %s --eval", path);
    cr_expect(strstr(got, want) != NULL, "training said '%s', predict said '%s'", want, got);
    free(got);
    const Dataset *test = vit_test_split();
    for (int n = 0; n < 3; n++) {
        char *line = fsdp_ok("predict --weights %s --image %d", path, n);
        int predicted = -1, actual = -1;
        cr_assert_eq(sscanf(line, "Predicted: %d (%*[^)]), Actual: %d", &predicted, &actual), 2,
                     "%s", line);
        cr_expect_eq(actual, test->labels[n], "image %d", n);
        cr_expect(predicted >= 0 && predicted < 10, "%s", line);
        free(line);
    }
    free(trained);
    unlink(path);
}

/* A file with PyTorch's names and no __metadata__: the shape must come from --model. */
Test(predict, a_file_without_metadata_needs_model) {
    ModelDesc m;
    vit_preset_create(&m, "vit-tiny");
    Err err = {0};
    float *values = malloc(m.total_numel * sizeof *values);
    StTensorOut *t = calloc((size_t)m.nparams, sizeof *t);
    size_t at = 0;
    for (int i = 0; i < m.nparams; at += m.params[i++].numel) {
        param_init_fill(&m.params[i], 7, 0, m.params[i].numel, values + at);
        t[i] = (StTensorOut){m.params[i].name, "F32", m.params[i].ndim, m.params[i].shape,
                             values + at};
    }
    char path[] = "/tmp/fsdp-predict-torch-XXXXXX";
    make_temp_file(path);
    cr_assert_eq(st_write(path, t, m.nparams, NULL, 0, &err), 0, "%s", err.msg);
    char args[512];
    int status;
    snprintf(args, sizeof args, "predict --weights %s --image 0", path);
    char *out = fsdp_output(args, "2>&1", &status);
    cr_expect(WIFEXITED(status) && WEXITSTATUS(status) == 2, "%s", out);
    cr_expect(strstr(out, "no model configuration in __metadata__") != NULL, "%s", out);
    free(out);
    out = fsdp_ok("predict --weights %s --image 0 --model vit-tiny", path);
    cr_expect(strncmp(out, "Predicted: ", 11) == 0, "%s", out);
    free(out);
    snprintf(args, sizeof args, "predict --weights %s --image 0 --model vit-workshop", path);
    out = fsdp_output(args, "2>&1", &status);
    cr_expect(WIFEXITED(status) && WEXITSTATUS(status) == 2, "%s", out);
    cr_expect(strstr(out, "has shape") != NULL, "the other model's shapes are refused: %s", out);
    free(out);
    unlink(path);
    free(t);
    free(values);
    model_desc_free(&m);
}

Test(predict, bad_input_is_one_line) {
    static const UsageCase cases[] = {
        {"predict --image 3", "fsdp: predict needs --weights FILE.safetensors\n"},
        {"predict --weights x.safetensors",
         "fsdp: predict needs --image N or --eval (one of them)\n"},
        {"predict --weights x --image -1",
         "fsdp: --image must be a test image number (got '-1')\n"},
        {"predict --weights /nonexistent.safetensors --eval",
         "fsdp: cannot open /nonexistent.safetensors: No such file or directory\n"},
        {"predict --weights x --eval --colour red",
         "fsdp: unknown flag --colour (see ./fsdp predict --help)\n"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        char *out = expect_usage_error_text(cases[i].args, cases[i].mention);
        cr_expect_str_eq(out, cases[i].mention, "%s", cases[i].args); /* the whole line */
        free(out);
    }
}

/* A bad shape in __metadata__ is one line naming the file and the field, before any tensor is
 * looked at (so the file's tensors here are a stand-in). */
Test(predict, bad_metadata_names_the_file_and_the_field) {
    char path[] = "/tmp/fsdp-predict-meta-XXXXXX";
    make_temp_file(path);
    const float x = 1.0f;
    const int64_t shape[1] = {1};
    StTensorOut t = {"x", "F32", 1, shape, &x};
    const struct {
        const char *image, *patch, *heads, *layers, *said;
    } cases[] = {
        {"28", "5", "2", "2", "__metadata__ patch 5 does not divide image 28"},
        {"32", "4", "2", "2", "__metadata__ image 32 does not fit the data set's 28x28 images"},
        {"28", "7", "3", "2", "__metadata__ heads 3 does not divide hidden 128"},
        {"28", "7", "2", "2000",
         "__metadata__ holds a ViT this fsdp cannot build: --layers must be from 1 to 1000 (got "
         "2000)"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        const char *meta[] = {"image",   cases[i].image,
                              "patch",   cases[i].patch,
                              "layers",  cases[i].layers,
                              "heads",   cases[i].heads,
                              "hidden",  "128",
                              "mlp",     "128",
                              "classes", "10"};
        Err err = {0};
        cr_assert_eq(st_write(path, &t, 1, meta, 7, &err), 0, "%s", err.msg);
        char args[512], want[512];
        snprintf(args, sizeof args, "predict --weights %s --image 0", path);
        snprintf(want, sizeof want, "fsdp: %s: %s\n", path, cases[i].said);
        char *out = expect_usage_error_text(args, want);
        cr_expect_str_eq(out, want);
        free(out);
    }
    unlink(path);
}
