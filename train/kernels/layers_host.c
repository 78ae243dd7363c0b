/*
 * train/kernels/layers_host.c - the host twins of kfn_layers.h's bodies (see
 * layers_host.h): every thread of every block of the grid, in order.
 */
#include "train/kernels/layers_host.h"

#include "train/kernels/kfn_layers.h"

#define FOR_GRID(l, g)                                                                             \
    for (struct gm_kgrid g = {0, (l).blocks, 0, (l).threads}; g.block < (l).blocks; g.block++)     \
        for (g.thread = 0; g.thread < (l).threads; g.thread++)

void gm_krelu6_forward_host(struct gm_klaunch l, size_t n, const float *x, float *y)
{
    FOR_GRID(l, g)
    gm_kbody_relu6_fwd(g, n, x, y);
}

void gm_krelu6_backward_host(struct gm_klaunch l, size_t n, const float *y, const float *dy,
                             float *dx)
{
    FOR_GRID(l, g)
    gm_kbody_relu6_bwd(g, n, y, dy, dx);
}

void gm_kmaxpool2d_forward_host(struct gm_klaunch l, const struct gm_pool2d_shape *s, int relu,
                                const float *x, float *y, uint8_t *arg)
{
    FOR_GRID(l, g)
    gm_kbody_maxpool2d_fwd(g, s->n, s->h, s->w, s->c, s->k, s->stride, s->pad, s->oh, s->ow, relu,
                           x, y, arg);
}

void gm_kmaxpool2d_backward_host(struct gm_klaunch l, const struct gm_pool2d_shape *s,
                                 const float *dy, const uint8_t *arg, float *dx)
{
    FOR_GRID(l, g)
    gm_kbody_maxpool2d_bwd(g, s->n, s->h, s->w, s->c, s->k, s->stride, s->pad, s->oh, s->ow, dy,
                           arg, dx);
}

void gm_kadapool_forward_host(struct gm_klaunch l, int n, int h, int w, int c, int oh, int ow,
                              const float *x, float *y)
{
    FOR_GRID(l, g)
    gm_kbody_adapool_fwd(g, n, h, w, c, oh, ow, x, y);
}

void gm_kadapool_backward_host(struct gm_klaunch l, int n, int h, int w, int c, int oh, int ow,
                               const float *dy, float *dx)
{
    FOR_GRID(l, g)
    gm_kbody_adapool_bwd(g, n, h, w, c, oh, ow, dy, dx);
}
