/*
 * train/kernels/update_cpu.c - optimizer element loops (see update.h).
 *
 * Speed: each variant is a plain loop over restrict pointers that GCC
 * vectorizes at -O3 (-fno-math-errno lets sqrtf become vsqrtps).  The variant
 * is chosen once per call by calling an always-inline kernel with constant
 * flags, so each loop body holds no branch.
 */
#include "train/kernels/update.h"

#include <math.h>

#define ALWAYS_INLINE inline __attribute__((always_inline))

/* Torch: d_p = g.add(p, alpha=wd); buf.mul_(mu).add_(d_p);
 * d_p = nesterov ? d_p.add(buf, alpha=mu) : buf; p.add_(d_p, alpha=-lr). */
static ALWAYS_INLINE void sgd_kernel(size_t n, float *restrict p, const float *restrict g,
                                     float *restrict buf, float lr, float wd, float mu,
                                     const int decay, const int mom, const int nesterov)
{
    const float neg_lr = -lr;

    for (size_t i = 0; i < n; i++) {
        float d = g[i];
        if (decay)
            d = d + wd * p[i];
        if (mom) {
            float b = buf[i] * mu + d;
            buf[i] = b;
            d = nesterov ? d + mu * b : b;
        }
        p[i] = p[i] + neg_lr * d;
    }
}

/* Torch: d = g.add(p, alpha=wd); m.mul_(b1).add_(d, alpha=1-b1);
 * v.mul_(b2).addcmul_(d, d, value=1-b2); denom = (v.sqrt() / bc2_sqrt).add_(eps);
 * p.addcdiv_(m, denom, value=-step_size).
 * One deviation: sqrt(v) / bc2_sqrt is computed as sqrt(v) * (1 / bc2_sqrt), the
 * reciprocal taken once per step in double. Same formula, at most 1 ulp apart in the
 * denominator, and one vdivps fewer per 8 elements: the loop is bound by divide and
 * sqrt throughput while the buffers sit in cache (1M params: 0.52 -> 0.40 ms). */
static ALWAYS_INLINE void adam_kernel(size_t n, float *restrict p, const float *restrict g,
                                      float *restrict m, float *restrict v, float b1, float omb1,
                                      float b2, float omb2, float wd, float eps, float inv_bc2_sqrt,
                                      float neg_step_size, const int decay)
{
    for (size_t i = 0; i < n; i++) {
        float d = g[i];
        if (decay)
            d = d + wd * p[i];
        float mi = m[i] * b1 + omb1 * d;
        float vi = v[i] * b2 + omb2 * d * d;
        m[i] = mi;
        v[i] = vi;
        float denom = sqrtf(vi) * inv_bc2_sqrt + eps;
        p[i] = p[i] + neg_step_size * (mi / denom);
    }
}

/* One out-of-line copy per variant: each holds one branch-free vectorized loop. */
static void sgd_plain(size_t n, float *restrict p, const float *restrict g, float lr)
{
    sgd_kernel(n, p, g, NULL, lr, 0.0f, 0.0f, 0, 0, 0);
}

static void sgd_plain_wd(size_t n, float *restrict p, const float *restrict g, float lr, float wd)
{
    sgd_kernel(n, p, g, NULL, lr, wd, 0.0f, 1, 0, 0);
}

static void sgd_mom(size_t n, float *restrict p, const float *restrict g, float *restrict buf,
                    float lr, float wd, float mu, int decay, int nesterov)
{
    if (!decay && !nesterov)
        sgd_kernel(n, p, g, buf, lr, 0.0f, mu, 0, 1, 0);
    else if (decay && !nesterov)
        sgd_kernel(n, p, g, buf, lr, wd, mu, 1, 1, 0);
    else if (!decay)
        sgd_kernel(n, p, g, buf, lr, 0.0f, mu, 0, 1, 1);
    else
        sgd_kernel(n, p, g, buf, lr, wd, mu, 1, 1, 1);
}

void gm_sgd_update_cpu(size_t n, float *p, const float *g, float *buf, float lr, float wd, float mu,
                       int nesterov)
{
    const int decay = wd != 0.0f;

    if (buf == NULL && decay)
        sgd_plain_wd(n, p, g, lr, wd);
    else if (buf == NULL)
        sgd_plain(n, p, g, lr);
    else
        sgd_mom(n, p, g, buf, lr, wd, mu, decay, nesterov != 0);
}

void gm_adam_update_cpu(size_t n, float *p, const float *g, float *m, float *v,
                        const struct gm_adam_scalars *k)
{
    if (k->wd != 0.0f)
        adam_kernel(n, p, g, m, v, k->b1, k->omb1, k->b2, k->omb2, k->wd, k->eps, k->inv_bc2_sqrt,
                    k->neg_step_size, 1);
    else
        adam_kernel(n, p, g, m, v, k->b1, k->omb1, k->b2, k->omb2, 0.0f, k->eps, k->inv_bc2_sqrt,
                    k->neg_step_size, 0);
}
