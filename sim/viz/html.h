/* html: a whole trace as one self-contained HTML page (nothing loaded from elsewhere), for
 * slides and for people without a terminal build: every event's frame as compact data, and a
 * small script that draws one frame and moves between them on the viewer's keys. */
#ifndef FSDP_HTML_H
#define FSDP_HTML_H

#include <stdio.h>

#include "engine/plan.h"
#include "engine/trace.h"

/* Writes the page of every event of t (drawn with frame_at, as plain.c draws one) to out, headed
 * by `title` (plain text; escaped here). Fails with frame_at's message on events the plan does
 * not have, or out of memory; a failed write shows in ferror(out), for the caller to report. */
int html_write(FILE *out, const Trace *t, const Plan *p, const char *title, Err *err);

#endif
