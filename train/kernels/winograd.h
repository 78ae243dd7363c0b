/*
 * train/kernels/winograd.h - Winograd convolution F(mxm, 3x3) for the tiled
 * conv2d shapes that are 3x3, stride 1, padding 1, one group (most of a
 * ResNet's or VGG's multiplies), forward and backward, on NHWC activations
 * and OHWI weights (the layouts of conv2d.h).
 *
 * Each m x m block of output pixels ("tile") comes from an (m+2)^2 input
 * patch:
 *   Y = A^T [ U (.) V ] A,   U = G g G^T ((m+2)^2 per output/input channel
 *   pair), V = B^T d B ((m+2)^2 per tile and input channel),
 * so the m^2 outputs x 9 taps per channel pair take (m+2)^2 multiplies (16
 * instead of 36 for m = 2, 36 instead of 144 for m = 4), done as (m+2)^2
 * sgemms, one per position xi of the transformed tile:
 *   M[xi] (T, OC) = V[xi] (T, C) x U[xi]^T,  U[xi] stored (OC, C).
 * Backward is the adjoint of that computation (with its own m):
 *   dM = A dY A^T;  dV[xi] = dM[xi] x U[xi];  dx += B dV B^T (overlapping
 *   patches add);  dU[xi] = sum over tiles dM[xi]^T x V[xi];  dw = G^T dU G.
 *
 * Which m: forward F(2x2) and backward F(4x4).  F(4x4)'s transforms scale
 * values by up to 8 x 8 before they cancel, so its fp32 results are ~10x
 * further from the exact ones than im2col's (forward, relative to the
 * largest output: 1e-5 against 7e-7 for F(2x2), tests/unit/test_ops.c), and
 * train-mode batch norm over a small batch passes that on to the loss:
 * resnet50's first loss in test_families moved 2.8e-5 (its bar is 1e-5;
 * im2col 5e-6, F(2x2) 8e-6).  Gradients have looser bars (they already
 * differ by ~1-4% between fp32 implementations) and F(4x4) is where the
 * time goes: backward is two thirds of the multiplies.  resnet18 at
 * 128x128, forward F(2x2) instead of F(4x4) costs ~30 ms a step of ~600.
 * The results differ from im2col + sgemm by rounding only.
 *
 * Tiles go in chunks whose transformed input and output fit
 * GM_WINOGRAD_CHUNK_FLOATS; the workspace (gm_winograd_ws_floats) holds U,
 * dU and one chunk's V and M, and is scratch: forward and backward share
 * nothing through it.  Called from the trainer thread through conv2d.h's
 * layer entry points; sgemm threads as OpenBLAS is told.
 */
#ifndef GM_TRAIN_KERNELS_WINOGRAD_H
#define GM_TRAIN_KERNELS_WINOGRAD_H

#include <stddef.h>

#include "train/kernels/conv2d.h"

#define GM_WINOGRAD_CHUNK_FLOATS (1u << 21) /* one chunk's V and M: 8 MiB */

/* Output tile side of each pass (2 or 4; -D overrides them, for benchmarks). */
#ifndef GM_WINOGRAD_FWD_M
#define GM_WINOGRAD_FWD_M 2
#endif
#ifndef GM_WINOGRAD_BWD_M
#define GM_WINOGRAD_BWD_M 4
#endif

/* 1 when the shape takes the Winograd path: tiled, 3x3, stride 1, pad 1,
 * groups 1, C and OC multiples of 16, output at least 4x4 (smaller outputs
 * waste most of a tile). */
int gm_winograd_use(const struct gm_conv2d_shape *s);
size_t gm_winograd_ws_floats(const struct gm_conv2d_shape *s);
void gm_winograd_forward_cpu(const struct gm_conv2d_shape *s, const float *x, const float *w,
                             const float *b, float *ws, float *y);
/* dw always; db when not NULL; dx when not NULL */
void gm_winograd_backward_cpu(const struct gm_conv2d_shape *s, const float *x, const float *w,
                              const float *dy, float *dw, float *db, float *dx, float *ws);

#endif
