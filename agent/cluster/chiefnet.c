/*
 * agent/cluster/chiefnet.c - raft's transport over the member links (see chiefnet.h).
 *
 * Ownership: struct gm_chiefnet owns its channels (a list) and a zero-delay
 * timer that answers raft's connect requests outside raft's own call (raft
 * wants its callback later, never from inside connect).  A channel owns our
 * end of its socketpair (a uv_pipe_t, freed in its close callback); raft owns
 * its end (allocated here with raft_malloc, closed and freed by raft).
 */
#include "agent/cluster/chiefnet.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "agent/net/link.h"
#include "agent/net/proto.h"
#include "common/assert.h"
#include "common/log.h"
#include "crypto/identity.h"

enum { OP_DATA = 0, OP_CLOSE_BY_CONNECTOR = 1, OP_CLOSE_BY_ACCEPTOR = 2 };

struct chan {
    struct gm_chiefnet *n;
    struct chan *next, **pprev;
    char node[GM_ID_NAME_MAX + 1];
    uint64_t id;
    int outbound; /* we are the connector (raft's client side) */
    int closing;
    uv_pipe_t pipe;                      /* our end */
    uint8_t rbuf[1 + GM_CHIEFNET_CHUNK]; /* op byte, then what raft wrote */
};

struct pending {
    struct pending *next;
    struct raft_uv_connect *req;
    raft_uv_connect_cb cb;
    raft_id id;
    char node[GM_ID_NAME_MAX + 1];
};

struct wreq {
    uv_write_t req;
    size_t len;
    uint8_t data[];
};

struct gm_chiefnet {
    struct gm_chiefnet_env env;
    struct raft_uv_transport t;
    raft_uv_accept_cb accept_cb;
    raft_id self;
    struct chan *chans;
    struct pending *pending;
    uv_timer_t kick;
    int kick_open, closing, handles;
    raft_uv_transport_close_cb close_cb;
    uint64_t next_id;
};

raft_id gm_chiefnet_raft_id(const char *node)
{
    raft_id id = raft_digest(node, 0);

    return id != 0 ? id : 1;
}

size_t gm_chiefnet_channels(const struct gm_chiefnet *n)
{
    size_t k = 0;

    for (const struct chan *c = n->chans; c != NULL; c = c->next)
        k += !c->closing;
    return k;
}

/* --- channels --------------------------------------------------------------- */

static void maybe_closed(struct gm_chiefnet *n)
{
    if (n->closing && n->handles == 0 && n->close_cb != NULL) {
        raft_uv_transport_close_cb cb = n->close_cb;
        n->close_cb = NULL;
        cb(&n->t);
    }
}

static void chan_close_cb(uv_handle_t *h)
{
    struct chan *c = h->data;
    struct gm_chiefnet *n = c->n;

    free(c);
    n->handles--;
    maybe_closed(n);
}

static void send_op(struct gm_chiefnet *n, const char *node, uint64_t id, uint8_t op)
{
    struct gm_link *l = n->env.link_to(n->env.agent, node);

    if (l != NULL)
        if (gm_link_send(l, GM_MSG_RAFT, id, &op, 1) != 0)     /* the link is going: its close */
            gm_debug("event=raft-close-unsent peer=%s", node); /* closes the peer's end */
}

/* Closes c; tell: send the peer our CLOSE. */
static void chan_close(struct chan *c, int tell)
{
    if (c->closing)
        return;
    c->closing = 1;
    if (tell)
        send_op(c->n, c->node, c->id, c->outbound ? OP_CLOSE_BY_CONNECTOR : OP_CLOSE_BY_ACCEPTOR);
    *c->pprev = c->next;
    if (c->next != NULL)
        c->next->pprev = c->pprev;
    uv_close((uv_handle_t *)&c->pipe, chan_close_cb);
}

static void alloc_cb(uv_handle_t *h, size_t hint, uv_buf_t *buf)
{
    struct chan *c = h->data;

    (void)hint;
    buf->base = (char *)c->rbuf + 1;
    buf->len = GM_CHIEFNET_CHUNK;
}

/* What raft wrote into its end: to the peer, one DATA frame. */
static void read_cb(uv_stream_t *s, ssize_t nread, const uv_buf_t *buf)
{
    struct chan *c = s->data;
    struct gm_link *l;
    int err;

    (void)buf;
    if (nread == 0)
        return;
    if (nread < 0) { /* raft closed its end */
        chan_close(c, 1);
        return;
    }
    if (!c->outbound) {
        chan_close(c, 1); /* a raft server never writes: not our protocol */
        return;
    }
    l = c->n->env.link_to(c->n->env.agent, c->node);
    c->rbuf[0] = OP_DATA;
    err = l != NULL ? gm_link_send(l, GM_MSG_RAFT, c->id, c->rbuf, 1 + (size_t)nread) : -EPIPE;
    if (err != 0) {
        gm_debug("event=raft-channel-lost peer=%s err=%d", c->node, err);
        chan_close(c, 0);
    }
}

static void raft_end_close_cb(uv_handle_t *h)
{
    raft_free(h); /* raft's end, never handed over */
}

/* A new channel; *raft_end: raft's end, a uv_pipe_t made with raft_malloc. */
static int chan_new(struct gm_chiefnet *n, const char *node, uint64_t id, int outbound,
                    struct chan **out, uv_stream_t **raft_end)
{
    struct chan *c = calloc(1, sizeof(*c));
    uv_pipe_t *rp = raft_malloc(sizeof(*rp));
    int sv[2] = {-1, -1}, err;

    *out = NULL;
    *raft_end = NULL;
    if (c == NULL || rp == NULL) {
        free(c);
        raft_free(rp);
        return -ENOMEM;
    }
    if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0, sv) != 0) {
        err = -errno;
        free(c);
        raft_free(rp);
        return err;
    }
    c->n = n;
    c->id = id;
    c->outbound = outbound;
    snprintf(c->node, sizeof(c->node), "%s", node);
    err = uv_pipe_init(n->env.loop, &c->pipe, 0);
    if (err == 0) {
        c->pipe.data = c;
        n->handles++;
        err = uv_pipe_open(&c->pipe, sv[0]);
        if (err == 0)
            sv[0] = -1;
        if (err == 0)
            err = uv_read_start((uv_stream_t *)&c->pipe, alloc_cb, read_cb);
        c->next = n->chans;
        c->pprev = &n->chans;
        if (n->chans != NULL)
            n->chans->pprev = &c->next;
        n->chans = c;
        if (err != 0)
            chan_close(c, 0);
    } else {
        free(c);
        c = NULL;
    }
    if (err == 0)
        err = uv_pipe_init(n->env.loop, rp, 0);
    if (err == 0) {
        err = uv_pipe_open(rp, sv[1]);
        if (err != 0)
            uv_close((uv_handle_t *)rp, raft_end_close_cb);
        else
            sv[1] = -1;
    } else {
        raft_free(rp);
    }
    if (sv[0] >= 0)
        close(sv[0]);
    if (sv[1] >= 0)
        close(sv[1]);
    if (err != 0) {
        if (c != NULL && !c->closing && n->chans == c)
            chan_close(c, 0);
        return err;
    }
    *out = c;
    *raft_end = (uv_stream_t *)rp;
    return 0;
}

static struct chan *chan_find(struct gm_chiefnet *n, const char *node, uint64_t id, int outbound)
{
    for (struct chan *c = n->chans; c != NULL; c = c->next)
        if (c->id == id && c->outbound == outbound && strcmp(c->node, node) == 0)
            return c;
    return NULL;
}

static void write_cb(uv_write_t *req, int status)
{
    (void)status; /* a failed write: raft's end is gone, read_cb closes the channel */
    free(req->data);
}

/* Bytes from the peer into raft's end of c. */
static int chan_write(struct chan *c, const uint8_t *p, size_t len)
{
    struct wreq *w;
    uv_buf_t b;
    int err;

    if (len == 0)
        return 0;
    if (c->pipe.write_queue_size > GM_CHIEFNET_QUEUE_MAX)
        return -ENOBUFS; /* raft does not read: drop the channel, it reconnects */
    w = malloc(sizeof(*w) + len);
    if (w == NULL)
        return -ENOMEM;
    memcpy(w->data, p, len);
    w->len = len;
    w->req.data = w;
    b = uv_buf_init((char *)w->data, (unsigned)len);
    err = uv_write(&w->req, (uv_stream_t *)&c->pipe, &b, 1, write_cb);
    if (err != 0)
        free(w);
    return err;
}

int gm_chiefnet_on_frame(struct gm_chiefnet *n, const char *node, const struct gm_frame_hdr *h,
                         const uint8_t *p)
{
    struct chan *c;
    uv_stream_t *raft_end;
    char why[160];
    int err;

    if (h->len < 1 || h->len > 1 + GM_CHIEFNET_CHUNK || (h->len > 1 && p[0] != OP_DATA) ||
        p[0] > OP_CLOSE_BY_ACCEPTOR)
        return GM_ERR_PROTO;
    if (n->closing)
        return 0;
    if (p[0] == OP_CLOSE_BY_ACCEPTOR) { /* about a channel we opened */
        c = chan_find(n, node, h->req, 1);
        if (c != NULL)
            chan_close(c, 0);
        return 0;
    }
    c = chan_find(n, node, h->req, 0);
    if (p[0] == OP_CLOSE_BY_CONNECTOR) {
        if (c != NULL)
            chan_close(c, 0);
        return 0;
    }
    if (c == NULL) { /* a new channel from node */
        err = n->env.allowed(n->env.agent, node, why, sizeof(why));
        if (err != 0) {
            gm_warn("event=raft-refused peer=%s reason=\"%s\"", node, why);
            send_op(n, node, h->req, OP_CLOSE_BY_ACCEPTOR);
            return 0;
        }
        if (n->accept_cb == NULL) { /* raft not listening (yet) */
            send_op(n, node, h->req, OP_CLOSE_BY_ACCEPTOR);
            return 0;
        }
        err = chan_new(n, node, h->req, 0, &c, &raft_end);
        if (err != 0) {
            gm_warn("event=raft-channel-failed peer=%s err=%d msg=\"%s\"", node, err,
                    gm_strerror(err));
            send_op(n, node, h->req, OP_CLOSE_BY_ACCEPTOR);
            return 0;
        }
        n->accept_cb(&n->t, gm_chiefnet_raft_id(node), node, raft_end);
    }
    err = chan_write(c, p + 1, h->len - 1);
    if (err != 0)
        chan_close(c, 1);
    return 0;
}

void gm_chiefnet_link_down(struct gm_chiefnet *n, const char *node)
{
    struct chan *c, *next;

    if (n == NULL)
        return;
    for (c = n->chans; c != NULL; c = next) {
        next = c->next;
        if (strcmp(c->node, node) == 0)
            chan_close(c, 0);
    }
}

void gm_chiefnet_recheck(struct gm_chiefnet *n)
{
    struct chan *c, *next;
    char why[160];

    if (n == NULL)
        return;
    for (c = n->chans; c != NULL; c = next) {
        next = c->next;
        if (!c->outbound && n->env.allowed(n->env.agent, c->node, why, sizeof(why)) != 0) {
            gm_warn("event=raft-refused peer=%s reason=\"%s\"", c->node, why);
            chan_close(c, 1);
        }
    }
}

/* --- raft_uv_transport -------------------------------------------------------- */

static int t_init(struct raft_uv_transport *t, raft_id id, const char *address)
{
    struct gm_chiefnet *n = t->impl;

    (void)address;
    n->self = id;
    return 0;
}

static int t_listen(struct raft_uv_transport *t, raft_uv_accept_cb cb)
{
    struct gm_chiefnet *n = t->impl;

    n->accept_cb = cb;
    return 0;
}

/* Answers the connect requests raft made since the last turn of the loop. */
static void kick_cb(uv_timer_t *timer)
{
    struct gm_chiefnet *n = timer->data;
    struct pending *q = n->pending, *next;

    n->pending = NULL;
    for (; q != NULL; q = next) {
        struct chan *c = NULL;
        uv_stream_t *raft_end = NULL;
        int status = RAFT_NOCONNECTION;

        next = q->next;
        if (n->env.link_to(n->env.agent, q->node) != NULL &&
            chan_new(n, q->node, ++n->next_id, 1, &c, &raft_end) == 0)
            status = 0;
        q->cb(q->req, raft_end, status);
        free(q);
    }
}

static int t_connect(struct raft_uv_transport *t, struct raft_uv_connect *req, raft_id id,
                     const char *address, raft_uv_connect_cb cb)
{
    struct gm_chiefnet *n = t->impl;
    struct pending *q;

    if (n->closing)
        return RAFT_CANCELED;
    if (!gm_id_name_valid(address) || gm_chiefnet_raft_id(address) != id) {
        snprintf(t->errmsg, sizeof(t->errmsg), "server %llu's address is not its node id",
                 (unsigned long long)id);
        return RAFT_NOCONNECTION;
    }
    q = calloc(1, sizeof(*q));
    if (q == NULL)
        return RAFT_NOMEM;
    q->req = req;
    q->cb = cb;
    q->id = id;
    snprintf(q->node, sizeof(q->node), "%s", address);
    q->next = n->pending;
    n->pending = q;
    return uv_timer_start(&n->kick, kick_cb, 0, 0) == 0 ? 0 : RAFT_NOCONNECTION;
}

static void kick_close_cb(uv_handle_t *h)
{
    struct gm_chiefnet *n = h->data;

    n->handles--;
    maybe_closed(n);
}

static void t_close(struct raft_uv_transport *t, raft_uv_transport_close_cb cb)
{
    struct gm_chiefnet *n = t->impl;
    struct pending *q, *next;

    n->closing = 1;
    n->close_cb = cb;
    n->accept_cb = NULL;
    for (q = n->pending; q != NULL; q = next) {
        next = q->next;
        q->cb(q->req, NULL, RAFT_CANCELED);
        free(q);
    }
    n->pending = NULL;
    while (n->chans != NULL)
        chan_close(n->chans, 1);
    if (n->kick_open) {
        n->kick_open = 0;
        uv_close((uv_handle_t *)&n->kick, kick_close_cb);
    }
    maybe_closed(n);
}

int gm_chiefnet_new(const struct gm_chiefnet_env *env, struct gm_chiefnet **out)
{
    struct gm_chiefnet *n = calloc(1, sizeof(*n));
    int err;

    *out = NULL;
    if (n == NULL)
        return -ENOMEM;
    n->env = *env;
    err = uv_timer_init(env->loop, &n->kick);
    if (err != 0) {
        free(n);
        return err;
    }
    n->kick.data = n;
    n->kick_open = 1;
    n->handles = 1;
    n->t.impl = n;
    n->t.init = t_init;
    n->t.listen = t_listen;
    n->t.connect = t_connect;
    n->t.close = t_close;
    *out = n;
    return 0;
}

struct raft_uv_transport *gm_chiefnet_transport(struct gm_chiefnet *n)
{
    return &n->t;
}

void gm_chiefnet_free(struct gm_chiefnet *n)
{
    if (n == NULL)
        return;
    GM_ASSERT(n->handles == 0 || !n->kick_open);
    free(n);
}
