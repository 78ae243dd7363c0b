/*
 * train/kernels/layers_host.c - the host twins of kfn_layers.h's bodies (see
 * layers_host.h): every thread of every block of the grid, in order.
 */
#include "train/kernels/layers_host.h"

#include <errno.h>
#include <stdlib.h>

#include "train/kernels/kfn_bn.h"
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

/* One kfn_bn.h step over the grid in ctx. */
static int bn_run(void *ctx, const struct gm_kbn *b, const struct gm_kbn_step *st)
{
    const struct gm_klaunch l = *(const struct gm_klaunch *)ctx;

    FOR_GRID(l, g)
    {
        switch (st->step) {
        case GM_KBN_STEP_SUM:
            gm_kbody_bn_sum(g, st->rows, b->c, st->mode, st->in, st->out);
            break;
        case GM_KBN_STEP_MEAN:
            gm_kbody_bn_mean(g, b->rows, b->c, st->s1, st->dmean);
            break;
        case GM_KBN_STEP_STATS:
            gm_kbody_bn_stats(g, b->rows, b->c, b->momentum, b->eps, st->s1, st->s2, b->gamma,
                              b->beta, b->running_mean, b->running_var, b->save_mean,
                              b->save_invstd, st->f0, st->f1);
            break;
        case GM_KBN_STEP_EVAL:
            gm_kbody_bn_eval(g, b->c, b->eps, b->gamma, b->beta, b->running_mean, b->running_var,
                             st->f0, st->f1);
            break;
        case GM_KBN_STEP_APPLY:
            gm_kbody_bn_apply(g, b->rows, b->c, b->x, st->f0, st->f1, b->y);
            break;
        case GM_KBN_STEP_GRADS:
            gm_kbody_bn_grads(g, b->rows, b->c, b->gamma, b->save_invstd, st->s1, st->s2, b->dgamma,
                              b->dbeta, st->f0, st->f1, st->f2);
            break;
        default:
            gm_kbody_bn_dx(g, b->rows, b->c, b->x, b->dy, b->save_mean, b->save_invstd, st->f0,
                           st->f1, st->f2, b->dx);
            break;
        }
    }
    return 0;
}

/* b with malloc'd scratch through the forward or the backward driver */
static int bn_host(struct gm_klaunch l, struct gm_kbn *b, int backward)
{
    int err;

    if (b->rows == 0 || b->c <= 0)
        return 0;
    b->scratch = calloc(gm_kbn_scratch_doubles(b->rows, b->c), sizeof(double));
    if (b->scratch == NULL)
        return -ENOMEM;
    err = backward ? gm_kbn_backward(b, bn_run, &l) : gm_kbn_forward(b, bn_run, &l);
    free(b->scratch);
    return err;
}

int gm_kbatchnorm_forward_host(struct gm_klaunch l, size_t rows, int c, int train, float momentum,
                               float eps, const float *x, const float *gamma, const float *beta,
                               float *running_mean, float *running_var, float *save_mean,
                               float *save_invstd, float *y)
{
    struct gm_kbn b = {.rows = rows,
                       .c = c,
                       .train = train,
                       .momentum = momentum,
                       .eps = eps,
                       .x = x,
                       .gamma = gamma,
                       .beta = beta,
                       .running_mean = running_mean,
                       .running_var = running_var,
                       .save_mean = save_mean,
                       .save_invstd = save_invstd,
                       .y = y};

    return bn_host(l, &b, 0);
}

int gm_kbatchnorm_backward_host(struct gm_klaunch l, size_t rows, int c, const float *x,
                                const float *gamma, const float *save_mean,
                                const float *save_invstd, const float *dy, float *dgamma,
                                float *dbeta, float *dx)
{
    struct gm_kbn b = {.rows = rows,
                       .c = c,
                       .train = 1,
                       .x = x,
                       .dy = dy,
                       .gamma = gamma,
                       .save_mean = (float *)save_mean,
                       .save_invstd = (float *)save_invstd,
                       .dgamma = dgamma,
                       .dbeta = dbeta,
                       .dx = dx};

    return bn_host(l, &b, 1);
}
