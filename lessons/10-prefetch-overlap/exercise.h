/* Lesson 10's functions: exercise.c defines them, check.c calls them. Do not edit. */
#ifndef LESSON_10_EXERCISE_H
#define LESSON_10_EXERCISE_H

/* The streams of one GPU, numbered as the engine numbers them (engine/device.h's StreamId). */
enum { SPAN_COMPUTE = 0, SPAN_COMM = 1, SPAN_COPY = 2 };

/* One piece of work on one GPU's timeline: a kernel, a collective or a host copy, running on
 * `stream` from `start` to `end` (seconds). Spans on one stream never overlap each other: a
 * stream runs one thing at a time. Arrays of spans are sorted by start. */
typedef struct Span {
    double start, end;
    int stream;
} Span;

double stream_busy(const Span *spans, int n, int stream);
double step_time(const Span *spans, int n);
double compute_waiting(const Span *spans, int n);
double exposed_comm(const Span *spans, int n);

#endif
