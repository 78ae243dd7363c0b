/*
 * train/kernels/act.h - elementwise activations and dropout.
 *   relu:    y = max(x, 0); backward dx = dy where y > 0, else 0
 *   relu6:   y = min(max(x, 0), 6) (torch.nn.ReLU6); backward dx = dy where
 *            0 < y < 6, else 0 (PyTorch's hardtanh gradient: none at the
 *            clamps; y stands for x, since 0 < y < 6 exactly where 0 < x < 6)
 *   dropout: training only; mask[i] = 0 or 1/(1-p) drawn from a counter-based
 *            hash of (seed, i), so a step's mask depends only on its seed;
 *            y = x * mask, dx = dy * mask
 */
#ifndef GM_TRAIN_KERNELS_ACT_H
#define GM_TRAIN_KERNELS_ACT_H

#include <stddef.h>
#include <stdint.h>

void gm_relu_forward_cpu(size_t n, const float *x, float *y);
void gm_relu_backward_cpu(size_t n, const float *y, const float *dy, float *dx);
void gm_relu6_forward_cpu(size_t n, const float *x, float *y);
void gm_relu6_backward_cpu(size_t n, const float *y, const float *dy, float *dx);
void gm_dropout_forward_cpu(size_t n, float p, uint64_t seed, const float *x, float *mask,
                            float *y);
void gm_dropout_backward_cpu(size_t n, const float *mask, const float *dy, float *dx);

#endif
