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
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <jansson.h>
#include <sodium.h>

#include "agent/control.h"
#include "agent/link.h"
#include "agent/proto.h"
#include "common/log.h"
#include "common/time.h"
#include "crypto/join.h"
#include "crypto/tls.h"
#include "crypto/token.h"

#define TICK_MS 500
#define DIAL_BACKOFF_MAX_MS 5000
#define JOIN_FAILS_MAX 20 /* refused joins per window, all tokens together */
#define JOIN_FAIL_WINDOW_S 60
#define PING_MS 5000
#define TIMEOUT_MS 20000
#define MAX_HANDSHAKING 64 /* unauthenticated connections at once; more are dropped */
#define RENEW_CHECK_S 3600 /* how often the certificate's expiry is looked at */

enum lstate {
    LS_HANDSHAKE = 1u << 0,
    LS_JOIN = 1u << 1,  /* cert-less joiner: only JOIN_REQUEST */
    LS_HELLO = 1u << 2, /* member, waiting for its HELLO */
    LS_UP = 1u << 3,
    LS_DONE = 1u << 4, /* answered a join; closing */
};

struct peer {
    char node[GM_ID_NAME_MAX + 1];
    char address[GM_ADDR_MAX];
    struct gm_link *link; /* borrowed: the up link */
    int dialing;
    uint64_t next_dial;
    unsigned backoff_ms;
};

struct lctx {
    struct gm_agent *a;
    struct gm_link *link;
    struct lctx *next, **pprev;
    char node[GM_ID_NAME_MAX + 1]; /* peer, once known (dialed: expected) */
    int dialed;
    char reason[256];
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
        snprintf(p->node, sizeof(p->node), "%s", node);
        *changed = 1;
    }
    if (strcmp(p->address, address) != 0) {
        snprintf(p->address, sizeof(p->address), "%s", address);
        *changed = 1;
    }
    return p;
}

static int members_load(struct gm_agent *a)
{
    char path[GM_PATH_MAX], *text = NULL, *line, *save = NULL;
    size_t len = 0;
    int err, changed;

    err = gm_config_state_path(&a->cfg, "members", path, sizeof(path));
    if (err != 0)
        return err;
    err = gm_id_read_file(path, 1 << 20, &text, &len);
    if (err == -ENOENT)
        return 0;
    if (err != 0)
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

static void dial(struct gm_agent *a, struct peer *p)
{
    struct sockaddr_storage ss;
    struct gm_link_opts o = link_opts(GM_TLS_ROLE_CLIENT);
    struct lctx *c;
    int err;

    if (a->stopping || p->link != NULL || p->dialing)
        return;
    if (gm_proto_addr_parse(p->address, &ss) != 0)
        return;
    c = lctx_new(a);
    if (c == NULL)
        return;
    snprintf(c->node, sizeof(c->node), "%s", p->node);
    c->dialed = 1;
    err = gm_link_new(&a->loop, a->tls, &o, &link_ops, c, &c->link);
    if (err != 0) {
        lctx_free(c);
        return;
    }
    gm_link_set_state(c->link, LS_HANDSHAKE);
    p->dialing = 1;
    gm_debug("event=dial peer=%s address=%s", p->node, p->address);
    ignore(gm_link_connect(c->link, (struct sockaddr *)&ss)); /* errors: on_close */
}

static int send_json(struct gm_link *l, uint16_t type, char *json, size_t len, int err)
{
    if (err != 0)
        return err;
    err = gm_link_send(l, type, 0, json, len);
    free(json);
    return err;
}

static int send_hello(struct gm_agent *a, struct gm_link *l)
{
    char *json = NULL;
    size_t len = 0;
    int err = gm_proto_hello_encode(a->cfg.node, a->listen_addr, &json, &len);

    return send_json(l, GM_MSG_HELLO, json, len, err);
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
    if (c->dialed && strcmp(gm_tls_peer_node(t), c->node) != 0) {
        snprintf(c->reason, sizeof(c->reason), "dialed %s but the certificate names %s", c->node,
                 gm_tls_peer_node(t));
        return GM_ERR_AUTH;
    }
    snprintf(c->node, sizeof(c->node), "%s", gm_tls_peer_node(t));
    if (strcmp(c->node, a->cfg.node) == 0)
        return refuse(l, GM_ERR_AUTH, "peer uses this node's own name");
    gm_link_set_state(l, LS_HELLO);
    return send_hello(a, l);
}

/* --- handlers (the dispatch table) ----------------------------------------- */

static void renew_check(struct gm_agent *a);

typedef int (*handler_fn)(struct gm_agent *a, struct gm_link *l, const struct gm_frame_hdr *h,
                          const uint8_t *p);

static int h_hello(struct gm_agent *a, struct gm_link *l, const struct gm_frame_hdr *h,
                   const uint8_t *p)
{
    struct lctx *c = gm_link_data(l);
    char node[GM_ID_NAME_MAX + 1], listen[GM_ADDR_MAX];
    struct peer *peer;
    int changed = 0, err;

    if (gm_proto_hello_decode(p, h->len, node, listen) != 0)
        return refuse(l, GM_ERR_PROTO, "malformed hello");
    if (strcmp(node, c->node) != 0)
        return refuse(l, GM_ERR_AUTH, "hello names another node than the certificate");
    if (!c->dialed) {
        char filled[GM_ADDR_MAX];
        gm_proto_addr_fill_host(listen, gm_link_peer_addr(l), filled);
        memcpy(listen, filled, sizeof(filled));
    } else {
        struct peer *known = peer_find(a, node);
        if (known != NULL)
            snprintf(listen, sizeof(listen), "%s", known->address); /* keep what worked */
    }
    peer = peer_upsert(a, node, listen, &changed);
    if (peer == NULL)
        return refuse(l, -ENOMEM, "member table full");
    if (changed)
        ignore(members_save(a));
    if (peer->link != NULL && peer->link != l) {
        struct lctx *old = gm_link_data(peer->link);
        snprintf(old->reason, sizeof(old->reason), "replaced by a newer link");
        gm_link_close(peer->link, 0);
    }
    peer->link = l;
    peer->backoff_ms = 0;
    gm_link_set_state(l, LS_UP);
    a->stats.links_up++;
    if (strcmp(node, a->admitter) == 0 && a->cakey == NULL && gm_id_cert_needs_renewal(a->cert))
        renew_check(a); /* the admitter is reachable again: ask now, not at the next check */
    gm_notice("event=link-up peer=%s address=%s dialed=%d", node, gm_link_peer_addr(l), c->dialed);
    err = send_members(a, l);
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
    if (any)
        ignore(members_save(a));
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
    (void)a;
    gm_link_rtt_sample(l, p, h->len);
    return 0;
}

static int h_bulk(struct gm_agent *a, struct gm_link *l, const struct gm_frame_hdr *h,
                  const uint8_t *p)
{
    (void)a;
    (void)l;
    (void)h;
    (void)p;
    return 0; /* no consumer yet (the collectives come with the trainer) */
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
    if (err == 0) {
        size_t alen = clen + 1 + strlen(ac.cert_pem);
        actx = malloc(alen + 1);
        if (actx == NULL) {
            err = -ENOMEM;
        } else {
            snprintf(actx, alen + 1, "%s|%s", ctx, ac.cert_pem);
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

static void on_close(struct gm_link *l, int err)
{
    struct lctx *c = gm_link_data(l);
    struct gm_agent *a = c->a;
    struct peer *p = c->node[0] ? peer_find(a, c->node) : NULL;
    const char *reason = c->reason[0] ? c->reason : gm_tls_reason(gm_link_tls(l));

    if (p != NULL && p->link == l) {
        p->link = NULL;
        gm_notice("event=link-down peer=%s err=%d msg=\"%s\" reason=\"%s\"", p->node, err,
                  gm_strerror(err), reason);
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
    if (p != NULL && c->dialed) {
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

/* --- control socket --------------------------------------------------------- */

static json_t *status_json(struct gm_agent *a)
{
    json_t *o = json_object(), *members = json_array();
    size_t i, up = 0;

    for (i = 0; i < a->npeers; i++) {
        struct peer *p = &a->peers[i];
        json_t *m =
            json_pack("{s:s, s:s, s:s, s:s, s:f, s:n, s:n}", "node", p->node, "address", p->address,
                      "link", gm_proto_addr_class(p->address), "state", p->link ? "up" : "down",
                      "rtt_ms", p->link ? gm_link_rtt_ms(p->link) : 0.0, "throughput_mbps", "mtu");
        if (p->link != NULL)
            up++;
        json_array_append_new(members, m);
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
    size_t len = 0;
    int err;

    err = gm_config_state_path(&a->cfg, "denylist", path, sizeof(path));
    if (err != 0)
        return err;
    err = gm_id_read_file(path, 1 << 20, &text, &len);
    if (err == -ENOENT)
        return 0;
    if (err != 0)
        return err;
    for (line = strtok_r(text, " \t\n", &save); line != NULL && err == 0;
         line = strtok_r(NULL, " \t\n", &save))
        err = gm_tls_ctx_deny(a->tls, line);
    free(text);
    return err;
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
    gm_notice("event=agent-started cluster=%s node=%s listen=%s members=%zu admitter=%d",
              a->cfg.cluster, a->cfg.node, a->listen_addr, a->npeers, a->cakey != NULL);
    return 0;
}

void gm_agent_stop(struct gm_agent *a)
{
    struct lctx *c;

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
    free(a->peers);
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
