/* Lesson 10: prefetch and overlap. How much of a step does a GPU spend waiting for
 * communication, and how much of the communication hides behind compute? */
#include "exercise.h"

/* Read lessons/10-prefetch-overlap/README.md, fill in the four TODOs, then run
 *   ./fsdp lessons check 10
 * Helpers you add should be `static`. */

/* Seconds `stream` is busy: the total length of its spans. */
double stream_busy(const Span *spans, int n, int stream) {
    (void)spans, (void)n, (void)stream; /* TODO: delete this line when you use them */
    return -1;                          /* TODO */
}

/* Seconds from the first span's start to the last span's end (0 without spans). */
double step_time(const Span *spans, int n) {
    (void)spans, (void)n; /* TODO: delete this line when you use them */
    return -1;            /* TODO */
}

/* Seconds of the step in which the compute stream runs nothing: it waits, for a collective or
 * a copy it needs. Never negative. */
double compute_waiting(const Span *spans, int n) {
    (void)spans, (void)n; /* TODO: delete this line when you use them */
    return -1;            /* TODO */
}

/* Seconds in which a collective runs while the compute stream runs nothing: communication
 * that no compute hides. */
double exposed_comm(const Span *spans, int n) {
    (void)spans, (void)n; /* TODO: delete this line when you use them */
    return -1;            /* TODO */
}
