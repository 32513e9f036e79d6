/* libFuzzer target (`make fuzz`): arbitrary bytes as a checkpoint's meta.json, through the
 * metadata reader, with and without a model to check against. Each input is read twice: as
 * it is, which the checksum line refuses unless the input carries a right one, and sealed,
 * its last line replaced by the right `"crc32":N}` line (the rule of docs/checkpoints.md), so
 * that the fuzzer reaches the checks of the fields behind the checksum. Every input must give
 * a clean one-line error or a metadata object that frees cleanly. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zlib.h>

#include "io/checkpoint.h"
#include "models/kinds.h"
#include "models/toy.h"

static void write_file(const char *path, const uint8_t *data, size_t size, int sealed) {
    FILE *f = fopen(path, "wb");
    if (!f) abort();
    size_t body = size;
    if (sealed) { /* everything up to the last line that the input ends with, then the CRC */
        if (body && data[body - 1] == '\n') body--;
        while (body && data[body - 1] != '\n') body--;
        if (!body) body = size; /* one line: keep it all, sealed after a newline */
    }
    if (body && fwrite(data, 1, body, f) != body) abort();
    if (sealed) {
        uLong crc = crc32(crc32(0L, Z_NULL, 0), data, (uInt)body);
        if (body && data[body - 1] != '\n') { /* the checksum line is a line of its own */
            fputc('\n', f);
            crc = crc32(crc, (const Bytef *)"\n", 1);
        }
        fprintf(f, "\"crc32\":%lu}\n", (unsigned long)crc);
    }
    fclose(f);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    char dir[64], path[96];
    snprintf(dir, sizeof dir, "/tmp/fsdp-fuzz-ckpt-%ld", (long)getpid());
    snprintf(path, sizeof path, "%s/meta.json", dir);
    mkdir(dir, 0700);
    static ModelDesc toy;
    static int made;
    Err err = {0};
    if (!made && toy_model_create(&toy, &err) == 0) made = 1;
    for (int sealed = 0; sealed < 2; sealed++) {
        write_file(path, data, size, sealed);
        CkptMeta m;
        ckpt_meta_read(&m, dir, &model_kinds, NULL, &err);
        ckpt_meta_free(&m);
        if (made) {
            ckpt_meta_read(&m, dir, &model_kinds, &toy, &err);
            ckpt_meta_free(&m);
        }
    }
    unlink(path);
    rmdir(dir);
    return 0;
}
