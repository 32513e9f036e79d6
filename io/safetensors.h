/* safetensors: read and write the safetensors file format (8-byte little-endian header
 * length, a JSON header naming every tensor's dtype, shape and byte range, then the data).
 * Used for the PyTorch reference fixtures and for weights and checkpoints. Reading loads
 * the whole file and validates it completely (every byte of the data buffer belongs to
 * exactly one tensor, sizes agree with dtype x shape); writing goes through a temporary
 * file and a rename so an existing file is never half-overwritten, all at once (st_write) or
 * streamed a tensor at a time (StWriter) for files larger than one wants to hold. Touches only the
 * files it is given; parses the header with cJSON, which stays out of this interface. */
#ifndef FSDP_SAFETENSORS_H
#define FSDP_SAFETENSORS_H

#include <stddef.h>
#include <stdint.h>

#include "base/err.h"

#define ST_MAX_DIMS 8
#define ST_MAX_NAME 128

typedef struct StTensor {
    char name[ST_MAX_NAME];
    char dtype[8]; /* "F32", "BF16", "F16", "I32", "I64" or "U8" */
    int ndim;
    int64_t shape[ST_MAX_DIMS];
    size_t numel;  /* product of shape (1 for a scalar, shape []) */
    size_t offset; /* byte offset of the data inside SafeTensors.data */
    size_t nbytes; /* numel * st_dtype_size(dtype) */
} StTensor;

typedef struct SafeTensors {
    char path[256];    /* for error messages */
    StTensor *tensors; /* in header order */
    int n;
    unsigned char *data; /* the data buffer, 64-byte aligned; NULL after st_open */
    size_t data_bytes;
    size_t data_start; /* file offset of the data buffer: 8 + the header's length */
    char **meta_keys;  /* "__metadata__", in header order */
    char **meta_values;
    int n_meta;
} SafeTensors;

/* One tensor to write: shape has ndim entries; data holds numel * dtype size bytes. */
typedef struct StTensorOut {
    const char *name;
    const char *dtype;
    int ndim;
    const int64_t *shape;
    const void *data;
} StTensorOut;

/* Bytes per element of a safetensors dtype name; 0 for a name this module does not know. */
size_t st_dtype_size(const char *dtype);

/* Reads and validates the whole file. On failure *out is empty (safe to st_free) and err
 * names the file and the problem. */
int st_read(SafeTensors *out, const char *path, Err *err);

/* Reads and validates the header only (the data stays on disk; st_read_bytes reads it):
 * for taking a few rows of a file too big to hold. Checks as st_read does. */
int st_open(SafeTensors *out, const char *path, Err *err);

/* Bytes [begin, begin + n) of tensor t's data into dst, from memory after st_read or from
 * the file after st_open. */
int st_read_bytes(const SafeTensors *st, const StTensor *t, size_t begin, size_t n, void *dst,
                  Err *err);

/* The tensor called name, or NULL. */
const StTensor *st_find(const SafeTensors *st, const char *name);

/* Start of t's bytes. The buffer is 64-byte aligned, so this is aligned for t's dtype
 * when t->offset is a multiple of the element size (true when every tensor before it has
 * a whole number of such elements); st_copy needs no alignment. */
const void *st_data(const SafeTensors *st, const StTensor *t);

/* Copies tensor name into dst after checking that it exists, has dtype and has exactly
 * numel elements. */
int st_copy(const SafeTensors *st, const char *name, const char *dtype, void *dst, size_t numel,
            Err *err);

/* Value of a "__metadata__" key, or NULL if absent. */
const char *st_metadata(const SafeTensors *st, const char *key);

void st_free(SafeTensors *st);

/* Writes n tensors, tiled in the order given, and n_meta metadata pairs
 * (meta_kv[2i] = key, meta_kv[2i+1] = value) to path. The header is padded with spaces to
 * a multiple of 8 bytes. Goes through path's directory's temp file + rename: on any error
 * an existing file at path is left untouched and no temp file is left behind. */
int st_write(const char *path, const StTensorOut *tensors, int n, const char *const *meta_kv,
             int n_meta, Err *err);

/* A file written a tensor at a time, so only one tensor need be in memory: st_writer_open
 * checks the tensors as st_write does (their data pointers are not used), writes the header
 * (every name, dtype, shape and offset is known up front) to a temporary file beside path;
 * st_writer_tensor writes the next tensor's data (numel x dtype size bytes, in the order
 * given); st_writer_commit, once every tensor is written, syncs the file and renames it onto
 * path, and frees the writer whatever happens. st_writer_abort (NULL is fine) removes the
 * temporary file and frees the writer: until the commit's rename, an existing file at path is
 * untouched and on failure no temporary file is left behind. */
typedef struct StWriter StWriter;

int st_writer_open(StWriter **out, const char *path, const StTensorOut *tensors, int n,
                   const char *const *meta_kv, int n_meta, Err *err);
int st_writer_tensor(StWriter *w, const void *data, Err *err);
int st_writer_commit(StWriter *w, Err *err);
void st_writer_abort(StWriter *w);

#endif
