/* Lesson 11: CPU offload. What crosses PCIe in one training step when the shards live in
 * host memory (FSDP2's CPUOffloadPolicy), and when only the optimizer does (ZeRO-Offload)? */
#include "exercise.h"

/* Read lessons/11-cpu-offload/README.md, fill in the three TODOs, then run
 *   ./fsdp lessons check 11
 * Helpers you add should be `static`. */

/* The bytes of rank `rank`'s shard of a unit: its own rows of every parameter (torch.chunk
 * on dim 0 over `world` ranks, lesson 02), dtype_bytes bytes an element. Nothing is padded:
 * this is what the rank keeps, not a block on the wire. */
size_t shard_bytes(const TensorShape *params, int nparams, int world, int rank,
                   size_t dtype_bytes) {
    /* TODO: delete the next line when you use them */
    (void)params, (void)nparams, (void)world, (void)rank, (void)dtype_bytes;
    return 0; /* TODO */
}

/* --offload cpu: a rank's parameter shards rest in host memory (param_bytes an element) and
 * its reduced gradient shards go there (grad_bytes an element); Adam runs on the host. The
 * bytes rank `rank` copies over PCIe in one step, each way. */
PcieBytes cpu_offload_bytes(const UnitInfo *units, int nunits, int world, int rank,
                            size_t param_bytes, size_t grad_bytes) {
    /* TODO: delete the next line when you use them */
    (void)units, (void)nunits, (void)world, (void)rank, (void)param_bytes, (void)grad_bytes;
    PcieBytes traffic = {0, 0}; /* TODO */
    return traffic;
}

/* --offload optimizer (ZeRO-Offload): parameters stay on the GPU; each reduced gradient shard
 * goes to the host, where Adam's state and its step live. The bytes rank `rank` copies over
 * PCIe in one step, each way; its optimizer updates exactly its shard's rows. */
PcieBytes optimizer_offload_bytes(const UnitInfo *units, int nunits, int world, int rank,
                                  size_t param_bytes, size_t grad_bytes) {
    /* TODO: delete the next line when you use them */
    (void)units, (void)nunits, (void)world, (void)rank, (void)param_bytes, (void)grad_bytes;
    PcieBytes traffic = {0, 0}; /* TODO */
    return traffic;
}
