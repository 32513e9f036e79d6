/* Outputs replace only regular files, never an input or another output of the same command
 * (issue 39, cases 1 and 2): each refused in one line, exit 2, before any work, with every file
 * and node that was there before unchanged. A device is a symbolic link to /dev/null (stat
 * follows it: what an output would replace is the device, and no root is needed for it). */
#include <criterion/criterion.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "io/atomic_file.h"
#include "tests/util.h"

static char dir[256];

static void setup_dir(void) {
    fresh_test_dir(dir, sizeof dir, "outputs", "t");
}

static void teardown_dir(void) {
    remove_test_dir(dir);
}

static const char *in_dir(const char *name) {
    return fmt_text("%s/%s", dir, name);
}

/* A character device (through a link), a FIFO and a regular file with known bytes. */
static void make_obstacles(void) {
    cr_assert_eq(symlink("/dev/null", in_dir("nd")), 0);
    cr_assert_eq(mkfifo(in_dir("ff"), 0644), 0);
}

static void expect_untouched(void) {
    struct stat st;
    cr_expect(lstat(in_dir("nd"), &st) == 0 && S_ISLNK(st.st_mode), "the link is still a link");
    cr_expect(stat(in_dir("nd"), &st) == 0 && S_ISCHR(st.st_mode), "and /dev/null a device");
    cr_expect(lstat(in_dir("ff"), &st) == 0 && S_ISFIFO(st.st_mode), "the FIFO is still one");
}

/* `fsdp ARGS` in the test folder: exit 2 and one line saying `want`, and nothing left beside. */
static void expect_refused(const char *args, const char *want) {
    expect_fsdp_refused(args, want);
    expect_untouched();
}

Test(outputs, device_nodes_and_fifos_are_never_replaced, .init = setup_dir, .fini = teardown_dir,
     .timeout = 120) {
    make_obstacles();
    static const char *const flags[] = {"--save-full", "--dump-params", "--trace-out",
                                        "--memory-svg"};
    for (size_t i = 0; i < sizeof flags / sizeof *flags; i++) {
        expect_refused(fmt_text("train --model toy --steps 2 %s %s", flags[i], in_dir("nd")),
                       fmt_text("%s '%s' is a character device", flags[i], in_dir("nd")));
        expect_refused(fmt_text("train --model toy --steps 2 %s %s", flags[i], in_dir("ff")),
                       fmt_text("%s '%s' is a FIFO", flags[i], in_dir("ff")));
    }
    expect_refused(fmt_text("viz --model toy --html %s", in_dir("nd")), "is a character device");
    expect_refused(fmt_text("viz --model toy --html %s", in_dir("ff")), "is a FIFO");
    free(fsdp_ok("train --model toy --ranks 3 --steps 2 --checkpoint-dir %s --checkpoint-every 2",
                 in_dir("ck")));
    expect_refused(fmt_text("ckpt consolidate %s -o %s", in_dir("ck"), in_dir("nd")),
                   "is a character device");
    expect_refused(fmt_text("ckpt consolidate %s -o %s", in_dir("ck"), in_dir("ff")), "is a FIFO");
}

/* An output that is the command's own input, or another of its outputs: refused, the file kept
 * byte for byte. */
Test(outputs, never_an_input_nor_another_output, .init = setup_dir, .fini = teardown_dir,
     .timeout = 120) {
    make_obstacles();
    free(fsdp_ok("train --model toy --steps 2 --save-full %s", in_dir("a.st")));
    free(fsdp_ok("viz --model toy --trace-out %s", in_dir("tr.json")));
    size_t st_len, tr_len;
    char *st = read_text_file(in_dir("a.st"), &st_len),
         *tr = read_text_file(in_dir("tr.json"), &tr_len);
    expect_refused(fmt_text("viz --trace %s --html %s", in_dir("tr.json"), in_dir("tr.json")),
                   "is the file --trace reads");
    expect_refused(fmt_text("train --model toy --steps 2 --save-full %s --dump-params %s",
                            in_dir("a.st"), in_dir("a.st")),
                   "--save-full and --dump-params both name");
    expect_refused(fmt_text("train --model toy --steps 2 --init-from %s --save-full %s",
                            in_dir("a.st"), in_dir("a.st")),
                   "is the file --init-from reads");
    /* the same file by another name: a link to it */
    cr_assert_eq(symlink(in_dir("a.st"), in_dir("b.st")), 0);
    expect_refused(fmt_text("train --model toy --steps 2 --save-full %s --dump-params %s",
                            in_dir("a.st"), in_dir("b.st")),
                   "both name");
    /* a file not there yet, named twice */
    expect_refused(fmt_text("viz --model toy --html %s --trace-out %s/../%s/new.html",
                            in_dir("new.html"), dir, strrchr(dir, '/') + 1),
                   "--html and --trace-out both name");
    size_t len;
    char *st2 = read_text_file(in_dir("a.st"), &len);
    cr_expect(len == st_len && !memcmp(st, st2, len), "a.st kept byte for byte");
    free(st2);
    char *tr2 = read_text_file(in_dir("tr.json"), &len);
    cr_expect(len == tr_len && !memcmp(tr, tr2, len), "tr.json kept byte for byte");
    free(tr2);
    cr_expect_neq(access(in_dir("new.html"), F_OK), 0, "nothing was written");
    free(st);
    free(tr);
}

/* Every writer's last guard (io/atomic_file.c): a device or FIFO at the path is never replaced,
 * whether it was there at the start or took the file's place while it was written; no temporary
 * file is left. */
Test(outputs, atomic_writes_never_rename_onto_a_device, .init = setup_dir, .fini = teardown_dir) {
    make_obstacles();
    AtomicFile o;
    Err err = {0};
    cr_expect_eq(atomic_open(&o, in_dir("nd"), &err), ERR_USAGE);
    cr_expect(strstr(err.msg, "is a character device"), "%s", err.msg);
    const char *late = in_dir("late");
    cr_assert_eq(atomic_open(&o, late, &err), 0, "%s", err.msg);
    fputs("bytes", o.f);
    cr_assert_eq(mkfifo(late, 0644), 0);
    err = (Err){0};
    cr_expect_eq(atomic_commit(&o, &err), ERR_USAGE);
    cr_expect(strstr(err.msg, "became a FIFO"), "%s", err.msg);
    struct stat st;
    cr_expect(lstat(late, &st) == 0 && S_ISFIFO(st.st_mode), "the FIFO stays");
    cr_expect_neq(access(o.tmp, F_OK), 0, "no temporary file left: %s", o.tmp);
    expect_untouched();
}

/* A run directory whose metrics.jsonl is a directory or a FIFO (which would block the read back):
 * one line, exit 2 (it was exit 1, or a hang), the folder as it was. */
Test(outputs, a_run_dir_metrics_file_that_is_not_a_file, .init = setup_dir, .fini = teardown_dir,
     .timeout = 60) {
    cr_assert_eq(system(fmt_text("mkdir -p %s/r1/metrics.jsonl %s/r2", dir, dir)), 0);
    cr_assert_eq(mkfifo(in_dir("r2/metrics.jsonl"), 0644), 0);
    for (int r = 1; r <= 2; r++) {
        int code;
        char *out = fsdp_run(&code, "2>&1",
                             "train --model toy --steps 2 --run-dir %s/r%d --resume auto", dir, r);
        cr_expect_eq(code, 2, "r%d: exit %d\n%s", r, code, out);
        cr_expect(strstr(out, r == 1 ? "metrics.jsonl is a directory" : "metrics.jsonl is a FIFO"),
                  "%s", out);
        cr_expect_eq(strchr(out, '\n'), strrchr(out, '\n'), "one line:\n%s", out);
        free(out);
    }
    struct stat st;
    cr_expect(stat(in_dir("r1/metrics.jsonl"), &st) == 0 && S_ISDIR(st.st_mode));
    cr_expect(lstat(in_dir("r2/metrics.jsonl"), &st) == 0 && S_ISFIFO(st.st_mode));
}

/* Output that cannot be written (a full disk, a closed stdout) fails the command: exit 1 and a
 * line on stderr, where every command exited 0 (issue 39, case 10). */
Test(outputs, a_stdout_that_cannot_be_written_fails_the_command, .timeout = 120) {
    static const char *const commands[] = {
        "plan --params 7e9 --gpus 8",
        "train --model toy --steps 2 --json",
        "viz --model toy --times",
        "viz --model toy --frames 2",
        "--help",
    };
    for (size_t i = 0; i < sizeof commands / sizeof *commands; i++)
        for (int closed = 0; closed < 2; closed++) {
            int code;
            char *out = fsdp_run(&code, closed ? "2>&1 >&-" : "2>&1 >/dev/full", "%s", commands[i]);
            cr_expect_eq(code, 1, "%s %s: exit %d\n%s", commands[i],
                         closed ? "with stdout closed" : "> /dev/full", code, out);
            cr_expect(strstr(out, "fsdp: could not write the output: "), "%s", out);
            free(out);
        }
}

/* A save that fails part way (here each file is capped at 256 KB, as a full disk would stop it)
 * leaves no temporary folder and no checkpoint behind (issue 39, case 7: its .tmp kept all the
 * space it had taken). */
Test(outputs, a_failed_save_leaves_nothing_behind, .init = setup_dir, .fini = teardown_dir,
     .timeout = 120) {
    cr_assert_eq(
        system(fmt_text("head -c 20000 /usr/share/games/fortunes/fortunes > %s/small.txt", dir)),
        0);
    int status = system(fmt_text("bash -c 'ulimit -f 256; trap \"\" XFSZ; exec %s train --model "
                                 "transformer --text %s/small.txt --ranks 2 --steps 2 "
                                 "--checkpoint-dir %s/ck --checkpoint-every 2' >/dev/null 2>&1",
                                 fsdp_bin(), dir, dir));
    cr_assert(WIFEXITED(status) && WEXITSTATUS(status) == 1, "the save fails: status %d", status);
    char *left = shell_output(fmt_text("ls -A %s/ck", dir), &(int){0});
    cr_expect_str_eq(left, "", "the checkpoint folder is empty");
    free(left);
}

/* A writer killed while it writes (SIGTERM during viz --html left page.html.tmp.PID, issue 39,
 * case 14) leaves nothing: the file has no name until it is whole. */
Test(outputs, a_writer_killed_mid_write_leaves_no_file, .init = setup_dir, .fini = teardown_dir) {
    const char *page = in_dir("page.html");
    pid_t pid = fork();
    cr_assert_geq(pid, 0);
    if (pid == 0) {
        AtomicFile o;
        Err err = {0};
        if (atomic_open(&o, page, &err) != 0) _exit(3);
        if (!o.unnamed) _exit(4); /* a file system without O_TMPFILE */
        fputs("half a page", o.f);
        fflush(o.f);
        raise(SIGKILL);
        _exit(5);
    }
    int status;
    waitpid(pid, &status, 0);
    if (WIFEXITED(status) && WEXITSTATUS(status) == 4)
        cr_skip_test("this file system has no O_TMPFILE");
    cr_assert(WIFSIGNALED(status), "the writer was killed");
    char *left = shell_output(fmt_text("ls -A %s", dir), &(int){0});
    cr_expect_str_eq(left, "", "nothing left in the folder");
    free(left);
}
