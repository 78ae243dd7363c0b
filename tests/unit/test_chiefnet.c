/*
 * tests/unit/test_chiefnet.c - raft's transport over the member links
 * (agent/cluster/chiefnet.h), driven by hand on one uv loop: frames go in as the
 * chief room would pass them, streams come out as raft would get them.
 *  - a DATA frame on a new channel from an allowed node opens a channel:
 *    raft's accept callback gets the node's raft id, its node id as address,
 *    and a stream that yields exactly the bytes sent, in order, across frames;
 *  - a channel from a refused node (revoked, not in the configuration) never
 *    reaches raft: no accept, no channel;
 *  - malformed frames (empty, unknown op, a CLOSE with data, over the chunk
 *    size) are GM_ERR_PROTO;
 *  - CLOSE by the connector, and the link going down, end the channel: raft's
 *    stream sees EOF;
 *  - gm_chiefnet_recheck closes a channel whose node was refused since;
 *  - connect to a node without an up link answers RAFT_NOCONNECTION, later
 *    (never from inside connect), and one whose address is not its id is
 *    refused at once;
 *  - close cancels nothing twice and calls its callback once.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <raft.h>
#include <raft/uv.h>
#include <uv.h>

#include "agent/cluster/chiefnet.h"
#include "agent/net/proto.h"
#include "common/test.h"

GM_TEST_DEFINE_STATE;

static struct {
    uv_loop_t loop;
    int accepts;
    raft_id accepted_id;
    char accepted_addr[64];
    uv_stream_t *stream; /* raft's end, owned here as raft would */
    char got[256];
    size_t ngot;
    int eof;
    int connect_status, connect_cbs, in_connect;
    int closed;
    char refused[64]; /* a node env.allowed refuses */
} T;

static struct gm_link *link_to(void *agent, const char *node)
{
    (void)agent;
    (void)node;
    return NULL; /* no links: what would go to a peer is dropped */
}

static int allowed(void *agent, const char *node, char *why, size_t cap)
{
    (void)agent;
    if (strcmp(node, T.refused) == 0) {
        snprintf(why, cap, "%s is revoked", node);
        return GM_ERR_AUTH;
    }
    return 0;
}

static void alloc_cb(uv_handle_t *h, size_t hint, uv_buf_t *b)
{
    static char buf[256];

    (void)h;
    (void)hint;
    b->base = buf;
    b->len = sizeof(buf);
}

static void read_cb(uv_stream_t *s, ssize_t n, const uv_buf_t *b)
{
    (void)s;
    if (n < 0) {
        T.eof = 1;
        uv_read_stop(s);
        return;
    }
    if (T.ngot + (size_t)n <= sizeof(T.got)) {
        memcpy(T.got + T.ngot, b->base, (size_t)n);
        T.ngot += (size_t)n;
    }
}

static void accept_cb(struct raft_uv_transport *t, raft_id id, const char *address,
                      uv_stream_t *stream)
{
    (void)t;
    T.accepts++;
    T.accepted_id = id;
    snprintf(T.accepted_addr, sizeof(T.accepted_addr), "%s", address);
    T.stream = stream;
    GM_CHECK_OK(uv_read_start(stream, alloc_cb, read_cb));
}

static void stream_close_cb(uv_handle_t *h)
{
    raft_free(h);
}

static void connect_cb(struct raft_uv_connect *req, uv_stream_t *stream, int status)
{
    (void)req;
    GM_CHECK(!T.in_connect);
    GM_CHECK(stream == NULL);
    T.connect_status = status;
    T.connect_cbs++;
}

static void close_cb(struct raft_uv_transport *t)
{
    (void)t;
    T.closed++;
}

static int frame(struct gm_chiefnet *n, const char *node, uint64_t id, uint8_t op, const char *data)
{
    uint8_t p[1 + GM_CHIEFNET_CHUNK + 1];
    size_t len = data != NULL ? strlen(data) : 0;
    struct gm_frame_hdr h = {.type = GM_MSG_RAFT, .req = id, .len = (uint32_t)(1 + len)};

    p[0] = op;
    if (len > 0)
        memcpy(p + 1, data, len);
    return gm_chiefnet_on_frame(n, node, &h, p);
}

static void run_a_bit(void)
{
    for (int i = 0; i < 20; i++)
        uv_run(&T.loop, UV_RUN_NOWAIT);
}

static void test_transport(void)
{
    struct gm_chiefnet_env env = {.loop = &T.loop, .link_to = link_to, .allowed = allowed};
    struct gm_chiefnet *n;
    struct raft_uv_transport *t;
    struct raft_uv_connect req;
    struct gm_frame_hdr h = {.type = GM_MSG_RAFT};
    uint8_t big[1 + GM_CHIEFNET_CHUNK + 1] = {0};

    GM_CHECK_OK(uv_loop_init(&T.loop));
    GM_CHECK_OK(gm_chiefnet_new(&env, &n));
    t = gm_chiefnet_transport(n);
    GM_CHECK_OK(t->init(t, gm_chiefnet_raft_id("alpha"), "alpha"));
    GM_CHECK(gm_chiefnet_raft_id("alpha") != 0 &&
             gm_chiefnet_raft_id("alpha") != gm_chiefnet_raft_id("beta"));

    /* before raft listens, a channel is refused (closed back) */
    GM_CHECK_OK(frame(n, "beta", 1, 0, "early"));
    GM_CHECK_EQ(gm_chiefnet_channels(n), 0);
    GM_CHECK_OK(t->listen(t, accept_cb));

    /* an allowed node: raft gets a stream with the bytes, in order, across frames */
    GM_CHECK_OK(frame(n, "beta", 7, 0, "hello "));
    GM_CHECK_OK(frame(n, "beta", 7, 0, "raft"));
    GM_CHECK_EQ(T.accepts, 1);
    GM_CHECK(T.accepted_id == gm_chiefnet_raft_id("beta"));
    GM_CHECK_STREQ(T.accepted_addr, "beta");
    GM_CHECK_EQ(gm_chiefnet_channels(n), 1);
    run_a_bit();
    GM_CHECK_EQ(T.ngot, 10);
    GM_CHECK(memcmp(T.got, "hello raft", 10) == 0);

    /* a refused node never reaches raft */
    snprintf(T.refused, sizeof(T.refused), "mallory");
    GM_CHECK_OK(frame(n, "mallory", 7, 0, "vote for me"));
    GM_CHECK_EQ(T.accepts, 1);
    GM_CHECK_EQ(gm_chiefnet_channels(n), 1);

    /* malformed frames */
    h.len = 0;
    GM_CHECK_ERR(gm_chiefnet_on_frame(n, "beta", &h, big), GM_ERR_PROTO);
    GM_CHECK_ERR(frame(n, "beta", 7, 5, NULL), GM_ERR_PROTO);
    GM_CHECK_ERR(frame(n, "beta", 7, 1, "data after close"), GM_ERR_PROTO);
    h.len = sizeof(big);
    GM_CHECK_ERR(gm_chiefnet_on_frame(n, "beta", &h, big), GM_ERR_PROTO);
    GM_CHECK_EQ(gm_chiefnet_channels(n), 1);

    /* CLOSE by the connector: raft sees EOF */
    GM_CHECK_OK(frame(n, "beta", 7, 1, NULL));
    GM_CHECK_EQ(gm_chiefnet_channels(n), 0);
    run_a_bit();
    GM_CHECK(T.eof);
    uv_close((uv_handle_t *)T.stream, stream_close_cb);

    /* the link going down ends its channels */
    T.eof = 0;
    GM_CHECK_OK(frame(n, "gamma", 3, 0, "x"));
    GM_CHECK_EQ(gm_chiefnet_channels(n), 1);
    gm_chiefnet_link_down(n, "gamma");
    GM_CHECK_EQ(gm_chiefnet_channels(n), 0);
    run_a_bit();
    GM_CHECK(T.eof);
    uv_close((uv_handle_t *)T.stream, stream_close_cb);

    /* a node refused since its channel opened: recheck closes it */
    T.eof = 0;
    GM_CHECK_OK(frame(n, "delta", 4, 0, "y"));
    GM_CHECK_EQ(gm_chiefnet_channels(n), 1);
    gm_chiefnet_recheck(n);
    GM_CHECK_EQ(gm_chiefnet_channels(n), 1);
    snprintf(T.refused, sizeof(T.refused), "delta");
    gm_chiefnet_recheck(n);
    GM_CHECK_EQ(gm_chiefnet_channels(n), 0);
    run_a_bit();
    GM_CHECK(T.eof);
    uv_close((uv_handle_t *)T.stream, stream_close_cb);

    /* connect without a link: RAFT_NOCONNECTION, from the loop, not from connect */
    T.in_connect = 1;
    GM_CHECK_OK(t->connect(t, &req, gm_chiefnet_raft_id("beta"), "beta", connect_cb));
    T.in_connect = 0;
    GM_CHECK_EQ(T.connect_cbs, 0);
    run_a_bit();
    GM_CHECK_EQ(T.connect_cbs, 1);
    GM_CHECK_EQ(T.connect_status, RAFT_NOCONNECTION);
    /* an address that is not the id's node: refused at once */
    GM_CHECK_EQ(t->connect(t, &req, 12345, "beta", connect_cb), RAFT_NOCONNECTION);
    GM_CHECK_EQ(t->connect(t, &req, 12345, "Not A Node", connect_cb), RAFT_NOCONNECTION);
    GM_CHECK_EQ(T.connect_cbs, 1);

    /* close: one callback once the handles are closed */
    t->close(t, close_cb);
    while (uv_run(&T.loop, UV_RUN_DEFAULT) != 0)
        ;
    GM_CHECK_EQ(T.closed, 1);
    gm_chiefnet_free(n);
    GM_CHECK_OK(uv_loop_close(&T.loop));
}

int main(void)
{
    GM_TEST_RUN(test_transport);
    return gm_test_finish("test_chiefnet");
}
