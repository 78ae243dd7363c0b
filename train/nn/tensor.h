/*
 * train/nn/tensor.h - devices and tensors.
 *
 * A tensor is a view: a pointer, a shape and the device its memory lives on.
 * Parameters, gradients and optimizer state are each one flat buffer carved
 * into views (see train/nn/model.h), so tensors rarely own memory; activations
 * are per-layer buffers owned by the model.  Memory comes from
 * gm_device_alloc(), which knows every device: CPU memory is 64-byte aligned
 * (AVX-512 friendly, one cache line).  CUDA memory arrives with the CUDA
 * backend; in a build without it every CUDA entry point returns
 * -ENOTSUP (the house error for "not on this device"; there is no
 * project-specific device code), so callers can test for it instead of
 * crashing.  Kernels are reached through the device's op table,
 * train/nn/ops.h.
 *
 * Thread-safety: plain data; a tensor is used by one thread at a time (the
 * trainer thread).
 */
#ifndef GM_TRAIN_NN_TENSOR_H
#define GM_TRAIN_NN_TENSOR_H

#include <stddef.h>
#include <stdint.h>

#include "common/err.h"

enum gm_device {
    GM_DEVICE_CPU = 0,
    GM_DEVICE_CUDA = 1,
};

#define GM_TENSOR_MAX_DIMS 4

struct gm_tensor {
    float *data; /* borrowed unless noted by the owner */
    enum gm_device device;
    int ndim;
    int64_t shape[GM_TENSOR_MAX_DIMS];
};

const char *gm_device_name(enum gm_device dev);
/* True when this build has kernels for the device (CUDA: the backend is built; whether a
 * GPU answers is gm_device_choose's probe, train/nn/device.h). */
int gm_device_available(enum gm_device dev);
/* The device setting (auto | cpu | cuda[:N]) and its resolution: train/nn/device.h. */

/* Zero-initialised device memory; *out = NULL on error. */
int gm_device_alloc(enum gm_device dev, size_t bytes, void **out) GM_MUST_CHECK;
void gm_device_free(enum gm_device dev, void *p);
/* Host memory that copies to and from dev use: pinned (page-locked, cudaHostAlloc) for
 * CUDA, so copies run asynchronously at full speed; plain gm_device_alloc memory for the
 * CPU.  Zeroed; *out = NULL on error. */
int gm_device_host_alloc(enum gm_device dev, size_t bytes, void **out) GM_MUST_CHECK;
void gm_device_host_free(enum gm_device dev, void *p);
/* Copies between host and device memory (either side may be CPU). */
int gm_device_copy(enum gm_device dst_dev, void *dst, enum gm_device src_dev, const void *src,
                   size_t bytes) GM_MUST_CHECK;

static inline int64_t gm_tensor_numel(const struct gm_tensor *t)
{
    int64_t n = 1;
    for (int i = 0; i < t->ndim; i++)
        n *= t->shape[i];
    return n;
}

#endif
