/*
 * tests/unit/test_link.c - a link's liveness (agent/net/link.h): the silence deadline and the
 * round-trip samples, over a real TLS link on loopback, both ends on this thread's one loop.
 *
 *   a (client, PINGs every PING_MS) --TLS, 127.0.0.1-- b (server)
 *
 *  (a) a peer that answers (b answers each PING with a PONG) keeps the link up well past the
 *      silence deadline; gm_link_rtt_ms is the median of fresh samples (> 0);
 *  (b) a peer that goes silent (b stops answering and sends nothing: a SIGSTOPped process as
 *      seen from a) is closed with -ETIMEDOUT soon after the deadline, far before
 *      opts.timeout_ms, and without waiting for an EOF that never comes;
 *  (c) this process's own stall (the loop blocked for longer than the deadline: a SIGSTOP of
 *      this side) is not the peer's silence: the link stays up, and the round trip that spans
 *      the stall is not sampled (the median stays near the fast samples);
 *  (d) gm_link_silence_ms: the owner's deadline, never above opts.timeout_ms; 0 leaves
 *      timeout_ms.
 * Waits poll a condition with a deadline.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <uv.h>

#include "agent/net/link.h"
#include "agent/net/proto.h"
#include "common/test.h"
#include "common/time.h"
#include "crypto/tls.h"

#include "world.h"

GM_TEST_DEFINE_STATE;

#define PING_MS 100
#define SILENCE_MS 400

struct end {
    struct gm_link *l;
    int up, closed, close_err;
    int answer; /* b: answer PINGs */
};

struct net {
    uv_loop_t loop;
    struct world wa, wb;
    struct gm_tls_ctx *ca, *cb;
    uv_tcp_t srv;
    struct sockaddr_in addr;
    struct end a, b;
};

static void wake_cb(uv_timer_t *t)
{
    (void)t;
}

typedef int (*cond_fn)(struct net *n);

static int run_until(struct net *n, cond_fn cond, int ms)
{
    uint64_t deadline = gm_time_mono_ns() + (uint64_t)ms * 1000000ull;
    uv_timer_t t;
    int ok;

    uv_timer_init(&n->loop, &t);
    uv_timer_start(&t, wake_cb, 5, 5);
    while (!(ok = cond(n)) && gm_time_mono_ns() < deadline)
        uv_run(&n->loop, UV_RUN_ONCE);
    uv_close((uv_handle_t *)&t, NULL);
    uv_run(&n->loop, UV_RUN_NOWAIT);
    return ok;
}

static int never(struct net *n)
{
    (void)n;
    return 0;
}

static int both_up(struct net *n)
{
    return n->a.up && n->b.up;
}

static int a_closed(struct net *n)
{
    return n->a.closed;
}

static int both_closed(struct net *n)
{
    return n->a.closed && n->b.closed;
}

static int have_samples(struct net *n)
{
    return n->a.l != NULL && gm_link_rtt_samples(n->a.l) >= 4;
}

static int l_up(struct gm_link *l)
{
    struct end *e = gm_link_data(l);

    e->l = l;
    e->up = 1;
    return 0;
}

static int l_frame(struct gm_link *l, const struct gm_frame_hdr *h, const uint8_t *p)
{
    struct end *e = gm_link_data(l);

    if (h->type == GM_MSG_PING && e->answer)
        gm_link_pong(l, p, h->len);
    else if (h->type == GM_MSG_PONG)
        gm_link_rtt_sample(l, p, h->len);
    return 0;
}

static void l_close(struct gm_link *l, int err)
{
    struct end *e = gm_link_data(l);

    e->closed = 1;
    e->close_err = err;
    e->l = NULL;
}

static const struct gm_link_ops lops = {.on_up = l_up, .on_frame = l_frame, .on_close = l_close};

static void on_conn(uv_stream_t *server, int status)
{
    struct net *n = server->data;
    struct gm_link_opts o = {.role = GM_TLS_ROLE_SERVER}; /* b sends no PINGs of its own */
    struct gm_link *l = NULL;

    GM_CHECK(status == 0);
    GM_CHECK_OK(gm_link_new(&n->loop, n->cb, &o, &lops, &n->b, &l));
    if (l != NULL && gm_link_accept(l, server) != 0) {
        gm_link_free_unstarted(l);
        GM_CHECK(0);
    }
}

static void net_open(struct net *n)
{
    struct gm_link_opts o = {.role = GM_TLS_ROLE_CLIENT, .ping_ms = PING_MS, .timeout_ms = 60000};
    struct gm_link *l = NULL;
    int len = sizeof(n->addr);

    memset(n, 0, sizeof(*n));
    GM_CHECK_OK(uv_loop_init(&n->loop));
    world_make(&n->wa, "lab", "a");
    world_node(&n->wa, &n->wb, "lab", "b");
    struct gm_tls_config ta = {
        .cluster = "lab", .ca = n->wa.ca, .cert = n->wa.cert, .key = n->wa.key};
    struct gm_tls_config tb = {
        .cluster = "lab", .ca = n->wb.ca, .cert = n->wb.cert, .key = n->wb.key};
    GM_CHECK_OK(gm_tls_ctx_new(&ta, &n->ca));
    GM_CHECK_OK(gm_tls_ctx_new(&tb, &n->cb));
    uv_tcp_init(&n->loop, &n->srv);
    n->srv.data = n;
    uv_ip4_addr("127.0.0.1", 0, &n->addr);
    GM_CHECK_OK(uv_tcp_bind(&n->srv, (struct sockaddr *)&n->addr, 0));
    GM_CHECK_OK(uv_tcp_getsockname(&n->srv, (struct sockaddr *)&n->addr, &len));
    GM_CHECK_OK(uv_listen((uv_stream_t *)&n->srv, 4, on_conn));
    n->b.answer = 1;
    GM_CHECK_OK(gm_link_new(&n->loop, n->ca, &o, &lops, &n->a, &l));
    GM_CHECK_OK(gm_link_connect(l, (struct sockaddr *)&n->addr));
    GM_CHECK(run_until(n, both_up, 10000));
    gm_link_set_silence_ms(n->a.l, SILENCE_MS);
}

static void net_close(struct net *n)
{
    if (n->a.l != NULL)
        gm_link_close(n->a.l, 0);
    if (n->b.l != NULL)
        gm_link_close(n->b.l, 0);
    GM_CHECK(run_until(n, both_closed, 10000));
    uv_close((uv_handle_t *)&n->srv, NULL);
    uv_run(&n->loop, UV_RUN_DEFAULT);
    GM_CHECK_OK(uv_loop_close(&n->loop));
    gm_tls_ctx_free(n->ca);
    gm_tls_ctx_free(n->cb);
    world_free(&n->wa);
    world_free(&n->wb);
}

static void sleep_ms(int ms)
{
    struct timespec ts = {.tv_sec = ms / 1000, .tv_nsec = (long)(ms % 1000) * 1000000L};

    while (nanosleep(&ts, &ts) != 0 && errno == EINTR)
        ;
}

static void test_answering_peer_stays(void)
{
    struct net n;

    net_open(&n);
    GM_CHECK(run_until(&n, have_samples, 5000));
    (void)run_until(&n, never, 3 * SILENCE_MS);
    GM_CHECK(n.a.up && !n.a.closed);
    GM_CHECK(gm_link_rtt_ms(n.a.l) > 0);
    GM_CHECK(gm_link_rtt_max_ms(n.a.l) >= gm_link_rtt_ms(n.a.l));
    GM_CHECK(gm_link_quiet_ms(n.a.l) < SILENCE_MS);
    net_close(&n);
}

static void test_silent_peer_closed(void)
{
    struct net n;
    uint64_t t0, dt_ms;

    net_open(&n);
    GM_CHECK(run_until(&n, have_samples, 5000));
    n.b.answer = 0; /* b hears everything and says nothing: a frozen process */
    t0 = gm_time_mono_ns();
    GM_CHECK(run_until(&n, a_closed, 10000));
    dt_ms = (gm_time_mono_ns() - t0) / 1000000ull;
    GM_CHECK_EQ(n.a.close_err, -ETIMEDOUT);
    /* the deadline, plus up to one PING interval and one tick; never the 2 s linger */
    GM_CHECK(dt_ms >= SILENCE_MS - PING_MS);
    GM_CHECK(dt_ms < SILENCE_MS + 1500);
    net_close(&n);
}

static void test_own_stall_not_peer_silence(void)
{
    struct net n;
    double before;

    net_open(&n);
    GM_CHECK(run_until(&n, have_samples, 5000));
    (void)run_until(&n, never, 1000); /* a second of fast samples */
    before = gm_link_rtt_ms(n.a.l);
    GM_CHECK(before > 0 && before < 500);
    gm_link_ping(n.a.l); /* in flight across the stall: its PONG comes ~2 s after it left */
    sleep_ms(2000);      /* this whole process stops: longer than the deadline, and a stall */
    (void)run_until(&n, never, 3 * PING_MS);
    GM_CHECK(n.a.up && !n.a.closed);
    /* the PING sent before the stall came back ~2 s later: not a sample of the link */
    GM_CHECK(gm_link_rtt_max_ms(n.a.l) < 1000);
    GM_CHECK(gm_link_rtt_ms(n.a.l) < 500);
    net_close(&n);
}

static void test_silence_ms_bounds(void)
{
    struct net n;

    net_open(&n);
    GM_CHECK_EQ(gm_link_silence_ms(n.a.l), SILENCE_MS);
    gm_link_set_silence_ms(n.a.l, 0);
    GM_CHECK_EQ(gm_link_silence_ms(n.a.l), 60000u);
    gm_link_set_silence_ms(n.a.l, 90000);
    GM_CHECK_EQ(gm_link_silence_ms(n.a.l), 60000u);
    gm_link_set_silence_ms(n.a.l, SILENCE_MS);
    net_close(&n);
}

int main(void)
{
    signal(SIGPIPE, SIG_IGN);
    GM_TEST_RUN(test_answering_peer_stays);
    GM_TEST_RUN(test_silent_peer_closed);
    GM_TEST_RUN(test_own_stall_not_peer_silence);
    GM_TEST_RUN(test_silence_ms_bounds);
    return gm_test_finish("test_link");
}
