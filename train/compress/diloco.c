/* train/compress/diloco.c - DiLoCo outer loop over gm_coll (see diloco.h). */
#include "train/compress/diloco.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "common/assert.h"

enum pend {
    PEND_NONE,    /* nothing */
    PEND_LOCAL,   /* this rank's delta of the last round, not (yet) reduced */
    PEND_REDUCED, /* the mean delta of the last round, to fold in at the next boundary */
};

struct gm_diloco {
    struct gm_diloco_config cfg;
    size_t n;
    float *anchor;   /* owned, n: parameters at the last sync */
    float *momentum; /* owned, n */
    float *delta;    /* owned, n: what goes to the collective */
    float *start;    /* owned, n, overlapped rounds: params at the last boundary (local) */
    float *resid;    /* owned, n, q8 only: the error feedback (diloco.h, "8-bit deltas") */
    bool busy;
    enum pend pend; /* overlapped rounds: what delta holds */
    float *params;  /* borrowed while busy */
    gm_coll_done_cb cb;
    void *arg;
    uint64_t syncs;
    float weight; /* this rank's delta is scaled by it before the mean (gm_diloco_set_weight) */
};

void gm_diloco_config_default(struct gm_diloco_config *cfg)
{
    memset(cfg, 0, sizeof(*cfg));
    cfg->h = 16;
    cfg->outer_lr = 0.7f;
    cfg->momentum = 0.9f;
    cfg->nesterov = true;
    cfg->codec = GM_CODEC_FP16;
    cfg->algo = GM_COLL_AUTO;
}

int gm_diloco_new(const struct gm_diloco_config *cfg, const float *params, size_t n,
                  struct gm_diloco **out)
{
    struct gm_diloco *d;

    *out = NULL;
    if (cfg == NULL || cfg->h < 1 || gm_codec_elem_size(cfg->codec) == 0 ||
        (params == NULL && n > 0))
        return -EINVAL;
    d = calloc(1, sizeof(*d));
    if (d == NULL)
        return -ENOMEM;
    d->cfg = *cfg;
    d->n = n;
    d->weight = 1.0f;
    d->anchor = malloc((n + 1) * sizeof(float));
    d->momentum = calloc(n + 1, sizeof(float));
    d->delta = malloc((n + 1) * sizeof(float));
    d->start = malloc((n + 1) * sizeof(float));
    if (d->anchor == NULL || d->momentum == NULL || d->delta == NULL || d->start == NULL) {
        gm_diloco_free(d);
        return -ENOMEM;
    }
    if (cfg->codec == GM_CODEC_Q8) {
        if (d->cfg.algo != GM_COLL_HIER)
            d->cfg.algo = GM_COLL_DIRECT; /* see diloco.h, "8-bit deltas" */
        d->resid = calloc(n + 1, sizeof(float));
        if (d->resid == NULL) {
            gm_diloco_free(d);
            return -ENOMEM;
        }
    }
    if (n > 0)
        memcpy(d->anchor, params, n * sizeof(float));
    *out = d;
    return 0;
}

void gm_diloco_free(struct gm_diloco *d)
{
    if (d == NULL)
        return;
    GM_ASSERT(!d->busy);
    free(d->anchor);
    free(d->momentum);
    free(d->delta);
    free(d->start);
    free(d->resid);
    free(d);
}

void gm_diloco_set_weight(struct gm_diloco *d, float w)
{
    d->weight = w;
}

bool gm_diloco_due(const struct gm_diloco *d, uint64_t step)
{
    return (step + 1) % d->cfg.h == 0;
}

/* The outer step on one coordinate: momentum and anchor from the mean delta g.  One
 * expression for both paths, so the blocking and the overlapped rounds round alike. */
static inline void outer_step(const struct gm_diloco *d, size_t i, float g)
{
    const float lr = d->cfg.outer_lr, mu = d->cfg.momentum;
    float m = mu * d->momentum[i] + g;

    d->momentum[i] = m;
    d->anchor[i] -= lr * (d->cfg.nesterov ? g + mu * m : m);
}

/* Overlapped rounds: where the lag steps start (diloco.h, "Eager"): the anchor after the outer
 * step that this rank's own delta g alone would give, with the momentum left as it is (it
 * moves at the apply, with the mean delta).  Written as the rank's params p less the step's
 * part beyond g (anchor - g is p), so an outer step of plain averaging (lr 1, momentum 0)
 * leaves p exactly as it is. */
static inline float eager_step(const struct gm_diloco *d, size_t i, float g, float p)
{
    const float lr = d->cfg.outer_lr, mu = d->cfg.momentum;
    float m = mu * d->momentum[i] + g;

    return p - (d->cfg.nesterov ? (lr - 1.0f) * g + lr * mu * m : lr * m - g);
}

/* 8-bit deltas, just before the all-reduce (diloco.h): delta += e; the all-reduce then writes
 * e anew, what the wire drops of this rank's contribution (collective.h, "Loss"). */
static void feed_back(struct gm_diloco *d)
{
    if (d->resid == NULL)
        return;
    for (size_t i = 0; i < d->n; i++)
        d->delta[i] += d->resid[i];
}

/* The all-reduce of a round's deltas: 8-bit deltas run HIER only where the groups split the
 * world (a star's hub alone leading would carry fp32 over its spokes), DIRECT otherwise. */
static void sync_opts(const struct gm_diloco *d, const struct gm_coll *c, uint64_t step,
                      struct gm_coll_opts *o)
{
    memset(o, 0, sizeof(*o));
    o->algo = d->cfg.algo;
    o->codec = d->cfg.codec;
    o->reduce = GM_COLL_MEAN;
    o->step = step;
    o->loss = d->resid;
    if (d->resid != NULL && o->algo == GM_COLL_HIER && gm_coll_leaders(c) < 2)
        o->algo = GM_COLL_DIRECT;
}

const float *gm_diloco_residual(const struct gm_diloco *d)
{
    return d->resid;
}

static void on_reduced(struct gm_coll *c, int status, void *arg)
{
    struct gm_diloco *d = arg;
    gm_coll_done_cb cb = d->cb;

    if (status == 0) {
        for (size_t i = 0; i < d->n; i++)
            outer_step(d, i, d->delta[i]);
        memcpy(d->params, d->anchor, d->n * sizeof(float));
        d->syncs++;
    }
    d->busy = false;
    cb(c, status, d->arg);
}

int gm_diloco_sync_start(struct gm_diloco *d, struct gm_coll *c, float *params, uint64_t step,
                         gm_coll_done_cb cb, void *arg)
{
    struct gm_coll_opts o;
    int err;

    if (c == NULL || cb == NULL || (params == NULL && d->n > 0))
        return -EINVAL;
    if (d->busy)
        return -EBUSY;
    if (d->pend != PEND_NONE)
        return -EPROTO; /* an overlapped round is pending: flush it first */
    for (size_t i = 0; i < d->n; i++)
        d->delta[i] = (d->anchor[i] - params[i]) * d->weight;
    feed_back(d);
    sync_opts(d, c, step, &o);
    d->params = params;
    d->cb = cb;
    d->arg = arg;
    d->busy = true;
    err = gm_coll_allreduce_start(c, d->delta, d->n, &o, on_reduced, d);
    if (err < 0)
        d->busy = false;
    return err;
}

int gm_diloco_restore(struct gm_diloco *d, float *params)
{
    if (params == NULL && d->n > 0)
        return -EINVAL;
    if (d->busy)
        return -EBUSY;
    if (d->n > 0)
        memcpy(params, d->anchor, d->n * sizeof(float));
    return 0;
}

size_t gm_diloco_payload_floats(const struct gm_diloco *d)
{
    return d->n;
}

uint64_t gm_diloco_syncs(const struct gm_diloco *d)
{
    return d->syncs;
}

size_t gm_diloco_state(const struct gm_diloco *d, const float **anchor, const float **momentum)
{
    *anchor = d->anchor;
    *momentum = d->momentum;
    return d->n;
}

int gm_diloco_state_set(struct gm_diloco *d, const float *anchor, const float *momentum, size_t n)
{
    if (n != d->n)
        return -EINVAL;
    if (d->busy)
        return -EBUSY;
    memcpy(d->anchor, anchor, n * sizeof(float));
    memcpy(d->momentum, momentum, n * sizeof(float));
    d->pend = PEND_NONE;
    return 0;
}

/* --- overlapped rounds ------------------------------------------------------------------- */

int gm_diloco_overlap_boundary(struct gm_diloco *d, float *params)
{
    if (params == NULL && d->n > 0)
        return -EINVAL;
    if (d->busy)
        return -EBUSY;
    if (d->pend != PEND_NONE)
        return -EPROTO; /* the round before was never applied */
    for (size_t i = 0; i < d->n; i++) {
        const float own = d->anchor[i] - params[i];

        d->delta[i] = own * d->weight;
        params[i] = eager_step(d, i, own, params[i]); /* the lag steps start from here (diloco.h) */
        d->start[i] = params[i];
    }
    d->pend = PEND_LOCAL;
    return 0;
}

int gm_diloco_overlap_apply(struct gm_diloco *d, float *params)
{
    if (params == NULL && d->n > 0)
        return -EINVAL;
    if (d->busy)
        return -EBUSY;
    if (d->pend != PEND_REDUCED)
        return -EPROTO;
    for (size_t i = 0; i < d->n; i++) {
        outer_step(d, i, d->delta[i]);
        params[i] = d->anchor[i] + (params[i] - d->start[i]); /* + the steps since */
    }
    d->syncs++;
    d->pend = PEND_NONE;
    return 0;
}

static void on_reduced_late(struct gm_coll *c, int status, void *arg)
{
    struct gm_diloco *d = arg;
    gm_coll_done_cb cb = d->cb;

    if (status == 0)
        d->pend = PEND_REDUCED;
    d->busy = false;
    cb(c, status, d->arg);
}

int gm_diloco_overlap_start(struct gm_diloco *d, struct gm_coll *c, uint64_t step,
                            gm_coll_done_cb cb, void *arg)
{
    struct gm_coll_opts o;
    int err;

    if (c == NULL || cb == NULL)
        return -EINVAL;
    if (d->busy)
        return -EBUSY;
    if (d->pend != PEND_LOCAL)
        return -EPROTO;
    feed_back(d);
    sync_opts(d, c, step, &o);
    d->cb = cb;
    d->arg = arg;
    d->busy = true;
    err = gm_coll_allreduce_start(c, d->delta, d->n, &o, on_reduced_late, d);
    if (err < 0)
        d->busy = false;
    return err;
}

int gm_diloco_overlap_flush(struct gm_diloco *d, float *params)
{
    int err = 0;

    if (params == NULL && d->n > 0)
        return -EINVAL;
    if (d->busy)
        return -EBUSY;
    if (d->pend == PEND_REDUCED) {
        for (size_t i = 0; i < d->n; i++)
            outer_step(d, i, d->delta[i]);
        d->syncs++;
    } else if (d->pend == PEND_LOCAL) {
        err = -EPROTO; /* never reduced: there is no mean to fold in */
    }
    d->pend = PEND_NONE;
    if (d->n > 0)
        memcpy(params, d->anchor, d->n * sizeof(float));
    return err;
}

const float *gm_diloco_pending(const struct gm_diloco *d)
{
    return d->pend == PEND_REDUCED ? d->delta : NULL;
}

int gm_diloco_pending_set(struct gm_diloco *d, const float *delta, size_t n)
{
    if (n != d->n || (delta == NULL && n > 0))
        return -EINVAL;
    if (d->busy)
        return -EBUSY;
    if (n > 0)
        memcpy(d->delta, delta, n * sizeof(float));
    d->pend = PEND_REDUCED;
    return 0;
}

const float *gm_diloco_round_start(const struct gm_diloco *d)
{
    return d->pend != PEND_NONE ? d->start : NULL;
}

int gm_diloco_round_start_set(struct gm_diloco *d, const float *start, size_t n)
{
    if (n != d->n || (start == NULL && n > 0))
        return -EINVAL;
    if (d->busy)
        return -EBUSY;
    if (n > 0)
        memcpy(d->start, start, n * sizeof(float));
    return 0;
}
