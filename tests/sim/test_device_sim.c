/* The simulated device's clock and trace for kernels the engine launches between works
 * (DeviceOps.launched): the stream pays for them at once, and the next work's span holds them,
 * or the last one's where an event or an idling wait comes between. */
#include <criterion/criterion.h>

#include "engine/trace.h"
#include "sim/comm_sim.h"
#include "sim/cost.h"
#include "sim/device_sim.h"

typedef struct Bench {
    SimClock clock;
    TraceBuf trace;
    SimDevice dev;
    Device *d;
    const Profile *p;
} Bench;

static void bench_init(Bench *b) {
    *b = (Bench){.p = profile_default()};
    tracebuf_init(&b->trace, 0, 1);
    device_sim_init(&b->dev, 0, &b->clock, &b->trace, b->p);
    b->d = &b->dev.base;
}

static void bench_free(Bench *b) {
    device_sim_release(&b->dev);
    tracebuf_free(&b->trace);
}

/* Two launches moving 1 MB, and a forward of 2 MB in one launch. */
static const Work copies = {.kind = WORK_PACK, .unit = -1, .bytes = 1e6, .kernels = 2};
static const Work forward = {.kind = WORK_FORWARD, .unit = 0, .bytes = 2e6};

static double now(Bench *b, StreamId s) {
    return b->d->ops->now(b->d, s);
}

Test(device_sim, launched_kernels_take_their_time_inside_the_next_work) {
    Bench b;
    bench_init(&b);
    double c = cost_work(b.p, &copies, 0), f = cost_work(b.p, &forward, 0);
    cr_assert_float_eq(c, 2 * b.p->launch_overhead + 1e6 / (b.p->mem_bw * b.p->mem_eff), 1e-15);
    b.d->ops->launched(b.d, STREAM_COMPUTE, &copies);
    cr_expect_float_eq(now(&b, STREAM_COMPUTE), c, 1e-15, "the stream pays at once");
    cr_expect_eq(b.trace.n, 0, "and no event is made for them");
    b.d->ops->run(b.d, STREAM_COMPUTE, &forward);
    cr_assert_eq(b.trace.n, 1);
    cr_expect_eq(b.trace.ev[0].start, 0.0, "the forward's span begins where the copies did");
    cr_expect_float_eq(b.trace.ev[0].end, c + f, 1e-15);
    cr_expect_eq(b.trace.ev[0].bytes, 2000000, "its own bytes, as the engine gave them");
    b.d->ops->run(b.d, STREAM_COMPUTE, &forward); /* nothing launched before this one */
    cr_expect_float_eq(b.trace.ev[1].start, c + f, 1e-15);
    bench_free(&b);
}

/* Another stream may start from a recorded point: the kernels before it end in the last
 * work's span, and the next work begins at the point. */
Test(device_sim, an_event_after_launched_kernels_closes_them_into_the_last_work) {
    Bench b;
    bench_init(&b);
    double c = cost_work(b.p, &copies, 0), f = cost_work(b.p, &forward, 0);
    b.d->ops->run(b.d, STREAM_COMPUTE, &forward);
    b.d->ops->launched(b.d, STREAM_COMPUTE, &copies);
    DevEvent ev;
    b.d->ops->event_record(b.d, STREAM_COMPUTE, &ev);
    cr_expect_float_eq(ev.time, f + c, 1e-15, "the point is after the copies");
    cr_expect_float_eq(b.trace.ev[0].end, f + c, 1e-15, "the forward's span takes them");
    b.d->ops->run(b.d, STREAM_COMPUTE, &forward);
    cr_expect_float_eq(b.trace.ev[1].start, f + c, 1e-15, "the next work starts at the point");
    cr_expect_float_eq(b.trace.ev[1].end, f + c + f, 1e-15);
    bench_free(&b);
}

/* A wait that idles the stream: the kernels ran before it, in the last work's span; the next
 * work starts when the wait ends. A wait already met changes nothing. */
Test(device_sim, an_idling_wait_after_launched_kernels_closes_them_into_the_last_work) {
    Bench b;
    bench_init(&b);
    double c = cost_work(b.p, &copies, 0), f = cost_work(b.p, &forward, 0);
    b.d->ops->run(b.d, STREAM_COMPUTE, &forward);
    b.d->ops->launched(b.d, STREAM_COMPUTE, &copies);
    DevEvent met = {.time = f}, later = {.time = 1.0};
    b.d->ops->stream_wait(b.d, STREAM_COMPUTE, &met);
    cr_expect_float_eq(b.trace.ev[0].end, f, 1e-15, "a wait already met leaves the copies pending");
    b.d->ops->stream_wait(b.d, STREAM_COMPUTE, &later);
    cr_expect_float_eq(b.trace.ev[0].end, f + c, 1e-15, "the idling wait closes them");
    cr_expect_eq(now(&b, STREAM_COMPUTE), 1.0);
    b.d->ops->run(b.d, STREAM_COMPUTE, &forward);
    cr_expect_eq(b.trace.ev[1].start, 1.0);
    bench_free(&b);
}

/* What the host allocates while launched kernels are pending comes before the work whose span
 * holds them: the trace keeps the host's order. */
Test(device_sim, an_allocation_between_launches_and_work_is_stamped_before_the_work) {
    Bench b;
    bench_init(&b);
    b.d->ops->run(b.d, STREAM_COMPUTE, &forward);
    double f = b.trace.ev[0].end;
    b.d->ops->launched(b.d, STREAM_COMPUTE, &copies);
    void *p = b.d->ops->alloc(b.d, 64, MEM_ACTIVATIONS, 0);
    cr_assert_not_null(p);
    b.d->ops->run(b.d, STREAM_COMPUTE, &forward);
    cr_assert_eq(b.trace.n, 3);
    cr_expect_eq(b.trace.ev[1].kind, EV_ALLOC);
    cr_expect_float_eq(b.trace.ev[1].start, f, 1e-15);
    cr_expect(b.trace.ev[1].start <= b.trace.ev[2].start, "the allocation, then the work");
    b.d->ops->free(b.d, p, 0);
    bench_free(&b);
}
