/*
 * train/kernels/avgpool.h - adaptive average pooling on NHWC activations, as
 * torch.nn.AdaptiveAvgPool2d((oh, ow)): output cell (i, j) averages input
 * rows [floor(i*h/oh), ceil((i+1)*h/oh)) and the same for columns, so cells
 * may overlap (or repeat an input, when oh > h: VGG's 7x7 pool over a 4x4
 * map).  oh = ow = 1 is global average pooling.
 *   x (N, H, W, C) -> y (N, OH, OW, C); y = (sum of the cell in row-major
 *   order) / cell rows / cell columns, PyTorch's arithmetic.
 *   backward: dx gets dy / rows / cols from every cell it lies in, summed in
 *   output order; every dx element is written.
 * Pure functions; called from the trainer thread.
 */
#ifndef GM_TRAIN_KERNELS_AVGPOOL_H
#define GM_TRAIN_KERNELS_AVGPOOL_H

/* The cell of output index i along an axis of n inputs pooled to on outputs. */
static inline int gm_adapool_start(int i, int n, int on)
{
    return (int)(((long long)i * n) / on);
}

static inline int gm_adapool_end(int i, int n, int on)
{
    return (int)(((long long)(i + 1) * n + on - 1) / on);
}

void gm_adaptive_avgpool_forward_cpu(int n, int h, int w, int c, int oh, int ow, const float *x,
                                     float *y);
void gm_adaptive_avgpool_backward_cpu(int n, int h, int w, int c, int oh, int ow, const float *dy,
                                      float *dx);

#endif
