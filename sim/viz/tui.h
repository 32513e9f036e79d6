/* tui: the full-screen terminal viewer (ncurses) an instructor drives in front of a room.
 * It only draws frames (frame.c) and moves between them on keys: n/space/right next,
 * p/left previous, f/b next forward/backward event, g go to event, r play/pause, +/- speed,
 * h help, q quit. Works at 80x24, over ssh and in tmux, and without colour (NO_COLOR). */
#ifndef FSDP_TUI_H
#define FSDP_TUI_H

#include "frame.h"

/* Runs until q. Fails (without touching the screen) when stdout is not a terminal, and with
 * a line saying how big it must be when the terminal is too small. */
int tui_run(const Trace *t, const Plan *p, Err *err);

#endif
