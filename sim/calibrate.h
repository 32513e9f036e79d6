/* calibrate: a profile's achieved efficiencies fitted to measured steps (`fsdp plan --calibrate`):
 * each measured job planned again under the profile, each efficiency's share of every kind of
 * work found by planning with that efficiency halved, then the multipliers that bring the
 * modelled seconds of each kind nearest the measured ones (least squares of the ratios). */
#ifndef FSDP_CALIBRATE_H
#define FSDP_CALIBRATE_H

#include "sim/planner.h"

/* What a fit can move: each a multiplier on the seconds it accounts for. */
typedef enum {
    FIT_GEMM,   /* Profile.gemm_eff */
    FIT_ATTN,   /* attn_eff */
    FIT_MEMORY, /* mem_eff */
    FIT_LAUNCH, /* launch_overhead */
    FIT_BUS,    /* bus_eff */
    FIT_COUNT
} FitTerm;

const char *fit_term_name(FitTerm t); /* "gemm_eff", ... */

/* One measured step: the job that ran it (model, plan, config) and the seconds of each kind of
 * work its trace holds for rank 0's last training step. */
typedef struct CalibrateJob {
    const ModelDesc *model;
    const Plan *plan;
    FsdpConfig cfg;
    StepTimes measured;
} CalibrateJob;

/* What a fit found: the fitted profile (base's with each efficiency moved; a term no job's work
 * depends on keeps base's) and, per job and kind of work, the seconds measured and modelled
 * before and after. Kinds neither measured nor modelled are 0 in all three. */
enum { CALIBRATE_MAX_JOBS = 8 };
typedef struct CalibrateResult {
    Profile fitted;
    int moved[FIT_COUNT]; /* the term was fitted (some work depends on it) */
    double measured[CALIBRATE_MAX_JOBS][EV_KIND_COUNT];
    double before[CALIBRATE_MAX_JOBS][EV_KIND_COUNT];
    double after[CALIBRATE_MAX_JOBS][EV_KIND_COUNT];
} CalibrateResult;

/* Fits base to the jobs (1 to CALIBRATE_MAX_JOBS). Fails as the planner does. */
int calibrate_fit(const CalibrateJob *jobs, int njobs, const Profile *base, CalibrateResult *out,
                  Err *err);

/* The kinds a fit compares: the computes and the collectives (not allocations, copies, NVMe). */
int calibrate_kind_fitted(int kind);

#endif
