/*
 * train/kernels/maxpool_cpu.c - see maxpool.h.  The channel loop is innermost
 * (NHWC), so the compares vectorize across channels.
 */
#include "train/kernels/maxpool.h"

#include <string.h>

void gm_maxpool_forward_cpu(int n, int h, int w, int c, int k, const float *x, float *y,
                            uint8_t *arg)
{
    const int oh = h / k, ow = w / k;

    for (int b = 0; b < n; b++) {
        const float *xb = x + (size_t)b * h * w * c;
        for (int oy = 0; oy < oh; oy++) {
            for (int ox = 0; ox < ow; ox++) {
                float *restrict yo = y + (((size_t)b * oh + oy) * ow + ox) * c;
                uint8_t *restrict ao = arg + (((size_t)b * oh + oy) * ow + ox) * c;
                const float *x0 = xb + ((size_t)oy * k * w + (size_t)ox * k) * c;
                memcpy(yo, x0, sizeof(float) * (size_t)c);
                memset(ao, 0, (size_t)c);
                for (int p = 1; p < k * k; p++) {
                    const float *restrict xp = x0 + ((size_t)(p / k) * w + (size_t)(p % k)) * c;
                    for (int ch = 0; ch < c; ch++) {
                        int better = xp[ch] > yo[ch];
                        yo[ch] = better ? xp[ch] : yo[ch];
                        ao[ch] = better ? (uint8_t)p : ao[ch];
                    }
                }
            }
        }
    }
}

void gm_maxpool_backward_cpu(int n, int h, int w, int c, int k, const float *dy,
                             const uint8_t *arg, float *dx)
{
    const int oh = h / k, ow = w / k;

    memset(dx, 0, sizeof(float) * (size_t)n * h * w * c);
    for (int b = 0; b < n; b++) {
        float *xb = dx + (size_t)b * h * w * c;
        for (int oy = 0; oy < oh; oy++) {
            for (int ox = 0; ox < ow; ox++) {
                const float *dyo = dy + (((size_t)b * oh + oy) * ow + ox) * c;
                const uint8_t *ao = arg + (((size_t)b * oh + oy) * ow + ox) * c;
                float *x0 = xb + ((size_t)oy * k * w + (size_t)ox * k) * c;
                for (int ch = 0; ch < c; ch++) {
                    int p = ao[ch];
                    x0[((size_t)(p / k) * w + (size_t)(p % k)) * c + ch] += dyo[ch];
                }
            }
        }
    }
}
