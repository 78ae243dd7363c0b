/*
 * train/kernels/kfn_layers.h - per-element bodies of the layer kernels the CUDA op table
 * needs for the torchvision families (ReLU6, max pooling with stride and padding, adaptive
 * average pooling), written once and compiled twice like kfn.h: by nvcc into the __global__
 * kernels of train/kernels/layers.cu and by the C compiler into their host twins
 * (train/kernels/layers_host.c), which tests/unit/test_kernels_host.c checks against the
 * CPU table on grids whose grid-stride loops wrap.  kfn.h's rules apply (C11 and C++17, no
 * FMA contraction, grid-stride loops over struct gm_kgrid).
 *
 * Semantics and arithmetic are the CPU kernels' (act.h, maxpool.h, avgpool.h), in the same
 * order, so the results are the same bits: forward bodies run one thread per output
 * element; backward bodies one thread per input element, gathering what the CPU scatters,
 * in the CPU's (output) order, starting from 0, so nothing needs atomics.
 */
#ifndef GM_TRAIN_KERNELS_KFN_LAYERS_H
#define GM_TRAIN_KERNELS_KFN_LAYERS_H

#include "train/kernels/kfn.h"

#define GM_KMAXPOOL_NONE 255 /* maxpool.h's GM_MAXPOOL_NONE */

/* Position of flat index i in an (N, H, W, C) array. */
struct gm_knhwc {
    int b, y, x, q;
};

GM_KFN struct gm_knhwc gm_knhwc_at(size_t i, int h, int w, int c)
{
    struct gm_knhwc p;
    p.q = (int)(i % (size_t)c);
    i /= (size_t)c;
    p.x = (int)(i % (size_t)w);
    i /= (size_t)w;
    p.y = (int)(i % (size_t)h);
    p.b = (int)(i / (size_t)h);
    return p;
}

/* ---- ReLU6 ---- */

GM_KFN void gm_kbody_relu6_fwd(struct gm_kgrid g, size_t n, const float *GM_KRESTRICT x,
                               float *GM_KRESTRICT y)
{
    for (size_t i = gm_kgrid_first(g); i < n; i += gm_kgrid_stride(g)) {
        const float v = x[i] > 0.0f ? x[i] : 0.0f;
        y[i] = v < 6.0f ? v : 6.0f;
    }
}

GM_KFN void gm_kbody_relu6_bwd(struct gm_kgrid g, size_t n, const float *GM_KRESTRICT y,
                               const float *GM_KRESTRICT dy, float *GM_KRESTRICT dx)
{
    for (size_t i = gm_kgrid_first(g); i < n; i += gm_kgrid_stride(g))
        dx[i] = y[i] > 0.0f && y[i] < 6.0f ? dy[i] : 0.0f;
}

/* ---- max pooling: window k, stride st, padding pad; output (n, oh, ow, c) ---- */

GM_KFN void gm_kbody_maxpool2d_fwd(struct gm_kgrid g, int n, int h, int w, int c, int k, int st,
                                   int pad, int oh, int ow, int relu, const float *GM_KRESTRICT x,
                                   float *GM_KRESTRICT y, uint8_t *GM_KRESTRICT arg)
{
    const size_t total = (size_t)n * oh * ow * c;

    for (size_t i = gm_kgrid_first(g); i < total; i += gm_kgrid_stride(g)) {
        const struct gm_knhwc o = gm_knhwc_at(i, oh, ow, c);
        const int y0 = o.y * st - pad, x0 = o.x * st - pad;
        const int ky0 = y0 < 0 ? -y0 : 0, ky1 = h - y0 < k ? h - y0 : k;
        const int kx0 = x0 < 0 ? -x0 : 0, kx1 = w - x0 < k ? w - x0 : k;
        float best = 0.0f;
        int where = 0, first = 1;
        for (int ky = ky0; ky < ky1; ky++)
            for (int kx = kx0; kx < kx1; kx++) {
                const float v =
                    x[(((size_t)o.b * h + (size_t)(y0 + ky)) * w + (size_t)(x0 + kx)) * c + o.q];
                if (first || v > best) { /* strictly: the first maximum wins */
                    best = v;
                    where = ky * k + kx;
                    first = 0;
                }
            }
        if (relu && !(best > 0.0f)) {
            best = 0.0f;
            where = GM_KMAXPOOL_NONE;
        }
        y[i] = best;
        arg[i] = (uint8_t)where;
    }
}

/* dx (n, h, w, c): the sum of dy over the outputs whose argmax is this input, in output
 * order. */
GM_KFN void gm_kbody_maxpool2d_bwd(struct gm_kgrid g, int n, int h, int w, int c, int k, int st,
                                   int pad, int oh, int ow, const float *GM_KRESTRICT dy,
                                   const uint8_t *GM_KRESTRICT arg, float *GM_KRESTRICT dx)
{
    const size_t total = (size_t)n * h * w * c;

    for (size_t i = gm_kgrid_first(g); i < total; i += gm_kgrid_stride(g)) {
        const struct gm_knhwc p = gm_knhwc_at(i, h, w, c);
        /* outputs whose window [o*st - pad, o*st - pad + k) holds the input */
        const int ty = p.y + pad - k + 1, tx = p.x + pad - k + 1;
        int oy0 = ty > 0 ? (ty + st - 1) / st : 0, oy1 = (p.y + pad) / st;
        int ox0 = tx > 0 ? (tx + st - 1) / st : 0, ox1 = (p.x + pad) / st;
        float v = 0.0f;
        if (oy1 > oh - 1)
            oy1 = oh - 1;
        if (ox1 > ow - 1)
            ox1 = ow - 1;
        for (int oy = oy0; oy <= oy1; oy++)
            for (int ox = ox0; ox <= ox1; ox++) {
                const size_t o = (((size_t)p.b * oh + oy) * ow + ox) * c + p.q;
                const int at = (p.y - (oy * st - pad)) * k + (p.x - (ox * st - pad));
                if (arg[o] == at)
                    v += dy[o];
            }
        dx[i] = v;
    }
}

/* ---- adaptive average pooling to (oh, ow) (avgpool.h's cells) ---- */

GM_KFN int gm_kadapool_start(int i, int n, int on)
{
    return (int)(((long long)i * n) / on);
}

GM_KFN int gm_kadapool_end(int i, int n, int on)
{
    return (int)(((long long)(i + 1) * n + on - 1) / on);
}

GM_KFN void gm_kbody_adapool_fwd(struct gm_kgrid g, int n, int h, int w, int c, int oh, int ow,
                                 const float *GM_KRESTRICT x, float *GM_KRESTRICT y)
{
    const size_t total = (size_t)n * oh * ow * c;

    for (size_t i = gm_kgrid_first(g); i < total; i += gm_kgrid_stride(g)) {
        const struct gm_knhwc o = gm_knhwc_at(i, oh, ow, c);
        const int y0 = gm_kadapool_start(o.y, h, oh), y1 = gm_kadapool_end(o.y, h, oh);
        const int x0 = gm_kadapool_start(o.x, w, ow), x1 = gm_kadapool_end(o.x, w, ow);
        float sum = 0.0f;
        for (int iy = y0; iy < y1; iy++)
            for (int ix = x0; ix < x1; ix++)
                sum += x[(((size_t)o.b * h + iy) * w + ix) * c + o.q];
        y[i] = sum / (float)(y1 - y0) / (float)(x1 - x0);
    }
}

GM_KFN void gm_kbody_adapool_bwd(struct gm_kgrid g, int n, int h, int w, int c, int oh, int ow,
                                 const float *GM_KRESTRICT dy, float *GM_KRESTRICT dx)
{
    const size_t total = (size_t)n * h * w * c;

    for (size_t i = gm_kgrid_first(g); i < total; i += gm_kgrid_stride(g)) {
        const struct gm_knhwc p = gm_knhwc_at(i, h, w, c);
        /* the cells holding row p.y: floor(y*oh/h) .. ceil((y+1)*oh/h) - 1 */
        const int i0 = (int)(((long long)p.y * oh) / h);
        const int i1 = (int)(((long long)(p.y + 1) * oh + h - 1) / h);
        const int j0 = (int)(((long long)p.x * ow) / w);
        const int j1 = (int)(((long long)(p.x + 1) * ow + w - 1) / w);
        float v = 0.0f;
        for (int oy = i0; oy < i1 && oy < oh; oy++) {
            const int y0 = gm_kadapool_start(oy, h, oh), y1 = gm_kadapool_end(oy, h, oh);
            if (p.y < y0 || p.y >= y1)
                continue;
            for (int ox = j0; ox < j1 && ox < ow; ox++) {
                const int x0 = gm_kadapool_start(ox, w, ow), x1 = gm_kadapool_end(ox, w, ow);
                if (p.x < x0 || p.x >= x1)
                    continue;
                v += dy[(((size_t)p.b * oh + oy) * ow + ox) * c + p.q] / (float)(y1 - y0) /
                     (float)(x1 - x0);
            }
        }
        dx[i] = v;
    }
}

#endif
