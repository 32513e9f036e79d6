/* plain: a frame as text, for a terminal without the full-screen viewer, for tests (golden
 * files) and for pasting into slides. Draws only what the Frame says. */
#ifndef FSDP_PLAIN_H
#define FSDP_PLAIN_H

#include <stdio.h>

#include "sim/viz/frame.h"

void plain_render(FILE *out, const Frame *f, const Plan *p);

/* What rank r holds of unit u, as a grid cell: its shard, "+all" while the unit is gathered,
 * "+∂all" while its full gradients exist. Shared with the terminal viewer. */
void plain_cell_text(const Frame *f, const Plan *p, int r, int u, char *buf, size_t n);
/* The widest such cell can get in this trace, so columns stay put between frames. */
size_t plain_cell_width(const Frame *f, const Plan *p);

#endif
