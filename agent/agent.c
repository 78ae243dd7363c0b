/*
 * agent/agent.c - see agent.h.
 *
 * Ownership: struct gm_agent owns the loop, its handles (listener, timer,
 * two signals: freed after their close callbacks, counted in handles_open),
 * the identity, the TLS context (which must outlive every link), the token
 * store and the peer table.  Each link carries a struct lctx (owned by the
 * agent's list, freed in the link's on_close).  peer.link is borrowed and
 * cleared in on_close.
 */
#include "agent/agent.h"

#include <errno.h>
#include <inttypes.h>
#include <netdb.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <jansson.h>
#include <sodium.h>

#include "agent/control.h"
#include "agent/link.h"
#include "agent/proto.h"
#include "common/assert.h"
#include "common/log.h"
#include "common/time.h"
#include "crypto/beacon.h"
#include "crypto/join.h"
#include "crypto/tls.h"
#include "crypto/token.h"
#include "discovery/discovery.h"
#include "discovery/iface.h"

#define TICK_MS 500
#define DIAL_BACKOFF_MAX_MS 5000
#define JOIN_FAILS_MAX 20 /* refused joins per window, all tokens together */
#define JOIN_FAIL_WINDOW_S 60
#define PING_MS 5000
#define TIMEOUT_MS 20000
#define MAX_HANDSHAKING 64     /* unauthenticated connections at once; more are dropped */
#define RENEW_CHECK_S 3600     /* how often the certificate's expiry is looked at */
#define EP_BACKOFF_MIN_MS 1000 /* static endpoints: first retry */
#define EP_BACKOFF_MAX_MS 30000
#define PROBE_FIRST (1u << 20)      /* throughput probe: first round's bytes */
#define PROBE_MAX (32u << 20)       /* largest round */
#define PROBE_TARGET_US 200000      /* a round shorter than this is repeated 4x larger */
#define RATE_MIN_BYTES (256u << 10) /* trains shorter than this are not measured */
#define REAL_MIN_US 50000           /* real transfers shorter than this do not count */
#define REACH_TIMEOUT_MS 3000
#define STATS_EVERY_S 10
#define JKEYS_MAX 16

enum lstate {
    LS_HANDSHAKE = 1u << 0,
    LS_JOIN = 1u << 1,  /* cert-less joiner: only JOIN_REQUEST */
    LS_HELLO = 1u << 2, /* member, waiting for its HELLO */
    LS_UP = 1u << 3,
    LS_DONE = 1u << 4, /* answered a join; closing */
};

/* What is known of the link to one member; reset when a new link comes up. */
struct measure {
    enum gm_link_class cls_local, cls_remote; /* 0: unknown */
    int mtu_local, mtu_remote;
    char iface[IF_NAMESIZE];
    double mbps_out, mbps_in; /* < 0: unknown */
    int reach_out;            /* we can open a TCP connection to it: 1, 0, -1 unknown */
    uint32_t probe_size;      /* bytes of the round in flight; 0: no probe running */
    int probe_after_pong;     /* probe once the first RTT (on the idle link) is in */
    uint64_t probe_req;
    struct gm_link_stat *remote; /* its LINK_STATS (owned) */
    size_t nremote;
};

struct peer {
    char node[GM_ID_NAME_MAX + 1];
    char address[GM_ADDR_MAX];
    struct gm_link *link; /* borrowed: the up link */
    int dialing;
    uint64_t next_dial;
    unsigned backoff_ms;
    struct measure m;
};

/* A static endpoint from the config ([discovery] peers): dialed until it
 * is linked, whoever it turns out to be (TLS says who). */
struct endpoint {
    struct gm_agent *a;
    char spec[GM_ADDR_MAX];        /* host:port as configured */
    char node[GM_ID_NAME_MAX + 1]; /* learned on the first link */
    char last_error[128];
    int dialing, resolving;
    uint64_t next_dial;
    unsigned backoff_ms;
    uv_getaddrinfo_t gai;
};

struct lctx {
    struct gm_agent *a;
    struct gm_link *link;
    struct lctx *next, **pprev;
    char node[GM_ID_NAME_MAX + 1]; /* peer, once known (dialed: expected, "" = any) */
    int dialed;
    struct endpoint *ep; /* dialed for this static endpoint */
    int duplicate;       /* closed because the pair has a link already */
    char reason[256];
    /* the view from this end, sent in HELLO */
    enum gm_link_class cls;
    int mtu;
    char iface[IF_NAMESIZE];
    /* the bulk/probe train arriving now */
    int rx_active;
    uint16_t rx_type;
    uint64_t rx_req, rx_t0, rx_bytes, rx_first;
};

struct gm_agent {
    uv_loop_t loop;
    struct gm_config cfg;
    struct gm_key *key, *cakey; /* cakey: admitter only */
    struct gm_cert *cert, *ca;
    struct gm_tls_ctx *tls;
    struct gm_token_store *tokens; /* admitter only */
    uv_tcp_t listener;
    uv_timer_t timer;
    uv_signal_t sigint, sigterm;
    struct gm_control *control;
    struct gm_disc *disc;
    uint8_t bkey[GM_BEACON_KEY_LEN];
    int have_bkey;
    struct endpoint *eps;
    size_t neps;
    uint8_t *zeros; /* PROBE_MAX bytes of zeros for probes (untouched pages) */
    uint64_t req_seq, next_stats;
    struct reach *reaches; /* reachability checks in flight */
    struct peer *peers;
    size_t npeers, cap_peers;
    struct lctx *links;
    int started, stopping, handles_open;
    char listen_addr[GM_ADDR_MAX];
    char admitter[GM_ID_NAME_MAX + 1]; /* node that issues certificates ("" if unknown) */
    uint64_t next_renew_check;
    int64_t join_fails[JOIN_FAILS_MAX];
    size_t join_fail_next;
    struct gm_agent_stats stats;
};

static const char *lstate_name(uint32_t s)
{
    switch (s) {
    case LS_HANDSHAKE:
        return "handshake";
    case LS_JOIN:
        return "join";
    case LS_HELLO:
        return "hello";
    case LS_UP:
        return "up";
    case LS_DONE:
        return "done";
    default:
        return "?";
    }
}

static void ignore(int err)
{
    (void)err;
}

/* --- peers ---------------------------------------------------------------- */

static void measure_reset(struct measure *m)
{
    free(m->remote);
    memset(m, 0, sizeof(*m));
    m->mbps_out = m->mbps_in = -1;
    m->reach_out = -1;
}

static struct peer *peer_find(struct gm_agent *a, const char *node)
{
    size_t i;

    for (i = 0; i < a->npeers; i++)
        if (strcmp(a->peers[i].node, node) == 0)
            return &a->peers[i];
    return NULL;
}

static int members_save(struct gm_agent *a)
{
    char path[GM_PATH_MAX], *buf;
    size_t i, off = 0, cap = (a->npeers + 1) * (GM_ID_NAME_MAX + GM_ADDR_MAX + 4);
    int err;

    err = gm_config_state_path(&a->cfg, "members", path, sizeof(path));
    if (err != 0)
        return err;
    buf = malloc(cap);
    if (buf == NULL)
        return -ENOMEM;
    for (i = 0; i < a->npeers; i++)
        off += (size_t)snprintf(buf + off, cap - off, "%s %s\n", a->peers[i].node,
                                a->peers[i].address);
    err = gm_id_write_file(path, buf, off, 0644);
    free(buf);
    if (err != 0)
        gm_err("event=members-save err=%d msg=\"%s\"", err, gm_strerror(err));
    return err;
}

/* Adds or updates a member; returns the entry or NULL (full/no memory). */
static struct peer *peer_upsert(struct gm_agent *a, const char *node, const char *address,
                                int *changed)
{
    struct peer *p = peer_find(a, node);

    *changed = 0;
    if (strcmp(node, a->cfg.node) == 0)
        return NULL;
    if (p == NULL) {
        if (a->npeers == a->cap_peers) {
            size_t cap = a->cap_peers ? 2 * a->cap_peers : 8;
            struct peer *np;
            size_t i;
            if (cap > GM_MEMBERS_MAX)
                return NULL;
            np = realloc(a->peers, cap * sizeof(*np));
            if (np == NULL)
                return NULL;
            a->peers = np;
            a->cap_peers = cap;
            /* links point at peers by name only: fix nothing */
            for (i = a->npeers; i < cap; i++)
                memset(&a->peers[i], 0, sizeof(a->peers[i]));
        }
        p = &a->peers[a->npeers++];
        memset(p, 0, sizeof(*p));
        measure_reset(&p->m);
        snprintf(p->node, sizeof(p->node), "%s", node);
        *changed = 1;
    }
    if (strcmp(p->address, address) != 0) {
        snprintf(p->address, sizeof(p->address), "%s", address);
        *changed = 1;
    }
    return p;
}

/* Reads state file name (its path into path) into a malloc'd *text; a missing
 * file is 0 with *text NULL. */
static int state_read(const struct gm_agent *a, const char *name, char path[GM_PATH_MAX],
                      char **text)
{
    size_t len = 0;
    int err = gm_config_state_path(&a->cfg, name, path, GM_PATH_MAX);

    *text = NULL;
    if (err == 0)
        err = gm_id_read_file(path, 1 << 20, text, &len);
    return err == -ENOENT ? 0 : err;
}

static int members_load(struct gm_agent *a)
{
    char path[GM_PATH_MAX], *text = NULL, *line, *save = NULL;
    int err = state_read(a, "members", path, &text), changed;

    if (err != 0 || text == NULL)
        return err;
    for (line = strtok_r(text, "\n", &save); line != NULL; line = strtok_r(NULL, "\n", &save)) {
        char node[GM_ID_NAME_MAX + 1], addr[GM_ADDR_MAX];
        struct sockaddr_storage ss;
        if (sscanf(line, "%63s %63s", node, addr) != 2 || !gm_id_name_valid(node) ||
            gm_proto_addr_parse(addr, &ss) != 0) {
            gm_err("event=members-bad-line file=%s", path);
            err = GM_ERR_CONFIG;
            break;
        }
        (void)peer_upsert(a, node, addr, &changed);
    }
    free(text);
    return err;
}

static int should_dial(const struct gm_agent *a, const struct peer *p)
{
    return strcmp(a->cfg.node, p->node) < 0;
}

/* --- links ---------------------------------------------------------------- */

static int on_up(struct gm_link *l);
static int on_frame(struct gm_link *l, const struct gm_frame_hdr *h, const uint8_t *payload);
static void on_close(struct gm_link *l, int err);

static const struct gm_link_ops link_ops = {
    .on_up = on_up,
    .on_frame = on_frame,
    .on_close = on_close,
};

static struct lctx *lctx_new(struct gm_agent *a)
{
    struct lctx *c = calloc(1, sizeof(*c));

    if (c == NULL)
        return NULL;
    c->a = a;
    c->next = a->links;
    c->pprev = &a->links;
    if (a->links != NULL)
        a->links->pprev = &c->next;
    a->links = c;
    return c;
}

static void lctx_free(struct lctx *c)
{
    *c->pprev = c->next;
    if (c->next != NULL)
        c->next->pprev = c->pprev;
    free(c);
}

static struct gm_link_opts link_opts(enum gm_tls_role role)
{
    struct gm_link_opts o = {.role = role, .ping_ms = PING_MS, .timeout_ms = TIMEOUT_MS};

    return o;
}

/* Dials addr expecting node (or anyone of the cluster when node is ""). */
static int dial_addr(struct gm_agent *a, const char *node, const struct sockaddr *addr,
                     struct endpoint *ep)
{
    struct gm_link_opts o = link_opts(GM_TLS_ROLE_CLIENT);
    struct lctx *c;
    int err;

    if (a->stopping)
        return -ECANCELED;
    c = lctx_new(a);
    if (c == NULL)
        return -ENOMEM;
    snprintf(c->node, sizeof(c->node), "%s", node);
    c->dialed = 1;
    c->ep = ep;
    err = gm_link_new(&a->loop, a->tls, &o, &link_ops, c, &c->link);
    if (err != 0) {
        lctx_free(c);
        return err;
    }
    gm_link_set_state(c->link, LS_HANDSHAKE);
    ignore(gm_link_connect(c->link, addr)); /* errors: on_close */
    return 0;
}

/* 1 when a dial to node is under way (from a beacon, an endpoint or the member table). */
static int dialing_to(const struct gm_agent *a, const char *node)
{
    const struct lctx *c;

    for (c = a->links; c != NULL; c = c->next)
        if (c->dialed && strcmp(c->node, node) == 0 && gm_link_state(c->link) != LS_UP &&
            !gm_link_is_closing(c->link))
            return 1;
    return 0;
}

static void dial(struct gm_agent *a, struct peer *p)
{
    struct sockaddr_storage ss;

    if (a->stopping || p->link != NULL || p->dialing || dialing_to(a, p->node))
        return;
    if (gm_proto_addr_parse(p->address, &ss) != 0)
        return;
    gm_debug("event=dial peer=%s address=%s", p->node, p->address);
    if (dial_addr(a, p->node, (struct sockaddr *)&ss, NULL) == 0)
        p->dialing = 1;
}

static int send_json(struct gm_link *l, uint16_t type, char *json, size_t len, int err)
{
    if (err != 0)
        return err;
    err = gm_link_send(l, type, 0, json, len);
    free(json);
    return err;
}

/* This end's view of the link: egress interface, class, path MTU. */
static void link_view(struct gm_agent *a, struct lctx *c)
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

static int send_hello(struct gm_agent *a, struct lctx *c)
{
    struct gm_msg_hello m;
    char *json = NULL;
    size_t len = 0;
    int err;

    memset(&m, 0, sizeof(m));
    snprintf(m.node, sizeof(m.node), "%s", a->cfg.node);
    snprintf(m.listen, sizeof(m.listen), "%s", a->listen_addr);
    snprintf(m.link_class, sizeof(m.link_class), "%s", gm_class_name(c->cls));
    m.mtu = c->mtu;
    err = gm_proto_hello_encode(&m, &json, &len);
    return send_json(c->link, GM_MSG_HELLO, json, len, err);
}

/* Own entry first, then every member. *out malloc'd. */
static int member_list(struct gm_agent *a, struct gm_member **out, size_t *n)
{
    struct gm_member *m = calloc(a->npeers + 1, sizeof(*m));
    size_t i;

    *out = NULL;
    *n = 0;
    if (m == NULL)
        return -ENOMEM;
    snprintf(m[0].node, sizeof(m[0].node), "%s", a->cfg.node);
    snprintf(m[0].address, sizeof(m[0].address), "%s", a->listen_addr);
    for (i = 0; i < a->npeers; i++) {
        snprintf(m[i + 1].node, sizeof(m[i + 1].node), "%s", a->peers[i].node);
        snprintf(m[i + 1].address, sizeof(m[i + 1].address), "%s", a->peers[i].address);
    }
    *out = m;
    *n = a->npeers + 1;
    return 0;
}

static int send_members(struct gm_agent *a, struct gm_link *l)
{
    struct gm_member *m = NULL;
    char *json = NULL;
    size_t n = 0, len = 0;
    int err = member_list(a, &m, &n);

    if (err == 0)
        err = gm_proto_members_encode(m, n, &json, &len);
    free(m);
    return send_json(l, GM_MSG_MEMBERS, json, len, err);
}

/* Closes l with err after an ERROR frame and a log line. */
static int refuse(struct gm_link *l, int err, const char *what)
{
    struct lctx *c = gm_link_data(l);

    snprintf(c->reason, sizeof(c->reason), "%s", what);
    c->a->stats.links_refused++;
    c->a->stats.last_refusal = err;
    gm_link_fail(l, err, what);
    return 0;
}

static int on_up(struct gm_link *l)
{
    struct lctx *c = gm_link_data(l);
    struct gm_agent *a = c->a;
    struct gm_tls *t = gm_link_tls(l);

    if (gm_tls_is_join(t)) {
        if (a->cakey == NULL || a->tokens == NULL)
            return refuse(l, GM_ERR_AUTH, "this node does not admit joins (it holds no CA key)");
        gm_link_set_state(l, LS_JOIN);
        return 0;
    }
    if (c->dialed && c->node[0] != '\0' && strcmp(gm_tls_peer_node(t), c->node) != 0) {
        snprintf(c->reason, sizeof(c->reason), "dialed %s but the certificate names %s", c->node,
                 gm_tls_peer_node(t));
        return GM_ERR_AUTH;
    }
    snprintf(c->node, sizeof(c->node), "%s", gm_tls_peer_node(t));
    if (strcmp(c->node, a->cfg.node) == 0)
        return refuse(l, GM_ERR_AUTH, "peer uses this node's own name");
    gm_link_set_state(l, LS_HELLO);
    link_view(a, c);
    return send_hello(a, c);
}

/* --- handlers (the dispatch table) ----------------------------------------- */

static void renew_check(struct gm_agent *a);

typedef int (*handler_fn)(struct gm_agent *a, struct gm_link *l, const struct gm_frame_hdr *h,
                          const uint8_t *p);

/* --- link measurement ------------------------------------------------------- */

static void probe_done_cb(void *arg, int err)
{
    (void)arg;
    (void)err; /* the data is the agent's zero block; nothing to free */
}

static int probe_round(struct gm_agent *a, struct gm_link *l, struct peer *p, uint32_t size)
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

static void probe_start(struct gm_agent *a, struct peer *p)
{
    if (!a->cfg.measure || p->link == NULL || p->m.probe_size != 0 || p->m.mbps_out >= 0)
        return;
    gm_debug("event=probe-start peer=%s", p->node);
    ignore(probe_round(a, p->link, p, PROBE_FIRST));
}

static enum gm_link_class class_of(const struct peer *p)
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
        struct peer *p = &a->peers[i];
        if (p->link == NULL)
            continue;
        snprintf(v[k].node, sizeof(v[k].node), "%s", p->node);
        snprintf(v[k].link_class, sizeof(v[k].link_class), "%s", gm_class_name(class_of(p)));
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
        if (a->peers[i].link != NULL && gm_link_state(a->peers[i].link) == LS_UP)
            ignore(gm_link_send(a->peers[i].link, GM_MSG_LINK_STATS, 0, json, len));
    free(json);
    free(v);
}

struct reach {
    struct gm_agent *a;
    struct reach *next, **pprev; /* the agent's list, until finished */
    char node[GM_ID_NAME_MAX + 1];
    uv_tcp_t tcp;
    uv_connect_t req;
    uv_timer_t timer;
    int result, open;
};

static void reach_closed(uv_handle_t *h)
{
    struct reach *r = h->data;

    if (--r->open == 0)
        free(r);
}

static void reach_finish(struct reach *r, int ok)
{
    struct peer *p;

    if (r->result != 0)
        return;
    r->result = ok ? 1 : -1;
    *r->pprev = r->next;
    if (r->next != NULL)
        r->next->pprev = r->pprev;
    p = r->a->stopping ? NULL : peer_find(r->a, r->node);
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
    struct reach *r = req->data;

    reach_finish(r, status == 0);
}

static void reach_timeout_cb(uv_timer_t *t)
{
    reach_finish(t->data, 0);
}

/* Checks that p's listen address accepts a TCP connection from here (the
 * direction the link did not prove).  A bare connect, closed at once: the
 * peer sees a connection that ends before its handshake and says nothing. */
static void reach_start(struct gm_agent *a, struct peer *p)
{
    struct sockaddr_storage ss;
    struct reach *r;

    if (a->stopping || gm_proto_addr_parse(p->address, &ss) != 0)
        return;
    r = calloc(1, sizeof(*r));
    if (r == NULL)
        return;
    r->a = a;
    snprintf(r->node, sizeof(r->node), "%s", p->node);
    ignore(uv_tcp_init(&a->loop, &r->tcp));
    ignore(uv_timer_init(&a->loop, &r->timer));
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

/* Bulk and probe trains: the receiver times each one from its first chunk to
 * its last and tells the sender (RATE). */
static int rx_train(struct gm_agent *a, struct gm_link *l, const struct gm_frame_hdr *h)
{
    struct lctx *c = gm_link_data(l);
    struct peer *p = peer_find(a, c->node);
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
    return send_json(l, GM_MSG_RATE, json, len, 0);
}

static int h_probe(struct gm_agent *a, struct gm_link *l, const struct gm_frame_hdr *h,
                   const uint8_t *p)
{
    struct lctx *c = gm_link_data(l);
    struct peer *peer = peer_find(a, c->node);

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
    struct lctx *c = gm_link_data(l);
    struct peer *peer = peer_find(a, c->node);
    struct gm_msg_rate r;
    double mbps;

    if (gm_proto_rate_decode(p, h->len, &r) != 0)
        return refuse(l, GM_ERR_PROTO, "malformed rate");
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
                  peer->node, gm_class_name(class_of(peer)), c->iface, mbps, gm_link_rtt_ms(l),
                  c->mtu);
        ignore(gm_link_send(l, GM_MSG_PROBE, 0, NULL, 0)); /* our probe is over */
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
    struct lctx *c = gm_link_data(l);
    struct peer *peer = peer_find(a, c->node);
    struct gm_link_stat *v = NULL;
    size_t n = 0;

    if (gm_proto_link_stats_decode(p, h->len, &v, &n) != 0)
        return refuse(l, GM_ERR_PROTO, "malformed link stats");
    if (peer == NULL) {
        free(v);
        return 0;
    }
    free(peer->m.remote);
    peer->m.remote = v;
    peer->m.nremote = n;
    return 0;
}

/* --- membership -------------------------------------------------------------- */

/* Tells every up member but skip the member list (it changed). */
static void members_push(struct gm_agent *a, const struct gm_link *skip)
{
    size_t i;

    for (i = 0; i < a->npeers; i++) {
        struct gm_link *l = a->peers[i].link;
        if (l != NULL && l != skip && gm_link_state(l) == LS_UP)
            ignore(send_members(a, l));
    }
}

/* 1 when the link was dialed by the smaller of the two node ids. */
static int dialed_by_min(const struct gm_agent *a, const struct lctx *c)
{
    return c->dialed == (strcmp(a->cfg.node, c->node) < 0);
}

static int h_hello(struct gm_agent *a, struct gm_link *l, const struct gm_frame_hdr *h,
                   const uint8_t *p)
{
    struct lctx *c = gm_link_data(l);
    struct gm_msg_hello m;
    char listen[GM_ADDR_MAX];
    struct sockaddr_storage ss;
    struct peer *peer;
    int changed = 0, err;

    if (gm_proto_hello_decode(p, h->len, &m) != 0)
        return refuse(l, GM_ERR_PROTO, "malformed hello");
    if (strcmp(m.node, c->node) != 0)
        return refuse(l, GM_ERR_AUTH, "hello names another node than the certificate");
    if (c->dialed && gm_proto_addr_parse(gm_link_peer_addr(l), &ss) == 0)
        snprintf(listen, sizeof(listen), "%s", gm_link_peer_addr(l)); /* keep what worked */
    else
        gm_proto_addr_fill_host(m.listen, gm_link_peer_addr(l), listen);
    if (c->ep != NULL) { /* the endpoint answered as a member: it works */
        snprintf(c->ep->node, sizeof(c->ep->node), "%s", m.node);
        c->ep->backoff_ms = 0;
        c->ep->last_error[0] = '\0';
    }
    peer = peer_find(a, m.node);
    if (peer != NULL && peer->link != NULL && peer->link != l) {
        struct lctx *old = gm_link_data(peer->link);
        if (dialed_by_min(a, old) && !dialed_by_min(a, c)) {
            /* both ends keep the link the smaller id dialed */
            c->duplicate = 1;
            snprintf(c->reason, sizeof(c->reason), "duplicate link");
            gm_debug("event=link-duplicate peer=%s", m.node);
            ignore(gm_link_send(l, GM_MSG_BYE, 0, NULL, 0));
            gm_link_close(l, 0);
            return 0;
        }
        snprintf(old->reason, sizeof(old->reason), "replaced by a newer link");
        gm_link_close(peer->link, 0);
        peer->link = NULL;
    }
    peer = peer_upsert(a, m.node, listen, &changed);
    if (peer == NULL)
        return refuse(l, -ENOMEM, "member table full");
    if (changed)
        ignore(members_save(a));
    peer->link = l;
    peer->backoff_ms = 0;
    measure_reset(&peer->m);
    peer->m.cls_local = c->cls;
    peer->m.mtu_local = c->mtu;
    snprintf(peer->m.iface, sizeof(peer->m.iface), "%s", c->iface);
    peer->m.cls_remote = strcmp(m.link_class, "tunnel") == 0 ? GM_CLASS_TUNNEL
                         : strcmp(m.link_class, "wan") == 0  ? GM_CLASS_WAN
                         : strcmp(m.link_class, "lan") == 0  ? GM_CLASS_LAN
                                                             : 0;
    peer->m.mtu_remote = m.mtu;
    gm_link_set_state(l, LS_UP);
    gm_link_ping(l); /* an RTT right away, before the probe loads the link */
    a->stats.links_up++;
    if (strcmp(m.node, a->admitter) == 0 && a->cakey == NULL && gm_id_cert_needs_renewal(a->cert))
        renew_check(a); /* the admitter is reachable again: ask now, not at the next check */
    gm_notice("event=link-up peer=%s address=%s dialed=%d class=%s iface=%s", m.node,
              gm_link_peer_addr(l), c->dialed, gm_class_name(class_of(peer)), c->iface);
    err = send_members(a, l);
    if (changed)
        members_push(a, l);
    if (c->dialed) {
        peer->m.reach_out = 1;        /* this link is the proof */
        peer->m.probe_after_pong = 1; /* the dialer measures first, then the other end */
    } else {
        reach_start(a, peer);
    }
    return err;
}

static int h_members(struct gm_agent *a, struct gm_link *l, const struct gm_frame_hdr *h,
                     const uint8_t *p)
{
    struct gm_member *m = NULL;
    size_t n = 0, i;
    int any = 0, changed;

    if (gm_proto_members_decode(p, h->len, &m, &n) != 0)
        return refuse(l, GM_ERR_PROTO, "malformed member list");
    for (i = 0; i < n; i++) {
        struct peer *peer;
        if (strcmp(m[i].node, a->cfg.node) == 0)
            continue;
        if (peer_find(a, m[i].node) != NULL)
            continue; /* addresses of known members come from their own hello */
        peer = peer_upsert(a, m[i].node, m[i].address, &changed);
        if (peer == NULL)
            break;
        any = 1;
        gm_info("event=member-learned node=%s address=%s via=%s", peer->node, peer->address,
                ((struct lctx *)gm_link_data(l))->node);
        if (should_dial(a, peer))
            dial(a, peer);
    }
    free(m);
    if (any) {
        ignore(members_save(a));
        members_push(a, l); /* so a node that knows one peer learns all */
    }
    return 0;
}

static int h_ping(struct gm_agent *a, struct gm_link *l, const struct gm_frame_hdr *h,
                  const uint8_t *p)
{
    (void)a;
    gm_link_pong(l, p, h->len);
    return 0;
}

static void probe_start(struct gm_agent *a, struct peer *p);

static int h_pong(struct gm_agent *a, struct gm_link *l, const struct gm_frame_hdr *h,
                  const uint8_t *p)
{
    struct lctx *c = gm_link_data(l);
    struct peer *peer = peer_find(a, c->node);

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

static int h_bye(struct gm_agent *a, struct gm_link *l, const struct gm_frame_hdr *h,
                 const uint8_t *p)
{
    struct lctx *c = gm_link_data(l);

    (void)a;
    (void)h;
    (void)p;
    snprintf(c->reason, sizeof(c->reason), "peer said bye");
    gm_link_close(l, 0);
    return 0;
}

static int h_error(struct gm_agent *a, struct gm_link *l, const struct gm_frame_hdr *h,
                   const uint8_t *p)
{
    struct lctx *c = gm_link_data(l);
    char msg[200];
    int code = 0;

    (void)a;
    if (gm_proto_error_decode(p, h->len, &code, msg, sizeof(msg)) != 0) {
        code = GM_ERR_PROTO;
        snprintf(msg, sizeof(msg), "malformed error frame");
    }
    snprintf(c->reason, sizeof(c->reason), "peer refused: %s", msg);
    gm_link_close(l, code);
    return 0;
}

static int join_refuse(struct gm_agent *a, struct gm_link *l, const char *id, int err,
                       const char *why)
{
    int64_t now = (int64_t)time(NULL);
    char msg[200];

    a->join_fails[a->join_fail_next] = now;
    a->join_fail_next = (a->join_fail_next + 1) % JOIN_FAILS_MAX;
    a->stats.joins_refused++;
    gm_warn("event=join-refused token=%s peer=%s err=%d reason=\"%s\"", id, gm_link_peer_addr(l),
            err, why);
    snprintf(msg, sizeof(msg), "join refused: %s", why);
    return refuse(l, err, msg);
}

static int join_rate_limited(const struct gm_agent *a)
{
    int64_t now = (int64_t)time(NULL);
    size_t i;

    for (i = 0; i < JOIN_FAILS_MAX; i++)
        if (a->join_fails[i] == 0 || now - a->join_fails[i] >= JOIN_FAIL_WINDOW_S)
            return 0;
    return 1;
}

static int h_join_request(struct gm_agent *a, struct gm_link *l, const struct gm_frame_hdr *h,
                          const uint8_t *p)
{
    struct gm_msg_join_request rq;
    struct gm_msg_join_accept ac;
    uint8_t v[GM_TOKEN_VERIFIER_LEN], binding[GM_JOIN_BINDING_LEN];
    char id[2 * GM_TOKEN_ID_LEN + 1] = "-", ctx[512], *actx = NULL, *json = NULL;
    struct gm_cert *cert = NULL;
    struct gm_member *m = NULL;
    struct peer *peer;
    const char *why = NULL;
    size_t clen, n = 0, len = 0;
    int64_t now = (int64_t)time(NULL);
    int err, changed;

    memset(&ac, 0, sizeof(ac));
    if (gm_proto_join_request_decode(p, h->len, &rq) != 0)
        return join_refuse(a, l, id, GM_ERR_PROTO, "malformed join request");
    gm_token_id_hex(rq.token_id, id);
    if (join_rate_limited(a))
        return join_refuse(a, l, id, -EBUSY, "too many failed joins, try again later");
    err = gm_token_store_check(a->tokens, rq.token_id, now, v, &why);
    if (err != 0)
        return join_refuse(a, l, id, err, why);
    err = gm_tls_export(gm_link_tls(l), GM_JOIN_EXPORTER_LABEL, binding, sizeof(binding));
    clen = gm_proto_join_context(&rq, ctx, sizeof(ctx));
    if (err == 0)
        err = gm_join_proof_check(v, GM_JOIN_ROLE_JOINER, binding, ctx, clen, rq.proof);
    if (err != 0) {
        gm_token_store_fail(a->tokens, rq.token_id, now);
        sodium_memzero(v, sizeof(v));
        return join_refuse(a, l, id, GM_ERR_AUTH,
                           "join proof does not verify for this session (wrong secret or replay)");
    }
    if (strcmp(rq.node, a->cfg.node) == 0 || peer_find(a, rq.node) != NULL) {
        sodium_memzero(v, sizeof(v));
        return join_refuse(a, l, id, -EEXIST, "node name already in the cluster");
    }
    /* record the use before anything is returned */
    err = gm_token_store_use(a->tokens, rq.token_id);
    if (err == 0)
        err = gm_id_cert_issue(a->ca, a->cakey, a->cfg.cluster, rq.node, rq.pubkey, GM_ID_NODE_DAYS,
                               &cert);
    if (err == 0)
        err = gm_id_cert_to_pem(cert, &ac.cert_pem);
    if (err == 0)
        err = gm_id_cert_to_pem(a->ca, &ac.ca_pem);
    if (err == 0) {
        char filled[GM_ADDR_MAX];
        gm_proto_addr_fill_host(rq.listen, gm_link_peer_addr(l), filled);
        memcpy(rq.listen, filled, sizeof(filled));
        peer = peer_upsert(a, rq.node, rq.listen, &changed);
        err = peer == NULL ? -ENOMEM : members_save(a);
    }
    if (err == 0)
        err = member_list(a, &m, &n);
    if (err == 0 && !a->have_bkey)
        err = -ENOKEY;
    if (err == 0) {
        size_t alen;
        memcpy(ac.beacon_key, a->bkey, sizeof(ac.beacon_key));
        alen = gm_join_accept_context(ctx, clen, ac.cert_pem, ac.beacon_key, &actx);
        if (actx == NULL) {
            err = -ENOMEM;
        } else {
            snprintf(ac.node, sizeof(ac.node), "%s", rq.node);
            ac.members = m;
            ac.n_members = n;
            gm_join_proof(v, GM_JOIN_ROLE_ADMITTER, binding, actx, alen, ac.proof);
            err = gm_proto_join_accept_encode(&ac, &json, &len);
            ac.members = NULL;
        }
    }
    if (err == 0)
        err = gm_link_send(l, GM_MSG_JOIN_ACCEPT, h->req, json, len);
    sodium_memzero(v, sizeof(v));
    free(json);
    free(actx);
    free(m);
    gm_id_cert_free(cert);
    gm_proto_join_accept_free(&ac);
    if (err != 0) {
        gm_err("event=join-failed token=%s err=%d msg=\"%s\"", id, err, gm_strerror(err));
        return refuse(l, err, "admitter failed to issue a certificate");
    }
    a->stats.joins_accepted++;
    gm_notice("event=join-accepted token=%s node=%s address=%s", id, rq.node, rq.listen);
    gm_link_set_state(l, LS_DONE);
    snprintf(((struct lctx *)gm_link_data(l))->reason, 256, "join answered");
    gm_link_close(l, 0);
    peer = peer_find(a, rq.node);
    if (peer != NULL && should_dial(a, peer))
        peer->next_dial = 0; /* the joiner starts its agent next: dial from the timer */
    return 0;
}

/* Saves and starts presenting a renewed certificate. */
static int install_cert(struct gm_agent *a, struct gm_cert *cert)
{
    char path[GM_PATH_MAX];
    int64_t left = 0;
    int err = gm_config_state_path(&a->cfg, "node.crt", path, sizeof(path));

    if (err == 0)
        err = gm_id_cert_save(cert, path);
    if (err == 0)
        err = gm_tls_ctx_set_identity(a->tls, cert, a->key);
    if (err != 0) {
        gm_err("event=cert-renew-failed err=%d msg=\"%s\"", err, gm_strerror(err));
        gm_id_cert_free(cert);
        return err;
    }
    gm_id_cert_free(a->cert);
    a->cert = cert;
    ignore(gm_id_cert_seconds_left(cert, &left));
    gm_notice("event=cert-renewed node=%s seconds_left=%" PRId64, a->cfg.node, left);
    return 0;
}

/* Renews this node's certificate when it nears expiry: itself on the
 * admitter, else by asking the admitter over their link. */
static void renew_check(struct gm_agent *a)
{
    struct peer *p;
    struct gm_cert *cert = NULL;
    uint8_t pub[GM_ID_PUB_LEN];

    if (!gm_id_cert_needs_renewal(a->cert))
        return;
    if (a->cakey != NULL) {
        if (gm_id_key_public(a->key, pub) == 0 &&
            gm_id_cert_issue(a->ca, a->cakey, a->cfg.cluster, a->cfg.node, pub, GM_ID_NODE_DAYS,
                             &cert) == 0)
            ignore(install_cert(a, cert));
        return;
    }
    p = a->admitter[0] ? peer_find(a, a->admitter) : NULL;
    if (p == NULL || p->link == NULL) {
        gm_warn("event=cert-expiring node=%s reason=\"no link to the admitter %s\"", a->cfg.node,
                a->admitter[0] ? a->admitter : "(unknown)");
        a->next_renew_check = gm_time_mono_ns() + 60ull * 1000000000ull; /* retry soon */
        return;
    }
    ignore(gm_link_send(p->link, GM_MSG_RENEW_REQUEST, 0, NULL, 0));
    gm_info("event=cert-renew-requested admitter=%s", a->admitter);
}

static int h_renew_request(struct gm_agent *a, struct gm_link *l, const struct gm_frame_hdr *h,
                           const uint8_t *p)
{
    struct lctx *c = gm_link_data(l);
    struct gm_cert *cert = NULL;
    uint8_t pub[GM_ID_PUB_LEN];
    char *pem = NULL, *json = NULL;
    size_t len = 0;
    int err;

    (void)p;
    if (a->cakey == NULL || h->len != 0)
        return refuse(l, GM_ERR_PROTO, "renewal asked of a node that issues no certificates");
    err = gm_tls_peer_pubkey(gm_link_tls(l), pub);
    if (err == 0)
        err =
            gm_id_cert_issue(a->ca, a->cakey, a->cfg.cluster, c->node, pub, GM_ID_NODE_DAYS, &cert);
    if (err == 0)
        err = gm_id_cert_to_pem(cert, &pem);
    if (err == 0)
        err = gm_proto_renew_encode(pem, &json, &len);
    if (err == 0)
        err = gm_link_send(l, GM_MSG_RENEW_ACCEPT, h->req, json, len);
    if (err == 0)
        gm_notice("event=cert-issued node=%s reason=renewal", c->node);
    free(json);
    free(pem);
    gm_id_cert_free(cert);
    return err;
}

static int h_renew_accept(struct gm_agent *a, struct gm_link *l, const struct gm_frame_hdr *h,
                          const uint8_t *p)
{
    struct lctx *c = gm_link_data(l);
    struct gm_cert *cert = NULL;
    char *pem = NULL, cl[GM_ID_NAME_MAX + 1], node[GM_ID_NAME_MAX + 1];
    int64_t old_left = 0, new_left = 0;
    int err;

    if (strcmp(c->node, a->admitter) != 0)
        return refuse(l, GM_ERR_PROTO, "certificate offered by a node that is not the admitter");
    err = gm_proto_renew_decode(p, h->len, &pem);
    if (err == 0)
        err = gm_id_cert_from_pem(pem, strlen(pem), &cert);
    free(pem);
    if (err == 0 &&
        (gm_id_cert_check_issued(a->ca, cert) != 0 || gm_id_cert_identity(cert, cl, node) != 0 ||
         strcmp(cl, a->cfg.cluster) != 0 || strcmp(node, a->cfg.node) != 0 ||
         !gm_id_cert_matches_key(cert, a->key) || gm_id_cert_seconds_left(cert, &new_left) != 0 ||
         gm_id_cert_seconds_left(a->cert, &old_left) != 0 || new_left <= old_left))
        err = GM_ERR_AUTH;
    if (err != 0) {
        gm_id_cert_free(cert);
        return refuse(l, err, "renewed certificate is not valid for this node");
    }
    ignore(install_cert(a, cert)); /* logged there; the link stays either way */
    return 0;
}

struct dispatch {
    uint16_t type;
    uint32_t states;
    handler_fn fn;
};

static const struct dispatch table[] = {
    {GM_MSG_HELLO, LS_HELLO, h_hello},
    {GM_MSG_MEMBERS, LS_UP, h_members},
    {GM_MSG_PING, LS_HELLO | LS_UP, h_ping},
    {GM_MSG_PONG, LS_HELLO | LS_UP, h_pong},
    {GM_MSG_BULK, LS_UP, h_bulk},
    {GM_MSG_PROBE, LS_UP, h_probe},
    {GM_MSG_RATE, LS_UP, h_rate},
    {GM_MSG_LINK_STATS, LS_UP, h_link_stats},
    {GM_MSG_BYE, LS_HELLO | LS_UP, h_bye},
    {GM_MSG_ERROR, LS_JOIN | LS_HELLO | LS_UP | LS_DONE, h_error},
    {GM_MSG_JOIN_REQUEST, LS_JOIN, h_join_request},
    {GM_MSG_RENEW_REQUEST, LS_UP, h_renew_request},
    {GM_MSG_RENEW_ACCEPT, LS_UP, h_renew_accept},
};

static int on_frame(struct gm_link *l, const struct gm_frame_hdr *h, const uint8_t *payload)
{
    struct lctx *c = gm_link_data(l);
    uint32_t st = gm_link_state(l);
    size_t i;

    for (i = 0; i < sizeof(table) / sizeof(table[0]); i++) {
        if (table[i].type != h->type)
            continue;
        if (!(table[i].states & st)) {
            char msg[128];
            snprintf(msg, sizeof(msg), "message %s not allowed in state %s",
                     gm_proto_type_name(h->type), lstate_name(st));
            return refuse(l, GM_ERR_PROTO, msg);
        }
        return table[i].fn(c->a, l, h, payload);
    }
    return refuse(l, GM_ERR_PROTO, "unexpected message type");
}

/* --- static endpoints ------------------------------------------------------- */

static void endpoint_failed(struct endpoint *ep, int err, const char *reason)
{
    uint64_t jitter;

    snprintf(ep->last_error, sizeof(ep->last_error), "%s%s%s", gm_strerror(err),
             reason[0] ? ": " : "", reason);
    if (ep->backoff_ms == 0)
        gm_warn("event=endpoint-unreachable endpoint=%s err=%d reason=\"%s\" "
                "retry=\"with backoff up to %d s; logged once\"",
                ep->spec, err, ep->last_error, EP_BACKOFF_MAX_MS / 1000);
    else
        gm_debug("event=endpoint-unreachable endpoint=%s err=%d", ep->spec, err);
    ep->backoff_ms = ep->backoff_ms ? ep->backoff_ms * 2 : EP_BACKOFF_MIN_MS;
    if (ep->backoff_ms > EP_BACKOFF_MAX_MS)
        ep->backoff_ms = EP_BACKOFF_MAX_MS;
    jitter = randombytes_uniform(ep->backoff_ms / 4 + 1);
    ep->next_dial = gm_time_mono_ns() + ((uint64_t)ep->backoff_ms + jitter) * 1000000ull;
}

static void endpoint_resolved(uv_getaddrinfo_t *req, int status, struct addrinfo *res)
{
    struct endpoint *ep = req->data;
    struct gm_agent *a = ep->a;
    int err = status;

    ep->resolving = 0;
    if (status == UV_ECANCELED || a->stopping) {
        uv_freeaddrinfo(res);
        return;
    }
    if (err == 0 && res != NULL)
        err = dial_addr(a, ep->node, res->ai_addr, ep);
    else if (err == 0)
        err = -EHOSTUNREACH;
    uv_freeaddrinfo(res);
    if (err == 0)
        ep->dialing = 1;
    else
        endpoint_failed(ep, err, "cannot resolve the host name");
}

static void endpoint_dial(struct gm_agent *a, struct endpoint *ep)
{
    struct addrinfo hints = {.ai_socktype = SOCK_STREAM};
    struct sockaddr_storage ss;
    char host[GM_ADDR_MAX];
    const char *colon = strrchr(ep->spec, ':');
    int err;

    if (gm_proto_addr_parse(ep->spec, &ss) == 0) {
        err = dial_addr(a, ep->node, (struct sockaddr *)&ss, ep);
        if (err == 0)
            ep->dialing = 1;
        return;
    }
    snprintf(host, sizeof(host), "%.*s", (int)(colon - ep->spec), ep->spec);
    ep->gai.data = ep;
    err = uv_getaddrinfo(&a->loop, &ep->gai, endpoint_resolved, host, colon + 1, &hints);
    if (err == 0)
        ep->resolving = 1;
    else
        endpoint_failed(ep, err, "cannot resolve the host name");
}

/* Dials the endpoints that are not linked yet, each on its own backoff. */
static void endpoints_tick(struct gm_agent *a, uint64_t now)
{
    size_t i;

    for (i = 0; i < a->neps; i++) {
        struct endpoint *ep = &a->eps[i];
        struct peer *p = ep->node[0] ? peer_find(a, ep->node) : NULL;
        if (ep->dialing || ep->resolving || now < ep->next_dial)
            continue;
        if (p != NULL && (p->link != NULL || p->dialing))
            continue; /* linked, or its member dial is on the way */
        endpoint_dial(a, ep);
    }
}

/* "host:port, host:port" from the config; each checked for a port. */
static int endpoints_parse(struct gm_agent *a)
{
    char buf[sizeof(a->cfg.peers)], *tok, *save = NULL;
    size_t n = 0;

    snprintf(buf, sizeof(buf), "%s", a->cfg.peers);
    for (tok = strtok_r(buf, ", \t", &save); tok != NULL; tok = strtok_r(NULL, ", \t", &save))
        n++;
    if (n == 0)
        return 0;
    a->eps = calloc(n, sizeof(*a->eps));
    if (a->eps == NULL)
        return -ENOMEM;
    snprintf(buf, sizeof(buf), "%s", a->cfg.peers);
    for (tok = strtok_r(buf, ", \t", &save); tok != NULL; tok = strtok_r(NULL, ", \t", &save)) {
        struct endpoint *ep = &a->eps[a->neps];
        const char *colon = strrchr(tok, ':');
        long port = colon ? strtol(colon + 1, NULL, 10) : 0;
        if (colon == NULL || colon == tok || port <= 0 || port > 65535 ||
            strlen(tok) >= sizeof(ep->spec)) {
            gm_err("event=config-bad-value key=discovery.peers value=%s reason=\"want HOST:PORT\"",
                   tok);
            return GM_ERR_CONFIG;
        }
        ep->a = a;
        snprintf(ep->spec, sizeof(ep->spec), "%s", tok);
        a->neps++;
    }
    return 0;
}

static void on_close(struct gm_link *l, int err)
{
    struct lctx *c = gm_link_data(l);
    struct gm_agent *a = c->a;
    struct peer *p = c->node[0] ? peer_find(a, c->node) : NULL;
    const char *reason = c->reason[0] ? c->reason : gm_tls_reason(gm_link_tls(l));

    if (p != NULL && p->link == l) {
        p->link = NULL;
        p->m.probe_size = 0;
        gm_notice("event=link-down peer=%s err=%d msg=\"%s\" reason=\"%s\"", p->node, err,
                  gm_strerror(err), reason);
    } else if (c->ep != NULL && gm_link_state(l) != LS_UP && !c->duplicate) {
        endpoint_failed(c->ep, err, reason);
    } else if (!c->dialed && gm_link_state(l) == LS_HANDSHAKE && gm_link_bytes_received(l) == 0) {
        /* a bare connect (a peer's reachability check, a port scan): nothing to say */
        gm_debug("event=connection-closed-early address=%s", gm_link_peer_addr(l));
    } else if (c->dialed && gm_link_state(l) == LS_HANDSHAKE && err != GM_ERR_AUTH &&
               err != GM_ERR_PROTO) {
        /* a member that is down: say so once, then quietly retry */
        if (p != NULL && p->backoff_ms == 0)
            gm_info("event=dial-failed peer=%s address=%s err=%d msg=\"%s\"", p->node, p->address,
                    err, gm_strerror(err));
        else
            gm_debug("event=dial-failed peer=%s err=%d", c->node, err);
    } else if (err != 0 && !a->stopping) {
        if (err == GM_ERR_AUTH || err == GM_ERR_PROTO) {
            a->stats.links_refused++;
            a->stats.last_refusal = err;
        }
        gm_warn("event=link-closed peer=%s address=%s err=%d msg=\"%s\" reason=\"%s\"",
                c->node[0] ? c->node : "-", gm_link_peer_addr(l), err, gm_strerror(err), reason);
    }
    if (c->ep != NULL) {
        c->ep->dialing = 0;
        if (gm_link_state(l) == LS_UP || c->duplicate)
            c->ep->next_dial = gm_time_mono_ns() + (uint64_t)EP_BACKOFF_MIN_MS * 1000000ull;
    }
    if (p != NULL && c->dialed && c->ep == NULL) {
        p->dialing = 0;
        if (p->link == NULL) {
            p->backoff_ms = p->backoff_ms ? p->backoff_ms * 2 : TICK_MS;
            if (p->backoff_ms > DIAL_BACKOFF_MAX_MS)
                p->backoff_ms = DIAL_BACKOFF_MAX_MS;
            p->next_dial = gm_time_mono_ns() + (uint64_t)p->backoff_ms * 1000000ull;
        }
    }
    lctx_free(c);
}

static void connection_cb(uv_stream_t *server, int status)
{
    struct gm_agent *a = server->data;
    struct gm_link_opts o = link_opts(GM_TLS_ROLE_SERVER);
    struct lctx *c;
    int err;

    if (status < 0 || a->stopping)
        return;
    c = lctx_new(a);
    if (c == NULL)
        return;
    err = gm_link_new(&a->loop, a->tls, &o, &link_ops, c, &c->link);
    if (err == 0) {
        gm_link_set_state(c->link, LS_HANDSHAKE);
        err = gm_link_accept(c->link, server);
        if (err != 0)
            gm_link_free_unstarted(c->link);
    }
    if (err == 0) {
        struct lctx *k;
        int n = 0;
        for (k = a->links; k != NULL; k = k->next)
            n += !k->dialed && gm_link_state(k->link) == LS_HANDSHAKE;
        if (n > MAX_HANDSHAKING) {
            snprintf(c->reason, sizeof(c->reason), "too many connections in handshake");
            gm_link_close(c->link, -EBUSY);
        }
        return;
    }
    if (err != 0) {
        gm_err("event=accept-failed err=%d msg=\"%s\"", err, gm_strerror(err));
        lctx_free(c);
    }
}

/* --- discovery ------------------------------------------------------------- */

/* A fresh MEMBER beacon: dial the node if it is new or down and the rule says
 * we dial, else ask it to dial us by answering with our own beacon. */
static void on_hint(void *arg, const struct gm_beacon *b, const char *serial, const char *address)
{
    struct gm_agent *a = arg;
    struct peer *p = peer_find(a, b->node);
    struct sockaddr_storage ss;

    if (a->stopping || gm_tls_ctx_denied(a->tls, serial))
        return;
    if (p != NULL && p->link != NULL)
        return;
    if (strcmp(a->cfg.node, b->node) > 0) {
        gm_disc_announce(a->disc); /* it dials (smaller id) */
        return;
    }
    if (p != NULL) {
        if (strcmp(p->address, address) != 0 && !p->dialing) {
            gm_info("event=member-moved node=%s from=%s to=%s via=beacon", p->node, p->address,
                    address);
            snprintf(p->address, sizeof(p->address), "%s", address);
            ignore(members_save(a));
        }
        p->next_dial = 0;
        dial(a, p);
        return;
    }
    if (dialing_to(a, b->node))
        return; /* already on the way */
    if (gm_proto_addr_parse(address, &ss) != 0)
        return;
    gm_info("event=beacon-new-node node=%s address=%s action=dial", b->node, address);
    ignore(dial_addr(a, b->node, (struct sockaddr *)&ss, NULL));
}

/* Admitter: one JOIN beacon key per live token. */
static void join_keys_refresh(struct gm_agent *a)
{
    uint8_t keys[JKEYS_MAX][GM_BEACON_KEY_LEN], v[GM_TOKEN_VERIFIER_LEN], id[GM_TOKEN_ID_LEN];
    struct gm_token_info info;
    int64_t now = (int64_t)time(NULL);
    size_t i, n = 0, total;
    const char *why;

    if (a->disc == NULL || a->tokens == NULL)
        return;
    total = gm_token_store_count(a->tokens);
    for (i = total; i > 0 && n < JKEYS_MAX; i--) { /* newest first */
        if (gm_token_store_get(a->tokens, i - 1, &info) != 0 || info.revoked ||
            info.uses_left <= 0 || info.expires <= now)
            continue;
        if (sodium_hex2bin(id, sizeof(id), info.id, strlen(info.id), NULL, NULL, NULL) != 0 ||
            gm_token_store_check(a->tokens, id, now, v, &why) != 0)
            continue;
        gm_beacon_join_key(v, keys[n++]);
    }
    gm_disc_set_join_keys(a->disc, (const uint8_t(*)[GM_BEACON_KEY_LEN])keys, n);
    sodium_memzero(keys, sizeof(keys));
    sodium_memzero(v, sizeof(v));
}

static int listen_is_loopback(const char *listen)
{
    return strncmp(listen, "127.", 4) == 0 || strncmp(listen, "[::1]", 5) == 0;
}

static void discovery_start(struct gm_agent *a)
{
    struct gm_disc_config dc = {0};
    int err;

    if (a->cfg.multicast[0] == '\0') {
        gm_info("event=discovery-off reason=\"multicast = off in the config\"");
        return;
    }
    if (listen_is_loopback(a->listen_addr)) {
        gm_info("event=discovery-off reason=\"listening on loopback only\"");
        return;
    }
    if (!a->have_bkey && a->cakey == NULL)
        gm_warn("event=discovery-degraded reason=\"no beacon.key in %s: this node finds others "
                "only through members and static peers\"",
                a->cfg.state_dir);
    dc.group = a->cfg.multicast;
    dc.tunnels = a->cfg.tunnels;
    dc.interfaces = a->cfg.interfaces;
    dc.cluster = a->cfg.cluster;
    dc.node = a->cfg.node;
    dc.listen = a->listen_addr;
    dc.ca = a->ca;
    dc.cert = a->cert;
    dc.key = a->key;
    dc.bkey = a->have_bkey ? a->bkey : NULL;
    dc.admitter = a->cakey != NULL;
    dc.on_hint = on_hint;
    dc.arg = a;
    err = gm_disc_start(&a->loop, &dc, &a->disc);
    if (err != 0) {
        gm_warn("event=discovery-off group=%s err=%d msg=\"%s\"", a->cfg.multicast, err,
                gm_strerror(err));
        a->disc = NULL;
        return;
    }
    join_keys_refresh(a);
}

/* --- control socket --------------------------------------------------------- */

static json_t *num_or_null(double v)
{
    return v < 0 ? json_null() : json_real(v);
}

static json_t *tri(int v)
{
    return v < 0 ? json_null() : json_boolean(v);
}

/* Class of the path to a member without a link: from the route it would take. */
static enum gm_link_class path_class(const struct gm_agent *a, const char *address)
{
    struct sockaddr_storage ss;
    struct gm_iface eg;

    if (gm_proto_addr_parse(address, &ss) != 0 ||
        gm_iface_egress((struct sockaddr *)&ss, a->cfg.tunnels, &eg) != 0)
        return GM_CLASS_WAN;
    return gm_iface_classify((struct sockaddr *)&ss, &eg);
}

/* What p measured of its link to us (LINK_STATS), or NULL. */
static const struct gm_link_stat *remote_view(const struct gm_agent *a, const struct peer *p)
{
    size_t i;

    for (i = 0; i < p->m.nremote; i++)
        if (strcmp(p->m.remote[i].node, a->cfg.node) == 0)
            return &p->m.remote[i];
    return NULL;
}

static json_t *member_json(struct gm_agent *a, const struct peer *p)
{
    const struct gm_link_stat *rv = p->link ? remote_view(a, p) : NULL;
    int mtu = p->m.mtu_local;
    double skew = 0;
    json_t *m;

    if (p->m.mtu_remote > 0 && (mtu <= 0 || p->m.mtu_remote < mtu))
        mtu = p->m.mtu_remote;
    m = json_pack("{s:s, s:s, s:s, s:s}", "node", p->node, "address", p->address, "link",
                  gm_class_name(p->link ? class_of(p) : path_class(a, p->address)), "state",
                  p->link ? "up" : "down");
    if (m == NULL)
        return NULL;
    json_object_set_new(
        m, "rtt_ms",
        num_or_null(p->link && gm_link_rtt_ms(p->link) > 0 ? gm_link_rtt_ms(p->link) : -1));
    json_object_set_new(m, "throughput_mbps", num_or_null(p->link ? p->m.mbps_out : -1));
    json_object_set_new(m, "throughput_in_mbps", num_or_null(p->link ? p->m.mbps_in : -1));
    json_object_set_new(m, "mtu", p->link && mtu > 0 ? json_integer(mtu) : json_null());
    json_object_set_new(m, "iface",
                        p->link && p->m.iface[0] ? json_string(p->m.iface) : json_null());
    json_object_set_new(m, "clock_skew_ms",
                        p->link && gm_link_skew_ms(p->link, &skew) ? json_real(skew) : json_null());
    json_object_set_new(m, "reach_out", tri(p->link ? p->m.reach_out : -1));
    json_object_set_new(m, "reach_in", tri(rv ? rv->reach : -1));
    return m;
}

static json_t *status_json(struct gm_agent *a)
{
    json_t *o = json_object(), *members = json_array();
    size_t i, up = 0;

    for (i = 0; i < a->npeers; i++) {
        up += a->peers[i].link != NULL;
        json_array_append_new(members, member_json(a, &a->peers[i]));
    }
    json_object_set_new(o, "cluster", json_string(a->cfg.cluster));
    json_object_set_new(o, "node", json_string(a->cfg.node));
    json_object_set_new(o, "listen", json_string(a->listen_addr));
    json_object_set_new(o, "role", json_string(a->cakey ? "admitter" : "member"));
    json_object_set_new(o, "chief", json_null());
    json_object_set_new(o, "term", json_integer(0));
    json_object_set_new(o, "quorum", json_boolean(2 * (up + 1) > a->npeers + 1));
    json_object_set_new(o, "members", members);
    json_object_set_new(o, "job", json_null());
    return o;
}

static json_t *discovery_json(struct gm_agent *a)
{
    struct gm_disc_stats st;
    char ifs[256];

    if (a->disc == NULL)
        return json_null();
    gm_disc_get_stats(a->disc, &st);
    gm_disc_ifaces(a->disc, ifs, sizeof(ifs));
    return json_pack("{s:s, s:s, s:b, s:i, s:i, s:i, s:i, s:{s:i, s:i, s:i, s:i, s:i}}", "group",
                     a->cfg.multicast, "interfaces", ifs, "member_beacons", a->have_bkey, "sent",
                     (int)st.sent, "received", (int)st.received, "accepted", (int)st.accepted,
                     "ignored", (int)st.ignored, "ignored_by_reason", "malformed",
                     (int)st.ignored_format, "unauthenticated", (int)st.ignored_auth, "stale",
                     (int)st.ignored_stale, "replayed", (int)st.ignored_replay, "foreign",
                     (int)st.ignored_foreign);
}

static json_t *endpoints_json(struct gm_agent *a)
{
    json_t *arr = json_array();
    size_t i;

    for (i = 0; i < a->neps; i++) {
        const struct endpoint *ep = &a->eps[i];
        const struct peer *p = ep->node[0] ? peer_find(a, ep->node) : NULL;
        const char *state = p != NULL && p->link != NULL   ? "linked"
                            : ep->dialing || ep->resolving ? "dialing"
                                                           : "retrying";
        json_array_append_new(arr, json_pack("{s:s, s:s?, s:s, s:i, s:s?}", "endpoint", ep->spec,
                                             "node", ep->node[0] ? ep->node : NULL, "state", state,
                                             "backoff_ms", (int)ep->backoff_ms, "last_error",
                                             ep->last_error[0] ? ep->last_error : NULL));
    }
    return arr;
}

/* Rows: who measured; columns: to whom.  Ours first, then each member's
 * LINK_STATS; null where nobody measured. */
static json_t *matrix_json(struct gm_agent *a)
{
    json_t *nodes = json_array(), *rtt = json_array(), *bw = json_array();
    size_t i, j, k, n = a->npeers + 1;

    json_array_append_new(nodes, json_string(a->cfg.node));
    for (i = 0; i < a->npeers; i++)
        json_array_append_new(nodes, json_string(a->peers[i].node));
    for (i = 0; i < n; i++) {
        json_t *rr = json_array(), *br = json_array();
        for (j = 0; j < n; j++) {
            const char *to = json_string_value(json_array_get(nodes, j));
            double r = -1, b = -1;
            if (i == 0 && j > 0 && a->peers[j - 1].link != NULL) {
                const struct peer *p = &a->peers[j - 1];
                r = gm_link_rtt_ms(p->link) > 0 ? gm_link_rtt_ms(p->link) : -1;
                b = p->m.mbps_out;
            } else if (i > 0 && i != j && a->peers[i - 1].link != NULL) {
                const struct peer *p = &a->peers[i - 1];
                for (k = 0; k < p->m.nremote; k++)
                    if (strcmp(p->m.remote[k].node, to) == 0) {
                        r = p->m.remote[k].rtt_ms;
                        b = p->m.remote[k].throughput_mbps;
                    }
            }
            json_array_append_new(rr, num_or_null(r));
            json_array_append_new(br, num_or_null(b));
        }
        json_array_append_new(rtt, rr);
        json_array_append_new(bw, br);
    }
    return json_pack("{s:o, s:o, s:o}", "nodes", nodes, "rtt_ms", rtt, "throughput_mbps", bw);
}

static json_t *doctor_json(struct gm_agent *a)
{
    json_t *o = status_json(a);

    json_object_set_new(o, "control", json_string(a->cfg.control));
    json_object_set_new(o, "discovery", discovery_json(a));
    json_object_set_new(o, "endpoints", endpoints_json(a));
    json_object_set_new(o, "matrix", matrix_json(a));
    json_object_set_new(o, "wall_clock_ms", json_integer((json_int_t)time(NULL) * 1000));
    return o;
}

static json_t *error_json(int err, const char *msg)
{
    return json_pack("{s:s, s:i}", "error", msg, "code", err);
}

static json_t *token_create(struct gm_agent *a, json_t *req)
{
    char tok[GM_TOKEN_STR_MAX];
    struct gm_token_info info;
    uint8_t pin[GM_ID_PIN_LEN];
    json_int_t ttl = GM_TOKEN_DEFAULT_TTL_S, uses = 1;
    json_t *r;
    int err;

    if (a->tokens == NULL)
        return error_json(GM_ERR_CONFIG,
                          "this node holds no CA key: create tokens on the admitter");
    if (json_is_integer(json_object_get(req, "ttl")))
        ttl = json_integer_value(json_object_get(req, "ttl"));
    if (json_is_integer(json_object_get(req, "uses")))
        uses = json_integer_value(json_object_get(req, "uses"));
    if (ttl <= 0 || uses <= 0 || uses > 10000)
        return error_json(-EINVAL, "bad ttl or uses");
    err = gm_id_cert_pin(a->ca, pin);
    if (err == 0)
        err = gm_token_store_create(a->tokens, a->cfg.cluster, pin, (int64_t)ttl, (int)uses,
                                    (int64_t)time(NULL), tok, &info);
    if (err != 0)
        return error_json(err, gm_strerror(err));
    gm_notice("event=token-created token=%s expires=%" PRId64 " uses=%d", info.id, info.expires,
              info.uses_total);
    r = json_pack("{s:s, s:s, s:I, s:i}", "token", tok, "id", info.id, "expires",
                  (json_int_t)info.expires, "uses", info.uses_total);
    sodium_memzero(tok, sizeof(tok));
    return r;
}

static json_t *token_list(struct gm_agent *a)
{
    json_t *arr = json_array();
    struct gm_token_info info;
    size_t i;

    if (a->tokens == NULL)
        return error_json(GM_ERR_CONFIG, "this node holds no CA key: list tokens on the admitter");
    for (i = 0; i < gm_token_store_count(a->tokens); i++) {
        if (gm_token_store_get(a->tokens, i, &info) != 0)
            continue;
        json_array_append_new(arr, json_pack("{s:s, s:I, s:I, s:i, s:i, s:b}", "id", info.id,
                                             "created", (json_int_t)info.created, "expires",
                                             (json_int_t)info.expires, "uses_left", info.uses_left,
                                             "uses", info.uses_total, "revoked", info.revoked));
    }
    return json_pack("{s:o}", "tokens", arr);
}

static void control_cb(void *arg, const char *req, size_t len, char **resp)
{
    struct gm_agent *a = arg;
    json_error_t e;
    json_t *j = json_loadb(req, len, JSON_REJECT_DUPLICATES, &e), *r = NULL;
    const char *cmd = json_string_value(json_object_get(j, "cmd"));

    if (cmd == NULL)
        r = error_json(-EINVAL, "bad request");
    else if (strcmp(cmd, "status") == 0)
        r = status_json(a);
    else if (strcmp(cmd, "doctor") == 0)
        r = doctor_json(a);
    else if (strcmp(cmd, "token-create") == 0)
        r = token_create(a, j);
    else if (strcmp(cmd, "token-list") == 0)
        r = token_list(a);
    else if (strcmp(cmd, "token-revoke") == 0) {
        const char *id = json_string_value(json_object_get(j, "id"));
        int err = a->tokens == NULL ? GM_ERR_CONFIG
                  : id == NULL      ? -EINVAL
                                    : gm_token_store_revoke(a->tokens, id);
        if (err == 0) {
            gm_notice("event=token-revoked token=%s", id);
            r = json_pack("{s:b}", "ok", 1);
        } else {
            r = error_json(err, err == -ENOENT ? "no such token" : gm_strerror(err));
        }
    } else
        r = error_json(-EINVAL, "unknown command");
    json_decref(j);
    *resp = r != NULL ? json_dumps(r, JSON_COMPACT) : NULL;
    json_decref(r);
}

/* --- lifecycle -------------------------------------------------------------- */

static void tick_cb(uv_timer_t *t)
{
    struct gm_agent *a = t->data;
    uint64_t now = gm_time_mono_ns();
    size_t i;

    for (i = 0; i < a->npeers; i++) {
        struct peer *p = &a->peers[i];
        if (p->link == NULL && !p->dialing && should_dial(a, p) && now >= p->next_dial)
            dial(a, p);
    }
    endpoints_tick(a, now);
    if (now >= a->next_stats)
        stats_push(a);
    join_keys_refresh(a);
    if (now >= a->next_renew_check) {
        a->next_renew_check = now + (uint64_t)RENEW_CHECK_S * 1000000000ull;
        renew_check(a); /* may shorten the wait */
    }
}

static void handle_close_cb(uv_handle_t *h)
{
    struct gm_agent *a = h->data;

    a->handles_open--;
}

static void signal_cb(uv_signal_t *s, int signum)
{
    gm_notice("event=signal signal=%d action=stop", signum);
    gm_agent_stop(s->data);
}

static int load_identity(struct gm_agent *a)
{
    char path[GM_PATH_MAX];
    int err;

    err = gm_config_state_path(&a->cfg, "node.key", path, sizeof(path));
    if (err == 0)
        err = gm_id_key_load(path, &a->key);
    if (err == 0)
        err = gm_config_state_path(&a->cfg, "node.crt", path, sizeof(path));
    if (err == 0)
        err = gm_id_cert_load(path, &a->cert);
    if (err == 0)
        err = gm_config_state_path(&a->cfg, "ca.crt", path, sizeof(path));
    if (err == 0)
        err = gm_id_cert_load(path, &a->ca);
    if (err != 0) {
        gm_err("event=identity-load state=%s err=%d msg=\"%s\"", a->cfg.state_dir, err,
               gm_strerror(err));
        return GM_ERR_CONFIG;
    }
    if (!gm_id_cert_matches_key(a->cert, a->key)) {
        gm_err("event=identity-load reason=\"node.crt does not match node.key\"");
        return GM_ERR_CONFIG;
    }
    err = gm_config_state_path(&a->cfg, "ca.key", path, sizeof(path));
    if (err == 0) {
        err = gm_id_key_load(path, &a->cakey);
        if (err == -ENOENT)
            return 0; /* not the admitter */
        if (err != 0)
            return GM_ERR_CONFIG;
        err = gm_config_state_path(&a->cfg, "tokens", path, sizeof(path));
        if (err == 0)
            err = gm_token_store_open(path, &a->tokens);
        if (err != 0)
            return GM_ERR_CONFIG;
    }
    return err;
}

static int load_denylist(struct gm_agent *a)
{
    char path[GM_PATH_MAX], *text = NULL, *line, *save = NULL;
    int err = state_read(a, "denylist", path, &text);

    if (err != 0 || text == NULL)
        return err;
    for (line = strtok_r(text, " \t\n", &save); line != NULL && err == 0;
         line = strtok_r(NULL, " \t\n", &save))
        err = gm_tls_ctx_deny(a->tls, line);
    free(text);
    return err;
}

/* beacon.key: every member's copy of the cluster beacon key (JOIN_ACCEPT);
 * the admitter makes one when it has none (clusters made before beacons). */
static int load_beacon_key(struct gm_agent *a)
{
    char path[GM_PATH_MAX];
    int err = gm_config_state_path(&a->cfg, "beacon.key", path, sizeof(path));

    if (err == 0)
        err = gm_beacon_key_load(path, a->bkey);
    if (err == -ENOENT && a->cakey != NULL) {
        gm_beacon_key_generate(a->bkey);
        err = gm_beacon_key_save(path, a->bkey);
        if (err == 0)
            gm_notice("event=beacon-key-created file=%s", path);
    } else if (err == -ENOENT) {
        return 0;
    }
    if (err != 0) {
        gm_err("event=beacon-key-load file=%s err=%d msg=\"%s\"", path, err, gm_strerror(err));
        return GM_ERR_CONFIG;
    }
    a->have_bkey = 1;
    return 0;
}

int gm_agent_open(const char *config_path, struct gm_agent **out)
{
    struct gm_agent *a;
    struct gm_tls_config tc = {0};
    int err;

    *out = NULL;
    if (sodium_init() < 0)
        return -ENOMEM;
    a = calloc(1, sizeof(*a));
    if (a == NULL)
        return -ENOMEM;
    err = uv_loop_init(&a->loop);
    if (err != 0) {
        free(a);
        return err;
    }
    err = gm_config_load(config_path, &a->cfg);
    if (err == 0)
        err = load_identity(a);
    if (err == 0) {
        char cl[GM_ID_NAME_MAX + 1], node[GM_ID_NAME_MAX + 1];
        if (gm_id_cert_identity(a->cert, cl, node) != 0 || strcmp(cl, a->cfg.cluster) != 0 ||
            strcmp(node, a->cfg.node) != 0) {
            gm_err("event=identity-mismatch reason=\"node.crt does not name cluster %s node %s\"",
                   a->cfg.cluster, a->cfg.node);
            err = GM_ERR_CONFIG;
        }
    }
    if (err == 0) {
        tc.cluster = a->cfg.cluster;
        tc.ca = a->ca;
        tc.cert = a->cert;
        tc.key = a->key;
        tc.accept_joins = a->cakey != NULL;
        err = gm_tls_ctx_new(&tc, &a->tls);
    }
    if (err == 0)
        err = load_denylist(a);
    if (err == 0)
        err = members_load(a);
    if (err == 0)
        err = load_beacon_key(a);
    if (err == 0)
        err = endpoints_parse(a);
    if (err == 0) {
        char path[GM_PATH_MAX], *text = NULL;
        size_t len = 0;
        if (gm_config_state_path(&a->cfg, "admitter", path, sizeof(path)) == 0 &&
            gm_id_read_file(path, 256, &text, &len) == 0) {
            text[strcspn(text, " \n")] = '\0';
            if (gm_id_name_valid(text))
                snprintf(a->admitter, sizeof(a->admitter), "%s", text);
            free(text);
        }
        if (a->cakey != NULL)
            snprintf(a->admitter, sizeof(a->admitter), "%s", a->cfg.node);
    }
    if (err != 0) {
        gm_agent_free(a);
        return err;
    }
    *out = a;
    return 0;
}

int gm_agent_start(struct gm_agent *a)
{
    struct sockaddr_storage ss;
    int len = sizeof(ss), err;

    err = gm_proto_addr_parse(a->cfg.listen, &ss);
    if (err != 0)
        return GM_ERR_CONFIG;
    err = uv_tcp_init(&a->loop, &a->listener);
    if (err != 0)
        return err;
    a->listener.data = a;
    a->handles_open++;
    a->started = 1;
    err = uv_tcp_bind(&a->listener, (struct sockaddr *)&ss, 0);
    if (err == 0)
        err = uv_listen((uv_stream_t *)&a->listener, 128, connection_cb);
    if (err == 0)
        err = uv_tcp_getsockname(&a->listener, (struct sockaddr *)&ss, &len);
    if (err == 0)
        err = gm_proto_addr_format((struct sockaddr *)&ss, a->listen_addr);
    if (err != 0) {
        gm_err("event=listen-failed address=%s err=%d msg=\"%s\"", a->cfg.listen, err,
               uv_strerror(err));
        return err;
    }
    err = uv_timer_init(&a->loop, &a->timer);
    if (err != 0)
        return err;
    a->timer.data = a;
    a->handles_open++;
    err = uv_timer_start(&a->timer, tick_cb, 0, TICK_MS);
    if (err == 0)
        err = uv_signal_init(&a->loop, &a->sigint);
    if (err != 0)
        return err;
    a->sigint.data = a;
    a->handles_open++;
    err = uv_signal_init(&a->loop, &a->sigterm);
    if (err != 0)
        return err;
    a->sigterm.data = a;
    a->handles_open++;
    err = uv_signal_start(&a->sigint, signal_cb, SIGINT);
    if (err == 0)
        err = uv_signal_start(&a->sigterm, signal_cb, SIGTERM);
    if (err == 0)
        err = gm_control_start(&a->loop, a->cfg.control, control_cb, a, &a->control);
    if (err != 0)
        return err;
    discovery_start(a); /* without it the agent still works through members and peers */
    gm_notice("event=agent-started cluster=%s node=%s listen=%s members=%zu admitter=%d",
              a->cfg.cluster, a->cfg.node, a->listen_addr, a->npeers, a->cakey != NULL);
    return 0;
}

void gm_agent_stop(struct gm_agent *a)
{
    struct lctx *c;
    size_t i;

    if (a->stopping)
        return;
    a->stopping = 1;
    for (c = a->links; c != NULL; c = c->next) {
        if (gm_link_state(c->link) == LS_UP)
            ignore(gm_link_send(c->link, GM_MSG_BYE, 0, NULL, 0)); /* peers log a clean exit */
        gm_link_close(c->link, 0);
    }
    gm_control_close(a->control);
    a->control = NULL;
    gm_disc_stop(a->disc);
    a->disc = NULL;
    for (i = 0; i < a->neps; i++)
        if (a->eps[i].resolving)
            ignore(uv_cancel((uv_req_t *)&a->eps[i].gai));
    while (a->reaches != NULL)
        reach_finish(a->reaches, 0);
    if (a->started) {
        uv_close((uv_handle_t *)&a->listener, handle_close_cb);
        if (a->handles_open >= 2)
            uv_close((uv_handle_t *)&a->timer, handle_close_cb);
        if (a->handles_open >= 3)
            uv_close((uv_handle_t *)&a->sigint, handle_close_cb);
        if (a->handles_open >= 4)
            uv_close((uv_handle_t *)&a->sigterm, handle_close_cb);
    }
}

void gm_agent_free(struct gm_agent *a)
{
    size_t i;

    if (a == NULL)
        return;
    if (a->started) {
        gm_agent_stop(a);
        while (uv_run(&a->loop, UV_RUN_DEFAULT) != 0)
            ;
    }
    if (uv_loop_close(&a->loop) != 0)
        gm_warn("event=loop-close-busy");
    gm_tls_ctx_free(a->tls);
    gm_token_store_free(a->tokens);
    gm_id_key_free(a->key);
    gm_id_key_free(a->cakey);
    gm_id_cert_free(a->cert);
    gm_id_cert_free(a->ca);
    for (i = 0; i < a->npeers; i++)
        measure_reset(&a->peers[i].m);
    free(a->peers);
    free(a->eps);
    free(a->zeros);
    sodium_memzero(a->bkey, sizeof(a->bkey));
    free(a);
}

uv_loop_t *gm_agent_loop(struct gm_agent *a)
{
    return &a->loop;
}

const char *gm_agent_listen_addr(const struct gm_agent *a)
{
    return a->listen_addr;
}

void gm_agent_get_stats(const struct gm_agent *a, struct gm_agent_stats *s)
{
    *s = a->stats;
}

int gm_agent_links_up(const struct gm_agent *a)
{
    size_t i;
    int n = 0;

    for (i = 0; i < a->npeers; i++)
        n += a->peers[i].link != NULL;
    return n;
}
