/* bench_util: what every benchmark program needs, the wall clock and a comparator for taking
 * medians. Header-only so each bench/ program stays one file to build. */
#ifndef FSDP_BENCH_UTIL_H
#define FSDP_BENCH_UTIL_H

#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#include "base/clock.h"
#include "engine/fsdp.h"

/* For qsort of doubles, ascending. */
static inline int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

/* The plan of config c at `ranks` ranks, or the program ends with one line naming `who`: a
 * benchmark's set-up cannot fail for any reason worth recovering from. */
static inline Plan bench_plan_or_exit(const char *who, const ModelDesc *m, const FsdpConfig *c,
                                      int ranks) {
    Plan p;
    Err err = {0};
    if (plan_create(&p, m, c->wrap, c->strategy, ranks, 1, &err)) {
        fprintf(stderr, "%s: %s\n", who, err.msg);
        exit(1);
    }
    return p;
}

#endif
