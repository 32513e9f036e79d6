#include "engine/device.h"

static const char *const category_names[MEM_CATEGORY_COUNT] = {
    "param_shard", "param_unsharded", "grad_shard", "grad_unsharded", "optim_state", "activations",
    "comm_buffer", "host_offload",    "ac_inputs",  "nvme",           "compute_copy"};
static const char *const category_labels[MEM_CATEGORY_COUNT] = {
    "param shard",         "unsharded params", "grad shard",   "unsharded grads",
    "optim state",         "activations",      "comm buffers", "host (offload)",
    "checkpointed inputs", "NVMe (offload)",   "fp32 copies"};

const char *mem_category_name(MemCategory c) {
    return (c >= 0 && c < MEM_CATEGORY_COUNT) ? category_names[c] : "?";
}

int mem_category_on_gpu(MemCategory c) {
    return c != MEM_HOST_OFFLOAD && c != MEM_NVME && c != MEM_COMPUTE_COPY;
}

const char *mem_category_label(MemCategory c) {
    return (c >= 0 && c < MEM_CATEGORY_COUNT) ? category_labels[c] : "?";
}
