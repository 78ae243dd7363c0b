/*
 * train/nn/optim.c - SGD and Adam over flat buffers, learning-rate schedules.
 * Semantics and state layout: see train/nn/optim.h.
 *
 * Speed: a step is one pass over params, grads and state. Each variant is a plain
 * loop over restrict pointers that GCC vectorizes at -O3 (checked with
 * -fopt-info-vec: AVX2 on these machines; -fno-math-errno lets sqrtf become
 * vsqrtps). The variant (decay or not, momentum, Nesterov) is chosen once per
 * step, outside the loop, by calling an always-inline kernel with constant flags,
 * so each loop body holds no branch. Per-step scalars (Adam's bias corrections)
 * are computed once in double, then rounded to float, as torch does with its
 * Python-float scalars. The arithmetic follows torch's operation order (except
 * the one reciprocal noted at adam_kernel) so results match torch to rounding;
 * no FMA contraction happens (-std=c11 implies -ffp-contract=off).
 *
 * weight_decay == 0 skips the decay term rather than adding 0*p, like torch (this
 * differs only when p is Inf or NaN).
 */
#include "train/nn/optim.h"

#include <errno.h>
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "common/assert.h"

#define ALWAYS_INLINE inline __attribute__((always_inline))

static int nonneg(float x)
{
    return isfinite(x) && x >= 0.0f;
}

static int check_config(const struct gm_optim_config *cfg)
{
    if (cfg == NULL)
        return -EINVAL;
    switch (cfg->kind) {
    case GM_OPTIM_SGD:
        if (!nonneg(cfg->momentum) || !nonneg(cfg->weight_decay))
            return -EINVAL;
        if (cfg->nesterov && cfg->momentum == 0.0f)
            return -EINVAL;
        return 0;
    case GM_OPTIM_ADAM:
        if (!nonneg(cfg->weight_decay) || !nonneg(cfg->eps))
            return -EINVAL;
        if (!nonneg(cfg->beta1) || cfg->beta1 >= 1.0f)
            return -EINVAL;
        if (!nonneg(cfg->beta2) || cfg->beta2 >= 1.0f)
            return -EINVAL;
        return 0;
    }
    return -EINVAL;
}

void gm_optim_config_default(struct gm_optim_config *cfg, enum gm_optim_kind kind)
{
    memset(cfg, 0, sizeof(*cfg));
    cfg->kind = kind;
    if (kind == GM_OPTIM_ADAM) {
        cfg->beta1 = 0.9f;
        cfg->beta2 = 0.999f;
        cfg->eps = 1e-8f;
    }
}

static size_t state_floats(const struct gm_optim_config *cfg, size_t n)
{
    if (cfg->kind == GM_OPTIM_ADAM)
        return 2 * n;
    return cfg->momentum != 0.0f ? n : 0;
}

int gm_optim_init(struct gm_optim *o, const struct gm_optim_config *cfg, size_t n)
{
    size_t len;
    int err;

    memset(o, 0, sizeof(*o));
    err = check_config(cfg);
    if (err < 0)
        return err;
    if (n == 0)
        return -EINVAL;
    /* Adam needs 2n floats: refuse sizes whose byte count overflows before calloc. */
    if (n > SIZE_MAX / (2 * sizeof(float)))
        return -ENOMEM;
    len = state_floats(cfg, n);
    if (len > 0) {
        o->state = calloc(len, sizeof(float)); /* owned */
        if (o->state == NULL)
            return -ENOMEM;
    }
    o->cfg = *cfg;
    o->n = n;
    return 0;
}

void gm_optim_free(struct gm_optim *o)
{
    if (o == NULL)
        return;
    free(o->state);
    memset(o, 0, sizeof(*o));
}

size_t gm_optim_state_len(const struct gm_optim *o)
{
    return o->state != NULL ? state_floats(&o->cfg, o->n) : 0;
}

float *gm_optim_state(struct gm_optim *o)
{
    return o->state;
}

void gm_optim_reset(struct gm_optim *o)
{
    size_t len = gm_optim_state_len(o);

    if (len > 0)
        memset(o->state, 0, len * sizeof(float));
    o->step = 0;
}

/* p[n], g[n], buf[n] (NULL unless mom). Torch: d_p = g.add(p, alpha=wd);
 * buf.mul_(mu).add_(d_p); d_p = nesterov ? d_p.add(buf, alpha=mu) : buf;
 * p.add_(d_p, alpha=-lr). */
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

/* p[n], g[n], m[n], v[n]. Torch: d = g.add(p, alpha=wd); m.mul_(b1).add_(d, alpha=1-b1);
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

static void adam(struct gm_optim *o, float *restrict p, const float *restrict g, float lr)
{
    const struct gm_optim_config *c = &o->cfg;
    const size_t n = o->n;
    const double t = (double)o->step; /* already incremented: 1 on the first step */
    const double bc1 = 1.0 - pow((double)c->beta1, t);
    const double bc2 = 1.0 - pow((double)c->beta2, t);
    const float neg_step_size = (float)(-((double)lr / bc1));
    const float inv_bc2_sqrt = (float)(1.0 / sqrt(bc2));
    const float omb1 = (float)(1.0 - (double)c->beta1);
    const float omb2 = (float)(1.0 - (double)c->beta2);
    float *restrict m = o->state;
    float *restrict v = o->state + n;

    if (c->weight_decay != 0.0f)
        adam_kernel(n, p, g, m, v, c->beta1, omb1, c->beta2, omb2, c->weight_decay, c->eps,
                    inv_bc2_sqrt, neg_step_size, 1);
    else
        adam_kernel(n, p, g, m, v, c->beta1, omb1, c->beta2, omb2, 0.0f, c->eps, inv_bc2_sqrt,
                    neg_step_size, 0);
}

void gm_optim_step(struct gm_optim *o, float *params, const float *grads, float lr)
{
    const struct gm_optim_config *c = &o->cfg;
    const int decay = c->weight_decay != 0.0f;

    GM_ASSERT(o->n > 0 && params != NULL && grads != NULL); /* initialized, not freed */
    o->step++;
    switch (c->kind) {
    case GM_OPTIM_SGD:
        if (o->state == NULL && decay)
            sgd_plain_wd(o->n, params, grads, lr, c->weight_decay);
        else if (o->state == NULL)
            sgd_plain(o->n, params, grads, lr);
        else
            sgd_mom(o->n, params, grads, o->state, lr, c->weight_decay, c->momentum, decay,
                    c->nesterov != 0);
        return;
    case GM_OPTIM_ADAM:
        adam(o, params, grads, lr);
        return;
    }
    GM_ASSERT(!"unknown optimizer kind");
}

int gm_sched_check(const struct gm_sched *s)
{
    if (s == NULL || !nonneg(s->base_lr) || s->warmup_steps < 0)
        return -EINVAL;
    switch (s->kind) {
    case GM_SCHED_CONSTANT:
        return 0;
    case GM_SCHED_STEP:
        if (s->step_size <= 0 || !isfinite(s->gamma) || s->gamma <= 0.0f)
            return -EINVAL;
        return 0;
    case GM_SCHED_COSINE:
        if (!nonneg(s->min_lr) || s->total_steps <= s->warmup_steps)
            return -EINVAL;
        return 0;
    }
    return -EINVAL;
}

float gm_sched_lr(const struct gm_sched *s, long step)
{
    const double base = s->base_lr;
    long t;

    if (step < 0)
        step = 0;
    if (step < s->warmup_steps)
        return (float)(base * (double)(step + 1) / (double)s->warmup_steps);
    t = step - (s->warmup_steps > 0 ? s->warmup_steps : 0);
    switch (s->kind) {
    case GM_SCHED_CONSTANT:
        return s->base_lr;
    case GM_SCHED_STEP:
        if (s->step_size <= 0)
            return s->base_lr;
        return (float)(base * pow((double)s->gamma, (double)(t / s->step_size)));
    case GM_SCHED_COSINE: {
        const long span = s->total_steps - (s->warmup_steps > 0 ? s->warmup_steps : 0);
        const double lo = s->min_lr;
        if (span <= 0 || t >= span)
            return s->min_lr;
        return (float)(lo + (base - lo) * 0.5 * (1.0 + cos(M_PI * (double)t / (double)span)));
    }
    }
    return s->base_lr;
}
