/*
 * train/kernels/resid.h - what residual networks add to the layer set, on
 * NHWC activations:
 *   add:       y = a + b (n floats; y may alias a or b): the residual sum,
 *              and the skip gradient added into a layer's dx
 *   shortcut:  ResNet's "option A" projection-free shortcut (He et al. 2015,
 *              CIFAR): subsample by stride, zero-pad the channels on both
 *              sides, as PyTorch's F.pad(x[:, :, ::s, ::s], (0, 0, 0, 0, p, p))
 *              with p = (oc - c) / 2:  x (N, H, W, C) -> y (N, OH, OW, OC),
 *              OH = ceil(H / stride); backward writes every dx element
 *   avgpool:   global average pool x (N, HW, C) -> y (N, C);
 *              backward dx = dy / HW broadcast
 *   nchw_to_nhwc: the model's input staging (NCHW, as datasets store it)
 *              to the internal NHWC layout
 * Pure functions; called from the trainer thread.
 */
#ifndef GM_TRAIN_KERNELS_RESID_H
#define GM_TRAIN_KERNELS_RESID_H

#include <stddef.h>

void gm_add_cpu(size_t n, const float *a, const float *b, float *y);
void gm_shortcut_forward_cpu(int n, int h, int w, int c, int oc, int stride, const float *x,
                             float *y);
void gm_shortcut_backward_cpu(int n, int h, int w, int c, int oc, int stride, const float *dy,
                              float *dx);
void gm_avgpool_forward_cpu(int n, int hw, int c, const float *x, float *y);
void gm_avgpool_backward_cpu(int n, int hw, int c, const float *dy, float *dx);
void gm_nchw_to_nhwc_cpu(int n, int c, int hw, const float *x, float *y);

#endif
