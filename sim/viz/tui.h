/* tui: the full-screen terminal viewer (ncurses) an instructor drives in front of a room.
 * It only draws frames (frame.c) and moves between them on keys (where each leads: nav.c, and
 * for the presenter's frames moments.c): n/space/right next, p/left previous, c/C next/previous
 * collective, k/K next/previous compute, f/b/o the start of the step's forward/backward/optimizer,
 * </> the grid's units, g go to event, d the same step under DDP beside the run at the same point
 * (compare.c), r play/pause,
 * +/- speed, e every event / presenter's frames, h help, q quit. The grid follows the current
 * event's unit. Works at 80x24, over ssh and in tmux, and without colour (NO_COLOR); panels that do
 * not fit give way in a fixed order, the grid's rank rows last (tui.c, Layout). */
#ifndef FSDP_TUI_H
#define FSDP_TUI_H

#include "sim/viz/frame.h"

/* The same step under DDP, for the side-by-side view (key d) and the memory bars' marks. load
 * runs it the first time d is pressed (it can take a while, or fail: too big to simulate, a
 * replayed trace); load_marks (NULL: no marks) runs it accounting only (every event and byte,
 * nothing computed or held: quick at any size) when the viewer opens, so that each GPU's bar
 * marks what DDP holds on that GPU at the same point (compare.c). Both fill a trace and plan
 * that stay owned by the caller. */
typedef struct TuiCompare {
    int (*load)(void *user, const Trace **t, const Plan **p, Err *err);
    int (*load_marks)(void *user, const Trace **t, const Plan **p, Err *err);
    void *user;
} TuiCompare;

/* Runs until q. Fails (without touching the screen) when stdout is not a terminal, and with
 * a line saying how big it must be when the terminal is too small. ddp may be NULL. It steps
 * by the presenter's frames (moments.h: one per collective or compute across all GPUs), or
 * with by_event event by event; key e switches. */
int tui_run(const Trace *t, const Plan *p, const TuiCompare *ddp, int by_event, Err *err);

#endif
