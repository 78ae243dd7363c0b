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
    ENTRY(relu_forward);
    ENTRY(relu_backward);
    ENTRY(dropout_forward);
    ENTRY(dropout_backward);
    ENTRY(batchnorm_forward);
    ENTRY(batchnorm_backward);
    ENTRY(add);
    ENTRY(shortcut_forward);
    ENTRY(shortcut_backward);
    ENTRY(avgpool_forward);
    ENTRY(avgpool_backward);
    ENTRY(xent);
    ENTRY(sgd_update);
    ENTRY(adam_update);
    ENTRY(param_hash);
    ENTRY(grad_encode);
    ENTRY(grad_decode_add);
#undef ENTRY
    /* the table is exactly these entries: a new op must be added above too */
    GM_CHECK_EQ(sizeof(*o), sizeof(void *) * 26);
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

int main(void)
{
    GM_TEST_RUN(test_tables);
    GM_TEST_RUN(test_batchnorm);
    GM_TEST_RUN(test_resid);
    GM_TEST_RUN(test_conv_stride);
    return gm_test_finish("test_ops");
}
