/* memory_timeline: each rank's memory over one training step, by category, like PyTorch's
 * memory timeline. A model built by replaying a trace's allocs and frees, and two renderers:
 * a standalone SVG (stacked areas, the DDP level, the peak) and a compact text timeline for
 * the terminal. Pure functions of the trace; the renderers only write to the FILE given. */
#ifndef FSDP_MEMORY_TIMELINE_H
#define FSDP_MEMORY_TIMELINE_H

#include <stddef.h>
#include <stdio.h>

#include "engine/device.h"
#include "engine/trace.h"

/* A rank's bytes of every category from `time` until the next sample (or the step's end). */
typedef struct MemorySample {
    double time; /* seconds, the trace's clock */
    size_t bytes[MEM_CATEGORY_COUNT];
} MemorySample;

/* The GPU's bytes of categories [0, upto) of s: the stack a chart draws below category `upto`.
 * What offload keeps off the GPU (mem_category_off_gpu: host memory, NVMe files) is in no GPU's
 * stack or total; the text timeline gives it rows of its own after the total. */
size_t memory_sample_stacked(const MemorySample *s, int upto);

typedef struct MemoryRank {
    /* samples[0] is the state the rank enters the step with, at the step's start; then one
     * sample after each of its allocs and frees in the step, in order */
    MemorySample *samples;
    size_t n, cap;
    size_t peak;                        /* the largest GPU total in the step */
    double peak_time;                   /* when it was first reached */
    size_t at_peak[MEM_CATEGORY_COUNT]; /* the breakdown then */
    size_t max[MEM_CATEGORY_COUNT];     /* each category's largest bytes in the step */
} MemoryRank;

typedef struct MemoryTimeline {
    int step;          /* 0-based training step */
    double start, end; /* the step's span on the trace's clock, seconds */
    int nranks;
    MemoryRank *ranks; /* [nranks] */
    const char *clock; /* the trace's: "measured" or "modelled" */
} MemoryTimeline;

/* Replays every alloc and free of t from the beginning and keeps, per rank, the samples of
 * training step `step` (0-based; -1: the last step that reached its optimizer, else the last
 * with any work). An event belongs to the step when its .step is `step` and its phase is not
 * PHASE_NONE; events tagged with an earlier step, or with this one and PHASE_NONE (setup, data
 * loading), make up the state a rank enters the step with. The step's span is that of all its
 * events on all ranks. Fails on a trace without that step, or whose memory events do not
 * replay (no category, a free of more than the category holds). mt is freed by the caller
 * with memory_timeline_free, also on failure. */
int memory_timeline_build(MemoryTimeline *mt, const Trace *t, int step, Err *err);
void memory_timeline_free(MemoryTimeline *mt);

/* The fixed colour of a memory category ("#4e79a7": param shard's blue) in memory.svg, which
 * every picture of memory uses, so that the same thing looks the same wherever it is shown. */
const char *memory_category_colour(MemCategory c);

/* Ranks the renderers draw; the rest are summed up as "+N more". */
#define MEMORY_TIMELINE_MAX_RANKS 16

typedef struct MemorySvgOptions {
    const char *title; /* the heading (escaped for XML); NULL: "Memory over step N" */
    size_t ddp_bytes;  /* what a DDP rank holds at rest, drawn as a dashed line; 0: none */
} MemorySvgOptions;

/* A standalone SVG (no scripts, fonts or links): one panel per rank, stacked vertically, x the
 * step's modelled time and y bytes on a scale shared by all panels; each category a stacked,
 * step-shaped area in a fixed colour, the total as an outline, the DDP level dashed and each
 * rank's peak marked and labelled. The legend names the categories that are ever non-zero. */
int memory_svg_write(const MemoryTimeline *mt, const MemorySvgOptions *o, FILE *f, Err *err);

/* The terminal's version: a header with the time span, then per rank a line with its peak, one
 * row per category on the GPU that is non-zero in the step and a "total" row, then a row for
 * each of host memory and NVMe files that offload holds. A row is `width` columns (8..1000) of
 * equal time; a column shows the most the category held in its time (any moment of it) as one
 * of ▁▂▃▄▅▆▇█ scaled to the rank's peak GPU total (the host's and NVMe's rows: to their own
 * largest; rounded up, so anything non-zero shows), or a space for nothing, then the category's
 * largest bytes in the step. UTF-8. */
int memory_text_write(const MemoryTimeline *mt, int width, FILE *f, Err *err);

#endif
