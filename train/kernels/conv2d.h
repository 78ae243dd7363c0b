/*
 * train/kernels/conv2d.h - 2-D convolution: any square kernel, stride, zero
 * padding and group count (grouped and depthwise included), on NHWC
 * activations.
 *
 * Layouts (chosen for speed; the checkpoint exporter converts to PyTorch's):
 *   x    (N, H, W, C)            input, NHWC
 *   w    (OC, KH, KW, C/G)       weights, "OHWI" (G = groups; output channel o
 *                                belongs to group o / (OC/G) and sees input
 *                                channels [g*C/G, (g+1)*C/G)): one im2col row
 *                                is KH runs of KW*C contiguous input floats,
 *                                so im2col is a handful of memcpy per pixel
 *   b    (OC)
 *   col  (N*OH*OW, KH*KW*C)      im2col matrix, kept from forward for dW
 *   y    (N, OH, OW, OC)         = col x w^T + b: one sgemm for the whole batch
 * Backward: dW = dy^T x col, db = column sums of dy, dcol = dy x w,
 * dx = col2im(dcol) (skipped when dx is NULL: the first layer).
 * b and db may be NULL: a convolution without bias (before a batch norm).
 *
 * Two regimes, chosen by the shape (s->tiled), never by the data:
 *  - whole batch (tiled == 0, what gm_conv2d_shape_init gives; groups 1): the
 *    original path, bit for bit: col of the whole batch lives in the layer's
 *    workspace from forward to backward.
 *  - tiled (tiled == 1, gm_conv2d_shape_init_groups): the workspace is
 *    bounded (a tile of GM_CONV2D_TILE_FLOATS, or of at least MIN_ROWS and
 *    2 * OC/G pixels when rows are long: never more than a tile as large as
 *    the layer's weights, whatever the batch and image size) and is
 *    scratch only: backward recomputes im2col tile by tile from x, so layers
 *    may share one workspace.  1x1 stride-1 unpadded convolutions use x as col
 *    (no copy, no workspace); depthwise ones (groups == C == OC) a direct
 *    kernel; other grouped ones im2col + sgemm per group.
 *
 * CPU twin here (OpenBLAS sgemm); the CUDA twin is cuDNN (train/nn/ops_cuda.c).
 * Called from the trainer thread.
 */
#ifndef GM_TRAIN_KERNELS_CONV2D_H
#define GM_TRAIN_KERNELS_CONV2D_H

#include <stddef.h>

struct gm_conv2d_shape {
    int n, h, w, c; /* input */
    int oc, k, pad; /* output channels, kernel size, zero padding */
    int stride;     /* >= 1, both axes */
    int oh, ow;     /* output: (h + 2*pad - k) / stride + 1, same for w */
    int groups;     /* >= 1, divides c and oc (1: an ordinary convolution) */
    int tiled;      /* 0: the whole-batch path; 1: bounded scratch workspace (above) */
};

/* Fills oh/ow, groups = 1, tiled = 0 (the whole-batch path); returns 0, or
 * -EINVAL when the kernel does not fit. */
int gm_conv2d_shape_init(struct gm_conv2d_shape *s, int n, int h, int w, int c, int oc, int k,
                         int pad, int stride);
/* Same with groups (groups == c == oc: depthwise) and tiled = 1; -EINVAL also
 * when groups does not divide c and oc. */
int gm_conv2d_shape_init_groups(struct gm_conv2d_shape *s, int n, int h, int w, int c, int oc,
                                int k, int pad, int stride, int groups);

void gm_conv2d_im2col_cpu(const struct gm_conv2d_shape *s, const float *x, float *col);
void gm_conv2d_col2im_cpu(const struct gm_conv2d_shape *s, const float *col, float *dx);

void gm_conv2d_forward_cpu(const struct gm_conv2d_shape *s, const float *x, const float *w,
                           const float *b, float *col, float *y);
void gm_conv2d_backward_cpu(const struct gm_conv2d_shape *s, const float *col, const float *w,
                            const float *dy, float *dw, float *db, float *dcol, float *dx);

/*
 * Direct convolution (stride 1 only) for layers with at most 8 output channels whose input
 * gradient is not needed (the first layer of a CNN: few input channels,
 * where im2col would copy tiny runs and dominate).  All output channels of
 * one pixel live in one 8-lane vector; weights are repacked per call into
 * wpack (k*k*c vectors of 8 floats, caller-provided, 32-byte aligned).  No
 * im2col buffer: backward reads x again.
 */
#define GM_CONV2D_DIRECT_MAX_OC 8
int gm_conv2d_use_direct(const struct gm_conv2d_shape *s, int need_dx);
size_t gm_conv2d_direct_pack_floats(const struct gm_conv2d_shape *s);
void gm_conv2d_direct_forward_cpu(const struct gm_conv2d_shape *s, const float *x, const float *w,
                                  const float *b, float *wpack, float *y);
void gm_conv2d_direct_backward_cpu(const struct gm_conv2d_shape *s, const float *x, const float *dy,
                                   float *dw, float *db, float *accbuf);

/*
 * The layer entry points (what the op table, train/nn/ops.h, calls): pick the
 * direct kernel or im2col + sgemm for the shape, and carve their buffers from
 * one workspace of gm_conv2d_layer_ws_floats_cpu(s, need_dx) floats (64-byte
 * aligned; may be 0 for a tiled shape): the direct kernel's packed weights,
 * or col then dcol (dcol only when need_dx).  forward and backward must see
 * the same shape, need_dx and workspace size; for a whole-batch shape
 * backward reads what forward left there (col), and x again; for a tiled
 * shape the workspace is scratch.  need_dx == (dx != NULL) in backward.
 * The size grows with s->n, so a workspace sized for the largest batch
 * serves smaller ones.
 */
#define GM_CONV2D_TILE_FLOATS (1u << 18) /* a tiled shape's col tile: 1 MiB */
#define GM_CONV2D_TILE_MIN_ROWS 128      /* output pixels a tile holds at least (and 2 OC/G) */
size_t gm_conv2d_layer_ws_floats_cpu(const struct gm_conv2d_shape *s, int need_dx);
void gm_conv2d_layer_forward_cpu(const struct gm_conv2d_shape *s, int need_dx, const float *x,
                                 const float *w, const float *b, float *ws, float *y);
void gm_conv2d_layer_backward_cpu(const struct gm_conv2d_shape *s, const float *x, const float *w,
                                  const float *dy, float *dw, float *db, float *dx, float *ws);

#endif
