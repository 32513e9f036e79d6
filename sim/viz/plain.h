/* plain: a frame as text, for a terminal without the full-screen viewer, for tests (golden
 * files) and for pasting into slides. Draws only what the Frame says. */
#ifndef FSDP_PLAIN_H
#define FSDP_PLAIN_H

#include <stdio.h>

#include "frame.h"

void plain_render(FILE *out, const Frame *f, const Plan *p);

#endif
