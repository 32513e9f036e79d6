/* html: a whole trace as one self-contained HTML page (nothing loaded from elsewhere), for
 * slides and for people without a terminal build: every event's frame and every presenter's
 * frame (moments.h) as compact data, the same step under DDP at the same point, each step's
 * streams and memory over time as an SVG, and a small script that draws one frame and moves
 * between them on the viewer's keys. */
#ifndef FSDP_HTML_H
#define FSDP_HTML_H

#include <stdio.h>

#include "engine/plan.h"
#include "engine/trace.h"

typedef struct HtmlPage {
    const char *title; /* plain text; escaped here */
    /* The same steps under DDP (an accounting-only run holds the same bytes), shown beside the
     * run's memory at the same point (compare.h); NULL: no such side, and `no_ddp` says why
     * in a sentence the page shows ("this run is DDP"). */
    const Trace *ddp;
    const Plan *ddp_plan;
    const char *no_ddp;
} HtmlPage;

/* Writes the page of t (drawn with frame_at and moments_frame, as plain.c draws them) to out.
 * Fails with frame_at's message on events the plan does not have, or out of memory; a failed
 * write shows in ferror(out), for the caller to report. */
int html_write(FILE *out, const Trace *t, const Plan *p, const HtmlPage *page, Err *err);

#endif
