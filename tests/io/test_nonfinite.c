/* Values that are not finite numbers (nan, inf) are refused where they enter: a weights file
 * (--init-from, predict, in F32, BF16 or F16), a checkpoint's rank file (--resume); each is one
 * line naming the file, the tensor, the first bad flat index and the value, exit 2, and no file
 * that existed before is changed. A run whose loss or gradient norm turns non-finite stops at
 * that step with one line, exit 1, its newest checkpoint whole and loadable. */
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
            int code; /* and nothing before it: no banner, no plan (issue 39, case 12) */
            char *said = fsdp_run(&code, "2>&1", "%s", args);
            cr_expect_str_eq(said, line, "`fsdp %s` says its line alone", args);
            free(said);
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

/* ---------------------------------------------------------------- checkpoints */

/* Sets element `elem` of the piece of `tensor`'s `kind` saved by `rank` in checkpoint `ck` to
 * nan, that piece's CRC in meta.json to the new bytes' and meta.json's own checksum to the new
 * text's (as a writer that saved a nan would): only the values are wrong. */
static void poison_piece(const char *ck, const char *tensor, const char *kind, int rank,
                         size_t elem) {
    char meta_path[512], bin[512];
    snprintf(meta_path, sizeof meta_path, "%s/meta.json", ck);
    snprintf(bin, sizeof bin, "%s/rank-%05d.bin", ck, rank);
    size_t len;
    char *text = read_text_file(meta_path, &len);
    cJSON *root = cJSON_Parse(text);
    cr_assert_not_null(root);
    int t = -1, i = 0;
    cJSON *it;
    cJSON_ArrayForEach(it, cJSON_GetObjectItem(root, "tensors")) {
        if (!strcmp(cJSON_GetObjectItem(it, "name")->valuestring, tensor)) t = i;
        i++;
    }
    cr_assert_geq(t, 0, "no tensor %s", tensor);
    /* the piece's line, as the writer spells it */
    char key[128];
    snprintf(key, sizeof key, "{\"tensor\":%d,\"kind\":\"%s\",\"rank\":%d,", t, kind, rank);
    char *line = strstr(text, key);
    cr_assert_not_null(line, "rank %d saved no %s of %s", rank, kind, tensor);
    cJSON *piece = cJSON_ParseWithOpts(line, NULL, 0);
    cr_assert_not_null(piece);
    long offset = (long)cJSON_GetObjectItem(piece, "offset")->valuedouble;
    size_t bytes = (size_t)cJSON_GetObjectItem(piece, "bytes")->valuedouble;
    cJSON_Delete(piece);
    cJSON_Delete(root);
    cr_assert_lt(elem * sizeof(float), bytes);
    unsigned char *buf = malloc(bytes);
    FILE *f = fopen(bin, "r+b");
    cr_assert_not_null(f, "%s", bin);
    cr_assert_eq(fseek(f, offset, SEEK_SET), 0);
    cr_assert_eq(fread(buf, 1, bytes, f), bytes);
    float nan = NAN;
    memcpy(buf + elem * sizeof(float), &nan, sizeof nan);
    cr_assert_eq(fseek(f, offset, SEEK_SET), 0);
    cr_assert_eq(fwrite(buf, 1, bytes, f), bytes);
    fclose(f);
    unsigned long crc = crc32(0L, buf, (uInt)bytes);
    free(buf);
    char *crc_at = strstr(line, "\"crc32\":"), *end = crc_at ? strchr(crc_at, '}') : NULL;
    cr_assert(crc_at && end && crc_at < strchr(line, '\n'), "no crc32 in the piece's line");
    f = fopen(meta_path, "wb");
    cr_assert_not_null(f);
    fprintf(f, "%.*s\"crc32\":%lu%s", (int)(crc_at - text), text, crc, end);
    fclose(f);
    free(text);
    ckpt_meta_reseal(meta_path);
}

/* Every file of checkpoint `ck` as one string (names and bytes), to compare before and after. */
static char *checkpoint_bytes(const char *ck) {
    char cmd[1024], path[256];
    snprintf(path, sizeof path, "%s.sum", ck);
    snprintf(cmd, sizeof cmd,
             "cd %s && ls -la --time-style=+ . | sort > %s && cat * | md5sum >> %s", ck, path,
             path);
    cr_assert_eq(system(cmd), 0, "%s", cmd);
    char *text = read_text_file(path, NULL);
    unlink(path);
    return text;
}

Test(nonfinite, a_checkpoint_holding_a_nan_is_refused_on_resume) {
    fresh_test_dir(dir, sizeof dir, "nonfinite", "ckpt");
    char ck[256], keep[256], args[1024], line[1024];
    snprintf(ck, sizeof ck, "%s/ck/step-00000004", dir);
    snprintf(keep, sizeof keep, "%s/params.txt", dir);
    free(fsdp_ok("train --steps 4 --checkpoint-dir %s/ck --checkpoint-every 4", dir));
    /* the toy's Lb.weight is [3]: rank 1 of 3 saved row 1; its Adam moment too */
    poison_piece(ck, "Lb.weight", "param", 1, 0);
    write_keep(keep);
    char *before = checkpoint_bytes(ck);
    snprintf(line, sizeof line,
             "fsdp: %s/rank-00001.bin: Lb.weight's param holds nan at flat index 1 (a "
             "checkpoint's values must be finite)\n",
             ck);
    /* at the world size that saved it, and resharded onto one rank and onto two */
    for (int ranks = 1; ranks <= 3; ranks++) {
        snprintf(args, sizeof args, "train --ranks %d --steps 6 --resume %s --dump-params %s",
                 ranks, ck, keep);
        expect_line(2, line, args);
    }
    /* ckpt inspect and consolidate read every value as resume does (issue 39, case 9): the same
     * line and nothing before it (case 12), and no file written */
    int code;
    char *said = fsdp_run(&code, "2>&1", "ckpt inspect %s", ck); /* stdout too: no table */
    cr_expect_eq(code, 2);
    cr_expect_str_eq(said, line, "ckpt inspect says its one line and nothing else");
    free(said);
    snprintf(args, sizeof args, "ckpt consolidate %s -o %s/whole.safetensors", ck, dir);
    expect_line(2, line, args);
    cr_expect_neq(access(fmt_text("%s/whole.safetensors", dir), F_OK), 0, "nothing written");
    char *after = checkpoint_bytes(ck);
    cr_expect_str_eq(after, before, "the checkpoint was changed");
    free(after);
    free(before);
    expect_kept(keep);

    /* Adam's state is checked as the parameters are */
    fresh_test_dir(dir, sizeof dir, "nonfinite", "ckpt");
    snprintf(ck, sizeof ck, "%s/ck/step-00000004", dir);
    free(fsdp_ok("train --steps 4 --checkpoint-dir %s/ck --checkpoint-every 4", dir));
    poison_piece(ck, "Lc.weight", "adam_v", 2, 0);
    snprintf(line, sizeof line,
             "fsdp: %s/rank-00002.bin: Lc.weight's adam_v holds nan at flat index 2 (a "
             "checkpoint's values must be finite)\n",
             ck);
    snprintf(args, sizeof args, "train --steps 6 --resume %s", ck);
    expect_line(2, line, args);
    remove_test_dir(dir);
}

/* ---------------------------------------------------------------- training that diverges */

/* AdamW with --lr 10 --weight-decay 100 multiplies every parameter by 1 - lr x wd = -999 a step:
 * the toy's loss is finite through step 7 and inf at step 8. */
#define DIVERGES "--optim adamw --lr 10 --weight-decay 100"

/* The run stops at step 8 at any world size and strategy, whether or not step 8's loss was
 * all-reduced (--print-every 5: only this rank's loss), leaving steps 3 and 6 whole; a restart
 * is not tried; the newest checkpoint loads and a run resumed from it takes step 7 as the run
 * that never stopped did. */
Test(nonfinite, a_run_whose_loss_turns_inf_stops_at_that_step, .timeout = 120) {
    fresh_test_dir(dir, sizeof dir, "nonfinite", "diverge");
    char keep[256], args[1024], ck[256], path[512];
    snprintf(keep, sizeof keep, "%s/params.txt", dir);
    write_keep(keep);
    const char *setups[] = {"--ranks 1",
                            "--ranks 3",
                            "--ranks 4 --strategy ddp",
                            "--ranks 3 --strategy zero2 --print-every 5",
                            "--ranks 4 --strategy hsdp --replicas 2 --print-every 5",
                            "--ranks 3 --max-restarts 2"};
    for (size_t i = 0; i < sizeof setups / sizeof *setups; i++) {
        snprintf(ck, sizeof ck, "%s/ck%zu", dir, i);
        snprintf(args, sizeof args,
                 "train --steps 12 %s %s --checkpoint-dir %s --checkpoint-every 3 --dump-params "
                 "%s",
                 DIVERGES, setups[i], ck, keep);
        expect_line(1,
                    "fsdp: step 8: the loss is inf (training diverged; the newest checkpoint, "
                    "step 6, is intact)\n",
                    args);
        char *listing = NULL;
        snprintf(path, sizeof path, "ls -a %s > %s/ls.txt", ck, dir);
        cr_assert_eq(system(path), 0);
        snprintf(path, sizeof path, "%s/ls.txt", dir);
        listing = read_text_file(path, NULL);
        cr_expect_str_eq(listing, ".\n..\nstep-00000003\nstep-00000006\n", "%s", setups[i]);
        free(listing);
    }
    expect_kept(keep);
    /* step 6 is whole (every CRC checks) and resumes: step 7 as the uninterrupted run's */
    snprintf(ck, sizeof ck, "%s/ck1/step-00000006", dir);
    char *out = fsdp_ok("ckpt inspect %s", ck);
    free(out);
    char full[256], resumed[256];
    snprintf(full, sizeof full, "%s/full.txt", dir);
    snprintf(resumed, sizeof resumed, "%s/resumed.txt", dir);
    free(fsdp_ok("train --steps 7 %s --dump-params %s", DIVERGES, full));
    free(fsdp_ok("train --steps 7 %s --resume %s --dump-params %s", DIVERGES, ck, resumed));
    cr_expect_eq(dump_rel_diff(resumed, full), 0.0, "resumed from step 6, step 7 differs");
    /* without a checkpoint directory the line says only where */
    snprintf(args, sizeof args, "train --steps 12 %s", DIVERGES);
    expect_line(1, "fsdp: step 8: the loss is inf (training diverged)\n", args);
    snprintf(args, sizeof args, "train --steps 12 %s --checkpoint-dir %s/late --checkpoint-every 9",
             DIVERGES, dir);
    expect_line(1,
                "fsdp: step 8: the loss is inf (training diverged; no checkpoint was saved "
                "before it)\n",
                args);
    remove_test_dir(dir);
}

/* The ViT too, at two ranks: a loss that turns non-finite (the kernels see nan and inf on the
 * way). The step it does depends on rounding (4 with one OpenBLAS kernel, 5 with another: the
 * losses before it grow past 1e12), so what holds is the rule: the run stops at the first step
 * whose loss is not finite, with one line naming it, every step before it printed with a finite
 * loss; and the rates make that certain within the run (every parameter times -999 a step). */
Test(nonfinite, a_vit_whose_loss_turns_nan_stops_at_that_step, .timeout = 120) {
    int code;
    char *said = fsdp_run(&code, "2>&1",
                          "train --model vit-tiny --layers 2 --ranks 2 --batch-size 8 --steps 12 "
                          "--split test --eval false --print-every 1 " DIVERGES);
    cr_expect_eq(code, 1, "%s", said);
    long last = 0, stopped = 0, said_why = 0;
    char value[16] = "";
    for (char *line = strtok(said, "\n"); line; line = strtok(NULL, "\n")) {
        long step;
        double loss;
        if (sscanf(line, "epoch 1/1 step %ld/12 loss %lf", &step, &loss) == 2) {
            cr_expect_eq(step, last + 1, "%s", line);
            cr_expect(isfinite(loss), "a step before the stop printed a loss not finite: %s", line);
            last = step;
        } else if (sscanf(line, "fsdp: step %ld: the loss is %15s", &stopped, value) == 2) {
            said_why++;
            cr_expect(strstr(line, ": the loss is nan (training diverged)") ||
                          strstr(line, ": the loss is inf (training diverged)"),
                      "%s", line);
        }
    }
    cr_expect_eq(said_why, 1, "one line says where the run stopped");
    cr_expect(!strcmp(value, "nan") || !strcmp(value, "inf"), "no line says the loss: %s", value);
    cr_expect_eq(stopped, last + 1, "the run stopped at step %ld, after step %ld", stopped, last);
    cr_expect(stopped >= 2 && stopped <= 12, "stopped at step %ld", stopped);
    free(said);
}

/* Toy weights whose gradient overflows while the loss stays finite: Lb's output near 3e38 makes
 * Lc's second weight's gradient inf. Under --clip-grad-norm the norm says so at step 1; without
 * it, Adam turns the inf into nan parameters, which the checkpoint of step 1 refuses to save (the
 * loss would say nan only at step 2). */
Test(nonfinite, a_gradient_that_overflows_stops_the_run) {
    fresh_test_dir(dir, sizeof dir, "nonfinite", "grad");
    char weights[256], args[1024];
    snprintf(weights, sizeof weights, "%s/toy.safetensors", dir);
    write_overflowing_toy(weights);
    const char *setups[] = {"--ranks 1", "--ranks 3", "--ranks 3 --strategy ddp"};
    for (size_t i = 0; i < sizeof setups / sizeof *setups; i++) {
        snprintf(args, sizeof args, "train --steps 3 %s --init-from %s --clip-grad-norm 1",
                 setups[i], weights);
        expect_line(1, "fsdp: step 1: the gradient norm is inf (training diverged)\n", args);
    }
    snprintf(args, sizeof args,
             "train --steps 3 --init-from %s --checkpoint-dir %s/ck "
             "--checkpoint-every 1",
             weights, dir);
    expect_line(1,
                "fsdp: step 1: Lc.weight's param holds values that are not finite, so its "
                "checkpoint was not saved (training diverged; no checkpoint was saved before "
                "it)\n",
                args);
    char cmd[512];
    snprintf(cmd, sizeof cmd, "test -z \"$(ls -A %s/ck)\"", dir);
    cr_expect_eq(system(cmd), 0, "nothing was left in the checkpoint directory");
    snprintf(args, sizeof args, "train --steps 3 --init-from %s", weights);
    expect_line(1, "fsdp: step 2: the loss is nan (training diverged)\n", args);
    remove_test_dir(dir);
}

/* fp16's loss scaling skips the steps whose scaled gradients overflow, as before: a healthy run
 * with skipped steps ends well; a diverging one stops where its (unscaled) loss turns inf. */
Test(nonfinite, fp16_loss_scaling_still_skips_overflowing_steps) {
    int code;
    char *out = fsdp_run(&code, "2>&1",
                         "train --ranks 2 --steps 10 --reduce-dtype fp16 "
                         "--print-every 1");
    cr_expect_eq(code, 0, "%s", out);
    cr_expect_neq(strstr(out, "(skipped)"), NULL, "a step overflowed and was skipped: %s", out);
    free(out);
    expect_line(1, "fsdp: step 69: the loss is inf (training diverged)\n",
                "train --ranks 2 --steps 100 --reduce-dtype fp16 " DIVERGES);
}
