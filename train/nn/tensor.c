/*
 * train/nn/tensor.c - device memory.  CPU: aligned_alloc(64) + memset.  CUDA:
 * only in a build with the CUDA backend (GM_HAVE_CUDA); otherwise every CUDA
 * request fails with -ENOTSUP.
 */
#include "train/nn/tensor.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

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
    return dev == GM_DEVICE_CPU;
}

int gm_device_parse(const char *s, enum gm_device *out)
{
    if (strcmp(s, "cpu") == 0 || strcmp(s, "auto") == 0) {
        *out = GM_DEVICE_CPU;
        return 0;
    }
    if (strcmp(s, "cuda") == 0) {
        *out = GM_DEVICE_CUDA;
        return gm_device_available(GM_DEVICE_CUDA) ? 0 : -ENOTSUP;
    }
    return -EINVAL;
}

int gm_device_alloc(enum gm_device dev, size_t bytes, void **out)
{
    void *p;
    size_t rounded;

    *out = NULL;
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
}

int gm_device_copy(enum gm_device dst_dev, void *dst, enum gm_device src_dev, const void *src,
                   size_t bytes)
{
    if (dst_dev != GM_DEVICE_CPU || src_dev != GM_DEVICE_CPU)
        return -ENOTSUP;
    if (bytes > 0)
        memmove(dst, src, bytes);
    return 0;
}
