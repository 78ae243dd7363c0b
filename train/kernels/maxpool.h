/*
 * train/kernels/maxpool.h - max pooling, window = stride = k (no padding;
 * trailing rows/columns that do not fill a window are dropped, as PyTorch's
 * MaxPool2d(k) does), on NHWC activations, optionally fused with a ReLU
 * before it (relu(pool(x)) == pool(relu(x)), gradients included).
 *   x (N, H, W, C) -> y (N, H/k, W/k, C); arg (N, H/k, W/k, C) holds, for
 *   each output, the window position (0 .. k*k-1, row-major) of the maximum
 *   (the first one on ties, like PyTorch), or GM_MAXPOOL_NONE when the fused
 *   ReLU zeroed the output (no gradient flows).
 * Both directions are branch-free (compare + select): on real data the
 * comparisons are unpredictable, and a branchy loop spent most of its time
 * in mispredictions.  Backward writes every dx element (no separate zeroing).
 */
#ifndef GM_TRAIN_KERNELS_MAXPOOL_H
#define GM_TRAIN_KERNELS_MAXPOOL_H

#include <stdint.h>

#define GM_MAXPOOL_NONE 255

void gm_maxpool_forward_cpu(int n, int h, int w, int c, int k, int relu, const float *x, float *y,
                            uint8_t *arg);
void gm_maxpool_backward_cpu(int n, int h, int w, int c, int k, const float *dy, const uint8_t *arg,
                             float *dx);

#endif
