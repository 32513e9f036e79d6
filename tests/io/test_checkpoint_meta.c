/* Nothing damaged is believed (issue 25, items 1, 2 and 7): every edit below, applied to a
 * freshly saved checkpoint, is refused by each reader (ckpt inspect, ckpt consolidate, train
 * --resume) with one line that names the file and the field, exit 2, and every file of the
 * test's directory byte for byte as before, none added. An edit of meta.json is tried twice:
 * with its "crc32" line left stale, which the checksum catches before any field is read, and
 * with the line recomputed (ckpt_meta_reseal), which only the field's own check can catch. */
#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tests/util.h"

/* The small ViT of test_checkpoint.c: one block, hidden 16, on FashionMNIST's test split. */
#define SMALL_VIT                                                                                  \
    "--model vit-tiny --layers 1 --hidden 16 --heads 2 --mlp 16 --split test --eval false"

/* A transformer as small: one block of width 16 over sequences of 16 bytes of the default text. */
#define SMALL_TF "--model transformer --layers 1 --hidden 16 --heads 2 --mlp 16 --seq 16"

/* ... the small ViT holding out its split's last 200 images, validated at step 4 (--val-size) */
#define HELD_OUT_VIT                                                                               \
    "--model vit-tiny --layers 1 --hidden 16 --heads 2 --mlp 16 --split test --val-size 200 "      \
    "--eval-every 4"

/* ... the toy on a cosine schedule, which its checkpoints record */
#define SCHEDULE "--lr-schedule cosine --warmup-steps 2 --min-lr 0.01"

typedef enum { TOY, VIT, TF, HELD, SCHED } Saved;

/* What each edit starts from: a step-4 checkpoint of the toy at 3 ranks, the small ViT or the
 * small transformer at 2 (HELD: the ViT with "held_out" and "val_loss"; SCHED: the toy with
 * "lr_schedule"), and the run that resumes it. */
static const struct {
    const char *train, *resume;
} saved[] = {
    [TOY] = {"train --ranks 3 --steps 4", "train --ranks 3 --steps 6"},
    [VIT] = {"train " SMALL_VIT " --ranks 2 --batch-size 8 --steps 4",
             "train " SMALL_VIT " --ranks 2 --batch-size 8 --steps 6"},
    [TF] = {"train " SMALL_TF " --ranks 2 --batch-size 4 --steps 4",
            "train " SMALL_TF " --ranks 2 --batch-size 4 --steps 6"},
    [HELD] = {"train " HELD_OUT_VIT " --ranks 2 --batch-size 8 --steps 4",
              "train " HELD_OUT_VIT " --ranks 2 --batch-size 8 --steps 6"},
    [SCHED] = {"train --ranks 3 --steps 4 " SCHEDULE, "train --ranks 3 --steps 4 " SCHEDULE},
};

typedef struct MetaCase {
    Saved from;
    const char *edit; /* a shell command run in the checkpoint's directory, D/step-00000004 */
    int of_meta;      /* it edits meta.json: tried with the checksum stale, then recomputed */
    const char *says; /* in the one line once the checksum agrees: the file, the field */
} MetaCase;

#define STALE "step-00000004/meta.json is damaged: its \"crc32\" line says "

static char dir[128];

/* The file names and the cksum of every file under d, as text: equal texts, equal trees. */
static char *snapshot(const char *d) {
    char cmd[512];
    snprintf(cmd, sizeof cmd,
             "cd %s && find . | LC_ALL=C sort && find . -type f | LC_ALL=C sort | xargs cksum", d);
    FILE *p = popen(cmd, "r");
    cr_assert_not_null(p, "%s", cmd);
    size_t cap = 1 << 16, n = 0;
    char *text = malloc(cap);
    cr_assert_not_null(text);
    for (size_t got; (got = fread(text + n, 1, cap - 1 - n, p)) > 0;)
        if ((n += got) + 1 == cap) cr_assert_not_null(text = realloc(text, cap *= 2));
    text[n] = 0;
    cr_assert_eq(pclose(p), 0, "%s", cmd);
    return text;
}

static void shell(const char *cmd) {
    cr_assert_eq(system(cmd), 0, "%s", cmd);
}

/* dir/base-F/ck: the checkpoint of saved[from], trained once per test process. */
static void save_once(Saved from) {
    static int made[SCHED + 1];
    if (made[from]) return;
    char cmd[256];
    snprintf(cmd, sizeof cmd, "mkdir -p %s/base-%d", dir, (int)from);
    shell(cmd);
    free(fsdp_ok("%s --checkpoint-dir %s/base-%d/ck --checkpoint-every 4", saved[from].train, dir,
                 (int)from));
    made[from] = 1;
}

/* Each reader refuses case_dir's checkpoint with one line containing `says`, exit 2, and
 * leaves every file under case_dir as it was (the checkpoint, and the file at -o). */
static void expect_every_reader_refuses(const char *case_dir, Saved from, const char *says,
                                        const char *edit) {
    char *before = snapshot(case_dir);
    char args[3][1024];
    snprintf(args[0], sizeof args[0], "ckpt inspect %s/ck", case_dir);
    snprintf(args[1], sizeof args[1], "ckpt consolidate %s/ck -o %s/model.safetensors", case_dir,
             case_dir);
    snprintf(args[2], sizeof args[2], "%s --resume %s/ck/step-00000004", saved[from].resume,
             case_dir);
    for (int r = 0; r < 3; r++) free(expect_usage_error_text(args[r], says));
    char *after = snapshot(case_dir);
    cr_expect_str_eq(after, before, "after `%s` and the readers, the files differ", edit);
    free(before);
    free(after);
}

static void run_cases(const MetaCase *cases, size_t n) {
    fresh_test_dir(dir, sizeof dir, "ckpt_meta", "cases");
    for (size_t i = 0; i < n; i++) {
        const MetaCase *c = &cases[i];
        save_once(c->from);
        char case_dir[256], cmd[2048], meta[320];
        snprintf(case_dir, sizeof case_dir, "%s/case-%02zu", dir, i);
        snprintf(meta, sizeof meta, "%s/ck/step-00000004/meta.json", case_dir);
        /* a fresh copy, a file already at consolidate's -o, then the edit */
        snprintf(cmd, sizeof cmd,
                 "mkdir -p %s && cp -r %s/base-%d/ck %s/ && printf 'the weights of last week' > "
                 "%s/model.safetensors && cd %s/ck/step-00000004 && %s",
                 case_dir, dir, (int)c->from, case_dir, case_dir, case_dir, c->edit);
        shell(cmd);
        if (c->of_meta) {
            expect_every_reader_refuses(case_dir, c->from, STALE, c->edit);
            ckpt_meta_reseal(meta);
        }
        expect_every_reader_refuses(case_dir, c->from, c->says, c->edit);
        remove_test_dir(case_dir);
    }
    remove_test_dir(dir);
}

/* The cases, each as it was reported. */
Test(checkpoint_meta, the_reported_edits_are_refused_by_every_reader) {
    const MetaCase cases[] = {
        /* item 1: a step past a long's range overflowed the sampler's index (a segfault) */
        {VIT, "sed -i 's/\"step\":4,/\"step\":1e300,/' meta.json", 1,
         "step-00000004/meta.json: .step is 1e+300; it must be a whole number from 0 to "
         "1000000000 (the most steps a run takes)"},
        {VIT, "sed -i 's/\"step\":4,/\"step\":9.3e18,/' meta.json", 1,
         "step-00000004/meta.json: .step is 9.3e+18; it must be a whole number from 0 to "
         "1000000000"},
        /* item 2: a config that contradicts the tensors */
        {VIT, "sed -i 's/\"hidden\":16,/\"hidden\":8,/' meta.json", 1,
         "step-00000004/meta.json: .tensors[0].shape of class_token is [1, 1, 16]; the ViT its "
         ".config describes (image 28, patch 7, layers 1, heads 2, hidden 8, mlp 16, classes "
         "10) has [1, 1, 8]"},
        {VIT, "sed -i 's/\"layers\":1,/\"layers\":3,/' meta.json", 1,
         "step-00000004/meta.json: .tensors lists 20 tensors; the ViT its .config describes "
         "(image 28, patch 7, layers 3, heads 2, hidden 16, mlp 16, classes 10) has 44"},
        {VIT, "sed -i 's/\"conv_proj.bias\"/\"nope.bias\"/' meta.json", 1,
         "step-00000004/meta.json: .tensors[2].name is nope.bias; the ViT its .config describes "
         "(image 28, patch 7, layers 1, heads 2, hidden 16, mlp 16, classes 10) has "
         "conv_proj.bias there"},
        {VIT, "sed -i 's/\"model\":\"vit-tiny\"/\"model\":\"gpt9\"/' meta.json", 1,
         "step-00000004/meta.json: .model is \"gpt9\"; it must be a model this fsdp builds: toy, "
         "vit-tiny, vit-workshop, transformer or llama"},
        {VIT, "sed -i 's/\"strategy\":\"zero3\"/\"strategy\":\"zeroX\"/' meta.json", 1,
         "step-00000004/meta.json: .strategy is \"zeroX\"; it must be one of ddp, zero1, zero2, "
         "zero3, hsdp"},
        {TOY, "sed -i 's/\"adam_steps\":4,/\"adam_steps\":-1,/' meta.json", 1,
         "step-00000004/meta.json: .adam_steps is -1; it must be a whole number from 0 to 4"},
        {TOY, "sed -i 's/\"loss_scale\":65536,/\"loss_scale\":-1,/' meta.json", 1,
         "step-00000004/meta.json: .loss_scale is -1; it must be a finite number above 0"},
        /* the first piece listed twice */
        {TOY, "sed -i '/^\"pieces\":\\[$/{n;p}' meta.json", 1,
         "step-00000004/meta.json: .pieces: rows 0-1 of La.weight's param are held twice by "
         "rank 0"},
        /* two tensors of one name */
        {TOY, "sed -i 's/\"name\":\"Lb.weight\"/\"name\":\"La.weight\"/' meta.json", 1,
         "step-00000004/meta.json: .tensors[1].name is La.weight, as .tensors[0].name is"},
        /* world 3 with two rank files */
        {VIT, "sed -i 's/\"world\":2,/\"world\":3,/' meta.json", 1,
         "step-00000004/rank-00002.bin: No such file or directory (meta.json's .world is 3)"},
        /* 100 junk bytes after a rank file's pieces */
        {TOY, "head -c 100 /dev/urandom >> rank-00001.bin", 0,
         "step-00000004/rank-00001.bin has 136 bytes but its pieces end at byte 36: it is not "
         "the file this checkpoint saved"},
    };
    run_cases(cases, sizeof cases / sizeof *cases);
}

/* Every other field meta.json has, out of its range or against the model or the files. */
Test(checkpoint_meta, every_field_is_checked_against_its_range_and_the_model) {
    const MetaCase cases[] = {
        {TOY, "sed -i 's/\"step\":4,/\"step\":2.5,/' meta.json", 1,
         "step-00000004/meta.json: .step is 2.5; it must be a whole number from 0 to 1000000000"},
        {TOY, "sed -i 's/\"step\":4,/\"step\":\"4\",/' meta.json", 1,
         "step-00000004/meta.json: .step is not a number; it must be a whole number"},
        {TOY, "sed -i 's/\"adam_steps\":4,/\"adam_steps\":5,/' meta.json", 1,
         "step-00000004/meta.json: .adam_steps is 5; it must be a whole number from 0 to 4 "
         "(Adam steps at most .step"},
        {TOY, "sed -i 's/\"loss_scale\":65536,/\"loss_scale\":0,/' meta.json", 1,
         "step-00000004/meta.json: .loss_scale is 0; it must be a finite number above 0"},
        {TOY, "sed -i 's/\"loss_scale\":65536,/\"loss_scale\":1e39,/' meta.json", 1,
         "step-00000004/meta.json: .loss_scale is 1e+39; it must be a finite number above 0 (a "
         "float:"},
        {TOY, "sed -i 's/\"good_steps\":0,/\"good_steps\":2000,/' meta.json", 1,
         "step-00000004/meta.json: .good_steps is 2000; it must be a whole number from 0 to 4"},
        {TOY, "sed -i 's/\"world\":3,/\"world\":0,/' meta.json", 1,
         "step-00000004/meta.json: .world is 0; it must be a whole number from 1 to 65536"},
        {TOY, "sed -i 's/\"world\":3,/\"world\":70000,/' meta.json", 1,
         "step-00000004/meta.json: .world is 70000; it must be a whole number from 1 to 65536"},
        {TOY, "sed -i 's/\"step\":4,/\"step\":4,\"step\":9,/' meta.json", 1,
         "step-00000004/meta.json: the key \"step\" appears twice in one object"},
        {TOY,
         "sed -i 's/\"good_steps\":0,/\"good_steps\":0,\"config\":{\"layers\":2},/' "
         "meta.json",
         1, "step-00000004/meta.json: .config is there, but the toy has no sizes to set"},
        {VIT, "sed -i '/^\"config\"/d' meta.json", 1,
         "step-00000004/meta.json: .config is missing; a ViT's checkpoint records its image, "
         "patch, layers"},
        {VIT, "sed -i 's/\"channels\":1}/\"channels\":3}/' meta.json", 1,
         "step-00000004/meta.json: .config.channels is 3; this fsdp's ViT takes 1"},
        {VIT, "sed -i 's/\"channels\":1}/\"channels\":1,\"depth\":4}/' meta.json", 1,
         "step-00000004/meta.json: .config.depth is no size of a ViT"},
        {VIT, "sed -i 's/\"layers\":1,/\"layers\":0,/' meta.json", 1,
         "step-00000004/meta.json: .config.layers is 0; it must be a whole number from 1 to "
         "1048576"},
        {VIT, "sed -i 's/\"heads\":2,/\"heads\":3,/' meta.json", 1,
         "step-00000004/meta.json: .config is no ViT this fsdp builds: --heads must divide "
         "--hidden 16 (got 3)"},
        {TOY, "sed -i 's/La.weight/Lx.weight/' meta.json", 1,
         "step-00000004/meta.json: .tensors[0].name is Lx.weight; the toy has La.weight there"},
        {TOY, "sed -i '0,/\"shape\":\\[3\\]/s//\"shape\":[4]/' meta.json", 1,
         "step-00000004/meta.json: .tensors[0].shape of La.weight is [4]; the toy has [3]"},
        {TOY, "sed -i '0,/\"dtype\":\"fp32\"/s//\"dtype\":\"bf16\"/' meta.json", 1,
         "step-00000004/meta.json: .tensors[0].dtype of La.weight is bf16; checkpoints hold fp32"},
        {TOY, "sed -i '0,/\"rows\":1,/s//\"rows\":0,/' meta.json", 1,
         "step-00000004/meta.json: .pieces[0].bytes is 4; its 0 rows of La.weight are 0 bytes "
         "of fp32"},
        {TOY, "sed -i '0,/\"offset\":4,/s//\"offset\":8,/' meta.json", 1,
         "step-00000004/meta.json: .pieces[1].offset is 8, but rank 0's pieces before it in "
         "rank-00000.bin end at byte 4"},
        {TOY, "sed -i '0,/\"rank\":0,/s//\"rank\":3,/' meta.json", 1,
         "step-00000004/meta.json: .pieces[0].rank is 3; it must be a whole number from 0 to 2 "
         "(the ranks of .world)"},
        {TOY, "sed -i '0,/\"kind\":\"param\"/s//\"kind\":\"grad\"/' meta.json", 1,
         "step-00000004/meta.json: .pieces[0].kind is \"grad\"; it must be param, adam_m or "
         "adam_v"},
        {TOY, "sed -i '0,/\"row_begin\":0,\"rows\":1,/s//\"row_begin\":3,\"rows\":1,/' meta.json",
         1,
         "step-00000004/meta.json: .pieces[0].rows is 1; it must be a whole number from 0 to 0 "
         "(La.weight has 3 rows)"},
        {TOY, "sed -i '/\"tensor\":0,\"kind\":\"param\",\"rank\":2/d' meta.json", 1,
         "step-00000004/meta.json: .pieces: no piece holds rows 2-3 of La.weight's param"},
    };
    run_cases(cases, sizeof cases / sizeof *cases);
}

/* The transformer's .config: written, read and checked as the ViT's is, against its six sizes
 * and against the tensors it makes. */
Test(checkpoint_meta, the_transformers_config_is_checked_as_the_vits, .timeout = 240) {
    const MetaCase cases[] = {
        {TF, "sed -i '/^\"config\"/d' meta.json", 1,
         "step-00000004/meta.json: .config is missing; a transformer's checkpoint records its "
         "layers, heads, hidden, mlp, seq and vocab"},
        {TF, "sed -i 's/\"vocab\":256}/\"vocab\":256,\"depth\":4}/' meta.json", 1,
         "step-00000004/meta.json: .config.depth is no size of a transformer"},
        {TF, "sed -i 's/\"vocab\":256}/\"vocab\":0}/' meta.json", 1,
         "step-00000004/meta.json: .config.vocab is 0; it must be a whole number from 1 to "
         "16777216"},
        {TF, "sed -i 's/\"seq\":16,/\"seq\":2.5,/' meta.json", 1,
         "step-00000004/meta.json: .config.seq is 2.5; it must be a whole number"},
        {TF, "sed -i 's/\"heads\":2,/\"heads\":3,/' meta.json", 1,
         "step-00000004/meta.json: .config is no transformer this fsdp builds: --hidden must be a "
         "multiple of --heads (got 16 and 3)"},
        {TF, "sed -i 's/\"seq\":16,/\"seq\":32,/' meta.json", 1,
         "step-00000004/meta.json: .tensors[1].shape of wpe.weight is [16, 16]; the transformer "
         "its .config describes (layers 1, heads 2, hidden 16, mlp 16, seq 32, vocab 256) has "
         "[32, 16]"},
        {TF, "sed -i 's/\"layers\":1,/\"layers\":2,/' meta.json", 1,
         "step-00000004/meta.json: .tensors lists 17 tensors; the transformer its .config "
         "describes (layers 2, heads 2, hidden 16, mlp 16, seq 16, vocab 256) has 29"},
        {TF, "sed -i 's/\"model\":\"transformer\"/\"model\":\"vit-tiny\"/' meta.json", 1,
         "step-00000004/meta.json: .config.seq is no size of a ViT"},
    };
    run_cases(cases, sizeof cases / sizeof *cases);
}

/* --val-size's fields: how many images were held out, and their loss at the step. Optional, but
 * believed only in range, and a loss only beside the count it was measured on. */
Test(checkpoint_meta, the_held_out_count_and_the_validation_loss, .timeout = 120) {
    const MetaCase cases[] = {
        {HELD, "sed -i 's/\"held_out\":200,/\"held_out\":0,/' meta.json", 1,
         "step-00000004/meta.json: .held_out is 0; it must be a whole number from 1 to "
         "1000000000 (the samples --val-size held out)"},
        {HELD, "sed -i 's/\"held_out\":200,/\"held_out\":2.5,/' meta.json", 1,
         "step-00000004/meta.json: .held_out is 2.5; it must be a whole number from 1 to "
         "1000000000"},
        {HELD, "sed -i 's/\"held_out\":200,/\"held_out\":\"200\",/' meta.json", 1,
         "step-00000004/meta.json: .held_out is not a number; it must be a whole number"},
        {HELD, "sed -i 's/\"val_loss\":[^,]*,/\"val_loss\":-0.5,/' meta.json", 1,
         "step-00000004/meta.json: .val_loss is -0.5; it must be a finite number from 0 (a mean "
         "loss)"},
        {HELD, "sed -i 's/\"val_loss\":[^,]*,/\"val_loss\":1e999,/' meta.json", 1,
         "step-00000004/meta.json: .val_loss is inf; it must be a finite number from 0"},
        {HELD, "sed -i 's/\"val_loss\":[^,]*,/\"val_loss\":\"low\",/' meta.json", 1,
         "step-00000004/meta.json: .val_loss is not a number; it must be a finite number from 0"},
        {HELD, "sed -i 's/\"held_out\":200,//' meta.json", 1,
         "step-00000004/meta.json: .val_loss is there but .held_out is missing: a validation "
         "loss needs the samples it was measured on"},
        {SCHED, "sed -i 's/\"kind\":\"cosine\"/\"kind\":\"cosinus\"/' meta.json", 1,
         "step-00000004/meta.json: .lr_schedule.kind is not a schedule's name; it must be "
         "constant, cosine, linear or step"},
        {SCHED, "sed -i 's/\"warmup_steps\":2,/\"warmup_steps\":-2,/' meta.json", 1,
         "step-00000004/meta.json: .lr_schedule.warmup_steps is -2; it must be a whole number "
         "from 0 to 1000000000"},
        {SCHED, "sed -i 's/\"min_lr\":[^,]*,/\"min_lr\":0.5,/' meta.json", 1,
         "step-00000004/meta.json: .lr_schedule.min_lr is 0.5; it must be a number from 0 to "
         "0.05"},
        {SCHED, "sed -i 's/\"gamma\":[^,]*,/\"gamma\":\"x\",/' meta.json", 1,
         "step-00000004/meta.json: .lr_schedule.gamma is not a number; it must be a number"},
        {SCHED, "sed -i 's/\"total_steps\":4}/\"total_steps\":0}/' meta.json", 1,
         "step-00000004/meta.json: .lr_schedule.total_steps is 0; it must be a whole number from "
         "1 to 1000000000 (the run's steps)"},
        {SCHED, "sed -i 's/\"lr_schedule\":{[^}]*}/\"lr_schedule\":[]/' meta.json", 1,
         "step-00000004/meta.json: .lr_schedule is not an object"},
    };
    run_cases(cases, sizeof cases / sizeof *cases);
}

/* What the checksum line itself may suffer, versions, and rank files that are not the ones
 * meta.json describes. */
Test(checkpoint_meta, the_checksum_line_the_version_and_the_rank_files) {
    const MetaCase cases[] = {
        /* a meta.json cut short, or its checksum line gone */
        {TOY, "truncate -s 300 meta.json", 0,
         "step-00000004/meta.json has no \"crc32\" line at its end: it was cut short or edited"},
        {TOY, "sed -i '$d' meta.json", 0,
         "step-00000004/meta.json has no \"crc32\" line at its end"},
        {TOY, "sed -i 's/^\"crc32\":\\([0-9]*\\)}$/\"crc32\":0\\1}/' meta.json", 0,
         "step-00000004/meta.json has no \"crc32\" line at its end"},
        /* a flipped digit of the checksum itself */
        {TOY, "sed -i -e '$s/[1-9]}$/0}/' -e t -e '$s/0}$/1}/' meta.json", 0, STALE},
        /* version 1, as the fsdp before this one wrote it: no checksum line */
        {TOY,
         "sed -i '$d' meta.json && sed -i 's/\"version\":2,/\"version\":1,/; $s/,$/}/' "
         "meta.json",
         0,
         "step-00000004/meta.json is format version 1, whose meta.json has no CRC32 of its own; "
         "this fsdp reads version 2"},
        {TOY, "sed -i 's/\"version\":2,/\"version\":3,/' meta.json", 1,
         "step-00000004/meta.json is format version 3; this fsdp reads version 2"},
        {TOY, "sed -i 's/\"format\":\"fsdp-checkpoint\"/\"format\":\"other\"/' meta.json", 1,
         "step-00000004/meta.json is not an fsdp checkpoint's metadata"},
        /* rank files of other sizes, or none */
        {TOY, "truncate -s 20 rank-00002.bin", 0,
         "step-00000004/rank-00002.bin is cut short: 20 bytes, its pieces end at byte 36"},
        {TOY, "rm rank-00002.bin", 0,
         "step-00000004/rank-00002.bin: No such file or directory (meta.json's .world is 3)"},
        {TOY, "printf x >> rank-00000.bin", 0,
         "step-00000004/rank-00000.bin has 37 bytes but its pieces end at byte 36"},
    };
    run_cases(cases, sizeof cases / sizeof *cases);
}

/* The reseal the tests use agrees with the writer: an untouched meta.json comes out the same,
 * byte for byte, so a resealed edit differs from the saved file only by the edit. */
Test(checkpoint_meta, resealing_an_untouched_meta_json_changes_nothing) {
    fresh_test_dir(dir, sizeof dir, "ckpt_meta", "reseal");
    save_once(TOY);
    char meta[256];
    snprintf(meta, sizeof meta, "%s/base-0/ck/step-00000004/meta.json", dir);
    char *before = read_text_file(meta, NULL);
    ckpt_meta_reseal(meta);
    char *after = read_text_file(meta, NULL);
    cr_expect_str_eq(after, before);
    free(before);
    free(after);
    remove_test_dir(dir);
}

/* Item 7: a checkpoint of another model says which tensor differs and both shapes. */
Test(checkpoint_meta, another_models_checkpoint_names_both_shapes) {
    fresh_test_dir(dir, sizeof dir, "ckpt_meta", "other");
    save_once(VIT);
    char args[512];
    snprintf(args, sizeof args,
             "train --model vit-tiny --layers 1 --hidden 32 --heads 2 --mlp 16 --split test "
             "--eval false --ranks 2 --batch-size 8 --steps 6 --resume %s/base-1/ck/step-00000004",
             dir);
    free(expect_usage_error_text(args, "/base-1/ck/step-00000004 is of another model: tensor 0 "
                                       "is class_token [1, 1, 16], this model's is class_token "
                                       "[1, 1, 32]"));
    snprintf(args, sizeof args,
             "train --model vit-tiny --layers 2 --hidden 16 --heads 2 --mlp 16 --split test "
             "--eval false --ranks 2 --batch-size 8 --steps 6 --resume %s/base-1/ck/step-00000004",
             dir);
    free(expect_usage_error_text(args, "is of another model: 20 tensors, this model has 32"));
    snprintf(args, sizeof args, "train --steps 6 --resume %s/base-1/ck/step-00000004", dir);
    free(expect_usage_error_text(args, "is of another model: 20 tensors, this model has 3"));
    remove_test_dir(dir);
}

/* A run too long for a checkpoint's step to be resumed is refused before it starts. */
Test(checkpoint_meta, a_run_longer_than_a_checkpoint_can_record_is_refused) {
    expect_usage_error(
        "train --model vit-tiny --ranks 1 --epochs 100000 --batch-size 1 --eval false",
        "--epochs 100000 is 6000000000 steps (60000 samples, 1 a step); a run "
        "takes at most 1000000000 steps");
}
