/*
 * agent/jobs/xport.c - the training channel over member links (see xport.h).
 *
 * Per peer: the link (borrowed), the armed recv, a FIFO of whole messages
 * that arrived with no recv armed (owned copies), the message being
 * reassembled, and the sequence numbers of both directions.  post() and the
 * delivery of queued messages to a newly armed recv go through one idle
 * handle: they run on a later loop iteration, never inside the call that
 * asked for them.
 */
#include "agent/jobs/xport.h"

#include <errno.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "agent/net/link.h"
#include "agent/net/proto.h"
#include "common/assert.h"
#include "common/log.h"
#include "common/time.h"

struct qmsg {
    struct qmsg *next;
    size_t len, cap;
    uint8_t data[];
};

/* Freed large queue blocks are kept for reuse, up to as many bytes as a
 * peer's queue may hold before its link pauses: the queue's peak is what the
 * next burst needs again, and a large block freed to the heap comes back as
 * fresh pages (a page fault for every 4 KiB of it).  Small blocks go back to
 * malloc, which recycles them cheaply; the count bound keeps qalloc's scan
 * short. */
#define POOL_MIN_BLOCK (64u << 10)
#define POOL_MAX_BYTES GM_XPORT_QUEUE_MAX
#define POOL_MAX_BLOCKS 96u

struct sendreq {
    struct gm_xport *x;
    int peer;
    gm_transport_send_cb cb;
    void *arg;
};

struct posted {
    struct posted *next;
    gm_transport_post_cb cb;
    void *arg;
};

struct xpeer {
    struct gm_link *link; /* borrowed; NULL: none or down */
    int down_err;         /* < 0 once the link is down */
    gm_transport_recv_cb rcb;
    void *rarg;
    bool armed, deliver_pending, paused;
    bool backlog_logged; /* event=xport-backlog said once for this peer */
    struct qmsg *qhead, **qtail; /* owned */
    size_t qbytes, qpeak;
    uint8_t *part; /* owned: reassembly buffer */
    size_t part_len, part_cap;
    bool in_part;
    uint64_t rx_first_ns; /* its first frame since gm_xport_rx_mark (0: none yet) */
    uint32_t send_seq, recv_seq;
    struct gm_xport_stats st;
};

struct gm_xport {
    struct gm_transport t;
    uv_loop_t *loop;
    uv_idle_t idle; /* idle.data = this */
    uint32_t gen;
    int world;
    size_t qmax;     /* a peer's queued bytes before its link pauses (gm_xport_set_queue_max) */
    struct xpeer *p; /* owned, world */
    struct posted *posts, **posts_tail;
    unsigned sends_out; /* handed to links, done not yet called */
    struct qmsg *pool;  /* owned: freed queue blocks */
    size_t pool_bytes;
    unsigned pool_blocks;
    bool closing, idle_closed;
    uint64_t rx_first_ns; /* the first frame since gm_xport_rx_mark (0: none yet) */
};

static void idle_cb(uv_idle_t *h);

static void wake(struct gm_xport *x)
{
    if (!x->closing && !uv_is_active((uv_handle_t *)&x->idle))
        (void)uv_idle_start(&x->idle, idle_cb);
}

static void maybe_free(struct gm_xport *x);
static void qrelease(struct gm_xport *x, struct qmsg *m);

static void qfree(struct xpeer *p)
{
    struct qmsg *m;

    while ((m = p->qhead) != NULL) {
        p->qhead = m->next;
        free(m);
    }
    p->qtail = &p->qhead;
    p->qbytes = 0;
}

static void resume_if_drained(struct gm_xport *x, struct xpeer *p)
{
    if (p->paused && p->qbytes <= x->qmax / 2) {
        p->paused = false;
        gm_info("event=xport-read-resumed rank=%d peer_rank=%d queued_bytes=%zu limit=%zu",
                x->t.rank, (int)(p - x->p), p->qbytes, x->qmax);
        if (p->link != NULL)
            gm_link_pause_read(p->link, 0);
    }
}

/* Delivers queued messages to armed recvs, and armed recvs of down peers
 * their error; runs from the idle handle. */
static void deliver_queued(struct gm_xport *x)
{
    for (int i = 0; i < x->world && !x->closing; i++) {
        struct xpeer *p = &x->p[i];
        if (!p->deliver_pending)
            continue;
        p->deliver_pending = false;
        if (!p->armed)
            continue;
        if (p->qhead != NULL) {
            /* the whole queue while the owner re-arms from its callback: one
             * message an iteration let a backlog persist, and every message
             * that arrives behind a backlog is queued (copied) too */
            while (p->armed && p->qhead != NULL && !x->closing) {
                struct qmsg *m = p->qhead;
                gm_transport_recv_cb cb = p->rcb;
                p->qhead = m->next;
                if (p->qhead == NULL)
                    p->qtail = &p->qhead;
                p->qbytes -= m->len;
                p->armed = false;
                resume_if_drained(x, p);
                cb(&x->t, i, 0, m->data, m->len, p->rarg);
                qrelease(x, m);
            }
            p->deliver_pending = p->armed && (p->qhead != NULL || p->down_err < 0);
        } else if (p->down_err < 0) {
            p->armed = false;
            p->rcb(&x->t, i, p->down_err, NULL, 0, p->rarg);
        }
    }
}

static void idle_cb(uv_idle_t *h)
{
    struct gm_xport *x = h->data;
    struct posted *q;
    bool more = false;

    /* posts queued by the callbacks below wait for the next iteration */
    q = x->posts;
    x->posts = NULL;
    x->posts_tail = &x->posts;
    deliver_queued(x);
    while (q != NULL) {
        struct posted *next = q->next;
        if (!x->closing)
            q->cb(&x->t, q->arg);
        free(q);
        q = next;
    }
    for (int i = 0; i < x->world; i++)
        more |= x->p[i].deliver_pending;
    if (x->posts == NULL && !more)
        (void)uv_idle_stop(h);
}

static void send_done(void *arg, int err)
{
    struct sendreq *r = arg;
    struct gm_xport *x = r->x;

    x->sends_out--;
    if (!x->closing && r->cb != NULL)
        r->cb(&x->t, r->peer, err, r->arg);
    free(r);
    if (x->closing)
        maybe_free(x);
}

static int x_send(struct gm_transport *t, int peer, const void *head, size_t head_len,
                  const void *body, size_t body_len, gm_transport_send_cb cb, void *arg)
{
    size_t len = head_len + body_len;
    struct gm_xport *x = t->impl;
    struct xpeer *p;
    struct sendreq *r;
    int err;

    if (peer < 0 || peer >= x->world || peer == t->rank || len == 0 || len > GM_XPORT_MSG_MAX)
        return -EINVAL;
    p = &x->p[peer];
    if (p->down_err < 0)
        return p->down_err;
    if (p->link == NULL)
        return -ENOTCONN;
    r = malloc(sizeof(*r));
    if (r == NULL)
        return -ENOMEM;
    *r = (struct sendreq){.x = x, .peer = peer, .cb = cb, .arg = arg};
    if (head_len > GM_LINK_HEAD_MAX) /* a one-piece message: all of it is "body" */
        err = head_len == len
                  ? gm_link_send_bulk(p->link, GM_MSG_TRAIN, gm_xport_req(x->gen, p->send_seq),
                                      head, len, send_done, r)
                  : -EINVAL;
    else
        err = gm_link_send_bulk2(p->link, GM_MSG_TRAIN, gm_xport_req(x->gen, p->send_seq), head,
                                 head_len, body, body_len, send_done, r);
    if (err < 0) {
        free(r);
        return err;
    }
    p->send_seq++;
    x->sends_out++;
    p->st.bytes_sent += len;
    p->st.msgs_sent++;
    return 0;
}

static int x_recv(struct gm_transport *t, int peer, gm_transport_recv_cb cb, void *arg)
{
    struct gm_xport *x = t->impl;
    struct xpeer *p;

    if (peer < 0 || peer >= x->world || peer == t->rank || cb == NULL)
        return -EINVAL;
    p = &x->p[peer];
    if (p->armed)
        return -EBUSY;
    if (p->down_err < 0 && p->qhead == NULL)
        return p->down_err;
    if (p->link == NULL && p->down_err == 0)
        return -ENOTCONN;
    p->armed = true;
    p->rcb = cb;
    p->rarg = arg;
    if (p->qhead != NULL) {
        p->deliver_pending = true;
        wake(x);
    }
    return 0;
}

static void x_recv_stop(struct gm_transport *t, int peer)
{
    struct gm_xport *x = t->impl;

    if (peer >= 0 && peer < x->world)
        x->p[peer].armed = false;
}

static int x_post(struct gm_transport *t, gm_transport_post_cb cb, void *arg)
{
    struct gm_xport *x = t->impl;
    struct posted *q;

    if (x->closing)
        return GM_ERR_ABORTED;
    q = malloc(sizeof(*q));
    if (q == NULL)
        return -ENOMEM;
    q->next = NULL;
    q->cb = cb;
    q->arg = arg;
    *x->posts_tail = q;
    x->posts_tail = &q->next;
    wake(x);
    return 0;
}

static const struct gm_transport_ops xport_ops = {
    .send = x_send,
    .recv = x_recv,
    .recv_stop = x_recv_stop,
    .post = x_post,
};

int gm_xport_new(uv_loop_t *loop, uint32_t generation, int rank, int world, struct gm_xport **out)
{
    struct gm_xport *x;

    *out = NULL;
    if (world < 1 || rank < 0 || rank >= world)
        return -EINVAL;
    x = calloc(1, sizeof(*x));
    if (x == NULL)
        return -ENOMEM;
    x->p = calloc((size_t)world, sizeof(*x->p));
    if (x->p == NULL) {
        free(x);
        return -ENOMEM;
    }
    for (int i = 0; i < world; i++)
        x->p[i].qtail = &x->p[i].qhead;
    x->loop = loop;
    x->gen = generation;
    x->world = world;
    x->qmax = GM_XPORT_QUEUE_MAX;
    x->posts_tail = &x->posts;
    x->t = (struct gm_transport){.ops = &xport_ops, .rank = rank, .world = world, .impl = x};
    if (uv_idle_init(loop, &x->idle) != 0) {
        free(x->p);
        free(x);
        return -ENOMEM;
    }
    x->idle.data = x;
    *out = x;
    return 0;
}

void gm_xport_set_queue_max(struct gm_xport *x, size_t bytes)
{
    if (bytes < GM_XPORT_QUEUE_MAX)
        bytes = GM_XPORT_QUEUE_MAX;
    x->qmax = bytes;
    for (int i = 0; i < x->world; i++) /* a raised limit may cover a paused peer's queue */
        resume_if_drained(x, &x->p[i]);
}

size_t gm_xport_queue_max(const struct gm_xport *x)
{
    return x->qmax;
}

size_t gm_xport_queue_max_for(size_t op_bytes)
{
    /* every GM_XPORT_CHUNK of payload travels with a collective header (< 64 bytes) */
    size_t wire = op_bytes + (op_bytes / (GM_XPORT_CHUNK - 64) + 1) * 64;

    if (wire > (SIZE_MAX - GM_XPORT_QUEUE_MAX) / 2)
        return SIZE_MAX;
    return 2 * wire + GM_XPORT_QUEUE_MAX;
}

struct gm_transport *gm_xport_transport(struct gm_xport *x)
{
    return &x->t;
}

uint32_t gm_xport_generation(const struct gm_xport *x)
{
    return x->gen;
}

void gm_xport_set_link(struct gm_xport *x, int peer, struct gm_link *l)
{
    GM_ASSERT(peer >= 0 && peer < x->world);
    x->p[peer].link = l;
}

struct gm_link *gm_xport_link(const struct gm_xport *x, int peer)
{
    return peer >= 0 && peer < x->world ? x->p[peer].link : NULL;
}

static struct qmsg *qalloc(struct gm_xport *x, size_t len)
{
    struct qmsg **pp, *m;

    for (pp = &x->pool; len >= POOL_MIN_BLOCK && (m = *pp) != NULL; pp = &m->next)
        if (m->cap >= len) {
            *pp = m->next;
            x->pool_bytes -= m->cap;
            x->pool_blocks--;
            return m;
        }
    m = malloc(sizeof(*m) + len);
    if (m != NULL)
        m->cap = len;
    return m;
}

static void qrelease(struct gm_xport *x, struct qmsg *m)
{
    if (m->cap >= POOL_MIN_BLOCK && x->pool_bytes + m->cap <= POOL_MAX_BYTES &&
        x->pool_blocks < POOL_MAX_BLOCKS && !x->closing) {
        m->next = x->pool;
        x->pool = m;
        x->pool_bytes += m->cap;
        x->pool_blocks++;
    } else {
        free(m);
    }
}

static int enqueue(struct gm_xport *x, struct xpeer *p, const uint8_t *data, size_t len)
{
    struct qmsg *m = qalloc(x, len);

    if (m == NULL)
        return -ENOMEM;
    m->next = NULL;
    m->len = len;
    memcpy(m->data, data, len);
    *p->qtail = m;
    p->qtail = &m->next;
    p->qbytes += len;
    if (p->qbytes > p->qpeak)
        p->qpeak = p->qbytes;
    if (!p->backlog_logged && p->qbytes > GM_XPORT_QUEUE_MAX) {
        /* a peer ahead of our collective: legitimate up to the limit, but worth a line */
        p->backlog_logged = true;
        gm_info("event=xport-backlog rank=%d peer_rank=%d queued_bytes=%zu limit=%zu", x->t.rank,
                (int)(p - x->p), p->qbytes, x->qmax);
    }
    if (!p->paused && p->qbytes > x->qmax && p->link != NULL) {
        /* more than a correct peer ever runs ahead (xport.h): TCP back-pressure, which also
         * holds back the link's control frames; the peer's kernel gives up on the
         * connection after GM_LINK_USER_TIMEOUT_MS of it */
        p->paused = true;
        gm_warn("event=xport-read-paused rank=%d peer_rank=%d queued_bytes=%zu limit=%zu",
                x->t.rank, (int)(p - x->p), p->qbytes, x->qmax);
        gm_link_pause_read(p->link, 1);
    }
    return 0;
}

/* A whole message from peer: to the armed recv (lent during the callback), or queued. */
static int complete(struct gm_xport *x, int peer, const uint8_t *data, size_t len)
{
    struct xpeer *p = &x->p[peer];

    p->st.bytes_recv += len;
    p->st.msgs_recv++;
    if (p->armed && p->qhead == NULL) {
        p->armed = false;
        p->rcb(&x->t, peer, 0, data, len, p->rarg);
        return 0;
    }
    return enqueue(x, p, data, len);
}

int gm_xport_on_frame(struct gm_xport *x, int peer, const struct gm_frame_hdr *h,
                      const uint8_t *payload)
{
    struct xpeer *p;
    bool more = (h->flags & GM_FRAME_F_MORE) != 0;
    uint32_t seq = (uint32_t)h->req;
    int err;

    if (peer < 0 || peer >= x->world || peer == x->t.rank || x->closing)
        return GM_ERR_PROTO;
    p = &x->p[peer];
    if (x->rx_first_ns == 0 || p->rx_first_ns == 0) {
        uint64_t now = gm_time_mono_ns();
        if (x->rx_first_ns == 0)
            x->rx_first_ns = now;
        if (p->rx_first_ns == 0)
            p->rx_first_ns = now;
    }
    if (gm_xport_req_generation(h->req) != x->gen || seq != p->recv_seq)
        return GM_ERR_PROTO; /* out of order, or a second message inside the first */
    if (h->len == 0)
        return GM_ERR_PROTO;    /* bulk chunks are never empty */
    if (!p->in_part && !more) { /* the common case: one frame, no copy */
        p->recv_seq++;
        return complete(x, peer, payload, h->len);
    }
    if (p->part_len + h->len > GM_XPORT_MSG_MAX)
        return GM_ERR_PROTO;
    if (p->part_len + h->len > p->part_cap) {
        size_t cap = p->part_cap ? p->part_cap : (size_t)h->len * 2;
        uint8_t *nb;
        while (cap < p->part_len + h->len)
            cap *= 2;
        nb = realloc(p->part, cap);
        if (nb == NULL)
            return -ENOMEM;
        p->part = nb;
        p->part_cap = cap;
    }
    memcpy(p->part + p->part_len, payload, h->len);
    p->part_len += h->len;
    p->in_part = true;
    if (more)
        return 0;
    p->in_part = false;
    p->recv_seq++;
    err = complete(x, peer, p->part, p->part_len);
    p->part_len = 0;
    return err;
}

void gm_xport_rx_mark(struct gm_xport *x)
{
    const uint64_t now = gm_time_mono_ns();

    x->rx_first_ns = 0;
    for (int i = 0; i < x->world; i++) {
        /* a peer's data here already: it came before the op started */
        x->p[i].rx_first_ns = x->p[i].qhead != NULL || x->p[i].in_part ? now : 0;
        if (x->p[i].rx_first_ns != 0)
            x->rx_first_ns = now;
    }
}

uint64_t gm_xport_rx_last_first(const struct gm_xport *x)
{
    uint64_t last = 0;

    for (int i = 0; i < x->world; i++)
        if (x->p[i].rx_first_ns > last)
            last = x->p[i].rx_first_ns;
    return last;
}

uint64_t gm_xport_rx_first(const struct gm_xport *x)
{
    return x->rx_first_ns;
}

void gm_xport_link_down(struct gm_xport *x, int peer, int err)
{
    struct xpeer *p;

    if (peer < 0 || peer >= x->world)
        return;
    p = &x->p[peer];
    if (p->paused && p->link != NULL)
        gm_link_pause_read(p->link, 0);
    p->paused = false;
    p->link = NULL;
    if (p->down_err == 0)
        p->down_err = err < 0 ? err : GM_ERR_ABORTED;
    p->in_part = false;
    p->part_len = 0;
    if (p->armed) {
        p->deliver_pending = true;
        wake(x);
    }
}

void gm_xport_fail_all(struct gm_xport *x, int err)
{
    for (int i = 0; i < x->world; i++)
        if (i != x->t.rank)
            gm_xport_link_down(x, i, err);
}

void gm_xport_stats(const struct gm_xport *x, int peer, struct gm_xport_stats *s)
{
    memset(s, 0, sizeof(*s));
    if (peer >= 0 && peer < x->world) {
        *s = x->p[peer].st;
        s->queued_bytes = x->p[peer].qbytes;
        s->queued_peak = x->p[peer].qpeak;
        s->read_paused = x->p[peer].paused;
    }
}

static void idle_closed_cb(uv_handle_t *h)
{
    struct gm_xport *x = h->data;

    x->idle_closed = true;
    maybe_free(x);
}

static void maybe_free(struct gm_xport *x)
{
    struct posted *q;
    struct qmsg *q2;

    if (!x->idle_closed || x->sends_out > 0)
        return;
    while ((q = x->posts) != NULL) {
        x->posts = q->next;
        free(q);
    }
    for (int i = 0; i < x->world; i++) {
        qfree(&x->p[i]);
        free(x->p[i].part);
    }
    while ((q2 = x->pool) != NULL) {
        x->pool = q2->next;
        free(q2);
    }
    free(x->p);
    free(x);
}

void gm_xport_close(struct gm_xport *x)
{
    if (x == NULL || x->closing)
        return;
    x->closing = true;
    for (int i = 0; i < x->world; i++) {
        struct xpeer *p = &x->p[i];
        if (p->paused && p->link != NULL)
            gm_link_pause_read(p->link, 0);
        p->paused = false;
        p->armed = false;
        p->link = NULL;
    }
    uv_close((uv_handle_t *)&x->idle, idle_closed_cb);
}
