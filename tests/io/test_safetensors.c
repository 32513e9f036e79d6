/* safetensors: round trips, the header layout, atomic writes, every kind of corrupt file
 * (one clear line naming the file and the problem), and the committed PyTorch fixture. */
#include <cjson/cJSON.h>
#include <criterion/criterion.h>
#include <dirent.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "io/safetensors.h"

#define FIXTURE "tests/fixtures/vit_small.safetensors"

/* ------------------------------------------------------------ helpers */

typedef struct TmpDir {
    char dir[64];
    char path[128]; /* dir/name of the file under test */
} TmpDir;

static void tmp_open(TmpDir *t, const char *name) {
    snprintf(t->dir, sizeof t->dir, "/tmp/st_test_XXXXXX");
    cr_assert_not_null(mkdtemp(t->dir));
    snprintf(t->path, sizeof t->path, "%s/%s", t->dir, name);
}

static int tmp_count_files(const TmpDir *t) {
    DIR *d = opendir(t->dir);
    cr_assert_not_null(d);
    int n = 0;
    for (struct dirent *e; (e = readdir(d));)
        if (strcmp(e->d_name, ".") && strcmp(e->d_name, "..")) n++;
    closedir(d);
    return n;
}

static void tmp_close(TmpDir *t) {
    DIR *d = opendir(t->dir);
    if (d) {
        for (struct dirent *e; (e = readdir(d));) {
            if (!strcmp(e->d_name, ".") || !strcmp(e->d_name, "..")) continue;
            char p[512];
            snprintf(p, sizeof p, "%s/%s", t->dir, e->d_name);
            unlink(p);
        }
        closedir(d);
    }
    rmdir(t->dir);
}

static void write_bytes(const char *path, const void *buf, size_t n) {
    FILE *f = fopen(path, "wb");
    cr_assert_not_null(f);
    cr_assert_eq(fwrite(buf, 1, n, f), n);
    cr_assert_eq(fclose(f), 0);
}

/* A file with header length field `len_field`, then `json` and `data_bytes` bytes of data. */
static void write_raw(const char *path, uint64_t len_field, const char *json, size_t json_len,
                      size_t data_bytes) {
    size_t n = 8 + json_len + data_bytes;
    unsigned char *buf = calloc(n, 1);
    cr_assert_not_null(buf);
    for (int i = 0; i < 8; i++) buf[i] = (unsigned char)(len_field >> (8 * i));
    memcpy(buf + 8, json, json_len);
    for (size_t i = 0; i < data_bytes; i++) buf[8 + json_len + i] = (unsigned char)i;
    write_bytes(path, buf, n);
    free(buf);
}

static unsigned char *read_bytes(const char *path, size_t *n) {
    FILE *f = fopen(path, "rb");
    cr_assert_not_null(f);
    fseek(f, 0, SEEK_END);
    *n = (size_t)ftell(f);
    fseek(f, 0, SEEK_SET);
    unsigned char *buf = malloc(*n + 1);
    cr_assert_eq(fread(buf, 1, *n, f), *n);
    fclose(f);
    return buf;
}

/* Reading the file at path fails with an I/O error whose message contains `want`. */
static void expect_read_error(const char *path, const char *want) {
    SafeTensors st;
    Err err = {0};
    cr_assert_eq(st_read(&st, path, &err), ERR_IO, "read %s", path);
    cr_assert_not_null(strstr(err.msg, want), "message '%s' lacks '%s'", err.msg, want);
}

/* Reading a file made of `json` (length field correct) and `data_bytes` of data fails with a
 * message that names the file and contains `want`. */
static void expect_bad_header(const char *json, size_t data_bytes, const char *want) {
    TmpDir t;
    tmp_open(&t, "bad.safetensors");
    write_raw(t.path, strlen(json), json, strlen(json), data_bytes);
    SafeTensors st;
    Err err = {0};
    int rc = st_read(&st, t.path, &err);
    cr_assert_neq(rc, 0, "accepted a bad header: %s", json);
    cr_assert_eq(err.code, rc);
    cr_assert_not_null(strstr(err.msg, t.path), "message does not name the file: %s", err.msg);
    cr_assert_not_null(strstr(err.msg, want), "message '%s' lacks '%s'", err.msg, want);
    cr_assert_null(strchr(err.msg, '\n'), "message is more than one line: %s", err.msg);
    cr_assert_null(st.tensors);
    cr_assert_null(st.data);
    cr_assert_eq(st.n, 0);
    st_free(&st); /* safe after a failed read */
    tmp_close(&t);
}

/* ------------------------------------------------------------ round trips */

Test(safetensors, round_trip_f32_i32_u8_and_metadata) {
    TmpDir t;
    tmp_open(&t, "rt.safetensors");
    float w[6] = {1.5f, -2.25f, 3.0f, 0.0f, -0.0f, 1e-30f};
    int32_t labels[4] = {9, 2, -1, 2147483647};
    unsigned char pix[5] = {0, 1, 127, 128, 255}; /* odd size: misaligns what follows */
    float scalar = 42.0f;
    int64_t wshape[2] = {2, 3}, lshape[1] = {4}, pshape[1] = {5}, eshape[2] = {0, 7};
    StTensorOut out[] = {
        {"layer.weight", "F32", 2, wshape, w}, {"labels", "I32", 1, lshape, labels},
        {"pixels", "U8", 1, pshape, pix},      {"scalar", "F32", 0, NULL, &scalar},
        {"empty", "F32", 2, eshape, NULL},
    };
    const char *meta[] = {"format", "pt", "note", "quote \" and \\ and unicode \xc3\xa9"};
    Err err = {0};
    cr_assert_eq(st_write(t.path, out, 5, meta, 2, &err), 0, "%s", err.msg);
    cr_assert_eq(tmp_count_files(&t), 1, "temp file left behind");

    SafeTensors st;
    cr_assert_eq(st_read(&st, t.path, &err), 0, "%s", err.msg);
    cr_assert_eq(st.n, 5);
    cr_assert_eq(st.data_bytes, sizeof w + sizeof labels + sizeof pix + sizeof scalar);
    cr_assert_eq((uintptr_t)st.data % 64, 0);
    for (int i = 0; i < 5; i++) cr_assert_str_eq(st.tensors[i].name, out[i].name);

    const StTensor *tw = st_find(&st, "layer.weight");
    cr_assert_not_null(tw);
    cr_assert_str_eq(tw->dtype, "F32");
    cr_assert_eq(tw->ndim, 2);
    cr_assert_eq(tw->shape[0], 2);
    cr_assert_eq(tw->shape[1], 3);
    cr_assert_eq(tw->numel, 6);
    cr_assert_eq(tw->offset, 0);
    cr_assert_eq(tw->nbytes, sizeof w);
    cr_assert_eq(memcmp(st_data(&st, tw), w, sizeof w), 0);

    int32_t lb[4] = {0};
    cr_assert_eq(st_copy(&st, "labels", "I32", lb, 4, &err), 0, "%s", err.msg);
    cr_assert_eq(memcmp(lb, labels, sizeof lb), 0);
    unsigned char pb[5] = {0};
    cr_assert_eq(st_copy(&st, "pixels", "U8", pb, 5, &err), 0, "%s", err.msg);
    cr_assert_eq(memcmp(pb, pix, sizeof pb), 0);
    /* the F32 after the odd U8 tensor is unaligned in the buffer; st_copy does not care */
    float sc = 0;
    cr_assert_eq(st_copy(&st, "scalar", "F32", &sc, 1, &err), 0, "%s", err.msg);
    cr_assert_eq(sc, 42.0f);
    const StTensor *ts = st_find(&st, "scalar");
    cr_assert_eq(ts->ndim, 0);
    cr_assert_eq(ts->numel, 1);
    const StTensor *te = st_find(&st, "empty");
    cr_assert_eq(te->numel, 0);
    cr_assert_eq(te->nbytes, 0);
    cr_assert_eq(te->shape[1], 7);

    cr_assert_str_eq(st_metadata(&st, "format"), "pt");
    cr_assert_str_eq(st_metadata(&st, "note"), meta[3]);
    cr_assert_null(st_metadata(&st, "absent"));
    cr_assert_null(st_find(&st, "absent"));

    /* st_copy refuses a missing name, the wrong dtype and the wrong size */
    float buf[6];
    cr_assert_neq(st_copy(&st, "nope", "F32", buf, 6, &err), 0);
    cr_assert_not_null(strstr(err.msg, "no tensor named 'nope'"), "%s", err.msg);
    cr_assert_neq(st_copy(&st, "labels", "F32", buf, 4, &err), 0);
    cr_assert_not_null(strstr(err.msg, "is I32, expected F32"), "%s", err.msg);
    cr_assert_neq(st_copy(&st, "layer.weight", "F32", buf, 5, &err), 0);
    cr_assert_not_null(strstr(err.msg, "has shape [2,3] (6 elements), expected 5"), "%s", err.msg);

    st_free(&st);
    cr_assert_null(st.tensors);
    st_free(&st); /* twice is fine */
    tmp_close(&t);
}

Test(safetensors, header_is_json_padded_to_8_and_tiles_in_order) {
    TmpDir t;
    tmp_open(&t, "layout.safetensors");
    float a[3] = {1, 2, 3};
    int32_t b[1] = {7};
    int64_t sa[1] = {3}, sb[1] = {1};
    StTensorOut out[] = {{"a", "F32", 1, sa, a}, {"b", "I32", 1, sb, b}};
    const char *meta[] = {"k", "v"};
    Err err = {0};
    cr_assert_eq(st_write(t.path, out, 2, meta, 1, &err), 0, "%s", err.msg);

    size_t n = 0;
    unsigned char *raw = read_bytes(t.path, &n);
    uint64_t len = 0;
    for (int i = 7; i >= 0; i--) len = len << 8 | raw[i];
    cr_assert_eq(len % 8, 0);
    cr_assert_eq(n, 8 + len + sizeof a + sizeof b);
    cr_assert_eq(raw[8], '{');
    raw[8 + len] = '\0'; /* cut off the data: what remains must be JSON plus spaces */
    const char *end = NULL;
    cJSON *root = cJSON_ParseWithOpts((const char *)raw + 8, &end, 1);
    cr_assert_not_null(root, "header is not JSON: %s", raw + 8);
    cr_assert_str_eq(root->child->string, "__metadata__");
    cr_assert_str_eq(cJSON_GetObjectItem(root->child, "k")->valuestring, "v");
    const cJSON *ja = cJSON_GetObjectItem(root, "a"), *jb = cJSON_GetObjectItem(root, "b");
    cr_assert_str_eq(cJSON_GetObjectItem(ja, "dtype")->valuestring, "F32");
    cr_assert_eq(cJSON_GetArrayItem(cJSON_GetObjectItem(ja, "data_offsets"), 0)->valueint, 0);
    cr_assert_eq(cJSON_GetArrayItem(cJSON_GetObjectItem(ja, "data_offsets"), 1)->valueint, 12);
    cr_assert_eq(cJSON_GetArrayItem(cJSON_GetObjectItem(jb, "data_offsets"), 0)->valueint, 12);
    cr_assert_eq(cJSON_GetArrayItem(cJSON_GetObjectItem(jb, "data_offsets"), 1)->valueint, 16);
    cr_assert_eq(cJSON_GetArrayItem(cJSON_GetObjectItem(jb, "shape"), 0)->valueint, 1);
    cJSON_Delete(root);
    free(raw);
    tmp_close(&t);
}

Test(safetensors, reads_pretty_printed_headers_and_empty_files) {
    /* Python's json.dumps default separators, spaces and a newline: all valid JSON */
    TmpDir t;
    tmp_open(&t, "pretty.safetensors");
    const char *json = "{\n \"__metadata__\": {\"a\": \"b\"},\n \"x\": {\"dtype\": \"F16\", "
                       "\"shape\": [2], \"data_offsets\": [0, 4]}}   ";
    write_raw(t.path, strlen(json), json, strlen(json), 4);
    SafeTensors st;
    Err err = {0};
    cr_assert_eq(st_read(&st, t.path, &err), 0, "%s", err.msg);
    cr_assert_eq(st.n, 1);
    cr_assert_str_eq(st.tensors[0].dtype, "F16");
    cr_assert_str_eq(st_metadata(&st, "a"), "b");
    st_free(&st);

    cr_assert_eq(st_write(t.path, NULL, 0, NULL, 0, &err), 0, "%s", err.msg);
    cr_assert_eq(st_read(&st, t.path, &err), 0, "%s", err.msg);
    cr_assert_eq(st.n, 0);
    cr_assert_eq(st.data_bytes, 0);
    st_free(&st);
    tmp_close(&t);
}

/* ------------------------------------------------------------ writing safely */

Test(safetensors, failed_write_leaves_existing_file_intact) {
    TmpDir t;
    tmp_open(&t, "keep.safetensors");
    float a[2] = {1, 2};
    int64_t s[1] = {2};
    StTensorOut good[] = {{"a", "F32", 1, s, a}};
    Err err = {0};
    cr_assert_eq(st_write(t.path, good, 1, NULL, 0, &err), 0, "%s", err.msg);
    size_t n0 = 0;
    unsigned char *before = read_bytes(t.path, &n0);

    int64_t neg[1] = {-1};
    struct {
        StTensorOut t[2];
        int n;
        const char *want;
    } bad[] = {
        {{{"a", "F64", 1, s, a}}, 1, "unknown dtype 'F64'"},
        {{{"a", "F32", 1, neg, a}}, 1, "shape entry -1"},
        {{{"a", "F32", 1, s, NULL}}, 1, "has no data"},
        {{{"__metadata__", "F32", 1, s, a}}, 1, "reserved"},
        {{{"a", "F32", 1, s, a}, {"a", "F32", 1, s, a}}, 2, "duplicate tensor name 'a'"},
        {{{"a", "F32", 9, s, a}}, 1, "9 dimensions"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        err = (Err){0};
        cr_assert_neq(st_write(t.path, bad[i].t, bad[i].n, NULL, 0, &err), 0, "case %zu", i);
        cr_assert_not_null(strstr(err.msg, bad[i].want), "'%s' lacks '%s'", err.msg, bad[i].want);
        cr_assert_eq(tmp_count_files(&t), 1, "case %zu left a file behind", i);
        size_t n1 = 0;
        unsigned char *after = read_bytes(t.path, &n1);
        cr_assert_eq(n1, n0);
        cr_assert_eq(memcmp(before, after, n0), 0, "case %zu changed the file", i);
        free(after);
    }
    const char *dup_meta[] = {"k", "1", "k", "2"};
    cr_assert_neq(st_write(t.path, good, 1, dup_meta, 2, &err), 0);
    cr_assert_not_null(strstr(err.msg, "duplicate metadata key 'k'"), "%s", err.msg);

    /* a successful write replaces the file whole */
    float c[2] = {5, 6};
    StTensorOut other[] = {{"c", "F32", 1, s, c}};
    cr_assert_eq(st_write(t.path, other, 1, NULL, 0, &err), 0, "%s", err.msg);
    cr_assert_eq(tmp_count_files(&t), 1);
    SafeTensors st;
    cr_assert_eq(st_read(&st, t.path, &err), 0, "%s", err.msg);
    cr_assert_null(st_find(&st, "a"));
    float got[2];
    cr_assert_eq(st_copy(&st, "c", "F32", got, 2, &err), 0, "%s", err.msg);
    cr_assert_eq(got[1], 6.0f);
    st_free(&st);
    free(before);
    tmp_close(&t);
}

Test(safetensors, write_into_missing_directory_fails_cleanly) {
    float a[1] = {1};
    int64_t s[1] = {1};
    StTensorOut out[] = {{"a", "F32", 1, s, a}};
    Err err = {0};
    const char *path = "/tmp/st_test_no_such_dir_7f3a/x.safetensors";
    cr_assert_eq(st_write(path, out, 1, NULL, 0, &err), ERR_IO);
    cr_assert_not_null(strstr(err.msg, "cannot create a temporary file next to"), "%s", err.msg);
    cr_assert_not_null(strstr(err.msg, path), "%s", err.msg);
}

/* ------------------------------------------------------------ corrupt files */

Test(safetensors, missing_file) {
    SafeTensors st;
    Err err = {0};
    cr_assert_eq(st_read(&st, "/tmp/st_test_definitely_missing.safetensors", &err), ERR_IO);
    cr_assert_not_null(strstr(err.msg, "cannot open /tmp/st_test_definitely_missing.safetensors"),
                       "%s", err.msg);
    cr_assert_not_null(strstr(err.msg, "No such file"), "%s", err.msg);
    st_free(&st);
}

Test(safetensors, file_shorter_than_the_length_field) {
    TmpDir t;
    tmp_open(&t, "short.safetensors");
    write_bytes(t.path, "abc", 3);
    expect_read_error(t.path, "file too short (3 bytes)");
    tmp_close(&t);
}

Test(safetensors, header_length_larger_than_file) {
    TmpDir t;
    tmp_open(&t, "long.safetensors");
    const char *json = "{}";
    write_raw(t.path, 1000, json, 2, 0);
    expect_read_error(t.path, "header length 1000 is larger than the file (10 bytes)");
    tmp_close(&t);
}

Test(safetensors, header_length_absurd) {
    TmpDir t;
    tmp_open(&t, "absurd.safetensors");
    write_raw(t.path, 200ull * 1000 * 1000, "{}", 2, 0);
    expect_read_error(t.path, "header length 200000000 is absurd (over 100 MB)");
    write_raw(t.path, UINT64_MAX, "{}", 2, 0); /* no overflow in the size arithmetic */
    expect_read_error(t.path, "absurd");
    tmp_close(&t);
}

Test(safetensors, header_not_json) {
    expect_bad_header("{\"a\": {\"dtype\": \"F32\",", 0, "header is not valid JSON");
    expect_bad_header("{} trailing", 0, "header is not valid JSON");
    expect_bad_header("[1, 2]", 0, "header is not a JSON object");
    TmpDir t; /* a NUL inside the header */
    tmp_open(&t, "nul.safetensors");
    write_raw(t.path, 4, "{}\0 ", 4, 0);
    expect_read_error(t.path, "not valid JSON (NUL byte at 2)");
    tmp_close(&t);
}

Test(safetensors, tensor_missing_a_field) {
    expect_bad_header("{\"w\": {\"shape\": [1], \"data_offsets\": [0, 4]}}", 4,
                      "tensor 'w' is missing \"dtype\"");
    expect_bad_header("{\"w\": {\"dtype\": \"F32\", \"data_offsets\": [0, 4]}}", 4,
                      "tensor 'w' is missing \"shape\"");
    expect_bad_header("{\"w\": {\"dtype\": \"F32\", \"shape\": [1]}}", 4,
                      "tensor 'w' is missing \"data_offsets\"");
    expect_bad_header("{\"w\": 3}", 0, "tensor 'w' is not a JSON object");
    expect_bad_header("{\"w\": {\"dtype\": \"F32\", \"shape\": 1, \"data_offsets\": [0, 4]}}", 4,
                      "\"shape\" that is not a list");
}

Test(safetensors, unknown_dtype) {
    expect_bad_header("{\"w\": {\"dtype\": \"F64\", \"shape\": [1], \"data_offsets\": [0, 8]}}", 8,
                      "tensor 'w' has unknown dtype 'F64'");
    expect_bad_header("{\"w\": {\"dtype\": 4, \"shape\": [1], \"data_offsets\": [0, 4]}}", 4,
                      "unknown dtype '(not a string)'");
}

Test(safetensors, offsets_out_of_range_or_reversed) {
    expect_bad_header("{\"w\": {\"dtype\": \"F32\", \"shape\": [2], \"data_offsets\": [0, 8]}}", 4,
                      "data_offsets [0, 8] out of range: the data buffer has 4 bytes");
    expect_bad_header("{\"w\": {\"dtype\": \"U8\", \"shape\": [0], \"data_offsets\": [4, 0]}}", 4,
                      "data_offsets end 0 < begin 4");
    expect_bad_header("{\"w\": {\"dtype\": \"U8\", \"shape\": [4], \"data_offsets\": [0]}}", 4,
                      "not a list of two non-negative integers");
    expect_bad_header("{\"w\": {\"dtype\": \"U8\", \"shape\": [4], \"data_offsets\": [-4, 0]}}", 4,
                      "not a list of two non-negative integers");
    expect_bad_header("{\"w\": {\"dtype\": \"U8\", \"shape\": [4], \"data_offsets\": [0.5, 4]}}", 4,
                      "not a list of two non-negative integers");
}

Test(safetensors, byte_count_disagrees_with_dtype_and_shape) {
    expect_bad_header("{\"w\": {\"dtype\": \"F32\", \"shape\": [3], \"data_offsets\": [0, 8]}}", 8,
                      "tensor 'w' data_offsets span 8 bytes but F32 [3] needs 12");
    expect_bad_header("{\"w\": {\"dtype\": \"BF16\", \"shape\": [2,2], \"data_offsets\": [0, 4]}}",
                      4, "BF16 [2,2] needs 8");
}

Test(safetensors, overlapping_tensors) {
    expect_bad_header("{\"a\": {\"dtype\": \"F32\", \"shape\": [2], \"data_offsets\": [0, 8]},"
                      " \"b\": {\"dtype\": \"F32\", \"shape\": [2], \"data_offsets\": [4, 12]}}",
                      12, "tensor 'b' overlaps tensor 'a'");
    expect_bad_header("{\"a\": {\"dtype\": \"F32\", \"shape\": [1], \"data_offsets\": [0, 4]},"
                      " \"b\": {\"dtype\": \"F32\", \"shape\": [1], \"data_offsets\": [0, 4]}}",
                      4, "overlaps");
}

Test(safetensors, gaps_in_the_data_buffer) {
    expect_bad_header("{\"a\": {\"dtype\": \"F32\", \"shape\": [1], \"data_offsets\": [0, 4]},"
                      " \"b\": {\"dtype\": \"F32\", \"shape\": [1], \"data_offsets\": [8, 12]}}",
                      12, "gap in the data buffer: bytes [4, 8) before tensor 'b'");
    expect_bad_header("{\"a\": {\"dtype\": \"F32\", \"shape\": [1], \"data_offsets\": [4, 8]}}", 8,
                      "gap in the data buffer: bytes [0, 4)");
    expect_bad_header("{\"a\": {\"dtype\": \"F32\", \"shape\": [1], \"data_offsets\": [0, 4]}}", 7,
                      "gap in the data buffer: 3 trailing bytes");
    expect_bad_header("{}", 5, "5 trailing bytes");
}

Test(safetensors, bad_shapes) {
    expect_bad_header("{\"w\": {\"dtype\": \"F32\", \"shape\": [2, -3], \"data_offsets\": [0, 0]}}",
                      0, "tensor 'w' has a negative shape entry (-3)");
    expect_bad_header("{\"w\": {\"dtype\": \"F32\", \"shape\": [1e30], \"data_offsets\": [0, 0]}}",
                      0, "shape entry that is not an integer in [0, 2^53]");
    expect_bad_header("{\"w\": {\"dtype\": \"F32\", \"shape\": [2.5], \"data_offsets\": [0, 0]}}",
                      0, "shape entry that is not an integer");
    expect_bad_header("{\"w\": {\"dtype\": \"F32\", \"shape\": [\"4\"], \"data_offsets\": [0, 0]}}",
                      0, "shape entry that is not an integer");
    /* each entry fits, the product does not: must not wrap around to a small size */
    expect_bad_header("{\"w\": {\"dtype\": \"F32\", \"shape\": [4294967296, 4294967296, 16],"
                      " \"data_offsets\": [0, 0]}}",
                      0, "shape [4294967296,4294967296,16] is too large (size overflows)");
    expect_bad_header("{\"w\": {\"dtype\": \"I64\", \"shape\": [2305843009213693952],"
                      " \"data_offsets\": [0, 0]}}",
                      0, "shape entry that is not an integer in [0, 2^53]");
    expect_bad_header("{\"w\": {\"dtype\": \"I64\", \"shape\": [9007199254740992, 4096],"
                      " \"data_offsets\": [0, 0]}}",
                      0, "too large (size overflows)");
    expect_bad_header("{\"w\": {\"dtype\": \"U8\", \"shape\": [1,1,1,1,1,1,1,1,1],"
                      " \"data_offsets\": [0, 1]}}",
                      1, "tensor 'w' has 9 dimensions, more than 8");
}

Test(safetensors, duplicate_names_bad_metadata_long_names) {
    expect_bad_header("{\"a\": {\"dtype\": \"U8\", \"shape\": [0], \"data_offsets\": [0, 0]},"
                      " \"a\": {\"dtype\": \"U8\", \"shape\": [1], \"data_offsets\": [0, 1]}}",
                      1, "duplicate tensor name 'a'");
    expect_bad_header("{\"__metadata__\": {\"k\": 3}}", 0,
                      "metadata value for 'k' is not a string");
    expect_bad_header("{\"__metadata__\": [1]}", 0, "\"__metadata__\" is not a JSON object");
    char json[512];
    char name[201];
    memset(name, 'n', 200);
    name[200] = '\0';
    snprintf(json, sizeof json,
             "{\"%s\": {\"dtype\": \"U8\", \"shape\": [0], \"data_offsets\": [0, 0]}}", name);
    expect_bad_header(json, 0, "is longer than 127 bytes");
}

/* ------------------------------------------------------------ the PyTorch fixture */

static void expect_shape(const SafeTensors *st, const char *name, const char *dtype, int ndim,
                         const int64_t *shape) {
    const StTensor *t = st_find(st, name);
    cr_assert_not_null(t, "fixture lacks %s", name);
    cr_assert_str_eq(t->dtype, dtype, "%s", name);
    cr_assert_eq(t->ndim, ndim, "%s", name);
    for (int d = 0; d < ndim; d++) cr_assert_eq(t->shape[d], shape[d], "%s dim %d", name, d);
}

Test(safetensors, pytorch_vit_fixture_loads) {
    SafeTensors st;
    Err err = {0};
    cr_assert_eq(st_read(&st, FIXTURE, &err), 0, "%s", err.msg);

    expect_shape(&st, "conv_proj.weight", "F32", 4, (int64_t[]){16, 1, 7, 7});
    expect_shape(&st, "conv_proj.bias", "F32", 1, (int64_t[]){16});
    expect_shape(&st, "class_token", "F32", 3, (int64_t[]){1, 1, 16});
    expect_shape(&st, "encoder.pos_embedding", "F32", 3, (int64_t[]){1, 17, 16});
    expect_shape(&st, "encoder.layers.encoder_layer_1.self_attention.in_proj_weight", "F32", 2,
                 (int64_t[]){48, 16});
    expect_shape(&st, "encoder.layers.encoder_layer_0.mlp.0.weight", "F32", 2, (int64_t[]){32, 16});
    expect_shape(&st, "encoder.layers.encoder_layer_0.mlp.3.weight", "F32", 2, (int64_t[]){16, 32});
    expect_shape(&st, "heads.head.weight", "F32", 2, (int64_t[]){10, 16});
    expect_shape(&st, "input.pixels", "U8", 3, (int64_t[]){4, 28, 28});
    expect_shape(&st, "input.labels", "I32", 1, (int64_t[]){4});
    expect_shape(&st, "input.images", "F32", 4, (int64_t[]){4, 1, 28, 28});
    expect_shape(&st, "ref.logits", "F32", 2, (int64_t[]){4, 10});
    expect_shape(&st, "ref.loss", "F32", 1, (int64_t[]){1});
    expect_shape(&st, "ref.losses", "F32", 1, (int64_t[]){3});

    /* 32 parameters, each with its gradient and its value after 3 steps, plus 6 more */
    cr_assert_eq(st.n, 3 * 32 + 6);
    size_t nparams = 0;
    for (int i = 0; i < st.n; i++) {
        const StTensor *p = &st.tensors[i];
        if (!strncmp(p->name, "input.", 6) || !strncmp(p->name, "ref.", 4) ||
            !strncmp(p->name, "grad.", 5) || !strncmp(p->name, "step3.", 6))
            continue;
        nparams += p->numel;
        char key[ST_MAX_NAME + 8];
        snprintf(key, sizeof key, "grad.%s", p->name);
        expect_shape(&st, key, "F32", p->ndim, p->shape);
        snprintf(key, sizeof key, "step3.%s", p->name);
        expect_shape(&st, key, "F32", p->ndim, p->shape);
    }
    cr_assert_eq(nparams, 5738); /* torchvision's count for this configuration */

    int32_t labels[4];
    cr_assert_eq(st_copy(&st, "input.labels", "I32", labels, 4, &err), 0, "%s", err.msg);
    cr_assert_eq(labels[0], 9); /* FashionMNIST t10k labels 0..3: boot, pullover, trousers x2 */
    cr_assert_eq(labels[1], 2);
    cr_assert_eq(labels[2], 1);
    cr_assert_eq(labels[3], 1);

    /* images are the pixels normalised as the workshop does */
    unsigned char *pix = malloc(4 * 784);
    float *img = malloc(4 * 784 * sizeof *img);
    cr_assert_eq(st_copy(&st, "input.pixels", "U8", pix, 4 * 784, &err), 0, "%s", err.msg);
    cr_assert_eq(st_copy(&st, "input.images", "F32", img, 4 * 784, &err), 0, "%s", err.msg);
    for (int i = 0; i < 4 * 784; i++)
        cr_assert_float_eq(img[i], (pix[i] / 255.0f - 0.5f) / 0.5f, 1e-6, "pixel %d", i);
    free(pix);
    free(img);

    float loss = 0, losses[3];
    cr_assert_eq(st_copy(&st, "ref.loss", "F32", &loss, 1, &err), 0, "%s", err.msg);
    cr_assert(isfinite(loss) && loss > 0, "loss %g", loss);
    cr_assert_eq(st_copy(&st, "ref.losses", "F32", losses, 3, &err), 0, "%s", err.msg);
    cr_assert_eq(losses[0], loss);
    cr_assert_lt(losses[2], losses[0]); /* Adam on one batch makes progress */

    cr_assert_str_eq(st_metadata(&st, "layers"), "2");
    cr_assert_str_eq(st_metadata(&st, "hidden"), "16");
    cr_assert_str_eq(st_metadata(&st, "optimizer"), "Adam");
    cr_assert_not_null(st_metadata(&st, "torch"));
    st_free(&st);
}
