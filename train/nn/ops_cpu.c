/*
 * train/nn/ops_cpu.c - the CPU op table: the reference every other backend
 * is tested against.  Each entry is the CPU kernel itself (no wrappers), so
 * the dispatch costs one indirect call per layer.
 */
#include "train/comm/coll_wire.h"
#include "train/kernels/act.h"
#include "train/kernels/avgpool.h"
#include "train/kernels/batchnorm.h"
#include "train/kernels/linear.h"
#include "train/kernels/maxpool.h"
#include "train/kernels/resid.h"
#include "train/kernels/xent.h"
#include "train/nn/ops.h"

const struct gm_ops gm_ops_cpu = {
    .name = "cpu",
    .nchw_to_nhwc = gm_nchw_to_nhwc_cpu,
    .conv2d_ws_floats = gm_conv2d_layer_ws_floats_cpu,
    .conv2d_forward = gm_conv2d_layer_forward_cpu,
    .conv2d_backward = gm_conv2d_layer_backward_cpu,
    .linear_forward = gm_linear_forward_cpu,
    .linear_backward = gm_linear_backward_cpu,
    .maxpool_forward = gm_maxpool_forward_cpu,
    .maxpool_backward = gm_maxpool_backward_cpu,
    .maxpool2d_forward = gm_maxpool2d_forward_cpu,
    .maxpool2d_backward = gm_maxpool2d_backward_cpu,
    .relu_forward = gm_relu_forward_cpu,
    .relu_backward = gm_relu_backward_cpu,
    .relu6_forward = gm_relu6_forward_cpu,
    .relu6_backward = gm_relu6_backward_cpu,
    .dropout_forward = gm_dropout_forward_cpu,
    .dropout_backward = gm_dropout_backward_cpu,
    .batchnorm_forward = gm_batchnorm_forward_cpu,
    .batchnorm_backward = gm_batchnorm_backward_cpu,
    .add = gm_add_cpu,
    .shortcut_forward = gm_shortcut_forward_cpu,
    .shortcut_backward = gm_shortcut_backward_cpu,
    .avgpool_forward = gm_avgpool_forward_cpu,
    .avgpool_backward = gm_avgpool_backward_cpu,
    .adaptive_avgpool_forward = gm_adaptive_avgpool_forward_cpu,
    .adaptive_avgpool_backward = gm_adaptive_avgpool_backward_cpu,
    .xent = gm_xent_cpu,
    .sgd_update = gm_sgd_update_cpu,
    .adam_update = gm_adam_update_cpu,
    .param_hash = gm_coll_hash,
    .grad_encode = gm_codec_encode,
    .grad_decode_add = gm_codec_decode_add,
};
