/* fsdp_nvme: --offload nvme, ZeRO-Infinity's tier: a unit's resting state moves between the
 * rank's file and host buffers unit by unit. */
#include "engine/fsdp_internal.h"

/* ---------------------------------------------------------------- the NVMe tier */

/* ZeRO-Infinity's tier: a unit's fp32 param rows and Adam's m and v rest in the rank's file.
 * A unit is loaded into host buffers (the param alone to gather it, all three for its
 * optimizer step) and dropped again; reads of the next unit start while this one computes. */

static void **nvme_buffer(UnitState *us, int slot) {
    return slot == 0 ? &us->param : slot == 1 ? (void **)&us->m : (void **)&us->v;
}

static size_t nvme_numel(const UnitState *us, int slot) {
    return slot == 0 ? us->param_n : us->optim_n;
}

static void nvme_slots(int what, int *first, int *last) {
    *first = what & NVME_PARAM ? 0 : 1;
    *last = what & NVME_STATE ? 2 : 0;
}

/* Host buffers for `what` of unit u, and reads into them (not waited for). */
int nvme_start_read(Engine *e, int u, int what, Err *err) {
    UnitState *us = &e->units[u];
    int first, last, rc = 0;
    nvme_slots(what, &first, &last);
    double bytes = 0;
    for (int s = first; s <= last && !rc; s++) {
        void **buf = nvme_buffer(us, s);
        size_t n = nvme_numel(us, s) * sizeof(float);
        if (*buf || !n) continue;
        if ((rc = dev_alloc(e, (void **)buf, n, MEM_HOST_OFFLOAD, u, err))) break;
        if (e->tier) { /* an accounting-only run has no file and no data to read */
            rc = e->env.tier->read(e->tier, us->nvme_at[s], *buf, n, &us->nvme_req[s], err);
            us->nvme_reading |= 1 << s;
        }
        bytes += (double)n;
    }
    if (bytes > 0)
        run_work(e, STREAM_COPY, (Work){.kind = WORK_NVME_READ, .unit = u, .bytes = bytes});
    return rc;
}

/* Unit u's `what` in host memory, read now or waited for if a read is already under way. */
int nvme_load(Engine *e, int u, int what, Err *err) {
    UnitState *us = &e->units[u];
    int rc = nvme_start_read(e, u, what, err);
    for (int s = 0; s < 3 && !rc; s++)
        if (us->nvme_reading & (1 << s)) {
            rc = e->env.tier->wait(e->tier, &us->nvme_req[s], err);
            us->nvme_reading &= ~(1 << s);
        }
    return rc;
}

/* Waits for unit u's writes and frees its buffers (a read still in flight is waited first). */
int nvme_drop(Engine *e, int u, Err *err) {
    UnitState *us = &e->units[u];
    int rc = 0;
    for (int s = 0; s < 3; s++) {
        int bit = 1 << s;
        if ((us->nvme_reading | us->nvme_writing) & bit) {
            int w = e->env.tier->wait(e->tier, &us->nvme_req[s], err);
            if (!rc) rc = w;
        }
        us->nvme_reading &= ~bit;
        us->nvme_writing &= ~bit;
        void **buf = nvme_buffer(us, s);
        dev_free(e, *buf, u);
        *buf = NULL;
    }
    return rc;
}

/* Starts writing unit u's `what` back; nvme_drop waits for it. */
int nvme_start_write(Engine *e, int u, int what, Err *err) {
    UnitState *us = &e->units[u];
    int first, last, rc = 0;
    nvme_slots(what, &first, &last);
    double bytes = 0;
    for (int s = first; s <= last && !rc; s++) {
        float *buf = *nvme_buffer(us, s);
        size_t n = nvme_numel(us, s) * sizeof(float);
        if (!buf || !n) continue;
        if (e->tier) {
            rc = e->env.tier->write(e->tier, us->nvme_at[s], buf, n, &us->nvme_req[s], err);
            us->nvme_writing |= 1 << s;
        }
        bytes += (double)n;
    }
    if (bytes > 0)
        run_work(e, STREAM_COPY, (Work){.kind = WORK_NVME_WRITE, .unit = u, .bytes = bytes});
    return rc;
}

/* For code that reads or changes a unit's resting state outside the schedule (checkpoints,
 * initial values, reports): load it, and afterwards write it back if `dirty` and drop it. */
int resident_begin(Engine *e, int u, Err *err) {
    return nvme_on(e) ? nvme_load(e, u, NVME_PARAM | NVME_STATE, err) : 0;
}

int resident_end(Engine *e, int u, int dirty, Err *err) {
    if (!nvme_on(e)) return 0;
    int rc = dirty ? nvme_start_write(e, u, NVME_PARAM | NVME_STATE, err) : 0;
    int d = nvme_drop(e, u, err);
    return rc ? rc : d;
}

/* The byte ranges of every unit's param, m and v in the file, each 4 KiB aligned so the
 * transfers can go straight to the disk; opens the file; charges each unit's share. */
int nvme_open(Engine *e, Err *err) {
    size_t at = 0;
    for (int u = 0; u < e->plan->nunits; u++)
        for (int s = 0; s < 3; s++) {
            e->units[u].nvme_at[s] = at;
            size_t n = nvme_numel(&e->units[u], s) * sizeof(float);
            at += (n + TIER_ALIGN - 1) / TIER_ALIGN * TIER_ALIGN;
        }
    int rc = 0;
    if (!e->dev->accounting_only && !e->env.tier)
        rc = err_set(err, ERR_INTERNAL, "--offload nvme: this rank was given no storage tier");
    else if (!e->dev->accounting_only)
        rc = e->env.tier->open(&e->tier, e->cfg.nvme_dir, e->env.rank, at ? at : 1, err);
    for (int u = 0; !rc && u < e->plan->nunits; u++) {
        UnitState *us = &e->units[u];
        rc = dev_alloc(e, &us->nvme_bytes, (us->param_n + 2 * us->optim_n) * sizeof(float),
                       MEM_NVME, u, err);
    }
    return rc;
}
