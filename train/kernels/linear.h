/*
 * train/kernels/linear.h - fully connected layer, PyTorch layout.
 *   x (N, IN), w (OUT, IN), b (OUT) -> y (N, OUT) = x w^T + b
 * Backward: dw = dy^T x, db = column sums of dy, dx = dy w (skipped when
 * dx is NULL).  One sgemm each.
 */
#ifndef GM_TRAIN_KERNELS_LINEAR_H
#define GM_TRAIN_KERNELS_LINEAR_H

void gm_linear_forward_cpu(int n, int in, int out, const float *x, const float *w, const float *b,
                           float *y);
void gm_linear_backward_cpu(int n, int in, int out, const float *x, const float *w, const float *dy,
                            float *dw, float *db, float *dx);

#endif
