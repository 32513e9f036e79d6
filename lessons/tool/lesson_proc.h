/* lesson_proc: runs the compiler and a check as child processes with a time limit, keeping
 * what they print (stdout and stderr together), and stops them cleanly on Ctrl-C. Used only
 * by the lessons runner. */
#ifndef FSDP_LESSON_PROC_H
#define FSDP_LESSON_PROC_H

#include <stddef.h>

#include "base/err.h"

typedef struct ProcResult {
    char *output; /* NUL-terminated, at most PROC_OUTPUT_MAX bytes kept; free() it */
    size_t len;
    int exit_code; /* when it exited by itself */
    int signal;    /* when a signal ended it */
    int timed_out; /* killed after the time limit */
    int interrupted;
} ProcResult;

#define PROC_OUTPUT_MAX (4u << 20)

/* Runs argv[0] (searched in PATH) with argv, stdin from /dev/null, in a process group of its
 * own, for at most timeout_s seconds, with this process's environment plus `env` ("NAME=value"
 * strings, NULL-terminated; NULL for none). Returns 0 when it ran (whatever its exit), or an
 * error when it could not be started. */
int proc_run(char *const argv[], char *const env[], double timeout_s, ProcResult *out, Err *err);
void proc_result_free(ProcResult *r);

/* From now on Ctrl-C (SIGINT) stops the running child and makes proc_run return with
 * `interrupted` set, instead of killing this process with the child left running. */
void proc_catch_interrupt(void);
int proc_was_interrupted(void);

#endif
