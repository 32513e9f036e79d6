/* Lesson 11: CPU offload. What crosses PCIe in one training step when the shards live in
 * host memory (FSDP2's CPUOffloadPolicy), and when only the optimizer does (ZeRO-Offload)?
 * The reference solution: ./fsdp lessons check 11 --file lessons/solutions/11-cpu-offload.c */
#include "exercise.h"

/* Rows [r * chunk, ...) of d0, torch.chunk's way: the last shards may be short or empty. */
static size_t own_rows(size_t d0, int world, int rank) {
    size_t chunk = (d0 + (size_t)world - 1) / (size_t)world;
    size_t begin = chunk * (size_t)rank;
    if (begin >= d0) return 0;
    return d0 - begin < chunk ? d0 - begin : chunk;
}

/* The bytes of rank `rank`'s shard of a unit: its own rows of every parameter (torch.chunk
 * on dim 0 over `world` ranks, lesson 02), dtype_bytes bytes an element. Nothing is padded:
 * this is what the rank keeps, not a block on the wire. */
size_t shard_bytes(const TensorShape *params, int nparams, int world, int rank,
                   size_t dtype_bytes) {
    size_t elements = 0;
    for (int i = 0; i < nparams; i++)
        elements += own_rows(params[i].d0, world, rank) * params[i].row_elems;
    return elements * dtype_bytes;
}

/* --offload cpu: a rank's parameter shards rest in host memory (param_bytes an element) and
 * its reduced gradient shards go there (grad_bytes an element); Adam runs on the host. The
 * bytes rank `rank` copies over PCIe in one step, each way. */
PcieBytes cpu_offload_bytes(const UnitInfo *units, int nunits, int world, int rank,
                            size_t param_bytes, size_t grad_bytes) {
    PcieBytes traffic = {0, 0};
    for (int u = 0; u < nunits; u++) {
        const UnitInfo *unit = &units[u];
        /* every all-gather starts from the shard in host memory: it crosses each time, in
         * the dtype it rests in (a cast to --param-dtype happens on the GPU, after) */
        traffic.h2d += (size_t)unit->gathers *
                       shard_bytes(unit->params, unit->nparams, world, rank, param_bytes);
        /* the reduced gradient shard, once a step, for the host's Adam */
        traffic.d2h += shard_bytes(unit->params, unit->nparams, world, rank, grad_bytes);
    }
    return traffic;
}

/* --offload optimizer (ZeRO-Offload): parameters stay on the GPU; each reduced gradient shard
 * goes to the host, where Adam's state and its step live. The bytes rank `rank` copies over
 * PCIe in one step, each way; its optimizer updates exactly its shard's rows. */
PcieBytes optimizer_offload_bytes(const UnitInfo *units, int nunits, int world, int rank,
                                  size_t param_bytes, size_t grad_bytes) {
    PcieBytes traffic = {0, 0};
    for (int u = 0; u < nunits; u++) {
        const UnitInfo *unit = &units[u];
        /* the gradients of the rows Adam updates go out, the updated rows come back: once a
         * step, however often the unit is gathered */
        traffic.d2h += shard_bytes(unit->params, unit->nparams, world, rank, grad_bytes);
        traffic.h2d += shard_bytes(unit->params, unit->nparams, world, rank, param_bytes);
    }
    return traffic;
}
