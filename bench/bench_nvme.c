/* bench_nvme: the NVMe tier's achieved write and read bandwidth against dd on the same disk,
 * in the same run, in each of the tier's three I/O modes and dd's two. Medians of --runs runs.
 *     build/bench_nvme [--bytes 1G] [--chunk 64M] [--dir /var/tmp/fsdp_bench_nvme] [--runs 3] */
#include <errno.h>
#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/statfs.h>
#include <unistd.h>

#include "bench/bench_util.h"
#include "io/nvme_tier.h"

/* The tier moves --bytes in --chunk pieces (a unit's resting state) with two requests in
 * flight, as the engine double-buffers: writes go out back to back from memory; each read lands
 * in one of two chunk buffers and is checked against what was written (the "compute") while the
 * next chunk loads. dd moves the same bytes with bs=--chunk into a file reserved the same way
 * (posix_fallocate), from a source file in /dev/shm so its input costs no disk. The tier runs
 * in its three modes (default: O_DIRECT writes, buffered reads; O_DIRECT both ways; buffered
 * both ways) and dd in two (oflag/iflag=direct; conv=fdatasync and a buffered read).
 *
 * Reads must come from the disk, not the page cache: O_DIRECT bypasses it; the tier's buffered
 * path syncs every written chunk and drops the pages of every chunk (POSIX_FADV_DONTNEED), and
 * before dd's buffered read the same is done to dd's file. (A virtual disk's host may still
 * cache below this machine; that holds for the tier and dd alike.) --dir must be on a disk:
 * tmpfs is refused. The data is random: a virtual disk may compress zeros. The source is held
 * in memory whole: --bytes of RAM, and as much again in /dev/shm for dd. */

#define TMPFS_MAGIC_NUMBER 0x01021994

typedef struct Setup {
    size_t bytes, chunk;
    const char *dir;
    unsigned char *src;    /* bytes of random data, NVME_TIER_ALIGN-aligned */
    unsigned char *buf[2]; /* the two read buffers */
    char dd_src[4096 + 64], dd_file[4096 + 64];
} Setup;

/* "1G", "64M", "512K" or bytes. */
static size_t parse_size(const char *s) {
    char *end;
    double v = strtod(s, &end);
    size_t unit = 1;
    if (*end == 'K' || *end == 'k') unit = 1u << 10;
    if (*end == 'M' || *end == 'm') unit = 1u << 20;
    if (*end == 'G' || *end == 'g') unit = 1u << 30;
    return v > 0 ? (size_t)(v * (double)unit) : 0;
}

static void fill_random(unsigned char *buf, size_t n) {
    uint64_t x = 0x243F6A8885A308D3ull;
    for (size_t i = 0; i + 8 <= n; i += 8) {
        x ^= x << 13, x ^= x >> 7, x ^= x << 17;
        memcpy(buf + i, &x, 8);
    }
}

/* Writes then reads s->bytes through a tier in `mode`; rates in bytes/s. */
static int tier_run(const Setup *s, NvmeIoMode mode, double *write_bps, double *read_bps,
                    NvmeStats *opened, Err *err) {
    NvmeTier *t = NULL;
    int rc = nvme_tier_open_mode(&t, s->dir, 0, s->bytes, mode, err);
    if (rc) return rc;
    *opened = nvme_tier_stats(t);
    size_t n = s->bytes / s->chunk;
    TierRequest req[2] = {{0}};
    double t0 = clock_seconds();
    for (size_t i = 0; !rc && i < n; i++) {
        if (i >= 2) rc = nvme_tier_wait(t, &req[i % 2], err);
        if (!rc)
            rc =
                nvme_tier_write(t, i * s->chunk, s->src + i * s->chunk, s->chunk, &req[i % 2], err);
    }
    for (size_t i = n > 2 ? n - 2 : 0; !rc && i < n; i++) rc = nvme_tier_wait(t, &req[i % 2], err);
    *write_bps = (double)s->bytes / (clock_seconds() - t0);
    t0 = clock_seconds();
    for (size_t i = 0; !rc && i < n && i < 2; i++)
        rc = nvme_tier_read(t, i * s->chunk, s->buf[i], s->chunk, &req[i], err);
    for (size_t i = 0; !rc && i < n; i++) {
        rc = nvme_tier_wait(t, &req[i % 2], err);
        if (!rc && memcmp(s->buf[i % 2], s->src + i * s->chunk, s->chunk))
            rc = err_set(err, ERR_INTERNAL, "chunk %zu read back differs from what was written", i);
        if (!rc && i + 2 < n)
            rc = nvme_tier_read(t, (i + 2) * s->chunk, s->buf[i % 2], s->chunk, &req[i % 2], err);
    }
    *read_bps = (double)s->bytes / (clock_seconds() - t0);
    nvme_tier_close(t); /* waits for anything an error left in flight */
    return rc;
}

/* Drops a file's pages from the page cache once they are on the disk. */
static void drop_cached(const char *path) {
    int fd = open(path, O_RDONLY);
    if (fd < 0) return;
    fdatasync(fd);
    posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED);
    close(fd);
}

static double timed_system(const char *cmd) {
    double t0 = clock_seconds();
    return system(cmd) == 0 ? clock_seconds() - t0 : -1;
}

/* dd writes then reads s->bytes, bs = chunk, into a file reserved as the tier's is. */
static int dd_run(const Setup *s, int direct, double *write_bps, double *read_bps, Err *err) {
    int fd = open(s->dd_file, O_WRONLY | O_CREAT | O_TRUNC, 0600);
    int rc = fd < 0 ? errno : posix_fallocate(fd, 0, (off_t)s->bytes);
    if (fd >= 0) close(fd);
    if (rc) return err_set(err, ERR_IO, "cannot reserve %s: %s", s->dd_file, strerror(rc));
    char cmd[16384];
    snprintf(cmd, sizeof cmd, "dd if=%s of=%s bs=%zu count=%zu conv=notrunc%s status=none",
             s->dd_src, s->dd_file, s->chunk, s->bytes / s->chunk,
             direct ? " oflag=direct" : ",fdatasync");
    double w = timed_system(cmd);
    drop_cached(s->dd_file);
    snprintf(cmd, sizeof cmd, "dd if=%s of=/dev/null bs=%zu%s status=none", s->dd_file, s->chunk,
             direct ? " iflag=direct" : "");
    double r = w > 0 ? timed_system(cmd) : -1;
    unlink(s->dd_file);
    if (w <= 0 || r <= 0) return err_set(err, ERR_IO, "dd failed: %s", cmd);
    *write_bps = (double)s->bytes / w;
    *read_bps = (double)s->bytes / r;
    return 0;
}

/* The source file dd reads: in /dev/shm when it is memory, else next to dd's file (where it
 * stays in the page cache: it is read, never dropped). */
static int write_dd_source(Setup *s, Err *err) {
    struct statfs fs;
    int shm = statfs("/dev/shm", &fs) == 0 && fs.f_type == TMPFS_MAGIC_NUMBER;
    snprintf(s->dd_src, sizeof s->dd_src, "%s/fsdp-bench-nvme-%ld-src.bin",
             shm ? "/dev/shm" : s->dir, (long)getpid());
    snprintf(s->dd_file, sizeof s->dd_file, "%s/fsdp-bench-nvme-%ld-dd.bin", s->dir,
             (long)getpid());
    FILE *f = fopen(s->dd_src, "wb");
    if (!f) return err_set(err, ERR_IO, "cannot write %s: %s", s->dd_src, strerror(errno));
    int bad = fwrite(s->src, 1, s->bytes, f) != s->bytes;
    if (fclose(f) || bad) {
        unlink(s->dd_src);
        return err_set(err, ERR_IO, "cannot write %s (room in /dev/shm?)", s->dd_src);
    }
    return 0;
}

static double median(double *v, int n) {
    qsort(v, (size_t)n, sizeof *v, cmp_double);
    return v[n / 2];
}

/* The five ways measured, in the order of a forward run. */
enum { TIER_AUTO, DD_DIRECT, TIER_DIRECT, DD_BUFFERED, TIER_BUFFERED, NWAYS };
static const char *const way_names[NWAYS] = {
    "tier, default (O_DIRECT write, buffered read)", "dd oflag=direct / iflag=direct",
    "tier, O_DIRECT both ways", "dd conv=fdatasync / buffered read", "tier, buffered both ways"};
static const char *const way_labels[NWAYS] = {[TIER_AUTO] = "tier",
                                              [DD_DIRECT] = "dd-direct",
                                              [TIER_DIRECT] = "tier-direct",
                                              [DD_BUFFERED] = "dd-buffered",
                                              [TIER_BUFFERED] = "tier-buffered"};

/* Bytes per second, by way and run. */
typedef struct Rates {
    double write[NWAYS][99], read[NWAYS][99];
} Rates;

/* The flags into s and *runs; 2 (after saying why) when they are wrong. */
static int parse_args(int argc, char **argv, Setup *s, int *runs) {
    for (int i = 1; i + 1 < argc; i += 2) {
        if (!strcmp(argv[i], "--bytes"))
            s->bytes = parse_size(argv[i + 1]);
        else if (!strcmp(argv[i], "--chunk"))
            s->chunk = parse_size(argv[i + 1]);
        else if (!strcmp(argv[i], "--dir"))
            s->dir = argv[i + 1];
        else if (!strcmp(argv[i], "--runs"))
            *runs = atoi(argv[i + 1]);
        else {
            fprintf(stderr, "bench_nvme: unknown option %s\n", argv[i]);
            return 2;
        }
    }
    if (!s->chunk || s->chunk % NVME_TIER_ALIGN || s->bytes < s->chunk || *runs < 1 || *runs > 99) {
        fprintf(stderr, "bench_nvme: --chunk must be a multiple of 4 KiB, --bytes at least one "
                        "chunk, --runs 1 to 99\n");
        return 2;
    }
    s->bytes -= s->bytes % s->chunk;
    return 0;
}

/* Makes --dir if it is not there (*made_dir: then it goes at the end) and refuses tmpfs;
 * 2 (after saying why) when it cannot be used. */
static int open_dir(const Setup *s, int *made_dir) {
    *made_dir = mkdir(s->dir, 0777) == 0;
    struct statfs fs;
    if (statfs(s->dir, &fs)) {
        fprintf(stderr, "bench_nvme: --dir %s: %s\n", s->dir, strerror(errno));
        return 2;
    }
    if (fs.f_type == TMPFS_MAGIC_NUMBER) {
        if (*made_dir) rmdir(s->dir);
        fprintf(stderr, "bench_nvme: --dir %s is tmpfs (memory), not a disk\n", s->dir);
        return 2;
    }
    return 0;
}

/* The random source, the two read buffers and dd's source file. */
static int prepare_data(Setup *s, Err *err) {
    if (posix_memalign((void **)&s->src, NVME_TIER_ALIGN, s->bytes) ||
        posix_memalign((void **)&s->buf[0], NVME_TIER_ALIGN, s->chunk) ||
        posix_memalign((void **)&s->buf[1], NVME_TIER_ALIGN, s->chunk))
        return err_set(err, ERR_NOMEM, "out of memory for %zu bytes", s->bytes);
    fill_random(s->src, s->bytes);
    return write_dd_source(s, err);
}

/* The filesystem and device under dir, e.g. "ext4 on /dev/vda"; "?" when df cannot say. */
static void describe_disk(const char *dir, char *disk, size_t n) {
    char cmd[8192];
    snprintf(disk, n, "?");
    snprintf(cmd, sizeof cmd, "df -PT '%s' | tail -1 | awk '{print $2 \" on \" $1}'", dir);
    FILE *df = popen(cmd, "r");
    if (df && fgets(disk, (int)n, df)) disk[strcspn(disk, "\n")] = 0;
    if (df) pclose(df);
}

/* One way's write and read rates for one run; the default tier's open stats into *opened. */
static int measure_way(const Setup *s, int way, double *write_bps, double *read_bps,
                       NvmeStats *opened, Err *err) {
    NvmeStats ignored;
    switch (way) {
    case TIER_AUTO:
        return tier_run(s, NVME_IO_AUTO, write_bps, read_bps, opened, err);
    case TIER_DIRECT:
        return tier_run(s, NVME_IO_DIRECT, write_bps, read_bps, &ignored, err);
    case TIER_BUFFERED:
        return tier_run(s, NVME_IO_BUFFERED, write_bps, read_bps, &ignored, err);
    default:
        return dd_run(s, way == DD_DIRECT, write_bps, read_bps, err);
    }
}

/* Each run measures the five in turn, tier and dd alternating; every other run goes in the
 * reverse order, so nothing always follows the same neighbour's writes on a disk whose host
 * may flush behind. Prints each run's rates as it ends. */
static int measure_runs(const Setup *s, int runs, Rates *rates, NvmeStats *opened, Err *err) {
    int rc = 0;
    for (int run = 0; !rc && run < runs; run++) {
        printf("  run %d MB/s, write/read:", run + 1);
        for (int step = 0; !rc && step < NWAYS; step++) {
            int k = run % 2 ? NWAYS - 1 - step : step;
            rc = measure_way(s, k, &rates->write[k][run], &rates->read[k][run], opened, err);
        }
        for (int k = 0; !rc && k < NWAYS; k++)
            printf(" %s %.0f/%.0f", way_labels[k], rates->write[k][run] / 1e6,
                   rates->read[k][run] / 1e6);
        printf("\n");
    }
    return rc;
}

/* The medians by way, and the default tier against dd in the same mode and in its faster. */
static void print_medians(Rates *rates, int runs) {
    double mw[NWAYS], mr[NWAYS];
    printf("  median of %d runs %30s write MB/s  read MB/s\n", runs, "");
    for (int k = 0; k < NWAYS; k++) {
        mw[k] = median(rates->write[k], runs);
        mr[k] = median(rates->read[k], runs);
        printf("  %-47s %9.0f  %9.0f\n", way_names[k], mw[k] / 1e6, mr[k] / 1e6);
    }
    double best_w = mw[DD_DIRECT] > mw[DD_BUFFERED] ? mw[DD_DIRECT] : mw[DD_BUFFERED];
    double best_r = mr[DD_DIRECT] > mr[DD_BUFFERED] ? mr[DD_DIRECT] : mr[DD_BUFFERED];
    printf("  tier (default) / dd in the same mode: write %.2fx (dd direct), read %.2fx (dd "
           "buffered)\n",
           mw[TIER_AUTO] / mw[DD_DIRECT], mr[TIER_AUTO] / mr[DD_BUFFERED]);
    printf("  tier (default) / dd's faster mode:    write %.2fx, read %.2fx\n",
           mw[TIER_AUTO] / best_w, mr[TIER_AUTO] / best_r);
}

int main(int argc, char **argv) {
    Setup s = {.bytes = 1u << 30, .chunk = 64u << 20, .dir = "/var/tmp/fsdp_bench_nvme"};
    int runs = 3, made_dir = 0;
    if (parse_args(argc, argv, &s, &runs) || open_dir(&s, &made_dir)) return 2;
    Err err = {0};
    if (prepare_data(&s, &err)) {
        fprintf(stderr, "bench_nvme: %s\n", err.msg);
        return 1;
    }
    char disk[256];
    describe_disk(s.dir, disk, sizeof disk);
    printf("bench_nvme: %.2f GiB in %zu MiB chunks, 2 in flight, %s (%s), %d runs\n",
           (double)s.bytes / (1 << 30), s.chunk >> 20, s.dir, disk, runs);
    Rates rates;
    NvmeStats opened = {0};
    int rc = measure_runs(&s, runs, &rates, &opened, &err);
    unlink(s.dd_src);
    if (made_dir) rmdir(s.dir);
    if (rc) {
        fprintf(stderr, "bench_nvme: %s\n", err.msg);
        return 1;
    }
    if (!opened.direct_writes)
        printf("  note: %s does not take O_DIRECT: every tier mode ran buffered\n", s.dir);
    print_medians(&rates, runs);
    free(s.src);
    free(s.buf[0]);
    free(s.buf[1]);
    return 0;
}
