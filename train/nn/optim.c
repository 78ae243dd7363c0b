/*
 * train/nn/optim.c - SGD and Adam over flat buffers, learning-rate schedules.
 * Semantics and state layout: see train/nn/optim.h.
 *
 * A step is one pass over params, grads and state, done by the device's
 * update kernel (train/nn/ops.h -> train/kernels/update.h, where the speed
 * notes are). Per-step scalars (Adam's bias corrections) are computed here
 * once in double, then rounded to float, as torch does with its Python-float
 * scalars. The arithmetic follows torch's operation order (except the one
 * reciprocal noted in update_cpu.c) so results match torch to rounding.
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
#include "train/nn/ops.h"

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
    o->ops = gm_ops_get(cfg->device);
    if (o->ops == NULL)
        return -ENOTSUP;
    len = state_floats(cfg, n);
    if (len > 0) {
        err = gm_device_alloc(cfg->device, len * sizeof(float), (void **)&o->state); /* owned */
        if (err == 0 && cfg->device != GM_DEVICE_CPU) /* owned: its host view */
            err = gm_device_host_alloc(cfg->device, len * sizeof(float), (void **)&o->host);
        if (err < 0) {
            gm_device_free(cfg->device, o->state);
            memset(o, 0, sizeof(*o));
            return err;
        }
    }
    if (o->host == NULL)
        o->host = o->state; /* the CPU: the state is its own host view */
    o->cfg = *cfg;
    o->n = n;
    return 0;
}

void gm_optim_free(struct gm_optim *o)
{
    if (o == NULL)
        return;
    if (o->host != o->state)
        gm_device_host_free(o->cfg.device, o->host);
    gm_device_free(o->cfg.device, o->state);
    memset(o, 0, sizeof(*o));
}

size_t gm_optim_state_len(const struct gm_optim *o)
{
    return o->state != NULL ? state_floats(&o->cfg, o->n) : 0;
}

float *gm_optim_state(struct gm_optim *o)
{
    return o->host;
}

int gm_optim_state_to_host(struct gm_optim *o)
{
    size_t len = gm_optim_state_len(o);

    if (len == 0 || o->host == o->state)
        return 0;
    return gm_device_copy(GM_DEVICE_CPU, o->host, o->cfg.device, o->state, len * sizeof(float));
}

int gm_optim_state_to_device(struct gm_optim *o)
{
    size_t len = gm_optim_state_len(o);

    if (len == 0 || o->host == o->state)
        return 0;
    return gm_device_copy(o->cfg.device, o->state, GM_DEVICE_CPU, o->host, len * sizeof(float));
}

int gm_optim_reset(struct gm_optim *o)
{
    size_t len = gm_optim_state_len(o);

    o->step = 0;
    if (len == 0)
        return 0;
    memset(o->host, 0, len * sizeof(float));
    return gm_optim_state_to_device(o);
}

static void adam(struct gm_optim *o, float *p, const float *g, float lr)
{
    const struct gm_optim_config *c = &o->cfg;
    const double t = (double)o->step; /* already incremented: 1 on the first step */
    const double bc1 = 1.0 - pow((double)c->beta1, t);
    const double bc2 = 1.0 - pow((double)c->beta2, t);
    const struct gm_adam_scalars k = {
        .b1 = c->beta1,
        .omb1 = (float)(1.0 - (double)c->beta1),
        .b2 = c->beta2,
        .omb2 = (float)(1.0 - (double)c->beta2),
        .wd = c->weight_decay,
        .eps = c->eps,
        .inv_bc2_sqrt = (float)(1.0 / sqrt(bc2)),
        .neg_step_size = (float)(-((double)lr / bc1)),
    };

    o->ops->adam_update(o->n, p, g, o->state, o->state + o->n, &k);
}

void gm_optim_step(struct gm_optim *o, float *params, const float *grads, float lr)
{
    const struct gm_optim_config *c = &o->cfg;

    GM_ASSERT(o->n > 0 && params != NULL && grads != NULL); /* initialized, not freed */
    o->step++;
    switch (c->kind) {
    case GM_OPTIM_SGD:
        o->ops->sgd_update(o->n, params, grads, o->state, lr, c->weight_decay, c->momentum,
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
