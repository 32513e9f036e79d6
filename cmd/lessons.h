/* lessons_cmd: `./fsdp lessons`, the runner of the exercises in lessons/: lists them with the
 * learner's progress, checks one against the engine (or all), prints hints, and re-checks on
 * save. Only main.c calls it. */
#ifndef FSDP_LESSONS_CMD_H
#define FSDP_LESSONS_CMD_H

/* argv holds what follows `lessons`. Returns the exit status: 0 passed (or nothing to check),
 * 1 a check failed, 2 bad usage or input (one line on stderr). */
int lessons_command(int argc, char **argv);

#endif
