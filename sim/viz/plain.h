/* plain: a frame as text, for a terminal without the full-screen viewer, for tests (golden
 * files) and for pasting into slides. Draws only what the Frame says. */
#ifndef FSDP_PLAIN_H
#define FSDP_PLAIN_H

#include <stdio.h>

#include "sim/viz/frame.h"

void plain_render(FILE *out, const Frame *f, const Plan *p);

/* What rank r holds of unit u, as a grid cell: its shard once allocated, "+all" while the unit
 * is gathered, while its full gradients exist the rank's own values of them ("+∂all" without
 * values), "packed" before the values while they wait in a reduction's send buffer, each in the
 * richest form that *width (the frame's plain_cell_width; 0: not found yet, then found where a
 * cell needs it, so that a grid finds it once and only if it needs it) holds.
 * Shared with the terminal viewer and the page; their buffers hold 200 bytes, enough for the
 * toy's. */
void plain_cell_text(const Frame *f, const Plan *p, int r, int u, size_t *width, char *buf,
                     size_t n);
/* The widest such cell can get in this trace, so columns stay put between frames. */
size_t plain_cell_width(const Frame *f, const Plan *p);

/* What GPU r holds now and its peak so far, then what offload keeps off it: "232 B (peak 312 B)",
 * "184 B (peak 264 B) + host 48 B". */
void plain_memory_text(const Frame *f, int r, char *buf, size_t n);

/* What offload keeps off GPU r now, as it follows the GPU's figures: " + host 48 B + NVMe 96 B",
 * or "" where it keeps nothing there. */
void plain_off_gpu_text(const Frame *f, int r, char *buf, size_t n);
/* The heading of the timeline: "timeline of step 1 (74.0 us modelled)". */
void plain_timeline_title(const Frame *f, char *buf, size_t n);

/* Where the step's phases run, over the timeline's columns: each phase from a '|' with its
 * name ("|forward-----|backward------|optimizer"; "fwd"/"bwd"/"opt", or its letter, where the
 * name does not fit), blank before the first. With cursor >= 0, a 'v' in that column, which
 * the names keep clear of (the viewer's row above the streams). */
void plain_timeline_phases(const Frame *f, int cursor, char *buf, size_t n);

/* The time axis under the timeline's columns: a few round ticks from the step's start, each
 * number starting in its column ("0         20        40        60"), in plain_timeline_unit;
 * at most timeline_cols columns, without trailing blanks. */
void plain_timeline_axis(const Frame *f, char *buf, size_t n);
/* The axis' unit: "us", "ms" or "s", by the step's span. */
const char *plain_timeline_unit(const Frame *f);

#endif
