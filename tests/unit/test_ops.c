/*
 * tests/unit/test_ops.c - the op dispatcher (train/nn/ops.h) and the CPU
 * kernels it lists that the older layer tests (test_model.c) do not cover:
 * every table entry is present, a device without a table is refused with
 * -ENOTSUP, and (further down) kernels against naive references and finite
 * differences.
 */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/test.h"
#include "train/kernels/avgpool.h"
#include "train/kernels/winograd.h"
#include "train/nn/ops.h"
#include "train/nn/optim.h"

GM_TEST_DEFINE_STATE;

/* Every entry of a table, by name, so a missing one is reported by name. */
static void check_complete(const struct gm_ops *o)
{
#define ENTRY(f)                                                                                   \
    do {                                                                                           \
        gm_test_state.checks++;                                                                    \
        if (o->f == NULL)                                                                          \
            GM_TEST_FAIL_("%s: op table entry %s is NULL", o->name, #f);                           \
    } while (0)
    GM_CHECK(o->name != NULL);
    ENTRY(nchw_to_nhwc);
    ENTRY(conv2d_ws_floats);
    ENTRY(conv2d_forward);
    ENTRY(conv2d_backward);
    ENTRY(linear_forward);
    ENTRY(linear_backward);
    ENTRY(maxpool_forward);
    ENTRY(maxpool_backward);
    ENTRY(maxpool2d_forward);
    ENTRY(maxpool2d_backward);
    ENTRY(relu_forward);
    ENTRY(relu_backward);
    ENTRY(relu6_forward);
    ENTRY(relu6_backward);
    ENTRY(dropout_forward);
    ENTRY(dropout_backward);
    ENTRY(batchnorm_forward);
    ENTRY(batchnorm_backward);
    ENTRY(add);
    ENTRY(shortcut_forward);
    ENTRY(shortcut_backward);
    ENTRY(avgpool_forward);
    ENTRY(avgpool_backward);
    ENTRY(adaptive_avgpool_forward);
    ENTRY(adaptive_avgpool_backward);
    ENTRY(xent);
    ENTRY(sgd_update);
    ENTRY(adam_update);
    ENTRY(param_hash);
    ENTRY(grad_encode);
    ENTRY(grad_decode_add);
#undef ENTRY
    /* the table is exactly these entries: a new op must be added above too */
    GM_CHECK_EQ(sizeof(*o), sizeof(void *) * 32);
}

static void test_tables(void)
{
    const struct gm_ops *cpu = gm_ops_get(GM_DEVICE_CPU);
    struct gm_optim o;
    struct gm_optim_config cfg;

    GM_CHECK(cpu == &gm_ops_cpu);
    GM_CHECK_STREQ(cpu->name, "cpu");
    check_complete(cpu);
    if (gm_ops_get(GM_DEVICE_CUDA) != NULL) {
        check_complete(gm_ops_get(GM_DEVICE_CUDA));
        return;
    }
    /* no CUDA table in this build: the optimizer refuses the device */
    gm_optim_config_default(&cfg, GM_OPTIM_ADAM);
    cfg.device = GM_DEVICE_CUDA;
    GM_CHECK_ERR(gm_optim_init(&o, &cfg, 10), -ENOTSUP);
    GM_CHECK(o.state == NULL && o.n == 0);
    gm_optim_free(&o);
}

/* deterministic pseudo-random floats in [-1, 1) */
static void fill(float *p, size_t n, unsigned seed)
{
    uint64_t z = seed * 0x9e3779b97f4a7c15ull + 1;
    for (size_t i = 0; i < n; i++) {
        z ^= z << 13, z ^= z >> 7, z ^= z << 17;
        p[i] = (float)((double)(z >> 11) / 9007199254740992.0 * 2.0 - 1.0);
    }
}

/* Batch norm, training mode, against a double-precision reference written
 * from the definition, and its backward against central differences of the
 * smooth loss L = sum(coef * y) (no kinks: the check can be tight). */
static void test_batchnorm(void)
{
    enum { ROWS = 24, C = 5 };
    const struct gm_ops *o = &gm_ops_cpu;
    float x[ROWS * C], y[ROWS * C], coef[ROWS * C], gamma[C], beta[C], rm[C], rv[C], save[2 * C];
    float dgamma[C], dbeta[C], dx[ROWS * C], y2[ROWS * C];

    fill(x, ROWS * C, 1);
    for (int i = 0; i < ROWS * C; i++)
        x[i] = x[i] * 3.0f + (float)(i % C); /* per-channel offsets */
    fill(coef, ROWS * C, 2);
    fill(gamma, C, 3);
    fill(beta, C, 4);
    for (int c = 0; c < C; c++) {
        rm[c] = 0.5f;
        rv[c] = 2.0f;
    }
    o->batchnorm_forward(ROWS, C, 1, 0.1f, 1e-5f, x, gamma, beta, rm, rv, save, save + C, y);
    for (int c = 0; c < C; c++) {
        double mean = 0, var = 0;
        for (int r = 0; r < ROWS; r++)
            mean += x[r * C + c];
        mean /= ROWS;
        for (int r = 0; r < ROWS; r++)
            var += (x[r * C + c] - mean) * (x[r * C + c] - mean);
        var /= ROWS;
        GM_CHECK_NEAR(rm[c], 0.9 * 0.5 + 0.1 * mean, 1e-6, 1e-6);
        GM_CHECK_NEAR(rv[c], 0.9 * 2.0 + 0.1 * var * ROWS / (ROWS - 1), 1e-6, 1e-6);
        for (int r = 0; r < ROWS; r++)
            GM_CHECK_NEAR(y[r * C + c],
                          (x[r * C + c] - mean) / sqrt(var + 1e-5) * gamma[c] + beta[c], 1e-5,
                          1e-5);
    }
    /* evaluation: running statistics, nothing else written */
    float rm_before = rm[1], save_before = save[1];
    o->batchnorm_forward(ROWS, C, 0, 0.1f, 1e-5f, x, gamma, beta, rm, rv, save, save + C, y2);
    GM_CHECK(rm[1] == rm_before && save[1] == save_before);
    GM_CHECK_NEAR(y2[7 * C + 1], (x[7 * C + 1] - rm[1]) / sqrt(rv[1] + 1e-5) * gamma[1] + beta[1],
                  1e-5, 1e-5);
    /* backward against central differences */
    o->batchnorm_backward(ROWS, C, x, gamma, save, save + C, coef, dgamma, dbeta, dx);
    double worst = 0;
    for (int k = 0; k < 3 * C + 12; k++) {
        float *p, *g;
        if (k < C)
            p = &gamma[k], g = &dgamma[k];
        else if (k < 2 * C)
            p = &beta[k - C], g = &dbeta[k - C];
        else
            p = &x[(k * 37) % (ROWS * C)], g = &dx[(k * 37) % (ROWS * C)];
        const float s = *p, eps = 1e-2f;
        double l[2];
        for (int side = 0; side < 2; side++) {
            float m2[C], v2[C], sv[2 * C];
            *p = side ? s - eps : s + eps;
            o->batchnorm_forward(ROWS, C, 1, 0.1f, 1e-5f, x, gamma, beta, m2, v2, sv, sv + C, y2);
            l[side] = 0;
            for (int i = 0; i < ROWS * C; i++)
                l[side] += (double)coef[i] * y2[i];
        }
        *p = s;
        const double num = (l[0] - l[1]) / (2.0 * eps);
        worst = fmax(worst, fabs(num - *g) / (1e-4 + 1e-3 * fabs(num)));
    }
    gm_test_state.checks++;
    if (!(worst <= 1.0))
        GM_TEST_FAIL_("batchnorm backward: worst FD error %.3g of tolerance", worst);
}

/* Option-A shortcut and global average pool against naive loops, and each
 * backward as the adjoint of its forward: <dy, F x> == <F^T dy, x>. */
static void test_resid(void)
{
    enum { N = 2, H = 5, W = 4, C = 3, OC = 7, S = 2, OH = 3, OW = 2 };
    const struct gm_ops *o = &gm_ops_cpu;
    float x[N * H * W * C], y[N * OH * OW * OC], dy[N * OH * OW * OC], dx[N * H * W * C];
    float p[N * C], dp[N * C], px[N * H * W * C];
    double a = 0, b = 0;

    fill(x, N * H * W * C, 5);
    fill(dy, N * OH * OW * OC, 6);
    o->shortcut_forward(N, H, W, C, OC, S, x, y);
    for (int n = 0; n < N; n++)
        for (int i = 0; i < OH; i++)
            for (int j = 0; j < OW; j++)
                for (int c = 0; c < OC; c++) {
                    const int src = c - (OC - C) / 2; /* torch pads (OC-C)/2 below */
                    const float want =
                        src >= 0 && src < C ? x[((n * H + i * S) * W + j * S) * C + src] : 0.0f;
                    GM_CHECK(y[((n * OH + i) * OW + j) * OC + c] == want);
                }
    o->shortcut_backward(N, H, W, C, OC, S, dy, dx);
    for (int i = 0; i < N * OH * OW * OC; i++)
        a += (double)dy[i] * y[i];
    for (int i = 0; i < N * H * W * C; i++)
        b += (double)dx[i] * x[i];
    GM_CHECK_NEAR(a, b, 1e-5, 1e-6);

    o->avgpool_forward(N, H * W, C, x, p);
    for (int n = 0; n < N; n++)
        for (int c = 0; c < C; c++) {
            double s = 0;
            for (int i = 0; i < H * W; i++)
                s += x[(n * H * W + i) * C + c];
            GM_CHECK_NEAR(p[n * C + c], s / (H * W), 1e-6, 1e-6);
        }
    fill(dp, N * C, 7);
    o->avgpool_backward(N, H * W, C, dp, px);
    a = b = 0;
    for (int i = 0; i < N * C; i++)
        a += (double)dp[i] * p[i];
    for (int i = 0; i < N * H * W * C; i++)
        b += (double)px[i] * x[i];
    GM_CHECK_NEAR(a, b, 1e-5, 1e-6);
    const float want = p[3] + dp[3];
    o->add(N * C, p, dp, p); /* y may alias a */
    GM_CHECK(p[3] == want);
}

/* Strided convolution (the layer entry points, im2col path) against the
 * loop definition, and its input gradient as the adjoint. */
static void test_conv_stride(void)
{
    enum { N = 2, H = 7, W = 6, C = 3, OC = 4, K = 3, P = 1, S = 2 };
    const struct gm_ops *o = &gm_ops_cpu;
    struct gm_conv2d_shape s;
    float *x, *w, *b, *y, *dy, *dx, *dw, *db, *ws;
    double worst = 0, a = 0, bb = 0;

    GM_CHECK_OK(gm_conv2d_shape_init(&s, N, H, W, C, OC, K, P, S));
    GM_CHECK_EQ(s.oh, 4);
    GM_CHECK_EQ(s.ow, 3);
    const size_t nx = N * H * W * C, ny = (size_t)N * s.oh * s.ow * OC, nw = OC * K * K * C;
    x = calloc(nx, 4), w = calloc(nw, 4), b = calloc(OC, 4), y = calloc(ny, 4);
    dy = calloc(ny, 4), dx = calloc(nx, 4), dw = calloc(nw, 4), db = calloc(OC, 4);
    GM_CHECK_OK(gm_device_alloc(GM_DEVICE_CPU, o->conv2d_ws_floats(&s, 1) * 4, (void **)&ws));
    fill(x, nx, 8);
    fill(w, nw, 9);
    fill(b, OC, 10);
    fill(dy, ny, 11);
    o->conv2d_forward(&s, 1, x, w, b, ws, y);
    for (int n = 0; n < N; n++)
        for (int oy = 0; oy < s.oh; oy++)
            for (int ox = 0; ox < s.ow; ox++)
                for (int oc = 0; oc < OC; oc++) {
                    double acc = b[oc];
                    for (int ky = 0; ky < K; ky++)
                        for (int kx = 0; kx < K; kx++)
                            for (int c = 0; c < C; c++) {
                                const int iy = oy * S + ky - P, ix = ox * S + kx - P;
                                if (iy >= 0 && iy < H && ix >= 0 && ix < W)
                                    acc += (double)x[((n * H + iy) * W + ix) * C + c] *
                                           w[((oc * K + ky) * K + kx) * C + c];
                            }
                    worst = fmax(worst, fabs(acc - y[((n * s.oh + oy) * s.ow + ox) * OC + oc]));
                }
    GM_CHECK_NEAR(worst, 0, 1e-5, 0);
    o->conv2d_backward(&s, x, w, dy, dw, db, dx, ws);
    /* <dy, conv(x) - b> == <dx, x> and == <dw, w> */
    for (size_t i = 0; i < ny; i++)
        a += (double)dy[i] * (y[i] - b[i % OC]);
    for (size_t i = 0; i < nx; i++)
        bb += (double)dx[i] * x[i];
    GM_CHECK_NEAR(a, bb, 1e-4, 1e-5);
    bb = 0;
    for (size_t i = 0; i < nw; i++)
        bb += (double)dw[i] * w[i];
    GM_CHECK_NEAR(a, bb, 1e-4, 1e-5);
    /* no bias: y = conv(x) alone, db untouched */
    db[0] = 42.0f;
    o->conv2d_forward(&s, 1, x, w, NULL, ws, y);
    o->conv2d_backward(&s, x, w, dy, dw, NULL, dx, ws);
    GM_CHECK(db[0] == 42.0f);
    a = 0;
    for (size_t i = 0; i < ny; i++)
        a += (double)dy[i] * y[i];
    GM_CHECK_NEAR(a, bb, 1e-4, 1e-5);
    free(x), free(w), free(b), free(y), free(dy), free(dx), free(dw), free(db);
    gm_device_free(GM_DEVICE_CPU, ws);
}

/* One tiled (gm_conv2d_shape_init_groups) convolution against the loop
 * definition in double: y, and dx, dw, db of the loss sum(dy * y). */
static void conv_case(int n, int h, int w, int c, int oc, int k, int p, int st, int g, int need_dx)
{
    const struct gm_ops *o = &gm_ops_cpu;
    struct gm_conv2d_shape s;
    float *x, *wt, *b, *y, *dy, *dx, *dw, *db, *ws;
    double *rdx, *rdw, *rdb;
    double worst_y = 0, worst_dx = 0, worst_dw = 0, worst_db = 0, scale = 0;

    GM_CHECK_OK(gm_conv2d_shape_init_groups(&s, n, h, w, c, oc, k, p, st, g));
    GM_CHECK(s.tiled == 1 && s.groups == g);
    const int cg = c / g, ocg = oc / g;
    const size_t nx = (size_t)n * h * w * c, ny = (size_t)n * s.oh * s.ow * oc;
    const size_t nw = (size_t)oc * k * k * cg;
    x = calloc(nx, 4), wt = calloc(nw, 4), b = calloc(oc, 4), y = calloc(ny, 4);
    dy = calloc(ny, 4), dx = calloc(nx, 4), dw = calloc(nw, 4), db = calloc(oc, 4);
    rdx = calloc(nx, 8), rdw = calloc(nw, 8), rdb = calloc(oc, 8);
    ws = NULL;
    const size_t wsf = o->conv2d_ws_floats(&s, need_dx);
    if (wsf > 0)
        GM_CHECK_OK(gm_device_alloc(GM_DEVICE_CPU, wsf * 4, (void **)&ws));
    fill(x, nx, 20 + k);
    fill(wt, nw, 21 + g);
    fill(b, oc, 22);
    fill(dy, ny, 23);
    /* a stale workspace must not matter: the tiled path treats it as scratch */
    for (size_t i = 0; i < wsf; i++)
        ws[i] = NAN;
    o->conv2d_forward(&s, need_dx, x, wt, b, ws, y);
    for (size_t i = 0; i < wsf; i++)
        ws[i] = NAN;
    o->conv2d_backward(&s, x, wt, dy, dw, db, need_dx ? dx : NULL, ws);
    for (int bi = 0; bi < n; bi++)
        for (int oy = 0; oy < s.oh; oy++)
            for (int ox = 0; ox < s.ow; ox++)
                for (int oc_i = 0; oc_i < oc; oc_i++) {
                    const int gi = oc_i / ocg;
                    const size_t yi = (((size_t)bi * s.oh + oy) * s.ow + ox) * oc + oc_i;
                    double acc = b[oc_i];
                    rdb[oc_i] += dy[yi];
                    for (int ky = 0; ky < k; ky++)
                        for (int kx = 0; kx < k; kx++)
                            for (int ci = 0; ci < cg; ci++) {
                                const int iy = oy * st + ky - p, ix = ox * st + kx - p;
                                if (iy < 0 || iy >= h || ix < 0 || ix >= w)
                                    continue;
                                const size_t xi =
                                    (((size_t)bi * h + iy) * w + ix) * c + (size_t)gi * cg + ci;
                                const size_t wi = (((size_t)oc_i * k + ky) * k + kx) * cg + ci;
                                acc += (double)x[xi] * wt[wi];
                                rdx[xi] += (double)dy[yi] * wt[wi];
                                rdw[wi] += (double)dy[yi] * x[xi];
                            }
                    worst_y = fmax(worst_y, fabs(acc - y[yi]));
                }
    for (size_t i = 0; i < nw; i++) {
        worst_dw = fmax(worst_dw, fabs(rdw[i] - dw[i]));
        scale = fmax(scale, fabs(rdw[i]));
    }
    for (int i = 0; i < oc; i++)
        worst_db = fmax(worst_db, fabs(rdb[i] - db[i]));
    if (need_dx)
        for (size_t i = 0; i < nx; i++)
            worst_dx = fmax(worst_dx, fabs(rdx[i] - dx[i]));
    gm_test_state.checks++;
    /* fp32 sums of up to K*K*C/G (y, dx) or N*OH*OW (dw, db) terms of size ~1 */
    if (!(worst_y <= 1e-4 * sqrt(k * k * cg) && worst_dx <= 1e-4 * sqrt(k * k * ocg + 1) &&
          worst_dw <= 1e-5 * (scale + 1) && worst_db <= 1e-4 * sqrt((double)n * s.oh * s.ow)))
        GM_TEST_FAIL_(
            "conv n%d %dx%dx%d -> %d k%d p%d s%d g%d: worst y %.3g dx %.3g dw %.3g db %.3g", n, h,
            w, c, oc, k, p, st, g, worst_y, worst_dx, worst_dw, worst_db);
    /* no bias: y is conv(x) alone, db untouched */
    const float with_bias = y[ny - 1];
    db[0] = 42.0f;
    o->conv2d_forward(&s, need_dx, x, wt, NULL, ws, y);
    o->conv2d_backward(&s, x, wt, dy, dw, NULL, need_dx ? dx : NULL, ws);
    GM_CHECK(db[0] == 42.0f);
    GM_CHECK_NEAR(y[ny - 1] + b[oc - 1], with_bias, 1e-5, 1e-5);
    free(x), free(wt), free(b), free(y), free(dy), free(dx), free(dw), free(db);
    free(rdx), free(rdw), free(rdb);
    gm_device_free(GM_DEVICE_CPU, ws);
}

/* Grouped, depthwise, pointwise, strided and multi-tile convolutions
 * (everything torchvision's families use), and the tiled workspace bound. */
static void test_conv_groups(void)
{
    struct gm_conv2d_shape s;

    conv_case(2, 7, 6, 4, 6, 3, 1, 1, 1, 1);      /* plain 3x3, tiled */
    conv_case(2, 7, 6, 6, 4, 3, 1, 2, 2, 1);      /* grouped, strided */
    conv_case(2, 5, 5, 4, 8, 3, 1, 1, 4, 1);      /* depthwise multiplier 2 (grouped path) */
    conv_case(2, 7, 6, 12, 12, 3, 1, 1, 12, 1);   /* depthwise, 8 lanes + 4 */
    conv_case(2, 7, 8, 9, 9, 3, 1, 2, 9, 1);      /* depthwise, stride 2 */
    conv_case(1, 9, 7, 16, 16, 5, 2, 2, 16, 0);   /* depthwise 5x5, no dx */
    conv_case(2, 5, 4, 5, 7, 1, 0, 1, 1, 1);      /* pointwise: x is col */
    conv_case(2, 7, 6, 5, 7, 1, 0, 2, 1, 1);      /* 1x1 stride 2 (ResNet downsample) */
    conv_case(2, 13, 11, 3, 10, 7, 3, 2, 1, 0);   /* ResNet stem, first layer */
    conv_case(2, 12, 12, 2048, 3, 3, 1, 1, 1, 1); /* three tiles (128 + 128 + 32 pixels) */
    conv_case(1, 12, 12, 1024, 4, 3, 1, 1, 2, 1); /* grouped, two tiles (128 + 16) */
    conv_case(2, 9, 10, 16, 32, 3, 1, 1, 1, 1);   /* Winograd, ragged edge tiles */
    conv_case(1, 4, 4, 32, 16, 3, 1, 1, 1, 0);    /* Winograd, one tile, no dx */
    /* bad groups; the tiled workspace does not grow with the batch or image */
    GM_CHECK_ERR(gm_conv2d_shape_init_groups(&s, 1, 8, 8, 6, 4, 3, 1, 1, 4), -EINVAL);
    GM_CHECK_ERR(gm_conv2d_shape_init_groups(&s, 1, 8, 8, 6, 4, 3, 1, 1, 0), -EINVAL);
    GM_CHECK_OK(gm_conv2d_shape_init_groups(&s, 32, 224, 224, 40, 40, 3, 1, 1, 1));
    GM_CHECK(gm_ops_cpu.conv2d_ws_floats(&s, 1) <= 2 * (GM_CONV2D_TILE_FLOATS + 16 * 360));
    GM_CHECK_OK(gm_conv2d_shape_init_groups(&s, 32, 224, 224, 3, 64, 7, 3, 2, 1));
    GM_CHECK(gm_ops_cpu.conv2d_ws_floats(&s, 0) <= GM_CONV2D_TILE_FLOATS + 16 * 147);
    /* at least GM_CONV2D_TILE_MIN_ROWS pixels a tile, and twice the output channels (the
     * weights are packed again for every tile): ResNet's last 3x3 layers' im2col sizes,
     * with output channels that are not in 16s (those go to Winograd, test_conv_winograd) */
    GM_CHECK_OK(gm_conv2d_shape_init_groups(&s, 32, 7, 7, 512, 60, 3, 1, 1, 1));
    GM_CHECK_EQ(gm_ops_cpu.conv2d_ws_floats(&s, 1), 2 * (size_t)GM_CONV2D_TILE_MIN_ROWS * 4608);
    GM_CHECK_OK(gm_conv2d_shape_init_groups(&s, 32, 7, 7, 512, 500, 3, 1, 1, 1));
    GM_CHECK_EQ(gm_ops_cpu.conv2d_ws_floats(&s, 1), 2 * (size_t)1000 * 4608);
    GM_CHECK_OK(gm_conv2d_shape_init_groups(&s, 1, 7, 7, 512, 500, 3, 1, 1, 1));
    GM_CHECK_EQ(gm_ops_cpu.conv2d_ws_floats(&s, 1), 2 * (size_t)49 * 4608); /* the whole layer */
    GM_CHECK_OK(gm_conv2d_shape_init(&s, 1, 8, 8, 6, 4, 3, 1, 1));
    GM_CHECK(s.groups == 1 && s.tiled == 0);
}

/* Winograd F(4x4, 3x3) (train/kernels/winograd.h) against the im2col path
 * (the whole-batch shape of the same convolution) at sizes whose tiles span
 * several chunks and leave ragged edges: y, dx, dw, db of sum(dy * y), each
 * by its largest error relative to the largest im2col value (conv_case
 * checks small shapes against double). */
static void wino_case(int n, int h, int w, int c, int oc, double *worst)
{
    const struct gm_ops *o = &gm_ops_cpu;
    struct gm_conv2d_shape sw, si;
    float *x, *wt, *b, *out[2][4], *ws[2];

    GM_CHECK_OK(gm_conv2d_shape_init_groups(&sw, n, h, w, c, oc, 3, 1, 1, 1));
    GM_CHECK_OK(gm_conv2d_shape_init(&si, n, h, w, c, oc, 3, 1, 1));
    GM_CHECK(gm_winograd_use(&sw) && !gm_winograd_use(&si));
    const size_t nx = (size_t)n * h * w * c, ny = (size_t)n * h * w * oc, nw = (size_t)oc * 9 * c;
    const size_t len[4] = {ny, nx, nw, (size_t)oc};
    float *dy = malloc(ny * 4);
    x = malloc(nx * 4), wt = malloc(nw * 4), b = malloc((size_t)oc * 4);
    fill(x, nx, 31);
    fill(wt, nw, 32);
    fill(b, oc, 33);
    fill(dy, ny, 34);
    for (int v = 0; v < 2; v++) {
        const struct gm_conv2d_shape *s = v == 0 ? &sw : &si;
        for (int i = 0; i < 4; i++)
            out[v][i] = malloc(len[i] * 4);
        GM_CHECK_OK(gm_device_alloc(GM_DEVICE_CPU, o->conv2d_ws_floats(s, 1) * 4, (void **)&ws[v]));
        o->conv2d_forward(s, 1, x, wt, b, ws[v], out[v][0]);
        o->conv2d_backward(s, x, wt, dy, out[v][2], out[v][3], out[v][1], ws[v]);
    }
    for (int i = 0; i < 4; i++) {
        double scale = 0, err = 0;
        for (size_t j = 0; j < len[i]; j++) {
            scale = fmax(scale, fabs(out[1][i][j]));
            err = fmax(err, fabs((double)out[0][i][j] - out[1][i][j]));
        }
        worst[i] = fmax(worst[i], err / scale);
    }
    for (int v = 0; v < 2; v++) {
        for (int i = 0; i < 4; i++)
            free(out[v][i]);
        gm_device_free(GM_DEVICE_CPU, ws[v]);
    }
    free(x), free(wt), free(b), free(dy);
}

static void test_conv_winograd(void)
{
    static const char *what[4] = {"y", "dx", "dw", "db"};
    struct gm_conv2d_shape s;
    double worst[4] = {0};

    /* which shapes take it: 3x3 stride 1 pad 1, one group, channels in 16s, output >= 4x4 */
    GM_CHECK_OK(gm_conv2d_shape_init_groups(&s, 2, 8, 8, 64, 64, 3, 1, 1, 1));
    GM_CHECK(gm_winograd_use(&s));
    GM_CHECK_OK(gm_conv2d_shape_init_groups(&s, 2, 8, 8, 64, 64, 3, 1, 2, 1));
    GM_CHECK(!gm_winograd_use(&s));
    GM_CHECK_OK(gm_conv2d_shape_init_groups(&s, 2, 8, 8, 64, 64, 3, 0, 1, 1));
    GM_CHECK(!gm_winograd_use(&s));
    GM_CHECK_OK(gm_conv2d_shape_init_groups(&s, 2, 8, 8, 64, 64, 3, 1, 1, 2));
    GM_CHECK(!gm_winograd_use(&s));
    GM_CHECK_OK(gm_conv2d_shape_init_groups(&s, 2, 8, 8, 24, 64, 3, 1, 1, 1));
    GM_CHECK(!gm_winograd_use(&s));
    GM_CHECK_OK(gm_conv2d_shape_init_groups(&s, 2, 3, 8, 64, 64, 3, 1, 1, 1));
    GM_CHECK(!gm_winograd_use(&s));
    GM_CHECK_OK(gm_conv2d_shape_init(&s, 2, 8, 8, 64, 64, 3, 1, 1));
    GM_CHECK(!gm_winograd_use(&s)); /* the existing models' whole-batch path stays im2col */
    /* its workspace: U and dU, one chunk's V and M; bounded whatever the batch and image */
    GM_CHECK_OK(gm_conv2d_shape_init_groups(&s, 32, 224, 224, 64, 64, 3, 1, 1, 1));
    GM_CHECK(gm_ops_cpu.conv2d_ws_floats(&s, 1) <=
             2 * (size_t)36 * 64 * 64 + GM_WINOGRAD_CHUNK_FLOATS + 64);
    GM_CHECK_OK(gm_conv2d_shape_init_groups(&s, 32, 7, 7, 512, 512, 3, 1, 1, 1));
    GM_CHECK(gm_ops_cpu.conv2d_ws_floats(&s, 1) <=
             2 * (size_t)36 * 512 * 512 + GM_WINOGRAD_CHUNK_FLOATS + 64);

    wino_case(32, 16, 16, 64, 64, worst);  /* 512 tiles: two chunks of 256 */
    wino_case(12, 18, 17, 128, 96, worst); /* 300 tiles, three chunks, ragged edges */
    wino_case(3, 7, 7, 512, 512, worst);   /* ResNet's layer4 at 224x224 */
    /* fp32 im2col is itself off the exact values by ~1e-7 relative.  Measured here:
     * y 6.6e-7 (forward F(2x2)), dx 6.0e-6 and dw 7.2e-6 (backward F(4x4)), db 0 (the
     * same sum); F(4x4) forward would give y 9.6e-6 (winograd.h says why it is not) */
    static const double bar[4] = {2e-6, 2e-5, 2e-5, 0};
    for (int i = 0; i < 4; i++) {
        fprintf(stderr, "winograd vs im2col: worst %s %.3g (relative to the largest)\n", what[i],
                worst[i]);
        GM_CHECK_NEAR(worst[i], 0, bar[i], 0);
    }
}

static void test_relu6(void)
{
    const struct gm_ops *o = &gm_ops_cpu;
    const float x[] = {-3.0f, -0.0f, 0.0f, 1e-7f, 2.5f, 5.999f, 6.0f, 6.001f, 100.0f};
    const float want[] = {0, 0, 0, 1e-7f, 2.5f, 5.999f, 6.0f, 6.0f, 6.0f};
    const float gwant[] = {0, 0, 0, 1, 1, 1, 0, 0, 0};
    enum { N = sizeof(x) / sizeof(x[0]) };
    float y[N], dy[N], dx[N];

    o->relu6_forward(N, x, y);
    for (int i = 0; i < N; i++) {
        GM_CHECK(y[i] == want[i]);
        dy[i] = 0.5f + (float)i;
    }
    o->relu6_backward(N, y, dy, dx);
    for (int i = 0; i < N; i++)
        GM_CHECK(dx[i] == gwant[i] * dy[i]);
}

/* Max pooling with stride and padding (ResNet's 3x3/2 pad 1 stem pool) against
 * the definition: the first maximum among the window's inputs wins, padding
 * never does; backward sums what overlapping windows send. */
static void pool_case(int n, int h, int w, int c, int k, int st, int p, int relu)
{
    const struct gm_ops *o = &gm_ops_cpu;
    struct gm_pool2d_shape s;
    float *x, *y, *dy, *dx;
    double *rdx;
    uint8_t *arg;
    long bad = 0;
    double worst = 0;

    GM_CHECK_OK(gm_pool2d_shape_init(&s, n, h, w, c, k, st, p));
    GM_CHECK_EQ(s.oh, (h + 2 * p - k) / st + 1);
    const size_t nx = (size_t)n * h * w * c, ny = (size_t)n * s.oh * s.ow * c;
    x = calloc(nx, 4), dx = calloc(nx, 4), y = calloc(ny, 4), dy = calloc(ny, 4);
    rdx = calloc(nx, 8), arg = calloc(ny, 1);
    fill(x, nx, 30);
    for (size_t i = 0; i < nx; i += 7)
        x[i] = 0.25f; /* ties: the first one wins */
    fill(dy, ny, 31);
    o->maxpool2d_forward(&s, relu, x, y, arg);
    for (int b = 0; b < n; b++)
        for (int oy = 0; oy < s.oh; oy++)
            for (int ox = 0; ox < s.ow; ox++)
                for (int q = 0; q < c; q++) {
                    const size_t yi = (((size_t)b * s.oh + oy) * s.ow + ox) * c + q;
                    float m = -INFINITY;
                    int best = -1;
                    size_t bi = 0;
                    for (int ky = 0; ky < k; ky++)
                        for (int kx = 0; kx < k; kx++) {
                            const int iy = oy * st - p + ky, ix = ox * st - p + kx;
                            if (iy < 0 || iy >= h || ix < 0 || ix >= w)
                                continue;
                            const size_t xi = (((size_t)b * h + iy) * w + ix) * c + q;
                            if (best < 0 || x[xi] > m)
                                m = x[xi], best = ky * k + kx, bi = xi;
                        }
                    if (relu && !(m > 0.0f)) {
                        bad += y[yi] != 0.0f || arg[yi] != GM_MAXPOOL_NONE;
                        continue;
                    }
                    bad += y[yi] != m || arg[yi] != best;
                    rdx[bi] += dy[yi];
                }
    GM_CHECK_EQ(bad, 0);
    for (size_t i = 0; i < nx; i++)
        dx[i] = NAN; /* every element must be written */
    o->maxpool2d_backward(&s, dy, arg, dx);
    for (size_t i = 0; i < nx; i++)
        worst = fmax(worst, fabs(rdx[i] - dx[i]));
    GM_CHECK_NEAR(worst, 0, 1e-6, 0);
    free(x), free(dx), free(y), free(dy), free(rdx), free(arg);
}

static void test_maxpool2d(void)
{
    struct gm_pool2d_shape s;

    pool_case(2, 9, 8, 12, 3, 2, 1, 0); /* ResNet's stem pool, odd size */
    pool_case(2, 8, 8, 5, 3, 2, 1, 1);  /* fused ReLU */
    pool_case(1, 7, 9, 3, 3, 1, 1, 0);  /* stride 1: heavy overlap */
    pool_case(2, 6, 7, 10, 2, 2, 0, 0); /* plain k x k path, odd width */
    pool_case(1, 9, 9, 4, 3, 3, 0, 1);  /* plain 3x3 path, fused ReLU */
    pool_case(1, 5, 5, 3, 2, 1, 1, 0);  /* even window, pad 1 */
    GM_CHECK_ERR(gm_pool2d_shape_init(&s, 1, 8, 8, 1, 3, 2, 2), -EINVAL); /* pad > k/2 */
    GM_CHECK_ERR(gm_pool2d_shape_init(&s, 1, 32, 32, 1, 16, 1, 0), -EINVAL);
    GM_CHECK_ERR(gm_pool2d_shape_init(&s, 1, 2, 2, 1, 3, 1, 0), -EINVAL);
}

/* Adaptive average pooling against PyTorch's definition of the cells (they
 * overlap when the sizes do not divide, repeat inputs when upsampling). */
static void adapool_case(int n, int h, int w, int c, int oh, int ow)
{
    const struct gm_ops *o = &gm_ops_cpu;
    const size_t nx = (size_t)n * h * w * c, ny = (size_t)n * oh * ow * c;
    float *x = calloc(nx, 4), *dx = calloc(nx, 4), *y = calloc(ny, 4), *dy = calloc(ny, 4);
    double *rdx = calloc(nx, 8);
    double worst_y = 0, worst_dx = 0;

    fill(x, nx, 40);
    fill(dy, ny, 41);
    o->adaptive_avgpool_forward(n, h, w, c, oh, ow, x, y);
    for (int b = 0; b < n; b++)
        for (int i = 0; i < oh; i++)
            for (int j = 0; j < ow; j++) {
                /* floor(i*h/oh) .. ceil((i+1)*h/oh), in floating point */
                const int y0 = (int)floor((double)i * h / oh), y1 = (int)ceil((i + 1.0) * h / oh);
                const int x0 = (int)floor((double)j * w / ow), x1 = (int)ceil((j + 1.0) * w / ow);
                for (int q = 0; q < c; q++) {
                    double sum = 0;
                    const size_t yi = (((size_t)b * oh + i) * ow + j) * c + q;
                    for (int iy = y0; iy < y1; iy++)
                        for (int ix = x0; ix < x1; ix++) {
                            const size_t xi = (((size_t)b * h + iy) * w + ix) * c + q;
                            sum += x[xi];
                            rdx[xi] += (double)dy[yi] / ((y1 - y0) * (x1 - x0));
                        }
                    worst_y = fmax(worst_y, fabs(sum / ((y1 - y0) * (x1 - x0)) - y[yi]));
                }
            }
    for (size_t i = 0; i < nx; i++)
        dx[i] = NAN;
    o->adaptive_avgpool_backward(n, h, w, c, oh, ow, dy, dx);
    for (size_t i = 0; i < nx; i++)
        worst_dx = fmax(worst_dx, fabs(rdx[i] - dx[i]));
    GM_CHECK_NEAR(worst_y, 0, 1e-6, 0);
    GM_CHECK_NEAR(worst_dx, 0, 1e-6, 0);
    free(x), free(dx), free(y), free(dy), free(rdx);
}

static void test_adaptive_avgpool(void)
{
    adapool_case(2, 4, 4, 9, 7, 7); /* VGG at 128x128: 4x4 -> 7x7 */
    adapool_case(2, 5, 7, 3, 3, 2); /* overlapping cells */
    adapool_case(1, 14, 14, 4, 7, 7);
    adapool_case(3, 4, 6, 10, 1, 1); /* global */
    adapool_case(1, 1, 1, 5, 7, 7);  /* one input everywhere */
    /* 1x1 is the global pool */
    float x[2 * 12 * 3], a[2 * 3], g[2 * 3];
    fill(x, sizeof(x) / 4, 42);
    gm_ops_cpu.adaptive_avgpool_forward(2, 3, 4, 3, 1, 1, x, a);
    gm_ops_cpu.avgpool_forward(2, 12, 3, x, g);
    for (int i = 0; i < 6; i++)
        GM_CHECK_NEAR(a[i], g[i], 1e-6, 1e-6);
}

/* The families' ops chained as in a network, x -> grouped conv (3x3/2) ->
 * ReLU6 -> max pool (3x3/2 pad 1) -> adaptive average pool (3x3), loss
 * L = sum(coef * y): the backward pass against central differences of L
 * for inputs and weights.  A perturbation that crosses a kink (ReLU6's
 * clamps, a max changing hands) shows as two step sizes disagreeing; such
 * points are skipped, and most must survive. */
struct chain {
    struct gm_conv2d_shape cs;
    struct gm_pool2d_shape ps;
    float *x, *w, *a, *r, *m, *y, *coef, *ws;
    uint8_t *arg;
};

static double chain_loss(struct chain *ch)
{
    const struct gm_ops *o = &gm_ops_cpu;
    const size_t na = (size_t)ch->cs.n * ch->cs.oh * ch->cs.ow * ch->cs.oc;
    const size_t ny = (size_t)ch->cs.n * 3 * 3 * ch->cs.oc;
    double l = 0;

    o->conv2d_forward(&ch->cs, 1, ch->x, ch->w, NULL, ch->ws, ch->a);
    o->relu6_forward(na, ch->a, ch->r);
    o->maxpool2d_forward(&ch->ps, 0, ch->r, ch->m, ch->arg);
    o->adaptive_avgpool_forward(ch->ps.n, ch->ps.oh, ch->ps.ow, ch->ps.c, 3, 3, ch->m, ch->y);
    for (size_t i = 0; i < ny; i++)
        l += (double)ch->coef[i] * ch->y[i];
    return l;
}

static void test_chain_fd(void)
{
    enum { N = 2, H = 13, W = 11, C = 4, OC = 6, G = 2 };
    const struct gm_ops *o = &gm_ops_cpu;
    struct chain ch;
    int used = 0, tried = 0;
    double worst = 0;

    GM_CHECK_OK(gm_conv2d_shape_init_groups(&ch.cs, N, H, W, C, OC, 3, 1, 2, G));
    GM_CHECK_OK(gm_pool2d_shape_init(&ch.ps, N, ch.cs.oh, ch.cs.ow, OC, 3, 2, 1));
    const size_t nx = N * H * W * C, nw = OC * 9 * (C / G);
    const size_t na = (size_t)N * ch.cs.oh * ch.cs.ow * OC,
                 nm = (size_t)N * ch.ps.oh * ch.ps.ow * OC;
    const size_t ny = N * 9 * OC;
    ch.x = calloc(nx, 4), ch.w = calloc(nw, 4), ch.a = calloc(na, 4), ch.r = calloc(na, 4);
    ch.m = calloc(nm, 4), ch.y = calloc(ny, 4), ch.coef = calloc(ny, 4), ch.arg = calloc(nm, 1);
    GM_CHECK_OK(
        gm_device_alloc(GM_DEVICE_CPU, (o->conv2d_ws_floats(&ch.cs, 1) + 1) * 4, (void **)&ch.ws));
    float *dx = calloc(nx, 4), *dw = calloc(nw, 4), *da = calloc(na, 4), *dr = calloc(na, 4);
    float *dm = calloc(nm, 4);
    fill(ch.x, nx, 50);
    for (size_t i = 0; i < nx; i++)
        ch.x[i] *= 4.0f; /* conv outputs on both sides of ReLU6's clamps */
    fill(ch.w, nw, 51);
    fill(ch.coef, ny, 52);
    chain_loss(&ch);
    /* backward: dL/dy = coef */
    o->adaptive_avgpool_backward(N, ch.ps.oh, ch.ps.ow, OC, 3, 3, ch.coef, dm);
    o->maxpool2d_backward(&ch.ps, dm, ch.arg, dr);
    o->relu6_backward(na, ch.r, dr, da);
    o->conv2d_backward(&ch.cs, ch.x, ch.w, da, dw, NULL, dx, ch.ws);
    for (int k = 0; k < 40; k++) {
        float *p = k < 30 ? &ch.x[((size_t)k * 97) % nx] : &ch.w[((size_t)k * 13) % nw];
        const float g = k < 30 ? dx[((size_t)k * 97) % nx] : dw[((size_t)k * 13) % nw];
        const float s0 = *p;
        double num[2];
        for (int e = 0; e < 2; e++) {
            const float eps = e ? 5e-3f : 1e-2f;
            *p = s0 + eps;
            const double lp = chain_loss(&ch);
            *p = s0 - eps;
            const double lm = chain_loss(&ch);
            num[e] = (lp - lm) / (2.0 * eps);
        }
        *p = s0;
        tried++;
        if (fabs(num[0] - num[1]) > 1e-3 + 1e-2 * fabs(num[1]))
            continue; /* a kink between the step sizes */
        used++;
        worst = fmax(worst, fabs(num[1] - g) / (2e-3 + 1e-2 * fabs(num[1])));
    }
    GM_CHECK(used >= tried * 3 / 4);
    gm_test_state.checks++;
    if (!(worst <= 1.0))
        GM_TEST_FAIL_("chain backward: worst FD error %.3g of tolerance (%d of %d points)", worst,
                      used, tried);
    free(ch.x), free(ch.w), free(ch.a), free(ch.r), free(ch.m), free(ch.y), free(ch.coef);
    free(ch.arg), free(dx), free(dw), free(da), free(dr), free(dm);
    gm_device_free(GM_DEVICE_CPU, ch.ws);
}

int main(void)
{
    GM_TEST_RUN(test_tables);
    GM_TEST_RUN(test_batchnorm);
    GM_TEST_RUN(test_resid);
    GM_TEST_RUN(test_conv_stride);
    GM_TEST_RUN(test_conv_groups);
    GM_TEST_RUN(test_conv_winograd);
    GM_TEST_RUN(test_relu6);
    GM_TEST_RUN(test_maxpool2d);
    GM_TEST_RUN(test_adaptive_avgpool);
    GM_TEST_RUN(test_chain_fd);
    return gm_test_finish("test_ops");
}
