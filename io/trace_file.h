/* trace_file: a trace on disk, one JSON file for two readers. Perfetto and chrome://tracing
 * read its "traceEvents" (Chrome Trace Event format); `fsdp viz --trace` replays its
 * "fsdpTrace" object exactly: the format version, the train flags that made the run (the
 * replayer rebuilds the model and plan from them), the unit names, whether the run computed
 * anything ("computed": false for an accounting-only run; absent: it did), every event's fields
 * and, when recorded, the parameter and gradient values of each step and beside them each
 * rank's own gradients before they were averaged ("local_grads", optional: files written before
 * it existed load without it). */
#ifndef FSDP_TRACE_FILE_H
#define FSDP_TRACE_FILE_H

#include <stdio.h>

#include "engine/trace.h"

/* Bumped whenever a field's meaning changes: a replayer refuses another version. */
#define TRACE_FILE_VERSION 2 /* 2: events have "flags" (EVENT_PREFETCH) */

/* The largest trace file a replay reads (a vit-workshop step at 8 ranks is tens of MB), and
 * the largest step or micro-step an event may name (train's --steps bound). */
#define TRACE_FILE_MAX_BYTES (1ull << 30)
#define TRACE_FILE_MAX_STEP 1000000000

/* What a trace file says about the run besides its events. */
typedef struct TraceMeta {
    int nargs;
    char **args; /* the train flags, without the command and without --trace-out */
    int nunits;
    char **units; /* unit names in plan order */
} TraceMeta;

/* Writes t as JSON: when meta is not NULL, the "fsdpTrace" object, then Chrome's complete
 * events ("ph":"X", pid = rank, tid = stream, times in microseconds) for compute and comm spans
 * and, at each alloc and free, a "memory" counter event of its rank whose args are the bytes of
 * every memory category (mem_category_name) after it, adding up to the event's mem_total.
 * Refuses non-finite times and memory events that do not replay (no category, or a free of
 * more than the category holds) before writing anything. */
int trace_file_write(const Trace *t, const TraceMeta *meta, FILE *f, Err *err);

/* Reads a file trace_file_write wrote into t and meta (both freed by the caller, also on
 * failure). A file that is missing, not JSON, truncated, not an fsdp trace, of another
 * version or with an event out of range fails with one line naming the file and the fault. */
int trace_file_read(const char *path, Trace *t, TraceMeta *meta, Err *err);

void trace_meta_free(TraceMeta *m);

#endif
