/* calibrate: a profile's achieved efficiencies fitted to measured steps, from the planner's own
 * seconds under the profile and under each efficiency halved. */
#include "sim/calibrate.h"

#include <math.h>
#include <string.h>

static const char *const term_names[FIT_COUNT] = {"gemm_eff", "attn_eff", "mem_eff",
                                                  "launch_overhead", "bus_eff"};

const char *fit_term_name(FitTerm t) {
    return t >= 0 && t < FIT_COUNT ? term_names[t] : "?";
}

/* Not the all-reduces: a run's count of them follows its logging and clipping (a loss to print,
 * a norm to clip by), which a planned step does not repeat. */
int calibrate_kind_fitted(int kind) {
    switch (kind) {
    case EV_FORWARD:
    case EV_BACKWARD:
    case EV_RECOMPUTE:
    case EV_OPTIMIZER:
    case EV_PACK:
    case EV_ALL_GATHER:
    case EV_REDUCE_SCATTER:
        return 1;
    default:
        return 0;
    }
}

/* p with the seconds term t accounts for times x: an efficiency divided by x, the launch's cost
 * multiplied. */
static Profile scaled(const Profile *p, FitTerm t, double x) {
    Profile q = *p;
    switch (t) {
    case FIT_GEMM:
        q.gemm_eff = p->gemm_eff / x;
        break;
    case FIT_ATTN:
        q.attn_eff = p->attn_eff / x;
        break;
    case FIT_MEMORY:
        q.mem_eff = p->mem_eff / x;
        break;
    case FIT_LAUNCH:
        q.launch_overhead = p->launch_overhead * x;
        break;
    default:
        q.bus_eff = p->bus_eff / x;
    }
    return q;
}

/* The seconds of each kind of work in job j's last planned step under p. */
static int modelled(const CalibrateJob *j, const Profile *p, double out[EV_KIND_COUNT], Err *err) {
    PlannerJob pj = {.model = j->model, .plan = j->plan, .cfg = j->cfg, .profile = p, .steps = 2};
    PlannerResult r;
    int rc = planner_run(&pj, &r, err);
    if (rc) return rc;
    memcpy(out, r.kinds.busy, sizeof r.kinds.busy);
    planner_result_free(&r);
    return 0;
}

/* One compared figure: measured seconds m, and the model's as fixed + sum of x[t] * part[t]. */
typedef struct Row {
    double m, fixed, part[FIT_COUNT];
} Row;

/* The multipliers nearest the measured figures, each at least lo[t] (an efficiency stays at most
 * 1), each row's error taken as a share of its measured seconds (so a short kind of work counts
 * as much as a long one): least squares by coordinate descent, each step the exact minimum
 * along one multiplier. */
static void fit(const Row *rows, int n, const int *moved, const double *lo, double x[FIT_COUNT]) {
    for (int t = 0; t < FIT_COUNT; t++) x[t] = 1.0;
    for (int sweep = 0; sweep < 500; sweep++)
        for (int t = 0; t < FIT_COUNT; t++) {
            if (!moved[t]) continue;
            double num = 0, den = 0;
            for (int i = 0; i < n; i++) {
                const Row *r = &rows[i];
                double w = 1.0 / (r->m * r->m), rest = r->fixed;
                for (int u = 0; u < FIT_COUNT; u++)
                    if (u != t) rest += x[u] * r->part[u];
                num += w * (r->m - rest) * r->part[t];
                den += w * r->part[t] * r->part[t];
            }
            double best = den > 0 ? num / den : 1.0;
            x[t] = best < lo[t] ? lo[t] : best > 100 ? 100 : best;
        }
}

int calibrate_fit(const CalibrateJob *jobs, int njobs, const Profile *base, CalibrateResult *out,
                  Err *err) {
    if (njobs < 1 || njobs > CALIBRATE_MAX_JOBS)
        return err_set(err, ERR_USAGE, "calibrate takes 1 to %d traces (got %d)",
                       CALIBRATE_MAX_JOBS, njobs);
    memset(out, 0, sizeof *out);
    Row rows[CALIBRATE_MAX_JOBS * EV_KIND_COUNT];
    int n = 0;
    for (int j = 0; j < njobs; j++) {
        double with[FIT_COUNT][EV_KIND_COUNT];
        int rc = modelled(&jobs[j], base, out->before[j], err);
        for (int t = 0; !rc && t < FIT_COUNT; t++) {
            Profile doubled = scaled(base, (FitTerm)t, 2.0);
            rc = modelled(&jobs[j], &doubled, with[t], err);
        }
        if (rc) return rc;
        for (int k = 0; k < EV_KIND_COUNT; k++) {
            out->measured[j][k] = jobs[j].measured.busy[k];
            if (!calibrate_kind_fitted(k) || out->measured[j][k] <= 0 || out->before[j][k] <= 0)
                continue;
            Row *r = &rows[n++];
            r->m = out->measured[j][k];
            r->fixed = out->before[j][k];
            for (int t = 0; t < FIT_COUNT; t++) {
                double part = with[t][k] - out->before[j][k]; /* the term's own seconds */
                r->part[t] = part > 0 ? part : 0;
                r->fixed -= r->part[t];
            }
            if (r->fixed < 0) r->fixed = 0;
        }
    }
    /* a term moves only where some compared work spends a share of its time on it */
    for (int t = 0; t < FIT_COUNT; t++)
        for (int i = 0; i < n; i++) out->moved[t] |= rows[i].part[t] > 1e-3 * rows[i].m;
    /* seconds x t of an efficiency e are those of e / x: no lower than e's, or it passes 1 */
    double x[FIT_COUNT],
        lo[FIT_COUNT] = {base->gemm_eff, base->attn_eff, base->mem_eff, 0.01, base->bus_eff};
    fit(rows, n, out->moved, lo, x);
    out->fitted = *base;
    for (int t = 0; t < FIT_COUNT; t++)
        if (out->moved[t]) out->fitted = scaled(&out->fitted, (FitTerm)t, x[t]);
    for (int j = 0; j < njobs; j++) {
        int rc = modelled(&jobs[j], &out->fitted, out->after[j], err);
        if (rc) return rc;
    }
    return 0;
}
