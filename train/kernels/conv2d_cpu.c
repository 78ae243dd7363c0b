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
                         int pad)
{
    memset(s, 0, sizeof(*s));
    if (n < 1 || h < 1 || w < 1 || c < 1 || oc < 1 || k < 1 || pad < 0)
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
    s->oh = h + 2 * pad - k + 1;
    s->ow = w + 2 * pad - k + 1;
    return 0;
}

void gm_conv2d_im2col_cpu(const struct gm_conv2d_shape *s, const float *x, float *col)
{
    const int k = s->k, c = s->c, pad = s->pad;
    const size_t rowlen = (size_t)k * k * c;
    float *restrict out = col;

    for (int n = 0; n < s->n; n++) {
        const float *xn = x + (size_t)n * s->h * s->w * c;
        for (int oy = 0; oy < s->oh; oy++) {
            for (int ox = 0; ox < s->ow; ox++) {
                /* valid kernel columns for this output column */
                int kx0 = pad - ox > 0 ? pad - ox : 0;
                int kx1 = s->w + pad - ox < k ? s->w + pad - ox : k;
                for (int ky = 0; ky < k; ky++) {
                    int iy = oy + ky - pad;
                    float *dst = out + (size_t)ky * k * c;
                    if (iy < 0 || iy >= s->h) {
                        memset(dst, 0, sizeof(float) * (size_t)k * c);
                        continue;
                    }
                    if (kx0 > 0)
                        memset(dst, 0, sizeof(float) * (size_t)kx0 * c);
                    if (kx1 > kx0)
                        memcpy(dst + (size_t)kx0 * c,
                               xn + ((size_t)iy * s->w + (size_t)(ox + kx0 - pad)) * c,
                               sizeof(float) * (size_t)(kx1 - kx0) * c);
                    if (kx1 < k)
                        memset(dst + (size_t)kx1 * c, 0, sizeof(float) * (size_t)(k - kx1) * c);
                }
                out += rowlen;
            }
        }
    }
}

void gm_conv2d_col2im_cpu(const struct gm_conv2d_shape *s, const float *col, float *dx)
{
    const int k = s->k, c = s->c, pad = s->pad;
    const size_t rowlen = (size_t)k * k * c;
    const float *src = col;

    memset(dx, 0, sizeof(float) * (size_t)s->n * s->h * s->w * c);
    for (int n = 0; n < s->n; n++) {
        float *xn = dx + (size_t)n * s->h * s->w * c;
        for (int oy = 0; oy < s->oh; oy++) {
            for (int ox = 0; ox < s->ow; ox++) {
                int kx0 = pad - ox > 0 ? pad - ox : 0;
                int kx1 = s->w + pad - ox < k ? s->w + pad - ox : k;
                for (int ky = 0; ky < k; ky++) {
                    int iy = oy + ky - pad;
                    if (iy < 0 || iy >= s->h || kx1 <= kx0)
                        continue;
                    const float *restrict a = src + ((size_t)ky * k + (size_t)kx0) * c;
                    float *restrict d = xn + ((size_t)iy * s->w + (size_t)(ox + kx0 - pad)) * c;
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
    /* y starts as the bias broadcast, then y += col x w^T */
    for (int r = 0; r < rows; r++)
        memcpy(y + (size_t)r * oc, b, sizeof(float) * (size_t)oc);
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, rows, oc, kdim, 1.0f, col, kdim, w, kdim,
                1.0f, y, oc);
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
    memset(db, 0, sizeof(float) * (size_t)oc);
    for (int r = 0; r < rows; r++) {
        const float *restrict d = dy + (size_t)r * oc;
        for (int o = 0; o < oc; o++)
            db[o] += d[o];
    }
    if (dx == NULL)
        return;
    /* dcol (rows, K) = dy (rows, OC) x w (OC, K) */
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, rows, kdim, oc, 1.0f, dy, oc, w, kdim,
                0.0f, dcol, kdim);
    gm_conv2d_col2im_cpu(s, dcol, dx);
}
