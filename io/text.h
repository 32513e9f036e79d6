/* text: a text file as a byte-level language model's data set (a Dataset whose tokens are its
 * bytes, vocabulary 256), cut into sequences; a .gz file is read decompressed. Nothing is
 * downloaded: the default is a text a Debian package the build installs already ships. */
#ifndef FSDP_IO_TEXT_H
#define FSDP_IO_TEXT_H

#include "engine/model.h" /* Dataset */

/* Open MPI's release notes (openmpi-bin, which .ci/deps.sh installs): 239,190 bytes of English
 * once decompressed. */
#define TEXT_DEFAULT_PATH "/usr/share/doc/openmpi-bin/NEWS.gz"
/* The most bytes a text may hold: more would be a data set for another program. */
#define TEXT_MAX_BYTES (1L << 30)

/* Loads the file at path into *out: out->text its bytes, out->n = (bytes - 1) / seq sequences
 * (sample i: bytes [i * seq, (i + 1) * seq), each predicting the byte after it, so every
 * sequence has its targets in the file), out->in_elems = out->target_elems = seq, out->owned
 * the bytes (dataset_free frees them). A file zlib does not recognise as gzip is read as it is.
 * A missing, unreadable or empty file, a directory, corrupt gzip data or a text shorter than
 * one sequence and its last target (seq + 1 bytes) is one line naming --text and the path
 * (ERR_USAGE); *out then holds nothing. */
int text_load(Dataset *out, const char *path, int seq, Err *err);

/* The file to read: the --text flag's value if given (non-NULL, non-empty), else
 * TEXT_DEFAULT_PATH. Not copied. */
const char *text_path(const char *flag_value);

#endif
