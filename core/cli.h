/* cli: the command line of `fsdp train`. Parses flags into a TrainArgs, checking every value
 * against what is allowed, and writes the help text. A bad flag is one line naming the flag
 * and what it accepts (the caller exits 2); nothing is opened or written while parsing. */
#ifndef FSDP_CLI_H
#define FSDP_CLI_H

#include <stdio.h>

#include "fsdp.h"

#define CLI_MAX_RANKS 1024

typedef struct TrainArgs {
    FsdpConfig fsdp;
    char model[32];
    char profile[32];
    int ranks;
    long steps;
    int print_every; /* 0: about ten lines per run */
    int print_plan, memory, json;
    const char *dump_params; /* NULL: none */
    const char *trace_out;
} TrainArgs;

void train_args_defaults(TrainArgs *a);
/* argv[0] is the first flag (after "train"). Returns 0, 1 for --help, or ERR_USAGE. */
int train_args_parse(TrainArgs *a, int argc, char **argv, Err *err);
void train_args_help(FILE *f);

#endif
