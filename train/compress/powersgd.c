/*
 * train/compress/powersgd.c - PowerSGD over gm_coll (see powersgd.h for the choices).
 *
 * State machine per step (callbacks from the collective):
 *   WARM                         dense all-reduce of the whole gradient
 *   P -> Q                       standard: [P..., dense] then [Q...]
 *   ALT_P or ALT_Q               alternating: [P..., dense] or [Q..., dense]
 * Buffers: pbuf holds every matrix's P (rows x r, row-major, back to back),
 * qbuf every Q (cols x r); payload is what goes to the collective.
 */
#include "train/compress/powersgd.h"

#include <cblas.h>
#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "common/assert.h"

enum stage { ST_IDLE, ST_WARM, ST_P, ST_Q, ST_ALT_P, ST_ALT_Q };

struct mat {
    size_t off, n, m; /* view into the flat buffer: n rows, m cols */
    size_t p_off, q_off;
    float *q;  /* owned, m x r: warm start (standard) or Qhat (alternating) */
    float *ph; /* owned, n x r: Phat (alternating) */
};

struct range {
    size_t off, len;
};

struct gm_psgd {
    struct gm_psgd_config cfg;
    size_t nelems;
    struct mat *mats; /* owned */
    size_t nmats;
    struct range *dense; /* owned */
    size_t ndense, dense_floats;
    size_t sum_pr, sum_qr;
    float *err;     /* owned, nelems */
    float *pbuf;    /* owned, sum_pr */
    float *qbuf;    /* owned, sum_qr */
    float *payload; /* owned */
    /* the step in flight */
    enum stage stage;
    struct gm_coll *c; /* borrowed */
    float *grad;       /* borrowed */
    uint64_t step;
    gm_coll_done_cb cb;
    void *arg;
    size_t cur_payload, last_payload;
};

void gm_psgd_config_default(struct gm_psgd_config *cfg)
{
    memset(cfg, 0, sizeof(*cfg));
    cfg->rank = 2;
    cfg->error_feedback = true;
    cfg->seed = 1;
    cfg->codec = GM_CODEC_FP16;
    cfg->algo = GM_COLL_AUTO;
    cfg->eps = 1e-8f;
}

/* --- shared-seed normal numbers ------------------------------------------ */

static uint64_t splitmix(uint64_t *s)
{
    uint64_t z = (*s += 0x9e3779b97f4a7c15u);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9u;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebu;
    return z ^ (z >> 31);
}

/* Column col of x (rows x r) := N(0,1) draws seeded by (seed, mat, step, col). */
static void draw_column(float *x, size_t rows, size_t r, size_t col, uint64_t seed, size_t mat,
                        uint64_t step)
{
    uint64_t s = seed ^ (mat * 0xd1b54a32d192ed03u) ^ (step * 0x8cb92ba72f3d8dd7u) ^
                 ((uint64_t)col * 0xa0761d6478bd642fu);

    for (size_t i = 0; i < rows; i += 2) {
        double u1 = ((double)(splitmix(&s) >> 11) + 1.0) * 0x1p-53; /* (0, 1] */
        double u2 = (double)(splitmix(&s) >> 11) * 0x1p-53;
        double rad = sqrt(-2.0 * log(u1));
        x[i * r + col] = (float)(rad * cos(6.283185307179586 * u2));
        if (i + 1 < rows)
            x[(i + 1) * r + col] = (float)(rad * sin(6.283185307179586 * u2));
    }
}

/* Redraws all-zero columns (a zero layer would otherwise stall the power
 * iteration forever).  x is identical on every rank, so is the decision. */
static void fix_zero_columns(float *x, size_t rows, size_t r, uint64_t seed, size_t mat,
                             uint64_t step)
{
    for (size_t j = 0; j < r; j++) {
        bool zero = true;
        for (size_t i = 0; i < rows && zero; i++)
            zero = x[i * r + j] == 0.0f;
        if (zero)
            draw_column(x, rows, r, j, seed, mat, step);
    }
}

void gm_psgd_orthonormalize(float *m, size_t rows, size_t cols, float eps)
{
    for (size_t j = 0; j < cols; j++) {
        float before = 0, nrm = 0;
        for (size_t i = 0; i < rows; i++)
            before += m[i * cols + j] * m[i * cols + j];
        for (size_t k = 0; k < j; k++) {
            float dot = 0;
            for (size_t i = 0; i < rows; i++)
                dot += m[i * cols + k] * m[i * cols + j];
            for (size_t i = 0; i < rows; i++)
                m[i * cols + j] -= dot * m[i * cols + k];
        }
        for (size_t i = 0; i < rows; i++)
            nrm += m[i * cols + j] * m[i * cols + j];
        /* A column (almost) inside the span of the previous ones is rounding
         * noise: scaling it up to unit length would inject a random direction.
         * Zero it instead (rank-deficient input); the caller redraws zero
         * factors before the next power iteration. */
        if (nrm <= 1e-8f * before) {
            for (size_t i = 0; i < rows; i++)
                m[i * cols + j] = 0;
            continue;
        }
        nrm = sqrtf(nrm) + eps;
        for (size_t i = 0; i < rows; i++)
            m[i * cols + j] /= nrm;
    }
}

/* --- setup ---------------------------------------------------------------- */

static int cmp_view(const void *a, const void *b)
{
    const struct gm_view *x = a, *y = b;
    return x->offset < y->offset ? -1 : x->offset > y->offset;
}

int gm_psgd_new(const struct gm_psgd_config *cfg, const struct gm_view *views, size_t nviews,
                size_t nelems, struct gm_psgd **out)
{
    struct gm_psgd *p = NULL;
    struct gm_view *v = NULL;
    size_t r, cursor = 0, maxpay;
    int err;

    *out = NULL;
    if (cfg == NULL || cfg->rank < 1 || gm_codec_elem_size(cfg->codec) == 0 ||
        (views == NULL && nviews > 0))
        return -EINVAL;
    r = (size_t)cfg->rank;
    v = malloc((nviews + 1) * sizeof(*v));
    p = calloc(1, sizeof(*p));
    if (v == NULL || p == NULL) {
        err = -ENOMEM;
        goto fail;
    }
    if (nviews > 0)
        memcpy(v, views, nviews * sizeof(*v));
    qsort(v, nviews, sizeof(*v), cmp_view);
    for (size_t i = 0; i < nviews; i++) {
        if (v[i].rows == 0 || v[i].cols == 0 || v[i].offset < cursor ||
            v[i].rows > (nelems - v[i].offset) / v[i].cols || v[i].offset > nelems) {
            err = -EINVAL;
            goto fail;
        }
        cursor = v[i].offset + v[i].rows * v[i].cols;
    }
    p->cfg = *cfg;
    if (p->cfg.eps == 0)
        p->cfg.eps = 1e-8f;
    p->nelems = nelems;
    p->mats = calloc(nviews + 1, sizeof(*p->mats));
    p->dense = calloc(2 * nviews + 1, sizeof(*p->dense));
    p->err = calloc(nelems + 1, sizeof(float));
    if (p->mats == NULL || p->dense == NULL || p->err == NULL) {
        err = -ENOMEM;
        goto fail;
    }
    cursor = 0;
    for (size_t i = 0; i < nviews; i++) {
        size_t n = v[i].rows, m = v[i].cols;
        struct mat *mt;
        if (n < 2 || m < 2 || r * (n + m) >= n * m)
            continue; /* 1-D or nothing to gain: dense */
        if (v[i].offset > cursor)
            p->dense[p->ndense++] = (struct range){cursor, v[i].offset - cursor};
        cursor = v[i].offset + n * m;
        mt = &p->mats[p->nmats++];
        mt->off = v[i].offset;
        mt->n = n;
        mt->m = m;
        mt->p_off = p->sum_pr;
        mt->q_off = p->sum_qr;
        p->sum_pr += n * r;
        p->sum_qr += m * r;
        mt->q = malloc(m * r * sizeof(float));
        mt->ph = malloc(n * r * sizeof(float));
        if (mt->q == NULL || mt->ph == NULL) {
            err = -ENOMEM;
            goto fail;
        }
        for (size_t j = 0; j < r; j++) {
            draw_column(mt->q, m, r, j, cfg->seed, p->nmats - 1, 0);
            draw_column(mt->ph, n, r, j, cfg->seed ^ 0x5555u, p->nmats - 1, 0);
        }
        if (cfg->alternating)
            gm_psgd_orthonormalize(mt->q, m, r, p->cfg.eps);
    }
    if (nelems > cursor)
        p->dense[p->ndense++] = (struct range){cursor, nelems - cursor};
    for (size_t i = 0; i < p->ndense; i++)
        p->dense_floats += p->dense[i].len;
    maxpay = p->sum_pr > p->sum_qr ? p->sum_pr : p->sum_qr;
    p->pbuf = malloc((p->sum_pr + 1) * sizeof(float));
    p->qbuf = malloc((p->sum_qr + 1) * sizeof(float));
    p->payload = malloc((maxpay + p->dense_floats + 1) * sizeof(float));
    if (p->pbuf == NULL || p->qbuf == NULL || p->payload == NULL) {
        err = -ENOMEM;
        goto fail;
    }
    free(v);
    *out = p;
    return 0;
fail:
    free(v);
    gm_psgd_free(p);
    return err;
}

void gm_psgd_free(struct gm_psgd *p)
{
    if (p == NULL)
        return;
    GM_ASSERT(p->stage == ST_IDLE);
    if (p->mats != NULL)
        for (size_t i = 0; i < p->nmats; i++) {
            free(p->mats[i].q);
            free(p->mats[i].ph);
        }
    free(p->mats);
    free(p->dense);
    free(p->err);
    free(p->pbuf);
    free(p->qbuf);
    free(p->payload);
    free(p);
}

/* --- accessors ------------------------------------------------------------ */

static bool is_warmup(const struct gm_psgd *p, uint64_t step)
{
    return step < p->cfg.warmup_steps || p->nmats == 0;
}

size_t gm_psgd_payload_floats(const struct gm_psgd *p, uint64_t step)
{
    if (is_warmup(p, step))
        return p->nelems;
    if (!p->cfg.alternating)
        return p->sum_pr + p->sum_qr + p->dense_floats;
    return ((step - p->cfg.warmup_steps) % 2 == 0 ? p->sum_pr : p->sum_qr) + p->dense_floats;
}

size_t gm_psgd_last_payload_floats(const struct gm_psgd *p)
{
    return p->last_payload;
}

size_t gm_psgd_matrices(const struct gm_psgd *p)
{
    return p->nmats;
}

size_t gm_psgd_dense_floats(const struct gm_psgd *p)
{
    return p->dense_floats;
}

size_t gm_psgd_nelems(const struct gm_psgd *p)
{
    return p->nelems;
}

const float *gm_psgd_error(const struct gm_psgd *p)
{
    return p->err;
}

size_t gm_psgd_state_floats(const struct gm_psgd *p)
{
    return p->sum_qr + p->sum_pr;
}

void gm_psgd_state_get(const struct gm_psgd *p, float *out)
{
    const size_t r = (size_t)p->cfg.rank;

    for (size_t i = 0; i < p->nmats; i++) {
        const struct mat *mt = &p->mats[i];
        memcpy(out + mt->q_off, mt->q, mt->m * r * sizeof(float));
        memcpy(out + p->sum_qr + mt->p_off, mt->ph, mt->n * r * sizeof(float));
    }
}

int gm_psgd_state_set(struct gm_psgd *p, const float *in, size_t n)
{
    const size_t r = (size_t)p->cfg.rank;

    if (n != gm_psgd_state_floats(p))
        return -EINVAL;
    if (p->stage != ST_IDLE)
        return -EBUSY;
    for (size_t i = 0; i < p->nmats; i++) {
        struct mat *mt = &p->mats[i];
        memcpy(mt->q, in + mt->q_off, mt->m * r * sizeof(float));
        memcpy(mt->ph, in + p->sum_qr + mt->p_off, mt->n * r * sizeof(float));
    }
    return 0;
}

int gm_psgd_error_set(struct gm_psgd *p, const float *e, size_t n)
{
    if (n != p->nelems)
        return -EINVAL;
    if (p->stage != ST_IDLE)
        return -EBUSY;
    memcpy(p->err, e, n * sizeof(float));
    return 0;
}

/* --- the step ------------------------------------------------------------- */

static void on_reduced(struct gm_coll *c, int status, void *arg);

static int reduce(struct gm_psgd *p, size_t n, enum stage next)
{
    struct gm_coll_opts o = {
        .algo = p->cfg.algo, .codec = p->cfg.codec, .reduce = GM_COLL_MEAN, .step = p->step};

    p->stage = next;
    p->cur_payload += n;
    return gm_coll_allreduce_start(p->c, p->payload, n, &o, on_reduced, p);
}

/* [factors (nf floats from src)] [dense parts of grad] -> payload */
static size_t pack(struct gm_psgd *p, const float *src, size_t nf)
{
    size_t at = nf;

    memcpy(p->payload, src, nf * sizeof(float));
    for (size_t i = 0; i < p->ndense; i++) {
        memcpy(p->payload + at, p->grad + p->dense[i].off, p->dense[i].len * sizeof(float));
        at += p->dense[i].len;
    }
    return at;
}

static void unpack(struct gm_psgd *p, float *dst, size_t nf, bool dense)
{
    size_t at = nf;

    memcpy(dst, p->payload, nf * sizeof(float));
    if (!dense)
        return;
    for (size_t i = 0; i < p->ndense; i++) {
        memcpy(p->grad + p->dense[i].off, p->payload + at, p->dense[i].len * sizeof(float));
        at += p->dense[i].len;
    }
}

/* P (n x r) = M Q */
static void mul_mq(const struct gm_psgd *p, const struct mat *mt, const float *q, float *out)
{
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, (int)mt->n, p->cfg.rank, (int)mt->m,
                1.0f, p->grad + mt->off, (int)mt->m, q, p->cfg.rank, 0.0f, out, p->cfg.rank);
}

/* Q (m x r) = M^T P */
static void mul_mtp(const struct gm_psgd *p, const struct mat *mt, const float *pm, float *out)
{
    cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, (int)mt->m, p->cfg.rank, (int)mt->n, 1.0f,
                p->grad + mt->off, (int)mt->m, pm, p->cfg.rank, 0.0f, out, p->cfg.rank);
}

/* out = P Q^T (fixed-order loop: identical on every rank); E = M - out. */
static void apply(struct gm_psgd *p, const struct mat *mt, const float *pm, const float *q)
{
    size_t r = (size_t)p->cfg.rank;
    float *g = p->grad + mt->off, *e = p->err + mt->off;

    for (size_t i = 0; i < mt->n; i++) {
        for (size_t j = 0; j < mt->m; j++) {
            float a = 0;
            for (size_t k = 0; k < r; k++)
                a += pm[i * r + k] * q[j * r + k];
            if (p->cfg.error_feedback)
                e[i * mt->m + j] = g[i * mt->m + j] - a;
            g[i * mt->m + j] = a;
        }
    }
}

static void finish(struct gm_psgd *p, int status)
{
    gm_coll_done_cb cb = p->cb;
    void *arg = p->arg;

    p->stage = ST_IDLE;
    p->last_payload = p->cur_payload;
    cb(p->c, status, arg);
}

static void on_reduced(struct gm_coll *c, int status, void *arg)
{
    struct gm_psgd *p = arg;
    size_t r = (size_t)p->cfg.rank;
    int err = 0;

    (void)c;
    if (status != 0 || p->stage == ST_WARM) {
        finish(p, status);
        return;
    }
    switch (p->stage) {
    case ST_P: /* P reduced: orthonormalize, Q = M^T P, reduce Q */
        unpack(p, p->pbuf, p->sum_pr, true);
        for (size_t i = 0; i < p->nmats; i++) {
            struct mat *mt = &p->mats[i];
            gm_psgd_orthonormalize(p->pbuf + mt->p_off, mt->n, r, p->cfg.eps);
            mul_mtp(p, mt, p->pbuf + mt->p_off, p->qbuf + mt->q_off);
        }
        memcpy(p->payload, p->qbuf, p->sum_qr * sizeof(float));
        err = reduce(p, p->sum_qr, ST_Q);
        break;
    case ST_Q:
        unpack(p, p->qbuf, p->sum_qr, false);
        for (size_t i = 0; i < p->nmats; i++) {
            struct mat *mt = &p->mats[i];
            apply(p, mt, p->pbuf + mt->p_off, p->qbuf + mt->q_off);
            memcpy(mt->q, p->qbuf + mt->q_off, mt->m * r * sizeof(float)); /* warm start */
        }
        finish(p, 0);
        return;
    case ST_ALT_P:
        unpack(p, p->pbuf, p->sum_pr, true);
        for (size_t i = 0; i < p->nmats; i++) {
            struct mat *mt = &p->mats[i];
            float *pm = p->pbuf + mt->p_off;
            apply(p, mt, pm, mt->q);
            memcpy(mt->ph, pm, mt->n * r * sizeof(float));
            fix_zero_columns(mt->ph, mt->n, r, p->cfg.seed ^ 0x5555u, i, p->step + 1);
            gm_psgd_orthonormalize(mt->ph, mt->n, r, p->cfg.eps);
        }
        finish(p, 0);
        return;
    case ST_ALT_Q:
        unpack(p, p->qbuf, p->sum_qr, true);
        for (size_t i = 0; i < p->nmats; i++) {
            struct mat *mt = &p->mats[i];
            float *qm = p->qbuf + mt->q_off;
            apply(p, mt, mt->ph, qm);
            memcpy(mt->q, qm, mt->m * r * sizeof(float));
            fix_zero_columns(mt->q, mt->m, r, p->cfg.seed, i, p->step + 1);
            gm_psgd_orthonormalize(mt->q, mt->m, r, p->cfg.eps);
        }
        finish(p, 0);
        return;
    default:
        GM_ASSERT(0);
    }
    if (err < 0)
        finish(p, err);
}

int gm_psgd_reduce_start(struct gm_psgd *p, struct gm_coll *c, float *grad, uint64_t step,
                         gm_coll_done_cb cb, void *arg)
{
    size_t r;
    int err;

    if (p == NULL || c == NULL || cb == NULL || (grad == NULL && p->nelems > 0))
        return -EINVAL;
    if (p->stage != ST_IDLE)
        return -EBUSY;
    r = (size_t)p->cfg.rank;
    p->c = c;
    p->grad = grad;
    p->step = step;
    p->cb = cb;
    p->arg = arg;
    p->cur_payload = 0;
    if (is_warmup(p, step)) {
        struct gm_coll_opts o = {
            .algo = p->cfg.algo, .codec = p->cfg.codec, .reduce = GM_COLL_MEAN, .step = step};
        p->stage = ST_WARM;
        p->cur_payload = p->nelems;
        err = gm_coll_allreduce_start(c, grad, p->nelems, &o, on_reduced, p);
        if (err < 0)
            p->stage = ST_IDLE;
        return err;
    }
    /* M = G + E */
    if (p->cfg.error_feedback)
        for (size_t i = 0; i < p->nmats; i++) {
            struct mat *mt = &p->mats[i];
            float *g = grad + mt->off, *e = p->err + mt->off;
            for (size_t k = 0; k < mt->n * mt->m; k++)
                g[k] += e[k];
        }
    if (!p->cfg.alternating || (step - p->cfg.warmup_steps) % 2 == 0) {
        for (size_t i = 0; i < p->nmats; i++) {
            struct mat *mt = &p->mats[i];
            if (!p->cfg.alternating)
                fix_zero_columns(mt->q, mt->m, r, p->cfg.seed, i, step);
            mul_mq(p, mt, mt->q, p->pbuf + mt->p_off);
        }
        err = reduce(p, pack(p, p->pbuf, p->sum_pr), p->cfg.alternating ? ST_ALT_P : ST_P);
    } else {
        for (size_t i = 0; i < p->nmats; i++) {
            struct mat *mt = &p->mats[i];
            mul_mtp(p, mt, mt->ph, p->qbuf + mt->q_off);
        }
        err = reduce(p, pack(p, p->qbuf, p->sum_qr), ST_ALT_Q);
    }
    if (err < 0)
        p->stage = ST_IDLE;
    return err;
}
