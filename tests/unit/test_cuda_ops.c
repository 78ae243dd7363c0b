/*
 * tests/unit/test_cuda_ops.c - the CUDA op table against the CPU table (train/nn/ops.h), op by
 * op: the same random inputs go through gm_ops_cpu on the host and through gm_ops_cuda on the
 * GPU, and every output comes back and is compared with the op's stated tolerance.  The cases
 * are one table (name, function, tolerance) covering the forward and backward of every layer
 * (convolution with and without stride, bias and input gradient, grouped, depthwise and 1x1;
 * linear; max pooling with and without the fused ReLU, stride and padding; ReLU, ReLU6;
 * adaptive average pooling; dropout; batch norm in training and evaluation; the residual
 * add, shortcut and global average pool; the input transform), the loss, SGD in every variant
 * and Adam (several steps), the wire codecs and the parameter hash.
 *
 * Tolerances: bit-exact where both sides do the same integer or single-rounding work
 * (pooling, ReLU, dropout, shortcut, add, codecs, hash) and for the optimizers (no FMA on
 * either side, same operation order: this is what keeps GPU and CPU ranks identical); a
 * relative 1e-4 of the output's largest magnitude where the GPU sums in another order
 * (cuBLAS, cuDNN: convolution, linear, batch norm, average pooling); 1e-12 for the loss
 * (double on both sides; the device's exp/log are within 1 ulp).
 *
 * `test_cuda_ops --probe` only says whether a GPU answers (exit 0, or 77 as below).
 * Needs a GPU: exits 77 (skip) with the reason where no GPU answers or the build has no CUDA
 * backend, which is the case in CI.  The host build of the custom kernels is checked there by
 * tests/unit/test_kernels_host.c instead.
 */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/test.h"
#include "train/kernels/cuda.h"
#include "train/kernels/maxpool.h"
#include "train/nn/ops.h"

GM_TEST_DEFINE_STATE;

static const struct gm_ops *cpu, *gpu;
static struct gm_cuda *cu;
static uint64_t rng = 0x9e3779b97f4a7c15ull;

static float frand(float lo, float hi)
{
    rng ^= rng << 13;
    rng ^= rng >> 7;
    rng ^= rng << 17;
    return lo + (hi - lo) * (float)((rng >> 40) & 0xffffff) / 16777216.0f;
}

/* A host buffer of n floats filled in [lo, hi) and its copy on the GPU. */
struct buf {
    float *h, *d;
    size_t n;
};

static struct buf mk(size_t n, float lo, float hi)
{
    struct buf b = {NULL, NULL, n};
    /* the CPU kernels want their 64-byte aligned memory */
    GM_CHECK_OK(gm_device_alloc(GM_DEVICE_CPU, (n + 1) * sizeof(float), (void **)&b.h));
    for (size_t i = 0; i < n; i++)
        b.h[i] = frand(lo, hi);
    GM_CHECK_OK(gm_device_alloc(GM_DEVICE_CUDA, (n + 1) * sizeof(float), (void **)&b.d));
    GM_CHECK_OK(gm_device_copy(GM_DEVICE_CUDA, b.d, GM_DEVICE_CPU, b.h, n * sizeof(float)));
    return b;
}

static void drop(struct buf *b)
{
    gm_device_free(GM_DEVICE_CPU, b->h);
    gm_device_free(GM_DEVICE_CUDA, b->d);
    memset(b, 0, sizeof(*b));
}

/* Bytes of device memory back to a fresh host buffer (the caller frees). */
static void *back(const void *d, size_t bytes)
{
    void *h = calloc(1, bytes + 1);
    GM_CHECK_OK(gm_cuda_sync(cu));
    GM_CHECK_OK(gm_device_copy(GM_DEVICE_CPU, h, GM_DEVICE_CUDA, d, bytes));
    return h;
}

/* The GPU's b (after the op) against the CPU's; rtol relative to the largest |cpu| value,
 * 0 = bit for bit.  Reports the op, the output and the worst element. */
static void same(const char *op, const char *what, const struct buf *b, double rtol)
{
    float *g = back(b->d, b->n * sizeof(float));
    double scale = 0, worst = 0;
    size_t at = 0;
    long differ = 0;

    for (size_t i = 0; i < b->n; i++)
        scale = fmax(scale, fabs((double)b->h[i]));
    for (size_t i = 0; i < b->n; i++) {
        const double d = fabs((double)g[i] - (double)b->h[i]);
        /* bit for bit but for the sign of zero: the CPU's branch-free max-pool backward
         * multiplies dy by 0 and writes -0 where dy < 0 (seen on an H200) */
        const int zeros = g[i] == 0 && b->h[i] == 0;
        if (rtol == 0 ? !zeros && memcmp(&g[i], &b->h[i], sizeof(float)) != 0
                      : !(d <= rtol * scale)) {
            differ++;
            if (!(d <= worst)) {
                worst = d;
                at = i;
            }
        }
    }
    gm_test_state.checks++;
    if (differ > 0)
        GM_TEST_FAIL_("%s %s: %ld of %zu differ; worst [%zu] gpu %.9g cpu %.9g (scale %.3g)", op,
                      what, differ, b->n, at, (double)g[at], (double)b->h[at], scale);
    free(g);
}

static int take_error(void)
{
    return gm_cuda_take_error(cu);
}

/* ---- layers ---- */

/* s: a shape from gm_conv2d_shape_init or gm_conv2d_shape_init_groups */
static void conv_shape_case(struct gm_conv2d_shape s, int bias, int need_dx)
{
    const int n = s.n, h = s.h, w = s.w, c = s.c, oc = s.oc, k = s.k;
    struct buf x = mk((size_t)n * h * w * c, -1, 1);
    struct buf wt = mk((size_t)oc * k * k * (c / s.groups), -0.5f, 0.5f);
    struct buf b = mk((size_t)oc, -0.5f, 0.5f), y = mk((size_t)n * s.oh * s.ow * oc, 0, 0);
    struct buf dy = mk(y.n, -1, 1), dw = mk(wt.n, 0, 0), db = mk(b.n, 0, 0), dx = mk(x.n, 0, 0);
    struct buf ws_c = mk(cpu->conv2d_ws_floats(&s, need_dx) + 16, 0, 0);
    struct buf ws_g = mk(gpu->conv2d_ws_floats(&s, need_dx) + 1, 0, 0);

    cpu->conv2d_forward(&s, need_dx, x.h, wt.h, bias ? b.h : NULL, ws_c.h, y.h);
    gpu->conv2d_forward(&s, need_dx, x.d, wt.d, bias ? b.d : NULL, ws_g.d, y.d);
    same("conv2d", "y", &y, 1e-4);
    cpu->conv2d_backward(&s, x.h, wt.h, dy.h, dw.h, bias ? db.h : NULL, need_dx ? dx.h : NULL,
                         ws_c.h);
    gpu->conv2d_backward(&s, x.d, wt.d, dy.d, dw.d, bias ? db.d : NULL, need_dx ? dx.d : NULL,
                         ws_g.d);
    same("conv2d", "dw", &dw, 1e-4);
    if (bias)
        same("conv2d", "db", &db, 1e-4);
    if (need_dx)
        same("conv2d", "dx", &dx, 1e-4);
    GM_CHECK_OK(take_error());
    drop(&ws_c), drop(&ws_g), drop(&x), drop(&wt), drop(&b), drop(&y), drop(&dy), drop(&dw),
        drop(&db), drop(&dx);
}

static void conv_case(int n, int h, int w, int c, int oc, int k, int pad, int stride, int bias,
                      int need_dx)
{
    struct gm_conv2d_shape s;
    GM_CHECK_OK(gm_conv2d_shape_init(&s, n, h, w, c, oc, k, pad, stride));
    conv_shape_case(s, bias, need_dx);
}

/* torchvision's shapes: cuDNN with a group count against the CPU's tiled paths */
static void conv_groups_case(int n, int h, int w, int c, int oc, int k, int pad, int stride,
                             int groups, int need_dx)
{
    struct gm_conv2d_shape s;
    GM_CHECK_OK(gm_conv2d_shape_init_groups(&s, n, h, w, c, oc, k, pad, stride, groups));
    conv_shape_case(s, 0, need_dx);
}

static void test_conv2d(void)
{
    conv_case(4, 28, 28, 1, 6, 5, 2, 1, 1, 0);   /* LeNet's first layer */
    conv_case(3, 9, 9, 16, 32, 3, 1, 1, 0, 1);   /* VGG block, no bias (a batch norm follows) */
    conv_case(2, 16, 16, 16, 32, 3, 1, 2, 0, 1); /* ResNet down-sampling */
    conv_case(2, 12, 12, 6, 16, 5, 0, 1, 1, 1);
    conv_groups_case(2, 32, 32, 3, 64, 7, 3, 2, 1, 0);   /* ResNet stem */
    conv_groups_case(2, 16, 16, 32, 32, 3, 1, 1, 32, 1); /* MobileNetV2 depthwise */
    conv_groups_case(2, 16, 16, 24, 24, 3, 1, 2, 24, 1); /* depthwise, stride 2 */
    conv_groups_case(2, 8, 8, 32, 64, 1, 0, 1, 1, 1);    /* pointwise */
    conv_groups_case(2, 8, 8, 32, 64, 1, 0, 2, 1, 1);    /* ResNet downsample */
    conv_groups_case(2, 9, 9, 16, 32, 3, 1, 1, 4, 1);    /* grouped */
}

static void test_linear(void)
{
    const int n = 33, in = 120, out = 84;
    struct buf x = mk((size_t)n * in, -1, 1), w = mk((size_t)out * in, -0.3f, 0.3f);
    struct buf b = mk(out, -0.3f, 0.3f), y = mk((size_t)n * out, 0, 0), dy = mk(y.n, -1, 1);
    struct buf dw = mk(w.n, 0, 0), db = mk(b.n, 0, 0), dx = mk(x.n, 0, 0);

    cpu->linear_forward(n, in, out, x.h, w.h, b.h, y.h);
    gpu->linear_forward(n, in, out, x.d, w.d, b.d, y.d);
    same("linear", "y", &y, 1e-5);
    cpu->linear_backward(n, in, out, x.h, w.h, dy.h, dw.h, db.h, dx.h);
    gpu->linear_backward(n, in, out, x.d, w.d, dy.d, dw.d, db.d, dx.d);
    same("linear", "dw", &dw, 1e-5);
    same("linear", "db", &db, 1e-5);
    same("linear", "dx", &dx, 1e-5);
    GM_CHECK_OK(take_error());
    drop(&x), drop(&w), drop(&b), drop(&y), drop(&dy), drop(&dw), drop(&db), drop(&dx);
}

static void maxpool_case(int n, int h, int w, int c, int k, int relu)
{
    const size_t ny = (size_t)n * (h / k) * (w / k) * c;
    struct buf x = mk((size_t)n * h * w * c, -1, 1), y = mk(ny, 0, 0), dy = mk(ny, -1, 1);
    struct buf dx = mk(x.n, 0, 0);
    uint8_t *arg_c = calloc(ny, 1), *arg_g = NULL, *arg_back;

    GM_CHECK_OK(gm_device_alloc(GM_DEVICE_CUDA, ny, (void **)&arg_g));
    cpu->maxpool_forward(n, h, w, c, k, relu, x.h, y.h, arg_c);
    gpu->maxpool_forward(n, h, w, c, k, relu, x.d, y.d, arg_g);
    same("maxpool", "y", &y, 0);
    arg_back = back(arg_g, ny);
    GM_CHECK_EQ(memcmp(arg_back, arg_c, ny), 0);
    cpu->maxpool_backward(n, h, w, c, k, dy.h, arg_c, dx.h);
    gpu->maxpool_backward(n, h, w, c, k, dy.d, arg_g, dx.d);
    same("maxpool", "dx", &dx, 0);
    GM_CHECK_OK(take_error());
    free(arg_c), free(arg_back);
    gm_device_free(GM_DEVICE_CUDA, arg_g);
    drop(&x), drop(&y), drop(&dy), drop(&dx);
}

static void test_maxpool(void)
{
    maxpool_case(3, 8, 8, 6, 2, 1);
    maxpool_case(3, 8, 8, 6, 2, 0);
    maxpool_case(2, 9, 7, 13, 3, 1); /* trailing rows and columns dropped */
    maxpool_case(2, 10, 10, 20, 2, 0);
}

static void maxpool2d_case(int n, int h, int w, int c, int k, int stride, int pad, int relu)
{
    struct gm_pool2d_shape s;
    GM_CHECK_OK(gm_pool2d_shape_init(&s, n, h, w, c, k, stride, pad));
    const size_t ny = (size_t)n * s.oh * s.ow * c;
    struct buf x = mk((size_t)n * h * w * c, -1, 1), y = mk(ny, 0, 0), dy = mk(ny, -1, 1);
    struct buf dx = mk(x.n, 0, 0);
    uint8_t *arg_c = calloc(ny, 1), *arg_g = NULL, *arg_back;

    GM_CHECK_OK(gm_device_alloc(GM_DEVICE_CUDA, ny, (void **)&arg_g));
    cpu->maxpool2d_forward(&s, relu, x.h, y.h, arg_c);
    gpu->maxpool2d_forward(&s, relu, x.d, y.d, arg_g);
    same("maxpool2d", "y", &y, 0);
    arg_back = back(arg_g, ny);
    GM_CHECK_EQ(memcmp(arg_back, arg_c, ny), 0);
    cpu->maxpool2d_backward(&s, dy.h, arg_c, dx.h);
    gpu->maxpool2d_backward(&s, dy.d, arg_g, dx.d);
    same("maxpool2d", "dx", &dx, 1e-7); /* the plain CPU path writes -0 where the GPU adds to 0 */
    GM_CHECK_OK(take_error());
    free(arg_c), free(arg_back);
    gm_device_free(GM_DEVICE_CUDA, arg_g);
    drop(&x), drop(&y), drop(&dy), drop(&dx);
}

static void adapool_case(int n, int h, int w, int c, int oh, int ow)
{
    const size_t ny = (size_t)n * oh * ow * c;
    struct buf x = mk((size_t)n * h * w * c, -1, 1), y = mk(ny, 0, 0), dy = mk(ny, -1, 1);
    struct buf dx = mk(x.n, 0, 0);

    cpu->adaptive_avgpool_forward(n, h, w, c, oh, ow, x.h, y.h);
    gpu->adaptive_avgpool_forward(n, h, w, c, oh, ow, x.d, y.d);
    same("adaptive_avgpool", "y", &y, 0);
    cpu->adaptive_avgpool_backward(n, h, w, c, oh, ow, dy.h, dx.h);
    gpu->adaptive_avgpool_backward(n, h, w, c, oh, ow, dy.d, dx.d);
    same("adaptive_avgpool", "dx", &dx, 0);
    GM_CHECK_OK(take_error());
    drop(&x), drop(&y), drop(&dy), drop(&dx);
}

/* The torchvision families' pooling and ReLU6: same bits as the CPU. */
static void test_families(void)
{
    const size_t n = 10007;
    struct buf x = mk(n, -8, 8), y = mk(n, 0, 0), dy = mk(n, -1, 1), dx = mk(n, 0, 0);

    cpu->relu6_forward(n, x.h, y.h);
    gpu->relu6_forward(n, x.d, y.d);
    same("relu6", "y", &y, 0);
    cpu->relu6_backward(n, y.h, dy.h, dx.h);
    gpu->relu6_backward(n, y.d, dy.d, dx.d);
    same("relu6", "dx", &dx, 0);
    GM_CHECK_OK(take_error());
    drop(&x), drop(&y), drop(&dy), drop(&dx);
    maxpool2d_case(2, 33, 31, 64, 3, 2, 1, 0); /* ResNet's stem pool */
    maxpool2d_case(2, 16, 16, 8, 3, 2, 1, 1);
    maxpool2d_case(2, 8, 10, 5, 2, 2, 0, 0); /* the plain path */
    adapool_case(2, 4, 4, 16, 7, 7);         /* VGG at 128x128 */
    adapool_case(2, 5, 7, 9, 3, 2);
    adapool_case(3, 4, 4, 32, 1, 1);
}

static void test_relu_dropout(void)
{
    const size_t n = 10007;
    struct buf x = mk(n, -1, 1), y = mk(n, 0, 0), dy = mk(n, -1, 1), dx = mk(n, 0, 0);
    struct buf mask = mk(n, 0, 0);

    cpu->relu_forward(n, x.h, y.h);
    gpu->relu_forward(n, x.d, y.d);
    same("relu", "y", &y, 0);
    cpu->relu_backward(n, y.h, dy.h, dx.h);
    gpu->relu_backward(n, y.d, dy.d, dx.d);
    same("relu", "dx", &dx, 0);
    cpu->dropout_forward(n, 0.3f, 77, x.h, mask.h, y.h);
    gpu->dropout_forward(n, 0.3f, 77, x.d, mask.d, y.d);
    same("dropout", "mask", &mask, 0);
    same("dropout", "y", &y, 0);
    cpu->dropout_backward(n, mask.h, dy.h, dx.h);
    gpu->dropout_backward(n, mask.d, dy.d, dx.d);
    same("dropout", "dx", &dx, 0);
    GM_CHECK_OK(take_error());
    drop(&x), drop(&y), drop(&dy), drop(&dx), drop(&mask);
}

static void test_batchnorm(void)
{
    const size_t rows = 2 * 8 * 8;
    const int c = 16;
    struct buf x = mk(rows * c, -2, 3), g = mk(c, 0.5f, 1.5f), be = mk(c, -0.5f, 0.5f);
    struct buf rm = mk(c, -0.1f, 0.1f), rv = mk(c, 0.9f, 1.1f), sm = mk(c, 0, 0), si = mk(c, 0, 0);
    struct buf y = mk(rows * c, 0, 0), dy = mk(rows * c, -1, 1), dg = mk(c, 0, 0), db = mk(c, 0, 0),
               dx = mk(rows * c, 0, 0);

    cpu->batchnorm_forward(rows, c, 1, 0.1f, 1e-5f, x.h, g.h, be.h, rm.h, rv.h, sm.h, si.h, y.h);
    gpu->batchnorm_forward(rows, c, 1, 0.1f, 1e-5f, x.d, g.d, be.d, rm.d, rv.d, sm.d, si.d, y.d);
    same("batchnorm train", "y", &y, 1e-4);
    same("batchnorm train", "running_mean", &rm, 1e-4);
    same("batchnorm train", "running_var", &rv, 1e-4);
    same("batchnorm train", "save_mean", &sm, 1e-4);
    same("batchnorm train", "save_invstd", &si, 1e-4);
    cpu->batchnorm_backward(rows, c, x.h, g.h, sm.h, si.h, dy.h, dg.h, db.h, dx.h);
    gpu->batchnorm_backward(rows, c, x.d, g.d, sm.d, si.d, dy.d, dg.d, db.d, dx.d);
    same("batchnorm", "dgamma", &dg, 1e-4);
    same("batchnorm", "dbeta", &db, 1e-4);
    same("batchnorm", "dx", &dx, 1e-4);
    cpu->batchnorm_forward(rows, c, 0, 0.1f, 1e-5f, x.h, g.h, be.h, rm.h, rv.h, NULL, NULL, y.h);
    gpu->batchnorm_forward(rows, c, 0, 0.1f, 1e-5f, x.d, g.d, be.d, rm.d, rv.d, NULL, NULL, y.d);
    same("batchnorm eval", "y", &y, 1e-4);
    GM_CHECK_OK(take_error());
    drop(&x), drop(&g), drop(&be), drop(&rm), drop(&rv), drop(&sm), drop(&si), drop(&y), drop(&dy),
        drop(&dg), drop(&db), drop(&dx);
}

static void test_residual(void)
{
    const int n = 3, h = 8, w = 8, c = 16, oc = 32, stride = 2, oh = 4, ow = 4;
    struct buf a = mk((size_t)n * h * w * c, -1, 1), b = mk(a.n, -1, 1), y = mk(a.n, 0, 0);
    struct buf sy = mk((size_t)n * oh * ow * oc, 0, 0), sdy = mk(sy.n, -1, 1), sdx = mk(a.n, 0, 0);
    struct buf p = mk((size_t)n * c, 0, 0), pdy = mk(p.n, -1, 1), pdx = mk(a.n, 0, 0);
    struct buf in = mk(a.n, -1, 1), t = mk(a.n, 0, 0);

    cpu->add(a.n, a.h, b.h, y.h);
    gpu->add(a.n, a.d, b.d, y.d);
    same("add", "y", &y, 0);
    cpu->add(a.n, a.h, b.h, a.h); /* in place, as the model does */
    gpu->add(a.n, a.d, b.d, a.d);
    same("add", "y aliasing a", &a, 0);
    cpu->shortcut_forward(n, h, w, c, oc, stride, b.h, sy.h);
    gpu->shortcut_forward(n, h, w, c, oc, stride, b.d, sy.d);
    same("shortcut", "y", &sy, 0);
    cpu->shortcut_backward(n, h, w, c, oc, stride, sdy.h, sdx.h);
    gpu->shortcut_backward(n, h, w, c, oc, stride, sdy.d, sdx.d);
    same("shortcut", "dx", &sdx, 0);
    cpu->avgpool_forward(n, h * w, c, b.h, p.h);
    gpu->avgpool_forward(n, h * w, c, b.d, p.d);
    same("avgpool", "y", &p, 1e-5);
    cpu->avgpool_backward(n, h * w, c, pdy.h, pdx.h);
    gpu->avgpool_backward(n, h * w, c, pdy.d, pdx.d);
    same("avgpool", "dx", &pdx, 1e-6);
    cpu->nchw_to_nhwc(n, c, h * w, in.h, t.h);
    gpu->nchw_to_nhwc(n, c, h * w, in.d, t.d);
    same("nchw_to_nhwc", "y", &t, 0);
    GM_CHECK_OK(take_error());
    drop(&a), drop(&b), drop(&y), drop(&sy), drop(&sdy), drop(&sdx), drop(&p), drop(&pdy),
        drop(&pdx), drop(&in), drop(&t);
}

/* ---- loss, optimizers, hash, codecs ---- */

static void test_xent(void)
{
    const int n = 77, k = 10;
    struct buf z = mk((size_t)n * k, -6, 6), dz = mk(z.n, 0, 0);
    int32_t labels[77], *dl = NULL;
    long c_cpu = -1, c_gpu = -2;

    for (int i = 0; i < n; i++)
        labels[i] = (int32_t)(frand(0, (float)k)) % k;
    GM_CHECK_OK(gm_device_alloc(GM_DEVICE_CUDA, sizeof(labels), (void **)&dl));
    GM_CHECK_OK(gm_device_copy(GM_DEVICE_CUDA, dl, GM_DEVICE_CPU, labels, sizeof(labels)));
    const double l_cpu = cpu->xent(n, k, z.h, labels, dz.h, &c_cpu);
    const double l_gpu = gpu->xent(n, k, z.d, dl, dz.d, &c_gpu);
    GM_CHECK_NEAR(l_gpu, l_cpu, 0, 1e-12);
    GM_CHECK_EQ(c_gpu, c_cpu);
    same("xent", "dlogits", &dz, 1e-6);
    GM_CHECK_OK(take_error());
    gm_device_free(GM_DEVICE_CUDA, dl);
    drop(&z), drop(&dz);
}

static void test_optimizers(void)
{
    const size_t n = 50021;
    const struct {
        float wd, mu;
        int nesterov;
    } sgd[] = {{0, 0, 0},        {5e-4f, 0, 0}, {0, 0.9f, 0},
               {5e-4f, 0.9f, 0}, {0, 0.9f, 1},  {5e-4f, 0.9f, 1}};

    for (size_t v = 0; v < sizeof(sgd) / sizeof(sgd[0]); v++) {
        struct buf p = mk(n, -1, 1), g = mk(n, -0.5f, 0.5f), buf = mk(n, 0, 0);
        const int mom = sgd[v].mu != 0;
        for (int step = 0; step < 3; step++) {
            cpu->sgd_update(n, p.h, g.h, mom ? buf.h : NULL, 0.05f, sgd[v].wd, sgd[v].mu,
                            sgd[v].nesterov);
            gpu->sgd_update(n, p.d, g.d, mom ? buf.d : NULL, 0.05f, sgd[v].wd, sgd[v].mu,
                            sgd[v].nesterov);
        }
        same("sgd", "params (bit for bit)", &p, 0);
        if (mom)
            same("sgd", "momentum (bit for bit)", &buf, 0);
        drop(&p), drop(&g), drop(&buf);
    }
    for (int decay = 0; decay < 2; decay++) {
        struct buf p = mk(n, -1, 1), g = mk(n, -0.5f, 0.5f), m = mk(n, 0, 0), v = mk(n, 0, 0);
        for (long t = 1; t <= 4; t++) {
            const double bc1 = 1.0 - pow(0.9, (double)t), bc2 = 1.0 - pow(0.999, (double)t);
            const struct gm_adam_scalars k = {.b1 = 0.9f,
                                              .omb1 = (float)(1.0 - (double)0.9f),
                                              .b2 = 0.999f,
                                              .omb2 = (float)(1.0 - (double)0.999f),
                                              .wd = decay ? 1e-2f : 0.0f,
                                              .eps = 1e-8f,
                                              .inv_bc2_sqrt = (float)(1.0 / sqrt(bc2)),
                                              .neg_step_size = (float)(-1e-3 / bc1)};
            cpu->adam_update(n, p.h, g.h, m.h, v.h, &k);
            gpu->adam_update(n, p.d, g.d, m.d, v.d, &k);
        }
        same("adam", "params (bit for bit)", &p, 0);
        same("adam", "m", &m, 0);
        same("adam", "v", &v, 0);
        drop(&p), drop(&g), drop(&m), drop(&v);
    }
    GM_CHECK_OK(take_error());
}

static void test_hash_codecs(void)
{
    const size_t n = 4099;
    struct buf x = mk(n, -3, 3), acc = mk(n, -1, 1), out = mk(n, 0, 0);
    void *wire_d = NULL;
    unsigned char *wire_h = malloc(n * 4);

    for (size_t bytes = 0; bytes < 70; bytes += 7)
        GM_CHECK(gpu->param_hash(x.d, bytes) == cpu->param_hash(x.h, bytes));
    GM_CHECK(gpu->param_hash(x.d, n * 4) == cpu->param_hash(x.h, n * 4));
    /* an unaligned start (the lanes then read bytes) */
    GM_CHECK(gpu->param_hash((const char *)x.d + 3, n * 4 - 3) ==
             cpu->param_hash((const char *)x.h + 3, n * 4 - 3));
    GM_CHECK_OK(gm_device_alloc(GM_DEVICE_CUDA, n * 4, &wire_d));
    for (int c = 0; c < GM_CODEC_COUNT; c++) {
        const size_t eb = gm_codec_elem_size((enum gm_codec)c);
        if (c == GM_CODEC_Q8) /* host-only (DiLoCo's deltas live in host memory): ops.h */
            continue;
        cpu->grad_encode((enum gm_codec)c, x.h, n, wire_h);
        gpu->grad_encode((enum gm_codec)c, x.d, n, wire_d);
        unsigned char *got = back(wire_d, n * eb);
        GM_CHECK_EQ(memcmp(got, wire_h, n * eb), 0);
        free(got);
        cpu->grad_decode_add((enum gm_codec)c, wire_h, acc.h, n, out.h);
        gpu->grad_decode_add((enum gm_codec)c, wire_d, acc.d, n, out.d);
        same(gm_codec_name((enum gm_codec)c), "decode_add", &out, 0);
        cpu->grad_decode_add((enum gm_codec)c, wire_h, NULL, n, out.h);
        gpu->grad_decode_add((enum gm_codec)c, wire_d, NULL, n, out.d);
        same(gm_codec_name((enum gm_codec)c), "decode", &out, 0);
    }
    GM_CHECK_OK(take_error());
    gm_device_free(GM_DEVICE_CUDA, wire_d);
    free(wire_h);
    drop(&x), drop(&acc), drop(&out);
}

static const struct {
    const char *name;
    void (*fn)(void);
} cases[] = {
    {"conv2d", test_conv2d},
    {"linear", test_linear},
    {"maxpool", test_maxpool},
    {"relu+dropout", test_relu_dropout},
    {"batchnorm", test_batchnorm},
    {"residual+avgpool+layout", test_residual},
    {"xent", test_xent},
    {"sgd+adam", test_optimizers},
    {"hash+codecs", test_hash_codecs},
    {"relu6+maxpool2d+adaptive", test_families},
};

int main(int argc, char **argv)
{
    char why[320], desc[200];
    int err;

    if (!gm_cuda_built()) {
        printf("test_cuda_ops: SKIP: this build has no CUDA backend (no nvcc, CUDA=0 or a "
               "sanitizer build)\n");
        return GM_EXIT_SKIP;
    }
    if (gm_cuda_device_count(why, sizeof(why)) < 1) {
        printf("test_cuda_ops: SKIP: no GPU answers: %s\n", why);
        return GM_EXIT_SKIP;
    }
    /* --probe: only whether a GPU answers (bench/gpu_check.sh asks before anything else) */
    if (argc > 1 && strcmp(argv[1], "--probe") == 0) {
        if (gm_cuda_device_describe(0, desc, sizeof(desc)) < 0)
            snprintf(desc, sizeof(desc), "cuda:0 (no description: %s)", gm_cuda_last_error(NULL));
        printf("test_cuda_ops: a GPU answers: %s\n", desc);
        return 0;
    }
    if ((err = gm_cuda_new(0, &cu)) < 0) {
        fprintf(stderr, "test_cuda_ops: a GPU answers but its context fails: %s (%s)\n",
                gm_strerror(err), gm_cuda_last_error(cu));
        return 1;
    }
    cpu = gm_ops_get(GM_DEVICE_CPU);
    gpu = gm_ops_get(GM_DEVICE_CUDA);
    GM_CHECK(cpu != NULL && gpu != NULL);
    if (gpu == NULL) {
        gm_cuda_free(cu);
        return gm_test_finish("test_cuda_ops");
    }
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        long f0 = gm_test_state.failures;
        gm_test_state.current = cases[i].name;
        cases[i].fn();
        fprintf(stderr, "%s %s\n", gm_test_state.failures == f0 ? "ok  " : "FAIL", cases[i].name);
    }
    gm_cuda_free(cu);
    return gm_test_finish("test_cuda_ops");
}
