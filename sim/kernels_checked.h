/* kernels_checked: the op table that tells the stream checker what each kernel touches. Every
 * entry first reports the device memory its op reads and writes, as byte ranges computed from
 * its arguments exactly as the kernels use them (semantics in kernels/kernels.h; a tensor of the
 * compute dtype is dtype_size(t) bytes an element, an fp32 one 4), to the calling thread's
 * callback, then calls the same entry of the thread's inner table (kernels_cpu, or kernels_none in
 * accounting-only runs). Touches no bytes itself and allocates nothing. */
#ifndef FSDP_KERNELS_CHECKED_H
#define FSDP_KERNELS_CHECKED_H

#include <stddef.h>

#include "kernels/kernels.h"

/* `count` blocks of `bytes` bytes each, `stride` bytes from one block's start to the next: the
 * rows an op takes from a wider tensor (bias_grad's columns, the class token's rows). A
 * contiguous range is one block (count 1, stride 0); blocks that meet or overlap are reported
 * as that one range. */
typedef struct KernelAccess {
    const void *p;
    size_t bytes;
    size_t count, stride;
    int write; /* 0: read, 1: write */
} KernelAccess;

/* One call per op call, before the op runs: `op` is the entry's name ("linear_forward", a
 * string that lives as long as the program), acc[0..n) its accesses in argument order. An
 * argument read and written ("+=", in place) gives a read, then a write; aliased arguments
 * (out == in) each give theirs. Left out: empty ranges, NULL (nullable) pointers, host memory
 * (adam_step's AdamHyper), and reads of bytes the op itself wrote first (attention's probs
 * during its softmax), which see nothing earlier than the op. n may be 0 (an op on empty
 * shapes). */
typedef void (*KernelAccessFn)(void *ctx, const char *op, const KernelAccess *acc, int n);

/* The calling thread's ops through kernels_checked report to fn(ctx, ...) and then run
 * inner's (each simulated rank binds its own, as kernels_cpu_use_pool binds a pool).
 * inner == NULL unbinds. Calling an entry on a thread with nothing bound is a programming
 * error: it aborts with a message naming the op. */
void kernels_checked_bind(const Kernels *inner, KernelAccessFn fn, void *ctx);

extern const Kernels kernels_checked;

#endif
