/*
 * train/nn/tensor.c - device memory.  CPU: aligned_alloc(64) + memset.  CUDA:
 * cudaMalloc (and cudaHostAlloc for the host side of copies) through the calling
 * thread's CUDA context (train/kernels/cuda.h), in a build with the CUDA backend and on
 * a thread that made one; otherwise every CUDA request fails with -ENOTSUP.
 */
#include "train/nn/tensor.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "train/kernels/cuda.h"

const char *gm_device_name(enum gm_device dev)
{
    switch (dev) {
    case GM_DEVICE_CPU:
        return "cpu";
    case GM_DEVICE_CUDA:
        return "cuda";
    }
    return "unknown";
}

int gm_device_available(enum gm_device dev)
{
    if (dev == GM_DEVICE_CUDA) /* the backend is built; whether a GPU answers: device.h */
        return gm_cuda_built();
    return dev == GM_DEVICE_CPU;
}

int gm_device_alloc(enum gm_device dev, size_t bytes, void **out)
{
    void *p;
    size_t rounded;

    *out = NULL;
    if (dev == GM_DEVICE_CUDA) /* needs the thread's CUDA context (train/kernels/cuda.h) */
        return gm_cuda_current() != NULL ? gm_cuda_alloc(gm_cuda_current(), bytes, out) : -ENOTSUP;
    if (dev != GM_DEVICE_CPU)
        return -ENOTSUP;
    rounded = (bytes + 63) & ~(size_t)63;
    if (rounded < bytes)
        return -ENOMEM;
    if (rounded == 0)
        rounded = 64;
    p = aligned_alloc(64, rounded);
    if (p == NULL)
        return -ENOMEM;
    memset(p, 0, rounded);
    *out = p;
    return 0;
}

void gm_device_free(enum gm_device dev, void *p)
{
    if (p == NULL)
        return;
    if (dev == GM_DEVICE_CPU)
        free(p);
    else if (dev == GM_DEVICE_CUDA)
        gm_cuda_dealloc(p);
}

int gm_device_host_alloc(enum gm_device dev, size_t bytes, void **out)
{
    *out = NULL;
    if (dev == GM_DEVICE_CUDA)
        return gm_cuda_current() != NULL ? gm_cuda_host_alloc(gm_cuda_current(), bytes, out)
                                         : -ENOTSUP;
    return gm_device_alloc(GM_DEVICE_CPU, bytes, out);
}

void gm_device_host_free(enum gm_device dev, void *p)
{
    if (dev == GM_DEVICE_CUDA)
        gm_cuda_host_dealloc(p);
    else
        gm_device_free(GM_DEVICE_CPU, p);
}

int gm_device_copy(enum gm_device dst_dev, void *dst, enum gm_device src_dev, const void *src,
                   size_t bytes)
{
    if (dst_dev == GM_DEVICE_CUDA || src_dev == GM_DEVICE_CUDA) {
        struct gm_cuda *cu = gm_cuda_current();
        if (cu == NULL)
            return -ENOTSUP;
        return gm_cuda_copy(cu, dst, src, bytes,
                            dst_dev != GM_DEVICE_CUDA   ? GM_CUDA_D2H
                            : src_dev != GM_DEVICE_CUDA ? GM_CUDA_H2D
                                                        : GM_CUDA_D2D);
    }
    if (dst_dev != GM_DEVICE_CPU || src_dev != GM_DEVICE_CPU)
        return -ENOTSUP;
    if (bytes > 0)
        memmove(dst, src, bytes);
    return 0;
}
