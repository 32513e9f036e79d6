/* bulk_file: what goes in through the aligned, direct writer comes back byte for byte through the
 * reader, with the CRC of exactly those bytes, for ranges that start and end anywhere. */
#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zlib.h>

#include "io/bulk_file.h"

/* Anywhere: inside a 4 KiB block, across the 16 MiB blocks, at the file's ragged end. A range past
 * the end fails. */

enum { SIZE = (16 << 20) * 2 + 12345 }; /* two whole blocks and a ragged tail */

static unsigned char *pattern(void) {
    unsigned char *b = malloc(SIZE);
    cr_assert_not_null(b);
    unsigned x = 12345;
    for (size_t i = 0; i < SIZE; i++) b[i] = (unsigned char)((x = x * 1103515245u + 12345u) >> 16);
    return b;
}

Test(bulk_file, what_is_written_reads_back_from_any_offset) {
    char path[64];
    snprintf(path, sizeof path, "/var/tmp/fsdp_bulk_%ld.bin", (long)getpid());
    unsigned char *data = pattern();
    BulkFile *w;
    Err err = {0};
    cr_assert_eq(bulk_open(&w, path, &err), 0, "%s", err.msg);
    /* appended in uneven pieces, as a rank's checkpoint pieces are */
    size_t pieces[] = {1, 4095, 4097, 3 << 20, 17 << 20, 7};
    size_t at = 0;
    for (size_t i = 0; at < SIZE; i++) {
        size_t n = pieces[i % 6] < SIZE - at ? pieces[i % 6] : SIZE - at;
        cr_assert_eq(bulk_size(w), at);
        cr_assert_eq(bulk_write(w, data + at, n, &err), 0, "%s", err.msg);
        at += n;
    }
    cr_assert_eq(bulk_close(w, &err), 0, "%s", err.msg);
    struct stat st;
    cr_assert_eq(stat(path, &st), 0);
    cr_expect_eq(st.st_size, SIZE, "cut back to its exact size: %lld", (long long)st.st_size);

    BulkReader *r;
    cr_assert_eq(bulk_reader_open(&r, path), 0);
    const size_t ranges[][2] = {
        {0, SIZE},        {1, 10},           {4095, 2},     {(16 << 20) - 3, 7},
        {5000, 20 << 20}, {SIZE - 100, 100}, {SIZE - 1, 1}, {(32 << 20) - 4096, 4096 + 12345}};
    unsigned char *back = malloc(SIZE);
    for (size_t i = 0; i < sizeof ranges / sizeof *ranges; i++) {
        size_t off = ranges[i][0], n = ranges[i][1];
        memset(back, 0, n);
        unsigned long crc = crc32(0L, Z_NULL, 0), want = crc32(0L, Z_NULL, 0);
        want = crc32(want, data + off, (uInt)n);
        cr_assert_eq(bulk_read(r, off, n, back, &crc), 0, "range %zu+%zu", off, n);
        cr_expect_eq(memcmp(back, data + off, n), 0, "range %zu+%zu", off, n);
        cr_expect_eq(crc, want, "range %zu+%zu", off, n);
        unsigned long crc_only = crc32(0L, Z_NULL, 0);
        cr_assert_eq(bulk_read(r, off, n, NULL, &crc_only), 0);
        cr_expect_eq(crc_only, want, "the CRC alone, range %zu+%zu", off, n);
    }
    unsigned long crc = 0;
    cr_expect_neq(bulk_read(r, SIZE - 10, 11, back, &crc), 0, "one byte past the end");
    cr_expect_neq(bulk_read(r, SIZE + 5000, 1, back, &crc), 0, "wholly past the end");
    bulk_reader_close(r);
    BulkReader *none;
    cr_expect_neq(bulk_reader_open(&none, "/nonexistent/x.bin"), 0);
    unlink(path);
    free(back);
    free(data);
}
