/* stream_check: vector clocks per stream and a shadow of every device block's recent
 * accesses, so that an access not ordered after another stream's access to the same bytes is
 * caught and named (sim/stream_check.h says what counts as ordered). */
#include "sim/stream_check.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

void stream_check_init(StreamCheck *sc, int rank) {
    memset(sc, 0, sizeof *sc);
    sc->rank = rank;
    /* each stream starts in its own first epoch, knowing nothing of the others */
    for (int s = 0; s < SC_CLOCKS; s++) sc->clock[s].c[s] = 1;
}

void stream_check_free(StreamCheck *sc) {
    for (int i = 0; i < sc->nblocks; i++) free(sc->blocks[i].rec);
    free(sc->blocks);
    sc->blocks = NULL;
    sc->nblocks = sc->capblocks = 0;
}

const char *stream_check_stream_name(int s) {
    static const char *const names[SC_CLOCKS] = {"compute", "comm", "copy", "host"};
    return s >= 0 && s < SC_CLOCKS ? names[s] : "?";
}

static void join(StreamClock *into, const StreamClock *from) {
    for (int i = 0; i < SC_CLOCKS; i++)
        if (from->c[i] > into->c[i]) into->c[i] = from->c[i];
}

void stream_check_record(StreamCheck *sc, int s, StreamClock *ev) {
    *ev = sc->clock[s];
    sc->clock[s].c[s]++; /* what s does next is after the event */
}

void stream_check_wait(StreamCheck *sc, int s, const StreamClock *ev) {
    join(&sc->clock[s], ev);
}

void stream_check_record_event(StreamCheck *sc, int s, DevEvent *ev) {
    StreamClock c;
    stream_check_record(sc, s, &c);
    for (int i = 0; i < SC_CLOCKS; i++) ev->order[i] = c.c[i];
}

void stream_check_wait_event(StreamCheck *sc, int s, const DevEvent *ev) {
    StreamClock c;
    for (int i = 0; i < SC_CLOCKS; i++) c.c[i] = ev->order[i];
    stream_check_wait(sc, s, &c);
}

void stream_check_sync(StreamCheck *sc, int s) {
    StreamClock done;
    stream_check_record(sc, s, &done);
    join(&sc->clock[SC_HOST], &done);
}

/* Work queued by the host on a stream comes after everything the host did before queuing. */
static void queued_by_host(StreamCheck *sc, int s) {
    if (s == SC_HOST) return;
    join(&sc->clock[s], &sc->clock[SC_HOST]);
    sc->clock[SC_HOST].c[SC_HOST]++;
}

/* ------------------------------------------------------------------ the shadow blocks */

/* The block holding address a, or NULL. */
static ShadowBlock *block_at(StreamCheck *sc, uintptr_t a) {
    int lo = 0, hi = sc->nblocks - 1;
    while (lo <= hi) {
        int mid = (lo + hi) / 2;
        ShadowBlock *b = &sc->blocks[mid];
        if (a < b->base)
            hi = mid - 1;
        else if (a >= b->base + (b->bytes ? b->bytes : 1))
            lo = mid + 1;
        else
            return b;
    }
    return NULL;
}

static ShadowBlock *block_insert(StreamCheck *sc, uintptr_t base) {
    if (sc->nblocks == sc->capblocks) {
        int cap = sc->capblocks ? 2 * sc->capblocks : 64;
        ShadowBlock *grown = realloc(sc->blocks, (size_t)cap * sizeof *grown);
        if (!grown) {
            sc->out_of_memory = 1;
            return NULL;
        }
        sc->blocks = grown;
        sc->capblocks = cap;
    }
    int at = sc->nblocks;
    while (at > 0 && sc->blocks[at - 1].base > base) at--;
    memmove(&sc->blocks[at + 1], &sc->blocks[at], (size_t)(sc->nblocks - at) * sizeof *sc->blocks);
    sc->nblocks++;
    memset(&sc->blocks[at], 0, sizeof sc->blocks[at]);
    sc->blocks[at].base = base;
    return &sc->blocks[at];
}

void stream_check_forget(StreamCheck *sc, const void *p) {
    ShadowBlock *b = block_at(sc, (uintptr_t)p);
    if (!b) return;
    free(b->rec);
    int at = (int)(b - sc->blocks);
    memmove(b, b + 1, (size_t)(sc->nblocks - at - 1) * sizeof *b);
    sc->nblocks--;
}

static int record_add(StreamCheck *sc, ShadowBlock *b, const AccessRecord *r) {
    if (b->nrec == b->caprec) {
        int cap = b->caprec ? 2 * b->caprec : 8;
        AccessRecord *grown = realloc(b->rec, (size_t)cap * sizeof *grown);
        if (!grown) {
            sc->out_of_memory = 1;
            return 0;
        }
        b->rec = grown;
        b->caprec = cap;
    }
    b->rec[b->nrec++] = *r;
    return 1;
}

/* ------------------------------------------------------------------ the check */

static const char *verb(AccessKind k) {
    static const char *const v[] = {"reads", "writes", "frees", "reuses"};
    return v[k];
}

static const char *past(AccessKind k) {
    static const char *const v[] = {"read", "wrote", "freed", "reused"};
    return v[k];
}

static int is_write(AccessKind k) {
    return k != ACCESS_READ;
}

/* Whether the earlier access r is ordered before an access by stream s now. */
static int happened_before(const StreamCheck *sc, const AccessRecord *r, int s) {
    return r->stream == s || sc->clock[s].c[r->stream] >= r->epoch;
}

static void op_text(const StreamCheck *sc, StreamOp op, char *buf, size_t n) {
    const char *name = op.unit >= 0 && sc->unit_name ? sc->unit_name(sc->user, op.unit) : NULL;
    if (op.unit < 0)
        snprintf(buf, n, "%s", op.name);
    else if (name)
        snprintf(buf, n, "%s of %s", op.name, name);
    else
        snprintf(buf, n, "%s of unit %d", op.name, op.unit);
}

static void hazard(StreamCheck *sc, const ShadowBlock *b, int s, AccessKind kind, StreamOp op,
                   const AccessRecord *r) {
    if (sc->hazards++) return; /* the first one is the one to fix */
    char now[160], then[160];
    op_text(sc, op, now, sizeof now);
    op_text(sc, r->op, then, sizeof then);
    if (r->kind == ACCESS_FREE && b->reused) kind = ACCESS_REUSE; /* the block came back */
    snprintf(sc->first, sizeof sc->first,
             "rank %d: %s %s %s the %s (%s) that %s %s %s, with no wait between them", sc->rank,
             stream_check_stream_name(s), now, verb(kind),
             b->label ? b->label : mem_category_label(b->cat), mem_category_name(b->cat),
             stream_check_stream_name(r->stream), then, past(r->kind));
}

/* Checks [lo, hi) of b against its records; returns 1 on a hazard. */
static int check_range(StreamCheck *sc, const ShadowBlock *b, size_t lo, size_t hi, int s,
                       AccessKind kind, StreamOp op) {
    int found = 0;
    for (int i = 0; i < b->nrec; i++) {
        const AccessRecord *r = &b->rec[i];
        if (r->hi <= lo || r->lo >= hi) continue;
        if (!is_write(kind) && !is_write(r->kind)) continue; /* reads never race reads */
        if (r->stream != s) sc->across++;
        if (happened_before(sc, r, s)) continue;
        if (!found) hazard(sc, b, s, kind, op, r);
        found = 1;
    }
    return found;
}

/* Drops the records the new access makes redundant: under a write, whatever it covers (a
 * later access ordered after the write is ordered after them, or the write was a hazard
 * already); under a read, the same stream's earlier reads it covers. */
static void prune(ShadowBlock *b, size_t lo, size_t hi, int s, AccessKind kind) {
    int kept = 0;
    for (int i = 0; i < b->nrec; i++) {
        const AccessRecord *r = &b->rec[i];
        int covered = r->lo >= lo && r->hi <= hi;
        int redundant = covered && (is_write(kind) || (r->stream == s && !is_write(r->kind)));
        if (!redundant) b->rec[kept++] = *r;
    }
    b->nrec = kept;
}

static int access_block(StreamCheck *sc, ShadowBlock *b, size_t lo, size_t hi, int s,
                        AccessKind kind, StreamOp op) {
    queued_by_host(sc, s);
    int bad = check_range(sc, b, lo, hi, s, kind, op);
    prune(b, lo, hi, s, kind);
    AccessRecord r = {
        .lo = lo, .hi = hi, .stream = s, .epoch = sc->clock[s].c[s], .kind = kind, .op = op};
    record_add(sc, b, &r);
    return bad;
}

int stream_check_access(StreamCheck *sc, int s, const void *p, size_t bytes, AccessKind kind,
                        StreamOp op) {
    uintptr_t a = (uintptr_t)p;
    ShadowBlock *b = bytes ? block_at(sc, a) : NULL;
    if (!b) return 0;
    size_t lo = a - b->base, hi = lo + bytes;
    if (hi > b->bytes) hi = b->bytes;
    return access_block(sc, b, lo, hi, s, kind, op);
}

void stream_check_alloc(StreamCheck *sc, const void *p, size_t bytes, MemCategory cat,
                        const char *label) {
    if (!p) return;
    ShadowBlock *b = block_at(sc, (uintptr_t)p);
    if (b && b->base != (uintptr_t)p) return; /* inside another block: not ours to follow */
    if (!b && !(b = block_insert(sc, (uintptr_t)p))) return;
    b->reused = b->freed;
    if (!b->freed) b->nrec = 0;
    b->freed = 0;
    b->bytes = bytes > b->bytes ? bytes : b->bytes;
    b->cat = cat;
    b->label = label;
}

void stream_check_free_block(StreamCheck *sc, int s, const void *p, StreamOp op) {
    ShadowBlock *b = p ? block_at(sc, (uintptr_t)p) : NULL;
    if (!b || b->base != (uintptr_t)p) return;
    access_block(sc, b, 0, b->bytes, s, ACCESS_FREE, op);
    b->freed = 1;
}

void stream_check_summary(size_t across, size_t hazards, char *buf, size_t n) {
    snprintf(buf, n, "stream check: %zu accesses across streams, %zu hazards", across, hazards);
}
