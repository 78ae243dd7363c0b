/*
 * train/kernels/maxpool_cpu.c - see maxpool.h.  Channels are processed 8 at
 * a time with GCC vector extensions (compare masks + bitwise selects); a
 * channel count that is not a multiple of 8 ends with a partial vector.
 */
#include "train/kernels/maxpool.h"

#include <errno.h>
#include <string.h>

typedef float v8f __attribute__((vector_size(32)));
typedef int32_t v8i __attribute__((vector_size(32)));

static inline v8f loadn(const float *p, int n)
{
    v8f v = {0};
    if (n == 8) {
        memcpy(&v, p, sizeof(v));
        return v;
    }
    for (int i = 0; i < n; i++)
        v[i] = p[i];
    return v;
}

static inline void storen(float *p, v8f v, int n)
{
    if (n == 8) {
        memcpy(p, &v, sizeof(v));
        return;
    }
    for (int i = 0; i < n; i++)
        p[i] = v[i];
}

/* maxss semantics (libm's fmaxf is a call: it must handle NaN its own way) */
static inline float maxf(float a, float b)
{
    return a > b ? a : b;
}

static inline v8f selectf(v8i mask, v8f a, v8f b)
{
    return (v8f)(((v8i)a & mask) | ((v8i)b & ~mask));
}

/* 2x2 windows (by far the common case): a plain loop over channels whose
 * ternaries GCC if-converts into compare + blend, vectorized when it can. */
static void forward_k2(int n, int h, int w, int c, int relu, const float *x, float *y, uint8_t *arg)
{
    const int oh = h / 2, ow = w / 2;
    const float floor_v = relu ? 0.0f : -__builtin_inff();

    for (int b = 0; b < n; b++) {
        for (int oy = 0; oy < oh; oy++) {
            const float *r0 = x + (((size_t)b * h + 2 * oy) * w) * c;
            const float *r1 = r0 + (size_t)w * c;
            float *restrict yo = y + (((size_t)b * oh + oy) * ow) * c;
            uint8_t *restrict ao = arg + (((size_t)b * oh + oy) * ow) * c;
            for (int ox = 0; ox < ow; ox++) {
                const float *a = r0 + (size_t)2 * ox * c, *bb = a + c;
                const float *cc = r1 + (size_t)2 * ox * c, *d = cc + c;
                for (int q = 0; q < c; q++) {
                    /* maxss and integer arithmetic on compare results keep
                     * GCC from emitting branches when it does not vectorize */
                    const int g01 = bb[q] > a[q], g23 = d[q] > cc[q];
                    const float m01 = maxf(bb[q], a[q]), m23 = maxf(d[q], cc[q]);
                    const int g = m23 > m01;
                    const int i = g01 + g * (2 + g23 - g01);
                    const float m = maxf(m23, m01);
                    const int keep = m > floor_v;
                    yo[q] = relu ? maxf(m, 0.0f) : m;
                    ao[q] = (uint8_t)(i | ((keep - 1) & GM_MAXPOOL_NONE));
                }
                yo += c;
                ao += c;
            }
        }
    }
}

void gm_maxpool_forward_cpu(int n, int h, int w, int c, int k, int relu, const float *x, float *y,
                            uint8_t *arg)
{
    const int oh = h / k, ow = w / k;

    if (k == 2) {
        forward_k2(n, h, w, c, relu, x, y, arg);
        return;
    }

    for (int b = 0; b < n; b++) {
        const float *xb = x + (size_t)b * h * w * c;
        for (int oy = 0; oy < oh; oy++) {
            for (int ox = 0; ox < ow; ox++) {
                const size_t o = (((size_t)b * oh + oy) * ow + ox) * c;
                const float *x0 = xb + ((size_t)oy * k * w + (size_t)ox * k) * c;
                for (int c0 = 0; c0 < c; c0 += 8) {
                    const int nc = c - c0 < 8 ? c - c0 : 8;
                    v8f best = loadn(x0 + c0, nc);
                    v8i where = {0};
                    for (int p = 1; p < k * k; p++) {
                        const float *xp = x0 + ((size_t)(p / k) * w + (size_t)(p % k)) * c + c0;
                        v8f v = loadn(xp, nc);
                        v8i gt = v > best; /* strictly: the first maximum wins */
                        best = selectf(gt, v, best);
                        where = (gt & p) | (~gt & where);
                    }
                    if (relu) {
                        v8i pos = best > (v8f){0};
                        best = selectf(pos, best, (v8f){0});
                        where = (pos & where) | (~pos & GM_MAXPOOL_NONE);
                    }
                    storen(y + o + c0, best, nc);
                    for (int i = 0; i < nc; i++)
                        arg[o + c0 + i] = (uint8_t)where[i];
                }
            }
        }
    }
}

void gm_maxpool_backward_cpu(int n, int h, int w, int c, int k, const float *dy, const uint8_t *arg,
                             float *dx)
{
    const int oh = h / k, ow = w / k;

    if (oh * k != h || ow * k != w) /* dropped rows/columns get no gradient */
        memset(dx, 0, sizeof(float) * (size_t)n * h * w * c);
    if (k == 2) {
        for (int b = 0; b < n; b++) {
            for (int oy = 0; oy < oh; oy++) {
                float *r0 = dx + (((size_t)b * h + 2 * oy) * w) * c;
                float *r1 = r0 + (size_t)w * c;
                const float *g = dy + (((size_t)b * oh + oy) * ow) * c;
                const uint8_t *a = arg + (((size_t)b * oh + oy) * ow) * c;
                for (int ox = 0; ox < ow; ox++) {
                    float *restrict p0 = r0 + (size_t)2 * ox * c, *restrict p1 = p0 + c;
                    float *restrict p2 = r1 + (size_t)2 * ox * c, *restrict p3 = p2 + c;
                    for (int q = 0; q < c; q++) { /* multiply by 0/1: no branches */
                        p0[q] = g[q] * (float)(a[q] == 0);
                        p1[q] = g[q] * (float)(a[q] == 1);
                        p2[q] = g[q] * (float)(a[q] == 2);
                        p3[q] = g[q] * (float)(a[q] == 3);
                    }
                    g += c;
                    a += c;
                }
            }
        }
        return;
    }
    for (int b = 0; b < n; b++) {
        float *xb = dx + (size_t)b * h * w * c;
        for (int oy = 0; oy < oh; oy++) {
            for (int ox = 0; ox < ow; ox++) {
                const size_t o = (((size_t)b * oh + oy) * ow + ox) * c;
                float *x0 = xb + ((size_t)oy * k * w + (size_t)ox * k) * c;
                for (int c0 = 0; c0 < c; c0 += 8) {
                    const int nc = c - c0 < 8 ? c - c0 : 8;
                    v8f g = loadn(dy + o + c0, nc);
                    v8i a = {0};
                    for (int i = 0; i < nc; i++)
                        a[i] = arg[o + c0 + i];
                    for (int p = 0; p < k * k; p++) {
                        float *xp = x0 + ((size_t)(p / k) * w + (size_t)(p % k)) * c + c0;
                        storen(xp, selectf(a == p, g, (v8f){0}), nc);
                    }
                }
            }
        }
    }
}

/* ---- general windows (see maxpool.h) ---- */

int gm_pool2d_shape_init(struct gm_pool2d_shape *s, int n, int h, int w, int c, int k, int stride,
                         int pad)
{
    memset(s, 0, sizeof(*s));
    if (n < 1 || h < 1 || w < 1 || c < 1 || k < 1 || k > 15 || stride < 1 || pad < 0 ||
        pad > k / 2 || h + 2 * pad < k || w + 2 * pad < k)
        return -EINVAL;
    s->n = n, s->h = h, s->w = w, s->c = c;
    s->k = k, s->stride = stride, s->pad = pad;
    s->oh = (h + 2 * pad - k) / stride + 1;
    s->ow = (w + 2 * pad - k) / stride + 1;
    return 0;
}

static int plain(const struct gm_pool2d_shape *s)
{
    return s->stride == s->k && s->pad == 0;
}

/* valid window range [lo, hi) along an axis of size n for the window starting at o0 */
static inline void wrange(int o0, int k, int n, int *lo, int *hi)
{
    *lo = o0 < 0 ? -o0 : 0;
    *hi = n - o0 < k ? n - o0 : k;
}

void gm_maxpool2d_forward_cpu(const struct gm_pool2d_shape *s, int relu, const float *x, float *y,
                              uint8_t *arg)
{
    const int k = s->k, c = s->c, w = s->w;

    if (plain(s)) {
        gm_maxpool_forward_cpu(s->n, s->h, s->w, c, k, relu, x, y, arg);
        return;
    }
    for (int b = 0; b < s->n; b++) {
        const float *xb = x + (size_t)b * s->h * w * c;
        for (int oy = 0; oy < s->oh; oy++) {
            const int y0 = oy * s->stride - s->pad;
            int ky0, ky1;
            wrange(y0, k, s->h, &ky0, &ky1);
            for (int ox = 0; ox < s->ow; ox++) {
                const int x0 = ox * s->stride - s->pad;
                const size_t o = (((size_t)b * s->oh + oy) * s->ow + ox) * c;
                int kx0, kx1;
                wrange(x0, k, w, &kx0, &kx1);
                for (int c0 = 0; c0 < c; c0 += 8) {
                    const int nc = c - c0 < 8 ? c - c0 : 8;
                    v8f best = {0};
                    v8i where = {0};
                    for (int ky = ky0; ky < ky1; ky++)
                        for (int kx = kx0; kx < kx1; kx++) {
                            const int p = ky * k + kx;
                            const v8f v = loadn(
                                xb + ((size_t)(y0 + ky) * w + (size_t)(x0 + kx)) * c + c0, nc);
                            if (ky == ky0 && kx == kx0) {
                                best = v;
                                where = (v8i){0} + p;
                                continue;
                            }
                            v8i gt = v > best; /* strictly: the first maximum wins */
                            best = selectf(gt, v, best);
                            where = (gt & p) | (~gt & where);
                        }
                    if (relu) {
                        v8i pos = best > (v8f){0};
                        best = selectf(pos, best, (v8f){0});
                        where = (pos & where) | (~pos & GM_MAXPOOL_NONE);
                    }
                    storen(y + o + c0, best, nc);
                    for (int i = 0; i < nc; i++)
                        arg[o + c0 + i] = (uint8_t)where[i];
                }
            }
        }
    }
}

void gm_maxpool2d_backward_cpu(const struct gm_pool2d_shape *s, const float *dy, const uint8_t *arg,
                               float *dx)
{
    const int k = s->k, c = s->c, w = s->w;

    if (plain(s)) {
        gm_maxpool_backward_cpu(s->n, s->h, s->w, c, k, dy, arg, dx);
        return;
    }
    memset(dx, 0, sizeof(float) * (size_t)s->n * s->h * w * c);
    for (int b = 0; b < s->n; b++) {
        float *xb = dx + (size_t)b * s->h * w * c;
        for (int oy = 0; oy < s->oh; oy++) {
            const int y0 = oy * s->stride - s->pad;
            for (int ox = 0; ox < s->ow; ox++) {
                const int x0 = ox * s->stride - s->pad;
                const size_t o = (((size_t)b * s->oh + oy) * s->ow + ox) * c;
                for (int q = 0; q < c; q++) {
                    const int p = arg[o + q];
                    if (p == GM_MAXPOOL_NONE)
                        continue;
                    xb[((size_t)(y0 + p / k) * w + (size_t)(x0 + p % k)) * c + q] += dy[o + q];
                }
            }
        }
    }
}
