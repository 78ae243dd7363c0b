/*
 * train/kernels/cuda_plan.h - the CUDA backend's decisions that need no GPU: how a batch
 * norm's rows are described to cuDNN, and how a convolution's shape is named in an error.
 * Pure functions, compiled in every build (no CUDA header), so tests/unit/test_kernels_host.c
 * checks them in CI; train/nn/ops_cuda.c uses them.
 *
 * Batch norm rows: the op table passes an NHWC activation as (rows, C), rows = N*H*W.  cuDNN
 * limits the N of a spatial batch norm (PyTorch keeps the same two figures in its backend
 * choice: 65,535 rows in inference, 880,801 in training), so ResNet-20 evaluating at
 * batch 128 on 32x32 (131,072 rows) must not describe the rows as N.  Where rows fit the
 * limit the view stays (rows, C, 1, 1) NCHW; past it, NHWC (n, C, h, 1) with n the largest
 * divisor of rows within the limit and h = rows / n: the same memory (row r is n = r / h,
 * y = r % h), and spatial batch norm reduces over N, H and W alike, so the statistics are
 * those of all the rows.
 */
#ifndef GM_TRAIN_KERNELS_CUDA_PLAN_H
#define GM_TRAIN_KERNELS_CUDA_PLAN_H

#include <stddef.h>

#include "common/err.h"

#ifdef __cplusplus
extern "C" {
#endif

/* cuDNN's batch-norm N limits (inference, training; backward is training's). */
#define GM_CUDA_BN_MAX_N_INFER 65535
#define GM_CUDA_BN_MAX_N_TRAIN 880801

/* A batch norm's x/y descriptor: (n, c, h, 1), in NHWC when nhwc, else NCHW (then h == 1). */
struct gm_cuda_bn_view {
    int n, h;
    int nhwc;
};

/* The view of rows (>= 1) for a training (or backward) call when train, else inference.
 * 0, or -EINVAL when rows is 0 or past INT_MAX * the limit (no int n, h). */
int gm_cuda_bn_view(size_t rows, int train, struct gm_cuda_bn_view *out) GM_MUST_CHECK;

/* The convolution's shape for an error line: "n=8 c=3 h=32 w=32 oc=16 k=3 stride=1 pad=1". */
void gm_cuda_conv_name(char *buf, size_t len, int n, int c, int h, int w, int oc, int k, int stride,
                       int pad);

#ifdef __cplusplus
}
#endif

#endif
