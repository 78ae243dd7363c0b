/*
 * tests/unit/test_transport_mem.c - the in-memory transport keeps the
 * transport contract (train/comm/transport.h): no callback inside a call, per-pair
 * FIFO, one armed recv per peer, recv_stop silences, broken links fail armed
 * recvs and later calls, post runs once; callbacks are counted.
 */
#include <errno.h>
#include <string.h>

#include "common/test.h"
#include "train/comm/transport_mem.h"

GM_TEST_DEFINE_STATE;

static int sends_done, sends_failed, recvs, recv_errs, posts;
static char last[64];
static size_t last_len;

static void send_cb(struct gm_transport *t, int peer, int status, void *arg)
{
    (void)t;
    (void)peer;
    (void)arg;
    if (status == 0)
        sends_done++;
    else
        sends_failed++;
}

static void recv_cb(struct gm_transport *t, int peer, int status, const void *buf, size_t len,
                    void *arg)
{
    (void)t;
    (void)peer;
    (void)arg;
    if (status < 0) {
        recv_errs++;
        GM_CHECK(buf == NULL);
        return;
    }
    recvs++;
    last_len = len < sizeof(last) ? len : sizeof(last);
    memcpy(last, buf, last_len);
}

static void post_cb(struct gm_transport *t, void *arg)
{
    (void)t;
    (void)arg;
    posts++;
}

static void test_contract(void)
{
    struct gm_memnet *n = gm_memnet_new(3);
    struct gm_transport *a = gm_memnet_transport(n, 0), *b = gm_memnet_transport(n, 1);

    GM_CHECK_EQ(a->world, 3);
    GM_CHECK_OK(gm_transport_send(a, 1, "one", 3, send_cb, NULL));
    GM_CHECK_OK(gm_transport_send(a, 1, "two", 3, send_cb, NULL));
    GM_CHECK_EQ(sends_done, 0); /* never inside the call */
    GM_CHECK_ERR(gm_transport_send(a, 0, "x", 1, send_cb, NULL), -EINVAL);
    GM_CHECK_ERR(gm_transport_send(a, 3, "x", 1, send_cb, NULL), -EINVAL);
    gm_memnet_run(n);
    GM_CHECK_EQ(sends_done, 2); /* released without the peer reading */
    GM_CHECK_EQ(recvs, 0);
    GM_CHECK_EQ(gm_memnet_queued_msgs(n), 2);
    GM_CHECK_OK(gm_transport_recv(b, 0, recv_cb, NULL));
    GM_CHECK_ERR(gm_transport_recv(b, 0, recv_cb, NULL), -EBUSY);
    gm_memnet_run(n);
    GM_CHECK_EQ(recvs, 1); /* one-shot */
    GM_CHECK(last_len == 3 && memcmp(last, "one", 3) == 0);
    GM_CHECK_OK(gm_transport_recv(b, 0, recv_cb, NULL));
    gm_memnet_run(n);
    GM_CHECK(last_len == 3 && memcmp(last, "two", 3) == 0);
    /* recv_stop: no callback after it */
    GM_CHECK_OK(gm_transport_recv(b, 2, recv_cb, NULL));
    gm_transport_recv_stop(b, 2);
    GM_CHECK_OK(gm_transport_send(gm_memnet_transport(n, 2), 1, "z", 1, send_cb, NULL));
    gm_memnet_run(n);
    GM_CHECK_EQ(recvs, 2);
    /* broken link: armed recv fails, later calls fail synchronously */
    GM_CHECK_OK(gm_transport_recv(b, 0, recv_cb, NULL));
    gm_memnet_fail_link(n, 0, 1);
    gm_memnet_run(n);
    GM_CHECK_EQ(recv_errs, 1);
    GM_CHECK_ERR(gm_transport_send(a, 1, "x", 1, send_cb, NULL), -ECONNRESET);
    GM_CHECK_ERR(gm_transport_recv(b, 0, recv_cb, NULL), -ECONNRESET);
    GM_CHECK_OK(gm_transport_post(a, post_cb, NULL));
    GM_CHECK_EQ(posts, 0);
    gm_memnet_run(n);
    GM_CHECK_EQ(posts, 1);
    GM_CHECK_EQ(sends_failed, 0);
    gm_memnet_free(n); /* frees the message still queued 2 -> 1 */
    gm_memnet_free(NULL);
    GM_CHECK(gm_memnet_new(0) == NULL);
}

int main(void)
{
    GM_TEST_RUN(test_contract);
    return gm_test_finish("test_transport_mem");
}
