/*
 * train/kernels/conv2d_cpu.c - im2col + sgemm convolution (see conv2d.h).
 *
 * The whole batch is one GEMM each way, which keeps OpenBLAS in its efficient
 * regime even for LeNet's 6 and 16 output channels; im2col copies KW*C
 * contiguous floats at a time thanks to the OHWI weight layout.
 */
#include "train/kernels/conv2d.h"

#include <cblas.h>
#include <errno.h>
#include <string.h>

int gm_conv2d_shape_init(struct gm_conv2d_shape *s, int n, int h, int w, int c, int oc, int k,
                         int pad, int stride)
{
    memset(s, 0, sizeof(*s));
    if (n < 1 || h < 1 || w < 1 || c < 1 || oc < 1 || k < 1 || pad < 0 || stride < 1)
        return -EINVAL;
    if (h + 2 * pad < k || w + 2 * pad < k)
        return -EINVAL;
    s->n = n;
    s->h = h;
    s->w = w;
    s->c = c;
    s->oc = oc;
    s->k = k;
    s->pad = pad;
    s->stride = stride;
    s->oh = (h + 2 * pad - k) / stride + 1;
    s->ow = (w + 2 * pad - k) / stride + 1;
    return 0;
}

/* Short copies and zero fills stay inline: the segments are KW*C floats (5 for
 * LeNet's first layer), far below the size where a libc call pays off.  The
 * attribute keeps GCC from turning these loops back into memcpy/memset. */
#define GM_INLINE_LOOPS __attribute__((optimize("no-tree-loop-distribute-patterns")))

static inline GM_INLINE_LOOPS void copy_floats(float *restrict d, const float *restrict s, int n)
{
    for (int i = 0; i < n; i++)
        d[i] = s[i];
}

static inline GM_INLINE_LOOPS void zero_floats(float *restrict d, int n)
{
    for (int i = 0; i < n; i++)
        d[i] = 0.0f;
}

GM_INLINE_LOOPS void gm_conv2d_im2col_cpu(const struct gm_conv2d_shape *s, const float *x,
                                          float *col)
{
    const int k = s->k, c = s->c, pad = s->pad, st = s->stride;
    const size_t rowlen = (size_t)k * k * c;
    float *restrict out = col;

    for (int n = 0; n < s->n; n++) {
        const float *xn = x + (size_t)n * s->h * s->w * c;
        for (int oy = 0; oy < s->oh; oy++) {
            for (int ox = 0; ox < s->ow; ox++) {
                /* valid kernel columns for this output column */
                const int x0 = ox * st; /* input column of kernel column `pad` */
                int kx0 = pad - x0 > 0 ? pad - x0 : 0;
                int kx1 = s->w + pad - x0 < k ? s->w + pad - x0 : k;
                for (int ky = 0; ky < k; ky++) {
                    int iy = oy * st + ky - pad;
                    float *dst = out + (size_t)ky * k * c;
                    if (iy < 0 || iy >= s->h) {
                        zero_floats(dst, k * c);
                        continue;
                    }
                    if (kx0 > 0)
                        zero_floats(dst, kx0 * c);
                    if (kx1 > kx0)
                        copy_floats(dst + (size_t)kx0 * c,
                                    xn + ((size_t)iy * s->w + (size_t)(x0 + kx0 - pad)) * c,
                                    (kx1 - kx0) * c);
                    if (kx1 < k)
                        zero_floats(dst + (size_t)kx1 * c, (k - kx1) * c);
                }
                out += rowlen;
            }
        }
    }
}

void gm_conv2d_col2im_cpu(const struct gm_conv2d_shape *s, const float *col, float *dx)
{
    const int k = s->k, c = s->c, pad = s->pad, st = s->stride;
    const size_t rowlen = (size_t)k * k * c;
    const float *src = col;

    memset(dx, 0, sizeof(float) * (size_t)s->n * s->h * s->w * c);
    for (int n = 0; n < s->n; n++) {
        float *xn = dx + (size_t)n * s->h * s->w * c;
        for (int oy = 0; oy < s->oh; oy++) {
            for (int ox = 0; ox < s->ow; ox++) {
                const int x0 = ox * st; /* input column of kernel column `pad` */
                int kx0 = pad - x0 > 0 ? pad - x0 : 0;
                int kx1 = s->w + pad - x0 < k ? s->w + pad - x0 : k;
                for (int ky = 0; ky < k; ky++) {
                    int iy = oy * st + ky - pad;
                    if (iy < 0 || iy >= s->h || kx1 <= kx0)
                        continue;
                    const float *restrict a = src + ((size_t)ky * k + (size_t)kx0) * c;
                    float *restrict d = xn + ((size_t)iy * s->w + (size_t)(x0 + kx0 - pad)) * c;
                    const int len = (kx1 - kx0) * c;
                    for (int i = 0; i < len; i++)
                        d[i] += a[i];
                }
                src += rowlen;
            }
        }
    }
}

void gm_conv2d_forward_cpu(const struct gm_conv2d_shape *s, const float *x, const float *w,
                           const float *b, float *col, float *y)
{
    const int rows = s->n * s->oh * s->ow;
    const int kdim = s->k * s->k * s->c;
    const int oc = s->oc;

    gm_conv2d_im2col_cpu(s, x, col);
    /* y = bias broadcast, then y += col x w^T (beta = 1 spares OpenBLAS a
     * separate pass that zeroes y) */
    if (b != NULL)
        for (int r = 0; r < rows; r++)
            copy_floats(y + (size_t)r * oc, b, oc);
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, rows, oc, kdim, 1.0f, col, kdim, w, kdim,
                b != NULL ? 1.0f : 0.0f, y, oc);
}

void gm_conv2d_backward_cpu(const struct gm_conv2d_shape *s, const float *col, const float *w,
                            const float *dy, float *dw, float *db, float *dcol, float *dx)
{
    const int rows = s->n * s->oh * s->ow;
    const int kdim = s->k * s->k * s->c;
    const int oc = s->oc;

    /* dW (OC, K) = dy^T (OC, rows) x col (rows, K) */
    cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, oc, kdim, rows, 1.0f, dy, oc, col, kdim,
                0.0f, dw, kdim);
    if (db != NULL) {
        memset(db, 0, sizeof(float) * (size_t)oc);
        for (int r = 0; r < rows; r++) {
            const float *restrict d = dy + (size_t)r * oc;
            for (int o = 0; o < oc; o++)
                db[o] += d[o];
        }
    }
    if (dx == NULL)
        return;
    /* dcol (rows, K) = dy (rows, OC) x w (OC, K) */
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, rows, kdim, oc, 1.0f, dy, oc, w, kdim,
                0.0f, dcol, kdim);
    gm_conv2d_col2im_cpu(s, dcol, dx);
}

/* ---- direct path (see conv2d.h) -------------------------------------------- */

/* GCC vector extensions: AVX with -march=native, SSE pairs elsewhere. */
typedef float v8f __attribute__((vector_size(32)));

static inline v8f load_partial(const float *p, int n)
{
    v8f v = {0};
    for (int i = 0; i < n; i++)
        v[i] = p[i];
    return v;
}

static inline void store_partial(float *p, v8f v, int n)
{
    for (int i = 0; i < n; i++)
        p[i] = v[i];
}

int gm_conv2d_use_direct(const struct gm_conv2d_shape *s, int need_dx)
{
    return !need_dx && s->oc <= GM_CONV2D_DIRECT_MAX_OC && s->stride == 1;
}

size_t gm_conv2d_direct_pack_floats(const struct gm_conv2d_shape *s)
{
    return (size_t)s->k * s->k * s->c * 8;
}

/* valid kernel range [lo, hi) for output coordinate o along an axis of size n */
static inline void krange(int o, int k, int pad, int n, int *lo, int *hi)
{
    *lo = pad - o > 0 ? pad - o : 0;
    *hi = n + pad - o < k ? n + pad - o : k;
}

/* Output pixels are taken 4 at a time along a row where the whole kernel
 * fits (interior): 4 independent accumulator chains hide FMA latency and
 * share every weight load.  Border pixels go one at a time. */
#define BLOCK 4

void gm_conv2d_direct_forward_cpu(const struct gm_conv2d_shape *s, const float *x, const float *w,
                                  const float *b, float *wpack, float *y)
{
    const int k = s->k, c = s->c, oc = s->oc, taps = k * k * c, kc = k * c;
    v8f *wp = (v8f *)wpack;
    const v8f bias = b != NULL ? load_partial(b, oc) : (v8f){0};

    for (int t = 0; t < taps; t++) {
        v8f v = {0};
        for (int o = 0; o < oc; o++)
            v[o] = w[(size_t)o * taps + t];
        wp[t] = v;
    }
    for (int n = 0; n < s->n; n++) {
        const float *xn = x + (size_t)n * s->h * s->w * c;
        for (int oy = 0; oy < s->oh; oy++) {
            int ky0, ky1;
            float *yrow = y + ((size_t)n * s->oh + oy) * s->ow * oc;
            krange(oy, k, s->pad, s->h, &ky0, &ky1);
            for (int ox = 0; ox < s->ow;) {
                int kx0, kx1;
                krange(ox, k, s->pad, s->w, &kx0, &kx1);
                if (kx0 == 0 && ox + BLOCK - 1 + k - s->pad <= s->w) {
                    v8f a0 = bias, a1 = bias, a2 = bias, a3 = bias;
                    for (int ky = ky0; ky < ky1; ky++) {
                        const float *xr =
                            xn + ((size_t)(oy + ky - s->pad) * s->w + (size_t)(ox - s->pad)) * c;
                        const v8f *wr = wp + (size_t)ky * kc;
                        for (int j = 0; j < kc; j++) {
                            const v8f wv = wr[j];
                            a0 += xr[j] * wv;
                            a1 += xr[j + c] * wv;
                            a2 += xr[j + 2 * c] * wv;
                            a3 += xr[j + 3 * c] * wv;
                        }
                    }
                    store_partial(yrow + (size_t)ox * oc, a0, oc);
                    store_partial(yrow + (size_t)(ox + 1) * oc, a1, oc);
                    store_partial(yrow + (size_t)(ox + 2) * oc, a2, oc);
                    store_partial(yrow + (size_t)(ox + 3) * oc, a3, oc);
                    ox += BLOCK;
                    continue;
                }
                v8f acc = bias;
                for (int ky = ky0; ky < ky1; ky++) {
                    const float *xr =
                        xn + ((size_t)(oy + ky - s->pad) * s->w + (size_t)(ox + kx0 - s->pad)) * c;
                    const v8f *wr = wp + ((size_t)ky * k + (size_t)kx0) * c;
                    for (int j = 0; j < (kx1 - kx0) * c; j++)
                        acc += xr[j] * wr[j];
                }
                store_partial(yrow + (size_t)ox * oc, acc, oc);
                ox++;
            }
        }
    }
}

void gm_conv2d_direct_backward_cpu(const struct gm_conv2d_shape *s, const float *x, const float *dy,
                                   float *dw, float *db, float *accbuf)
{
    const int k = s->k, c = s->c, oc = s->oc, taps = k * k * c, kc = k * c;
    v8f *acc = (v8f *)accbuf;
    v8f bacc = {0};

    for (int t = 0; t < taps; t++)
        acc[t] = (v8f){0};
    for (int n = 0; n < s->n; n++) {
        const float *xn = x + (size_t)n * s->h * s->w * c;
        for (int oy = 0; oy < s->oh; oy++) {
            int ky0, ky1;
            const float *dyrow = dy + ((size_t)n * s->oh + oy) * s->ow * oc;
            krange(oy, k, s->pad, s->h, &ky0, &ky1);
            for (int ox = 0; ox < s->ow;) {
                int kx0, kx1;
                krange(ox, k, s->pad, s->w, &kx0, &kx1);
                if (kx0 == 0 && ox + BLOCK - 1 + k - s->pad <= s->w) {
                    const v8f g0 = load_partial(dyrow + (size_t)ox * oc, oc);
                    const v8f g1 = load_partial(dyrow + (size_t)(ox + 1) * oc, oc);
                    const v8f g2 = load_partial(dyrow + (size_t)(ox + 2) * oc, oc);
                    const v8f g3 = load_partial(dyrow + (size_t)(ox + 3) * oc, oc);
                    bacc += (g0 + g1) + (g2 + g3);
                    for (int ky = ky0; ky < ky1; ky++) {
                        const float *xr =
                            xn + ((size_t)(oy + ky - s->pad) * s->w + (size_t)(ox - s->pad)) * c;
                        v8f *ar = acc + (size_t)ky * kc;
                        for (int j = 0; j < kc; j++)
                            ar[j] += (xr[j] * g0 + xr[j + c] * g1) +
                                     (xr[j + 2 * c] * g2 + xr[j + 3 * c] * g3);
                    }
                    ox += BLOCK;
                    continue;
                }
                const v8f g = load_partial(dyrow + (size_t)ox * oc, oc);
                bacc += g;
                for (int ky = ky0; ky < ky1; ky++) {
                    const float *xr =
                        xn + ((size_t)(oy + ky - s->pad) * s->w + (size_t)(ox + kx0 - s->pad)) * c;
                    v8f *ar = acc + ((size_t)ky * k + (size_t)kx0) * c;
                    for (int j = 0; j < (kx1 - kx0) * c; j++)
                        ar[j] += xr[j] * g;
                }
                ox++;
            }
        }
    }
    for (int o = 0; o < oc; o++) {
        if (db != NULL)
            db[o] = bacc[o];
        for (int t = 0; t < taps; t++)
            dw[(size_t)o * taps + t] = acc[t][o];
    }
}

/* ---- layer entry points (see conv2d.h) ------------------------------------- */

static size_t col_floats(const struct gm_conv2d_shape *s)
{
    const size_t floats = (size_t)s->n * s->oh * s->ow * s->k * s->k * s->c;
    return (floats + 15) & ~(size_t)15; /* keep dcol 64-byte aligned */
}

size_t gm_conv2d_layer_ws_floats_cpu(const struct gm_conv2d_shape *s, int need_dx)
{
    if (gm_conv2d_use_direct(s, need_dx))
        return gm_conv2d_direct_pack_floats(s);
    return col_floats(s) * (need_dx ? 2 : 1);
}

void gm_conv2d_layer_forward_cpu(const struct gm_conv2d_shape *s, int need_dx, const float *x,
                                 const float *w, const float *b, float *ws, float *y)
{
    if (gm_conv2d_use_direct(s, need_dx))
        gm_conv2d_direct_forward_cpu(s, x, w, b, ws, y);
    else
        gm_conv2d_forward_cpu(s, x, w, b, ws, y);
}

void gm_conv2d_layer_backward_cpu(const struct gm_conv2d_shape *s, const float *x, const float *w,
                                  const float *dy, float *dw, float *db, float *dx, float *ws)
{
    if (gm_conv2d_use_direct(s, dx != NULL))
        gm_conv2d_direct_backward_cpu(s, x, dy, dw, db, ws);
    else
        gm_conv2d_backward_cpu(s, ws, w, dy, dw, db, dx != NULL ? ws + col_floats(s) : NULL, dx);
}
