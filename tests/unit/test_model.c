/*
 * tests/unit/test_model.c - correctness of the CPU kernels and models.
 *
 *  - BLAS conv (im2col + sgemm) equals a naive 7-loop conv, forward and all
 *    three gradients, over shapes with and without padding, 1 and 3 channels.
 *  - Every layer's backward equals central finite differences of a scalar
 *    L = sum(y * r) (r random), computed in double from float32 forwards.
 *  - Softmax cross-entropy gradient against finite differences.
 *  - Whole models (lenet5, mlp with dropout): parameter gradients against
 *    finite differences of the loss.
 *  - LeNet-5 forward + backward on a fixed batch against an independent NumPy
 *    implementation in PyTorch layout (tests/unit/lenet_ref.py, float64),
 *    per tensor; skipped (that part only) when /usr/bin/python3 lacks numpy.
 *  - Export/import to PyTorch layout round-trips.
 */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "common/assert.h"
#include "train/nn/rng.h"
#include "common/test.h"
#include "train/kernels/act.h"
#include "train/kernels/conv2d.h"
#include "train/kernels/linear.h"
#include "train/kernels/maxpool.h"
#include "train/kernels/xent.h"
#include "train/nn/model.h"

GM_TEST_DEFINE_STATE;

static struct gm_rng rng;

static float *randv(size_t n, float scale)
{
    float *v = malloc(n * sizeof(float) + 1);
    for (size_t i = 0; i < n; i++)
        v[i] = (float)((2.0 * gm_rng_double(&rng) - 1.0) * scale);
    return v;
}

static double dot(const float *a, const float *b, size_t n)
{
    double s = 0;
    for (size_t i = 0; i < n; i++)
        s += (double)a[i] * (double)b[i];
    return s;
}

static double maxdiff(const float *a, const float *b, size_t n, double *scale)
{
    double d = 0, s = 0;
    for (size_t i = 0; i < n; i++) {
        d = fmax(d, fabs((double)a[i] - (double)b[i]));
        s = fmax(s, fabs((double)b[i]));
    }
    if (scale)
        *scale = s;
    return d;
}

/* ---- naive conv ----------------------------------------------------------- */

static void naive_conv(const struct gm_conv2d_shape *s, const float *x, const float *w,
                       const float *b, float *y)
{
    for (int n = 0; n < s->n; n++)
        for (int oy = 0; oy < s->oh; oy++)
            for (int ox = 0; ox < s->ow; ox++)
                for (int o = 0; o < s->oc; o++) {
                    double acc = b[o];
                    for (int ky = 0; ky < s->k; ky++)
                        for (int kx = 0; kx < s->k; kx++)
                            for (int c = 0; c < s->c; c++) {
                                int iy = oy + ky - s->pad, ix = ox + kx - s->pad;
                                if (iy < 0 || ix < 0 || iy >= s->h || ix >= s->w)
                                    continue;
                                acc += (double)x[(((size_t)n * s->h + iy) * s->w + ix) * s->c + c] *
                                       w[(((size_t)o * s->k + ky) * s->k + kx) * s->c + c];
                            }
                    y[(((size_t)n * s->oh + oy) * s->ow + ox) * s->oc + o] = (float)acc;
                }
}

static void naive_conv_backward(const struct gm_conv2d_shape *s, const float *x, const float *w,
                                const float *dy, double *dw, double *db, double *dx)
{
    size_t nw = (size_t)s->oc * s->k * s->k * s->c;
    memset(dw, 0, nw * sizeof(double));
    memset(db, 0, (size_t)s->oc * sizeof(double));
    memset(dx, 0, (size_t)s->n * s->h * s->w * s->c * sizeof(double));
    for (int n = 0; n < s->n; n++)
        for (int oy = 0; oy < s->oh; oy++)
            for (int ox = 0; ox < s->ow; ox++)
                for (int o = 0; o < s->oc; o++) {
                    double g = dy[(((size_t)n * s->oh + oy) * s->ow + ox) * s->oc + o];
                    db[o] += g;
                    for (int ky = 0; ky < s->k; ky++)
                        for (int kx = 0; kx < s->k; kx++)
                            for (int c = 0; c < s->c; c++) {
                                int iy = oy + ky - s->pad, ix = ox + kx - s->pad;
                                if (iy < 0 || ix < 0 || iy >= s->h || ix >= s->w)
                                    continue;
                                size_t xi = (((size_t)n * s->h + iy) * s->w + ix) * s->c + c;
                                size_t wi = (((size_t)o * s->k + ky) * s->k + kx) * s->c + c;
                                dw[wi] += g * x[xi];
                                dx[xi] += g * w[wi];
                            }
                }
}

static void check_close_d(const char *what, const float *got, const double *want, size_t n,
                          double rtol)
{
    double d = 0, s = 0;
    for (size_t i = 0; i < n; i++) {
        d = fmax(d, fabs(got[i] - want[i]));
        s = fmax(s, fabs(want[i]));
    }
    gm_test_state.checks++;
    if (!(d <= rtol * (s + 1e-6)))
        GM_TEST_FAIL_("%s: max diff %.3g (scale %.3g)", what, d, s);
}

static void test_conv_blas_equals_naive(void)
{
    const int cases[][6] = {/* n h w c oc k pad */
                            {2, 28, 28, 1, 6, 5},
                            {3, 14, 14, 6, 16, 5},
                            {2, 7, 9, 3, 4, 3},
                            {1, 5, 5, 2, 3, 5},
                            {2, 6, 4, 3, 2, 1}};
    const int pads[] = {2, 0, 1, 2, 0};
    int directs = 0;

    for (size_t t = 0; t < GM_ARRAY_SIZE(cases); t++) {
        struct gm_conv2d_shape s;
        GM_CHECK_OK(gm_conv2d_shape_init(&s, cases[t][0], cases[t][1], cases[t][2], cases[t][3],
                                         cases[t][4], cases[t][5], pads[t], 1));
        size_t nx = (size_t)s.n * s.h * s.w * s.c, nw = (size_t)s.oc * s.k * s.k * s.c;
        size_t ny = (size_t)s.n * s.oh * s.ow * s.oc,
               ncol = (size_t)s.n * s.oh * s.ow * s.k * s.k * s.c;
        float *x = randv(nx, 1), *w = randv(nw, 0.5f), *b = randv((size_t)s.oc, 0.5f);
        float *y = randv(ny, 1), *yref = randv(ny, 1), *dy = randv(ny, 1);
        float *col = randv(ncol, 1), *dcol = randv(ncol, 1);
        float *dw = randv(nw, 1), *db = randv((size_t)s.oc, 1), *dx = randv(nx, 1);
        double *rdw = calloc(nw, sizeof(double)), *rdb = calloc((size_t)s.oc, sizeof(double)),
               *rdx = calloc(nx, sizeof(double));

        gm_conv2d_forward_cpu(&s, x, w, b, col, y);
        naive_conv(&s, x, w, b, yref);
        double sc, d = maxdiff(y, yref, ny, &sc);
        GM_CHECK_NEAR(d, 0, 1e-5 * (sc + 1), 0);
        gm_conv2d_backward_cpu(&s, col, w, dy, dw, db, dcol, dx);
        naive_conv_backward(&s, x, w, dy, rdw, rdb, rdx);
        check_close_d("conv dw", dw, rdw, nw, 1e-5);
        check_close_d("conv db", db, rdb, (size_t)s.oc, 1e-5);
        check_close_d("conv dx", dx, rdx, nx, 1e-5);
        if (gm_conv2d_use_direct(&s, 0)) { /* the direct kernel, same references */
            float *pack = aligned_alloc(32, gm_conv2d_direct_pack_floats(&s) * sizeof(float));
            gm_conv2d_direct_forward_cpu(&s, x, w, b, pack, y);
            d = maxdiff(y, yref, ny, &sc);
            GM_CHECK_NEAR(d, 0, 1e-5 * (sc + 1), 0);
            gm_conv2d_direct_backward_cpu(&s, x, dy, dw, db, pack);
            check_close_d("direct conv dw", dw, rdw, nw, 1e-5);
            check_close_d("direct conv db", db, rdb, (size_t)s.oc, 1e-5);
            free(pack);
            directs++;
        }
        free(x), free(w), free(b), free(y), free(yref), free(dy), free(col), free(dcol);
        free(dw), free(db), free(dx), free(rdw), free(rdb), free(rdx);
    }
    GM_CHECK_EQ(directs, 4);
}

/* ---- finite differences ---------------------------------------------------- */

/* A layer under test: forward(in) -> out; loss L = sum(out * r). */
typedef void (*fwd_fn)(void *ctx, const float *in, float *out);

/* Checks analytic dL/d(v) against central differences at up to `probes`
 * random positions of v (perturbing v in place; v feeds fwd through ctx). */
static void fd_check(const char *what, void *ctx, fwd_fn fwd, const float *in, float *v, size_t nv,
                     const float *grad, float *out, const float *r, size_t nout, float eps,
                     double tol, int probes)
{
    double worst = 0;
    for (int p = 0; p < probes; p++) {
        size_t i = probes >= (int)nv ? (size_t)p : (size_t)gm_rng_below(&rng, (uint32_t)(nv));
        if (i >= nv)
            break;
        float saved = v[i];
        v[i] = saved + eps;
        fwd(ctx, in, out);
        double lp = dot(out, r, nout);
        v[i] = saved - eps;
        fwd(ctx, in, out);
        double lm = dot(out, r, nout);
        v[i] = saved;
        double num = (lp - lm) / (2.0 * (double)eps);
        double err = fabs(num - grad[i]) / fmax(1.0, fabs(num));
        worst = fmax(worst, err);
    }
    gm_test_state.checks++;
    if (!(worst <= tol))
        GM_TEST_FAIL_("%s: worst finite-difference error %.3g > %.3g", what, worst, tol);
}

struct conv_ctx {
    struct gm_conv2d_shape s;
    float *w, *b, *col;
};

static void conv_fwd(void *ctx, const float *in, float *out)
{
    struct conv_ctx *c = ctx;
    gm_conv2d_forward_cpu(&c->s, in, c->w, c->b, c->col, out);
}

static void test_conv_fd(void)
{
    struct conv_ctx c;
    GM_CHECK_OK(gm_conv2d_shape_init(&c.s, 2, 8, 7, 3, 4, 3, 1, 1));
    size_t nx = 2 * 8 * 7 * 3, nw = 4 * 3 * 3 * 3, ny = (size_t)2 * c.s.oh * c.s.ow * 4;
    size_t ncol = (size_t)2 * c.s.oh * c.s.ow * 27;
    float *x = randv(nx, 1), *r = randv(ny, 1), *y = randv(ny, 1), *dcol = randv(ncol, 1);
    float *dw = randv(nw, 1), *db = randv(4, 1), *dx = randv(nx, 1);
    c.w = randv(nw, 0.5f);
    c.b = randv(4, 0.5f);
    c.col = randv(ncol, 1);
    conv_fwd(&c, x, y);
    gm_conv2d_backward_cpu(&c.s, c.col, c.w, r, dw, db, dcol, dx);
    fd_check("conv dx", &c, conv_fwd, x, x, nx, dx, y, r, ny, 1e-2f, 2e-3, 400);
    fd_check("conv dw", &c, conv_fwd, x, c.w, nw, dw, y, r, ny, 1e-2f, 2e-3, 400);
    fd_check("conv db", &c, conv_fwd, x, c.b, 4, db, y, r, ny, 1e-2f, 2e-3, 4);
    free(x), free(r), free(y), free(dcol), free(dw), free(db), free(dx), free(c.w), free(c.b);
    free(c.col);
}

struct lin_ctx {
    int n, in, out;
    float *w, *b;
};

static void lin_fwd(void *ctx, const float *in, float *out)
{
    struct lin_ctx *c = ctx;
    gm_linear_forward_cpu(c->n, c->in, c->out, in, c->w, c->b, out);
}

static void test_linear_fd(void)
{
    struct lin_ctx c = {.n = 5, .in = 17, .out = 9};
    size_t nx = 5 * 17, nw = 9 * 17, ny = 5 * 9;
    float *x = randv(nx, 1), *r = randv(ny, 1), *y = randv(ny, 1);
    float *dw = randv(nw, 1), *db = randv(9, 1), *dx = randv(nx, 1);
    c.w = randv(nw, 0.5f);
    c.b = randv(9, 0.5f);
    lin_fwd(&c, x, y);
    gm_linear_backward_cpu(c.n, c.in, c.out, x, c.w, r, dw, db, dx);
    fd_check("linear dx", &c, lin_fwd, x, x, nx, dx, y, r, ny, 1e-2f, 1e-3, 200);
    fd_check("linear dw", &c, lin_fwd, x, c.w, nw, dw, y, r, ny, 1e-2f, 1e-3, 200);
    fd_check("linear db", &c, lin_fwd, x, c.b, 9, db, y, r, ny, 1e-2f, 1e-3, 9);
    free(x), free(r), free(y), free(dw), free(db), free(dx), free(c.w), free(c.b);
}

struct pool_ctx {
    int n, h, w, c, k, relu;
    uint8_t *arg;
};

static void pool_fwd(void *ctx, const float *in, float *out)
{
    struct pool_ctx *c = ctx;
    gm_maxpool_forward_cpu(c->n, c->h, c->w, c->c, c->k, c->relu, in, out, c->arg);
}

static void maxpool_case(int n, int h, int w, int ch, int k, int relu)
{
    struct pool_ctx c = {.n = n, .h = h, .w = w, .c = ch, .k = k, .relu = relu};
    const int oh = h / k, ow = w / k;
    size_t nx = (size_t)n * h * w * ch, ny = (size_t)n * oh * ow * ch;
    float *x = malloc(nx * sizeof(float)), *r = randv(ny, 1), *y = randv(ny, 1), *dx = randv(nx, 1);
    c.arg = malloc(ny);
    /* distinct values at least 0.05 apart, centred on 0 so the fused ReLU
     * zeroes some windows, and eps = 1e-2 never flips an argmax or a sign */
    for (size_t i = 0; i < nx; i++)
        x[i] = ((float)i - (float)nx / 2 + 0.5f) * 0.05f;
    for (size_t i = nx - 1; i > 0; i--) {
        size_t j = (size_t)gm_rng_below(&rng, (uint32_t)(i + 1));
        float t = x[i];
        x[i] = x[j];
        x[j] = t;
    }
    pool_fwd(&c, x, y);
    gm_maxpool_backward_cpu(c.n, c.h, c.w, c.c, c.k, r, c.arg, dx);
    fd_check(relu ? "relu+maxpool dx" : "maxpool dx", &c, pool_fwd, x, x, nx, dx, y, r, ny, 1e-2f,
             1e-4, (int)nx);
    pool_fwd(&c, x, y); /* fd_check leaves y from a perturbed input */
    /* against a naive loop: max over the window (then ReLU) */
    long bad = 0;
    for (int b = 0; b < n; b++)
        for (int oy = 0; oy < oh; oy++)
            for (int ox = 0; ox < ow; ox++)
                for (int q = 0; q < ch; q++) {
                    float m = -1e30f;
                    for (int dy = 0; dy < k; dy++)
                        for (int dxx = 0; dxx < k; dxx++) {
                            float v =
                                x[(((size_t)b * h + oy * k + dy) * w + ox * k + dxx) * ch + q];
                            m = v > m ? v : m;
                        }
                    if (relu && m < 0)
                        m = 0;
                    if (y[(((size_t)b * oh + oy) * ow + ox) * ch + q] != m && bad++ < 3)
                        fprintf(stderr, "pool k=%d relu=%d: got %g want %g\n", k, relu,
                                y[(((size_t)b * oh + oy) * ow + ox) * ch + q], m);
                }
    GM_CHECK_EQ(bad, 0);
    free(x), free(r), free(y), free(dx), free(c.arg);
}

static void test_maxpool_fd(void)
{
    /* odd sizes: the trailing row/column is dropped, as in PyTorch; channel
     * counts below, at and above one 8-lane vector */
    maxpool_case(2, 9, 8, 3, 2, 0);
    maxpool_case(2, 8, 8, 6, 2, 1);
    maxpool_case(1, 6, 7, 16, 2, 1);
    maxpool_case(1, 7, 6, 11, 3, 0);
    maxpool_case(2, 6, 6, 9, 3, 1);
    /* ties: the first maximum takes the gradient, as in PyTorch */
    float x[4] = {1, 3, 3, 2}, y, dx[4], g = 1;
    uint8_t arg;
    gm_maxpool_forward_cpu(1, 2, 2, 1, 2, 0, x, &y, &arg);
    gm_maxpool_backward_cpu(1, 2, 2, 1, 2, &g, &arg, dx);
    GM_CHECK(y == 3 && arg == 1 && dx[0] == 0 && dx[1] == 1 && dx[2] == 0 && dx[3] == 0);
}

static void relu_fwd(void *ctx, const float *in, float *out)
{
    gm_relu_forward_cpu(*(size_t *)ctx, in, out);
}

struct drop_ctx {
    size_t n;
    float p;
    float *mask;
};

static void drop_fwd(void *ctx, const float *in, float *out)
{
    struct drop_ctx *c = ctx;
    gm_dropout_forward_cpu(c->n, c->p, 42, in, c->mask, out);
}

static void test_relu_dropout_fd(void)
{
    size_t n = 300;
    float *x = randv(n, 1), *r = randv(n, 1), *y = randv(n, 1), *dx = randv(n, 1);
    struct drop_ctx d = {.n = n, .p = 0.3f, .mask = malloc(n * sizeof(float))};
    size_t kept = 0;

    for (size_t i = 0; i < n; i++) /* keep away from the kink at 0 */
        if (fabsf(x[i]) < 0.05f)
            x[i] = 0.5f;
    relu_fwd(&n, x, y);
    gm_relu_backward_cpu(n, y, r, dx);
    fd_check("relu dx", &n, relu_fwd, x, x, n, dx, y, r, n, 1e-2f, 1e-4, (int)n);

    drop_fwd(&d, x, y);
    gm_dropout_backward_cpu(n, d.mask, r, dx);
    fd_check("dropout dx", &d, drop_fwd, x, x, n, dx, y, r, n, 1e-2f, 1e-4, (int)n);
    for (size_t i = 0; i < n; i++) {
        GM_CHECK(d.mask[i] == 0.0f || fabsf(d.mask[i] - 1.0f / 0.7f) < 1e-6f);
        kept += d.mask[i] != 0.0f;
    }
    /* 300 Bernoulli(0.7) draws: mean 210, sd ~7.9 */
    GM_CHECK(kept > 170 && kept < 250);
    free(x), free(r), free(y), free(dx), free(d.mask);
}

static void test_xent_fd(void)
{
    int n = 4, k = 7;
    float *z = randv((size_t)n * k, 3), *dz = randv((size_t)n * k, 1);
    int32_t labels[4] = {0, 6, 3, 3};
    long correct;
    double worst = 0;

    gm_xent_cpu(n, k, z, labels, dz, &correct);
    for (int i = 0; i < n * k; i++) {
        float s = z[i];
        z[i] = s + 1e-2f;
        double lp = gm_xent_cpu(n, k, z, labels, NULL, NULL);
        z[i] = s - 1e-2f;
        double lm = gm_xent_cpu(n, k, z, labels, NULL, NULL);
        z[i] = s;
        worst = fmax(worst, fabs((lp - lm) / 2e-2 - dz[i]));
    }
    GM_CHECK_NEAR(worst, 0, 1e-4, 0);
    /* uniform logits: loss is log(k) */
    for (int i = 0; i < n * k; i++)
        z[i] = 0.25f;
    GM_CHECK_NEAR(gm_xent_cpu(n, k, z, labels, NULL, NULL), log(7.0), 1e-12, 0);
    free(z), free(dz);
}

/* ---- whole models ------------------------------------------------------------ */

static double model_loss(struct gm_model *m, int n, const int32_t *y, int train)
{
    int err = gm_model_forward(m, n, train, 7);
    GM_CHECK_OK(err);
    return gm_model_loss(m, n, y, NULL);
}

static void model_fd(const struct gm_model_spec *spec, int n, int train)
{
    struct gm_model *m;
    int32_t y[8];
    size_t in = (size_t)spec->in_c * spec->in_h * spec->in_w;

    GM_CHECK_OK(gm_model_new(spec, 8, &m));
    if (m == NULL)
        return;
    gm_model_init_params(m, 3);
    float *x = gm_model_input(m);
    for (size_t i = 0; i < (size_t)n * in; i++)
        x[i] = (float)gm_rng_double(&rng);
    for (int i = 0; i < n; i++)
        y[i] = (int32_t)gm_rng_below(&rng, (uint32_t)spec->classes);
    model_loss(m, n, y, train);
    GM_CHECK_OK(gm_model_backward(m, n));
    float *p = gm_model_params(m), *g = gm_model_grads(m);
    float *gsave = malloc(gm_model_num_params(m) * sizeof(float));
    memcpy(gsave, g, gm_model_num_params(m) * sizeof(float));
    double worst = 0, l0 = model_loss(m, n, y, train);
    int probes = 0, kinks = 0;
    /* probe every tensor at a few positions */
    for (size_t t = 0; t < gm_model_num_tensors(m); t++) {
        const struct gm_param_info *ti = gm_model_tensor(m, t);
        for (int q = 0; q < 8; q++) {
            size_t i = ti->offset + (size_t)gm_rng_below(&rng, (uint32_t)(ti->numel));
            const float eps = 1e-3f;
            float s = p[i];
            p[i] = s + eps;
            double lp = model_loss(m, n, y, train);
            p[i] = s - eps;
            double lm = model_loss(m, n, y, train);
            p[i] = s;
            double num = (lp - lm) / (2 * (double)eps);
            /* A ReLU or max-pool kink inside [s-eps, s+eps] makes the two
             * one-sided slopes disagree; such a probe says nothing about the
             * gradient, so it is counted and skipped (few are allowed). */
            double right = (lp - l0) / eps, left = (l0 - lm) / eps;
            if (fabs(right - left) > 5e-4 + 0.02 * fabs(num)) {
                kinks++;
                continue;
            }
            /* Floor: float32 forward noise on the loss (~2e-7 x 2.3 over
             * 2 eps) plus kinks too small to flag, summed over the ~5000
             * positions a conv1 bias touches.  A wrong gradient is off by
             * its own size, far above this; the tight per-tensor checks are
             * the per-layer ones above and the NumPy reference below. */
            double err = fabs(num - gsave[i]) / (1e-3 + 2e-2 * fabs(num));
            if (getenv("GM_TEST_VERBOSE"))
                fprintf(stderr, "%s %s[%zu]: fd %.6g analytic %.6g\n", spec->name, ti->name,
                        i - ti->offset, num, gsave[i]);
            worst = fmax(worst, err);
            probes++;
        }
    }
    gm_test_state.checks++;
    /* |fd - analytic| <= 1e-3 + 2% |fd| at every smooth probe */
    if (!(worst <= 1.0))
        GM_TEST_FAIL_("%s: worst FD error %.3g of tolerance over %d probes", spec->name, worst,
                      probes);
    GM_CHECK(kinks * 4 <= probes);
    free(gsave);
    gm_model_free(m);
}

static void test_models_fd(void)
{
    struct gm_model_spec lenet = {
        .name = "lenet5", .in_c = 1, .in_h = 28, .in_w = 28, .classes = 10};
    struct gm_model_spec lenet3 = {
        .name = "lenet5", .in_c = 3, .in_h = 32, .in_w = 32, .classes = 10, .dropout = 0.25f};
    struct gm_model_spec mlp = {.name = "mlp",
                                .in_c = 1,
                                .in_h = 28,
                                .in_w = 28,
                                .classes = 10,
                                .hidden = {32, 16},
                                .nhidden = 2,
                                .dropout = 0.2f};
    model_fd(&lenet, 4, 0);
    model_fd(&lenet3, 3, 1);
    model_fd(&mlp, 5, 1);
    /* vgg7 and resnet20 are not probed here: batch norm over small batches
     * puts so many ReLU kinks within any usable step that whole-model
     * differences say little.  Their layers have tight finite-difference and
     * adjoint checks in test_ops.c, and the whole models are checked against
     * PyTorch's autograd in test_vs_torch.c. */
}

/* The CIFAR models: sizes and names as PyTorch counts them (torch_models.py:
 * 307946 / 269722 parameters, state_dict of 38 / 116 entries), batch norm
 * buffers and their initial values, num_batches_tracked counting training
 * forwards only. */
static void test_cifar_models(void)
{
    struct gm_model_spec vgg = {.name = "vgg7", .in_c = 3, .in_h = 32, .in_w = 32, .classes = 10};
    struct gm_model_spec res = {
        .name = "resnet20", .in_c = 3, .in_h = 32, .in_w = 32, .classes = 10};
    struct gm_model *m = NULL;
    float v[64];

    GM_CHECK_OK(gm_model_new(&vgg, 2, &m));
    if (m == NULL)
        return;
    GM_CHECK_EQ(gm_model_num_params(m), 307946);
    GM_CHECK_EQ(gm_model_num_tensors(m) + gm_model_num_buffers(m), 38);
    GM_CHECK_STREQ(gm_model_tensor(m, 0)->name, "features.0.weight");
    GM_CHECK_STREQ(gm_model_tensor(m, 1)->name, "features.1.weight");
    GM_CHECK_STREQ(gm_model_tensor(m, gm_model_num_tensors(m) - 1)->name, "classifier.bias");
    GM_CHECK_EQ(gm_model_tensor(m, gm_model_num_tensors(m) - 2)->shape[1], 128 * 4 * 4);
    gm_model_free(m);

    GM_CHECK_OK(gm_model_new(&res, 2, &m));
    if (m == NULL)
        return;
    GM_CHECK_EQ(gm_model_num_params(m), 269722);
    GM_CHECK_EQ(gm_model_num_tensors(m), 59);
    GM_CHECK_EQ(gm_model_num_buffers(m), 57);
    GM_CHECK_STREQ(gm_model_tensor(m, 7)->name, "layer1.0.bn2.weight");
    GM_CHECK_STREQ(gm_model_buffer(m, 56)->name, "layer3.2.bn2.num_batches_tracked");
    GM_CHECK_EQ(gm_model_buffer(m, 56)->ndim, 0);
    GM_CHECK_EQ(gm_model_buffer_len(m, 56), 1);
    GM_CHECK_STREQ(gm_model_buffer(m, 1)->name, "bn1.running_var");
    GM_CHECK_OK(gm_model_export_buffer(m, 1, v));
    GM_CHECK(v[0] == 1.0f && v[15] == 1.0f);
    GM_CHECK_OK(gm_model_export_buffer(m, 0, v));
    GM_CHECK(v[0] == 0.0f && v[15] == 0.0f);
    gm_model_init_params(m, 1);
    GM_CHECK(gm_model_params(m)[gm_model_tensor(m, 1)->offset] == 1.0f); /* bn1.weight */
    GM_CHECK(gm_model_params(m)[gm_model_tensor(m, 2)->offset] == 0.0f); /* bn1.bias */
    for (size_t i = 0; i < 2 * 3 * 32 * 32; i++)
        gm_model_input(m)[i] = (float)(i % 97) / 97.0f;
    GM_CHECK_OK(gm_model_forward(m, 2, 1, 0));
    GM_CHECK_OK(gm_model_forward(m, 2, 0, 0)); /* evaluation: not counted */
    GM_CHECK_OK(gm_model_forward(m, 2, 1, 0));
    GM_CHECK_OK(gm_model_export_buffer(m, 56, v));
    GM_CHECK(v[0] == 2.0f);
    GM_CHECK_OK(gm_model_export_buffer(m, 0, v)); /* running_mean moved */
    GM_CHECK(v[0] != 0.0f);
    /* import: values and the counter come back; a bad counter is refused */
    v[0] = 7.0f;
    GM_CHECK_OK(gm_model_import_buffer(m, 56, v));
    GM_CHECK_OK(gm_model_export_buffer(m, 56, v + 1));
    GM_CHECK(v[1] == 7.0f);
    v[0] = -1.0f;
    GM_CHECK_ERR(gm_model_import_buffer(m, 56, v), -EINVAL);
    gm_model_free(m);

    /* a map too small for three stride-2 stages' shortcuts still builds (1x1) */
    res.in_h = res.in_w = 4;
    GM_CHECK_OK(gm_model_new(&res, 2, &m));
    gm_model_free(m);
}

static void test_model_contract(void)
{
    struct gm_model *m = (struct gm_model *)&m;
    struct gm_model_spec bad = {.name = "lenet7", .in_c = 1, .in_h = 28, .in_w = 28, .classes = 10};
    struct gm_model_spec tiny = {.name = "lenet5", .in_c = 1, .in_h = 3, .in_w = 3, .classes = 10};
    struct gm_model_spec lenet = {
        .name = "lenet5", .in_c = 1, .in_h = 28, .in_w = 28, .classes = 10};

    GM_CHECK_ERR(gm_model_new(&bad, 4, &m), -EINVAL);
    GM_CHECK(m == NULL);
    GM_CHECK_ERR(gm_model_new(&tiny, 4, &m), -EINVAL);
    GM_CHECK_ERR(gm_model_new(&lenet, 0, &m), -EINVAL);
    lenet.device = GM_DEVICE_CUDA;
    GM_CHECK_ERR(gm_model_new(&lenet, 4, &m), -ENOTSUP);
    lenet.device = GM_DEVICE_CPU;
    GM_CHECK_OK(gm_model_new(&lenet, 4, &m));
    /* LeNet-5 on 28x28: 156 + 2416 + 48120 + 10164 + 850 parameters */
    GM_CHECK_EQ(gm_model_num_params(m), 61706);
    GM_CHECK_EQ(gm_model_num_tensors(m), 10);
    GM_CHECK_STREQ(gm_model_tensor(m, 4)->name, "fc1.weight");
    GM_CHECK_EQ(gm_model_tensor(m, 4)->shape[1], 400);
    GM_CHECK_ERR(gm_model_forward(m, 5, 0, 0), -EINVAL);
    /* export/import round trip, and export really permutes conv weights */
    gm_model_init_params(m, 9);
    float *p = gm_model_params(m);
    size_t np = gm_model_num_params(m);
    float *copy = malloc(np * sizeof(float)), *tmp = malloc(np * sizeof(float));
    memcpy(copy, p, np * sizeof(float));
    memset(tmp, 0, np * sizeof(float));
    float *back = calloc(np, sizeof(float));
    for (size_t t = 0; t < gm_model_num_tensors(m); t++) {
        gm_model_export_tensor(m, t, p, tmp);
        gm_model_import_tensor(m, t, tmp, back);
    }
    GM_CHECK(memcmp(back, copy, np * sizeof(float)) == 0);
    const struct gm_param_info *c2 = gm_model_tensor(m, 2); /* conv2.weight (16, 6, 5, 5) */
    gm_model_export_tensor(m, 2, p, tmp);
    /* torch [o=1][c=2][y=3][x=4] is internal [o=1][y=3][x=4][c=2] */
    GM_CHECK(tmp[((1 * 6 + 2) * 5 + 3) * 5 + 4] == p[c2->offset + ((1 * 5 + 3) * 5 + 4) * 6 + 2]);
    free(copy), free(tmp), free(back);
    gm_model_free(m);
    gm_model_free(NULL);
}

/* ---- NumPy reference ----------------------------------------------------------- */

static int write_file(const char *path, const void *p, size_t n)
{
    FILE *f = fopen(path, "wb");
    if (f == NULL)
        return -1;
    size_t w = fwrite(p, 1, n, f);
    return fclose(f) == 0 && w == n ? 0 : -1;
}

static int read_file(const char *path, void *p, size_t n)
{
    FILE *f = fopen(path, "rb");
    if (f == NULL)
        return -1;
    size_t r = fread(p, 1, n, f);
    fclose(f);
    return r == n ? 0 : -1;
}

static void test_lenet_numpy(void)
{
    const int n = 6;
    struct gm_model_spec spec = {
        .name = "lenet5", .in_c = 1, .in_h = 28, .in_w = 28, .classes = 10};
    struct gm_model *m;
    char dir[] = "/tmp/gm-lenet-ref-XXXXXX", path[512], cmd[1024];
    int32_t y[6];
    long correct;

    if (system("/usr/bin/python3 -c 'import numpy' 2>/dev/null") != 0) {
        fprintf(stderr, "note: /usr/bin/python3 has no numpy: NumPy reference part skipped\n");
        return;
    }
    GM_CHECK(mkdtemp(dir) != NULL);
    GM_CHECK_OK(gm_model_new(&spec, n, &m));
    gm_model_init_params(m, 11);
    float *x = gm_model_input(m);
    for (size_t i = 0; i < (size_t)n * 784; i++)
        x[i] = (float)gm_rng_double(&rng);
    for (int i = 0; i < n; i++)
        y[i] = (int32_t)gm_rng_below(&rng, 10);
    snprintf(path, sizeof(path), "%s/x.f32", dir);
    GM_CHECK(write_file(path, x, (size_t)n * 784 * sizeof(float)) == 0);
    snprintf(path, sizeof(path), "%s/y.i32", dir);
    GM_CHECK(write_file(path, y, sizeof(y)) == 0);
    float *p = gm_model_params(m), *tmp = malloc(gm_model_num_params(m) * sizeof(float));
    for (size_t t = 0; t < gm_model_num_tensors(m); t++) {
        const struct gm_param_info *ti = gm_model_tensor(m, t);
        gm_model_export_tensor(m, t, p, tmp);
        snprintf(path, sizeof(path), "%s/%s.f32", dir, ti->name);
        GM_CHECK(write_file(path, tmp, ti->numel * sizeof(float)) == 0);
    }
    GM_CHECK_OK(gm_model_forward(m, n, 1, 0));
    double loss = gm_model_loss(m, n, y, &correct);
    GM_CHECK_OK(gm_model_backward(m, n));

    snprintf(cmd, sizeof(cmd), "/usr/bin/python3 tests/unit/lenet_ref.py %s %d", dir, n);
    GM_CHECK(system(cmd) == 0);
    double ref_loss = 0;
    snprintf(path, sizeof(path), "%s/ref_loss.f64", dir);
    GM_CHECK(read_file(path, &ref_loss, sizeof(ref_loss)) == 0);
    GM_CHECK_NEAR(loss, ref_loss, 1e-6, 1e-5);

    float logits_ref[60];
    snprintf(path, sizeof(path), "%s/ref_logits.f32", dir);
    GM_CHECK(read_file(path, logits_ref, sizeof(logits_ref)) == 0);
    double sc, d = maxdiff(gm_model_logits(m), logits_ref, 60, &sc);
    GM_CHECK_NEAR(d, 0, 1e-5 * sc, 0);

    float *ref = malloc(gm_model_num_params(m) * sizeof(float));
    for (size_t t = 0; t < gm_model_num_tensors(m); t++) {
        const struct gm_param_info *ti = gm_model_tensor(m, t);
        gm_model_export_tensor(m, t, gm_model_grads(m), tmp);
        snprintf(path, sizeof(path), "%s/ref_grad_%s.f32", dir, ti->name);
        GM_CHECK(read_file(path, ref, ti->numel * sizeof(float)) == 0);
        d = maxdiff(tmp, ref, ti->numel, &sc);
        gm_test_state.checks++;
        if (!(d <= 1e-5 * sc + 1e-7))
            GM_TEST_FAIL_("grad %s: max diff %.3g vs scale %.3g", ti->name, d, sc);
    }
    snprintf(cmd, sizeof(cmd), "rm -rf %s", dir);
    GM_CHECK(system(cmd) == 0);
    free(tmp), free(ref);
    gm_model_free(m);
}

int main(void)
{
    gm_rng_init(&rng, getenv("GM_TEST_SEED") ? strtoull(getenv("GM_TEST_SEED"), NULL, 10) : 12345,
                0);
    if (access("tests/unit/lenet_ref.py", R_OK) != 0 &&
        chdir(getenv("GM_SRCDIR") ? getenv("GM_SRCDIR") : ".") != 0)
        return 1;
    GM_TEST_RUN(test_conv_blas_equals_naive);
    GM_TEST_RUN(test_conv_fd);
    GM_TEST_RUN(test_linear_fd);
    GM_TEST_RUN(test_maxpool_fd);
    GM_TEST_RUN(test_relu_dropout_fd);
    GM_TEST_RUN(test_xent_fd);
    GM_TEST_RUN(test_models_fd);
    GM_TEST_RUN(test_cifar_models);
    GM_TEST_RUN(test_model_contract);
    GM_TEST_RUN(test_lenet_numpy);
    return gm_test_finish("test_model");
}
