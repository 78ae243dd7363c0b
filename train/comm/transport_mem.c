/*
 * train/comm/transport_mem.c - in-memory gm_transport (see transport_mem.h).
 *
 * Layout: links[src * world + dst] is the FIFO src->dst plus the recv slot that
 * dst armed for src.  Completion events (send done, posted callbacks) wait in
 * one FIFO and run before anything else, one per poll, so the sender's callback
 * never runs inside its send() call.
 */
#include "train/comm/transport_mem.h"

#include <errno.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include "common/assert.h"

struct mem_msg {
    struct mem_msg *next;
    size_t len;
    unsigned char data[];
};

struct mem_link { /* src -> dst */
    struct mem_msg *head, *tail;
    uint64_t queued;
    bool down;
    bool armed; /* dst armed a recv for src */
    gm_transport_recv_cb recv_cb;
    void *recv_arg;
};

enum ev_kind { EV_SEND_DONE, EV_POST };

struct mem_event {
    struct mem_event *next;
    enum ev_kind kind;
    int src, peer, status;
    gm_transport_send_cb send_cb;
    gm_transport_post_cb post_cb;
    void *arg;
};

struct gm_memnet {
    int world;
    struct gm_transport *ep; /* owned, world entries */
    struct mem_link *links;  /* owned, world * world */
    struct mem_event *ev_head, *ev_tail;
    size_t rr; /* round-robin cursor into links */
    gm_memnet_hook hook;
    void *hook_arg;
    uint64_t delivered_msgs, delivered_bytes;
};

static struct mem_link *link_of(struct gm_memnet *n, int src, int dst)
{
    return &n->links[(size_t)src * (size_t)n->world + (size_t)dst];
}

static void push_event(struct gm_memnet *n, struct mem_event *e)
{
    e->next = NULL;
    if (n->ev_tail != NULL)
        n->ev_tail->next = e;
    else
        n->ev_head = e;
    n->ev_tail = e;
}

static void drop_queue(struct mem_link *l)
{
    struct mem_msg *m = l->head;

    while (m != NULL) {
        struct mem_msg *next = m->next;
        free(m);
        m = next;
    }
    l->head = l->tail = NULL;
    l->queued = 0;
}

static int mem_send(struct gm_transport *t, int peer, const void *buf, size_t head_len,
                    const void *body, size_t body_len, gm_transport_send_cb cb, void *arg)
{
    size_t len = head_len + body_len;
    struct gm_memnet *n = t->impl;
    struct mem_link *l;
    struct mem_msg *m;
    struct mem_event *e;

    if (peer < 0 || peer >= n->world || peer == t->rank || (buf == NULL && head_len > 0) ||
        (body == NULL && body_len > 0) || cb == NULL)
        return -EINVAL;
    l = link_of(n, t->rank, peer);
    if (l->down)
        return -ECONNRESET;
    m = malloc(sizeof(*m) + len);
    e = calloc(1, sizeof(*e));
    if (m == NULL || e == NULL) {
        free(m);
        free(e);
        return -ENOMEM;
    }
    m->next = NULL;
    m->len = len;
    if (head_len > 0)
        memcpy(m->data, buf, head_len);
    if (body_len > 0)
        memcpy(m->data + head_len, body, body_len);
    if (l->tail != NULL)
        l->tail->next = m;
    else
        l->head = m;
    l->tail = m;
    l->queued++;
    e->kind = EV_SEND_DONE;
    e->src = t->rank;
    e->peer = peer;
    e->status = 0;
    e->send_cb = cb;
    e->arg = arg;
    push_event(n, e);
    return 0;
}

static int mem_recv(struct gm_transport *t, int peer, gm_transport_recv_cb cb, void *arg)
{
    struct gm_memnet *n = t->impl;
    struct mem_link *l;

    if (peer < 0 || peer >= n->world || peer == t->rank || cb == NULL)
        return -EINVAL;
    l = link_of(n, peer, t->rank);
    if (l->armed)
        return -EBUSY;
    if (l->down)
        return -ECONNRESET;
    l->armed = true;
    l->recv_cb = cb;
    l->recv_arg = arg;
    return 0;
}

static void mem_recv_stop(struct gm_transport *t, int peer)
{
    struct gm_memnet *n = t->impl;

    if (peer < 0 || peer >= n->world || peer == t->rank)
        return;
    link_of(n, peer, t->rank)->armed = false;
}

static int mem_post(struct gm_transport *t, gm_transport_post_cb cb, void *arg)
{
    struct gm_memnet *n = t->impl;
    struct mem_event *e;

    if (cb == NULL)
        return -EINVAL;
    e = calloc(1, sizeof(*e));
    if (e == NULL)
        return -ENOMEM;
    e->kind = EV_POST;
    e->src = t->rank;
    e->post_cb = cb;
    e->arg = arg;
    push_event(n, e);
    return 0;
}

static const struct gm_transport_ops mem_ops = {
    .send = mem_send,
    .recv = mem_recv,
    .recv_stop = mem_recv_stop,
    .post = mem_post,
};

struct gm_memnet *gm_memnet_new(int world)
{
    struct gm_memnet *n;

    if (world < 1 || world > 4096)
        return NULL;
    n = calloc(1, sizeof(*n));
    if (n == NULL)
        return NULL;
    n->world = world;
    n->ep = calloc((size_t)world, sizeof(*n->ep));
    n->links = calloc((size_t)world * (size_t)world, sizeof(*n->links));
    if (n->ep == NULL || n->links == NULL) {
        gm_memnet_free(n);
        return NULL;
    }
    for (int r = 0; r < world; r++) {
        n->ep[r].ops = &mem_ops;
        n->ep[r].rank = r;
        n->ep[r].world = world;
        n->ep[r].impl = n;
    }
    return n;
}

void gm_memnet_free(struct gm_memnet *n)
{
    if (n == NULL)
        return;
    if (n->links != NULL)
        for (size_t i = 0; i < (size_t)n->world * (size_t)n->world; i++)
            drop_queue(&n->links[i]);
    while (n->ev_head != NULL) {
        struct mem_event *e = n->ev_head;
        n->ev_head = e->next;
        free(e);
    }
    free(n->links);
    free(n->ep);
    free(n);
}

struct gm_transport *gm_memnet_transport(struct gm_memnet *n, int rank)
{
    GM_ASSERT(n != NULL && rank >= 0 && rank < n->world);
    return &n->ep[rank];
}

void gm_memnet_fail_link(struct gm_memnet *n, int a, int b)
{
    struct mem_link *ab, *ba;

    if (a == b || a < 0 || b < 0 || a >= n->world || b >= n->world)
        return;
    ab = link_of(n, a, b);
    ba = link_of(n, b, a);
    ab->down = ba->down = true;
    drop_queue(ab);
    drop_queue(ba);
}

void gm_memnet_set_hook(struct gm_memnet *n, gm_memnet_hook hook, void *arg)
{
    n->hook = hook;
    n->hook_arg = arg;
}

static int run_event(struct gm_memnet *n)
{
    struct mem_event *e = n->ev_head;

    n->ev_head = e->next;
    if (n->ev_head == NULL)
        n->ev_tail = NULL;
    if (e->kind == EV_SEND_DONE)
        e->send_cb(&n->ep[e->src], e->peer, e->status, e->arg);
    else
        e->post_cb(&n->ep[e->src], e->arg);
    free(e);
    return 1;
}

static int fail_armed(struct gm_memnet *n)
{
    size_t total = (size_t)n->world * (size_t)n->world;

    for (size_t i = 0; i < total; i++) {
        struct mem_link *l = &n->links[i];
        if (l->down && l->armed) {
            int src = (int)(i / (size_t)n->world), dst = (int)(i % (size_t)n->world);
            l->armed = false;
            l->recv_cb(&n->ep[dst], src, -ECONNRESET, NULL, 0, l->recv_arg);
            return 1;
        }
    }
    return 0;
}

static int deliver_one(struct gm_memnet *n)
{
    size_t total = (size_t)n->world * (size_t)n->world;

    for (size_t k = 0; k < total; k++) {
        size_t i = (n->rr + k) % total;
        struct mem_link *l = &n->links[i];
        int src = (int)(i / (size_t)n->world), dst = (int)(i % (size_t)n->world);
        struct mem_msg *m;

        if (l->head == NULL || !l->armed)
            continue;
        n->rr = (i + 1) % total;
        m = l->head;
        l->head = m->next;
        if (l->head == NULL)
            l->tail = NULL;
        l->queued--;
        if (n->hook != NULL &&
            n->hook(n->hook_arg, src, dst, m->data, &m->len) == GM_MEMNET_FAIL_LINK) {
            free(m);
            gm_memnet_fail_link(n, src, dst);
            return 1;
        }
        l->armed = false;
        n->delivered_msgs++;
        n->delivered_bytes += m->len;
        l->recv_cb(&n->ep[dst], src, 0, m->data, m->len, l->recv_arg);
        free(m);
        return 1;
    }
    return 0;
}

int gm_memnet_poll(struct gm_memnet *n)
{
    if (n->ev_head != NULL)
        return run_event(n);
    if (fail_armed(n))
        return 1;
    return deliver_one(n);
}

uint64_t gm_memnet_run(struct gm_memnet *n)
{
    uint64_t count = 0;

    while (gm_memnet_poll(n))
        count++;
    return count;
}

uint64_t gm_memnet_delivered_msgs(const struct gm_memnet *n)
{
    return n->delivered_msgs;
}

uint64_t gm_memnet_delivered_bytes(const struct gm_memnet *n)
{
    return n->delivered_bytes;
}

uint64_t gm_memnet_queued_msgs(const struct gm_memnet *n)
{
    uint64_t q = 0;

    for (size_t i = 0; i < (size_t)n->world * (size_t)n->world; i++)
        q += n->links[i].queued;
    return q;
}
