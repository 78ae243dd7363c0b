/*
 * train/kernels/cuda.h - the CUDA backend's context: device probe, the trainer thread's
 * device, streams and library handles, device and pinned memory, and error reporting.
 *
 * Design choices (docs/ARCHITECTURE.md "The CUDA backend" ties them together):
 * - One binary with and without a GPU.  The runtime is linked statically (cudart_static),
 *   which dlopen()s the driver at the first call; a machine without a driver or a GPU gets
 *   an error from gm_cuda_device_count() (with the runtime's message) and trains on the
 *   CPU.  In a build without the CUDA backend (no nvcc, CUDA=0, sanitizer builds) every
 *   entry point here exists and answers "no CUDA backend in this build" / -ENOTSUP.
 * - Every CUDA runtime, cuBLAS and cuDNN call goes through gm_cuda_check_*(): a failure
 *   logs one line naming the call and the library's own message (cudaGetErrorString,
 *   cublasGetStatusString, cudnnGetErrorString plus cudnnGetLastErrorString), keeps that
 *   line as the context's last error (gm_cuda_last_error) and becomes GM_ERR_GPU, or
 *   -ENOMEM for out of memory.  Out of memory says how many bytes were asked for and how
 *   many the device has free (cudaMemGetInfo).
 * - The context belongs to one thread, the trainer thread (CUDA's current device is per
 *   thread): it selects the device, owns a compute stream, a copy stream (gradient
 *   buckets go to pinned host buffers on it while backward goes on) and an upload stream
 *   (the next batch goes up on it while the current step computes), and the cuBLAS and
 *   cuDNN handles bound to the compute stream.  Nothing here is global: two
 *   contexts on two threads (two ranks, two GPUs) do not share state.
 * - The op table (train/nn/ops.h, train/nn/ops_cuda.c) calls kernels without a context argument, so
 *   gm_cuda_new() also makes the context the calling thread's current one
 *   (gm_cuda_current(), a thread-local pointer, like CUDA's own per-thread current device;
 *   the only mutable state outside a struct here), and its void entries record their first
 *   error in the context for gm_cuda_take_error().
 * - cuBLAS and cuDNN are not linked but opened by gm_cuda_new() the first time a device is
 *   chosen (cuda_libs.h: search order, errors); `gradmesh --version` and the CPU path never
 *   load them, and a missing library is gm_cuda_new()'s error, naming it.
 * - Memory: device buffers from cudaMalloc (zeroed, as gm_device_alloc promises); pinned
 *   host buffers from cudaHostAlloc for batch uploads and gradient downloads.
 */
#ifndef GM_TRAIN_KERNELS_CUDA_H
#define GM_TRAIN_KERNELS_CUDA_H

#include <stddef.h>

#include "common/err.h"

#ifdef __cplusplus
extern "C" {
#endif

struct gm_cuda;

/* 1 when this build has the CUDA backend. */
int gm_cuda_built(void);

/* Number of CUDA devices the driver reports (>= 1), or a negative error with why (a
 * sentence: no backend in this build, the runtime's message for a missing driver, "no CUDA
 * device") filled when none can be used. */
int gm_cuda_device_count(char *why, size_t whylen) GM_MUST_CHECK;

/* "NVIDIA H100 80GB HBM3, 79.1 GiB, compute 9.0" into buf; 0 or an error. */
int gm_cuda_device_describe(int index, char *buf, size_t len) GM_MUST_CHECK;

/* Makes device `index` current on the calling thread and creates the streams and the
 * cuBLAS and cuDNN handles.  The context must be used and freed on that thread. */
int gm_cuda_new(int index, struct gm_cuda **out) GM_MUST_CHECK;
void gm_cuda_free(struct gm_cuda *cu); /* NULL-safe */

int gm_cuda_index(const struct gm_cuda *cu);
/* The calling thread's context (the last gm_cuda_new on this thread), or NULL. */
struct gm_cuda *gm_cuda_current(void);
/* The first error recorded since the last call (0: none), and clears it. */
int gm_cuda_take_error(struct gm_cuda *cu);
/* The last error this context logged ("" when none); NULL: the last one the calling thread
 * logged, which says why a gm_cuda_new() failed (a CUDA library that did not load, say). */
const char *gm_cuda_last_error(const struct gm_cuda *cu);
/* Convolution algorithms: 0 any (cuDNN's fastest, the default), 1 none of the FFT and
 * Winograd ones, whose fp32 sums are less exact (GM_CUDA_CONV=exact sets 1 at gm_cuda_new).
 * Forgets the algorithms found so far. */
void gm_cuda_conv_exact(struct gm_cuda *cu, int exact);
/* Waits for the compute and copy streams; 0 or GM_ERR_GPU (a kernel's late error). */
int gm_cuda_sync(struct gm_cuda *cu) GM_MUST_CHECK;

/* Device memory, zeroed; -ENOMEM (logged with asked and free bytes) or GM_ERR_GPU. */
int gm_cuda_alloc(struct gm_cuda *cu, size_t bytes, void **out) GM_MUST_CHECK;
void gm_cuda_dealloc(void *p); /* NULL-safe */
/* Pinned (page-locked) host memory, zeroed. */
int gm_cuda_host_alloc(struct gm_cuda *cu, size_t bytes, void **out) GM_MUST_CHECK;
void gm_cuda_host_dealloc(void *p); /* NULL-safe */

enum gm_cuda_copy_kind {
    GM_CUDA_H2D,
    GM_CUDA_D2H,
    GM_CUDA_D2D,
};
/* Synchronous copy on the compute stream (waits for it). */
int gm_cuda_copy(struct gm_cuda *cu, void *dst, const void *src, size_t bytes,
                 enum gm_cuda_copy_kind kind) GM_MUST_CHECK;
/* Asynchronous copy on the copy stream, ordered after the compute stream's work so far
 * (an event); host memory must be pinned.  gm_cuda_sync() or gm_cuda_copy_wait() waits. */
int gm_cuda_copy_async(struct gm_cuda *cu, void *dst, const void *src, size_t bytes,
                       enum gm_cuda_copy_kind kind) GM_MUST_CHECK;
int gm_cuda_copy_wait(struct gm_cuda *cu) GM_MUST_CHECK;

/*
 * Marks: a set of CUDA events the trainer thread uses to order copies against the compute
 * stream without waiting for all of it, and to learn when one copy has finished.  The model
 * (train/nn/model.c) uses them for its double-buffered batch uploads and for the gradient
 * downloads that overlap backward.  A mark never recorded counts as done.
 */
struct gm_cuda_marks;
int gm_cuda_marks_new(struct gm_cuda *cu, int n, struct gm_cuda_marks **out) GM_MUST_CHECK;
void gm_cuda_marks_free(struct gm_cuda_marks *mk); /* NULL-safe */
/* Records mark i on the compute stream, after the work queued there so far. */
int gm_cuda_mark_compute(struct gm_cuda *cu, struct gm_cuda_marks *mk, int i) GM_MUST_CHECK;
/* 1 when mark i's work has finished, 0 when not yet, or an error (logged). */
int gm_cuda_mark_done(struct gm_cuda *cu, struct gm_cuda_marks *mk, int i) GM_MUST_CHECK;
/* Blocks until mark i's work has finished. */
int gm_cuda_mark_wait(struct gm_cuda *cu, struct gm_cuda_marks *mk, int i) GM_MUST_CHECK;
/* gm_cuda_copy_async (device to pinned host memory on the copy stream, after the compute
 * stream's work so far), then records mark i on the copy stream. */
int gm_cuda_download_mark(struct gm_cuda *cu, void *dst_host, const void *src_dev, size_t bytes,
                          struct gm_cuda_marks *mk, int i) GM_MUST_CHECK;
/* A batch upload on the upload stream, overlapping the compute stream's work: waits for
 * mark `after` (recorded on the compute stream once it no longer reads dst), copies bytes
 * of pinned host memory to dst, records mark `done`, and makes the compute stream wait for
 * `done` before its next work. */
int gm_cuda_upload(struct gm_cuda *cu, void *dst_dev, const void *src_host, size_t bytes,
                   struct gm_cuda_marks *mk, int after, int done) GM_MUST_CHECK;

#ifdef __cplusplus
}
#endif

#endif
