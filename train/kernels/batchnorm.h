/*
 * train/kernels/batchnorm.h - batch normalization over the channels of NHWC
 * activations (BatchNorm2d; BatchNorm1d is the same with H = W = 1).
 *
 *   x, y (rows = N*H*W, C); gamma, beta, running_mean, running_var,
 *   save_mean, save_invstd (C)
 * Training (PyTorch's semantics): per channel mean and biased variance over
 * the rows; y = (x - mean) * invstd * gamma + beta with invstd =
 * 1/sqrt(var + eps); running_mean = (1-momentum)*running_mean +
 * momentum*mean, running_var likewise with the unbiased variance
 * (var * rows/(rows-1); rows == 1 leaves running_var alone, where torch
 * refuses the batch).  save_mean/save_invstd keep mean and invstd for the
 * backward pass.
 * Evaluation: y = (x - running_mean) / sqrt(running_var + eps) * gamma + beta;
 * nothing is written but y.
 * Backward (training mode): with xhat = (x - mean) * invstd,
 *   dbeta = sum dy, dgamma = sum dy*xhat,
 *   dx = gamma*invstd/rows * (rows*dy - dbeta - xhat*dgamma)   (dx may be NULL).
 * Statistics are summed in double, in blocks of channels, two passes (mean,
 * then the centred squares), so the result does not depend on the batch's
 * offset.  Pure functions; called from the trainer thread.
 */
#ifndef GM_TRAIN_KERNELS_BATCHNORM_H
#define GM_TRAIN_KERNELS_BATCHNORM_H

#include <stddef.h>

void gm_batchnorm_forward_cpu(size_t rows, int c, int train, float momentum, float eps,
                              const float *x, const float *gamma, const float *beta,
                              float *running_mean, float *running_var, float *save_mean,
                              float *save_invstd, float *y);
void gm_batchnorm_backward_cpu(size_t rows, int c, const float *x, const float *gamma,
                               const float *save_mean, const float *save_invstd, const float *dy,
                               float *dgamma, float *dbeta, float *dx);

#endif
