/*
 * train/nn/ops_cuda.c - the CUDA op table (train/nn/ops.h: gm_ops_cuda), in builds with
 * the CUDA backend.
 *
 * Choices:
 * - Library calls wherever one fits the table's contract: linear through cuBLAS (row-major
 *   operands passed as their column-major transposes, so no copy); convolution,
 *   ReLU, global average pooling, the NCHW -> NHWC input transform and the bias gradients
 *   through cuDNN.  Custom kernels only where none fits: the loss, the optimizer updates,
 *   the wire codecs and the hash (custom.cu, host twins tested in CI), batch norm (cuDNN's
 *   took 87% of ResNet-20's GPU time on an H200: kfn_bn.h), and max pooling with
 *   the CPU's argmax bytes, dropout with the CPU's mask, the ResNet shortcut, and the
 *   torchvision families' ReLU6, padded max pooling and adaptive average pooling (layers.cu).
 *   Grouped and depthwise convolutions are cuDNN's (cudnnSetConvolutionGroupCount).
 * - fp32 means fp32: cuBLAS in pedantic math mode and cuDNN convolutions with
 *   CUDNN_FMA_MATH, so no TF32 rounding (the tolerances of tests/unit/test_cuda_ops.c are
 *   fp32 ones).
 * - Convolution algorithms: found once per shape with cudnnFind* (which times them on this
 *   GPU) and kept in the context's cache of GM_CUDA_ALGO_CACHE shapes (a model has a
 *   handful; a full cache evicts round robin).  The workspace is the context's, grown to the
 *   largest algorithm's need, so conv2d_ws_floats is 0: nothing per layer.
 * - Activations are NHWC: cuDNN tensors are described as NHWC (convolution, pooling) or as
 *   (rows, C, 1, 1) NCHW, which is the same memory (bias).
 * - Entries return void (ops.h): a failing call is logged with the library's message by
 *   gm_cuda_check_* and its first error kept in the context (gm_cuda_take_error); the entry
 *   returns without touching its outputs further.  The context is the calling thread's
 *   (gm_cuda_current); calling the table on a thread without one is a programmer error.
 * - Everything runs on the context's compute stream; only the loss and the hash wait for it
 *   (their results go to the host).
 */
#include "train/nn/ops.h"

#if defined(GM_HAVE_CUDA) && GM_HAVE_CUDA

#include <math.h>
#include <stdio.h>
#include <string.h>

#include "common/assert.h"
#include "common/log.h"
#include "train/kernels/cuda_ctx.h"
#include "train/kernels/cuda_libs.h"
#include "train/kernels/cuda_plan.h"
#include "train/kernels/custom.h"
#include "train/kernels/layers_cuda.h"

static const float one = 1.0f, zero = 0.0f;

/* A launcher's status: already logged and kept as the context's first error (cuda.h). */
static void recorded(int err)
{
    (void)err;
}

static struct gm_cuda *ctx(void)
{
    struct gm_cuda *cu = gm_cuda_current();
    GM_ASSERT(cu != NULL); /* the CUDA table needs the trainer thread's context */
    return cu;
}

/* x (n, c, h, w) described in layout fmt */
static int tensor(struct gm_cuda *cu, cudnnTensorDescriptor_t d, cudnnTensorFormat_t fmt, int n,
                  int c, int h, int w)
{
    return gm_cuda_check_dnn(cu, cudnnSetTensor4dDescriptor(d, fmt, CUDNN_DATA_FLOAT, n, c, h, w),
                             "cudnnSetTensor4dDescriptor");
}

static void nchw_to_nhwc(int n, int c, int hw, const float *x, float *y)
{
    struct gm_cuda *cu = ctx();

    if (tensor(cu, cu->td[0], CUDNN_TENSOR_NCHW, n, c, hw, 1) < 0 ||
        tensor(cu, cu->td[1], CUDNN_TENSOR_NHWC, n, c, hw, 1) < 0)
        return;
    (void)gm_cuda_check_dnn(cu,
                            cudnnTransformTensor(cu->dnn, &one, cu->td[0], x, &zero, cu->td[1], y),
                            "cudnnTransformTensor (NCHW -> NHWC)");
}

/* ---- convolution ---- */

static int conv_groups(const struct gm_conv2d_shape *s)
{
    return s->groups > 1 ? s->groups : 1;
}

static int conv_descs(struct gm_cuda *cu, const struct gm_conv2d_shape *s)
{
    int err;

    if ((err = tensor(cu, cu->td[0], CUDNN_TENSOR_NHWC, s->n, s->c, s->h, s->w)) < 0 ||
        (err = tensor(cu, cu->td[1], CUDNN_TENSOR_NHWC, s->n, s->oc, s->oh, s->ow)) < 0 ||
        (err = tensor(cu, cu->td[2], CUDNN_TENSOR_NHWC, 1, s->oc, 1, 1)) < 0)
        return err;
    /* OHWI weights are cuDNN's NHWC filter layout (K, R, S, C/groups) */
    if ((err = gm_cuda_check_dnn(cu,
                                 cudnnSetFilter4dDescriptor(cu->fd, CUDNN_DATA_FLOAT,
                                                            CUDNN_TENSOR_NHWC, s->oc,
                                                            s->c / conv_groups(s), s->k, s->k),
                                 "cudnnSetFilter4dDescriptor")) < 0)
        return err;
    if ((err = gm_cuda_check_dnn(
             cu,
             cudnnSetConvolution2dDescriptor(cu->cd, s->pad, s->pad, s->stride, s->stride, 1, 1,
                                             CUDNN_CROSS_CORRELATION, CUDNN_DATA_FLOAT),
             "cudnnSetConvolution2dDescriptor")) < 0)
        return err;
    if ((err = gm_cuda_check_dnn(cu, cudnnSetConvolutionGroupCount(cu->cd, conv_groups(s)),
                                 "cudnnSetConvolutionGroupCount")) < 0)
        return err;
    return gm_cuda_check_dnn(cu, cudnnSetConvolutionMathType(cu->cd, CUDNN_FMA_MATH),
                             "cudnnSetConvolutionMathType");
}

static int same_shape(const struct gm_cuda_conv_algo *a, const struct gm_conv2d_shape *s)
{
    return a->n == s->n && a->h == s->h && a->w == s->w && a->c == s->c && a->oc == s->oc &&
           a->k == s->k && a->pad == s->pad && a->stride == s->stride &&
           a->groups == conv_groups(s);
}

/* A search that found no usable algorithm: an error naming the search and the shape (the
 * library call itself succeeded, so nothing was recorded yet). */
static int no_algo(struct gm_cuda *cu, const char *search, const struct gm_conv2d_shape *s, int got,
                   cudnnStatus_t first)
{
    char shape[160], what[320];

    gm_cuda_conv_name(shape, sizeof(shape), s->n, s->c, s->h, s->w, s->oc, s->k, s->stride, s->pad);
    snprintf(what, sizeof(what), "%s: no usable algorithm for %s (%d returned%s)", search, shape,
             got, got > 0 ? ", the best failed" : "");
    return gm_cuda_check_dnn(cu, first != CUDNN_STATUS_SUCCESS ? first : CUDNN_STATUS_NOT_SUPPORTED,
                             what);
}

/* FFT and Winograd algorithms sum in fp32 less exactly (~1e-3 where implicit GEMM is ~1e-6);
 * gm_cuda_conv_exact() leaves them out. */
static int fwd_inexact(cudnnConvolutionFwdAlgo_t a)
{
    return a == CUDNN_CONVOLUTION_FWD_ALGO_FFT || a == CUDNN_CONVOLUTION_FWD_ALGO_FFT_TILING ||
           a == CUDNN_CONVOLUTION_FWD_ALGO_WINOGRAD ||
           a == CUDNN_CONVOLUTION_FWD_ALGO_WINOGRAD_NONFUSED;
}

static int bwd_data_inexact(cudnnConvolutionBwdDataAlgo_t a)
{
    return a == CUDNN_CONVOLUTION_BWD_DATA_ALGO_FFT ||
           a == CUDNN_CONVOLUTION_BWD_DATA_ALGO_FFT_TILING ||
           a == CUDNN_CONVOLUTION_BWD_DATA_ALGO_WINOGRAD ||
           a == CUDNN_CONVOLUTION_BWD_DATA_ALGO_WINOGRAD_NONFUSED;
}

static int bwd_filter_inexact(cudnnConvolutionBwdFilterAlgo_t a)
{
    return a == CUDNN_CONVOLUTION_BWD_FILTER_ALGO_FFT ||
           a == CUDNN_CONVOLUTION_BWD_FILTER_ALGO_FFT_TILING ||
           a == CUDNN_CONVOLUTION_BWD_FILTER_ALGO_WINOGRAD ||
           a == CUDNN_CONVOLUTION_BWD_FILTER_ALGO_WINOGRAD_NONFUSED;
}

/* The searches' fastest usable answer (they come fastest first): its index, or -1. */
static int pick_fwd(const cudnnConvolutionFwdAlgoPerf_t *p, int got, int exact)
{
    for (int i = 0; i < got; i++)
        if (p[i].status == CUDNN_STATUS_SUCCESS && !(exact && fwd_inexact(p[i].algo)))
            return i;
    return -1;
}

static int pick_bwd_data(const cudnnConvolutionBwdDataAlgoPerf_t *p, int got, int exact)
{
    for (int i = 0; i < got; i++)
        if (p[i].status == CUDNN_STATUS_SUCCESS && !(exact && bwd_data_inexact(p[i].algo)))
            return i;
    return -1;
}

static int pick_bwd_filter(const cudnnConvolutionBwdFilterAlgoPerf_t *p, int got, int exact)
{
    for (int i = 0; i < got; i++)
        if (p[i].status == CUDNN_STATUS_SUCCESS && !(exact && bwd_filter_inexact(p[i].algo)))
            return i;
    return -1;
}

/* The cached algorithms for s (descriptors already set), found and timed the first time.
 * NULL with the error recorded (the library's, or no_algo's with the shape).  The
 * descriptor keeps CUDNN_FMA_MATH whatever mathType the search reports: PyTorch copies
 * perf.mathType onto the descriptor, but CUDNN_DEFAULT_MATH lets cuDNN >= 8 round fp32 to
 * TF32, which fp32 here must not (cuda.h). */
static const struct gm_cuda_conv_algo *conv_algo(struct gm_cuda *cu,
                                                 const struct gm_conv2d_shape *s)
{
    cudnnConvolutionFwdAlgoPerf_t f[8];
    cudnnConvolutionBwdDataAlgoPerf_t bd[8];
    cudnnConvolutionBwdFilterAlgoPerf_t bf[8];
    struct gm_cuda_conv_algo *a;
    int got = 0, i, kf, kd, kb;

    for (i = 0; i < GM_CUDA_ALGO_CACHE; i++)
        if (cu->algos[i].n != 0 && same_shape(&cu->algos[i], s))
            return &cu->algos[i];
    a = &cu->algos[cu->algo_next];
    cu->algo_next = (cu->algo_next + 1) % GM_CUDA_ALGO_CACHE;
    memset(a, 0, sizeof(*a));
    if (gm_cuda_check_dnn(cu,
                          cudnnFindConvolutionForwardAlgorithm(cu->dnn, cu->td[0], cu->fd, cu->cd,
                                                               cu->td[1], 8, &got, f),
                          "cudnnFindConvolutionForwardAlgorithm") < 0)
        return NULL;
    if ((kf = pick_fwd(f, got, cu->conv_exact)) < 0) {
        (void)no_algo(cu, "cudnnFindConvolutionForwardAlgorithm", s, got,
                      got < 1 ? CUDNN_STATUS_SUCCESS : f[0].status);
        return NULL;
    }
    a->fwd = f[kf].algo;
    a->workspace = f[kf].memory;
    if (gm_cuda_check_dnn(cu,
                          cudnnFindConvolutionBackwardDataAlgorithm(cu->dnn, cu->fd, cu->td[1],
                                                                    cu->cd, cu->td[0], 8, &got, bd),
                          "cudnnFindConvolutionBackwardDataAlgorithm") < 0)
        return NULL;
    if ((kd = pick_bwd_data(bd, got, cu->conv_exact)) < 0) {
        (void)no_algo(cu, "cudnnFindConvolutionBackwardDataAlgorithm", s, got,
                      got < 1 ? CUDNN_STATUS_SUCCESS : bd[0].status);
        return NULL;
    }
    a->bwd_data = bd[kd].algo;
    if (bd[kd].memory > a->workspace)
        a->workspace = bd[kd].memory;
    if (gm_cuda_check_dnn(cu,
                          cudnnFindConvolutionBackwardFilterAlgorithm(cu->dnn, cu->td[0], cu->td[1],
                                                                      cu->cd, cu->fd, 8, &got, bf),
                          "cudnnFindConvolutionBackwardFilterAlgorithm") < 0)
        return NULL;
    if ((kb = pick_bwd_filter(bf, got, cu->conv_exact)) < 0) {
        (void)no_algo(cu, "cudnnFindConvolutionBackwardFilterAlgorithm", s, got,
                      got < 1 ? CUDNN_STATUS_SUCCESS : bf[0].status);
        return NULL;
    }
    a->bwd_filter = bf[kb].algo;
    if (bf[kb].memory > a->workspace)
        a->workspace = bf[kb].memory;
    { /* GRADMESH_LOG_LEVEL=debug: what the search chose, and its times */
        char shape[160];
        gm_cuda_conv_name(shape, sizeof(shape), s->n, s->c, s->h, s->w, s->oc, s->k, s->stride,
                          s->pad);
        gm_debug("event=cuda_conv %s fwd=%d/%.3fms dgrad=%d/%.3fms wgrad=%d/%.3fms exact=%d", shape,
                 (int)f[kf].algo, (double)f[kf].time, (int)bd[kd].algo, (double)bd[kd].time,
                 (int)bf[kb].algo, (double)bf[kb].time, cu->conv_exact);
    }
    if (gm_cuda_workspace(cu, a->workspace) < 0)
        return NULL;
    a->n = s->n, a->h = s->h, a->w = s->w, a->c = s->c, a->oc = s->oc, a->k = s->k;
    a->pad = s->pad, a->stride = s->stride;
    a->groups = conv_groups(s);
    return a;
}

static size_t conv2d_ws_floats(const struct gm_conv2d_shape *s, int need_dx)
{
    (void)s, (void)need_dx;
    return 0; /* the context's workspace serves every layer */
}

static void conv2d_forward(const struct gm_conv2d_shape *s, int need_dx, const float *x,
                           const float *w, const float *b, float *ws, float *y)
{
    struct gm_cuda *cu = ctx();
    const struct gm_cuda_conv_algo *a;

    (void)need_dx, (void)ws;
    if (conv_descs(cu, s) < 0 || (a = conv_algo(cu, s)) == NULL)
        return;
    if (gm_cuda_check_dnn(cu,
                          cudnnConvolutionForward(cu->dnn, &one, cu->td[0], x, cu->fd, w, cu->cd,
                                                  a->fwd, cu->workspace, cu->workspace_bytes, &zero,
                                                  cu->td[1], y),
                          "cudnnConvolutionForward") < 0)
        return;
    if (b != NULL)
        (void)gm_cuda_check_dnn(cu, cudnnAddTensor(cu->dnn, &one, cu->td[2], b, &one, cu->td[1], y),
                                "cudnnAddTensor (conv bias)");
}

static void conv2d_backward(const struct gm_conv2d_shape *s, const float *x, const float *w,
                            const float *dy, float *dw, float *db, float *dx, float *ws)
{
    struct gm_cuda *cu = ctx();
    const struct gm_cuda_conv_algo *a;

    (void)ws;
    if (conv_descs(cu, s) < 0 || (a = conv_algo(cu, s)) == NULL)
        return;
    if (gm_cuda_check_dnn(cu,
                          cudnnConvolutionBackwardFilter(cu->dnn, &one, cu->td[0], x, cu->td[1], dy,
                                                         cu->cd, a->bwd_filter, cu->workspace,
                                                         cu->workspace_bytes, &zero, cu->fd, dw),
                          "cudnnConvolutionBackwardFilter") < 0)
        return;
    if (db != NULL &&
        gm_cuda_check_dnn(
            cu, cudnnConvolutionBackwardBias(cu->dnn, &one, cu->td[1], dy, &zero, cu->td[2], db),
            "cudnnConvolutionBackwardBias") < 0)
        return;
    if (dx != NULL)
        (void)gm_cuda_check_dnn(cu,
                                cudnnConvolutionBackwardData(
                                    cu->dnn, &one, cu->fd, w, cu->td[1], dy, cu->cd, a->bwd_data,
                                    cu->workspace, cu->workspace_bytes, &zero, cu->td[0], dx),
                                "cudnnConvolutionBackwardData");
}

/* ---- linear: row-major y (n, out) = x (n, in) w^T + b, as column-major transposes ---- */

static void linear_forward(int n, int in, int out, const float *x, const float *w, const float *b,
                           float *y)
{
    struct gm_cuda *cu = ctx();

    /* y = b broadcast over the rows, then y += x w^T */
    if (tensor(cu, cu->td[0], CUDNN_TENSOR_NCHW, 1, out, 1, 1) < 0 ||
        tensor(cu, cu->td[1], CUDNN_TENSOR_NCHW, n, out, 1, 1) < 0)
        return;
    if (gm_cuda_check_dnn(cu, cudnnAddTensor(cu->dnn, &one, cu->td[0], b, &zero, cu->td[1], y),
                          "cudnnAddTensor (linear bias)") < 0)
        return;
    (void)gm_cuda_check_blas(cu,
                             cublasSgemm(cu->blas, CUBLAS_OP_T, CUBLAS_OP_N, out, n, in, &one, w,
                                         in, x, in, &one, y, out),
                             "cublasSgemm (linear forward)");
}

static void linear_backward(int n, int in, int out, const float *x, const float *w, const float *dy,
                            float *dw, float *db, float *dx)
{
    struct gm_cuda *cu = ctx();

    /* dw (out, in) = dy^T x */
    if (gm_cuda_check_blas(cu,
                           cublasSgemm(cu->blas, CUBLAS_OP_N, CUBLAS_OP_T, in, out, n, &one, x, in,
                                       dy, out, &zero, dw, in),
                           "cublasSgemm (linear dW)") < 0)
        return;
    /* db = column sums of dy */
    if (tensor(cu, cu->td[0], CUDNN_TENSOR_NCHW, n, out, 1, 1) < 0 ||
        tensor(cu, cu->td[1], CUDNN_TENSOR_NCHW, 1, out, 1, 1) < 0)
        return;
    if (gm_cuda_check_dnn(
            cu, cudnnConvolutionBackwardBias(cu->dnn, &one, cu->td[0], dy, &zero, cu->td[1], db),
            "cudnnConvolutionBackwardBias (linear db)") < 0)
        return;
    /* dx (n, in) = dy w */
    if (dx != NULL)
        (void)gm_cuda_check_blas(cu,
                                 cublasSgemm(cu->blas, CUBLAS_OP_N, CUBLAS_OP_N, in, n, out, &one,
                                             w, in, dy, out, &zero, dx, in),
                                 "cublasSgemm (linear dX)");
}

/* ---- pooling, activations, dropout (layers.cu where no library call fits) ---- */

static void maxpool_forward(int n, int h, int w, int c, int k, int relu, const float *x, float *y,
                            uint8_t *arg)
{
    (void)gm_maxpool_forward_cuda(ctx(), n, h, w, c, k, relu, x, y, arg);
}

static void maxpool_backward(int n, int h, int w, int c, int k, const float *dy, const uint8_t *arg,
                             float *dx)
{
    (void)gm_maxpool_backward_cuda(ctx(), n, h, w, c, k, dy, arg, dx);
}

static void maxpool2d_forward(const struct gm_pool2d_shape *s, int relu, const float *x, float *y,
                              uint8_t *arg)
{
    recorded(gm_maxpool2d_forward_cuda(ctx(), s, relu, x, y, arg));
}

static void maxpool2d_backward(const struct gm_pool2d_shape *s, const float *dy, const uint8_t *arg,
                               float *dx)
{
    recorded(gm_maxpool2d_backward_cuda(ctx(), s, dy, arg, dx));
}

static void relu6_forward(size_t n, const float *x, float *y)
{
    recorded(gm_relu6_forward_cuda(ctx(), n, x, y));
}

static void relu6_backward(size_t n, const float *y, const float *dy, float *dx)
{
    recorded(gm_relu6_backward_cuda(ctx(), n, y, dy, dx));
}

static int relu_descs(struct gm_cuda *cu, size_t n)
{
    int err;

    if (n > 0x7fffffff) /* cuDNN dimensions are int */
        return gm_cuda_check_dnn(cu, CUDNN_STATUS_BAD_PARAM, "relu: more than 2^31 elements");
    if ((err = tensor(cu, cu->td[0], CUDNN_TENSOR_NCHW, 1, 1, 1, (int)n)) < 0)
        return err;
    return gm_cuda_check_dnn(
        cu,
        cudnnSetActivationDescriptor(cu->ad, CUDNN_ACTIVATION_RELU, CUDNN_NOT_PROPAGATE_NAN, 0.0),
        "cudnnSetActivationDescriptor");
}

static void relu_forward(size_t n, const float *x, float *y)
{
    struct gm_cuda *cu = ctx();

    if (n == 0 || relu_descs(cu, n) < 0)
        return;
    (void)gm_cuda_check_dnn(
        cu, cudnnActivationForward(cu->dnn, cu->ad, &one, cu->td[0], x, &zero, cu->td[0], y),
        "cudnnActivationForward (relu)");
}

static void relu_backward(size_t n, const float *y, const float *dy, float *dx)
{
    struct gm_cuda *cu = ctx();

    /* the table gives y, not x: for ReLU, y > 0 exactly where x > 0, so y stands for x */
    if (n == 0 || relu_descs(cu, n) < 0)
        return;
    (void)gm_cuda_check_dnn(cu,
                            cudnnActivationBackward(cu->dnn, cu->ad, &one, cu->td[0], y, cu->td[0],
                                                    dy, cu->td[0], y, &zero, cu->td[0], dx),
                            "cudnnActivationBackward (relu)");
}

static void dropout_forward(size_t n, float p, uint64_t seed, const float *x, float *mask, float *y)
{
    (void)gm_dropout_forward_cuda(ctx(), n, p, seed, x, mask, y);
}

static void dropout_backward(size_t n, const float *mask, const float *dy, float *dx)
{
    (void)gm_dropout_backward_cuda(ctx(), n, mask, dy, dx);
}

/* ---- batch norm: our kernels, not cuDNN's (kfn_bn.h says why) ---- */

static void batchnorm_forward(size_t rows, int c, int train, float momentum, float eps,
                              const float *x, const float *gamma, const float *beta,
                              float *running_mean, float *running_var, float *save_mean,
                              float *save_invstd, float *y)
{
    recorded(gm_batchnorm_forward_cuda(ctx(), rows, c, train, momentum, eps, x, gamma, beta,
                                       running_mean, running_var, save_mean, save_invstd, y));
}

static void batchnorm_backward(size_t rows, int c, const float *x, const float *gamma,
                               const float *save_mean, const float *save_invstd, const float *dy,
                               float *dgamma, float *dbeta, float *dx)
{
    recorded(gm_batchnorm_backward_cuda(ctx(), rows, c, x, gamma, save_mean, save_invstd, dy,
                                        dgamma, dbeta, dx));
}

/* ---- residual pieces ---- */

static void add(size_t n, const float *a, const float *b, float *y)
{
    struct gm_cuda *cu = ctx();
    const float *other = b;

    /* y = a + b with cuBLAS axpy (1*x is exact, so this is the CPU's a + b); y may alias
     * a or b */
    if (n == 0)
        return;
    if (n > 0x7fffffff) {
        (void)gm_cuda_check_blas(cu, CUBLAS_STATUS_INVALID_VALUE, "add: more than 2^31 elements");
        return;
    }
    if (y == b)
        other = a;
    else if (y != a && /* y = a, then += b: both on the compute stream, so no host wait */
             gm_cuda_check_rt(
                 cu,
                 cudaMemcpyAsync(y, a, n * sizeof(float), cudaMemcpyDeviceToDevice, cu->compute),
                 "cudaMemcpyAsync (add)") < 0)
        return;
    (void)gm_cuda_check_blas(cu, cublasSaxpy(cu->blas, (int)n, &one, other, 1, y, 1),
                             "cublasSaxpy (add)");
}

static void shortcut_forward(int n, int h, int w, int c, int oc, int stride, const float *x,
                             float *y)
{
    (void)gm_shortcut_forward_cuda(ctx(), n, h, w, c, oc, stride, x, y);
}

static void shortcut_backward(int n, int h, int w, int c, int oc, int stride, const float *dy,
                              float *dx)
{
    (void)gm_shortcut_backward_cuda(ctx(), n, h, w, c, oc, stride, dy, dx);
}

static void avgpool_forward(int n, int hw, int c, const float *x, float *y)
{
    struct gm_cuda *cu = ctx();

    if (tensor(cu, cu->td[0], CUDNN_TENSOR_NHWC, n, c, hw, 1) < 0 ||
        tensor(cu, cu->td[1], CUDNN_TENSOR_NHWC, n, c, 1, 1) < 0)
        return;
    if (gm_cuda_check_dnn(cu,
                          cudnnSetPooling2dDescriptor(cu->pd,
                                                      CUDNN_POOLING_AVERAGE_COUNT_INCLUDE_PADDING,
                                                      CUDNN_NOT_PROPAGATE_NAN, hw, 1, 0, 0, hw, 1),
                          "cudnnSetPooling2dDescriptor") < 0)
        return;
    (void)gm_cuda_check_dnn(
        cu, cudnnPoolingForward(cu->dnn, cu->pd, &one, cu->td[0], x, &zero, cu->td[1], y),
        "cudnnPoolingForward (global average)");
}

static void avgpool_backward(int n, int hw, int c, const float *dy, float *dx)
{
    struct gm_cuda *cu = ctx();
    const float inv = 1.0f / (float)hw;

    /* dx = dy / hw broadcast over the hw positions */
    if (tensor(cu, cu->td[0], CUDNN_TENSOR_NHWC, n, c, 1, 1) < 0 ||
        tensor(cu, cu->td[1], CUDNN_TENSOR_NHWC, n, c, hw, 1) < 0)
        return;
    (void)gm_cuda_check_dnn(cu, cudnnAddTensor(cu->dnn, &inv, cu->td[0], dy, &zero, cu->td[1], dx),
                            "cudnnAddTensor (average pool backward)");
}

static void adaptive_avgpool_forward(int n, int h, int w, int c, int oh, int ow, const float *x,
                                     float *y)
{
    recorded(gm_adapool_forward_cuda(ctx(), n, h, w, c, oh, ow, x, y));
}

static void adaptive_avgpool_backward(int n, int h, int w, int c, int oh, int ow, const float *dy,
                                      float *dx)
{
    recorded(gm_adapool_backward_cuda(ctx(), n, h, w, c, oh, ow, dy, dx));
}

/* ---- loss, optimizers, hash, wire codecs: the custom kernels (custom.h) ---- */

static double xent(int n, int k, const float *logits, const int32_t *labels, float *dlogits,
                   long *correct)
{
    double loss = NAN;

    if (gm_kxent_cuda(ctx(), n, k, logits, labels, dlogits, &loss, correct) < 0)
        return NAN;
    return loss;
}

static void sgd_update(size_t n, float *p, const float *g, float *buf, float lr, float wd, float mu,
                       int nesterov)
{
    const unsigned flags = (wd != 0.0f ? GM_KSGD_DECAY : 0u) |
                           (buf != NULL ? GM_KSGD_MOMENTUM : 0u) |
                           (buf != NULL && nesterov ? GM_KSGD_NESTEROV : 0u);

    recorded(gm_ksgd_cuda(ctx(), n, p, g, buf, lr, wd, mu, flags));
}

static void adam_update(size_t n, float *p, const float *g, float *m, float *v,
                        const struct gm_adam_scalars *k)
{
    struct gm_kadam a = {.b1 = k->b1,
                         .omb1 = k->omb1,
                         .b2 = k->b2,
                         .omb2 = k->omb2,
                         .wd = k->wd,
                         .eps = k->eps,
                         .inv_bc2_sqrt = k->inv_bc2_sqrt,
                         .neg_step_size = k->neg_step_size,
                         .decay = k->wd != 0.0f};

    recorded(gm_kadam_cuda(ctx(), n, p, g, m, v, &a));
}

static uint64_t param_hash(const void *buf, size_t nbytes)
{
    uint64_t h = 0;

    if (gm_khash_cuda(ctx(), buf, nbytes, &h) < 0)
        return 0;
    return h;
}

static void grad_encode(enum gm_codec c, const float *in, size_t n, void *out)
{
    struct gm_cuda *cu = ctx();

    switch (c) {
    case GM_CODEC_FP32:
        (void)gm_cuda_check_rt(
            cu, cudaMemcpyAsync(out, in, n * sizeof(float), cudaMemcpyDeviceToDevice, cu->compute),
            "cudaMemcpyAsync (fp32 encode)");
        return;
    case GM_CODEC_FP16:
        recorded(gm_kf16_pack_cuda(cu, n, in, out));
        return;
    case GM_CODEC_BF16:
        recorded(gm_kbf16_pack_cuda(cu, n, in, out));
        return;
    default:
        return;
    }
}

static void grad_decode_add(enum gm_codec c, const void *in, const float *x, size_t n, float *out)
{
    struct gm_cuda *cu = ctx();

    switch (c) {
    case GM_CODEC_FP32:
        if (x == NULL)
            (void)gm_cuda_check_rt(
                cu,
                cudaMemcpyAsync(out, in, n * sizeof(float), cudaMemcpyDeviceToDevice, cu->compute),
                "cudaMemcpyAsync (fp32 decode)");
        else
            add(n, in, x, out);
        return;
    case GM_CODEC_FP16:
        recorded(gm_kf16_unpack_cuda(cu, n, in, x, out));
        return;
    case GM_CODEC_BF16:
        recorded(gm_kbf16_unpack_cuda(cu, n, in, x, out));
        return;
    default:
        return;
    }
}

const struct gm_ops gm_ops_cuda = {
    .name = "cuda",
    .nchw_to_nhwc = nchw_to_nhwc,
    .conv2d_ws_floats = conv2d_ws_floats,
    .conv2d_forward = conv2d_forward,
    .conv2d_backward = conv2d_backward,
    .linear_forward = linear_forward,
    .linear_backward = linear_backward,
    .maxpool_forward = maxpool_forward,
    .maxpool_backward = maxpool_backward,
    .maxpool2d_forward = maxpool2d_forward,
    .maxpool2d_backward = maxpool2d_backward,
    .relu_forward = relu_forward,
    .relu_backward = relu_backward,
    .relu6_forward = relu6_forward,
    .relu6_backward = relu6_backward,
    .dropout_forward = dropout_forward,
    .dropout_backward = dropout_backward,
    .batchnorm_forward = batchnorm_forward,
    .batchnorm_backward = batchnorm_backward,
    .add = add,
    .shortcut_forward = shortcut_forward,
    .shortcut_backward = shortcut_backward,
    .avgpool_forward = avgpool_forward,
    .avgpool_backward = avgpool_backward,
    .adaptive_avgpool_forward = adaptive_avgpool_forward,
    .adaptive_avgpool_backward = adaptive_avgpool_backward,
    .xent = xent,
    .sgd_update = sgd_update,
    .adam_update = adam_update,
    .param_hash = param_hash,
    .grad_encode = grad_encode,
    .grad_decode_add = grad_decode_add,
};

#endif
