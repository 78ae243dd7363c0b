/*
 * tests/unit/test_cuda_fake.c - the CUDA op table (train/nn/ops_cuda.c) driven through a
 * stand-in cuDNN: the process's library table (cuda_libs.h, gm_cudalib) is filled with
 * functions here that record what they are given, and a context made by hand
 * (gm_cuda_set_current) has descriptors that are this file's records.  No GPU, no driver,
 * no cuDNN file: the decisions the op table makes before the library runs are checked in CI.
 *   - convolution: a search that returns no algorithm, or whose best one failed, records
 *     an error (GM_ERR_GPU) whose line names the search and the shape; a good search runs
 *     the convolution with the algorithm found and is not repeated for the same shape;
 *     with gm_cuda_conv_exact the search's fastest FFT answer is passed over.
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
#include "train/kernels/conv2d.h"
#include "train/nn/ops.h"

/* What a stand-in descriptor holds. */
struct fake_td {
    cudnnTensorFormat_t fmt;
    int n, c, h, w, set;
};

static struct fake_td tds[4];
static int fake_dummy[8]; /* stands for the handle, filter, convolution descriptors */

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

/* the times the searches report, ms: forward, backward data, backward filter */
static float find_ms[3];

/* One answer per search: find_got results, all with find_status at the failing search;
 * CUDNN_STATUS_SUCCESS (algorithm 1, no workspace) at the others, or with fft_first two
 * answers, an FFT algorithm (2, or 4 for the forward) first, then algorithm 1. */
static int fft_first;

#define FAKE_FIND(name, which, desc_t1, desc_t2, desc_t3, desc_t4, perf_t)                         \
    static cudnnStatus_t name(cudnnHandle_t h, const desc_t1 a, const desc_t2 b, const desc_t3 c,  \
                              const desc_t4 d, const int req, int *got, perf_t *perf)              \
    {                                                                                              \
        (void)h, (void)a, (void)b, (void)c, (void)d, (void)req;                                    \
        find_calls++;                                                                              \
        *got = find_fails_at == (which) ? find_got : fft_first ? 2 : 1;                            \
        memset(perf, 0, sizeof(*perf) * (size_t)(*got > 0 ? *got : 1));                            \
        for (int i_ = 0; i_ < *got; i_++) { /* cuDNN sorts failures last: all fail */              \
            perf[i_].status = find_fails_at == (which) ? find_status : CUDNN_STATUS_SUCCESS;       \
            perf[i_].algo = 1;                                                                     \
            perf[i_].time = find_ms[which];                                                        \
        }                                                                                          \
        if (fft_first && find_fails_at != (which))                                                 \
            perf[0].algo = (which) == 0 ? 4 : 2; /* FFT in all three enums */                      \
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
    gm_cuda_set_current(&cu);
    ops = gm_ops_get(GM_DEVICE_CUDA);
    GM_ASSERT(ops != NULL);
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

/* The exact policy (GM_CUDA_CONV=exact) passes over FFT and Winograd answers. */
static void test_conv_exact(void)
{
    static float buf[64];
    struct gm_conv2d_shape s;

    setup();
    GM_CHECK_OK(gm_conv2d_shape_init(&s, 2, 8, 8, 3, 4, 3, 1, 1));
    find_fails_at = -1;
    fft_first = 1;
    ops->conv2d_forward(&s, 1, buf, buf, NULL, NULL, buf);
    GM_CHECK_EQ(gm_cuda_take_error(&cu), 0);
    GM_CHECK_EQ((int)conv_algo_used, (int)CUDNN_CONVOLUTION_FWD_ALGO_FFT); /* the fastest */
    gm_cuda_conv_exact(&cu, 1);
    ops->conv2d_forward(&s, 1, buf, buf, NULL, NULL, buf);
    GM_CHECK_EQ(gm_cuda_take_error(&cu), 0);
    GM_CHECK_EQ((int)conv_algo_used, 1); /* searched again, FFT left out */
    fft_first = 0;
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
    GM_TEST_RUN(test_conv_search);
    GM_TEST_RUN(test_conv_exact);
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
