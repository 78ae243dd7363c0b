/*
 * train/nn/ops.c - the dispatcher: device -> op table (see ops.h).  The CPU
 * table is in ops_cpu.c; a backend adds its extern table here under its
 * build flag.
 */
#include "train/nn/ops.h"

#ifdef GM_HAVE_CUDA
extern const struct gm_ops gm_ops_cuda;
#endif

const struct gm_ops *gm_ops_get(enum gm_device dev)
{
    switch (dev) {
    case GM_DEVICE_CPU:
        return &gm_ops_cpu;
    case GM_DEVICE_CUDA:
#ifdef GM_HAVE_CUDA
        return &gm_ops_cuda;
#else
        return NULL;
#endif
    }
    return NULL;
}
