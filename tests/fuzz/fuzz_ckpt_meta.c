/* libFuzzer target (`make fuzz`): arbitrary bytes as a checkpoint's meta.json, through the
 * metadata reader, with and without a model to check against. Every input must give a clean
 * one-line error or a metadata object that frees cleanly. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

#include "io/checkpoint.h"
#include "models/toy.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    char dir[64], path[96];
    snprintf(dir, sizeof dir, "/tmp/fsdp-fuzz-ckpt-%ld", (long)getpid());
    snprintf(path, sizeof path, "%s/meta.json", dir);
    mkdir(dir, 0700);
    FILE *f = fopen(path, "wb");
    if (!f) abort();
    if (size && fwrite(data, 1, size, f) != size) abort();
    fclose(f);
    static ModelDesc toy;
    static int made;
    Err err = {0};
    if (!made && toy_model_create(&toy, &err) == 0) made = 1;
    CkptMeta m;
    ckpt_meta_read(&m, dir, NULL, &err);
    ckpt_meta_free(&m);
    if (made) {
        ckpt_meta_read(&m, dir, &toy, &err);
        ckpt_meta_free(&m);
    }
    unlink(path);
    rmdir(dir);
    return 0;
}
