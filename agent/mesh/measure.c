/*
 * agent/mesh/measure.c - see measure.h.
 *
 * Ownership: a->zeros (PROBE_MAX bytes, made on the first probe) is the data
 * of every probe round; a struct gm_reach lives on a->reaches until it
 * finishes and is freed when both its handles have closed.
 */
#include "agent/mesh/measure.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>

#include "agent/core/state.h"
#include "common/assert.h"
#include "common/log.h"
#include "common/time.h"

#define PROBE_FIRST (1u << 20)      /* throughput probe: first round's bytes */
#define PROBE_MAX (32u << 20)       /* largest round */
#define PROBE_TARGET_US 200000      /* a round shorter than this is repeated 4x larger */
#define RATE_MIN_BYTES (256u << 10) /* trains shorter than this are not measured */
#define REAL_MIN_US 50000           /* real transfers shorter than this do not count */
#define REACH_TIMEOUT_MS 3000
#define STATS_EVERY_S 10

void gm_measure_reset(struct gm_measure *m)
{
    free(m->remote);
    memset(m, 0, sizeof(*m));
    m->mbps_out = m->mbps_in = -1;
    m->reach_out = -1;
}

/* This end's view of the link: egress interface, class, path MTU. */
void gm_measure_link_view(struct gm_agent *a, struct gm_lctx *c)
{
    struct sockaddr_storage peer;
    socklen_t len = sizeof(peer);
    struct gm_iface eg;
    int fd = gm_link_fd(c->link);

    c->cls = GM_CLASS_WAN;
    c->mtu = 0;
    c->iface[0] = '\0';
    if (fd < 0 || getpeername(fd, (struct sockaddr *)&peer, &len) != 0)
        return;
    if (gm_iface_egress((struct sockaddr *)&peer, a->cfg.tunnels, &eg) == 0) {
        c->cls = gm_iface_classify((struct sockaddr *)&peer, &eg);
        snprintf(c->iface, sizeof(c->iface), "%s", eg.name);
        c->mtu = eg.mtu;
    }
    if (gm_iface_path_mtu(fd) > 0)
        c->mtu = gm_iface_path_mtu(fd);
}

static void probe_done_cb(void *arg, int err)
{
    (void)arg;
    (void)err; /* the data is the agent's zero block; nothing to free */
}

static int probe_round(struct gm_agent *a, struct gm_link *l, struct gm_peer *p, uint32_t size)
{
    int err;

    GM_ASSERT(size <= PROBE_MAX);
    if (a->zeros == NULL) {
        a->zeros = calloc(1, PROBE_MAX); /* zero pages: no memory is touched */
        if (a->zeros == NULL)
            return -ENOMEM;
    }
    p->m.probe_size = size;
    p->m.probe_req = ++a->req_seq;
    err = gm_link_send_bulk(l, GM_MSG_PROBE, p->m.probe_req, a->zeros, size, probe_done_cb, NULL);
    if (err != 0)
        p->m.probe_size = 0;
    return err;
}

static void probe_start(struct gm_agent *a, struct gm_peer *p)
{
    if (!a->cfg.measure || p->link == NULL || p->m.probe_size != 0 || p->m.mbps_out >= 0)
        return;
    gm_debug("event=probe-start peer=%s", p->node);
    gm_agent_ignore(probe_round(a, p->link, p, PROBE_FIRST));
}

enum gm_link_class gm_measure_class(const struct gm_peer *p)
{
    /* either end going through a tunnel makes it a tunnel; then wan over lan */
    enum gm_link_class a = p->m.cls_local, b = p->m.cls_remote;

    if (a == GM_CLASS_TUNNEL || b == GM_CLASS_TUNNEL)
        return GM_CLASS_TUNNEL;
    if (a == GM_CLASS_WAN || b == GM_CLASS_WAN)
        return GM_CLASS_WAN;
    return a ? a : b ? b : GM_CLASS_WAN;
}

static int link_stats_list(struct gm_agent *a, struct gm_link_stat **out, size_t *n)
{
    struct gm_link_stat *v = calloc(a->npeers ? a->npeers : 1, sizeof(*v));
    size_t i, k = 0;

    *out = NULL;
    *n = 0;
    if (v == NULL)
        return -ENOMEM;
    for (i = 0; i < a->npeers; i++) {
        struct gm_peer *p = &a->peers[i];
        if (p->link == NULL)
            continue;
        snprintf(v[k].node, sizeof(v[k].node), "%s", p->node);
        snprintf(v[k].link_class, sizeof(v[k].link_class), "%s",
                 gm_class_name(gm_measure_class(p)));
        v[k].rtt_ms = gm_link_rtt_ms(p->link) > 0 ? gm_link_rtt_ms(p->link) : -1;
        v[k].throughput_mbps = p->m.mbps_out;
        v[k].reach = p->m.reach_out;
        k++;
    }
    *out = v;
    *n = k;
    return 0;
}

/* Tells every up member what this node measured of its links. */
static void stats_push(struct gm_agent *a)
{
    struct gm_link_stat *v = NULL;
    char *json = NULL;
    size_t n = 0, len = 0, i;

    a->next_stats = gm_time_mono_ns() + (uint64_t)STATS_EVERY_S * 1000000000ull;
    if (link_stats_list(a, &v, &n) != 0 || n == 0 ||
        gm_proto_link_stats_encode(v, n, &json, &len) != 0) {
        free(v);
        return;
    }
    for (i = 0; i < a->npeers; i++)
        if (a->peers[i].link != NULL && gm_link_state(a->peers[i].link) == GM_LSTATE_UP)
            gm_agent_ignore(gm_link_send(a->peers[i].link, GM_MSG_LINK_STATS, 0, json, len));
    free(json);
    free(v);
}

unsigned gm_measure_silence_ms(const struct gm_peer *p, unsigned ping_ms, unsigned cap_ms)
{
    enum gm_link_class cls = gm_measure_class(p);
    double ms = cls == 0 || cls == GM_CLASS_LAN ? GM_SILENCE_LAN_MS : GM_SILENCE_SLOW_MS;
    double rtt = p->link != NULL ? gm_link_rtt_max_ms(p->link) : 0;
    double mbps = p->m.mbps_in > 0 ? p->m.mbps_in : p->m.mbps_out;
    double bytes =
        1.5 * (cls == 0 || cls == GM_CLASS_LAN ? GM_LINK_HIGH_WATER : GM_LINK_SLOW_HIGH_WATER);
    /* a PING answered as late as the worst fresh round trip, once more, behind what the
     * peer may have queued before the PONG (its bulk high water and the kernel's share) */
    double want = ping_ms + 2 * rtt + (mbps > 0 ? bytes * 8 / (mbps * 1e3) : 0);

    if (want > ms)
        ms = want;
    if (cap_ms != 0 && ms > cap_ms)
        ms = cap_ms;
    return (unsigned)ms;
}

void gm_measure_tick(struct gm_agent *a, uint64_t now)
{
    struct gm_link_opts o = gm_agent_link_opts(a, GM_TLS_ROLE_CLIENT);

    if (now >= a->next_stats)
        stats_push(a);
    for (size_t i = 0; i < a->npeers; i++) { /* the silence deadlines, from fresh samples */
        struct gm_peer *p = &a->peers[i];
        if (p->link != NULL && gm_link_state(p->link) == GM_LSTATE_UP)
            gm_link_set_silence_ms(p->link, gm_measure_silence_ms(p, o.ping_ms, o.timeout_ms));
    }
}

struct gm_reach {
    struct gm_agent *a;
    struct gm_reach *next, **pprev; /* the agent's list, until finished */
    char node[GM_ID_NAME_MAX + 1];
    uv_tcp_t tcp;
    uv_connect_t req;
    uv_timer_t timer;
    int result, open;
};

static void reach_closed(uv_handle_t *h)
{
    struct gm_reach *r = h->data;

    if (--r->open == 0)
        free(r);
}

static void reach_finish(struct gm_reach *r, int ok)
{
    struct gm_peer *p;

    if (r->result != 0)
        return;
    r->result = ok ? 1 : -1;
    *r->pprev = r->next;
    if (r->next != NULL)
        r->next->pprev = r->pprev;
    p = r->a->stopping ? NULL : gm_agent_peer_find(r->a, r->node);
    if (p != NULL && p->link != NULL) {
        p->m.reach_out = ok;
        if (!ok)
            gm_warn("event=reach-failed peer=%s address=%s reason=\"it dialed us, but its listen "
                    "address does not accept connections from here\"",
                    p->node, p->address);
        stats_push(r->a);
    }
    uv_close((uv_handle_t *)&r->tcp, reach_closed);
    uv_close((uv_handle_t *)&r->timer, reach_closed);
}

static void reach_connect_cb(uv_connect_t *req, int status)
{
    struct gm_reach *r = req->data;

    reach_finish(r, status == 0);
}

static void reach_timeout_cb(uv_timer_t *t)
{
    reach_finish(t->data, 0);
}

/* Checks that p's listen address accepts a TCP connection from here (the
 * direction the link did not prove).  A bare connect, closed at once: the
 * peer sees a connection that ends before its handshake and says nothing. */
static void reach_start(struct gm_agent *a, struct gm_peer *p)
{
    struct sockaddr_storage ss;
    struct gm_reach *r;

    if (a->stopping || gm_proto_addr_parse(p->address, &ss) != 0)
        return;
    r = calloc(1, sizeof(*r));
    if (r == NULL)
        return;
    r->a = a;
    snprintf(r->node, sizeof(r->node), "%s", p->node);
    gm_agent_ignore(uv_tcp_init(&a->loop, &r->tcp));
    gm_agent_ignore(uv_timer_init(&a->loop, &r->timer));
    r->tcp.data = r->timer.data = r->req.data = r;
    r->open = 2;
    r->next = a->reaches;
    r->pprev = &a->reaches;
    if (a->reaches != NULL)
        a->reaches->pprev = &r->next;
    a->reaches = r;
    if (uv_tcp_connect(&r->req, &r->tcp, (struct sockaddr *)&ss, reach_connect_cb) != 0 ||
        uv_timer_start(&r->timer, reach_timeout_cb, REACH_TIMEOUT_MS, 0) != 0)
        reach_finish(r, 0);
}

void gm_measure_stop(struct gm_agent *a)
{
    while (a->reaches != NULL)
        reach_finish(a->reaches, 0);
}

void gm_measure_free(struct gm_agent *a)
{
    free(a->zeros);
    a->zeros = NULL;
}

void gm_measure_link_init(struct gm_peer *p, const struct gm_lctx *c, const char *remote_class,
                          int remote_mtu)
{
    gm_measure_reset(&p->m);
    p->m.cls_local = c->cls;
    p->m.mtu_local = c->mtu;
    snprintf(p->m.iface, sizeof(p->m.iface), "%s", c->iface);
    p->m.cls_remote = strcmp(remote_class, "tunnel") == 0 ? GM_CLASS_TUNNEL
                      : strcmp(remote_class, "wan") == 0  ? GM_CLASS_WAN
                      : strcmp(remote_class, "lan") == 0  ? GM_CLASS_LAN
                                                          : 0;
    p->m.mtu_remote = remote_mtu;
}

void gm_measure_link_start(struct gm_agent *a, struct gm_peer *p, int dialed)
{
    if (dialed) {
        p->m.reach_out = 1;        /* this link is the proof */
        p->m.probe_after_pong = 1; /* the dialer measures first, then the other end */
    } else {
        reach_start(a, p);
    }
}

void gm_measure_link_down(struct gm_measure *m)
{
    m->probe_size = 0;
}

/* Bulk and probe trains: the receiver times each one from its first chunk to
 * its last and tells the sender (RATE). */
static int rx_train(struct gm_agent *a, struct gm_link *l, const struct gm_frame_hdr *h)
{
    struct gm_lctx *c = gm_link_data(l);
    struct gm_peer *p = gm_agent_peer_find(a, c->node);
    uint64_t now = gm_time_mono_ns();
    struct gm_msg_rate r;
    char *json = NULL;
    size_t len = 0;

    if (!c->rx_active || c->rx_req != h->req || c->rx_type != h->type) {
        c->rx_active = 1;
        c->rx_type = h->type;
        c->rx_req = h->req;
        c->rx_t0 = now;
        c->rx_first = h->len;
        c->rx_bytes = 0;
    } else {
        c->rx_bytes += h->len;
    }
    if (h->flags & GM_FRAME_F_MORE)
        return 0;
    c->rx_active = 0;
    if (c->rx_bytes < RATE_MIN_BYTES || now <= c->rx_t0)
        return 0;
    r.req = h->req;
    r.bytes = c->rx_bytes;
    r.us = (now - c->rx_t0) / 1000;
    if (r.us == 0)
        return 0;
    if (p != NULL && (h->type == GM_MSG_PROBE || r.us >= REAL_MIN_US))
        p->m.mbps_in = (double)r.bytes * 8.0 / (double)r.us;
    if (gm_proto_rate_encode(&r, &json, &len) != 0)
        return 0;
    return gm_agent_send_json(l, GM_MSG_RATE, json, len, 0);
}

static int h_probe(struct gm_agent *a, struct gm_link *l, const struct gm_frame_hdr *h,
                   const uint8_t *p)
{
    struct gm_lctx *c = gm_link_data(l);
    struct gm_peer *peer = gm_agent_peer_find(a, c->node);

    (void)p;
    if (h->len == 0) {
        /* the peer's probe is over: now ours, so the two do not share the link */
        if (peer != NULL && !c->dialed)
            probe_start(a, peer);
        return 0;
    }
    return rx_train(a, l, h);
}

static int h_rate(struct gm_agent *a, struct gm_link *l, const struct gm_frame_hdr *h,
                  const uint8_t *p)
{
    struct gm_lctx *c = gm_link_data(l);
    struct gm_peer *peer = gm_agent_peer_find(a, c->node);
    struct gm_msg_rate r;
    double mbps;

    if (gm_proto_rate_decode(p, h->len, &r) != 0)
        return gm_agent_refuse(l, GM_ERR_PROTO, "malformed rate");
    if (peer == NULL)
        return 0;
    mbps = (double)r.bytes * 8.0 / (double)r.us;
    if (peer->m.probe_size != 0 && r.req == peer->m.probe_req) {
        if (r.us < PROBE_TARGET_US && peer->m.probe_size < PROBE_MAX) /* never past a->zeros */
            return probe_round(a, l, peer,
                               peer->m.probe_size < PROBE_MAX / 4 ? peer->m.probe_size * 4
                                                                  : PROBE_MAX);
        peer->m.probe_size = 0;
        peer->m.mbps_out = mbps;
        gm_notice("event=link-measured peer=%s class=%s iface=%s throughput_mbps=%.1f "
                  "rtt_ms=%.3f mtu=%d",
                  peer->node, gm_class_name(gm_measure_class(peer)), c->iface, mbps,
                  gm_link_rtt_ms(l), c->mtu);
        gm_agent_ignore(gm_link_send(l, GM_MSG_PROBE, 0, NULL, 0)); /* our probe is over */
        stats_push(a);
        return 0;
    }
    if (r.us >= REAL_MIN_US) /* a real transfer: follow the link as it changes */
        peer->m.mbps_out = peer->m.mbps_out < 0 ? mbps : 0.5 * peer->m.mbps_out + 0.5 * mbps;
    return 0;
}

static int h_link_stats(struct gm_agent *a, struct gm_link *l, const struct gm_frame_hdr *h,
                        const uint8_t *p)
{
    struct gm_lctx *c = gm_link_data(l);
    struct gm_peer *peer = gm_agent_peer_find(a, c->node);
    struct gm_link_stat *v = NULL;
    size_t n = 0;

    if (gm_proto_link_stats_decode(p, h->len, &v, &n) != 0)
        return gm_agent_refuse(l, GM_ERR_PROTO, "malformed link stats");
    if (peer == NULL) {
        free(v);
        return 0;
    }
    free(peer->m.remote);
    peer->m.remote = v;
    peer->m.nremote = n;
    return 0;
}

static int h_ping(struct gm_agent *a, struct gm_link *l, const struct gm_frame_hdr *h,
                  const uint8_t *p)
{
    (void)a;
    gm_link_pong(l, p, h->len);
    return 0;
}

static int h_pong(struct gm_agent *a, struct gm_link *l, const struct gm_frame_hdr *h,
                  const uint8_t *p)
{
    struct gm_lctx *c = gm_link_data(l);
    struct gm_peer *peer = gm_agent_peer_find(a, c->node);

    gm_link_rtt_sample(l, p, h->len);
    if (peer != NULL && peer->link == l && peer->m.probe_after_pong) {
        peer->m.probe_after_pong = 0;
        probe_start(a, peer);
    }
    return 0;
}

static int h_bulk(struct gm_agent *a, struct gm_link *l, const struct gm_frame_hdr *h,
                  const uint8_t *p)
{
    (void)p; /* no consumer yet (the collectives come with the trainer) */
    return rx_train(a, l, h);
}

static const struct gm_room_frame frames[] = {
    {GM_MSG_PING, GM_LSTATE_HELLO | GM_LSTATE_UP, h_ping},
    /* JOIN: a joiner answers the link keepalive while its join waits (agent/cluster/joiner.c) */
    {GM_MSG_PONG, GM_LSTATE_JOIN | GM_LSTATE_HELLO | GM_LSTATE_UP, h_pong},
    {GM_MSG_BULK, GM_LSTATE_UP, h_bulk},
    {GM_MSG_PROBE, GM_LSTATE_UP, h_probe},
    {GM_MSG_RATE, GM_LSTATE_UP, h_rate},
    {GM_MSG_LINK_STATS, GM_LSTATE_UP, h_link_stats},
};

static void link_up(struct gm_agent *a, struct gm_peer *p, struct gm_lctx *c)
{
    gm_measure_link_start(a, p, c->dialed);
}

static void link_down(struct gm_agent *a, struct gm_peer *p, int err)
{
    (void)a;
    (void)err;
    gm_measure_link_down(&p->m);
}

const struct gm_room gm_measure_room = {
    .name = "measure",
    .frames = frames,
    .nframes = GM_ARRAY_SIZE(frames),
    .link_up = link_up,
    .link_down = link_down,
};
