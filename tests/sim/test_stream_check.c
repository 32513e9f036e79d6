/* The stream checker on small engine-like sequences: each hazard kind (read after write, write
 * after read, write after write, reuse after free) is caught and named exactly when one
 * ordering is removed, and the ordered sequence passes with its cross-stream accesses counted. */
#include <criterion/criterion.h>
#include <string.h>

#include "sim/stream_check.h"

static const char *layer_name(void *user, int unit) {
    (void)user;
    static const char *const names[] = {"embed", "encoder_layer_0", "encoder_layer_1"};
    return names[unit];
}

/* One unit's all-gather as the engine should order it: compute packs the send buffer, comm
 * waits for that, gathers into the receive buffer, and compute waits for the gather before it
 * unpacks. Each `skip` removes one of those waits. */
enum { SKIP_NONE = 0, SKIP_PACKED_WAIT = 1, SKIP_GATHERED_WAIT = 2 };

typedef struct Buffers {
    char send[64], recv[256];
} Buffers;

static void gather_unit(StreamCheck *sc, Buffers *b, int unit, int skip) {
    StreamOp pack = {"pack", unit}, gather = {"all_gather", unit}, unpack = {"unpack", unit};
    StreamClock packed, gathered;
    stream_check_access(sc, STREAM_COMPUTE, b->send, sizeof b->send, ACCESS_WRITE, pack);
    stream_check_record(sc, STREAM_COMPUTE, &packed);
    if (skip != SKIP_PACKED_WAIT) stream_check_wait(sc, STREAM_COMM, &packed);
    stream_check_access(sc, STREAM_COMM, b->send, sizeof b->send, ACCESS_READ, gather);
    stream_check_access(sc, STREAM_COMM, b->recv, sizeof b->recv, ACCESS_WRITE, gather);
    stream_check_record(sc, STREAM_COMM, &gathered);
    if (skip != SKIP_GATHERED_WAIT) stream_check_wait(sc, STREAM_COMPUTE, &gathered);
    stream_check_access(sc, STREAM_COMPUTE, b->recv, sizeof b->recv, ACCESS_READ, unpack);
}

static void setup(StreamCheck *sc, Buffers *b) {
    stream_check_init(sc, 1);
    sc->unit_name = layer_name;
    stream_check_alloc(sc, b->send, sizeof b->send, MEM_COMM_BUFFER, "send buffer");
    stream_check_alloc(sc, b->recv, sizeof b->recv, MEM_PARAM_UNSHARDED, NULL);
}

Test(stream_check, ordered_gathers_pass_and_count_cross_stream_accesses) {
    StreamCheck sc;
    Buffers b;
    setup(&sc, &b);
    for (int u = 0; u < 3; u++) gather_unit(&sc, &b, u, SKIP_NONE);
    cr_expect_eq(sc.hazards, 0, "%s", sc.first);
    /* the first unit: comm's read of the send buffer meets compute's pack, compute's unpack
     * meets comm's gather; from the second on, also the pack meets comm's earlier read of the
     * send buffer and the gather's write meets compute's earlier unpack */
    cr_expect_eq(sc.across, 2 + 2 * 4, "got %zu", sc.across);
    stream_check_free(&sc);
}

/* Each wait of gather_unit, removed, is the hazard it prevents: named with both operations. */
Test(stream_check, a_missing_wait_in_a_gather_is_named) {
    static const struct {
        int skip, unit;
        const char *line;
    } cases[] = {
        {SKIP_PACKED_WAIT, 2,
         "rank 1: comm all_gather of encoder_layer_1 reads the send buffer (comm_buffer) that "
         "compute pack of encoder_layer_1 wrote, with no wait between them"},
        {SKIP_GATHERED_WAIT, 1,
         "rank 1: compute unpack of encoder_layer_0 reads the unsharded params (param_unsharded) "
         "that comm all_gather of encoder_layer_0 wrote, with no wait between them"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        StreamCheck sc;
        Buffers b;
        setup(&sc, &b);
        gather_unit(&sc, &b, cases[i].unit, cases[i].skip);
        cr_expect_eq(sc.hazards, 1, "case %zu", i);
        cr_expect_str_eq(sc.first, cases[i].line);
        stream_check_free(&sc);
    }
}

Test(stream_check, write_after_read_repacking_a_buffer_comm_still_sends) {
    StreamCheck sc;
    Buffers b;
    setup(&sc, &b);
    StreamOp pack0 = {"pack", 0}, gather0 = {"all_gather", 0}, pack1 = {"pack", 1};
    StreamClock packed;
    stream_check_access(&sc, STREAM_COMPUTE, b.send, sizeof b.send, ACCESS_WRITE, pack0);
    stream_check_record(&sc, STREAM_COMPUTE, &packed);
    stream_check_wait(&sc, STREAM_COMM, &packed);
    stream_check_access(&sc, STREAM_COMM, b.send, sizeof b.send, ACCESS_READ, gather0);
    /* the next unit's pack reuses the send buffer before comm's gather is known done */
    cr_expect_eq(stream_check_access(&sc, STREAM_COMPUTE, b.send, 8, ACCESS_WRITE, pack1), 1);
    cr_expect_str_eq(sc.first, "rank 1: compute pack of encoder_layer_0 writes the send buffer "
                               "(comm_buffer) that comm all_gather of embed read, with no wait "
                               "between them");
    stream_check_free(&sc);
}

Test(stream_check, write_after_write_two_streams_filling_one_buffer) {
    StreamCheck sc;
    Buffers b;
    setup(&sc, &b);
    StreamOp gather = {"all_gather", 2}, h2d = {"copy_h2d", 2};
    stream_check_access(&sc, STREAM_COMM, b.recv, sizeof b.recv, ACCESS_WRITE, gather);
    cr_expect_eq(stream_check_access(&sc, STREAM_COPY, b.recv + 16, 16, ACCESS_WRITE, h2d), 1);
    cr_expect_str_eq(sc.first, "rank 1: copy copy_h2d of encoder_layer_1 writes the unsharded "
                               "params (param_unsharded) that comm all_gather of "
                               "encoder_layer_1 wrote, with no wait between them");
    stream_check_free(&sc);
}

Test(stream_check, disjoint_bytes_of_one_block_do_not_race) {
    StreamCheck sc;
    Buffers b;
    setup(&sc, &b);
    StreamOp a = {"unpack", 0}, c = {"all_gather", 1};
    stream_check_access(&sc, STREAM_COMPUTE, b.recv, 128, ACCESS_WRITE, a);
    cr_expect_eq(stream_check_access(&sc, STREAM_COMM, b.recv + 128, 128, ACCESS_WRITE, c), 0);
    cr_expect_eq(stream_check_access(&sc, STREAM_COMM, b.recv + 127, 2, ACCESS_WRITE, c), 1);
    stream_check_free(&sc);
}

Test(stream_check, reuse_after_free_on_another_stream_needs_an_event) {
    for (int with_event = 0; with_event < 2; with_event++) {
        StreamCheck sc;
        Buffers b;
        setup(&sc, &b);
        StreamOp gather = {"all_gather", 0}, fr = {"free", 0}, fwd = {"linear_forward", 1};
        stream_check_access(&sc, STREAM_COMM, b.recv, sizeof b.recv, ACCESS_WRITE, gather);
        stream_check_free_block(&sc, STREAM_COMM, b.recv, fr); /* comm's own: ordered */
        StreamClock freed;
        stream_check_record(&sc, STREAM_COMM, &freed);
        if (with_event) stream_check_wait(&sc, STREAM_COMPUTE, &freed);
        /* handed out again: the first stream to touch it must be ordered after the free */
        stream_check_alloc(&sc, b.recv, 64, MEM_ACTIVATIONS, NULL);
        cr_expect_eq(sc.hazards, 0);
        stream_check_access(&sc, STREAM_COMPUTE, b.recv, 64, ACCESS_WRITE, fwd);
        cr_expect_eq(sc.hazards, with_event ? 0 : 1, "event %d: %s", with_event, sc.first);
        if (!with_event)
            cr_expect_str_eq(sc.first, "rank 1: compute linear_forward of encoder_layer_0 reuses "
                                       "the activations (activations) that comm free of embed "
                                       "freed, with no wait between them");
        stream_check_free(&sc);
    }
}

Test(stream_check, freeing_a_block_another_stream_reads_is_caught) {
    StreamCheck sc;
    Buffers b;
    setup(&sc, &b);
    StreamOp gather = {"all_gather", 0}, fr = {"free", 0};
    stream_check_access(&sc, STREAM_COMM, b.send, sizeof b.send, ACCESS_READ, gather);
    stream_check_free_block(&sc, STREAM_COMPUTE, b.send, fr);
    cr_expect_eq(sc.hazards, 1);
    cr_expect(strstr(sc.first, "compute free of embed frees the send buffer") != NULL, "%s",
              sc.first);
    stream_check_free(&sc);
}

Test(stream_check, the_host_sees_a_stream_s_bytes_only_after_a_sync) {
    StreamCheck sc;
    Buffers b;
    setup(&sc, &b);
    StreamOp reduce = {"all_reduce", -1}, read = {"loss", -1};
    stream_check_access(&sc, STREAM_COMM, b.send, 4, ACCESS_WRITE, reduce);
    cr_expect_eq(stream_check_access(&sc, SC_HOST, b.send, 4, ACCESS_READ, read), 1);
    cr_expect_str_eq(sc.first, "rank 1: host loss reads the send buffer (comm_buffer) that comm "
                               "all_reduce wrote, with no wait between them");
    stream_check_access(&sc, STREAM_COMM, b.send, 4, ACCESS_WRITE, reduce);
    stream_check_sync(&sc, STREAM_COMM);
    cr_expect_eq(stream_check_access(&sc, SC_HOST, b.send, 4, ACCESS_READ, read), 0);
    /* and what the host wrote is seen by work it queues afterwards, on any stream */
    stream_check_access(&sc, SC_HOST, b.send, 4, ACCESS_WRITE, read);
    cr_expect_eq(stream_check_access(&sc, STREAM_COPY, b.send, 4, ACCESS_READ, reduce), 0);
    cr_expect_eq(sc.hazards, 1);
    stream_check_free(&sc);
}

Test(stream_check, memory_outside_every_block_is_not_followed) {
    StreamCheck sc;
    Buffers b;
    setup(&sc, &b);
    char host[16];
    StreamOp op = {"copy", -1};
    stream_check_access(&sc, STREAM_COMM, host, sizeof host, ACCESS_WRITE, op);
    cr_expect_eq(stream_check_access(&sc, STREAM_COMPUTE, host, sizeof host, ACCESS_WRITE, op), 0);
    cr_expect_eq(sc.across, 0);
    stream_check_free(&sc);
}
