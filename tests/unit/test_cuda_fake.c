/*
 * tests/unit/test_cuda_fake.c - the CUDA op table (train/nn/ops_cuda.c) driven through a
 * stand-in cuDNN: the process's library table (cuda_libs.h, gm_cudalib) is filled with
 * functions here that record what they are given, and a context made by hand
 * (gm_cuda_set_current) has descriptors that are this file's records.  No GPU, no driver,
 * no cuDNN file: the decisions the op table makes before the library runs are checked in CI.
 *   - batch norm: 70,000 rows in evaluation and 131,072 in evaluation are described with
 *     an N within cuDNN's inference limit (NHWC, N*H = rows); 131,072 in training stays
 *     (rows, C, 1, 1) NCHW; 1,000,000 in training is split under the training limit;
 *     the backward gets the forward's epsilon, not 0;
 *   - convolution: a search that returns no algorithm, or whose best one failed, records
 *     an error (GM_ERR_GPU) whose line names the search and the shape; a good search runs
 *     the convolution with the algorithm found and is not repeated for the same shape.
 * Skips (77) in a build without the CUDA backend.
 */
#include <stdio.h>
#include <string.h>

#include "common/assert.h"
#include "common/test.h"
#include "train/kernels/cuda.h"

GM_TEST_DEFINE_STATE;

#if defined(GM_HAVE_CUDA) && GM_HAVE_CUDA
#define GM_CUDA_LIBS_NO_CALL_MACROS
#include "train/kernels/cuda_ctx.h"
#include "train/kernels/cuda_libs.h"
#include "train/kernels/cuda_plan.h"
#include "train/kernels/conv2d.h"
#include "train/nn/ops.h"

/* What a stand-in descriptor holds. */
struct fake_td {
    cudnnTensorFormat_t fmt;
    int n, c, h, w, set;
};

static struct fake_td tds[4];
static int fake_dummy[8]; /* stands for the handle, filter, convolution descriptors */

/* what the batch-norm calls saw: their x descriptor, epsilon */
static struct fake_td bn_x;
static double bn_eps;
static int bn_calls;
/* the convolution searches' answers and the calls */
static int find_got;
static cudnnStatus_t find_status;
static int find_fails_at; /* 0 forward, 1 backward data, 2 backward filter */
static int find_calls, conv_calls;
static cudnnConvolutionFwdAlgo_t conv_algo_used;

static struct fake_td *td_of(cudnnTensorDescriptor_t d)
{
    return (struct fake_td *)(void *)d;
}

static cudnnStatus_t set_tensor(cudnnTensorDescriptor_t d, cudnnTensorFormat_t fmt,
                                cudnnDataType_t type, int n, int c, int h, int w)
{
    struct fake_td *t = td_of(d);

    (void)type;
    t->fmt = fmt, t->n = n, t->c = c, t->h = h, t->w = w, t->set = 1;
    return CUDNN_STATUS_SUCCESS;
}

static const char *error_string(cudnnStatus_t s)
{
    return s == CUDNN_STATUS_NOT_SUPPORTED ? "CUDNN_STATUS_NOT_SUPPORTED" : "CUDNN_STATUS_other";
}

static void last_error_string(char *msg, size_t max)
{
    if (max > 0)
        msg[0] = '\0';
}

static cudnnStatus_t bn_train(cudnnHandle_t h, cudnnBatchNormMode_t mode, const void *alpha,
                              const void *beta, const cudnnTensorDescriptor_t xd, const void *x,
                              const cudnnTensorDescriptor_t yd, void *y,
                              const cudnnTensorDescriptor_t pd, const void *scale, const void *bias,
                              double factor, void *rmean, void *rvar, double eps, void *smean,
                              void *sinv)
{
    (void)h, (void)mode, (void)alpha, (void)beta, (void)x, (void)yd, (void)y, (void)pd;
    (void)scale, (void)bias, (void)factor, (void)rmean, (void)rvar, (void)smean, (void)sinv;
    bn_x = *td_of(xd);
    bn_eps = eps;
    bn_calls++;
    return CUDNN_STATUS_SUCCESS;
}

static cudnnStatus_t bn_infer(cudnnHandle_t h, cudnnBatchNormMode_t mode, const void *alpha,
                              const void *beta, const cudnnTensorDescriptor_t xd, const void *x,
                              const cudnnTensorDescriptor_t yd, void *y,
                              const cudnnTensorDescriptor_t pd, const void *scale, const void *bias,
                              const void *mean, const void *var, double eps)
{
    (void)h, (void)mode, (void)alpha, (void)beta, (void)x, (void)yd, (void)y, (void)pd;
    (void)scale, (void)bias, (void)mean, (void)var;
    bn_x = *td_of(xd);
    bn_eps = eps;
    bn_calls++;
    return CUDNN_STATUS_SUCCESS;
}

static cudnnStatus_t bn_back(cudnnHandle_t h, cudnnBatchNormMode_t mode, const void *ad,
                             const void *bd, const void *ap, const void *bp,
                             const cudnnTensorDescriptor_t xd, const void *x,
                             const cudnnTensorDescriptor_t dyd, const void *dy,
                             const cudnnTensorDescriptor_t dxd, void *dx,
                             const cudnnTensorDescriptor_t pd, const void *scale, void *dscale,
                             void *dbias, double eps, const void *smean, const void *sinv)
{
    (void)h, (void)mode, (void)ad, (void)bd, (void)ap, (void)bp, (void)x, (void)dyd, (void)dy;
    (void)dxd, (void)dx, (void)pd, (void)scale, (void)dscale, (void)dbias, (void)smean, (void)sinv;
    bn_x = *td_of(xd);
    bn_eps = eps;
    bn_calls++;
    return CUDNN_STATUS_SUCCESS;
}

static cudnnStatus_t set_filter(cudnnFilterDescriptor_t d, cudnnDataType_t t, cudnnTensorFormat_t f,
                                int k, int c, int h, int w)
{
    (void)d, (void)t, (void)f, (void)k, (void)c, (void)h, (void)w;
    return CUDNN_STATUS_SUCCESS;
}

static cudnnStatus_t set_conv(cudnnConvolutionDescriptor_t d, int ph, int pw, int sh, int sw,
                              int dh, int dw, cudnnConvolutionMode_t m, cudnnDataType_t t)
{
    (void)d, (void)ph, (void)pw, (void)sh, (void)sw, (void)dh, (void)dw, (void)m, (void)t;
    return CUDNN_STATUS_SUCCESS;
}

static cudnnStatus_t set_math(cudnnConvolutionDescriptor_t d, cudnnMathType_t m)
{
    (void)d, (void)m;
    return CUDNN_STATUS_SUCCESS;
}

static int groups_set; /* the group count of the last convolution described */

static cudnnStatus_t set_groups(cudnnConvolutionDescriptor_t d, int groups)
{
    (void)d;
    groups_set = groups;
    return CUDNN_STATUS_SUCCESS;
}

/* One answer per search: find_got results, the first with find_status at the failing
 * search, CUDNN_STATUS_SUCCESS (algorithm 1, no workspace) at the others. */
#define FAKE_FIND(name, which, desc_t1, desc_t2, desc_t3, desc_t4, perf_t)                         \
    static cudnnStatus_t name(cudnnHandle_t h, const desc_t1 a, const desc_t2 b, const desc_t3 c,  \
                              const desc_t4 d, const int req, int *got, perf_t *perf)              \
    {                                                                                              \
        (void)h, (void)a, (void)b, (void)c, (void)d, (void)req;                                    \
        find_calls++;                                                                              \
        memset(perf, 0, sizeof(*perf));                                                            \
        *got = find_fails_at == (which) ? find_got : 1;                                            \
        perf[0].status = find_fails_at == (which) ? find_status : CUDNN_STATUS_SUCCESS;            \
        perf[0].algo = 1;                                                                          \
        perf[0].memory = 0;                                                                        \
        return CUDNN_STATUS_SUCCESS;                                                               \
    }
FAKE_FIND(find_fwd, 0, cudnnTensorDescriptor_t, cudnnFilterDescriptor_t,
          cudnnConvolutionDescriptor_t, cudnnTensorDescriptor_t, cudnnConvolutionFwdAlgoPerf_t)
FAKE_FIND(find_bwd_data, 1, cudnnFilterDescriptor_t, cudnnTensorDescriptor_t,
          cudnnConvolutionDescriptor_t, cudnnTensorDescriptor_t, cudnnConvolutionBwdDataAlgoPerf_t)
FAKE_FIND(find_bwd_filter, 2, cudnnTensorDescriptor_t, cudnnTensorDescriptor_t,
          cudnnConvolutionDescriptor_t, cudnnFilterDescriptor_t,
          cudnnConvolutionBwdFilterAlgoPerf_t)

static cudnnStatus_t conv_fwd(cudnnHandle_t h, const void *alpha, const cudnnTensorDescriptor_t xd,
                              const void *x, const cudnnFilterDescriptor_t wd, const void *w,
                              const cudnnConvolutionDescriptor_t cd, cudnnConvolutionFwdAlgo_t algo,
                              void *ws, size_t wsb, const void *beta,
                              const cudnnTensorDescriptor_t yd, void *y)
{
    (void)h, (void)alpha, (void)xd, (void)x, (void)wd, (void)w, (void)cd, (void)ws, (void)wsb;
    (void)beta, (void)yd, (void)y;
    conv_algo_used = algo;
    conv_calls++;
    return CUDNN_STATUS_SUCCESS;
}

static struct gm_cuda cu;
static const struct gm_ops *ops;

static void setup(void)
{
    memset(&gm_cudalib, 0, sizeof(gm_cudalib));
    gm_cudalib.cudnnSetTensor4dDescriptor = set_tensor;
    gm_cudalib.cudnnGetErrorString = error_string;
    gm_cudalib.cudnnGetLastErrorString = last_error_string;
    gm_cudalib.cudnnBatchNormalizationForwardTraining = bn_train;
    gm_cudalib.cudnnBatchNormalizationForwardInference = bn_infer;
    gm_cudalib.cudnnBatchNormalizationBackward = bn_back;
    gm_cudalib.cudnnSetFilter4dDescriptor = set_filter;
    gm_cudalib.cudnnSetConvolution2dDescriptor = set_conv;
    gm_cudalib.cudnnSetConvolutionMathType = set_math;
    gm_cudalib.cudnnSetConvolutionGroupCount = set_groups;
    gm_cudalib.cudnnFindConvolutionForwardAlgorithm = find_fwd;
    gm_cudalib.cudnnFindConvolutionBackwardDataAlgorithm = find_bwd_data;
    gm_cudalib.cudnnFindConvolutionBackwardFilterAlgorithm = find_bwd_filter;
    gm_cudalib.cudnnConvolutionForward = conv_fwd;
    memset(&cu, 0, sizeof(cu));
    for (int i = 0; i < 4; i++)
        cu.td[i] = (cudnnTensorDescriptor_t)(void *)&tds[i];
    cu.dnn = (cudnnHandle_t)(void *)&fake_dummy[0];
    cu.fd = (cudnnFilterDescriptor_t)(void *)&fake_dummy[1];
    cu.cd = (cudnnConvolutionDescriptor_t)(void *)&fake_dummy[2];
    cu.bn_eps = 1e-5;
    gm_cuda_set_current(&cu);
    ops = gm_ops_get(GM_DEVICE_CUDA);
    GM_ASSERT(ops != NULL);
}

/* one batch-norm forward of rows x 16 channels; the x descriptor it used */
static struct fake_td bn_forward(size_t rows, int train, float eps)
{
    static float buf[16];

    memset(&bn_x, 0, sizeof(bn_x));
    bn_calls = 0;
    ops->batchnorm_forward(rows, 16, train, 0.1f, eps, buf, buf, buf, buf, buf, buf, buf, buf);
    GM_CHECK_EQ(bn_calls, 1);
    GM_CHECK_EQ(gm_cuda_take_error(&cu), 0);
    return bn_x;
}

static void check_view(struct fake_td t, size_t rows, long limit)
{
    GM_CHECK_EQ(t.c, 16);
    GM_CHECK_EQ(t.w, 1);
    GM_CHECK(t.n >= 1 && t.n <= limit);
    GM_CHECK_EQ((size_t)t.n * (size_t)t.h, rows);
    if (rows > (size_t)limit)
        GM_CHECK(t.fmt == CUDNN_TENSOR_NHWC); /* (n, h) rows, C innermost: NHWC */
    else
        GM_CHECK(t.fmt == CUDNN_TENSOR_NCHW && t.h == 1);
    fprintf(stderr, "  %zu rows, %s: %s (%d, 16, %d, 1)\n", rows, limit == 65535 ? "eval" : "train",
            t.fmt == CUDNN_TENSOR_NHWC ? "NHWC" : "NCHW", t.n, t.h);
}

static void test_batchnorm_rows(void)
{
    static float buf[16];

    setup();
    /* evaluation: ResNet-20 at batch 128 on 32x32 is 131,072 rows; 70,000 is the shape of
     * the public reports (pytorch#19911) */
    check_view(bn_forward(70000, 0, 1e-5f), 70000, GM_CUDA_BN_MAX_N_INFER);
    check_view(bn_forward(131072, 0, 1e-5f), 131072, GM_CUDA_BN_MAX_N_INFER);
    check_view(bn_forward(1000, 0, 1e-5f), 1000, GM_CUDA_BN_MAX_N_INFER);
    /* training: 131,072 is within its limit; batch 1000 of 32x32 is not */
    check_view(bn_forward(131072, 1, 1e-5f), 131072, GM_CUDA_BN_MAX_N_TRAIN);
    check_view(bn_forward(1024000, 1, 1e-5f), 1024000, GM_CUDA_BN_MAX_N_TRAIN);
    /* a prime past the limit: N = 1, all rows in H */
    struct fake_td p = bn_forward(65537, 0, 1e-5f);
    GM_CHECK(p.n == 1 && p.h == 65537 && p.fmt == CUDNN_TENSOR_NHWC);

    /* the backward: the forward's epsilon (not CUDNN_BN_MIN_EPSILON = 0), training limits */
    (void)bn_forward(1024000, 1, 1e-3f);
    bn_calls = 0;
    bn_eps = -1;
    ops->batchnorm_backward(1024000, 16, buf, buf, buf, buf, buf, buf, buf, buf);
    GM_CHECK_EQ(bn_calls, 1);
    GM_CHECK_EQ(gm_cuda_take_error(&cu), 0);
    GM_CHECK_NEAR(bn_eps, 1e-3, 1e-9, 0);
    check_view(bn_x, 1024000, GM_CUDA_BN_MAX_N_TRAIN);
    gm_cuda_set_current(NULL);
}

static void conv_case(int fails_at, int got, cudnnStatus_t status, const char *search)
{
    static float buf[64];
    struct gm_conv2d_shape s;

    setup();
    GM_CHECK_OK(gm_conv2d_shape_init(&s, 2, 8, 8, 3, 4, 3, 1, 1));
    find_fails_at = fails_at, find_got = got, find_status = status;
    find_calls = conv_calls = 0;
    ops->conv2d_forward(&s, 1, buf, buf, NULL, NULL, buf);
    GM_CHECK_EQ(conv_calls, 0); /* y untouched */
    GM_CHECK_EQ(gm_cuda_take_error(&cu), GM_ERR_GPU);
    fprintf(stderr, "  %s\n", gm_cuda_last_error(&cu));
    GM_CHECK(strstr(gm_cuda_last_error(&cu), search) != NULL);
    GM_CHECK(strstr(gm_cuda_last_error(&cu), "n=2 c=3 h=8 w=8 oc=4 k=3 stride=1 pad=1") != NULL);
    GM_CHECK(strstr(gm_cuda_last_error(&cu), "CUDNN_STATUS_NOT_SUPPORTED") != NULL);
    gm_cuda_set_current(NULL);
}

static void test_conv_search(void)
{
    static float buf[64];
    struct gm_conv2d_shape s;

    conv_case(0, 0, CUDNN_STATUS_SUCCESS, "cudnnFindConvolutionForwardAlgorithm");
    conv_case(0, 3, CUDNN_STATUS_NOT_SUPPORTED, "cudnnFindConvolutionForwardAlgorithm");
    conv_case(1, 0, CUDNN_STATUS_SUCCESS, "cudnnFindConvolutionBackwardDataAlgorithm");
    conv_case(2, 2, CUDNN_STATUS_NOT_SUPPORTED, "cudnnFindConvolutionBackwardFilterAlgorithm");

    /* a good search: the convolution runs with its algorithm; the shape is cached */
    setup();
    GM_CHECK_OK(gm_conv2d_shape_init(&s, 2, 8, 8, 3, 4, 3, 1, 1));
    find_fails_at = -1;
    find_calls = conv_calls = 0;
    ops->conv2d_forward(&s, 1, buf, buf, NULL, NULL, buf);
    ops->conv2d_forward(&s, 1, buf, buf, NULL, NULL, buf);
    GM_CHECK_EQ(gm_cuda_take_error(&cu), 0);
    GM_CHECK_EQ(conv_calls, 2);
    GM_CHECK_EQ(find_calls, 3); /* forward, backward data, backward filter: once */
    GM_CHECK_EQ((int)conv_algo_used, 1);
    GM_CHECK_EQ(groups_set, 1);

    /* a depthwise convolution tells cuDNN its groups (and is searched as a shape of its own) */
    GM_CHECK_OK(gm_conv2d_shape_init_groups(&s, 2, 8, 8, 4, 4, 3, 1, 1, 4));
    ops->conv2d_forward(&s, 1, buf, buf, NULL, NULL, buf);
    GM_CHECK_EQ(gm_cuda_take_error(&cu), 0);
    GM_CHECK_EQ(groups_set, 4);
    GM_CHECK_EQ(find_calls, 6);
    gm_cuda_set_current(NULL);
}

int main(void)
{
    GM_TEST_RUN(test_batchnorm_rows);
    GM_TEST_RUN(test_conv_search);
    return gm_test_finish("test_cuda_fake");
}

#else

int main(void)
{
    printf("test_cuda_fake: SKIP: this build has no CUDA backend (no nvcc, CUDA=0 or a "
           "sanitizer build)\n");
    return 77;
}

#endif
