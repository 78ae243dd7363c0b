/*
 * train/kernels/cuda_plan.c - the CUDA backend's GPU-free decisions (cuda_plan.h has the
 * reasons).  Compiled in every build.
 */
#include "train/kernels/cuda_plan.h"

#include <errno.h>
#include <limits.h>
#include <stdio.h>

int gm_cuda_bn_view(size_t rows, int train, struct gm_cuda_bn_view *out)
{
    const size_t limit = train ? GM_CUDA_BN_MAX_N_TRAIN : GM_CUDA_BN_MAX_N_INFER;
    size_t best = 1;

    out->n = out->h = 0;
    out->nhwc = 0;
    if (rows == 0)
        return -EINVAL;
    if (rows <= limit) {
        out->n = (int)rows;
        out->h = 1;
        return 0;
    }
    /* the largest divisor within the limit: walk the small divisors d, each pairs with
     * rows / d */
    for (size_t d = 1; d <= rows / d; d++) {
        if (rows % d != 0)
            continue;
        if (d <= limit && d > best)
            best = d;
        if (rows / d <= limit && rows / d > best)
            best = rows / d;
    }
    if (rows / best > (size_t)INT_MAX)
        return -EINVAL;
    out->n = (int)best;
    out->h = (int)(rows / best);
    out->nhwc = 1;
    return 0;
}

void gm_cuda_conv_name(char *buf, size_t len, int n, int c, int h, int w, int oc, int k, int stride,
                       int pad)
{
    snprintf(buf, len, "n=%d c=%d h=%d w=%d oc=%d k=%d stride=%d pad=%d", n, c, h, w, oc, k, stride,
             pad);
}
