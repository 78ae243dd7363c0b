/*
 * train/kernels/update.h - the optimizers' element loops over flat buffers.
 *
 * train/nn/optim.c owns the semantics (PyTorch's SGD and Adam, see optim.h),
 * the step counter and the per-step scalars; these kernels do the one pass
 * over memory.  Chosen: each variant (decay or not, momentum, Nesterov) is a
 * branch-free loop over restrict pointers that GCC vectorizes at -O3; the
 * variant is picked once per call, outside the loop.  No FMA contraction
 * (-std=c11 implies -ffp-contract=off), so results match torch to rounding.
 * Pure functions; called from the trainer thread.
 */
#ifndef GM_TRAIN_KERNELS_UPDATE_H
#define GM_TRAIN_KERNELS_UPDATE_H

#include <stddef.h>

/* Adam's per-step scalars, computed once per step by the caller (in double,
 * rounded to float as torch does with its Python-float scalars). */
struct gm_adam_scalars {
    float b1, omb1;      /* beta1, 1 - beta1 */
    float b2, omb2;      /* beta2, 1 - beta2 */
    float wd, eps;       /* weight decay (0: none), epsilon */
    float inv_bc2_sqrt;  /* 1 / sqrt(1 - beta2^t) */
    float neg_step_size; /* -lr / (1 - beta1^t) */
};

/* p[n], g[n]; buf[n] momentum buffer, NULL when mu == 0.
 * d = g + wd*p (skipped when wd == 0); buf = mu*buf + d;
 * d = nesterov ? d + mu*buf : buf; p -= lr*d. */
void gm_sgd_update_cpu(size_t n, float *p, const float *g, float *buf, float lr, float wd, float mu,
                       int nesterov);
/* p[n], g[n], m[n], v[n]: d = g + wd*p; m = b1*m + (1-b1)*d; v = b2*v + (1-b2)*d*d;
 * p += neg_step_size * m / (sqrt(v) * inv_bc2_sqrt + eps). */
void gm_adam_update_cpu(size_t n, float *p, const float *g, float *m, float *v,
                        const struct gm_adam_scalars *k);

#endif
