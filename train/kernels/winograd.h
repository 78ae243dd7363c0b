/*
 * train/kernels/winograd.h - Winograd F(4x4, 3x3) convolution for the tiled
 * conv2d shapes that are 3x3, stride 1, padding 1, one group (most of a
 * ResNet's or VGG's multiplies), forward and backward, on NHWC activations
 * and OHWI weights (the layouts of conv2d.h).
 *
 * Each 4x4 block of output pixels ("tile") comes from a 6x6 input patch:
 *   Y = A^T [ U (.) V ] A,   U = G g G^T (6x6 per output/input channel pair),
 *   V = B^T d B (6x6 per tile and input channel),
 * so the 16 outputs x 9 taps = 144 multiplies per channel pair become 36,
 * done as 36 sgemms (one per position xi of the 6x6 grid):
 *   M[xi] (T, OC) = V[xi] (T, C) x U[xi]^T,  U[xi] stored (OC, C).
 * Backward is the exact adjoint of that computation:
 *   dM = A dY A^T;  dV[xi] = dM[xi] x U[xi];  dx += B dV B^T (overlapping
 *   patches add);  dU[xi] = sum over tiles dM[xi]^T x V[xi];  dw = G^T dU G.
 * The results differ from im2col + sgemm by rounding only (the transforms'
 * constants 1/6, 1/12, 1/24 are inexact in binary): measured in
 * tests/unit/test_ops.c against the im2col path.
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
