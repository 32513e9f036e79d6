/* lr_schedule: each step's learning rate, as PyTorch's schedulers give it (lr_schedule.h has the
 * formulas and which scheduler each one is). */
#include "engine/lr_schedule.h"

#include <math.h>
#include <string.h>

static const char *const kind_names[] = {"constant", "cosine", "linear", "step"};
enum { KIND_COUNT = sizeof kind_names / sizeof *kind_names };

double lr_schedule_rate(const LrSchedule *s, double lr, long step, long total) {
    long n = s->warmup_steps;
    if (step < n) return lr * (double)(step + 1) / (double)n;
    long t = step - n, m = total - n;
    double min = s->min_lr;
    switch (s->kind) {
    case LR_COSINE: /* m >= 1 whenever a step runs: the flags are checked against the run */
        return m > 0 ? min + (lr - min) * (1.0 + cos(M_PI * (double)t / (double)m)) / 2.0 : lr;
    case LR_LINEAR: /* LinearLR holds the end factor once t passes total_iters */
        return m > 0 ? lr + (min - lr) * (double)(t < m ? t : m) / (double)m : lr;
    case LR_STEP:
        return s->step_size > 0 ? lr * pow(s->gamma, (double)(t / s->step_size)) : lr;
    case LR_CONSTANT:
    default:
        return lr;
    }
}

int lr_schedule_varies(const LrSchedule *s) {
    return s->kind != LR_CONSTANT || s->warmup_steps > 0;
}

int lr_curve_same(const LrCurve *a, const LrCurve *b) {
    const LrSchedule *s = &a->schedule, *t = &b->schedule;
    if (s->kind != t->kind || a->lr != b->lr || s->warmup_steps != t->warmup_steps) return 0;
    switch (s->kind) {
    case LR_COSINE:
    case LR_LINEAR:
        return s->min_lr == t->min_lr && a->total_steps == b->total_steps;
    case LR_STEP:
        return s->step_size == t->step_size && s->gamma == t->gamma;
    case LR_CONSTANT:
    default:
        return 1;
    }
}

const char *lr_schedule_name(LrScheduleKind k) {
    return (unsigned)k < KIND_COUNT ? kind_names[k] : "?";
}

int lr_schedule_parse(const char *name, LrScheduleKind *out) {
    for (int k = 0; k < KIND_COUNT; k++)
        if (!strcmp(name, kind_names[k])) {
            *out = (LrScheduleKind)k;
            return 0;
        }
    return -1;
}
