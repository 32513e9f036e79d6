/* device: the names of memory categories, the memory accounting every device keeps alike
 * (charges by category, the peak and the breakdown at it), and the helpers models describe
 * their Work with (a Linear's GEMMs by shape). */
#include "engine/device.h"

#include <string.h>

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

int mem_category_off_gpu(MemCategory c) {
    return c == MEM_HOST_OFFLOAD || c == MEM_NVME;
}

const char *mem_category_label(MemCategory c) {
    return (c >= 0 && c < MEM_CATEGORY_COUNT) ? category_labels[c] : "?";
}

/* ---------------------------------------------------------------- memory accounting */

/* The part of a's accounting that category c is charged to, or NULL for neither. */
static MemPeak *mem_part(MemAccount *a, MemCategory c) {
    if (mem_category_on_gpu(c)) return &a->on_gpu;
    if (mem_category_off_gpu(c)) return &a->off_gpu;
    return NULL;
}

void mem_account_charge(MemAccount *a, MemCategory c, size_t bytes) {
    a->in_use[c] += bytes;
    a->total += bytes;
    if (a->total > a->peak) {
        a->peak = a->total;
        memcpy(a->at_peak, a->in_use, sizeof a->at_peak);
    }
    MemPeak *part = mem_part(a, c);
    if (!part) return;
    part->total += bytes;
    if (part->total > part->peak) {
        part->peak = part->total;
        memcpy(part->at_peak, a->in_use, sizeof part->at_peak);
    }
}

void mem_account_uncharge(MemAccount *a, MemCategory c, size_t bytes) {
    a->in_use[c] -= bytes;
    a->total -= bytes;
    MemPeak *part = mem_part(a, c);
    if (part) part->total -= bytes;
}

size_t device_bytes_in_use(Device *d, MemCategory c) {
    return d->memory.in_use[c];
}

size_t device_peak_bytes(Device *d) {
    return d->memory.peak;
}

size_t device_peak_bytes_by_category(Device *d, MemCategory c) {
    return d->memory.at_peak[c];
}

/* The next peak is measured from what is held now. */
void device_reset_peak(Device *d) {
    MemAccount *a = &d->memory;
    a->peak = a->total;
    memcpy(a->at_peak, a->in_use, sizeof a->at_peak);
    MemPeak *parts[] = {&a->on_gpu, &a->off_gpu};
    for (int i = 0; i < 2; i++) {
        parts[i]->peak = parts[i]->total;
        memcpy(parts[i]->at_peak, a->in_use, sizeof parts[i]->at_peak);
    }
}

void device_follow(Device *d, StreamId waiter, StreamId source) {
    DevEvent ev = {0};
    d->ops->event_record(d, source, &ev);
    d->ops->stream_wait(d, waiter, &ev);
}

Device device_on_host(const DeviceOps *ops, int rank, void *impl) {
    return (Device){.ops = ops, .rank = rank, .impl = impl, .host_addressable = 1};
}

void work_begin(Work *w, WorkKind kind) {
    w->kind = kind;
    w->flops = w->bytes = w->attention_flops = 0;
    w->ngemms = w->kernels = 0;
}

static void add_gemm(Work *w, double m, double n, double k) {
    w->flops += 2.0 * m * n * k;
    if (w->ngemms < WORK_MAX_GEMMS) w->gemm[w->ngemms++] = (WorkGemm){m, n, k};
}

void work_linear(Work *w, WorkKind kind, double m, double in, double out) {
    if (kind != WORK_BACKWARD) {
        add_gemm(w, m, out, in);
        return;
    }
    add_gemm(w, m, in, out); /* dX = dY . W */
    add_gemm(w, out, in, m); /* dW = dY^T . X */
}
