/* plan_search (command): what `fsdp plan --search` prints: the ranked configurations as a table
 * and, for each, the flags that run it (./fsdp train) or plan it alone (./fsdp plan), or one
 * JSON object. The search itself is sim/plan_search.c. */
#ifndef FSDP_CMD_PLAN_SEARCH_H
#define FSDP_CMD_PLAN_SEARCH_H

#include <stdio.h>

#include "sim/plan_search.h"

typedef struct PlanSearchCommand {
    PlanSearchJob job;
    /* ./fsdp train builds this very model with these flags ("--model vit-tiny"); NULL where it
     * cannot (a transformer of plan's vocabulary, more GPUs than it runs): each row is then
     * given as the ./fsdp plan that plans it alone */
    const char *train_model;
    const char *profile; /* --profile as given; NULL: the default */
    int argc;            /* plan's own arguments, from which a row's plan flags are made */
    char **argv;
    int json;
} PlanSearchCommand;

/* Which knobs the flags given fix, for the search to leave alone (PlanSearchJob.fixed). */
unsigned plan_search_fixed(int argc, char **argv);

/* The ranked rows, and the flags of each; or the JSON object. Returns 0, or ERR_USAGE with its
 * line where nothing fits (after printing what was searched). */
int plan_search_print(FILE *f, const PlanSearchCommand *c, const PlanSearchResult *r, Err *err);

#endif
