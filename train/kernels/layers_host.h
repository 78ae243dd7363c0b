/*
 * train/kernels/layers_host.h - host twins of the layer kernels whose bodies live in
 * train/kernels/kfn_layers.h and kfn_bn.h (the __global__ builds are in layers.cu, launched through
 * layers_cuda.h): each calls the body for every (block, thread) of the grid l, in order, on
 * the calling thread.  Not the CPU path (act_cpu.c, maxpool_cpu.c, avgpool_cpu.c are):
 * tests/unit/test_kernels_host.c checks these against it, so CI tests the CUDA kernels'
 * indexing and arithmetic without a GPU.  Host pointers; pure functions.
 */
#ifndef GM_TRAIN_KERNELS_LAYERS_HOST_H
#define GM_TRAIN_KERNELS_LAYERS_HOST_H

#include <stddef.h>
#include <stdint.h>

#include "train/kernels/custom.h"
#include "train/kernels/maxpool.h"

void gm_krelu6_forward_host(struct gm_klaunch l, size_t n, const float *x, float *y);
void gm_krelu6_backward_host(struct gm_klaunch l, size_t n, const float *y, const float *dy,
                             float *dx);
void gm_kmaxpool2d_forward_host(struct gm_klaunch l, const struct gm_pool2d_shape *s, int relu,
                                const float *x, float *y, uint8_t *arg);
void gm_kmaxpool2d_backward_host(struct gm_klaunch l, const struct gm_pool2d_shape *s,
                                 const float *dy, const uint8_t *arg, float *dx);
void gm_kadapool_forward_host(struct gm_klaunch l, int n, int h, int w, int c, int oh, int ow,
                              const float *x, float *y);
void gm_kadapool_backward_host(struct gm_klaunch l, int n, int h, int w, int c, int oh, int ow,
                               const float *dy, float *dx);
/* batch norm (kfn_bn.h), scratch from malloc: 0 or -ENOMEM */
int gm_kbatchnorm_forward_host(struct gm_klaunch l, size_t rows, int c, int train, float momentum,
                               float eps, const float *x, const float *gamma, const float *beta,
                               float *running_mean, float *running_var, float *save_mean,
                               float *save_invstd, float *y);
int gm_kbatchnorm_backward_host(struct gm_klaunch l, size_t rows, int c, const float *x,
                                const float *gamma, const float *save_mean,
                                const float *save_invstd, const float *dy, float *dgamma,
                                float *dbeta, float *dx);

#endif
