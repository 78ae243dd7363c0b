/*
 * tests/unit/test_diloco.c - DiLoCo over the in-memory transport.  Reference:
 * synchronous SGD (every step, params -= lr * mean_i grad_i) on a per-rank
 * quadratic loss 0.5 |A_i p - b_i|^2; DiLoCo with H = 1, outer lr 1,
 * momentum 0 and an fp32 wire must match it to 1e-6.  With the defaults (fp16,
 * Nesterov 0.7/0.9, H = 4) ranks stay bitwise identical and the loss falls.
 * Overlapped rounds (the outer update one round late, eager starts): a case worked by hand,
 * a naive reference of the algorithm written out here (fp32 wire), bitwise identical outer
 * parameters at every boundary with the defaults, and the contracts of the overlap calls.
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

/* Runs `steps` local SGD steps with DiLoCo; returns the params of rank 0. */
static void run_diloco(const struct gm_diloco_config *cfg, float lr, int steps, float *out,
                       bool *identical)
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

static void test_h1_equals_sync_sgd(void)
{
    const float lr = 0.05f;
    const int steps = 20;
    float ref[NP], got[NP], g[NP];
    struct gm_diloco_config cfg;
    bool same;

    for (int k = 0; k < NP; k++)
        ref[k] = 0.1f * (float)(k % 5);
    for (int t = 0; t < steps; t++) {
        float mean[NP] = {0};
        for (int r = 0; r < W; r++) {
            grad(r, ref, g);
            for (int k = 0; k < NP; k++)
                mean[k] += g[k] / W;
        }
        for (int k = 0; k < NP; k++)
            ref[k] -= lr * mean[k];
    }
    gm_diloco_config_default(&cfg);
    cfg.h = 1;
    cfg.outer_lr = 1.0f;
    cfg.momentum = 0.0f;
    cfg.codec = GM_CODEC_FP32;
    run_diloco(&cfg, lr, steps, got, &same);
    GM_CHECK(same);
    for (int k = 0; k < NP; k++)
        GM_CHECK_NEAR(got[k], ref[k], 1e-6, 0);
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
    run_diloco(&cfg, 0.05f, 200, got, &same);
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

/* One overlapped boundary on every rank: fold the round before, start this round's all-reduce
 * and run it to completion (it could as well finish during the next round: nothing reads the
 * result before the next boundary). */
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

/* Worked by hand: one parameter, 2 ranks, H = 2, constant gradients 1 and 3 at inner lr 1,
 * so every round's own deltas are 2 and 6, mean D = 4; outer lr 0.5, momentum 0.5, Nesterov,
 * fp32.  At each boundary a rank folds the round before's D into the anchor, then starts the
 * next round at the outer step its own delta d would give: m' = 0.5 m + d,
 * start = anchor - 0.5 (d + 0.5 m').
 *   boundary 0: nothing to fold; anchor 0, m 0.  rank 0: m' = 2, start = -0.5*(2+1) = -1.5;
 *               rank 1: m' = 6, start = -0.5*(6+3) = -4.5
 *   boundary 1: m = 0.5*0 + 4 = 4; anchor = 0 - 0.5*(4 + 0.5*4) = -3.
 *               rank 0: m' = 2 + 2 = 4, start = -3 - 0.5*(2+2) = -5;
 *               rank 1: m' = 2 + 6 = 8, start = -3 - 0.5*(6+4) = -8
 *   boundary 2: m = 0.5*4 + 4 = 6; anchor = -3 - 0.5*(4 + 0.5*6) = -6.5.
 *               rank 0: m' = 3 + 2 = 5, start = -6.5 - 0.5*(2+2.5) = -8.75;
 *               rank 1: m' = 3 + 6 = 9, start = -6.5 - 0.5*(6+4.5) = -11.75
 *   flush:      m = 0.5*6 + 4 = 7; anchor = -6.5 - 0.5*(4 + 0.5*7) = -10.25 on both
 * Blocking rounds put the anchor at -3, -6.5, -10.25 after boundaries 0, 1, 2: the late
 * anchor is one boundary behind, the ranks' starts average to the blocking anchor (the
 * deltas are constant), and the flush catches up exactly.  All binary fractions: exact. */
static void test_overlap_by_hand(void)
{
    const float grads[2] = {1.0f, 3.0f}, want_anchor[3] = {0.0f, -3.0f, -6.5f};
    const float want_start[3][2] = {{-1.5f, -4.5f}, {-5.0f, -8.0f}, {-8.75f, -11.75f}};
    struct gm_memnet *net = gm_memnet_new(2);
    struct gm_coll_config cc = {0};
    struct gm_coll *c[2];
    struct gm_diloco *d[2];
    struct gm_diloco_config cfg;
    float p[2][NP] = {{0}};
    const float *anchor, *mom;
    int b = 0;

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
        if (!gm_diloco_due(d[0], (uint64_t)t))
            continue;
        boundary_all(net, c, d, p, 2, (uint64_t)t);
        for (int r = 0; r < 2; r++) {
            gm_diloco_state(d[r], &anchor, &mom);
            GM_CHECK(anchor[0] == want_anchor[b]);
            GM_CHECK(p[r][0] == want_start[b][r]);
            GM_CHECK(gm_diloco_pending(d[r]) != NULL && gm_diloco_pending(d[r])[0] == 4.0f);
        }
        b++;
    }
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

/* W ranks of local SGD on the quadratics, overlapped DiLoCo every h steps for `steps` steps,
 * then a flush; rank 0's params into out; *identical: every rank's anchor (the outer
 * parameters) equal at every boundary, and the params after the flush. */
static void run_overlap(const struct gm_diloco_config *cfg, float lr, int steps, float *out,
                        bool *identical)
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
        if (!gm_diloco_due(d[0], (uint64_t)t))
            continue;
        boundary_all(net, c, d, p, W, (uint64_t)t);
        gm_diloco_state(d[0], &a0, &mom);
        for (int r = 1; r < W; r++) {
            gm_diloco_state(d[r], &ar, &mom);
            if (memcmp(a0, ar, NP * sizeof(float)) != 0)
                *identical = false;
        }
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

/* The algorithm written out naively, in double: one shared outer state (theta, m), each rank
 * starting each round at the uncommitted outer step of its own delta, the mean delta of round
 * r folded in at boundary r+1, the last one by the flush. */
static void reference_overlap(int h, double lr, double olr, double mu, int steps, double *out)
{
    double theta[NP], m[NP] = {0}, late[NP] = {0}, start[W][NP], p[W][NP];
    bool have_late = false;

    for (int k = 0; k < NP; k++)
        theta[k] = 0.1 * (double)(k % 5);
    for (int r = 0; r < W; r++) {
        memcpy(p[r], theta, sizeof(theta));
        memcpy(start[r], theta, sizeof(theta));
    }
    for (int t = 0; t < steps; t++) {
        for (int r = 0; r < W; r++)
            for (int k = 0; k < NP; k++)
                p[r][k] -= lr * A[r][k] * (A[r][k] * p[r][k] - B[r][k]);
        if ((t + 1) % h != 0)
            continue;
        for (int k = 0; k < NP; k++) {
            double mine[W], mean = 0;
            for (int r = 0; r < W; r++) {
                mine[r] = start[r][k] - p[r][k];
                mean += mine[r] / W;
            }
            if (have_late) { /* the round before's mean, applied now */
                m[k] = mu * m[k] + late[k];
                theta[k] -= olr * (late[k] + mu * m[k]);
            }
            late[k] = mean;
            for (int r = 0; r < W; r++) {
                double mp = mu * m[k] + mine[r];
                p[r][k] = start[r][k] = theta[k] - olr * (mine[r] + mu * mp);
            }
        }
        have_late = true;
    }
    for (int k = 0; k < NP; k++) { /* the flush */
        if (have_late) {
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
    run_overlap(&cfg, 0.05f, 42, got, &same); /* ends mid-round: the flush drops 2 steps */
    GM_CHECK(same);
    reference_overlap(4, 0.05, 0.7, 0.9, 42, ref);
    for (int k = 0; k < NP; k++)
        GM_CHECK_NEAR(got[k], ref[k], 1e-5, 1e-5);

    /* the defaults (fp16 wire): bitwise identical outer parameters, and it converges */
    for (int k = 0; k < NP; k++)
        init[k] = 0.1f * (float)(k % 5);
    gm_diloco_config_default(&cfg);
    cfg.h = 4;
    run_overlap(&cfg, 0.05f, 200, got, &same);
    GM_CHECK(same);
    GM_CHECK(loss(got) < 0.5 * loss(init));
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
    cfg.outer_lr = 1.0f; /* outer step = the delta: a round starts where the last one ended */
    cfg.momentum = 0.0f;
    GM_CHECK_OK(gm_diloco_new(&cfg, p, 2, &d));
    GM_CHECK_ERR(gm_diloco_overlap_start(d, c, 0, done_cb, NULL), -EPROTO); /* no delta kept */
    GM_CHECK(gm_diloco_pending(d) == NULL);
    p[0] = 0.0f;
    GM_CHECK_OK(gm_diloco_overlap_boundary(d, p));
    GM_CHECK(p[0] == 0.0f && p[1] == 2.0f);
    GM_CHECK_ERR(gm_diloco_overlap_boundary(d, p), -EPROTO); /* its delta was never reduced */
    GM_CHECK_ERR(gm_diloco_sync_start(d, c, p, 0, done_cb, NULL), -EPROTO); /* mixing modes */
    memset(calls, 0, sizeof(calls));
    GM_CHECK_OK(gm_diloco_overlap_start(d, c, 0, done_cb, NULL));
    GM_CHECK_ERR(gm_diloco_overlap_start(d, c, 0, done_cb, NULL), -EBUSY);
    GM_CHECK_ERR(gm_diloco_overlap_boundary(d, p), -EBUSY);
    GM_CHECK_ERR(gm_diloco_overlap_flush(d, p), -EBUSY);
    GM_CHECK_ERR(gm_diloco_pending_set(d, late, 2), -EBUSY);
    gm_memnet_run(net);
    GM_CHECK_EQ(calls[0], 1);
    GM_CHECK(gm_diloco_pending(d) != NULL && gm_diloco_pending(d)[0] == 1.0f);
    /* a checkpoint's pending update replaces it; another length is refused */
    GM_CHECK_ERR(gm_diloco_pending_set(d, late, 1), -EINVAL);
    GM_CHECK_OK(gm_diloco_pending_set(d, late, 2));
    GM_CHECK(gm_diloco_pending(d)[1] == 0.25f);
    /* a delta kept but never reduced is dropped by the flush, which says so */
    GM_CHECK_OK(gm_diloco_overlap_boundary(d, p));
    p[0] = 9.0f;
    GM_CHECK_ERR(gm_diloco_overlap_flush(d, p), -EPROTO);
    gm_diloco_state(d, &anchor, &mom);
    GM_CHECK(p[0] == anchor[0]);
    GM_CHECK_OK(gm_diloco_overlap_flush(d, p)); /* nothing pending: just the anchor */
    /* the blocking rounds work again once nothing is pending; a state_set clears it */
    GM_CHECK_OK(gm_diloco_pending_set(d, late, 2));
    GM_CHECK_OK(gm_diloco_state_set(d, anchor, mom, 2));
    GM_CHECK(gm_diloco_pending(d) == NULL);
    gm_diloco_free(d);
    gm_coll_free(c);
    gm_memnet_free(net);
}

int main(void)
{
    setup();
    GM_TEST_RUN(test_overlap_by_hand);
    GM_TEST_RUN(test_overlap_reference);
    GM_TEST_RUN(test_overlap_contracts);
    GM_TEST_RUN(test_contracts);
    GM_TEST_RUN(test_h1_equals_sync_sgd);
    GM_TEST_RUN(test_defaults_converge);
    return gm_test_finish("test_diloco");
}
