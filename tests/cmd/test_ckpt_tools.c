/* fsdp ckpt through the CLI: inspect lists and verifies a checkpoint (damage is one line, exit 2);
 * consolidate writes the run's final parameters bit for bit as a safetensors file, and a damaged
 * checkpoint leaves an existing -o file as it was. */
#include <criterion/criterion.h>
#include <dirent.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "io/safetensors.h"
#include "io/weights.h"
#include "models/toy.h"
#include "models/vit.h"
#include "tests/util.h"

/* The small ViT of test_checkpoint.c: one block, hidden 16, on FashionMNIST's test split. */
#define SMALL_VIT                                                                                  \
    "--model vit-tiny --layers 1 --hidden 16 --heads 2 --mlp 16 --split test --eval false"

static char dir[128];

static void fresh_dir(const char *tag) {
    fresh_test_dir(dir, sizeof dir, "ckpt_tools", tag);
}

static void shell(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static void shell(const char *fmt, ...) {
    char cmd[2048];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(cmd, sizeof cmd, fmt, ap);
    va_end(ap);
    cr_assert_eq(system(cmd), 0, "%s", cmd);
}

/* `fsdp ARGS` must fail with exit 2 and one line on stderr that contains want. */
static void expect_exit_2(const char *want, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));
static void expect_exit_2(const char *want, const char *fmt, ...) {
    char args[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(args, sizeof args, fmt, ap);
    va_end(ap);
    char *err = expect_usage_error_text(args, want);
    cr_expect_eq(strncmp(err, "fsdp: ", 6), 0, "%s", err);
    free(err);
}

/* out contains each of the n parts. */
static void expect_contains(const char *out, const char *const *parts, size_t n) {
    for (size_t i = 0; i < n; i++)
        cr_expect_neq(strstr(out, parts[i]), NULL, "lacks '%s':\n%s", parts[i], out);
}

/* The values of a --dump-params file (`name index value` lines, %.9e: exact for a float). */
static size_t read_dump(const char *path, float *v, size_t max) {
    FILE *f = fopen(path, "r");
    cr_assert_not_null(f, "%s", path);
    size_t n = 0;
    char name[128], value[64];
    long idx;
    while (n < max && fscanf(f, "%127s %ld %63s", name, &idx, value) == 3)
        v[n++] = strtof(value, NULL);
    fclose(f);
    return n;
}

/* Files in dir other than . and .. */
static int count_files(const char *path) {
    DIR *d = opendir(path);
    cr_assert_not_null(d, "%s", path);
    int n = 0;
    for (struct dirent *e; (e = readdir(d));)
        n += strcmp(e->d_name, ".") && strcmp(e->d_name, "..");
    closedir(d);
    return n;
}

/* The consolidated file holds m's parameters, F32, with m's names and shapes in m's order,
 * equal bit for bit to the dump of the run that saved the checkpoint, and weights_load gives
 * the same numbers. */
static void expect_consolidated(const ModelDesc *m, const char *file, const char *dump,
                                const char *model_name) {
    size_t total = m->total_numel;
    float *want = calloc(total + 1, sizeof *want), *loaded = calloc(total + 1, sizeof *loaded);
    cr_assert(want && loaded);
    cr_assert_eq(read_dump(dump, want, total + 1), total, "the dump has every parameter");
    SafeTensors st;
    Err err = {0};
    cr_assert_eq(st_read(&st, file, &err), 0, "%s", err.msg);
    cr_assert_eq(st.n, m->nparams);
    size_t at = 0;
    for (int i = 0; i < m->nparams; i++) {
        const ParamSpec *p = &m->params[i];
        const StTensor *t = &st.tensors[i];
        cr_assert_str_eq(t->name, p->name, "tensor %d in the model's order", i);
        cr_assert_str_eq(t->dtype, "F32");
        cr_assert_eq(t->ndim, p->ndim, "%s", p->name);
        for (int d = 0; d < p->ndim; d++) cr_assert_eq(t->shape[d], p->shape[d], "%s", p->name);
        cr_assert_eq(memcmp(st_data(&st, t), want + at, p->numel * sizeof(float)), 0,
                     "%s differs from the dumped final parameters", p->name);
        at += p->numel;
    }
    cr_assert_str_eq(st_metadata(&st, "fsdp_model"), model_name);
    st_free(&st);
    cr_assert_eq(weights_load(m, file, loaded, &err), 0, "%s", err.msg);
    cr_assert_eq(memcmp(loaded, want, total * sizeof(float)), 0, "weights_load reads them back");
    free(want);
    free(loaded);
}

Test(ckpt_tools, inspect_lists_the_tensors_and_verifies_every_piece) {
    fresh_dir("inspect");
    free(fsdp_ok("train --ranks 3 --steps 4 --checkpoint-dir %s/ck --checkpoint-every 2", dir));
    int code;
    /* a --checkpoint-dir means its newest checkpoint */
    char *out = fsdp_run(&code, "2>&1", "ckpt inspect %s/ck", dir);
    cr_assert_eq(code, 0, "%s", out);
    const char *want[] = {
        "/ck/step-00000004\n",
        "format      fsdp-checkpoint version 2\n",
        "model       toy\n",
        "strategy    zero3\n",
        "world size  3\n",
        "step        4 (Adam steps 4,",
        "3 tensors, 9 parameters.",
        /* every tensor: shape, numel, and each kind's rows on each rank with their bytes */
        "  La.weight  [3]    numel 3  param r0 0-1 r1 1-2 r2 2-3 (12 B)  adam_m r0 0-1 r1 1-2 r2 "
        "2-3 (12 B)  adam_v r0 0-1 r1 1-2 r2 2-3 (12 B)\n",
        "  Lb.weight  [3]",
        "  Lc.weight  [3]",
        "  rank-00000.bin  9 pieces  36 B (36 bytes: param 12 B, adam_m 12 B, adam_v 12 B)\n",
        "  rank-00002.bin  9 pieces",
        "  total           27 pieces  108 B (108 bytes)\n",
        "all 27 pieces verified (CRC32, every value finite)",
    };
    expect_contains(out, want, sizeof want / sizeof *want);
    free(out);
    /* an older checkpoint by its own path */
    out = fsdp_run(&code, "2>&1", "ckpt inspect %s/ck/step-00000002", dir);
    cr_expect_eq(code, 0, "%s", out);
    cr_expect_neq(strstr(out, "step        2 "), NULL, "%s", out);
    free(out);
}

Test(ckpt_tools, every_strategy_covers_every_row_once, .timeout = 60) {
    const struct {
        const char *flags, *param_line;
        int pieces;
    } cases[] = {
        /* replicated state is saved by rank 0 alone; zero1 shards only the Adam moments */
        {"--ranks 2 --strategy ddp", "param r0 0-3 (12 B)  adam_m r0 0-3 (12 B)", 9},
        {"--ranks 2 --strategy zero1", "param r0 0-3 (12 B)  adam_m r0 0-2 r1 2-3 (12 B)", 15},
        {"--ranks 2 --strategy zero2", "param r0 0-2 r1 2-3 (12 B)", 18},
        {"--ranks 4 --strategy hsdp --replicas 2", "param r0 0-2 r1 2-3 (12 B)", 18},
    };
    for (size_t c = 0; c < sizeof cases / sizeof *cases; c++) {
        fresh_dir("strategies");
        free(fsdp_ok("train %s --steps 2 --checkpoint-dir %s/ck --checkpoint-every 2",
                     cases[c].flags, dir));
        int code;
        char *out = fsdp_run(&code, "2>&1", "ckpt inspect %s/ck", dir);
        char verified[64];
        snprintf(verified, sizeof verified, "all %d pieces verified", cases[c].pieces);
        cr_expect_eq(code, 0, "%s: %s", cases[c].flags, out);
        cr_expect_neq(strstr(out, cases[c].param_line), NULL, "%s lacks '%s':\n%s", cases[c].flags,
                      cases[c].param_line, out);
        cr_expect_neq(strstr(out, verified), NULL, "%s lacks '%s':\n%s", cases[c].flags, verified,
                      out);
        free(out);
    }
}

/* Trains the toy at 3 ranks to a step-4 checkpoint in dir/ck/step-00000004. */
static void toy_checkpoint(const char *tag) {
    fresh_dir(tag);
    free(fsdp_ok("train --ranks 3 --steps 4 --checkpoint-dir %s/ck --checkpoint-every 4", dir));
}

Test(ckpt_tools, inspect_refuses_a_damaged_checkpoint_with_one_line_and_exit_2) {
    /* a flipped byte in rank 1's first piece, La.weight's parameters */
    toy_checkpoint("flip");
    shell("printf '\\102' | dd of=%s/ck/step-00000004/rank-00001.bin bs=1 seek=1 conv=notrunc "
          "2>/dev/null",
          dir);
    expect_exit_2("rank-00001.bin is corrupt: CRC mismatch in La.weight's param (rows 1-2)",
                  "ckpt inspect %s/ck", dir);
    /* a flipped byte in an Adam moment: Lc.weight's adam_v is rank 2's last piece */
    toy_checkpoint("flip_adam");
    shell("printf '\\102' | dd of=%s/ck/step-00000004/rank-00002.bin bs=1 seek=33 conv=notrunc "
          "2>/dev/null",
          dir);
    expect_exit_2("rank-00002.bin is corrupt: CRC mismatch in Lc.weight's adam_v",
                  "ckpt inspect %s/ck", dir);
    /* a cut file, a missing one, bytes no piece accounts for */
    toy_checkpoint("cut");
    shell("truncate -s 10 %s/ck/step-00000004/rank-00002.bin", dir);
    expect_exit_2("rank-00002.bin is cut short", "ckpt inspect %s/ck", dir);
    shell("rm %s/ck/step-00000004/rank-00002.bin", dir);
    expect_exit_2("cannot open", "ckpt inspect %s/ck", dir);
    toy_checkpoint("long");
    shell("echo junk >> %s/ck/step-00000004/rank-00000.bin", dir);
    expect_exit_2("rank-00000.bin has 41 bytes but its pieces end at byte 36", "ckpt inspect %s/ck",
                  dir);
}

Test(ckpt_tools, inspect_checks_every_row_is_held_exactly_once) {
    /* rank 1's La.weight rows said to be rows 0-1: rows 0-1 twice, row 1 by nobody */
    toy_checkpoint("twice");
    char meta[256];
    snprintf(meta, sizeof meta, "%s/ck/step-00000004/meta.json", dir);
    shell("sed -i '0,/\"rank\":1,\"row_begin\":1/s//\"rank\":1,\"row_begin\":0/' %s", meta);
    ckpt_meta_reseal(meta); /* the checksum agrees: what is refused is the rows */
    expect_exit_2("meta.json: .pieces: rows 0-1 of La.weight's param are held twice (ranks 0 "
                  "and 1)",
                  "ckpt inspect %s/ck", dir);
    /* rank 2's piece of La.weight's parameters gone from meta.json */
    toy_checkpoint("gap");
    snprintf(meta, sizeof meta, "%s/ck/step-00000004/meta.json", dir);
    shell("sed -i '/\"tensor\":0,\"kind\":\"param\",\"rank\":2/d' %s", meta);
    ckpt_meta_reseal(meta);
    expect_exit_2("meta.json: .pieces: no piece holds rows 2-3 of La.weight's param",
                  "ckpt inspect %s/ck", dir);
    /* consolidate checks the parameters' rows too */
    int code;
    free(fsdp_run(&code, "2>/dev/null", "ckpt consolidate %s/ck -o %s/out.safetensors", dir, dir));
    cr_expect_eq(code, 2);
    cr_expect_eq(count_files(dir), 1, "no output, no temporary file");
}

Test(ckpt_tools, bad_arguments_and_paths_are_one_line_and_exit_2) {
    fresh_dir("args");
    expect_exit_2("ckpt needs a tool", "ckpt");
    expect_exit_2("unknown ckpt tool 'merge'", "ckpt merge %s", dir);
    expect_exit_2("ckpt inspect needs a checkpoint", "ckpt inspect");
    expect_exit_2("ckpt consolidate needs -o FILE", "ckpt consolidate %s", dir);
    expect_exit_2("ckpt inspect: unknown flag -o", "ckpt inspect %s -o x", dir);
    expect_exit_2("no checkpoint at", "ckpt inspect %s/nothing", dir);
    expect_exit_2("holds no checkpoint", "ckpt inspect %s", dir);
    shell("mkdir -p %s/ck/step-00000001 && echo '{\"format\":\"fsdp-checkpoint\",\"version\":9}' "
          "> %s/ck/step-00000001/meta.json",
          dir, dir);
    expect_exit_2("format version 9", "ckpt inspect %s/ck", dir);
    int code;
    char *out = fsdp_run(&code, "2>&1", "ckpt --help");
    cr_expect_eq(code, 0);
    cr_expect_neq(strstr(out, "consolidate D -o FILE"), NULL, "%s", out);
    free(out);
    out = fsdp_run(&code, "2>&1", "--help");
    cr_expect_neq(strstr(out, "  ckpt "), NULL, "the top-level usage lists ckpt: %s", out);
    free(out);
}

Test(ckpt_tools, consolidate_equals_the_final_parameters_bit_for_bit, .timeout = 60) {
    const char *cases[] = {"--ranks 3 --strategy zero3", "--ranks 2 --strategy ddp",
                           "--ranks 2 --strategy zero1", "--ranks 4 --strategy hsdp --replicas 2",
                           "--ranks 3 --param-dtype fp16 --reduce-dtype fp16"};
    ModelDesc toy;
    Err err = {0};
    cr_assert_eq(toy_model_create(&toy, &err), 0, "%s", err.msg);
    for (size_t c = 0; c < sizeof cases / sizeof *cases; c++) {
        fresh_dir("toy");
        free(fsdp_ok("train %s --steps 6 --checkpoint-dir %s/ck --checkpoint-every 3 --dump-params "
                     "%s/final.txt",
                     cases[c], dir, dir));
        int code;
        char *out =
            fsdp_run(&code, "2>&1", "ckpt consolidate %s/ck -o %s/model.safetensors", dir, dir);
        cr_assert_eq(code, 0, "%s: %s", cases[c], out);
        cr_expect_neq(strstr(out, "3 tensors, 9 parameters"), NULL, "%s", out);
        cr_expect_neq(strstr(out, "step-00000006 (toy, step 6)"), NULL, "%s", out);
        free(out);
        char file[256], dump[256];
        snprintf(file, sizeof file, "%s/model.safetensors", dir);
        snprintf(dump, sizeof dump, "%s/final.txt", dir);
        expect_consolidated(&toy, file, dump, "toy");
        /* train --init-from takes it: zero steps from it dump the same text */
        free(fsdp_ok("train --steps 0 --init-from %s --dump-params %s/again.txt", file, dir));
        shell("cmp -s %s %s/again.txt", dump, dir);
        cr_expect_eq(count_files(dir), 4, "ck, final.txt, model.safetensors, again.txt only");
    }
    model_desc_free(&toy);
}

Test(ckpt_tools, consolidate_a_vit_into_torchvision_names, .timeout = 60) {
    fresh_dir("vit");
    free(fsdp_ok("train " SMALL_VIT " --ranks 2 --batch-size 8 --steps 3 --checkpoint-dir %s/ck "
                 "--checkpoint-every 3 --dump-params %s/final.txt",
                 dir, dir));
    int code;
    char *out = fsdp_run(&code, "2>&1", "ckpt inspect %s/ck", dir);
    cr_assert_eq(code, 0, "%s", out);
    const char *want[] = {
        "model       vit-tiny\n",
        "config      image 28, patch 7, layers 1, heads 2, hidden 16, mlp 16, classes 10, "
        "channels 1\n",
        "20 tensors, 2986 parameters.",
        "  conv_proj.weight  ",
        "[16, 1, 7, 7]  numel 784  param r0 0-8 r1 8-16 (3136 B)",
        "  encoder.layers.encoder_layer_0.self_attention.in_proj_weight   [48, 16]",
        "  heads.head.bias  ",
        "all 114 pieces verified",
    };
    expect_contains(out, want, sizeof want / sizeof *want);
    free(out);
    free(fsdp_ok("ckpt consolidate %s/ck/step-00000003 --output %s/vit.safetensors", dir, dir));

    VitConfig c;
    vit_preset("vit-tiny", &c);
    c.layers = 1;
    c.hidden = 16;
    c.heads = 2;
    c.mlp = 16;
    ModelDesc m;
    Err err = {0};
    cr_assert_eq(vit_model_create(&m, &c, &err), 0, "%s", err.msg);
    char file[256], dump[256];
    snprintf(file, sizeof file, "%s/vit.safetensors", dir);
    snprintf(dump, sizeof dump, "%s/final.txt", dir);
    expect_consolidated(&m, file, dump, "vit-tiny");
    model_desc_free(&m);

    /* the model's config in __metadata__, under the names of the PyTorch fixture */
    SafeTensors st;
    cr_assert_eq(st_read(&st, file, &err), 0, "%s", err.msg);
    const char *meta[][2] = {{"fsdp_step", "3"}, {"image", "28"},   {"patch", "7"},
                             {"layers", "1"},    {"heads", "2"},    {"hidden", "16"},
                             {"mlp", "16"},      {"classes", "10"}, {"channels", "1"}};
    for (size_t i = 0; i < sizeof meta / sizeof *meta; i++) {
        const char *v = st_metadata(&st, meta[i][0]);
        cr_expect(v && !strcmp(v, meta[i][1]), "metadata %s: %s, not %s", meta[i][0],
                  v ? v : "absent", meta[i][1]);
    }
    st_free(&st);
    free(fsdp_ok("train " SMALL_VIT " --steps 0 --init-from %s --dump-params %s/again.txt", file,
                 dir));
    shell("cmp -s %s %s/again.txt", dump, dir);
}

/* Damages the step-4 checkpoint with `damage` (%s: its directory; with reseal, meta.json's
 * checksum recomputed after it), puts a file at -o first, and expects consolidate to fail
 * with exit 2 and one line mentioning want, leaving that file byte for byte and nothing else
 * behind. */
static void expect_output_kept_resealed(const char *damage, int reseal, const char *want) {
    toy_checkpoint("keep");
    char ck[256], out[256], meta[320];
    snprintf(ck, sizeof ck, "%s/ck/step-00000004", dir);
    snprintf(out, sizeof out, "%s/model.safetensors", dir);
    snprintf(meta, sizeof meta, "%s/meta.json", ck);
    shell("printf 'the weights of last week' > %s", out);
    shell(damage, ck);
    if (reseal) ckpt_meta_reseal(meta);
    expect_exit_2(want, "ckpt consolidate %s/ck -o %s", dir, out);
    char *after = read_text_file(out, NULL);
    cr_expect_str_eq(after, "the weights of last week", "after `%s`", damage);
    free(after);
    cr_expect_eq(count_files(dir), 2, "after `%s`: ck and the old file, no temporary file", damage);
}

static void expect_output_kept(const char *damage, const char *want) {
    expect_output_kept_resealed(damage, 0, want);
}

Test(ckpt_tools, consolidate_of_a_damaged_checkpoint_leaves_the_output_untouched) {
    /* Lc.weight's parameters on rank 1, its third piece of three kinds each */
    expect_output_kept("printf '\\102' | dd of=%s/rank-00001.bin bs=1 seek=24 conv=notrunc "
                       "2>/dev/null",
                       "rank-00001.bin is corrupt: CRC mismatch in Lc.weight's param");
    expect_output_kept("truncate -s 20 %s/rank-00002.bin", "rank-00002.bin is cut short");
    expect_output_kept("rm %s/rank-00000.bin", "cannot open");
    /* meta.json edited: its checksum says so, and with the checksum recomputed, the field */
    expect_output_kept("sed -i 's/\"version\":2/\"version\":9/' %s/meta.json",
                       "meta.json is damaged: its \"crc32\" line says");
    expect_output_kept_resealed("sed -i 's/\"version\":2/\"version\":9/' %s/meta.json", 1,
                                "meta.json is format version 9; this fsdp reads version 2");
    expect_output_kept_resealed("sed -i '0,/\"rows\":1,/s//\"rows\":0,/' %s/meta.json", 1,
                                "meta.json: .pieces[0].bytes is 4; its 0 rows of La.weight are 0 "
                                "bytes of fp32");
    /* -o that names a directory, or a place no file can be made */
    toy_checkpoint("bad_out");
    expect_exit_2("is a directory", "ckpt consolidate %s/ck -o %s", dir, dir);
    expect_exit_2("cannot create a temporary file next to", "ckpt consolidate %s/ck -o %s/no/x",
                  dir, dir);
    /* -o onto one of the checkpoint's own files */
    expect_exit_2("is inside the checkpoint",
                  "ckpt consolidate %s/ck -o %s/ck/step-00000004/rank-00000.bin", dir, dir);
    cr_expect_eq(count_files(dir), 1, "only ck");
    int code;
    char *out = fsdp_run(&code, "2>&1", "ckpt inspect %s/ck", dir);
    cr_expect_eq(code, 0, "the checkpoint is intact: %s", out);
    free(out);
}
