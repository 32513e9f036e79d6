/* `fsdp train --model transformer` from the command line: a text learned at 1 and 4 ranks to the
 * same parameters, the first loss ln 256, the default text, and bad input (the text, its flags)
 * one line and exit 2 before anything is written. */
#include <criterion/criterion.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "tests/util.h"

/* A text of numbered lines (10,890 bytes) in dir/name. */
static void write_text(const char *dir, const char *name, char *path, size_t n) {
    snprintf(path, n, "%s/%s", dir, name);
    FILE *f = fopen(path, "w");
    cr_assert(f, "cannot write %s", path);
    for (int i = 0; i < 200; i++)
        fprintf(f, "line %d: the quick brown fox jumps over the lazy dog.\n", i);
    fclose(f);
}

/* The JSON lines' losses: the first step's and the last's. */
static void first_last_loss(const char *out, double *first, double *last) {
    *first = *last = NAN;
    for (const char *at = strstr(out, "\"loss\":"); at; at = strstr(at + 1, "\"loss\":")) {
        double v = strtod(at + strlen("\"loss\":"), NULL);
        if (isnan(*first)) *first = v;
        *last = v;
    }
}

/* `train FLAGS --text text` at 1 rank with `global` sequences a step and at 4 ranks with a
 * quarter each, their parameters dumped into one and four: within 1e-5 of each other (invariant
 * 1), the first loss ln 256 = 5.545 (a fresh model spreads its bets evenly over the bytes) and
 * the last at least `drop` below it. */
static void expect_one_and_four_learn_alike(const char *flags, const char *text, int global,
                                            const char *one, const char *four, double drop) {
    int code;
    char *a =
        fsdp_run(&code, "2>&1", "train %s --text %s --ranks 1 --batch-size %d --dump-params %s",
                 flags, text, global, one);
    cr_assert_eq(code, 0, "%s", a);
    char *b =
        fsdp_run(&code, "2>&1", "train %s --text %s --ranks 4 --batch-size %d --dump-params %s",
                 flags, text, global / 4, four);
    cr_assert_eq(code, 0, "%s", b);
    double d = dump_rel_diff(four, one);
    cr_expect_leq(d, 1e-5, "4 ranks against 1: relative L2 %.3g", d);
    double first, last;
    first_last_loss(a, &first, &last);
    cr_expect(fabs(first - log(256.0)) < 0.05, "first loss %g, not ln 256", first);
    cr_expect_lt(last, first - drop, "it learned: %g -> %g", first, last);
    free(a);
    free(b);
}

/* Invariant 1 through the whole command: the same text, 8 sequences a step, on 1 rank and on
 * 4 (zero3), end at parameters within 1e-5 of each other (--dump-params); the loss starts at
 * ln 256 = 5.545 (a fresh model spreads its bets evenly over the bytes) and falls. */
Test(lm_train, one_rank_and_four_learn_the_same_parameters) {
    char dir[256], text[300], one[300], four[300];
    fresh_test_dir(dir, sizeof dir, "lm_train", "ranks");
    write_text(dir, "text.txt", text, sizeof text);
    snprintf(one, sizeof one, "%s/one.txt", dir);
    snprintf(four, sizeof four, "%s/four.txt", dir);
    expect_one_and_four_learn_alike("--model transformer --layers 2 --hidden 32 --heads 4 --mlp 64 "
                                    "--seq 32 --steps 30 --json",
                                    text, 8, one, four, 2.0);
    remove_test_dir(dir);
}

/* The presets (gpt2-small, llama-125m) keep their heads (12; 16 with 4 K,V heads) at a width
 * and depth a test can afford (2 layers, 8 and 4 columns a head; their full size is checked by
 * count in tests/models/test_transformer.c): 1 rank and 4 learn alike. */
Test(lm_train, the_presets_learn_alike_at_one_rank_and_four) {
    const char *presets[] = {"gpt2-small", "llama-125m"};
    const int hidden[] = {96, 64};
    for (int i = 0; i < 2; i++) {
        char dir[256], text[300], one[300], four[300], flags[300];
        fresh_test_dir(dir, sizeof dir, "lm_train", presets[i]);
        write_text(dir, "text.txt", text, sizeof text);
        snprintf(one, sizeof one, "%s/one.txt", dir);
        snprintf(four, sizeof four, "%s/four.txt", dir);
        snprintf(flags, sizeof flags,
                 "--model %s --layers 2 --hidden %d --mlp 128 --seq 32 --steps 20 --json",
                 presets[i], hidden[i]);
        expect_one_and_four_learn_alike(flags, text, 8, one, four, 1.0);
        remove_test_dir(dir);
    }
}

/* --loss eager and --ac-policy ops from the command line, in bf16 and in fp32 over 4 ranks:
 * each learns what the fused loss and no checkpointing learn. The eager loss rounds its
 * log-softmax apart from the fused pass (to within 1e-5 of the parameters in fp32; bf16's
 * gradient is rounded once either way, so 1e-3 there); op checkpointing recomputes the same
 * bits (0). */
Test(lm_train, the_eager_loss_and_op_checkpointing_learn_what_the_defaults_learn) {
    const char *dtypes[] = {"fp32", "bf16"};
    const double loss_tol[] = {1e-5, 1e-3};
    for (int d = 0; d < 2; d++) {
        char dir[256], text[300], base[300], eager[300], ops[300];
        fresh_test_dir(dir, sizeof dir, "lm_train", dtypes[d]);
        write_text(dir, "text.txt", text, sizeof text);
        snprintf(base, sizeof base, "%s/base.txt", dir);
        snprintf(eager, sizeof eager, "%s/eager.txt", dir);
        snprintf(ops, sizeof ops, "%s/ops.txt", dir);
        const char *job = fmt_text("train --model llama --layers 2 --hidden 32 --heads 4 --mlp 64 "
                                   "--seq 32 --steps 10 --ranks 4 --batch-size 2 --text %s "
                                   "--param-dtype %s --dump-params",
                                   text, dtypes[d]);
        int code;
        char *a = fsdp_run(&code, "2>&1", "%s %s", job, base);
        cr_assert_eq(code, 0, "%s", a);
        char *b = fsdp_run(&code, "2>&1", "%s %s --loss eager", job, eager);
        cr_assert_eq(code, 0, "%s", b);
        char *c =
            fsdp_run(&code, "2>&1", "%s %s --activation-checkpointing --ac-policy ops", job, ops);
        cr_assert_eq(code, 0, "%s", c);
        double de = dump_rel_diff(eager, base), dop = dump_rel_diff(ops, base);
        cr_expect_leq(de, loss_tol[d], "%s: the eager loss is %.3g from the fused", dtypes[d], de);
        cr_expect_eq(dop, 0.0, "%s: op checkpointing is %.3g from none", dtypes[d], dop);
        free(a), free(b), free(c);
        remove_test_dir(dir);
    }
}

/* Without --text, the text the README names (the fortunes package's cookies, which .ci/deps.sh
 * installs): its text files counted, its index files left out, gathered into a token file in the
 * cache ($FSDP_CACHE, which make test points into the build), then mapped by the next run. */
Test(lm_train, the_default_text_is_there) {
    char *out = fsdp_ok("train --model transformer --ranks 1 --steps 2");
    cr_expect(strstr(out, "data: /usr/share/games/fortunes (43 files; 43 more hold a 0 byte, not "
                          "text, and are left out), 2,576,674 bytes: 40,260 sequences of 64 bytes "
                          "(each byte predicts the next)\n"),
              "%s", out);
    cr_expect(strstr(out, "run: 2 steps (an epoch is 2516 steps of 16 sequences)\n"), "%s", out);
    cr_expect(strstr(out, "step     2/2  epoch 1  loss "), "%s", out);
    free(out);
    out = fsdp_ok("train --model transformer --ranks 1 --steps 1");
    cr_expect(strstr(out, "tokens: ") && strstr(out, ".tokens, made before (every rank maps it "
                                                     "read-only)\n"),
              "%s", out);
    free(out);
}

/* --val-size holds out the text's last sequences: the epoch is what is left, and each evaluation
 * prints the held-out loss in nats and in bits per byte (the same loss over ln 2). */
Test(lm_train, validation_holds_out_the_last_sequences) {
    char dir[256], text[300];
    fresh_test_dir(dir, sizeof dir, "lm_train", "val");
    write_text(dir, "text.txt", text, sizeof text);
    char *out = fsdp_ok("train --model transformer --text %s --ranks 2 --batch-size 4 --steps 6 "
                        "--val-size 20 --eval-every 3",
                        text);
    cr_expect(strstr(out, "validation: the last 20 sequences, held out\n"), "%s", out);
    cr_expect(strstr(out, "an epoch is 18 steps of 8 sequences"), "%s", out); /* (170 - 20) / 8 */
    const char *at = strstr(out, "validation at step 3 (epoch 1): loss ");
    cr_assert(at, "%s", out);
    double nats = 0, bits = 0;
    cr_assert_eq(sscanf(at, "validation at step 3 (epoch 1): loss %lf nats/byte, %lf bits/byte",
                        &nats, &bits),
                 2, "%s", at);
    cr_expect(nats > 0 && nats < 6.0, "%g", nats); /* below ln 256 = 5.55 plus a margin */
    cr_expect_float_eq(bits, nats / 0.69314718055994531, 1e-3, "%g vs %g", bits, nats);
    cr_expect(strstr(at, "(lowest so far), 20 sequences"), "%s", at);
    cr_expect(strstr(out, "validation after epoch 1 (step 6): loss "), "%s", out);
    free(out);
    remove_test_dir(dir);
}

/* Each bad text or flag is the only line printed, exit 2, before any training, and a file that
 * was there (--dump-params's) is still what it was. */
Test(lm_train, bad_input_is_one_line_and_exit_2) {
    char dir[256], precious[300], empty[300], shorter[300], text[300];
    fresh_test_dir(dir, sizeof dir, "lm_train", "bad");
    snprintf(precious, sizeof precious, "%s/precious", dir);
    snprintf(empty, sizeof empty, "%s/empty.txt", dir);
    snprintf(shorter, sizeof shorter, "%s/short.txt", dir);
    FILE *f = fopen(precious, "w");
    cr_assert(f);
    fputs("precious\n", f);
    fclose(f);
    cr_assert(f = fopen(empty, "w"));
    fclose(f);
    cr_assert(f = fopen(shorter, "w"));
    fputs("sixty-four bytes make a sequence; this line has fewer than that.", f); /* 64 */
    fclose(f);
    write_text(dir, "text.txt", text, sizeof text);
    char none[300];
    snprintf(none, sizeof none, "%s/none", dir);
    cr_assert_eq(mkdir(none, 0755), 0);
    char cases[][2][512] = {
        {"--text %s/missing.txt",
         "--text %s/missing.txt: cannot open it: No such file or directory"},
        {"--text %s/empty.txt", "--text %s/empty.txt is empty"},
        {"--text %s/short.txt", "--text %s/short.txt has 64 bytes; one sequence of --seq 64 needs "
                                "65 (each byte predicts the one after it)"},
        {"--text %s/none", "--text %s/none: the folder holds no files"},
        {"--text %s/precious --seq 70000", "--seq must be"},
        {"--text %s/text.txt --seq 0", "--seq must be"},
        {"--text %s/text.txt --heads 5", "--hidden must be a multiple of --heads (got 128 and 5)"},
        {"--text %s/text.txt --batch-size 1000", "more than the data set's 170"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        char flags[600], want[600];
        snprintf(flags, sizeof flags, cases[i][0], dir);
        snprintf(want, sizeof want, cases[i][1], dir);
        int code;
        char *said = fsdp_run(&code, "2>&1",
                              "train --model transformer --ranks 2 --steps 3 "
                              "--dump-params %s %s",
                              precious, flags);
        cr_expect_eq(code, 2, "%s: exit %d", flags, code);
        cr_expect(strstr(said, want) && strncmp(said, "fsdp: ", 6) == 0 &&
                      strchr(said, '\n') == said + strlen(said) - 1,
                  "%s: should say only 'fsdp: ...%s...', said:\n%s", flags, want, said);
        free(said);
    }
    char *kept = read_text_file(precious, NULL);
    cr_expect_str_eq(kept, "precious\n");
    free(kept);
    remove_test_dir(dir);
}

/* The flags of one model are refused with another's, naming both. */
Test(lm_train, flags_of_another_model_are_refused) {
    static const UsageCase cases[] = {
        {"train --model toy --text x", "--text and --seq apply to the transformer, not toy"},
        {"train --model vit-tiny --seq 16", "--text and --seq apply to the transformer, not "
                                            "vit-tiny"},
        {"train --model transformer --data x", "--data and --split apply to the ViT models, not "
                                               "transformer"},
        {"train --model toy --layers 2",
         "apply to the ViT models and the transformer, not the toy"},
        {"train --model gpt",
         "--model must be toy, vit-tiny, vit-workshop, transformer, llama, gpt2-small, "
         "llama-125m (got 'gpt')"},
    };
    expect_usage_errors(cases, sizeof cases / sizeof *cases);
}

/* `--model llama` through the whole command (flash attention, the default): 1 rank and 4 learn
 * the same parameters (invariant 1), and a run checkpointed at 2 ranks and resumed at 3 ends
 * where the uninterrupted one does (invariant 5). */
Test(lm_train, llama_learns_alike_at_any_world_size_and_resumes_at_another) {
    char dir[256], text[300], one[300], four[300], resumed[300], ck[300];
    fresh_test_dir(dir, sizeof dir, "lm_train", "llama");
    write_text(dir, "text.txt", text, sizeof text);
    snprintf(one, sizeof one, "%s/one.txt", dir);
    snprintf(four, sizeof four, "%s/four.txt", dir);
    snprintf(resumed, sizeof resumed, "%s/resumed.txt", dir);
    snprintf(ck, sizeof ck, "%s/ck", dir);
    const char *shape = "--model llama --layers 2 --hidden 32 --heads 4 --kv-heads 2 --mlp 48 "
                        "--seq 32 --json";
    char twelve[256];
    snprintf(twelve, sizeof twelve, "%s --steps 12", shape);
    expect_one_and_four_learn_alike(twelve, text, 12, one, four, 1.0);
    int code;
    char *c = fsdp_run(&code, "2>&1",
                       "train %s --text %s --steps 6 --ranks 4 --batch-size 3 "
                       "--checkpoint-dir %s --checkpoint-every 6",
                       shape, text, ck);
    cr_assert_eq(code, 0, "%s", c);
    char *r = fsdp_run(&code, "2>&1",
                       "train %s --text %s --steps 12 --ranks 3 --batch-size 4 "
                       "--checkpoint-dir %s --resume auto --dump-params %s",
                       shape, text, ck, resumed);
    cr_assert_eq(code, 0, "%s", r);
    double d = dump_rel_diff(resumed, one);
    cr_expect_leq(d, 1e-5, "resumed at 3 ranks against 1 uninterrupted: relative L2 %.3g", d);
    free(c);
    free(r);
    remove_test_dir(dir);
}
