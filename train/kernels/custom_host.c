/*
 * train/kernels/custom_host.c - the host twins of the custom kernels (custom.h): each calls
 * the kernel's per-thread body (kfn.h) for every thread of every block of the given grid,
 * in order, on the calling thread.  Also Adam's per-step scalars, and, in a build without
 * the CUDA backend, the _cuda entry points that answer -ENOTSUP.
 */
#include "train/kernels/custom.h"

#include <errno.h>

#include <math.h>

#define FOR_GRID(l, g)                                                                             \
    for (struct gm_kgrid g = {0, (l).blocks, 0, (l).threads}; g.block < (l).blocks; g.block++)     \
        for (g.thread = 0; g.thread < (l).threads; g.thread++)

void gm_kadam_prepare(float beta1, float beta2, float eps, float weight_decay, long t, float lr,
                      struct gm_kadam *out)
{
    /* train/nn/optim.c adam(): double, then rounded to float */
    const double bc1 = 1.0 - pow((double)beta1, (double)t);
    const double bc2 = 1.0 - pow((double)beta2, (double)t);

    out->b1 = beta1;
    out->b2 = beta2;
    out->omb1 = (float)(1.0 - (double)beta1);
    out->omb2 = (float)(1.0 - (double)beta2);
    out->eps = eps;
    out->decay = weight_decay != 0.0f;
    out->wd = out->decay ? weight_decay : 0.0f;
    out->neg_step_size = (float)(-((double)lr / bc1));
    out->inv_bc2_sqrt = (float)(1.0 / sqrt(bc2));
}

void gm_kf16_pack_host(struct gm_klaunch l, size_t n, const float *in, uint16_t *out)
{
    FOR_GRID(l, g)
    gm_kbody_f16_pack(g, n, in, out);
}

void gm_kf16_unpack_host(struct gm_klaunch l, size_t n, const uint16_t *in, const float *x,
                         float *out)
{
    FOR_GRID(l, g)
    gm_kbody_f16_unpack(g, n, in, x, out);
}

void gm_kbf16_pack_host(struct gm_klaunch l, size_t n, const float *in, uint16_t *out)
{
    FOR_GRID(l, g)
    gm_kbody_bf16_pack(g, n, in, out);
}

void gm_kbf16_unpack_host(struct gm_klaunch l, size_t n, const uint16_t *in, const float *x,
                          float *out)
{
    FOR_GRID(l, g)
    gm_kbody_bf16_unpack(g, n, in, x, out);
}

void gm_ksgd_host(struct gm_klaunch l, size_t n, float *p, const float *g, float *buf, float lr,
                  float wd, float mu, unsigned flags)
{
    FOR_GRID(l, t)
    gm_kbody_sgd(t, n, p, g, buf, -lr, wd, mu, flags);
}

void gm_kadam_host(struct gm_klaunch l, size_t n, float *p, const float *g, float *m, float *v,
                   const struct gm_kadam *a)
{
    FOR_GRID(l, t)
    gm_kbody_adam(t, n, p, g, m, v, *a);
}

void gm_ksgd_bf16_host(struct gm_klaunch l, size_t n, float *p, const float *g, float *buf,
                       uint16_t *w16, float lr, float wd, float mu, unsigned flags)
{
    FOR_GRID(l, t)
    gm_kbody_sgd_bf16(t, n, p, g, buf, w16, -lr, wd, mu, flags);
}

void gm_kadam_bf16_host(struct gm_klaunch l, size_t n, float *p, const float *g, float *m, float *v,
                        uint16_t *w16, const struct gm_kadam *a)
{
    FOR_GRID(l, t)
    gm_kbody_adam_bf16(t, n, p, g, m, v, w16, *a);
}

double gm_kxent_host(struct gm_klaunch l, int n, int k, const float *logits, const int32_t *labels,
                     float *dlogits, long *correct, double *row_loss, int32_t *row_hit)
{
    double out[3];
    const struct gm_klaunch one = {1, 1};

    FOR_GRID(l, g)
    gm_kbody_xent_rows(g, n, k, logits, labels, dlogits, row_loss, row_hit);
    FOR_GRID(one, g)
    gm_kbody_xent_sum(g, n, row_loss, row_hit, out);
    if (correct != NULL)
        *correct = (long)out[1];
    return out[0];
}

uint64_t gm_khash_host(struct gm_klaunch l, const void *p, size_t nbytes)
{
    uint64_t lanes[4] = {0, 0, 0, 0};

    FOR_GRID(l, g)
    gm_kbody_hash_lanes(g, p, nbytes, lanes);
    return gm_khash_finish(lanes, nbytes, (const unsigned char *)p + (nbytes & ~(size_t)31));
}

#if !defined(GM_HAVE_CUDA) || !GM_HAVE_CUDA

int gm_kf16_pack_cuda(struct gm_cuda *cu, size_t n, const float *in, uint16_t *out)
{
    (void)cu, (void)n, (void)in, (void)out;
    return -ENOTSUP;
}

int gm_kf16_unpack_cuda(struct gm_cuda *cu, size_t n, const uint16_t *in, const float *x,
                        float *out)
{
    (void)cu, (void)n, (void)in, (void)x, (void)out;
    return -ENOTSUP;
}

int gm_kbf16_pack_cuda(struct gm_cuda *cu, size_t n, const float *in, uint16_t *out)
{
    return gm_kf16_pack_cuda(cu, n, in, out);
}

int gm_kbf16_unpack_cuda(struct gm_cuda *cu, size_t n, const uint16_t *in, const float *x,
                         float *out)
{
    return gm_kf16_unpack_cuda(cu, n, in, x, out);
}

int gm_ksgd_cuda(struct gm_cuda *cu, size_t n, float *p, const float *g, float *buf, float lr,
                 float wd, float mu, unsigned flags)
{
    (void)cu, (void)n, (void)p, (void)g, (void)buf, (void)lr, (void)wd, (void)mu, (void)flags;
    return -ENOTSUP;
}

int gm_kadam_cuda(struct gm_cuda *cu, size_t n, float *p, const float *g, float *m, float *v,
                  const struct gm_kadam *a)
{
    (void)cu, (void)n, (void)p, (void)g, (void)m, (void)v, (void)a;
    return -ENOTSUP;
}

int gm_ksgd_bf16_cuda(struct gm_cuda *cu, size_t n, float *p, const float *g, float *buf,
                      uint16_t *w16, float lr, float wd, float mu, unsigned flags)
{
    (void)cu, (void)n, (void)p, (void)g, (void)buf, (void)w16, (void)lr, (void)wd, (void)mu;
    (void)flags;
    return -ENOTSUP;
}

int gm_kadam_bf16_cuda(struct gm_cuda *cu, size_t n, float *p, const float *g, float *m, float *v,
                       uint16_t *w16, const struct gm_kadam *a)
{
    (void)cu, (void)n, (void)p, (void)g, (void)m, (void)v, (void)w16, (void)a;
    return -ENOTSUP;
}

int gm_kxent_cuda(struct gm_cuda *cu, int n, int k, const float *logits, const int32_t *labels,
                  float *dlogits, double *loss, long *correct)
{
    (void)cu, (void)n, (void)k, (void)logits, (void)labels, (void)dlogits, (void)loss,
        (void)correct;
    return -ENOTSUP;
}

int gm_khash_cuda(struct gm_cuda *cu, const void *p, size_t nbytes, uint64_t *out)
{
    (void)cu, (void)p, (void)nbytes, (void)out;
    return -ENOTSUP;
}

#endif
