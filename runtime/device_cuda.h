/* device_cuda: the device interface on one NVIDIA GPU. Memory comes from a caching allocator
 * (a freed block goes to the next request of its size once the work queued before its free
 * has completed, so a steady-state step calls cudaMalloc only while the host runs ahead) that still
 * charges every byte to its category, as the simulator does; compute, comm and copy are three CUDA
 * streams joined by events; work spans are timed with CUDA events into the same trace format the
 * simulator writes. */
#ifndef FSDP_DEVICE_CUDA_H
#define FSDP_DEVICE_CUDA_H

#include "engine/device.h"
#include "engine/trace.h"

typedef struct CudaDevice CudaDevice;

/* Creates the device for `rank` on the current CUDA device; trace may be NULL. */
int device_cuda_create(CudaDevice **out, int rank, TraceBuf *trace, Err *err);
/* Resolves pending trace spans, returns cached blocks to CUDA and destroys the streams. Blocks
 * still allocated stay the caller's to leak. */
void device_cuda_destroy(CudaDevice *d);

/* Waits until every stream is idle and appends every span still pending to the trace. */
void device_cuda_settle(CudaDevice *d);

Device *device_cuda_base(CudaDevice *d);
/* The stream a StreamId names (a cudaStream_t). */
void *device_cuda_stream(CudaDevice *d, StreamId s);
/* Times work just enqueued on stream s as one trace span (a collective, say), from the end of
 * the stream's previous span; nothing when the trace is off. */
void device_cuda_trace_span(CudaDevice *d, StreamId s, EventKind kind, int unit, size_t bytes,
                            int flags);
/* 1 if p is host memory (pageable, pinned, or unknown to CUDA): what a collective's caller
 * reads right after waiting, so it must have landed. */
int device_cuda_is_host_memory(const void *p);
/* The first CUDA error the device met (allocation aside), or 0. */
int device_cuda_status(CudaDevice *d, Err *err);

#endif
