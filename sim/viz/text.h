/* text: how the visualizer and the reports write things down: byte counts, numbers with
 * commas, a unit's shard as symbols or values, the terminal width of UTF-8 text. */
#ifndef FSDP_TEXT_H
#define FSDP_TEXT_H

#include <stddef.h>

#include "engine/plan.h"
#include "engine/trace.h"

/* Human bytes: "36 B", "1.50 KiB", "12.3 GiB". */
const char *format_bytes(size_t b, char *buf, size_t n);
/* v with thousands separators ("779,298,826") into buf; returns buf. */
const char *with_commas(size_t v, char *buf, size_t n);
/* The elements of unit u that rank `rank` of a group of `size` owns (torch.chunk rows), as
 * the model's symbols each after `prefix` ("a₀ a₁", or "∂c₂" with prefix "∂"); size 1 gives
 * all of them. Returns 0 (and "") when the unit's parameters have no symbols. */
int text_unit_symbols(const Plan *p, int u, int size, int rank, const char *prefix, char *buf,
                      size_t n);
/* The same with each element's value from `values` (all parameters in model order, NULL for
 * none): "a₀=+0.887 a₁=+0.308". */
int text_unit_values(const Plan *p, int u, int size, int rank, const char *prefix,
                     const float *values, char *buf, size_t n);
/* The line that heads a frame, as every renderer shows it: "event 55 of 339 | step 1 | forward |
 * GPU 0 | all_gather La" for event `index` (0-based) of `count`; the unit's name only when e
 * names one of p's. plain.c draws it between "-- " and " --". */
void text_event_header(const Plan *p, const TraceEvent *e, size_t index, size_t count, char *buf,
                       size_t n);
/* Columns a UTF-8 string takes on a terminal (one per code point). */
size_t text_display_width(const char *s);
/* sym followed by index in UTF-8 subscript digits ("a" 1 -> "a₁"), like the workshop's slides. */
void text_subscript(char *buf, size_t n, const char *sym, size_t index);
/* Whether every parameter of unit u has a symbol (the toy's do; a ViT's do not). */
int text_unit_is_symbolic(const Plan *p, int u);

#endif
