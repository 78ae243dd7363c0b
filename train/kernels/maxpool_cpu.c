/*
 * train/kernels/maxpool_cpu.c - see maxpool.h.  Channels are processed 8 at
 * a time with GCC vector extensions (compare masks + bitwise selects); a
 * channel count that is not a multiple of 8 ends with a partial vector.
 */
#include "train/kernels/maxpool.h"

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

static inline v8f selectf(v8i mask, v8f a, v8f b)
{
    return (v8f)(((v8i)a & mask) | ((v8i)b & ~mask));
}

void gm_maxpool_forward_cpu(int n, int h, int w, int c, int k, int relu, const float *x, float *y,
                            uint8_t *arg)
{
    const int oh = h / k, ow = w / k;

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

void gm_maxpool_backward_cpu(int n, int h, int w, int c, int k, const float *dy,
                             const uint8_t *arg, float *dx)
{
    const int oh = h / k, ow = w / k;

    if (oh * k != h || ow * k != w) /* dropped rows/columns get no gradient */
        memset(dx, 0, sizeof(float) * (size_t)n * h * w * c);
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
