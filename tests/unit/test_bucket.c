/*
 * tests/unit/test_bucket.c - bucketed all-reduce equals one whole-buffer sum;
 * buckets form in reverse layer order and start as their last layer is ready.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "common/test.h"
#include "train/comm/bucket.h"
#include "train/comm/transport_mem.h"

GM_TEST_DEFINE_STATE;

#define W 3

static int calls[W], status[W];

static void step_cb(struct gm_coll *c, int st, void *arg)
{
    int r = gm_coll_rank(c);
    (void)arg;
    calls[r]++;
    status[r] = st;
}

static void test_bucketed_sum(void)
{
    const size_t layer_end[] = {100, 250, 251, 1000, 1003};
    const size_t nl = 5, total = 1003;
    struct gm_memnet *net = gm_memnet_new(W);
    struct gm_coll *c[W];
    struct gm_bucketer *b[W];
    float *g[W];
    struct gm_coll_config cc = {.chunk_bytes = 128};
    struct gm_coll_opts o = {.algo = GM_COLL_RING, .codec = GM_CODEC_FP32};
    size_t off, len;

    for (int r = 0; r < W; r++) {
        c[r] = gm_coll_new(gm_memnet_transport(net, r), &cc);
        GM_CHECK_OK(gm_bucketer_new(layer_end, nl, 100 * sizeof(float), &b[r]));
        g[r] = malloc(total * sizeof(float));
        for (size_t i = 0; i < total; i++)
            g[r][i] = (float)((i + (size_t)r) % 11);
    }
    /* reverse order: [251,1003) (752 + 3), then [100,251) (151), then [0,100) */
    GM_CHECK_EQ(gm_bucketer_count(b[0]), 3);
    gm_bucketer_range(b[0], 0, &off, &len);
    GM_CHECK(off == 251 && len == 752);
    gm_bucketer_range(b[0], 1, &off, &len);
    GM_CHECK(off == 100 && len == 151);
    for (int r = 0; r < W; r++)
        GM_CHECK_OK(gm_bucketer_begin(b[r], c[r], g[r], &o, step_cb, NULL));
    /* backward: last layer first; progress the loop between layers */
    for (size_t l = nl; l-- > 0;) {
        for (int r = 0; r < W; r++)
            GM_CHECK_OK(gm_bucketer_ready(b[r], l));
        gm_memnet_run(net);
        for (int r = 0; r < W; r++)
            GM_CHECK_EQ(calls[r], l == 0 ? 1 : 0);
    }
    GM_CHECK_ERR(gm_bucketer_ready(b[0], 0), -EINVAL);
    for (int r = 0; r < W; r++) {
        GM_CHECK_OK(status[r]);
        for (size_t i = 0; i < total; i++) {
            float want = 0;
            for (int q = 0; q < W; q++)
                want += (float)((i + (size_t)q) % 11);
            GM_CHECK(g[r][i] == want);
        }
    }
    for (int r = 0; r < W; r++) {
        gm_bucketer_free(b[r]);
        gm_coll_free(c[r]);
        free(g[r]);
    }
    gm_memnet_free(net);
    GM_CHECK_ERR(gm_bucketer_new(layer_end, 0, 1, &b[0]), -EINVAL);
    gm_bucketer_free(NULL);
}

int main(void)
{
    GM_TEST_RUN(test_bucketed_sum);
    return gm_test_finish("test_bucket");
}
