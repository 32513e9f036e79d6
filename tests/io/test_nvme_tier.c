/* The NVMe tier's storage: bytes written through it come back byte for byte with many requests in
 * flight, and the file exists exactly while the tier is open. */
#include <criterion/criterion.h>
#include <errno.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/statfs.h>
#include <sys/statvfs.h>
#include <sys/wait.h>
#include <unistd.h>

#include "io/nvme_tier.h"
#include "tests/util.h"

/* Requests may be aligned or not, O_DIRECT or buffered, and reads see the writes started before
 * them. A bad directory or a disk too small is one clear line at open that leaves no file behind
 * and touches no file that was there. */

static char dir[128];

static void fresh_dir(const char *tag) {
    fresh_test_dir(dir, sizeof dir, "nvme", tag);
}

/* After every test, passed or failed (a failed assertion ends a test before its own cleanup,
 * and a tier not closed leaves its file). */
static void remove_dir(void) {
    if (dir[0]) remove_test_dir(dir);
}

TestSuite(nvme_tier, .fini = remove_dir);

/* Entries in dir besides . and .. */
static int entries_in(const char *d) {
    char cmd[512];
    snprintf(cmd, sizeof cmd, "ls -A %s | wc -l", d);
    FILE *p = popen(cmd, "r");
    cr_assert_not_null(p);
    int n = -1;
    cr_assert_eq(fscanf(p, "%d", &n), 1);
    pclose(p);
    return n;
}

static void *aligned_alloc_bytes(size_t n) {
    void *p = NULL;
    cr_assert_eq(posix_memalign(&p, NVME_TIER_ALIGN, n ? n : 1), 0);
    return p;
}

/* Deterministic bytes: chunk `seed`'s content. */
static void fill(unsigned char *buf, size_t n, uint64_t seed) {
    uint64_t x = seed * 0x9E3779B97F4A7C15ull + 1;
    for (size_t i = 0; i < n; i++) {
        x ^= x << 13, x ^= x >> 7, x ^= x << 17;
        buf[i] = (unsigned char)x;
    }
}

static void wait_ok(NvmeTier *t, TierRequest *r) {
    Err err = {0};
    cr_assert_eq(nvme_tier_wait(t, r, &err), 0, "%s", err.msg);
}

/* ext4 and xfs take O_DIRECT: there the default mode must use it. */
static int fs_takes_direct(const char *d) {
    struct statfs s;
    cr_assert_eq(statfs(d, &s), 0);
    return s.f_type == 0xEF53 || s.f_type == 0x58465342;
}

Test(nvme_tier, round_trip_with_many_requests_in_flight) {
    fresh_dir("trip");
    const size_t MiB = 1 << 20;
    NvmeTier *t = NULL;
    Err err = {0};
    cr_assert_eq(nvme_tier_open(&t, dir, 0, 16 * MiB, &err), 0, "%s", err.msg);
    /* the default: O_DIRECT writes, reads through the page cache */
    cr_assert_eq(nvme_tier_stats(t).direct_writes, fs_takes_direct(dir));
    cr_assert_eq(nvme_tier_stats(t).direct_reads, 0);
    /* ranges: A [0, 1 MiB), B [1, 3 MiB), C [4, 4.5 MiB), D = A's bytes again, new content */
    size_t off[4] = {0, MiB, 4 * MiB, 0}, len[4] = {MiB, 2 * MiB, MiB / 2, MiB};
    unsigned char *src[4], *back[5];
    for (int i = 0; i < 4; i++) {
        src[i] = aligned_alloc_bytes(len[i]);
        fill(src[i], len[i], (uint64_t)i + 1);
    }
    for (int i = 0; i < 5; i++) back[i] = aligned_alloc_bytes(2 * MiB);
    TierRequest w[4] = {0}, r[5] = {0};
    /* write A, write B, read A back while B is still queued, write C, read B, overwrite A
     * with D, read C, read the overwritten range: eight requests in flight at once */
    cr_assert_eq(nvme_tier_write(t, off[0], src[0], len[0], &w[0], &err), 0, "%s", err.msg);
    cr_assert_eq(nvme_tier_write(t, off[1], src[1], len[1], &w[1], &err), 0, "%s", err.msg);
    cr_assert_eq(nvme_tier_read(t, off[0], back[0], len[0], &r[0], &err), 0, "%s", err.msg);
    cr_assert_eq(nvme_tier_write(t, off[2], src[2], len[2], &w[2], &err), 0, "%s", err.msg);
    cr_assert_eq(nvme_tier_read(t, off[1], back[1], len[1], &r[1], &err), 0, "%s", err.msg);
    cr_assert_eq(nvme_tier_write(t, off[3], src[3], len[3], &w[3], &err), 0, "%s", err.msg);
    cr_assert_eq(nvme_tier_read(t, off[2], back[2], len[2], &r[2], &err), 0, "%s", err.msg);
    cr_assert_eq(nvme_tier_read(t, off[3], back[3], len[3], &r[3], &err), 0, "%s", err.msg);
    /* waited out of order: the last first */
    wait_ok(t, &r[3]);
    for (int i = 0; i < 4; i++) wait_ok(t, &w[i]);
    for (int i = 0; i < 3; i++) wait_ok(t, &r[i]);
    cr_assert_eq(memcmp(back[0], src[0], len[0]), 0, "A read back before D overwrote it");
    cr_assert_eq(memcmp(back[1], src[1], len[1]), 0, "B");
    cr_assert_eq(memcmp(back[2], src[2], len[2]), 0, "C");
    cr_assert_eq(memcmp(back[3], src[3], len[3]), 0, "D over A");
    /* a request is reusable once waited */
    cr_assert_eq(nvme_tier_read(t, off[1], back[4], len[1], &r[0], &err), 0, "%s", err.msg);
    wait_ok(t, &r[0]);
    cr_assert_eq(memcmp(back[4], src[1], len[1]), 0);
    NvmeStats s = nvme_tier_stats(t);
    cr_assert_eq(s.bytes_written, len[0] + len[1] + len[2] + len[3]);
    cr_assert_eq(s.bytes_read, len[0] + len[1] + len[2] + len[3] + len[1]);
    cr_assert_gt(s.write_seconds, 0);
    cr_assert_gt(s.read_seconds, 0);
    nvme_tier_close(t);
    for (int i = 0; i < 4; i++) free(src[i]);
    for (int i = 0; i < 5; i++) free(back[i]);
}

/* Random reads and writes of any alignment (buffer, offset, length; some longer than the
 * tier's 4 MiB bounce buffer), eight in flight, against a copy in memory: every read gives
 * what the copy held when the read was started, and the bytes around every write keep their
 * values. */
static void random_requests(NvmeIoMode mode) {
    const size_t size = 12u << 20, rounds = 40, depth = 8;
    NvmeTier *t = NULL;
    Err err = {0};
    cr_assert_eq(nvme_tier_open_mode(&t, dir, 3, size, mode, &err), 0, "%s", err.msg);
    int direct = fs_takes_direct(dir);
    cr_assert_eq(nvme_tier_stats(t).direct_writes, mode != NVME_IO_BUFFERED && direct);
    cr_assert_eq(nvme_tier_stats(t).direct_reads, mode == NVME_IO_DIRECT && direct);
    unsigned char *model = calloc(size, 1);
    unsigned char *buf[8], *expect[8];
    size_t off[8], len[8], shift[8];
    int is_write[8];
    TierRequest req[8] = {{0}};
    for (size_t i = 0; i < depth; i++) {
        buf[i] = aligned_alloc_bytes((6u << 20) + 2 * NVME_TIER_ALIGN);
        expect[i] = malloc(6u << 20);
    }
    uint64_t x = 12345;
    size_t written = 0, read = 0;
    for (size_t round = 0; round < rounds; round++) {
        for (size_t i = 0; i < depth; i++) {
            x ^= x << 13, x ^= x >> 7, x ^= x << 17;
            int big = x % 10 == 0, aligned = x % 3 == 0;
            len[i] = big ? (4u << 20) + x % (2u << 20) : 1 + (x >> 8) % 70000;
            off[i] = (x >> 24) % (size - len[i] + 1);
            shift[i] = aligned ? 0 : 1 + (x >> 40) % 4095;
            if (aligned) {
                off[i] -= off[i] % NVME_TIER_ALIGN;
                len[i] += NVME_TIER_ALIGN - 1 - (len[i] + NVME_TIER_ALIGN - 1) % NVME_TIER_ALIGN;
                if (off[i] + len[i] > size) len[i] = size - off[i];
            }
            is_write[i] = (x >> 50) % 2;
            unsigned char *p = buf[i] + shift[i];
            if (is_write[i]) {
                fill(p, len[i], x);
                memcpy(model + off[i], p, len[i]);
                cr_assert_eq(nvme_tier_write(t, off[i], p, len[i], &req[i], &err), 0, "%s",
                             err.msg);
                written += len[i];
            } else {
                memcpy(expect[i], model + off[i], len[i]);
                memset(p, 0xA5, len[i]);
                cr_assert_eq(nvme_tier_read(t, off[i], p, len[i], &req[i], &err), 0, "%s", err.msg);
                read += len[i];
            }
        }
        for (size_t i = 0; i < depth; i++) {
            wait_ok(t, &req[i]);
            if (!is_write[i])
                cr_assert_eq(memcmp(buf[i] + shift[i], expect[i], len[i]), 0,
                             "round %zu read %zu: %zu bytes at %zu (buffer +%zu)", round, i, len[i],
                             off[i], shift[i]);
        }
    }
    /* the whole file, in one aligned read */
    unsigned char *all = aligned_alloc_bytes(size);
    cr_assert_eq(nvme_tier_read(t, 0, all, size, &req[0], &err), 0, "%s", err.msg);
    wait_ok(t, &req[0]);
    cr_assert_eq(memcmp(all, model, size), 0);
    NvmeStats s = nvme_tier_stats(t);
    cr_assert_eq(s.bytes_written, written);
    cr_assert_eq(s.bytes_read, read + size);
    nvme_tier_close(t);
    for (size_t i = 0; i < depth; i++) free(buf[i]), free(expect[i]);
    free(all);
    free(model);
}

Test(nvme_tier, any_alignment_round_trips_direct) {
    fresh_dir("direct");
    random_requests(NVME_IO_DIRECT);
}

Test(nvme_tier, any_alignment_round_trips_auto) {
    fresh_dir("auto");
    random_requests(NVME_IO_AUTO);
}

Test(nvme_tier, any_alignment_round_trips_buffered) {
    fresh_dir("buffered");
    random_requests(NVME_IO_BUFFERED);
}

/* "/proc/self/fd/N" of this process's descriptor on the tier's file, whose name is gone (its
 * link reads "PATH (deleted)"), into buf; the first such descriptor. */
static const char *open_file_of(const NvmeTier *t, char *buf, size_t n) {
    char want[600], link[64], got[700];
    snprintf(want, sizeof want, "%s (deleted)", nvme_tier_path(t));
    for (int fd = 0; fd < 1024; fd++) {
        snprintf(link, sizeof link, "/proc/self/fd/%d", fd);
        ssize_t len = readlink(link, got, sizeof got - 1);
        if (len < 0) continue;
        got[len] = 0;
        if (!strcmp(got, want)) {
            snprintf(buf, n, "%s", link);
            return buf;
        }
    }
    cr_assert_fail("no descriptor of this process is on %s", want);
    return NULL;
}

/* The file has no name from the moment the tier is open: the directory is empty while its
 * space stays reserved through the descriptors, and nothing is left after close. */
Test(nvme_tier, the_file_is_nameless_while_open_and_gone_after_close) {
    fresh_dir("life");
    const size_t bytes = (3u << 20) + 100;
    NvmeTier *t = NULL;
    Err err = {0};
    cr_assert_eq(nvme_tier_open(&t, dir, 5, bytes, &err), 0, "%s", err.msg);
    char path[512], fd_path[64];
    snprintf(path, sizeof path, "%s/fsdp-nvme-%ld-rank5.bin", dir, (long)getpid());
    cr_assert_str_eq(nvme_tier_path(t), path);
    cr_assert_eq(entries_in(dir), 0, "the file's name should be gone while the tier is open");
    struct stat st;
    cr_assert_eq(stat(open_file_of(t, fd_path, sizeof fd_path), &st), 0);
    /* sized to whole 4 KiB blocks, and the blocks reserved (not a sparse file) */
    cr_assert_eq((size_t)st.st_size, (3u << 20) + NVME_TIER_ALIGN);
    cr_assert_geq((size_t)st.st_blocks * 512, (3u << 20) + NVME_TIER_ALIGN);
    cr_assert_eq(st.st_mode & 0777, 0600);
    /* a write left in flight is finished by close, not lost in the middle */
    unsigned char *data = aligned_alloc_bytes(1 << 20);
    fill(data, 1 << 20, 9);
    TierRequest w = {0};
    cr_assert_eq(nvme_tier_write(t, 0, data, 1 << 20, &w, &err), 0, "%s", err.msg);
    nvme_tier_close(t);
    cr_assert_eq(stat(path, &st), -1, "%s should not be there after close", path);
    cr_assert_eq(errno, ENOENT);
    cr_assert_eq(entries_in(dir), 0);
    nvme_tier_close(NULL); /* a no-op, as teardown of a tier never opened needs */
    free(data);
}

/* A process SIGKILLed with the tier open leaves nothing in --nvme-dir (the files were
 * gigabytes at vit-workshop's size and were never removed). */
Test(nvme_tier, a_sigkilled_process_leaves_no_file) {
    fresh_dir("killed");
    int ready[2];
    cr_assert_eq(pipe(ready), 0);
    pid_t child = fork();
    cr_assert_geq(child, 0);
    if (child == 0) {
        NvmeTier *t = NULL;
        Err err = {0};
        if (nvme_tier_open(&t, dir, 0, 8u << 20, &err)) _exit(1);
        if (write(ready[1], "1", 1) != 1) _exit(1);
        for (;;) pause();
    }
    close(ready[1]);
    char c = 0;
    cr_assert_eq(read(ready[0], &c, 1), 1, "the child did not open the tier");
    close(ready[0]);
    kill(child, SIGKILL);
    int status;
    cr_assert_eq(waitpid(child, &status, 0), child);
    cr_assert(WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL);
    cr_assert_eq(entries_in(dir), 0, "a killed run left its NVMe file in %s", dir);
}

Test(nvme_tier, a_bad_directory_is_one_clear_line) {
    fresh_dir("bad");
    NvmeTier *t = (NvmeTier *)&t; /* open must set it to NULL */
    Err err = {0};
    /* a path under a regular file: refused even to root */
    char file[256], under[300], missing[300];
    snprintf(file, sizeof file, "%s/plain-file", dir);
    FILE *f = fopen(file, "w");
    cr_assert_not_null(f);
    fputs("keep", f);
    fclose(f);
    snprintf(under, sizeof under, "%s/x", file);
    cr_assert_eq(nvme_tier_open(&t, under, 0, 1 << 20, &err), ERR_IO);
    cr_assert_null(t);
    char want[512];
    snprintf(want, sizeof want, "--nvme-dir %s: ", under);
    cr_assert(strstr(err.msg, want) == err.msg, "%s", err.msg);
    cr_assert(strstr(err.msg, "Not a directory"), "%s", err.msg);
    cr_assert_null(strchr(err.msg, '\n'));
    /* the file itself given as the directory */
    cr_assert_eq(nvme_tier_open(&t, file, 0, 1 << 20, &err), ERR_IO);
    snprintf(want, sizeof want, "--nvme-dir %s: not a directory", file);
    cr_assert_str_eq(err.msg, want);
    /* a directory that does not exist */
    snprintf(missing, sizeof missing, "%s/missing", dir);
    cr_assert_eq(nvme_tier_open(&t, missing, 0, 1 << 20, &err), ERR_IO);
    snprintf(want, sizeof want, "--nvme-dir %s: not usable: No such file or directory", missing);
    cr_assert_str_eq(err.msg, want);
    /* a directory without write permission stops everyone but root */
    if (geteuid() != 0) {
        char ro[300];
        snprintf(ro, sizeof ro, "%s/readonly", dir);
        cr_assert_eq(mkdir(ro, 0500), 0);
        cr_assert_eq(nvme_tier_open(&t, ro, 0, 1 << 20, &err), ERR_IO);
        snprintf(want, sizeof want, "--nvme-dir %s: not writable: Permission denied", ro);
        cr_assert_str_eq(err.msg, want);
        cr_assert_eq(entries_in(ro), 0);
    }
    /* the file next to them is as it was, and nothing was added */
    cr_assert_eq(entries_in(dir), 1 + (geteuid() != 0));
    f = fopen(file, "r");
    char text[16] = {0};
    cr_assert_not_null(fgets(text, sizeof text, f));
    fclose(f);
    cr_assert_str_eq(text, "keep");
}

Test(nvme_tier, more_than_the_free_space_fails_at_open_and_leaves_nothing) {
    fresh_dir("full");
    struct statvfs vfs;
    cr_assert_eq(statvfs(dir, &vfs), 0);
    size_t free_bytes = (size_t)vfs.f_bavail * vfs.f_frsize;
    size_t too_much = free_bytes + ((size_t)1 << 40);
    NvmeTier *t = NULL;
    Err err = {0};
    cr_assert_eq(nvme_tier_open(&t, dir, 0, too_much, &err), ERR_IO);
    cr_assert_null(t);
    char want[512];
    snprintf(want, sizeof want, "--nvme-dir %s: no room for ", dir);
    cr_assert(strstr(err.msg, want) == err.msg, "%s", err.msg);
    cr_assert(strstr(err.msg, " GiB of offloaded state ("), "%s", err.msg);
    cr_assert(strstr(err.msg, " free)"), "%s", err.msg);
    /* the figures are the request's and the disk's, in GiB */
    double asked = 0, have = 0;
    const char *p = strstr(err.msg, "no room for ");
    cr_assert_eq(sscanf(p, "no room for %lf GiB of offloaded state (%lf", &asked, &have), 2, "%s",
                 err.msg);
    cr_assert_float_eq(asked, (double)too_much / (1 << 30), 0.06);
    cr_assert_lt(have, asked - 1000);
    cr_assert_eq(entries_in(dir), 0);
}

Test(nvme_tier, a_file_already_there_is_left_alone) {
    fresh_dir("exists");
    char path[512];
    snprintf(path, sizeof path, "%s/fsdp-nvme-%ld-rank7.bin", dir, (long)getpid());
    FILE *f = fopen(path, "w");
    cr_assert_not_null(f);
    fputs("someone else's", f);
    fclose(f);
    NvmeTier *t = NULL;
    Err err = {0};
    cr_assert_eq(nvme_tier_open(&t, dir, 7, 1 << 20, &err), ERR_IO);
    cr_assert(strstr(err.msg, "--nvme-dir ") == err.msg, "%s", err.msg);
    cr_assert(strstr(err.msg, path), "%s", err.msg);
    cr_assert(strstr(err.msg, "already there"), "%s", err.msg);
    f = fopen(path, "r");
    char text[32] = {0};
    cr_assert_not_null(fgets(text, sizeof text, f));
    fclose(f);
    cr_assert_str_eq(text, "someone else's");
}

/* The reserved file reads as zeroes where nothing was written, aligned or not. */
static void unwritten_reads_zero(NvmeIoMode mode) {
    NvmeTier *t = NULL;
    Err err = {0};
    cr_assert_eq(nvme_tier_open_mode(&t, dir, 1, 4u << 20, mode, &err), 0, "%s", err.msg);
    unsigned char *data = aligned_alloc_bytes(8192), *back = aligned_alloc_bytes(2u << 20);
    fill(data, 8192, 4);
    TierRequest w = {0}, r1 = {0}, r2 = {0};
    cr_assert_eq(nvme_tier_write(t, 0, data, 8192, &w, &err), 0, "%s", err.msg);
    memset(back, 0xAA, 2u << 20);
    cr_assert_eq(nvme_tier_read(t, 1u << 20, back, 1u << 20, &r1, &err), 0, "%s", err.msg);
    cr_assert_eq(nvme_tier_read(t, 8000, back + (1u << 20) + 1, 10000, &r2, &err), 0, "%s",
                 err.msg);
    wait_ok(t, &w);
    wait_ok(t, &r1);
    wait_ok(t, &r2);
    for (size_t i = 0; i < (1u << 20); i++) cr_assert_eq(back[i], 0, "byte %zu", i);
    /* the last 192 written bytes, then zeroes */
    cr_assert_eq(memcmp(back + (1u << 20) + 1, data + 8000, 192), 0);
    for (size_t i = 192; i < 10000; i++)
        cr_assert_eq(back[(1u << 20) + 1 + i], 0, "byte %zu after the write", i);
    cr_assert_eq(back[(1u << 20) + 1 + 10000], 0xAA, "a read stops at its length");
    nvme_tier_close(t);
    free(data);
    free(back);
}

Test(nvme_tier, unwritten_bytes_read_as_zeroes) {
    fresh_dir("zero");
    unwritten_reads_zero(NVME_IO_AUTO);
    unwritten_reads_zero(NVME_IO_DIRECT);
    unwritten_reads_zero(NVME_IO_BUFFERED);
}

Test(nvme_tier, bad_requests_start_nothing) {
    fresh_dir("range");
    NvmeTier *t = NULL;
    Err err = {0};
    cr_assert_eq(nvme_tier_open(&t, dir, 0, 1u << 20, &err), 0, "%s", err.msg);
    unsigned char *buf = aligned_alloc_bytes(1u << 20);
    TierRequest r = {0};
    cr_assert_eq(nvme_tier_write(t, (1u << 20) - 4096, buf, 8192, &r, &err), ERR_INTERNAL);
    char want[512];
    snprintf(want, sizeof want,
             "NVMe tier: bytes [1044480, 1052672) are outside %s's 1048576 bytes",
             nvme_tier_path(t));
    cr_assert_str_eq(err.msg, want);
    cr_assert_eq(nvme_tier_read(t, SIZE_MAX, buf, 2, &r, &err), ERR_INTERNAL);
    cr_assert(strstr(err.msg, "are outside"), "%s", err.msg);
    /* nothing was started, so there is nothing to wait for */
    cr_assert_eq(nvme_tier_wait(t, &r, &err), ERR_INTERNAL);
    cr_assert_str_eq(err.msg, "NVMe tier: waited on a request never started");
    cr_assert_eq(nvme_tier_stats(t).bytes_written, 0);
    /* the whole file, exactly, is in range */
    cr_assert_eq(nvme_tier_read(t, 0, buf, 1u << 20, &r, &err), 0, "%s", err.msg);
    wait_ok(t, &r);
    nvme_tier_close(t);
    free(buf);
}

/* Someone cuts the file under the tier: a read past the new end says where, and what. */
static void short_read(NvmeIoMode mode, size_t offset, size_t bytes, size_t got) {
    NvmeTier *t = NULL;
    Err err = {0};
    cr_assert_eq(nvme_tier_open_mode(&t, dir, 0, 1u << 20, mode, &err), 0, "%s", err.msg);
    char fd_path[64];
    cr_assert_eq(truncate(open_file_of(t, fd_path, sizeof fd_path), 8192), 0);
    unsigned char *buf = aligned_alloc_bytes(1u << 20);
    TierRequest r = {0};
    cr_assert_eq(nvme_tier_read(t, offset, buf + 1, bytes, &r, &err), 0, "%s", err.msg);
    cr_assert_eq(nvme_tier_wait(t, &r, &err), ERR_IO);
    char want[512];
    snprintf(want, sizeof want,
             "NVMe tier: reading %zu bytes at offset %zu of %s stopped after %zu: the file is "
             "shorter than it was made",
             bytes, offset, nvme_tier_path(t), got);
    cr_assert(strstr(err.msg, want) == err.msg, "%s", err.msg);
    cr_assert_eq(nvme_tier_stats(t).bytes_read, 0, "a failed read is not counted");
    nvme_tier_close(t);
    cr_assert_eq(entries_in(dir), 0);
    free(buf);
}

Test(nvme_tier, a_short_read_names_the_file_and_offset) {
    fresh_dir("short");
    short_read(NVME_IO_AUTO, 4096, 65536, 4096);
    short_read(NVME_IO_BUFFERED, 5000, 65536, 3192);
    short_read(NVME_IO_DIRECT, 5000, 65536, 3192); /* unaligned: through the bounce buffer */
}
