/* io/text: a file or a folder (its text files in path order, gzip'd or plain, binaries left
 * out) gathered once into a token file that later loads map, rebuilt when a source changes or
 * the file is damaged, read into memory where no cache can be written; and the held-out tail. */
#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zlib.h>

#include "io/text.h"
#include "io/token_file.h"
#include "tests/util.h"

static void write_bytes(const char *dir, const char *name, const void *bytes, size_t n) {
    char path[600];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    FILE *f = fopen(path, "wb");
    cr_assert(f, "%s", path);
    cr_assert_eq(fwrite(bytes, 1, n, f), n);
    fclose(f);
}

static void write_gz(const char *dir, const char *name, const char *text) {
    char path[600];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    gzFile gz = gzopen(path, "wb");
    cr_assert(gz);
    cr_assert_eq(gzwrite(gz, text, (unsigned)strlen(text)), (int)strlen(text));
    gzclose(gz);
}

/* A fresh folder src with the sources' folder src/in and the cache src/cache, which $FSDP_CACHE
 * names. */
static void fresh_dirs(char *src, char *cache, char *in, const char *tag) {
    fresh_test_dir(src, 256, "text", tag);
    snprintf(cache, 300, "%s/cache", src);
    snprintf(in, 300, "%s/in", src);
    cr_assert_eq(mkdir(cache, 0755), 0);
    cr_assert_eq(mkdir(in, 0755), 0);
    setenv("FSDP_CACHE", cache, 1);
}

static void load_ok(Dataset *d, const char *path, int seq, TextInfo *info) {
    Err err = {0};
    cr_assert_eq(text_load(d, path, seq, info, &err), 0, "%s", err.msg);
}

/* A folder's files in byte order of their paths, a subfolder's among them, a .gz decompressed;
 * a file holding a 0 byte, a hidden file and a symbolic link left out. */
Test(text, a_folder_is_its_text_files_in_path_order) {
    char src[256], cache[300], in[300];
    fresh_dirs(src, cache, in, "order");
    write_bytes(in, "b.txt", "bbbb\n", 5);
    write_gz(in, "a.gz", "aaaa\n");
    write_bytes(in, ".hidden", "hhhh\n", 5);
    write_bytes(in, "index.dat", "\x01\x00\x02", 3);
    char sub[400], link[400];
    snprintf(sub, sizeof sub, "%s/c", in);
    cr_assert_eq(mkdir(sub, 0755), 0);
    write_bytes(sub, "d.txt", "dddd\n", 5);
    snprintf(link, sizeof link, "%s/z.txt", in);
    cr_assert_eq(symlink("b.txt", link), 0);
    Dataset d;
    TextInfo info;
    load_ok(&d, in, 4, &info);
    cr_expect_eq(info.bytes, 15);
    cr_expect_eq(info.files, 3);
    cr_expect_eq(info.skipped, 1);
    cr_expect_eq(memcmp(d.text, "aaaa\nbbbb\ndddd\n", 15), 0, "%.15s", (const char *)d.text);
    cr_expect_eq(d.n, 3); /* (15 - 1) / 4 */
    cr_expect_eq(d.in_elems, 4);
    cr_expect_eq(d.classes, 256);
    cr_expect(info.cache[0] && !info.from_cache, "%s", info.why_not);
    cr_expect(strncmp(info.cache, cache, strlen(cache)) == 0, "%s", info.cache);
    dataset_free(&d);
    remove_test_dir(src);
}

/* The second load maps the same token file; a source edited (another size) makes another. */
Test(text, the_token_file_is_made_once_and_anew_when_a_source_changes) {
    char src[256], cache[300], in[300];
    fresh_dirs(src, cache, in, "reuse");
    write_bytes(in, "one.txt", "the first text\n", 15);
    Dataset a, b, c;
    TextInfo first, second, third;
    load_ok(&a, in, 4, &first);
    load_ok(&b, in, 4, &second);
    cr_expect(!first.from_cache && second.from_cache);
    cr_expect_str_eq(first.cache, second.cache);
    cr_expect_eq(memcmp(a.text, b.text, 15), 0);
    write_bytes(in, "one.txt", "a longer second text\n", 21);
    load_ok(&c, in, 4, &third);
    cr_expect(!third.from_cache);
    cr_expect_str_neq(third.cache, first.cache);
    cr_expect_eq(third.bytes, 21);
    cr_expect_eq(memcmp(c.text, "a longer second text\n", 21), 0);
    dataset_free(&a);
    dataset_free(&b);
    dataset_free(&c);
    remove_test_dir(src);
}

/* A token file cut short (a crash, a full disk) is made again, not read. */
Test(text, a_damaged_token_file_is_made_again) {
    char src[256], cache[300], in[300];
    fresh_dirs(src, cache, in, "damaged");
    write_bytes(in, "one.txt", "some text to learn\n", 19);
    Dataset a, b;
    TextInfo first, again;
    load_ok(&a, in, 4, &first);
    dataset_free(&a);
    cr_assert_eq(truncate(first.cache, TOKEN_FILE_HEADER + 7), 0);
    load_ok(&b, in, 4, &again);
    cr_expect(!again.from_cache);
    cr_expect_str_eq(again.cache, first.cache);
    cr_expect_eq(again.bytes, 19);
    cr_expect_eq(memcmp(b.text, "some text to learn\n", 19), 0);
    dataset_free(&b);
    remove_test_dir(src);
}

/* No cache folder to be had: the bytes are read into memory, and info says why. */
Test(text, without_a_cache_the_text_is_read_into_memory) {
    char src[256], cache[300], in[300], blocked[400];
    fresh_dirs(src, cache, in, "nocache");
    write_bytes(in, "one.txt", "held in memory\n", 15);
    snprintf(blocked, sizeof blocked, "%s/a-file", src);
    write_bytes(src, "a-file", "x", 1);
    setenv("FSDP_CACHE", blocked, 1); /* a file where the folder should be */
    Dataset d;
    TextInfo info;
    load_ok(&d, in, 4, &info);
    cr_expect_str_eq(info.cache, "");
    cr_expect(strstr(info.why_not, "no cache folder"), "%s", info.why_not);
    cr_expect_eq(memcmp(d.text, "held in memory\n", 15), 0);
    dataset_free(&d);
    remove_test_dir(src);
}

/* One line for each bad text, and nothing loaded. */
Test(text, bad_texts_are_one_line) {
    char src[256], cache[300], in[300], empty[400], binary[400];
    fresh_dirs(src, cache, in, "bad");
    snprintf(empty, sizeof empty, "%s/empty", in);
    snprintf(binary, sizeof binary, "%s/binary", in);
    cr_assert_eq(mkdir(empty, 0755), 0);
    cr_assert_eq(mkdir(binary, 0755), 0);
    write_bytes(binary, "a.bin", "\x00\x01", 2);
    write_bytes(in, "broken.gz", "\x1f\x8b\x08\x00\x00\x00\x00\x00\x00\x03\xff\xff", 12);
    const char *cases[][2] = {
        {empty, "the folder holds no files"},
        {binary, "holds no text: its files (1) each hold a 0 byte"},
        {"broken.gz", "broken.gz: gzip data is cut short or corrupt"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        char path[500];
        if (cases[i][0][0] == '/')
            snprintf(path, sizeof path, "%s", cases[i][0]);
        else
            snprintf(path, sizeof path, "%s/%s", in, cases[i][0]);
        Dataset d;
        Err err = {0};
        cr_expect_eq(text_load(&d, path, 4, NULL, &err), ERR_USAGE, "%s", path);
        cr_expect(strstr(err.msg, cases[i][1]) && !strncmp(err.msg, "--text ", 7), "%s: %s", path,
                  err.msg);
        cr_expect_null(d.text);
        cr_expect_null(d.owned);
    }
    remove_test_dir(src);
}

/* The held-out tail of a text is its last sequences: sample j of the tail is sample n - k + j. */
Test(text, the_tail_is_the_last_sequences) {
    char src[256], cache[300], in[300];
    fresh_dirs(src, cache, in, "tail");
    write_bytes(in, "t.txt", "0123456789abcdefghij", 20);
    Dataset d;
    load_ok(&d, in, 3, NULL);
    cr_assert_eq(d.n, 6); /* (20 - 1) / 3 */
    Dataset tail = dataset_tail(&d, 2);
    cr_expect_eq(tail.n, 2);
    cr_expect_eq(memcmp(tail.text, "cdefghi", 7), 0, "%.7s", (const char *)tail.text);
    cr_expect_null(tail.owned);
    dataset_free(&d);
    remove_test_dir(src);
}
