/* lr_schedule: the learning rate of each optimizer step (--lr-schedule, --warmup-steps): a
 * linear warm-up, then constant, cosine, linear or step decay, each equal at every step to the
 * PyTorch scheduler it is named after. Pure arithmetic on the step's index: it touches nothing,
 * so a run resumed at step k (the step its checkpoint carries) continues the same curve. */
#ifndef FSDP_LR_SCHEDULE_H
#define FSDP_LR_SCHEDULE_H

typedef enum { LR_CONSTANT = 0, LR_COSINE, LR_LINEAR, LR_STEP } LrScheduleKind;

/* What decides the rate besides the base rate (FsdpConfig.lr) and the run's length. */
typedef struct LrSchedule {
    LrScheduleKind kind;
    long warmup_steps; /* N: the first N steps ramp linearly up to the base rate (0: none) */
    float min_lr;      /* cosine, linear: the rate the decay ends at (eta_min) */
    long step_size;    /* step: steps between two decays (StepLR's step_size) */
    double gamma;      /* step: the factor of each decay (StepLR's gamma, default 0.1) */
} LrSchedule;

/* A run's whole curve: its schedule, its base rate and its length in steps. A checkpoint keeps
 * the curve of the run that saved it, so that a resumed run can be held to the same rates. */
typedef struct LrCurve {
    LrSchedule schedule;
    float lr;
    long total_steps;
} LrCurve;

/* 1 when two curves give the same rate at every step: the same kind, base rate and warm-up, and
 * what the kind reads of the rest (cosine and linear: min_lr and the run's length; step:
 * step_size and gamma, but not the length, so a step schedule may be resumed for longer). */
int lr_curve_same(const LrCurve *a, const LrCurve *b);

/* The rate of step `step` (0-based: the step-th optimizer step of the run, counting the steps
 * before a resume) in a run of `total` steps whose base rate is `lr`. With N warm-up steps and
 * t = step - N, M = total - N after the warm-up (PyTorch: SequentialLR([LambdaLR(warm-up),
 * MAIN], milestones=[N]), scheduler.step() after each optimizer.step()):
 *
 *   step < N:  lr * (step + 1) / N                       LambdaLR(lambda s: (s + 1) / N)
 *   constant:  lr                                        (no scheduler)
 *   cosine:    min + (lr - min) * (1 + cos(pi t / M)) / 2
 *                                          CosineAnnealingLR(T_max = M, eta_min = min)
 *   linear:    lr + (min - lr) * t / M     LinearLR(start_factor = 1, end_factor = min / lr,
 *                                                   total_iters = M)
 *   step:      lr * gamma^floor(t / step_size)           StepLR(step_size, gamma)
 *
 * These are PyTorch's closed forms (_get_closed_form_lr); its recursive get_lr equals them up to
 * rounding. The last step's cosine or linear rate is one step short of min, as in PyTorch (the
 * rate reaches it only after the last optimizer step). */
double lr_schedule_rate(const LrSchedule *s, double lr, long step, long total);

/* 1 when the rate changes during a run (a schedule other than constant, or a warm-up). */
int lr_schedule_varies(const LrSchedule *s);

/* "constant", "cosine", "linear", "step"; and back (0, or -1 for another word). */
const char *lr_schedule_name(LrScheduleKind k);
int lr_schedule_parse(const char *name, LrScheduleKind *out);

#endif
