/* libFuzzer target (`make fuzz`): arbitrary bytes as a safetensors file must give a clean error or
 * a file whose every tensor can be read back. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

#include "io/safetensors.h"

/* The bytes go through the reader that loads a file whole (st_read) and the one that opens only its
 * header (st_open) and reads a tensor's bytes on demand. A crash, a leak or a sanitizer report is a
 * bug. */

static void write_input(const char *path, const uint8_t *data, size_t size) {
    FILE *f = fopen(path, "wb");
    if (!f) abort();
    if (size && fwrite(data, 1, size, f) != size) abort();
    fclose(f);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    char path[64];
    snprintf(path, sizeof path, "/tmp/fsdp-fuzz-st-%ld.safetensors", (long)getpid());
    write_input(path, data, size);
    SafeTensors st;
    Err err = {0};
    if (st_read(&st, path, &err) == 0) {
        for (int i = 0; i < st.n; i++) {
            unsigned char buf[64];
            size_t n = st.tensors[i].nbytes < sizeof buf ? st.tensors[i].nbytes : sizeof buf;
            if (st_read_bytes(&st, &st.tensors[i], 0, n, buf, &err)) abort();
        }
        st_free(&st);
    }
    if (st_open(&st, path, &err) == 0) {
        for (int i = 0; i < st.n; i++) {
            unsigned char buf[64];
            size_t n = st.tensors[i].nbytes < sizeof buf ? st.tensors[i].nbytes : sizeof buf;
            st_read_bytes(&st, &st.tensors[i], 0, n, buf, &err); /* a short file may fail: fine */
        }
        st_free(&st);
    }
    unlink(path);
    return 0;
}
