/* libFuzzer target (`make fuzz`): arbitrary bytes as the FashionMNIST IDX files the data loader
 * reads. The first byte chooses: bit 0 gzips the rest as Debian ships the files (so the IDX
 * parser sees the bytes) or writes them raw (so zlib's checks do); the second, times 8, is how
 * many of the rest go to the images file (one 28x28 image with its header is 800), the others
 * to the labels file. Every input must give a clean one-line
 * error or a data set that frees cleanly. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zlib.h>

#include "io/mnist.h"

static void write_file(const char *path, const uint8_t *bytes, size_t n, int gz) {
    if (gz) {
        gzFile g = gzopen(path, "wb");
        if (!g) abort();
        if (n && gzwrite(g, bytes, (unsigned)n) != (int)n) abort();
        gzclose(g);
        return;
    }
    FILE *f = fopen(path, "wb");
    if (!f) abort();
    if (n && fwrite(bytes, 1, n, f) != n) abort();
    fclose(f);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (size < 2) return 0;
    char dir[64], images[128], labels[128];
    snprintf(dir, sizeof dir, "/tmp/fsdp-fuzz-idx-%ld", (long)getpid());
    snprintf(images, sizeof images, "%s/train-images-idx3-ubyte.gz", dir);
    snprintf(labels, sizeof labels, "%s/train-labels-idx1-ubyte.gz", dir);
    mkdir(dir, 0700);
    int gz = data[0] & 1;
    size_t rest = size - 2, split = (size_t)data[1] * 8 < rest ? (size_t)data[1] * 8 : rest;
    write_file(images, data + 2, split, gz);
    write_file(labels, data + 2 + split, rest - split, gz);
    Dataset ds;
    Err err = {0};
    if (mnist_load(&ds, dir, "train", &err) == 0) dataset_free(&ds);
    unlink(images);
    unlink(labels);
    rmdir(dir);
    return 0;
}
