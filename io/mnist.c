/* mnist: FashionMNIST from Debian's dataset-fashion-mnist (gzip'd IDX files) into a Dataset, with
 * every header, count, label and gzip stream checked; nothing is downloaded. */
#include "io/mnist.h"

#include <errno.h>
#include <limits.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <zlib.h>

#define MNIST_SIDE 28
#define MNIST_CLASSES 10
#define IDX_IMAGES_MAGIC 0x00000803u /* u8 data, 3 dims: count, rows, cols */
#define IDX_LABELS_MAGIC 0x00000801u /* u8 data, 1 dim: count */
/* No real IDX set comes near this; a header above it is corrupt, not a reason to malloc. */
#define IDX_MAX_COUNT 10000000L
#define GZ_BUF_BYTES (256u * 1024u) /* zlib's input buffer */
#define GZ_CHUNK (1u << 30)         /* gzread takes an unsigned int length */

/* DEFLATE cannot shrink data more than this (its longest match, 258 bytes, in at least about
 * 2 bits), so a gzip file of c bytes holds at most c * 1032 bytes: a bound that refuses a
 * header announcing more than its file can hold before anything is allocated for it. */
#define GZ_MAX_RATIO 1032u

/* One open IDX file: its full path (for messages), its size on disk and the zlib handle. */
typedef struct IdxFile {
    char path[PATH_MAX];
    size_t file_bytes;
    gzFile gz;
} IdxFile;

static uint32_t be32(const uint8_t *p) {
    return (uint32_t)p[0] << 24 | (uint32_t)p[1] << 16 | (uint32_t)p[2] << 8 | (uint32_t)p[3];
}

/* zlib's message for the last error, without the "path: " prefix zlib puts on it. */
static const char *gz_message(const IdxFile *f, int *errnum) {
    const char *m = gzerror(f->gz, errnum);
    size_t pl = strlen(f->path);
    if (strncmp(m, f->path, pl) == 0 && m[pl] == ':' && m[pl + 1] == ' ') m += pl + 2;
    return m;
}

/* Reports the zlib error that stopped a read, with how far it got (`where`, may be ""). */
static int gz_fail(const IdxFile *f, const char *where, Err *err) {
    int errnum = Z_OK;
    const char *m = gz_message(f, &errnum);
    if (errnum == Z_ERRNO) return err_set(err, ERR_IO, "%s: read failed: %s%s", f->path, m, where);
    if (errnum == Z_MEM_ERROR) return err_set(err, ERR_NOMEM, "%s: out of memory in zlib", f->path);
    if (errnum == Z_BUF_ERROR) /* zlib's "unexpected end of file": the .gz itself is cut */
        return err_set(err, ERR_USAGE,
                       "%s: gzip data is cut short, the file is truncated (zlib: %s)%s", f->path, m,
                       where);
    return err_set(err, ERR_USAGE, "%s: not gzip data or corrupt (zlib: %s)%s", f->path, m, where);
}

/* Reads up to n bytes into dst with large gzread calls (zlib inflates straight into dst).
 * Sets *got to the bytes read. Returns 0 (*got < n only at a clean end of data) or -1 when
 * zlib reported an error (gz_fail describes it). */
static int gz_fill(gzFile gz, uint8_t *dst, size_t n, size_t *got) {
    *got = 0;
    while (*got < n) {
        size_t want = n - *got;
        unsigned chunk = want > GZ_CHUNK ? GZ_CHUNK : (unsigned)want;
        int r = gzread(gz, dst + *got, chunk);
        if (r < 0) return -1;
        *got += (size_t)r;
        if ((unsigned)r < chunk) break;
    }
    int errnum = Z_OK;
    (void)gzerror(gz, &errnum);
    return errnum == Z_OK || errnum == Z_STREAM_END ? 0 : -1;
}

static void idx_close(IdxFile *f) {
    if (f->gz) gzclose_r(f->gz);
    f->gz = NULL;
}

/* Opens dir/name as gzip data; rejects missing files, directories and non-gzip bytes. */
static int idx_open(IdxFile *f, const char *dir, const char *name, Err *err) {
    f->gz = NULL;
    size_t dl = strlen(dir);
    const char *sep = dl > 0 && dir[dl - 1] == '/' ? "" : "/";
    int w = snprintf(f->path, sizeof f->path, "%s%s%s", dir, sep, name);
    if (w < 0 || (size_t)w >= sizeof f->path)
        return err_set(err, ERR_USAGE, "--data: directory path is too long (%zu bytes)", dl);
    struct stat st;
    if (stat(f->path, &st) != 0) {
        if (errno == ENOENT || errno == ENOTDIR)
            return err_set(err, ERR_USAGE,
                           "%s: no such file (is dataset-fashion-mnist installed? or pass "
                           "--data DIR)",
                           f->path);
        return err_set(err, ERR_USAGE, "%s: cannot open: %s", f->path, strerror(errno));
    }
    if (S_ISDIR(st.st_mode))
        return err_set(err, ERR_USAGE, "%s: is a directory, expected a gzip'd IDX file", f->path);
    if (!S_ISREG(st.st_mode))
        return err_set(err, ERR_USAGE, "%s: not a regular file, expected a gzip'd IDX file",
                       f->path);
    f->file_bytes = (size_t)st.st_size;
    errno = 0;
    f->gz = gzopen(f->path, "rb");
    if (!f->gz) {
        if (errno == 0) return err_set(err, ERR_NOMEM, "%s: out of memory opening it", f->path);
        return err_set(err, ERR_USAGE, "%s: cannot open: %s", f->path, strerror(errno));
    }
    /* Must come before the first read (gzdirect reads ahead). */
    if (gzbuffer(f->gz, GZ_BUF_BYTES) != 0) {
        idx_close(f);
        return err_set(err, ERR_INTERNAL, "%s: gzbuffer refused", f->path);
    }
    /* Without a gzip header zlib would hand back the raw bytes ("transparent" mode). An empty
     * file reads as not direct and is reported by the header read. */
    if (gzdirect(f->gz)) {
        idx_close(f);
        return err_set(err, ERR_USAGE,
                       "%s: not gzip data (expected the gzip'd IDX file as Debian ships it)",
                       f->path);
    }
    return 0;
}

/* Reads the big-endian IDX header: magic, then ndims u32 sizes into dims. */
static int idx_header(IdxFile *f, uint32_t magic, const char *kind, int ndims, uint32_t *dims,
                      Err *err) {
    uint8_t h[16];
    size_t want = 4 + 4 * (size_t)ndims, got = 0;
    if (gz_fill(f->gz, h, want, &got) != 0) return gz_fail(f, "; in the IDX header", err);
    if (got == 0) return err_set(err, ERR_USAGE, "%s: empty data, no IDX header", f->path);
    if (got < want)
        return err_set(err, ERR_USAGE,
                       "%s: truncated: the data ends after %zu bytes, inside the %zu-byte IDX "
                       "header",
                       f->path, got, want);
    uint32_t m = be32(h);
    if (m != magic) {
        const char *hint = m == IDX_LABELS_MAGIC   ? "; this is a labels file"
                           : m == IDX_IMAGES_MAGIC ? "; this is an images file"
                                                   : "";
        return err_set(err, ERR_USAGE, "%s: not an IDX %s file (magic 0x%08x, expected 0x%08x%s)",
                       f->path, kind, m, magic, hint);
    }
    for (int i = 0; i < ndims; i++) dims[i] = be32(h + 4 + 4 * i);
    if (dims[0] == 0) return err_set(err, ERR_USAGE, "%s: header says 0 %ss", f->path, kind);
    if (dims[0] > IDX_MAX_COUNT)
        return err_set(err, ERR_USAGE,
                       "%s: header says %lu %ss, more than the %ld this loader accepts (corrupt "
                       "header?)",
                       f->path, (unsigned long)dims[0], kind, IDX_MAX_COUNT);
    return 0;
}

/* Reads count items of item_bytes each into dst, then checks that the data ends there.
 * `noun` names the items for messages ("images", "labels"), `shape` follows it where the
 * header's dimensions matter (" of 28x28" or "").
 * Extra decompressed bytes after the last item are an error: an IDX file's size is fixed by
 * its header, so extra bytes mean the header is wrong. Bytes after the end of the gzip stream
 * (outside the compressed data) are ignored, as zlib does. */
static int idx_body(IdxFile *f, uint8_t *dst, size_t item_bytes, long count, const char *noun,
                    const char *shape, Err *err) {
    size_t want = item_bytes * (size_t)count, got = 0;
    char where[96];
    if (gz_fill(f->gz, dst, want, &got) != 0) {
        snprintf(where, sizeof where, "; read %zu of %ld %s", got / item_bytes, count, noun);
        return gz_fail(f, where, err);
    }
    if (got < want)
        return err_set(err, ERR_USAGE,
                       "%s: truncated: header says %ld %s%s but the file ends after %zu of them",
                       f->path, count, noun, shape, got / item_bytes);
    /* One more read: reaches the gzip trailer (zlib checks CRC and length there) and finds
     * any extra data. */
    uint8_t extra;
    size_t more = 0;
    if (gz_fill(f->gz, &extra, 1, &more) != 0) return gz_fail(f, "; at the end of the data", err);
    if (more)
        return err_set(err, ERR_USAGE,
                       "%s: extra data after the %ld %s the header announces (wrong count in "
                       "the header?)",
                       f->path, count, noun);
    return 0;
}

/* Whether f, as big as it is on disk, can hold `bytes` of items after its header even at
 * DEFLATE's best: a header that says otherwise is refused before its items are allocated. */
static int idx_can_hold(const IdxFile *f, size_t bytes, long count, const char *noun, Err *err) {
    if (bytes / GZ_MAX_RATIO <= f->file_bytes) return 0;
    return err_set(err, ERR_USAGE,
                   "%s: truncated: header says %ld %s but the file's %zu bytes cannot hold them "
                   "even compressed",
                   f->path, count, noun, f->file_bytes);
}

int mnist_load(Dataset *out, const char *dir, const char *split, Err *err) {
    if (!out) return err_set(err, ERR_INTERNAL, "mnist_load: no Dataset to fill");
    memset(out, 0, sizeof *out);
    if (!split) split = "(none)";
    const char *prefix = strcmp(split, "train") == 0  ? "train"
                         : strcmp(split, "test") == 0 ? "t10k"
                                                      : NULL;
    if (!prefix)
        return err_set(err, ERR_USAGE, "--split: '%.64s' is not a split (use train or test)",
                       split);
    if (!dir || !dir[0]) return err_set(err, ERR_USAGE, "--data: empty directory name");

    char name[64];
    IdxFile img = {.gz = NULL}, lab = {.gz = NULL};
    uint8_t *block = NULL;
    uint32_t idims[3], ldims[1];
    int rc;

    snprintf(name, sizeof name, "%s-images-idx3-ubyte.gz", prefix);
    if ((rc = idx_open(&img, dir, name, err)) != 0) goto fail;
    if ((rc = idx_header(&img, IDX_IMAGES_MAGIC, "image", 3, idims, err)) != 0) goto fail;
    if (idims[1] != MNIST_SIDE || idims[2] != MNIST_SIDE) {
        rc = err_set(err, ERR_USAGE, "%s: images are %lux%lu, expected %dx%d", img.path,
                     (unsigned long)idims[1], (unsigned long)idims[2], MNIST_SIDE, MNIST_SIDE);
        goto fail;
    }
    snprintf(name, sizeof name, "%s-labels-idx1-ubyte.gz", prefix);
    if ((rc = idx_open(&lab, dir, name, err)) != 0) goto fail;
    if ((rc = idx_header(&lab, IDX_LABELS_MAGIC, "label", 1, ldims, err)) != 0) goto fail;
    long n = (long)idims[0];
    if ((long)ldims[0] != n) {
        rc = err_set(err, ERR_USAGE,
                     "%s: labels file has %ld labels but images file %s has %ld images", lab.path,
                     (long)ldims[0], strrchr(img.path, '/') + 1, n);
        goto fail;
    }

    const size_t img_bytes = (size_t)MNIST_SIDE * MNIST_SIDE;
    if ((rc = idx_can_hold(&img, (size_t)n * img_bytes, n, "images", err)) != 0) goto fail;
    if ((rc = idx_can_hold(&lab, (size_t)n, n, "labels", err)) != 0) goto fail;
    /* n <= IDX_MAX_COUNT, so this cannot overflow a 64-bit size_t. */
    block = malloc((size_t)n * (img_bytes + 1));
    if (!block) {
        rc = err_set(err, ERR_NOMEM, "%s: out of memory for %ld images", img.path, n);
        goto fail;
    }
    uint8_t *pixels = block, *labels = block + (size_t)n * img_bytes;
    if ((rc = idx_body(&img, pixels, img_bytes, n, "images", " of 28x28", err)) != 0) goto fail;
    if ((rc = idx_body(&lab, labels, 1, n, "labels", "", err)) != 0) goto fail;
    for (long i = 0; i < n; i++) {
        if (labels[i] >= MNIST_CLASSES) {
            rc = err_set(err, ERR_USAGE, "%s: label %u at index %ld is not a class 0..%d", lab.path,
                         (unsigned)labels[i], i, MNIST_CLASSES - 1);
            goto fail;
        }
    }
    idx_close(&img);
    idx_close(&lab);

    out->n = n;
    out->in_elems = img_bytes;
    out->target_elems = 1;
    out->pixels = pixels;
    out->labels = labels;
    out->rows = out->cols = MNIST_SIDE;
    out->classes = MNIST_CLASSES;
    out->owned = block;
    return 0;

fail:
    free(block);
    idx_close(&img);
    idx_close(&lab);
    memset(out, 0, sizeof *out);
    return rc;
}

const char *mnist_dir(const char *flag_value) {
    if (flag_value && flag_value[0]) return flag_value;
    const char *env = getenv("FSDP_DATA");
    if (env && env[0]) return env;
    return MNIST_DEFAULT_DIR;
}
