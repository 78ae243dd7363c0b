/*
 * train/kernels/cuda_plan.h - the CUDA backend's decisions that need no GPU: how a
 * convolution's shape is named in an error.
 * A pure function, compiled in every build (no CUDA header), so tests/unit/test_kernels_host.c
 * checks it in CI; train/nn/ops_cuda.c uses it.
 */
#ifndef GM_TRAIN_KERNELS_CUDA_PLAN_H
#define GM_TRAIN_KERNELS_CUDA_PLAN_H

#include <stddef.h>

#ifdef __cplusplus
extern "C" {
#endif

/* The convolution's shape for an error line: "n=8 c=3 h=32 w=32 oc=16 k=3 stride=1 pad=1". */
void gm_cuda_conv_name(char *buf, size_t len, int n, int c, int h, int w, int oc, int k, int stride,
                       int pad);

#ifdef __cplusplus
}
#endif

#endif
