/*
 * train/kernels/layers_cuda.h - launchers of the layer kernels in layers.cu (see there, and
 * kfn_bn.h for batch norm, for why these are custom).  Device pointers; the context's compute
 * stream; 0 or GM_ERR_GPU. Only in builds with the CUDA backend; called by train/nn/ops_cuda.c on
 * the trainer thread.
 */
#ifndef GM_TRAIN_KERNELS_LAYERS_CUDA_H
#define GM_TRAIN_KERNELS_LAYERS_CUDA_H

#include <stddef.h>
#include <stdint.h>

#include "train/kernels/cuda.h"
#include "train/kernels/maxpool.h"

#ifdef __cplusplus
extern "C" {
#endif

int gm_maxpool_forward_cuda(struct gm_cuda *cu, int n, int h, int w, int c, int k, int relu,
                            const float *x, float *y, uint8_t *arg);
int gm_maxpool_backward_cuda(struct gm_cuda *cu, int n, int h, int w, int c, int k, const float *dy,
                             const uint8_t *arg, float *dx);
int gm_dropout_forward_cuda(struct gm_cuda *cu, size_t n, float p, uint64_t seed, const float *x,
                            float *mask, float *y);
int gm_dropout_backward_cuda(struct gm_cuda *cu, size_t n, const float *mask, const float *dy,
                             float *dx);
int gm_shortcut_forward_cuda(struct gm_cuda *cu, int n, int h, int w, int c, int oc, int stride,
                             const float *x, float *y);
int gm_shortcut_backward_cuda(struct gm_cuda *cu, int n, int h, int w, int c, int oc, int stride,
                              const float *dy, float *dx);
int gm_relu6_forward_cuda(struct gm_cuda *cu, size_t n, const float *x, float *y);
int gm_relu6_backward_cuda(struct gm_cuda *cu, size_t n, const float *y, const float *dy,
                           float *dx);
int gm_maxpool2d_forward_cuda(struct gm_cuda *cu, const struct gm_pool2d_shape *s, int relu,
                              const float *x, float *y, uint8_t *arg);
int gm_maxpool2d_backward_cuda(struct gm_cuda *cu, const struct gm_pool2d_shape *s, const float *dy,
                               const uint8_t *arg, float *dx);
int gm_adapool_forward_cuda(struct gm_cuda *cu, int n, int h, int w, int c, int oh, int ow,
                            const float *x, float *y);
int gm_adapool_backward_cuda(struct gm_cuda *cu, int n, int h, int w, int c, int oh, int ow,
                             const float *dy, float *dx);
/* batchnorm.h's semantics (kfn_bn.h); scratch in the context's workspace */
int gm_batchnorm_forward_cuda(struct gm_cuda *cu, size_t rows, int c, int train, float momentum,
                              float eps, const float *x, const float *gamma, const float *beta,
                              float *running_mean, float *running_var, float *save_mean,
                              float *save_invstd, float *y);
int gm_batchnorm_backward_cuda(struct gm_cuda *cu, size_t rows, int c, const float *x,
                               const float *gamma, const float *save_mean, const float *save_invstd,
                               const float *dy, float *dgamma, float *dbeta, float *dx);

#ifdef __cplusplus
}
#endif

#endif
