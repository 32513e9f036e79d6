/* Lesson 10: prefetch and overlap. How much of a step does a GPU spend waiting for
 * communication, and how much of the communication hides behind compute?
 * The reference solution: ./fsdp lessons check 10 --file lessons/solutions/10-prefetch-overlap.c */
#include "exercise.h"

/* Seconds `stream` is busy: the total length of its spans. */
double stream_busy(const Span *spans, int n, int stream) {
    double busy = 0;
    for (int i = 0; i < n; i++)
        if (spans[i].stream == stream) busy += spans[i].end - spans[i].start;
    return busy;
}

/* Seconds from the first span's start to the last span's end (0 without spans). */
double step_time(const Span *spans, int n) {
    if (n == 0) return 0;
    double first = spans[0].start, last = spans[0].end;
    for (int i = 1; i < n; i++) {
        if (spans[i].start < first) first = spans[i].start;
        if (spans[i].end > last) last = spans[i].end;
    }
    return last - first;
}

/* Seconds of the step in which the compute stream runs nothing: it waits, for a collective or
 * a copy it needs. Never negative. */
double compute_waiting(const Span *spans, int n) {
    /* compute spans never overlap each other, so their lengths add up to the time compute
     * runs; the rest of the step it does not */
    double waiting = step_time(spans, n) - stream_busy(spans, n, SPAN_COMPUTE);
    return waiting > 0 ? waiting : 0;
}

static double overlap(const Span *a, const Span *b) {
    double lo = a->start > b->start ? a->start : b->start;
    double hi = a->end < b->end ? a->end : b->end;
    return hi > lo ? hi - lo : 0;
}

/* Seconds in which a collective runs while the compute stream runs nothing: communication
 * that no compute hides. */
double exposed_comm(const Span *spans, int n) {
    double exposed = 0;
    for (int i = 0; i < n; i++) {
        if (spans[i].stream != SPAN_COMM) continue;
        /* a collective's length, less the parts some compute span covers: compute spans do not
         * overlap each other, so no part is taken away twice */
        double shown = spans[i].end - spans[i].start;
        for (int j = 0; j < n; j++)
            if (spans[j].stream == SPAN_COMPUTE) shown -= overlap(&spans[i], &spans[j]);
        exposed += shown;
    }
    return exposed;
}
