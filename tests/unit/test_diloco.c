/*
 * tests/unit/test_diloco.c - DiLoCo over the in-memory transport.  Reference:
 * synchronous SGD (every step, params -= lr * mean_i grad_i) on a per-rank
 * quadratic loss 0.5 |A_i p - b_i|^2; DiLoCo with H = 1, outer lr 1,
 * momentum 0 and an fp32 wire must match it to 1e-6.  With the defaults (fp16,
 * Nesterov 0.7/0.9, H = 4) ranks stay bitwise identical and the loss falls.
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

int main(void)
{
    setup();
    GM_TEST_RUN(test_contracts);
    GM_TEST_RUN(test_h1_equals_sync_sgd);
    GM_TEST_RUN(test_defaults_converge);
    return gm_test_finish("test_diloco");
}
