/* The FashionMNIST loader: Debian's real test and train splits, tiny IDX sets written here with
 * zlib, and where the data is looked for. */
#include <criterion/criterion.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zlib.h>

#include "io/mnist.h"

/* The real splits come from Debian's dataset-fashion-mnist (counts, class balance and a few facts
 * checked by hand). Of the tiny sets, good bytes load exactly, and every kind of bad file gets one
 * line naming the file and the problem, and leaves nothing allocated. */

#define SIDE 28
#define PIX (SIDE * SIDE)

/* ---- the real data ---- */

/* Loads a split of the installed data set, failing with the loader's own message. */
static void load_real(Dataset *ds, const char *split) {
    Err err = {0};
    int rc = mnist_load(ds, mnist_dir(NULL), split, &err);
    cr_assert_eq(rc, 0, "mnist_load(%s): %s", split, err.msg);
}

static void check_shape(const Dataset *ds, long n) {
    cr_assert_eq(ds->n, n);
    cr_assert_eq(ds->rows, SIDE);
    cr_assert_eq(ds->cols, SIDE);
    cr_assert_eq(ds->in_elems, (size_t)PIX);
    cr_assert_eq(ds->target_elems, 1);
    cr_assert_eq(ds->classes, 10);
    cr_assert_null(ds->inputs);
    cr_assert_null(ds->targets);
    /* one block: pixels first, labels right after */
    cr_assert_eq((const void *)ds->pixels, ds->owned);
    cr_assert_eq(ds->labels, ds->pixels + (size_t)n * PIX);
}

static void check_balance(const Dataset *ds, long per_class) {
    long count[10] = {0};
    for (long i = 0; i < ds->n; i++) {
        cr_assert_lt(ds->labels[i], 10, "label %u at %ld", ds->labels[i], i);
        count[ds->labels[i]]++;
    }
    for (int c = 0; c < 10; c++)
        cr_assert_eq(count[c], per_class, "class %d appears %ld times", c, count[c]);
}

static uint64_t pixel_sum(const uint8_t *p, size_t n) {
    uint64_t s = 0;
    for (size_t i = 0; i < n; i++) s += p[i];
    return s;
}

/* The facts below were read off the .gz files with Python's gzip module and again with
 * `zcat FILE | od -An -tu1 -j8 -N10` (labels) and an od|awk sum over bytes 16..799 (image 0):
 *   t10k labels start 9 2 1 1 6 1 4 6 5 7 (9 = ankle boot); image 0 sums to 33456;
 *   all 10,000 test images sum to 573469082.
 *   train labels start 9 0 0 3 0 2 7 2 5 5; image 0 sums to 76247; all sum to 3431114169. */
/* What is known of a split: its size, images per class, first ten labels, the pixel sum of
 * image 0 and of all images. */
typedef struct SplitFacts {
    const char *split;
    long n, per_class;
    uint8_t first_labels[10];
    uint64_t image0_sum, all_sum;
} SplitFacts;

static void check_split(const SplitFacts *want) {
    Dataset ds;
    load_real(&ds, want->split);
    check_shape(&ds, want->n);
    check_balance(&ds, want->per_class);
    cr_assert_arr_eq(ds.labels, want->first_labels, 10);
    cr_assert_eq(pixel_sum(ds.pixels, PIX), want->image0_sum);
    cr_assert_eq(pixel_sum(ds.pixels, (size_t)ds.n * PIX), want->all_sum);
    dataset_free(&ds);
    cr_assert_null(ds.owned);
}

Test(mnist_real, test_split) {
    check_split(
        &(SplitFacts){"test", 10000, 1000, {9, 2, 1, 1, 6, 1, 4, 6, 5, 7}, 33456, 573469082ull});
}

Test(mnist_real, train_split) {
    check_split(
        &(SplitFacts){"train", 60000, 6000, {9, 0, 0, 3, 0, 2, 7, 2, 5, 5}, 76247, 3431114169ull});
}

/* ---- tiny files made here ---- */

static char g_dir[64];

static const char *const NAMES[] = {"train-images-idx3-ubyte.gz", "train-labels-idx1-ubyte.gz",
                                    "t10k-images-idx3-ubyte.gz", "t10k-labels-idx1-ubyte.gz"};

static void make_dir(void) {
    strcpy(g_dir, "/tmp/fsdp_mnist_XXXXXX");
    cr_assert_not_null(mkdtemp(g_dir));
}

static void remove_dir(void) {
    char p[128];
    for (size_t i = 0; i < sizeof NAMES / sizeof NAMES[0]; i++) {
        snprintf(p, sizeof p, "%s/%s", g_dir, NAMES[i]);
        unlink(p);
    }
    rmdir(g_dir);
}

TestSuite(mnist_files, .init = make_dir, .fini = remove_dir);

static void path_of(char *p, size_t cap, const char *name) {
    snprintf(p, cap, "%s/%s", g_dir, name);
}

static void put_be32(uint8_t *p, uint32_t v) {
    p[0] = (uint8_t)(v >> 24);
    p[1] = (uint8_t)(v >> 16);
    p[2] = (uint8_t)(v >> 8);
    p[3] = (uint8_t)v;
}

/* Writes bytes as dir/name, gzip'd by zlib (gz != 0) or plain. */
static void write_file(const char *name, const uint8_t *bytes, size_t n, int gz) {
    char p[128];
    path_of(p, sizeof p, name);
    if (gz) {
        gzFile f = gzopen(p, "wb");
        cr_assert_not_null(f);
        if (n) cr_assert_eq(gzwrite(f, bytes, (unsigned)n), (int)n);
        cr_assert_eq(gzclose(f), Z_OK);
    } else {
        FILE *f = fopen(p, "wb");
        cr_assert_not_null(f);
        if (n) cr_assert_eq(fwrite(bytes, 1, n, f), n);
        fclose(f);
    }
}

/* The known pixel bytes of the tiny set: distinct per image and position. */
static uint8_t tiny_pixel(int img, int i) {
    return (uint8_t)(img * 101 + i * 7 + (i >> 5));
}

/* An images file: header (magic, count, rows, cols) then `have` images of rows x cols. */
static void write_images(const char *name, uint32_t magic, uint32_t count, uint32_t rows,
                         uint32_t cols, size_t have_bytes, int gz) {
    size_t n = 16 + have_bytes;
    uint8_t *b = malloc(n);
    cr_assert_not_null(b);
    put_be32(b, magic);
    put_be32(b + 4, count);
    put_be32(b + 8, rows);
    put_be32(b + 12, cols);
    for (size_t i = 0; i < have_bytes; i++) b[16 + i] = tiny_pixel((int)(i / PIX), (int)(i % PIX));
    write_file(name, b, n, gz);
    free(b);
}

static void write_labels(const char *name, uint32_t magic, uint32_t count, const uint8_t *labels,
                         size_t have) {
    uint8_t b[64];
    cr_assert_leq(8 + have, sizeof b);
    put_be32(b, magic);
    put_be32(b + 4, count);
    memcpy(b + 8, labels, have);
    write_file(name, b, 8 + have, 1);
}

static const uint8_t TINY_LABELS[3] = {3, 0, 9};

/* The good files of the tiny train split: 3 images, 3 labels. */
static void write_good_images(void) {
    write_images(NAMES[0], 0x803, 3, SIDE, SIDE, 3 * PIX, 1);
}

static void write_good_labels(void) {
    write_labels(NAMES[1], 0x801, 3, TINY_LABELS, 3);
}

static void write_good(void) {
    write_good_images();
    write_good_labels();
}

/* Loads the tiny train split expecting failure: ERR_USAGE, nothing held, and a message that
 * names `file` (a full path, or NULL for none) and contains every one of the key words. */
static void expect_fail(const char *split, const char *file, const char *const *words) {
    Dataset ds;
    memset(&ds, 0x5a, sizeof ds); /* garbage in: the loader must reset it */
    Err err = {0};
    int rc = mnist_load(&ds, g_dir, split, &err);
    cr_assert_eq(rc, ERR_USAGE, "rc %d: %s", rc, err.msg);
    cr_assert_eq(err.code, ERR_USAGE);
    cr_assert_null(ds.owned, "failure left out->owned set: %s", err.msg);
    cr_assert_null(ds.pixels);
    cr_assert_eq(ds.n, 0);
    cr_assert_null(strchr(err.msg, '\n'), "one line: %s", err.msg);
    if (file) {
        char p[128];
        path_of(p, sizeof p, file);
        cr_assert_not_null(strstr(err.msg, p), "message does not name %s: %s", p, err.msg);
    }
    for (; words && *words; words++)
        cr_assert_not_null(strstr(err.msg, *words), "message lacks '%s': %s", *words, err.msg);
}

#define WORDS(...) ((const char *const[]){__VA_ARGS__, NULL})

Test(mnist_files, good_tiny_set_loads_exactly) {
    write_good();
    Dataset ds;
    memset(&ds, 0x5a, sizeof ds);
    Err err = {0};
    cr_assert_eq(mnist_load(&ds, g_dir, "train", &err), 0, "%s", err.msg);
    check_shape(&ds, 3);
    for (int img = 0; img < 3; img++)
        for (int i = 0; i < PIX; i++)
            cr_assert_eq(ds.pixels[img * PIX + i], tiny_pixel(img, i), "image %d byte %d", img, i);
    cr_assert_arr_eq(ds.labels, TINY_LABELS, 3);
    dataset_free(&ds);
    cr_assert_null(ds.owned);

    /* a trailing slash on the directory is fine */
    char slash[80];
    snprintf(slash, sizeof slash, "%s/", g_dir);
    cr_assert_eq(mnist_load(&ds, slash, "train", &err), 0, "%s", err.msg);
    cr_assert_eq(ds.n, 3);
    dataset_free(&ds);
}

Test(mnist_files, test_split_reads_t10k_files) {
    write_images(NAMES[2], 0x803, 3, SIDE, SIDE, 3 * PIX, 1);
    write_labels(NAMES[3], 0x801, 3, TINY_LABELS, 3);
    Dataset ds;
    Err err = {0};
    cr_assert_eq(mnist_load(&ds, g_dir, "test", &err), 0, "%s", err.msg);
    cr_assert_eq(ds.n, 3);
    dataset_free(&ds);
    /* and "train" does not silently find them */
    expect_fail("train", NAMES[0], WORDS("no such file", "dataset-fashion-mnist", "--data"));
}

Test(mnist_files, truncated_images) {
    /* header says 3, the data holds 2 images and half of the third */
    write_images(NAMES[0], 0x803, 3, SIDE, SIDE, 2 * PIX + PIX / 2, 1);
    write_good_labels();
    expect_fail("train", NAMES[0],
                WORDS("truncated", "header says 3 images of 28x28", "ends after 2 of them"));
}

/* A header announcing ten million images in a file of a few dozen bytes is refused before the
 * 7.85 GB it announces is allocated: no gzip file that small can hold them. */
Test(mnist_files, a_header_bigger_than_its_file_allocates_nothing) {
    write_images(NAMES[0], 0x803, 10000000, SIDE, SIDE, PIX, 1);
    write_labels(NAMES[1], 0x801, 10000000, TINY_LABELS, 3);
    expect_fail(
        "train", NAMES[0],
        WORDS("truncated", "header says 10000000 images", "cannot hold them even compressed"));
}

/* A device is not a data set: refused at open, never read. */
Test(mnist_files, a_device_is_refused) {
    char p[128];
    path_of(p, sizeof p, NAMES[0]);
    cr_assert_eq(symlink("/dev/zero", p), 0);
    write_good_labels();
    expect_fail("train", NAMES[0], WORDS("not a regular file"));
}

Test(mnist_files, truncated_labels) {
    write_good_images();
    write_labels(NAMES[1], 0x801, 3, TINY_LABELS, 1);
    expect_fail("train", NAMES[1], WORDS("truncated", "3 labels", "ends after 1 of them"));
}

Test(mnist_files, truncated_header) {
    /* the gzip'd data stops 6 bytes into the 16-byte header */
    write_file(NAMES[0], (const uint8_t *)"\0\0\x08\x03\0\0", 6, 1);
    write_good_labels();
    expect_fail("train", NAMES[0], WORDS("truncated", "header"));
}

Test(mnist_files, empty_gzip) {
    write_file(NAMES[0], NULL, 0, 1);
    write_good_labels();
    expect_fail("train", NAMES[0], WORDS("empty"));
}

Test(mnist_files, wrong_magic) {
    write_images(NAMES[0], 0x801, 3, SIDE, SIDE, 3 * PIX, 1);
    write_good_labels();
    expect_fail("train", NAMES[0],
                WORDS("not an IDX image file", "magic 0x00000801", "expected 0x00000803"));
}

Test(mnist_files, wrong_labels_magic) {
    write_good_images();
    write_labels(NAMES[1], 0x12345678, 3, TINY_LABELS, 3);
    expect_fail("train", NAMES[1],
                WORDS("not an IDX label file", "magic 0x12345678", "expected 0x00000801"));
}

Test(mnist_files, label_count_mismatch) {
    write_good_images();
    write_labels(NAMES[1], 0x801, 2, TINY_LABELS, 2);
    expect_fail("train", NAMES[1], WORDS("has 2 labels", "has 3 images", NAMES[0]));
}

Test(mnist_files, label_out_of_range) {
    write_good_images();
    const uint8_t bad[3] = {3, 12, 9};
    write_labels(NAMES[1], 0x801, 3, bad, 3);
    expect_fail("train", NAMES[1], WORDS("label 12 at index 1", "not a class 0..9"));
}

Test(mnist_files, not_gzip) {
    /* a valid IDX file, but stored uncompressed: zlib would pass the bytes through */
    write_images(NAMES[0], 0x803, 3, SIDE, SIDE, 3 * PIX, 0);
    write_good_labels();
    expect_fail("train", NAMES[0], WORDS("not gzip data"));
}

/* The good files, then file `name` cut to what keep(its size) says. */
static void write_good_and_cut(const char *name, off_t (*keep)(off_t size)) {
    write_good();
    char p[128];
    path_of(p, sizeof p, name);
    struct stat st;
    cr_assert_eq(stat(p, &st), 0);
    cr_assert_eq(truncate(p, keep(st.st_size)), 0);
}

static off_t half(off_t size) {
    return size / 2;
}

static off_t all_but_the_trailer(off_t size) {
    return size - 8;
}

Test(mnist_files, gzip_cut_in_the_middle) {
    write_good_and_cut(NAMES[0], half);
    expect_fail("train", NAMES[0], WORDS("cut short", "truncated", "zlib"));
}

Test(mnist_files, gzip_missing_trailer) {
    /* all the data inflates, only the 8-byte CRC/length trailer is gone */
    write_good_and_cut(NAMES[1], all_but_the_trailer);
    expect_fail("train", NAMES[1], WORDS("cut short", "zlib"));
}

Test(mnist_files, gzip_corrupt) {
    write_good();
    char p[128];
    path_of(p, sizeof p, NAMES[0]);
    FILE *f = fopen(p, "r+b");
    cr_assert_not_null(f);
    /* overwrite the deflate data after the 10-byte gzip header with junk */
    fseek(f, 10, SEEK_SET);
    for (int i = 0; i < 64; i++) fputc(0xff, f);
    fclose(f);
    expect_fail("train", NAMES[0], WORDS("not gzip data or corrupt", "zlib"));
}

Test(mnist_files, extra_data_after_last_image) {
    /* trailing data is an error: an IDX file's size is fixed by its header */
    write_images(NAMES[0], 0x803, 2, SIDE, SIDE, 3 * PIX, 1);
    write_labels(NAMES[1], 0x801, 2, TINY_LABELS, 2);
    expect_fail("train", NAMES[0], WORDS("extra data", "2 images"));
}

Test(mnist_files, missing_file) {
    expect_fail("train", NAMES[0], WORDS("no such file", "dataset-fashion-mnist", "--data"));
}

Test(mnist_files, missing_labels_file) {
    write_images(NAMES[0], 0x803, 3, SIDE, SIDE, 3 * PIX, 1);
    expect_fail("train", NAMES[1], WORDS("no such file"));
}

Test(mnist_files, wrong_dimensions) {
    write_images(NAMES[0], 0x803, 3, 27, SIDE, 3 * 27 * SIDE, 1);
    write_labels(NAMES[1], 0x801, 3, TINY_LABELS, 3);
    expect_fail("train", NAMES[0], WORDS("27x28", "expected 28x28"));
}

Test(mnist_files, absurd_count) {
    /* rejected from the header alone, before any allocation */
    write_images(NAMES[0], 0x803, 4000000000u, SIDE, SIDE, PIX, 1);
    write_labels(NAMES[1], 0x801, 3, TINY_LABELS, 3);
    expect_fail("train", NAMES[0], WORDS("4000000000 images", "10000000"));
}

Test(mnist_files, zero_count) {
    write_images(NAMES[0], 0x803, 0, SIDE, SIDE, 0, 1);
    write_labels(NAMES[1], 0x801, 0, TINY_LABELS, 0);
    expect_fail("train", NAMES[0], WORDS("0 images"));
}

Test(mnist_files, bad_split) {
    write_good();
    expect_fail("validation", NULL, WORDS("--split", "validation", "train", "test"));
    expect_fail("", NULL, WORDS("--split"));
    expect_fail(NULL, NULL, WORDS("--split"));
}

Test(mnist_files, directory_instead_of_file) {
    char p[128];
    path_of(p, sizeof p, NAMES[0]);
    cr_assert_eq(mkdir(p, 0700), 0);
    expect_fail("train", NAMES[0], WORDS("is a directory"));
    rmdir(p);
}

/* ---- where the data is looked for ---- */

Test(mnist_dir, flag_beats_env_beats_default) {
    cr_assert_eq(unsetenv("FSDP_DATA"), 0);
    cr_assert_str_eq(mnist_dir(NULL), MNIST_DEFAULT_DIR);
    cr_assert_str_eq(mnist_dir(""), MNIST_DEFAULT_DIR);
    cr_assert_str_eq(mnist_dir("/flag"), "/flag");

    cr_assert_eq(setenv("FSDP_DATA", "", 1), 0); /* set but empty: ignored */
    cr_assert_str_eq(mnist_dir(NULL), MNIST_DEFAULT_DIR);

    cr_assert_eq(setenv("FSDP_DATA", "/env", 1), 0);
    cr_assert_str_eq(mnist_dir(NULL), "/env");
    cr_assert_str_eq(mnist_dir("/flag"), "/flag");
    cr_assert_eq(unsetenv("FSDP_DATA"), 0);
}
