/*
 * tests/unit/test_xport.c - the training channel (agent/jobs/xport.h) over real
 * TLS links on loopback, every rank on this thread's one libuv loop.
 *
 *   rank 0 <--TLS--> rank 1          (N = 2)
 *     ^                ^
 *     +-----TLS------ rank 2         (N = 3: a full mesh, rank j dials rank i < j)
 *
 * Each link's on_frame hands GM_MSG_TRAIN frames to the rank's xport, as the
 * agent's job room does; a GM_ERR_PROTO from it fails that link with an
 * ERROR frame (gm_link_fail), and on_close detaches the link from the xport.
 *
 *  (a) gm_coll all-reduce over the xports, N = 2 and 3, sizes 1, a prime,
 *      1 MiB + 3 floats and 8 MiB, ring and direct, one-frame and multi-frame
 *      messages: exact data equals the serial sum bit for bit; random data is
 *      bitwise identical on every rank and within the rounding bound of the
 *      serial sum in double;
 *  (b) gm_xport_on_frame refuses (GM_ERR_PROTO) a wrong sequence number, a
 *      wrong generation, a zero-length chunk, a message over GM_XPORT_MSG_MAX,
 *      a frame inside another message, a frame "from" itself; over a link the
 *      bad frame closes that link with ERROR first, and the armed recv fails;
 *  (c) a link closed mid-operation completes the armed recv with an error
 *      (later, once) and the collective fails on every rank within a deadline;
 *  (d) backpressure: with no recv armed, more than GM_XPORT_QUEUE_MAX queued
 *      pauses the link (no byte is read while paused); arming drains the queue
 *      in order and resumes the link;
 *  (e) the queue limit (gm_xport_set_queue_max): see test_queue_limit.
 *
 * Waits poll a condition with a deadline; nothing sleeps.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <math.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <uv.h>

#include "agent/net/link.h"
#include "agent/net/proto.h"
#include "agent/jobs/xport.h"
#include "common/test.h"
#include "common/time.h"
#include "crypto/tls.h"
#include "train/comm/collective.h"

#include "world.h"

GM_TEST_DEFINE_STATE;

#define MAXW 3
#define GEN 7u

struct net;

/* One end of a link: this rank's view. */
struct lend {
    struct net *n;
    int me, peer; /* peer: -1 until the handshake names it (accepted links) */
};

struct net {
    uv_loop_t loop;
    int world;
    struct world id[MAXW];
    struct gm_tls_ctx *ctx[MAXW];
    uv_tcp_t srv[MAXW];
    struct sockaddr_in addr[MAXW];
    struct gm_link *link[MAXW][MAXW]; /* [me][peer], borrowed from the link itself */
    int up[MAXW][MAXW], closed[MAXW][MAXW], close_err[MAXW][MAXW];
    int proto[MAXW][MAXW];     /* what gm_xport_on_frame returned when it refused */
    int err_frame[MAXW][MAXW]; /* code of an ERROR frame received */
    int other_frames;
    struct gm_xport *x[MAXW];
    int nlinks; /* link ends alive */
};

/* --- loop helpers ------------------------------------------------------------ */

static void wake_cb(uv_timer_t *t)
{
    (void)t;
}

typedef int (*cond_fn)(struct net *n, void *arg);

/* Runs the loop until cond holds or ms pass; returns cond's last value. */
static int run_until(struct net *n, cond_fn cond, void *arg, int ms)
{
    uint64_t deadline = gm_time_mono_ns() + (uint64_t)ms * 1000000ull;
    uv_timer_t t;
    int ok;

    uv_timer_init(&n->loop, &t);
    uv_timer_start(&t, wake_cb, 10, 10);
    while (!(ok = cond(n, arg)) && gm_time_mono_ns() < deadline)
        uv_run(&n->loop, UV_RUN_ONCE);
    uv_close((uv_handle_t *)&t, NULL);
    uv_run(&n->loop, UV_RUN_NOWAIT);
    return ok;
}

static int never(struct net *n, void *arg)
{
    (void)n;
    (void)arg;
    return 0;
}

/* Runs the loop for ms whatever happens (only to show that something does NOT happen). */
static void run_for(struct net *n, int ms)
{
    (void)run_until(n, never, NULL, ms);
}

/* --- links -------------------------------------------------------------------- */

static int l_up(struct gm_link *l)
{
    struct lend *e = gm_link_data(l);
    struct net *n = e->n;
    const char *name = gm_tls_peer_node(gm_link_tls(l));

    if (name == NULL || name[0] != 'r' || name[1] < '0' || name[1] >= '0' + n->world)
        return GM_ERR_AUTH;
    e->peer = name[1] - '0';
    n->link[e->me][e->peer] = l;
    n->up[e->me][e->peer] = 1;
    return 0;
}

static int l_frame(struct gm_link *l, const struct gm_frame_hdr *h, const uint8_t *p)
{
    struct lend *e = gm_link_data(l);
    struct net *n = e->n;
    char msg[200];
    int code = 0, err;

    if (h->type == GM_MSG_ERROR) {
        if (gm_proto_error_decode(p, h->len, &code, msg, sizeof(msg)) != 0)
            code = 1;
        n->err_frame[e->me][e->peer] = code;
        gm_link_close(l, code < 0 ? code : GM_ERR_PROTO); /* as the agent does */
        return 0;
    }
    if (h->type != GM_MSG_TRAIN) {
        n->other_frames++;
        return 0;
    }
    if (n->x[e->me] == NULL)
        return GM_ERR_PROTO;
    err = gm_xport_on_frame(n->x[e->me], e->peer, h, p);
    if (err < 0) { /* as the agent does: ERROR, then close */
        n->proto[e->me][e->peer] = err;
        gm_link_fail(l, err, "malformed training message");
    }
    return 0;
}

static void l_close(struct gm_link *l, int err)
{
    struct lend *e = gm_link_data(l);
    struct net *n = e->n;

    if (e->peer >= 0) {
        n->closed[e->me][e->peer] = 1;
        n->close_err[e->me][e->peer] = err;
        if (n->link[e->me][e->peer] == l)
            n->link[e->me][e->peer] = NULL;
        if (n->x[e->me] != NULL)
            gm_xport_link_down(n->x[e->me], e->peer, err != 0 ? err : GM_ERR_ABORTED);
    }
    n->nlinks--;
    free(e);
}

static const struct gm_link_ops lops = {.on_up = l_up, .on_frame = l_frame, .on_close = l_close};

static void on_conn(uv_stream_t *server, int status)
{
    struct lend *e = malloc(sizeof(*e));
    struct net *n;
    struct gm_link_opts o = {.role = GM_TLS_ROLE_SERVER};
    struct gm_link *l = NULL;
    int me = -1;

    GM_CHECK(e != NULL && status == 0);
    if (e == NULL || status != 0) {
        free(e);
        return;
    }
    n = server->data;
    for (int i = 0; i < n->world; i++)
        if ((uv_tcp_t *)server == &n->srv[i])
            me = i;
    *e = (struct lend){.n = n, .me = me, .peer = -1};
    GM_CHECK_OK(gm_link_new(&n->loop, n->ctx[me], &o, &lops, e, &l));
    if (l == NULL) {
        free(e);
        return;
    }
    if (gm_link_accept(l, server) != 0) {
        gm_link_free_unstarted(l);
        free(e);
        GM_CHECK(0);
        return;
    }
    n->nlinks++;
}

static int all_up(struct net *n, void *arg)
{
    (void)arg;
    for (int i = 0; i < n->world; i++)
        for (int j = 0; j < n->world; j++)
            if (i != j && !n->up[i][j])
                return 0;
    return 1;
}

/* A full mesh of TLS links between world ranks, each with an xport of generation GEN. */
static void net_up(struct net *n, int world)
{
    char name[8];

    memset(n, 0, sizeof(*n));
    n->world = world;
    GM_CHECK_OK(uv_loop_init(&n->loop));
    for (int i = 0; i < world; i++) {
        struct gm_tls_config tc = {.cluster = "lab"};
        int len = sizeof(n->addr[i]);
        snprintf(name, sizeof(name), "r%d", i);
        if (i == 0)
            world_make(&n->id[0], "lab", name);
        else
            world_node(&n->id[0], &n->id[i], "lab", name);
        tc.ca = n->id[i].ca;
        tc.cert = n->id[i].cert;
        tc.key = n->id[i].key;
        GM_CHECK_OK(gm_tls_ctx_new(&tc, &n->ctx[i]));
        n->addr[i] =
            (struct sockaddr_in){.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
        GM_CHECK_OK(uv_tcp_init(&n->loop, &n->srv[i]));
        n->srv[i].data = n;
        GM_CHECK_OK(uv_tcp_bind(&n->srv[i], (struct sockaddr *)&n->addr[i], 0));
        GM_CHECK_OK(uv_tcp_getsockname(&n->srv[i], (struct sockaddr *)&n->addr[i], &len));
        GM_CHECK_OK(uv_listen((uv_stream_t *)&n->srv[i], 8, on_conn));
    }
    for (int j = 1; j < world; j++)
        for (int i = 0; i < j; i++) {
            struct gm_link_opts o = {.role = GM_TLS_ROLE_CLIENT};
            struct lend *e = malloc(sizeof(*e));
            struct gm_link *l = NULL;
            GM_CHECK(e != NULL);
            if (e == NULL)
                continue;
            *e = (struct lend){.n = n, .me = j, .peer = -1};
            GM_CHECK_OK(gm_link_new(&n->loop, n->ctx[j], &o, &lops, e, &l));
            if (l == NULL) {
                free(e);
                continue;
            }
            GM_CHECK_OK(gm_link_connect(l, (struct sockaddr *)&n->addr[i]));
            n->nlinks++;
        }
    GM_CHECK(run_until(n, all_up, NULL, 10000));
    for (int i = 0; i < world; i++) {
        GM_CHECK_OK(gm_xport_new(&n->loop, GEN, i, world, &n->x[i]));
        for (int j = 0; j < world && n->x[i] != NULL; j++)
            if (j != i && n->link[i][j] != NULL)
                gm_xport_set_link(n->x[i], j, n->link[i][j]);
    }
}

static int no_links(struct net *n, void *arg)
{
    (void)arg;
    return n->nlinks == 0;
}

/* Closes the xports, then the links, then the servers; the loop must close clean. */
static void net_down(struct net *n)
{
    for (int i = 0; i < n->world; i++) {
        gm_xport_close(n->x[i]);
        n->x[i] = NULL;
    }
    for (int i = 0; i < n->world; i++)
        for (int j = 0; j < n->world; j++)
            if (n->link[i][j] != NULL)
                gm_link_close(n->link[i][j], 0);
    GM_CHECK(run_until(n, no_links, NULL, 10000));
    for (int i = 0; i < n->world; i++)
        uv_close((uv_handle_t *)&n->srv[i], NULL);
    while (uv_run(&n->loop, UV_RUN_NOWAIT) != 0)
        ;
    GM_CHECK_OK(uv_loop_close(&n->loop));
    for (int i = 0; i < n->world; i++) {
        gm_tls_ctx_free(n->ctx[i]);
        world_free(&n->id[i]);
    }
}

/* --- (a) all-reduce ------------------------------------------------------------- */

struct opst {
    int done, status;
};

static void coll_done(struct gm_coll *c, int status, void *arg)
{
    struct opst *s = arg;

    (void)c;
    s->done++;
    s->status = status;
}

struct opset {
    struct opst *s;
    int world;
};

static int ops_done(struct net *n, void *arg)
{
    struct opset *o = arg;

    (void)n;
    for (int r = 0; r < o->world; r++)
        if (!o->s[r].done)
            return 0;
    return 1;
}

static uint64_t mix(uint64_t x)
{
    x ^= x >> 33;
    x *= 0xff51afd7ed558ccdull;
    x ^= x >> 33;
    x *= 0xc4ceb9fe1a85ec53ull;
    return x ^ (x >> 33);
}

/* exact: multiples of 1/256 below 16 in magnitude, so every order of adding
 * three of them is exact; otherwise random signs, mantissas and exponents
 * 2^-10 .. 2^10, where the order of the adds shows in the last bits. */
static float value(int r, size_t i, int exact)
{
    uint64_t h = mix((uint64_t)r << 40 ^ (uint64_t)i ^ (exact ? 0x5555ull << 48 : 0));

    if (exact)
        return (float)((int)(h % 8193) - 4096) / 256.0f;
    return ldexpf((float)(h & 0xffffff) / 16777216.0f, (int)((h >> 24) % 21) - 10) *
           ((h >> 40) & 1 ? -1.0f : 1.0f);
}

/* One all-reduce (SUM) of n floats over a fresh gm_coll per rank; checks the result. */
static void allreduce_case(struct net *nt, size_t n, enum gm_coll_algo algo, size_t chunk,
                           int exact)
{
    struct gm_coll *c[MAXW] = {0};
    float *buf[MAXW] = {0};
    struct opst s[MAXW];
    struct opset os = {.s = s, .world = nt->world};
    struct gm_coll_config cfg = {.generation = GEN, .chunk_bytes = chunk};
    struct gm_coll_opts o = {.algo = algo, .codec = GM_CODEC_FP32, .reduce = GM_COLL_SUM};
    size_t bad_serial = 0, bad_bits = 0, bad_bound = 0;
    int w = nt->world;

    memset(s, 0, sizeof(s));
    for (int r = 0; r < w; r++) {
        buf[r] = malloc(n * sizeof(float));
        c[r] = gm_coll_new(gm_xport_transport(nt->x[r]), &cfg);
        GM_CHECK(buf[r] != NULL && c[r] != NULL);
        if (buf[r] == NULL || c[r] == NULL)
            goto out;
        for (size_t i = 0; i < n; i++)
            buf[r][i] = value(r, i, exact);
    }
    for (int r = 0; r < w; r++)
        GM_CHECK_OK(gm_coll_allreduce_start(c[r], buf[r], n, &o, coll_done, &s[r]));
    GM_CHECK(run_until(nt, ops_done, &os, 60000));
    for (int r = 0; r < w; r++) {
        GM_CHECK_EQ(s[r].done, 1);
        GM_CHECK_OK(s[r].status);
    }
    for (size_t i = 0; i < n; i++) {
        float serial = 0.0f;
        double sum = 0.0, mag = 0.0;
        for (int r = 0; r < w; r++) {
            float v = value(r, i, exact);
            serial += v;
            sum += (double)v;
            mag += fabs((double)v);
        }
        for (int r = 1; r < w; r++)
            bad_bits += memcmp(&buf[r][i], &buf[0][i], sizeof(float)) != 0;
        if (exact)
            bad_serial += memcmp(&buf[0][i], &serial, sizeof(float)) != 0;
        /* w-1 fp32 adds: |error| <= (w-1) * 2^-24 * sum |x|, plus the final rounding */
        else if (fabs((double)buf[0][i] - sum) > (double)w * ldexp(1.0, -24) * mag)
            bad_bound++;
    }
    if (bad_serial + bad_bits + bad_bound != 0)
        fprintf(stderr,
                "  N=%d n=%zu algo=%d chunk=%zu exact=%d: %zu differ from the serial sum, "
                "%zu differ between ranks, %zu outside the bound\n",
                w, n, (int)algo, chunk, exact, bad_serial, bad_bits, bad_bound);
    GM_CHECK_EQ(bad_serial, 0);
    GM_CHECK_EQ(bad_bits, 0);
    GM_CHECK_EQ(bad_bound, 0);
    for (int r = 0; r < w; r++) {
        struct gm_xport_stats st;
        uint64_t msgs = 0;
        for (int p = 0; p < w; p++) { /* a ring rank hears only its predecessor */
            gm_xport_stats(nt->x[r], p, &st);
            msgs += st.msgs_recv;
            GM_CHECK(st.queued_bytes == 0 && !st.read_paused);
        }
        GM_CHECK(msgs > 0);
        GM_CHECK(!gm_coll_busy(c[r]));
    }
out:
    for (int r = 0; r < w; r++) {
        gm_coll_free(c[r]);
        free(buf[r]);
    }
}

static void test_allreduce(void)
{
    static const size_t sizes[] = {1, 1009, (1u << 20) / 4 + 3, (8u << 20) / 4};

    for (int w = 2; w <= 3; w++) {
        struct net nt;
        net_up(&nt, w);
        for (size_t k = 0; k < sizeof(sizes) / sizeof(sizes[0]); k++) {
            size_t n = sizes[k];
            for (int exact = 1; exact >= 0; exact--) {
                /* ring, one link frame per message (what the agent's ranks use) */
                allreduce_case(&nt, n, GM_COLL_RING, GM_XPORT_CHUNK, exact);
                /* direct: every rank's whole buffer to every other */
                allreduce_case(&nt, n, GM_COLL_DIRECT, GM_XPORT_CHUNK, exact);
            }
            /* messages of 1 MiB + 20 bytes: several link frames each, reassembled */
            if (n > 1000)
                allreduce_case(&nt, n, GM_COLL_RING, (1u << 20) + 20, 0);
        }
        net_down(&nt);
    }
}

/* --- (b) refusals ------------------------------------------------------------------ */

struct rcv {
    int calls, status, in_call;
    size_t len;
    uint8_t first;
    int rearm; /* re-arm from the callback while this many messages are still wanted */
    int want, got, order_bad;
    struct gm_transport *t;
};

static void rcv_cb(struct gm_transport *t, int peer, int status, const void *buf, size_t len,
                   void *arg)
{
    struct rcv *r = arg;

    r->calls++;
    r->status = status;
    r->len = len;
    r->first = buf != NULL && len > 0 ? *(const uint8_t *)buf : 0;
    if (status != 0 && buf != NULL)
        r->order_bad++; /* a failed recv has no buffer */
    if (status == 0) {
        /* message k is len bytes of (k + 1) */
        const uint8_t *b = buf;
        for (size_t i = 0; i < len; i += 4093)
            if (b[i] != (uint8_t)(r->got + 1))
                r->order_bad++;
        if (b[len - 1] != (uint8_t)(r->got + 1))
            r->order_bad++;
        r->got++;
        if (r->rearm && r->got < r->want && gm_transport_recv(t, peer, rcv_cb, r) != 0)
            r->order_bad++;
    }
}

static int rcv_called(struct net *n, void *arg)
{
    (void)n;
    return ((struct rcv *)arg)->calls > 0;
}

static struct gm_frame_hdr hdr(uint32_t gen, uint32_t seq, uint32_t len, int more)
{
    struct gm_frame_hdr h = {.type = GM_MSG_TRAIN,
                             .flags = more ? GM_FRAME_F_MORE : 0,
                             .len = len,
                             .req = gm_xport_req(gen, seq)};
    return h;
}

/* gm_xport_on_frame on an xport with no link (world 2, rank 0, frames from rank 1). */
static void test_on_frame_refusals(void)
{
    uv_loop_t loop;
    struct gm_xport *x = NULL;
    struct gm_frame_hdr h;
    uint8_t small[8] = {1, 2, 3, 4, 5, 6, 7, 8};
    const uint32_t big = 16u << 20;
    uint8_t *bulk = calloc(big, 1);
    struct gm_xport_stats st;

    GM_CHECK(bulk != NULL);
    GM_CHECK_OK(uv_loop_init(&loop));
    GM_CHECK_OK(gm_xport_new(&loop, GEN, 0, 2, &x));
    if (x == NULL || bulk == NULL)
        goto out;

    h = hdr(GEN, 0, sizeof(small), 0); /* message 0, one frame: accepted (queued) */
    GM_CHECK_OK(gm_xport_on_frame(x, 1, &h, small));
    h = hdr(GEN, 0, sizeof(small), 0); /* its sequence number again */
    GM_CHECK_ERR(gm_xport_on_frame(x, 1, &h, small), GM_ERR_PROTO);
    h = hdr(GEN, 5, sizeof(small), 0); /* one from the future */
    GM_CHECK_ERR(gm_xport_on_frame(x, 1, &h, small), GM_ERR_PROTO);
    h = hdr(GEN + 1, 1, sizeof(small), 0); /* the next message, another generation */
    GM_CHECK_ERR(gm_xport_on_frame(x, 1, &h, small), GM_ERR_PROTO);
    h = hdr(GEN - 1, 1, sizeof(small), 0);
    GM_CHECK_ERR(gm_xport_on_frame(x, 1, &h, small), GM_ERR_PROTO);
    h = hdr(GEN, 1, 0, 0); /* a zero-length chunk, alone ... */
    GM_CHECK_ERR(gm_xport_on_frame(x, 1, &h, small), GM_ERR_PROTO);
    h = hdr(GEN, 1, 0, 1); /* ... or as a first chunk */
    GM_CHECK_ERR(gm_xport_on_frame(x, 1, &h, small), GM_ERR_PROTO);
    h = hdr(GEN, 1, sizeof(small), 0); /* frames "from" this rank and from no rank */
    GM_CHECK_ERR(gm_xport_on_frame(x, 0, &h, small), GM_ERR_PROTO);
    GM_CHECK_ERR(gm_xport_on_frame(x, 2, &h, small), GM_ERR_PROTO);
    GM_CHECK_ERR(gm_xport_on_frame(x, -1, &h, small), GM_ERR_PROTO);

    /* message 1 in three chunks, a zero-length middle chunk refused */
    h = hdr(GEN, 1, 3, 1);
    GM_CHECK_OK(gm_xport_on_frame(x, 1, &h, small));
    h = hdr(GEN, 1, 0, 1);
    GM_CHECK_ERR(gm_xport_on_frame(x, 1, &h, small), GM_ERR_PROTO);
    h = hdr(GEN, 2, 3, 0); /* message 2 while message 1 is open: interleaved */
    GM_CHECK_ERR(gm_xport_on_frame(x, 1, &h, small), GM_ERR_PROTO);
    h = hdr(GEN, 1, 5, 0); /* the rest of message 1 */
    GM_CHECK_OK(gm_xport_on_frame(x, 1, &h, small + 3));
    gm_xport_stats(x, 1, &st);
    GM_CHECK_EQ(st.msgs_recv, 2);
    GM_CHECK_EQ(st.queued_bytes, 16);
    GM_CHECK(!st.read_paused); /* no link to pause */

    /* message 2 is GM_XPORT_MSG_MAX bytes exactly: accepted */
    for (uint32_t off = 0; off < GM_XPORT_MSG_MAX; off += big) {
        h = hdr(GEN, 2, big, off + big < GM_XPORT_MSG_MAX);
        GM_CHECK_OK(gm_xport_on_frame(x, 1, &h, bulk));
    }
    gm_xport_stats(x, 1, &st);
    GM_CHECK_EQ(st.msgs_recv, 3);
    GM_CHECK_EQ(st.queued_bytes, 16 + GM_XPORT_MSG_MAX);
    /* message 3 is one byte more: refused at that byte, with or without more to come */
    for (uint32_t off = 0; off < GM_XPORT_MSG_MAX; off += big) {
        h = hdr(GEN, 3, big, 1);
        GM_CHECK_OK(gm_xport_on_frame(x, 1, &h, bulk));
    }
    h = hdr(GEN, 3, 1, 0);
    GM_CHECK_ERR(gm_xport_on_frame(x, 1, &h, small), GM_ERR_PROTO);
    h = hdr(GEN, 3, 1, 1);
    GM_CHECK_ERR(gm_xport_on_frame(x, 1, &h, small), GM_ERR_PROTO);
    gm_xport_stats(x, 1, &st);
    GM_CHECK_EQ(st.msgs_recv, 3); /* nothing of message 3 was delivered */
out:
    gm_xport_close(x);
    while (uv_run(&loop, UV_RUN_NOWAIT) != 0)
        ;
    GM_CHECK_OK(uv_loop_close(&loop));
    free(bulk);
}

/* When the peers' data came (gm_xport_rx_mark, _rx_first, _rx_last_first), world 3, rank 0:
 * nothing since the mark reads 0; rank 1's frame sets both; rank 2's, later, only the last;
 * a new mark with rank 1's message still queued (undelivered: nobody asked for it) reads the
 * mark's own time for both. */
static void test_rx_times(void)
{
    uv_loop_t loop;
    struct gm_xport *x = NULL;
    struct gm_frame_hdr h;
    uint8_t small[8] = {1, 2, 3, 4, 5, 6, 7, 8};
    uint64_t t1, t2, m;

    GM_CHECK_OK(uv_loop_init(&loop));
    GM_CHECK_OK(gm_xport_new(&loop, GEN, 0, 3, &x));
    if (x == NULL)
        goto out;
    gm_xport_rx_mark(x);
    GM_CHECK_EQ(gm_xport_rx_first(x), 0);
    GM_CHECK_EQ(gm_xport_rx_last_first(x), 0);
    h = hdr(GEN, 0, sizeof(small), 0);
    GM_CHECK_OK(gm_xport_on_frame(x, 1, &h, small));
    t1 = gm_xport_rx_first(x);
    GM_CHECK(t1 > 0 && gm_xport_rx_last_first(x) == t1);
    while (gm_time_mono_ns() == t1)
        ;
    h = hdr(GEN, 0, sizeof(small), 0);
    GM_CHECK_OK(gm_xport_on_frame(x, 2, &h, small));
    t2 = gm_xport_rx_last_first(x);
    GM_CHECK(t2 > t1 && gm_xport_rx_first(x) == t1);
    while (gm_time_mono_ns() == t2)
        ;
    gm_xport_rx_mark(x); /* both messages still queued: here already */
    m = gm_xport_rx_first(x);
    GM_CHECK(m > t2 && gm_xport_rx_last_first(x) == m);
out:
    gm_xport_close(x);
    while (uv_run(&loop, UV_RUN_NOWAIT) != 0)
        ;
    GM_CHECK_OK(uv_loop_close(&loop));
}

static int link_closed_01(struct net *n, void *arg)
{
    (void)arg;
    return n->closed[0][1] && n->closed[1][0];
}

/* Over a link: rank 1 sends bad TRAIN frames to rank 0, which answers ERROR and
 * closes; rank 0's armed recv from rank 1 fails; the rank 0 - 2 link stays up. */
static void bad_frame_over_link(struct gm_frame_hdr h, const char *what)
{
    struct net n;
    struct rcv r = {0};
    uint8_t payload[64];

    memset(payload, 1, sizeof(payload));
    net_up(&n, 3);
    if (n.link[1][0] == NULL || n.x[0] == NULL)
        goto out;
    GM_CHECK_OK(gm_transport_recv(gm_xport_transport(n.x[0]), 1, rcv_cb, &r));
    GM_CHECK_EQ(r.calls, 0);
    /* a good message first (sequence 0), then the bad frame */
    GM_CHECK_OK(gm_link_send(n.link[1][0], GM_MSG_TRAIN, gm_xport_req(GEN, 0), payload, 7));
    GM_CHECK_OK(gm_link_send(n.link[1][0], GM_MSG_TRAIN, h.req, payload, h.len));
    GM_CHECK(run_until(&n, link_closed_01, NULL, 10000));
    GM_CHECK_EQ(r.calls, 1); /* the good message */
    GM_CHECK_OK(r.status);
    GM_CHECK_EQ(r.len, 7);
    if (n.proto[0][1] != GM_ERR_PROTO || n.err_frame[1][0] != GM_ERR_PROTO)
        fprintf(stderr, "  case: %s\n", what);
    GM_CHECK_EQ(n.proto[0][1], GM_ERR_PROTO);
    GM_CHECK_EQ(n.err_frame[1][0], GM_ERR_PROTO); /* ERROR came before the close */
    GM_CHECK_ERR(n.close_err[1][0], GM_ERR_PROTO);
    /* later recvs and sends to the closed peer fail at once; the others still work */
    GM_CHECK(gm_transport_recv(gm_xport_transport(n.x[0]), 1, rcv_cb, &r) < 0);
    GM_CHECK(n.link[0][2] != NULL && n.link[2][0] != NULL && !n.closed[0][2]);
out:
    net_down(&n);
}

static void test_bad_frames_over_links(void)
{
    bad_frame_over_link(hdr(GEN, 5, 8, 0), "wrong sequence number");
    bad_frame_over_link(hdr(GEN, 0, 8, 0), "a sequence number again");
    bad_frame_over_link(hdr(GEN + 3, 1, 8, 0), "wrong generation");
    bad_frame_over_link(hdr(GEN, 1, 0, 0), "zero-length chunk");
}

/* --- (c) a link lost mid-operation ---------------------------------------------- */

struct sent {
    int calls, status;
};

static void sent_cb(struct gm_transport *t, int peer, int status, void *arg)
{
    struct sent *s = arg;

    (void)t;
    (void)peer;
    s->calls++;
    s->status = status;
}

static int sent_called(struct net *n, void *arg)
{
    (void)n;
    return ((struct sent *)arg)->calls > 0;
}

static void test_link_lost_recv(void)
{
    struct net n;
    struct rcv r = {0};
    struct sent s = {0};
    uint8_t one = 1;

    net_up(&n, 2);
    if (n.x[0] == NULL || n.link[1][0] == NULL)
        goto out;
    GM_CHECK_OK(gm_transport_recv(gm_xport_transport(n.x[0]), 1, rcv_cb, &r));
    gm_link_close(n.link[1][0], GM_ERR_ABORTED); /* the peer goes away */
    GM_CHECK_EQ(r.calls, 0);
    GM_CHECK(run_until(&n, rcv_called, &r, 10000));
    GM_CHECK_EQ(r.calls, 1);
    GM_CHECK(r.status < 0);
    GM_CHECK_EQ(r.len, 0);
    GM_CHECK_EQ(r.order_bad, 0);
    run_for(&n, 50); /* exactly once */
    GM_CHECK_EQ(r.calls, 1);
    /* afterwards: recv and send to that peer fail at once, no callback */
    GM_CHECK(gm_transport_recv(gm_xport_transport(n.x[0]), 1, rcv_cb, &r) < 0);
    GM_CHECK(gm_transport_send(gm_xport_transport(n.x[0]), 1, &one, 1, sent_cb, &s) < 0);
    run_for(&n, 20);
    GM_CHECK_EQ(s.calls, 0);
    GM_CHECK_EQ(r.calls, 1);
out:
    net_down(&n);
}

/* A send handed to the link before it closes completes with an error, once. */
static void test_link_lost_send(void)
{
    struct net n;
    struct sent s = {0};
    const size_t len = 32u << 20;
    uint8_t *data = malloc(len);

    net_up(&n, 2);
    GM_CHECK(data != NULL);
    if (n.x[0] == NULL || n.link[0][1] == NULL || data == NULL)
        goto out;
    memset(data, 1, len);
    /* 32 MiB with no recv armed on rank 1: most of it is still queued when the link dies */
    GM_CHECK_OK(gm_transport_send(gm_xport_transport(n.x[0]), 1, data, len, sent_cb, &s));
    GM_CHECK_EQ(s.calls, 0);
    gm_link_close(n.link[1][0], GM_ERR_ABORTED);
    GM_CHECK(run_until(&n, sent_called, &s, 10000));
    GM_CHECK_EQ(s.calls, 1);
    GM_CHECK(s.status < 0);
out:
    net_down(&n);
    free(data);
}

struct progress {
    int rank;
};

static int some_bytes(struct net *n, void *arg)
{
    struct gm_xport_stats st;
    int r = ((struct progress *)arg)->rank;
    uint64_t got = 0;

    for (int p = 0; p < n->world; p++) {
        gm_xport_stats(n->x[r], p, &st);
        got += st.bytes_recv;
    }
    return got > 0;
}

static void test_link_lost_collective(void)
{
    const size_t n = (8u << 20) / 4;
    struct net nt;
    struct gm_coll *c[MAXW] = {0};
    float *buf[MAXW] = {0};
    struct opst s[MAXW];
    struct opset os = {.s = s, .world = 3};
    struct progress pr = {.rank = 1};
    struct gm_coll_config cfg = {.generation = GEN, .chunk_bytes = GM_XPORT_CHUNK};
    struct gm_coll_opts o = {.algo = GM_COLL_RING, .codec = GM_CODEC_FP32};

    memset(s, 0, sizeof(s));
    net_up(&nt, 3);
    for (int r = 0; r < 3; r++) {
        buf[r] = calloc(n, sizeof(float));
        c[r] = gm_coll_new(gm_xport_transport(nt.x[r]), &cfg);
        GM_CHECK(buf[r] != NULL && c[r] != NULL);
        if (buf[r] == NULL || c[r] == NULL)
            goto out;
    }
    for (int r = 0; r < 3; r++)
        GM_CHECK_OK(gm_coll_allreduce_start(c[r], buf[r], n, &o, coll_done, &s[r]));
    GM_CHECK(run_until(&nt, some_bytes, &pr, 10000)); /* the ring is turning */
    GM_CHECK(nt.link[1][2] != NULL);
    if (nt.link[1][2] != NULL)
        gm_link_close(nt.link[1][2], GM_ERR_ABORTED); /* ranks 1 and 2 lose their link */
    GM_CHECK(run_until(&nt, ops_done, &os, 20000));   /* no hang */
    for (int r = 0; r < 3; r++) {
        GM_CHECK_EQ(s[r].done, 1);
        GM_CHECK(s[r].status < 0); /* every rank fails, rank 0 too (its peers abort) */
        GM_CHECK(!gm_coll_busy(c[r]));
    }
    GM_CHECK(!nt.closed[0][1] && !nt.closed[0][2]); /* only that link went */
out:
    for (int r = 0; r < 3; r++) {
        gm_coll_free(c[r]);
        free(buf[r]);
    }
    net_down(&nt);
}

/* --- (d) backpressure ------------------------------------------------------------ */

#define BP_MSGS 16
#define BP_LEN (4u << 20)

struct bp {
    struct sent s[BP_MSGS];
};

static int bp_paused(struct net *n, void *arg)
{
    struct gm_xport_stats st;

    (void)arg;
    gm_xport_stats(n->x[0], 1, &st);
    return st.read_paused;
}

static int sends_done(const struct bp *b)
{
    int k = 0;

    for (int i = 0; i < BP_MSGS; i++)
        k += b->s[i].calls;
    return k;
}

static int bp_all_sent(struct net *n, void *arg)
{
    (void)n;
    return sends_done(arg) == BP_MSGS;
}

static int bp_all(struct net *n, void *arg)
{
    struct rcv *r = arg;

    (void)n;
    return r->got == r->want;
}

static void test_backpressure(void)
{
    struct net n;
    struct bp b;
    struct rcv r = {.rearm = 1, .want = BP_MSGS};
    uint8_t *data[BP_MSGS] = {0};
    struct gm_xport_stats st;
    uint64_t rx;

    memset(&b, 0, sizeof(b));
    net_up(&n, 2);
    if (n.x[0] == NULL || n.x[1] == NULL)
        goto out;
    for (int i = 0; i < BP_MSGS; i++) {
        data[i] = malloc(BP_LEN);
        GM_CHECK(data[i] != NULL);
        if (data[i] == NULL)
            goto out;
        memset(data[i], i + 1, BP_LEN);
        GM_CHECK_OK(
            gm_transport_send(gm_xport_transport(n.x[1]), 0, data[i], BP_LEN, sent_cb, &b.s[i]));
    }
    /* 64 MiB towards rank 0, which arms no recv: the queue passes the maximum, the link pauses */
    GM_CHECK(run_until(&n, bp_paused, NULL, 20000));
    gm_xport_stats(n.x[0], 1, &st);
    GM_CHECK(st.queued_bytes > GM_XPORT_QUEUE_MAX);
    GM_CHECK(st.queued_bytes <= GM_XPORT_QUEUE_MAX + BP_LEN);
    rx = n.link[0][1] != NULL ? gm_link_bytes_received(n.link[0][1]) : 0;
    run_for(&n, 300); /* paused: not one more byte is read */
    GM_CHECK(n.link[0][1] != NULL);
    if (n.link[0][1] != NULL)
        GM_CHECK_EQ(gm_link_bytes_received(n.link[0][1]), rx);
    gm_xport_stats(n.x[0], 1, &st);
    GM_CHECK(st.read_paused);
    GM_CHECK(st.msgs_recv < BP_MSGS);
    GM_CHECK(sends_done(&b) < BP_MSGS); /* the sender is held back too */
    GM_CHECK_EQ(r.calls, 0);

    /* arming drains the queue in order, resumes the link, and every message arrives */
    r.t = gm_xport_transport(n.x[0]);
    GM_CHECK_OK(gm_transport_recv(r.t, 1, rcv_cb, &r));
    GM_CHECK_EQ(r.calls, 0); /* never inside the call */
    GM_CHECK(run_until(&n, bp_all, &r, 30000));
    GM_CHECK_EQ(r.got, BP_MSGS);
    GM_CHECK_EQ(r.order_bad, 0);
    GM_CHECK_EQ(r.len, BP_LEN);
    gm_xport_stats(n.x[0], 1, &st);
    GM_CHECK(!st.read_paused);
    GM_CHECK_EQ(st.queued_bytes, 0);
    GM_CHECK_EQ(st.msgs_recv, BP_MSGS);
    GM_CHECK_EQ(st.bytes_recv, (uint64_t)BP_MSGS * BP_LEN);
    for (int i = 0; i < BP_MSGS; i++) {
        GM_CHECK(run_until(&n, sent_called, &b.s[i], 10000));
        GM_CHECK_EQ(b.s[i].calls, 1);
        GM_CHECK_OK(b.s[i].status);
    }
    GM_CHECK(!n.closed[0][1]);
out:
    net_down(&n);
    for (int i = 0; i < BP_MSGS; i++)
        free(data[i]);
}

static int bp_all_read(struct net *n, void *arg)
{
    struct gm_xport_stats st;

    (void)arg;
    gm_xport_stats(n->x[0], 1, &st);
    return st.msgs_recv == BP_MSGS;
}

/* Arms rank 0's recv from rank 1: every message comes, in order, and every send completes. */
static void bp_drain(struct net *n, struct bp *b)
{
    struct rcv r = {.rearm = 1, .want = BP_MSGS};
    struct gm_xport_stats st;

    r.t = gm_xport_transport(n->x[0]);
    GM_CHECK_OK(gm_transport_recv(r.t, 1, rcv_cb, &r));
    GM_CHECK(run_until(n, bp_all, &r, 30000));
    GM_CHECK_EQ(r.got, BP_MSGS);
    GM_CHECK_EQ(r.order_bad, 0);
    gm_xport_stats(n->x[0], 1, &st);
    GM_CHECK(!st.read_paused);
    GM_CHECK_EQ(st.queued_bytes, 0);
    for (int i = 0; i < BP_MSGS; i++) {
        GM_CHECK(run_until(n, sent_called, &b->s[i], 10000));
        GM_CHECK_OK(b->s[i].status);
    }
    GM_CHECK(!n->closed[0][1]);
}

static bool bp_send_all(struct net *n, struct bp *b, uint8_t *data[BP_MSGS])
{
    for (int i = 0; i < BP_MSGS; i++) {
        data[i] = malloc(BP_LEN);
        GM_CHECK(data[i] != NULL);
        if (data[i] == NULL)
            return false;
        memset(data[i], i + 1, BP_LEN);
        GM_CHECK_OK(
            gm_transport_send(gm_xport_transport(n->x[1]), 0, data[i], BP_LEN, sent_cb, &b->s[i]));
    }
    return true;
}

/*
 * (e) the queue limit follows the group's largest op (issue 21): a peer that sends a whole
 * collective while we are still busy with another is read to the end, never paused, however
 * far past GM_XPORT_QUEUE_MAX that is; a limit under the backlog pauses at that limit, and
 * raising it resumes the link.
 */
static void test_queue_limit(void)
{
    const size_t total = (size_t)BP_MSGS * BP_LEN;
    struct net n;
    struct bp b;
    uint8_t *data[BP_MSGS] = {0};
    struct gm_xport_stats st;

    /* the arithmetic: one op and the start of the next, with framing, above the floor */
    GM_CHECK(gm_xport_queue_max_for(0) > GM_XPORT_QUEUE_MAX);
    GM_CHECK(gm_xport_queue_max_for(total) >= 2 * total + GM_XPORT_QUEUE_MAX);
    GM_CHECK(gm_xport_queue_max_for(total) <= 2 * total + GM_XPORT_QUEUE_MAX + (64u << 10));
    GM_CHECK_EQ(gm_xport_queue_max_for(SIZE_MAX / 2), SIZE_MAX);

    /* a limit that covers the op: all 64 MiB read with no recv armed, the link never paused */
    memset(&b, 0, sizeof(b));
    net_up(&n, 2);
    if (n.x[0] == NULL || n.x[1] == NULL)
        goto out;
    gm_xport_set_queue_max(n.x[0], 1); /* the floor */
    GM_CHECK_EQ(gm_xport_queue_max(n.x[0]), GM_XPORT_QUEUE_MAX);
    gm_xport_set_queue_max(n.x[0], gm_xport_queue_max_for(total));
    if (!bp_send_all(&n, &b, data))
        goto out;
    GM_CHECK(run_until(&n, bp_all_read, NULL, 30000));
    gm_xport_stats(n.x[0], 1, &st);
    GM_CHECK(!st.read_paused);
    GM_CHECK_EQ(st.queued_bytes, total);
    GM_CHECK_EQ(st.queued_peak, total);
    GM_CHECK(sends_done(&b) == BP_MSGS || run_until(&n, bp_all_sent, &b, 10000));
    bp_drain(&n, &b);
    net_down(&n);
    for (int i = 0; i < BP_MSGS; i++) {
        free(data[i]);
        data[i] = NULL;
    }

    /* a limit under the backlog pauses there; raising it past twice the queue resumes */
    memset(&b, 0, sizeof(b));
    net_up(&n, 2);
    if (n.x[0] == NULL || n.x[1] == NULL)
        goto out;
    gm_xport_set_queue_max(n.x[0], 2 * GM_XPORT_QUEUE_MAX);
    if (!bp_send_all(&n, &b, data))
        goto out;
    GM_CHECK(run_until(&n, bp_paused, NULL, 20000));
    gm_xport_stats(n.x[0], 1, &st);
    GM_CHECK(st.queued_bytes > 2 * GM_XPORT_QUEUE_MAX);
    GM_CHECK(st.queued_bytes <= 2 * GM_XPORT_QUEUE_MAX + BP_LEN);
    gm_xport_set_queue_max(n.x[0], 2 * total);
    gm_xport_stats(n.x[0], 1, &st);
    GM_CHECK(!st.read_paused);
    GM_CHECK(run_until(&n, bp_all_read, NULL, 30000));
    gm_xport_stats(n.x[0], 1, &st);
    GM_CHECK(!st.read_paused);
    GM_CHECK_EQ(st.queued_bytes, total);
    bp_drain(&n, &b);
out:
    net_down(&n);
    for (int i = 0; i < BP_MSGS; i++)
        free(data[i]);
}

int main(void)
{
    GM_TEST_RUN(test_on_frame_refusals);
    GM_TEST_RUN(test_rx_times);
    GM_TEST_RUN(test_allreduce);
    GM_TEST_RUN(test_bad_frames_over_links);
    GM_TEST_RUN(test_link_lost_recv);
    GM_TEST_RUN(test_link_lost_send);
    GM_TEST_RUN(test_link_lost_collective);
    GM_TEST_RUN(test_backpressure);
    GM_TEST_RUN(test_queue_limit);
    return gm_test_finish("test_xport");
}
