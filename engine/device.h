/* device: the memory, stream and clock interface the engine runs on. The simulator
 * (sim/device_sim.c) charges every allocation to its rank and category and models time with
 * a cost model; the CUDA runtime (runtime/) allocates device memory and times with events.
 * The engine only ever talks to this table. */
#ifndef FSDP_DEVICE_H
#define FSDP_DEVICE_H

#include <stddef.h>

#include "base/err.h"

/* What an allocation is for: the memory panel and the plan account by these. */
typedef enum {
    MEM_PARAM_SHARD = 0, /* this rank's rows of the fp32 master parameters */
    MEM_PARAM_UNSHARDED, /* gathered (full) parameters of a unit, in param_dtype */
    MEM_GRAD_SHARD,      /* this rank's rows of the reduced gradient */
    MEM_GRAD_UNSHARDED,  /* full gradients of a unit before reduction */
    MEM_OPTIM_STATE,     /* Adam moments for the rows this rank updates */
    MEM_ACTIVATIONS,     /* saved forward values and their gradients */
    MEM_COMM_BUFFER,     /* packed send/receive buffers of collectives */
    MEM_HOST_OFFLOAD,    /* host memory holding offloaded shards, grads and state */
    MEM_AC_INPUT,        /* inputs activation checkpointing keeps to recompute a unit from */
    MEM_NVME,            /* file bytes of the NVMe tier: resting shards and optimizer state */
    /* fp32 copies of bf16/fp16 gathered parameters, on a backend whose kernels do not compute
     * in --param-dtype (the engine computes in fp32 on them); none where they do */
    MEM_COMPUTE_COPY,
    MEM_CATEGORY_COUNT
} MemCategory;

const char *mem_category_name(MemCategory c);  /* "param_shard", ... */
const char *mem_category_label(MemCategory c); /* "param shard", ... for people */
/* 1 for what the GPU itself holds: not offloaded host memory or NVMe files, and not the fp32
 * copies the simulator's emulation keeps out of every total. */
int mem_category_on_gpu(MemCategory c);
/* 1 for what offload keeps off the GPU: host memory (MEM_HOST_OFFLOAD) and NVMe files. */
int mem_category_off_gpu(MemCategory c);

/* Streams are fixed: compute, collectives, host<->device copies. */
typedef enum { STREAM_COMPUTE = 0, STREAM_COMM, STREAM_COPY, STREAM_COUNT } StreamId;

/* A point on a stream's timeline; the compute stream can wait for one recorded on comm. */
typedef struct DevEvent {
    double time;  /* sim: modelled seconds; cuda: filled when resolved */
    void *handle; /* cuda: cudaEvent_t */
    /* cuda: the event ring's running count when recorded, and the stream that recorded it, so
     * a wait can tell whether the ring has re-recorded the slot since */
    long long ticket;
    int stream;
    /* sim with the stream checker: the recording stream's vector clock (streams, then the host) */
    unsigned long long order[STREAM_COUNT + 1];
} DevEvent;

/* Kinds of timed work (shared with the trace). */
typedef enum {
    WORK_FORWARD = 0,
    WORK_BACKWARD,
    WORK_OPTIMIZER,
    WORK_COPY_H2D,
    WORK_COPY_D2H,
    WORK_PACK,       /* casting/packing shards into a comm buffer and back */
    WORK_RECOMPUTE,  /* activation checkpointing: a unit's forward again, before its backward */
    WORK_NVME_READ,  /* the NVMe tier: a unit's resting state read from its file */
    WORK_NVME_WRITE, /* ... and written back */
} WorkKind;

/* One GEMM of a piece of work: an [m x k] by [k x n] product, 2mnk flops. A GPU runs it as
 * tiles of its output in waves over its SMs, so its time depends on its shape (sim/cost.c). */
typedef struct WorkGemm {
    double m, n, k;
} WorkGemm;

enum { WORK_MAX_GEMMS = 16 }; /* a Llama block's backward: 7 Linears, two GEMMs each */

/* Work handed to the clock: the sim turns flops and bytes into modelled seconds. */
typedef struct Work {
    WorkKind kind;
    int unit;          /* FSDP unit index, -1 for none */
    double flops;      /* floating point operations, all of them (the GEMMs' among them) */
    double bytes;      /* bytes read+written by the memory-bound kernels, or copied */
    int low_precision; /* 1 if the math runs in bf16/fp16 */
    int on_host;       /* 1 if it runs on the host CPU (offloaded optimizer step) */
    /* The GEMMs among the flops (work_linear adds a Linear's), and attention's score and value
     * products (what flash attention's kernel computes); the rest of the flops run in
     * memory-bound kernels. kernels: the launches it takes (0: one). */
    int ngemms;
    WorkGemm gemm[WORK_MAX_GEMMS];
    double attention_flops;
    int kernels;
} Work;

/* Starts w's estimate of a pass `kind` afresh (no flops, bytes, GEMMs or kernels yet), keeping
 * what the engine set (unit, dtype, host): what a model's work function does first. */
void work_begin(Work *w, WorkKind kind);

/* Adds a Linear of `in` to `out` features over m rows to w as the pass `kind` runs it: forward
 * one GEMM [m x in] . [in x out]; backward two, the input's gradient [m x out] . [out x in] and
 * the weight's [out x m] . [m x in]; recompute as forward. Counts their flops into w->flops. */
void work_linear(Work *w, WorkKind kind, double m, double in, double out);

/* One part of the accounting (the GPU's own memory, or what offload keeps off it): its bytes
 * now, their peak since the last reset and every category's bytes at that moment. */
typedef struct MemPeak {
    size_t total;
    size_t peak;
    size_t at_peak[MEM_CATEGORY_COUNT];
} MemPeak;

/* The memory accounting every device keeps alike: bytes charged to each category, their
 * total, the total's peak and the breakdown at that peak. A backend charges an allocation and
 * uncharges its free; the DeviceOps queries answer from it (device_bytes_in_use, ...). */
typedef struct MemAccount {
    size_t in_use[MEM_CATEGORY_COUNT];  /* bytes charged to each category now */
    size_t total;                       /* their sum, less what is kept apart */
    size_t peak;                        /* the highest total since the last reset */
    size_t at_peak[MEM_CATEGORY_COUNT]; /* in_use when the total reached that peak */
    /* The same for each place apart: with offload the host's bytes peak at other moments than
     * the GPU's (a unit's NVMe staging buffers), and a GPU's peak is the GPU's alone, as
     * torch.cuda.max_memory_allocated counts it. on_gpu: mem_category_on_gpu; off_gpu: host
     * memory and NVMe files (MEM_HOST_OFFLOAD, MEM_NVME). */
    MemPeak on_gpu, off_gpu;
} MemAccount;

void mem_account_charge(MemAccount *a, MemCategory c, size_t bytes);
void mem_account_uncharge(MemAccount *a, MemCategory c, size_t bytes);

typedef struct Device Device;

typedef struct DeviceOps {
    void *(*alloc)(Device *d, size_t bytes, MemCategory cat, int unit);
    void (*free)(Device *d, void *p, int unit);
    /* Synchronous copy; host/device direction is the backend's concern. */
    void (*copy)(Device *d, void *dst, const void *src, size_t bytes);
    /* Account work done on a stream (after the kernel has run on the CPU, or after it
     * was launched on the GPU): advances the modelled clock / records CUDA events. */
    void (*run)(Device *d, StreamId s, const Work *w);
    /* Kernels launched on a stream that are no work of their own (the engine's copies, casts and
     * zeroing between a model's kernels): the stream's time pays for them, and the trace shows
     * them inside the next work, as a GPU's trace times them, between that work's events. */
    void (*launched)(Device *d, StreamId s, const Work *w);
    void (*event_record)(Device *d, StreamId s, DevEvent *ev);
    void (*stream_wait)(Device *d, StreamId s, const DevEvent *ev);
    /* Current time of a stream (sim: modelled; cuda: after sync). */
    double (*now)(Device *d, StreamId s);
    /* Bytes currently charged to a category, and the peak of the total (device_bytes_in_use
     * and the three below serve every backend that charges Device.memory). */
    size_t (*bytes_in_use)(Device *d, MemCategory c);
    size_t (*peak_bytes)(Device *d);
    /* The category breakdown at the moment the total peaked. */
    size_t (*peak_bytes_by_category)(Device *d, MemCategory c);
    /* Forget peaks so the next step's peak is measured alone. */
    void (*reset_peak)(Device *d);
    /* The peak resident memory of the process the rank runs in, in bytes, where it is measured
     * (a rank in its own process on CPUs); NULL: not measured. */
    size_t (*resident_peak)(Device *d);
} DeviceOps;

struct Device {
    const DeviceOps *ops;
    int rank;
    void *impl;
    /* 1: the device charges memory and models time but stores nothing (accounting-only runs
     * of models too big to hold); the engine skips work that only fills in values */
    int accounting_only;
    /* 1: device pointers are host memory the CPU may read and write in place (the simulator's
     * devices), so host I/O such as checkpoints needs no staging copy */
    int host_addressable;
    MemAccount memory; /* what the backend's alloc and free charge */
};

/* The DeviceOps memory queries, answered from d->memory. */
size_t device_bytes_in_use(Device *d, MemCategory c);
size_t device_peak_bytes(Device *d);
size_t device_peak_bytes_by_category(Device *d, MemCategory c);
void device_reset_peak(Device *d);
/* The four in a DeviceOps table: every backend that charges Device.memory answers them alike. */
#define DEVICE_MEMORY_QUERIES                                                                      \
    .bytes_in_use = device_bytes_in_use, .peak_bytes = device_peak_bytes,                          \
    .peak_bytes_by_category = device_peak_bytes_by_category, .reset_peak = device_reset_peak

/* The ops every backend implements itself, in DeviceOps' order, for a table built from functions
 * named after them (as kernels.h's KERNEL_OPS): `DEVICE_OPS_NAMED(host)` is .alloc = host_alloc,
 * .free = host_free, ... then the memory queries. */
#define DEVICE_OPS_NAMED(prefix)                                                                   \
    .alloc = prefix##_alloc, .free = prefix##_free, .copy = prefix##_copy, .run = prefix##_run,    \
    .launched = prefix##_launched, .event_record = prefix##_event_record,                          \
    .stream_wait = prefix##_stream_wait, .now = prefix##_now, DEVICE_MEMORY_QUERIES

/* A device whose memory is the host's (the simulator's, a CPU process's): its pointers may be
 * read and written in place. */
Device device_on_host(const DeviceOps *ops, int rank, void *impl);
/* Stream `waiter` does not run ahead of what `source` has queued so far (an event recorded on
 * source, waited for on waiter). */
void device_follow(Device *d, StreamId waiter, StreamId source);

#endif
