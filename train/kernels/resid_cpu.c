/* train/kernels/resid_cpu.c - see resid.h. */
#include "train/kernels/resid.h"

#include <string.h>

void gm_add_cpu(size_t n, const float *a, const float *b, float *y)
{
    for (size_t i = 0; i < n; i++)
        y[i] = a[i] + b[i];
}

void gm_shortcut_forward_cpu(int n, int h, int w, int c, int oc, int stride, const float *x,
                             float *y)
{
    const int oh = (h + stride - 1) / stride, ow = (w + stride - 1) / stride, p = (oc - c) / 2;

    memset(y, 0, sizeof(float) * (size_t)n * oh * ow * oc);
    for (int b = 0; b < n; b++)
        for (int i = 0; i < oh; i++)
            for (int j = 0; j < ow; j++)
                memcpy(y + (((size_t)b * oh + i) * ow + j) * oc + p,
                       x + (((size_t)b * h + (size_t)i * stride) * w + (size_t)j * stride) * c,
                       sizeof(float) * (size_t)c);
}

void gm_shortcut_backward_cpu(int n, int h, int w, int c, int oc, int stride, const float *dy,
                              float *dx)
{
    const int oh = (h + stride - 1) / stride, ow = (w + stride - 1) / stride, p = (oc - c) / 2;

    memset(dx, 0, sizeof(float) * (size_t)n * h * w * c);
    for (int b = 0; b < n; b++)
        for (int i = 0; i < oh; i++)
            for (int j = 0; j < ow; j++)
                memcpy(dx + (((size_t)b * h + (size_t)i * stride) * w + (size_t)j * stride) * c,
                       dy + (((size_t)b * oh + i) * ow + j) * oc + p, sizeof(float) * (size_t)c);
}

void gm_avgpool_forward_cpu(int n, int hw, int c, const float *x, float *y)
{
    const float inv = 1.0f / (float)hw;

    for (int b = 0; b < n; b++) {
        float *yb = y + (size_t)b * c;
        memset(yb, 0, sizeof(float) * (size_t)c);
        for (int i = 0; i < hw; i++) {
            const float *xr = x + ((size_t)b * hw + i) * c;
            for (int j = 0; j < c; j++)
                yb[j] += xr[j];
        }
        for (int j = 0; j < c; j++)
            yb[j] *= inv;
    }
}

void gm_avgpool_backward_cpu(int n, int hw, int c, const float *dy, float *dx)
{
    const float inv = 1.0f / (float)hw;

    for (int b = 0; b < n; b++)
        for (int i = 0; i < hw; i++)
            for (int j = 0; j < c; j++)
                dx[((size_t)b * hw + i) * c + j] = dy[(size_t)b * c + j] * inv;
}

void gm_nchw_to_nhwc_cpu(int n, int c, int hw, const float *x, float *y)
{
    for (int b = 0; b < n; b++)
        for (int ch = 0; ch < c; ch++)
            for (int i = 0; i < hw; i++)
                y[((size_t)b * hw + i) * c + ch] = x[((size_t)b * c + ch) * hw + i];
}
