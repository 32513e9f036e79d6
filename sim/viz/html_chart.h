/* html_chart: the page's picture of one training step over time (sim/viz/html.c): for each GPU
 * its compute and comm streams as lanes and its memory by category stacked below them, in
 * memory.svg's colours, all on the step's time axis, as an inline SVG over which the page's
 * script moves a cursor to the current event. Reads a MemoryTimeline and the trace; writes
 * only to the FILE given. Its size is bounded by its columns, not by the trace's events. */
#ifndef FSDP_HTML_CHART_H
#define FSDP_HTML_CHART_H

#include <stdio.h>

#include "engine/trace.h"
#include "sim/viz/memory_timeline.h"

/* Writes step mt->step of t as <svg id="chart{id}" class="chart" ...>, the cursor a line of
 * class "now" at the step's start; ddp_bytes, what a DDP rank keeps at rest, is drawn dashed
 * (0: not drawn). Fails only out of memory. */
int html_chart_write(FILE *out, const MemoryTimeline *mt, const Trace *t, size_t ddp_bytes, int id,
                     Err *err);

/* Where time `t` (seconds, the trace's clock) falls on the chart's x axis, clamped to the step:
 * what the page sets the cursor's x to. */
double html_chart_x(const MemoryTimeline *mt, double t);

#endif
