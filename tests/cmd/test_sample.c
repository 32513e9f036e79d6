/* `fsdp sample`: a transformer (GPT's layout, and Llama's) trained on the alphabet continues "abc"
 * with the alphabet, a seed repeats its draws, and bad input (missing flags, another model's file)
 * is one line, exit 2. */
#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tests/util.h"

static char dir[256], text[300], weights[300];

/* The alphabet and a newline, 200 times (5,400 bytes), learned for 100 steps: the greedy
 * continuation is then the alphabet (loss about 0.1: every next byte is certain but the first
 * of a sequence). */
static void train_alphabet_as(const char *model) {
    fresh_test_dir(dir, sizeof dir, "sample", "alphabet");
    snprintf(text, sizeof text, "%s/abc.txt", dir);
    snprintf(weights, sizeof weights, "%s/abc.safetensors", dir);
    FILE *f = fopen(text, "w");
    cr_assert(f);
    for (int i = 0; i < 200; i++) fputs("abcdefghijklmnopqrstuvwxyz\n", f);
    fclose(f);
    free(fsdp_ok("train --model %s --text %s --layers 1 --hidden 32 --heads 2 --mlp 64 "
                 "--seq 32 --ranks 2 --batch-size 8 --steps 100 --save-full %s",
                 model, text, weights));
}

static void train_alphabet(void) {
    train_alphabet_as("transformer");
}

Test(sample, a_model_of_the_alphabet_continues_it) {
    train_alphabet();
    char *out = fsdp_ok("sample --weights %s --prompt abc --tokens 40", weights);
    cr_expect_str_eq(out, "abcdefghijklmnopqrstuvwxyz\nabcdefghijklmnop\n");
    free(out);
    /* longer than a sequence: the context is the last 32 bytes */
    out = fsdp_ok("sample --weights %s --prompt mnopqrstuvwxyz_abcdefghijklmnopqrst --tokens 3",
                  weights);
    cr_expect_str_eq(out, "mnopqrstuvwxyz_abcdefghijklmnopqrstuvw\n");
    free(out);
    /* drawn at a temperature: the same seed, the same bytes; 40 of them after the prompt */
    char *a =
        fsdp_ok("sample --weights %s --prompt abc --tokens 40 --temperature 2 --seed 7", weights);
    char *b =
        fsdp_ok("sample --weights %s --prompt abc --tokens 40 --temperature 2 --seed 7", weights);
    char *c =
        fsdp_ok("sample --weights %s --prompt abc --tokens 40 --temperature 2 --seed 8", weights);
    cr_expect_str_eq(a, b);
    cr_expect_str_neq(a, c, "another seed, other draws");
    cr_expect(strncmp(a, "abc", 3) == 0 && a[43] == '\n' && a[44] == 0, "%s", a);
    free(a);
    free(b);
    free(c);
    remove_test_dir(dir);
}

/* The Llama-shaped one (RMSNorm, RoPE, one K,V head for the two, SwiGLU) from its file's
 * __metadata__ (fsdp_model llama, kv_heads) learns the alphabet as well. */
Test(sample, a_llama_of_the_alphabet_continues_it) {
    train_alphabet_as("llama");
    char *out = fsdp_ok("sample --weights %s --prompt abc --tokens 40", weights);
    cr_expect_str_eq(out, "abcdefghijklmnopqrstuvwxyz\nabcdefghijklmnop\n");
    free(out);
    remove_test_dir(dir);
}

Test(sample, bad_input_is_one_line_and_exit_2) {
    char vit[300], cmd[2][700];
    train_alphabet();
    snprintf(vit, sizeof vit, "%s/vit.safetensors", dir);
    free(fsdp_ok("train --model vit-tiny --layers 1 --hidden 16 --heads 2 --mlp 16 --ranks 1 "
                 "--steps 1 --batch-size 4 --eval false --split test --save-full %s",
                 vit));
    snprintf(cmd[0], sizeof cmd[0], "sample --weights %s --prompt abc", vit);
    snprintf(cmd[1], sizeof cmd[1], "sample --weights %s", weights);
    char want[600];
    snprintf(want, sizeof want,
             "%s is not a transformer's (__metadata__ fsdp_model: vit-tiny); sample continues "
             "text with weights of train --model transformer",
             vit);
    const UsageCase cases[] = {
        {"sample --prompt abc", "sample needs --weights FILE.safetensors"},
        {cmd[1], "sample needs --prompt TEXT, at least one byte of it"},
        {"sample --weights /nonexistent.safetensors --prompt abc", "/nonexistent.safetensors"},
        {"sample --weights x --prompt abc --tokens 0", "--tokens must be"},
        {"sample --weights x --prompt abc --temperature -1", "--temperature must be"},
        {"sample --weights x --prompt abc --seed -3", "--seed must be"},
        {"sample --weights x --prompt abc --top-k 5", "unknown flag --top-k"},
        {cmd[0], want},
    };
    expect_usage_errors(cases, sizeof cases / sizeof *cases);
    remove_test_dir(dir);
}
