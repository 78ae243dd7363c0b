/*
 * train/kernels/maxpool.h - max pooling, window = stride = k (no padding;
 * trailing rows/columns that do not fill a window are dropped, as PyTorch's
 * MaxPool2d(k) does), on NHWC activations.
 *   x (N, H, W, C) -> y (N, H/k, W/k, C); arg (N, H/k, W/k, C) holds, for
 *   each output, the window position (0 .. k*k-1) of the maximum (first one
 *   on ties, like PyTorch) that backward routes the gradient to.
 */
#ifndef GM_TRAIN_KERNELS_MAXPOOL_H
#define GM_TRAIN_KERNELS_MAXPOOL_H

#include <stdint.h>

void gm_maxpool_forward_cpu(int n, int h, int w, int c, int k, const float *x, float *y,
                            uint8_t *arg);
void gm_maxpool_backward_cpu(int n, int h, int w, int c, int k, const float *dy,
                             const uint8_t *arg, float *dx);

#endif
