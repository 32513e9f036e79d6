/* Inputs that lie or block (issue 39, cases 8 and 13): a gzip'd text cut short is refused, not
 * trained on as far as it goes; a FIFO as --text or --config, and /dev/zero or a FIFO as a
 * lesson's --file, are one line and exit 2 at once instead of blocking. Criterion's timeout is
 * what fails a hang. */
#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "tests/util.h"

static char dir[256];

static void setup_dir(void) {
    fresh_test_dir(dir, sizeof dir, "inputs", "t");
}

static void teardown_dir(void) {
    remove_test_dir(dir);
}

/* A text of 200 KB gzip'd, whole (trains) and cut to its first half (refused: the gzip trailer
 * is missing, so the text is not what the file says it is). */
Test(inputs, a_gzip_cut_short_is_refused, .init = setup_dir, .fini = teardown_dir, .timeout = 120) {
    FILE *f = fopen(fmt_text("%s/words.txt", dir), "w");
    cr_assert(f);
    for (int i = 0; i < 8000; i++) fprintf(f, "line %d of a text long enough\n", i);
    fclose(f);
    cr_assert_eq(system(fmt_text("cd %s && gzip -k words.txt && head -c $(( $(stat -c %%s "
                                 "words.txt.gz) / 2 )) words.txt.gz > cut.gz",
                                 dir)),
                 0);
    char *ok = fsdp_ok("train --model transformer --text %s/words.txt.gz --steps 1", dir);
    free(ok);
    expect_fsdp_refused(fmt_text("train --model transformer --text %s/cut.gz --steps 1", dir),
                        "gzip data is cut short or corrupt");
}

Test(inputs, fifos_and_devices_do_not_block, .init = setup_dir, .fini = teardown_dir,
     .timeout = 60) {
    const char *fifo = fmt_text("%s/fifo", dir);
    cr_assert_eq(mkfifo(fifo, 0644), 0);
    expect_fsdp_refused(fmt_text("train --model transformer --text %s --steps 1", fifo),
                        "is a FIFO");
    expect_fsdp_refused(fmt_text("train --config %s", fifo), "--config");
    expect_fsdp_refused(fmt_text("lessons check 01 --file %s", fifo), "is not a regular file");
    expect_fsdp_refused("lessons check 01 --file /dev/zero", "is not a regular file");
    cr_assert_eq(system(fmt_text("truncate -s 2M %s/big.c", dir)), 0);
    expect_fsdp_refused(fmt_text("lessons check 01 --file %s/big.c", dir),
                        "an exercise is at most");
}

/* What was silent (issue 39, case 11) is one line: refused (exit 2) or said on stderr. */
Test(inputs, silent_cases_are_refused_or_said, .init = setup_dir, .fini = teardown_dir,
     .timeout = 120) {
    expect_fsdp_refused("train --model toy --strategy ddp --reshard-after-forward true --steps 1",
                        "--strategy ddp keeps every parameter whole");
    expect_fsdp_refused("train --model toy --strategy zero2 --reshard-after-forward true --steps 1",
                        "--strategy zero2 keeps them until backward");
    free(fsdp_ok("train --model toy --strategy ddp --reshard-after-forward false --steps 1"));
    expect_fsdp_refused("train --model transformer --text '' --steps 1",
                        "--text needs a path (got '')");
    expect_fsdp_refused("train --model toy --resume '' --steps 1",
                        "--resume needs a path (got '')");
    expect_fsdp_refused("train --model toy --steps 1 --save-full ''", "--save-full needs a path");
    /* --steps below the checkpoint's step: nothing would train; equal: said, exit 0 */
    free(fsdp_ok(
        "train --model toy --ranks 2 --steps 4 --checkpoint-dir %s/ck --checkpoint-every 4", dir));
    expect_fsdp_refused(
        fmt_text("train --model toy --ranks 2 --steps 2 --checkpoint-dir %s/ck --resume "
                 "auto",
                 dir),
        "is at step 4: --steps counts every step of the run, so give more than 4");
    int code;
    char *said =
        fsdp_run(&code, "2>&1 >/dev/null",
                 "train --model toy --ranks 2 --steps 4 --checkpoint-dir %s/ck --resume auto", dir);
    cr_expect_eq(code, 0, "%s", said);
    cr_expect(strstr(said, "is at step 4, the run's last (--steps): nothing left to train"), "%s",
              said);
    free(said);
    /* a damaged config.json is said on resume, never overwritten */
    free(fsdp_ok("train --model toy --steps 4 --run-dir %s/run --checkpoint-every 2", dir));
    FILE *f = fopen(fmt_text("%s/run/config.json", dir), "w");
    cr_assert(f);
    fputs("{\"model\": \"toy\", \"ste", f);
    fclose(f);
    expect_fsdp_refused(fmt_text("train --model toy --steps 6 --run-dir %s/run --resume auto", dir),
                        "config.json is damaged");
    char *kept = read_text_file(fmt_text("%s/run/config.json", dir), NULL);
    cr_expect_str_eq(kept, "{\"model\": \"toy\", \"ste");
    free(kept);
    /* predict on a language model's weights names what it holds */
    free(fsdp_ok("train --model transformer --steps 1 --save-full %s/lm.safetensors", dir));
    expect_fsdp_refused(fmt_text("predict --weights %s/lm.safetensors --image 0", dir),
                        "holds a transformer, a language model");
}
