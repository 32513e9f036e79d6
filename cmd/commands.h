/* commands: one entry point per `fsdp` command, each in its own file of cmd/; main.c's table
 * dispatches to them. argv[0] is the first word after the command's name; each returns the
 * process's exit status (0, 1 a failed run, 2 bad input with one line on stderr). */
#ifndef FSDP_COMMANDS_H
#define FSDP_COMMANDS_H

#include <stdio.h>

#include "base/err.h"

int cmd_train(int argc, char **argv);   /* cmd/train.c */
int cmd_viz(int argc, char **argv);     /* cmd/viz.c */
int cmd_ckpt(int argc, char **argv);    /* cmd/ckpt.c */
int cmd_predict(int argc, char **argv); /* cmd/predict.c */
int cmd_sample(int argc, char **argv);  /* cmd/sample.c */
int cmd_plan(int argc, char **argv);    /* cmd/plan.c */
int cmd_lessons(int argc, char **argv); /* cmd/lessons.c */
int cmd_launch(int argc, char **argv);  /* cmd/launch.c */

/* A parser's answer 1 (--help was asked): writes the help to stdout, and the command then
 * exits 0. */
int cmd_help_asked(int parsed, void (*help)(FILE *f));
/* The end of a command: stdout flushed, then 0, or cmd_fail's line and status for rc. */
int cmd_exit(int rc, const Err *err);

/* An error's one line, "fsdp: MSG" on stderr, and its exit status: 2 for ERR_USAGE, else 1. */
int cmd_fail(int code, const char *msg);

/* The entry point of a command that parses its flags into an Args, writes its help when asked and
 * else runs: CMD_PARSE_AND_RUN(cmd_sample, SampleArgs, sample_args_parse, sample_help,
 * sample_run) defines int cmd_sample(int argc, char **argv). */
#define CMD_PARSE_AND_RUN(name, Args, parse, help, run)                                            \
    int name(int argc, char **argv) {                                                              \
        Args a;                                                                                    \
        Err err = {0};                                                                             \
        int rc = parse(&a, argc, argv, &err);                                                      \
        if (cmd_help_asked(rc, help)) return 0;                                                    \
        if (!rc) rc = run(&a, &err);                                                               \
        return cmd_exit(rc, &err);                                                                 \
    }

#endif
