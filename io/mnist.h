/* mnist: reads FashionMNIST from Debian's dataset-fashion-mnist (gzip'd IDX files) into an
 * image Dataset of bytes, checking every header, count, label and gzip stream on the way.
 * Nothing is ever downloaded; the files are read where the package installs them. */
#ifndef FSDP_MNIST_H
#define FSDP_MNIST_H

#include "engine/model.h" /* Dataset */

#define MNIST_DEFAULT_DIR "/usr/share/datasets/fashion-mnist"

/* Loads split "train" (60,000 images) or "test" (10,000) from dir into *out: out->pixels
 * [n*28*28] bytes, out->labels [n], out->n, out->rows = out->cols = 28, out->in_elems = 784,
 * out->target_elems = 1, out->classes = 10, and out->owned = the single malloc block holding
 * both (dataset_free frees it). *out is overwritten, not freed, and after a failure holds
 * nothing (out->owned == NULL). Returns 0, or ERR_USAGE with one line naming the file and
 * what is wrong (ERR_NOMEM when memory runs out, ERR_IO when the OS fails a read). */
int mnist_load(Dataset *out, const char *dir, const char *split, Err *err);

/* The directory to read: the --data flag if given (non-NULL, non-empty), else $FSDP_DATA if
 * set and non-empty, else MNIST_DEFAULT_DIR. The result is flag_value, getenv's string or the
 * literal; it is not copied. */
const char *mnist_dir(const char *flag_value);

#endif
