/*
 * train/nn/ops.h - the per-op dispatcher: one table of kernels per device.
 *
 * The model (train/nn/model.c) and the optimizer (train/nn/optim.c) never
 * call a kernel by name: they fetch the table of the device their buffers
 * live on with gm_ops_get() once, at creation, and call through it.  The CPU
 * table (train/nn/ops_cpu.c) is the definition of correct; a backend for
 * another device provides the same entries, every one of them (no NULL
 * entry), and an op test checks it against the CPU table.
 *
 * Registering a backend: the table is `const struct gm_ops gm_ops_<dev>` in
 * the backend's own file, and gm_ops_get() (train/nn/ops.c) returns it for
 * its device when the build has it (GM_HAVE_CUDA for gm_ops_cuda).  Tables
 * are constant: no registration call, no mutable global.  A device without a
 * table in this build gets NULL, and the model and optimizer refuse it with
 * -ENOTSUP.
 *
 * Contract of every entry:
 *  - Plain C: pointers and sizes.  Every float/uint8 pointer is memory of the
 *    table's device (gm_device_alloc), activations NHWC, conv weights OHWI
 *    (train/kernels/conv2d.h), linear weights (OUT, IN); shapes and scalars
 *    are host values.  labels (xent) live on the device as well.
 *  - Results the host needs come back as return values (the loss, the hash)
 *    or host out-parameters (correct): a backend synchronizes for those.
 *  - Entries return void: the shapes were checked when the model was built,
 *    and a backend that can fail at run time (a CUDA launch) records its
 *    first error and reports it from the model's next fallible call.
 *  - Optional outputs are NULL when not wanted: dx (the input gradient of
 *    the first compute layer), bias b/db (convolutions before a batch norm),
 *    correct (xent).
 *  - Same device thread as the caller (the trainer thread); no re-entrancy.
 *
 * Ops (each documented in the kernel header named):
 *   layout      nchw_to_nhwc                          kernels/resid.h
 *   conv2d      conv2d_ws_floats, conv2d_forward,     kernels/conv2d.h
 *               conv2d_backward                       (gm_conv2d_layer_*; groups,
 *                                                     depthwise: the shape says)
 *   linear      linear_forward, linear_backward       kernels/linear.h
 *   maxpool     maxpool_forward, maxpool_backward     kernels/maxpool.h (k x k)
 *   maxpool2d   maxpool2d_forward/backward            kernels/maxpool.h (k, stride, pad)
 *   relu        relu_forward, relu_backward           kernels/act.h
 *   relu6       relu6_forward, relu6_backward         kernels/act.h
 *   dropout     dropout_forward, dropout_backward     kernels/act.h
 *   batchnorm   batchnorm_forward, batchnorm_backward kernels/batchnorm.h
 *   residual    add, shortcut_forward/backward        kernels/resid.h
 *   avgpool     avgpool_forward, avgpool_backward     kernels/resid.h (global)
 *   adaptive    adaptive_avgpool_forward/backward     kernels/avgpool.h (to OH x OW)
 *   loss        xent                                  kernels/xent.h
 *   optimizer   sgd_update, adam_update               kernels/update.h
 *   hash        param_hash (the replicas' check)      comm/coll_wire.h gm_coll_hash
 *   wire        grad_encode, grad_decode_add          comm/codec.h (fp32/fp16/bf16; q8, DiLoCo's
 *                                                     8-bit deltas, is host-only: the CUDA
 *                                                     table leaves it alone)
 */
#ifndef GM_TRAIN_NN_OPS_H
#define GM_TRAIN_NN_OPS_H

#include <stddef.h>
#include <stdint.h>

#include "train/comm/codec.h"
#include "train/kernels/conv2d.h"
#include "train/kernels/maxpool.h"
#include "train/kernels/update.h"
#include "train/nn/tensor.h"

struct gm_ops {
    const char *name; /* "cpu", "cuda" */

    void (*nchw_to_nhwc)(int n, int c, int hw, const float *x, float *y);

    size_t (*conv2d_ws_floats)(const struct gm_conv2d_shape *s, int need_dx);
    void (*conv2d_forward)(const struct gm_conv2d_shape *s, int need_dx, const float *x,
                           const float *w, const float *b, float *ws, float *y);
    void (*conv2d_backward)(const struct gm_conv2d_shape *s, const float *x, const float *w,
                            const float *dy, float *dw, float *db, float *dx, float *ws);

    void (*linear_forward)(int n, int in, int out, const float *x, const float *w, const float *b,
                           float *y);
    void (*linear_backward)(int n, int in, int out, const float *x, const float *w, const float *dy,
                            float *dw, float *db, float *dx);

    void (*maxpool_forward)(int n, int h, int w, int c, int k, int relu, const float *x, float *y,
                            uint8_t *arg);
    void (*maxpool_backward)(int n, int h, int w, int c, int k, const float *dy, const uint8_t *arg,
                             float *dx);

    void (*maxpool2d_forward)(const struct gm_pool2d_shape *s, int relu, const float *x, float *y,
                              uint8_t *arg);
    void (*maxpool2d_backward)(const struct gm_pool2d_shape *s, const float *dy, const uint8_t *arg,
                               float *dx);

    void (*relu_forward)(size_t n, const float *x, float *y);
    void (*relu_backward)(size_t n, const float *y, const float *dy, float *dx);
    void (*relu6_forward)(size_t n, const float *x, float *y);
    void (*relu6_backward)(size_t n, const float *y, const float *dy, float *dx);
    void (*dropout_forward)(size_t n, float p, uint64_t seed, const float *x, float *mask,
                            float *y);
    void (*dropout_backward)(size_t n, const float *mask, const float *dy, float *dx);

    void (*batchnorm_forward)(size_t rows, int c, int train, float momentum, float eps,
                              const float *x, const float *gamma, const float *beta,
                              float *running_mean, float *running_var, float *save_mean,
                              float *save_invstd, float *y);
    void (*batchnorm_backward)(size_t rows, int c, const float *x, const float *gamma,
                               const float *save_mean, const float *save_invstd, const float *dy,
                               float *dgamma, float *dbeta, float *dx);

    void (*add)(size_t n, const float *a, const float *b, float *y);
    void (*shortcut_forward)(int n, int h, int w, int c, int oc, int stride, const float *x,
                             float *y);
    void (*shortcut_backward)(int n, int h, int w, int c, int oc, int stride, const float *dy,
                              float *dx);
    void (*avgpool_forward)(int n, int hw, int c, const float *x, float *y);
    void (*avgpool_backward)(int n, int hw, int c, const float *dy, float *dx);
    void (*adaptive_avgpool_forward)(int n, int h, int w, int c, int oh, int ow, const float *x,
                                     float *y);
    void (*adaptive_avgpool_backward)(int n, int h, int w, int c, int oh, int ow, const float *dy,
                                      float *dx);

    double (*xent)(int n, int k, const float *logits, const int32_t *labels, float *dlogits,
                   long *correct);

    void (*sgd_update)(size_t n, float *p, const float *g, float *buf, float lr, float wd, float mu,
                       int nesterov);
    void (*adam_update)(size_t n, float *p, const float *g, float *m, float *v,
                        const struct gm_adam_scalars *k);

    uint64_t (*param_hash)(const void *buf, size_t nbytes);
    void (*grad_encode)(enum gm_codec c, const float *in, size_t n, void *out);
    void (*grad_decode_add)(enum gm_codec c, const void *in, const float *x, size_t n, float *out);
};

extern const struct gm_ops gm_ops_cpu;

/* The table for dev in this build, or NULL (-ENOTSUP for the caller). */
const struct gm_ops *gm_ops_get(enum gm_device dev);

#endif
