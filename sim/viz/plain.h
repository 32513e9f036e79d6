/* plain: a frame as text, for a terminal without the full-screen viewer, for tests (golden
 * files) and for pasting into slides. Draws only what the Frame says. */
#ifndef FSDP_PLAIN_H
#define FSDP_PLAIN_H

#include <stdio.h>

#include "sim/viz/frame.h"

void plain_render(FILE *out, const Frame *f, const Plan *p);

/* What rank r holds of unit u, as a grid cell: its shard, "+all" while the unit is gathered,
 * "+∂all" while its full gradients exist. Shared with the terminal viewer and the page. */
void plain_cell_text(const Frame *f, const Plan *p, int r, int u, char *buf, size_t n);
/* The widest such cell can get in this trace, so columns stay put between frames. */
size_t plain_cell_width(const Frame *f, const Plan *p);

/* What rank r holds now and its peak so far: "232 B (peak 312 B)". */
void plain_memory_text(const Frame *f, int r, char *buf, size_t n);
/* The heading of the timeline: "timeline of step 1 (74.0 us modelled)". */
void plain_timeline_title(const Frame *f, char *buf, size_t n);

#endif
