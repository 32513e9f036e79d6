/* curves: a run's learning curves as one standalone SVG (a run directory's curves.svg):
 * training and evaluation loss against steps in one panel, evaluation accuracy in a second,
 * drawn in memory.svg's style. Pure: draws the series it is given into the FILE given. */
#ifndef FSDP_CURVES_H
#define FSDP_CURVES_H

#include <stddef.h>
#include <stdio.h>

#include "base/err.h"

/* One line of a panel: a value after each of some steps, in the order of the steps. */
typedef struct CurveSeries {
    const char *label;    /* the legend's ("training loss"), followed there by the last value */
    const char *colour;   /* "#4e79a7" */
    const long *steps;    /* x: the steps done when the value was had */
    const double *values; /* y; a value that is not finite is left out */
    size_t n;
    int dots; /* a dot at each point (evaluations: a few points, each one a measurement) */
} CurveSeries;

typedef struct CurvesSvg {
    const char *title; /* the heading (escaped for XML) */
    long last_step;    /* x runs from step 0 to this (the run's steps: redrawn, the axis stays) */
    const CurveSeries *loss;
    int nloss;
    /* values in [0, 1], drawn as percentages; none (0): no accuracy panel */
    const CurveSeries *accuracy;
    int naccuracy;
} CurvesSvg;

/* Most points a line is drawn with: a series of more steps than the plot has pixels is drawn
 * as the mean of each pixel column's values. */
#define CURVES_PLOT_WIDTH 840

/* A standalone SVG (no scripts, fonts or links): a loss panel (y from 0) and, when there is
 * accuracy, an accuracy panel (y in %), both with x the steps from 0 to last_step, each
 * series a polyline in its colour with its legend entry above the panel. */
int curves_svg_write(const CurvesSvg *c, FILE *f, Err *err);

#endif
