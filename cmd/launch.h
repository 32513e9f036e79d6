/* launch (command): `fsdp launch`'s command line, torchrun's flags, and the command itself; the
 * ranks are started and watched by runtime/launch.c. */
#ifndef FSDP_CMD_LAUNCH_H
#define FSDP_CMD_LAUNCH_H

#include <stdio.h>

#include "runtime/launch.h"

void launch_help(FILE *f);

/* argv[0] is the first word after "launch", and argv[argc] is NULL (as main's argv). Flags are
 * torchrun's, with - or _ and with or without `=`; the command starts after `--` or at the
 * first word that is not a flag. Returns 0, 1 for --help, or ERR_USAGE with one line. */
int launch_args_parse(LaunchArgs *a, int argc, char **argv, Err *err);

/* Whether execvp would find the command: asked once, so that a typo is one line and exit 127
 * (126: found but not executable) instead of one line per rank. */
int launch_command_runnable(const char *command, int *exit_status, Err *err);

#endif
