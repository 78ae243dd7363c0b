/*
 * train/kernels/cuda_plan.c - the CUDA backend's GPU-free decisions (cuda_plan.h has the
 * reasons).  Compiled in every build.
 */
#include "train/kernels/cuda_plan.h"

#include <stdio.h>

void gm_cuda_conv_name(char *buf, size_t len, int n, int c, int h, int w, int oc, int k, int stride,
                       int pad)
{
    snprintf(buf, len, "n=%d c=%d h=%d w=%d oc=%d k=%d stride=%d pad=%d", n, c, h, w, oc, k, stride,
             pad);
}
