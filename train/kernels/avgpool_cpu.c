/*
 * train/kernels/avgpool_cpu.c - adaptive average pooling (see avgpool.h).
 * Channels are the inner loop (NHWC), so every loop runs over a contiguous
 * row of C floats and vectorizes.
 */
#include "train/kernels/avgpool.h"

#include <stddef.h>
#include <string.h>

void gm_adaptive_avgpool_forward_cpu(int n, int h, int w, int c, int oh, int ow,
                                     const float *restrict x, float *restrict y)
{
    for (int b = 0; b < n; b++) {
        const float *xb = x + (size_t)b * h * w * c;
        for (int i = 0; i < oh; i++) {
            const int y0 = gm_adapool_start(i, h, oh), y1 = gm_adapool_end(i, h, oh);
            for (int j = 0; j < ow; j++) {
                const int x0 = gm_adapool_start(j, w, ow), x1 = gm_adapool_end(j, w, ow);
                const float kh = (float)(y1 - y0), kw = (float)(x1 - x0);
                float *restrict yo = y + (((size_t)b * oh + i) * ow + j) * c;
                for (int q = 0; q < c; q++)
                    yo[q] = 0.0f;
                for (int iy = y0; iy < y1; iy++)
                    for (int ix = x0; ix < x1; ix++) {
                        const float *restrict xp = xb + ((size_t)iy * w + ix) * c;
                        for (int q = 0; q < c; q++)
                            yo[q] += xp[q];
                    }
                for (int q = 0; q < c; q++)
                    yo[q] = yo[q] / kh / kw;
            }
        }
    }
}

void gm_adaptive_avgpool_backward_cpu(int n, int h, int w, int c, int oh, int ow,
                                      const float *restrict dy, float *restrict dx)
{
    memset(dx, 0, sizeof(float) * (size_t)n * h * w * c);
    for (int b = 0; b < n; b++) {
        float *xb = dx + (size_t)b * h * w * c;
        for (int i = 0; i < oh; i++) {
            const int y0 = gm_adapool_start(i, h, oh), y1 = gm_adapool_end(i, h, oh);
            for (int j = 0; j < ow; j++) {
                const int x0 = gm_adapool_start(j, w, ow), x1 = gm_adapool_end(j, w, ow);
                const float kh = (float)(y1 - y0), kw = (float)(x1 - x0);
                const float *restrict g = dy + (((size_t)b * oh + i) * ow + j) * c;
                for (int iy = y0; iy < y1; iy++)
                    for (int ix = x0; ix < x1; ix++) {
                        float *restrict xp = xb + ((size_t)iy * w + ix) * c;
                        for (int q = 0; q < c; q++)
                            xp[q] += g[q] / kh / kw;
                    }
            }
        }
    }
}
