/*
 * tests/unit/test_diloco.c - DiLoCo over the in-memory transport.  Reference:
 * synchronous SGD (every step, params -= lr * mean_i grad_i) on a per-rank
 * quadratic loss 0.5 |A_i p - b_i|^2; DiLoCo with H = 1, outer lr 1,
 * momentum 0 and an fp32 wire must match it to 1e-6.  With the defaults (fp16,
 * Nesterov 0.7/0.9, H = 4) ranks stay bitwise identical and the loss falls.  Weighted
 * deltas (unequal shares) match SGD on the weighted mean gradient the same way.
 * Overlapped rounds (the outer update applied lag steps after its boundary, the steps since
 * carried over, taken from the eager outer step of the rank's own delta): a case worked by
 * hand, a naive reference of the algorithm written out here (fp32 wire), bitwise identical
 * outer parameters with the defaults, params left bit for bit by plain averaging's eager
 * step, and the contracts.
 */
#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "common/assert.h"
#include "common/test.h"
#include "train/compress/diloco.h"
#include "train/comm/transport_mem.h"

GM_TEST_DEFINE_STATE;

#define W 3
#define NP 64

static float A[W][NP], B[W][NP]; /* diagonal A_i: grad_i(p) = A_i (A_i p - b_i) */

static void grad(int r, const float *p, float *g)
{
    for (int k = 0; k < NP; k++)
        g[k] = A[r][k] * (A[r][k] * p[k] - B[r][k]);
}

static double loss(const float *p)
{
    double l = 0;
    for (int r = 0; r < W; r++)
        for (int k = 0; k < NP; k++) {
            double e = (double)A[r][k] * p[k] - B[r][k];
            l += 0.5 * e * e;
        }
    return l / W;
}

static int calls[W], status[W];

static void done_cb(struct gm_coll *c, int st, void *arg)
{
    int r = gm_coll_rank(c);
    (void)arg;
    calls[r]++;
    status[r] = st;
}

static void setup(void)
{
    uint64_t s = 7;
    for (int r = 0; r < W; r++)
        for (int k = 0; k < NP; k++) {
            s = s * 6364136223846793005u + 1442695040888963407u;
            A[r][k] = 0.5f + (float)((s >> 40) & 0xffff) / 65536.0f;
            s = s * 6364136223846793005u + 1442695040888963407u;
            B[r][k] = (float)((s >> 40) & 0xffff) / 32768.0f - 1.0f;
        }
}

/* Runs `steps` local SGD steps with DiLoCo, rank r's delta weighted by weight[r] (NULL: not
 * set, 1); returns the params of rank 0. */
static void run_diloco_w(const struct gm_diloco_config *cfg, float lr, int steps,
                         const float *weight, float *out, bool *identical)
{
    struct gm_memnet *net = gm_memnet_new(W);
    struct gm_coll *c[W];
    struct gm_diloco *d[W];
    float p[W][NP], g[NP];
    struct gm_coll_config cc = {0};

    for (int r = 0; r < W; r++) {
        for (int k = 0; k < NP; k++)
            p[r][k] = 0.1f * (float)(k % 5);
        c[r] = gm_coll_new(gm_memnet_transport(net, r), &cc);
        GM_CHECK_OK(gm_diloco_new(cfg, p[r], NP, &d[r]));
        if (weight != NULL)
            gm_diloco_set_weight(d[r], weight[r]);
    }
    for (int t = 0; t < steps; t++) {
        for (int r = 0; r < W; r++) {
            grad(r, p[r], g);
            for (int k = 0; k < NP; k++)
                p[r][k] -= lr * g[k];
        }
        if (!gm_diloco_due(d[0], (uint64_t)t))
            continue;
        memset(calls, 0, sizeof(calls));
        for (int r = 0; r < W; r++)
            GM_CHECK_OK(gm_diloco_sync_start(d[r], c[r], p[r], (uint64_t)t, done_cb, NULL));
        gm_memnet_run(net);
        for (int r = 0; r < W; r++) {
            GM_CHECK_EQ(calls[r], 1);
            GM_CHECK_OK(status[r]);
        }
    }
    *identical = true;
    for (int r = 1; r < W; r++)
        if (memcmp(p[0], p[r], sizeof(p[0])) != 0)
            *identical = false;
    GM_CHECK_EQ(gm_diloco_syncs(d[0]), (uint64_t)steps / cfg->h);
    memcpy(out, p[0], sizeof(p[0]));
    for (int r = 0; r < W; r++) {
        gm_diloco_free(d[r]);
        gm_coll_free(c[r]);
    }
    gm_memnet_free(net);
}

/* H = 1 DiLoCo (outer lr 1, momentum 0, fp32 wire) against synchronous SGD on the mean
 * gradient, rank r's weighted by w[r] (sum W; NULL: all 1).  Unequal shares
 * (train/gradsync.h) weight each rank's delta so; the result is rank 0's parameters. */
static void h1_vs_sync_sgd(const float *w, float *got)
{
    const float lr = 0.05f;
    const int steps = 20;
    float ref[NP], g[NP];
    struct gm_diloco_config cfg;
    bool same;

    for (int k = 0; k < NP; k++)
        ref[k] = 0.1f * (float)(k % 5);
    for (int t = 0; t < steps; t++) {
        float mean[NP] = {0};
        for (int r = 0; r < W; r++) {
            grad(r, ref, g);
            for (int k = 0; k < NP; k++)
                mean[k] += (w != NULL ? w[r] * g[k] : g[k]) / W;
        }
        for (int k = 0; k < NP; k++)
            ref[k] -= lr * mean[k];
    }
    gm_diloco_config_default(&cfg);
    cfg.h = 1;
    cfg.outer_lr = 1.0f;
    cfg.momentum = 0.0f;
    cfg.codec = GM_CODEC_FP32;
    run_diloco_w(&cfg, lr, steps, w, got, &same);
    GM_CHECK(same);
    for (int k = 0; k < NP; k++)
        GM_CHECK_NEAR(got[k], ref[k], 1e-6, 0);
}

static void test_h1_equals_sync_sgd(void)
{
    float got[NP];

    h1_vs_sync_sgd(NULL, got);
}

static void test_h1_weighted(void)
{
    const float w[W] = {1.5f, 0.25f, 1.25f};
    float plain[NP], got[NP];
    double d = 0;

    h1_vs_sync_sgd(w, got);
    h1_vs_sync_sgd(NULL, plain); /* the weights matter: unweighted ends elsewhere */
    for (int k = 0; k < NP; k++)
        d = fmax(d, fabs((double)plain[k] - got[k]));
    GM_CHECK(d > 1e-3);
}

static void test_defaults_converge(void)
{
    struct gm_diloco_config cfg;
    float got[NP], init[NP];
    bool same;

    for (int k = 0; k < NP; k++)
        init[k] = 0.1f * (float)(k % 5);
    gm_diloco_config_default(&cfg);
    GM_CHECK_EQ(cfg.h, 16);
    GM_CHECK(cfg.outer_lr == 0.7f && cfg.momentum == 0.9f && cfg.nesterov);
    GM_CHECK_EQ(cfg.codec, GM_CODEC_FP16);
    cfg.h = 4;
    run_diloco_w(&cfg, 0.05f, 200, NULL, got, &same);
    GM_CHECK(same);
    GM_CHECK(loss(got) < 0.5 * loss(init));
}

static void test_contracts(void)
{
    struct gm_diloco_config cfg;
    struct gm_diloco *d = (struct gm_diloco *)&cfg;
    float p[2] = {0};

    gm_diloco_config_default(&cfg);
    GM_CHECK_OK(gm_diloco_new(&cfg, p, 2, &d));
    p[0] = 5.0f; /* a local step */
    GM_CHECK_OK(gm_diloco_restore(d, p));
    GM_CHECK(p[0] == 0.0f); /* back on the anchor */
    gm_diloco_free(d);
    cfg.h = 0;
    GM_CHECK_ERR(gm_diloco_new(&cfg, p, 2, &d), -EINVAL);
    GM_CHECK(d == NULL);
    gm_diloco_free(NULL);
}

/* --- overlapped rounds ------------------------------------------------------------------ */

/* One boundary on every rank: keep the deltas, start the all-reduces and run them to
 * completion (they could as well finish during the lag steps: nothing reads the result
 * before the apply). */
static void boundary_all(struct gm_memnet *net, struct gm_coll **c, struct gm_diloco **d,
                         float (*p)[NP], int w, uint64_t step)
{
    for (int r = 0; r < w; r++)
        GM_CHECK_OK(gm_diloco_overlap_boundary(d[r], p[r]));
    memset(calls, 0, sizeof(calls));
    for (int r = 0; r < w; r++)
        GM_CHECK_OK(gm_diloco_overlap_start(d[r], c[r], step, done_cb, NULL));
    gm_memnet_run(net);
    for (int r = 0; r < w; r++) {
        GM_CHECK_EQ(calls[r], 1);
        GM_CHECK_OK(status[r]);
    }
}

/* Worked by hand: one parameter, 2 ranks, H = 2, the update applied 1 step after its
 * boundary; constant gradients 1 and 3 at inner lr 1; outer lr 0.5, momentum 0.5, Nesterov,
 * fp32.  Steps t = 0..5, boundaries after t = 1, 3, 5, applies after t = 2, 4; at each
 * boundary a rank's params take the eager step of its own delta d (m' = 0.5 m + d,
 * anchor - 0.5 (d + 0.5 m'), m kept):
 *   t=1 boundary: anchor 0, m 0, params -2 | -6: deltas 2 | 6, D = 4;
 *       eager: m' 2 | 6, params 0 - 0.5*(2 + 1) = -1.5 | 0 - 0.5*(6 + 3) = -4.5
 *   t=2 (params -2.5 | -7.5) apply: m = 4; anchor = 0 - 0.5*(4 + 0.5*4) = -3;
 *       params = -3 + (-2.5 - -1.5) = -4 | -3 + (-7.5 - -4.5) = -6
 *   t=3 boundary: params -5 | -9: deltas 2 | 6, D = 4;
 *       eager: m' 4 | 8, params -3 - 0.5*(2 + 2) = -5 | -3 - 0.5*(6 + 4) = -8
 *   t=4 (params -6 | -11) apply: m = 0.5*4 + 4 = 6; anchor = -3 - 0.5*(4 + 0.5*6) = -6.5;
 *       params = -6.5 + (-6 - -5) = -7.5 | -6.5 + (-11 - -8) = -9.5
 *   t=5 boundary: params -8.5 | -12.5: deltas 2 | 6, D = 4;
 *       eager: m' 5 | 9, params -6.5 - 0.5*(2 + 2.5) = -8.75 | -6.5 - 0.5*(6 + 4.5) = -11.75
 *   flush: m = 0.5*6 + 4 = 7; anchor = -6.5 - 0.5*(4 + 0.5*7) = -10.25 on both
 * The blocking rounds put the anchor at -3, -6.5, -10.25 at the three boundaries: the
 * overlapped anchor takes the same values, one step later.  With gradients that do not depend
 * on the params, where the lag steps start does not show after the apply
 * (test_overlap_reference has gradients that do).  All binary fractions: exact. */
static void test_overlap_by_hand(void)
{
    const float grads[2] = {1.0f, 3.0f}, want_anchor[2] = {-3.0f, -6.5f};
    const float want_params[2][2] = {{-4.0f, -6.0f}, {-7.5f, -9.5f}};
    const float want_eager[3][2] = {{-1.5f, -4.5f}, {-5.0f, -8.0f}, {-8.75f, -11.75f}};
    struct gm_memnet *net = gm_memnet_new(2);
    struct gm_coll_config cc = {0};
    struct gm_coll *c[2];
    struct gm_diloco *d[2];
    struct gm_diloco_config cfg;
    float p[2][NP] = {{0}};
    const float *anchor, *mom;
    int a = 0, b = 0;

    gm_diloco_config_default(&cfg);
    cfg.h = 2;
    cfg.outer_lr = 0.5f;
    cfg.momentum = 0.5f;
    cfg.codec = GM_CODEC_FP32;
    for (int r = 0; r < 2; r++) {
        c[r] = gm_coll_new(gm_memnet_transport(net, r), &cc);
        GM_CHECK_OK(gm_diloco_new(&cfg, p[r], 1, &d[r]));
    }
    for (int t = 0; t < 6; t++) {
        for (int r = 0; r < 2; r++)
            p[r][0] -= grads[r];
        if (gm_diloco_due(d[0], (uint64_t)t)) {
            boundary_all(net, c, d, p, 2, (uint64_t)t);
            for (int r = 0; r < 2; r++) {
                GM_CHECK(gm_diloco_pending(d[r]) != NULL && gm_diloco_pending(d[r])[0] == 4.0f);
                GM_CHECK(p[r][0] == want_eager[b][r]);
                GM_CHECK(gm_diloco_round_start(d[r])[0] == want_eager[b][r]);
            }
            b++;
        } else if (t > 0) {
            for (int r = 0; r < 2; r++) {
                GM_CHECK_OK(gm_diloco_overlap_apply(d[r], p[r]));
                gm_diloco_state(d[r], &anchor, &mom);
                GM_CHECK(anchor[0] == want_anchor[a]);
                GM_CHECK(p[r][0] == want_params[a][r]);
                GM_CHECK(gm_diloco_pending(d[r]) == NULL);
            }
            a++;
        }
    }
    GM_CHECK_EQ(a, 2);
    GM_CHECK_EQ(b, 3);
    GM_CHECK_EQ(gm_diloco_syncs(d[0]), 2u);
    for (int r = 0; r < 2; r++) {
        GM_CHECK_OK(gm_diloco_overlap_flush(d[r], p[r]));
        GM_CHECK(p[r][0] == -10.25f);
        gm_diloco_state(d[r], &anchor, &mom);
        GM_CHECK(anchor[0] == -10.25f && mom[0] == 7.0f);
        GM_CHECK(gm_diloco_pending(d[r]) == NULL);
    }
    for (int r = 0; r < 2; r++) {
        gm_diloco_free(d[r]);
        gm_coll_free(c[r]);
    }
    gm_memnet_free(net);
}

/* W ranks of local SGD on the quadratics, overlapped DiLoCo (boundary every h steps, apply
 * lag steps later) for `steps` steps, then a flush; rank 0's params into out; *identical:
 * every rank's anchor (the outer parameters) equal after every apply, and the params after
 * the flush. */
static void run_overlap(const struct gm_diloco_config *cfg, int lag, float lr, int steps,
                        float *out, bool *identical)
{
    struct gm_memnet *net = gm_memnet_new(W);
    struct gm_coll *c[W];
    struct gm_diloco *d[W];
    float p[W][NP], g[NP];
    struct gm_coll_config cc = {0};
    const float *a0, *ar, *mom;

    *identical = true;
    for (int r = 0; r < W; r++) {
        for (int k = 0; k < NP; k++)
            p[r][k] = 0.1f * (float)(k % 5);
        c[r] = gm_coll_new(gm_memnet_transport(net, r), &cc);
        GM_CHECK_OK(gm_diloco_new(cfg, p[r], NP, &d[r]));
    }
    for (int t = 0; t < steps; t++) {
        for (int r = 0; r < W; r++) {
            grad(r, p[r], g);
            for (int k = 0; k < NP; k++)
                p[r][k] -= lr * g[k];
        }
        if (t >= (int)cfg->h && (t + 1) % (int)cfg->h == lag) {
            for (int r = 0; r < W; r++)
                GM_CHECK_OK(gm_diloco_overlap_apply(d[r], p[r]));
            gm_diloco_state(d[0], &a0, &mom);
            for (int r = 1; r < W; r++) {
                gm_diloco_state(d[r], &ar, &mom);
                if (memcmp(a0, ar, NP * sizeof(float)) != 0)
                    *identical = false;
            }
        }
        if (gm_diloco_due(d[0], (uint64_t)t))
            boundary_all(net, c, d, p, W, (uint64_t)t);
    }
    for (int r = 0; r < W; r++)
        GM_CHECK_OK(gm_diloco_overlap_flush(d[r], p[r]));
    for (int r = 1; r < W; r++)
        if (memcmp(p[0], p[r], sizeof(p[0])) != 0)
            *identical = false;
    memcpy(out, p[0], sizeof(p[0]));
    for (int r = 0; r < W; r++) {
        gm_diloco_free(d[r]);
        gm_coll_free(c[r]);
    }
    gm_memnet_free(net);
}

/* The algorithm written out naively, in double: one shared outer state (theta, m); at each
 * boundary the ranks' deltas from theta are noted, and each rank moves to where the outer step
 * of its own delta alone would take theta (eager), noting that point; lag steps later the mean
 * delta takes theta one outer step, and each rank goes on from theta plus its steps since
 * that point; at the end a pending update is applied and every rank ends on theta. */
static void reference_overlap(int h, int lag, double lr, double olr, double mu, int steps,
                              double *out)
{
    double theta[NP], m[NP] = {0}, late[NP] = {0}, at[W][NP], p[W][NP];
    bool pending = false;

    for (int k = 0; k < NP; k++)
        theta[k] = 0.1 * (double)(k % 5);
    for (int r = 0; r < W; r++)
        memcpy(p[r], theta, sizeof(theta));
    for (int t = 0; t < steps; t++) {
        for (int r = 0; r < W; r++)
            for (int k = 0; k < NP; k++)
                p[r][k] -= lr * A[r][k] * (A[r][k] * p[r][k] - B[r][k]);
        if (pending && (t + 1) % h == lag) {
            for (int k = 0; k < NP; k++) {
                m[k] = mu * m[k] + late[k];
                theta[k] -= olr * (late[k] + mu * m[k]);
                for (int r = 0; r < W; r++)
                    p[r][k] = theta[k] + (p[r][k] - at[r][k]);
            }
            pending = false;
        }
        if ((t + 1) % h == 0) {
            for (int k = 0; k < NP; k++) {
                late[k] = 0;
                for (int r = 0; r < W; r++) {
                    double own = theta[k] - p[r][k], mo = mu * m[k] + own;

                    late[k] += own / W;
                    p[r][k] = theta[k] - olr * (own + mu * mo);
                    at[r][k] = p[r][k];
                }
            }
            pending = true;
        }
    }
    for (int k = 0; k < NP; k++) { /* the flush */
        if (pending) {
            m[k] = mu * m[k] + late[k];
            theta[k] -= olr * (late[k] + mu * m[k]);
        }
        out[k] = theta[k];
    }
}

static void test_overlap_reference(void)
{
    struct gm_diloco_config cfg;
    float got[NP], init[NP];
    double ref[NP];
    bool same;

    gm_diloco_config_default(&cfg);
    cfg.h = 4;
    cfg.codec = GM_CODEC_FP32;
    run_overlap(&cfg, 1, 0.05f, 42, got, &same); /* ends mid-round: the flush drops 2 steps */
    GM_CHECK(same);
    reference_overlap(4, 1, 0.05, 0.7, 0.9, 42, ref);
    for (int k = 0; k < NP; k++)
        GM_CHECK_NEAR(got[k], ref[k], 1e-5, 1e-5);
    cfg.h = 8; /* a lag of 3, ending 1 step after a boundary: the flush applies it */
    run_overlap(&cfg, 3, 0.05f, 41, got, &same);
    GM_CHECK(same);
    reference_overlap(8, 3, 0.05, 0.7, 0.9, 41, ref);
    for (int k = 0; k < NP; k++)
        GM_CHECK_NEAR(got[k], ref[k], 1e-5, 1e-5);

    /* the defaults (fp16 wire): bitwise identical outer parameters, and it converges */
    for (int k = 0; k < NP; k++)
        init[k] = 0.1f * (float)(k % 5);
    gm_diloco_config_default(&cfg);
    cfg.h = 4;
    run_overlap(&cfg, 1, 0.05f, 200, got, &same);
    GM_CHECK(same);
    GM_CHECK(loss(got) < 0.5 * loss(init));
}

/* With plain averaging as the outer step (lr 1, momentum 0: what auto runs below 16 rounds)
 * the eager step leaves params exactly as they are, bit for bit, even where anchor - (anchor -
 * p) would round (p tiny against the anchor); with the defaults it moves them. */
static void test_overlap_plain_unchanged(void)
{
    enum { N = 6 };
    const float anchor[N] = {1.0f, -3.0f, 1e6f, 0.1f, 0.0f, 7.5f};
    const float local[N] = {1e-8f, -2.9999998f, 3.0f, 0.3f, -1e-30f, 7.5f};
    struct gm_diloco_config cfg;
    struct gm_diloco *d;
    float p[N];

    for (int nesterov = 0; nesterov < 2; nesterov++) {
        gm_diloco_config_default(&cfg);
        cfg.outer_lr = 1.0f;
        cfg.momentum = 0.0f;
        cfg.nesterov = nesterov == 1;
        cfg.codec = GM_CODEC_FP32;
        GM_CHECK_OK(gm_diloco_new(&cfg, anchor, N, &d));
        memcpy(p, local, sizeof(p));
        GM_CHECK_OK(gm_diloco_overlap_boundary(d, p));
        GM_CHECK_EQ(memcmp(p, local, sizeof(p)), 0);
        GM_CHECK_EQ(memcmp(gm_diloco_round_start(d), local, sizeof(p)), 0);
        gm_diloco_free(d);
    }
    gm_diloco_config_default(&cfg); /* 0.7 / 0.9, Nesterov: the eager step moves them */
    GM_CHECK_OK(gm_diloco_new(&cfg, anchor, N, &d));
    memcpy(p, local, sizeof(p));
    GM_CHECK_OK(gm_diloco_overlap_boundary(d, p));
    GM_CHECK(memcmp(p, local, sizeof(p)) != 0);
    GM_CHECK(p[3] > 0.3f);  /* delta -0.2: the outer step goes on past the rank's own params */
    GM_CHECK(p[5] == 7.5f); /* no delta, no momentum: nothing moves */
    gm_diloco_free(d);
}

static void test_overlap_contracts(void)
{
    struct gm_memnet *net = gm_memnet_new(1);
    struct gm_coll_config cc = {0};
    struct gm_coll *c = gm_coll_new(gm_memnet_transport(net, 0), &cc);
    struct gm_diloco_config cfg;
    struct gm_diloco *d = NULL;
    float p[2] = {1.0f, 2.0f}, late[2] = {0.5f, 0.25f};
    const float *anchor, *mom;

    gm_diloco_config_default(&cfg);
    cfg.codec = GM_CODEC_FP32;
    cfg.outer_lr = 1.0f;
    cfg.momentum = 0.0f;
    GM_CHECK_OK(gm_diloco_new(&cfg, p, 2, &d));
    GM_CHECK_ERR(gm_diloco_overlap_start(d, c, 0, done_cb, NULL), -EPROTO); /* no delta kept */
    GM_CHECK_ERR(gm_diloco_overlap_apply(d, p), -EPROTO);                   /* nothing reduced */
    GM_CHECK(gm_diloco_pending(d) == NULL && gm_diloco_round_start(d) == NULL);
    p[0] = 0.0f;
    GM_CHECK_OK(gm_diloco_overlap_boundary(d, p));
    GM_CHECK(p[0] == 0.0f && p[1] == 2.0f);                  /* the params go on */
    GM_CHECK_ERR(gm_diloco_overlap_boundary(d, p), -EPROTO); /* the last one not applied */
    GM_CHECK_ERR(gm_diloco_overlap_apply(d, p), -EPROTO);    /* not reduced yet */
    GM_CHECK_ERR(gm_diloco_sync_start(d, c, p, 0, done_cb, NULL), -EPROTO); /* mixing modes */
    memset(calls, 0, sizeof(calls));
    GM_CHECK_OK(gm_diloco_overlap_start(d, c, 0, done_cb, NULL));
    GM_CHECK_ERR(gm_diloco_overlap_start(d, c, 0, done_cb, NULL), -EBUSY);
    GM_CHECK_ERR(gm_diloco_overlap_boundary(d, p), -EBUSY);
    GM_CHECK_ERR(gm_diloco_overlap_apply(d, p), -EBUSY);
    GM_CHECK_ERR(gm_diloco_overlap_flush(d, p), -EBUSY);
    GM_CHECK_ERR(gm_diloco_pending_set(d, late, 2), -EBUSY);
    gm_memnet_run(net);
    GM_CHECK_EQ(calls[0], 1);
    GM_CHECK(gm_diloco_pending(d) != NULL && gm_diloco_pending(d)[0] == 1.0f);
    GM_CHECK(gm_diloco_round_start(d) != NULL && gm_diloco_round_start(d)[0] == 0.0f);
    /* a checkpoint's pending update replaces it; another length is refused */
    GM_CHECK_ERR(gm_diloco_pending_set(d, late, 1), -EINVAL);
    GM_CHECK_ERR(gm_diloco_round_start_set(d, late, 1), -EINVAL);
    GM_CHECK_OK(gm_diloco_pending_set(d, late, 2));
    p[0] = -1.0f; /* a step since the boundary */
    GM_CHECK_OK(gm_diloco_overlap_apply(d, p));
    GM_CHECK(p[0] == 1.0f - 0.5f - 1.0f && p[1] == 2.0f - 0.25f); /* anchor - D + the step */
    GM_CHECK(gm_diloco_pending(d) == NULL && gm_diloco_round_start(d) == NULL);
    /* a delta kept but never reduced is dropped by the flush, which says so */
    GM_CHECK_OK(gm_diloco_overlap_boundary(d, p));
    p[0] = 9.0f;
    GM_CHECK_ERR(gm_diloco_overlap_flush(d, p), -EPROTO);
    gm_diloco_state(d, &anchor, &mom);
    GM_CHECK(p[0] == anchor[0] && anchor[0] == 0.5f);
    GM_CHECK_OK(gm_diloco_overlap_flush(d, p)); /* nothing pending: just the anchor */
    /* a state_set clears a pending update */
    GM_CHECK_OK(gm_diloco_pending_set(d, late, 2));
    GM_CHECK_OK(gm_diloco_state_set(d, anchor, mom, 2));
    GM_CHECK(gm_diloco_pending(d) == NULL);
    gm_diloco_free(d);
    gm_coll_free(c);
    gm_memnet_free(net);
}

/* --- 8-bit deltas ------------------------------------------------------------------------- */

#define NQ (2 * GM_CODEC_Q8_BLOCK + 88) /* two whole blocks and a short one */
#define KQ 50                           /* rounds */

/* Rank r's delta each round: per block one value of 1 (its max: a step of 1/127), values of
 * 0.003 (r + 1) (under half a step: quantised alone, 0 every round) and random ones. */
static void q8_delta(int r, float *v)
{
    uint64_t s = 99 + (uint64_t)r;
    for (int k = 0; k < NQ; k++) {
        s = s * 6364136223846793005u + 1442695040888963407u;
        v[k] = k % GM_CODEC_Q8_BLOCK == 5 ? 1.0f
               : k % 3 == 0               ? 0.003f * (float)(r + 1)
                                          : (float)((s >> 40) & 0xffff) / 65536.0f - 0.5f;
    }
}

/* w ranks of DiLoCo with q8 deltas, outer lr 1 and no momentum (the anchor moves by the mean
 * delta), KQ rounds in which rank r's local steps move its params by -q8_delta(r); blocking,
 * or overlapped (H 2, lag 1); DIRECT, or (hier, w = 3) HIER over islands {0, 1} and {2}.
 * Checks every round that each residual is exactly x - decode(encode(x)), x = the delta + the
 * residual before (with one rank: 0); HIER: on each leader (ranks 0 and 2) x is its island's
 * sum of those (rank order, fp32), on rank 1 the residual is 0; and that the anchors are
 * bitwise identical.  out: rank 0's anchor at the end. */
static void run_q8(int w, bool overlap, bool hier, float *out)
{
    static const int islands[W] = {0, 0, 2};
    struct gm_memnet *net = gm_memnet_new(w);
    struct gm_coll_config cc = {.groups = hier ? islands : NULL};
    struct gm_coll *c[W];
    struct gm_diloco *d[W];
    struct gm_diloco_config cfg;
    static float p[W][NQ], v[W][NQ], delta[W][NQ], e0[W][NQ], x[NQ], dec[NQ];
    static unsigned char wire[2 * NQ];
    const float *anchor, *mom, *anchor0;
    int bad = 0;

    gm_diloco_config_default(&cfg);
    cfg.h = overlap ? 2 : 1;
    cfg.outer_lr = 1.0f;
    cfg.momentum = 0;
    cfg.codec = GM_CODEC_Q8;
    cfg.algo = hier ? GM_COLL_HIER : GM_COLL_RING; /* q8: DIRECT unless HIER over islands */
    for (int r = 0; r < w; r++) {
        memset(p[r], 0, sizeof(p[r]));
        q8_delta(r, v[r]);
        c[r] = gm_coll_new(gm_memnet_transport(net, r), &cc);
        GM_CHECK_OK(gm_diloco_new(&cfg, p[r], NQ, &d[r]));
        GM_CHECK(gm_diloco_residual(d[r]) != NULL);
    }
    for (int t = 0; t < KQ; t++) {
        for (int r = 0; r < w; r++) { /* the local steps: params = anchor - v */
            gm_diloco_state(d[r], &anchor, &mom);
            for (int k = 0; k < NQ; k++) {
                p[r][k] = anchor[k] - v[r][k];
                delta[r][k] = anchor[k] - p[r][k]; /* as diloco.c takes it (weight 1) */
            }
            memcpy(e0[r], gm_diloco_residual(d[r]), sizeof(e0[r]));
        }
        if (overlap) {
            memset(calls, 0, sizeof(calls));
            for (int r = 0; r < w; r++) {
                GM_CHECK_OK(gm_diloco_overlap_boundary(d[r], p[r]));
                GM_CHECK_OK(gm_diloco_overlap_start(d[r], c[r], (uint64_t)t, done_cb, NULL));
            }
            gm_memnet_run(net);
            for (int r = 0; r < w; r++) {
                GM_CHECK_EQ(calls[r], 1);
                GM_CHECK_OK(status[r]);
                GM_CHECK_OK(gm_diloco_overlap_apply(d[r], p[r]));
            }
        } else {
            memset(calls, 0, sizeof(calls));
            for (int r = 0; r < w; r++)
                GM_CHECK_OK(gm_diloco_sync_start(d[r], c[r], p[r], (uint64_t)t, done_cb, NULL));
            gm_memnet_run(net);
            for (int r = 0; r < w; r++) {
                GM_CHECK_EQ(calls[r], 1);
                GM_CHECK_OK(status[r]);
            }
        }
        gm_diloco_state(d[0], &anchor0, &mom);
        for (int r = 0; r < w; r++) {
            const float *e = gm_diloco_residual(d[r]);
            gm_diloco_state(d[r], &anchor, &mom);
            bad += memcmp(anchor, anchor0, NQ * sizeof(float)) != 0;
            for (int k = 0; k < NQ; k++) {
                x[k] = delta[r][k] + e0[r][k];
                if (hier && r == 0) /* the island's sum, as the group reduce adds it */
                    x[k] += delta[1][k] + e0[1][k];
            }
            gm_codec_encode(GM_CODEC_Q8, x, NQ, wire);
            gm_codec_decode(GM_CODEC_Q8, wire, NQ, dec);
            for (int k = 0; k < NQ; k++) {
                float want = w > 1 && !(hier && r == 1) ? x[k] - dec[k] : 0.0f;
                bad += memcmp(&e[k], &want, sizeof(float)) != 0;
            }
        }
    }
    GM_CHECK_EQ(bad, 0);
    GM_CHECK_EQ(gm_diloco_syncs(d[0]), (uint64_t)KQ);
    memcpy(out, anchor0, NQ * sizeof(float));
    for (int r = 0; r < w; r++) {
        gm_diloco_free(d[r]);
        gm_coll_free(c[r]);
    }
    gm_memnet_free(net);
}

static void test_q8_feedback(void)
{
    static float got[NQ], again[NQ], v[W][NQ], q[NQ];
    double worst = 0, worst_plain = 0;

    for (int r = 0; r < W; r++)
        q8_delta(r, v[r]);
    for (int ov = 0; ov < 4; ov++) {
        run_q8(W, ov % 2 == 1, ov >= 2, got);
        /* the anchor moved by KQ x the mean true delta, less the mean of the last residuals:
         * each at most half a step of its block (1/254 here) */
        worst = 0;
        worst_plain = 0;
        for (int k = 0; k < NQ; k++) {
            double mean = 0, plain = 0;
            for (int r = 0; r < W; r++) {
                float one;
                unsigned char wire[2 * GM_CODEC_Q8_BLOCK];
                int b0 = k / GM_CODEC_Q8_BLOCK * GM_CODEC_Q8_BLOCK;
                int m = NQ - b0 < GM_CODEC_Q8_BLOCK ? NQ - b0 : GM_CODEC_Q8_BLOCK;
                mean += v[r][k] / (double)W;
                /* without feedback: the same delta quantised afresh every round */
                gm_codec_encode(GM_CODEC_Q8, v[r] + b0, (size_t)m, wire);
                gm_codec_decode(GM_CODEC_Q8, wire, (size_t)m, q);
                one = q[k - b0];
                plain += one / (double)W;
            }
            worst = fmax(worst, fabs(-got[k] - KQ * mean));
            worst_plain = fmax(worst_plain, fabs(KQ * plain - KQ * mean));
        }
        GM_CHECK(worst <= 0.5 / 127 + 1e-4);      /* one round's error, + fp32 sums of 50 */
        GM_CHECK(worst_plain > 10 * (0.5 / 127)); /* the test can tell: 0.003 x 50 is lost */
        /* deterministic: the same run, the same bits */
        run_q8(W, ov % 2 == 1, ov >= 2, again);
        GM_CHECK_EQ(memcmp(got, again, sizeof(got)), 0);
    }
    /* one rank: nothing goes on the wire, so nothing is dropped and no residual kept */
    run_q8(1, false, false, got);
    for (int k = 0; k < NQ; k++)
        worst = fmax(worst, fabs(-got[k] - KQ * (double)v[0][k]));
    GM_CHECK(worst <= 0.5 / 127 + 1e-4);
}

int main(void)
{
    setup();
    GM_TEST_RUN(test_overlap_by_hand);
    GM_TEST_RUN(test_overlap_reference);
    GM_TEST_RUN(test_overlap_plain_unchanged);
    GM_TEST_RUN(test_overlap_contracts);
    GM_TEST_RUN(test_contracts);
    GM_TEST_RUN(test_h1_equals_sync_sgd);
    GM_TEST_RUN(test_h1_weighted);
    GM_TEST_RUN(test_defaults_converge);
    GM_TEST_RUN(test_q8_feedback);
    return gm_test_finish("test_diloco");
}
