/*
 * train/kernels/conv2d_cpu.c - im2col + sgemm convolution (see conv2d.h).
 *
 * Whole-batch shapes: the whole batch is one GEMM each way, which keeps
 * OpenBLAS in its efficient regime even for LeNet's 6 and 16 output channels;
 * im2col copies KW*C contiguous floats at a time thanks to the OHWI weight
 * layout.  Tiled shapes: the same GEMMs over tiles of output pixels whose col
 * fits GM_CONV2D_TILE_FLOATS, recomputed in backward; 1x1 and depthwise
 * shapes skip im2col altogether.
 */
#include "train/kernels/conv2d.h"
#include "train/kernels/winograd.h"

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
    s->groups = 1;
    return 0;
}

int gm_conv2d_shape_init_groups(struct gm_conv2d_shape *s, int n, int h, int w, int c, int oc,
                                int k, int pad, int stride, int groups)
{
    int err = gm_conv2d_shape_init(s, n, h, w, c, oc, k, pad, stride);

    if (err < 0)
        return err;
    if (groups < 1 || c % groups != 0 || oc % groups != 0) {
        memset(s, 0, sizeof(*s));
        return -EINVAL;
    }
    s->groups = groups;
    s->tiled = 1;
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
    return !need_dx && s->oc <= GM_CONV2D_DIRECT_MAX_OC && s->stride == 1 && s->groups <= 1;
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

/* ---- tiled shapes (see conv2d.h) ------------------------------------------ */

static int groups_of(const struct gm_conv2d_shape *s)
{
    return s->groups > 1 ? s->groups : 1;
}

static int is_pointwise(const struct gm_conv2d_shape *s)
{
    return s->k == 1 && s->stride == 1 && s->pad == 0 && groups_of(s) == 1;
}

static int is_depthwise(const struct gm_conv2d_shape *s)
{
    return s->groups > 1 && s->groups == s->c && s->groups == s->oc;
}

static size_t round16(size_t floats)
{
    return (floats + 15) & ~(size_t)15; /* keep what follows 64-byte aligned */
}

/* output pixels per tile: col (rows, K*K*C/G) within GM_CONV2D_TILE_FLOATS,
 * but never fewer than GM_CONV2D_TILE_MIN_ROWS (GEMM efficiency), nor than
 * twice the group's output channels: every GEMM packs the whole weight matrix
 * (OC/G x K*K*C/G) again, so a tile as tall as the weights are wide keeps
 * that repacking below the col's own */
static size_t tile_rows(const struct gm_conv2d_shape *s)
{
    const size_t kdim = (size_t)s->k * s->k * (size_t)(s->c / groups_of(s));
    const size_t total = (size_t)s->n * s->oh * s->ow;
    size_t rows = GM_CONV2D_TILE_FLOATS / kdim;

    if (rows < GM_CONV2D_TILE_MIN_ROWS)
        rows = GM_CONV2D_TILE_MIN_ROWS;
    if (rows < 2 * (size_t)(s->oc / groups_of(s)))
        rows = 2 * (size_t)(s->oc / groups_of(s));
    return rows < total ? rows : total;
}

/* im2col of output pixels [p0, p1) (flattened n, oy, ox), input channels
 * [c0, c0 + cg): rows of K*K*cg floats */
static GM_INLINE_LOOPS void im2col_rows(const struct gm_conv2d_shape *s, const float *x, size_t p0,
                                        size_t p1, int c0, int cg, float *col)
{
    const int k = s->k, c = s->c, pad = s->pad, st = s->stride;
    const size_t rowlen = (size_t)k * k * cg;
    int ox = (int)(p0 % (size_t)s->ow), oy = (int)(p0 / (size_t)s->ow % (size_t)s->oh);
    size_t n = p0 / ((size_t)s->ow * s->oh);
    float *restrict out = col;

    for (size_t p = p0; p < p1; p++) {
        const float *xn = x + n * s->h * s->w * c + c0;
        const int x0 = ox * st;
        const int kx0 = pad - x0 > 0 ? pad - x0 : 0;
        const int kx1 = s->w + pad - x0 < k ? s->w + pad - x0 : k;
        for (int ky = 0; ky < k; ky++) {
            const int iy = oy * st + ky - pad;
            float *dst = out + (size_t)ky * k * cg;
            if (iy < 0 || iy >= s->h || kx1 <= kx0) {
                zero_floats(dst, k * cg);
                continue;
            }
            if (kx0 > 0)
                zero_floats(dst, kx0 * cg);
            const float *src = xn + ((size_t)iy * s->w + (size_t)(x0 + kx0 - pad)) * c;
            if (cg == c) {
                copy_floats(dst + (size_t)kx0 * c, src, (kx1 - kx0) * c);
            } else {
                for (int kx = kx0; kx < kx1; kx++)
                    copy_floats(dst + (size_t)kx * cg, src + (size_t)(kx - kx0) * c, cg);
            }
            if (kx1 < k)
                zero_floats(dst + (size_t)kx1 * cg, (k - kx1) * cg);
        }
        out += rowlen;
        if (++ox == s->ow) {
            ox = 0;
            if (++oy == s->oh) {
                oy = 0;
                n++;
            }
        }
    }
}

/* dx[pixels of p0..p1, channels c0..c0+cg) += col2im(dcol rows) */
static void col2im_rows(const struct gm_conv2d_shape *s, const float *dcol, size_t p0, size_t p1,
                        int c0, int cg, float *dx)
{
    const int k = s->k, c = s->c, pad = s->pad, st = s->stride;
    const size_t rowlen = (size_t)k * k * cg;
    int ox = (int)(p0 % (size_t)s->ow), oy = (int)(p0 / (size_t)s->ow % (size_t)s->oh);
    size_t n = p0 / ((size_t)s->ow * s->oh);
    const float *src = dcol;

    for (size_t p = p0; p < p1; p++) {
        float *xn = dx + n * s->h * s->w * c + c0;
        const int x0 = ox * st;
        const int kx0 = pad - x0 > 0 ? pad - x0 : 0;
        const int kx1 = s->w + pad - x0 < k ? s->w + pad - x0 : k;
        for (int ky = 0; ky < k; ky++) {
            const int iy = oy * st + ky - pad;
            if (iy < 0 || iy >= s->h || kx1 <= kx0)
                continue;
            const float *restrict a = src + ((size_t)ky * k + (size_t)kx0) * cg;
            float *restrict d = xn + ((size_t)iy * s->w + (size_t)(x0 + kx0 - pad)) * c;
            if (cg == c) {
                const int len = (kx1 - kx0) * c;
                for (int i = 0; i < len; i++)
                    d[i] += a[i];
            } else {
                for (int kx = 0; kx < kx1 - kx0; kx++)
                    for (int i = 0; i < cg; i++)
                        d[(size_t)kx * c + i] += a[(size_t)kx * cg + i];
            }
        }
        src += rowlen;
        if (++ox == s->ow) {
            ox = 0;
            if (++oy == s->oh) {
                oy = 0;
                n++;
            }
        }
    }
}

static void bias_rows(float *y, const float *b, size_t rows, int oc)
{
    for (size_t r = 0; r < rows; r++)
        copy_floats(y + r * oc, b, oc);
}

static void bias_grad(const float *dy, size_t rows, int oc, float *db)
{
    memset(db, 0, sizeof(float) * (size_t)oc);
    for (size_t r = 0; r < rows; r++) {
        const float *restrict d = dy + r * oc;
        for (int o = 0; o < oc; o++)
            db[o] += d[o];
    }
}

static void tiled_forward(const struct gm_conv2d_shape *s, const float *x, const float *w,
                          const float *b, float *col, float *y)
{
    const int g_n = groups_of(s), cg = s->c / g_n, ocg = s->oc / g_n, oc = s->oc;
    const int kdim = s->k * s->k * cg;
    const size_t total = (size_t)s->n * s->oh * s->ow, step = tile_rows(s);

    for (size_t p0 = 0; p0 < total; p0 += step) {
        const size_t p1 = p0 + step < total ? p0 + step : total;
        float *yt = y + p0 * oc;
        if (b != NULL)
            bias_rows(yt, b, p1 - p0, oc);
        for (int g = 0; g < g_n; g++) {
            im2col_rows(s, x, p0, p1, g * cg, cg, col);
            cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, (int)(p1 - p0), ocg, kdim, 1.0f,
                        col, kdim, w + (size_t)g * ocg * kdim, kdim, b != NULL ? 1.0f : 0.0f,
                        yt + (size_t)g * ocg, oc);
        }
    }
}

static void tiled_backward(const struct gm_conv2d_shape *s, const float *x, const float *w,
                           const float *dy, float *dw, float *db, float *dx, float *col,
                           float *dcol)
{
    const int g_n = groups_of(s), cg = s->c / g_n, ocg = s->oc / g_n, oc = s->oc;
    const int kdim = s->k * s->k * cg;
    const size_t total = (size_t)s->n * s->oh * s->ow, step = tile_rows(s);

    if (db != NULL)
        bias_grad(dy, total, oc, db);
    if (dx != NULL)
        memset(dx, 0, sizeof(float) * (size_t)s->n * s->h * s->w * s->c);
    for (size_t p0 = 0; p0 < total; p0 += step) {
        const size_t p1 = p0 + step < total ? p0 + step : total;
        const int rows = (int)(p1 - p0);
        const float *dyt = dy + p0 * oc;
        for (int g = 0; g < g_n; g++) {
            const float *wg = w + (size_t)g * ocg * kdim;
            im2col_rows(s, x, p0, p1, g * cg, cg, col);
            /* dW_g (OCG, K) += dy_g^T (OCG, rows) x col (rows, K) */
            cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, ocg, kdim, rows, 1.0f,
                        dyt + (size_t)g * ocg, oc, col, kdim, p0 == 0 ? 0.0f : 1.0f,
                        dw + (size_t)g * ocg * kdim, kdim);
            if (dx == NULL)
                continue;
            /* dcol (rows, K) = dy_g (rows, OCG) x w_g (OCG, K) */
            cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, rows, kdim, ocg, 1.0f,
                        dyt + (size_t)g * ocg, oc, wg, kdim, 0.0f, dcol, kdim);
            col2im_rows(s, dcol, p0, p1, g * cg, cg, dx);
        }
    }
}

/* 1x1, stride 1, no padding: x (rows, C) is col */
static void pointwise_forward(const struct gm_conv2d_shape *s, const float *x, const float *w,
                              const float *b, float *y)
{
    const size_t rows = (size_t)s->n * s->oh * s->ow;

    if (b != NULL)
        bias_rows(y, b, rows, s->oc);
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, (int)rows, s->oc, s->c, 1.0f, x, s->c, w,
                s->c, b != NULL ? 1.0f : 0.0f, y, s->oc);
}

static void pointwise_backward(const struct gm_conv2d_shape *s, const float *x, const float *w,
                               const float *dy, float *dw, float *db, float *dx)
{
    const size_t rows = (size_t)s->n * s->oh * s->ow;

    cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, s->oc, s->c, (int)rows, 1.0f, dy, s->oc, x,
                s->c, 0.0f, dw, s->c);
    if (db != NULL)
        bias_grad(dy, rows, s->oc, db);
    if (dx != NULL)
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, (int)rows, s->c, s->oc, 1.0f, dy,
                    s->oc, w, s->c, 0.0f, dx, s->c);
}

/* Depthwise (groups == C == OC): y[p, ch] = b[ch] + sum over taps of
 * x[tap(p), ch] * w[ch, tap].  Channels are the inner, contiguous axis, so
 * the weights are repacked tap-major (wt[tap * C + ch]) and every loop runs
 * over channels, 8 lanes at a time. */
static void dw_repack(const struct gm_conv2d_shape *s, const float *w, float *wt)
{
    const int taps = s->k * s->k, c = s->c;

    for (int ch = 0; ch < c; ch++)
        for (int t = 0; t < taps; t++)
            wt[(size_t)t * c + ch] = w[(size_t)ch * taps + t];
}

static inline v8f load8(const float *p)
{
    v8f v;
    memcpy(&v, p, sizeof(v));
    return v;
}

static inline void store8(float *p, v8f v)
{
    memcpy(p, &v, sizeof(v));
}

static void dw_forward(const struct gm_conv2d_shape *s, const float *x, const float *w,
                       const float *b, float *wt, float *y)
{
    const int k = s->k, c = s->c, st = s->stride, c8 = c & ~7;

    dw_repack(s, w, wt);
    for (int n = 0; n < s->n; n++) {
        const float *xn = x + (size_t)n * s->h * s->w * c;
        for (int oy = 0; oy < s->oh; oy++) {
            int ky0, ky1;
            krange(oy * st, k, s->pad, s->h, &ky0, &ky1);
            for (int ox = 0; ox < s->ow; ox++) {
                int kx0, kx1;
                float *yp = y + (((size_t)n * s->oh + oy) * s->ow + ox) * c;
                krange(ox * st, k, s->pad, s->w, &kx0, &kx1);
                for (int c0 = 0; c0 < c8; c0 += 8) {
                    v8f acc = b != NULL ? load8(b + c0) : (v8f){0};
                    for (int ky = ky0; ky < ky1; ky++) {
                        const float *xr =
                            xn +
                            ((size_t)(oy * st + ky - s->pad) * s->w + (size_t)(ox * st - s->pad)) *
                                c +
                            c0;
                        const float *wr = wt + (size_t)ky * k * c + c0;
                        for (int kx = kx0; kx < kx1; kx++)
                            acc += load8(xr + (size_t)kx * c) * load8(wr + (size_t)kx * c);
                    }
                    store8(yp + c0, acc);
                }
                for (int ch = c8; ch < c; ch++) {
                    float acc = b != NULL ? b[ch] : 0.0f;
                    for (int ky = ky0; ky < ky1; ky++)
                        for (int kx = kx0; kx < kx1; kx++)
                            acc += xn[((size_t)(oy * st + ky - s->pad) * s->w +
                                       (size_t)(ox * st + kx - s->pad)) *
                                          c +
                                      ch] *
                                   wt[((size_t)ky * k + kx) * c + ch];
                    yp[ch] = acc;
                }
            }
        }
    }
}

/* ws: wt (taps*C), the image's dW (taps*C) and db (C), the batch's dW and db:
 * per-image partial sums keep the fp32 error of the long sums down */
static void dw_backward(const struct gm_conv2d_shape *s, const float *x, const float *w,
                        const float *dy, float *dw, float *db, float *dx, float *ws)
{
    const int k = s->k, c = s->c, st = s->stride, taps = k * k, c8 = c & ~7;
    const size_t tc = (size_t)taps * c;
    float *wt = ws, *img = ws + round16(tc), *tot = img + round16(tc + c);

    dw_repack(s, w, wt);
    memset(tot, 0, sizeof(float) * (tc + c));
    if (dx != NULL)
        memset(dx, 0, sizeof(float) * (size_t)s->n * s->h * s->w * c);
    for (int n = 0; n < s->n; n++) {
        const float *xn = x + (size_t)n * s->h * s->w * c;
        float *dxn = dx != NULL ? dx + (size_t)n * s->h * s->w * c : NULL;
        memset(img, 0, sizeof(float) * (tc + c));
        for (int oy = 0; oy < s->oh; oy++) {
            int ky0, ky1;
            krange(oy * st, k, s->pad, s->h, &ky0, &ky1);
            for (int ox = 0; ox < s->ow; ox++) {
                int kx0, kx1;
                const float *g = dy + (((size_t)n * s->oh + oy) * s->ow + ox) * c;
                const size_t xoff =
                    ((size_t)(oy * st - s->pad) * s->w + (size_t)(ox * st - s->pad)) * c;
                krange(ox * st, k, s->pad, s->w, &kx0, &kx1);
                for (int c0 = 0; c0 < c8; c0 += 8) {
                    const v8f gv = load8(g + c0);
                    store8(img + tc + c0, load8(img + tc + c0) + gv);
                    for (int ky = ky0; ky < ky1; ky++)
                        for (int kx = kx0; kx < kx1; kx++) {
                            const size_t t = ((size_t)ky * k + kx) * c + c0;
                            const size_t o = xoff + ((size_t)ky * s->w + kx) * c + c0;
                            store8(img + t, load8(img + t) + gv * load8(xn + o));
                            if (dxn != NULL)
                                store8(dxn + o, load8(dxn + o) + gv * load8(wt + t));
                        }
                }
                for (int ch = c8; ch < c; ch++) {
                    img[tc + ch] += g[ch];
                    for (int ky = ky0; ky < ky1; ky++)
                        for (int kx = kx0; kx < kx1; kx++) {
                            const size_t t = ((size_t)ky * k + kx) * c + ch;
                            const size_t o = xoff + ((size_t)ky * s->w + kx) * c + ch;
                            img[t] += g[ch] * xn[o];
                            if (dxn != NULL)
                                dxn[o] += g[ch] * wt[t];
                        }
                }
            }
        }
        for (size_t i = 0; i < tc + c; i++)
            tot[i] += img[i];
    }
    for (int ch = 0; ch < c; ch++) {
        for (int t = 0; t < taps; t++)
            dw[(size_t)ch * taps + t] = tot[(size_t)t * c + ch];
        if (db != NULL)
            db[ch] = tot[tc + ch];
    }
}

/* ---- layer entry points (see conv2d.h) ------------------------------------- */

static size_t col_floats(const struct gm_conv2d_shape *s)
{
    const size_t floats = (size_t)s->n * s->oh * s->ow * s->k * s->k * s->c;
    return (floats + 15) & ~(size_t)15; /* keep dcol 64-byte aligned */
}

static size_t tile_floats(const struct gm_conv2d_shape *s)
{
    return round16(tile_rows(s) * s->k * s->k * (size_t)(s->c / groups_of(s)));
}

size_t gm_conv2d_layer_ws_floats_cpu(const struct gm_conv2d_shape *s, int need_dx)
{
    if (gm_conv2d_use_direct(s, need_dx))
        return gm_conv2d_direct_pack_floats(s);
    if (!s->tiled)
        return col_floats(s) * (need_dx ? 2 : 1);
    if (is_pointwise(s))
        return 0;
    if (gm_winograd_use(s))
        return gm_winograd_ws_floats(s);
    if (is_depthwise(s)) {
        const size_t tc = (size_t)s->k * s->k * s->c;
        return round16(tc) + 2 * round16(tc + s->c);
    }
    return tile_floats(s) * (need_dx ? 2 : 1);
}

void gm_conv2d_layer_forward_cpu(const struct gm_conv2d_shape *s, int need_dx, const float *x,
                                 const float *w, const float *b, float *ws, float *y)
{
    if (gm_conv2d_use_direct(s, need_dx))
        gm_conv2d_direct_forward_cpu(s, x, w, b, ws, y);
    else if (!s->tiled)
        gm_conv2d_forward_cpu(s, x, w, b, ws, y);
    else if (is_pointwise(s))
        pointwise_forward(s, x, w, b, y);
    else if (gm_winograd_use(s))
        gm_winograd_forward_cpu(s, x, w, b, ws, y);
    else if (is_depthwise(s))
        dw_forward(s, x, w, b, ws, y);
    else
        tiled_forward(s, x, w, b, ws, y);
}

void gm_conv2d_layer_backward_cpu(const struct gm_conv2d_shape *s, const float *x, const float *w,
                                  const float *dy, float *dw, float *db, float *dx, float *ws)
{
    if (gm_conv2d_use_direct(s, dx != NULL))
        gm_conv2d_direct_backward_cpu(s, x, dy, dw, db, ws);
    else if (!s->tiled)
        gm_conv2d_backward_cpu(s, ws, w, dy, dw, db, dx != NULL ? ws + col_floats(s) : NULL, dx);
    else if (is_pointwise(s))
        pointwise_backward(s, x, w, dy, dw, db, dx);
    else if (gm_winograd_use(s))
        gm_winograd_backward_cpu(s, x, w, dy, dw, db, dx, ws);
    else if (is_depthwise(s))
        dw_backward(s, x, w, dy, dw, db, dx, ws);
    else
        tiled_backward(s, x, w, dy, dw, db, dx, ws, dx != NULL ? ws + tile_floats(s) : NULL);
}
