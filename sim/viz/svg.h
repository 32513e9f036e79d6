/* svg: what the standalone SVG pictures (memory.svg, curves.svg) share: text as XML character
 * data, and round numbers for their axes' ticks. Writes only to the FILE given. */
#ifndef FSDP_SVG_H
#define FSDP_SVG_H

#include <stdio.h>

/* Text as XML character data: markup characters escaped, bytes that are not UTF-8 replaced by
 * U+FFFD and control characters (which XML 1.0 forbids) by spaces, so any title renders. */
void svg_text(FILE *f, const char *text);

/* A picture's start: the XML declaration, the <svg> element of width x height (its viewBox the
 * same, sans-serif text) and a white background. The caller closes it with "</svg>". */
void svg_begin(FILE *f, int width, int height);

/* Round numbers for axis ticks: 1, 2 or 5 times a power of ten, at least x (1 for x <= 0). */
double svg_nice_step(double x);

/* The decimals a tick label needs at this step (0 for 1 and above; at most 6). */
int svg_decimals_for(double step);

#endif
